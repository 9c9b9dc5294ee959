//! The question a `/v1/confirmations/{id}` path names, and the record answered for it:
//! shared by the confirmation and outcome handlers.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::record::RecordView;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;

/// The id of the path; a malformed one cannot name anything we stored: 404.
pub fn parse_id(id: &str) -> Result<QuestionId, ApiError> {
    QuestionId::parse(id).map_err(|_| ApiError::NotFound("no confirmation with this id".into()))
}

/// The record as the confirmation routes answer it.
pub fn respond(status: StatusCode, r: &Question) -> Response {
    (status, Json(RecordView::from(r))).into_response()
}
