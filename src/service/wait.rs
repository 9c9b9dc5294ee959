//! What an agent reads about its own requests, and how it waits for them to change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Service, ServiceError, instant_at, now};
use crate::config::Agent;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::storage::Questions;

/// How long past its deadline a waiting agent lets a request stay pending before it
/// applies the timeout itself. The scheduler normally wins by far; this only guards
/// against a stalled scheduler leaving an agent blocked forever.
const WAITER_GRACE: Duration = Duration::from_secs(2);

/// Parked agents waiting for a request to end. One watch channel per waited-on id; a
/// change fires it and removes it, so the map only holds requests someone is waiting
/// on that are still pending. A decision this process committed hands its record to
/// the waiters with the wake-up ([`Waiters::decided`]): the record the decision's own
/// transaction read back, so an agent blocked on the question is answered without
/// reading it again (one read of four statements less between a tap and its agent's
/// answer, BENCHMARKS.md B3). Any other wake-up carries nothing and the waiter reads.
#[derive(Default)]
struct Waiters {
    map: Mutex<HashMap<QuestionId, watch::Sender<Handed>>>,
}

/// What a wake-up hands a waiter: the decided record, when the wake-up is a decision
/// this process committed.
type Handed = Option<Arc<Question>>;

impl Waiters {
    fn subscribe(&self, id: &QuestionId) -> watch::Receiver<Handed> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(id.clone())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    fn notify(&self, id: &QuestionId) {
        self.wake(id, || None);
    }

    /// Wakes the waiters of `r`, just decided by this process, handing them `r`. Decided
    /// is final: no later write changes what a waiter answers with (its status and
    /// outcome), so the record is as good as a read after the wake-up.
    fn decided(&self, r: &Question) {
        debug_assert!(r.is_terminal());
        // The copy is made only when someone waits.
        self.wake(&r.id, || Some(Arc::new(r.clone())));
    }

    fn wake(&self, id: &QuestionId, handed: impl FnOnce() -> Handed) {
        let sender = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(s) = sender {
            s.send_replace(handed());
        }
    }

    /// Wakes every waiter, to look again at whatever it waits for.
    fn notify_all(&self) {
        let all = std::mem::take(&mut *self.map.lock().unwrap_or_else(|e| e.into_inner()));
        for s in all.into_values() {
            s.send_replace(None);
        }
    }
}

/// Who waits for a question to change, and the agents' event streams: what a change
/// wakes.
#[derive(Default)]
pub struct Changes {
    waiters: Waiters,
    /// Ticks after every change that may have written an agent event.
    events: EventTicks,
}

/// Ticks after every change that may have written an agent event.
struct EventTicks(watch::Sender<u64>);

impl Default for EventTicks {
    fn default() -> Self {
        EventTicks(watch::channel(0).0)
    }
}

impl Changes {
    /// Wakes whoever waits on the question and the agents' event streams.
    pub(super) fn changed(&self, id: &QuestionId) {
        self.waiters.notify(id);
        self.tick();
    }

    /// [`Changes::changed`] for a decision this process committed: its waiters are
    /// handed `r` (see [`Waiters`]).
    pub(super) fn decided(&self, r: &Question) {
        self.waiters.decided(r);
        self.tick();
    }

    /// Wakes the agents' event streams to read what may have been written.
    pub(super) fn tick(&self) {
        self.events.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Wakes every waiter, to look again at whatever it waits for, and the streams.
    pub(super) fn wake_all(&self) {
        self.waiters.notify_all();
        self.tick();
    }

    /// Ticks whenever an agent event may have been written (`GET /v1/events` listens).
    pub fn subscribe_events(&self) -> watch::Receiver<u64> {
        self.events.0.subscribe()
    }
}

/// What an agent reads of its own questions (another's are not found).
pub struct Asked {
    questions: Arc<dyn Questions>,
}

impl Asked {
    pub(super) fn new(questions: Arc<dyn Questions>) -> Self {
        Asked { questions }
    }

    /// The agent's own pending confirmations, at most `limit`, the soonest deadline
    /// first.
    pub async fn pending(&self, agent: &Agent, limit: u32) -> Result<Vec<Question>, ServiceError> {
        let mut pending = self.questions.pending_of(Some(&agent.name), limit).await?;
        pending.retain(|q| q.interaction.is_none());
        Ok(pending)
    }

    /// The agent's own confirmation, or `NotFound` (also for another agent's, and for an
    /// interaction, which the agent knows by its `interaction_id`).
    pub async fn get(&self, agent: &Agent, id: &QuestionId) -> Result<Question, ServiceError> {
        match self.owned(agent, id).await? {
            r if r.interaction.is_none() => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's own question of any kind, by record id (its audit trail is read so).
    pub async fn owned(&self, agent: &Agent, id: &QuestionId) -> Result<Question, ServiceError> {
        match self.questions.get(id).await? {
            Some(r) if r.agent == agent.name => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's interaction with its own `interaction_id`.
    pub async fn get_interaction(
        &self,
        agent: &Agent,
        interaction_id: &str,
    ) -> Result<Question, ServiceError> {
        self.questions
            .find_interaction(&agent.name, interaction_id)
            .await?
            .ok_or(ServiceError::NotFound)
    }
}

impl Service {
    /// Waits until the request is terminal or `max_wait` passes, then returns it as it is.
    /// `stop` (shutdown) ends the wait with [`ServiceError::ShuttingDown`], never with a
    /// made-up outcome.
    pub async fn wait(
        self: &Arc<Self>,
        agent: &Agent,
        id: &QuestionId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
    ) -> Result<Question, ServiceError> {
        self.wait_until(agent, id, max_wait, stop, |r| r.is_terminal())
            .await
    }

    /// Waits for the next change of an interaction (delivered, an answer, its end), at
    /// most `max_wait`, and returns it as it is then.
    pub async fn wait_for_change(
        self: &Arc<Self>,
        agent: &Agent,
        interaction_id: &str,
        max_wait: Duration,
        stop: &CancellationToken,
    ) -> Result<Question, ServiceError> {
        let first = self.asked.get_interaction(agent, interaction_id).await?;
        let seen = (first.public_status(), first.answers.len());
        self.wait_until(agent, &first.id, Some(max_wait), stop, move |r| {
            r.is_terminal() || (r.public_status(), r.answers.len()) != seen
        })
        .await
    }

    pub(super) async fn wait_until(
        self: &Arc<Self>,
        agent: &Agent,
        id: &QuestionId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
        done: impl Fn(&Question) -> bool,
    ) -> Result<Question, ServiceError> {
        let give_up = max_wait.map(|d| Instant::now() + d);
        // What the last wake-up handed over: the record a decision of this process
        // committed (see `Waiters`), answered with instead of being read again.
        let mut handed: Handed = None;
        loop {
            if let Some(r) = handed.take()
                && r.agent == agent.name
                && done(&r)
            {
                tracing::debug!(id = %id, "wait over");
                return Ok(Arc::unwrap_or_clone(r));
            }
            // Subscribe before reading, so a change landing in between is not missed.
            let mut changed = self.changes.waiters.subscribe(id);
            // Boxed, and the record dropped before waiting: an agent may wait for an
            // hour, and what this future holds meanwhile is what a blocked agent costs.
            let record = Box::pin(self.asked.owned(agent, id)).await?;
            if done(&record) || give_up.is_some_and(|g| Instant::now() >= g) {
                tracing::debug!(id = %id, "wait over");
                return Ok(record);
            }
            let overdue = instant_at(record.expires_at, now()) + WAITER_GRACE;
            drop(record);
            let wake = give_up.map_or(overdue, |g| g.min(overdue));
            tokio::select! {
                _ = changed.changed() => handed = changed.borrow_and_update().clone(),
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= overdue {
                        Box::pin(self.expire(id)).await;
                    }
                }
                _ = stop.cancelled() => return Err(ServiceError::ShuttingDown),
            }
        }
    }
}
