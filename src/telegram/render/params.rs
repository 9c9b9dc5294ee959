//! The parameters block: pretty JSON with every long value cut visibly (its length and
//! hash), sized so the message fits Telegram's limit, and the file with the full
//! parameters that goes along whenever anything was cut.

use teloxide::utils::html::escape;

use crate::domain::python;
use crate::domain::question::Question;
use crate::domain::shown::params_view;
use crate::domain::text::{self, Layout};
use crate::service::View;

use super::interaction::interaction_parts;
use super::question::question_parts;
use super::{VALUE_CAPS, cut_note, escape_within, shown_within, units};

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
