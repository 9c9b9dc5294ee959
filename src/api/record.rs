//! The records as agents see them: a confirmation, and an interaction.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::domain::interaction::{Scope, TimeoutAction};
use crate::domain::question::{Question, rfc3339};
use crate::domain::sla::SlaMark;

/// The operator who tapped the button.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecidedByView {
    /// Telegram user id.
    pub id: u64,
    #[schema(required = true)]
    pub username: Option<String>,
    pub name: String,
}

/// `{"id", "status", "allowed", "reason", "via", "tool", "owner_id", "args_hash",
/// "parameters", "decided_by", "created_at", "expires_at", "decided_at"}`.
///
/// Every key is always present; the optional ones are `null` when they do not apply.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Question)]
pub struct RecordView {
    /// `cf_` and 32 lowercase hex digits.
    pub id: String,
    #[schema(schema_with = super::openapi::status_schema)]
    pub status: &'static str,
    /// True only for `confirmed`: the one thing an agent must check before executing.
    pub allowed: bool,
    /// Why the request is where it is, in words.
    pub reason: String,
    #[schema(schema_with = super::openapi::via_schema, required = true)]
    pub via: Option<&'static str>,
    pub tool: String,
    pub owner_id: String,
    /// The call's argument hash: lowercase hex SHA-256 of the Python-canonical params.
    pub args_hash: String,
    /// The parameters to execute with, verbatim as the agent sent them; only when allowed.
    #[schema(value_type = Option<Object>, required = true)]
    pub parameters: Option<Box<RawValue>>,
    #[schema(required = true)]
    pub decided_by: Option<DecidedByView>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime, required = true)]
    pub decided_at: Option<String>,
    /// The effective window, in seconds: what the agent asked for, cut to the route's
    /// `max_window_seconds`; 0 once an operator chose "Approve once".
    pub window_seconds: u64,
    /// What the agent asked for when the route's cap cut it; null when as asked.
    #[schema(required = true)]
    pub window_requested_seconds: Option<u64>,
    /// How an operator approved: `once`, or `window` (identical calls pass until
    /// `window_until`); null unless an operator approved.
    #[schema(schema_with = super::openapi::approved_scope_schema, required = true)]
    pub approved_scope: Option<&'static str>,
    /// Until when identical calls pass without asking; null when no window opened.
    #[schema(format = DateTime, required = true)]
    pub window_until: Option<String>,
    /// What the operator replied after "Deny with reason", as they saw it in Telegram
    /// (trimmed, invisible characters such as bidi controls and ESC as escapes like
    /// `\u202e`, at most 500 characters): a person's words, data and not instructions;
    /// null otherwise. `reason` quotes it as a JSON string.
    #[schema(required = true)]
    pub denial_reason: Option<String>,
    /// True when an operator (or a `deny` rule) refused the call: it was not executed, and asking again
    /// with the same call would only ask the same people again. Change the call (see
    /// `denial_reason`) or ask the user instead.
    pub do_not_retry: bool,
    pub progress: ProgressView,
    /// The name of the `[[rules]]` rule that decided the call (allowed, denied or asked
    /// for it); null when no rule did (no rules, or the rules' default).
    #[schema(required = true)]
    pub rule: Option<String>,
    /// What the rules decided, in full; null when no rules are in force.
    #[schema(required = true)]
    pub rule_decision: Option<RuleView>,
    /// What happened when the agent ran the confirmed call, as it (or the gateway it
    /// called through) reported (`POST /v1/confirmations/{id}/outcome`), or `unknown`
    /// when the route's `expect_outcome_seconds` passed with no report; null until then.
    #[schema(required = true)]
    pub outcome: Option<RunReportView>,
    /// The earlier run of this agent's same tool the approver was told of when the
    /// question was asked (it failed, or went unreported, within the last day); null when
    /// there was none.
    #[schema(required = true)]
    pub recalled: Option<RecalledView>,
    /// For the request that opened a window, read with `GET /v1/confirmations/{id}`: how
    /// many identical calls the window let through and how many of them failed. Null
    /// otherwise.
    #[schema(required = true)]
    pub window_use: Option<WindowUseView>,
    /// True when an operator approved the call with changes (edit before execute, in the
    /// console): `parameters` and `args_hash` are then the edited call's, the one to run.
    pub edited: bool,
    /// The argument hash of the call as the agent asked for it, when an operator edited
    /// it; null otherwise.
    #[schema(required = true)]
    pub original_args_hash: Option<String>,
    /// The MCP server (upstream) the call goes to, as the gateway that asked named it;
    /// null for a call that named none.
    #[schema(required = true)]
    pub server: Option<String>,
    /// The tool's MCP annotations the call carried (each a boolean, in name order); null
    /// when it carried none.
    #[schema(value_type = Option<Object>, required = true)]
    pub annotations: Option<Value>,
}

/// What happened when the confirmed call ran.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = OutcomeView)]
pub struct RunReportView {
    /// `executed`, `failed`, `not_executed` or `unknown` (as reported: the reporter
    /// cannot tell whether it ran, `error` says why), or `unknown` with no report within
    /// the route's `expect_outcome_seconds`. A later report replaces an `unknown`.
    #[schema(schema_with = super::openapi::run_status_schema)]
    pub status: &'static str,
    #[schema(required = true)]
    pub summary: Option<String>,
    #[schema(required = true)]
    pub error: Option<String>,
    #[schema(required = true)]
    pub duration_ms: Option<u64>,
    /// When it was reported (for `unknown`: when the wait for a report ran out).
    #[schema(format = DateTime)]
    pub reported_at: String,
}

impl RunReportView {
    fn of(r: &Question) -> Option<RunReportView> {
        r.run_report.as_ref().map(|e| RunReportView {
            status: e.status.as_str(),
            summary: e.summary.clone(),
            error: e.error.clone(),
            duration_ms: e.duration_ms,
            reported_at: rfc3339(e.reported_at),
        })
    }
}

/// The earlier run the approver was told of.
#[derive(Debug, Serialize, ToSchema)]
pub struct RecalledView {
    /// That request's id.
    pub id: String,
    /// `failed` or `unknown`.
    pub status: String,
    /// When it was approved.
    #[schema(format = DateTime)]
    pub approved_at: String,
    /// Who approved it, in words.
    pub approved_by: String,
    /// Its error as reported; null when it gave none.
    #[schema(required = true)]
    pub error: Option<String>,
}

impl RecalledView {
    fn of(r: &Question) -> Option<RecalledView> {
        r.recalled.as_ref().map(|c| RecalledView {
            id: c.id.clone(),
            status: c.status.clone(),
            approved_at: time::OffsetDateTime::from_unix_timestamp_nanos(
                i128::from(c.approved_at_ms) * 1_000_000,
            )
            .map(rfc3339)
            .unwrap_or_default(),
            approved_by: c.approved_by.clone(),
            error: c.words.clone(),
        })
    }
}

/// What a window let through.
#[derive(Debug, Serialize, ToSchema)]
pub struct WindowUseView {
    /// Identical calls it confirmed without asking.
    pub calls: u64,
    /// Of those, the ones whose run was reported `failed`.
    pub failed: u64,
}

/// What `[[rules]]` decided on the call.
#[derive(Debug, Serialize, ToSchema)]
pub struct RuleView {
    /// `allow`, `ask` or `deny`: what the rules decided (in a dry run, what they would
    /// have done; past an `allow` rule's rate, `ask`).
    #[schema(schema_with = super::openapi::effect_schema)]
    pub effect: &'static str,
    /// The deciding rule's name; null when none matched and the default decided.
    #[schema(required = true)]
    pub rule: Option<String>,
    /// The rule's `reason`, as the configuration wrote it; null when it gives none.
    #[schema(required = true)]
    pub reason: Option<String>,
    /// SHA-256 (hex) of the rule set in force: `check-config` prints it.
    pub rules_hash: String,
    /// False in a dry run (`rules_mode = "dry_run"`): the call was asked whatever the
    /// rules said.
    pub enforced: bool,
    /// True when an `allow` rule's `rate` was used up, so the call was asked.
    pub past_rate: bool,
}

impl RuleView {
    fn of(r: &Question) -> Option<RuleView> {
        r.rule.as_ref().map(|v| RuleView {
            effect: v.effect.as_str(),
            rule: v.rule.clone(),
            reason: v.reason.clone(),
            rules_hash: v.rules_hash.clone(),
            enforced: v.enforced,
            past_rate: v.past_rate,
        })
    }
}

/// The name of the rule that decided `r`'s call, if one did.
fn rule_name(r: &Question) -> Option<String> {
    r.rule.as_ref().and_then(|v| v.rule.clone())
}

/// The steps a question took on the operators' side.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProgressView {
    /// Telegram took the question's (first) message.
    pub delivered: bool,
    /// How many of the route's reminder points have passed (a reminder was sent at each).
    pub reminders_sent: u32,
    /// When the question was also posted to the route's `escalate_to` route; null if not.
    #[schema(format = DateTime, required = true)]
    pub escalated_at: Option<String>,
    /// How many times an approver moved the deadline ("+N min"); `expires_at` is the
    /// deadline as it now is.
    pub extensions: u32,
    /// How many times an approver tapped "Deny with reason" (their reply ends it).
    pub reasons_requested: u32,
    /// The route's SLA mark on the question (`sla_seconds`): `at_risk` once three
    /// quarters of it passed, `overdue` once all of it did; null before, or without one.
    #[schema(required = true, value_type = Option<String>, example = "at_risk")]
    pub sla: Option<&'static str>,
}

impl From<&Question> for ProgressView {
    fn from(r: &Question) -> Self {
        ProgressView {
            delivered: r.message_id.is_some(),
            reminders_sent: r.progress.reminders_sent,
            escalated_at: r.progress.escalated_at.map(rfc3339),
            extensions: r.progress.extensions,
            reasons_requested: r.progress.reasons_requested,
            sla: SlaMark::of_count(r.progress.sla_marks).map(|m| match m {
                SlaMark::AtRisk => "at_risk",
                SlaMark::Overdue => "overdue",
            }),
        }
    }
}

/// `once` or `window`, as the API names an approval's scope.
pub fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Once => "once",
        Scope::Window(_) => "window",
    }
}

impl From<&Question> for RecordView {
    fn from(r: &Question) -> Self {
        RecordView {
            id: r.id.to_string(),
            status: r.status.as_str(),
            allowed: r.allowed(),
            reason: r.reason.clone(),
            via: r.via.map(|v| v.as_str()),
            tool: r.tool.to_string(),
            owner_id: r.owner_id.to_string(),
            args_hash: r.args_hash.to_string(),
            // Stored text was validated JSON when it came in; if it somehow is not, the
            // agent gets no parameters rather than broken ones.
            parameters: if r.allowed() {
                RawValue::from_string(r.params_json.clone()).ok()
            } else {
                None
            },
            decided_by: r.decided_by.as_ref().map(|op| DecidedByView {
                id: op.id,
                username: op.username.clone(),
                name: op.name.clone(),
            }),
            created_at: rfc3339(r.created_at),
            expires_at: rfc3339(r.expires_at),
            decided_at: r.decided_at.map(rfc3339),
            window_seconds: r.window_granted_seconds(),
            window_requested_seconds: r.window_requested_seconds,
            approved_scope: r.approved_scope().map(scope_name),
            window_until: r.window_until().map(rfc3339),
            denial_reason: r.denial_reason.clone(),
            do_not_retry: r.do_not_retry(),
            progress: ProgressView::from(r),
            rule: rule_name(r),
            rule_decision: RuleView::of(r),
            outcome: RunReportView::of(r),
            recalled: RecalledView::of(r),
            window_use: None,
            edited: r.edited.is_some(),
            original_args_hash: r.edited.as_ref().map(|e| e.original_args_hash.to_string()),
            server: r.server.as_ref().map(|s| s.to_string()),
            annotations: r.annotations.as_ref().map(|a| a.to_json()),
        }
    }
}

/// The tool call an interaction carries (see `POST /v1/interactions`' `call`).
#[derive(Debug, Serialize, ToSchema)]
pub struct CallView {
    pub tool: String,
    pub owner_id: String,
    /// The call's argument hash (AI-Parrot's `compute_args_hash`).
    pub args_hash: String,
    /// The effective window: what the agent asked for, cut to the route's
    /// `max_window_seconds`.
    pub window_seconds: u64,
    /// What the agent asked for when the route's cap cut it; null when as asked.
    #[schema(required = true)]
    pub window_requested_seconds: Option<u64>,
    /// True when an operator approved the form with changes (in the console): the
    /// result holds the edited parameters and `args_hash` is theirs.
    pub edited: bool,
    /// The argument hash of the call as the agent sent it, when edited; else null.
    #[schema(required = true)]
    pub original_args_hash: Option<String>,
}

/// An interaction (AI-Parrot's `HumanInteraction`) as agents see it: `{"id",
/// "interaction_id", "status", "interaction_type", "route", "recipients", "responses",
/// "result", "reason", "timeout_action", "created_at", "expires_at", "decided_at",
/// "interaction"}`.
///
/// Every key is always present; the optional ones are `null` when they do not apply.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Interaction)]
pub struct InteractionView {
    /// This service's record id: `cf_` and 32 lowercase hex digits.
    pub id: String,
    /// The agent's own id of the question, as it sent it.
    pub interaction_id: String,
    #[schema(schema_with = super::openapi::interaction_status_schema)]
    pub status: &'static str,
    #[schema(schema_with = super::openapi::interaction_type_schema)]
    pub interaction_type: &'static str,
    /// The route the question was posted to, or `@name` for a person's private chat.
    pub route: String,
    /// The `[people]` names the question went to in private chats.
    pub recipients: Vec<String>,
    /// Every answer so far, oldest first, as AI-Parrot `HumanResponse` objects.
    #[schema(schema_with = super::openapi::human_responses_schema)]
    pub responses: Vec<Value>,
    /// The settled value once `completed`; null before, and after a timeout or cancel.
    #[schema(schema_with = super::openapi::any_value_schema, required = true)]
    pub result: Option<Value>,
    /// Why the interaction is where it is, in words.
    pub reason: String,
    #[schema(schema_with = super::openapi::timeout_action_schema, required = true)]
    pub timeout_action: Option<&'static str>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime, required = true)]
    pub decided_at: Option<String>,
    /// The `HumanInteraction` exactly as the agent sent it.
    #[schema(value_type = Object)]
    pub interaction: Map<String, Value>,
    /// The tool call the question is about, when the agent sent one; else null.
    #[schema(required = true)]
    pub call: Option<CallView>,
    /// What the operator replied after "Deny with reason", as they saw it (invisible
    /// characters as escapes): a person's words, data and not instructions; null
    /// otherwise.
    #[schema(required = true)]
    pub denial_reason: Option<String>,
    /// True when an operator (or a `deny` rule) said no: asking again as it is would
    /// get the same answer.
    pub do_not_retry: bool,
    pub progress: ProgressView,
    /// The `[[rules]]` rule that decided the call (null: none did, or no call).
    #[schema(required = true)]
    pub rule: Option<String>,
    /// What the rules decided on the call, in full; null when they were not asked.
    #[schema(required = true)]
    pub rule_decision: Option<RuleView>,
    /// For an approval carrying a `call` that was answered yes: what happened when the
    /// agent ran it, as reported to `POST /v1/confirmations/{id}/outcome` (with this
    /// record's `id`), or `unknown` when the route's `expect_outcome_seconds` passed with
    /// no report; null otherwise.
    #[schema(required = true)]
    pub outcome: Option<RunReportView>,
}

impl From<&Question> for InteractionView {
    fn from(r: &Question) -> Self {
        // The first message went to a person's private chat when the route is `@name`.
        let first = r.route.strip_prefix('@');
        let mut recipients: Vec<String> = Vec::with_capacity(1 + r.copies.len());
        // An escalation's copy goes to a route (`route:<name>`), not to a person.
        let people = r
            .copies
            .iter()
            .map(|c| c.recipient.as_str())
            .filter(|name| !name.starts_with("route:"));
        for name in first.into_iter().chain(people) {
            if !recipients.iter().any(|n| n == name) {
                recipients.push(name.to_owned());
            }
        }
        InteractionView {
            id: r.id.to_string(),
            interaction_id: r.interaction_id().to_owned(),
            status: r.public_status(),
            interaction_type: r.kind().as_str(),
            route: r.route.clone(),
            recipients,
            responses: r.human_responses(),
            result: r.result.clone(),
            reason: r.reason.clone(),
            timeout_action: r.timeout_action.map(TimeoutAction::as_str),
            created_at: rfc3339(r.created_at),
            expires_at: rfc3339(r.expires_at),
            decided_at: r.decided_at.map(rfc3339),
            interaction: r
                .interaction
                .as_ref()
                .map(|i| i.raw.clone())
                .unwrap_or_default(),
            call: r.has_call.then(|| CallView {
                tool: r.tool.to_string(),
                owner_id: r.owner_id.to_string(),
                args_hash: r.args_hash.to_string(),
                window_seconds: r.window_seconds,
                window_requested_seconds: r.window_requested_seconds,
                edited: r.edited.is_some(),
                original_args_hash: r.edited.as_ref().map(|e| e.original_args_hash.to_string()),
            }),
            denial_reason: r.denial_reason.clone(),
            do_not_retry: r.do_not_retry(),
            progress: ProgressView::from(r),
            rule: rule_name(r),
            rule_decision: RuleView::of(r),
            outcome: RunReportView::of(r),
        }
    }
}
