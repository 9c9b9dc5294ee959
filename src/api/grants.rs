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
use serde::de::{Deserializer, Error};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::AppState;
use super::body::{read, strict_object};
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::field::{Route, WaitMode, bounded, text_field, value};
use super::limits::{Held, rate_limit};
use super::record::{DecidedByView, InteractionView};
use crate::domain::grant::{Grant, GrantSource, Scope};
use crate::domain::ids::{GrantId, OwnerId};
use crate::domain::interaction::MAX_INTERACTION_ID_CHARS;
use crate::domain::limits::MAX_WINDOW_SECONDS;
use crate::domain::question::{Operator, rfc3339};
use crate::service::GrantRequest;

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
    pub fn of(g: &Grant) -> GrantView {
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

/// A grant to ask for, or an approval to present. `null` counts as absent; unknown
/// fields and repeated keys are refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGrantBody {
    /// On whose behalf the agent acts.
    #[serde(deserialize_with = "owner")]
    #[schema(inline)]
    pub owner_id: OwnerId,
    /// What the grant covers: `tool:deploy`, or `tool:*` for every tool.
    #[serde(deserialize_with = "scope")]
    #[schema(inline)]
    pub scope: Scope,
    /// How long the grant lasts from the yes; cut to the route's `max_grant_seconds` (8 h
    /// by default) when asked. Presenting: the window the question was asked with (either
    /// the one approved or the one asked for), or nothing.
    #[schema(inline)]
    pub window_seconds: Option<GrantWindow>,
    /// Where to ask (one of this agent's routes). Default: the agent's `default_route`.
    #[schema(inline)]
    pub route: Option<Route>,
    /// Why the agent asks, shown to the approvers: no NUL or ESC characters.
    #[schema(inline)]
    pub reason: Option<Reason>,
    /// Present a grant question instead of asking: an interaction of this agent asked
    /// with `grant` terms (or by this endpoint) that a person answered yes. Answers the
    /// grant their yes stored; `scope`, `owner_id` and (when given) `window_seconds` must
    /// be the question's terms (409 naming the one that differs).
    #[schema(inline)]
    pub interaction_id: Option<PresentedId>,
    /// `block`: answer once the question ended; `suspend`: answer 202 at once (not with
    /// `interaction_id`).
    #[serde(default, deserialize_with = "wait")]
    #[schema(inline, nullable, default = "block")]
    pub wait: WaitMode,
    /// How long the question waits for an answer (not with `interaction_id`). Default:
    /// the configuration's `default_timeout_seconds`.
    #[schema(value_type = Option<f64>, exclusive_minimum = 0)]
    pub timeout_seconds: Option<Value>,
}

text_field!(
    /// Why the agent asks for a grant.
    Reason, min = None, max = MAX_REASON_CHARS, shown = true
);
text_field!(
    /// The `interaction_id` of a grant question presented.
    PresentedId, min = Some(1), max = MAX_INTERACTION_ID_CHARS, shown = false
);

/// `owner_id` of a grant: required.
fn owner<'de, D: Deserializer<'de>>(d: D) -> Result<OwnerId, D::Error> {
    let owner: Option<String> = value(d, "a string")?;
    let owner = owner
        .map(|o| bounded(o, OwnerId::MAX_CHARS, false))
        .transpose()?
        .ok_or_else(|| D::Error::custom("is required: on whose behalf the agent acts"))?;
    OwnerId::parse(&owner).map_err(|e| D::Error::custom(e.0))
}

/// `scope` of a grant: required.
fn scope<'de, D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
    let scope: Option<String> = value(d, "a string")?;
    let scope = scope
        .map(|s| bounded(s, Scope::MAX_CHARS, false))
        .transpose()?
        .ok_or_else(|| {
            D::Error::custom("is required: such as \"tool:deploy\", or \"tool:*\" for every tool")
        })?;
    Scope::parse(&scope).map_err(|e| D::Error::custom(e.0))
}

/// `wait` of a grant: a string (of at most 16 characters), `"block"` or `"suspend"`.
fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<WaitMode, D::Error> {
    let wait: Option<String> = value(d, "a string")?;
    match wait
        .map(|w| bounded::<D::Error>(w, 16, false))
        .transpose()?
        .as_deref()
    {
        None | Some("block") => Ok(WaitMode::Block),
        Some("suspend") => Ok(WaitMode::Suspend),
        Some(_) => Err(D::Error::custom("must be \"block\" or \"suspend\"")),
    }
}

/// `window_seconds` of a grant: whole seconds from 1 to [`MAX_WINDOW_SECONDS`].
pub struct GrantWindow(u64);

impl<'de> Deserialize<'de> for GrantWindow {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let words = format!("a whole number of seconds from 1 to {MAX_WINDOW_SECONDS}");
        match value(d, &words)? {
            w if (1..=MAX_WINDOW_SECONDS).contains(&w) => Ok(GrantWindow(w)),
            _ => Err(D::Error::custom(format!("must be {words}"))),
        }
    }
}

impl ToSchema for GrantWindow {}

impl PartialSchema for GrantWindow {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(1))
            .maximum(Some(MAX_WINDOW_SECONDS))
            .default(Some(DEFAULT_GRANT_SECONDS.into()))
            .into()
    }
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
    let raw = strict_object(bytes)?;
    let body: CreateGrantBody = read(&raw, "")?;
    let timeout_seconds = match body.timeout_seconds {
        None => default_timeout,
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
    // Present, even as null: the agent meant to ask a new question.
    if body.interaction_id.is_some()
        && (raw.contains_key("wait") || raw.contains_key("timeout_seconds"))
    {
        return Err(ApiError::field(
            "interaction_id",
            "presents an approval already answered: wait and timeout_seconds ask a new one",
        ));
    }
    Ok(CreateGrant {
        request: GrantRequest {
            owner_id: body.owner_id,
            scope: body.scope,
            window_seconds: body.window_seconds.map(|w| w.0),
            route: body.route.map(|r| r.0),
            reason: body.reason.map(|r| r.0),
        },
        interaction_id: body.interaction_id.map(|i| i.0),
        suspend: body.wait == WaitMode::Suspend,
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
    request_body = CreateGrantBody,
    responses(
        (status = 200, description = "Asked and ended without a grant: `refused` (a person said no) or `timeout`.", body = GrantAnswer),
        (status = 201, description = "`granted`: the grant a person's yes stored (asked and approved; or the grant question presented, on its terms).", body = GrantAnswer),
        (status = 202, description = "`pending` (`wait: \"suspend\"`): asked; a person's yes stores the grant (present its `interaction_id` to get it).", body = GrantAnswer),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 404, description = "`not_found`: `interaction_id` names no interaction of this agent.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`conflict`: the interaction presented is not a grant question, is not answered yet, was not answered yes, or its grant has ended; or the body names another scope, owner, window or route than the question's terms (the message names the field and what the person approved).", body = crate::api::error::ErrorBody),
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
    rate_limit(&state, &agent)?;
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
        crate::api::error::Unauthenticated,
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
        crate::api::error::Unauthenticated,
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
        crate::api::error::Unauthenticated,
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
