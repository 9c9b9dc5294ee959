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

use super::confirmation::{Confirmation, Operator, Status, Step, Via, Window, rfc3339};
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

/// A point in the chain, written `SEQ:HASH`: an event's sequence number and its hash.
///
/// Because every hash covers the one before it, a head kept somewhere the database's
/// owner cannot write (the service logs it; `audit verify` prints it) pins every event
/// up to `SEQ`: a later trail that ends before `SEQ`, or holds another event there, was
/// truncated or rewritten, however carefully its hashes were recomputed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    seq: i64,
    /// 64 lowercase hex digits.
    hash: String,
}

/// Why a `SEQ:HASH` text is not a head.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHead {
    #[error(
        "expected SEQ:HASH, an event number and its 64-digit hash as `audit verify` prints them after `head:`"
    )]
    Shape,
    #[error("'{0}' is not an event number (a whole number, 0 or more)")]
    Seq(String),
    #[error("the hash must be 64 hexadecimal digits, got {0} characters")]
    HashLength(usize),
    #[error("the hash must be 64 hexadecimal digits, found {0:?}")]
    HashDigit(char),
    #[error("event 0 is the head of an empty trail: its hash is 64 zeros")]
    Genesis,
}

impl Head {
    /// The head of an empty trail: event 0 with the genesis hash.
    pub fn genesis() -> Head {
        Head {
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }

    /// A head from an event number and its hash (as stored, or as typed).
    pub fn new(seq: i64, hash: &str) -> Result<Head, BadHead> {
        if seq < 0 {
            return Err(BadHead::Seq(seq.to_string()));
        }
        if hash.len() != 64 {
            return Err(BadHead::HashLength(hash.chars().count()));
        }
        if let Some(c) = hash.chars().find(|c| !c.is_ascii_hexdigit()) {
            return Err(BadHead::HashDigit(c));
        }
        let hash = hash.to_ascii_lowercase();
        if seq == 0 && hash != GENESIS_HASH {
            return Err(BadHead::Genesis);
        }
        Ok(Head { seq, hash })
    }

    pub fn seq(&self) -> i64 {
        self.seq
    }

    pub fn hash(&self) -> &str {
        &self.hash
    }
}

impl std::str::FromStr for Head {
    type Err = BadHead;

    fn from_str(s: &str) -> Result<Head, BadHead> {
        let (seq, hash) = s.trim().split_once(':').ok_or(BadHead::Shape)?;
        let seq_num: i64 = seq
            .parse()
            .map_err(|_| BadHead::Seq(seq.chars().take(40).collect()))?;
        Head::new(seq_num, hash)
    }
}

impl std::fmt::Display for Head {
    /// `SEQ:HASH`, exactly what `--expect-head` takes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// An intact chain: how many events it holds and its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub events: u64,
    pub head: Head,
}

/// Checks rows in sequence order; returns how many were verified and the last one's
/// head.
pub fn verify<'a>(rows: impl IntoIterator<Item = &'a StoredRow>) -> Result<Verified, Broken> {
    let mut head = Head::genesis();
    let mut n = 0;
    for r in rows {
        if r.seq != head.seq + 1 {
            return Err(Broken {
                seq: r.seq,
                reason: format!("expected event {} next (a row is missing)", head.seq + 1),
            });
        }
        if r.prev_hash != head.hash {
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
        // `recomputed` is a hex SHA-256, so this is a valid head.
        head = Head {
            seq: r.seq,
            hash: recomputed,
        };
        n += 1;
    }
    Ok(Verified { events: n, head })
}

/// How a trail differs from a head recorded earlier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadMismatch {
    #[error(
        "audit trail truncated: it ends at event {last}, but event {} was recorded earlier (expected head {expected}): events were removed from its end",
        expected.seq
    )]
    Truncated { expected: Head, last: i64 },
    #[error(
        "audit trail rewritten: event {} has hash {found}, not {} as recorded earlier (expected head {expected}): the events up to it are not the ones that were there",
        expected.seq,
        expected.hash
    )]
    Rewritten { expected: Head, found: String },
    #[error(
        "audit trail rewritten: event {} of the expected head {expected} is missing",
        expected.seq
    )]
    Missing { expected: Head },
}

/// Checks that `rows` (in sequence order) still hold the `expected` head: its event is
/// there with its hash. Events after it are the trail's later growth.
pub fn check_head(rows: &[StoredRow], expected: &Head) -> Result<(), HeadMismatch> {
    if expected.seq == 0 {
        // The empty trail is the start of every trail.
        return Ok(());
    }
    match rows.binary_search_by_key(&expected.seq, |r| r.seq) {
        Ok(i) if rows[i].hash == expected.hash => Ok(()),
        Ok(i) => Err(HeadMismatch::Rewritten {
            expected: expected.clone(),
            found: rows[i].hash.clone(),
        }),
        Err(_) => {
            let last = rows.last().map_or(0, |r| r.seq);
            if last < expected.seq {
                Err(HeadMismatch::Truncated {
                    expected: expected.clone(),
                    last,
                })
            } else {
                Err(HeadMismatch::Missing {
                    expected: expected.clone(),
                })
            }
        }
    }
}

/// A request's status as stored, as text, the way verification reads it (text, so that
/// a value that is no status at all is reported rather than refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredStatus {
    pub id: String,
    pub status: String,
}

/// The event kinds that record a request's outcome. A request that ended has exactly
/// one of them, appended in the transaction that stored the outcome; a pending request
/// has none. `decided` covers taps and interactions' answers (its detail names the
/// status); the others imply it (see [`recorded_status`]).
pub const DECISION_KINDS: [&str; 5] = [
    "window_hit",
    "decided",
    "timeout",
    "withdrawn",
    "fail_closed",
];

/// The outcome a decision event records. Events name it in `detail.status`; events
/// written before they did imply it by their kind: `window_hit` confirmed, `withdrawn`
/// and `fail_closed` cancelled, `timeout` completed when a default answer was recorded
/// for the request (an interaction's `default_response`) and `timeout` otherwise.
fn recorded_status(row: &StoredRow, default_answered: bool) -> Option<Status> {
    let detail: Value = serde_json::from_str(&row.detail_text).ok()?;
    if let Some(named) = detail.get("status") {
        return named
            .as_str()
            .and_then(Status::parse)
            .filter(|s| s.is_terminal());
    }
    match row.kind.as_str() {
        "window_hit" => Some(Status::Confirmed),
        "withdrawn" | "fail_closed" => Some(Status::Cancelled),
        "timeout" if default_answered => Some(Status::Completed),
        "timeout" => Some(Status::Timeout),
        _ => None,
    }
}

/// A request whose stored status does not agree with the trail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Drift {
    #[error(
        "request {id}: stored status '{stored}', but its decision (event {seq}, {kind}) says '{recorded}'"
    )]
    Mismatch {
        id: String,
        stored: String,
        seq: i64,
        kind: String,
        recorded: &'static str,
    },
    #[error("request {id}: stored status '{stored}', but the trail records no decision for it")]
    Undecided { id: String, stored: String },
    #[error("request {id}: its decision (event {seq}, {kind}) names no outcome")]
    Unreadable { id: String, seq: i64, kind: String },
    #[error("request {id}: the trail records two decisions for it (events {first} and {second})")]
    Twice { id: String, first: i64, second: i64 },
    #[error(
        "request {id}: the trail records its decision (event {seq}, {kind}), but no such request is stored"
    )]
    Vanished { id: String, seq: i64, kind: String },
}

/// Compares every request's stored status with the decision event the trail holds for
/// it: an ended request must have exactly one, recording the stored outcome; a pending
/// one none; and every decided request must still be stored. Catches a status edited
/// behind the trail's back (in either direction) and a decision event cut off the end.
pub fn cross_check(rows: &[StoredRow], statuses: &[StoredStatus]) -> Vec<Drift> {
    struct Recorded<'a> {
        seq: i64,
        kind: &'a str,
        status: Option<Status>,
    }
    let mut drift = Vec::new();
    let mut decisions: std::collections::HashMap<&str, Recorded> = Default::default();
    let mut default_answered: std::collections::HashSet<&str> = Default::default();
    for r in rows {
        let Some(id) = r.confirmation_id.as_deref() else {
            continue;
        };
        if r.kind == "answered"
            && serde_json::from_str::<Value>(&r.detail_text)
                .is_ok_and(|d| d["default"] == Value::Bool(true))
        {
            default_answered.insert(id);
        }
        if !DECISION_KINDS.contains(&r.kind.as_str()) {
            continue;
        }
        let status = recorded_status(r, default_answered.contains(id));
        match decisions.entry(id) {
            std::collections::hash_map::Entry::Occupied(first) => drift.push(Drift::Twice {
                id: id.to_owned(),
                first: first.get().seq,
                second: r.seq,
            }),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Recorded {
                    seq: r.seq,
                    kind: &r.kind,
                    status,
                });
            }
        }
    }
    for s in statuses {
        match decisions.remove(s.id.as_str()) {
            None if s.status == Status::Pending.as_str() => {}
            None => drift.push(Drift::Undecided {
                id: s.id.clone(),
                stored: s.status.clone(),
            }),
            Some(d) => match d.status {
                None => drift.push(Drift::Unreadable {
                    id: s.id.clone(),
                    seq: d.seq,
                    kind: d.kind.to_owned(),
                }),
                Some(recorded) if recorded.as_str() == s.status => {}
                Some(recorded) => drift.push(Drift::Mismatch {
                    id: s.id.clone(),
                    stored: s.status.clone(),
                    seq: d.seq,
                    kind: d.kind.to_owned(),
                    recorded: recorded.as_str(),
                }),
            },
        }
    }
    // What is left was decided in the trail but is no longer stored.
    let mut vanished: Vec<_> = decisions.into_iter().collect();
    vanished.sort_by_key(|(_, d)| d.seq);
    drift.extend(vanished.into_iter().map(|(id, d)| Drift::Vanished {
        id: id.to_owned(),
        seq: d.seq,
        kind: d.kind.to_owned(),
    }));
    drift
}

/// Something `audit verify` found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error(transparent)]
    Broken(#[from] Broken),
    #[error(transparent)]
    Head(#[from] HeadMismatch),
    #[error(transparent)]
    Drift(#[from] Drift),
}

/// What `audit verify` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Events in the trail.
    pub events: u64,
    /// The head of the chain; `None` when the chain is broken (a broken chain has no
    /// head worth keeping).
    pub head: Option<Head>,
    /// Requests that have ended, each checked against its decision event.
    pub ended: u64,
    /// Everything wrong, the chain's break first; empty when the trail is intact.
    pub problems: Vec<Problem>,
}

/// Every check of `audit verify` over one consistent read of the trail (in sequence
/// order) and the requests' statuses: the hash chain, the `expected` head if given, and
/// the statuses against their decision events.
pub fn check(rows: &[StoredRow], statuses: &[StoredStatus], expected: Option<&Head>) -> Report {
    let mut problems = Vec::new();
    let head = match verify(rows) {
        Ok(v) => Some(v.head),
        Err(broken) => {
            problems.push(Problem::from(broken));
            None
        }
    };
    if let Some(expected) = expected
        && let Err(mismatch) = check_head(rows, expected)
    {
        problems.push(mismatch.into());
    }
    problems.extend(cross_check(rows, statuses).into_iter().map(Problem::from));
    Report {
        events: rows.len() as u64,
        head,
        ended: statuses
            .iter()
            .filter(|s| s.status != Status::Pending.as_str())
            .count() as u64,
        problems,
    }
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
            "status": r.status.as_str(),
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

/// A request reached its outcome (`r` is the decided record). The detail names the
/// stored status, which `audit verify` checks the record against.
pub fn decided(r: &Confirmation) -> NewEvent {
    let at = r.decided_at.unwrap_or(r.created_at);
    let status = r.status.as_str();
    let (kind, actor, mut detail) = match (r.via, &r.decided_by) {
        (Some(Via::Operator), Some(op)) => (
            "decided",
            format!("telegram:{}", op.id),
            json!({
                "button": if r.status == Status::Confirmed { "approve" } else { "cancel" },
                "status": r.status.as_str(),
                "operator": operator_json(op),
            }),
        ),
        (Some(Via::Timeout), _) => (
            "timeout",
            "system".to_owned(),
            json!({"reason": r.reason, "status": status}),
        ),
        (Some(Via::Withdrawn), _) => ("withdrawn", agent_actor(r), json!({"status": status})),
        (Some(Via::FailClosed), _) => (
            "fail_closed",
            "system".to_owned(),
            json!({"reason": r.reason, "status": status}),
        ),
        _ => (
            "decided",
            "system".to_owned(),
            json!({"status": r.status.as_str(), "reason": r.reason}),
        ),
    };
    if let Some(reason) = &r.denial_reason {
        detail["denial_reason"] = json!(reason);
    }
    NewEvent {
        at,
        confirmation_id: Some(r.id.to_string()),
        kind,
        actor,
        detail,
    }
}

/// Whether an event of `kind` gives its question the outcome: the kinds [`decided`]
/// writes.
pub fn ends_question(kind: &str) -> bool {
    matches!(kind, "decided" | "timeout" | "withdrawn" | "fail_closed")
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

/// A pending question took a step (see [`Step`]): `by` is the operator who took it,
/// if one did; `detail` says what changed.
pub fn step(
    id: &str,
    step: Step,
    by: Option<&Operator>,
    mut detail: Value,
    at: OffsetDateTime,
) -> NewEvent {
    if let Some(op) = by {
        detail["operator"] = operator_json(op);
    }
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: step.as_str(),
        actor: match by {
            Some(op) => format!("telegram:{}", op.id),
            None => "system".to_owned(),
        },
        detail,
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

/// A message of the question the service had no id for was learned from a tap on it.
pub fn copy_found(id: &str, chat_id: i64, message_id: i32, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: "copy_found",
        actor: "system".into(),
        detail: json!({"chat_id": chat_id, "message_id": message_id}),
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

/// A request's webhook was not queued: its agent already had `backlog` undelivered
/// deliveries, the most `webhooks.max_backlog_per_agent` allows. The outcome itself is
/// stored as usual; only its delivery is dropped.
pub fn webhook_dropped(
    confirmation_id: &str,
    delivery_id: &str,
    agent: &str,
    backlog: u64,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(confirmation_id.to_owned()),
        kind: "webhook_dropped",
        actor: "system".into(),
        detail: json!({
            "delivery_id": delivery_id,
            "agent": agent,
            "backlog": backlog,
            "why": "the agent's webhook backlog is full (webhooks.max_backlog_per_agent)",
        }),
    }
}

/// `serve --demo` without an operator id made `operator`, the first person to send
/// `/start` in their private chat with the bot (`chat_id`) within `within_seconds` of
/// the start, the only approver of its route.
pub fn approver_adopted(
    route: &str,
    operator: &Operator,
    chat_id: i64,
    within_seconds: u64,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "approver_adopted",
        actor: format!("telegram:{}", operator.id),
        detail: json!({
            "route": route,
            "operator": operator_json(operator),
            "chat_id": chat_id,
            "why": format!(
                "serve --demo without an operator id: the first person to send /start in a private chat within {within_seconds} s of the start"
            ),
        }),
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
    fn an_intact_chain_verifies_and_reports_its_head() {
        let rows = chain(5);
        let v = verify(&rows).unwrap();
        assert_eq!(v.events, 5);
        assert_eq!(v.head, Head::new(5, &rows[4].hash).unwrap());
        assert_eq!(
            verify(&[]),
            Ok(Verified {
                events: 0,
                head: Head::genesis()
            })
        );
    }

    #[test]
    fn an_edited_row_is_named() {
        let mut rows = chain(5);
        rows[2].detail_text = "{\"n\":99}".into();
        assert_eq!(verify(&rows).unwrap_err().seq, 3);
    }

    #[test]
    fn a_deleted_row_is_named() {
        let mut rows = chain(5);
        rows.remove(1);
        assert_eq!(verify(&rows).unwrap_err().seq, 3);
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
        assert_eq!(verify(&rows).unwrap_err().seq, 4);
    }

    fn hash_of(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    #[test]
    fn a_head_reads_and_writes_as_seq_colon_hash() {
        let text = format!("12:{}", hash_of('a'));
        let head: Head = text.parse().unwrap();
        assert_eq!((head.seq(), head.hash()), (12, hash_of('a').as_str()));
        assert_eq!(head.to_string(), text);
        // Hex case does not matter; surrounding blanks from a paste neither.
        let upper: Head = format!(" 12:{} \n", hash_of('A')).parse().unwrap();
        assert_eq!(upper, head);
        assert_eq!(
            format!("0:{GENESIS_HASH}").parse::<Head>(),
            Ok(Head::genesis())
        );
    }

    #[test]
    fn a_bad_head_says_what_is_wrong_with_it() {
        let bad = |s: &str| s.parse::<Head>().unwrap_err();
        assert_eq!(bad("12"), BadHead::Shape);
        assert_eq!(bad(""), BadHead::Shape);
        assert_eq!(
            bad(&format!("x:{}", hash_of('a'))),
            BadHead::Seq("x".into())
        );
        assert_eq!(
            bad(&format!("-1:{}", hash_of('a'))),
            BadHead::Seq("-1".into())
        );
        assert_eq!(bad("3:abc"), BadHead::HashLength(3));
        assert_eq!(bad(&format!("3:{}", hash_of('g'))), BadHead::HashDigit('g'));
        assert_eq!(bad(&format!("0:{}", hash_of('1'))), BadHead::Genesis);
        assert!(bad("12").to_string().contains("SEQ:HASH"));
    }

    #[test]
    fn an_expected_head_catches_a_truncated_or_rewritten_trail() {
        let rows = chain(5);
        let at3 = Head::new(3, &rows[2].hash).unwrap();
        assert_eq!(check_head(&rows, &at3), Ok(()), "later events are growth");
        assert_eq!(check_head(&rows[..3], &at3), Ok(()));
        assert_eq!(check_head(&[], &Head::genesis()), Ok(()));

        let err = check_head(&rows[..2], &at3).unwrap_err();
        assert_eq!(
            err,
            HeadMismatch::Truncated {
                expected: at3.clone(),
                last: 2
            }
        );
        assert!(err.to_string().contains("truncated"), "{err}");

        let other = Head::new(3, &hash_of('b')).unwrap();
        let err = check_head(&rows, &other).unwrap_err();
        assert!(matches!(err, HeadMismatch::Rewritten { .. }));
        assert!(err.to_string().contains(&rows[2].hash), "{err}");

        let mut holed = rows.clone();
        holed.remove(2);
        assert!(matches!(
            check_head(&holed, &at3),
            Err(HeadMismatch::Missing { .. })
        ));
    }

    /// A valid chain of `(confirmation id, kind, detail)` events.
    fn trail(events: &[(&str, &str, &str)]) -> Vec<StoredRow> {
        let at = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let mut rows: Vec<StoredRow> = Vec::new();
        for (i, (id, kind, detail)) in events.iter().enumerate() {
            let seq = i as i64 + 1;
            let prev = rows
                .last()
                .map_or(GENESIS_HASH.to_owned(), |r| r.hash.clone());
            let hash = chain_hash(&prev, seq, at, Some(id), kind, "system", detail);
            rows.push(StoredRow {
                seq,
                at,
                confirmation_id: Some((*id).into()),
                kind: (*kind).into(),
                actor: "system".into(),
                detail_text: (*detail).into(),
                prev_hash: prev,
                hash,
            });
        }
        rows
    }

    fn stored(pairs: &[(&str, &str)]) -> Vec<StoredStatus> {
        pairs
            .iter()
            .map(|(id, status)| StoredStatus {
                id: (*id).into(),
                status: (*status).into(),
            })
            .collect()
    }

    fn lives() -> Vec<StoredRow> {
        trail(&[
            ("cf_a", "requested", "{}"),
            (
                "cf_a",
                "decided",
                r#"{"button":"approve","status":"confirmed"}"#,
            ),
            ("cf_b", "requested", "{}"),
            ("cf_b", "timeout", r#"{"reason":"r","status":"timeout"}"#),
            ("cf_c", "requested", "{}"),
            (
                "cf_d",
                "window_hit",
                r#"{"reason":"w","status":"confirmed"}"#,
            ),
        ])
    }

    #[test]
    fn statuses_that_match_their_decisions_pass() {
        let statuses = stored(&[
            ("cf_a", "confirmed"),
            ("cf_b", "timeout"),
            ("cf_c", "pending"),
            ("cf_d", "confirmed"),
        ]);
        assert_eq!(cross_check(&lives(), &statuses), vec![]);
        let report = check(&lives(), &statuses, None);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        assert_eq!((report.events, report.ended), (6, 3));
    }

    #[test]
    fn a_status_changed_behind_the_trails_back_is_named_with_both_statuses() {
        let statuses = stored(&[
            ("cf_a", "cancelled"),
            ("cf_b", "timeout"),
            ("cf_c", "confirmed"),
            ("cf_d", "pending"),
        ]);
        let drift = cross_check(&lives(), &statuses);
        assert_eq!(
            drift,
            vec![
                Drift::Mismatch {
                    id: "cf_a".into(),
                    stored: "cancelled".into(),
                    seq: 2,
                    kind: "decided".into(),
                    recorded: "confirmed",
                },
                Drift::Undecided {
                    id: "cf_c".into(),
                    stored: "confirmed".into(),
                },
                Drift::Mismatch {
                    id: "cf_d".into(),
                    stored: "pending".into(),
                    seq: 6,
                    kind: "window_hit".into(),
                    recorded: "confirmed",
                },
            ]
        );
        let text = drift[0].to_string();
        assert!(
            text.contains("cf_a") && text.contains("'cancelled'") && text.contains("'confirmed'"),
            "{text}"
        );
    }

    #[test]
    fn events_written_before_they_named_the_status_imply_it_by_kind() {
        let rows = trail(&[
            ("cf_w", "window_hit", r#"{"reason":"w"}"#),
            ("cf_x", "withdrawn", "{}"),
            ("cf_f", "fail_closed", r#"{"reason":"blocked"}"#),
            ("cf_t", "timeout", r#"{"reason":"late"}"#),
            (
                "cf_i",
                "answered",
                r#"{"default":true,"respondent":"system"}"#,
            ),
            ("cf_i", "timeout", r#"{"reason":"late"}"#),
        ]);
        let statuses = stored(&[
            ("cf_w", "confirmed"),
            ("cf_x", "cancelled"),
            ("cf_f", "cancelled"),
            ("cf_t", "timeout"),
            ("cf_i", "completed"),
        ]);
        assert_eq!(cross_check(&rows, &statuses), vec![]);
        let changed = stored(&[
            ("cf_w", "confirmed"),
            ("cf_x", "confirmed"),
            ("cf_f", "cancelled"),
            ("cf_t", "timeout"),
            ("cf_i", "timeout"),
        ]);
        let drift = cross_check(&rows, &changed);
        assert_eq!(drift.len(), 2, "{drift:?}");
        assert!(
            matches!(&drift[0], Drift::Mismatch { id, recorded: "cancelled", .. } if id == "cf_x")
        );
        assert!(
            matches!(&drift[1], Drift::Mismatch { id, recorded: "completed", .. } if id == "cf_i")
        );
    }

    #[test]
    fn a_double_decision_an_unreadable_one_and_a_vanished_request_are_reported() {
        let rows = trail(&[
            ("cf_a", "decided", r#"{"status":"confirmed"}"#),
            ("cf_a", "decided", r#"{"status":"cancelled"}"#),
            ("cf_u", "decided", r#"{"button":"approve"}"#),
            ("cf_gone", "timeout", r#"{"status":"timeout"}"#),
        ]);
        let drift = cross_check(
            &rows,
            &stored(&[("cf_a", "confirmed"), ("cf_u", "confirmed")]),
        );
        assert_eq!(
            drift,
            vec![
                Drift::Twice {
                    id: "cf_a".into(),
                    first: 1,
                    second: 2
                },
                Drift::Unreadable {
                    id: "cf_u".into(),
                    seq: 3,
                    kind: "decided".into()
                },
                Drift::Vanished {
                    id: "cf_gone".into(),
                    seq: 4,
                    kind: "timeout".into()
                },
            ]
        );
    }

    #[test]
    fn a_broken_chain_has_no_head_and_is_reported_first() {
        let mut rows = lives();
        rows[1].detail_text = r#"{"button":"approve","status":"cancelled"}"#.into();
        let expected = Head::new(6, &rows[5].hash).unwrap();
        let statuses = stored(&[
            ("cf_a", "cancelled"),
            ("cf_b", "timeout"),
            ("cf_d", "confirmed"),
        ]);
        let report = check(&rows, &statuses, Some(&expected));
        assert_eq!(report.head, None);
        assert!(
            matches!(&report.problems[..], [Problem::Broken(b)] if b.seq == 2),
            "{:?}",
            report.problems
        );
    }
}
