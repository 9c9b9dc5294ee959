//! What each tool takes: its arguments as the API's request bodies, read with the field
//! at fault named, and the input schema the client is shown.

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::client::RunReportStatus;

use super::answer::text_result;

/// `request_approval`'s arguments: the body of `POST /v1/confirmations`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestApproval {
    /// The name of the tool you are about to run, e.g. "deploy" or "transfer_money".
    pub tool: String,
    /// The exact parameters you will run it with, as a JSON object. The human sees every
    /// one; an approval covers exactly these values.
    pub params: Map<String, Value>,
    /// Optional one-line briefing as a Python str.format template over params, e.g.
    /// "Deploy {service} to {env}?".
    pub template: Option<String>,
    /// Optional extra text shown to the human: why you want to run it.
    pub context: Option<String>,
    /// Seconds an approval also covers identical calls (same owner, tool and params)
    /// without asking again; 0 or absent: ask every time (the route may cap it).
    pub window_seconds: Option<u64>,
    /// Seconds to wait for a human (the service's default when absent).
    pub timeout_seconds: Option<f64>,
    /// The named Telegram destination (the agent's default route when absent).
    pub route: Option<String>,
    /// On whose behalf you act (shown to the human; part of the window's key).
    pub owner_id: Option<String>,
    /// Any string unique to this call: repeating the call with the same key (after a
    /// timeout of your client, say) finds the same request instead of asking twice.
    pub idempotency_key: Option<String>,
    /// "block" (default): wait for the decision, with progress notifications.
    /// "suspend": return at once with the request's id; then call get_decision.
    pub wait: Option<String>,
    /// The grant this call relies on (from request_grant), e.g. "tool:deploy": it must
    /// cover this tool ("tool:<this tool>" or "tool:*"; another kind only where the
    /// service's configuration maps it to this tool). Without a live grant for owner_id
    /// the call is NOT APPROVED at once, nobody asked.
    pub grant_scope: Option<String>,
    /// With grant_scope: a live grant is enough, nobody is asked (a deny rule still
    /// refuses the call).
    pub require_grant_only: Option<bool>,
}

/// `request_grant`'s arguments: the body of `POST /v1/grants`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestGrant {
    /// On whose behalf you act: the grant lets calls for this owner through.
    pub owner_id: String,
    /// What to grant: "tool:<name>" for every call of one tool (e.g. "tool:deploy"), or
    /// "tool:*" for every tool.
    pub scope: String,
    /// How long the grant should last, in seconds (default 900; the route may cut it).
    pub window_seconds: Option<u64>,
    /// Why you need it: shown to the human.
    pub reason: Option<String>,
    /// Seconds to wait for a human (the service's default when absent).
    pub timeout_seconds: Option<f64>,
    /// The named Telegram destination (the agent's default route when absent).
    pub route: Option<String>,
    /// "block" (default): wait for the answer, with progress notifications. "suspend":
    /// return at once with the question's id; then call get_decision, and on a yes call
    /// request_grant again with interaction_id.
    pub wait: Option<String>,
    /// The id of a grant question answered yes (from a suspended request_grant): returns
    /// the grant that yes stored, without asking again, when owner_id, scope and
    /// window_seconds (if given) are the ones it asked for.
    pub interaction_id: Option<String>,
}

/// `check_grant`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckGrant {
    /// On whose behalf you act.
    pub owner_id: String,
    /// The scope the call needs: "tool:<name>" (a "tool:*" grant covers every tool).
    pub scope: String,
}

/// `get_decision`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetDecision {
    /// The id request_approval (or ask_human) returned.
    pub id: String,
    /// Seconds to wait for the decision, 0 to 60 (default 60).
    pub wait_seconds: Option<f64>,
}

/// `report_outcome`'s arguments: the body of `POST /v1/confirmations/{id}/outcome`
/// and the id it names.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(rename = "ReportOutcome")]
#[serde(deny_unknown_fields)]
pub struct RunReportArgs {
    /// The id request_approval returned (cf_...), of a call that was APPROVED.
    pub id: String,
    /// "executed": you ran the call and it did its job; "failed": it ran (or was
    /// started) and failed; "not_executed": you decided not to run it after all;
    /// "unknown": you cannot tell whether it ran.
    pub status: RunReportStatus,
    /// Optional: what it did, in a sentence (at most 500 characters; shown to the human
    /// who approved it).
    pub summary: Option<String>,
    /// With "failed" or "unknown" only: what went wrong, e.g. the error message (at
    /// most 500 characters).
    pub error: Option<String>,
    /// Optional: how long the call took, in milliseconds.
    pub duration_ms: Option<u64>,
}

/// One option of `ask_human`'s choice questions.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChoiceOption {
    /// What is returned when this option is chosen.
    pub key: String,
    /// What the human sees on the button.
    pub label: String,
}

/// `ask_human`'s arguments: an AI-Parrot `HumanInteraction`, reduced to what a model sets.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskHuman {
    /// The question, in plain words.
    pub question: String,
    /// One of "free_text" (default), "single_choice", "multi_choice", "approval", "poll".
    pub interaction_type: Option<String>,
    /// The choices, for single_choice, multi_choice and poll.
    #[serde(default)]
    pub options: Vec<ChoiceOption>,
    /// Seconds to wait for an answer (the service's default when absent).
    pub timeout_seconds: Option<f64>,
    /// The named Telegram destination (the agent's default route when absent).
    pub route: Option<String>,
    /// Any string unique to this question: asking again with the same key finds the same
    /// question instead of asking twice.
    pub idempotency_key: Option<String>,
    /// "block" (default): wait for the answer; "suspend": return at once with the
    /// question's id; then call get_decision.
    pub wait: Option<String>,
}

/// `notify_human`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyHuman {
    /// The message (one-way: no answer is expected).
    pub message: String,
    /// The named Telegram destination (the agent's default route when absent).
    pub route: Option<String>,
}

/// A tool's arguments as `T`, or what is wrong with them (the field, then serde's words).
pub(super) fn arguments<T: DeserializeOwned>(args: JsonObject) -> Result<T, String> {
    serde_path_to_error::deserialize(Value::Object(args)).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.into_inner().to_string()
        } else {
            format!("{path}: {}", e.into_inner())
        }
    })
}

/// Arguments that are not valid: nothing was asked, and the call is not to be run.
pub(super) fn not_valid(tool: &str, what: &str, why: &str) -> CallToolResult {
    text_result(
        format!(
            "NOT APPROVED: the arguments of {tool} are not valid ({why}), so nothing was \
             asked. Do not run {what}; call {tool} again with valid arguments."
        ),
        None,
        true,
    )
}

/// The input schema of a tool that takes `T`. The tools read their arguments as a JSON
/// object and parse it themselves (see [`arguments`]), so a mistake is their own
/// NOT APPROVED and not rmcp's "failed to deserialize parameters"; the schema the
/// client sees is still `T`'s.
pub(super) fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
    // The schemas are derived from this module's own types: an invalid one is a bug
    // that listing the tools shows at once (every MCP test does), as rmcp's own
    // `Parameters` would.
    rmcp::handler::server::common::schema_for_input::<T>().unwrap_or_else(|e| {
        panic!(
            "invalid input schema for {}: {e}",
            std::any::type_name::<T>()
        )
    })
}
