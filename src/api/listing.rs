//! What an agent has waiting and open, seen from outside the chat:
//! `GET /v1/confirmations?status=pending` and `GET /v1/windows` (its live grants are
//! `GET /v1/grants`).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use super::error::ApiError;
use super::extract::AuthAgent;
use super::record::RecordView;
use crate::domain::question::rfc3339;
use crate::service::ServiceError;
use crate::storage::LiveWindow;

/// How many pending confirmations one read lists by default, and at most.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

/// `{confirmations}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConfirmationList {
    pub confirmations: Vec<RecordView>,
}

/// A live confirmation window as its agent sees it: the calls it lets through unasked.
#[derive(Debug, Serialize, ToSchema)]
pub struct WindowView {
    pub tool: String,
    pub owner_id: String,
    /// The hash of the parameters it covers (identical calls only).
    pub args_hash: String,
    /// The MCP server it covers, for a gateway's call.
    #[schema(required = true)]
    pub server: Option<String>,
    /// The route whose approvers opened it (they list and revoke it with `/windows`).
    pub route: String,
    /// The confirmation whose approval opened it.
    pub opened_by: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
}

impl WindowView {
    pub fn of(w: &LiveWindow) -> WindowView {
        let key = &w.window.key;
        WindowView {
            tool: key.tool.as_str().to_owned(),
            owner_id: key.owner_id.as_str().to_owned(),
            args_hash: key.args_hash.as_str().to_owned(),
            server: key.server.as_ref().map(|s| s.as_str().to_owned()),
            route: w.route.clone(),
            opened_by: w.window.opened_by.as_str().to_owned(),
            expires_at: rfc3339(w.window.expires_at),
        }
    }
}

/// `{windows}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WindowList {
    pub windows: Vec<WindowView>,
}

/// `GET /v1/confirmations?status=pending`
#[utoipa::path(
    get,
    path = "/v1/confirmations",
    operation_id = "list_confirmations",
    tag = "confirmations",
    params(
        ("status" = String, Query, description = "`pending`: the one status listed (a decided confirmation is read by its id)."),
        ("limit" = Option<u32>, Query, description = "At most this many (1 to 1000; 100 by default)."),
    ),
    responses(
        (status = 200, description = "This agent's pending confirmations, the soonest deadline first.", body = ConfirmationList),
        crate::api::error::Unauthenticated,
        (status = 422, description = "`invalid_field`: `status` is not `pending`, or `limit` is out of range.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn confirmations(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    match query.get("status").map(String::as_str) {
        Some("pending") => {}
        _ => {
            return Err(ApiError::field(
                "status",
                "must be pending: only pending confirmations are listed; read a decided one by its id",
            ));
        }
    }
    let limit = match query.get("limit") {
        None => DEFAULT_LIMIT,
        Some(l) => match l.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiError::field(
                    "limit",
                    format!("must be a whole number from 1 to {MAX_LIMIT}"),
                ));
            }
        },
    };
    if let Some(unknown) = query
        .keys()
        .find(|k| !["status", "limit"].contains(&k.as_str()))
    {
        return Err(ApiError::field(
            unknown,
            "is not a query parameter of this list (status, limit)",
        ));
    }
    let pending = state.service.asked().pending(&agent, limit).await?;
    Ok(Json(ConfirmationList {
        confirmations: pending.iter().map(RecordView::from).collect(),
    })
    .into_response())
}

/// `GET /v1/windows`
#[utoipa::path(
    get,
    path = "/v1/windows",
    operation_id = "list_windows",
    tag = "confirmations",
    responses(
        (status = 200, description = "This agent's live confirmation windows, soonest expiry first.", body = WindowList),
        crate::api::error::Unauthenticated,
    ),
    security(("bearer" = [])),
)]
pub async fn windows(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
) -> Result<Response, ApiError> {
    let windows = state
        .service
        .roles()
        .windows
        .live_windows_of(Some(&agent.name), crate::service::now())
        .await
        .map_err(ServiceError::from)?;
    Ok(Json(WindowList {
        windows: windows.iter().map(WindowView::of).collect(),
    })
    .into_response())
}
