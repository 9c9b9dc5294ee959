//! The steps a pending question takes (a selection, more time, reminders, escalation, a
//! reason asked for) and the messages beside its first (copies, strays, moved chats).

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use serde_json::json;
use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::questions::{commit_step, commit_step_telling};
use super::{Db, append_event};
use crate::domain::audit;
use crate::domain::ids::QuestionId;
use crate::domain::question::{Operator, Question, Step, rfc3339};
use crate::domain::sla::SlaMark;
use crate::storage::StorageError;
use crate::storage::rows::{ms, user_column};

/// See [`crate::storage::Steps::selection`].
pub(crate) async fn selection(
    pool: &Pool<Db>,
    id: &QuestionId,
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
pub(crate) async fn set_selection(
    pool: &Pool<Db>,
    id: &QuestionId,
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

/// See [`crate::storage::Steps::extend`]; `tx` is the backend's audit transaction.
pub(crate) async fn extend(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    from: OffsetDateTime,
    to: OffsetDateTime,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
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

/// Moves one of a pending question's step counters from `from` to `to` with
/// `statement` (`SET <counter> = $1 WHERE id = $2 AND status = 'pending' AND <counter>
/// = $3`): whether this claim won (another, or the question's end, came first if not).
async fn claim_count(
    tx: &mut Transaction<'_, Db>,
    statement: &'static str,
    id: &QuestionId,
    from: u32,
    to: u32,
) -> Result<bool, StorageError> {
    Ok(sqlx::query(statement)
        .bind(i64::from(to))
        .bind(id.as_str())
        .bind(i64::from(from))
        .execute(&mut **tx)
        .await?
        .rows_affected()
        == 1)
}

/// See [`crate::storage::Steps::claim_reminders`]; `tx` is the backend's audit transaction.
pub(crate) async fn claim_reminders(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    sent: u32,
    passed: u32,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    let statement = "UPDATE confirmations SET reminders_sent = $1
         WHERE id = $2 AND status = 'pending' AND reminders_sent = $3";
    if !claim_count(&mut tx, statement, id, sent, passed).await? {
        return Ok(None);
    }
    let detail = json!({"reminder": passed});
    commit_step(tx, id, Step::Reminded, None, detail, now).await
}

/// See [`crate::storage::Steps::claim_sla_mark`]; `tx` is the backend's audit transaction.
pub(crate) async fn claim_sla_mark(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    shown: u32,
    mark: SlaMark,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    let statement = "UPDATE confirmations SET sla_marks = $1
         WHERE id = $2 AND status = 'pending' AND sla_marks = $3";
    if !claim_count(&mut tx, statement, id, shown, mark.count()).await? {
        return Ok(None);
    }
    let step = match mark {
        SlaMark::AtRisk => Step::SlaAtRisk,
        SlaMark::Overdue => Step::SlaOverdue,
    };
    commit_step(tx, id, step, None, json!({}), now).await
}

/// Adds a copy of question `id` for `recipient` in `chat_id`; whether it is new (a copy
/// in that chat exists already otherwise).
async fn insert_copy(
    tx: &mut Transaction<'_, Db>,
    id: &QuestionId,
    recipient: &str,
    chat_id: i64,
) -> Result<bool, StorageError> {
    Ok(sqlx::query(
        "INSERT INTO copies (question_id, recipient, chat_id) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(id.as_str())
    .bind(recipient)
    .bind(chat_id)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1)
}

/// See [`crate::storage::Steps::delegate_question`]; `tx` is the backend's audit
/// transaction.
pub(crate) async fn delegate_question(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    recipient: &str,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
    let pending: Option<(String,)> =
        sqlx::query_as("SELECT id FROM confirmations WHERE id = $1 AND status = 'pending'")
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if pending.is_none() {
        return Ok(None);
    }
    if !insert_copy(&mut tx, id, recipient, chat_id).await? {
        return Ok(None);
    }
    let detail = json!({"to": recipient, "chat_id": chat_id});
    let tell = Some(("delegated_to", json!(recipient)));
    commit_step_telling(tx, id, Step::Delegated, None, detail, tell, now).await
}

/// See [`crate::storage::Steps::escalate`]; `tx` is the backend's audit transaction.
pub(crate) async fn escalate(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    recipient: &str,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
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
    insert_copy(&mut tx, id, recipient, chat_id).await?;
    let detail = json!({"to": recipient, "chat_id": chat_id});
    commit_step(tx, id, Step::Escalated, None, detail, now).await
}

/// See [`crate::storage::Steps::request_reason`]; `tx` is the backend's audit transaction.
pub(crate) async fn request_reason(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
    by: &Operator,
    chat_id: i64,
    now: OffsetDateTime,
) -> Result<Option<Question>, StorageError> {
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
pub(crate) async fn move_route_chat(
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
pub(crate) async fn add_copy(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
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
pub(crate) async fn set_copy_message_id(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
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
pub(crate) async fn set_reason_prompt(
    pool: &Pool<Db>,
    id: &QuestionId,
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
pub(crate) async fn add_stray(
    mut tx: Transaction<'_, Db>,
    id: &QuestionId,
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

/// See [`crate::storage::Steps::reason_request_for`]: the id of the question whose
/// reason `user_id` was asked for. The reply may answer the prompt (by its stored id,
/// or `named`, read from the prompt's text when its id was never stored), or any
/// message of the question in the chat where they asked.
pub(crate) async fn reason_request_for(
    pool: &Pool<Db>,
    chat_id: i64,
    reply_to: i32,
    named: Option<&QuestionId>,
    user_id: u64,
) -> Result<Option<QuestionId>, StorageError> {
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
    Ok(found.and_then(|(id,)| QuestionId::parse(&id).ok()))
}
