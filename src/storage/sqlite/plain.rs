//! SQLite's group commit written by the audit lock's own `rusqlite` connection: a
//! batch of plain hits (nothing to queue but their rows) in one transaction, chained
//! onto the audit tip the lock holds. What is not plain goes the sqlx way
//! (`write_mixed_hits` beside it in `sqlite.rs`).

use std::path::Path;
use std::time::Duration;

use super::reports::{QueuedReport, write_reports};
use super::{AuditTip, HitWriter};
use crate::domain::audit::{self, GENESIS_HASH, NewEvent};
use crate::domain::question::{Question, Via};
use crate::storage::hits::QueuedHit;
use crate::storage::rows::{self, confirmation_columns, ms, operator_columns};
use crate::storage::{IDEMPOTENCY_TTL, StorageError};

/// A hit the lock's own connection writes ([`write_plain_hits`]): nothing to queue
/// besides its rows (no interaction, no webhook). An idempotency key is written there
/// too (the agents' usual retry key, the MCP gateway's on every call); only when the
/// key is already held does the batch go the sqlx way, which finds its holder.
pub(super) fn is_plain(hit: &QueuedHit) -> bool {
    hit.record.interaction.is_none() && hit.record.callback_url.is_none()
}

/// Why [`write_plain_hits`] wrote nothing.
pub(super) enum Plain {
    /// A hit's idempotency key is held by another request.
    Taken,
    Failed(StorageError),
}

/// Why one try of [`write_plain_tx`] failed.
enum PlainTry {
    Taken,
    Db(rusqlite::Error),
}

impl From<rusqlite::Error> for PlainTry {
    fn from(e: rusqlite::Error) -> PlainTry {
        PlainTry::Db(e)
    }
}

/// Opens the group commit's connection with the settings of the pool's (see
/// [`SqliteStore::open`]): every commit durable (`synchronous = FULL`), foreign keys
/// on, and a writer that finds the database locked waits rather than fails.
fn open_hit_writer(file: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    Ok(conn)
}

/// Writes a batch of plain window hits ([`is_plain`]), then `reports`, in one `BEGIN
/// IMMEDIATE` transaction on the lock's own connection, from a blocking thread: for
/// each hit its record, its stream event and its audit row, chained from the tip the
/// lock holds (read when it holds none); for each report what
/// [`write_reports`] writes. Returns which reports were written. On success the lock holds the new tip. A cached tip that turned
/// out stale (someone appended without clearing it) fails on the audit table's primary
/// key, and the batch is tried once more from the stored tip. A connection that failed
/// is dropped, so the next batch opens a fresh one.
pub(super) fn write_plain_hits(
    writer: &mut HitWriter,
    file: &Path,
    batch: &[QueuedHit],
    reports: &[QueuedReport],
) -> Result<Vec<bool>, Plain> {
    let batch_error = |e: rusqlite::Error| Plain::Failed(StorageError::Batch(e.to_string()));
    let mut conn = match writer.conn.take() {
        Some(conn) => conn,
        None => open_hit_writer(file).map_err(batch_error)?,
    };
    let mut cached = writer.tip.take();
    loop {
        let from_cache = cached.is_some();
        match write_plain_tx(&mut conn, cached.take(), batch, reports) {
            Ok((tip, written)) => {
                writer.tip = Some(tip);
                writer.conn = Some(conn);
                return Ok(written);
            }
            // Rolled back, the connection sound; the tip is read again next time.
            Err(PlainTry::Taken) => {
                writer.conn = Some(conn);
                return Err(Plain::Taken);
            }
            Err(PlainTry::Db(e)) if from_cache => {
                tracing::debug!(error = %e, "group commit failed on the cached audit tip; trying again from the stored one");
            }
            Err(PlainTry::Db(e)) => return Err(batch_error(e)),
        }
    }
}

/// One try of [`write_plain_hits`]; returns the chain's new tip and which reports
/// were written.
fn write_plain_tx(
    conn: &mut rusqlite::Connection,
    tip: Option<AuditTip>,
    batch: &[QueuedHit],
    reports: &[QueuedReport],
) -> Result<(AuditTip, Vec<bool>), PlainTry> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let tip = match tip {
        Some(tip) => tip,
        None => tx
            .query_row(
                "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok((0, GENESIS_HASH.to_owned())),
                e => Err(e),
            })?,
    };
    // Numbered and hashed onto the tip before anything is written.
    let events: Vec<NewEvent> = batch.iter().map(|h| audit::at_once(&h.record)).collect();
    let chained = rows::chain(Some(tip.clone()), &events);
    {
        let mut records = tx.prepare_cached(INSERT_CONFIRMATION)?;
        let mut events = tx.prepare_cached(INSERT_AGENT_EVENT)?;
        let mut audited = tx.prepare_cached(INSERT_AUDIT_EVENT)?;
        let mut release = tx.prepare_cached(
            "UPDATE confirmations SET idempotency_key = NULL
             WHERE agent = ? AND idempotency_key = ? AND created_at <= ?",
        )?;
        for (hit, row) in batch.iter().zip(&chained) {
            let r = &hit.record;
            // As `sql::insert_in`: a key whose request is older than the TTL is free.
            if let Some(key) = &r.idempotency_key {
                release.execute(rusqlite::params![
                    r.agent.as_str(),
                    key.as_str(),
                    ms(hit.now - IDEMPOTENCY_TTL),
                ])?;
            }
            let inserted = insert_record(&mut records, r);
            match inserted {
                Ok(_) => {}
                Err(e)
                    if r.idempotency_key.is_some()
                        && e.sqlite_error_code()
                            == Some(rusqlite::ErrorCode::ConstraintViolation) =>
                {
                    return Err(PlainTry::Taken);
                }
                Err(e) => return Err(e.into()),
            }
            events.execute(rusqlite::params![
                r.agent.as_str(),
                r.id.as_str(),
                "status",
                r.status_event().to_string(),
                ms(hit.now),
            ])?;
            insert_audit_row(&mut audited, row)?;
        }
    }
    let tip = chained
        .last()
        .map_or(tip, |row| (row.seq, row.hash.clone()));
    let (tip, written) = write_reports(&tx, tip, reports)?;
    tx.commit()?;
    Ok((tip, written))
}

/// A stream event's row (`agent_events`).
pub(super) const INSERT_AGENT_EVENT: &str =
    "INSERT INTO agent_events (agent, question_id, kind, data, at) VALUES (?, ?, ?, ?, ?)";

/// An audit event's row, numbered and hashed ([`insert_audit_row`]).
pub(super) const INSERT_AUDIT_EVENT: &str = "INSERT INTO audit_events (seq, at, confirmation_id,
    kind, actor, detail, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";

/// Appends `row` with the prepared [`INSERT_AUDIT_EVENT`].
pub(super) fn insert_audit_row(
    audited: &mut rusqlite::CachedStatement<'_>,
    row: &rows::Chained<'_>,
) -> rusqlite::Result<usize> {
    audited.execute(rusqlite::params![
        row.seq,
        ms(row.event.at),
        row.event.confirmation_id.as_deref(),
        row.event.kind,
        row.event.actor.as_str(),
        row.detail.as_str(),
        row.prev_hash.as_str(),
        row.hash.as_str(),
    ])
}

/// One request's row, for the group commit's prepared statement (the columns in
/// the order [`insert_record`] binds them).
const INSERT_CONFIRMATION: &str = concat!(
    "INSERT INTO confirmations (",
    confirmation_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// Inserts `r`'s row with the group commit's prepared [`INSERT_CONFIRMATION`].
fn insert_record(
    records: &mut rusqlite::CachedStatement<'_>,
    r: &Question,
) -> rusqlite::Result<usize> {
    let (by_id, by_username, by_name) = operator_columns(&r.decided_by);
    records.execute(rusqlite::params![
        r.id.as_str(),
        r.agent.as_str(),
        r.route.as_str(),
        r.chat_id,
        r.tool.as_str(),
        r.owner_id.as_str(),
        r.args_hash.as_str(),
        r.params_json.as_str(),
        r.briefing.as_str(),
        r.context.as_deref(),
        r.allow_edit,
        i64::try_from(r.window_seconds).unwrap_or(i64::MAX),
        r.idempotency_key.as_ref().map(|k| k.as_str()),
        r.callback_token.as_str(),
        r.callback_url.as_deref(),
        r.message_id.map(i64::from),
        r.status.as_str(),
        r.via.map(Via::as_str),
        r.reason.as_str(),
        by_id,
        by_username,
        by_name,
        ms(r.created_at),
        ms(r.expires_at),
        r.decided_at.map(ms),
        r.interaction.as_ref().map(|i| i.interaction_id.as_str()),
        r.interaction
            .as_ref()
            .map(|i| serde_json::Value::Object(i.raw.clone()).to_string()),
        r.window_requested_seconds
            .map(|w| i64::try_from(w).unwrap_or(i64::MAX)),
        r.approved_once,
        r.has_call,
        rows::rule_name(r),
        rows::rule_json(r),
        rows::expect_outcome(r),
        rows::recalled_json(r),
        rows::run_due(r),
        r.args_schema.as_deref(),
        rows::server_column(r),
        rows::annotations_column(r),
    ])
}
