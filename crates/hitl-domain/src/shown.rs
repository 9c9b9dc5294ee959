//! The parameters as an operator reads them, wherever they read them (the chat's
//! message, the console): pretty JSON in the agent's own key order, every invisible
//! character as its visible escape, and (when room is short) each long value cut to its
//! head with its length and the start of its SHA-256.

use sha2::{Digest, Sha256};

use super::python;
use super::python::value::PyValue;
use super::text::{self, Layout};

/// The parameters as shown: pretty JSON (insertion order, as the agent sent them) with
/// every string, number and key longer than `cap` characters cut to its head, followed
/// by its length and the start of its SHA-256. Returns the text (made visible, not yet
/// HTML-escaped) and whether anything was cut.
pub fn params_view(v: &PyValue, cap: usize) -> (String, bool) {
    let mut out = String::new();
    let mut cut = false;
    write_value(&mut out, v, 0, cap, &mut cut);
    (out, cut)
}

fn indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

/// Room the cut marker takes: a value at most this much longer than the cap is shown
/// whole, since cutting it would not make the message shorter.
const MARKER_CHARS: usize = 40;

/// `literal` (a JSON string's inside, or a number) made visible, in quotes when
/// `quoted_str`, cut to `cap` characters when it is much longer, with the length and the
/// start of the SHA-256 of `raw` (the value itself, UTF-8) so the operator can tell
/// values apart and check them against the attached file.
fn write_cut(
    out: &mut String,
    literal: &str,
    raw: &str,
    quoted_str: bool,
    cap: usize,
    cut: &mut bool,
) {
    let open = if quoted_str { "\"" } else { "" };
    let visible = text::visible(literal, Layout::Line);
    let n = raw.chars().count();
    out.push_str(open);
    if visible.chars().count() <= cap.saturating_add(MARKER_CHARS) {
        out.push_str(&visible);
        out.push_str(open);
        return;
    }
    *cut = true;
    let head: String = visible.chars().take(cap).collect();
    let digest = hex::encode(Sha256::digest(raw.as_bytes()));
    out.push_str(&head);
    out.push('…');
    out.push_str(open);
    out.push_str(&format!(" ✂️ {n} chars, sha256 {}", &digest[..8]));
}

/// A string as JSON shows it (quotes and backslashes escaped), without the quotes.
fn json_inner(s: &str) -> String {
    let quoted = serde_json::to_string(s).unwrap_or_default();
    quoted[1..quoted.len().saturating_sub(1)].to_owned()
}

fn write_value(out: &mut String, v: &PyValue, level: usize, cap: usize, cut: &mut bool) {
    match v {
        PyValue::List(items) if items.is_empty() => out.push_str("[]"),
        PyValue::Dict(dict) if dict.is_empty() => out.push_str("{}"),
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                write_value(out, item, level + 1, cap, cut);
            }
            indent(out, level);
            out.push(']');
        }
        PyValue::Dict(dict) => {
            out.push('{');
            for (i, (key, value)) in dict.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                indent(out, level + 1);
                // Keys stay readable longer than values: they say what a value is.
                write_cut(out, &json_inner(key), key, true, cap.max(24), cut);
                out.push_str(": ");
                write_value(out, value, level + 1, cap, cut);
            }
            indent(out, level);
            out.push('}');
        }
        PyValue::Str(s) => write_cut(out, &json_inner(s), s, true, cap, cut),
        scalar => {
            // A lone scalar prints as it does inside a document.
            let literal = python::json::to_pretty_json(scalar);
            write_cut(out, &literal, &literal, false, cap, cut);
        }
    }
}
