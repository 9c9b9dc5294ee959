//! The outbox: the webhook deliveries of ended requests, queued with the outcome and
//! attempted until delivered or given up.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit::{self, NewEvent};
use crate::domain::ids::DeliveryId;
use crate::domain::question::Question;
use crate::storage::rows::{self, OutboxRow, ms};
use crate::storage::{DeliveryAttempt, OutboxEntry, StorageError};

/// Queues the webhook of a request that just ended, inside the caller's audit
/// transaction: the outcome and its delivery commit together or not at all. When the
/// agent already has `max_backlog` undelivered webhooks, the delivery is stored as
/// `dropped` with a `webhook_dropped` event instead. The bound holds exactly: every
/// enqueue runs under the audit lock, so no two count at once.
pub(crate) async fn enqueue_delivery(
    tx: &mut Transaction<'_, Db>,
    r: &Question,
    now: OffsetDateTime,
    max_backlog: u32,
) -> Result<(), StorageError> {
    let Some(url) = &r.callback_url else {
        return Ok(());
    };
    // Through the partial index on pending rows: at most `max_backlog` entries to count.
    let (backlog,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM webhook_outbox WHERE agent = $1 AND state = 'pending'",
    )
    .bind(&r.agent)
    .fetch_one(&mut **tx)
    .await?;
    let backlog = u64::try_from(backlog).unwrap_or(0);
    let delivery_id = DeliveryId::generate();
    let dropped = backlog >= u64::from(max_backlog);
    sqlx::query(
        "INSERT INTO webhook_outbox (delivery_id, confirmation_id, agent, url, created_at,
             next_attempt_at, state, last_error, finished_at)
         VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $8)",
    )
    .bind(delivery_id.as_str())
    .bind(r.id.as_str())
    .bind(&r.agent)
    .bind(url)
    .bind(ms(now))
    .bind(if dropped { "dropped" } else { "pending" })
    .bind(dropped.then(|| rows::dropped_reason(backlog)))
    .bind(dropped.then(|| ms(now)))
    .execute(&mut **tx)
    .await?;
    if dropped {
        let event =
            audit::webhook_dropped(r.id.as_str(), delivery_id.as_str(), &r.agent, backlog, now);
        append_event(tx, &event).await?;
    }
    Ok(())
}

/// See [`crate::storage::Outbox::due_deliveries`].
pub(crate) async fn due_deliveries(
    pool: &Pool<Db>,
    now: OffsetDateTime,
    limit: u32,
) -> Result<Vec<OutboxEntry>, StorageError> {
    let rows: Vec<OutboxRow> = sqlx::query_as(concat!(
        "SELECT delivery_id, confirmation_id, agent, url, created_at, attempts
         FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= $1
         ORDER BY next_attempt_at, ",
        insertion_order!(),
        " LIMIT $2"
    ))
    .bind(ms(now))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(OutboxRow::into_entry).collect()
}

/// See [`crate::storage::Outbox::next_delivery_due`].
pub(crate) async fn next_delivery_due(
    pool: &Pool<Db>,
) -> Result<Option<OffsetDateTime>, StorageError> {
    let (due,): (Option<i64>,) =
        sqlx::query_as("SELECT MIN(next_attempt_at) FROM webhook_outbox WHERE state = 'pending'")
            .fetch_one(pool)
            .await?;
    Ok(due.and_then(rows::from_ms))
}

/// See [`crate::storage::Outbox::next_delivery_due_after`].
pub(crate) async fn next_delivery_due_after(
    pool: &Pool<Db>,
    after: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, StorageError> {
    let (due,): (Option<i64>,) = sqlx::query_as(
        "SELECT MIN(next_attempt_at) FROM webhook_outbox
         WHERE state = 'pending' AND next_attempt_at > $1",
    )
    .bind(ms(after))
    .fetch_one(pool)
    .await?;
    Ok(due.and_then(rows::from_ms))
}

/// See [`crate::storage::Outbox::due_deliveries_by_agent`]. Each agent's rows are ranked by
/// when they are due (then by when they were queued) and served rank by rank: one
/// agent's thousand due rows come after every other agent's first. Ties break by bytes
/// on either backend.
pub(crate) async fn due_deliveries_by_agent(
    pool: &Pool<Db>,
    now: OffsetDateTime,
    per_agent: u32,
) -> Result<Vec<OutboxEntry>, StorageError> {
    let rows: Vec<OutboxRow> = sqlx::query_as(concat!(
        "SELECT delivery_id, confirmation_id, agent, url, created_at, attempts FROM (
             SELECT delivery_id, confirmation_id, agent, url, created_at, attempts,
                    next_attempt_at,
                    ROW_NUMBER() OVER (
                        PARTITION BY agent
                        ORDER BY next_attempt_at, created_at, delivery_id",
        bytewise!(),
        "
                    ) AS turn
             FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= $1
         ) AS due WHERE turn <= $2 ORDER BY turn, next_attempt_at, delivery_id",
        bytewise!()
    ))
    .bind(ms(now))
    .bind(i64::from(per_agent))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(OutboxRow::into_entry).collect()
}

/// The audit event a webhook attempt's `result` appends: a final one's, `None` for a
/// retry (which changes nothing but the outbox row, and so needs no audit lock).
pub(crate) fn attempt_event(
    entry: &OutboxEntry,
    result: &DeliveryAttempt,
    now: OffsetDateTime,
) -> Option<NewEvent> {
    let (id, delivery) = (entry.confirmation_id.as_str(), entry.delivery_id.as_str());
    match result {
        DeliveryAttempt::Delivered => Some(audit::webhook(id, delivery, true, None, now)),
        DeliveryAttempt::Retry { .. } => None,
        DeliveryAttempt::GiveUp { error } => {
            Some(audit::webhook(id, delivery, false, Some(error), now))
        }
    }
}

/// The attempt statements of a table of deliveries (`delivered`, `retry`, `given_up`),
/// each conditional on the row still pending.
macro_rules! attempt_statements {
    ($table:literal) => {
        [
            concat!(
                "UPDATE ",
                $table,
                " SET state = 'delivered', attempts = attempts + 1,
                    last_error = NULL, finished_at = $1
                 WHERE delivery_id = $2 AND state = 'pending'"
            ),
            concat!(
                "UPDATE ",
                $table,
                " SET attempts = attempts + 1, next_attempt_at = $1,
                    last_error = $2 WHERE delivery_id = $3 AND state = 'pending'"
            ),
            concat!(
                "UPDATE ",
                $table,
                " SET state = 'given_up', attempts = attempts + 1,
                    last_error = $1, finished_at = $2
                 WHERE delivery_id = $3 AND state = 'pending'"
            ),
        ]
    };
}

/// The tables whose rows are deliveries attempted until delivered or given up.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Deliveries {
    /// `webhook_outbox`: the agents' webhooks.
    Webhooks,
    /// `outage_alerts`: the Telegram outages' alerts.
    Alerts,
}

impl Deliveries {
    fn statements(self) -> [&'static str; 3] {
        match self {
            Deliveries::Webhooks => attempt_statements!("webhook_outbox"),
            Deliveries::Alerts => attempt_statements!("outage_alerts"),
        }
    }
}

/// Records an attempt of delivery `delivery_id` of `table` in `tx` (an audit transaction
/// when `event`, the attempt's audit event, is some) and commits; see
/// [`crate::storage::Outbox::delivery_attempted`]. Conditional on the delivery still
/// pending: another process (a CLI tool, a second worker) that already finished it keeps
/// its outcome, and no second, contradictory audit event is chained.
pub(crate) async fn delivery_attempted(
    mut tx: Transaction<'_, Db>,
    table: Deliveries,
    delivery_id: &str,
    result: &DeliveryAttempt,
    event: Option<&NewEvent>,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    let [delivered, retry, given_up] = table.statements();
    let q = match result {
        DeliveryAttempt::Delivered => sqlx::query(delivered).bind(ms(now)),
        DeliveryAttempt::Retry { next_at, error } => {
            sqlx::query(retry).bind(ms(*next_at)).bind(error.as_str())
        }
        DeliveryAttempt::GiveUp { error } => {
            sqlx::query(given_up).bind(error.as_str()).bind(ms(now))
        }
    };
    let changed = q.bind(delivery_id).execute(&mut *tx).await?.rows_affected() == 1;
    if let Some(e) = event.filter(|_| changed) {
        append_event(&mut tx, e).await?;
    }
    tx.commit().await?;
    Ok(())
}
