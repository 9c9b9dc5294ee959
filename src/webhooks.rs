//! Signed webhooks to agents, delivered from the outbox.
//!
//! When a request with a `callback_url` ends, storage queues an outbox row in the same
//! transaction as the decision. This worker POSTs the record (the same JSON the API
//! returns) to the URL until a 2xx or the give-up age, with exponential backoff and
//! jitter. Rows live in SQLite, so deliveries survive restarts; delivery is
//! at-least-once, and `X-Hitl-Delivery` stays the same on every retry so receivers can
//! drop duplicates.
//!
//! Signature: `X-Hitl-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`
//! where `<timestamp>` is the `X-Hitl-Timestamp` header (Unix seconds) and `<body>` the
//! raw request body. Binding the timestamp lets a receiver refuse replays of old
//! deliveries.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use rand::Rng;
use secrecy::ExposeSecret;
use sha2::Sha256;
use time::OffsetDateTime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::api::record::RecordView;
use crate::config::WebhookSettings;
use crate::service::{Service, now};
use crate::storage::{OutboxEntry, WebhookAttempt};

/// How many deliveries are attempted at once.
const BATCH: u32 = 16;

pub const SIGNATURE_HEADER: &str = "X-Hitl-Signature";
pub const TIMESTAMP_HEADER: &str = "X-Hitl-Timestamp";
pub const DELIVERY_HEADER: &str = "X-Hitl-Delivery";

/// `sha256=<hex>` of `"<timestamp>.<body>"` under `secret`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before attempt `attempt` (1-based) is retried: doubling from the initial
/// backoff up to the maximum, then scaled by a random factor in [0.5, 1] so receivers
/// that came back are not hit by every sender at once.
pub fn backoff(settings: &WebhookSettings, attempt: u32) -> Duration {
    let exp =
        settings.initial_backoff_seconds * 2f64.powi(attempt.saturating_sub(1).min(60) as i32);
    let capped = exp.min(settings.max_backoff_seconds);
    let jitter = rand::rng().random_range(0.5..=1.0);
    Duration::from_secs_f64(capped * jitter)
}

fn client(settings: &WebhookSettings) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(settings.timeout_seconds))
        // A redirect could lead outside the agent's allowed prefixes.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("hitl-telegram/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Runs until `stop`. An attempt in progress when `stop` fires is finished and recorded.
pub async fn run(service: Arc<Service>, stop: CancellationToken) {
    let settings = service.config().webhooks.clone();
    let http = client(&settings);
    loop {
        let due = match service.store().due_webhooks(now(), BATCH).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the webhook outbox");
                Vec::new()
            }
        };
        if !due.is_empty() {
            let mut attempts = JoinSet::new();
            for entry in due {
                attempts.spawn(attempt(service.clone(), http.clone(), entry));
            }
            while attempts.join_next().await.is_some() {}
            if stop.is_cancelled() {
                return;
            }
            continue;
        }
        let next = service.store().next_webhook_due().await.ok().flatten();
        let sleep = next.map(|at| {
            let left: Duration = (at - now()).try_into().unwrap_or(Duration::ZERO);
            left.max(Duration::from_millis(10))
        });
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = service.webhook_wake().notified() => {}
            _ = sleep_or_forever(sleep) => {}
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn attempt(service: Arc<Service>, http: reqwest::Client, entry: OutboxEntry) {
    let result = match send(&service, &http, &entry).await {
        Ok(()) => {
            tracing::info!(delivery = entry.delivery_id.as_str(), id = %entry.confirmation_id, "webhook delivered");
            service.metrics().webhook_delivered(&entry.agent);
            WebhookAttempt::Delivered
        }
        Err(error) => {
            let step = next_step(&service.config().webhooks, &entry, error, now());
            let given_up = matches!(step, WebhookAttempt::GiveUp { .. });
            service.metrics().webhook_failed(&entry.agent, given_up);
            step
        }
    };
    if let WebhookAttempt::GiveUp { error } = &result {
        tracing::warn!(delivery = entry.delivery_id.as_str(), id = %entry.confirmation_id, %error, "webhook given up");
    }
    if let Err(e) = service
        .store()
        .webhook_attempted(&entry, result, now())
        .await
    {
        tracing::error!(error = %e, "cannot record a webhook attempt");
    }
}

/// Retry later, or give up once the delivery is older than the give-up age.
fn next_step(
    settings: &WebhookSettings,
    entry: &OutboxEntry,
    error: String,
    now: OffsetDateTime,
) -> WebhookAttempt {
    let age: Duration = (now - entry.created_at)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if age.as_secs_f64() >= settings.give_up_after_seconds {
        return WebhookAttempt::GiveUp {
            error: format!("{error} (giving up after {} attempts)", entry.attempts + 1),
        };
    }
    tracing::debug!(delivery = entry.delivery_id.as_str(), %error, "webhook attempt failed; will retry");
    WebhookAttempt::Retry {
        next_at: now + backoff(settings, entry.attempts + 1),
        error,
    }
}

async fn send(
    service: &Service,
    http: &reqwest::Client,
    entry: &OutboxEntry,
) -> Result<(), String> {
    let record = service
        .store()
        .get(&entry.confirmation_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the request no longer exists")?;
    let secret = service
        .config()
        .agents
        .iter()
        .find(|a| a.name == entry.agent)
        .and_then(|a| a.webhook_secret.clone())
        .ok_or("the agent has no webhook secret configured")?;
    let body = serde_json::to_vec(&RecordView::from(&record)).map_err(|e| e.to_string())?;
    let timestamp = now().unix_timestamp();
    let signature = sign(secret.expose_secret().as_bytes(), timestamp, &body);
    let response = http
        .post(&entry.url)
        .header("content-type", "application/json")
        .header(DELIVERY_HEADER, entry.delivery_id.as_str())
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .body(body)
        .send()
        .await
        // The URL may carry the receiver's own secrets in its query; keep it out.
        .map_err(|e| format!("request failed: {}", e.without_url()))?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "receiver answered HTTP {}",
            response.status().as_u16()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_hmac_sha256_of_timestamp_dot_body() {
        // Computed independently with Python:
        // hmac.new(b"secret", b"1700000000.{}", hashlib.sha256).hexdigest()
        assert_eq!(
            sign(b"secret", 1_700_000_000, b"{}"),
            "sha256=b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let s = WebhookSettings {
            timeout_seconds: 1.0,
            initial_backoff_seconds: 1.0,
            max_backoff_seconds: 8.0,
            give_up_after_seconds: 100.0,
        };
        for (attempt, full) in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (40, 8.0)] {
            let d = backoff(&s, attempt).as_secs_f64();
            assert!(
                d >= full * 0.5 - 1e-9 && d <= full + 1e-9,
                "attempt {attempt}: {d}"
            );
        }
    }
}
