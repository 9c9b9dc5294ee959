//! The statements both backends run, written once.
//!
//! This file is compiled twice, as `sqlite::sql` and `postgres::sql` (each backend
//! declares it with `#[path = "sql/mod.rs"] mod sql;`), split by role into the files
//! of this folder, and each time `Db` is that backend's
//! database type. Why not generic code over sqlx's `Database`: every function would
//! carry a dozen `Encode`/`Decode`/`Executor` bounds that Rust does not imply, for code
//! that is in fact about two concrete databases. Compiled against each, the types are
//! plain and the text is one. The role traits' implementations that run these
//! statements are written once likewise (`common.rs`). What each backend gives (`Db`,
//! `append_events`, the dialect macros) and who opens transactions: docs/architecture.md.

use sqlx::pool::PoolConnection;
use sqlx::{Database, Transaction};

use super::Db;
use super::append_events;
use crate::domain::audit::NewEvent;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::storage::StorageError;
use crate::storage::rows::{self, AnswerRow, CopyRow, Row, StrayRow, select_where};

mod away;
mod chat_rules;
mod grants;
mod outages;
mod outbox;
mod questions;
mod runs;
mod steps;
mod tool_pins;
mod trail;
mod windows;

pub(crate) use self::away::*;
pub(crate) use self::chat_rules::*;
pub(crate) use self::grants::*;
pub(crate) use self::outages::*;
pub(crate) use self::outbox::*;
pub(crate) use self::questions::*;
pub(crate) use self::runs::*;
pub(crate) use self::steps::*;
pub(crate) use self::tool_pins::*;
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
    id: &QuestionId,
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
