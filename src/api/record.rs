//! The confirmation record as agents see it.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::domain::confirmation::{Confirmation, rfc3339};

#[derive(Debug, Serialize)]
pub struct DecidedByView {
    pub id: u64,
    pub username: Option<String>,
    pub name: String,
}

/// `{"id", "status", "allowed", "reason", "via", "tool", "owner_id", "args_hash",
/// "parameters", "decided_by", "created_at", "expires_at", "decided_at"}`.
#[derive(Debug, Serialize)]
pub struct RecordView {
    pub id: String,
    pub status: &'static str,
    pub allowed: bool,
    pub reason: String,
    pub via: Option<&'static str>,
    pub tool: String,
    pub owner_id: String,
    pub args_hash: String,
    /// The parameters to execute with, verbatim as the agent sent them; only when allowed.
    pub parameters: Option<Box<RawValue>>,
    pub decided_by: Option<DecidedByView>,
    pub created_at: String,
    pub expires_at: String,
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
