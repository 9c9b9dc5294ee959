#!/usr/bin/env python3
"""Briefing cases with the text Python renders for them.

The Rust briefing renderer (crates/hitl-domain/src/briefing.rs, crates/hitl-domain/src/python/format/) must produce
exactly what AI-Parrot's ConfirmationGuard shows:

    params = json.loads(params_json)
    params_str = ", ".join(f"{k}={v!r}" for k, v in params.items())
    template.format(tool=tool, params=params_str, **params)

falling back to f"{tool} with: {params_str}" (or f"{tool} (no parameters)") on any
error. `expected` is computed here by Python itself, with the rules our service adds
on top of Parrot's:
  - any exception falls back (Parrot lets TypeError/AttributeError escape);
  - attribute access (`{x.real}`) falls back: the renderer never evaluates attributes;
  - a template over MAX_TEMPLATE_BYTES, or a result over MAX_BRIEFING_CHARS
    characters, falls back;
  - a result holding a lone surrogate (only `{n:c}` can make one) falls back, as a
    Rust string cannot hold it.

Usage:
    gen_briefing_cases.py                       # writes tests/fixtures/briefing_cases.json
    gen_briefing_cases.py --random N --seed S   # prints N random cases, one JSON a line

Standard library only.
"""

import argparse
import json
import math
import random
import resource
import struct
import sys
from pathlib import Path

import _string

MAX_BRIEFING_CHARS = 8192
MAX_TEMPLATE_BYTES = 8 * 1024

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "briefing_cases.json"


def params_text(params):
    return ", ".join(f"{k}={v!r}" for k, v in params.items())


def fallback(tool, params):
    if params:
        return f"{tool} with: {params_text(params)}"
    return f"{tool} (no parameters)"


def uses_attribute(template, depth=2):
    """Whether any field, nested spec fields included, reads an attribute."""
    for _literal, field, spec, _conversion in _string.formatter_parser(template):
        if field is None:
            continue
        _first, rest = _string.formatter_field_name_split(field)
        if any(is_attr for is_attr, _ in rest):
            return True
        if spec and "{" in spec and depth > 1 and uses_attribute(spec, depth - 1):
            return True
    return False


def expected(tool, params_json, template):
    params = json.loads(params_json)
    text = fallback(tool, params)
    if template is None or len(template.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        return text
    try:
        if uses_attribute(template):
            return text
        out = template.format(tool=tool, params=params_text(params), **params)
    except Exception:  # noqa: BLE001 - every error falls back, as the service does
        return text
    if len(out) > MAX_BRIEFING_CHARS or any(0xD800 <= ord(c) <= 0xDFFF for c in out):
        return text
    return out


def to_json(value, ensure_ascii=False):
    """`json.dumps`, but writing infinities as `1e400`: the service's parser refuses the
    non-standard `Infinity`/`NaN` literals that `json.dumps` would emit (so NaN cannot
    be sent at all)."""
    if isinstance(value, float) and math.isinf(value):
        return "1e400" if value > 0 else "-1e400"
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("NaN has no JSON form the service accepts")
    if isinstance(value, list):
        return "[" + ", ".join(to_json(item, ensure_ascii) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(
            json.dumps(key, ensure_ascii=ensure_ascii) + ": " + to_json(item, ensure_ascii)
            for key, item in value.items()
        ) + "}"
    return json.dumps(value, ensure_ascii=ensure_ascii)


def make_case(name, template, params, tool="run_tool"):
    params_json = params if isinstance(params, str) else to_json(params)
    return {
        "name": name,
        "tool": tool,
        "params_json": params_json,
        "template": template,
        "expected": expected(tool, params_json, template),
    }


# ---------------------------------------------------------------------------------------
# Committed cases
# ---------------------------------------------------------------------------------------

UNICODE_STRINGS = {
    "plain": "hello",
    "single-quote": "it's",
    "double-quote": 'say "hi"',
    "both-quotes": "it's \"both\"",
    "backslash": "C:\\temp\\new",
    "newline-tab-cr": "a\nb\tc\rd",
    "nul-del": "x\x00y\x7fz",
    "c1-control": "a\x85b\x9fc",
    "latin1": "café",
    "nbsp": "a\u00a0b",
    "soft-hyphen": "a\u00adb",
    "cjk": "中文字",
    "emoji": "deploy 🚀 now",
    "emoji-zwj": "👩\u200d💻",
    "zero-width-space": "a\u200bb",
    "lrm": "a\u200eb",
    "bom": "\ufeffbom",
    "line-separator": "a\u2028b",
    "ideographic-space": "a\u3000b",
    "private-use": "a\ue000b",
    "combining": "e\u0301",
    "arabic-letter-mark": "a\u061cb",
    "rtl-text": "שלום",
    "supplementary-private": "\U000f0000",
    "math-bold": "\U0001d400",
    "tag-char": "a\U000e0041b",
    "empty": "",
}


def committed_cases():
    cases = []

    def add(name, template, params, tool="run_tool"):
        cases.append(make_case(name, template, params, tool))

    # No template, and the plain fields.
    add("no-template-with-params", None, {"path": "/etc/passwd", "force": True})
    add("no-template-no-params", None, {}, tool="list_files")
    add("no-params-template", "Run {tool}?", {}, tool="reboot")
    add("empty-template", "", {"a": 1})
    add("literal-only", "Approve this call", {"a": 1})
    add("tool-and-params", "{tool}: {params}", {"path": "/tmp/x", "recursive": True, "depth": 3})
    add("params-every-type", "{params}", {"n": None, "b": False, "i": -7, "f": 0.5, "s": "x", "l": [1, "a", None], "d": {"k": [True]}})
    add("params-floats-repr", "{params}", '{"a": 1e16, "b": 1e-05, "c": 0.1, "d": 1.0, "e": 1e22, "f": 123456789.125}')
    add("named-field", "Delete {path}?", {"path": "/var/log/app.log"})
    add("field-repeated", "{a}{a}{a}", {"a": "ab"})
    add("escaped-braces", "{{literal}} {x} }}{{", {"x": 1})
    add("escaped-brace-then-field", "{{{x}}}", {"x": "v"})
    add("duplicate-json-key-keeps-first-position", "{params} / {a}", '{"a": 1, "b": 2, "a": 3}')
    add("unicode-field-name", "{名前} {ключ}", {"名前": "値", "ключ": "значение"})
    add("field-name-with-space", "{a b}", {"a b": 1})
    add("field-name-with-bracket-close", "{a]b}", {"a]b": 2})
    add("field-name-with-dash", "{-1}", {"-1": "neg"})
    add("tool-with-unicode", "{tool} ✔ {params}", {"x": "ü"}, tool="envoyer_courriel")

    # Conversions on strings: quote choice and escapes.
    for key, value in UNICODE_STRINGS.items():
        add(f"repr-{key}", "{s!r}", {"s": value})
    for key in ["latin1", "cjk", "emoji", "both-quotes", "zero-width-space", "math-bold", "nul-del"]:
        add(f"ascii-{key}", "{s!a}", {"s": UNICODE_STRINGS[key]})
    for key in ["emoji", "newline-tab-cr", "single-quote"]:
        add(f"str-{key}", "{s!s}|{s}", {"s": UNICODE_STRINGS[key]})
    add("repr-values", "{n!r} {b!r} {i!r} {f!r} {l!r} {d!r}", {"n": None, "b": True, "i": 10**20, "f": 1e16, "l": [1, "it's", [None]], "d": {"k": "v", "é": 1.5}})
    add("ascii-containers", "{l!a} {d!a}", {"l": ["é", "中", "😀"], "d": {"ключ": "значение"}})
    add("str-containers", "{l!s} {d}", {"l": ["a", 1.0], "d": {"x": None}})
    add("repr-then-spec", "[{s!r:>12}] [{s!a:.4}]", {"s": "café"})
    add("repr-nested-quotes", "{l!r}", {"l": ["'", '"', "'\"", "\\"]})
    add("conversion-unknown", "{x!z}", {"x": 1})
    add("conversion-missing", "{x!}", {"x": 1})
    add("conversion-two-letters", "{x!rr}", {"x": 1})
    add("conversion-then-empty-spec", "{x!r:}", {"x": "a"})

    # str format specs.
    for spec in [">10", "<10", "^10", "^11", "*^9", ".3", "10.3", "→>8", "s", "010", "<010", "^.0", "_<6", "0>5", "=<4", ">0"]:
        add(f"str-spec-{spec}", "[{s:" + spec + "}]", {"s": "abcde"})
    for spec in ["=10", "+", " ", "#", "d", ",", "z", "_", "x", ".2f"]:
        add(f"str-spec-invalid-{spec}", "[{s:" + spec + "}]", {"s": "abc"})
    add("str-spec-emoji-width", "[{s:^7}]", {"s": "🚀a"})
    add("str-spec-combining-width", "[{s:>4}]", {"s": "e\u0301"})

    # int format specs.
    for spec in ["d", "5", "<5", "^7", "05", "+", " ", "-", "+05", "=+8", "x", "#x", "X", "#X", "o", "#o", "b", "#b",
                 ",", "_", "_x", "_b", "#_b", "010,", "0=12,", "*=12,", "<010,", "^010,", "0>10,", "x<012,", "n", "e",
                 ".2f", "%", "g", ".3G", "08_b", "#010x", "012_X"]:
        add(f"int-spec-{spec}", "[{n:" + spec + "}]", {"n": 1234567})
    for spec in ["#x", "#010b", "+,", "=10,", "08", " d", "%", "c"]:
        add(f"negative-int-spec-{spec}", "[{n:" + spec + "}]", {"n": -255})
    for spec in [",x", "_n", ",c", ".2", "z", "s", "#c", "+c", ",_", "_,", "y", "?"]:
        add(f"int-spec-invalid-{spec}", "[{n:" + spec + "}]", {"n": 65})
    add("int-c-ascii", "[{n:c}]", {"n": 65})
    add("int-c-padded", "[{n:05c}] [{n:=^5c}]", {"n": 65})
    add("int-c-emoji", "[{n:c}]", {"n": 0x1F600})
    add("int-c-control", "[{n:c}]", {"n": 7})
    add("int-c-out-of-range", "[{n:c}]", {"n": 0x110000})
    add("int-c-negative", "[{n:c}]", {"n": -1})
    add("int-c-surrogate", "[{n:c}]", {"n": 0xD800})
    add("int-zero-alternate", "[{n:#x}] [{n:#o}] [{n:#b}]", {"n": 0})

    # Arbitrary precision ints.
    add("bigint-str", "{n} {n!r}", '{"n": 123456789012345678901234567890}')
    add("bigint-grouped", "{n:,}", '{"n": -123456789012345678901234567890}')
    add("bigint-hex", "{n:#_x}", '{"n": 340282366920938463463374607431768211457}')
    add("bigint-to-float", "{n:.3e} {n:g}", '{"n": 123456789012345678901234567890}')
    add("bigint-float-rounds-half-even", "{n:.17e}", '{"n": 9007199254740993}')
    add("bigint-float-max", "{n:e}", {"n": 2**1024 - 2**971})
    add("bigint-float-overflow", "{n:e}", {"n": 2**1024 - 2**970})
    add("bigint-float-overflow-huge", "{n:f}", {"n": 10**400})
    add("bigint-4300-digits", "{n}", {"n": 10**4299})
    add("bigint-4300-digits-negative", "{n:d}", {"n": -(10**4299)})

    # bool is an int, except with an empty spec.
    for spec in ["", ">5", "d", "x", "#b", ".2f", "c", "%", "^7", "n", "s", "e"]:
        add(f"bool-spec-{spec or 'empty'}", "[{b:" + spec + "}] [{f:" + spec + "}]", {"b": True, "f": False})
    add("bool-repr-and-str", "{b!r} {b!s} {b}", {"b": True})

    # float format specs.
    float_specs = ["", "f", ".2f", "10.3f", "<10.1f", "e", ".3E", "g", "G", ".3g", "%", ".1%", "n", ",", ",.2f", "_.3f",
                   "012,.2f", "0=+12.2f", "+.1e", " .2f", "#.0f", "#.0e", "#g", "#", ".0f", ".2", ".0", ".17", "z",
                   "z.1f", "^+15.3e", "*<12g", "F", ".1F", "E"]
    for spec in float_specs:
        add(f"float-spec-{spec or 'empty'}", "[{f:" + spec + "}]", {"f": 1234.5678})
    for spec in ["", ".2f", "e", "g", "%", ",", "z.2f"]:
        add(f"negative-float-spec-{spec or 'empty'}", "[{f:" + spec + "}]", {"f": -0.000123456})
    for spec in ["x", "d", "c", "s", "b", ",n", "_g"]:
        add(f"float-spec-invalid-{spec}", "[{f:" + spec + "}]", {"f": 1.5})
    ties = {"half-0": (0.5, ".0f"), "half-1": (1.5, ".0f"), "half-2": (2.5, ".0f"), "quarter": (0.25, ".1f"),
            "not-a-tie": (0.35, ".1f"), "1.005": (1.005, ".2f"), "e-tie": (0.125, ".1e"), "g-tie": (2.5, ".1g")}
    for key, (value, spec) in ties.items():
        add(f"float-rounding-{key}", "{f:" + spec + "}", {"f": value})
    thresholds = {"g-1e-4": (0.0001, "g"), "g-1e-5": (0.00001, "g"), "g-123456": (123456.0, "g"),
                  "g-1234567": (1234567.0, "g"), "g-p3-999.5": (999.5, ".3g"), "g-p1-9.5": (9.5, ".1g"),
                  "g-p0": (123.0, ".0g"), "g-alt-p3": (1.0, "#.3g"), "repr-1e15": (1e15, ""), "repr-1e16": (1e16, ""),
                  "repr-below-1e16": (9999999999999998.0, ""), "repr-1e-4": (0.0001, ""), "repr-1e-5": (0.00001, ""),
                  "none-p3-100": (100.0, ".3"), "none-p3-1000": (1000.0, ".3"), "none-p17-1e16": (1e16, ".17"),
                  "none-p1-0.5": (0.5, ".1"), "alt-repr-1e16": (1e16, "#"), "alt-none-p2": (1.0, "#.2"),
                  "n-big": (1234567.0, "n"), "n-small": (1.5, "n"), "g-1e16": (1e16, "g"), "g-p16-1e16": (1e16, ".16g"),
                  "g-p17-1e16": (1e16, ".17g")}
    for key, (value, spec) in thresholds.items():
        add(f"float-threshold-{key}", "{f:" + spec + "}", {"f": value})
    zeros = {"repr": (-0.0, ""), "z-empty": (-0.0, "z"), "z-f": (-0.0, "z.1f"), "rounds-to-zero": (-0.001, ".1f"),
             "z-rounds-to-zero": (-0.001, "z.1f"), "z-e-tiny": (-1e-20, "z.3e"), "z-g": (-0.0001, "z.0g"),
             "z-percent": (-0.0, "z%"), "plus": (-0.0, "+"), "zero-pad": (-0.0, "08.2f"), "z-zero-pad": (-0.0, "z08.2f")}
    for key, (value, spec) in zeros.items():
        add(f"negative-zero-{key}", "[{f:" + spec + "}]", {"f": value})
    specials = {"inf": '{"f": 1e400}', "neg-inf": '{"f": -1e400}', "overflowing-literal": '{"f": 1.8e308}'}
    for key, params_json in specials.items():
        add(f"float-special-{key}", "[{f}] [{f!r}] [{f:f}] [{f:F}] [{f:010}] [{f:+}] [{f:%}] [{f:z}] [{f:,.2f}]", params_json)
    add("float-subnormal", "{f} {f:e} {f:.20e} {f:g}", '{"f": 5e-324}')
    add("float-max", "{f} {f:e} {f:,.0f}", '{"f": 1.7976931348623157e308}')
    add("float-huge-fixed", "{f:f}", '{"f": 1e300}')
    add("float-exact-digits", "{f:.60f} {f:.30e}", '{"f": 0.1}')
    add("float-exponent-three-digits", "{f:e} {f:.2E}", '{"f": 1.5e-300}')
    add("float-percent-of-int", "{n:.1%}", {"n": 3})
    add("float-grouping-zero-fill", "[{f:015,.3f}] [{f:0=15_.3f}]", {"f": -12345.678})
    add("float-unicode-fill", "[{f:→^15.2f}]", {"f": 3.14159})

    # Widths and precisions in other scripts' digits, as Python reads them.
    add("arabic-indic-width", "[{n:>٥}]", {"n": 1})
    add("arabic-indic-precision", "[{f:.٣f}]", {"f": 1.0})
    add("fullwidth-width", "[{s:>１０}]", {"s": "x"})

    # Nested replacement fields in the spec.
    add("nested-width", "[{x:{w}}]", {"x": "ab", "w": 6})
    add("nested-align-width", "[{x:>{w}}]", {"x": 42, "w": 8})
    add("nested-fill-width-precision", "[{x:{fill}^{w}.{p}f}]", {"x": 3.14159, "fill": "*", "w": 12, "p": 2})
    add("nested-whole-spec", "[{x:{spec}}]", {"x": 1234.5, "spec": ",.2f"})
    add("nested-with-conversion", "[{x!r:>{w}}]", {"x": "a", "w": 5})
    add("nested-twice-fails", "[{x:{y:{z}}}]", {"x": 1, "y": 2, "z": ""})
    add("nested-missing-key", "[{x:{w}}]", {"x": 1})
    add("nested-escaped-braces", "[{x:{{}}}]", {"x": 1})
    add("nested-fill-is-brace", "[{x:{f}>5}]", {"x": 1, "f": "}"})
    add("nested-spec-from-int-field", "[{x:{w:d}}]", {"x": "ab", "w": 4})
    add("nested-empty-spec-field", "[{x:{e}}]", {"x": 5, "e": ""})
    add("nested-positional", "[{x:{}}]", {"x": 1})

    # Indexing into JSON values.
    add("index-list", "{l[0]} {l[2]!r}", {"l": [10, 20, "thirty"]})
    add("index-list-out-of-range", "{l[5]}", {"l": [1]})
    add("index-list-negative-is-a-str-key", "{l[-1]}", {"l": [1, 2]})
    add("index-list-with-str", "{l[x]}", {"l": [1]})
    add("index-dict", "{d[host]}:{d[port]}", {"d": {"host": "example.com", "port": 443}})
    add("index-dict-missing", "{d[nope]}", {"d": {"a": 1}})
    add("index-dict-digit-key-is-int", "{d[1]}", {"d": {"1": "one"}})
    add("index-dict-key-with-space", "{d[a b]}", {"d": {"a b": "spaced"}})
    add("index-dict-key-with-brace", "{d[}]}", {"d": {"}": "brace"}})
    add("index-dict-key-with-colon-bang", "{d[:]}{d[!]}", {"d": {":": "colon", "!": "bang"}})
    add("index-dict-key-with-open-brace", "{d[{]}", {"d": {"{": "open"}})
    add("index-str", "{s[0]}{s[4]}", {"s": "hello"})
    add("index-str-unicode", "{s[1]!r}", {"s": "a😀b"})
    add("index-str-out-of-range", "{s[9]}", {"s": "abc"})
    add("index-str-with-str", "{s[x]}", {"s": "abc"})
    add("index-chained", "{d[a][0][b]}", {"d": {"a": [{"b": "deep"}]}})
    add("index-into-char", "{s[0][0][0]}", {"s": "xyz"})
    add("index-int", "{n[0]}", {"n": 5})
    add("index-none", "{n[0]}", {"n": None})
    add("index-empty", "{l[]}", {"l": [1]})
    add("index-leading-zeros", "{l[00]}", {"l": [7]})
    add("index-arabic-indic-digit", "{l[١]}", {"l": [1, 2]})
    add("index-then-junk", "{l[0]x}", {"l": [1]})
    add("index-unclosed", "{l[0}", {"l": [1]})
    add("index-huge", "{l[99999999999999999999]}", {"l": [1]})
    add("index-with-spec", "[{l[1]:>6.2f}]", {"l": [0, 2.5]})

    # Positional fields and attributes are never allowed.
    add("positional-auto", "{}", {"a": 1})
    add("positional-index", "{0}", {"a": 1})
    add("positional-unicode-digit", "{١}", {"١": 1})
    add("positional-index-with-item", "{[0]}", {"a": 1})
    add("attribute-real", "{x.real}", {"x": 5})
    add("attribute-dunder", "{x.__class__}", {"x": "s"})
    add("attribute-after-index", "{l[0].imag}", {"l": [1]})
    add("attribute-in-nested-spec", "{x:{w.real}}", {"x": 1, "w": 5})

    # Every other fallback cause.
    add("missing-key", "Delete {path}?", {"file": "/tmp/x"})
    add("missing-key-no-params", "Delete {path}?", {})
    add("single-open-brace", "a { b", {"x": 1})
    add("single-close-brace", "a } b", {"x": 1})
    add("trailing-open-brace", "abc{", {"x": 1})
    add("unterminated-field", "{x", {"x": 1})
    add("unterminated-spec", "{x:>5", {"x": 1})
    add("open-brace-in-name", "{x{y}}", {"x": 1})
    add("doubled-open-then-single-close", "{{x}", {"x": 1})
    add("param-named-tool", "{tool}", {"tool": "shadow"})
    add("param-named-params", "hello", {"params": [1]})
    add("none-with-spec", "{n:>5}", {"n": None})
    add("list-with-spec", "{l:s}", {"l": [1]})
    add("dict-with-spec", "{d:^9}", {"d": {}})
    add("none-empty-spec", "[{n:}] [{l:}] [{d:}]", {"n": None, "l": [], "d": {}})
    add("too-many-spec-chars", "{x:>5dd}", {"x": 1})
    add("missing-precision", "{x:.f}", {"x": 1.0})
    add("width-too-many-digits", "{x:99999999999999999999}", {"x": 1})

    # Bounds.
    add("hostile-width", "{x:>999999999}", {"x": 1})
    add("hostile-precision-fixed", "{x:.999999999f}", {"x": 1.5})
    add("hostile-precision-exp", "{x:.999999999e}", {"x": 1.5})
    add("hostile-precision-alt-g", "{x:#.99999g}", {"x": 1.5})
    add("huge-precision-g-is-short", "{x:.999999g}", {"x": 0.1})
    add("huge-precision-none-is-short", "{x:.999999}", {"x": 1e300})
    add("huge-precision-str-truncates", "{x:.999999999}", {"x": "short"})
    add("width-just-past-bound", "{x:8193}", {"x": 1})
    add("width-at-bound", "{x:8192}", {"x": 1})
    add("output-past-bound-from-literals", "{x:8190}abc", {"x": 1})
    add("output-past-bound-from-value", "{l!r}", {"l": ["abcdefghij"] * 700})
    add("template-at-bound", "a" * MAX_TEMPLATE_BYTES, {"x": 1})
    add("template-past-bound", "a" * (MAX_TEMPLATE_BYTES + 1), {"x": 1})
    add("template-past-bound-in-bytes", "é" * (MAX_TEMPLATE_BYTES // 2 + 1), {"x": 1})
    add("fallback-itself-is-unbounded", "{missing}", {"blob": "z" * 9000})
    return cases


# ---------------------------------------------------------------------------------------
# Random cases
# ---------------------------------------------------------------------------------------

CHAR_POOL = list("abcXYZ019 _-.,:!{}[]'\"\\") + [
    "\n", "\t", "\r", "\x00", "\x1b", "\x7f", "\x85", "\xa0", "\xad", "é", "ß", "ñ", "中", "文", "ك", "١",
    "😀", "🚀", "\u200b", "\u200e", "\u2028", "\u3000", "\ufeff", "\ue000", "\u0301", "\U0001d400", "\U000e0041",
]
FLOATS = [0.0, -0.0, 0.1, 0.5, 1.0, 1.5, 2.5, -2.5, 0.125, 0.35, 1e16, 1e-5, 1e-4, 9.5, 99.5, 999.5, 123456.789,
          1234567.0, 1e15, 9999999999999998.0, 1e22, 1e300, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308,
          float("inf"), float("-inf"), -1234.5678, 0.001, -0.001, 100.0, 1000.0]
INTS = [0, 1, -1, 7, 10, 65, 255, -255, 1000, 1234567, -1234567, 2**31, 2**53 + 1, 2**63, -(2**64), 10**20,
        0x1F600, 0x10FFFF, 0x110000, 0xD800, 2**1024 - 2**971, 2**1024]
TYPES = list("bcdeEfFgGnosxX%") + ["", "", "", "", "y", "r"]
FILLS = [" ", "*", "0", "_", "→", "{", "}", "=", "<", "x", "😀"]


def random_string(rng, max_len=8):
    return "".join(rng.choice(CHAR_POOL) for _ in range(rng.randint(0, max_len)))


def random_float(rng):
    roll = rng.random()
    if roll < 0.5:
        return rng.choice(FLOATS)
    if roll < 0.8:
        return rng.choice([-1, 1]) * rng.random() * 10 ** rng.randint(-25, 25)
    value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    return 0.0 if math.isnan(value) else value


def random_scalar(rng):
    kind = rng.random()
    if kind < 0.3:
        return rng.choice(INTS) if rng.random() < 0.5 else rng.randint(-10**6, 10**6)
    if kind < 0.35:
        return rng.randint(-10**40, 10**40)
    if kind < 0.6:
        return random_float(rng)
    if kind < 0.85:
        return random_string(rng)
    if kind < 0.93:
        return rng.choice([True, False])
    return None


def random_value(rng, depth=0):
    roll = rng.random()
    if depth < 2 and roll < 0.1:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 2 and roll < 0.18:
        return {random_key(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return random_scalar(rng)


def random_key(rng):
    return rng.choice(["a", "b", "x", "n", "f", "s", "w", "0", "1", "k", "é", "a b", "tool", "params"][: 12 if rng.random() < 0.95 else 14])


def random_spec(rng, params, value):
    """A spec from the grammar; usually one the value's type accepts, sometimes not."""
    careful = rng.random() < 0.7
    if isinstance(value, bool) or isinstance(value, int):
        types = list("bcdoxXn") + ["", "e", "f", "g", "%", "E", "F", "G"]
    elif isinstance(value, float):
        types = ["", "e", "E", "f", "F", "g", "G", "n", "%"]
    elif isinstance(value, str):
        types = ["", "s"]
    else:
        types = [""]
    ty = rng.choice(types) if careful else rng.choice(TYPES)
    numeric = isinstance(value, (int, float)) and ty != "s"
    floaty = isinstance(value, float) or ty in ("e", "E", "f", "F", "g", "G", "%")
    if careful and not isinstance(value, (int, float, str)):
        return ""
    parts = []
    if rng.random() < 0.35:
        if rng.random() < 0.6:
            parts.append(rng.choice(FILLS))
        parts.append(rng.choice("<>=^" if numeric or not careful else "<>^"))
    if rng.random() < 0.25 and (numeric or not careful) and not (careful and ty == "c"):
        parts.append(rng.choice("+- "))
    if rng.random() < 0.15 and (floaty or not careful):
        parts.append("z")
    if rng.random() < 0.15 and (numeric or not careful) and not (careful and ty == "c"):
        parts.append("#")
    if rng.random() < 0.2:
        parts.append("0")
    if rng.random() < 0.45:
        if rng.random() < 0.1 and params:
            parts.append("{" + rng.choice(list(params)) + "}")
        else:
            parts.append(str(rng.choice([0, 1, 3, 5, 8, 12, 20, rng.randint(0, 40)])))
    if rng.random() < 0.25 and (not careful or (numeric and ty not in ("c", "n"))):
        if careful and ty in ("b", "o", "x", "X"):
            parts.append("_")
        else:
            parts.append(rng.choice([",", "_", ",", "_", ",_"][: 4 if careful else 5]))
    if rng.random() < 0.4 and (not careful or floaty or isinstance(value, str)):
        parts.append("." + str(rng.choice([0, 1, 2, 3, 6, 10, 15, 16, 17, 20, rng.randint(0, 30)])))
    parts.append(ty)
    return "".join(parts)


def random_field(rng, params):
    keys = list(params)
    roll = rng.random()
    if keys and roll < 0.8:
        name = rng.choice(keys)
    elif roll < 0.88:
        name = rng.choice(["tool", "params"])
    else:
        name = rng.choice(["missing", "", "0", "x.real", "tool", "params"])
    value = params.get(name)
    if isinstance(value, (list, str, dict)) and value and rng.random() < 0.5:
        if isinstance(value, dict) and rng.random() < 0.9:
            key = rng.choice(list(value))
            value = value[key]
            name += f"[{key}]"
        elif isinstance(value, (list, str)) and rng.random() < 0.9:
            index = rng.randrange(len(value))
            value = value[index]
            name += f"[{index}]"
        else:
            name += f"[{rng.choice([0, 1, 2, 'k', 5])}]"
    field = name
    if rng.random() < 0.25:
        field += "!" + rng.choice("rsarsax")
        value = ""
    if rng.random() < 0.8:
        field += ":" + random_spec(rng, params, value)
    return "{" + field + "}"


def random_template(rng, params):
    pieces = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.6:
            pieces.append(random_field(rng, params))
        elif roll < 0.96:
            pieces.append(rng.choice(["", " ", " - ", "{{", "}}", "→", "[", "]", ": "]))
        else:
            pieces.append(rng.choice(["{", "}", "{!r}", "{:", "{x", "{}"]))
    return "".join(pieces)


def random_case(rng, name):
    params = {}
    for _ in range(rng.randint(0, 4)):
        params[random_key(rng)] = random_value(rng)
    template = random_template(rng, params) if rng.random() < 0.97 else None
    tool = rng.choice(["run_tool", "delete_file", "send_email", "outil_é"])
    return make_case(name, template, to_json(params, ensure_ascii=rng.random() < 0.5), tool)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, metavar="N", help="print N random cases as JSON lines")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # A hostile width makes Python try to build a gigabyte string; let that fail fast
    # as a MemoryError (which falls back, as the service would) instead.
    limit = 512 * 1024**2
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.set_int_max_str_digits(4300)
    if args.random is not None:
        rng = random.Random(args.seed)
        for i in range(args.random):
            print(json.dumps(random_case(rng, f"random-{args.seed}-{i}"), ensure_ascii=False))
        return
    cases = committed_cases()
    names = [case["name"] for case in cases]
    duplicates = {name for name in names if names.count(name) > 1}
    if duplicates:
        sys.exit(f"duplicate case names: {sorted(duplicates)}")
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(cases)} cases to {FIXTURE}")


if __name__ == "__main__":
    main()
