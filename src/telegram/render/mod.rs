//! What operators see: the question's text (HTML parse mode), its buttons, and the line
//! that records the outcome.
//!
//! What is shown is what is there. Everything that came from an agent is HTML-escaped
//! (`<b>` shows as `<b>`), and every invisible or layout-changing character in it is
//! shown as a visible escape (`\u202e`; see [`crate::domain::text`]); words that mix
//! scripts are flagged with ⚠️. The agent's own words (its briefing, context, question)
//! sit in quote blocks under a label, so nothing in them can pose as a line of the
//! service's own layout. Nothing is hidden by length (docs/architecture.md).
//!
//! By what a message holds: the parameters block and the attached file (`params.rs`),
//! a confirmation's text and outcome line (`question.rs`), an interaction's
//! (`interaction.rs`), and the buttons with their callback data (`keyboard.rs`). This
//! file holds the escaping every part shares and puts a message together ([`render`]),
//! with the messages that reply to a question.

mod chat_rules;
mod interaction;
mod keyboard;
mod params;
mod pins;
mod question;
#[cfg(test)]
mod tests;

use teloxide::types::{InlineKeyboardButton, InlineKeyboardMarkup};
use teloxide::utils::html::escape;
use time::OffsetDateTime;

use crate::domain::ids::QuestionId;
use crate::domain::interaction::InteractionType;
use crate::domain::question::{Question, operator_time as date_time};
use crate::domain::text::{self, Layout};
use crate::service::{Review, TapAction, View};

use interaction::interaction_text;
use keyboard::{approve_keyboard, button_label, rows};
use question::decided_text_in;

pub use chat_rules::{
    DRY_RUN_LABEL, ENFORCE_LABEL, REMOVE_LABEL, chat_rules_keyboard, chat_rules_text, moved_text,
    parse_chat_rule, suggestions_keyboard, suggestions_text,
};
pub use keyboard::{
    APPROVE_LABEL, APPROVE_ONCE_LABEL, CANCEL_LABEL, DENY_WITH_REASON_LABEL, DONE_LABEL,
    REJECT_LABEL, callback_data, extend_label, grant_revoke_data, parse_callback_data,
    parse_grant_revoke,
};
pub use params::{Attachment, attachment};
pub use pins::{
    ALLOW_TOOLS_LABEL, parse_tools_allow, pin_notice_keyboard, pin_notice_text, tools_allow_data,
};
pub use question::{decided_text, decision_line, notification_text, question_text, run_line};

/// Telegram's limit on a message's text.
pub const TELEGRAM_MAX_CHARS: usize = 4096;
/// Room kept free for the outcome line appended when the request ends, the escalation
/// note, and the line of the run reported after it (its text cut to 200 units).
const OUTCOME_RESERVE: usize = 950;
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

/// The window's length as an operator reads it (in the domain: the service words a
/// grant's question with it too).
pub use crate::domain::question::window_duration;

/// The label of the button that approves with the window.
pub fn approve_for_label(seconds: u64) -> String {
    format!("✅ Approve for {}", window_duration(seconds))
}

/// A mention Telegram notifies: a link to the user by id, with their name.
fn mention(user_id: u64, name: &str) -> String {
    format!(
        "<a href=\"tg://user?id={user_id}\">{}</a>",
        shown_within(name, 64).0
    )
}

/// The question in a few words, for the messages that reply to it.
fn what(r: &Question) -> String {
    match r.interaction.as_deref() {
        Some(i) if !r.has_call => format!("“{}”", shown_within(&i.question, 120).0),
        _ => format!("<code>{}</code>", shown_within(r.tool.as_str(), 120).0),
    }
}

/// How a reason prompt opens, and the words that follow its request's id, as Telegram
/// shows them (without markup): what [`reason_prompt_names`] knows a prompt by.
const REASON_PROMPT_OPENS: &str = "✋ ";
const REASON_PROMPT_ASKS: &str = ")? Reply to this message with your reason by ";

/// The message that asks the person who tapped "Deny with reason" for it.
pub fn reason_prompt_text(r: &Question, user_id: u64, name: &str) -> String {
    format!(
        "{REASON_PROMPT_OPENS}{}, why deny {} (<code>{}</code>)? <b>Reply to this message</b> with your reason by {}. The agent receives it; until it is in, the request stays open and anyone may still decide.",
        mention(user_id, name),
        what(r),
        r.id,
        date_time(r.expires_at)
    )
}

/// The request a reason prompt of the bot's asks about, read from the prompt's text as
/// Telegram reports it with a reply (`visible`, without markup); `None` for any other
/// text. This ties a reply to its prompt before the prompt's message id is stored (or
/// when a crash lost it). Only the prompt's own shape counts, never an id anywhere in
/// the text: the bot's other messages name requests too, and a notification's text is
/// the agent's, so a reply to one must never become a request's deny reason. The id is
/// the one just before the fixed words that follow it, after anything the question's
/// own words (tool, question) could hold; a notification opens with 🔔, never ✋.
pub fn reason_prompt_names(visible: &str) -> Option<QuestionId> {
    if !visible.starts_with(REASON_PROMPT_OPENS) {
        return None;
    }
    let (before, _) = visible.rsplit_once(REASON_PROMPT_ASKS)?;
    let (opening, id) = before.rsplit_once(" (")?;
    if !opening.contains(", why deny ") {
        return None;
    }
    QuestionId::parse(id).ok()
}

/// The reminder of a question still pending, naming who has not answered.
pub fn reminder_text(r: &Question, waiting: &[crate::service::Mention]) -> String {
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

/// The route's SLA mark on a question still pending (nothing once it ended: its
/// outcome says what matters then).
fn sla_line(r: &Question, view: &View) -> String {
    use crate::domain::sla::SlaMark;
    match view.sla {
        Some(_) if r.is_terminal() => String::new(),
        Some((SlaMark::AtRisk, by)) => format!(
            "\n\n⏰ <b>At risk</b>: the route's SLA wants a decision by {}.",
            clock(by)
        ),
        Some((SlaMark::Overdue, by)) => format!(
            "\n\n⏰ <b>Overdue</b>: the route's SLA wanted a decision by {}.",
            clock(by)
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
pub fn render(r: &Question, view: &View) -> (String, Markup) {
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
        return (
            decided_text_in(r, view),
            with_review(markup, view, r.editable()),
        );
    };
    let mut text = interaction_text(r, i, view);
    if let Some(line) = decision_line(r) {
        text.push_str("\n\n");
        text.push_str(&line);
        if let Some(run) = run_line(r) {
            text.push('\n');
            text.push_str(&run);
        }
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
    (text, with_review(markup, view, r.editable()))
}

/// The console's label on a question's button.
pub const REVIEW_LABEL: &str = "🔎 Review";
/// ... on a question whose call can be edited there.
pub const REVIEW_EDIT_LABEL: &str = "✏️ Review and edit";

/// `markup` with the console's button on a row of its own, when the view offers it;
/// `editable`: the call can be edited there.
fn with_review(markup: Markup, view: &View, editable: bool) -> Markup {
    let label = if editable {
        REVIEW_EDIT_LABEL
    } else {
        REVIEW_LABEL
    };
    let (Markup::Keyboard(mut keyboard), Some(review)) = (markup.clone(), &view.review) else {
        return markup;
    };
    let button = match review {
        Review::WebApp(url) => url
            .parse()
            .ok()
            .map(|url| InlineKeyboardButton::web_app(label, teloxide::types::WebAppInfo { url })),
        Review::Link(url) => url
            .parse()
            .ok()
            .map(|url| InlineKeyboardButton::url(label, url)),
    };
    match button {
        Some(b) => {
            keyboard.inline_keyboard.push(vec![b]);
            Markup::Keyboard(keyboard)
        }
        None => markup,
    }
}
