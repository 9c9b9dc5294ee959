//! Asking and waiting: the chain of idempotency keys a run walks so that a retried hook
//! finds its question again while an earlier decision is never reused, and withdrawing
//! the open question when the run is stopped.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::client::is_terminal;

use super::api::Api;
use super::request::{Request, next_key, random_key};

/// How many earlier, already decided identical requests a run steps over before it
/// gives up re-attaching and asks under a fresh random key.
const MAX_HOPS: usize = 16;
/// Slack for clock skew when only the local clock can tell a fresh decision from an
/// earlier one (the service sent no `Date` header).
const CLOCK_SLACK: Duration = Duration::from_secs(2);

/// Asks and waits for a terminal record.
///
/// The first request uses [`base_key`]. If the answer is still pending, this run
/// re-attached to (or created) the open question and waits for it. If it is already
/// decided, and was decided before this run started, it belongs to an earlier identical
/// call: its decision is not reused, and the next key in the chain ([`next_key`]) asks
/// anew. A decision taken during this run (a window hit, or a retry after the
/// decision) is used. With a `tool_use_id` the key names one tool call, whose decision
/// is always the right one.
///
/// [`base_key`]: super::base_key
pub(super) async fn decide(
    api: &Api,
    req: &Request,
    per_tool_call: bool,
    timeout_seconds: f64,
    pending: Arc<Mutex<Option<String>>>,
) -> Result<Value, String> {
    let started = Instant::now();
    let started_wall = OffsetDateTime::now_utc();
    let patience = Duration::try_from_secs_f64(timeout_seconds)
        .unwrap_or(Duration::from_secs(3600))
        .min(Duration::from_secs(7 * 24 * 3600))
        + Duration::from_secs(90);
    let deadline = started + patience;
    let mut key = req.base_key.clone();
    let mut hops = 0;
    loop {
        let (record, server_now) = api.create(&req.body(&key)).await?;
        let id = record
            .get("id")
            .and_then(Value::as_str)
            .ok_or("the service's answer has no id")?
            .to_owned();
        if !is_terminal(&record) {
            *lock(&pending) = Some(id.clone());
            let done = api.wait_until_terminal(&id, deadline).await?;
            lock(&pending).take();
            return Ok(done);
        }
        if per_tool_call || decided_during_run(&record, server_now, started, started_wall) {
            return Ok(record);
        }
        hops += 1;
        key = if hops < MAX_HOPS {
            next_key(req.host, &key, &id)
        } else {
            random_key(req.host)
        };
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a terminal record was decided after this run started. The service's own
/// clock (its `Date` header) measures the decision's age, so clock skew between this
/// machine and the service does not matter; without the header, the local clock does.
///
/// A decision taken during the run is at most `started.elapsed()` old on the service's
/// clock, and the header's whole seconds only make it look younger, so no slack is
/// needed: a fresh decision is never mistaken for an earlier one, and an earlier one
/// passes for fresh only within the header's one-second resolution.
pub(super) fn decided_during_run(
    record: &Value,
    server_now: Option<OffsetDateTime>,
    started: Instant,
    started_wall: OffsetDateTime,
) -> bool {
    let Some(decided_at) = record
        .get("decided_at")
        .and_then(Value::as_str)
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
    else {
        return false;
    };
    match server_now {
        Some(now) => {
            let age = now - decided_at;
            age <= started.elapsed()
        }
        None => decided_at >= started_wall - CLOCK_SLACK,
    }
}

/// Withdraws the open question, if any; true when one was withdrawn.
pub(super) async fn withdraw_pending(api: &Api, pending: &Mutex<Option<String>>) -> bool {
    let id = lock(pending).take();
    match id {
        Some(id) => api.withdraw(&id).await,
        None => false,
    }
}
