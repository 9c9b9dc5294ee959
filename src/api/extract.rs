//! Extractors that turn hostile requests into typed values or an [`ApiError`]: the
//! bearer-token agent, and a body whose rejections speak our error format.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use super::AppState;
use super::error::ApiError;
use crate::config::Agent;

/// The agent the request's bearer token belongs to.
pub struct AuthAgent(pub Arc<Agent>);

impl FromRequestParts<AppState> for AuthAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or(ApiError::Unauthorized(
                "missing header Authorization: Bearer <token>",
            ))?;
        let token = header
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim())
            .filter(|t| !t.is_empty())
            .ok_or(ApiError::Unauthorized(
                "the Authorization header must be: Bearer <token>",
            ))?;
        state
            .service
            .config()
            .agent_for_token(token)
            .map(|agent| {
                // The request's span (see `api::trace`) names the agent from here on.
                tracing::Span::current().record("agent", agent.name.as_str());
                // Its connection is no longer one a stranger's may displace.
                super::serve::mark_authenticated(&parts.extensions);
                AuthAgent(agent)
            })
            .ok_or(ApiError::Unauthorized("unknown token"))
    }
}

/// The token of an `Authorization: Bearer <token>` header, if the request has one.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim())
        .filter(|t| !t.is_empty())
}

/// The raw body, within the size limit.
pub struct Body(pub Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(Body(b)),
            Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::PayloadTooLarge),
            Err(r) => Err(ApiError::MalformedJson(r.body_text())),
        }
    }
}
