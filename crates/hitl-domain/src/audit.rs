//! The audit trail's events and its hash chain.
//!
//! Every event row stores `hash = sha256(prev_hash || content)`, where `content` is an
//! unambiguous JSON array of the row's own fields (its sequence number included). The
//! first row's `prev_hash` is 64 zeros. Editing a row changes its hash; deleting or
//! reordering rows breaks the link to the next one; so [`verify`] names the first row
//! at which the stored chain stops matching. Events never carry parameter values or
//! secrets: ids, hashes, who and why.

//!
//! This file holds the events, one function for each kind (its `kind` literal here, where
//! `tests/docs.rs` reads every kind to hold the Audit trail page to it); the chain and its
//! head are `audit/chain.rs`, the checks of `audit verify` over a whole trail
//! `audit/verify.rs`.

mod chain;
mod verify;

pub use chain::{
    BadHead, Broken, GENESIS_HASH, Head, HeadMismatch, StoredRow, Verified, chain_hash, check_head,
    verify,
};
pub use verify::{DECISION_KINDS, Drift, Problem, Report, StoredStatus, check, cross_check};

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::away::Absence;
use super::grant::{Grant, GrantSource};
use super::interaction::Answer;
use super::outage::Outage;
use super::question::{Operator, Question, Status, Step, Via, Window, rfc3339};
use super::rules::{ChatRuleRecord, ChatRuleState, RuleVerdict};
use super::run_report::RunReport;

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

fn agent_actor(r: &Question) -> String {
    format!("agent:{}", r.agent)
}

fn operator_json(op: &Operator) -> Value {
    json!({"id": op.id, "username": op.username, "name": op.name})
}

/// A request was stored and is about to be delivered.
pub fn requested(r: &Question) -> NewEvent {
    with_origin(
        r,
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
                "rules": r.rule.as_ref().map(verdict_json),
            }),
        },
    )
}

/// `event` with the MCP server and the annotations of a call that came through a
/// gateway (issue 48), each only when the call carries it: the trail says which server
/// a call went to, and every other call's events read as before.
fn with_origin(r: &Question, mut event: NewEvent) -> NewEvent {
    if let Some(server) = &r.server {
        event.detail["server"] = json!(server.as_str());
    }
    if let Some(annotations) = &r.annotations {
        event.detail["annotations"] = annotations.to_json();
    }
    event
}

/// A rules' verdict as the trail keeps it: the effect, the rule, the fingerprint of the
/// set in force and whether it was carried out (never the rule's parameters: the rule
/// set itself is the configuration's, and the fingerprint names it).
fn verdict_json(v: &RuleVerdict) -> Value {
    json!({
        "effect": v.effect,
        "rule": v.rule,
        "rules_hash": v.rules_hash,
        "enforced": v.enforced,
        "past_rate": v.past_rate,
    })
}

/// A request that ended the moment it was stored: a window hit, or a rule's `allow` or
/// `deny`.
pub fn at_once(r: &Question) -> NewEvent {
    let event = match (r.via, &r.rule) {
        (Some(Via::Rule), Some(verdict)) => rule_decided(r, verdict),
        (Some(Via::Grant), _) => grant_decided(r),
        _ => window_hit(r),
    };
    with_origin(r, event)
}

/// The grant check decided a call without asking: no live grant (`cancelled`), or a live
/// grant was enough (`confirmed`); `reason` names the scope, and the grant with the scope
/// that covered the call. `rules` is the rules' verdict, judged first (an `ask`, an
/// `allow` the grant came before, or in a dry run what they would have done).
pub fn grant_decided(r: &Question) -> NewEvent {
    NewEvent {
        at: r.created_at,
        confirmation_id: Some(r.id.to_string()),
        kind: "grant_decided",
        actor: "system".into(),
        detail: json!({
            "tool": r.tool.as_str(),
            "owner_id": r.owner_id.as_str(),
            "args_hash": r.args_hash.as_str(),
            "status": r.status.as_str(),
            "reason": r.reason,
            "rules": r.rule.as_ref().map(verdict_json),
        }),
    }
}

/// A rule (or the rules' default) allowed or denied a call without asking.
pub fn rule_decided(r: &Question, verdict: &RuleVerdict) -> NewEvent {
    NewEvent {
        at: r.created_at,
        confirmation_id: Some(r.id.to_string()),
        kind: "rule_decided",
        actor: "system".into(),
        detail: json!({
            "tool": r.tool.as_str(),
            "owner_id": r.owner_id.as_str(),
            "args_hash": r.args_hash.as_str(),
            "status": r.status.as_str(),
            "reason": r.reason,
            "rules": verdict_json(verdict),
        }),
    }
}

/// The agent reported what happened when it ran a confirmed call (issue 36), or
/// replaced the service's `unknown` with a late report.
pub fn outcome_reported(r: &Question, run: &RunReport, replaced: Option<&RunReport>) -> NewEvent {
    NewEvent {
        at: run.reported_at,
        confirmation_id: Some(r.id.to_string()),
        kind: "outcome_reported",
        actor: agent_actor(r),
        detail: json!({
            "tool": r.tool.as_str(),
            "status": run.status.as_str(),
            "summary": run.summary,
            "error": run.error,
            "duration_ms": run.duration_ms,
            "replaced": replaced.map(|e| e.status.as_str()),
        }),
    }
}

/// A confirmed call's report did not come within the route's `expect_outcome_seconds`:
/// its run is `unknown` (a late report may still replace it).
pub fn outcome_missing(r: &Question, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(r.id.to_string()),
        kind: "outcome_missing",
        actor: "system".into(),
        detail: json!({
            "tool": r.tool.as_str(),
            "status": "unknown",
            "expect_outcome_seconds": r.expect_outcome_seconds,
        }),
    }
}

/// A grant was stored (AI-Parrot's `GrantGuard`): who it lets through, for what, until
/// when, and the approval it came from.
pub fn grant_created(g: &Grant) -> NewEvent {
    let source = match &g.source {
        GrantSource::Asked { confirmation_id } => {
            json!({"confirmation_id": confirmation_id.as_str()})
        }
        GrantSource::Interaction { interaction_id } => json!({"interaction_id": interaction_id}),
    };
    NewEvent {
        at: g.created_at,
        confirmation_id: match &g.source {
            GrantSource::Asked { confirmation_id } => Some(confirmation_id.to_string()),
            GrantSource::Interaction { .. } => None,
        },
        kind: "grant_created",
        actor: format!("agent:{}", g.agent),
        detail: json!({
            "grant_id": g.grant_id.as_str(),
            "owner_id": g.owner_id.as_str(),
            "scope": g.scope.as_str(),
            "route": g.route,
            "granted_by": operator_json(&g.granted_by),
            "expires_at": rfc3339(g.expires_at),
            "source": source,
        }),
    }
}

/// A grant was revoked, by an operator or by its agent, before it expired.
pub fn grant_revoked(g: &Grant, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "grant_revoked",
        actor: match &g.revoked_by {
            Some(op) => format!("telegram:{}", op.id),
            None => format!("agent:{}", g.agent),
        },
        detail: json!({
            "grant_id": g.grant_id.as_str(),
            "owner_id": g.owner_id.as_str(),
            "scope": g.scope.as_str(),
            "revoked_by": g.revoked_by.as_ref().map(operator_json),
        }),
    }
}

/// Which MCP server's tools an event of [`tools_pinned`], [`tool_quarantined`] or
/// [`tool_allowed`] is about: the agent whose gateway listed them, and its server.
pub struct PinPlace<'a> {
    pub agent: &'a str,
    pub server: &'a str,
    pub route: &'a str,
}

/// An MCP server's first listing was recorded as allowed (`pin: "first"`): each tool's
/// name and definition hash (never the definitions themselves: the pins table keeps
/// them).
pub fn tools_pinned(at: OffsetDateTime, place: &PinPlace<'_>, tools: &[(&str, &str)]) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "tools_pinned",
        actor: format!("agent:{}", place.agent),
        detail: json!({
            "server": place.server,
            "route": place.route,
            "tools": tools.iter().map(|(name, hash)| json!({"name": name, "definition_hash": hash})).collect::<Vec<_>>(),
        }),
    }
}

/// A tool definition an approver has not allowed was listed and is held until one does:
/// `why` is `first_listing` (a strict first listing), `new` or `changed`.
pub fn tool_quarantined(
    at: OffsetDateTime,
    place: &PinPlace<'_>,
    tool: &str,
    hash: &str,
    allowed_hash: Option<&str>,
    why: &str,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "tool_quarantined",
        actor: format!("agent:{}", place.agent),
        detail: json!({
            "server": place.server,
            "route": place.route,
            "tool": tool,
            "definition_hash": hash,
            "allowed_hash": allowed_hash,
            "why": why,
        }),
    }
}

/// An approver allowed a quarantined tool definition (its Allow button): from then on it
/// is the tool's pin. `replaced` is the hash of the definition allowed before, if any.
pub fn tool_allowed(
    at: OffsetDateTime,
    place: &PinPlace<'_>,
    tool: &str,
    hash: &str,
    replaced: Option<&str>,
    by: &Operator,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "tool_allowed",
        actor: format!("telegram:{}", by.id),
        detail: json!({
            "server": place.server,
            "agent": place.agent,
            "route": place.route,
            "tool": tool,
            "definition_hash": hash,
            "replaced_hash": replaced,
            "operator": operator_json(by),
        }),
    }
}

/// A person set themselves away (`/away`), until when and with which delegate.
pub fn away_set(a: &Absence, by: &Operator, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "away_set",
        actor: format!("telegram:{}", by.id),
        detail: json!({
            "person": a.person,
            "until": rfc3339(a.until),
            "delegate": a.delegate.as_ref().map(|d| json!({"id": d.id, "name": d.name})),
            "operator": operator_json(by),
        }),
    }
}

/// A person's absence ended early (`/back`).
pub fn away_ended(person: u64, by: &Operator, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "away_ended",
        actor: format!("telegram:{}", by.id),
        detail: json!({"person": person, "operator": operator_json(by)}),
    }
}

/// Telegram was out of reach for longer than the patience (issue 50): the outage, the
/// error its last probe met and how many questions waited (announced to the fallback
/// URL by the alert queued with it).
pub fn telegram_outage_started(
    outage: &Outage,
    error: &str,
    waiting: u64,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "telegram_outage_started",
        actor: "system".into(),
        detail: json!({
            "outage_id": outage.id.as_str(),
            "since": rfc3339(outage.since),
            "error": error,
            "waiting": waiting,
        }),
    }
}

/// Telegram answered again after an outage: how long it lasted and how many questions
/// still waited.
pub fn telegram_outage_ended(outage: &Outage, waiting: u64, at: OffsetDateTime) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "telegram_outage_ended",
        actor: "system".into(),
        detail: json!({
            "outage_id": outage.id.as_str(),
            "since": rfc3339(outage.since),
            "lasted_seconds": (at - outage.since).whole_seconds().max(0),
            "waiting": waiting,
        }),
    }
}

/// A rule of a route's chat moved (issue 50): accepted as a dry run or enforced (from a
/// proposal), enforced (from a dry run), or removed; with the rule as it reads.
pub fn chat_rule_moved(
    at: OffsetDateTime,
    before: &ChatRuleRecord,
    to: ChatRuleState,
    by: &Operator,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "chat_rule_moved",
        actor: format!("telegram:{}", by.id),
        detail: json!({
            "route": before.route,
            "chat_rule": before.id,
            "rule_name": before.rule.name,
            "from": before.state.as_str(),
            "to": to.as_str(),
            "rule": before.rule,
            "operator": operator_json(by),
        }),
    }
}

/// A replica started serving: the release and the commit it runs (CHANGELOG.md names
/// the release), and the rules in force, so each later event can be matched to the code
/// and the rules that wrote it. One per start, per replica.
pub fn service_started(
    at: OffsetDateTime,
    version: &str,
    commit: &str,
    rules_hash: &str,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "service_started",
        actor: "system".into(),
        detail: json!({
            "version": version,
            "commit": commit,
            "rules_hash": rules_hash,
        }),
    }
}

/// The rules in force changed (a SIGHUP reloaded the configuration file): from then
/// on, decisions name `rules_hash`.
pub fn rules_loaded(
    at: OffsetDateTime,
    rules_hash: &str,
    previous: &str,
    rules: usize,
    mode: &str,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: "rules_loaded",
        actor: "system".into(),
        detail: json!({
            "rules_hash": rules_hash,
            "previous_rules_hash": previous,
            "rules": rules,
            "mode": mode,
        }),
    }
}

/// A request was confirmed at once by a live window.
pub fn window_hit(r: &Question) -> NewEvent {
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
pub fn decided(r: &Question) -> NewEvent {
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
    if let (Some(e), Some(changes)) = (&r.edited, r.edit_changes()) {
        // Approved with changes: the hashes of both calls and the names of the changed
        // parameters (never their values: the trail keeps hashes, as for the request).
        let changed: Vec<String> = changes.into_iter().map(|c| c.key).collect();
        detail["edited"] = json!({
            "original_args_hash": e.original_args_hash.as_str(),
            "args_hash": r.args_hash.as_str(),
            "changed": changed,
        });
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

/// Whether an event of `kind` leaves the question's messages to edit: its outcome, or
/// (once it ended) the run of the call reported or found missing.
pub fn edits_messages(kind: &str) -> bool {
    ends_question(kind) || matches!(kind, "outcome_reported" | "outcome_missing")
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

/// An approver decided from the Mini App console: the action, the args hash of the call
/// the page showed, whether the call was edited, and whether this answer counted (it is
/// written with the answer, in its transaction, when it did; alone when another answer
/// came first and it did not).
pub fn console_decision(
    id: &str,
    by: &Operator,
    action: &str,
    args_hash: &str,
    edited: bool,
    counted: bool,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: Some(id.to_owned()),
        kind: "console_decision",
        actor: format!("telegram:{}", by.id),
        detail: json!({"action": action, "args_hash": args_hash, "counted": counted,
                       "edited": edited}),
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

/// A Telegram outage's alert reached the fallback URL (`error` none) or was given up.
pub fn outage_alert(
    outage_id: &str,
    delivery_id: &str,
    alert: &str,
    error: Option<&str>,
    at: OffsetDateTime,
) -> NewEvent {
    NewEvent {
        at,
        confirmation_id: None,
        kind: if error.is_none() {
            "outage_alert_delivered"
        } else {
            "outage_alert_given_up"
        },
        actor: "system".into(),
        detail: json!({
            "outage_id": outage_id,
            "delivery_id": delivery_id,
            "alert": alert,
            "error": error,
        }),
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
mod tests;
