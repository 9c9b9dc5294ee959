//! Questions: storing one, reading them back, deciding one, its answers and what was shown.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use sqlx::{Pool, QueryBuilder, Transaction};
use time::OffsetDateTime;

use super::grants::insert_grant;
use super::outbox::enqueue_delivery;
use super::{Db, QUESTION_BY_ID, append_event, append_events, read_in, whole};
use crate::domain::audit::{self, NewEvent};
use crate::domain::ids::{CallbackToken, IdempotencyKey, QuestionId};
use crate::domain::interaction::{Answer, TimeoutAction};
use crate::domain::question::{Decision, Operator, Question, Step};
use crate::storage::rows::{
    self, PendingRow, Row, WholeRow, insert_confirmations, ms, operator_columns,
};
use crate::storage::{
    Answered, Decided, EndedCursor, GrantInserted, IDEMPOTENCY_TTL, Inserted, PendingEntry, Shown,
    StorageError,
};

/// Stores a new request inside `tx` (an audit transaction; the caller commits); see
/// [`crate::storage::Questions::insert`].
pub(crate) async fn insert_in(
    tx: &mut Transaction<'_, Db>,
    r: &Question,
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
            append_event(tx, &audit::at_once(r)).await?;
            enqueue_delivery(tx, r, now, max_backlog).await?;
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
        existing = sqlx::query_as::<_, WholeRow>(select_whole_where!(
            "agent = $1 AND idempotency_key = $2"
        ))
        .bind(&r.agent)
        .bind(key.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    }
    if let (None, Some(i)) = (&existing, &r.interaction) {
        existing = sqlx::query_as::<_, WholeRow>(select_whole_where!(
            "agent = $1 AND interaction_id = $2"
        ))
        .bind(&r.agent)
        .bind(i.interaction_id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    }
    let existing = existing.ok_or(sqlx::Error::RowNotFound)?;
    let existing = existing.into_domain()?;
    Ok(Inserted::Existing(existing))
}

/// Moves a pending question to its outcome inside `tx` (an audit transaction): one
/// conditional update, then, when it applied, the default answer (if any), the stream
/// and audit events, the webhook and the confirmation window, all in the same
/// transaction.
pub(crate) async fn apply_decision(
    tx: &mut Transaction<'_, Db>,
    id: &QuestionId,
    d: &Decision,
    max_backlog: u32,
) -> Result<Decided, StorageError> {
    let changed = mark_decided(tx, id, d).await?;
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
    if let Some(due) = rows::run_due(&record) {
        set_run_due(tx, id, due).await?;
    }
    push_agent_event(tx, &record, "status", &record.status_event(), d.decided_at).await?;
    append_event(tx, &audit::decided(&record)).await?;
    enqueue_delivery(tx, &record, d.decided_at, max_backlog).await?;
    if let Some(until) = record.window_until() {
        open_window(tx, &record, until).await?;
    }
    store_grant_of_tap(tx, &record).await?;
    Ok(Decided::Applied(record))
}

/// The decision's conditional update (and, approved with changes, the edited call);
/// whether it applied.
async fn mark_decided(
    tx: &mut Transaction<'_, Db>,
    id: &QuestionId,
    d: &Decision,
) -> Result<bool, StorageError> {
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
    if let (true, Some(edit)) = (changed, &d.edit) {
        // Approved with changes: the edited call replaces the asked one in the same
        // transaction, so no reader sees the approval with the call it did not approve.
        sqlx::query(
            "UPDATE confirmations SET original_params_json = params_json,
                    original_args_hash = args_hash, params_json = $1, args_hash = $2
                 WHERE id = $3 AND original_args_hash IS NULL",
        )
        .bind(&edit.params_json)
        .bind(edit.args_hash.as_str())
        .bind(id.as_str())
        .execute(&mut **tx)
        .await?;
    }
    Ok(changed)
}

/// An approved call owed a report (the route's `expect_outcome_seconds`).
async fn set_run_due(
    tx: &mut Transaction<'_, Db>,
    id: &QuestionId,
    due: i64,
) -> Result<(), StorageError> {
    sqlx::query("UPDATE confirmations SET run_due_at = $1 WHERE id = $2")
        .bind(due)
        .bind(id.as_str())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The confirmation window an approval opens, until `until`.
async fn open_window(
    tx: &mut Transaction<'_, Db>,
    record: &Question,
    until: OffsetDateTime,
) -> Result<(), StorageError> {
    // A later expiry replaces an earlier one, never the reverse.
    sqlx::query(
        "INSERT INTO windows (agent, route, owner_id, tool, args_hash, server, expires_at,
                opened_by)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (agent, route, owner_id, tool, args_hash, server)
             DO UPDATE SET expires_at = excluded.expires_at, opened_by = excluded.opened_by
             WHERE excluded.expires_at > windows.expires_at",
    )
    .bind(&record.agent)
    .bind(&record.route)
    .bind(record.owner_id.as_str())
    .bind(record.tool.as_str())
    .bind(record.args_hash.as_str())
    .bind(rows::window_server(&record.window_key()))
    .bind(ms(until))
    .bind(record.id.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The grant a grant question's yes creates, if `record` is one.
async fn store_grant_of_tap(
    tx: &mut Transaction<'_, Db>,
    record: &Question,
) -> Result<(), StorageError> {
    if let Some(g) = crate::domain::grant::granted_by_tap(record) {
        // A grant question answered yes: the grant exists from that yes, in the same
        // write (audited `grant_created` with it), so no reader sees the yes without the
        // grant. Only an interaction presented as a grant before issue 46 can hold the
        // source already; that grant is this one, and the decision still stands.
        let stored = insert_grant(tx, &g).await?;
        if matches!(stored, GrantInserted::InteractionUsed) {
            tracing::warn!(id = %record.id, "the grant question's interaction was granted before");
        }
    }
    Ok(())
}

/// Stores an answer row inside the caller's transaction; false when this person had
/// already answered.
pub(crate) async fn insert_answer(
    tx: &mut Transaction<'_, Db>,
    id: &QuestionId,
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

/// Appends to the agent's event stream inside the caller's transaction.
pub(crate) async fn push_agent_event(
    tx: &mut Transaction<'_, Db>,
    r: &Question,
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

/// Ends the transaction of a step a pending question just took (its conditional
/// update already made in `tx`): reads the question, streams the step, audits it
/// (`by`, `detail`) and commits. Returns the question as it now is.
pub(crate) async fn commit_step(
    tx: Transaction<'_, Db>,
    id: &QuestionId,
    step: Step,
    by: Option<&Operator>,
    detail: serde_json::Value,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    commit_step_telling(tx, id, step, by, detail, None, now).await
}

/// [`commit_step`], with `tell` (a key and its value) added to the agent's event: what
/// the agent should know of the step beyond its name.
pub(crate) async fn commit_step_telling(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    step: Step,
    by: Option<&Operator>,
    detail: serde_json::Value,
    tell: Option<(&str, serde_json::Value)>,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    let Some(record) = read_in(&mut tx, id).await? else {
        return Ok(None);
    };
    let mut event = record.step_event(step);
    if let Some((key, value)) = tell {
        event[key] = value;
    }
    push_agent_event(&mut tx, &record, "status", &event, now).await?;
    append_event(&mut tx, &audit::step(id.as_str(), step, by, detail, now)).await?;
    tx.commit().await?;
    Ok(Some(record))
}

/// See [`crate::storage::Questions::count_pending`].
pub(crate) async fn count_pending(pool: &Pool<Db>, agent: &str) -> Result<u64, StorageError> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM confirmations WHERE agent = $1 AND status = 'pending'",
    )
    .bind(agent)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// See [`crate::storage::Questions::count_allowed_by_rule`].
pub(crate) async fn count_allowed_by_rule(
    pool: &Pool<Db>,
    rule: &str,
    since: OffsetDateTime,
) -> Result<u64, StorageError> {
    let (n,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM confirmations
         WHERE rule = $1 AND created_at > $2 AND via = 'rule' AND status <> 'cancelled'",
    )
    .bind(rule)
    .bind(ms(since))
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// See [`crate::storage::Questions::pending`].
pub(crate) async fn pending(pool: &Pool<Db>) -> Result<Vec<PendingEntry>, StorageError> {
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

/// See [`crate::storage::Questions::get`].
pub(crate) async fn get(
    pool: &Pool<Db>,
    id: &QuestionId,
) -> Result<Option<Question>, StorageError> {
    let row = sqlx::query_as::<_, WholeRow>(QUESTION_BY_ID)
        .bind(id.as_str())
        .fetch_optional(pool)
        .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// A whole question by its callback token: the read of every tap.
pub(crate) const QUESTION_BY_TOKEN: &str = select_whole_where!("callback_token = $1");

/// See [`crate::storage::Questions::find_by_token`].
pub(crate) async fn find_by_token(
    pool: &Pool<Db>,
    token: &CallbackToken,
) -> Result<Option<Question>, StorageError> {
    let row = sqlx::query_as::<_, WholeRow>(QUESTION_BY_TOKEN)
        .bind(token.as_str())
        .fetch_optional(pool)
        .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// See [`crate::storage::Questions::find_by_idempotency_key`].
pub(crate) async fn find_by_idempotency_key(
    pool: &Pool<Db>,
    agent: &str,
    key: &IdempotencyKey,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    let row = sqlx::query_as::<_, WholeRow>(select_whole_where!(
        "agent = $1 AND idempotency_key = $2 AND created_at > $3"
    ))
    .bind(agent)
    .bind(key.as_str())
    .bind(ms(now - IDEMPOTENCY_TTL))
    .fetch_optional(pool)
    .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// See [`crate::storage::Questions::find_interaction`].
pub(crate) async fn find_interaction(
    pool: &Pool<Db>,
    agent: &str,
    interaction_id: &str,
) -> Result<Option<Question>, StorageError> {
    let row =
        sqlx::query_as::<_, WholeRow>(select_whole_where!("agent = $1 AND interaction_id = $2"))
            .bind(agent)
            .bind(interaction_id)
            .fetch_optional(pool)
            .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// See [`crate::storage::Questions::find_by_message`]. `IN`, not `=`: PostgreSQL refuses a
/// scalar subquery with several rows (where SQLite took the first), so every copy and
/// stray in that chat with that message counts; `LIMIT 1` takes the first question found.
pub(crate) async fn find_by_message(
    pool: &Pool<Db>,
    chat_id: i64,
    message_id: i32,
) -> Result<Option<Question>, StorageError> {
    let row = sqlx::query_as::<_, WholeRow>(select_whole_where!(
        "(chat_id = $1 AND message_id = $2)
         OR id IN (SELECT question_id FROM copies
                   WHERE chat_id = $1 AND message_id = $2)
         OR id IN (SELECT question_id FROM strays
                   WHERE chat_id = $1 AND message_id = $2)
         LIMIT 1"
    ))
    .bind(chat_id)
    .bind(i64::from(message_id))
    .fetch_optional(pool)
    .await?;
    row.map(WholeRow::into_domain).transpose()
}

/// See [`crate::storage::Questions::pending_in_chat`].
pub(crate) async fn pending_in_chat(
    pool: &Pool<Db>,
    chat_id: i64,
) -> Result<Vec<Question>, StorageError> {
    let rows: Vec<WholeRow> = sqlx::query_as(select_whole_where!(concat!(
        "chat_id = $1 AND status = 'pending' ORDER BY created_at, id",
        bytewise!()
    )))
    .bind(chat_id)
    .fetch_all(pool)
    .await?;
    whole(rows)
}

/// One ended confirmation as [`ended_since`] reads it: id, tool, status, via, who
/// decided (id, name), asked and decided (ms), the run's status.
type EndedRow = (
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    Option<String>,
    i64,
    Option<i64>,
    Option<String>,
);

/// The questions of a route that ended since a time, the latest first (through the
/// index on `(route, created_at)`).
pub(crate) const ENDED_IN_ROUTE: &str =
    "SELECT id, tool, status, via, decided_by_id, decided_by_name, created_at,
            decided_at, run_status
     FROM confirmations
     WHERE route = $1 AND created_at >= $2 AND interaction_id IS NULL
       AND status IN ('confirmed', 'cancelled', 'timeout')
     ORDER BY created_at DESC LIMIT $3";

/// See [`crate::storage::Questions::ended_since`]: the few columns the statistics read,
/// not whole questions.
pub(crate) async fn ended_since(
    pool: &Pool<Db>,
    route: &str,
    since: OffsetDateTime,
    limit: u32,
) -> Result<Vec<crate::domain::stats::Ended>, StorageError> {
    let rows: Vec<EndedRow> = sqlx::query_as(ENDED_IN_ROUTE)
        .bind(route)
        .bind(ms(since))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    rows.into_iter().map(ended_row).collect()
}

/// One row of [`ended_since`] as the statistics read it.
fn ended_row(row: EndedRow) -> Result<crate::domain::stats::Ended, StorageError> {
    use crate::domain::question::{Status, Via};
    let (id, tool, status, via, by_id, by_name, created, decided, run) = row;
    let corrupt = |what: &str| StorageError::Corrupt {
        id: id.clone(),
        what: what.into(),
    };
    let status = Status::parse(&status).ok_or_else(|| corrupt("status"))?;
    let via = via
        .map(|v| Via::parse(&v).ok_or_else(|| corrupt("via")))
        .transpose()?;
    let person = match (via, by_id, by_name) {
        (Some(Via::Operator), Some(id), name) => Some((
            u64::try_from(id).map_err(|_| corrupt("decided_by_id"))?,
            name.unwrap_or_default(),
        )),
        _ => None,
    };
    let waited = decided
        .map(|d| std::time::Duration::from_millis(u64::try_from(d - created).unwrap_or(0)))
        .unwrap_or_default();
    Ok(crate::domain::stats::Ended {
        tool,
        person,
        status,
        via,
        waited,
        run_failed: run.as_deref() == Some("failed"),
    })
}

/// See [`crate::storage::Questions::pending_of`]. `$1 IS NULL` keeps one statement for
/// both readings (every agent, or one).
pub(crate) async fn pending_of(
    pool: &Pool<Db>,
    agent: Option<&str>,
    limit: u32,
) -> Result<Vec<Question>, StorageError> {
    let rows: Vec<WholeRow> = sqlx::query_as(select_whole_where!(concat!(
        "status = 'pending' AND ($1 IS NULL OR agent = $1) ORDER BY expires_at, id",
        bytewise!(),
        " LIMIT $2"
    )))
    .bind(agent)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    whole(rows)
}

/// See [`crate::storage::Questions::ended_in_chats`]. The `via` list is the very predicate
/// of the partial index `confirmations_ended` (on `decided_at, id`), so the newest
/// decisions are read in index order and the scan stops at `limit`; a question's copies
/// are found by their primary key, one probe per question read.
pub(crate) async fn ended_in_chats(
    pool: &Pool<Db>,
    chats: &[i64],
    before: Option<&EndedCursor>,
    limit: u32,
) -> Result<Vec<Question>, StorageError> {
    if chats.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new(select_whole_where!(
        "via IN ('operator', 'timeout', 'withdrawn', 'fail_closed')"
    ));
    if let Some(c) = before {
        q.push(" AND decided_at <= ")
            .push_bind(c.decided_at_ms)
            .push(" AND (decided_at < ")
            .push_bind(c.decided_at_ms)
            .push(concat!(" OR id", bytewise!(), " < "))
            .push_bind(c.id.as_str().to_owned())
            .push(")");
    }
    q.push(" AND (chat_id IN (");
    let mut list = q.separated(", ");
    for chat in chats {
        list.push_bind(*chat);
    }
    q.push(
        ") OR EXISTS (SELECT 1 FROM copies c WHERE c.question_id = confirmations.id
                       AND c.chat_id IN (",
    );
    let mut list = q.separated(", ");
    for chat in chats {
        list.push_bind(*chat);
    }
    q.push(concat!(
        "))) ORDER BY decided_at DESC, id",
        bytewise!(),
        " DESC LIMIT "
    ))
    .push_bind(i64::from(limit));
    let rows: Vec<WholeRow> = q.build_query_as().fetch_all(pool).await?;
    whole(rows)
}

/// See [`crate::storage::Questions::unshown_outcomes`].
pub(crate) async fn unshown_decisions(pool: &Pool<Db>) -> Result<Vec<Question>, StorageError> {
    let rows: Vec<WholeRow> = sqlx::query_as(select_whole_where!(concat!(
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
    .fetch_all(pool)
    .await?;
    whole(rows)
}

/// Records the Telegram message that carries the question's buttons in `tx` (the
/// backend's audit transaction), audited, with an interaction's new status streamed,
/// and commits; see [`crate::storage::Messages::set_message_id`].
pub(crate) async fn set_message_id(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
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
pub(crate) async fn add_answer(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    answer: &Answer,
    settles: Option<&Decision>,
    also: Option<&NewEvent>,
    max_backlog: u32,
) -> Result<Answered, StorageError> {
    // The row alone first: the common answer settles the question, and the decision
    // that follows reads it whole; only the rarer ends below need it whole here.
    let row = sqlx::query_as::<_, Row>("SELECT * FROM confirmations WHERE id = $1")
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
    let Some(record) = row.map(Row::into_domain).transpose()? else {
        return Ok(Answered::NotFound);
    };
    let read_whole = async |tx: &mut Transaction<'_, Db>| {
        read_in(tx, id)
            .await?
            .ok_or(StorageError::from(sqlx::Error::RowNotFound))
    };
    if record.is_terminal() {
        return Ok(Answered::Closed(read_whole(&mut tx).await?));
    }
    if !insert_answer(&mut tx, id, answer).await? {
        return Ok(Answered::AlreadyAnswered(read_whole(&mut tx).await?));
    }
    // What is written before the decision (the answer's audit event and stream row)
    // needs only the row; without a decision, the record is read with the new answer.
    let record = match settles {
        Some(_) => record,
        None => read_whole(&mut tx).await?,
    };
    let answered = audit::answered(id.as_str(), answer);
    match also {
        Some(also) => append_events(&mut tx, &[answered, also.clone()]).await?,
        None => append_event(&mut tx, &answered).await?,
    }
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

/// See [`crate::storage::Messages::mark_shown`].
pub(crate) async fn mark_shown(
    pool: &Pool<Db>,
    id: &QuestionId,
    what: Shown,
) -> Result<(), StorageError> {
    let query = match what {
        Shown::Attachment => {
            sqlx::query("UPDATE confirmations SET attached = TRUE WHERE id = $1").bind(id.as_str())
        }
        Shown::Decision => {
            sqlx::query("UPDATE confirmations SET outcome_shown = TRUE WHERE id = $1")
                .bind(id.as_str())
        }
        Shown::CopyDecision { chat_id } => sqlx::query(
            "UPDATE copies SET outcome_shown = TRUE WHERE question_id = $1 AND chat_id = $2",
        )
        .bind(id.as_str())
        .bind(chat_id),
        Shown::StrayDecision {
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
