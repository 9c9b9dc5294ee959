//! Writes the audit chain's head to the log: when the service starts, every
//! [`EVERY`] while it runs, and once more at shutdown (after the last write).
//!
//! Someone who can write the database file can delete the newest events, or rewrite the
//! whole chain with fresh hashes, and `audit verify` alone cannot tell. A head that left
//! the machine earlier (shipped with the logs) can: `audit verify --expect-head SEQ:HASH`
//! fails when the trail no longer holds that event with that hash. The log line carries
//! the head exactly as `--expect-head` takes it, in its `head` field.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::storage::Audit;

/// How often the running service logs the head. Events newer than the last head that
/// left the machine are the ones an attacker can remove unnoticed, so this bounds that
/// window (together with the line at shutdown).
pub const EVERY: Duration = Duration::from_secs(3600);

/// The message of the log line, for whoever collects it.
pub const MESSAGE: &str = "audit chain head";

/// Logs the head every `every`, until `stop` fires. The lines at start and at shutdown
/// are [`log_head`]'s, called by the application: at start before it records its own
/// `service_started` (so the line says what the trail held when this run found it), at
/// shutdown once everything else has stopped writing (the trail's final head).
pub async fn log_audit_head(store: Arc<dyn Audit>, every: Duration, stop: CancellationToken) {
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    // After a suspended host, one line, not a burst of identical ones.
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            _ = tick.tick() => log_head(store.as_ref(), "periodic").await,
        }
    }
}

/// Logs the current head once; `when` says why (`start`, `periodic`, `shutdown`).
pub async fn log_head(store: &dyn Audit, when: &'static str) {
    match store.audit_head().await {
        Ok(head) => tracing::info!(
            head = %head,
            seq = head.seq(),
            hash = head.hash(),
            when,
            "{MESSAGE}"
        ),
        Err(e) => tracing::warn!(error = %e, when, "cannot read the audit chain head"),
    }
}
