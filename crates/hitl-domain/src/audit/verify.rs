//! What `audit verify` checks over one read of a trail: the chain and its head, and every
//! request's stored status against the decision event the trail holds for it.

use serde_json::Value;

use super::chain::{Broken, Head, HeadMismatch, StoredRow, check_head, verify};
use crate::question::Status;

/// A request's status as stored, as text, the way verification reads it (text, so that
/// a value that is no status at all is reported rather than refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredStatus {
    pub id: String,
    pub status: String,
}

/// The event kinds that record a request's outcome. A request that ended has exactly
/// one of them, appended in the transaction that stored the outcome; a pending request
/// has none. `decided` covers taps and interactions' answers (its detail names the
/// status); the others imply it (see [`recorded_status`]).
pub const DECISION_KINDS: [&str; 7] = [
    "window_hit",
    "rule_decided",
    "grant_decided",
    "decided",
    "timeout",
    "withdrawn",
    "fail_closed",
];

/// The outcome a decision event records. Events name it in `detail.status`; events
/// written before they did imply it by their kind: `window_hit` confirmed, `withdrawn`
/// and `fail_closed` cancelled, `timeout` completed when a default answer was recorded
/// for the request (an interaction's `default_response`) and `timeout` otherwise.
fn recorded_status(row: &StoredRow, default_answered: bool) -> Option<Status> {
    let detail: Value = serde_json::from_str(&row.detail_text).ok()?;
    if let Some(named) = detail.get("status") {
        return named
            .as_str()
            .and_then(Status::parse)
            .filter(|s| s.is_terminal());
    }
    match row.kind.as_str() {
        "window_hit" => Some(Status::Confirmed),
        "withdrawn" | "fail_closed" => Some(Status::Cancelled),
        "timeout" if default_answered => Some(Status::Completed),
        "timeout" => Some(Status::Timeout),
        _ => None,
    }
}

/// A request whose stored status does not agree with the trail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Drift {
    #[error(
        "request {id}: stored status '{stored}', but its decision (event {seq}, {kind}) says '{recorded}'"
    )]
    Mismatch {
        id: String,
        stored: String,
        seq: i64,
        kind: String,
        recorded: &'static str,
    },
    #[error("request {id}: stored status '{stored}', but the trail records no decision for it")]
    Undecided { id: String, stored: String },
    #[error("request {id}: its decision (event {seq}, {kind}) names no outcome")]
    Unreadable { id: String, seq: i64, kind: String },
    #[error("request {id}: the trail records two decisions for it (events {first} and {second})")]
    Twice { id: String, first: i64, second: i64 },
    #[error(
        "request {id}: the trail records its decision (event {seq}, {kind}), but no such request is stored"
    )]
    Vanished { id: String, seq: i64, kind: String },
}

/// Compares every request's stored status with the decision event the trail holds for
/// it: an ended request must have exactly one, recording the stored outcome; a pending
/// one none; and every decided request must still be stored. Catches a status edited
/// behind the trail's back (in either direction) and a decision event cut off the end.
pub fn cross_check(rows: &[StoredRow], statuses: &[StoredStatus]) -> Vec<Drift> {
    struct Recorded<'a> {
        seq: i64,
        kind: &'a str,
        status: Option<Status>,
    }
    let mut drift = Vec::new();
    let mut decisions: std::collections::HashMap<&str, Recorded> = Default::default();
    let mut default_answered: std::collections::HashSet<&str> = Default::default();
    for r in rows {
        let Some(id) = r.confirmation_id.as_deref() else {
            continue;
        };
        if r.kind == "answered"
            && serde_json::from_str::<Value>(&r.detail_text)
                .is_ok_and(|d| d["default"] == Value::Bool(true))
        {
            default_answered.insert(id);
        }
        if !DECISION_KINDS.contains(&r.kind.as_str()) {
            continue;
        }
        let status = recorded_status(r, default_answered.contains(id));
        match decisions.entry(id) {
            std::collections::hash_map::Entry::Occupied(first) => drift.push(Drift::Twice {
                id: id.to_owned(),
                first: first.get().seq,
                second: r.seq,
            }),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Recorded {
                    seq: r.seq,
                    kind: &r.kind,
                    status,
                });
            }
        }
    }
    for s in statuses {
        match decisions.remove(s.id.as_str()) {
            None if s.status == Status::Pending.as_str() => {}
            None => drift.push(Drift::Undecided {
                id: s.id.clone(),
                stored: s.status.clone(),
            }),
            Some(d) => match d.status {
                None => drift.push(Drift::Unreadable {
                    id: s.id.clone(),
                    seq: d.seq,
                    kind: d.kind.to_owned(),
                }),
                Some(recorded) if recorded.as_str() == s.status => {}
                Some(recorded) => drift.push(Drift::Mismatch {
                    id: s.id.clone(),
                    stored: s.status.clone(),
                    seq: d.seq,
                    kind: d.kind.to_owned(),
                    recorded: recorded.as_str(),
                }),
            },
        }
    }
    // What is left was decided in the trail but is no longer stored.
    let mut vanished: Vec<_> = decisions.into_iter().collect();
    vanished.sort_by_key(|(_, d)| d.seq);
    drift.extend(vanished.into_iter().map(|(id, d)| Drift::Vanished {
        id: id.to_owned(),
        seq: d.seq,
        kind: d.kind.to_owned(),
    }));
    drift
}

/// Something `audit verify` found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error(transparent)]
    Broken(#[from] Broken),
    #[error(transparent)]
    Head(#[from] HeadMismatch),
    #[error(transparent)]
    Drift(#[from] Drift),
}

/// What `audit verify` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Events in the trail.
    pub events: u64,
    /// The head of the chain; `None` when the chain is broken (a broken chain has no
    /// head worth keeping).
    pub head: Option<Head>,
    /// Requests that have ended, each checked against its decision event.
    pub ended: u64,
    /// Everything wrong, the chain's break first; empty when the trail is intact.
    pub problems: Vec<Problem>,
}

/// Every check of `audit verify` over one consistent read of the trail (in sequence
/// order) and the requests' statuses: the hash chain, the `expected` head if given, and
/// the statuses against their decision events.
pub fn check(rows: &[StoredRow], statuses: &[StoredStatus], expected: Option<&Head>) -> Report {
    let mut problems = Vec::new();
    let head = match verify(rows) {
        Ok(v) => Some(v.head),
        Err(broken) => {
            problems.push(Problem::from(broken));
            None
        }
    };
    if let Some(expected) = expected
        && let Err(mismatch) = check_head(rows, expected)
    {
        problems.push(mismatch.into());
    }
    problems.extend(cross_check(rows, statuses).into_iter().map(Problem::from));
    Report {
        events: rows.len() as u64,
        head,
        ended: statuses
            .iter()
            .filter(|s| s.status != Status::Pending.as_str())
            .count() as u64,
        problems,
    }
}
