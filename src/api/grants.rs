//! `/v1/grants`: AI-Parrot's `GrantGuard` grants, durable. Ask for one (the route's
//! approvers are asked in Telegram, shown the terms; their yes stores it), or present a
//! grant question answered yes to get the grant it stored; check whether a call's scope
//! is covered; list the agent's live grants; revoke one. An agent sees only its own
//! grants: another's are 404.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::interactions::{object, text};
use super::limits::Held;
use super::record::{DecidedByView, InteractionView};
use crate::domain::grant::{Grant, GrantSource, Scope};
use crate::domain::ids::{GrantId, OwnerId};
use crate::domain::limits::{MAX_ROUTE_CHARS, MAX_WINDOW_SECONDS};
use crate::domain::question::{Operator, rfc3339};
use crate::service::GrantRequest;

/// The fields of `POST /v1/grants`.
pub const FIELDS: &[&str] = &[
    "owner_id",
    "scope",
    "window_seconds",
    "route",
    "reason",
    "interaction_id",
    "wait",
    "timeout_seconds",
];

/// AI-Parrot's `GrantConfig.window_seconds` default: 15 minutes.
pub const DEFAULT_GRANT_SECONDS: u64 = crate::domain::grant::DEFAULT_WINDOW_SECONDS;
/// Longest `reason` an agent may give.
pub const MAX_REASON_CHARS: usize = 500;

/// A grant as agents see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantView {
    /// `gr_` and 32 lowercase hex digits.
    pub grant_id: String,
    pub agent: String,
    pub owner_id: String,
    /// `tool:deploy`, or `tool:*` for every tool.
    pub scope: String,
    /// The route whose approvers granted it (they list and revoke it with `/grants`).
    pub route: String,
    #[schema(required = true)]
    pub reason: Option<String>,
    /// The person who said yes.
    pub granted_by: DecidedByView,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime, required = true)]
    pub revoked_at: Option<String>,
    /// Who revoked it: an operator, or null when its agent did (or it was not revoked).
    #[schema(required = true)]
    pub revoked_by: Option<DecidedByView>,
    /// The grant question it came from (its `interaction_id`).
    pub interaction_id: Option<String>,
    /// Whether it lets calls through now.
    pub live: bool,
}

fn operator_view(op: &Operator) -> DecidedByView {
    DecidedByView {
        id: op.id,
        username: op.username.clone(),
        name: op.name.clone(),
    }
}

impl GrantView {
    fn of(g: &Grant) -> GrantView {
        GrantView {
            grant_id: g.grant_id.to_string(),
            agent: g.agent.clone(),
            owner_id: g.owner_id.to_string(),
            scope: g.scope.to_string(),
            route: g.route.clone(),
            reason: g.reason.clone(),
            granted_by: operator_view(&g.granted_by),
            created_at: rfc3339(g.created_at),
            expires_at: rfc3339(g.expires_at),
            revoked_at: g.revoked_at.map(rfc3339),
            revoked_by: g.revoked_by.as_ref().map(operator_view),
            interaction_id: match &g.source {
                GrantSource::Interaction { interaction_id } => Some(interaction_id.clone()),
                GrantSource::Asked { .. } => None,
            },
            live: g.is_live(crate::service::now()),
        }
    }
}

/// What `POST /v1/grants` answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantAnswer {
    /// `granted`: stored (`grant`); `pending`: the question waits for an answer
    /// (`wait: "suspend"`: a yes stores the grant; present its `interaction_id` to get it);
    /// `refused`: a person said no; `timeout`: nobody answered in time.
    pub status: &'static str,
    #[schema(required = true)]
    pub grant: Option<GrantView>,
    /// The approval the grant came from, or asks for it.
    pub interaction_id: String,
    /// The question as asked in Telegram; null when an approval was presented.
    #[schema(required = true)]
    pub question: Option<InteractionView>,
}

/// `{allowed, grant}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantCheckView {
    pub allowed: bool,
    /// The live grant that covers the scope; null when none does.
    #[schema(required = true)]
    pub grant: Option<GrantView>,
}

/// `{grants}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct GrantList {
    pub grants: Vec<GrantView>,
}

/// A parsed `POST /v1/grants` body.
struct CreateGrant {
    request: GrantRequest,
    interaction_id: Option<String>,
    suspend: bool,
    timeout_seconds: f64,
}

fn parse_create(
    bytes: &[u8],
    default_timeout: f64,
    max_timeout: f64,
) -> Result<CreateGrant, ApiError> {
    let body = object(bytes, FIELDS)?;
    let owner_id = text(&body, "owner_id", OwnerId::MAX_CHARS)?.ok_or_else(|| {
        ApiError::field("owner_id", "is required: on whose behalf the agent acts")
    })?;
    let owner_id = OwnerId::parse(&owner_id).map_err(|e| ApiError::field("owner_id", e.0))?;
    let scope = text(&body, "scope", Scope::MAX_CHARS)?.ok_or_else(|| {
        ApiError::field(
            "scope",
            "is required: such as \"tool:deploy\", or \"tool:*\" for every tool",
        )
    })?;
    let scope = Scope::parse(&scope).map_err(|e| ApiError::field("scope", e.0))?;
    let window_seconds = match body.get("window_seconds") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(w) if (1..=MAX_WINDOW_SECONDS).contains(&w) => Some(w),
            _ => {
                return Err(ApiError::field(
                    "window_seconds",
                    format!("must be a whole number of seconds from 1 to {MAX_WINDOW_SECONDS}"),
                ));
            }
        },
    };
    let route = text(&body, "route", MAX_ROUTE_CHARS)?;
    let reason = text(&body, "reason", MAX_REASON_CHARS)?
        .map(|r| super::confirmations::free_text(Some(r), "reason"))
        .transpose()?
        .flatten();
    let interaction_id = text(
        &body,
        "interaction_id",
        crate::domain::interaction::MAX_INTERACTION_ID_CHARS,
    )?;
    let suspend = match text(&body, "wait", 16)?.as_deref() {
        None | Some("block") => false,
        Some("suspend") => true,
        Some(_) => return Err(ApiError::field("wait", "must be \"block\" or \"suspend\"")),
    };
    let timeout_seconds = match body.get("timeout_seconds") {
        None | Some(Value::Null) => default_timeout,
        Some(v) => match v.as_f64() {
            Some(t) if t.is_finite() && t > 0.0 && t <= max_timeout => t,
            _ => {
                return Err(ApiError::field(
                    "timeout_seconds",
                    format!("must be greater than 0 and at most {max_timeout}"),
                ));
            }
        },
    };
    if interaction_id.is_some()
        && (body.contains_key("wait") || body.contains_key("timeout_seconds"))
    {
        return Err(ApiError::field(
            "interaction_id",
            "presents an approval already answered: wait and timeout_seconds ask a new one",
        ));
    }
    Ok(CreateGrant {
        request: GrantRequest {
            owner_id,
            scope,
            window_seconds,
            route,
            reason,
        },
        interaction_id,
        suspend,
        timeout_seconds,
    })
}

fn answer(status: StatusCode, a: GrantAnswer) -> Response {
    (status, Json(a)).into_response()
}

/// `POST /v1/grants`
#[utoipa::path(
    post,
    path = "/v1/grants",
    operation_id = "create_grant",
    tag = "grants",
    request_body = crate::api::openapi::CreateGrantBody,
    responses(
        (status = 200, description = "Asked and ended without a grant: `refused` (a person said no) or `timeout`.", body = GrantAnswer),
        (status = 201, description = "`granted`: the grant a person's yes stored (asked and approved; or the grant question presented, on its terms).", body = GrantAnswer),
        (status = 202, description = "`pending` (`wait: \"suspend\"`): asked; a person's yes stores the grant (present its `interaction_id` to get it).", body = GrantAnswer),
        (status = 400, description = "`malformed_json`: the body is not JSON.", body = crate::api::error::ErrorBody),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 404, description = "`not_found`: `interaction_id` names no interaction of this agent.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`conflict`: the interaction presented is not a grant question, is not answered yet, was not answered yes, or its grant has ended; or the body names another scope, owner, window or route than the question's terms (the message names the field and what the person approved).", body = crate::api::error::ErrorBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`rate_limited`: over the agent's `requests_per_minute`; or `too_many_pending`.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: shutting down while waiting, or the database is out of reach for now.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    super::confirmations::rate_limit(&state, &agent)?;
    let config = state.service.config();
    let c = parse_create(
        &bytes,
        config.default_timeout_seconds,
        config.max_timeout_seconds,
    )?;
    if let Some(id) = &c.interaction_id {
        let g = state
            .service
            .grants()
            .present(&agent, id, &c.request)
            .await
            .map_err(ApiError::interaction)?;
        return Ok(answer(
            StatusCode::CREATED,
            GrantAnswer {
                status: "granted",
                grant: Some(GrantView::of(&g)),
                interaction_id: id.clone(),
                question: None,
            },
        ));
    }
    let asked = state
        .service
        .ask_grant(&agent, &c.request, c.timeout_seconds)
        .await?;
    let interaction_id = asked.interaction_id().to_owned();
    if c.suspend {
        return Ok(answer(
            StatusCode::ACCEPTED,
            GrantAnswer {
                status: "pending",
                grant: None,
                interaction_id,
                question: Some(InteractionView::from(&asked)),
            },
        ));
    }
    let _slot = state
        .slots
        .take(&agent.name, Held::LongPoll, agent.max_long_polls)?;
    let ended = state
        .service
        .wait(&agent, &asked.id, None, &state.stop)
        .await?;
    // The yes stored the grant with itself: found, never made here.
    let Some(g) = state.service.grants().of_question(&ended).await? else {
        let status = if ended.status == crate::domain::question::Status::Timeout
            || ended.via == Some(crate::domain::question::Via::Timeout)
        {
            "timeout"
        } else {
            "refused"
        };
        return Ok(answer(
            StatusCode::OK,
            GrantAnswer {
                status,
                grant: None,
                interaction_id,
                question: Some(InteractionView::from(&ended)),
            },
        ));
    };
    Ok(answer(
        StatusCode::CREATED,
        GrantAnswer {
            status: "granted",
            grant: Some(GrantView::of(&g)),
            interaction_id,
            question: Some(InteractionView::from(&ended)),
        },
    ))
}

/// `GET /v1/grants/check?owner_id=…&scope=…`
#[utoipa::path(
    get,
    path = "/v1/grants/check",
    operation_id = "check_grant",
    tag = "grants",
    params(
        ("owner_id" = String, Query, description = "On whose behalf the agent acts."),
        ("scope" = String, Query, description = "The scope a call needs (`tool:deploy`)."),
    ),
    responses(
        (status = 200, description = "Whether a live grant of this agent covers it, and which.", body = GrantCheckView),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 422, description = "`invalid_field`: `owner_id` or `scope` is missing or malformed.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn check(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let owner = query
        .get("owner_id")
        .ok_or_else(|| ApiError::field("owner_id", "is required"))?;
    let owner = OwnerId::parse(owner).map_err(|e| ApiError::field("owner_id", e.0))?;
    let scope = query
        .get("scope")
        .ok_or_else(|| ApiError::field("scope", "is required"))?;
    let scope = Scope::parse(scope).map_err(|e| ApiError::field("scope", e.0))?;
    let grant = state.service.grants().check(&agent, &owner, &scope).await?;
    Ok(Json(GrantCheckView {
        allowed: grant.is_some(),
        grant: grant.as_ref().map(GrantView::of),
    })
    .into_response())
}

/// `GET /v1/grants`
#[utoipa::path(
    get,
    path = "/v1/grants",
    operation_id = "list_grants",
    tag = "grants",
    responses(
        (status = 200, description = "This agent's live grants, soonest expiry first.", body = GrantList),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
) -> Result<Response, ApiError> {
    let grants = state.service.grants().of_agent(&agent).await?;
    Ok(Json(GrantList {
        grants: grants.iter().map(GrantView::of).collect(),
    })
    .into_response())
}

/// `DELETE /v1/grants/{id}`
#[utoipa::path(
    delete,
    path = "/v1/grants/{id}",
    operation_id = "revoke_grant",
    tag = "grants",
    params(("id" = String, Path, description = "The grant's id (`gr_` and 32 hex digits).")),
    responses(
        (status = 200, description = "Revoked: the grant, with `revoked_at`.", body = GrantView),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 404, description = "`not_found`: unknown id, another agent's, or no longer live (revoked or expired).", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn revoke(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound("no live grant with this id".into());
    let id = GrantId::parse(&id).map_err(|_| not_found())?;
    let g = state
        .service
        .grants()
        .revoke_own(&agent, &id)
        .await
        .map_err(|e| match e {
            crate::service::ServiceError::NotFound => not_found(),
            e => e.into(),
        })?;
    Ok(Json(GrantView::of(&g)).into_response())
}
