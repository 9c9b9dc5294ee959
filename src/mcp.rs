//! The MCP server: approvals and questions as tools for any agent that speaks the Model
//! Context Protocol.
//!
//! Every tool call becomes a request to the agents' HTTP API (`/v1/...`) with the
//! agent's own bearer token, so an MCP agent gets the same authentication, limits,
//! audit trail and metrics as any other: over stdio (`hitl-telegram mcp`) the requests
//! go to a running service over HTTP, like `ask` and `claude-hook`; on the service's
//! `/mcp` route they go straight into its router, in process. One pipeline either way.
//!
//! Fail closed, visibly: whatever keeps a call from being approved (a cancel, a
//! timeout, an undeliverable question, a dead service, a refused request, arguments
//! that are not valid) is a tool result whose first words are "NOT APPROVED" and that
//! tells the model not to run the call, never a protocol error that a client might retry
//! blindly. And it is true: a blocking call that cannot keep waiting (its long-poll
//! refused by `max_long_polls`, the service gone) withdraws the question it asked before
//! it says NOT APPROVED, so nobody approves a call that nobody runs; a decision that came
//! first is reported as it is.
//!
//! An operator's deny reason reaches the model as their words, quoted as a JSON string
//! ([`text::their_words`]), never as a sentence of ours.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use axum::response::IntoResponse as _;
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tower::ServiceExt;

use crate::client::{Failure, Kind, OUTAGE_PATIENCE, OUTAGE_RETRY, Outage, V1Client};
use crate::domain::limits::{MAX_BODY_BYTES, MAX_LONG_POLL_SECONDS};
use crate::domain::text;

/// How long one long-poll of the API waits before the tool reports progress and polls
/// again: well under the 60 s many MCP clients allow a call without progress.
const POLL: Duration = Duration::from_secs(10);
/// The longest `wait_seconds` of `get_decision` (the API's long-poll cap).
const MAX_WAIT_SECONDS: f64 = MAX_LONG_POLL_SECONDS;
/// The largest MCP message (one POST to /mcp) accepted: the API's own body limit plus
/// room for the JSON-RPC envelope.
const MAX_MCP_BODY: usize = MAX_BODY_BYTES + 16 * 1024;
/// Responses larger than this from the in-process API are refused (records are small).
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Where the tools' API requests go.
#[derive(Clone)]
pub enum Api {
    /// A running service, over HTTP, with one agent's token (`hitl-telegram mcp`).
    Http(V1Client),
    /// The service's own router (`/mcp`): the token is the MCP request's own bearer.
    InProcess(axum::Router),
}

/// What the API answered, or why it could not be asked.
enum Answer {
    Ok(StatusCode, Value),
    Unreachable(String),
}

impl Api {
    async fn call(
        &self,
        bearer: Option<&str>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        match self {
            Api::Http(client) => {
                let body = body.map(Value::to_string);
                match client.send(method, path, body.as_deref(), None).await {
                    Ok(reply) => match reply.json() {
                        Ok(v) => Answer::Ok(reply.status, v),
                        Err(e) => Answer::Unreachable(format!(
                            "the service's answer ({}) is not JSON: {e}",
                            reply.status
                        )),
                    },
                    Err(Failure::CutOff(status, e)) => Answer::Unreachable(format!(
                        "the service's answer ({status}) is not JSON: {}",
                        crate::telemetry::causes(&e)
                    )),
                    Err(Failure::Unreachable(e)) => Answer::Unreachable(format!(
                        "cannot reach the service: {}",
                        crate::telemetry::causes(&e)
                    )),
                }
            }
            Api::InProcess(router) => {
                let mut request = Request::builder().method(method).uri(path);
                if let Some(bearer) = bearer {
                    request = request.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
                }
                let request = match body {
                    Some(body) => request
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(body.to_string())),
                    None => request.body(Body::empty()),
                };
                let Ok(request) = request else {
                    return Answer::Unreachable("cannot build the request".into());
                };
                let Ok(response) = router.clone().oneshot(request).await;
                let status = response.status();
                match axum::body::to_bytes(response.into_body(), MAX_BODY).await {
                    Ok(bytes) => match serde_json::from_slice(&bytes) {
                        Ok(v) => Answer::Ok(status, v),
                        Err(_) => Answer::Unreachable(format!("the API answered {status}")),
                    },
                    Err(e) => Answer::Unreachable(format!("cannot read the API's answer: {e}")),
                }
            }
        }
    }
}

/// The MCP server: the tools below, each one or more API requests.
#[derive(Clone)]
pub struct HitlMcp {
    api: Api,
}

impl HitlMcp {
    pub fn new(api: Api) -> Self {
        Self { api }
    }
}

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

fn text_result(text: String, record: Option<&Value>, error: bool) -> CallToolResult {
    let mut blocks = vec![ContentBlock::text(text)];
    if let Some(record) = record {
        blocks.push(ContentBlock::text(record.to_string()));
    }
    if error {
        CallToolResult::error(blocks)
    } else {
        CallToolResult::success(blocks)
    }
}

/// What the API's answer means for the model, in words it reads right.
fn decision_text(record: &Value) -> String {
    let tool = record["tool"].as_str().unwrap_or("the call");
    let id = record["id"].as_str().unwrap_or("?");
    let reason = record["reason"].as_str().unwrap_or("");
    match record["status"].as_str() {
        Some("confirmed") => format!(
            "APPROVED ({reason}). Run {tool} now with exactly these parameters: {}. Request {id}.",
            record["parameters"]
        ),
        Some("cancelled") => match record["denial_reason"].as_str() {
            Some(why) => format!(
                "NOT APPROVED: the operator denied it; {}. Do not run {tool}, and do not retry \
                 the same call. Request {id}.",
                text::their_words(why)
            ),
            None => format!(
                "NOT APPROVED: cancelled ({reason}). Do not run {tool}, and do not retry the same \
                 call; ask the human what to do instead. Request {id}."
            ),
        },
        Some("timeout") => format!(
            "NOT APPROVED: nobody answered in time ({reason}). Do not run {tool}. Request {id}."
        ),
        _ => format!(
            "NOT APPROVED YET: the request {id} is still waiting for a human. Do not run {tool} \
             now; call get_decision with id \"{id}\" to wait for the decision."
        ),
    }
}

fn answer_text(record: &Value) -> String {
    let id = record["interaction_id"].as_str().unwrap_or("?");
    match record["status"].as_str() {
        Some("completed") => match record["denial_reason"].as_str() {
            Some(why) => format!(
                "ANSWERED: {} (the operator said no; {}). Question {id}.",
                record["result"],
                text::their_words(why)
            ),
            None => format!("ANSWERED: {}. Question {id}.", record["result"]),
        },
        Some("timeout") => format!("NO ANSWER: nobody answered in time. Question {id}."),
        Some("cancelled") => format!(
            "NO ANSWER: the question was cancelled ({}). Question {id}.",
            record["reason"].as_str().unwrap_or("")
        ),
        _ => format!(
            "NO ANSWER YET: question {id} is still open; call get_decision with id \"{id}\" \
             to wait for the answer."
        ),
    }
}

/// A request the API refused or could not take: not approved, said so.
fn refused(what: &str, status: StatusCode, body: &Value) -> CallToolResult {
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    text_result(
        format!(
            "NOT APPROVED: the approval service refused the request ({} {message}). Do not run \
             {what}.",
            status.as_u16()
        ),
        None,
        true,
    )
}

fn unreachable(what: &str, why: &str) -> CallToolResult {
    text_result(
        format!("NOT APPROVED: no human could be asked ({why}). Do not run {what}."),
        None,
        true,
    )
}

/// A tool's arguments as `T`, or what is wrong with them (the field, then serde's words).
fn arguments<T: DeserializeOwned>(args: JsonObject) -> Result<T, String> {
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
fn not_valid(tool: &str, what: &str, why: &str) -> CallToolResult {
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
fn input_schema<T: JsonSchema + 'static>() -> Arc<JsonObject> {
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

/// What a blocking tool asked, by the id its API path takes.
enum Asked {
    /// A confirmation, by its record id (`cf_...`).
    Confirmation(String),
    /// An interaction, by its own `interaction_id`.
    Interaction(String),
}

impl Asked {
    /// Its API path, the id percent-encoded: an `interaction_id` may hold `/`, `?`, `#`
    /// or `%`.
    fn path(&self) -> String {
        match self {
            Asked::Confirmation(id) => Kind::Confirmation.path(id),
            Asked::Interaction(id) => Kind::Interaction.path(id),
        }
    }

    fn id(&self) -> &str {
        match self {
            Asked::Confirmation(id) | Asked::Interaction(id) => id,
        }
    }

    /// The record as the model reads it.
    fn text(&self, record: &Value) -> String {
        match self {
            Asked::Confirmation(_) => decision_text(record),
            Asked::Interaction(_) => answer_text(record),
        }
    }

    /// Where a 409 of a withdrawal holds the record as it ended.
    fn conflict_key(&self) -> &'static str {
        match self {
            Asked::Confirmation(_) => "confirmation",
            Asked::Interaction(_) => "interaction",
        }
    }
}

/// A failed API answer in a few words: its status and the error's message.
fn failure(answer: Answer) -> String {
    match answer {
        Answer::Ok(status, body) => format!(
            "{} {}",
            status.as_u16(),
            body["error"]["message"]
                .as_str()
                .map_or_else(|| body.to_string(), str::to_owned)
        ),
        Answer::Unreachable(why) => why,
    }
}

/// The bearer of the MCP request when it came over HTTP (`/mcp`).
fn bearer_of(ctx: &RequestContext<RoleServer>) -> Option<String> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| crate::api::extract::bearer_token(&parts.headers))
        .map(str::to_owned)
}

/// Whether a tool's `wait` asks it to block (the default) or to return at once
/// (`suspend`); anything else is refused, as the API refuses it.
fn blocks(wait: Option<&str>, what: &str) -> Result<bool, CallToolResult> {
    match wait {
        None | Some("block") => Ok(true),
        Some("suspend") => Ok(false),
        Some(other) => Err(text_result(
            format!(
                "NOT APPROVED: wait must be \"block\" or \"suspend\", not {other:?}. \
                 Do not run {what}."
            ),
            None,
            true,
        )),
    }
}

fn is_terminal(record: &Value) -> bool {
    matches!(
        record["status"].as_str(),
        Some("confirmed" | "cancelled" | "timeout" | "completed")
    )
}

#[tool_router]
impl HitlMcp {
    #[tool(
        description = "Ask a human on Telegram to approve a tool call BEFORE you run it. Call this \
        for every side-effecting action (deploys, payments, deletions, messages to people). The \
        human sees the tool and every parameter and taps Approve or Cancel. Run the call only if \
        the result starts with APPROVED, and then with exactly the parameters it gives. Anything \
        else (NOT APPROVED: cancelled, timeout, undeliverable, service down) means: do not run it.",
        input_schema = input_schema::<RequestApproval>()
    )]
    async fn request_approval(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let named = args.get("tool").and_then(Value::as_str).map(str::to_owned);
        let args: RequestApproval = match arguments(args) {
            Ok(args) => args,
            Err(why) => {
                let what = named.as_deref().unwrap_or("the call");
                return not_valid("request_approval", what, &why);
            }
        };
        let bearer = bearer_of(&ctx);
        let what = args.tool.clone();
        let block = match blocks(args.wait.as_deref(), &what) {
            Ok(block) => block,
            Err(refusal) => return refusal,
        };
        let mut body = json!({"tool": args.tool, "params": args.params, "wait": "suspend"});
        for (name, value) in [
            ("template", args.template.map(Value::from)),
            ("context", args.context.map(Value::from)),
            ("window_seconds", args.window_seconds.map(Value::from)),
            ("timeout_seconds", args.timeout_seconds.map(Value::from)),
            ("route", args.route.map(Value::from)),
            ("owner_id", args.owner_id.map(Value::from)),
            ("idempotency_key", args.idempotency_key.map(Value::from)),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        let record = match self
            .api
            .call(
                bearer.as_deref(),
                Method::POST,
                "/v1/confirmations",
                Some(&body),
            )
            .await
        {
            Answer::Ok(s, record) if s.is_success() => record,
            Answer::Ok(s, body) => return refused(&what, s, &body),
            Answer::Unreachable(why) => return unreachable(&what, &why),
        };
        if !block || is_terminal(&record) {
            return text_result(decision_text(&record), Some(&record), false);
        }
        let asked = Asked::Confirmation(record["id"].as_str().unwrap_or_default().to_owned());
        self.wait_or_withdraw(&ctx, bearer.as_deref(), &asked, record, &what)
            .await
    }

    #[tool(
        description = "Wait for the decision on a request made with request_approval (or for the \
        answer to ask_human) by its id, up to wait_seconds (at most 60). Use it to resume after \
        wait=\"suspend\" or after your client gave up waiting. Run the call only if the result \
        starts with APPROVED.",
        input_schema = input_schema::<GetDecision>()
    )]
    async fn get_decision(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args: GetDecision = match arguments(args) {
            Ok(args) => args,
            Err(why) => return not_valid("get_decision", "the call", &why),
        };
        let bearer = bearer_of(&ctx);
        let wait = args.wait_seconds.unwrap_or(MAX_WAIT_SECONDS);
        if !(wait.is_finite() && (0.0..=MAX_WAIT_SECONDS).contains(&wait)) {
            return text_result(
                "NOT APPROVED: wait_seconds must be a number from 0 to 60. Do not run the call."
                    .into(),
                None,
                true,
            );
        }
        // Confirmation ids start with cf_; anything else is an interaction_id.
        let asked = if args.id.starts_with("cf_") {
            Asked::Confirmation(args.id)
        } else {
            Asked::Interaction(args.id)
        };
        let waited = self
            .api
            .call(
                bearer.as_deref(),
                Method::GET,
                &format!("{}?wait={wait}", asked.path()),
                None,
            )
            .await;
        let answer = match waited {
            // The wait itself was refused (this agent's max_long_polls, a replica shutting
            // down): the record is read as it is now, so a question still open is
            // reported as open (NOT APPROVED YET), not as refused.
            Answer::Ok(s, _)
                if s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::SERVICE_UNAVAILABLE =>
            {
                self.api
                    .call(bearer.as_deref(), Method::GET, &asked.path(), None)
                    .await
            }
            answer => answer,
        };
        match answer {
            Answer::Ok(s, r) if s.is_success() => text_result(asked.text(&r), Some(&r), false),
            Answer::Ok(s, body) => refused("the call", s, &body),
            Answer::Unreachable(why) => unreachable("the call", &why),
        }
    }

    #[tool(
        description = "Ask a human on Telegram a question and wait for the answer: free text, a \
        choice among options (single_choice, multi_choice, poll) or a yes/no approval. Returns \
        the answer (ANSWERED: ...) or NO ANSWER.",
        input_schema = input_schema::<AskHuman>()
    )]
    async fn ask_human(&self, args: JsonObject, ctx: RequestContext<RoleServer>) -> CallToolResult {
        const WHAT: &str = "anything that needs the answer";
        let args: AskHuman = match arguments(args) {
            Ok(args) => args,
            Err(why) => return not_valid("ask_human", WHAT, &why),
        };
        let bearer = bearer_of(&ctx);
        let block = match blocks(args.wait.as_deref(), WHAT) {
            Ok(block) => block,
            Err(refusal) => return refusal,
        };
        let interaction_id = args.idempotency_key.clone().unwrap_or_else(|| {
            format!(
                "mcp-{}",
                crate::domain::ids::CallbackToken::generate().as_str()
            )
        });
        let mut interaction = json!({
            "interaction_id": interaction_id,
            "question": args.question,
            "interaction_type": args.interaction_type.as_deref().unwrap_or("free_text"),
            "options": args.options.iter().map(|o| json!({"key": o.key, "label": o.label})).collect::<Vec<_>>(),
        });
        if let Some(t) = args.timeout_seconds {
            interaction["timeout"] = json!(t);
        }
        let mut body = json!({"interaction": interaction});
        if let Some(route) = args.route {
            body["route"] = json!(route);
        }
        let record = match self
            .api
            .call(
                bearer.as_deref(),
                Method::POST,
                "/v1/interactions",
                Some(&body),
            )
            .await
        {
            Answer::Ok(s, record) if s.is_success() => record,
            Answer::Ok(s, body) => return refused(WHAT, s, &body),
            Answer::Unreachable(why) => return unreachable(WHAT, &why),
        };
        if !block {
            return text_result(answer_text(&record), Some(&record), false);
        }
        let asked = Asked::Interaction(interaction_id);
        self.wait_or_withdraw(&ctx, bearer.as_deref(), &asked, record, WHAT)
            .await
    }

    #[tool(
        description = "Send a one-way message to the humans on Telegram (no answer expected), \
        e.g. to report what you did.",
        input_schema = input_schema::<NotifyHuman>()
    )]
    async fn notify_human(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args: NotifyHuman = match arguments(args) {
            Ok(args) => args,
            Err(why) => {
                return text_result(
                    format!("NOT SENT: the arguments of notify_human are not valid ({why})."),
                    None,
                    true,
                );
            }
        };
        let bearer = bearer_of(&ctx);
        let mut body = json!({"message": args.message});
        if let Some(route) = args.route {
            body["route"] = json!(route);
        }
        match self
            .api
            .call(
                bearer.as_deref(),
                Method::POST,
                "/v1/notifications",
                Some(&body),
            )
            .await
        {
            Answer::Ok(s, _) if s.is_success() => {
                text_result("SENT: the message is in Telegram.".into(), None, false)
            }
            Answer::Ok(s, body) => text_result(
                format!(
                    "NOT SENT: the service refused it ({} {}).",
                    s.as_u16(),
                    body["error"]["message"].as_str().unwrap_or("")
                ),
                None,
                true,
            ),
            Answer::Unreachable(why) => text_result(format!("NOT SENT: {why}."), None, true),
        }
    }
}

impl HitlMcp {
    /// Waits for what a blocking tool asked (see [`Self::wait_for`]) and says how it
    /// ended; when the wait fails, withdraws it first (see [`Self::withdraw`]).
    async fn wait_or_withdraw(
        &self,
        ctx: &RequestContext<RoleServer>,
        bearer: Option<&str>,
        asked: &Asked,
        record: Value,
        what: &str,
    ) -> CallToolResult {
        match self.wait_for(ctx, bearer, asked, record).await {
            Ok(record) => text_result(asked.text(&record), Some(&record), false),
            Err(why) => self.withdraw(bearer, asked, what, &why).await,
        }
    }

    /// Long-polls what was asked until its record is terminal, sending a progress
    /// notification after every poll (so clients that reset their timeout on progress
    /// keep waiting). Gives up at the request's deadline plus a margin, or when the client
    /// cancels, and then returns the record as it is (still pending, which the model is
    /// told: get_decision resumes it). `Err` says why a poll failed.
    async fn wait_for(
        &self,
        ctx: &RequestContext<RoleServer>,
        bearer: Option<&str>,
        asked: &Asked,
        mut record: Value,
    ) -> Result<Value, String> {
        let token = ctx.meta.get_progress_token();
        let started = Instant::now();
        let total = record["expires_at"]
            .as_str()
            .and_then(|t| {
                time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
            })
            .map(|t| {
                (t - time::OffsetDateTime::now_utc())
                    .as_seconds_f64()
                    .max(0.0)
            });
        let give_up = total.map(|t| Duration::from_secs_f64(t) + Duration::from_secs(30));
        let poll = format!("{}?wait={}", asked.path(), POLL.as_secs());
        let mut outage = Outage::new(OUTAGE_PATIENCE);
        loop {
            if is_terminal(&record) {
                return Ok(record);
            }
            if ctx.ct.is_cancelled() || give_up.is_some_and(|g| started.elapsed() > g) {
                return Ok(record);
            }
            if let Some(token) = &token {
                let waited = started.elapsed().as_secs_f64();
                let mut progress = ProgressNotificationParam::new(token.clone(), waited)
                    .with_message(format!(
                        "waiting for a human on Telegram ({waited:.0} s so far)"
                    ));
                if let Some(total) = total {
                    progress = progress.with_total(total);
                }
                // A client that went away is noticed by the cancellation token.
                let _ = ctx.peer.notify_progress(progress).await;
            }
            let answer = tokio::select! {
                answer = self.api.call(bearer, Method::GET, &poll, None) => answer,
                () = ctx.ct.cancelled() => return Ok(record),
            };
            match answer {
                Answer::Ok(s, r) if s.is_success() => {
                    outage.over();
                    record = r;
                }
                // A replica restarting (503) or out of reach: the question is kept in
                // the database, so the wait rides out a short outage (a rolling
                // restart behind a load balancer) before it gives up and withdraws.
                Answer::Ok(StatusCode::SERVICE_UNAVAILABLE, _) | Answer::Unreachable(_)
                    if outage.bearable() =>
                {
                    tokio::select! {
                        () = tokio::time::sleep(OUTAGE_RETRY) => {}
                        () = ctx.ct.cancelled() => return Ok(record),
                    }
                }
                failed => return Err(failure(failed)),
            }
        }
    }

    /// The wait failed (`why`): the question is withdrawn before the model is told NOT
    /// APPROVED, so it cannot be approved while nobody waits for it. A decision that
    /// came first (the withdrawal's 409) is the answer instead; a withdrawal that fails
    /// too is said as it is, with the id to read the outcome by.
    async fn withdraw(
        &self,
        bearer: Option<&str>,
        asked: &Asked,
        what: &str,
        why: &str,
    ) -> CallToolResult {
        let id = asked.id();
        match self
            .api
            .call(bearer, Method::DELETE, &asked.path(), None)
            .await
        {
            Answer::Ok(s, record) if s.is_success() => text_result(
                format!(
                    "NOT APPROVED: waiting for the decision failed ({why}), so the question was \
                     withdrawn from Telegram and nobody can answer it now. Do not run {what}. \
                     Question {id}."
                ),
                Some(&record),
                true,
            ),
            Answer::Ok(StatusCode::CONFLICT, body) if is_terminal(&body[asked.conflict_key()]) => {
                let record = &body[asked.conflict_key()];
                text_result(asked.text(record), Some(record), false)
            }
            failed => text_result(
                format!(
                    "NOT APPROVED: waiting for the decision failed ({why}), and the question \
                     could not be withdrawn ({}): it may still be answered on Telegram until \
                     it expires. Do not run {what} on this result; call get_decision with id \
                     \"{id}\" to learn how it ended.",
                    failure(failed)
                ),
                None,
                true,
            ),
        }
    }
}

#[tool_handler(
    name = "hitl-telegram",
    instructions = "Human approval on Telegram. Before any side-effecting tool call, call \
    request_approval with the exact tool name and parameters, and run the call only if the \
    result starts with APPROVED. Use ask_human for questions and notify_human for reports."
)]
impl ServerHandler for HitlMcp {}

/// Serves the tools over stdio until the client closes the stream.
pub async fn serve_stdio(api: Api) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = HitlMcp::new(api).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}

/// The `/mcp` route: streamable HTTP, stateless (each POST stands alone, so nothing is
/// kept per client and any replica can answer), in front of `v1`, the service's own API
/// router. Requests without a known agent token get 401 before MCP sees them.
pub fn router(v1: axum::Router, service: Arc<crate::service::Service>) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    // rmcp's Host allow-list guards unauthenticated local servers against DNS
    // rebinding; every request here needs an agent's bearer token, which a rebinding
    // page does not have, and a deployment behind a proxy has its own host name.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_legacy_session_mode(false);
    let api = Api::InProcess(v1);
    let mcp = StreamableHttpService::new(
        move || Ok(HitlMcp::new(api.clone())),
        Arc::<NeverSessionManager>::default(),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let service = service.clone();
                async move {
                    let known = crate::api::extract::bearer_token(request.headers())
                        .is_some_and(|t| service.config().agent_for_token(t).is_some());
                    if !known {
                        return crate::api::error::ApiError::Unauthorized(
                            "missing or unknown bearer token (an agent's token, as for /v1)",
                        )
                        .into_response();
                    }
                    crate::api::serve::mark_authenticated(request.extensions());
                    // rmcp reads a POST's whole body: bound it as /v1 bounds its own
                    // (a tool call's arguments become one /v1 body, plus the envelope).
                    let (parts, body) = request.into_parts();
                    match axum::body::to_bytes(body, MAX_MCP_BODY).await {
                        Ok(bytes) => {
                            if let Some(refusal) = not_a_message(&parts, &bytes) {
                                return refusal;
                            }
                            next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
                                .await
                        }
                        Err(_) => (
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("an MCP message is at most {MAX_MCP_BODY} bytes"),
                        )
                            .into_response(),
                    }
                }
            },
        ))
}

/// A JSON POST to `/mcp` whose body is not an MCP message: 400 with a JSON-RPC error
/// (`-32700` when it is not JSON at all, `-32600` when it is JSON but no message), where
/// rmcp would answer 415 (a wrong media type, which this is not: the Content-Type said
/// JSON). The same parse as rmcp's, so whatever passes here it reads. A POST of another
/// media type is left to rmcp's 415.
fn not_a_message(
    parts: &axum::http::request::Parts,
    body: &[u8],
) -> Option<axum::response::Response> {
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        });
    if parts.method != Method::POST || !json {
        return None;
    }
    let e = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body).err()?;
    let (code, message) = if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        (-32700, format!("Parse error: the body is not JSON ({e})"))
    } else {
        (
            -32600,
            format!("Invalid Request: the body is not an MCP (JSON-RPC) message ({e})"),
        )
    };
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    Some((StatusCode::BAD_REQUEST, axum::Json(error)).into_response())
}
