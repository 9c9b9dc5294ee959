//! The audit trail's events and its hash chain.
//!
//! Every event row stores `hash = sha256(prev_hash || content)`, where `content` is an
//! unambiguous JSON array of the row's own fields (its sequence number included). The
//! first row's `prev_hash` is 64 zeros. Editing a row changes its hash; deleting or
//! reordering rows breaks the link to the next one; so [`verify`] names the first row
//! at which the stored chain stops matching. Events never carry parameter values or
//! secrets: ids, hashes, who and why.

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::confirmation::{Confirmation, Operator, Status, Via, Window, rfc3339};
use super::interaction::Answer;

pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An event about to be appended.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub at: OffsetDateTime,
    pub confirmation_id: Option<String>,
    pub kind: &'static str,
    /// `agent:<name>`, `telegram:<user id>` or `system`.
    pub actor: String,
    pub detail: Value,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditEvent {
    pub seq: i64,
    #[serde(serialize_with = "ser_time")]
    #[schema(value_type = String, format = DateTime)]
    pub at: OffsetDateTime,
    #[schema(required = true)]
    pub confirmation_id: Option<String>,
    pub kind: String,
    pub actor: String,
    pub detail: Value,
    pub prev_hash: String,
    pub hash: String,
}

fn ser_time<S: serde::Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339(*t))
}

fn millis(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// The hash of a row, given the previous row's hash. `detail` is hashed as the exact
/// text stored, so verification never depends on re-serialising JSON.
pub fn chain_hash(
    prev_hash: &str,
    seq: i64,
    at: OffsetDateTime,
    confirmation_id: Option<&str>,
    kind: &str,
    actor: &str,
    detail_text: &str,
) -> String {
    let content = json!([seq, millis(at), confirmation_id, kind, actor, detail_text]).to_string();
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(content.as_bytes());
    hex::encode(h.finalize())
}

/// A stored row as text, the way verification reads it.
#[derive(Debug, Clone)]
pub struct StoredRow {
    pub seq: i64,
    pub at: OffsetDateTime,
    pub confirmation_id: Option<String>,
    pub kind: String,
    pub actor: String,
    pub detail_text: String,
    pub prev_hash: String,
    pub hash: String,
}

/// Where the chain broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("audit chain broken at event {seq}: {reason}")]
pub struct Broken {
    pub seq: i64,
    pub reason: String,
}

/// Checks rows in sequence order; returns how many were verified.
pub fn verify(rows: impl IntoIterator<Item = StoredRow>) -> Result<u64, Broken> {
    let mut expected_prev = GENESIS_HASH.to_owned();
    let mut last_seq = 0;
    let mut n = 0;
    for r in rows {
        if r.seq != last_seq + 1 {
            return Err(Broken {
                seq: r.seq,
                reason: format!("expected event {} next (a row is missing)", last_seq + 1),
            });
        }
        if r.prev_hash != expected_prev {
            return Err(Broken {
                seq: r.seq,
                reason: "its prev_hash does not match the previous event's hash".into(),
            });
        }
        let recomputed = chain_hash(
            &r.prev_hash,
            r.seq,
            r.at,
            r.confirmation_id.as_deref(),
            &r.kind,
            &r.actor,
            &r.detail_text,
        );
        if recomputed != r.hash {
            return Err(Broken {
                seq: r.seq,
                reason: "its content does not match its hash (the row was edited)".into(),
            });
        }
        expected_prev = r.hash;
        last_seq = r.seq;
        n += 1;
    }
    Ok(n)
}

fn agent_actor(r: &Confirmation) -> String {
    format!("agent:{}", r.agent)
}

fn operator_json(op: &Operator) -> Value {
    json!({"id": op.id, "username": op.username, "name": op.name})
}

/// A request was stored and is about to be delivered.
pub fn requested(r: &Confirmation) -> NewEvent {
    NewEvent {
        at: r.created_at,
        confirmation_id: Some(r.id.to_string()),
        kind: "requested",
        actor: agent_actor(r),
        detail: json!({
            "tool": r.tool.as_str(),
            "owner_id": r.owner_id.as_str(),
            "args_hash": r.args_hash.as_str(),
            "route": r.route,
            "chat_id": r.chat_id,
            "expires_at": rfc3339(r.expires_at),
            "window_seconds": r.window_seconds,
            "allow_edit": r.allow_edit,
            "callback": r.callback_url.is_some(),
            "kind": r.kind().as_str(),
            "interaction_id": r.interaction.as_ref().map(|i| i.interaction_id.as_str()),
        }),
    }
}

/// A request was confirmed at once by a live window.
pub fn window_hit(r: &Confirmation) -> NewEvent {
    NewEvent {
        at: r.created_at,
        confirmation_id: Some(r.id.to_string()),
        kind: "window_hit",
        actor: agent_actor(r),
        detail: json!({
            "tool": r.tool.as_str(),
            "owner_id": r.owner_id.as_str(),
            "args_hash": r.args_hash.as_str(),
            "reason": r.reason,
        }),
    }
}

/// Telegram accepted the question's message.
pub fn delivered(id: &str, chat_id: i64, message_id: i32, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: "delivered",
        actor: "system".into(),
        detail: json!({"chat_id": chat_id, "message_id": message_id}),
    }
}

/// A request reached its outcome (`r` is the decided record).
pub fn decided(r: &Confirmation) -> NewEvent {
    let at = r.decided_at.unwrap_or(r.created_at);
    let (kind, actor, detail) = match (r.via, &r.decided_by) {
        (Some(Via::Operator), Some(op)) => (
            "decided",
            format!("telegram:{}", op.id),
            json!({
                "button": if r.status == Status::Confirmed { "approve" } else { "cancel" },
                "status": r.status.as_str(),
                "operator": operator_json(op),
            }),
        ),
        (Some(Via::Timeout), _) => ("timeout", "system".to_owned(), json!({"reason": r.reason})),
        (Some(Via::Withdrawn), _) => ("withdrawn", agent_actor(r), json!({})),
        (Some(Via::FailClosed), _) => (
            "fail_closed",
            "system".to_owned(),
            json!({"reason": r.reason}),
        ),
        _ => (
            "decided",
            "system".to_owned(),
            json!({"status": r.status.as_str(), "reason": r.reason}),
        ),
    };
    NewEvent {
        at,
        confirmation_id: Some(r.id.to_string()),
        kind,
        actor,
        detail,
    }
}

/// A person answered (or a default was applied). The value itself is not recorded, only
/// its hash: a free-text answer may hold anything.
pub fn answered(id: &str, answer: &Answer) -> NewEvent {
    let value_sha256 = hex::encode(Sha256::digest(answer.value.to_string().as_bytes()));
    NewEvent {
        at: answer.at,
        confirmation_id: Some(id.to_owned()),
        kind: "answered",
        actor: match &answer.by {
            Some(op) => format!("telegram:{}", op.id),
            None => "system".to_owned(),
        },
        detail: json!({
            "respondent": answer.respondent,
            "operator": answer.by.as_ref().map(operator_json),
            "default": answer.is_default,
            "value_sha256": value_sha256,
        }),
    }
}

/// A copy of a question was sent to a further private chat.
pub fn copied(id: &str, recipient: &str, chat_id: i64, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: "copy_requested",
        actor: "system".into(),
        detail: json!({"recipient": recipient, "chat_id": chat_id}),
    }
}

/// A further copy could not be delivered (the question stays open for the others).
pub fn copy_failed(id: &str, chat_id: i64, reason: &str, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: "copy_failed",
        actor: "system".into(),
        detail: json!({"chat_id": chat_id, "reason": reason}),
    }
}

/// A tap was refused.
pub fn refused_tap(
    confirmation_id: Option<&str>,
    operator: &Operator,
    chat_id: Option<i64>,
    message_id: Option<i32>,
    why: &str,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: confirmation_id.map(str::to_owned),
        kind: "refused_tap",
        actor: format!("telegram:{}", operator.id),
        detail: json!({
            "operator": operator_json(operator),
            "chat_id": chat_id,
            "message_id": message_id,
            "why": why,
        }),
    }
}

/// An operator closed a confirmation window early (`/revoke` in `chat_id`). Filed under
/// the request that opened the window, so that request's trail shows who closed it.
pub fn window_revoked(
    window: &Window,
    route: &str,
    by: &Operator,
    chat_id: i64,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(window.opened_by.to_string()),
        kind: "window_revoked",
        actor: format!("telegram:{}", by.id),
        detail: json!({
            "operator": operator_json(by),
            "route": route,
            "chat_id": chat_id,
            "agent": window.key.agent,
            "tool": window.key.tool.as_str(),
            "owner_id": window.key.owner_id.as_str(),
            "args_hash": window.key.args_hash.as_str(),
            "expires_at": rfc3339(window.expires_at),
        }),
    }
}

/// An operator command was refused in a route's chat (a non-approver, or a bot).
pub fn refused_command(
    operator: &Operator,
    chat_id: i64,
    command: &str,
    why: &str,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "refused_command",
        actor: format!("telegram:{}", operator.id),
        detail: json!({
            "operator": operator_json(operator),
            "chat_id": chat_id,
            "command": command,
            "why": why,
        }),
    }
}

/// Webhook delivered, or given up.
pub fn webhook(
    confirmation_id: &str,
    delivery_id: &str,
    delivered: bool,
    error: Option<&str>,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(confirmation_id.to_owned()),
        kind: if delivered {
            "webhook_delivered"
        } else {
            "webhook_given_up"
        },
        actor: "system".into(),
        detail: json!({"delivery_id": delivery_id, "error": error}),
    }
}

/// A route's group became a supergroup.
pub fn route_moved(route: &str, from: i64, to: i64, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "route_moved",
        actor: "system".into(),
        detail: json!({"route": route, "from_chat_id": from, "to_chat_id": to}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(prev: &str, seq: i64, detail: &str) -> StoredRow {
        let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let hash = chain_hash(prev, seq, at, Some("cf_x"), "requested", "agent:a", detail);
        StoredRow {
            seq,
            at,
            confirmation_id: Some("cf_x".into()),
            kind: "requested".into(),
            actor: "agent:a".into(),
            detail_text: detail.into(),
            prev_hash: prev.into(),
            hash,
        }
    }

    fn chain(n: i64) -> Vec<StoredRow> {
        let mut rows: Vec<StoredRow> = Vec::new();
        for seq in 1..=n {
            let prev = rows
                .last()
                .map_or(GENESIS_HASH.to_owned(), |r| r.hash.clone());
            rows.push(row(&prev, seq, &format!("{{\"n\":{seq}}}")));
        }
        rows
    }

    #[test]
    fn an_intact_chain_verifies() {
        assert_eq!(verify(chain(5)), Ok(5));
        assert_eq!(verify(Vec::new()), Ok(0));
    }

    #[test]
    fn an_edited_row_is_named() {
        let mut rows = chain(5);
        rows[2].detail_text = "{\"n\":99}".into();
        assert_eq!(verify(rows).unwrap_err().seq, 3);
    }

    #[test]
    fn a_deleted_row_is_named() {
        let mut rows = chain(5);
        rows.remove(1);
        assert_eq!(verify(rows).unwrap_err().seq, 3);
    }

    #[test]
    fn a_rehashed_edit_still_breaks_the_link_to_the_next_row() {
        let mut rows = chain(5);
        rows[2].detail_text = "{\"n\":99}".into();
        rows[2].hash = chain_hash(
            &rows[2].prev_hash,
            3,
            rows[2].at,
            Some("cf_x"),
            "requested",
            "agent:a",
            "{\"n\":99}",
        );
        assert_eq!(verify(rows).unwrap_err().seq, 4);
    }
}
