//! `POST /v1/confirmations/{id}/outcome`: what happened when the agent ran the call it
//! was allowed (issue 36). Only the agent that asked may report (another's is 404, as for
//! reads), only a confirmed call ran (409 otherwise), and one report counts: the same
//! report again is answered 200, a different one 409.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde::de::{Deserializer, Error};
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::AppState;
use super::body::{read, strict_object};
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::field::{ReportText, value};
use super::question::{parse_id, respond};
use crate::domain::run_report::{NewRunReport, REPORTED_STATUSES};

/// The longest `duration_ms` taken: a year. A larger one is a unit mistake (µs, ns).
pub const MAX_DURATION_MS: u64 = 366 * 24 * 3600 * 1000;

/// What happened when the agent ran the confirmed call. `null` counts as absent; unknown
/// fields and repeated keys are refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutcomeBody {
    /// `executed`: the call ran; `failed`: it ran, or began to, and failed;
    /// `not_executed`: it was not run after all; `unknown`: the reporter cannot tell
    /// whether it ran (an MCP gateway whose upstream went away mid-call). A later report
    /// replaces an `unknown`.
    #[schema(inline)]
    pub status: RunStatus,
    /// What came of it, in a line, shown under the decision in every message of the
    /// question (invisible characters as visible escapes).
    #[schema(inline)]
    pub summary: Option<ReportText>,
    /// Why it failed (`failed`), or why nobody knows whether it ran (`unknown`); only
    /// with those two.
    #[schema(inline)]
    pub error: Option<ReportText>,
    /// How long the run took, in milliseconds.
    #[schema(inline)]
    pub duration_ms: Option<DurationMs>,
}

/// `status`: required; which words it may be, [`NewRunReport::new`] says.
pub struct RunStatus(String);

impl<'de> Deserialize<'de> for RunStatus {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let status: Option<String> = value(d, "a string")?;
        let status = status
            .map(|s| super::field::bounded(s, 32, false))
            .transpose()?
            .ok_or_else(|| D::Error::custom(format!("is required: {REPORTED_STATUSES}")))?;
        Ok(RunStatus(status))
    }
}

impl ToSchema for RunStatus {}

impl PartialSchema for RunStatus {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["executed", "failed", "not_executed", "unknown"]))
            .into()
    }
}

/// `duration_ms`: whole milliseconds up to [`MAX_DURATION_MS`].
pub struct DurationMs(u64);

impl<'de> Deserialize<'de> for DurationMs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let words = format!("a whole number of milliseconds from 0 to {MAX_DURATION_MS}");
        match value(d, &words)? {
            d if d <= MAX_DURATION_MS => Ok(DurationMs(d)),
            _ => Err(D::Error::custom(format!("must be {words}"))),
        }
    }
}

impl ToSchema for DurationMs {}

impl PartialSchema for DurationMs {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(MAX_DURATION_MS))
            .into()
    }
}

/// Reads the body into a [`NewRunReport`]; every refusal names its field (public for
/// the instruction counts' bench, which takes reports as the handler does).
pub fn parse_report(bytes: &[u8]) -> Result<NewRunReport, ApiError> {
    let body: OutcomeBody = read(&strict_object(bytes)?, "")?;
    NewRunReport::new(
        &body.status.0,
        body.summary.map(|s| s.0),
        body.error.map(|e| e.0),
        body.duration_ms.map(|d| d.0),
    )
    .map_err(|e| ApiError::field(e.field, e.why))
}

/// `POST /v1/confirmations/{id}/outcome`
#[utoipa::path(
    post,
    path = "/v1/confirmations/{id}/outcome",
    operation_id = "report_outcome",
    tag = "confirmations",
    params(("id" = String, Path, description = "The confirmation's id (`cf_` and 32 hex digits).")),
    request_body = OutcomeBody,
    responses(
        (status = 200, description = "Taken (or the same report again): the record, with `outcome`.", body = crate::api::record::RecordView),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown id, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`conflict`: the confirmation is not `confirmed` (nothing ran), or a different report was taken; the record is under `confirmation`.", body = crate::api::error::ConflictBody),
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
    let record = state.service.report_run(&agent, &id, report).await?;
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
        assert!(parse_report(br#"{"status": "unknown", "error": "upstream exited"}"#).is_ok());
        assert!(parse_report(br#"{"status": "unknown"}"#).is_ok());
    }
}
