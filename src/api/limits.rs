//! Per-agent limits of the API.
//!
//! - Request rate: a token bucket per agent, so a runaway agent cannot flood the
//!   operators' chat. A bucket holds `requests_per_minute` tokens (the burst) and
//!   refills at that many per minute.
//! - Held connections: an agent may keep at most `max_streams` event streams and
//!   `max_long_polls` long-polls open at once, so no agent can hold the server's
//!   connections (see `api::serve`) and keep others, `/healthz` and the Telegram webhook
//!   route out.
//! - Console requests: a Telegram user may have at most
//!   [`super::console::CONSOLE_IN_FLIGHT`] requests to the console's API in flight
//!   ([`Held::Console`], counted under `telegram:<id>`, a name no agent's key shares
//!   since the kind is part of the key).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::AppState;
use super::error::ApiError;
use crate::config::Agent;

#[derive(Default)]
pub struct AgentRateLimiter {
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl AgentRateLimiter {
    /// Takes a token for `agent`, or says how long until one is available.
    pub fn check(&self, agent: &str, per_minute: u32) -> Result<(), Duration> {
        let capacity = f64::from(per_minute.max(1));
        let per_second = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry(agent.to_owned()).or_insert(Bucket {
            tokens: capacity,
            updated: now,
        });
        let elapsed = now.duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_second).min(capacity);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_second))
        }
    }
}

/// What an agent holds a connection open for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Held {
    /// `GET /v1/events`.
    Stream,
    /// `GET /v1/confirmations/{id}?wait=N`, `GET /v1/interactions/{id}?wait=N`.
    LongPoll,
    /// Any request to the console's API (`/app/api/`), counted per Telegram user.
    Console,
}

/// How long a refused client is told to wait. A slot frees when a stream's client goes
/// away (hyper notices the closed socket at once) or a long-poll answers, so a short
/// wait is enough; retrying at once would only be refused again.
pub const HELD_RETRY_AFTER_SECS: u64 = 5;

/// Counts, per agent, the streams and long-polls open now.
#[derive(Default)]
pub struct AgentSlots {
    held: Mutex<HashMap<(String, Held), u32>>,
}

/// One stream or long-poll counted against its agent, until dropped.
pub struct Slot {
    slots: Arc<AgentSlots>,
    key: (String, Held),
}

impl AgentSlots {
    /// Counts one more `kind` for `agent`, or refuses with 429 when it already holds
    /// `max` of them.
    pub fn take(self: &Arc<Self>, agent: &str, kind: Held, max: u32) -> Result<Slot, ApiError> {
        let key = (agent.to_owned(), kind);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(key.clone()).or_insert(0);
        if *n >= max {
            let (what, setting) = match kind {
                Held::Stream => ("event streams", "max_streams"),
                Held::LongPoll => ("long-polls", "max_long_polls"),
                Held::Console => {
                    return Err(ApiError::TooManyRequests {
                        message: format!(
                            "you already have {max} console requests in flight, the most one \
                             person may; wait for them to end (or close another tab) and retry"
                        ),
                        retry_after_secs: 1,
                    });
                }
            };
            return Err(ApiError::TooManyStreams {
                message: format!(
                    "this agent already has {max} {what} open (its {setting}); close one or \
                     retry later"
                ),
                retry_after_secs: HELD_RETRY_AFTER_SECS,
            });
        }
        *n += 1;
        Ok(Slot {
            slots: self.clone(),
            key,
        })
    }

    /// How many `kind` `agent` holds now.
    pub fn held(&self, agent: &str, kind: Held) -> u32 {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&(agent.to_owned(), kind)).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.slots.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// Takes a token from the agent's request budget (every request that asks or notifies).
pub fn rate_limit(state: &AppState, agent: &Agent) -> Result<(), ApiError> {
    state
        .rate
        .check(&agent.name, agent.requests_per_minute)
        .map_err(|wait| ApiError::TooManyRequests {
            message: format!(
                "more than {} requests per minute from this agent (its requests_per_minute)",
                agent.requests_per_minute
            ),
            retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_burst_is_allowed_then_the_rate_applies_per_agent() {
        let l = AgentRateLimiter::default();
        for _ in 0..3 {
            assert!(l.check("a", 3).is_ok());
        }
        let wait = l.check("a", 3).unwrap_err();
        assert!(
            wait > Duration::from_secs(19) && wait <= Duration::from_secs(20),
            "{wait:?}"
        );
        assert!(l.check("b", 3).is_ok(), "agents have separate buckets");
        tokio::time::advance(Duration::from_secs(20)).await;
        assert!(l.check("a", 3).is_ok());
        assert!(l.check("a", 3).is_err());
    }

    #[test]
    fn slots_are_counted_per_agent_and_kind_and_freed_on_drop() {
        let slots = Arc::new(AgentSlots::default());
        let a = slots.take("a", Held::Stream, 2).expect("first");
        let _b = slots.take("a", Held::Stream, 2).expect("second");
        match slots.take("a", Held::Stream, 2) {
            Err(ApiError::TooManyStreams {
                message,
                retry_after_secs,
            }) => {
                assert!(message.contains("max_streams"), "{message}");
                assert_eq!(retry_after_secs, HELD_RETRY_AFTER_SECS);
            }
            _ => panic!("a third stream must be refused"),
        }
        assert!(slots.take("a", Held::LongPoll, 2).is_ok(), "another kind");
        assert!(slots.take("b", Held::Stream, 2).is_ok(), "another agent");
        drop(a);
        assert_eq!(slots.held("a", Held::Stream), 1);
        assert!(
            slots.take("a", Held::Stream, 2).is_ok(),
            "freed by the drop"
        );
    }
}
