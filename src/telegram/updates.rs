//! Turning Telegram updates into the service's inputs, whichever way they arrive (long
//! polling or the webhook route): one place decides what the service reacts to.

use std::sync::Arc;

use teloxide::types::{AllowedUpdate, CallbackQuery, Message, Update, UpdateKind};

use crate::domain::confirmation::Operator;
use crate::service::{CommandMessage, Reply, Service, Tap};
use crate::telegram::commands::{self, Parsed};

/// The update kinds the service handles; Telegram is asked for these only.
pub fn allowed() -> Vec<AllowedUpdate> {
    vec![AllowedUpdate::CallbackQuery, AllowedUpdate::Message]
}

/// Hands one update to the service in its own task and returns at once; exactly-once is
/// the database's job, so a redelivered update is harmless.
pub fn dispatch(service: &Arc<Service>, update: Update) {
    match update.kind {
        UpdateKind::CallbackQuery(q) => {
            let tap = tap_from(q);
            let service = service.clone();
            service
                .tasks()
                .clone()
                .spawn(async move { service.handle_tap(tap).await });
        }
        UpdateKind::Message(m) => {
            match command_from(&m, service.bot_username()) {
                Some(Parsed::Ours(command)) => {
                    if let Some(from) = m.from.as_ref() {
                        let message = CommandMessage {
                            chat_id: m.chat.id.0,
                            message_id: m.id.0,
                            from: operator(from),
                            from_is_bot: from.is_bot,
                            command,
                        };
                        let service = service.clone();
                        service
                            .tasks()
                            .clone()
                            .spawn(async move { service.handle_command(message).await });
                    }
                    return;
                }
                Some(Parsed::ForAnotherBot) => return,
                Some(Parsed::NotACommand) | None => {}
            }
            if let Some(reply) = reply_from(&m) {
                let service = service.clone();
                service
                    .tasks()
                    .clone()
                    .spawn(async move { service.handle_reply(reply).await });
            }
        }
        _ => {}
    }
}

fn operator(user: &teloxide::types::User) -> Operator {
    let name = match &user.last_name {
        Some(last) => format!("{} {last}", user.first_name),
        None => user.first_name.clone(),
    };
    Operator {
        id: user.id.0,
        username: user.username.clone(),
        name,
    }
}

pub fn tap_from(q: CallbackQuery) -> Tap {
    Tap {
        from: operator(&q.from),
        from_is_bot: q.from.is_bot,
        query_id: q.id.0,
        data: q.data.unwrap_or_default(),
        chat_id: q.message.as_ref().map(|m| m.chat().id.0),
        message_id: q.message.as_ref().map(|m| m.id().0),
    }
}

/// What a text message is as a command (`None` without text). Commands are read from
/// the text itself, as Telegram's clients write them, not from its entities.
pub fn command_from(m: &Message, me: Option<&str>) -> Option<Parsed> {
    m.text().map(|text| commands::parse(text, me))
}

/// A text message that replies to another: a candidate free-text answer. Anything
/// else (chatter, service messages, media) is none of the service's business.
pub fn reply_from(m: &Message) -> Option<Reply> {
    let from = m.from.as_ref()?;
    let reply_to = m.reply_to_message()?;
    Some(Reply {
        chat_id: m.chat.id.0,
        reply_to: reply_to.id.0,
        from: operator(from),
        from_is_bot: from.is_bot,
        text: m.text()?.to_owned(),
    })
}
