//! The statements both backends run, written once.
//!
//! This file is compiled twice, as `sqlite::sql` and `postgres::sql` (each backend
//! declares it with `#[path = "sql/mod.rs"] mod sql;`), split by role into the files
//! of this folder, and each time `Db` is that backend's
//! database type. Why not generic code over sqlx's `Database`: every function would
//! carry a dozen `Encode`/`Decode`/`Executor` bounds that Rust does not imply, for code
//! that is in fact about two concrete databases. Compiled against each, the types are
//! plain and the text is one. The role traits' implementations that run these
//! statements are written once likewise (`common.rs`).
//!
//! The SQL here is the dialect the two share: `$N` placeholders (SQLite reads them too),
//! `ON CONFLICT … DO NOTHING/UPDATE`, `COUNT`, `MIN`. What differs is the parent
//! backend's to give:
//! * `Db`: `sqlx::Sqlite` or `sqlx::Postgres`;
//! * `append_events`: SQLite chains from the tip it keeps under its audit mutex,
//!   PostgreSQL reads the head under its advisory lock (and sends the change notices);
//! * `insertion_order!()`: the column that orders `copies`, `strays` and the outbox as
//!   their rows were added (SQLite's `rowid`; PostgreSQL's identity column `pos`);
//! * `bytewise!()`: what makes an `ORDER BY` of text compare bytes (nothing on SQLite,
//!   whose default collation does; `COLLATE "C"` on PostgreSQL);
//! * `not_shown!(prefix)`: "this `outcome_shown` flag is false", in the very form the
//!   backend's partial indexes are written in (`outcome_shown = 0` on SQLite, whose
//!   flags are integers; `NOT outcome_shown` on PostgreSQL);
//! * `lock_window!()`: what keeps a window row as read until the commit (nothing on
//!   SQLite, whose write transaction holds the database; `FOR UPDATE OF w` on
//!   PostgreSQL).
//!
//! Transactions are the backend's to open (its audit lock held, see each backend's
//! header): a function taking `&mut Transaction` runs inside it and never commits; one
//! taking the `Transaction` itself is a whole write (a step such as `extend`, a copy
//! added) and commits it, or drops it (rolling back) when its condition did not hold.

use serde_json::json;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool, QueryBuilder, Transaction};
use time::OffsetDateTime;

use super::Db;
use super::append_events;
use crate::domain::audit::{self, AuditEvent, NewEvent, StoredRow, StoredStatus};
use crate::domain::execution::{Recalled, Report, RunStatus};
use crate::domain::grant::{Grant, GrantSource, Scope};
use crate::domain::ids::{
    CallbackToken, ConfirmationId, DeliveryId, GrantId, IdempotencyKey, OwnerId, ToolName,
};
use crate::domain::interaction::{Answer, TimeoutAction};
use crate::domain::question::{Decision, Operator, Question, Step, Window, WindowKey, rfc3339};
use crate::storage::hits::QueuedHit;
use crate::storage::rows::{
    self, AnswerRow, AuditRow, CopyRow, GrantRow, OutboxRow, PendingRow, Row, StrayRow, WindowRow,
    grant_columns, insert_confirmations, ms, operator_columns, select_grants_where, select_where,
    select_windows_where, user_column,
};
use crate::storage::{
    AgentEvent, Answered, Decided, DeliveryAttempt, EndedCursor, Gauges, GrantInserted,
    IDEMPOTENCY_TTL, Inserted, LiveWindow, OutboxEntry, PendingEntry, RunReported, Shown,
    StorageError, WindowUse,
};

mod grants;
mod outbox;
mod questions;
mod runs;
mod steps;
mod trail;
mod windows;

pub(crate) use self::grants::*;
pub(crate) use self::outbox::*;
pub(crate) use self::questions::*;
pub(crate) use self::runs::*;
pub(crate) use self::steps::*;
pub(crate) use self::trail::*;
pub(crate) use self::windows::*;

/// Appends `event` to the audit chain inside `tx`, the backend's audit transaction
/// (its audit lock held): see the backend's `append_events`.
pub(crate) async fn append_event(
    tx: &mut Transaction<'_, Db>,
    event: &NewEvent,
) -> Result<(), StorageError> {
    append_events(tx, std::slice::from_ref(event)).await
}

/// The question `id` as `tx` sees it, with its answers, copies and strays (`None`: no
/// such question).
pub(crate) async fn read_in(
    tx: &mut Transaction<'_, Db>,
    id: &ConfirmationId,
) -> Result<Option<Question>, StorageError> {
    let row = sqlx::query_as::<_, Row>(select_where!("id = $1"))
        .bind(id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    match row {
        Some(row) => Ok(Some(hydrate(tx, row.into_domain()?).await?)),
        None => Ok(None),
    }
}

/// What [`hydrate`] reads with every whole question: its answers, copies and strays, each
/// looked up by an index on `question_id` (never a scan: one read per tap, poll and edit,
/// on a table that only grows; the SQLite store's tests check the plans).
pub(crate) const ANSWERS_OF: &str =
    "SELECT respondent, user_id, username, name, value_json, is_default, once, reason, at
     FROM answers WHERE question_id = $1 ORDER BY seq";
pub(crate) const COPIES_OF: &str = concat!(
    "SELECT recipient, chat_id, message_id, outcome_shown FROM copies
     WHERE question_id = $1 ORDER BY ",
    insertion_order!()
);
pub(crate) const STRAYS_OF: &str = concat!(
    "SELECT chat_id, message_id, outcome_shown FROM strays
     WHERE question_id = $1 ORDER BY ",
    insertion_order!()
);

/// Reads a question's answers, copies and strays into it.
pub(crate) async fn hydrate(
    conn: &mut <Db as Database>::Connection,
    r: Question,
) -> Result<Question, StorageError> {
    let answers: Vec<AnswerRow> = sqlx::query_as(ANSWERS_OF)
        .bind(r.id.as_str())
        .fetch_all(&mut *conn)
        .await?;
    let copies: Vec<CopyRow> = sqlx::query_as(COPIES_OF)
        .bind(r.id.as_str())
        .fetch_all(&mut *conn)
        .await?;
    let strays: Vec<StrayRow> = sqlx::query_as(STRAYS_OF)
        .bind(r.id.as_str())
        .fetch_all(&mut *conn)
        .await?;
    rows::fill(r, answers, copies, strays)
}

/// [`hydrate`] for each of `rows`, in order.
pub(crate) async fn hydrate_all(
    conn: &mut <Db as Database>::Connection,
    rows: Vec<Row>,
) -> Result<Vec<Question>, StorageError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(hydrate(&mut *conn, row.into_domain()?).await?);
    }
    Ok(out)
}

/// The question `row` is, read whole through `conn` (`None` stays `None`).
async fn one(
    conn: &mut PoolConnection<Db>,
    row: Option<Row>,
) -> Result<Option<Question>, StorageError> {
    match row {
        Some(row) => Ok(Some(hydrate(conn, row.into_domain()?).await?)),
        None => Ok(None),
    }
}
