//! The agents' HTTP API (axum): routes, authentication, and the one error format.

pub mod admission;
pub mod body;
pub mod call;
pub mod confirmations;
pub mod console;
pub mod error;
pub mod events;
pub mod extract;
pub mod field;
pub mod grants;
pub mod interactions;
pub mod limits;
pub mod listing;
pub mod mcp_pins;
pub mod metrics;
pub mod openapi;
pub mod question;
pub mod record;
pub mod run_reports;
pub mod serve;
pub mod trace;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{Extensions, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::domain::limits::MAX_BODY_BYTES;
use crate::service::Service;
use error::ApiError;

#[derive(Clone)]
pub struct AppState {
    pub service: Arc<Service>,
    /// Fired at shutdown: blocked agents get a 503 they can retry, not a false outcome,
    /// and event streams end.
    pub stop: CancellationToken,
    pub rate: Arc<limits::AgentRateLimiter>,
    /// Each agent's open event streams and long-polls, against its `max_streams` and
    /// `max_long_polls`.
    pub slots: Arc<limits::AgentSlots>,
    /// The queue new questions wait in before they are read and stored.
    pub admission: Arc<admission::Queue>,
}

pub fn router(state: AppState) -> Router {
    let console = state.service.config().mini_app.is_some();
    console::routes(Router::new(), console)
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi::serve))
        .route("/metrics", get(metrics::serve))
        .route(
            "/v1/confirmations",
            post(confirmations::create).get(listing::confirmations),
        )
        .route(
            "/v1/confirmations/{id}",
            get(confirmations::get).delete(confirmations::withdraw),
        )
        .route("/v1/confirmations/{id}/events", get(confirmations::events))
        .route("/v1/confirmations/{id}/outcome", post(run_reports::report))
        .route("/v1/interactions", post(interactions::create))
        .route(
            "/v1/interactions/{interaction_id}",
            get(interactions::get).delete(interactions::withdraw),
        )
        .route("/v1/notifications", post(interactions::notify))
        .route("/v1/grants", post(grants::create).get(grants::list))
        .route("/v1/grants/check", get(grants::check))
        .route("/v1/grants/{id}", delete(grants::revoke))
        .route("/v1/windows", get(listing::windows))
        .route("/v1/events", get(events::stream))
        .route("/v1/mcp/servers/{server}/tools", post(mcp_pins::record))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(trace::request_span))
        .with_state(state)
}

/// `GET /healthz`: 200 when the database answers, with what the live replicas'
/// configurations say (`config`). Replicas whose configurations differ are still
/// healthy: every one refuses what any of them forbids, so the mismatch is reported,
/// not a reason to take a replica out of the load balancer.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "service",
    responses(
        (status = 200, description = "The database answers. `config` says whether the live replicas run the same configuration (as far as who may decide goes).", body = openapi::Health),
        (status = 503, description = "The database does not answer.", body = error::ErrorBody),
    ),
)]
async fn healthz(State(state): State<AppState>, extensions: Extensions) -> Response {
    // No credentials, but counted as authenticated by the connection pool (see
    // `serve`): it reads no body and holds its connection for one database ping (and,
    // with several replicas, one read of their configurations), and load balancers
    // decide by it whether the service lives, so a flood must not cut it.
    serve::mark_authenticated(&extensions);
    let checked = async {
        state.service.roles().administration.ping().await?;
        state.service.agreement().config_report().await
    };
    match checked.await {
        Ok(config) => (
            StatusCode::OK,
            axum::Json(json!({
                "status": "ok",
                "version": crate::release::VERSION,
                "commit": crate::release::COMMIT,
                "config": config,
            })),
        )
            .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check: database does not answer");
            ApiError::Unavailable("the database does not answer".into()).into_response()
        }
    }
}

async fn not_found() -> ApiError {
    ApiError::NotFound("no such route".into())
}

async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(json!({"error": {"code": "method_not_allowed", "message": "this method is not allowed on this route"}})),
    )
        .into_response()
}
