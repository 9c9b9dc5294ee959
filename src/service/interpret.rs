//! What a button means for the question it is under: the one interpretation a tap, a
//! reason reply and the console's decision all go through, so a form's values, "approve
//! once" and the value of a no with a reason are decided here and nowhere else.

use serde_json::{Value, json};

use super::TapAction;
use crate::domain::interaction::InteractionType;
use crate::domain::question::Question;

/// Which of an approve/cancel question's buttons was tapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Approve; `once`: without the window the question offered (never set when it
    /// offered none, so "once" only means something where a window was offered).
    Approve {
        once: bool,
    },
    Deny,
}

/// One person's answer as the button (or the reply) gives it, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Said {
    /// The answer's value, as AI-Parrot reads it.
    pub(super) value: Value,
    /// The button an approve/cancel question was answered with.
    pub(super) verdict: Option<Verdict>,
    /// Why the person said no, when they said.
    pub(super) reason: Option<String>,
}

impl Said {
    /// An approval of `record`; `window`: with the window it offers ("Approve for").
    /// The button decides, never the values: a form approved with `{}` is approved.
    pub(super) fn yes(record: &Question, window: bool) -> Said {
        Said {
            value: match record.kind() {
                InteractionType::Form => record.form_values(),
                _ => json!(true),
            },
            verdict: Some(Verdict::Approve {
                once: !window && record.window_seconds > 0,
            }),
            reason: None,
        }
    }

    /// A no to `record`, with the person's reason when they gave one (as
    /// [`crate::domain::question::reason_text`] keeps it).
    pub(super) fn no(record: &Question, reason: Option<String>) -> Said {
        Said {
            value: match record.kind() {
                InteractionType::Form => Value::Null,
                _ => json!(false),
            },
            verdict: Some(Verdict::Deny),
            reason,
        }
    }

    /// A free-text answer, or any other answer that is only its value.
    pub(super) fn value(value: Value) -> Said {
        Said {
            value,
            verdict: None,
            reason: None,
        }
    }

    /// This answer as the console gives it. A form interaction approved with edited
    /// parameters answers with them (AI-Parrot's guard runs with them). A confirmation
    /// answers a plain yes or no there, its edit going with the decision; in the chat, a
    /// confirmation that takes edits answers with its parameters. The audit trail hashes
    /// the value, so the two stay as they were.
    pub(super) fn in_console(self, record: &Question, edited: Option<Value>) -> Said {
        let approve = matches!(self.verdict, Some(Verdict::Approve { .. }));
        let value = match (&record.interaction, approve, edited) {
            (None, _, _) => json!(approve),
            (Some(_), true, Some(edited)) if record.kind() == InteractionType::Form => edited,
            (Some(_), _, _) => self.value,
        };
        Said { value, ..self }
    }
}

/// What a tap's button asks of the question it is under.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Meaning {
    /// An answer to store.
    Answer(Said),
    /// "Deny with reason": ask the person why.
    AskReason,
    /// "+N min": move the deadline.
    Extend,
    /// Toggle this option in the person's multi-choice selection.
    Toggle(String),
    /// Send the person's multi-choice selection.
    SendSelection,
    /// The button does not fit the question: the audit's reason.
    Invalid(&'static str),
}

/// What `action` means for `record` (a pending question).
pub(super) fn interpret(record: &Question, action: TapAction) -> Meaning {
    use InteractionType as Kind;
    let kind = record.kind();
    let choice = |n| match option_key(record, n) {
        Some(key) => Ok(key),
        None => Err(Meaning::Invalid("no such option")),
    };
    match (kind, action) {
        (_, TapAction::DenyWithReason) if offers_reason(kind) => Meaning::AskReason,
        (_, TapAction::Extend) => Meaning::Extend,
        (Kind::Approval | Kind::Form, TapAction::Approve) => {
            Meaning::Answer(Said::yes(record, false))
        }
        (Kind::Approval | Kind::Form, TapAction::ApproveWindow) => {
            // "Approve for" on a question that offers no window is a plain approval.
            Meaning::Answer(Said::yes(record, true))
        }
        (Kind::Approval | Kind::Form, TapAction::Cancel) => Meaning::Answer(Said::no(record, None)),
        (Kind::SingleChoice | Kind::Poll, TapAction::Choose(n)) => match choice(n) {
            Ok(key) => Meaning::Answer(Said::value(json!(key))),
            Err(invalid) => invalid,
        },
        (Kind::MultiChoice, TapAction::Toggle(n)) => match choice(n) {
            Ok(key) => Meaning::Toggle(key),
            Err(invalid) => invalid,
        },
        (Kind::MultiChoice, TapAction::Done) => Meaning::SendSelection,
        _ => Meaning::Invalid("button does not fit the question"),
    }
}

/// Whether a question of this kind offers "Deny with reason": those answered with
/// approve or cancel.
pub(super) fn offers_reason(kind: InteractionType) -> bool {
    matches!(kind, InteractionType::Approval | InteractionType::Form)
}

pub(super) fn option_key(record: &Question, n: u8) -> Option<String> {
    record
        .interaction
        .as_ref()?
        .options
        .get(usize::from(n))
        .map(|o| o.key.clone())
}

/// `selection` in the order the options are listed (as AI-Parrot lists them back).
pub(super) fn in_option_order(record: &Question, selection: Vec<String>) -> Vec<String> {
    let Some(i) = &record.interaction else {
        return selection;
    };
    i.options
        .iter()
        .filter(|o| selection.contains(&o.key))
        .map(|o| o.key.clone())
        .collect()
}

pub(super) fn labels_of(record: &Question, keys: &[String]) -> String {
    let Some(i) = &record.interaction else {
        return keys.join(", ");
    };
    i.options
        .iter()
        .filter(|o| keys.contains(&o.key))
        .map(|o| o.label.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
