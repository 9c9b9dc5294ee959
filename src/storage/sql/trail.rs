//! The audit trail, the agents' event streams and the gauges read from the tables.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::Db;
use crate::domain::audit::{self, AuditEvent, StoredRow, StoredStatus};
use crate::domain::ids::QuestionId;
use crate::storage::rows::{self, AuditRow, ms};
use crate::storage::{AgentEvent, Gauges, StorageError};

/// See [`crate::storage::Audit::events_for`].
pub(crate) async fn events_for(
    pool: &Pool<Db>,
    id: &QuestionId,
) -> Result<Vec<AuditEvent>, StorageError> {
    let rows: Vec<AuditRow> =
        sqlx::query_as("SELECT * FROM audit_events WHERE confirmation_id = $1 ORDER BY seq")
            .bind(id.as_str())
            .fetch_all(pool)
            .await?;
    rows.into_iter().map(AuditRow::into_event).collect()
}

/// See [`crate::storage::Audit::audit_rows`].
pub(crate) async fn audit_rows(
    pool: &Pool<Db>,
    since: Option<OffsetDateTime>,
) -> Result<Vec<StoredRow>, StorageError> {
    let rows: Vec<AuditRow> =
        sqlx::query_as("SELECT * FROM audit_events WHERE at >= $1 ORDER BY seq")
            .bind(since.map_or(i64::MIN, ms))
            .fetch_all(pool)
            .await?;
    rows.into_iter().map(AuditRow::into_stored).collect()
}

/// See [`crate::storage::Audit::audit_head`].
pub(crate) async fn audit_head(pool: &Pool<Db>) -> Result<audit::Head, StorageError> {
    let last: Option<(i64, String)> =
        sqlx::query_as("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            .fetch_optional(pool)
            .await?;
    rows::head(last)
}

/// See [`crate::storage::Messages::route_chats`].
pub(crate) async fn route_chats(pool: &Pool<Db>) -> Result<Vec<(String, i64)>, StorageError> {
    Ok(sqlx::query_as("SELECT route, chat_id FROM route_chats")
        .fetch_all(pool)
        .await?)
}

/// See [`crate::storage::AgentEvents::agent_events`].
pub(crate) async fn agent_events(
    pool: &Pool<Db>,
    agent: &str,
    after: i64,
    limit: u32,
) -> Result<Vec<AgentEvent>, StorageError> {
    let rows: Vec<(i64, String, String)> = sqlx::query_as(
        "SELECT seq, kind, data FROM agent_events WHERE agent = $1 AND seq > $2
         ORDER BY seq LIMIT $3",
    )
    .bind(agent)
    .bind(after)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, kind, data)| AgentEvent { seq, kind, data })
        .collect())
}

/// See [`crate::storage::AgentEvents::purge_agent_events`].
pub(crate) async fn purge_agent_events(
    pool: &Pool<Db>,
    before: OffsetDateTime,
) -> Result<u64, StorageError> {
    Ok(sqlx::query("DELETE FROM agent_events WHERE at < $1")
        .bind(ms(before))
        .execute(pool)
        .await?
        .rows_affected())
}

/// See [`crate::storage::AgentEvents::last_agent_event`].
pub(crate) async fn last_agent_event(pool: &Pool<Db>, agent: &str) -> Result<i64, StorageError> {
    let (n,): (Option<i64>,) = sqlx::query_as("SELECT MAX(seq) FROM agent_events WHERE agent = $1")
        .bind(agent)
        .fetch_one(pool)
        .await?;
    Ok(n.unwrap_or(0))
}

/// See [`crate::storage::Administration::gauges`]. All read through partial indexes (pending
/// rows, dropped deliveries), so a scrape stays cheap however much history the
/// database holds; agents in byte order, so a scrape reads the same on either backend.
pub(crate) async fn gauges(pool: &Pool<Db>) -> Result<Gauges, StorageError> {
    let pending: Vec<(String, i64, i64)> = sqlx::query_as(concat!(
        "SELECT agent, COUNT(*), MIN(created_at) FROM confirmations
         WHERE status = 'pending' GROUP BY agent ORDER BY agent",
        bytewise!()
    ))
    .fetch_all(pool)
    .await?;
    let (backlog,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM webhook_outbox WHERE state = 'pending'")
            .fetch_one(pool)
            .await?;
    let dropped: Vec<(String, i64)> = sqlx::query_as(concat!(
        "SELECT agent, COUNT(*) FROM webhook_outbox WHERE state = 'dropped'
         GROUP BY agent ORDER BY agent",
        bytewise!()
    ))
    .fetch_all(pool)
    .await?;
    Ok(rows::gauges(pending, backlog, dropped))
}

/// The audit trail in sequence order and every request's status, as `tx` sees them:
/// [`crate::storage::Audit::audit_snapshot`], and `migrate-to-postgres`'s check of what
/// it copied before it commits.
pub(crate) async fn audit_snapshot_in(
    tx: &mut Transaction<'_, Db>,
) -> Result<(Vec<StoredRow>, Vec<StoredStatus>), StorageError> {
    let rows: Vec<AuditRow> = sqlx::query_as("SELECT * FROM audit_events ORDER BY seq")
        .fetch_all(&mut **tx)
        .await?;
    let statuses: Vec<(String, String)> = sqlx::query_as(concat!(
        "SELECT id, status FROM confirmations ORDER BY created_at, id",
        bytewise!()
    ))
    .fetch_all(&mut **tx)
    .await?;
    rows::audit_snapshot(rows, statuses)
}
