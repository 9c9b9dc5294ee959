//! A question and its one-way life: `pending`, then exactly one of `confirmed`,
//! `cancelled` or `timeout`. One record for every kind: a confirmation of a tool call,
//! and any of AI-Parrot's interactions (its `interaction`), which is why it is called a
//! question and not a confirmation.
//!
//! Everything here is pure: the time of a decision is passed in, and storage applies a
//! [`Decision`] with one conditional update, so whoever loses a race reads the stored
//! outcome instead of writing a second one.

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use std::sync::Arc;

use serde_json::Value;

use super::args_hash::ArgsHash;
use super::ids::{CallbackToken, IdempotencyKey, OwnerId, QuestionId, ToolName};
use super::interaction::{
    Answer, ConsensusMode, Interaction, InteractionType, Scope, TimeoutAction,
};
use super::mcp_call::{Annotations, ServerName};
use super::rules::RuleVerdict;
use super::run_report::{Recalled, RunReport};
use super::text::{self, Layout};

mod outcome;
mod seed;
pub use outcome::{Decision, Ending};
pub use seed::{Seed, UnaskedEnd};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Confirmed,
    Cancelled,
    Timeout,
    /// An interaction got its answer (whatever its value).
    Completed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Confirmed => "confirmed",
            Status::Cancelled => "cancelled",
            Status::Timeout => "timeout",
            Status::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "pending" => Status::Pending,
            "confirmed" => Status::Confirmed,
            "cancelled" => Status::Cancelled,
            "timeout" => Status::Timeout,
            "completed" => Status::Completed,
            _ => return None,
        })
    }

    pub fn is_terminal(self) -> bool {
        self != Status::Pending
    }
}

/// How a request reached its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Operator,
    Window,
    Timeout,
    Withdrawn,
    FailClosed,
    /// A `[[rules]]` rule (or the rules' default) allowed or denied it without asking.
    Rule,
    /// The grant check (`grant_scope`): no live grant refused it, or a live grant was
    /// enough (`require_grant_only`).
    Grant,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Operator => "operator",
            Via::Window => "window",
            Via::Timeout => "timeout",
            Via::Withdrawn => "withdrawn",
            Via::FailClosed => "fail_closed",
            Via::Rule => "rule",
            Via::Grant => "grant",
        }
    }

    pub fn parse(s: &str) -> Option<Via> {
        Some(match s {
            "operator" => Via::Operator,
            "window" => Via::Window,
            "timeout" => Via::Timeout,
            "withdrawn" => Via::Withdrawn,
            "fail_closed" => Via::FailClosed,
            "rule" => Via::Rule,
            "grant" => Via::Grant,
            _ => return None,
        })
    }
}

/// The Telegram user who decided, as Telegram identified them (never as they named
/// themselves in a message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    pub id: u64,
    pub username: Option<String>,
    pub name: String,
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.username {
            Some(u) => write!(f, "{} (@{u})", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A stored question: a confirmation of a tool call, or an interaction.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub id: QuestionId,
    /// The agent that asked; only it may read or withdraw the request.
    pub agent: String,
    pub route: String,
    pub chat_id: i64,
    pub tool: ToolName,
    pub owner_id: OwnerId,
    pub args_hash: ArgsHash,
    /// The parameters exactly as the agent sent them (JSON text), handed back verbatim
    /// when the call is allowed, so not one digit changes on the way.
    pub params_json: String,
    pub briefing: String,
    pub context: Option<String>,
    pub allow_edit: bool,
    /// The effective window an approval may open: what the agent asked for, cut to the
    /// route's `max_window_seconds`. What the question offers and discloses.
    pub window_seconds: u64,
    /// What the agent asked for when the route's cap cut it (`None`: as asked).
    pub window_requested_seconds: Option<u64>,
    /// The operator chose "Approve once": confirmed, and no window opens.
    pub approved_once: bool,
    /// An interaction that carries a tool call (`tool`, `owner_id`, `params_json`,
    /// `args_hash` are the call's), shown like a confirmation.
    pub has_call: bool,
    pub idempotency_key: Option<IdempotencyKey>,
    pub callback_token: CallbackToken,
    /// Where the outcome is POSTed (signed) when the request ends; checked against the
    /// agent's allow-list before it is stored.
    pub callback_url: Option<String>,
    /// Set once Telegram has accepted the message; `None` while delivery is in flight.
    pub message_id: Option<i32>,
    pub status: Status,
    pub via: Option<Via>,
    pub reason: String,
    pub decided_by: Option<Operator>,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    pub decided_at: Option<OffsetDateTime>,
    /// For an interaction: what the agent asked (`None` for a confirmation).
    pub interaction: Option<Arc<Interaction>>,
    /// The settled value of a completed interaction.
    pub result: Option<Value>,
    /// The `timeout_action` a timeout handed back to the agent (`escalate`, `retry`).
    pub timeout_action: Option<TimeoutAction>,
    /// Every answer so far, oldest first (read with the record).
    pub answers: Vec<Answer>,
    /// Further messages of the question (one per further private chat).
    pub copies: Vec<Copy>,
    /// Messages of the question the service learned of only from a tap on them: posted
    /// before a crash (or a lost connection) kept their id from being stored.
    pub strays: Vec<Stray>,
    /// What the operator who denied it replied when asked why ("Deny with reason").
    pub denial_reason: Option<String>,
    /// The steps a pending question went through: reminders, escalation, extensions.
    pub progress: Progress,
    /// What `[[rules]]` decided on the call, when rules are in force (`None` without
    /// rules, and for an interaction without a call).
    pub rule: Option<RuleVerdict>,
    /// The route's `expect_outcome_seconds` when the question was asked: once confirmed,
    /// a call with no report by then has an `unknown` run.
    pub expect_outcome_seconds: Option<u64>,
    /// What the agent reported of running the confirmed call (or `unknown`).
    pub run_report: Option<RunReport>,
    /// The earlier run of the same agent's same tool the approver is told of (it failed,
    /// or was never reported), as found when the question was asked.
    pub recalled: Option<Recalled>,
    /// The tool's argument schema the agent sent (`args_schema`, compact JSON, checked
    /// as a JSON Schema when it came in): with `allow_edit`, the console offers a form
    /// built from it and checks an operator's edit against it.
    pub args_schema: Option<String>,
    /// Set when an operator approved the call with changes: what the agent asked for.
    /// `params_json` and `args_hash` are then the edited call's, which is what runs and
    /// what a window covers.
    pub edited: Option<Edited>,
    /// The MCP server (upstream) the call goes to, when a gateway asked (issue 48): shown,
    /// matched by the rules' `servers`, and part of the window's key.
    pub server: Option<ServerName>,
    /// The tool's MCP annotations as the gateway sent them: shown, and matched by the
    /// rules' `annotations`.
    pub annotations: Option<Annotations>,
}

/// The call as the agent asked for it, before an operator edited it.
#[derive(Debug, Clone, PartialEq)]
pub struct Edited {
    pub original_params_json: String,
    pub original_args_hash: ArgsHash,
}

/// An operator's edit, applied with the decision that approves it (one write: the call
/// and its approval change together or not at all).
#[derive(Debug, Clone, PartialEq)]
pub struct EditApplied {
    pub params_json: String,
    pub args_hash: ArgsHash,
}

/// The steps of a question between its delivery and its outcome, stored so a restart
/// neither repeats nor skips them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// How many times an approver moved the deadline ("+N min").
    pub extensions: u32,
    /// How many of the route's reminder points have passed (each sent once).
    pub reminders_sent: u32,
    /// When the question was also posted to the route's escalation route.
    pub escalated_at: Option<OffsetDateTime>,
    /// How many times an approver tapped "Deny with reason".
    pub reasons_requested: u32,
    /// How many of the route's SLA marks its card shows: 1 "at risk", 2 "overdue"
    /// ([`crate::sla`]).
    pub sla_marks: u32,
}

/// A message carrying the question that the service did not know it had sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Stray {
    pub chat_id: i64,
    pub message_id: i32,
    pub outcome_shown: bool,
}

/// A further message carrying the same question, in another chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Copy {
    /// The `[people]` name the copy was sent to.
    pub recipient: String,
    pub chat_id: i64,
    pub message_id: Option<i32>,
    pub outcome_shown: bool,
}

impl Question {
    /// What kind of answer the question wants: a confirmation is an approval, or a form
    /// (that falls back to approve/cancel) when the agent allows edits.
    pub fn kind(&self) -> InteractionType {
        match &self.interaction {
            Some(i) => i.kind,
            None if self.allow_edit => InteractionType::Form,
            None => InteractionType::Approval,
        }
    }

    /// The status the API reports. Interactions use AI-Parrot's names (`delivered` once a
    /// message is out, `partial` once someone answered); confirmations keep theirs.
    pub fn public_status(&self) -> &'static str {
        if self.interaction.is_none() || self.is_terminal() {
            return self.status.as_str();
        }
        if !self.answers.is_empty() {
            "partial"
        } else if self.messages().any(|(_, m)| m.is_some()) {
            "delivered"
        } else {
            "pending"
        }
    }

    /// The id AI-Parrot knows the question by: its own `interaction_id`, or the record id
    /// of a confirmation.
    pub fn interaction_id(&self) -> &str {
        match &self.interaction {
            Some(i) => &i.interaction_id,
            None => self.id.as_str(),
        }
    }

    /// The `HumanResponse` of each answer so far.
    pub fn human_responses(&self) -> Vec<Value> {
        self.answers
            .iter()
            .map(|a| {
                super::interaction::human_response(
                    self.interaction_id(),
                    self.kind(),
                    a,
                    self.answer_scope(a),
                )
            })
            .collect()
    }

    /// What `GET /v1/events` streams when the question's status changes.
    pub fn status_event(&self) -> Value {
        serde_json::json!({
            "id": self.id.as_str(),
            "interaction_id": self.interaction.as_ref().map(|i| i.interaction_id.as_str()),
            "status": self.public_status(),
            "reason": self.reason,
            "denial_reason": self.denial_reason,
            "result": self.result,
            "timeout_action": self.timeout_action.map(TimeoutAction::as_str),
            "expires_at": rfc3339(self.expires_at),
        })
    }

    /// Whether the agent may report running this call: it was confirmed (by a person, a
    /// window, a rule or a grant), or it is an approval carrying a call (AI-Parrot's
    /// guard) that was answered yes. Nothing else ran.
    pub fn takes_report(&self) -> bool {
        match self.status {
            Status::Confirmed => true,
            Status::Completed => {
                self.has_call
                    && self.kind() == InteractionType::Approval
                    && self.result == Some(Value::Bool(true))
            }
            _ => false,
        }
    }

    /// When the approved call is owed its report: its decision plus the route's
    /// `expect_outcome_seconds` (`None` when it was not approved, or none is expected).
    pub fn report_due_at(&self) -> Option<OffsetDateTime> {
        let wait = self.expect_outcome_seconds?;
        if !self.takes_report() {
            return None;
        }
        let from = self.decided_at.unwrap_or(self.created_at);
        Some(from + Duration::from_secs(wait))
    }

    /// What `GET /v1/events` streams when the call's run is reported (or found
    /// missing): its status event with the step named `outcome` (as a pending question's
    /// steps are) and the run.
    pub fn run_event(&self) -> Value {
        let mut event = self.status_event();
        event["step"] = Value::from("outcome");
        event["outcome"] = self
            .run_report
            .as_ref()
            .map_or(Value::Null, RunReport::to_json);
        event
    }

    /// What `GET /v1/events` streams when a pending question takes a step (`delivered`,
    /// `reminded`, `escalated`, `extended`, `reason_requested`): its status event with
    /// the step named, and the deadline as it now is.
    pub fn step_event(&self, step: Step) -> Value {
        let mut event = self.status_event();
        event["step"] = Value::from(step.as_str());
        event
    }

    /// Whether an agent should leave this call alone: an operator refused it, so asking
    /// again with the same call would only ask the same people the same question. (A
    /// timeout, an unreachable chat or a withdrawal say nothing about the call itself.)
    pub fn do_not_retry(&self) -> bool {
        match (self.status, self.via) {
            (Status::Cancelled, Some(Via::Operator | Via::Rule | Via::Grant)) => true,
            (Status::Completed, Some(Via::Rule)) => self.result != Some(Value::Bool(true)),
            (Status::Completed, Some(Via::Operator)) => {
                self.denial_reason.is_some()
                    || (self.kind() == InteractionType::Approval
                        && self.result == Some(Value::Bool(false)))
            }
            _ => false,
        }
    }

    /// What an approving answer to an interaction's call allowed (see [`Scope`]).
    fn answer_scope(&self, a: &Answer) -> Option<Scope> {
        if !self.has_call
            || self.kind() != InteractionType::Approval
            || a.value != Value::Bool(true)
        {
            return None;
        }
        Some(if a.once || self.window_seconds == 0 {
            Scope::Once
        } else {
            Scope::Window(self.window_seconds)
        })
    }

    /// What `GET /v1/events` streams when someone answers.
    pub fn response_event(&self, answer: &Answer) -> Value {
        serde_json::json!({
            "id": self.id.as_str(),
            "interaction_id": self.interaction.as_ref().map(|i| i.interaction_id.as_str()),
            "response": super::interaction::human_response(
                self.interaction_id(),
                self.kind(),
                answer,
                self.answer_scope(answer),
            ),
        })
    }

    /// Every (chat, message) the question was posted as; `None` while in flight.
    pub fn messages(&self) -> impl Iterator<Item = (i64, Option<i32>)> + '_ {
        std::iter::once((self.chat_id, self.message_id))
            .chain(self.copies.iter().map(|c| (c.chat_id, c.message_id)))
    }

    /// The argument hash of the call the agent asked for (before any edit): what an
    /// idempotent repeat of its request must match.
    pub fn asked_args_hash(&self) -> &ArgsHash {
        match &self.edited {
            Some(e) => &e.original_args_hash,
            None => &self.args_hash,
        }
    }

    /// What an operator's edit changed, parameter by parameter (the asked call against
    /// the edited one); `None` unless the call was edited.
    pub fn edit_changes(&self) -> Option<Vec<super::edit::Change>> {
        let e = self.edited.as_ref()?;
        let before = serde_json::from_str(&e.original_params_json).unwrap_or(Value::Null);
        let after = serde_json::from_str(&self.params_json).unwrap_or(Value::Null);
        Some(super::edit::changes(&before, &after))
    }

    /// Whether an operator may edit the call before approving it (in the console): the
    /// agent allows edits and sent the tool's schema, and one answer settles the question
    /// (an edit is a decision, never one vote among several).
    pub fn editable(&self) -> bool {
        self.kind() == InteractionType::Form
            && self.args_schema.is_some()
            && match &self.interaction {
                None => true,
                Some(i) => self.has_call && i.consensus == ConsensusMode::FirstResponse,
            }
    }

    /// The values a `form` question is approved with: the interaction's current values,
    /// or a confirmation's own parameters.
    pub fn form_values(&self) -> Value {
        match &self.interaction {
            Some(i) => Value::Object(i.form_values.clone()),
            None => serde_json::from_str(&self.params_json).unwrap_or(Value::Null),
        }
    }

    pub fn allowed(&self) -> bool {
        self.status == Status::Confirmed
    }

    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// The window key an identical later call would match.
    pub fn window_key(&self) -> WindowKey {
        WindowKey {
            agent: self.agent.clone(),
            route: self.route.clone(),
            owner_id: self.owner_id.clone(),
            tool: self.tool.clone(),
            args_hash: self.args_hash.clone(),
            server: self.server.clone(),
        }
    }

    /// Until when this request, once confirmed, lets identical calls through: only when
    /// an operator approved it for its window (not "once"). An interaction's call opens
    /// no window here: its agent (AI-Parrot's guard) keeps its own.
    pub fn window_until(&self) -> Option<OffsetDateTime> {
        match (self.status, self.via, self.decided_at) {
            (Status::Confirmed, Some(Via::Operator), Some(at))
                if self.window_seconds > 0 && !self.approved_once =>
            {
                Some(at + Duration::from_secs(self.window_seconds))
            }
            _ => None,
        }
    }

    /// The window an approval granted, in seconds: 0 while undecided, after "Approve
    /// once", or for a request without a window.
    pub fn window_granted_seconds(&self) -> u64 {
        if self.approved_once {
            0
        } else {
            self.window_seconds
        }
    }

    /// What an operator's approval allowed: `once`, or the window. `None` unless an
    /// operator approved (a confirmation, or an interaction's call; for an interaction
    /// the first approving answer is the one that settled it).
    pub fn approved_scope(&self) -> Option<Scope> {
        match (&self.interaction, self.status, self.via) {
            (None, Status::Confirmed, Some(Via::Operator)) => {
                Some(if self.approved_once || self.window_seconds == 0 {
                    Scope::Once
                } else {
                    Scope::Window(self.window_seconds)
                })
            }
            (Some(_), Status::Completed, Some(Via::Operator)) => {
                self.answers.iter().find_map(|a| self.answer_scope(a))
            }
            _ => None,
        }
    }
}

/// The reason of a pending confirmation.
pub const PENDING_REASON: &str = "waiting for an operator's decision";

/// The reason of a pending interaction.
pub const ANSWER_PENDING_REASON: &str = "waiting for an answer";

/// A step a pending question takes, as the agent's event stream names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Delivered,
    Reminded,
    Escalated,
    Extended,
    ReasonRequested,
    /// Three quarters of the route's SLA passed.
    SlaAtRisk,
    /// The route's SLA passed.
    SlaOverdue,
    /// Every approver of the route is away: a copy went to a delegate.
    Delegated,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Delivered => "delivered",
            Step::Reminded => "reminded",
            Step::Escalated => "escalated",
            Step::Extended => "extended",
            Step::ReasonRequested => "reason_requested",
            Step::SlaAtRisk => "sla_at_risk",
            Step::SlaOverdue => "sla_overdue",
            Step::Delegated => "delegated",
        }
    }
}

/// The most characters of an operator's reason kept: a sentence or two is what an agent
/// can use, and the outcome line must still fit the message.
pub const MAX_REASON_CHARS: usize = 500;

/// An operator's reason as stored: trimmed, with every invisible character (bidi and
/// other format controls, control characters such as ESC and newlines, separators,
/// private use) as the visible escape the operator saw in Telegram (`\u202e`; see
/// [`text::visible`]), at most [`MAX_REASON_CHARS`] characters (cut with an ellipsis,
/// never inside an escape); `None` when nothing is left. What the agent is given is then
/// what the operator saw, whatever was pasted into the reply.
pub fn reason_text(raw: &str) -> Option<String> {
    let t = raw.trim();
    if t.is_empty() {
        return None;
    }
    Some(text::visible_within(t, Layout::Line, MAX_REASON_CHARS))
}

/// The key of a confirmation window: identical calls are the same agent, owner, tool and
/// argument hash, asked on the same route (whose approvers opened the window: another
/// route may have other approvers, so a window never crosses to it), to the same MCP
/// server or to none (a tool of one server is not the same-named tool of another).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WindowKey {
    pub agent: String,
    pub route: String,
    pub owner_id: OwnerId,
    pub tool: ToolName,
    pub args_hash: ArgsHash,
    pub server: Option<ServerName>,
}

/// A live confirmation window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub key: WindowKey,
    pub expires_at: OffsetDateTime,
    /// The operator-confirmed request that opened it.
    pub opened_by: QuestionId,
}

impl Window {
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        now < self.expires_at
    }

    pub fn reason(&self) -> String {
        format!(
            "confirmed by the window opened by {} (until {})",
            self.opened_by,
            rfc3339(self.expires_at)
        )
    }
}

/// "10 min", "2 h", "1 day 6 h": a window's length as an operator reads it.
pub fn window_duration(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
        seconds % 60,
    );
    let mut parts = Vec::new();
    if d > 0 {
        parts.push(format!("{d} day{}", if d == 1 { "" } else { "s" }));
    }
    if h > 0 {
        parts.push(format!("{h} h"));
    }
    if m > 0 {
        parts.push(format!("{m} min"));
    }
    if s > 0 || parts.is_empty() {
        parts.push(format!("{s} s"));
    }
    parts.join(" ")
}

/// "2 min", "90 s", "1.5 s": short and exact enough for a reason text.
pub fn human_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        let secs = d.as_secs();
        if secs >= 120 && secs.is_multiple_of(60) {
            format!("{} min", secs / 60)
        } else {
            format!("{secs} s")
        }
    } else {
        let text = format!("{:.3}", d.as_secs_f64());
        format!("{} s", text.trim_end_matches('0').trim_end_matches('.'))
    }
}

/// A moment as operators read it in Telegram, `2026-12-05 12:59:11 UTC`: the one format
/// of every message, command answer and button toast, so a deadline reads the same
/// wherever it is shown.
pub fn operator_time(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let fmt =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    t.format(&fmt)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// RFC 3339 in UTC with millisecond precision, the one time format of the API.
pub fn rfc3339(t: OffsetDateTime) -> String {
    let t = t.to_offset(time::UtcOffset::UTC);
    let fmt = time::macros::format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
    );
    t.format(&fmt)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

#[cfg(test)]
mod tests;
