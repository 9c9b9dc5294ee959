//! Long polling for button taps and replies.
//!
//! A hand-written loop over teloxide's `getUpdates` rather than its `Dispatcher`: the
//! service needs two kinds of update (button taps, and replies as free-text answers),
//! wants shutdown driven by its own [`CancellationToken`] (the dispatcher's shutdown token can hang before dispatch has
//! started), and must acknowledge what it handled on the way out so Telegram does not
//! resend it. Each tap is handled in its own task; exactly-once is the database's job.

use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::{AllowedUpdate, CallbackQuery, Message, UpdateKind};
use tokio_util::sync::CancellationToken;

use crate::domain::confirmation::Operator;
use crate::service::{Reply, Service, Tap};

/// Backoff bounds after a failed `getUpdates`.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

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

/// Polls until `stop`, handing every tap to the service.
pub async fn run(
    bot: Bot,
    service: Arc<Service>,
    poll_timeout_seconds: u32,
    stop: CancellationToken,
) {
    let mut offset: i32 = 0;
    let mut backoff = MIN_BACKOFF;
    loop {
        let request = bot
            .get_updates()
            .offset(offset)
            .timeout(poll_timeout_seconds)
            .allowed_updates(vec![AllowedUpdate::CallbackQuery, AllowedUpdate::Message]);
        let updates = tokio::select! {
            _ = stop.cancelled() => break,
            r = request.send() => r,
        };
        match updates {
            Ok(updates) => {
                backoff = MIN_BACKOFF;
                for update in updates {
                    offset = offset.max(update.id.0 as i32 + 1);
                    match update.kind {
                        UpdateKind::CallbackQuery(q) => {
                            let service = service.clone();
                            let tap = tap_from(q);
                            service
                                .tasks()
                                .clone()
                                .spawn(async move { service.handle_tap(tap).await });
                        }
                        UpdateKind::Message(m) => {
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
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "getUpdates failed");
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
    if offset != 0 {
        // Confirm what was handled, so the next start does not see these taps again.
        let ack = bot.get_updates().offset(offset).timeout(0).limit(1);
        if let Err(e) = tokio::time::timeout(Duration::from_secs(5), ack.send())
            .await
            .unwrap_or(Ok(Vec::new()))
        {
            tracing::debug!(error = %e, "could not acknowledge the last updates");
        }
    }
}
