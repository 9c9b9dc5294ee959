//! A confirmation's message: the question as first posted (briefing, parameters,
//! context, the window Approve also allows), the outcome line appended when it ends,
//! and a notification's text.

use serde_json::Value;

use crate::domain::interaction::{InteractionType, Scope};
use crate::domain::question::{Question, Status, Via, operator_time as date_time};
use crate::domain::rules::Effect;
use crate::domain::run_report::{RunStatus, duration_words};
use crate::domain::text::{self, Layout};
use crate::service::View;

use super::params::params_block;
use super::{
    BRIEFING_BUDGET, CONTEXT_BUDGET, EXPANDABLE_FROM, OUTCOME_RESERVE, REASON_SHOWN,
    TELEGRAM_MAX_CHARS, clock, cut_note, escalation_line, escape_within, flag, quoted, shown,
    shown_within, sla_line, units, window_duration,
};

/// The agent's context, quoted under its label; nothing when there is none.
pub(super) fn context_block(context: Option<&str>) -> String {
    match context.filter(|c| !c.trim().is_empty()) {
        Some(c) => {
            let (block, _) = quoted(
                "📝 <i>Context from the agent:</i>",
                c,
                CONTEXT_BUDGET,
                "context",
            );
            format!("\n\n{block}")
        }
        None => String::new(),
    }
}

/// Said under parameters that were cut: where the rest is, and the hash to check it by.
pub(super) fn attached_note(r: &Question) -> String {
    format!(
        "\n📎 <i>Long values are shortened (each with its length and hash). The full parameters are attached below as a file.</i>\n🔑 Args hash: <code>{}</code>",
        r.args_hash
    )
}

/// The question's text and whether anything in it was cut.
pub(super) struct Parts {
    pub(super) text: String,
    pub(super) cut: bool,
}

/// The question as first posted. Deterministic for a given record, so the outcome edit
/// can rebuild it and append one line.
pub fn question_text(r: &Question) -> String {
    question_parts(r).text
}

/// The window disclosure: what Approve also allows, with the duration and the latest
/// absolute end time (a window runs from the tap, and the tap comes before the deadline).
pub(super) fn window_disclosure(r: &Question) -> String {
    if r.window_seconds == 0 {
        return String::new();
    }
    let duration = window_duration(r.window_seconds);
    let latest = r.expires_at + std::time::Duration::from_secs(r.window_seconds);
    let mut out = format!(
        "\n\n🪟 <b>Approve for {duration}</b> also lets identical calls (same tool, owner and arguments) through without asking, for {duration} after your tap: until {} at the latest. <b>Approve once</b> allows this call only.",
        date_time(latest)
    );
    if let Some(asked) = r.window_requested_seconds {
        out.push_str(&format!(
            "\n<i>The agent asked for {}; this route allows at most {duration}.</i>",
            window_duration(asked)
        ));
    }
    out
}

/// How much of a rule's `reason` the message shows (UTF-16 units, escaped).
const RULE_REASON_BUDGET: usize = 300;

/// Which rule asked, and why (`[[rules]]`); in a dry run, what the rules would have
/// done instead of asking. Empty when no rules are in force. The names and reasons are
/// the configuration's, shown escaped and cut like any text.
pub(super) fn rule_note(r: &Question) -> String {
    let Some(v) = &r.rule else {
        return String::new();
    };
    let by = match &v.rule {
        Some(name) => format!("rule <code>{}</code>", shown_within(name, 100).0),
        None => "the rules' default".to_owned(),
    };
    let why = match &v.reason {
        Some(reason) => format!(": {}", shown_within(reason, RULE_REASON_BUDGET).0),
        None => String::new(),
    };
    if !v.enforced {
        let would = match v.effect {
            Effect::Allow => "allowed it without asking",
            Effect::Deny => "denied it without asking",
            Effect::Ask => "asked, as now",
        };
        return format!("\n\n🧪 <i>Rules in dry run: {by} would have {would}{why}</i>");
    }
    if v.past_rate {
        return format!(
            "\n\n📏 Asked because {by} has let through as many calls as its rate allows{why}"
        );
    }
    match &v.rule {
        Some(_) => format!("\n\n📏 Asked by {by}{why}"),
        None => String::new(),
    }
}

/// How much of a call's annotations in words the message shows (UTF-16 units, escaped).
const HINTS_SHOWN: usize = 200;

/// The MCP server a gateway sends the call to, and the tool's annotations in a few
/// words (what the server says of its own tool: a claim, labelled as one), each on its
/// line under the owner; nothing for a call that came without them.
pub(super) fn mcp_lines(r: &Question) -> String {
    let mut out = String::new();
    if let Some(server) = &r.server {
        out.push_str(&format!(
            "🔌 MCP server: <code>{}</code>\n",
            shown(server.as_str())
        ));
    }
    if let Some(a) = r.annotations.as_ref().filter(|a| !a.is_empty()) {
        out.push_str(&format!(
            "🏷 Hints (the server's own): {}\n",
            shown_within(&a.brief(), HINTS_SHOWN).0
        ));
    }
    out
}

pub(super) fn question_parts(r: &Question) -> Parts {
    let mut head = format!(
        "🛂 <b>Confirmation required</b>\n🔧 Tool: <code>{}</code>{}\n🤖 Agent: <code>{}</code>{}\n👤 Owner: <code>{}</code>{}\n",
        shown(r.tool.as_str()),
        flag(r.tool.as_str()),
        shown(&r.agent),
        flag(&r.agent),
        shown(r.owner_id.as_str()),
        flag(r.owner_id.as_str()),
    );
    head.push_str(&mcp_lines(r));
    head.push('\n');
    let (briefing, briefing_cut) = quoted(
        "💬 <i>The agent describes the call:</i>",
        &r.briefing,
        BRIEFING_BUDGET,
        "the briefing",
    );
    head.push_str(&briefing);
    head.push_str(&context_block(r.context.as_deref()));
    if r.allow_edit {
        // A schema is kept only while the console is on (see `Service::create`): then
        // the call can be changed there.
        head.push_str(if r.editable() {
            "\n\n✏️ <i>This call can be changed before it is approved in the console (✏️ Review and edit, or the bot's menu in a private chat with it); here it can only be approved or cancelled exactly as shown.</i>"
        } else {
            "\n\n✏️ <i>Editing is not available in Telegram: this call can only be approved or cancelled exactly as shown.</i>"
        });
    }
    head.push_str("\n\n<b>Parameters</b>\n");
    let mut tail = window_disclosure(r);
    tail.push_str(&rule_note(r));
    tail.push_str(&recalled_note(r));
    tail.push_str(&format!("\n\n⏳ Deadline: {}", date_time(r.expires_at)));
    let attached = attached_note(r);
    // The parameters get whatever room is left, less the note that they were cut.
    let fixed = units(&head) + units(&tail) + units(&attached) + OUTCOME_RESERVE;
    let (block, cut) = params_block(&r.params_json, TELEGRAM_MAX_CHARS.saturating_sub(fixed));
    // A cut briefing (it renders parameters) sends the file along too.
    let cut = cut || briefing_cut;
    let mut text = head;
    text.push_str(&block);
    if cut {
        text.push_str(&attached);
    }
    text.push_str(&tail);
    Parts { text, cut }
}

/// How much of a run's summary or error a message shows (UTF-16 units, escaped); the
/// agent's record holds all of it.
const RUN_TEXT_SHOWN: usize = 200;

/// The earlier run of the same agent's tool the approver is told of: it failed, or its
/// report never came. Empty when there is none.
pub(super) fn recalled_note(r: &Question) -> String {
    let Some(c) = &r.recalled else {
        return String::new();
    };
    let at =
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(c.approved_at_ms) * 1_000_000)
            .map(clock)
            .unwrap_or_default();
    let head = format!(
        "\n\n⚠️ <b>The last approved {}</b> ({at}, by {})",
        shown_within(&c.tool, 100).0,
        shown_within(&c.approved_by, 100).0
    );
    match (c.status.as_str(), &c.words) {
        ("failed", Some(words)) => {
            format!("{head} failed: {}", shown_within(words, RUN_TEXT_SHOWN).0)
        }
        ("failed", None) => format!("{head} failed."),
        ("unknown", Some(words)) => format!(
            "{head}: not known whether it ran: {}",
            shown_within(words, RUN_TEXT_SHOWN).0
        ),
        _ => format!("{head} was never reported by the agent: it may have failed."),
    }
}

/// The line under the outcome once the agent reported running the call (or the report
/// is overdue), or `None`.
pub fn run_line(r: &Question) -> Option<String> {
    let run = r.run_report.as_ref()?;
    let words = |t: Option<&str>| match t {
        Some(t) if !t.trim().is_empty() => format!(": {}", shown_within(t, RUN_TEXT_SHOWN).0),
        _ => String::new(),
    };
    Some(match run.status {
        RunStatus::Executed => {
            let took = run
                .duration_ms
                .map(|ms| format!(" in {}", duration_words(ms)))
                .unwrap_or_default();
            format!("🟢 <b>Ran{took}</b>{}", words(run.summary.as_deref()))
        }
        RunStatus::Failed => {
            let after = run
                .duration_ms
                .map(|ms| format!(" (after {})", duration_words(ms)))
                .unwrap_or_default();
            format!("🔴 <b>Failed</b>{}{after}", words(run.words()))
        }
        RunStatus::NotExecuted => {
            format!("⚪ <b>Not run</b>{}", words(run.summary.as_deref()))
        }
        // One head for both unknowns; what follows says whose it is: the reporter's
        // reason, or that no report came.
        RunStatus::Unknown if run.overdue => {
            "🟠 <b>Not known whether it ran</b>: no report from the agent".to_owned()
        }
        RunStatus::Unknown => {
            format!("🟠 <b>Not known whether it ran</b>{}", words(run.words()))
        }
    })
}

/// Room the changes of an edited approval take on its line, in characters.
const CHANGES_SHOWN: usize = 300;

/// "✏️ Approved with changes by Alice at 09:01: amount 1200.5 → 1000": an approval
/// whose call an operator edited (in the console), with the window the edited call
/// opened, if any.
fn edited_line(r: &Question, by: &str, at: &str) -> Option<String> {
    let changes = crate::domain::edit::changes_text(&r.edit_changes()?);
    let (changes, _) = shown_within(&changes, CHANGES_SHOWN);
    let window = match (r.approved_scope(), r.window_until()) {
        (Some(Scope::Window(_)), Some(until)) => format!(
            ". Identical calls of the edited call pass until {}; /revoke {}",
            date_time(until),
            r.id
        ),
        _ => String::new(),
    };
    Some(format!(
        "✏️ <b>Approved with changes by {by}</b> at {at}: {changes}{window}"
    ))
}

/// The line appended when the request ends, or `None` while it is pending.
pub fn decision_line(r: &Question) -> Option<String> {
    let at = r.decided_at.map(clock).unwrap_or_default();
    let by = r
        .decided_by
        .as_ref()
        .map(|op| shown(&op.to_string()))
        .unwrap_or_default();
    if matches!(r.status, Status::Confirmed | Status::Completed)
        && let Some(line) = edited_line(r, &by, &at)
    {
        return Some(line);
    }
    Some(match (r.status, r.via) {
        (Status::Pending, _) => return None,
        (Status::Confirmed, Some(Via::Operator)) => match (r.approved_scope(), r.window_until()) {
            (Some(Scope::Window(seconds)), Some(until)) => format!(
                "✅ <b>Approved by {by} for {}</b> at {at}: identical calls pass until {}. Close it early with /revoke {}",
                window_duration(seconds),
                date_time(until),
                r.id
            ),
            _ if r.window_seconds > 0 => {
                format!("✅ <b>Approved once by {by}</b> at {at}: no window opened")
            }
            _ => format!("✅ <b>Approved by {by}</b> at {at}"),
        },
        (Status::Confirmed, _) => format!("✅ <b>Confirmed</b> at {at}"),
        (Status::Cancelled, Some(Via::Operator)) => match &r.denial_reason {
            Some(reason) => format!(
                "❌ <b>Denied by {by}</b> at {at}: {}",
                shown_within(reason, REASON_SHOWN).0
            ),
            None => format!("❌ <b>Cancelled by {by}</b> at {at}"),
        },
        (Status::Cancelled, Some(Via::Withdrawn)) => "↩ <b>Withdrawn by the agent</b>".to_owned(),
        (Status::Cancelled, _) => {
            let (reason, _) = shown_within(&r.reason, OUTCOME_RESERVE - 60);
            format!("❌ <b>Cancelled</b>: {reason}")
        }
        (Status::Timeout, _) if r.interaction.is_some() => match r.timeout_action {
            Some(action) => format!(
                "⏱ <b>Timed out</b>: nobody answered in time ({} requested)",
                action.as_str()
            ),
            None => "⏱ <b>Timed out</b>: nobody answered in time".to_owned(),
        },
        (Status::Timeout, _) => "⏱ <b>Timed out: not executed</b>".to_owned(),
        (Status::Completed, Some(Via::Timeout)) => format!(
            "⏱ <b>Timed out</b>: the default answer applies: {}",
            summary(r, r.result.as_ref().unwrap_or(&Value::Null))
        ),
        (Status::Completed, _) => {
            let value = r.result.as_ref().unwrap_or(&Value::Null);
            if value.get("conflict") == Some(&Value::Bool(true)) {
                "⚖️ <b>No agreement</b>: the answers differ".to_owned()
            } else {
                // A no (a rejected approval, a cancelled form) is not shown with a tick.
                let no = matches!(
                    (r.kind(), value),
                    (InteractionType::Approval, Value::Bool(false))
                        | (InteractionType::Form, Value::Null)
                );
                let mark = if no { "❌" } else { "✅" };
                let scope = match r.approved_scope() {
                    Some(Scope::Once) if r.window_seconds > 0 => " once".to_owned(),
                    Some(Scope::Window(s)) => format!(" for {}", window_duration(s)),
                    _ => String::new(),
                };
                let why = match &r.denial_reason {
                    Some(reason) => format!(": {}", shown_within(reason, REASON_SHOWN).0),
                    None => String::new(),
                };
                let line = match r.decided_by {
                    Some(_) => format!(
                        "{mark} <b>{}{scope}</b> — {by} at {at}{why}",
                        summary(r, value)
                    ),
                    None => format!("{mark} <b>{}{scope}</b> at {at}{why}", summary(r, value)),
                };
                match crate::domain::grant::granted_by_tap(r) {
                    Some(g) => format!(
                        "{line}\n🔑 <b>Granted</b> until {}: <code>{}</code>, listed in /grants (revoke it there)",
                        date_time(g.expires_at),
                        g.grant_id
                    ),
                    None => line,
                }
            }
        }
    })
}

/// An answer in words, escaped and cut to fit the outcome line.
pub(super) fn summary(r: &Question, value: &Value) -> String {
    let label = |key: &str| {
        r.interaction
            .as_ref()
            .and_then(|i| i.options.iter().find(|o| o.key == key))
            .map_or_else(|| key.to_owned(), |o| o.label.clone())
    };
    let text = match (r.kind(), value) {
        (InteractionType::Approval, Value::Bool(true)) => "Approved".to_owned(),
        (InteractionType::Approval, _) => "Rejected".to_owned(),
        (InteractionType::Form, Value::Null) => "Cancelled".to_owned(),
        (InteractionType::Form, _) => "Approved as shown".to_owned(),
        (_, Value::String(s)) if r.kind() == InteractionType::FreeText => format!("“{s}”"),
        (_, Value::String(key)) => label(key),
        (_, Value::Array(keys)) => keys
            .iter()
            .map(|k| k.as_str().map_or_else(|| k.to_string(), label))
            .collect::<Vec<_>>()
            .join(", "),
        (_, Value::Null) => "no answer".to_owned(),
        (_, other) => other.to_string(),
    };
    shown_within(&text, 200).0
}

/// The message after the request ended: the question, then its outcome.
pub fn decided_text(r: &Question) -> String {
    decided_text_in(r, &View::default())
}

/// [`decided_text`] as one message of it shows it (`view`: its escalation note).
pub(super) fn decided_text_in(r: &Question, view: &View) -> String {
    let mut text = question_text(r);
    text.push_str(&escalation_line(view));
    text.push_str(&sla_line(r, view));
    if let Some(line) = decision_line(r) {
        text.push_str("\n\n");
        text.push_str(&line);
    }
    if let Some(line) = run_line(r) {
        text.push('\n');
        text.push_str(&line);
    }
    text
}

/// A notification (`POST /v1/notifications`): framed as the agent's words, in a quote
/// under its name, so it cannot pose as a question or an outcome of the service.
pub fn notification_text(agent: &str, message: &str) -> String {
    let visible = text::visible(message, Layout::Quoted);
    let (body, omitted) = escape_within(&visible, TELEGRAM_MAX_CHARS - 200);
    let open = if visible.chars().count() > EXPANDABLE_FROM {
        "<blockquote expandable>"
    } else {
        "<blockquote>"
    };
    let mut out = format!(
        "🔔 <i>Message from</i> <code>{}</code>:{}\n{open}{body}</blockquote>",
        shown(agent),
        flag(message)
    );
    if omitted > 0 {
        out.push_str(&cut_note(omitted, "the message"));
    }
    out
}
