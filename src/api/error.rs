//! The one error type of the HTTP API and its JSON body:
//! `{"error": {"code": "<snake_case>", "message": "<sentence>"}}`.
//!
//! Every failure is mapped here once; handlers return `Result<_, ApiError>` and never
//! build an error response by hand.

use axum::Json;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::{IntoResponses, ToSchema};

use super::record::{InteractionView, RecordView};
use crate::domain::limits::MAX_BODY_BYTES;
use crate::domain::question::Question;
use crate::service::ServiceError;
use crate::storage::StorageError;

#[derive(Debug)]
pub enum ApiError {
    /// 400: the body is not JSON at all.
    MalformedJson(String),
    /// 400: a body on the Telegram webhook route that is not an `Update`.
    NotAnUpdate(String),
    /// 401
    Unauthorized(&'static str),
    /// 403
    Forbidden(String),
    /// 404
    NotFound(String),
    /// 408: the request's body did not arrive in full within
    /// `server.body_read_timeout_seconds`; the connection is closed after the answer.
    BodyTimeout(std::time::Duration),
    /// 409, with the stored record.
    AlreadyDecided(Box<Question>),
    /// 409, with the stored interaction: it already ended.
    InteractionEnded(Box<Question>),
    /// 409, with the stored record: an outcome report it does not take (the call was not
    /// confirmed, or another report was taken); the message says which.
    RunReportRefused {
        message: String,
        record: Box<Question>,
    },
    /// 409: the request contradicts what is stored under the same key; the message starts
    /// with the field's name.
    Conflict { field: String, reason: String },
    /// 413
    PayloadTooLarge,
    /// 422: a field is invalid.
    InvalidField { field: String, reason: String },
    /// 422: edited parameters that do not fit the tool's schema, each field at fault.
    InvalidParameters(Vec<FieldError>),
    /// 429, with `Retry-After` in whole seconds.
    TooManyRequests {
        message: String,
        retry_after_secs: u64,
    },
    /// 429, with `Retry-After` in whole seconds: the agent already holds as many event
    /// streams or long-polls as it may (`max_streams`, `max_long_polls`).
    TooManyStreams {
        message: String,
        retry_after_secs: u64,
    },
    /// 502: Telegram refused the message or could not be reached.
    Undeliverable(String),
    /// 503
    Unavailable(String),
    /// 500: logged in full, reported without detail.
    Internal(String),
}

/// The body of every error response; the OpenAPI document is derived from it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// A sentence for humans; for `invalid_field` it starts with the field's name.
    pub message: String,
    /// For `invalid_parameters`: each parameter at fault (a dotted path such as
    /// `target.region`) and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<FieldError>>,
}

/// One parameter of an edit at fault (`invalid_parameters`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldError {
    /// The parameter, as a dotted path (`amount`, `target.region`, `tags[2]`); empty
    /// when the parameters as a whole are at fault.
    pub field: String,
    pub message: String,
}

/// What went wrong, stable for programs to match on (the message is not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    MalformedJson,
    Unauthorized,
    Forbidden,
    NotFound,
    /// The body did not arrive within `server.body_read_timeout_seconds`.
    RequestTimeout,
    AlreadyDecided,
    Conflict,
    PayloadTooLarge,
    InvalidField,
    /// Edited parameters that do not fit the tool's `args_schema`; `fields` names each.
    InvalidParameters,
    RateLimited,
    /// Over the agent's `max_streams` or `max_long_polls`.
    TooManyStreams,
    Undeliverable,
    Unavailable,
    Internal,
}

/// The 409 body: the error, and the record as it was decided.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConflictBody {
    pub error: ErrorDetail,
    pub confirmation: RecordView,
}

/// The 409 body of an interaction that already ended: the error, and the interaction as
/// it ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct InteractionConflictBody {
    pub error: ErrorDetail,
    pub interaction: InteractionView,
}

/// The refusal every `/v1` operation documents the same way: no agent's token.
#[derive(IntoResponses)]
pub enum Unauthenticated {
    #[response(
        status = 401,
        description = "`unauthorized`: missing or unknown bearer token.",
        headers(("WWW-Authenticate" = String))
    )]
    Unauthorized(ErrorBody),
}

/// The refusals of every operation that reads a body, before it reads a field.
#[derive(IntoResponses)]
pub enum BodyRefused {
    #[response(status = 400, description = "`malformed_json`: the body is not JSON.")]
    MalformedJson(ErrorBody),
    #[response(
        status = 413,
        description = "`payload_too_large`: the body is over 64 KiB."
    )]
    PayloadTooLarge(ErrorBody),
}

impl ApiError {
    pub fn field(field: impl Into<String>, reason: impl Into<String>) -> Self {
        ApiError::InvalidField {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A service error on an `/v1/interactions` route: the usual mapping, in an
    /// interaction's words, and a 409 that carries the interaction as it ended.
    pub fn interaction(e: ServiceError) -> Self {
        match e {
            ServiceError::NotFound => {
                ApiError::NotFound("no interaction with this interaction_id".into())
            }
            ServiceError::LookAlikeTool(why) => ApiError::field("call.tool", why),
            ServiceError::AlreadyDecided(r) => ApiError::InteractionEnded(r),
            ServiceError::ShuttingDown => ApiError::Unavailable(
                "the service is shutting down; retry (the same interaction_id finds the same \
                 interaction)"
                    .into(),
            ),
            e => e.into(),
        }
    }
}

fn body(status: StatusCode, code: ErrorCode, message: String) -> Response {
    let error = ErrorDetail {
        code,
        message,
        fields: None,
    };
    (status, Json(ErrorBody { error })).into_response()
}

/// A 429 with `Retry-After` in whole seconds.
fn too_many(code: ErrorCode, message: String, retry_after_secs: u64) -> Response {
    let mut r = body(StatusCode::TOO_MANY_REQUESTS, code, message);
    r.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(retry_after_secs),
    );
    r
}

/// A 401, with the `WWW-Authenticate` challenge.
fn unauthorized(message: &str) -> Response {
    let mut r = body(
        StatusCode::UNAUTHORIZED,
        ErrorCode::Unauthorized,
        message.to_owned(),
    );
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    r
}

/// A 408; the connection is closed after it.
fn body_timeout(limit: std::time::Duration) -> Response {
    let mut r = body(
        StatusCode::REQUEST_TIMEOUT,
        ErrorCode::RequestTimeout,
        format!(
            "the request body did not arrive within {} s \
             (server.body_read_timeout_seconds); the connection is closed",
            limit.as_secs_f64()
        ),
    );
    r.headers_mut().insert(
        header::CONNECTION,
        header::HeaderValue::from_static("close"),
    );
    r
}

/// A 409 that carries the record as stored (under `confirmation`).
fn conflict_with_record(code: ErrorCode, message: String, record: &Question) -> Response {
    let error = ErrorDetail {
        code,
        message,
        fields: None,
    };
    let confirmation = RecordView::from(record);
    (
        StatusCode::CONFLICT,
        Json(ConflictBody {
            error,
            confirmation,
        }),
    )
        .into_response()
}

/// The 409 of an interaction that already ended, with the interaction as it ended.
fn interaction_ended(r: &Question) -> Response {
    let error = ErrorDetail {
        code: ErrorCode::AlreadyDecided,
        message: format!("the interaction is already {}", r.public_status()),
        fields: None,
    };
    let interaction = InteractionView::from(r);
    (
        StatusCode::CONFLICT,
        Json(InteractionConflictBody { error, interaction }),
    )
        .into_response()
}

/// The 422 of an edit that does not fit the tool's schema, each field at fault.
fn invalid_parameters(fields: Vec<FieldError>) -> Response {
    let message = fields
        .iter()
        .map(|f| match f.field.as_str() {
            "" => f.message.clone(),
            name => format!("{name}: {}", f.message),
        })
        .collect::<Vec<_>>()
        .join("; ");
    let error = ErrorDetail {
        code: ErrorCode::InvalidParameters,
        message: format!("parameters: {message}; nothing was decided"),
        fields: Some(fields),
    };
    (StatusCode::UNPROCESSABLE_ENTITY, Json(ErrorBody { error })).into_response()
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::MalformedJson(m) => body(
                StatusCode::BAD_REQUEST,
                ErrorCode::MalformedJson,
                format!("the body is not valid JSON: {m}"),
            ),
            ApiError::NotAnUpdate(m) => body(
                StatusCode::BAD_REQUEST,
                ErrorCode::MalformedJson,
                format!("the body is not a Telegram Update: {m}"),
            ),
            ApiError::Unauthorized(m) => unauthorized(m),
            ApiError::Forbidden(m) => body(StatusCode::FORBIDDEN, ErrorCode::Forbidden, m),
            ApiError::NotFound(m) => body(StatusCode::NOT_FOUND, ErrorCode::NotFound, m),
            ApiError::BodyTimeout(limit) => body_timeout(limit),
            ApiError::AlreadyDecided(r) => conflict_with_record(
                ErrorCode::AlreadyDecided,
                format!("the confirmation is already {}", r.status.as_str()),
                &r,
            ),
            ApiError::InteractionEnded(r) => interaction_ended(&r),
            ApiError::RunReportRefused { message, record } => {
                conflict_with_record(ErrorCode::Conflict, message, &record)
            }
            ApiError::Conflict { field, reason } => body(
                StatusCode::CONFLICT,
                ErrorCode::Conflict,
                format!("{field}: {reason}"),
            ),
            ApiError::PayloadTooLarge => body(
                StatusCode::PAYLOAD_TOO_LARGE,
                ErrorCode::PayloadTooLarge,
                format!("the body is larger than {MAX_BODY_BYTES} bytes"),
            ),
            ApiError::InvalidField { field, reason } => body(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::InvalidField,
                format!("{field}: {reason}"),
            ),
            ApiError::InvalidParameters(fields) => invalid_parameters(fields),
            ApiError::TooManyRequests {
                message,
                retry_after_secs,
            } => too_many(ErrorCode::RateLimited, message, retry_after_secs),
            ApiError::TooManyStreams {
                message,
                retry_after_secs,
            } => too_many(ErrorCode::TooManyStreams, message, retry_after_secs),
            ApiError::Undeliverable(m) => {
                tracing::warn!(reason = %m, "Telegram did not take a message");
                body(StatusCode::BAD_GATEWAY, ErrorCode::Undeliverable, m)
            }
            ApiError::Unavailable(m) => {
                body(StatusCode::SERVICE_UNAVAILABLE, ErrorCode::Unavailable, m)
            }
            ApiError::Internal(detail) => {
                tracing::error!(%detail, "internal error");
                body(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ErrorCode::Internal,
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
                "was already used for a different request (tool, owner_id, params, server or annotations differ)",
            ),
            ServiceError::ShuttingDown => ApiError::Unavailable(e.to_string()),
            ServiceError::TooManyPending(max) => ApiError::TooManyRequests {
                message: format!(
                    "this agent already has {max} pending requests (its max_pending); wait for some to end"
                ),
                retry_after_secs: 5,
            },
            ServiceError::UnknownRecipient(name) => ApiError::field(
                "recipient",
                format!(
                    "'{name}' is not a configured person ([people]); add them to the \
                     configuration or pass a route"
                ),
            ),
            ServiceError::InteractionMismatch(_) => ApiError::Conflict {
                field: "interaction.interaction_id".into(),
                reason: "already names a different interaction of this agent (the question, \
                         interaction_type or grant terms differ)"
                    .into(),
            },
            ServiceError::NobodyMayAnswer(why) => ApiError::field("interaction.target_humans", why),
            ServiceError::Undeliverable(_) => ApiError::Undeliverable(e.to_string()),
            ServiceError::Paced {
                message,
                retry_after_secs,
            } => ApiError::TooManyRequests {
                message,
                retry_after_secs,
            },
            ServiceError::GrantRefused { field, reason } => ApiError::Conflict { field, reason },
            ServiceError::ScopeNotCovering(why) => ApiError::field("grant_scope", why),
            ServiceError::InvalidGrant { field, reason } => ApiError::field(field, reason),
            ServiceError::RunReportRefused { why, record } => ApiError::RunReportRefused {
                message: why,
                record,
            },
            ServiceError::QuestionChanged(record) => ApiError::RunReportRefused {
                message: "args_hash: the question is not the call the page showed (it changed \
                          since): reload it and decide again"
                    .into(),
                record,
            },
            ServiceError::NotEditable(why) => ApiError::field("parameters", why),
            ServiceError::LookAlikeTool(why) => ApiError::field("tool", why),
            ServiceError::InvalidEdit(fields) => ApiError::InvalidParameters(
                fields
                    .into_iter()
                    .map(|f| FieldError {
                        field: f.field,
                        message: f.message,
                    })
                    .collect(),
            ),
            ServiceError::NotInConsole(kind) => ApiError::field(
                "action",
                format!("a {kind} question is answered in the chat, not in the console"),
            ),
            ServiceError::Storage(s) => s.into(),
        }
    }
}

impl From<StorageError> for ApiError {
    /// A database that is briefly out of reach (down, restarting, every connection busy,
    /// a lock held too long) is a 503 the agent may retry, with the detail logged; any
    /// other storage error is a 500. Either way nothing was decided.
    fn from(e: StorageError) -> Self {
        if e.is_unavailable() {
            tracing::warn!(error = %e, "the database is unavailable");
            ApiError::Unavailable(
                "the database is unavailable right now; retry (the same idempotency_key finds \
                 the same request)"
                    .into(),
            )
        } else {
            ApiError::Internal(e.to_string())
        }
    }
}
