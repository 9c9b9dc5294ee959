//! The MCP server: approvals and questions as tools for any agent that speaks the Model
//! Context Protocol.
//!
//! Every tool call becomes a request to the agents' HTTP API (`/v1/...`) with the
//! agent's own bearer token, so an MCP agent gets the same authentication, limits,
//! audit trail and metrics as any other: over stdio (`hitl-telegram mcp`) the requests
//! go to a running service over HTTP, like `ask` and `claude-hook`; on the service's
//! `/mcp` route they go straight into its router, in process. One pipeline either way.
//! Fail closed, visibly: whatever keeps a call from being approved is a tool result whose
//! first words are "NOT APPROVED", never a protocol error that a client might retry
//! blindly (more in docs/architecture.md, "Module notes").
//!
//! This file holds the tools themselves; what they take is `args.rs`, what the model
//! reads back `answer.rs`, how a blocking tool waits `wait.rs`, the grant tools' steps
//! and words `grant.rs`, the API requests `v1.rs`, and the `/mcp` route `http.rs`.

mod answer;
mod args;
mod grant;
mod http;
mod v1;
mod wait;

pub use http::router;
pub use v1::Api;

use std::time::Duration;

use axum::http::{Method, StatusCode};
use rmcp::model::{CallToolResult, JsonObject};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use crate::client::{cut, is_terminal};
use crate::domain::limits::{MAX_BODY_BYTES, MAX_LONG_POLL_SECONDS};
use crate::domain::run_report::MAX_REPORT_CHARS;
use answer::{answer_text, decision_text, refused, reported_text, text_result, unreachable};
use args::{
    AskHuman, CheckGrant, GetDecision, NotifyHuman, RequestApproval, RequestGrant, RunReportArgs,
    arguments, input_schema, not_valid,
};
use v1::{Answer, bearer_of};
use wait::{Asked, blocks};

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
            ("grant_scope", args.grant_scope.map(Value::from)),
            (
                "require_grant_only",
                args.require_grant_only.map(Value::from),
            ),
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
        // An interaction's long-poll returns on any change (one answer of several, a
        // status step on the way to the end); the model asked for the decision, so the
        // wait goes on until the record ends or wait_seconds run out.
        let deadline = tokio::time::Instant::now() + Duration::from_secs_f64(wait);
        loop {
            let left = deadline
                .saturating_duration_since(tokio::time::Instant::now())
                .as_secs_f64();
            let waited = self
                .api
                .call(
                    bearer.as_deref(),
                    Method::GET,
                    &format!("{}?wait={left:.3}", asked.path()),
                    None,
                )
                .await;
            let (answer, may_wait_again) = match waited {
                // The wait itself was refused (this agent's max_long_polls, a replica
                // shutting down): the record is read as it is now, so a question still
                // open is reported as open (NOT APPROVED YET), not as refused.
                Answer::Ok(s, _)
                    if s == StatusCode::TOO_MANY_REQUESTS
                        || s == StatusCode::SERVICE_UNAVAILABLE =>
                {
                    let now = self
                        .api
                        .call(bearer.as_deref(), Method::GET, &asked.path(), None)
                        .await;
                    (now, false)
                }
                answer => (answer, left > 0.0),
            };
            return match answer {
                Answer::Ok(s, r) if s.is_success() => {
                    if may_wait_again && !is_terminal(&r) {
                        continue;
                    }
                    text_result(asked.text(&r), Some(&r), false)
                }
                Answer::Ok(s, body) => refused("the call", s, &body),
                Answer::Unreachable(why) => unreachable("the call", &why),
            };
        }
    }

    #[tool(
        description = "Report what became of a call request_approval APPROVED, once you ran it \
        (or decided not to): status \"executed\" with an optional one-line summary, \"failed\" \
        with the error, or \"not_executed\". The human who approved it sees the outcome on \
        Telegram. REPORTED means the service took it; NOT REPORTED says why.",
        input_schema = input_schema::<RunReportArgs>()
    )]
    async fn report_outcome(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let args: RunReportArgs = match arguments(args) {
            Ok(args) => args,
            Err(why) => {
                return text_result(
                    format!(
                        "NOT REPORTED: the arguments of report_outcome are not valid ({why}). \
                         Call report_outcome again with valid arguments."
                    ),
                    None,
                    true,
                );
            }
        };
        let bearer = bearer_of(&ctx);
        // A summary or error over the service's limit is cut (marked with an ellipsis)
        // rather than refused: a model quoting a long error should not need a second
        // try. Which fields go with which status is the service's to check (422).
        let clip = |s: String| cut(&s, MAX_REPORT_CHARS);
        let mut body = json!({"status": args.status});
        for (name, value) in [
            ("summary", args.summary.map(clip).map(Value::from)),
            ("error", args.error.map(clip).map(Value::from)),
            ("duration_ms", args.duration_ms.map(Value::from)),
        ] {
            if let Some(value) = value {
                body[name] = value;
            }
        }
        let path = format!(
            "{}/outcome",
            crate::client::Kind::Confirmation.path(&args.id)
        );
        let answer = self
            .api
            .call(bearer.as_deref(), Method::POST, &path, Some(&body))
            .await;
        reported_text(&args.id, answer)
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
        description = "Ask a human on Telegram for a GRANT: permission to run every call in a \
        scope (\"tool:deploy\", or \"tool:*\" for every tool) for an owner, without asking \
        each time, for window_seconds. The human sees the scope, the owner and how long, and \
        taps Approve or Reject. Only a result that starts with GRANTED means a grant exists; \
        NOT GRANTED (refused, timeout, service down) means: ask before each call.",
        input_schema = input_schema::<RequestGrant>()
    )]
    async fn request_grant(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        match arguments::<RequestGrant>(args) {
            Ok(args) => self.grant(args, ctx).await,
            Err(why) => text_result(
                format!(
                    "NOT GRANTED: the arguments of request_grant are not valid ({why}), so \
                     nothing was asked and no grant exists. Call request_grant again with valid \
                     arguments."
                ),
                None,
                true,
            ),
        }
    }

    #[tool(
        description = "Check whether a live grant (from request_grant) covers a scope \
        (\"tool:deploy\") for an owner. GRANTED: it does, until the time given; NOT GRANTED: \
        it does not (never granted, expired or revoked), so ask before the call.",
        input_schema = input_schema::<CheckGrant>()
    )]
    async fn check_grant(
        &self,
        args: JsonObject,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        match arguments::<CheckGrant>(args) {
            Ok(args) => self.check(args, ctx).await,
            Err(why) => text_result(
                format!(
                    "NOT GRANTED: the arguments of check_grant are not valid ({why}), so \
                     nothing was checked. Do not assume a grant."
                ),
                None,
                true,
            ),
        }
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

#[tool_handler(
    name = "hitl-telegram",
    instructions = "Human approval on Telegram. Before any side-effecting tool call, call \
    request_approval with the exact tool name and parameters, and run the call only if the \
    result starts with APPROVED; after running it, call report_outcome with the request's \
    id. Use ask_human for questions and notify_human for reports; \
    request_grant and check_grant for grants that let a scope of calls through for a while."
)]
impl ServerHandler for HitlMcp {}

/// Serves the tools over stdio until the client closes the stream.
pub async fn serve_stdio(api: Api) -> anyhow::Result<()> {
    use rmcp::ServiceExt as _;
    let running = HitlMcp::new(api).serve(rmcp::transport::stdio()).await?;
    running.waiting().await?;
    Ok(())
}
