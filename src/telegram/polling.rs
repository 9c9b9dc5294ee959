//! Long polling for button taps and replies.
//!
//! A hand-written loop over teloxide's `getUpdates` rather than its `Dispatcher`: the
//! service needs two kinds of update (button taps, and replies as free-text answers),
//! wants shutdown driven by its own [`CancellationToken`] (the dispatcher's shutdown
//! token can hang before dispatch has started), and must acknowledge what it handled on
//! the way out so Telegram does not resend it.
//!
//! The offset passed to Telegram only ever covers updates whose handling is finished
//! (see [`super::inbox`]): a batch is handed over in order, and the next `getUpdates`
//! waits until every update of it is handled. A `kill -9` at any moment therefore loses
//! nothing Telegram delivered; what it redelivers is harmless, since exactly-once is the
//! database's job.

use std::sync::Arc;
use std::time::Duration;

use teloxide::prelude::*;
use teloxide::types::Update;
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
    let mut poller = Poller {
        inbox: Inbox::new(service.clone(), Duration::ZERO),
        bot,
        service,
        stop,
        offset: 0,
        backoff: MIN_BACKOFF,
        webhook_deleted: false,
    };
    loop {
        let request = poller
            .bot
            .get_updates()
            .offset(poller.offset)
            .timeout(poll_timeout_seconds)
            .allowed_updates(super::updates::allowed());
        let updates = tokio::select! {
            _ = poller.stop.cancelled() => break,
            r = request.send() => r,
        };
        // Counted, not timed: a long poll lasts as long as Telegram has nothing to say.
        let error = updates.as_ref().err().map(super::client::error_kind);
        poller
            .service
            .metrics()
            .telegram_call("getUpdates", None, error);
        let next = match updates {
            Ok(updates) => poller.handle(updates).await,
            Err(e) => poller.recover(&e).await,
        };
        if next == Next::Stop {
            break;
        }
    }
    poller.acknowledge().await;
}

/// Whether the loop polls again or `stop` fired meanwhile.
#[derive(PartialEq, Eq)]
enum Next {
    Poll,
    Stop,
}

/// The polling loop's state between two `getUpdates`.
struct Poller {
    bot: Bot,
    service: Arc<Service>,
    inbox: Arc<Inbox>,
    stop: CancellationToken,
    /// Past every update whose handling is finished, and no further.
    offset: i32,
    backoff: Duration,
    webhook_deleted: bool,
}

impl Poller {
    /// Hands a batch to the inbox and moves the offset past what was handled; pauses
    /// when an update must be asked for again.
    async fn handle(&mut self, updates: Vec<Update>) -> Next {
        // Queued in Telegram's order, then waited for: updates about different
        // questions are handled in parallel meanwhile.
        let queued: Vec<_> = updates
            .into_iter()
            .map(|u| (u.id.0 as i32, self.inbox.submit(u)))
            .collect();
        let mut retry_from: Option<i32> = None;
        for (id, handled) in queued {
            if handled.await == Handled::Retry {
                retry_from = Some(retry_from.map_or(id, |r| r.min(id)));
            } else if retry_from.is_none() {
                self.offset = self.offset.max(id + 1);
            }
        }
        match retry_from {
            None => {
                self.backoff = MIN_BACKOFF;
                Next::Poll
            }
            // The offset stays before it, so Telegram sends it (and the ones after
            // it, handled again harmlessly) once more, after a pause.
            Some(id) => {
                tracing::warn!(
                    update_id = id,
                    retry_in_s = self.backoff.as_secs(),
                    "an update could not be stored; asking Telegram for it again"
                );
                self.pause().await
            }
        }
    }

    /// After a failed `getUpdates`: deletes a webhook that refuses it (once), else
    /// pauses.
    async fn recover(&mut self, e: &teloxide::RequestError) -> Next {
        // A webhook is set, so Telegram refuses getUpdates: someone switched this
        // bot from webhook mode to polling. Delete it once and poll, as teloxide's
        // own polling does; polling mode is what the configuration asks for. Only
        // once: if it comes back, another instance in webhook mode is setting it,
        // and deleting it in a loop would have the two fight over the bot.
        if !self.webhook_deleted && is_webhook_conflict(e) {
            tracing::warn!(
                "a Telegram webhook is set for this bot, so getUpdates is refused; \
                 deleting the webhook to poll (mode = \"polling\")"
            );
            // Pending updates are kept: they are delivered to this poller next.
            let delete = tokio::select! {
                _ = self.stop.cancelled() => return Next::Stop,
                r = self.bot.delete_webhook().send() => r,
            };
            let error = delete.as_ref().err().map(super::client::error_kind);
            self.service
                .metrics()
                .telegram_call("deleteWebhook", None, error);
            match delete {
                Ok(_) => {
                    self.webhook_deleted = true;
                    return Next::Poll;
                }
                // Not deleted, so not "once" yet: tried again after the backoff.
                Err(e) => tracing::warn!(
                    error = %super::client::describe(&e),
                    retry_in_s = self.backoff.as_secs(),
                    "deleteWebhook failed"
                ),
            }
        } else {
            tracing::warn!(error = %super::client::describe(e),
                retry_in_s = self.backoff.as_secs(), "getUpdates failed");
        }
        self.pause().await
    }

    /// Waits out the backoff (unless `stop` fires), then doubles it up to the bound.
    async fn pause(&mut self) -> Next {
        tokio::select! {
            _ = self.stop.cancelled() => return Next::Stop,
            _ = tokio::time::sleep(self.backoff) => {}
        }
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        Next::Poll
    }

    /// Confirms what was handled, so the next start does not see these taps again.
    async fn acknowledge(&self) {
        if self.offset != 0 {
            let ack = self
                .bot
                .get_updates()
                .offset(self.offset)
                .timeout(0)
                .limit(1);
            if let Err(e) = tokio::time::timeout(Duration::from_secs(5), ack.send())
                .await
                .unwrap_or(Ok(Vec::new()))
            {
                tracing::debug!(error = %e, "could not acknowledge the last updates");
            }
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
