//! After a (re)start, and for as long as the service runs: re-arming deadlines,
//! delivering again what a crash cut short, showing outcomes a crash kept from their
//! messages, and the periodic purges.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{AGENT_EVENT_RETENTION, Service, deliver, instant_at, now};
use crate::domain::audit;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::release;
use crate::storage::{AgentEvents, StorageError, Windows};

impl Service {
    /// After a (re)start: re-applies moved route chats and, if this replica leads (with
    /// SQLite it always does), takes over the pending questions ([`take_over`]).
    /// Returns how many questions are pending, or 0 when another replica leads.
    ///
    /// [`take_over`]: Service::take_over
    pub async fn recover(self: &Arc<Self>) -> Result<usize, StorageError> {
        self.chats.reload_moved().await?;
        Ok(self.try_lead().await?.unwrap_or(0))
    }

    /// Records in the audit trail that this replica starts serving
    /// (`service_started`): the release and commit it runs and the rules in force.
    /// Before anything is served, so no event of this run precedes it.
    pub async fn record_start(&self) -> Result<(), StorageError> {
        let event = audit::service_started(
            now(),
            release::VERSION,
            release::COMMIT,
            self.rules().policy().set.fingerprint().as_str(),
        );
        self.store.record_event(event).await
    }

    /// The leader takes on the pending questions it has not yet (all of them after a
    /// restart or a change of leader): re-arms their deadlines (those that passed
    /// meanwhile fire at once), posts the messages a crash kept from being posted, shows
    /// the outcomes a crash kept from their messages, and wakes the webhook outbox.
    /// Returns how many questions are pending.
    pub(super) async fn take_over(self: &Arc<Self>) -> Result<usize, StorageError> {
        let pending = self.store.pending().await?;
        let now = now();
        let n = pending.len();
        let mut undelivered = Vec::new();
        let mut unattached = Vec::new();
        for entry in pending {
            if !self.lead.claim(&entry.id) {
                continue;
            }
            if !entry.delivered && entry.expires_at > now {
                undelivered.push(entry.id.clone());
            } else if !entry.attached && entry.expires_at > now {
                unattached.push(entry.id.clone());
            }
            // A route with reminders or an escalation has points before the deadline:
            // the question is looked at now, and armed for its next one from its record.
            let stepped = self
                .config
                .route(&entry.route)
                .is_some_and(|r| !r.remind_after.is_empty() || r.escalation.is_some());
            let at = if stepped { now } else { entry.expires_at };
            self.lead.deadlines.schedule(entry.id, instant_at(at, now));
        }
        // Reloaded and handed to delivery in the background, in their order: serving
        // (and every deadline) must not wait for thousands of reads, and Telegram's 30
        // messages a second pace the deliveries anyway.
        if !undelivered.is_empty() {
            let me = self.clone();
            self.tasks
                .spawn(async move { me.redeliver(undelivered).await });
        }
        if !unattached.is_empty() {
            let me = self.clone();
            self.tasks
                .spawn(async move { me.reattach(unattached).await });
        }
        for record in self.store.unshown_decisions().await? {
            tracing::info!(id = %record.id, "showing an outcome a restart interrupted");
            self.board.finish(record);
        }
        self.board.show_unshown_runs().await?;
        if self.store.next_delivery_due().await?.is_some() {
            self.outbox_wake.notify_one();
        }
        Ok(n)
    }

    /// Delivers again the questions whose delivery a restart cut short (see [`recover`]).
    /// One that cannot be read now is left to its deadline, which fails it closed.
    ///
    /// [`recover`]: Service::recover
    pub(super) async fn redeliver(self: Arc<Self>, ids: Vec<QuestionId>) {
        for id in ids {
            let record = match self.store.get(&id).await {
                Ok(Some(record)) if !record.is_terminal() => record,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(id = %id, error = %e, "cannot reload a question to deliver it again");
                    continue;
                }
            };
            tracing::info!(id = %record.id, "delivering a question cut short by a restart");
            // Queued by their keys like any new question: each is read again when its
            // turn comes.
            for copy in record.copies.iter().filter(|c| c.message_id.is_none()) {
                let (me, queued) = (self.clone(), deliver::Queued::copy(&record, copy.chat_id));
                self.tasks.spawn(async move { me.deliver(queued).await });
            }
            self.post_first(&record);
        }
    }

    /// Queues the question's first message, unless it was posted.
    pub(super) fn post_first(self: &Arc<Self>, record: &Question) {
        if record.message_id.is_none() {
            let (me, queued) = (self.clone(), deliver::Queued::first(record));
            self.tasks.spawn(async move { me.deliver(queued).await });
            // With every approver of its route away, a delegate gets it too. Looked at
            // only while someone is away: a new question's path stays as it was.
            if !self.absentees.is_empty() {
                let (me, record) = (self.clone(), record.clone());
                self.tasks
                    .spawn(async move { me.delegate_if_all_away(&record).await });
            }
        }
    }

    /// Sends the file with the full parameters for the questions a restart caught between
    /// posting the message and sending its file: an operator told "attached below" must
    /// find it below. For those whose message needed none this only records that; a file
    /// that was sent just before the crash comes twice, which is harmless.
    async fn reattach(self: Arc<Self>, ids: Vec<QuestionId>) {
        for id in ids {
            match self.store.get(&id).await {
                Ok(Some(record)) if !record.is_terminal() => {
                    if let Some(message_id) = record.message_id {
                        self.attach_or_fail_closed(&record, record.chat_id, message_id)
                            .await;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(id = %id, error = %e, "cannot reload a question to attach its file")
                }
            }
        }
    }

    /// Runs the deadline task until `stop`.
    pub async fn run_deadlines(self: Arc<Self>, stop: CancellationToken) {
        let me = self.clone();
        self.lead
            .deadlines
            .run(stop, move |id| {
                let me = me.clone();
                async move { me.step(&id).await }
            })
            .await
    }
}

/// Deletes expired confirmation windows now and then every `every`, until `stop`.
/// Expired windows are already ignored by lookups; this only keeps the table small.
pub async fn run_window_purge(
    windows: Arc<dyn Windows>,
    events: Arc<dyn AgentEvents>,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        match windows.purge_expired_windows(now()).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(purged = n, "expired confirmation windows deleted"),
            Err(e) => tracing::warn!(error = %e, "could not purge expired windows"),
        }
        match events
            .purge_agent_events(now() - AGENT_EVENT_RETENTION)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::debug!(purged = n, "old stream events deleted"),
            Err(e) => tracing::warn!(error = %e, "could not purge old stream events"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
    }
}
