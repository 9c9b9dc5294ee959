//! The parameters block: pretty JSON with every long value cut visibly (its length and
//! hash), sized so the message fits Telegram's limit, and the file with the full
//! parameters that goes along whenever anything was cut.

use sha2::{Digest, Sha256};
use teloxide::utils::html::escape;

use crate::domain::python;
use crate::domain::python::value::PyValue;
use crate::domain::question::Question;
use crate::domain::text::{self, Layout};
use crate::service::View;

use super::interaction::interaction_parts;
use super::question::question_parts;
use super::{VALUE_CAPS, cut_note, escape_within, shown_within, units};

/// The parameters as shown: pretty JSON (insertion order, as the agent sent them) with
/// every string, number and key longer than `cap` characters cut to its head, followed
/// by its length and the start of its SHA-256. Returns the text (made visible, not yet
/// HTML-escaped) and whether anything was cut.
fn params_view(v: &PyValue, cap: usize) -> (String, bool) {
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
    if visible.chars().count() <= cap + MARKER_CHARS {
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

/// The parameters block: `<pre>` with the widest values that let the message fit in
/// `budget` UTF-16 units; whether anything was cut (then the file goes along).
pub(super) fn params_block(params_json: &str, budget: usize) -> (String, bool) {
    let Ok(value) = python::json::parse(params_json) else {
        // Stored text was checked JSON; if not, show it raw (visible, cut) and attach.
        let (shown, omitted) = shown_within(params_json, budget.saturating_sub(20));
        return (format!("<pre>{shown}</pre>"), omitted > 0);
    };
    let mut last = String::new();
    for cap in VALUE_CAPS {
        let (view, cut) = params_view(&value, cap);
        let block = format!("<pre>{}</pre>", escape(&view));
        if units(&block) <= budget {
            return (block, cut);
        }
        last = view;
    }
    // Even with every value cut to its length and hash the keys do not fit (hundreds
    // of them): show what fits, say how much is left, and the file has it all.
    let note = cut_note(usize::MAX, "parameters");
    let (head, omitted) = escape_within(&last, budget.saturating_sub(units(&note) + 11));
    (
        format!("<pre>{head}</pre>{}", cut_note(omitted, "parameters")),
        true,
    )
}

/// The full parameters an operator can check: `json.dumps(params, sort_keys=True)`,
/// the exact text whose SHA-256 is the argument hash, ASCII-escaped so every character
/// is visible. Attached when the message had to cut something.
pub struct Attachment {
    pub file_name: String,
    pub content: Vec<u8>,
    pub caption: String,
}

/// The file to attach to `r`'s question, if its message cut anything.
pub fn attachment(r: &Question) -> Option<Attachment> {
    let cut = match r.interaction.as_deref() {
        None => question_parts(r).cut,
        Some(i) if r.has_call => interaction_parts(r, i, &View::default()).cut,
        Some(_) => false,
    };
    if !cut {
        return None;
    }
    let canonical = python::json::parse_object(&r.params_json)
        .map(|d| python::json::dumps_sorted_dict(&d))
        .unwrap_or_else(|_| r.params_json.clone());
    Some(Attachment {
        file_name: format!("{}-params.json", r.id),
        content: canonical.into_bytes(),
        caption: format!(
            "Full parameters of {} ({}), exactly as they will execute. SHA-256 of this file = args hash {}",
            r.id,
            text::visible(r.tool.as_str(), Layout::Line),
            r.args_hash
        ),
    })
}
