//! After the yes (issue 36): the agent's report of running a confirmed call, the reports
//! that never came (`expect_outcome_seconds`); the board ([`super::board`]) shows either
//! in every message of the question, where the approver decided.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Service, ServiceError, now};
use crate::config::Agent;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::domain::run_report::NewRunReport;
use crate::storage::RunReported;

/// How many overdue runs one sweep marks `unknown` at most (the next sweep takes the
/// rest).
const SWEEP_BATCH: u32 = 200;

impl Service {
    /// Takes the agent's report of running its confirmed call `id`: only the agent that
    /// asked may report (another's is not found), only a confirmed call ran, and one
    /// report counts (the same again is answered alike; a different one is refused).
    pub async fn report_run(
        self: &Arc<Self>,
        agent: &Agent,
        id: &QuestionId,
        report: NewRunReport,
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
            RunReported::Conflict(r) => Err(ServiceError::RunReportRefused {
                why: format!(
                    "a different outcome was already reported for this confirmation ({}); one \
                     report counts",
                    r.run_report
                        .as_ref()
                        .map_or("unknown", |e| e.status.as_str())
                ),
                record: Box::new(r),
            }),
            RunReported::NotConfirmed(r) => Err(ServiceError::RunReportRefused {
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
        self.board.show_run(r.clone());
    }

    /// Marks `unknown` the confirmed calls whose route's `expect_outcome_seconds` passed
    /// with no report, now and then every `every`, until `stop`. The leader's work: the
    /// database decides which calls are due, so a restart or a change of leader loses
    /// none.
    pub async fn run_report_sweep(self: Arc<Self>, every: Duration, stop: CancellationToken) {
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
}
