//! The one error type of the HTTP API and its JSON body:
//! `{"error": {"code": "<snake_case>", "message": "<sentence>"}}`.
//!
//! Every failure is mapped here once; handlers return `Result<_, ApiError>` and never
//! build an error response by hand.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::record::RecordView;
use crate::domain::confirmation::Confirmation;
use crate::service::ServiceError;

#[derive(Debug)]
pub enum ApiError {
    /// 400: the body is not JSON at all.
    MalformedJson(String),
    /// 401
    Unauthorized(&'static str),
    /// 403
    Forbidden(String),
    /// 404
    NotFound(String),
    /// 409, with the stored record.
    AlreadyDecided(Box<Confirmation>),
    /// 413
    PayloadTooLarge,
    /// 422: a field is invalid.
    InvalidField { field: String, reason: String },
    /// 429, with `Retry-After` in whole seconds.
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// 503
    Unavailable(String),
    /// 500: logged in full, reported without detail.
    Internal(String),
}

impl ApiError {
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ApiError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

fn body(status: StatusCode, code: &str, message: String) -> Response {
    (
        status,
        Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::MalformedJson(m) => body(
                StatusCode::BAD_REQUEST,
                "malformed_json",
                format!("the body is not valid JSON: {m}"),
            ),
            ApiError::Unauthorized(m) => {
                let mut r = body(StatusCode::UNAUTHORIZED, "unauthorized", m.to_owned());
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    header::HeaderValue::from_static("Bearer"),
                );
                r
            }
            ApiError::Forbidden(m) => body(StatusCode::FORBIDDEN, "forbidden", m),
            ApiError::NotFound(m) => body(StatusCode::NOT_FOUND, "not_found", m),
            ApiError::AlreadyDecided(r) => {
                let view = RecordView::from(&*r);
                (
                    StatusCode::CONFLICT,
                    Json(json!({
                        "error": {
                            "code": "already_decided",
                            "message": format!("the confirmation is already {}", r.status.as_str()),
                        },
                        "confirmation": view,
                    })),
                )
                    .into_response()
            }
            ApiError::PayloadTooLarge => body(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the body is larger than {} bytes", super::MAX_BODY_BYTES),
            ),
            ApiError::InvalidField { field, reason } => body(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_field",
                format!("{field}: {reason}"),
            ),
            ApiError::TooManyRequests {
                message,
                retry_after_secs,
            } => {
                let mut r = body(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
                r.headers_mut().insert(
                    header::RETRY_AFTER,
                    header::HeaderValue::from(retry_after_secs),
                );
                r
            }
            ApiError::Unavailable(m) => body(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m),
            ApiError::Internal(detail) => {
                tracing::error!(%detail, "internal error");
                body(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the service log".to_owned(),
                )
            }
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        match e {
            ServiceError::RouteNotAllowed(_) => ApiError::Forbidden(e.to_string()),
            ServiceError::NotFound => ApiError::NotFound(e.to_string()),
            ServiceError::AlreadyDecided(r) => ApiError::AlreadyDecided(r),
            ServiceError::IdempotencyMismatch => ApiError::field(
                "idempotency_key",
                "was already used for a different request (tool, owner_id or params differ)",
            ),
            ServiceError::ShuttingDown => ApiError::Unavailable(e.to_string()),
            ServiceError::TooManyPending(max) => ApiError::TooManyRequests {
                message: format!(
                    "this agent already has {max} pending requests (its max_pending); wait for some to end"
                ),
                retry_after_secs: 5,
            },
            ServiceError::Storage(s) => ApiError::Internal(s.to_string()),
        }
    }
}
