//! The confirmation record as agents see it.

use serde::Serialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use crate::domain::confirmation::{Confirmation, rfc3339};

/// The operator who tapped the button.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecidedByView {
    /// Telegram user id.
    pub id: u64,
    #[schema(required = true)]
    pub username: Option<String>,
    pub name: String,
}

/// `{"id", "status", "allowed", "reason", "via", "tool", "owner_id", "args_hash",
/// "parameters", "decided_by", "created_at", "expires_at", "decided_at"}`.
///
/// Every key is always present; the optional ones are `null` when they do not apply.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Confirmation)]
pub struct RecordView {
    /// `cf_` and 32 lowercase hex digits.
    pub id: String,
    #[schema(schema_with = super::openapi::status_schema)]
    pub status: &'static str,
    /// True only for `confirmed`: the one thing an agent must check before executing.
    pub allowed: bool,
    /// Why the request is where it is, in words.
    pub reason: String,
    #[schema(schema_with = super::openapi::via_schema, required = true)]
    pub via: Option<&'static str>,
    pub tool: String,
    pub owner_id: String,
    /// The call's argument hash: lowercase hex SHA-256 of the Python-canonical params.
    pub args_hash: String,
    /// The parameters to execute with, verbatim as the agent sent them; only when allowed.
    #[schema(value_type = Option<Object>, required = true)]
    pub parameters: Option<Box<RawValue>>,
    #[schema(required = true)]
    pub decided_by: Option<DecidedByView>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: String,
    #[schema(format = DateTime, required = true)]
    pub decided_at: Option<String>,
}

impl From<&Confirmation> for RecordView {
    fn from(r: &Confirmation) -> Self {
        RecordView {
            id: r.id.to_string(),
            status: r.status.as_str(),
            allowed: r.allowed(),
            reason: r.reason.clone(),
            via: r.via.map(|v| v.as_str()),
            tool: r.tool.to_string(),
            owner_id: r.owner_id.to_string(),
            args_hash: r.args_hash.to_string(),
            // Stored text was validated JSON when it came in; if it somehow is not, the
            // agent gets no parameters rather than broken ones.
            parameters: if r.allowed() {
                RawValue::from_string(r.params_json.clone()).ok()
            } else {
                None
            },
            decided_by: r.decided_by.as_ref().map(|op| DecidedByView {
                id: op.id,
                username: op.username.clone(),
                name: op.name.clone(),
            }),
            created_at: rfc3339(r.created_at),
            expires_at: rfc3339(r.expires_at),
            decided_at: r.decided_at.map(rfc3339),
        }
    }
}
