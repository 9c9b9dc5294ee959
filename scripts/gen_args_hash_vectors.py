#!/usr/bin/env python3
"""Reference vectors for the args hash, computed by Python itself.

AI-Parrot fingerprints a tool call as
    sha256(json.dumps(json.loads(text), sort_keys=True, default=str))
and the Rust service must agree byte for byte. This script is the oracle:

  gen_args_hash_vectors.py
      writes tests/fixtures/args_hash_vectors.json: hand-written cases, each with the
      raw JSON an agent might send, the canonical text Python hashes, and the hash.

  gen_args_hash_vectors.py --random N --seed S
      prints N JSON lines of randomly *written* documents (random nesting, Unicode,
      huge ints, extreme floats, whitespace, escaped vs raw characters, exponent
      spellings) with Python's canonical text, hash and indent=2 rendering, for the
      Rust cross-check test. The text is produced here, token by token, so it covers
      spellings Python's own dumps never emits.

Standard library only. Every generated document stays inside what the Rust parser
accepts: no NaN/Infinity literals, no lone surrogates, nesting at most 64 levels,
integers of at most 4300 digits.
"""

import argparse
import hashlib
import json
import math
import random
import struct
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "args_hash_vectors.json"
MAX_DEPTH = 64


def canonical(params):
    return json.dumps(params, sort_keys=True, default=str)


def args_hash(params):
    return hashlib.sha256(canonical(params).encode("utf-8")).hexdigest()


def nested_lists(levels, inner="0"):
    return "[" * levels + inner + "]" * levels


# (name, raw JSON text of an object). Raw strings so that `\u` escapes reach json.loads
# as the agent would have written them; non-ASCII literals are sent raw (UTF-8).
CASES = [
    ("aiparrot_example", r'{"b":1,"a":"é","c":[1.0,1e16,1e-5]}'),
    ("empty_object", r"{}"),
    ("empty_object_with_whitespace", " \n\t{ \r\n } \n"),
    ("booleans_and_null", r'{"t":true,"f":false,"n":null}'),
    ("empty_containers", r'{"l":[],"d":{},"s":""}'),
    ("nested_dicts_sorted_at_every_depth", r'{"outer":{"z":1,"a":{"y":[],"b":{}}},"inner":0}'),
    ("nested_lists", r'{"m":[[1,2],[3,[4,[5,[]]]]]}'),
    ("dicts_inside_lists_sorted", r'{"rows":[{"b":2,"a":1},{"d":[{"z":0,"y":1}],"c":null}]}'),
    ("realistic_write_file", r'{"path":"/etc/hosts","mode":"w","content":"127.0.0.1 localhost\n::1 localhost\n"}'),
    ("realistic_sql", r'{"query":"SELECT * FROM users WHERE name = \"O\u2019Brien\" AND id > 10;","limit":100,"dry_run":false}'),
    ("realistic_shell", r'{"cmd":"rm -rf ./build && echo \"done\" | tee log.txt","cwd":"C:\\Users\\me","timeout":30.5}'),
    ("raw_utf8_text", r'{"city":"São Paulo","greeting":"こんにちは","ru":"Привет"}'),
    ("escaped_latin_same_as_raw", r'{"city":"S\u00e3o Paulo"}'),
    ("uppercase_hex_escapes", r'{"e":"\u00E9\u00c9\u00Ff"}'),
    ("emoji_raw", r'{"mood":"😀🎉","flag":"🇫🇷"}'),
    ("emoji_escaped_surrogate_pair", r'{"mood":"\ud83d\ude00\uD83C\uDF89"}'),
    ("astral_non_emoji", r'{"cjk_ext_b":"𠜎","math":"𝔘𝔫𝔦","max":"\udbff\udfff","first":"\ud800\udc00"}'),
    ("bmp_boundaries", r'{"s":"\u0080\u00ff\u0100\u07ff\u0800\ud7ff\ue000\ufffd\ufffe\uffff"}'),
    ("line_and_paragraph_separators_raw", '{"s":"a\u2028b\u2029c\u0085d"}'),
    ("byte_order_mark_inside_string", '{"s":"\ufeffbom"}'),
    ("combining_accent_differs_from_precomposed", r'{"nfd":"e\u0301","nfc":"\u00e9"}'),
    ("keys_non_ascii_sort_by_code_point", r'{"é":1,"e":2,"z":3,"É":4,"ß":5,"Z":6}'),
    ("keys_astral_sort_after_bmp", r'{"～":1,"😀":2,"\ue000":3,"\uffff":4,"𐀀":5}'),
    ("keys_case_digits_and_punctuation", r'{"b":1,"B":2,"a":3,"A":4,"_":5,"1":6," ":7,"~":8}'),
    ("keys_numeric_strings_sort_as_text", r'{"10":1,"9":2,"1":3,"100":4,"-1":5}'),
    ("keys_empty_and_space", r'{"":1," ":2,"  ":3}'),
    ("keys_with_escapes_and_controls", r'{"a\"b":1,"a\\b":2,"a\nb":3,"a\u0000b":4,"a/b":5,"a\/c":6}'),
    ("key_prefix_sorts_first", r'{"abc":1,"ab":2,"abcd":3,"a":4}'),
    ("duplicate_keys_first_position_last_value", r'{"a":1,"b":2,"a":3}'),
    ("duplicate_keys_nested", r'{"x":{"k":1,"k":{"deep":true}},"y":[{"q":1,"q":2}]}'),
    ("duplicate_keys_change_type", r'{"k":[1],"k":"s","z":0,"k":null}'),
    ("duplicate_key_via_escape", r'{"é":1,"\u00e9":2}'),
    ("huge_int_positive", '{"n":' + "123456789" * 7 + "}"),
    ("huge_int_negative", '{"n":-' + "98765432109876543210" * 4 + "}"),
    ("int_of_4300_digits_python_limit", '{"n":' + "7" + "1234567890" * 429 + "123456789" + "}"),
    ("int_of_4300_digits_negative", '{"n":-' + "9" * 4300 + "}"),
    ("int_boundaries", r'{"i64max":9223372036854775807,"i64min":-9223372036854775808,"u64max":18446744073709551615,"over":18446744073709551616,"neg_over":-9223372036854775809}'),
    ("int_not_representable_as_double", r'{"n":9007199254740993,"m":-9007199254740993}'),
    ("negative_zero_int_is_zero", r'{"n":-0,"z":0}'),
    ("ints_and_floats_that_compare_equal", r'{"v":[1,1.0,-0,-0.0,0,0.0,true,false]}'),
    ("float_exponent_spellings", r'{"a":1E5,"b":1e5,"c":1e+5,"d":1E+05,"e":1e007,"f":1E-0005,"g":2.5E+3,"h":0e0,"i":0E-0}'),
    ("float_fraction_spellings", r'{"a":1.50,"b":0.1,"c":1.0,"d":10.000,"e":0.0,"f":-0.0,"g":0.1e1,"h":100e-2,"i":123e-2}'),
    ("float_repr_positional_vs_exponent", r'{"a":0.0001,"b":0.00001,"c":1e-7,"d":1e15,"e":1e16,"f":123456789012345.0,"g":1234567890123456.0,"h":12345678901234567.0,"i":5e-5,"j":1.5e300}'),
    ("float_extremes", r'{"min_sub":5e-324,"min_sub_spelled":4.9e-324,"max":1.7976931348623157e308,"min_norm":2.2250738585072014e-308,"under":1e-400,"neg_under":-1e-400}'),
    ("float_overflow_is_infinity", r'{"pos":1e400,"neg":-1e400,"big_mantissa":' + "1" + "0" * 400 + ".0" + "}"),
    ("float_rounding_cases", r'{"a":0.30000000000000004,"b":1e23,"c":8.41e21,"d":9007199254740993.0,"e":1.00000000000000011102230246251565404236316680908203125,"f":1.00000000000000011102230246251565404236316680908203126,"g":1.00000000000000033306690738754696212708950042724609375}'),
    ("float_long_mantissa", r'{"pi":3.14159265358979323846264338327950288419716939937510582097494459,"tiny":0.000000000000000000000000000000000000000000000000000000000000012345678901234567890123}'),
    ("float_negative_variants", r'{"a":-1.5,"b":-1e-10,"c":-1E+20,"d":-123.456e7,"e":-0.0e5}'),
    ("float_three_hundred_digit_integer_part", '{"f":' + "9" * 300 + ".5}"),
    ("control_chars_escaped", r'{"c":"\u0000\u0001\u0007\u001b\u001f","short":"\b\f\n\r\t"}'),
    ("quote_backslash_slash", r'{"s":"\"\\\/ / \\\\"}'),
    ("delete_char", r'{"del":"\u007f","raw_del":"' + "\x7f" + '"}'),
    ("printable_ascii_all", '{"s":' + json.dumps("".join(chr(c) for c in range(0x20, 0x7F))) + "}"),
    ("string_that_looks_like_number", r'{"n":"1.0","m":"1e16","t":"true","z":"null"}'),
    ("long_string", '{"s":"' + ("lorem ipsum dolor sit amet é 😀 " * 40) + '"}'),
    ("whitespace_heavy", ' \t\r\n{ \n\t "b" \r\n : \t [ 1 ,\n 2 , \t{ "y" : null , "x" : [ ] } ] ,\r\n\t"a"\n:\n"v" \n}\r\n\t '),
    ("minified_equals_spaced", r'{"a":[1,{"b":2}],"c":"d"}'),
    ("spaced_equals_minified", '{ "c" : "d" , "a" : [ 1 , { "b" : 2 } ] }'),
    ("nesting_at_the_64_level_limit", '{"d":' + nested_lists(MAX_DEPTH - 1) + "}"),
    ("deep_mixed_nesting", '{"a":{"b":[{"c":[[{"d":{"e":[1,{"f":"g"}]}}]]}]}}'),
    ("list_of_mixed_types", r'{"l":[null,true,1,1.5,"s",[],{},[{}],{"k":[]}]}'),
    ("many_keys", "{" + ",".join('"k%03d":%d' % ((i * 37) % 101, i) for i in range(101)) + "}"),
]


def write_fixture():
    vectors = []
    seen = set()
    for name, text in CASES:
        if name in seen:
            raise SystemExit(f"duplicate case name {name}")
        seen.add(name)
        params = json.loads(text)
        if not isinstance(params, dict):
            raise SystemExit(f"{name}: not an object")
        vectors.append(
            {
                "name": name,
                "params_json": text,
                "canonical": canonical(params),
                "args_hash": args_hash(params),
            }
        )
    aiparrot = vectors[0]
    expected = '{"a": "\\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}'
    if aiparrot["canonical"] != expected:
        raise SystemExit(f"AI-Parrot example serialised as {aiparrot['canonical']!r}")
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    with FIXTURE.open("w", encoding="utf-8") as f:
        json.dump(vectors, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(vectors)} vectors to {FIXTURE}", file=sys.stderr)


class RandomDoc:
    """Writes one random JSON object as text, choosing every spelling at random."""

    WS = ["", "", "", " ", "  ", "\n", "\t", "\r\n", " \n\t ", "\r"]
    SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}

    def __init__(self, rng):
        self.rng = rng
        self.key_pool = [self.raw_string(self.rng.randint(0, 4)) for _ in range(6)]

    def ws(self):
        return self.rng.choice(self.WS) if self.rng.random() < 0.5 else ""

    def random_char(self):
        r = self.rng.random()
        if r < 0.45:
            return chr(self.rng.randint(0x20, 0x7E))
        if r < 0.52:
            return chr(self.rng.randint(0x00, 0x1F))
        if r < 0.55:
            return self.rng.choice('"\\/\x7f')
        if r < 0.67:
            return chr(self.rng.randint(0x80, 0x7FF))
        if r < 0.82:
            cp = self.rng.randint(0x800, 0xFFFF)
            while 0xD800 <= cp <= 0xDFFF:
                cp = self.rng.randint(0x800, 0xFFFF)
            return chr(cp)
        if r < 0.92:
            return chr(self.rng.choice([0x1F600, 0x1F389, 0x1F1EB, 0x10000, 0x1D518, 0x2070E]) + self.rng.randint(0, 40))
        return chr(self.rng.randint(0x10000, 0x10FFFF))

    def raw_string(self, length):
        return "".join(self.random_char() for _ in range(length))

    def u_escape(self, c):
        units = c.encode("utf-16-be")
        parts = []
        for i in range(0, len(units), 2):
            hexed = "%04x" % int.from_bytes(units[i : i + 2], "big")
            if self.rng.random() < 0.3:
                hexed = hexed.upper()
            elif self.rng.random() < 0.2:
                hexed = "".join(ch.upper() if self.rng.random() < 0.5 else ch for ch in hexed)
            parts.append("\\u" + hexed)
        return "".join(parts)

    def spell_string(self, s):
        out = ['"']
        for c in s:
            cp = ord(c)
            r = self.rng.random()
            if c in self.SHORT_ESCAPES:
                out.append(self.SHORT_ESCAPES[c] if r < 0.7 else self.u_escape(c))
            elif cp < 0x20:
                out.append(self.u_escape(c))
            elif c == "/":
                out.append("\\/" if r < 0.4 else "/")
            elif cp < 0x7F:
                out.append(c if r < 0.9 else self.u_escape(c))
            else:
                out.append(c if r < 0.6 else self.u_escape(c))
        out.append('"')
        return "".join(out)

    def spell_int(self):
        r = self.rng.random()
        if r < 0.4:
            n = self.rng.randint(-1000, 1000)
            return str(n) if n != 0 or self.rng.random() < 0.7 else "-0"
        if r < 0.7:
            return str(self.rng.randint(-(2**70), 2**70))
        if r < 0.97:
            digits = self.rng.randint(20, 400)
        else:
            digits = self.rng.randint(4000, 4300)
        body = str(self.rng.randint(1, 9)) + "".join(self.rng.choice("0123456789") for _ in range(digits - 1))
        return ("-" if self.rng.random() < 0.5 else "") + body

    def digit_run(self, n, lead_nonzero=False):
        s = "".join(self.rng.choice("0123456789") for _ in range(n))
        if lead_nonzero and s:
            s = self.rng.choice("123456789") + s[1:]
        return s

    def spell_float(self):
        r = self.rng.random()
        sign = "-" if self.rng.random() < 0.4 else ""
        if r < 0.3:
            # The repr of a random double (any bit pattern), respelled.
            while True:
                f = struct.unpack("<d", self.rng.getrandbits(64).to_bytes(8, "little"))[0]
                if math.isfinite(f):
                    break
            text = repr(f)
            if "e" not in text and "." not in text:
                text += ".0"
            if self.rng.random() < 0.3:
                text = text.replace("e", "E")
            if self.rng.random() < 0.3:
                text = text.replace("e+", "e").replace("E+", "E")
            return text
        if r < 0.4:
            return sign + self.rng.choice(["0.0", "0e0", "0E+00", "0.000e-5", "1.0", "5e-324", "4.9e-324", "2.4703282292062328e-324", "1.7976931348623157e308", "1.7976931348623158e308", "1.7976931348623159e308", "1e400", "1e-400", "2.2250738585072011e-308", "0.1", "1e16", "1e15", "9999999999999999.0", "1e22", "1e23"])
        # Hand-built literal: integer part, optional fraction, optional exponent
        # (at least one of the two, or it would be an int).
        int_part = "0" if self.rng.random() < 0.3 else self.digit_run(self.rng.randint(1, 25), lead_nonzero=True)
        frac = ""
        exp = ""
        kind = self.rng.random()
        if kind < 0.7:
            frac = "." + self.digit_run(self.rng.randint(1, 30))
        if kind >= 0.4 or not frac:
            e = self.rng.choice(["e", "E"])
            esign = self.rng.choice(["", "+", "-"])
            span = self.rng.choice([5, 20, 330, 400])
            value = self.rng.randint(0, span)
            pad = "0" * self.rng.choice([0, 0, 0, 1, 3])
            exp = e + esign + pad + str(value)
        return sign + int_part + frac + exp

    def value(self, depth, budget):
        r = self.rng.random()
        can_nest = depth < MAX_DEPTH and budget[0] > 0
        if can_nest and r < 0.25:
            return self.obj(depth + 1, budget)
        if can_nest and r < 0.45:
            return self.array(depth + 1, budget)
        budget[0] -= 1
        r = self.rng.random()
        if r < 0.3:
            return self.spell_string(self.raw_string(self.rng.randint(0, 12)))
        if r < 0.55:
            return self.spell_int()
        if r < 0.85:
            return self.spell_float()
        return self.rng.choice(["true", "false", "null"])

    def array(self, depth, budget):
        budget[0] -= 1
        n = self.rng.choice([0, 1, 1, 2, 3, 5])
        items = [self.ws() + self.value(depth, budget) + self.ws() for _ in range(n)]
        return "[" + (",".join(items) if items else self.ws()) + "]"

    def key(self):
        if self.rng.random() < 0.3:
            return self.rng.choice(self.key_pool)  # repeated keys, to exercise dict semantics
        return self.raw_string(self.rng.randint(0, 6))

    def obj(self, depth, budget):
        budget[0] -= 1
        n = self.rng.choice([0, 1, 2, 3, 4, 6])
        members = [
            self.ws() + self.spell_string(self.key()) + self.ws() + ":" + self.ws() + self.value(depth, budget) + self.ws()
            for _ in range(n)
        ]
        return "{" + (",".join(members) if members else self.ws()) + "}"

    def spine(self, depth):
        """A chain of containers reaching MAX_DEPTH exactly, to probe the limit."""
        levels = MAX_DEPTH - depth
        opens, closes = [], []
        for _ in range(levels):
            if self.rng.random() < 0.5:
                opens.append("[" + self.ws())
                closes.append(self.ws() + "]")
            else:
                k = self.spell_string(self.key())
                opens.append("{" + self.ws() + k + self.ws() + ":" + self.ws())
                closes.append(self.ws() + "}")
        return "".join(opens) + self.spell_int() + "".join(reversed(closes))

    def document(self):
        if self.rng.random() < 0.05:
            body = '{"spine":' + self.spine(1) + "}"
        else:
            body = self.obj(1, [self.rng.randint(1, 40)])
        return self.ws() + body + self.ws()


def random_lines(n, seed):
    rng = random.Random(seed)
    out = sys.stdout
    for _ in range(n):
        text = RandomDoc(rng).document()
        params = json.loads(text)
        assert isinstance(params, dict)
        line = {
            "params_json": text,
            "args_hash": args_hash(params),
            "canonical": canonical(params),
            "pretty": json.dumps(params, indent=2, ensure_ascii=False),
        }
        out.write(json.dumps(line) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random", type=int, metavar="N", help="print N random vectors as JSON lines")
    parser.add_argument("--seed", type=int, default=0, help="seed for --random (default 0)")
    args = parser.parse_args()
    if args.random is not None:
        random_lines(args.random, args.seed)
    else:
        write_fixture()


if __name__ == "__main__":
    main()
