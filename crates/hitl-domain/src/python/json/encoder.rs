//! `json.dumps`, as `Lib/json/encoder.py` and `Modules/_json.c`'s encoder write it
//! (`encoder_listencode_obj`/`_list`/`_dict`, `py_encode_basestring_ascii`,
//! `py_encode_basestring`, `floatstr`), for the two settings this service uses:
//! `sort_keys=True, default=str`, the text AI-Parrot hashes, and `indent=2,
//! ensure_ascii=False`, the text an operator reads.

use std::fmt::Write as _;

use crate::python::float_repr::write_float_repr;
use crate::python::value::{PyDict, PyValue};

/// `json.dumps(v, sort_keys=True, default=str)`: the text AI-Parrot hashes.
pub fn dumps_sorted(v: &PyValue) -> String {
    let mut out = String::new();
    write_sorted(&mut out, v);
    out
}

/// [`dumps_sorted`] of `PyValue::Dict(dict)`, without cloning the dict to wrap it.
pub fn dumps_sorted_dict(dict: &PyDict) -> String {
    // Room for a typical tool call's parameters without regrowing.
    let mut out = String::with_capacity(256);
    write_sorted_dict(&mut out, dict);
    out
}

fn write_sorted(out: &mut String, v: &PyValue) {
    match v {
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_sorted(out, item);
            }
            out.push(']');
        }
        PyValue::Dict(dict) => write_sorted_dict(out, dict),
        PyValue::Str(s) => write_str_ascii(out, s),
        scalar => write_scalar(out, scalar),
    }
}

fn write_sorted_dict(out: &mut String, dict: &PyDict) {
    let mut entries: Vec<(&str, &PyValue)> = dict.iter().collect();
    // Python compares str by code point; UTF-8 byte order is the same order (and keys
    // are unique, so the values are never compared).
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str_ascii(out, key);
        out.push_str(": ");
        write_sorted(out, value);
    }
    out.push('}');
}

/// `None`, `bool`, `int` and `float` print the same in both of Python's encoders.
fn write_scalar(out: &mut String, v: &PyValue) {
    match v {
        PyValue::None => out.push_str("null"),
        PyValue::Bool(true) => out.push_str("true"),
        PyValue::Bool(false) => out.push_str("false"),
        // Small integers skip BigInt's general radix conversion.
        PyValue::Int(i) => match i64::try_from(i) {
            Ok(small) => {
                let _ = write!(out, "{small}");
            }
            Err(_) => {
                let _ = write!(out, "{i}");
            }
        },
        PyValue::Float(f) => write_json_float(out, *f),
        // Containers and strings are handled by the callers.
        PyValue::Str(_) | PyValue::List(_) | PyValue::Dict(_) => {}
    }
}

/// `json`'s `floatstr`: the repr, except the non-finite values that `allow_nan=True`
/// spells as JavaScript does.
pub(crate) fn write_json_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        write_float_repr(out, f);
    }
}

/// `ensure_ascii=True` string escaping (`py_encode_basestring_ascii`).
pub(crate) fn write_str_ascii(out: &mut String, s: &str) {
    out.push('"');
    // The common case, printable ASCII only, is copied in one go.
    if s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_unicode_escape(out, *unit);
                }
            }
        }
    }
    out.push('"');
}

/// `\uXXXX` in lowercase hex, as Python writes it; by hand, since `write!` costs a
/// formatter per character of non-ASCII text.
fn push_unicode_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

/// `ensure_ascii=False` string escaping (`py_encode_basestring`): only `"`, `\` and
/// C0 controls are escaped; DEL and everything non-ASCII pass through.
fn write_str_unicode(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\0'..='\u{1f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            _ => out.push(c),
        }
    }
    out.push('"');
}

/// `json.dumps(v, indent=2, ensure_ascii=False)`: the parameters as the agent sent them
/// (insertion order, characters unescaped), laid out for an operator to read.
pub fn to_pretty_json(v: &PyValue) -> String {
    let mut out = String::new();
    write_pretty(&mut out, v, 0);
    out
}

fn newline_indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_pretty(out: &mut String, v: &PyValue, level: usize) {
    match v {
        // Python prints empty containers on one line even when indenting.
        PyValue::List(items) if items.is_empty() => out.push_str("[]"),
        PyValue::Dict(dict) if dict.is_empty() => out.push_str("{}"),
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(out, level + 1);
                write_pretty(out, item, level + 1);
            }
            newline_indent(out, level);
            out.push(']');
        }
        PyValue::Dict(dict) => {
            out.push('{');
            for (i, (key, value)) in dict.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(out, level + 1);
                write_str_unicode(out, key);
                out.push_str(": ");
                write_pretty(out, value, level + 1);
            }
            newline_indent(out, level);
            out.push('}');
        }
        PyValue::Str(s) => write_str_unicode(out, s),
        scalar => write_scalar(out, scalar),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::json::parse;

    fn canonical(text: &str) -> String {
        dumps_sorted(&parse(text).expect("valid JSON"))
    }

    fn pretty(text: &str) -> String {
        to_pretty_json(&parse(text).expect("valid JSON"))
    }

    #[test]
    fn the_aiparrot_example_serialises_as_python_does() {
        assert_eq!(
            canonical(r#"{"b":1,"a":"é","c":[1.0,1e16,1e-5]}"#),
            r#"{"a": "\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}"#
        );
    }

    #[test]
    fn keys_sort_by_code_point_at_every_depth() {
        assert_eq!(
            canonical(r#"{"b":{"z":1,"a":[{"d":0,"c":0}]},"a":0,"B":0}"#),
            r#"{"B": 0, "a": 0, "b": {"a": [{"c": 0, "d": 0}], "z": 1}}"#
        );
        // UTF-16 order would put the astral key before U+FF5E and U+E000.
        assert_eq!(
            canonical(r#"{"😀":1,"～":2,"\ue000":3}"#),
            r#"{"\ue000": 3, "\uff5e": 2, "\ud83d\ude00": 1}"#
        );
    }

    #[test]
    fn ensure_ascii_escapes_everything_outside_printable_ascii() {
        assert_eq!(
            canonical(r#"["\u0000\u001f\u007f\u0080 ~\"\\/\b\f\n\r\t", "é😀"]"#),
            r#"["\u0000\u001f\u007f\u0080 ~\"\\/\b\f\n\r\t", "\u00e9\ud83d\ude00"]"#
        );
    }

    #[test]
    fn empty_containers_print_without_spaces() {
        assert_eq!(canonical(r#"{"a":[],"b":{}}"#), r#"{"a": [], "b": {}}"#);
        assert_eq!(canonical(" [ ] "), "[]");
        assert_eq!(canonical("{ }"), "{}");
    }

    #[test]
    fn json_spells_non_finite_floats_as_javascript_does() {
        assert_eq!(
            dumps_sorted(&PyValue::List(vec![
                PyValue::Float(f64::INFINITY),
                PyValue::Float(f64::NEG_INFINITY),
                PyValue::Float(f64::NAN),
            ])),
            "[Infinity, -Infinity, NaN]"
        );
        assert_eq!(
            to_pretty_json(&PyValue::Float(f64::NEG_INFINITY)),
            "-Infinity"
        );
    }

    #[test]
    fn pretty_output_keeps_insertion_order_and_indents_by_two() {
        assert_eq!(
            pretty(r#"{"z":1,"a":[1,{"b":[]},{}],"c":"é\u2028\u007f\u0001\"","d":1e16}"#),
            "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    },\n    {}\n  ],\n  \"c\": \"é\u{2028}\u{7f}\\u0001\\\"\",\n  \"d\": 1e+16\n}"
        );
    }

    #[test]
    fn pretty_output_of_empty_and_scalar_values_is_one_line() {
        assert_eq!(pretty("{}"), "{}");
        assert_eq!(pretty("[]"), "[]");
        assert_eq!(pretty("1.50"), "1.5");
        assert_eq!(pretty("\"😀\\n\""), "\"😀\\n\"");
        assert_eq!(pretty("[[]]"), "[\n  []\n]");
    }
}
