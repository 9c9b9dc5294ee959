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

use sqlx::Transaction;

use super::Db;
use super::append_events;
use crate::domain::audit::NewEvent;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::storage::StorageError;
use crate::storage::rows::WholeRow;

/// `SELECT` whole questions `WHERE <clause>`: each `confirmations` row with its answers,
/// copies and strays as JSON lists ([`WholeRow`]), in one statement. Each child list is a
/// correlated subquery that finds its rows by an index on `question_id` (never a scan:
/// this read runs for every tap, poll and edit, on tables that only grow; the SQLite
/// store's tests check the plan). The children's columns are left unqualified, so they
/// name the child table, and the clause's name the question; `confirmations` is not
/// aliased because clauses refer to it by name.
macro_rules! select_whole_where {
    ($clause:expr) => {
        concat!(
            "SELECT confirmations.*, (SELECT ",
            json_rows!(
                "respondent, user_id, username, name, value_json, is_default, once, reason, at",
                "seq"
            ),
            " FROM answers WHERE question_id = confirmations.id) AS answers_json, (SELECT ",
            json_rows!(
                "recipient, chat_id, message_id, outcome_shown",
                insertion_order!()
            ),
            " FROM copies WHERE question_id = confirmations.id) AS copies_json, (SELECT ",
            json_rows!("chat_id, message_id, outcome_shown", insertion_order!()),
            " FROM strays WHERE question_id = confirmations.id) AS strays_json
             FROM confirmations WHERE ",
            $clause
        )
    };
}

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
    let row = sqlx::query_as::<_, WholeRow>(QUESTION_BY_ID)
        .bind(id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// A whole question by its id: the read of every tap, poll and edit.
pub(crate) const QUESTION_BY_ID: &str = select_whole_where!("id = $1");

/// Whole questions from their rows, in order.
fn whole(rows: Vec<WholeRow>) -> Result<Vec<Question>, StorageError> {
    rows.into_iter().map(WholeRow::into_domain).collect()
}
