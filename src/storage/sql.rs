//! The statements both backends run, written once.
//!
//! This file is compiled twice, as `sqlite::sql` and `postgres::sql` (each backend
//! declares it with `#[path = "sql.rs"] mod sql;`), and each time `Db` is that backend's
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
use crate::domain::confirmation::{
    Confirmation, Decision, Operator, Step, Window, WindowKey, rfc3339,
};
use crate::domain::ids::{CallbackToken, ConfirmationId, DeliveryId, IdempotencyKey};
use crate::domain::interaction::{Answer, TimeoutAction};
use crate::storage::hits::QueuedHit;
use crate::storage::rows::{
    self, AnswerRow, AuditRow, CopyRow, OutboxRow, PendingRow, Row, StrayRow, WindowRow,
    insert_confirmations, ms, operator_columns, select_where, select_windows_where, user_column,
};
use crate::storage::{
    AgentEvent, Answered, Decided, Gauges, IDEMPOTENCY_TTL, Inserted, LiveWindow, OutboxEntry,
    PendingEntry, Shown, StorageError, WebhookAttempt,
};

/// Appends `event` to the audit chain inside `tx`, the backend's audit transaction
/// (its audit lock held): see the backend's `append_events`.
pub(super) async fn append_event(
    tx: &mut Transaction<'_, Db>,
    event: &NewEvent,
) -> Result<(), StorageError> {
    append_events(tx, std::slice::from_ref(event)).await
}

/// The question `id` as `tx` sees it, with its answers, copies and strays (`None`: no
/// such question).
pub(super) async fn read_in(
    tx: &mut Transaction<'_, Db>,
    id: &ConfirmationId,
) -> Result<Option<Confirmation>, StorageError> {
    let row = sqlx::query_as::<_, Row>(select_where!("id = $1"))
        .bind(id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    match row {
        Some(row) => Ok(Some(hydrate(tx, row.into_domain()?).await?)),
        None => Ok(None),
    }
}

/// Reads a question's answers, copies and strays into it.
pub(super) async fn hydrate(
    conn: &mut <Db as Database>::Connection,
    r: Confirmation,
) -> Result<Confirmation, StorageError> {
    let answers: Vec<AnswerRow> = sqlx::query_as(
        "SELECT respondent, user_id, username, name, value_json, is_default, once, reason, at
         FROM answers WHERE question_id = $1 ORDER BY seq",
    )
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let copies: Vec<CopyRow> = sqlx::query_as(concat!(
        "SELECT recipient, chat_id, message_id, outcome_shown FROM copies
         WHERE question_id = $1 ORDER BY ",
        insertion_order!()
    ))
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let strays: Vec<StrayRow> = sqlx::query_as(concat!(
        "SELECT chat_id, message_id, outcome_shown FROM strays
         WHERE question_id = $1 ORDER BY ",
        insertion_order!()
    ))
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    rows::fill(r, answers, copies, strays)
}

/// [`hydrate`] for each of `rows`, in order.
pub(super) async fn hydrate_all(
    conn: &mut <Db as Database>::Connection,
    rows: Vec<Row>,
) -> Result<Vec<Confirmation>, StorageError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(hydrate(&mut *conn, row.into_domain()?).await?);
    }
    Ok(out)
}

/// Appends to the agent's event stream inside the caller's transaction.
pub(super) async fn push_agent_event(
    tx: &mut Transaction<'_, Db>,
    r: &Confirmation,
    kind: &str,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO agent_events (agent, question_id, kind, data, at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(&r.agent)
    .bind(r.id.as_str())
    .bind(kind)
    .bind(data.to_string())
    .bind(ms(at))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Stores an answer row inside the caller's transaction; false when this person had
/// already answered.
pub(super) async fn insert_answer(
    tx: &mut Transaction<'_, Db>,
    id: &ConfirmationId,
    a: &Answer,
) -> Result<bool, StorageError> {
    let (uid, username, name) = operator_columns(&a.by);
    let done = sqlx::query(
        "INSERT INTO answers (question_id, respondent, user_id, username, name, value_json,
            is_default, once, reason, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (question_id, user_id) WHERE user_id IS NOT NULL DO NOTHING",
    )
    .bind(id.as_str())
    .bind(&a.respondent)
    .bind(uid)
    .bind(username)
    .bind(name)
    .bind(a.value.to_string())
    .bind(a.is_default)
    .bind(a.once)
    .bind(a.reason.as_deref())
    .bind(ms(a.at))
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Queues the webhook of a request that just ended, inside the caller's audit
/// transaction: the outcome and its delivery commit together or not at all. When the
/// agent already has `max_backlog` undelivered webhooks, the delivery is stored as
/// `dropped` with a `webhook_dropped` event instead. The bound holds exactly: every
/// enqueue runs under the audit lock, so no two count at once.
pub(super) async fn enqueue_webhook(
    tx: &mut Transaction<'_, Db>,
    r: &Confirmation,
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

/// Moves a pending question to its outcome inside `tx` (an audit transaction): one
/// conditional update, then, when it applied, the default answer (if any), the stream
/// and audit events, the webhook and the confirmation window, all in the same
/// transaction.
pub(super) async fn apply_decision(
    tx: &mut Transaction<'_, Db>,
    id: &ConfirmationId,
    d: &Decision,
    max_backlog: u32,
) -> Result<Decided, StorageError> {
    let (by_id, by_username, by_name) = operator_columns(&d.decided_by);
    // The `status = 'pending'` guard is the whole exactly-once story: of any number of
    // concurrent decisions, one changes a row and every other changes none.
    let changed = sqlx::query(
        "UPDATE confirmations SET status = $1, via = $2, reason = $3, decided_by_id = $4,
                decided_by_username = $5, decided_by_name = $6, decided_at = $7,
                result_json = $8, timeout_action = $9, approved_once = $10,
                denial_reason = $11
             WHERE id = $12 AND status = 'pending'",
    )
    .bind(d.status.as_str())
    .bind(d.via.as_str())
    .bind(&d.reason)
    .bind(by_id)
    .bind(by_username)
    .bind(by_name)
    .bind(ms(d.decided_at))
    .bind(d.result.as_ref().map(|v| v.to_string()))
    .bind(d.timeout_action.map(TimeoutAction::as_str))
    .bind(d.once)
    .bind(d.denial_reason.as_deref())
    .bind(id.as_str())
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    let default_answer = rows::default_answer(d, changed);
    if let Some(a) = &default_answer {
        insert_answer(tx, id, a).await?;
    }
    let Some(record) = read_in(tx, id).await? else {
        return Ok(Decided::NotFound);
    };
    if !changed {
        return Ok(Decided::AlreadyTerminal(record));
    }
    if let Some(a) = &default_answer {
        append_event(tx, &audit::answered(id.as_str(), a)).await?;
        let response = record.response_event(a);
        push_agent_event(tx, &record, "response", &response, d.decided_at).await?;
    }
    push_agent_event(tx, &record, "status", &record.status_event(), d.decided_at).await?;
    append_event(tx, &audit::decided(&record)).await?;
    enqueue_webhook(tx, &record, d.decided_at, max_backlog).await?;
    if let Some(until) = record.window_until() {
        // A later expiry replaces an earlier one, never the reverse.
        sqlx::query(
            "INSERT INTO windows (agent, route, owner_id, tool, args_hash, expires_at, opened_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (agent, route, owner_id, tool, args_hash)
                 DO UPDATE SET expires_at = excluded.expires_at, opened_by = excluded.opened_by
                 WHERE excluded.expires_at > windows.expires_at",
        )
        .bind(&record.agent)
        .bind(&record.route)
        .bind(record.owner_id.as_str())
        .bind(record.tool.as_str())
        .bind(record.args_hash.as_str())
        .bind(ms(until))
        .bind(record.id.as_str())
        .execute(&mut **tx)
        .await?;
    }
    Ok(Decided::Applied(record))
}

/// Stores a new request inside `tx` (an audit transaction; the caller commits); see
/// [`crate::storage::Questions::insert`].
pub(super) async fn insert_in(
    tx: &mut Transaction<'_, Db>,
    r: &Confirmation,
    now: OffsetDateTime,
    max_backlog: u32,
) -> Result<Inserted, StorageError> {
    if let Some(key) = &r.idempotency_key {
        // Release the key if its request is older than the TTL, so it can be reused.
        sqlx::query(
            "UPDATE confirmations SET idempotency_key = NULL
             WHERE agent = $1 AND idempotency_key = $2 AND created_at <= $3",
        )
        .bind(&r.agent)
        .bind(key.as_str())
        .bind(ms(now - IDEMPOTENCY_TTL))
        .execute(&mut **tx)
        .await?;
    }
    let mut insert: QueryBuilder<Db> = insert_confirmations([r]);
    insert.push(" ON CONFLICT DO NOTHING");
    let done = insert.build().execute(&mut **tx).await?;
    if done.rows_affected() == 1 {
        if r.is_terminal() {
            append_event(tx, &audit::window_hit(r)).await?;
            enqueue_webhook(tx, r, now, max_backlog).await?;
        } else {
            append_event(tx, &audit::requested(r)).await?;
        }
        push_agent_event(tx, r, "status", &r.status_event(), now).await?;
        return Ok(Inserted::New(r.clone()));
    }
    // Another question holds the idempotency key or the interaction id (the only
    // unique columns an agent chooses): whichever it is, that question is the answer.
    let mut existing = None;
    if let Some(key) = &r.idempotency_key {
        existing = sqlx::query_as::<_, Row>(select_where!("agent = $1 AND idempotency_key = $2"))
            .bind(&r.agent)
            .bind(key.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    }
    if let (None, Some(i)) = (&existing, &r.interaction) {
        existing = sqlx::query_as::<_, Row>(select_where!("agent = $1 AND interaction_id = $2"))
            .bind(&r.agent)
            .bind(i.interaction_id.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    }
    let existing = existing.ok_or(sqlx::Error::RowNotFound)?;
    let existing = hydrate(tx, existing.into_domain()?).await?;
    Ok(Inserted::Existing(existing))
}

/// Ends the transaction of a step a pending question just took (its conditional
/// update already made in `tx`): reads the question, streams the step, audits it
/// (`by`, `detail`) and commits. Returns the question as it now is.
pub(super) async fn commit_step(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    step: Step,
    by: Option<&Operator>,
    detail: serde_json::Value,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    let Some(record) = read_in(&mut tx, id).await? else {
        return Ok(None);
    };
    push_agent_event(&mut tx, &record, "status", &record.step_event(step), now).await?;
    append_event(&mut tx, &audit::step(id.as_str(), step, by, detail, now)).await?;
    tx.commit().await?;
    Ok(Some(record))
}

/// See [`crate::storage::Questions::count_pending`].
pub(super) async fn count_pending(pool: &Pool<Db>, agent: &str) -> Result<u64, StorageError> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM confirmations WHERE agent = $1 AND status = 'pending'",
    )
    .bind(agent)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// See [`crate::storage::Questions::pending`].
pub(super) async fn pending(pool: &Pool<Db>) -> Result<Vec<PendingEntry>, StorageError> {
    let rows: Vec<PendingRow> = sqlx::query_as(
        "SELECT id, expires_at, message_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM copies c WHERE c.question_id = confirmations.id
            AND c.message_id IS NULL), attached, route
         FROM confirmations WHERE status = 'pending' ORDER BY expires_at",
    )
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(rows::pending_entry).collect()
}

/// See [`crate::storage::Audit::events_for`].
pub(super) async fn events_for(
    pool: &Pool<Db>,
    id: &ConfirmationId,
) -> Result<Vec<AuditEvent>, StorageError> {
    let rows: Vec<AuditRow> =
        sqlx::query_as("SELECT * FROM audit_events WHERE confirmation_id = $1 ORDER BY seq")
            .bind(id.as_str())
            .fetch_all(pool)
            .await?;
    rows.into_iter().map(AuditRow::into_event).collect()
}

/// See [`crate::storage::Audit::audit_rows`].
pub(super) async fn audit_rows(
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
pub(super) async fn audit_head(pool: &Pool<Db>) -> Result<audit::Head, StorageError> {
    let last: Option<(i64, String)> =
        sqlx::query_as("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            .fetch_optional(pool)
            .await?;
    rows::head(last)
}

/// See [`crate::storage::Messages::route_chats`].
pub(super) async fn route_chats(pool: &Pool<Db>) -> Result<Vec<(String, i64)>, StorageError> {
    Ok(sqlx::query_as("SELECT route, chat_id FROM route_chats")
        .fetch_all(pool)
        .await?)
}

/// See [`crate::storage::Steps::selection`].
pub(super) async fn selection(
    pool: &Pool<Db>,
    id: &ConfirmationId,
    user_id: u64,
) -> Result<Vec<String>, StorageError> {
    let row: Option<(String,)> =
        sqlx::query_as("SELECT keys_json FROM selections WHERE question_id = $1 AND user_id = $2")
            .bind(id.as_str())
            .bind(user_column(user_id))
            .fetch_optional(pool)
            .await?;
    Ok(row
        .and_then(|(j,)| serde_json::from_str(&j).ok())
        .unwrap_or_default())
}

/// See [`crate::storage::Steps::set_selection`].
pub(super) async fn set_selection(
    pool: &Pool<Db>,
    id: &ConfirmationId,
    user_id: u64,
    keys: &[String],
) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO selections (question_id, user_id, keys_json) VALUES ($1, $2, $3)
         ON CONFLICT (question_id, user_id) DO UPDATE SET keys_json = excluded.keys_json",
    )
    .bind(id.as_str())
    .bind(user_column(user_id))
    .bind(serde_json::to_string(keys).unwrap_or_else(|_| "[]".into()))
    .execute(pool)
    .await?;
    Ok(())
}

/// See [`crate::storage::AgentEvents::agent_events`].
pub(super) async fn agent_events(
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
pub(super) async fn purge_agent_events(
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
pub(super) async fn last_agent_event(pool: &Pool<Db>, agent: &str) -> Result<i64, StorageError> {
    let (n,): (Option<i64>,) = sqlx::query_as("SELECT MAX(seq) FROM agent_events WHERE agent = $1")
        .bind(agent)
        .fetch_one(pool)
        .await?;
    Ok(n.unwrap_or(0))
}

/// See [`crate::storage::Administration::gauges`]. All read through partial indexes (pending
/// rows, dropped deliveries), so a scrape stays cheap however much history the
/// database holds; agents in byte order, so a scrape reads the same on either backend.
pub(super) async fn gauges(pool: &Pool<Db>) -> Result<Gauges, StorageError> {
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

/// See [`crate::storage::Windows::live_windows`].
pub(super) async fn live_windows(
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

/// See [`crate::storage::Windows::live_window_opened_by`].
pub(super) async fn live_window_opened_by(
    pool: &Pool<Db>,
    opened_by: &ConfirmationId,
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

/// See [`crate::storage::Messages::mark_shown`].
pub(super) async fn mark_shown(
    pool: &Pool<Db>,
    id: &ConfirmationId,
    what: Shown,
) -> Result<(), StorageError> {
    let query = match what {
        Shown::Attachment => {
            sqlx::query("UPDATE confirmations SET attached = TRUE WHERE id = $1").bind(id.as_str())
        }
        Shown::Outcome => {
            sqlx::query("UPDATE confirmations SET outcome_shown = TRUE WHERE id = $1")
                .bind(id.as_str())
        }
        Shown::CopyOutcome { chat_id } => sqlx::query(
            "UPDATE copies SET outcome_shown = TRUE WHERE question_id = $1 AND chat_id = $2",
        )
        .bind(id.as_str())
        .bind(chat_id),
        Shown::StrayOutcome {
            chat_id,
            message_id,
        } => sqlx::query(
            "UPDATE strays SET outcome_shown = TRUE
             WHERE question_id = $1 AND chat_id = $2 AND message_id = $3",
        )
        .bind(id.as_str())
        .bind(chat_id)
        .bind(i64::from(message_id)),
    };
    query.execute(pool).await?;
    Ok(())
}

/// See [`crate::storage::Outbox::due_webhooks`].
pub(super) async fn due_webhooks(
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

/// See [`crate::storage::Steps::extend`]; `tx` is the backend's audit transaction.
pub(super) async fn extend(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    from: OffsetDateTime,
    to: OffsetDateTime,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    // Conditional on the deadline the tap saw: two taps at once move it once.
    let moved = sqlx::query(
        "UPDATE confirmations SET expires_at = $1, extensions = extensions + 1
         WHERE id = $2 AND status = 'pending' AND expires_at = $3",
    )
    .bind(ms(to))
    .bind(id.as_str())
    .bind(ms(from))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !moved {
        return Ok(None);
    }
    let detail = json!({"from": rfc3339(from), "to": rfc3339(to)});
    commit_step(tx, id, Step::Extended, Some(by), detail, now).await
}

/// See [`crate::storage::Steps::claim_reminders`]; `tx` is the backend's audit transaction.
pub(super) async fn claim_reminders(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    sent: u32,
    passed: u32,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    let claimed = sqlx::query(
        "UPDATE confirmations SET reminders_sent = $1
         WHERE id = $2 AND status = 'pending' AND reminders_sent = $3",
    )
    .bind(i64::from(passed))
    .bind(id.as_str())
    .bind(i64::from(sent))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !claimed {
        return Ok(None);
    }
    let detail = json!({"reminder": passed});
    commit_step(tx, id, Step::Reminded, None, detail, now).await
}

/// See [`crate::storage::Steps::escalate`]; `tx` is the backend's audit transaction.
pub(super) async fn escalate(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    recipient: &str,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    let claimed = sqlx::query(
        "UPDATE confirmations SET escalated_at = $1
         WHERE id = $2 AND status = 'pending' AND escalated_at IS NULL",
    )
    .bind(ms(now))
    .bind(id.as_str())
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !claimed {
        return Ok(None);
    }
    sqlx::query(
        "INSERT INTO copies (question_id, recipient, chat_id) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(id.as_str())
    .bind(recipient)
    .bind(chat_id)
    .execute(&mut *tx)
    .await?;
    let detail = json!({"to": recipient, "chat_id": chat_id});
    commit_step(tx, id, Step::Escalated, None, detail, now).await
}

/// See [`crate::storage::Steps::request_reason`]; `tx` is the backend's audit transaction.
pub(super) async fn request_reason(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    by: &Operator,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    // Asked again (a second tap), the request starts over: a new prompt replaces
    // the old one.
    let added = sqlx::query(
        "INSERT INTO reason_requests (question_id, user_id, chat_id, asked_at)
         SELECT id, $2, $3, $4 FROM confirmations WHERE id = $1 AND status = 'pending'
         ON CONFLICT (question_id, user_id) DO UPDATE
             SET chat_id = excluded.chat_id, prompt_message_id = NULL,
                 asked_at = excluded.asked_at",
    )
    .bind(id.as_str())
    .bind(user_column(by.id))
    .bind(chat_id)
    .bind(ms(now))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !added {
        return Ok(None);
    }
    sqlx::query("UPDATE confirmations SET reasons_requested = reasons_requested + 1 WHERE id = $1")
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
    let detail = json!({"chat_id": chat_id});
    commit_step(tx, id, Step::ReasonRequested, Some(by), detail, now).await
}

/// See [`crate::storage::Messages::move_route_chat`]; `tx` is the backend's audit transaction.
pub(super) async fn move_route_chat(
    mut tx: Transaction<'_, Db>,
    route: &str,
    from_chat: i64,
    to_chat: i64,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    append_event(&mut tx, &audit::route_moved(route, from_chat, to_chat, now)).await?;
    sqlx::query(
        "INSERT INTO route_chats (route, chat_id, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (route) DO UPDATE
             SET chat_id = excluded.chat_id, updated_at = excluded.updated_at",
    )
    .bind(route)
    .bind(to_chat)
    .bind(ms(now))
    .execute(&mut *tx)
    .await?;
    // Pending requests of the old chat now live in the new one: taps come from there.
    sqlx::query(
        "UPDATE confirmations SET chat_id = $1
         WHERE route = $2 AND chat_id = $3 AND status = 'pending'",
    )
    .bind(to_chat)
    .bind(route)
    .bind(from_chat)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// See [`crate::storage::Messages::add_copy`]; `tx` is the backend's audit transaction.
pub(super) async fn add_copy(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    recipient: &str,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<bool, StorageError> {
    let added = sqlx::query(
        "INSERT INTO copies (question_id, recipient, chat_id)
         SELECT id, $1, $2 FROM confirmations
         WHERE id = $3 AND status = 'pending' AND chat_id <> $2
         ON CONFLICT DO NOTHING",
    )
    .bind(recipient)
    .bind(chat_id)
    .bind(id.as_str())
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if added {
        let event = audit::copied(id.as_str(), recipient, chat_id, now);
        append_event(&mut tx, &event).await?;
    }
    tx.commit().await?;
    Ok(added)
}

/// See [`crate::storage::Messages::set_copy_message_id`]; `tx` is the backend's audit transaction.
pub(super) async fn set_copy_message_id(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    chat_id: i64,
    message_id: i32,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    sqlx::query("UPDATE copies SET message_id = $1 WHERE question_id = $2 AND chat_id = $3")
        .bind(i64::from(message_id))
        .bind(id.as_str())
        .bind(chat_id)
        .execute(&mut *tx)
        .await?;
    let event = audit::delivered(id.as_str(), chat_id, message_id, now);
    append_event(&mut tx, &event).await?;
    tx.commit().await?;
    Ok(())
}

/// See [`crate::storage::Steps::set_reason_prompt`].
pub(super) async fn set_reason_prompt(
    pool: &Pool<Db>,
    id: &ConfirmationId,
    user_id: u64,
    prompt_message_id: i32,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE reason_requests SET prompt_message_id = $1
         WHERE question_id = $2 AND user_id = $3",
    )
    .bind(i64::from(prompt_message_id))
    .bind(id.as_str())
    .bind(user_column(user_id))
    .execute(pool)
    .await?;
    Ok(())
}

/// Records a stray message of question `id` (see
/// [`crate::storage::Messages::add_stray`]) in `tx`, the backend's audit transaction, and
/// commits; the caller reads the question back.
pub(super) async fn add_stray(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    chat_id: i64,
    message_id: i32,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    // Not a stray when it is the question's own message or a copy's (a tap that
    // raced the storing of the id).
    let added = sqlx::query(
        "INSERT INTO strays (question_id, chat_id, message_id)
         SELECT id, $2, $3 FROM confirmations
         WHERE id = $1 AND NOT (chat_id = $2 AND message_id IS NOT DISTINCT FROM $3)
           AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.question_id = $1
                           AND c.chat_id = $2 AND c.message_id IS NOT DISTINCT FROM $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(id.as_str())
    .bind(chat_id)
    .bind(i64::from(message_id))
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if added {
        let event = audit::copy_found(id.as_str(), chat_id, message_id, now);
        append_event(&mut tx, &event).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A window hit with nothing to look up or queue besides its rows: no idempotency key or
/// interaction id (no unique column an agent chooses) and no webhook. A batch of them is
/// written by multi-row statements ([`insert_plain_hits`]).
pub(super) fn is_plain(r: &Confirmation) -> bool {
    r.idempotency_key.is_none() && r.interaction.is_none() && r.callback_url.is_none()
}

/// Stores a batch of window hits inside `tx` (which holds the audit lock): those with
/// something to look up or queue (an idempotency key, an interaction id, a webhook) one
/// by one as [`insert_in`] stores any question, the plain ones by multi-row statements
/// ([`insert_plain_hits`]). The results are in the batch's order; `None` for a plain
/// hit, stored as it came.
pub(super) async fn insert_hits(
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
    hits: &[(&Confirmation, OffsetDateTime)],
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
    let audited: Vec<audit::NewEvent> = hits.iter().map(|(r, _)| audit::window_hit(r)).collect();
    append_events(tx, &audited).await
}

/// The question `row` is, read whole through `conn` (`None` stays `None`).
async fn one(
    conn: &mut PoolConnection<Db>,
    row: Option<Row>,
) -> Result<Option<Confirmation>, StorageError> {
    match row {
        Some(row) => Ok(Some(hydrate(conn, row.into_domain()?).await?)),
        None => Ok(None),
    }
}

/// See [`crate::storage::Questions::get`].
pub(super) async fn get(
    pool: &Pool<Db>,
    id: &ConfirmationId,
) -> Result<Option<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let row = sqlx::query_as::<_, Row>(select_where!("id = $1"))
        .bind(id.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    one(&mut conn, row).await
}

/// See [`crate::storage::Questions::find_by_token`].
pub(super) async fn find_by_token(
    pool: &Pool<Db>,
    token: &CallbackToken,
) -> Result<Option<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let row = sqlx::query_as::<_, Row>(select_where!("callback_token = $1"))
        .bind(token.as_str())
        .fetch_optional(&mut *conn)
        .await?;
    one(&mut conn, row).await
}

/// See [`crate::storage::Questions::find_by_idempotency_key`].
pub(super) async fn find_by_idempotency_key(
    pool: &Pool<Db>,
    agent: &str,
    key: &IdempotencyKey,
    now: OffsetDateTime,
) -> Result<Option<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let row = sqlx::query_as::<_, Row>(select_where!(
        "agent = $1 AND idempotency_key = $2 AND created_at > $3"
    ))
    .bind(agent)
    .bind(key.as_str())
    .bind(ms(now - IDEMPOTENCY_TTL))
    .fetch_optional(&mut *conn)
    .await?;
    one(&mut conn, row).await
}

/// See [`crate::storage::Questions::find_interaction`].
pub(super) async fn find_interaction(
    pool: &Pool<Db>,
    agent: &str,
    interaction_id: &str,
) -> Result<Option<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let row = sqlx::query_as::<_, Row>(select_where!("agent = $1 AND interaction_id = $2"))
        .bind(agent)
        .bind(interaction_id)
        .fetch_optional(&mut *conn)
        .await?;
    one(&mut conn, row).await
}

/// See [`crate::storage::Questions::find_by_message`]. `IN`, not `=`: PostgreSQL refuses a
/// scalar subquery with several rows (where SQLite took the first), so every copy and
/// stray in that chat with that message counts; `LIMIT 1` takes the first question found.
pub(super) async fn find_by_message(
    pool: &Pool<Db>,
    chat_id: i64,
    message_id: i32,
) -> Result<Option<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let row = sqlx::query_as::<_, Row>(select_where!(
        "(chat_id = $1 AND message_id = $2)
         OR id IN (SELECT question_id FROM copies
                   WHERE chat_id = $1 AND message_id = $2)
         OR id IN (SELECT question_id FROM strays
                   WHERE chat_id = $1 AND message_id = $2)
         LIMIT 1"
    ))
    .bind(chat_id)
    .bind(i64::from(message_id))
    .fetch_optional(&mut *conn)
    .await?;
    one(&mut conn, row).await
}

/// See [`crate::storage::Questions::pending_in_chat`].
pub(super) async fn pending_in_chat(
    pool: &Pool<Db>,
    chat_id: i64,
) -> Result<Vec<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let rows: Vec<Row> = sqlx::query_as(select_where!(concat!(
        "chat_id = $1 AND status = 'pending' ORDER BY created_at, id",
        bytewise!()
    )))
    .bind(chat_id)
    .fetch_all(&mut *conn)
    .await?;
    hydrate_all(&mut conn, rows).await
}

/// See [`crate::storage::Questions::unshown_outcomes`].
pub(super) async fn unshown_outcomes(pool: &Pool<Db>) -> Result<Vec<Confirmation>, StorageError> {
    let mut conn = pool.acquire().await?;
    let rows: Vec<Row> = sqlx::query_as(select_where!(concat!(
        "status <> 'pending' AND ((",
        not_shown!(""),
        " AND message_id IS NOT NULL)
         OR EXISTS (SELECT 1 FROM copies c WHERE c.question_id = confirmations.id
                    AND ",
        not_shown!("c."),
        " AND c.message_id IS NOT NULL)
         OR EXISTS (SELECT 1 FROM strays s WHERE s.question_id = confirmations.id
                    AND ",
        not_shown!("s."),
        "))
         ORDER BY decided_at"
    )))
    .fetch_all(&mut *conn)
    .await?;
    hydrate_all(&mut conn, rows).await
}

/// See [`crate::storage::Windows::live_window`] (read from the table).
pub(super) async fn live_window(
    pool: &Pool<Db>,
    key: &WindowKey,
    now: OffsetDateTime,
) -> Result<Option<Window>, StorageError> {
    let row: Option<(i64, String)> = sqlx::query_as(
        "SELECT expires_at, opened_by FROM windows
         WHERE agent = $1 AND route = $2 AND owner_id = $3 AND tool = $4
           AND args_hash = $5 AND expires_at > $6",
    )
    .bind(&key.agent)
    .bind(&key.route)
    .bind(key.owner_id.as_str())
    .bind(key.tool.as_str())
    .bind(key.args_hash.as_str())
    .bind(ms(now))
    .fetch_optional(pool)
    .await?;
    row.map(|(expires_at, opened_by)| rows::window(key, expires_at, &opened_by))
        .transpose()
}

/// See [`crate::storage::Windows::purge_expired_windows`].
pub(super) async fn purge_expired_windows(
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
pub(super) async fn revoke_window(
    mut tx: Transaction<'_, Db>,
    opened_by: &ConfirmationId,
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
           AND args_hash = $5 AND opened_by = $6",
    )
    .bind(&live.window.key.agent)
    .bind(&live.window.key.route)
    .bind(live.window.key.owner_id.as_str())
    .bind(live.window.key.tool.as_str())
    .bind(live.window.key.args_hash.as_str())
    .bind(opened_by.as_str())
    .execute(&mut *tx)
    .await?;
    let event = audit::window_revoked(&live.window, &live.route, by, chat_id, now);
    append_event(&mut tx, &event).await?;
    tx.commit().await?;
    Ok(Some(live))
}

/// See [`crate::storage::Outbox::next_webhook_due`].
pub(super) async fn next_webhook_due(
    pool: &Pool<Db>,
) -> Result<Option<OffsetDateTime>, StorageError> {
    let (due,): (Option<i64>,) =
        sqlx::query_as("SELECT MIN(next_attempt_at) FROM webhook_outbox WHERE state = 'pending'")
            .fetch_one(pool)
            .await?;
    Ok(due.and_then(rows::from_ms))
}

/// See [`crate::storage::Outbox::next_webhook_due_after`].
pub(super) async fn next_webhook_due_after(
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

/// See [`crate::storage::Outbox::due_webhooks_by_agent`]. Each agent's rows are ranked by
/// when they are due (then by when they were queued) and served rank by rank: one
/// agent's thousand due rows come after every other agent's first. Ties break by bytes
/// on either backend.
pub(super) async fn due_webhooks_by_agent(
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
pub(super) fn attempt_event(
    entry: &OutboxEntry,
    result: &WebhookAttempt,
    now: OffsetDateTime,
) -> Option<NewEvent> {
    let (id, delivery) = (entry.confirmation_id.as_str(), entry.delivery_id.as_str());
    match result {
        WebhookAttempt::Delivered => Some(audit::webhook(id, delivery, true, None, now)),
        WebhookAttempt::Retry { .. } => None,
        WebhookAttempt::GiveUp { error } => {
            Some(audit::webhook(id, delivery, false, Some(error), now))
        }
    }
}

/// Records a webhook attempt in `tx` (an audit transaction when `event`, the attempt's
/// [`attempt_event`], is some) and commits; see
/// [`crate::storage::Outbox::webhook_attempted`]. Conditional on the delivery still
/// pending: another process (a CLI tool, a second worker) that already finished it keeps
/// its outcome, and no second, contradictory audit event is chained.
pub(super) async fn webhook_attempted(
    mut tx: Transaction<'_, Db>,
    entry: &OutboxEntry,
    result: &WebhookAttempt,
    event: Option<&NewEvent>,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    let q = match result {
        WebhookAttempt::Delivered => sqlx::query(
            "UPDATE webhook_outbox SET state = 'delivered', attempts = attempts + 1,
                last_error = NULL, finished_at = $1
             WHERE delivery_id = $2 AND state = 'pending'",
        )
        .bind(ms(now)),
        WebhookAttempt::Retry { next_at, error } => sqlx::query(
            "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = $1,
                last_error = $2 WHERE delivery_id = $3 AND state = 'pending'",
        )
        .bind(ms(*next_at))
        .bind(error.as_str()),
        WebhookAttempt::GiveUp { error } => sqlx::query(
            "UPDATE webhook_outbox SET state = 'given_up', attempts = attempts + 1,
                last_error = $1, finished_at = $2
             WHERE delivery_id = $3 AND state = 'pending'",
        )
        .bind(error.as_str())
        .bind(ms(now)),
    };
    let changed = q
        .bind(entry.delivery_id.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected()
        == 1;
    if let Some(e) = event.filter(|_| changed) {
        append_event(&mut tx, e).await?;
    }
    tx.commit().await?;
    Ok(())
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

/// Records the Telegram message that carries the question's buttons in `tx` (the
/// backend's audit transaction), audited, with an interaction's new status streamed,
/// and commits; see [`crate::storage::Messages::set_message_id`].
pub(super) async fn set_message_id(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    message_id: i32,
) -> Result<(), StorageError> {
    let chat: Option<(i64,)> =
        sqlx::query_as("UPDATE confirmations SET message_id = $1 WHERE id = $2 RETURNING chat_id")
            .bind(i64::from(message_id))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if let Some((chat_id,)) = chat {
        let now = OffsetDateTime::now_utc();
        let event = audit::delivered(id.as_str(), chat_id, message_id, now);
        append_event(&mut tx, &event).await?;
        // Streams an interaction's new status (`delivered`).
        if let Some(record) = read_in(&mut tx, id).await?
            && !record.is_terminal()
        {
            let step = record.step_event(Step::Delivered);
            push_agent_event(&mut tx, &record, "status", &step, now).await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Stores one person's answer in `tx` (the backend's audit transaction) and commits it
/// when it was added; see [`crate::storage::Steps::add_answer`].
pub(super) async fn add_answer(
    mut tx: Transaction<'_, Db>,
    id: &ConfirmationId,
    answer: &Answer,
    settles: Option<&Decision>,
    max_backlog: u32,
) -> Result<Answered, StorageError> {
    let row = sqlx::query_as::<_, Row>(select_where!("id = $1"))
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else {
        return Ok(Answered::NotFound);
    };
    let record = row.into_domain()?;
    if record.is_terminal() {
        let record = hydrate(&mut tx, record).await?;
        return Ok(Answered::Closed(record));
    }
    let added = insert_answer(&mut tx, id, answer).await?;
    let record = hydrate(&mut tx, record).await?;
    if !added {
        return Ok(Answered::AlreadyAnswered(record));
    }
    append_event(&mut tx, &audit::answered(id.as_str(), answer)).await?;
    push_agent_event(
        &mut tx,
        &record,
        "response",
        &record.response_event(answer),
        answer.at,
    )
    .await?;
    let record = match settles {
        // The answer decides the question: both commit together, so no one ever sees
        // the answer stored and the question still open.
        Some(d) => match apply_decision(&mut tx, id, d, max_backlog).await? {
            Decided::Applied(r) => r,
            Decided::AlreadyTerminal(r) => return Ok(Answered::Closed(r)),
            Decided::NotFound => return Ok(Answered::NotFound),
        },
        None => {
            if record.interaction.is_some() && record.answers.len() == 1 {
                let status = record.status_event();
                push_agent_event(&mut tx, &record, "status", &status, answer.at).await?;
            }
            record
        }
    };
    tx.commit().await?;
    Ok(Answered::Added(record))
}

/// See [`crate::storage::Steps::reason_request_for`]: the id of the question whose
/// reason `user_id` was asked for. The reply may answer the prompt, or (if the prompt's
/// id was never stored, or the person replied to the question instead) any message of
/// the question in the chat where they asked.
pub(super) async fn reason_request_for(
    pool: &Pool<Db>,
    chat_id: i64,
    reply_to: i32,
    named: Option<&ConfirmationId>,
    user_id: u64,
) -> Result<Option<ConfirmationId>, StorageError> {
    let found: Option<(String,)> = sqlx::query_as(
        "SELECT r.question_id FROM reason_requests r
         JOIN confirmations c ON c.id = r.question_id
         WHERE r.user_id = $3 AND r.chat_id = $1
           AND (r.prompt_message_id = $2
                OR r.question_id = $4
                OR (c.chat_id = $1 AND c.message_id = $2)
                OR EXISTS (SELECT 1 FROM copies k WHERE k.question_id = c.id
                           AND k.chat_id = $1 AND k.message_id = $2))
         ORDER BY r.asked_at DESC LIMIT 1",
    )
    .bind(chat_id)
    .bind(i64::from(reply_to))
    .bind(user_column(user_id))
    .bind(named.map(|id| id.as_str()))
    .fetch_optional(pool)
    .await?;
    Ok(found.and_then(|(id,)| ConfirmationId::parse(&id).ok()))
}
