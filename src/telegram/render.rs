//! What operators see: the question's text (HTML parse mode), its buttons, and the line
//! that records the outcome.
//!
//! Everything that came from an agent is escaped, so `<b>` in a parameter shows as `<b>`.
//! Telegram refuses messages over 4096 characters, so every variable part has a budget
//! and is cut with a visible note saying how much was left out: an operator must never
//! approve a call believing they saw all of it when they did not.

use serde_json::Value;
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use teloxide::utils::html::escape;
use time::OffsetDateTime;

use crate::domain::confirmation::{Confirmation, Status, Via};
use crate::domain::ids::CallbackToken;
use crate::domain::interaction::{Interaction, InteractionType, Severity};
use crate::domain::pyjson;
use crate::service::{TapAction, View};

/// Telegram's limit on a message's text.
pub const TELEGRAM_MAX_CHARS: usize = 4096;
/// Room kept free for the outcome line appended when the request ends.
const OUTCOME_RESERVE: usize = 300;
const BRIEFING_BUDGET: usize = 1200;
const CONTEXT_BUDGET: usize = 800;

/// Telegram counts message length in UTF-16 code units.
fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Escapes `s`, keeping at most `budget` UTF-16 units of escaped output; returns the text
/// and how many characters were left out.
fn escape_within(s: &str, budget: usize) -> (String, usize) {
    let mut out = String::new();
    let mut used = 0;
    for (i, c) in s.char_indices() {
        let piece = escape(c.encode_utf8(&mut [0u8; 4]));
        let n = units(&piece);
        if used + n > budget {
            return (out, s[i..].chars().count());
        }
        used += n;
        out.push_str(&piece);
    }
    (out, 0)
}

fn cut_note(omitted: usize, what: &str) -> String {
    format!("\n✂️ <i>{omitted} more characters of {what} not shown.</i>")
}

fn clock(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[hour]:[minute]:[second] UTC");
    t.format(&f).unwrap_or_default()
}

fn date_time(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    t.format(&f).unwrap_or_default()
}

/// The question as first posted. Deterministic for a given record, so the outcome edit
/// can rebuild it and append one line.
pub fn question_text(r: &Confirmation) -> String {
    let mut head = format!(
        "🛂 <b>Confirmation required</b>\n🔧 Tool: <code>{}</code>\n🤖 Agent: <code>{}</code>\n👤 Owner: <code>{}</code>\n\n",
        escape(r.tool.as_str()),
        escape(&r.agent),
        escape(r.owner_id.as_str()),
    );
    let (briefing, omitted) = escape_within(&r.briefing, BRIEFING_BUDGET);
    head.push_str(&briefing);
    if omitted > 0 {
        head.push_str(&cut_note(omitted, "the briefing"));
    }
    if let Some(context) = r.context.as_deref().filter(|c| !c.trim().is_empty()) {
        let (context, omitted) = escape_within(context, CONTEXT_BUDGET);
        head.push_str("\n\n📝 ");
        head.push_str(&context);
        if omitted > 0 {
            head.push_str(&cut_note(omitted, "context"));
        }
    }
    if r.allow_edit {
        head.push_str(
            "\n\n✏️ <i>Editing is not available in Telegram: this call can only be approved or cancelled exactly as shown.</i>",
        );
    }
    head.push_str("\n\n<b>Parameters</b>\n<pre>");
    let deadline = format!("\n\n⏳ Deadline: {}", date_time(r.expires_at));

    // The parameters get whatever room is left, less space for a cut note.
    let pretty = pyjson::parse(&r.params_json)
        .map(|v| pyjson::to_pretty_json(&v))
        .unwrap_or_else(|_| r.params_json.clone());
    let fixed = units(&head) + units("</pre>") + units(&deadline) + OUTCOME_RESERVE;
    let full = escape(&pretty);
    let mut text = head;
    if fixed + units(&full) <= TELEGRAM_MAX_CHARS {
        text.push_str(&full);
        text.push_str("</pre>");
    } else {
        let note_room = units(&cut_note(usize::MAX, "parameters"));
        let budget = TELEGRAM_MAX_CHARS.saturating_sub(fixed + note_room);
        let (shown, omitted) = escape_within(&pretty, budget);
        text.push_str(&shown);
        text.push_str("</pre>");
        text.push_str(&cut_note(omitted, "parameters"));
    }
    text.push_str(&deadline);
    text
}

/// The line appended when the request ends, or `None` while it is pending.
pub fn outcome_line(r: &Confirmation) -> Option<String> {
    let at = r.decided_at.map(clock).unwrap_or_default();
    let by = r
        .decided_by
        .as_ref()
        .map(|op| escape(&op.to_string()))
        .unwrap_or_default();
    Some(match (r.status, r.via) {
        (Status::Pending, _) => return None,
        (Status::Confirmed, Some(Via::Operator)) => format!("✅ <b>Approved by {by}</b> at {at}"),
        (Status::Confirmed, _) => format!("✅ <b>Confirmed</b> at {at}"),
        (Status::Cancelled, Some(Via::Operator)) => format!("❌ <b>Cancelled by {by}</b> at {at}"),
        (Status::Cancelled, Some(Via::Withdrawn)) => "↩ <b>Withdrawn by the agent</b>".to_owned(),
        (Status::Cancelled, _) => {
            let (reason, _) = escape_within(&r.reason, OUTCOME_RESERVE - 40);
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
                match r.decided_by {
                    Some(_) => format!("{mark} <b>{}</b> — {by} at {at}", summary(r, value)),
                    None => format!("{mark} <b>{}</b> at {at}", summary(r, value)),
                }
            }
        }
    })
}

/// An answer in words, escaped and cut to fit the outcome line.
fn summary(r: &Confirmation, value: &Value) -> String {
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
    escape_within(&text, 200).0
}

/// The message after the request ended: the question, then its outcome.
pub fn decided_text(r: &Confirmation) -> String {
    let mut text = question_text(r);
    if let Some(line) = outcome_line(r) {
        text.push_str("\n\n");
        text.push_str(&line);
    }
    text
}

/// `a:<token>`, `c:<token>`, `d:<token>`, `o:<token>:<n>` or `t:<token>:<n>`: at most
/// 38 bytes, within Telegram's 64, and nothing in it says anything about the question.
pub fn callback_data(action: TapAction, token: &CallbackToken) -> String {
    let token = token.as_str();
    match action {
        TapAction::Approve => format!("a:{token}"),
        TapAction::Cancel => format!("c:{token}"),
        TapAction::Done => format!("d:{token}"),
        TapAction::Choose(n) => format!("o:{token}:{n}"),
        TapAction::Toggle(n) => format!("t:{token}:{n}"),
    }
}

/// Parses callback data from a tap; `None` for anything we did not produce.
pub fn parse_callback_data(data: &str) -> Option<(TapAction, CallbackToken)> {
    let (tag, rest) = data.split_once(':')?;
    let option = |rest: &str| -> Option<(u8, CallbackToken)> {
        let (token, n) = rest.split_once(':')?;
        // Only the canonical decimal form: "07" or "+7" were not produced here.
        let n: u8 = n.parse().ok().filter(|v: &u8| v.to_string() == n)?;
        Some((n, CallbackToken::parse(token).ok()?))
    };
    let (action, token) = match tag {
        "a" => (TapAction::Approve, CallbackToken::parse(rest).ok()?),
        "c" => (TapAction::Cancel, CallbackToken::parse(rest).ok()?),
        "d" => (TapAction::Done, CallbackToken::parse(rest).ok()?),
        "o" => option(rest).map(|(n, t)| (TapAction::Choose(n), t))?,
        "t" => option(rest).map(|(n, t)| (TapAction::Toggle(n), t))?,
        _ => return None,
    };
    Some((action, token))
}

pub const APPROVE_LABEL: &str = "✅ Approve";
pub const CANCEL_LABEL: &str = "❌ Cancel";

pub const REJECT_LABEL: &str = "❌ Reject";
pub const DONE_LABEL: &str = "✔️ Done";

pub fn keyboard(token: &CallbackToken) -> InlineKeyboardMarkup {
    approve_keyboard(token, CANCEL_LABEL)
}

fn approve_keyboard(token: &CallbackToken, no: &str) -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new(vec![vec![
        InlineKeyboardButton::callback(APPROVE_LABEL, callback_data(TapAction::Approve, token)),
        InlineKeyboardButton::callback(no, callback_data(TapAction::Cancel, token)),
    ]])
}

/// What goes under a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Markup {
    Keyboard(InlineKeyboardMarkup),
    /// A free-text question: the client opens a reply to the message.
    ForceReply,
    /// The question ended: no buttons.
    None,
}

/// The message of a question as it stands: its text and what goes under it.
pub fn render(r: &Confirmation, view: &View) -> (String, Markup) {
    let Some(i) = r.interaction.as_deref() else {
        let markup = if r.is_terminal() {
            Markup::None
        } else {
            Markup::Keyboard(keyboard(&r.callback_token))
        };
        return (decided_text(r), markup);
    };
    let mut text = interaction_text(r, i, view);
    if let Some(line) = outcome_line(r) {
        text.push_str("\n\n");
        text.push_str(&line);
        return (text, Markup::None);
    }
    let token = &r.callback_token;
    let markup = match i.kind {
        InteractionType::Approval => Markup::Keyboard(approve_keyboard(token, REJECT_LABEL)),
        InteractionType::Form => Markup::Keyboard(approve_keyboard(token, CANCEL_LABEL)),
        InteractionType::FreeText => Markup::ForceReply,
        InteractionType::SingleChoice | InteractionType::Poll => {
            let buttons = i
                .options
                .iter()
                .enumerate()
                .map(|(n, o)| {
                    InlineKeyboardButton::callback(
                        o.label.clone(),
                        callback_data(TapAction::Choose(n as u8), token),
                    )
                })
                .collect();
            Markup::Keyboard(InlineKeyboardMarkup::new(rows(i, buttons)))
        }
        InteractionType::MultiChoice => {
            let mut rows: Vec<Vec<InlineKeyboardButton>> = i
                .options
                .iter()
                .enumerate()
                .map(|(n, o)| {
                    let mark = if view.selection.contains(&o.key) {
                        "☑"
                    } else {
                        "☐"
                    };
                    vec![InlineKeyboardButton::callback(
                        format!("{mark} {}", o.label),
                        callback_data(TapAction::Toggle(n as u8), token),
                    )]
                })
                .collect();
            rows.push(vec![InlineKeyboardButton::callback(
                DONE_LABEL,
                callback_data(TapAction::Done, token),
            )]);
            Markup::Keyboard(InlineKeyboardMarkup::new(rows))
        }
    };
    (text, markup)
}

/// Option buttons in rows that fit a phone: three short labels, two medium, else one.
fn rows(i: &Interaction, buttons: Vec<InlineKeyboardButton>) -> Vec<Vec<InlineKeyboardButton>> {
    let longest = i
        .options
        .iter()
        .map(|o| o.label.chars().count())
        .max()
        .unwrap_or(0);
    let per_row = match longest {
        0..=10 => 3,
        11..=20 => 2,
        _ => 1,
    };
    buttons.chunks(per_row).map(<[_]>::to_vec).collect()
}

/// The text of an interaction: question, context, options, progress and deadline.
fn interaction_text(r: &Confirmation, i: &Interaction, view: &View) -> String {
    let badge = match i.severity {
        Severity::Critical => "🚨 ",
        Severity::High => "⚠️ ",
        Severity::Low | Severity::Normal => "",
    };
    let (question, omitted) = escape_within(&i.question, BRIEFING_BUDGET);
    let mut text = format!("{badge}❓ <b>{question}</b>");
    if omitted > 0 {
        text.push_str(&cut_note(omitted, "the question"));
    }
    if let Some(context) = i.context.as_deref().filter(|c| !c.trim().is_empty()) {
        let (context, omitted) = escape_within(context, CONTEXT_BUDGET);
        text.push_str("\n\n📝 ");
        text.push_str(&context);
        if omitted > 0 {
            text.push_str(&cut_note(omitted, "context"));
        }
    }
    let from = i.source_agent.as_deref().unwrap_or(&r.agent);
    text.push_str(&format!(
        "\n\n🤖 From: <code>{}</code>",
        escape_within(from, 200).0
    ));
    match i.kind {
        InteractionType::SingleChoice | InteractionType::MultiChoice | InteractionType::Poll => {
            let described: Vec<String> = i
                .options
                .iter()
                .filter_map(|o| {
                    let d = o.description.as_deref()?;
                    Some(format!(
                        "• <b>{}</b>: {}",
                        escape_within(&o.label, 100).0,
                        escape_within(d, 200).0
                    ))
                })
                .collect();
            if !described.is_empty() {
                text.push_str("\n\n");
                text.push_str(&described.join("\n"));
            }
            if i.kind == InteractionType::MultiChoice {
                text.push_str("\n\n☑ <i>Tick every option that applies, then tap Done.</i>");
            }
        }
        InteractionType::FreeText => {
            text.push_str("\n\n💬 <i>Reply to this message with your answer.</i>");
        }
        InteractionType::Form => {
            let values = Value::Object(i.form_values.clone());
            let pretty = serde_json::to_string_pretty(&values).unwrap_or_default();
            let (shown, omitted) = escape_within(&pretty, 1500);
            text.push_str("\n\n<b>Values</b>\n<pre>");
            text.push_str(&shown);
            text.push_str("</pre>");
            if omitted > 0 {
                text.push_str(&cut_note(omitted, "values"));
            }
            text.push_str(
                "\n✏️ <i>Editing is not available in Telegram: Approve answers with the values shown; Cancel answers with none.</i>",
            );
        }
        InteractionType::Approval => {}
    }
    if view.expected > 1 || !r.answers.is_empty() {
        let people = r.answers.iter().filter(|a| !a.is_default).count();
        if view.expected > 1 {
            text.push_str(&format!("\n\n👥 {people} of {} answered", view.expected));
        }
        if i.kind == InteractionType::Poll && view.group && people > 0 {
            text.push_str("\n📊 ");
            let tally: Vec<String> = i
                .options
                .iter()
                .map(|o| {
                    let n = r
                        .answers
                        .iter()
                        .filter(|a| a.value.as_str() == Some(o.key.as_str()))
                        .count();
                    format!("{}: {n}", escape_within(&o.label, 60).0)
                })
                .collect();
            text.push_str(&tally.join(" · "));
        }
    }
    text.push_str(&format!("\n\n⏳ Deadline: {}", date_time(r.expires_at)));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::args_hash::ArgsHash;
    use crate::domain::confirmation::{Operator, PENDING_REASON};
    use crate::domain::ids::{ConfirmationId, OwnerId, ToolName};

    fn record(params_json: &str) -> Confirmation {
        let params = pyjson::parse_object(params_json).unwrap();
        let t = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        Confirmation {
            id: ConfirmationId::generate(),
            agent: "bot".into(),
            route: "ops".into(),
            chat_id: -100,
            tool: ToolName::parse("deploy").unwrap(),
            owner_id: OwnerId::anonymous(),
            args_hash: ArgsHash::of(&params),
            params_json: params_json.into(),
            briefing: "Deploy <b>now</b> & then".into(),
            context: Some("</pre> context".into()),
            allow_edit: false,
            window_seconds: 0,
            idempotency_key: None,
            callback_token: CallbackToken::generate(),
            callback_url: None,
            message_id: None,
            status: Status::Pending,
            via: None,
            reason: PENDING_REASON.into(),
            decided_by: None,
            created_at: t,
            expires_at: t + time::Duration::minutes(2),
            decided_at: None,
            interaction: None,
            result: None,
            timeout_action: None,
            answers: Vec::new(),
            copies: Vec::new(),
        }
    }

    #[test]
    fn agent_text_is_escaped_and_shown_literally() {
        let text = question_text(&record(r#"{"html": "<b>x</b> &amp;"}"#));
        assert!(
            text.contains("Deploy &lt;b&gt;now&lt;/b&gt; &amp; then"),
            "{text}"
        );
        assert!(text.contains("&lt;/pre&gt; context"), "{text}");
        assert!(text.contains("&lt;b&gt;x&lt;/b&gt; &amp;amp;"), "{text}");
    }

    #[test]
    fn huge_parameters_are_cut_with_a_note_and_the_decided_message_fits() {
        let big = format!(r#"{{"blob": "{}"}}"#, "<&>".repeat(5000));
        let mut r = record(&big);
        let text = question_text(&r);
        assert!(
            units(&text) <= TELEGRAM_MAX_CHARS - OUTCOME_RESERVE,
            "{}",
            units(&text)
        );
        assert!(
            text.contains("more characters of parameters not shown"),
            "{text}"
        );
        r.status = Status::Confirmed;
        r.via = Some(Via::Operator);
        r.decided_at = Some(r.created_at);
        r.decided_by = Some(Operator {
            id: 1,
            username: Some("a".repeat(32)),
            name: "n".repeat(128),
        });
        assert!(units(&decided_text(&r)) <= TELEGRAM_MAX_CHARS);
    }

    #[test]
    fn option_callback_data_round_trips_and_refuses_non_canonical_numbers() {
        let t = CallbackToken::generate();
        for action in [TapAction::Choose(0), TapAction::Toggle(49), TapAction::Done] {
            let d = callback_data(action, &t);
            assert!(d.len() <= 64, "{d}");
            assert_eq!(parse_callback_data(&d), Some((action, t.clone())));
        }
        let token = t.as_str();
        for bad in [
            format!("o:{token}"),
            format!("o:{token}:07"),
            format!("o:{token}:+7"),
            format!("o:{token}:256"),
            format!("t:{token}:-1"),
            format!("d:{token}:1"),
        ] {
            assert!(parse_callback_data(&bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn callback_data_round_trips_and_fits_telegram() {
        let t = CallbackToken::generate();
        let d = callback_data(TapAction::Approve, &t);
        assert!(d.len() <= 64);
        assert_eq!(
            parse_callback_data(&d),
            Some((TapAction::Approve, t.clone()))
        );
        assert_eq!(
            parse_callback_data(&callback_data(TapAction::Cancel, &t)).map(|p| p.0),
            Some(TapAction::Cancel)
        );
        for bad in [
            "",
            "a",
            "x:abc",
            "a:",
            "a:zz",
            "a:0123456789abcdef0123456789abcdeF",
        ] {
            assert!(parse_callback_data(bad).is_none(), "{bad}");
        }
    }
}
