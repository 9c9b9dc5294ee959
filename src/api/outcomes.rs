//! `POST /v1/confirmations/{id}/outcome`: what happened when the agent ran the call it
//! was allowed (issue 36). Only the agent that asked may report (another's is 404, as for
//! reads), only a confirmed call ran (409 otherwise), and one report counts: the same
//! report again is answered 200, a different one 409.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use super::AppState;
use super::confirmations::{parse_id, respond};
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::interactions::{object, text};
use crate::domain::execution::{MAX_REPORT_CHARS, Report};

/// The fields of the body.
pub const FIELDS: &[&str] = &["status", "summary", "error", "duration_ms"];

/// The longest `duration_ms` taken: a year. A larger one is a unit mistake (µs, ns).
pub const MAX_DURATION_MS: u64 = 366 * 24 * 3600 * 1000;

/// Reads the body into a [`Report`]; every refusal names its field.
fn parse_report(bytes: &[u8]) -> Result<Report, ApiError> {
    let body = object(bytes, FIELDS)?;
    let status = text(&body, "status", 32)?.ok_or_else(|| {
        ApiError::field(
            "status",
            "is required: \"executed\", \"failed\" or \"not_executed\"",
        )
    })?;
    let summary = text(&body, "summary", MAX_REPORT_CHARS)?;
    let error = text(&body, "error", MAX_REPORT_CHARS)?;
    let duration_ms = match body.get("duration_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(d) if d <= MAX_DURATION_MS => Some(d),
            _ => {
                return Err(ApiError::field(
                    "duration_ms",
                    format!("must be a whole number of milliseconds from 0 to {MAX_DURATION_MS}"),
                ));
            }
        },
    };
    Report::new(&status, summary, error, duration_ms).map_err(|e| ApiError::field(e.field, e.why))
}

/// `POST /v1/confirmations/{id}/outcome`
#[utoipa::path(
    post,
    path = "/v1/confirmations/{id}/outcome",
    operation_id = "report_outcome",
    tag = "confirmations",
    params(("id" = String, Path, description = "The confirmation's id (`cf_` and 32 hex digits).")),
    request_body = crate::api::openapi::OutcomeBody,
    responses(
        (status = 200, description = "Taken (or the same report again): the record, with `outcome`.", body = crate::api::record::RecordView),
        (status = 400, description = "`malformed_json`: the body is not JSON.", body = crate::api::error::ErrorBody),
        (status = 401, description = "`unauthorized`: missing or unknown bearer token.", body = crate::api::error::ErrorBody,
            headers(("WWW-Authenticate" = String))),
        (status = 404, description = "`not_found`: unknown id, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`conflict`: the confirmation is not `confirmed` (nothing ran), or a different report was taken; the record is under `confirmation`.", body = crate::api::error::ConflictBody),
        (status = 413, description = "`payload_too_large`: the body is over 64 KiB.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name.", body = crate::api::error::ErrorBody),
        (status = 503, description = "`unavailable`: the database is out of reach for now; retry (the same report is taken once).", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn report(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Path(id): Path<String>,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    let id = parse_id(&id)?;
    let report = parse_report(&bytes)?;
    let record = state.service.report_outcome(&agent, &id, report).await?;
    Ok(respond(StatusCode::OK, &record))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused_field(body: &str) -> String {
        match parse_report(body.as_bytes()) {
            Err(ApiError::InvalidField { field, .. }) => field,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn a_report_names_the_field_it_is_refused_for() {
        for (body, field) in [
            (r#"{}"#, "status"),
            (r#"{"status": "ran"}"#, "status"),
            (r#"{"status": "unknown"}"#, "status"),
            (r#"{"status": 1}"#, "status"),
            (r#"{"status": "executed", "error": "x"}"#, "error"),
            (
                r#"{"status": "executed", "duration_ms": -1}"#,
                "duration_ms",
            ),
            (
                r#"{"status": "executed", "duration_ms": 1.5}"#,
                "duration_ms",
            ),
            (
                r#"{"status": "executed", "duration_ms": "5"}"#,
                "duration_ms",
            ),
            (r#"{"status": "executed", "exit": 0}"#, "exit"),
            (r#"[]"#, "body"),
        ] {
            assert_eq!(refused_field(body), field, "{body}");
        }
        let long = format!(
            r#"{{"status": "executed", "summary": "{}"}}"#,
            "x".repeat(501)
        );
        assert_eq!(refused_field(&long), "summary");
        assert!(
            parse_report(br#"{"status": "failed", "error": "boom", "duration_ms": 0}"#).is_ok()
        );
        assert!(parse_report(br#"{"status": "not_executed", "summary": null}"#).is_ok());
    }
}
