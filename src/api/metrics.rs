//! `GET /metrics`: the Prometheus exposition, behind an optional bearer token.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{Extensions, HeaderMap};
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use super::extract::bearer_token;
use crate::service::now;

/// `GET /metrics`: every metric in OpenMetrics text. With `[metrics] token_env`
/// configured it needs `Authorization: Bearer <that token>`; without, it is open.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "service",
    responses(
        (status = 200, description = "The metrics, in OpenMetrics text (`application/openmetrics-text; version=1.0.0`).",
            content_type = "application/openmetrics-text", body = String),
        (status = 401, description = "`unauthorized`: a metrics token is configured and the request does not carry it.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 503, description = "`unavailable`: the database does not answer, so the stored-state gauges cannot be read.", body = crate::api::error::ErrorBody),
    ),
    security((), ("metrics_bearer" = [])),
)]
pub async fn serve(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: Extensions,
) -> Result<Response, ApiError> {
    let config = state.service.config();
    if !config.metrics_token_accepted(bearer_token(&headers)) {
        return Err(ApiError::Unauthorized(
            "GET /metrics needs the header Authorization: Bearer <the token named by metrics.token_env>",
        ));
    }
    // A scraper holding the token keeps its connection in a flood; an open endpoint
    // vouches for no one.
    if config.metrics_token.is_some() {
        super::serve::mark_authenticated(&extensions);
    }
    // A scrape that cannot read the stored state fails rather than report stale gauges;
    // Prometheus then shows the target down, as /healthz would.
    let read = async {
        // Also sets the configuration gauges to the live replicas' as they are now.
        state.service.agreement().config_report().await?;
        state.service.roles().administration.gauges().await
    };
    let gauges = read.await.map_err(|e| {
        tracing::error!(error = %e, "metrics: database does not answer");
        ApiError::Unavailable("the database does not answer".into())
    })?;
    let agents = config.agents.iter().map(|a| a.name.as_str());
    let text = state.service.metrics().render(&gauges, agents, now());
    Ok(([(CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text).into_response())
}
