//! Confirmation windows: which are live, the hits that use them, purging and revoking.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use sqlx::{Pool, QueryBuilder, Transaction};
use time::OffsetDateTime;

use super::questions::insert_in;
use super::{Db, append_event, append_events};
use crate::domain::audit;
use crate::domain::ids::QuestionId;
use crate::domain::question::{Operator, Question, Window, WindowKey};
use crate::storage::hits::QueuedHit;
use crate::storage::rows::{self, WindowRow, insert_confirmations, ms, select_windows_where};
use crate::storage::{Inserted, LiveWindow, StorageError};

/// See [`crate::storage::Windows::live_windows`].
pub(crate) async fn live_windows(
    pool: &Pool<Db>,
    route: &str,
    now: OffsetDateTime,
) -> Result<Vec<LiveWindow>, StorageError> {
    let rows: Vec<WindowRow> = sqlx::query_as(concat!(
        select_windows_where!(
            "c.route = $1 AND w.expires_at > $2 ORDER BY w.expires_at, w.opened_by"
        ),
        bytewise!()
    ))
    .bind(route)
    .bind(ms(now))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(WindowRow::into_domain).collect()
}

/// See [`crate::storage::Windows::live_windows_of`].
pub(crate) async fn live_windows_of(
    pool: &Pool<Db>,
    agent: Option<&str>,
    now: OffsetDateTime,
) -> Result<Vec<LiveWindow>, StorageError> {
    let rows: Vec<WindowRow> = sqlx::query_as(concat!(
        select_windows_where!(
            "($1 IS NULL OR w.agent = $1) AND w.expires_at > $2 ORDER BY w.expires_at, w.opened_by"
        ),
        bytewise!()
    ))
    .bind(agent)
    .bind(ms(now))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(WindowRow::into_domain).collect()
}

/// See [`crate::storage::Windows::live_window_opened_by`].
pub(crate) async fn live_window_opened_by(
    pool: &Pool<Db>,
    opened_by: &QuestionId,
    now: OffsetDateTime,
) -> Result<Option<LiveWindow>, StorageError> {
    let row: Option<WindowRow> = sqlx::query_as(select_windows_where!(
        "w.opened_by = $1 AND w.expires_at > $2"
    ))
    .bind(opened_by.as_str())
    .bind(ms(now))
    .fetch_optional(pool)
    .await?;
    row.map(WindowRow::into_domain).transpose()
}

/// A window hit with nothing to look up or queue besides its rows: no idempotency key or
/// interaction id (no unique column an agent chooses) and no webhook. A batch of them is
/// written by multi-row statements ([`insert_plain_hits`]).
pub(crate) fn is_plain(r: &Question) -> bool {
    r.idempotency_key.is_none() && r.interaction.is_none() && r.callback_url.is_none()
}

/// Stores a batch of window hits inside `tx` (which holds the audit lock): those with
/// something to look up or queue (an idempotency key, an interaction id, a webhook) one
/// by one as [`insert_in`] stores any question, the plain ones by multi-row statements
/// ([`insert_plain_hits`]). The results are in the batch's order; `None` for a plain
/// hit, stored as it came.
pub(crate) async fn insert_hits(
    tx: &mut Transaction<'_, Db>,
    batch: &[QueuedHit],
    bound: u32,
) -> Result<Vec<Option<Inserted>>, StorageError> {
    let mut results = Vec::with_capacity(batch.len());
    let mut plain = Vec::with_capacity(batch.len());
    for hit in batch {
        if is_plain(&hit.record) {
            plain.push((&hit.record, hit.now));
            results.push(None);
        } else {
            results.push(Some(
                Box::pin(insert_in(tx, &hit.record, hit.now, bound)).await?,
            ));
        }
    }
    insert_plain_hits(tx, &plain).await?;
    Ok(results)
}

/// Stores plain window hits ([`is_plain`], each with the time it was asked) inside `tx`:
/// what [`insert_in`] does for such a record, by multi-row `INSERT`s, and their audit
/// events chained by one read of the head. Without `ON CONFLICT`: such a record's only
/// unique columns are its random id and callback token, so a conflict is a fault that
/// fails the batch.
async fn insert_plain_hits(
    tx: &mut Transaction<'_, Db>,
    hits: &[(&Question, OffsetDateTime)],
) -> Result<(), StorageError> {
    if hits.is_empty() {
        return Ok(());
    }
    for chunk in rows::insert_runs(hits) {
        let mut records: QueryBuilder<Db> = insert_confirmations(chunk.iter().map(|h| h.0));
        records.build().execute(&mut **tx).await?;
        let mut events =
            QueryBuilder::new("INSERT INTO agent_events (agent, question_id, kind, data, at) ");
        events.push_values(chunk, |mut row, (r, now)| {
            row.push_bind(r.agent.as_str())
                .push_bind(r.id.as_str())
                .push_bind("status")
                .push_bind(r.status_event().to_string())
                .push_bind(ms(*now));
        });
        events.build().execute(&mut **tx).await?;
    }
    let audited: Vec<audit::NewEvent> = hits.iter().map(|(r, _)| audit::at_once(r)).collect();
    append_events(tx, &audited).await
}

/// See [`crate::storage::Windows::live_window`] (read from the table).
pub(crate) async fn live_window(
    pool: &Pool<Db>,
    key: &WindowKey,
    now: OffsetDateTime,
) -> Result<Option<Window>, StorageError> {
    let row: Option<(i64, String)> = sqlx::query_as(
        "SELECT expires_at, opened_by FROM windows
         WHERE agent = $1 AND route = $2 AND owner_id = $3 AND tool = $4
           AND args_hash = $5 AND server = $6 AND expires_at > $7",
    )
    .bind(&key.agent)
    .bind(&key.route)
    .bind(key.owner_id.as_str())
    .bind(key.tool.as_str())
    .bind(key.args_hash.as_str())
    .bind(rows::window_server(key))
    .bind(ms(now))
    .fetch_optional(pool)
    .await?;
    row.map(|(expires_at, opened_by)| rows::window(key, expires_at, &opened_by))
        .transpose()
}

/// See [`crate::storage::Windows::purge_expired_windows`].
pub(crate) async fn purge_expired_windows(
    pool: &Pool<Db>,
    now: OffsetDateTime,
) -> Result<u64, StorageError> {
    Ok(sqlx::query("DELETE FROM windows WHERE expires_at <= $1")
        .bind(ms(now))
        .execute(pool)
        .await?
        .rows_affected())
}

/// Closes the window `opened_by` opened, if it is live at `now`, in `tx` (the backend's
/// audit transaction), which it commits; see [`crate::storage::Windows::revoke_window`].
pub(crate) async fn revoke_window(
    mut tx: Transaction<'_, Db>,
    opened_by: &QuestionId,
    by: &Operator,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<LiveWindow>, StorageError> {
    let row: Option<WindowRow> = sqlx::query_as(concat!(
        select_windows_where!("w.opened_by = $1 AND w.expires_at > $2"),
        lock_window!()
    ))
    .bind(opened_by.as_str())
    .bind(ms(now))
    .fetch_optional(&mut *tx)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let live = row.into_domain()?;
    // Keyed by the window itself, not only by its opener: the row is held as read since
    // the read, so this deletes exactly the row just read.
    sqlx::query(
        "DELETE FROM windows
         WHERE agent = $1 AND route = $2 AND owner_id = $3 AND tool = $4
           AND args_hash = $5 AND server = $6 AND opened_by = $7",
    )
    .bind(&live.window.key.agent)
    .bind(&live.window.key.route)
    .bind(live.window.key.owner_id.as_str())
    .bind(live.window.key.tool.as_str())
    .bind(live.window.key.args_hash.as_str())
    .bind(rows::window_server(&live.window.key))
    .bind(opened_by.as_str())
    .execute(&mut *tx)
    .await?;
    let event = audit::window_revoked(&live.window, &live.route, by, chat_id, now);
    append_event(&mut tx, &event).await?;
    tx.commit().await?;
    Ok(Some(live))
}
