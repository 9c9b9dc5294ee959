//! Per-agent request rate: a token bucket per agent, so a runaway agent cannot flood
//! the operators' chat. A bucket holds `requests_per_minute` tokens (the burst) and
//! refills at that many per minute.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

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
}
