//! `/v1/confirmations`: create, read (with long-poll), withdraw.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use super::AppState;
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::limits::Held;
use super::record::{RecordView, WindowUseView};
use crate::config::{Agent, Config};
use crate::domain::edit::ArgsSchema;
use crate::domain::grant::Scope;
use crate::domain::ids::{ConfirmationId, IdempotencyKey, OwnerId, ToolName};
use crate::domain::outbox::{Url, callback_path_refusal};
use crate::domain::python::value::PyDict;
use crate::domain::question::Question;
use crate::domain::{python, text};
use crate::service::{GrantCheck, NewConfirmation};

/// The limits a confirmation request is held to (their one home is
/// [`crate::domain::limits`]), under the names this module has always exported.
pub use crate::domain::limits::{
    MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_LONG_POLL_SECONDS, MAX_PARAM_KEYS,
    MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS,
};

/// `block`: answer with the final decision; `suspend`: answer at once with the pending
/// record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    Block,
    Suspend,
}

const FIELDS: &[&str] = &[
    "tool",
    "params",
    "owner_id",
    "template",
    "window_seconds",
    "allow_edit",
    "timeout_seconds",
    "wait",
    "route",
    "idempotency_key",
    "context",
    "callback_url",
    "grant_scope",
    "require_grant_only",
    "args_schema",
];

/// A JSON object's members as raw JSON, read as sent.
pub type RawObject = BTreeMap<String, Box<RawValue>>;

/// One field's raw JSON, typed; `null` counts as absent.
fn field<T: DeserializeOwned>(
    body: &RawObject,
    name: &str,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    field_at(body, "", name, expected)
}

/// [`field`] of an object found at `at` (`""` at the body's root, `"call."` inside
/// `call`), which errors name.
fn field_at<T: DeserializeOwned>(
    body: &RawObject,
    at: &str,
    name: &str,
    expected: &str,
) -> Result<Option<T>, ApiError> {
    match body.get(name) {
        None => Ok(None),
        Some(raw) if raw.get() == "null" => Ok(None),
        Some(raw) => serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|_| ApiError::field(format!("{at}{name}"), format!("must be {expected}"))),
    }
}

/// The parts of a tool call, as `POST /v1/confirmations` and an interaction's `call`
/// both carry them.
pub struct CallFields {
    pub tool: ToolName,
    pub params: PyDict,
    /// The `params` object exactly as the agent sent it.
    pub params_json: String,
    pub owner_id: OwnerId,
    /// `None` when absent: the caller's default applies.
    pub window_seconds: Option<u64>,
    /// The tool's argument schema, checked as a JSON Schema.
    pub args_schema: Option<ArgsSchema>,
}

/// Reads `tool`, `params`, `owner_id`, `window_seconds` and `args_schema` of an object found at `at`
/// (see [`field_at`]), naming the first field at fault.
pub fn call_fields(body: &RawObject, at: &str) -> Result<CallFields, ApiError> {
    let named = |name: &str| format!("{at}{name}");
    let tool: String = field_at(body, at, "tool", "a string")?
        .ok_or_else(|| ApiError::field(named("tool"), "is required"))?;
    let tool = ToolName::parse(&tool).map_err(|e| ApiError::field(named("tool"), e.0))?;

    let raw_params = body
        .get("params")
        .filter(|r| r.get() != "null")
        .ok_or_else(|| ApiError::field(named("params"), "is required (a JSON object)"))?;
    let params = python::json::parse_object(raw_params.get())
        .map_err(|e| ApiError::field(named("params"), format!("must be a JSON object: {e}")))?;
    let keys = params.count_keys();
    if keys > MAX_PARAM_KEYS {
        return Err(ApiError::field(
            named("params"),
            format!("has {keys} keys; the limit is {MAX_PARAM_KEYS}"),
        ));
    }

    let owner_id = match field_at::<String>(body, at, "owner_id", "a string")? {
        Some(o) => OwnerId::parse(&o).map_err(|e| ApiError::field(named("owner_id"), e.0))?,
        None => OwnerId::anonymous(),
    };
    // Read as a number so `600.0` (what Python's json.dumps writes for a float that
    // holds a whole number) counts as the integer it is, as JSON Schema says.
    let window_seconds = match field_at::<f64>(body, at, "window_seconds", "an integer >= 0")? {
        None => None,
        Some(w) if w.is_finite() && w >= 0.0 && w.fract() == 0.0 => {
            if w > MAX_WINDOW_SECONDS as f64 {
                return Err(ApiError::field(
                    named("window_seconds"),
                    format!("must be at most {MAX_WINDOW_SECONDS} (366 days)"),
                ));
            }
            Some(w as u64)
        }
        Some(_) => {
            return Err(ApiError::field(
                named("window_seconds"),
                "must be an integer >= 0",
            ));
        }
    };
    let args_schema = match body.get("args_schema").filter(|r| r.get() != "null") {
        None => None,
        Some(raw) => Some(
            ArgsSchema::parse(raw.get()).map_err(|e| ApiError::field(named("args_schema"), e.0))?,
        ),
    };
    Ok(CallFields {
        tool,
        params,
        params_json: raw_params.get().to_owned(),
        owner_id,
        window_seconds,
        args_schema,
    })
}

fn bounded_text(value: Option<String>, name: &str, max: usize) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if v.chars().count() > max => Err(ApiError::field(
            name,
            format!("must be at most {max} characters"),
        )),
        v => Ok(v),
    }
}

/// Free text shown to the operator: other invisible characters are shown as escapes, NUL
/// and ESC are refused (see [`text::has_nul_or_esc`]).
pub(super) fn free_text(value: Option<String>, name: &str) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if text::has_nul_or_esc(&v) => Err(ApiError::field(
            name,
            "must not contain NUL or ESC characters",
        )),
        v => Ok(v),
    }
}

/// An optional string field of at most `max` characters that the operator is shown.
fn shown_text(
    body: &BTreeMap<String, Box<RawValue>>,
    name: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    free_text(
        bounded_text(field(body, name, "a string")?, name, max)?,
        name,
    )
}

/// The 422 for a body that repeats an object key: the field is the path of the object
/// that repeats it, from the body's root (`params.to: repeats key "iban"`; `body` for the
/// body itself). Readers disagree on which value a repeated key has (serde_json and
/// Python keep the last, others the first), so what the operator is shown could differ
/// from what the tool gets: such a body is refused rather than read either way.
pub(super) fn repeated_key_error(r: &python::json::RepeatedKey) -> ApiError {
    let path = r.path();
    let field = if path.is_empty() {
        "body".to_owned()
    } else {
        path
    };
    ApiError::field(field, r.reason())
}

/// Parses and checks a create body for `agent`, naming the first field at fault.
pub fn parse_create(
    bytes: &[u8],
    config: &Config,
    agent: &Agent,
) -> Result<(NewConfirmation, WaitMode), ApiError> {
    let body: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(bytes).map_err(|e| {
        if e.is_data() {
            ApiError::field("body", "must be a JSON object")
        } else {
            ApiError::MalformedJson(e.to_string())
        }
    })?;
    // A body the strict reader refuses is left to the checks below: every value in it is
    // read strictly (`params` by the same reader), and they name the field at fault.
    if let Ok(Ok(Some(r))) = std::str::from_utf8(bytes).map(python::json::repeated_key) {
        return Err(repeated_key_error(&r));
    }
    if let Some(unknown) = body.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::field(
            unknown.as_str(),
            format!("is not a known field (known: {})", FIELDS.join(", ")),
        ));
    }

    let CallFields {
        tool,
        params,
        params_json,
        owner_id,
        window_seconds,
        args_schema,
    } = call_fields(&body, "")?;
    let window_seconds = window_seconds.unwrap_or(config.default_window_seconds);
    let template = shown_text(&body, "template", MAX_TEMPLATE_CHARS)?;
    let allow_edit = field(&body, "allow_edit", "true or false")?.unwrap_or(false);
    let max = config.max_timeout_seconds;
    let timeout_seconds = field::<f64>(&body, "timeout_seconds", "a number")?
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
    let wait = match field::<String>(&body, "wait", "\"block\" or \"suspend\"")?.as_deref() {
        None | Some("block") => WaitMode::Block,
        Some("suspend") => WaitMode::Suspend,
        Some(_) => return Err(ApiError::field("wait", "must be \"block\" or \"suspend\"")),
    };
    let route = bounded_text(field(&body, "route", "a string")?, "route", MAX_ROUTE_CHARS)?;
    let idempotency_key = field::<String>(&body, "idempotency_key", "a string")?
        .map(|k| IdempotencyKey::parse(&k).map_err(|e| ApiError::field("idempotency_key", e.0)))
        .transpose()?;
    let context = shown_text(&body, "context", MAX_CONTEXT_CHARS)?;

    let callback_url = bounded_text(
        field(&body, "callback_url", "a string")?,
        "callback_url",
        MAX_CALLBACK_URL_CHARS,
    )?
    .map(|u| allowed_callback_url(&u, agent))
    .transpose()?;

    let grant = field::<String>(&body, "grant_scope", "a string such as \"tool:deploy\"")?
        .map(|s| Scope::parse(&s).map_err(|e| ApiError::field("grant_scope", e.0)))
        .transpose()?;
    let sufficient = field(&body, "require_grant_only", "true or false")?.unwrap_or(false);
    if sufficient && grant.is_none() {
        return Err(ApiError::field(
            "require_grant_only",
            "needs grant_scope: the grant that would be enough",
        ));
    }
    let grant = grant.map(|scope| GrantCheck { scope, sufficient });

    Ok((
        NewConfirmation {
            tool,
            params,
            params_json,
            owner_id,
            template,
            window_seconds,
            allow_edit,
            timeout,
            route,
            idempotency_key,
            context,
            callback_url,
            grant,
            args_schema,
        },
        wait,
    ))
}

pub(super) fn respond(status: StatusCode, r: &Question) -> Response {
    (status, Json(RecordView::from(r))).into_response()
}

/// `POST /v1/confirmations`
#[utoipa::path(
    post,
    path = "/v1/confirmations",
    operation_id = "create_confirmation",
    tag = "confirmations",
    request_body = crate::api::openapi::CreateConfirmationBody,
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
        (status = 400, description = "`malformed_json`: the body is not JSON.", body = crate::api::error::ErrorBody),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB.", body = crate::api::error::ErrorBody),
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

/// A `callback_url` as stored: an http(s) URL under one of the agent's prefixes.
pub(super) fn allowed_callback_url(u: &str, agent: &Agent) -> Result<String, ApiError> {
    let url = Url::parse(u)
        .ok()
        .filter(|p| matches!(p.scheme(), "http" | "https"))
        .ok_or_else(|| ApiError::field("callback_url", "must be an http(s) URL"))?;
    if let Some(reason) = callback_path_refusal(u, &url) {
        return Err(ApiError::field("callback_url", reason));
    }
    if agent.allows_callback(&url) {
        Ok(url.to_string())
    } else {
        Err(ApiError::field(
            "callback_url",
            "is not under any of this agent's callback_url_prefixes",
        ))
    }
}

/// Takes a token from the agent's request budget (every request that asks or notifies).
pub(super) fn rate_limit(state: &AppState, agent: &Agent) -> Result<(), ApiError> {
    state
        .rate
        .check(&agent.name, agent.requests_per_minute)
        .map_err(|wait| ApiError::TooManyRequests {
            message: format!(
                "more than {} requests per minute from this agent (its requests_per_minute)",
                agent.requests_per_minute
            ),
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
        })
}

pub(super) fn parse_id(id: &str) -> Result<ConfirmationId, ApiError> {
    // A malformed id cannot name anything we stored.
    ConfirmationId::parse(id).map_err(|_| ApiError::NotFound("no confirmation with this id".into()))
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
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
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
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
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
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
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
