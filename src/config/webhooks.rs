//! `[webhooks]`: how the outbox (`crate::outbox`) retries the deliveries to the
//! agents' callback URLs, and how many run at once.

use serde::Deserialize;

use super::{ConfigError, MAX_TIMEOUT_LIMIT, invalid};

/// How webhooks to agents are retried, and how many run at once.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboxSettings {
    pub timeout_seconds: f64,
    pub initial_backoff_seconds: f64,
    pub max_backoff_seconds: f64,
    pub give_up_after_seconds: f64,
    /// Seconds to wait for the receiver's connection (TCP and TLS), within
    /// `timeout_seconds`: short, because a receiver that does not even accept is down,
    /// and waiting longer only holds one of its agent's slots.
    pub connect_timeout_seconds: f64,
    /// Most attempts in flight at once, all agents together.
    pub max_in_flight: u32,
    /// Most attempts in flight at once for one agent: a receiver that hangs holds only
    /// its own agent's slots, never another agent's.
    pub max_in_flight_per_agent: u32,
    /// Most attempts in flight at once to one receiving origin (scheme, host and port),
    /// whichever agents they are for, so a receiver shared by many agents is not hit by
    /// all of them at once.
    pub max_in_flight_per_host: u32,
    /// Most undelivered (queued, not yet delivered nor given up) deliveries one agent may
    /// have. When an outcome would exceed it, its delivery is dropped instead of queued,
    /// with a `webhook_dropped` audit event (see "Webhooks" in docs/http-api.md).
    pub max_backlog_per_agent: u32,
}

impl Default for OutboxSettings {
    fn default() -> Self {
        OutboxSettings {
            timeout_seconds: 10.0,
            initial_backoff_seconds: 1.0,
            max_backoff_seconds: 600.0,
            give_up_after_seconds: 86400.0,
            connect_timeout_seconds: 3.0,
            max_in_flight: 32,
            max_in_flight_per_agent: 2,
            max_in_flight_per_host: 4,
            max_backlog_per_agent: crate::storage::DEFAULT_OUTBOX_BACKLOG_BOUND,
        }
    }
}

impl OutboxSettings {
    /// Checks the delays (seconds greater than 0, at most [`MAX_TIMEOUT_LIMIT`]) and
    /// the bounds (at least 1).
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("webhooks.timeout_seconds", self.timeout_seconds),
            (
                "webhooks.initial_backoff_seconds",
                self.initial_backoff_seconds,
            ),
            ("webhooks.max_backoff_seconds", self.max_backoff_seconds),
            ("webhooks.give_up_after_seconds", self.give_up_after_seconds),
            (
                "webhooks.connect_timeout_seconds",
                self.connect_timeout_seconds,
            ),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_LIMIT) {
                return Err(invalid(name, "must be a number of seconds greater than 0"));
            }
        }
        for (name, v) in [
            ("webhooks.max_in_flight", self.max_in_flight),
            (
                "webhooks.max_in_flight_per_agent",
                self.max_in_flight_per_agent,
            ),
            (
                "webhooks.max_in_flight_per_host",
                self.max_in_flight_per_host,
            ),
            ("webhooks.max_backlog_per_agent", self.max_backlog_per_agent),
        ] {
            if v == 0 {
                return Err(invalid(name, "must be at least 1"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, err_of};

    #[test]
    fn webhook_concurrency_and_backlog_bounds_must_be_at_least_one() {
        for key in [
            "max_in_flight",
            "max_in_flight_per_agent",
            "max_in_flight_per_host",
            "max_backlog_per_agent",
        ] {
            let e = err_of(&format!("{BASE}\n[webhooks]\n{key} = 0\n"));
            assert!(
                e.contains(&format!("webhooks.{key}: must be at least 1")),
                "{e}"
            );
        }
        let e = err_of(&format!(
            "{BASE}\n[webhooks]\nconnect_timeout_seconds = 0\n"
        ));
        assert!(e.contains("webhooks.connect_timeout_seconds"), "{e}");
    }
}
