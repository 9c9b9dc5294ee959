//! Long polling for button taps and replies.
//!
//! A hand-written loop over teloxide's `getUpdates` rather than its `Dispatcher`: the
//! service needs two kinds of update (button taps, and replies as free-text answers),
//! wants shutdown driven by its own [`CancellationToken`] (the dispatcher's shutdown token can hang before dispatch has
//! started), and must acknowledge what it handled on the way out so Telegram does not
//! resend it.
//!
//! The offset passed to Telegram only ever covers updates whose handling is finished
//! (see [`super::inbox`]): a batch is handed over in order, and the next `getUpdates`
//! waits until every update of it is handled. A `kill -9` at any moment therefore loses
//! nothing Telegram delivered; what it redelivers is harmless, since exactly-once is the
//! database's job.

use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use tokio_util::sync::CancellationToken;

use super::inbox::{Handled, Inbox};
use crate::service::Service;

/// Backoff bounds after a failed `getUpdates`.
const MIN_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Polls until `stop`, handing every tap to the service.
pub async fn run(
    bot: Bot,
    service: Arc<Service>,
    poll_timeout_seconds: u32,
    stop: CancellationToken,
) {
    let inbox = Inbox::new(service.clone(), Duration::ZERO);
    let mut offset: i32 = 0;
    let mut backoff = MIN_BACKOFF;
    let mut webhook_deleted = false;
    loop {
        let request = bot
            .get_updates()
            .offset(offset)
            .timeout(poll_timeout_seconds)
            .allowed_updates(super::updates::allowed());
        let updates = tokio::select! {
            _ = stop.cancelled() => break,
            r = request.send() => r,
        };
        // Counted, not timed: a long poll lasts as long as Telegram has nothing to say.
        let error = updates.as_ref().err().map(super::client::error_kind);
        service.metrics().telegram_call("getUpdates", None, error);
        match updates {
            Ok(updates) => {
                // Queued in Telegram's order, then waited for: updates about different
                // questions are handled in parallel meanwhile.
                let queued: Vec<_> = updates
                    .into_iter()
                    .map(|u| (u.id.0 as i32, inbox.submit(u)))
                    .collect();
                let mut retry_from: Option<i32> = None;
                for (id, handled) in queued {
                    if handled.await == Handled::Retry {
                        retry_from = Some(retry_from.map_or(id, |r| r.min(id)));
                    } else if retry_from.is_none() {
                        offset = offset.max(id + 1);
                    }
                }
                match retry_from {
                    None => backoff = MIN_BACKOFF,
                    // The offset stays before it, so Telegram sends it (and the ones after
                    // it, handled again harmlessly) once more, after a pause.
                    Some(id) => {
                        tracing::warn!(
                            update_id = id,
                            retry_in_s = backoff.as_secs(),
                            "an update could not be stored; asking Telegram for it again"
                        );
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                    }
                }
            }
            Err(e) => {
                // A webhook is set, so Telegram refuses getUpdates: someone switched this
                // bot from webhook mode to polling. Delete it once and poll, as teloxide's
                // own polling does; polling mode is what the configuration asks for. Only
                // once: if it comes back, another instance in webhook mode is setting it,
                // and deleting it in a loop would have the two fight over the bot.
                if !webhook_deleted && is_webhook_conflict(&e) {
                    tracing::warn!(
                        "a Telegram webhook is set for this bot, so getUpdates is refused; \
                         deleting the webhook to poll (mode = \"polling\")"
                    );
                    // Pending updates are kept: they are delivered to this poller next.
                    let delete = tokio::select! {
                        _ = stop.cancelled() => break,
                        r = bot.delete_webhook().send() => r,
                    };
                    let error = delete.as_ref().err().map(super::client::error_kind);
                    service
                        .metrics()
                        .telegram_call("deleteWebhook", None, error);
                    match delete {
                        Ok(_) => {
                            webhook_deleted = true;
                            continue;
                        }
                        // Not deleted, so not "once" yet: tried again after the backoff.
                        Err(e) => tracing::warn!(
                            error = %super::client::describe(&e),
                            retry_in_s = backoff.as_secs(),
                            "deleteWebhook failed"
                        ),
                    }
                } else {
                    tracing::warn!(error = %super::client::describe(&e),
                        retry_in_s = backoff.as_secs(), "getUpdates failed");
                }
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

/// Telegram's 409 for `getUpdates` while a webhook is set. teloxide knows it as
/// `ApiError::CantGetUpdates`, but matches the description exactly and expects it without
/// the `Conflict: ` prefix and the advice Telegram appends, so the real text arrives as
/// `ApiError::Unknown`: both are recognised.
pub(crate) fn is_webhook_conflict(e: &teloxide::RequestError) -> bool {
    match e {
        teloxide::RequestError::Api(teloxide::ApiError::CantGetUpdates) => true,
        teloxide::RequestError::Api(teloxide::ApiError::Unknown(text)) => {
            text.contains("can't use getUpdates method while webhook is active")
        }
        _ => false,
    }
}
