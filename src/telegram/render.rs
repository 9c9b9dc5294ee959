//! What operators see: the question's text (HTML parse mode), its buttons, and the line
//! that records the outcome.
//!
//! What is shown is what is there. Everything that came from an agent is HTML-escaped
//! (`<b>` shows as `<b>`), and every invisible or layout-changing character in it is
//! shown as a visible escape (`\u202e`; see [`crate::domain::text`]); words that mix
//! scripts are flagged with ⚠️. The agent's own words (its briefing, context, question)
//! sit in quote blocks under a label, so nothing in them can pose as a line of the
//! service's own layout.
//!
//! Nothing is hidden by length. Telegram refuses messages over 4096 characters, so long
//! parameter values are cut one by one, each with its length and a short hash, keeping
//! every key and every short value in sight; whenever anything is cut, the full
//! parameters go along as a file replying to the question ([`attachment`]), and the
//! message says so and names the argument hash.

use serde_json::Value;
use sha2::{Digest, Sha256};
use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use teloxide::utils::html::escape;
use time::OffsetDateTime;

use crate::domain::confirmation::{Confirmation, Status, Via, operator_time as date_time};
use crate::domain::ids::CallbackToken;
use crate::domain::interaction::{
    ConsensusMode, Interaction, InteractionType, Scope, Severity, TimeoutAction,
};
use crate::domain::python;
use crate::domain::python::value::PyValue;
use crate::domain::text::{self, Layout};
use crate::service::{TapAction, View};

/// Telegram's limit on a message's text.
pub const TELEGRAM_MAX_CHARS: usize = 4096;
/// Room kept free for the outcome line appended when the request ends (and the
/// escalation note).
const OUTCOME_RESERVE: usize = 700;
/// The most of an operator's reason the outcome line shows (UTF-16 units, escaped);
/// the agent gets all of it.
const REASON_SHOWN: usize = 280;
const BRIEFING_BUDGET: usize = 1200;
const CONTEXT_BUDGET: usize = 800;
/// Longer agent texts go in an expandable quote: the message stays readable on a
/// phone, and a tap shows the rest.
const EXPANDABLE_FROM: usize = 400;
/// The widest a parameter value is shown before it is cut; narrower caps are tried in
/// turn until every key fits.
const VALUE_CAPS: [usize; 5] = [200, 80, 32, 12, 0];

/// Telegram counts message length in UTF-16 code units.
fn units(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Agent text for one line of our layout: invisible characters as escapes, then HTML.
fn shown(s: &str) -> String {
    escape(&text::visible(s, Layout::Line))
}

/// A ⚠️ after a value whose words mix scripts (a Cyrillic `а` in a Latin word).
fn flag(s: &str) -> &'static str {
    if text::mixes_scripts(s) {
        " ⚠️ <i>mixed scripts</i>"
    } else {
        ""
    }
}

/// Escapes `s`, keeping at most `budget` UTF-16 units of escaped output; returns the text
/// and how many characters were left out. `s` is already made visible.
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

/// [`shown`] within a budget (see [`escape_within`]).
fn shown_within(s: &str, budget: usize) -> (String, usize) {
    escape_within(&text::visible(s, Layout::Line), budget)
}

fn cut_note(omitted: usize, what: &str) -> String {
    format!("\n✂️ <i>{omitted} more characters of {what} not shown.</i>")
}

/// The agent's own words, in a quote block under `label`: plain newlines stay inside
/// the block, everything else invisible is escaped, and a long text is cut with a note
/// (the flag says so).
fn quoted(label: &str, s: &str, budget: usize, what: &str) -> (String, bool) {
    let visible = text::visible(s, Layout::Quoted);
    let (body, omitted) = escape_within(&visible, budget);
    let open = if visible.chars().count() > EXPANDABLE_FROM || visible.lines().count() > 6 {
        "<blockquote expandable>"
    } else {
        "<blockquote>"
    };
    let mut out = format!("{label}{}\n{open}{body}</blockquote>", flag(s));
    if omitted > 0 {
        out.push_str(&cut_note(omitted, what));
    }
    (out, omitted > 0)
}

fn clock(t: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[hour]:[minute]:[second] UTC");
    t.format(&f).unwrap_or_default()
}

/// "10 min", "2 h", "1 day 6 h": a window's length as an operator reads it.
pub fn window_duration(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
        seconds % 60,
    );
    let mut parts = Vec::new();
    if d > 0 {
        parts.push(format!("{d} day{}", if d == 1 { "" } else { "s" }));
    }
    if h > 0 {
        parts.push(format!("{h} h"));
    }
    if m > 0 {
        parts.push(format!("{m} min"));
    }
    if s > 0 || parts.is_empty() {
        parts.push(format!("{s} s"));
    }
    parts.join(" ")
}

/// The label of the button that approves with the window.
pub fn approve_for_label(seconds: u64) -> String {
    format!("✅ Approve for {}", window_duration(seconds))
}

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
fn params_block(params_json: &str, budget: usize) -> (String, bool) {
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
pub fn attachment(r: &Confirmation) -> Option<Attachment> {
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

/// The agent's context, quoted under its label; nothing when there is none.
fn context_block(context: Option<&str>) -> String {
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
fn attached_note(r: &Confirmation) -> String {
    format!(
        "\n📎 <i>Long values are shortened (each with its length and hash). The full parameters are attached below as a file.</i>\n🔑 Args hash: <code>{}</code>",
        r.args_hash
    )
}

/// The question's text and whether anything in it was cut.
struct Parts {
    text: String,
    cut: bool,
}

/// The question as first posted. Deterministic for a given record, so the outcome edit
/// can rebuild it and append one line.
pub fn question_text(r: &Confirmation) -> String {
    question_parts(r).text
}

/// The window disclosure: what Approve also allows, with the duration and the latest
/// absolute end time (a window runs from the tap, and the tap comes before the deadline).
fn window_disclosure(r: &Confirmation) -> String {
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

fn question_parts(r: &Confirmation) -> Parts {
    let mut head = format!(
        "🛂 <b>Confirmation required</b>\n🔧 Tool: <code>{}</code>{}\n🤖 Agent: <code>{}</code>{}\n👤 Owner: <code>{}</code>{}\n\n",
        shown(r.tool.as_str()),
        flag(r.tool.as_str()),
        shown(&r.agent),
        flag(&r.agent),
        shown(r.owner_id.as_str()),
        flag(r.owner_id.as_str()),
    );
    let (briefing, briefing_cut) = quoted(
        "💬 <i>The agent describes the call:</i>",
        &r.briefing,
        BRIEFING_BUDGET,
        "the briefing",
    );
    head.push_str(&briefing);
    head.push_str(&context_block(r.context.as_deref()));
    if r.allow_edit {
        head.push_str(
            "\n\n✏️ <i>Editing is not available in Telegram: this call can only be approved or cancelled exactly as shown.</i>",
        );
    }
    head.push_str("\n\n<b>Parameters</b>\n");
    let mut tail = window_disclosure(r);
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

/// The line appended when the request ends, or `None` while it is pending.
pub fn outcome_line(r: &Confirmation) -> Option<String> {
    let at = r.decided_at.map(clock).unwrap_or_default();
    let by = r
        .decided_by
        .as_ref()
        .map(|op| shown(&op.to_string()))
        .unwrap_or_default();
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
                match r.decided_by {
                    Some(_) => format!(
                        "{mark} <b>{}{scope}</b> — {by} at {at}{why}",
                        summary(r, value)
                    ),
                    None => format!("{mark} <b>{}{scope}</b> at {at}{why}", summary(r, value)),
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
    shown_within(&text, 200).0
}

/// The message after the request ended: the question, then its outcome.
pub fn decided_text(r: &Confirmation) -> String {
    decided_text_in(r, &View::default())
}

/// [`decided_text`] as one message of it shows it (`view`: its escalation note).
fn decided_text_in(r: &Confirmation, view: &View) -> String {
    let mut text = question_text(r);
    text.push_str(&escalation_line(view));
    if let Some(line) = outcome_line(r) {
        text.push_str("\n\n");
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

/// `a:<token>`, `w:<token>`, `c:<token>`, `d:<token>`, `o:<token>:<n>` or
/// `t:<token>:<n>`: at most 38 bytes, within Telegram's 64, and nothing in it says
/// anything about the question.
pub fn callback_data(action: TapAction, token: &CallbackToken) -> String {
    let token = token.as_str();
    match action {
        TapAction::Approve => format!("a:{token}"),
        TapAction::ApproveWindow => format!("w:{token}"),
        TapAction::Cancel => format!("c:{token}"),
        TapAction::DenyWithReason => format!("r:{token}"),
        TapAction::Extend => format!("x:{token}"),
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
        "w" => (TapAction::ApproveWindow, CallbackToken::parse(rest).ok()?),
        "c" => (TapAction::Cancel, CallbackToken::parse(rest).ok()?),
        "r" => (TapAction::DenyWithReason, CallbackToken::parse(rest).ok()?),
        "x" => (TapAction::Extend, CallbackToken::parse(rest).ok()?),
        "d" => (TapAction::Done, CallbackToken::parse(rest).ok()?),
        "o" => option(rest).map(|(n, t)| (TapAction::Choose(n), t))?,
        "t" => option(rest).map(|(n, t)| (TapAction::Toggle(n), t))?,
        _ => return None,
    };
    Some((action, token))
}

pub const APPROVE_LABEL: &str = "✅ Approve";
pub const APPROVE_ONCE_LABEL: &str = "✅ Approve once";
pub const CANCEL_LABEL: &str = "❌ Cancel";
pub const DENY_WITH_REASON_LABEL: &str = "✋ Deny with reason";

pub const REJECT_LABEL: &str = "❌ Reject";
pub const DONE_LABEL: &str = "✔️ Done";

/// Approve and `no` (Cancel or Reject), "Deny with reason" beside the no, and "+N min"
/// when the route offers more time. A question that offers a window has two approve
/// buttons, so the scope is the operator's explicit choice: "Approve once" beside
/// "Approve for 10 min", with the refusals on a row of their own.
fn approve_keyboard(
    token: &CallbackToken,
    no: &str,
    window_seconds: u64,
    view: &View,
) -> InlineKeyboardMarkup {
    let no = InlineKeyboardButton::callback(no, callback_data(TapAction::Cancel, token));
    let deny = InlineKeyboardButton::callback(
        DENY_WITH_REASON_LABEL,
        callback_data(TapAction::DenyWithReason, token),
    );
    let mut rows = if window_seconds == 0 {
        vec![
            vec![
                InlineKeyboardButton::callback(
                    APPROVE_LABEL,
                    callback_data(TapAction::Approve, token),
                ),
                no,
            ],
            vec![deny],
        ]
    } else {
        vec![
            vec![
                InlineKeyboardButton::callback(
                    APPROVE_ONCE_LABEL,
                    callback_data(TapAction::Approve, token),
                ),
                InlineKeyboardButton::callback(
                    approve_for_label(window_seconds),
                    callback_data(TapAction::ApproveWindow, token),
                ),
            ],
            vec![no, deny],
        ]
    };
    if let Some(seconds) = view.extend_seconds {
        rows.push(vec![InlineKeyboardButton::callback(
            extend_label(seconds),
            callback_data(TapAction::Extend, token),
        )]);
    }
    InlineKeyboardMarkup::new(rows)
}

/// The label of the button that moves the deadline.
pub fn extend_label(seconds: u64) -> String {
    format!("⏳ +{}", window_duration(seconds))
}

/// A mention Telegram notifies: a link to the user by id, with their name.
fn mention(user_id: u64, name: &str) -> String {
    format!(
        "<a href=\"tg://user?id={user_id}\">{}</a>",
        shown_within(name, 64).0
    )
}

/// The question in a few words, for the messages that reply to it.
fn what(r: &Confirmation) -> String {
    match r.interaction.as_deref() {
        Some(i) if !r.has_call => format!("“{}”", shown_within(&i.question, 120).0),
        _ => format!("<code>{}</code>", shown_within(r.tool.as_str(), 120).0),
    }
}

/// The message that asks the person who tapped "Deny with reason" for it.
pub fn reason_prompt_text(r: &Confirmation, user_id: u64, name: &str) -> String {
    format!(
        "✋ {}, why deny {} (<code>{}</code>)? <b>Reply to this message</b> with your reason by {}. The agent receives it; until it is in, the request stays open and anyone may still decide.",
        mention(user_id, name),
        what(r),
        r.id,
        date_time(r.expires_at)
    )
}

/// The reminder of a question still pending, naming who has not answered.
pub fn reminder_text(r: &Confirmation, waiting: &[crate::service::Mention]) -> String {
    let mut text = format!(
        "⏰ <b>Still waiting for a decision</b> on {} from <code>{}</code>. Deadline: {}.",
        what(r),
        shown_within(&r.agent, 64).0,
        date_time(r.expires_at)
    );
    if !waiting.is_empty() {
        let shown: Vec<String> = waiting
            .iter()
            .take(crate::service::MAX_MENTIONS)
            .map(|m| {
                // Unnamed only when neither `[people]` nor Telegram could name them.
                let name = m.name.clone().unwrap_or_else(|| m.user_id.to_string());
                mention(m.user_id, &name)
            })
            .collect();
        text.push_str("\n👥 ");
        text.push_str(&shown.join(", "));
        let more = waiting.len().saturating_sub(crate::service::MAX_MENTIONS);
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
    }
    text
}

/// Where the question was escalated, on each of its messages.
fn escalation_line(view: &View) -> String {
    match &view.escalation {
        Some(e) if e.here => format!(
            "\n\n⤴️ <b>Escalated</b> from route <code>{}</code> at {}: nobody there decided in time.",
            shown_within(&e.from_route, 64).0,
            clock(e.at)
        ),
        Some(e) => format!(
            "\n\n⤴️ <b>Escalated</b> to route <code>{}</code> at {}: a decision there counts here too.",
            shown_within(&e.to_route, 64).0,
            clock(e.at)
        ),
        None => String::new(),
    }
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
            Markup::Keyboard(approve_keyboard(
                &r.callback_token,
                CANCEL_LABEL,
                r.window_seconds,
                view,
            ))
        };
        return (decided_text_in(r, view), markup);
    };
    let mut text = interaction_text(r, i, view);
    if let Some(line) = outcome_line(r) {
        text.push_str("\n\n");
        text.push_str(&line);
        return (text, Markup::None);
    }
    let token = &r.callback_token;
    // Only a call's approval offers the window: AI-Parrot's guard records it.
    let window = if r.has_call { r.window_seconds } else { 0 };
    let markup = match i.kind {
        InteractionType::Approval => {
            Markup::Keyboard(approve_keyboard(token, REJECT_LABEL, window, view))
        }
        InteractionType::Form => Markup::Keyboard(approve_keyboard(token, CANCEL_LABEL, 0, view)),
        InteractionType::FreeText => Markup::ForceReply,
        InteractionType::SingleChoice | InteractionType::Poll => {
            let buttons = i
                .options
                .iter()
                .enumerate()
                .map(|(n, o)| {
                    InlineKeyboardButton::callback(
                        button_label(&o.label),
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
                        format!("{mark} {}", button_label(&o.label)),
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

/// An option's label on a button (plain text, no HTML): invisible characters as escapes,
/// and a ⚠ in front when its words mix scripts.
fn button_label(label: &str) -> String {
    let shown = text::visible(label, Layout::Line);
    if text::mixes_scripts(label) {
        format!("⚠ {shown}")
    } else {
        shown
    }
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

/// What happens when nobody answers by the deadline, when that is not simply "nothing":
/// silence must never be a hidden yes.
fn timeout_disclosure(r: &Confirmation, i: &Interaction) -> String {
    let deadline = date_time(r.expires_at);
    match i.timeout_action {
        TimeoutAction::Default => {
            let value = &i.default_response;
            let approves = match (i.kind, value) {
                (InteractionType::Approval, Value::Bool(b)) => *b,
                (InteractionType::Approval, _) => false,
                // A form's default is its values: silence approves them.
                (InteractionType::Form, v) => !v.is_null(),
                _ => false,
            };
            let shown_value = match (i.kind, value) {
                (InteractionType::Approval, Value::Bool(true)) => "Approve".to_owned(),
                (InteractionType::Approval, _) => "Reject".to_owned(),
                _ => summary(r, value),
            };
            let warn = if approves { "⚠️ " } else { "" };
            format!(
                "\n\n{warn}<b>If nobody answers by {deadline}: {shown_value}</b>{}",
                if approves { " (silence approves)" } else { "" }
            )
        }
        TimeoutAction::Escalate => {
            format!("\n\n<i>If nobody answers by {deadline}, the agent escalates.</i>")
        }
        TimeoutAction::Retry => {
            format!("\n\n<i>If nobody answers by {deadline}, the agent asks again.</i>")
        }
        TimeoutAction::Cancel => String::new(),
    }
}

/// The call an interaction carries, shown as a confirmation shows it: tool, owner,
/// every parameter and the window disclosure. Returns the block and whether it cut
/// anything (then the file goes along).
fn call_block(r: &Confirmation, budget: usize) -> (String, bool) {
    let mut out = format!(
        "\n\n🔧 Tool: <code>{}</code>{}\n👤 Owner: <code>{}</code>{}\n<b>Parameters</b>\n",
        shown(r.tool.as_str()),
        flag(r.tool.as_str()),
        shown(r.owner_id.as_str()),
        flag(r.owner_id.as_str()),
    );
    let attached = attached_note(r);
    let disclosure = if r.interaction.as_ref().map(|i| i.kind) == Some(InteractionType::Approval) {
        window_disclosure(r)
    } else {
        String::new()
    };
    let room = budget.saturating_sub(units(&out) + units(&attached) + units(&disclosure));
    let (block, cut) = params_block(&r.params_json, room);
    out.push_str(&block);
    if cut {
        out.push_str(&attached);
    }
    out.push_str(&disclosure);
    (out, cut)
}

/// The text of an interaction: question, context, options, progress and deadline.
fn interaction_text(r: &Confirmation, i: &Interaction, view: &View) -> String {
    interaction_parts(r, i, view).text
}

fn interaction_parts(r: &Confirmation, i: &Interaction, view: &View) -> Parts {
    let badge = match i.severity {
        Severity::Critical => "🚨 ",
        Severity::High => "⚠️ ",
        Severity::Low | Severity::Normal => "",
    };
    let from = i.source_agent.as_deref().unwrap_or(&r.agent);
    let (question, question_cut) = quoted(
        &format!(
            "{badge}❓ <b>Question</b> from <code>{}</code>{}",
            shown_within(from, 200).0,
            flag(from)
        ),
        &i.question,
        BRIEFING_BUDGET,
        "the question",
    );
    let mut text = question;
    text.push_str(&context_block(i.context.as_deref()));
    let mut cut = false;
    if r.has_call {
        let (block, call_cut) = call_block(
            r,
            TELEGRAM_MAX_CHARS.saturating_sub(units(&text) + OUTCOME_RESERVE + 600),
        );
        text.push_str(&block);
        cut = call_cut || question_cut;
    } else if i.kind == InteractionType::Approval {
        text.push_str(
            "\n\nℹ️ <i>The agent sent no parameters: only its question is shown. Approve only what the question itself says.</i>",
        );
        if r.window_seconds > 0 {
            let duration = window_duration(r.window_seconds);
            text.push_str(&format!(
                "\n\n🪟 <b>Approving also lets identical calls through for {duration}</b> after your tap: the agent keeps this window itself, so it cannot be shortened or revoked from here."
            ));
        }
    }
    match i.kind {
        InteractionType::SingleChoice | InteractionType::MultiChoice | InteractionType::Poll => {
            let described: Vec<String> = i
                .options
                .iter()
                .filter_map(|o| {
                    let d = o.description.as_deref()?;
                    Some(format!(
                        "• <b>{}</b>{}: {}",
                        shown_within(&o.label, 100).0,
                        flag(&o.label),
                        shown_within(d, 200).0
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
            let (shown, omitted) = shown_within(&pretty, 1500);
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
            if i.consensus == ConsensusMode::Quorum && i.kind == InteractionType::Approval {
                text.push_str(" · one no ends it (veto)");
            }
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
                    format!("{}: {n}", shown_within(&o.label, 60).0)
                })
                .collect();
            text.push_str(&tally.join(" · "));
        }
    }
    text.push_str(&timeout_disclosure(r, i));
    text.push_str(&format!("\n\n⏳ Deadline: {}", date_time(r.expires_at)));
    text.push_str(&escalation_line(view));
    Parts { text, cut }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::args_hash::ArgsHash;
    use crate::domain::confirmation::{Operator, PENDING_REASON};
    use crate::domain::ids::{ConfirmationId, OwnerId, ToolName};

    fn record(params_json: &str) -> Confirmation {
        let params = python::json::parse_object(params_json).unwrap();
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
            window_requested_seconds: None,
            approved_once: false,
            has_call: false,
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
            strays: Vec::new(),
            denial_reason: None,
            progress: Default::default(),
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
    fn a_huge_value_is_cut_alone_with_its_length_and_hash_and_the_decided_message_fits() {
        let big = format!(
            r#"{{"blob": "{}", "amount": 1000000, "to": "ACME"}}"#,
            "<&>".repeat(5000)
        );
        let mut r = record(&big);
        let text = question_text(&r);
        assert!(
            units(&text) <= TELEGRAM_MAX_CHARS - OUTCOME_RESERVE,
            "{}",
            units(&text)
        );
        let digest = hex::encode(Sha256::digest("<&>".repeat(5000).as_bytes()));
        for needle in [
            "\"amount\": 1000000",
            "\"to\": \"ACME\"",
            &format!("✂️ 15000 chars, sha256 {}", &digest[..8]),
            "attached below",
            r.args_hash.as_str(),
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        let file = attachment(&r).expect("a cut message sends the parameters along");
        let canonical = python::json::dumps_sorted_dict(&python::json::parse_object(&big).unwrap());
        assert_eq!(file.content, canonical.as_bytes());
        assert_eq!(
            hex::encode(Sha256::digest(&file.content)),
            r.args_hash.as_str(),
            "the file is exactly what the args hash covers"
        );
        assert!(attachment(&record(r#"{"a": 1}"#)).is_none());
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
