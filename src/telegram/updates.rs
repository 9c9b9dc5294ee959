//! Turning Telegram updates into the service's inputs, whichever way they arrive (long
//! polling or the webhook route): one place decides what the service reacts to, and
//! reads the callback data of a tap into a typed [`Button`] before the service sees it.

use teloxide::types::{
    AllowedUpdate, CallbackQuery, InlineKeyboardButtonKind, MaybeInaccessibleMessage, Message,
    Update, UpdateKind,
};

use crate::domain::question::Operator;
use crate::domain::text;
use crate::service::{Button, CommandMessage, Reply, Tap};
use crate::telegram::commands::{self, Parsed};
use crate::telegram::render;

/// The update kinds the service handles; Telegram is asked for these only.
pub fn allowed() -> Vec<AllowedUpdate> {
    vec![AllowedUpdate::CallbackQuery, AllowedUpdate::Message]
}

/// What one update asks of the service.
#[derive(Debug, Clone)]
pub enum Input {
    Tap(Tap),
    Command(CommandMessage),
    Reply(Reply),
}

/// The service's input in an update, if it is any of the service's business. `me` is
/// the bot's username, once known (commands addressed to it); `bot_id` its user id, from
/// the token (its own messages: known at once, even before `getMe` answers).
pub fn input_from(update: Update, me: Option<&str>, bot_id: Option<u64>) -> Option<Input> {
    match update.kind {
        UpdateKind::CallbackQuery(q) => Some(Input::Tap(tap_from(q, me, bot_id))),
        UpdateKind::Message(m) => match command_from(&m, me) {
            Some(Parsed::Ours(command)) => {
                let from = m.from.as_ref()?;
                Some(Input::Command(CommandMessage {
                    chat_id: m.chat.id.0,
                    // Only a topic message is in a topic: a plain reply also carries
                    // the thread of the message it replies to.
                    thread: m
                        .is_topic_message
                        .then_some(m.thread_id)
                        .flatten()
                        .map(|t| t.0.0),
                    message_id: m.id.0,
                    from: operator(from),
                    from_is_bot: from.is_bot,
                    command,
                }))
            }
            Some(Parsed::ForAnotherBot) => None,
            Some(Parsed::NotACommand) | None => reply_from(&m, me, bot_id).map(Input::Reply),
        },
        _ => None,
    }
}

/// The person a Telegram user is to the service.
pub(crate) fn operator(user: &teloxide::types::User) -> Operator {
    let name = match &user.last_name {
        Some(last) => format!("{} {last}", user.first_name),
        None => user.first_name.clone(),
    };
    Operator {
        id: user.id.0,
        username: user.username.as_deref().map(without_nul),
        name: without_nul(&name),
    }
}

/// Texts from Telegram are stored: see [`text::without_nul`] (Telegram sends no NUL,
/// but an update is outside input, and a webhook is an HTTP request).
fn without_nul(s: &str) -> String {
    text::without_nul(s).into_owned()
}

pub fn tap_from(q: CallbackQuery, me: Option<&str>, bot_id: Option<u64>) -> Tap {
    let data = q.data.unwrap_or_default();
    let carries_button = match &q.message {
        Some(MaybeInaccessibleMessage::Regular(m)) => is_own(m, me, bot_id) && has_button(m, &data),
        // Too old for Telegram to show: what it carries cannot be told.
        _ => false,
    };
    Tap {
        from: operator(&q.from),
        from_is_bot: q.from.is_bot,
        query_id: q.id.0,
        button: super::render::parse_callback_data(&data)
            .map(|(action, token)| Button { action, token }),
        chat_id: q.message.as_ref().map(|m| m.chat().id.0),
        message_id: q.message.as_ref().map(|m| m.id().0),
        carries_button,
        revoke_grant: super::render::parse_grant_revoke(&data),
        allow_tools: super::render::parse_tools_allow(&data),
        chat_rule: super::render::parse_chat_rule(&data),
    }
}

/// A message the bot sent itself: from a bot with the bot's username, and not a forward
/// (a forward keeps the buttons but is someone else's message).
/// Whether the bot itself sent `m` (not a forward of it). By the bot's user id, which
/// the token gives at once: by the username alone, a tap right after a start, before
/// `getMe` answered, could not be told a copy of the bot's own.
fn is_own(m: &Message, me: Option<&str>, bot_id: Option<u64>) -> bool {
    let from_me = m.from.as_ref().is_some_and(|u| {
        u.is_bot
            && match bot_id {
                Some(id) => u.id.0 == id,
                None => me.is_some() && u.username.as_deref() == me,
            }
    });
    from_me && m.forward_origin().is_none()
}

/// Whether the message's own keyboard, as Telegram reports it with the tap, has a button
/// with exactly this callback data. A modified client can send any data with a tap, but
/// not change the message it taps: this is what tells a real copy of a question from a
/// token replayed under another of the bot's messages.
fn has_button(m: &Message, data: &str) -> bool {
    m.reply_markup().is_some_and(|k| {
        k.inline_keyboard
            .iter()
            .flatten()
            .any(|b| matches!(&b.kind, InlineKeyboardButtonKind::CallbackData(d) if d == data))
    })
}

/// What a text message is as a command (`None` without text). Commands are read from
/// the text itself, as Telegram's clients write them, not from its entities.
pub fn command_from(m: &Message, me: Option<&str>) -> Option<Parsed> {
    m.text().map(|text| commands::parse(text, me))
}

/// A text message that replies to another: a candidate free-text answer. Anything
/// else (chatter, service messages, media) is none of the service's business.
pub fn reply_from(m: &Message, me: Option<&str>, bot_id: Option<u64>) -> Option<Reply> {
    let from = m.from.as_ref()?;
    let reply_to = m.reply_to_message()?;
    // The request a reason prompt of the bot's own asks about: what ties a reply to it
    // when the prompt's id was not stored yet (or a crash lost it). Only a prompt's
    // shape counts: another message of the bot (a notification, whose text is the
    // agent's) may name a request too.
    let prompt_of = is_own(reply_to, me, bot_id)
        .then(|| reply_to.text())
        .flatten()
        .and_then(render::reason_prompt_names);
    Some(Reply {
        chat_id: m.chat.id.0,
        reply_to: reply_to.id.0,
        reason_prompt_of: prompt_of,
        from: operator(from),
        from_is_bot: from.is_bot,
        text: without_nul(m.text()?),
    })
}

#[cfg(test)]
mod tests {
    use super::without_nul;

    #[test]
    fn a_nul_from_telegram_is_kept_as_its_escape() {
        assert_eq!(without_nul("Al\0ice"), "Al\\x00ice");
        assert_eq!(without_nul("Alice"), "Alice");
    }
}
