//! Where Telegram updates wait their turn: the updates about one question are handled
//! one after the other, in Telegram's `update_id` order, while different questions go
//! in parallel; and the caller learns when each update is handled, so it acknowledges
//! to Telegram only what is finished (the polling offset, the webhook's 2xx).
//!
//! Why: two operators tapping one question a moment apart arrive in one `getUpdates`
//! batch (or on two webhook connections at once). Handled each in its own task, the
//! second tap could decide; in order, the first decides and the second is told the
//! stored outcome. And an offset moved past a batch before its taps are stored loses
//! them in a crash, because Telegram never sends them again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use teloxide::types::Update;
use tokio::sync::oneshot;

use super::updates::{self, Input};
use crate::domain::ids::CallbackToken;
use crate::service::Service;

/// How long a webhook update waits for others of its question sent at the same moment.
/// Telegram sends in order; what reorders them is the network between its connections,
/// a matter of milliseconds.
pub const WEBHOOK_GRACE: Duration = Duration::from_millis(30);

/// How handling an update ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Stored (a decision, an answer, an audited refusal) or none of the service's
    /// business: Telegram may forget it.
    Done,
    /// Nothing could be stored: Telegram must send it again.
    Retry,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Lane {
    Question(CallbackToken),
    Chat(i64),
}

struct Job {
    input: Input,
    done: oneshot::Sender<Handled>,
}

/// A lane's queued updates, by (`update_id`, arrival): a redelivered update already
/// queued waits behind its first copy.
type Queue = BTreeMap<(u32, u64), Job>;

/// Ordered handling of updates; see the module docs.
///
/// A lane is a question (by its callback token, so every copy of it in every chat shares
/// one lane) or, for messages (replies, commands), a chat. Each busy lane has one drainer
/// task that takes its queued updates lowest `update_id` first. With a `grace` (webhook
/// mode), the drainer waits that long before it starts, so updates Telegram sent at the
/// same moment over several connections are taken in its order, not in arrival order.
pub struct Inbox {
    service: Arc<Service>,
    grace: Duration,
    /// Queued updates per busy lane.
    lanes: Mutex<HashMap<Lane, Queue>>,
    arrivals: AtomicU64,
}

impl Inbox {
    pub fn new(service: Arc<Service>, grace: Duration) -> Arc<Self> {
        Arc::new(Inbox {
            service,
            grace,
            lanes: Mutex::new(HashMap::new()),
            arrivals: AtomicU64::new(0),
        })
    }

    /// Queues `update` at once (calls made one after the other keep their order) and
    /// returns what resolves when it is handled.
    pub fn submit(
        self: &Arc<Self>,
        update: Update,
    ) -> impl Future<Output = Handled> + Send + 'static {
        let update_id = update.id.0;
        let queued = updates::input_from(
            update,
            self.service.chats().bot_username(),
            self.service.chats().bot_id(),
        )
        .map(|input| {
            let lane = match &input {
                Input::Tap(tap) => match &tap.button {
                    Some(b) => Lane::Question(b.token.clone()),
                    None => Lane::Chat(tap.chat_id.unwrap_or(0)),
                },
                Input::Command(c) => Lane::Chat(c.chat_id),
                Input::Reply(r) => Lane::Chat(r.chat_id),
            };
            let (done, handled) = oneshot::channel();
            let arrival = self.arrivals.fetch_add(1, Ordering::Relaxed);
            let start = {
                let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
                let idle = !lanes.contains_key(&lane);
                lanes
                    .entry(lane.clone())
                    .or_default()
                    .insert((update_id, arrival), Job { input, done });
                idle
            };
            if start {
                let me = self.clone();
                self.service
                    .tasks()
                    .spawn(async move { me.drain(lane).await });
            }
            handled
        });
        async move {
            match queued {
                // A drainer that went away (the runtime shutting down) handled nothing.
                Some(handled) => handled.await.unwrap_or(Handled::Retry),
                None => Handled::Done,
            }
        }
    }

    /// Handles a lane's updates until it has none left.
    async fn drain(self: Arc<Self>, lane: Lane) {
        if !self.grace.is_zero() {
            tokio::time::sleep(self.grace).await;
        }
        loop {
            let job = {
                let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
                let next = lanes.get_mut(&lane).and_then(|q| q.pop_first());
                match next {
                    Some((_, job)) => job,
                    None => {
                        // Removed under the lock `submit` queues under: an update queued
                        // after this starts a drainer of its own.
                        lanes.remove(&lane);
                        return;
                    }
                }
            };
            let handled = self.handle(job.input).await;
            // The submitter may have stopped waiting (a webhook request cut off): the
            // update is handled all the same.
            let _ = job.done.send(handled);
        }
    }

    async fn handle(&self, input: Input) -> Handled {
        let stored = match input {
            Input::Tap(tap) => {
                // The stage of a tap's way to its agent that is ours to make fast
                // (BENCHMARKS.md, B3's tap-to-response).
                let started = std::time::Instant::now();
                let stored = self.service.handle_tap(tap).await;
                tracing::debug!(
                    took_us = started.elapsed().as_micros() as u64,
                    "tap handled"
                );
                stored
            }
            Input::Reply(reply) => self.service.handle_reply(reply).await,
            // A command that failed was answered so ("nothing was changed"), and asking
            // again is the operator's call: it never holds up what comes after it.
            Input::Command(command) => {
                self.service.handle_command(command).await;
                Ok(())
            }
        };
        match stored {
            Ok(()) => Handled::Done,
            Err(_) => Handled::Retry,
        }
    }
}
