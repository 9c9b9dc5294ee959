//! After the yes (issue 36): the agent's report of running a confirmed call, the reports
//! that never came (`expect_outcome_seconds`), and showing either in every message of
//! the question, where the approver decided.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Service, ServiceError, now};
use crate::config::Agent;
use crate::domain::execution::Report;
use crate::domain::ids::ConfirmationId;
use crate::domain::question::Question;
use crate::storage::{Questions, RunReported, StorageError};

/// How many stripes [`EditStripes`] has: questions whose edits wait on each other only
/// when they share one.
const EDIT_STRIPES: usize = 256;

/// Serialises the background edits that show how a question ended (its outcome, then
/// its run, which an agent may report a moment after the tap): each takes its question's
/// stripe and reads the record afresh under it, so whichever edit comes last shows the
/// latest state, and a late outcome edit never wipes the run line out.
pub(super) struct EditStripes(Box<[tokio::sync::Mutex<()>]>);

impl Default for EditStripes {
    fn default() -> Self {
        EditStripes(
            (0..EDIT_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        )
    }
}

impl EditStripes {
    pub(super) async fn lock(&self, id: &ConfirmationId) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.as_str().hash(&mut h);
        let i = usize::try_from(h.finish() % EDIT_STRIPES as u64).unwrap_or(0);
        self.0[i].lock().await
    }
}

/// How many overdue runs one sweep marks `unknown` at most (the next sweep takes the
/// rest).
const SWEEP_BATCH: u32 = 200;

impl Service {
    /// Takes the agent's report of running its confirmed call `id`: only the agent that
    /// asked may report (another's is not found), only a confirmed call ran, and one
    /// report counts (the same again is answered alike; a different one is refused).
    pub async fn report_outcome(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
        report: Report,
    ) -> Result<Question, ServiceError> {
        match self
            .store
            .report_run(id, &agent.name, &report, now())
            .await?
        {
            RunReported::Taken(r) => {
                tracing::info!(id = %r.id, agent = %r.agent, tool = %r.tool,
                    status = report.status().as_str(), "outcome reported");
                self.on_run(&r);
                Ok(r)
            }
            RunReported::Same(r) => Ok(r),
            RunReported::Conflict(r) => Err(ServiceError::OutcomeRefused {
                why: format!(
                    "a different outcome was already reported for this confirmation ({}); one \
                     report counts",
                    r.execution
                        .as_ref()
                        .map_or("unknown", |e| e.status.as_str())
                ),
                record: Box::new(r),
            }),
            RunReported::NotConfirmed(r) => Err(ServiceError::OutcomeRefused {
                why: format!(
                    "the confirmation is {}, not confirmed: nothing was approved to run, so \
                     there is no outcome to report",
                    r.status.as_str()
                ),
                record: Box::new(r),
            }),
            RunReported::NotFound => Err(ServiceError::NotFound),
        }
    }

    /// After a run was stored (reported, or found missing): counted, streamed to those
    /// waiting on the record, its webhook woken, and shown in its messages.
    fn on_run(self: &Arc<Self>, r: &Question) {
        self.metrics.run_reported(r);
        self.changes.changed(&r.id);
        if r.callback_url.is_some() {
            self.outbox_wake.notify_one();
        }
        self.show_run(r.clone());
    }

    /// Edits every message of the question (its first, its copies, the strays learned
    /// from taps) to show the run below the decision, in the background, and records
    /// that they do, so a restart edits again only what a crash interrupted.
    pub(super) fn show_run(self: &Arc<Self>, record: Question) {
        if !self.lead.leading() {
            return; // the leader hears of it and shows it
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            let _editing = me.edits.lock(&record.id).await;
            let record = afresh(me.store.as_ref(), record).await;
            let Some(reported_at) = record.execution.as_ref().map(|e| e.reported_at) else {
                return;
            };
            let strays = record.strays.iter().map(|s| (s.chat_id, Some(s.message_id)));
            let mut every: Vec<(i64, i32)> = record
                .messages()
                .chain(strays)
                .filter_map(|(chat, message)| message.map(|m| (chat, m)))
                .collect();
            every.sort_unstable();
            every.dedup();
            let mut all_shown = true;
            for (chat_id, message_id) in every {
                let view = me.view(&record, chat_id);
                if let Err(e) = me
                    .messenger
                    .update_message(&record, chat_id, message_id, &view)
                    .await
                {
                    tracing::warn!(id = %record.id, reason = %e.reason, "could not show the outcome report");
                    all_shown = false;
                }
            }
            if all_shown
                && let Err(e) = me.store.mark_run_shown(&record.id, reported_at).await
            {
                tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome report");
            }
        });
    }

    /// Marks `unknown` the confirmed calls whose route's `expect_outcome_seconds` passed
    /// with no report, now and then every `every`, until `stop`. The leader's work: the
    /// database decides which calls are due, so a restart or a change of leader loses
    /// none.
    pub async fn run_outcome_sweep(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        loop {
            if self.lead.leading() {
                self.sweep_overdue_runs().await;
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    async fn sweep_overdue_runs(self: &Arc<Self>) {
        loop {
            match self.store.overdue_runs(now(), SWEEP_BATCH).await {
                Ok(marked) => {
                    let full = marked.len() == SWEEP_BATCH as usize;
                    for r in &marked {
                        tracing::info!(id = %r.id, agent = %r.agent, tool = %r.tool,
                            "no outcome reported in time: unknown");
                        self.on_run(r);
                    }
                    if !full {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not mark overdue outcome reports");
                    return;
                }
            }
        }
    }

    /// After a (re)start: shows the runs a crash kept from their messages.
    pub(super) async fn show_unshown_runs(self: &Arc<Self>) -> Result<(), StorageError> {
        for record in self.store.unshown_runs().await? {
            tracing::info!(id = %record.id, "showing an outcome report a restart interrupted");
            self.show_run(record);
        }
        Ok(())
    }
}

/// `record` as stored now (as given when it cannot be read): an edit in the
/// background shows what is, not what was when it was queued.
pub(super) async fn afresh(questions: &dyn Questions, record: Question) -> Question {
    match questions.get(&record.id).await {
        Ok(Some(now)) => now,
        Ok(None) => record,
        Err(e) => {
            tracing::debug!(id = %record.id, error = %e, "showing the record as it was");
            record
        }
    }
}
