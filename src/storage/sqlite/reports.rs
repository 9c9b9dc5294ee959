//! Run reports by SQLite's group commit. A report is judged on its question as read,
//! then its row's update and the two rows it appends (its audit event, its stream
//! event) are written by the group commit's own connection, in one transaction with
//! the window hits and rule-decided calls queued meanwhile. Through sqlx a report held
//! the writer for nine round trips and its own fsync while the agent's next call waited
//! behind it (BENCHMARKS.md, B7). A report whose row changed after it was read, or
//! whose question owes a webhook, goes the sqlx way, which judges it again under the
//! audit lock.

use std::ops::ControlFlow;

use time::OffsetDateTime;
use tokio::sync::oneshot;

use super::{AuditTip, SqliteStore, sql};
use crate::domain::audit::{self, NewEvent};
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::domain::run_report::{NewRunReport, RunReport};
use crate::storage::rows::{self, ms};
use crate::storage::{RunReported, StorageError, hits};

/// A report waiting for the group commit: everything it writes, made before it is
/// queued, and the run's columns as read, which the row must still hold.
pub(super) struct QueuedReport {
    id: QuestionId,
    /// `run_status` and `run_at` as judged: `None` for a run never reported.
    was: Option<(&'static str, i64)>,
    run: RunReport,
    audit: NewEvent,
    /// The stream's `status` event of the run (`agent_events`).
    stream: String,
    agent: String,
    at: i64,
    /// Whether it was written (`false`: the row no longer held the run as read).
    reply: oneshot::Sender<Result<bool, StorageError>>,
}

impl QueuedReport {
    /// Fails this report with `error`, what stopped its batch.
    pub(super) fn fail(self, error: StorageError) {
        // The reporter may have hung up; nothing is left to tell.
        let _ = self.reply.send(Err(error));
    }

    /// Answers the reporter: written, or not (the row had changed).
    pub(super) fn answer(self, written: bool) {
        let _ = self.reply.send(Ok(written));
    }
}

impl SqliteStore {
    /// See [`Runs::report_run`](crate::storage::Runs::report_run): by the group commit
    /// (the module's header) where the database is a file, else the sqlx way.
    pub(super) async fn write_run_report(
        &self,
        id: &QuestionId,
        agent: &str,
        report: &NewRunReport,
        now: OffsetDateTime,
    ) -> Result<RunReported, StorageError> {
        if self.file.is_some() {
            let read = sql::get(&self.pool, id).await?;
            let before = match RunReported::judge(read, agent, report) {
                ControlFlow::Break(answer) => return Ok(answer),
                ControlFlow::Continue(before) => before,
            };
            // A webhook is queued by the sqlx way's statements (the outbox's backlog).
            if before.callback_url.is_none() {
                let (queued, written) = queue_entry(&before, report, now);
                if self.enqueue(|state| state.reports.push(queued)) && written.outcome().await? {
                    // The record as it now is, its run included.
                    return Ok(match sql::get(&self.pool, id).await? {
                        Some(after) => RunReported::Taken(after),
                        None => RunReported::NotFound,
                    });
                }
            }
        }
        let (_writer, tx) = self.audit_tx().await?;
        sql::report_run(tx, id, agent, report, now, self.outbox_backlog_bound()).await
    }
}

/// What a report over `before`'s run writes, for the queue, and where its reporter waits.
fn queue_entry(
    before: &Question,
    report: &NewRunReport,
    now: OffsetDateTime,
) -> (QueuedReport, Written) {
    // At the millisecond, as the row holds it: the stream's event and the record the
    // reporter gets say what a later read says.
    let now = rows::from_ms(ms(now)).unwrap_or(now);
    let run = report.clone().at(now);
    let mut after = before.clone();
    after.run_report = Some(run.clone());
    let (reply, written) = oneshot::channel();
    let queued = QueuedReport {
        id: before.id.clone(),
        was: before
            .run_report
            .as_ref()
            .map(|was| (was.status.as_str(), ms(was.reported_at))),
        audit: audit::outcome_reported(&after, &run, before.run_report.as_ref()),
        stream: after.run_event().to_string(),
        agent: before.agent.clone(),
        at: ms(now),
        run,
        reply,
    };
    (queued, Written(written))
}

/// The reporter's end of a [`QueuedReport`].
struct Written(oneshot::Receiver<Result<bool, StorageError>>);

impl Written {
    /// Whether the report was written, once its batch is committed or failed. A
    /// report dropped unanswered (its writer died) is an error: whether it was stored
    /// is not known.
    async fn outcome(self) -> Result<bool, StorageError> {
        self.0.await.unwrap_or_else(|_| {
            Err(StorageError::Batch(
                "the group commit holding this run report was abandoned".into(),
            ))
        })
    }
}

/// A report's update: made only while the row holds the run as it was judged (the
/// same `run_status` and `run_at`, both `NULL` for none) and may still take one.
const UPDATE_RUN: &str = "UPDATE confirmations SET run_status = ?, run_summary = ?,
        run_error = ?, run_duration_ms = ?, run_at = ?, run_shown = (message_id IS NULL),
        run_overdue = 0
    WHERE id = ? AND run_status IS ? AND run_at IS ?
      AND (run_status IS NULL OR run_status = 'unknown')";

/// Writes `reports` in `tx`, after the batch's hits, chained onto `tip`: each one's
/// update, and where it was made, its audit row and its stream row. Returns the chain's
/// new tip and, report by report, whether it was written.
pub(super) fn write_reports(
    tx: &rusqlite::Transaction<'_>,
    mut tip: AuditTip,
    reports: &[QueuedReport],
) -> rusqlite::Result<(AuditTip, Vec<bool>)> {
    if reports.is_empty() {
        return Ok((tip, Vec::new()));
    }
    let mut update = tx.prepare_cached(UPDATE_RUN)?;
    let mut streamed = tx.prepare_cached(super::plain::INSERT_AGENT_EVENT)?;
    let mut audited = tx.prepare_cached(super::plain::INSERT_AUDIT_EVENT)?;
    let mut written = Vec::with_capacity(reports.len());
    for r in reports {
        let run = &r.run;
        let changed = update.execute(rusqlite::params![
            run.status.as_str(),
            run.summary.as_deref(),
            run.error.as_deref(),
            run.duration_ms
                .map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
            r.at,
            r.id.as_str(),
            r.was.map(|(status, _)| status),
            r.was.map(|(_, at)| at),
        ])? == 1;
        written.push(changed);
        if !changed {
            continue;
        }
        for row in rows::chain(Some(tip.clone()), std::slice::from_ref(&r.audit)) {
            super::plain::insert_audit_row(&mut audited, &row)?;
            tip = (row.seq, row.hash);
        }
        streamed.execute(rusqlite::params![
            r.agent.as_str(),
            r.id.as_str(),
            "status",
            r.stream.as_str(),
            r.at,
        ])?;
    }
    Ok((tip, written))
}

/// Answers every reporter of a batch: `written` says, in order, whether each was
/// written; a failure fails each (as [`hits::answer`] does the hits).
pub(super) fn answer(reports: Vec<QueuedReport>, written: Result<&[bool], &StorageError>) {
    match written {
        Ok(written) => {
            for (report, &written) in reports.into_iter().zip(written) {
                report.answer(written);
            }
        }
        Err(e) => {
            for report in reports {
                report.fail(hits::for_each_caller(e));
            }
        }
    }
}
