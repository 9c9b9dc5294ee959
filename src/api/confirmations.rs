//! `/v1/confirmations`: create, read (with long-poll), withdraw.

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::ToSchema;

use super::AppState;
use super::admission::Admitted;
use super::body::{allowed_callback_url, raw_object, read};
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::field::{self, CallbackUrl, Context, Params, Route, Template, Window};
use super::limits::{Held, rate_limit};
use super::question::{parse_id, respond};
use super::record::{RecordView, WindowUseView};
use crate::config::{Agent, Config};
use crate::domain::edit::ArgsSchema;
use crate::domain::grant::Scope;
use crate::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use crate::domain::mcp_call::{Annotations, ServerName};
use crate::service::{GrantCheck, NewConfirmation};

pub use super::field::WaitMode;
/// The limits a confirmation request is held to (their one home is
/// [`crate::domain::limits`]), under the names this module has always exported.
pub use crate::domain::limits::{
    MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_LONG_POLL_SECONDS, MAX_PARAM_KEYS,
    MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS,
};

/// A tool call to confirm. `null` counts as absent; unknown fields and repeated keys (at
/// any depth) are refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(
    json!({
        "tool": "transfer", "params": {"to": "ACME", "amount": 1200.5},
        "owner_id": "alice", "template": "Send {amount:,.2f} EUR to {to}?",
        "window_seconds": 600
    }),
    json!({
        "tool": "deploy", "params": {"service": "billing", "replicas": 3},
        "wait": "suspend", "idempotency_key": "deploy-billing-42",
        "context": "Friday release"
    })
))]
pub struct CreateConfirmationBody {
    #[serde(deserialize_with = "field::tool")]
    #[schema(inline)]
    pub tool: ToolName,
    #[schema(inline)]
    pub params: Params,
    /// The human on whose behalf the agent acts: not blank, no invisible or
    /// layout-changing characters (Unicode Cc, Cf, Zl, Zp, Co).
    #[serde(deserialize_with = "field::owner")]
    #[schema(inline, default = "anonymous")]
    pub owner_id: Option<OwnerId>,
    /// A Python `str.format` briefing template: no NUL or ESC characters.
    #[schema(inline)]
    pub template: Option<Template>,
    /// Confirmation window: identical approved calls pass without asking for this long.
    /// Default: the configuration's `default_window_seconds`.
    #[serde(deserialize_with = "field::window")]
    #[schema(inline)]
    pub window_seconds: Option<Window>,
    /// The tool allows editing: in the chat it falls back to approve/cancel; with
    /// `args_schema` and the console on, the call can be edited there before it is
    /// approved (the answer then says `edited` and gives the new parameters).
    #[serde(default, deserialize_with = "field::flag")]
    #[schema(nullable, default = false)]
    pub allow_edit: bool,
    /// How long to wait for a human; at most the configuration's `max_timeout_seconds`.
    /// Default: its `default_timeout_seconds`.
    #[serde(deserialize_with = "field::seconds")]
    #[schema(exclusive_minimum = 0)]
    pub timeout_seconds: Option<f64>,
    /// `block`: answer with the decision; `suspend`: answer 202 at once with the pending
    /// record.
    #[serde(default, deserialize_with = "field::wait")]
    #[schema(inline, nullable, default = "block")]
    pub wait: WaitMode,
    /// A named Telegram destination this agent may use. Default: the agent's
    /// `default_route`.
    #[schema(inline)]
    pub route: Option<Route>,
    /// The same agent and key find the same request for 24 h: not blank, no control
    /// characters.
    #[serde(deserialize_with = "field::idempotency_key")]
    #[schema(inline)]
    pub idempotency_key: Option<IdempotencyKey>,
    /// Extra text shown to the operator: no NUL or ESC characters.
    #[schema(inline)]
    pub context: Option<Context>,
    /// An http(s) URL under one of the agent's `callback_url_prefixes`, with no
    /// percent-encoded `/`, `\` or `.` (`%2F`, `%5C`, `%2E`) in its path; the outcome is
    /// POSTed there, signed.
    #[schema(inline)]
    pub callback_url: Option<CallbackUrl>,
    /// The grant the call presents, checked after the `deny` rules and before the window,
    /// the `allow` rules and any person: the scope (`tool:deploy`; `tool:*` covers every
    /// tool) a live grant of this agent for `owner_id` must cover. Without one the
    /// request is `cancelled` at once, `via: "grant"`, nobody asked. It must cover `tool`
    /// (`tool:<tool>` or `tool:*`; another kind only where the configuration's
    /// `grant_scopes` maps it to `tool`), else 422 `invalid_field` naming both, nothing
    /// stored.
    #[serde(deserialize_with = "field::grant_scope")]
    #[schema(inline)]
    pub grant_scope: Option<Scope>,
    /// With `grant_scope`: a live grant confirms the call at once (`via: "grant"`),
    /// without window, `allow` rule or person; a `deny` rule still cancels it.
    #[serde(default, deserialize_with = "field::flag")]
    #[schema(nullable, default = false)]
    pub require_grant_only: bool,
    /// With `grant_scope` and `require_grant_only`: no live grant covering the call does
    /// not cancel it; it goes on to the window, the `allow` rules and a person (a live
    /// one still confirms it). For a caller that presents whatever grant a person may
    /// have given and asks otherwise, such as the MCP gateway.
    #[serde(default, deserialize_with = "field::flag")]
    #[schema(nullable, default = false)]
    pub grant_optional: bool,
    #[serde(deserialize_with = "field::args_schema")]
    #[schema(inline)]
    pub args_schema: Option<ArgsSchema>,
    #[serde(deserialize_with = "field::server")]
    #[schema(inline)]
    pub server: Option<ServerName>,
    #[serde(deserialize_with = "field::annotations")]
    #[schema(inline)]
    pub annotations: Option<Annotations>,
}

/// Parses and checks a create body for `agent`, naming the first field at fault.
pub fn parse_create(
    bytes: &[u8],
    config: &Config,
    agent: &Agent,
) -> Result<(NewConfirmation, WaitMode), ApiError> {
    let body: CreateConfirmationBody = read(&raw_object(bytes)?, "")?;
    let max = config.max_timeout_seconds;
    let timeout_seconds = body
        .timeout_seconds
        .unwrap_or(config.default_timeout_seconds);
    if !(timeout_seconds.is_finite() && timeout_seconds > 0.0 && timeout_seconds <= max) {
        return Err(ApiError::field(
            "timeout_seconds",
            format!("must be greater than 0 and at most {max}"),
        ));
    }
    // Millisecond precision is what storage keeps; below that a deadline means nothing.
    // Rounded to the microsecond before rounding up to the millisecond: `2.007 * 1000.0`
    // is 2007.0000000000002 in binary, and a plain ceil would make it 2008 ms.
    let micros = (timeout_seconds * 1e6).round() as u64;
    let timeout = Duration::from_millis(micros.div_ceil(1000).max(1));
    let callback_url = body
        .callback_url
        .map(|u| allowed_callback_url(&u.0, agent))
        .transpose()?;
    if body.require_grant_only && body.grant_scope.is_none() {
        return Err(ApiError::field(
            "require_grant_only",
            "needs grant_scope: the grant that would be enough",
        ));
    }
    if body.grant_optional && !body.require_grant_only {
        return Err(ApiError::field(
            "grant_optional",
            "needs require_grant_only (and grant_scope): an optional grant that is not enough by itself would change nothing",
        ));
    }
    let grant = body.grant_scope.map(|scope| GrantCheck {
        scope,
        sufficient: body.require_grant_only,
        optional: body.grant_optional,
    });
    let new = NewConfirmation {
        tool: body.tool,
        params: body.params.dict,
        params_json: body.params.json,
        owner_id: body.owner_id.unwrap_or_else(OwnerId::anonymous),
        template: body.template.map(|t| t.0),
        window_seconds: body
            .window_seconds
            .map_or(config.default_window_seconds, |w| w.0),
        allow_edit: body.allow_edit,
        timeout,
        route: body.route.map(|r| r.0),
        idempotency_key: body.idempotency_key,
        context: body.context.map(|c| c.0),
        callback_url,
        grant,
        args_schema: body.args_schema,
        server: body.server,
        annotations: body.annotations,
    };
    Ok((new, body.wait))
}

/// `POST /v1/confirmations`
#[utoipa::path(
    post,
    path = "/v1/confirmations",
    operation_id = "create_confirmation",
    tag = "confirmations",
    request_body = CreateConfirmationBody,
    responses(
        (status = 200, description = "The terminal record: decided (`wait: block`), a window hit, or an idempotent repeat of a decided request.",
            body = RecordView, links(
                ("get" = (operation_id = "get_confirmation", parameters(("id" = "$response.body#/id")))),
                ("withdraw" = (operation_id = "withdraw_confirmation", parameters(("id" = "$response.body#/id")))),
                ("events" = (operation_id = "confirmation_events", parameters(("id" = "$response.body#/id")))),
            )),
        (status = 202, description = "`wait: suspend`: the pending record.", body = RecordView, links(
                ("get" = (operation_id = "get_confirmation", parameters(("id" = "$response.body#/id")))),
                ("withdraw" = (operation_id = "withdraw_confirmation", parameters(("id" = "$response.body#/id")))),
                ("events" = (operation_id = "confirmation_events", parameters(("id" = "$response.body#/id")))),
            )),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name; `grant_scope: '…' does not cover tool '…'` when the scope presented does not cover the call's tool (nothing stored).", body = crate::api::error::ErrorBody),
        (status = 429, description = "`rate_limited`: over the agent's `requests_per_minute` or `max_pending`.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: shutting down, or the database is out of reach for now; retry with the same `idempotency_key`.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    // Before the body: a create waiting for its turn has not read it yet.
    admitted: Admitted,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    rate_limit(&state, &agent)?;
    let (new, wait) = parse_create(&bytes, state.service.config(), &agent)?;
    // The body is a slice of hyper's read buffer: held across a blocking wait, it would
    // keep that buffer (8 KiB) alive beside the connection's next one, per blocked agent.
    drop(bytes);
    super::trace::record_tool(new.tool.as_str());
    // Boxed: this future is allocated once per blocked agent for as long as it waits, and
    // its size is that of its largest state; creating is large and brief, waiting small
    // and long.
    let record = Box::pin(state.service.create(&agent, new)).await?;
    // Stored: the next create may be read while this one waits for its answer.
    drop(admitted);
    if record.is_terminal() {
        return Ok(respond(StatusCode::OK, &record));
    }
    match wait {
        WaitMode::Suspend => Ok(respond(StatusCode::ACCEPTED, &record)),
        WaitMode::Block => {
            let id = record.id.clone();
            drop(record);
            let done = Box::pin(state.service.wait(&agent, &id, None, &state.stop)).await?;
            Ok(respond(StatusCode::OK, &done))
        }
    }
}

/// `GET /v1/confirmations/{id}?wait=N`
#[utoipa::path(
    get,
    path = "/v1/confirmations/{id}",
    operation_id = "get_confirmation",
    tag = "confirmations",
    params(("id" = String, Path, description = "The confirmation's id (`cf_` and 32 hex digits)."), crate::api::openapi::LongPoll),
    responses(
        (status = 200, description = "The record (terminal, or still pending when the wait ran out).", body = RecordView),
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown id, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: `wait` is not a number of seconds in range.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: with `wait`, this agent already has `max_long_polls` long-polls waiting.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: shutting down during a long-poll, or the database is out of reach for now.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let wait = match query.get("wait") {
        None => None,
        Some(w) => match w.parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=MAX_LONG_POLL_SECONDS).contains(&s) => {
                Some(Duration::from_secs_f64(s))
            }
            _ => {
                return Err(ApiError::field(
                    "wait",
                    format!("must be a number of seconds from 0 to {MAX_LONG_POLL_SECONDS}"),
                ));
            }
        },
    };
    let record = match wait {
        Some(d) if !d.is_zero() => {
            let _slot = state
                .slots
                .take(&agent.name, Held::LongPoll, agent.max_long_polls)?;
            state
                .service
                .wait(&agent, &id, Some(d), &state.stop)
                .await?
        }
        _ => state.service.asked().get(&agent, &id).await?,
    };
    // What the window this request opened let through: counted on this read only, so a
    // window hit (the path that must stay fast) writes nothing for it.
    if record.window_until().is_some() {
        let used = state
            .service
            .roles()
            .runs
            .window_use(&record.id)
            .await
            .map_err(crate::service::ServiceError::from)?;
        let mut view = RecordView::from(&record);
        view.window_use = Some(WindowUseView {
            calls: used.calls,
            failed: used.failed,
        });
        return Ok((StatusCode::OK, Json(view)).into_response());
    }
    Ok(respond(StatusCode::OK, &record))
}

/// `DELETE /v1/confirmations/{id}`
#[utoipa::path(
    delete,
    path = "/v1/confirmations/{id}",
    operation_id = "withdraw_confirmation",
    tag = "confirmations",
    params(("id" = String, Path, description = "The confirmation's id (`cf_` and 32 hex digits).")),
    responses(
        (status = 200, description = "Withdrawn: the record, `cancelled` via `withdrawn`.", body = RecordView),
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown id, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`already_decided`: the record as decided is under `confirmation`.", body = crate::api::error::ConflictBody),
    ),
    security(("bearer" = [])),
)]
pub async fn withdraw(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let record = state.service.withdraw(&agent, &id).await?;
    Ok(respond(StatusCode::OK, &record))
}

/// `GET /v1/confirmations/{id}/events`: the request's audit events, oldest first.
#[utoipa::path(
    get,
    path = "/v1/confirmations/{id}/events",
    operation_id = "confirmation_events",
    tag = "confirmations",
    params(("id" = String, Path, description = "The confirmation's id (`cf_` and 32 hex digits).")),
    responses(
        (status = 200, description = "The request's audit events, oldest first.", body = crate::api::openapi::EventList),
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown id, or another agent's.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn events(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    // Any question's trail, interactions included (their record `id` is in their view).
    state.service.asked().owned(&agent, &id).await?;
    let events = state
        .service
        .roles()
        .audit
        .events_for(&id)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok((StatusCode::OK, Json(serde_json::json!({"events": events}))).into_response())
}
