//! The operator's console, a Telegram Mini App (issue 37; `[mini_app]`): the page at
//! `GET /app` (plain HTML, CSS and JavaScript embedded in the binary) and its API under
//! `/app/api/`, for Telegram users rather than agents. Every API request carries
//! `Authorization: tma <initData>`, the launch data Telegram signed with the bot's token
//! ([`crate::domain::launch`]); the user it names sees only what they could answer by
//! tapping in a chat, and everything else is 404.
//!
//! Launch data is genuine for anyone who opens the bot's Mini App, so a signature proves
//! who is asking, not that they are anyone here. A user who approves no route and is no
//! configured person is a stranger: answered 404 from the headers, before any body is
//! read, and never counted authenticated by the connection pool (`super::serve`), so a
//! stranger's slow requests hold no connection that `/healthz`, agents or Telegram's
//! deliveries need. A known user holds at most [`CONSOLE_IN_FLIGHT`] requests at once.

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::Router;
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use secrecy::ExposeSecret;
use serde_json::value::RawValue;

use super::AppState;
use super::body::{object, text};
use super::error::ApiError;
use super::extract::Body;
use super::limits::{Held, Slot};
use crate::domain::ids::QuestionId;
use crate::domain::launch::{self, LaunchError};
use crate::domain::limits::MAX_PARAM_KEYS;
use crate::domain::python;
use crate::domain::question::Operator;
use crate::service::{
    CONSOLE_PAGE_MAX, ConsoleAction, EditedParams, NotAnAction, ServiceError, now,
};
use crate::storage::EndedCursor;

mod view;

use view::{
    EventView, GrantView, QuestionDetail, QuestionList, QuestionView, RouteStatsView, WindowView,
};

/// The page, its script and its stylesheet, embedded: no build step, no CDN but
/// Telegram's own script.
const PAGE: &str = include_str!("page.html");
const SCRIPT: &str = include_str!("console.js");
const STYLE: &str = include_str!("console.css");

/// Scripts only from here and Telegram (its `telegram-web-app.js`: the theme, the Main
/// and Back Buttons, haptics); styles only from the stylesheet beside the script (no
/// inline style, whatever a value on the page holds); nothing the page shows can run as
/// code.
const CSP: &str = "default-src 'self'; script-src 'self' https://telegram.org; \
                   style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'";

/// The console's routes, when `[mini_app]` is on (else none: `/app` is 404).
pub fn routes(router: Router<AppState>, enabled: bool) -> Router<AppState> {
    if !enabled {
        return router;
    }
    router
        .route("/app", get(page))
        .route("/app/console.js", get(script))
        .route("/app/console.css", get(stylesheet))
        .route("/app/api/questions", get(list))
        .route("/app/api/questions/{id}", get(detail))
        .route("/app/api/questions/{id}/decision", post(decision))
        .route("/app/api/ended", get(ended))
        .route("/app/api/windows", get(windows))
        .route("/app/api/windows/{id}/revoke", post(revoke_window))
        .route("/app/api/grants", get(grants))
        .route("/app/api/stats", get(stats))
        .route("/app/api/grants/{id}/revoke", post(revoke_grant))
}

fn static_file(content_type: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /app`: the page. It holds no secret and no data: what it shows it fetches with
/// the launch data Telegram passed it.
async fn page() -> Response {
    static_file("text/html; charset=utf-8", PAGE)
}

async fn script() -> Response {
    static_file("text/javascript; charset=utf-8", SCRIPT)
}

async fn stylesheet() -> Response {
    static_file("text/css; charset=utf-8", STYLE)
}

/// How many console requests one user may have in flight at once: the page sends at
/// most four together, so this leaves room for a second tab, and an approver's slow
/// bodies hold at most this many of the connections no one may close
/// (`server.max_connections`).
pub const CONSOLE_IN_FLIGHT: u32 = 8;

/// The Telegram user the request's launch data names, checked: an approver of some route
/// or a configured person, with one of their [`CONSOLE_IN_FLIGHT`] requests in flight
/// (the [`Slot`], given back when the handler that holds it ends). Extracted from the
/// headers alone, before the handler's body extractor (axum runs the `FromRequestParts`
/// arguments first, in order, and the one body extractor last).
pub struct ConsoleUser(pub Operator, pub Slot);

impl FromRequestParts<AppState> for ConsoleUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let config = state.service.config();
        let Some(app) = &config.mini_app else {
            return Err(ApiError::NotFound("no such route".into()));
        };
        let data = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|h| h.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("tma"))
            .map(|(_, d)| d.trim())
            .unwrap_or("");
        let checked = launch::check(data, config.bot_token.expose_secret(), now(), app.max_age)
            .map_err(|e| {
                ApiError::Unauthorized(match e {
                    LaunchError::Missing => {
                        "missing header Authorization: tma <launch data>: open the console from Telegram"
                    }
                    LaunchError::Malformed(_) => {
                        "the launch data is not Telegram's: open the console from Telegram"
                    }
                    LaunchError::BadSignature => {
                        "the launch data's signature does not match this bot: open the console from Telegram again"
                    }
                    LaunchError::Stale { .. } => {
                        "the launch data is too old: open the console from Telegram again"
                    }
                })
            })?;
        let u = checked.user;
        tracing::Span::current().record("agent", format!("console:{}", u.id).as_str());
        // Genuine, but perhaps a stranger's: the console does not exist for them. This
        // replica's configuration, without I/O: nothing is awaited before this answer.
        if !config.may_open_console(u.id) {
            return Err(ApiError::NotFound("no such route".into()));
        }
        let in_flight = state.slots.take(
            &format!("telegram:{}", u.id),
            Held::Console,
            CONSOLE_IN_FLIGHT,
        )?;
        super::serve::mark_authenticated(&parts.extensions);
        let name = match &u.last_name {
            Some(last) if !last.is_empty() => format!("{} {last}", u.first_name),
            _ => u.first_name.clone(),
        };
        Ok(ConsoleUser(
            Operator {
                id: u.id,
                username: u.username,
                name,
            },
            in_flight,
        ))
    }
}

/// Whether `q`'s route asks the console to confirm Approve twice.
fn confirm_twice(state: &AppState, q: &crate::domain::question::Question) -> bool {
    state
        .service
        .config()
        .route(&q.route)
        .is_some_and(|r| r.console_confirm)
}

fn question_id(id: &str) -> Result<QuestionId, ApiError> {
    QuestionId::parse(id).map_err(|_| ApiError::NotFound("no such question".into()))
}

/// `GET /app/api/questions`: the pending questions this user may answer, soonest
/// deadline first.
async fn list(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
) -> Result<Response, ApiError> {
    let questions = state.service.console().pending(&user).await?;
    Ok(Json(QuestionList {
        questions: questions
            .iter()
            .map(|q| QuestionView::of(q, confirm_twice(&state, q)))
            .collect(),
    })
    .into_response())
}

/// How many ended questions a page holds when the page does not say.
const ENDED_PAGE: u32 = 20;

/// `GET /app/api/ended?before=<cursor>&limit=<1 to 50>`: the ended questions this user
/// could have answered, the latest decision first, `{"questions": [...], "next":
/// "<cursor>" | null}`; `next` is what `before` takes for the following page (opaque to
/// the page). A query that is not one of these is a 422 naming the field.
async fn ended(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let before = match query.get("before").map(String::as_str) {
        None | Some("") => None,
        Some(c) => Some(EndedCursor::parse(c).ok_or_else(|| {
            ApiError::field("before", "is not a cursor this list gave (its \"next\")")
        })?),
    };
    let limit = match query.get("limit") {
        None => ENDED_PAGE,
        Some(l) => l
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=CONSOLE_PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::field(
                    "limit",
                    format!("must be a whole number from 1 to {CONSOLE_PAGE_MAX}"),
                )
            })?,
    };
    let (questions, next) = state.service.console().ended(&user, before, limit).await?;
    let questions: Vec<QuestionView> = questions
        .iter()
        .map(|q| QuestionView::of(q, confirm_twice(&state, q)))
        .collect();
    Ok(Json(serde_json::json!({
        "questions": questions,
        "next": next.map(|c| c.to_string()),
    }))
    .into_response())
}

/// `GET /app/api/questions/{id}`: one question this user may answer, with everything
/// the agent sent and its audit trail so far; 404 for any other.
async fn detail(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = question_id(&id)?;
    let (record, events) =
        state
            .service
            .console()
            .question(&user, &id)
            .await
            .map_err(|e| match e {
                ServiceError::NotFound => ApiError::NotFound("no such question".into()),
                e => e.into(),
            })?;
    Ok(Json(QuestionDetail {
        question: QuestionView::of(&record, confirm_twice(&state, &record)),
        events: events.into_iter().map(EventView::of).collect(),
    })
    .into_response())
}

/// `POST /app/api/questions/{id}/decision`: `{"action": "approve" | "approve_window" |
/// "cancel" | "deny", "reason": "...", "args_hash": "...", "parameters": {...}}`. Decides
/// as a tap would, only on the call the page showed (`args_hash`); 409 when it changed
/// or ended. `parameters` (with an approve): the call as the operator edited it, checked
/// against the tool's schema (422 naming each field at fault, nothing decided).
async fn decision(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Path(id): Path<String>,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    let id = question_id(&id)?;
    let body = object(&bytes, &["action", "reason", "args_hash", "parameters"])?;
    let args_hash = text(&body, "args_hash", 64)?.ok_or_else(|| {
        ApiError::field(
            "args_hash",
            "is required: the args hash of the call the page showed",
        )
    })?;
    let reason = text(&body, "reason", 2000)?;
    let action = text(&body, "action", 32)?;
    let action =
        ConsoleAction::named(action.as_deref(), reason.as_deref()).map_err(|e| match e {
            NotAnAction::NoReason => ApiError::field("reason", "is required to deny: say why"),
            NotAnAction::Unknown => ApiError::field(
                "action",
                "must be \"approve\", \"approve_window\", \"cancel\" or \"deny\"",
            ),
        })?;
    let edited = edited_parameters(&bytes)?;
    if edited.is_some() && !action.approves() {
        return Err(ApiError::field(
            "parameters",
            "go only with \"approve\" or \"approve_window\": a refused call runs with nothing",
        ));
    }
    let record = state
        .service
        .console()
        .decide(&user, &id, action, &args_hash, edited)
        .await
        .map_err(|e| match e {
            ServiceError::NotFound => ApiError::NotFound("no such question".into()),
            e => e.into(),
        })?;
    Ok(Json(QuestionView::of(&record, confirm_twice(&state, &record))).into_response())
}

/// The decision's `parameters`, read from the raw body so they are kept exactly as sent.
fn edited_parameters(bytes: &[u8]) -> Result<Option<EditedParams>, ApiError> {
    let raw: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(bytes)
        .map_err(|_| ApiError::field("body", "must be a JSON object"))?;
    let Some(p) = raw.get("parameters").filter(|r| r.get() != "null") else {
        return Ok(None);
    };
    let params = python::json::parse_object(p.get())
        .map_err(|e| ApiError::field("parameters", format!("must be a JSON object: {e}")))?;
    let keys = params.count_keys();
    if keys > MAX_PARAM_KEYS {
        return Err(ApiError::field(
            "parameters",
            format!("has {keys} keys; the limit is {MAX_PARAM_KEYS}"),
        ));
    }
    let value = serde_json::from_str(p.get())
        .map_err(|e| ApiError::field("parameters", format!("must be a JSON object: {e}")))?;
    Ok(Some(EditedParams {
        params,
        params_json: p.get().to_owned(),
        value,
    }))
}

/// `GET /app/api/windows`: the live windows of the routes this user approves, soonest to
/// close first, with what each let through.
async fn windows(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
) -> Result<Response, ApiError> {
    let live = state.service.console().live_windows(&user).await?;
    let windows: Vec<WindowView> = live.iter().map(|(w, u)| WindowView::of(w, *u)).collect();
    Ok(Json(serde_json::json!({ "windows": windows })).into_response())
}

/// `POST /app/api/windows/{id}/revoke` (`id`: the request that opened it): closes it, as
/// `/revoke` in its route's chat would; 404 when it is not live or not this user's to
/// close.
async fn revoke_window(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id =
        QuestionId::parse(&id).map_err(|_| ApiError::NotFound("no such live window".into()))?;
    let revoked = state
        .service
        .console()
        .revoke_window(&user, &id)
        .await
        .map_err(|e| match e {
            ServiceError::NotFound => ApiError::NotFound("no such live window".into()),
            e => e.into(),
        })?;
    Ok(Json(serde_json::json!({
        "revoked": WindowView::of(&revoked, Default::default())
    }))
    .into_response())
}

/// `GET /app/api/stats[?days=N]`: who decided what and how fast in the routes this user
/// approves, as `/stats` says it in their chats (7 days by default, at most 90).
async fn stats(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let days = match query.get("days") {
        None => 7,
        Some(d) => match d.parse::<u32>() {
            Ok(n) if (1..=crate::service::MAX_STATS_DAYS).contains(&n) => n,
            _ => {
                return Err(ApiError::field(
                    "days",
                    format!(
                        "must be a whole number of days from 1 to {}",
                        crate::service::MAX_STATS_DAYS
                    ),
                ));
            }
        },
    };
    let routes = state.service.console().stats(&user, days).await?;
    let routes: Vec<RouteStatsView> = routes
        .iter()
        .map(|(route, s)| RouteStatsView::of(route, s))
        .collect();
    Ok(Json(serde_json::json!({ "days": days, "routes": routes })).into_response())
}

/// `GET /app/api/grants`: the live grants of the routes this user approves.
async fn grants(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
) -> Result<Response, ApiError> {
    let live = state.service.console().live_grants(&user).await?;
    let grants: Vec<GrantView> = live.iter().map(GrantView::of).collect();
    Ok(Json(serde_json::json!({ "grants": grants })).into_response())
}

/// `POST /app/api/grants/{id}/revoke`: revokes it, as its Revoke button would; 404 when
/// it is not live or not this user's to revoke.
async fn revoke_grant(
    State(state): State<AppState>,
    ConsoleUser(user, _in_flight): ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = crate::domain::ids::GrantId::parse(&id)
        .map_err(|_| ApiError::NotFound("no such live grant".into()))?;
    let revoked = state
        .service
        .console()
        .revoke_grant(&user, &id)
        .await
        .map_err(|e| match e {
            ServiceError::NotFound => ApiError::NotFound("no such live grant".into()),
            e => e.into(),
        })?;
    Ok(Json(serde_json::json!({ "revoked": GrantView::of(&revoked) })).into_response())
}
