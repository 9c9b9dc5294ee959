//! What happened after the yes (issue 36): reports of confirmed calls' runs, the runs
//! never reported, the earlier run recalled to the next approver, and what a window let
//! through.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use std::ops::ControlFlow;

use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::outbox::enqueue_delivery;
use super::questions::push_agent_event;
use super::{Db, append_event, read_in, whole};
use crate::domain::audit;
use crate::domain::ids::{QuestionId, ToolName};
use crate::domain::question::Question;
use crate::domain::run_report::{NewRunReport, REPORTED_UNKNOWN, Recalled, RunStatus};
use crate::storage::rows::{WholeRow, ms};
use crate::storage::{RunReported, StorageError, WindowUse};

/// See [`crate::storage::Runs::report_run`]; runs in `tx`, the backend's audit
/// transaction, and commits when the report is taken.
pub(crate) async fn report_run(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    agent: &str,
    report: &NewRunReport,
    now: OffsetDateTime,
    max_backlog: u32,
) -> Result<RunReported, StorageError> {
    let before = match RunReported::judge(read_in(&mut tx, id).await?, agent, report) {
        ControlFlow::Break(answer) => return Ok(answer),
        ControlFlow::Continue(before) => before,
    };
    let run = report.clone().at(now);
    // Conditional on the run as read: of two reports racing (two replicas), one
    // changes the row and the other changes none.
    let changed = sqlx::query(
        "UPDATE confirmations SET run_status = $1, run_summary = $2, run_error = $3,
                run_duration_ms = $4, run_at = $5, run_shown = (message_id IS NULL),
                run_overdue = FALSE
             WHERE id = $6 AND (run_status IS NULL OR run_status = 'unknown')",
    )
    .bind(run.status.as_str())
    .bind(run.summary.as_deref())
    .bind(run.error.as_deref())
    .bind(
        run.duration_ms
            .map(|d| i64::try_from(d).unwrap_or(i64::MAX)),
    )
    .bind(ms(now))
    .bind(id.as_str())
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    let Some(after) = read_in(&mut tx, id).await? else {
        return Ok(RunReported::NotFound);
    };
    if !changed {
        return Ok(match &after.run_report {
            Some(stored) if stored.same_as(report) => RunReported::Same(after),
            _ => RunReported::Conflict(after),
        });
    }
    let replaced = before.run_report.as_ref();
    append_event(&mut tx, &audit::outcome_reported(&after, &run, replaced)).await?;
    push_agent_event(&mut tx, &after, "status", &after.run_event(), now).await?;
    enqueue_delivery(&mut tx, &after, now, max_backlog).await?;
    tx.commit().await?;
    Ok(RunReported::Taken(after))
}

/// See [`crate::storage::Runs::overdue_runs`]; runs in `tx`, the backend's audit
/// transaction, and commits.
pub(crate) async fn overdue_runs(
    mut tx: Transaction<'_, Db>,
    now: OffsetDateTime,
    limit: u32,
    max_backlog: u32,
) -> Result<Vec<Question>, StorageError> {
    // Through the partial index of calls still owed a report: only those are read.
    let due: Vec<(String,)> = sqlx::query_as(
        "SELECT id FROM confirmations
         WHERE run_status IS NULL AND run_due_at <= $1
         ORDER BY run_due_at LIMIT $2",
    )
    .bind(ms(now))
    .bind(i64::from(limit))
    .fetch_all(&mut *tx)
    .await?;
    let mut marked = Vec::with_capacity(due.len());
    for (id,) in due {
        let changed = sqlx::query(
            "UPDATE confirmations SET run_status = 'unknown', run_at = $1,
                    run_shown = (message_id IS NULL), run_overdue = TRUE
                 WHERE id = $2 AND run_status IS NULL",
        )
        .bind(ms(now))
        .bind(&id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        let id = QuestionId::parse(&id).map_err(|_| StorageError::Corrupt {
            id: id.clone(),
            what: "id".into(),
        })?;
        if !changed {
            continue;
        }
        let Some(r) = read_in(&mut tx, &id).await? else {
            continue;
        };
        append_event(&mut tx, &audit::outcome_missing(&r, now)).await?;
        push_agent_event(&mut tx, &r, "status", &r.run_event(), now).await?;
        enqueue_delivery(&mut tx, &r, now, max_backlog).await?;
        marked.push(r);
    }
    tx.commit().await?;
    Ok(marked)
}

/// See [`crate::storage::Runs::mark_run_shown`].
pub(crate) async fn mark_run_shown(
    pool: &Pool<Db>,
    id: &QuestionId,
    reported_at: OffsetDateTime,
) -> Result<(), StorageError> {
    // Conditional on the run shown: a late report that replaced it meanwhile still
    // needs its edit.
    sqlx::query("UPDATE confirmations SET run_shown = TRUE WHERE id = $1 AND run_at = $2")
        .bind(id.as_str())
        .bind(ms(reported_at))
        .execute(pool)
        .await?;
    Ok(())
}

/// See [`crate::storage::Runs::unshown_runs`].
pub(crate) async fn unshown_runs(pool: &Pool<Db>) -> Result<Vec<Question>, StorageError> {
    let rows: Vec<WholeRow> = sqlx::query_as(select_whole_where!("NOT run_shown ORDER BY run_at"))
        .fetch_all(pool)
        .await?;
    whole(rows)
}

/// The last reported run of a tool, as [`recall_run`] reads it.
#[derive(sqlx::FromRow)]
struct RunRow {
    id: String,
    run_status: String,
    run_summary: Option<String>,
    run_error: Option<String>,
    decided_at: i64,
    via: Option<String>,
    rule: Option<String>,
    decided_by_name: Option<String>,
    decided_by_username: Option<String>,
    run_overdue: bool,
}

/// See [`crate::storage::Runs::recall_run`].
pub(crate) async fn recall_run(
    pool: &Pool<Db>,
    agent: &str,
    tool: &ToolName,
    since: OffsetDateTime,
) -> Result<Option<Recalled>, StorageError> {
    let row: Option<RunRow> = sqlx::query_as(
        "SELECT id, run_status, run_summary, run_error, decided_at, via, rule,
                decided_by_name, decided_by_username, run_overdue
         FROM confirmations
         WHERE agent = $1 AND tool = $2 AND run_status IS NOT NULL AND decided_at >= $3
         ORDER BY decided_at DESC LIMIT 1",
    )
    .bind(agent)
    .bind(tool.as_str())
    .bind(ms(since))
    .fetch_optional(pool)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let status = RunStatus::parse(&row.run_status).ok_or_else(|| StorageError::Corrupt {
        id: row.id.clone(),
        what: "run_status".into(),
    })?;
    if !status.is_worrying() {
        return Ok(None);
    }
    let approved_by = match (row.via.as_deref(), row.decided_by_name, row.rule) {
        (Some("operator"), Some(name), _) => match row.decided_by_username {
            Some(u) => format!("{name} (@{u})"),
            None => name,
        },
        (Some("window"), _, _) => "an open window".to_owned(),
        (Some("rule"), _, Some(rule)) => format!("rule '{rule}'"),
        (Some("rule"), _, None) => "the rules' default".to_owned(),
        (Some("grant"), _, _) => "a grant".to_owned(),
        _ => "the service".to_owned(),
    };
    // An overdue `unknown` has no words (nobody reported); a reporter's says why
    // nobody knows, or that it could not tell.
    let words = match status {
        RunStatus::Failed => row.run_error.or(row.run_summary),
        RunStatus::Unknown if !row.run_overdue => Some(
            row.run_error
                .or(row.run_summary)
                .unwrap_or_else(|| REPORTED_UNKNOWN.to_owned()),
        ),
        _ => None,
    };
    Ok(Some(Recalled {
        id: row.id,
        tool: tool.as_str().to_owned(),
        status: status.as_str().to_owned(),
        approved_at_ms: row.decided_at,
        approved_by,
        words,
    }))
}

/// See [`crate::storage::Runs::window_use`].
pub(crate) async fn window_use(
    pool: &Pool<Db>,
    opened_by: &QuestionId,
) -> Result<WindowUse, StorageError> {
    // The calls of the window's own key since the request that opened it was decided
    // (a window opened again by a later approval counts from that approval).
    let (calls, failed): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN c.run_status = 'failed' THEN 1 ELSE 0 END), 0)
         FROM confirmations o JOIN confirmations c
           ON c.agent = o.agent AND c.tool = o.tool AND c.args_hash = o.args_hash
          AND c.created_at >= o.decided_at AND c.owner_id = o.owner_id AND c.route = o.route
          AND COALESCE(c.server, '') = COALESCE(o.server, '')
         WHERE o.id = $1 AND c.via = 'window'",
    )
    .bind(opened_by.as_str())
    .fetch_one(pool)
    .await?;
    Ok(WindowUse {
        calls: u64::try_from(calls).unwrap_or(0),
        failed: u64::try_from(failed).unwrap_or(0),
    })
}
