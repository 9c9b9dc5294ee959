//! The nullable and composite columns of a `confirmations` row, read back into domain
//! values: each names the column at fault when it does not read.

use std::sync::Arc;

use super::from_ms;
use crate::domain::args_hash::ArgsHash;
use crate::domain::interaction::{self, Interaction};
use crate::domain::mcp_call::{Annotations, ServerName};
use crate::domain::question::{Edited, Operator};
use crate::domain::run_report::{RunReport, RunStatus};
use crate::storage::StorageError;

/// How a column that does not read names itself (see [`super::corrupt_in`]).
pub(super) type Corrupt<'a> = dyn Fn(&str) -> StorageError + 'a;

/// The operator who decided, from the `decided_by_*` columns (`None` without an id and
/// a name).
pub(super) fn decided_by(
    id: Option<i64>,
    username: Option<String>,
    name: Option<String>,
    corrupt: &Corrupt<'_>,
) -> Result<Option<Operator>, StorageError> {
    Ok(match (id, name) {
        (Some(uid), Some(name)) => Some(Operator {
            id: u64::try_from(uid).map_err(|_| corrupt("decided_by_id"))?,
            username,
            name,
        }),
        _ => None,
    })
}

/// A nullable count or duration column.
pub(super) fn unsigned(
    v: Option<i64>,
    what: &str,
    corrupt: &Corrupt<'_>,
) -> Result<Option<u64>, StorageError> {
    v.map(u64::try_from).transpose().map_err(|_| corrupt(what))
}

/// A nullable JSON column.
pub(super) fn json<T: serde::de::DeserializeOwned>(
    j: Option<String>,
    what: &str,
    corrupt: &Corrupt<'_>,
) -> Result<Option<T>, StorageError> {
    j.map(|j| serde_json::from_str(&j).map_err(|_| corrupt(what)))
        .transpose()
}

/// `interaction_json`: stored only after it was checked; read back without the timeout
/// cap (the config may have changed since).
pub(super) fn stored_interaction(
    j: Option<String>,
    corrupt: &Corrupt<'_>,
) -> Result<Option<Arc<Interaction>>, StorageError> {
    j.map(|j| {
        serde_json::from_str(&j)
            .ok()
            .and_then(|v| interaction::parse_stored(&v).ok())
            .map(Arc::new)
            .ok_or_else(|| corrupt("interaction_json"))
    })
    .transpose()
}

/// The `run_*` columns: the agent's report of the run, all NULL before one came.
pub(super) fn stored_run_report(
    status: Option<String>,
    summary: Option<String>,
    error: Option<String>,
    duration_ms: Option<i64>,
    at: Option<i64>,
    overdue: bool,
    corrupt: &Corrupt<'_>,
) -> Result<Option<RunReport>, StorageError> {
    Ok(match (status, at) {
        (Some(status), Some(at)) => Some(RunReport {
            status: RunStatus::parse(&status).ok_or_else(|| corrupt("run_status"))?,
            summary,
            error,
            duration_ms: unsigned(duration_ms, "run_duration_ms", corrupt)?,
            reported_at: from_ms(at).ok_or_else(|| corrupt("time out of range"))?,
            overdue,
        }),
        (None, None) => None,
        _ => return Err(corrupt("run_at")),
    })
}

/// The `server` column: the MCP server's name as it was checked when asked.
pub(super) fn stored_server(
    server: Option<&str>,
    corrupt: &Corrupt<'_>,
) -> Result<Option<ServerName>, StorageError> {
    server
        .map(|s| ServerName::parse(s).map_err(|_| corrupt("server")))
        .transpose()
}

/// The `annotations_json` column: an object of booleans, as it was checked when asked.
pub(super) fn stored_annotations(
    text: Option<&str>,
    corrupt: &Corrupt<'_>,
) -> Result<Option<Annotations>, StorageError> {
    text.map(|t| Annotations::from_stored(t).ok_or_else(|| corrupt("annotations_json")))
        .transpose()
}

/// The `original_*` columns: what the agent first asked, when an approver edited it.
pub(super) fn edited(
    params: Option<String>,
    hash: Option<String>,
    corrupt: &Corrupt<'_>,
) -> Result<Option<Edited>, StorageError> {
    Ok(match (params, hash) {
        (Some(params), Some(hash)) => Some(Edited {
            original_params_json: params,
            original_args_hash: ArgsHash::parse(&hash)
                .map_err(|_| corrupt("original_args_hash"))?,
        }),
        (None, None) => None,
        _ => return Err(corrupt("original_args_hash")),
    })
}
