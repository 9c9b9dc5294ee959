//! What operators see: the question's text (HTML parse mode), its buttons, and the line
//! that records the outcome.
//!
//! Everything that came from an agent is escaped, so `<b>` in a parameter shows as `<b>`.
//! Telegram refuses messages over 4096 characters, so every variable part has a budget
//! and is cut with a visible note saying how much was left out: an operator must never
//! approve a call believing they saw all of it when they did not.

use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use teloxide::utils::html::escape;
use time::OffsetDateTime;

use crate::domain::confirmation::{Confirmation, Status, Via};
use crate::domain::ids::CallbackToken;
use crate::domain::pyjson;
use crate::service::TapAction;

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
        (Status::Timeout, _) => "⏱ <b>Timed out: not executed</b>".to_owned(),
    })
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

/// `a:<token>` or `c:<token>`: 34 bytes, within Telegram's 64, and nothing in it says
/// anything about the call.
pub fn callback_data(action: TapAction, token: &CallbackToken) -> String {
    let tag = match action {
        TapAction::Approve => 'a',
        TapAction::Cancel => 'c',
    };
    format!("{tag}:{}", token.as_str())
}

/// Parses callback data from a tap; `None` for anything we did not produce.
pub fn parse_callback_data(data: &str) -> Option<(TapAction, CallbackToken)> {
    let (tag, token) = data.split_once(':')?;
    let action = match tag {
        "a" => TapAction::Approve,
        "c" => TapAction::Cancel,
        _ => return None,
    };
    Some((action, CallbackToken::parse(token).ok()?))
}

pub const APPROVE_LABEL: &str = "✅ Approve";
pub const CANCEL_LABEL: &str = "❌ Cancel";

pub fn keyboard(token: &CallbackToken) -> InlineKeyboardMarkup {
    InlineKeyboardMarkup::new(vec![vec![
        InlineKeyboardButton::callback(APPROVE_LABEL, callback_data(TapAction::Approve, token)),
        InlineKeyboardButton::callback(CANCEL_LABEL, callback_data(TapAction::Cancel, token)),
    ]])
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
