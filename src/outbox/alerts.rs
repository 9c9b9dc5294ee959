//! The leader's outage watch, and the delivery of its alerts (issue 50).
//!
//! One task while this replica leads and `[telegram] outage_webhook_url` is set: it asks
//! Telegram whether it answers every `probe_every` (the service stores what that
//! changes, `crate::service::outage`), and in between delivers the alerts due, signed as
//! the agents' webhooks are (same headers, same scheme, the alerts' own secret) and
//! retried with the same backoff until the give-up age of `[webhooks]`. One task is
//! enough: an outage makes two alerts, and a receiver that hangs holds the next probe
//! back by one attempt's timeout at most.

use std::sync::Arc;
use std::time::Duration;

use secrecy::ExposeSecret;
use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{READ_RETRY, backoff, client, request_failed};
use crate::config::{OutageAlerts, OutboxSettings};
use crate::domain::outbox::{DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use crate::service::{Service, now};
use crate::storage::{AlertEntry, DeliveryAttempt};

/// The header naming what an alert announces (`telegram_outage_started` or
/// `telegram_outage_ended`), for receivers that route on headers.
pub const EVENT_HEADER: &str = "X-Hitl-Event";
/// How many due alerts one pass sends at most (an outage makes two).
const PER_PASS: u32 = 16;

/// Runs until `stop`; returns at once without `[telegram] outage_webhook_url`.
pub async fn run(service: Arc<Service>, stop: CancellationToken) {
    let Some(alerts) = service.config().outage_alerts.clone() else {
        return;
    };
    let http = client(&service.config().webhooks);
    let mut watch = loop {
        match service.outage_watch(&alerts).await {
            Ok(w) => break w,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the open Telegram outage");
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(READ_RETRY) => {}
                }
            }
        }
    };
    let every = alerts.probe_every();
    let mut next_probe = Instant::now();
    while !stop.is_cancelled() {
        if Instant::now() >= next_probe {
            next_probe = Instant::now() + every;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = service.probe_telegram(&mut watch, &alerts) => {}
            }
        }
        let wake = match deliver_due(&service, &http, &alerts).await {
            Some(due) => next_probe.min(Instant::now() + due),
            None => next_probe,
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

/// Attempts every alert due now, one after the other; how long until the next one not
/// due yet (`None`: none).
async fn deliver_due(
    service: &Service,
    http: &reqwest::Client,
    alerts: &OutageAlerts,
) -> Option<Duration> {
    let store = &service.roles().outages;
    let at = now();
    let due = match store.due_alerts(at, PER_PASS).await {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the outage alerts");
            return Some(READ_RETRY);
        }
    };
    for entry in due {
        let result = match send(http, alerts, &entry).await {
            Ok(()) => {
                tracing::info!(delivery = entry.delivery_id.as_str(), alert = %entry.kind, "outage alert delivered");
                service.metrics().outage_alert("delivered");
                DeliveryAttempt::Delivered
            }
            Err(error) => {
                let step = next_step(&service.config().webhooks, &entry, error, now());
                match &step {
                    DeliveryAttempt::GiveUp { error } => {
                        tracing::error!(delivery = entry.delivery_id.as_str(), alert = %entry.kind, %error, "outage alert given up");
                        service.metrics().outage_alert("given_up");
                    }
                    _ => service.metrics().outage_alert("failed"),
                }
                step
            }
        };
        if let Err(e) = store.alert_attempted(&entry, result, now()).await {
            tracing::error!(error = %e, "cannot record an outage alert's attempt");
        }
    }
    match store.next_alert_due_after(now()).await {
        Ok(next) => next.map(|due| (due - now()).try_into().unwrap_or(Duration::ZERO)),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the outage alerts");
            Some(READ_RETRY)
        }
    }
}

/// Retry later with the webhooks' backoff, or give up past their give-up age.
fn next_step(
    settings: &OutboxSettings,
    entry: &AlertEntry,
    error: String,
    now: OffsetDateTime,
) -> DeliveryAttempt {
    let age: Duration = (now - entry.created_at)
        .try_into()
        .unwrap_or(Duration::ZERO);
    if age.as_secs_f64() >= settings.give_up_after_seconds {
        return DeliveryAttempt::GiveUp {
            error: format!("{error} (giving up after {} attempts)", entry.attempts + 1),
        };
    }
    DeliveryAttempt::Retry {
        next_at: now + backoff(settings, entry.attempts + 1),
        error,
    }
}

/// POSTs the alert's stored body, signed now.
async fn send(
    http: &reqwest::Client,
    alerts: &OutageAlerts,
    entry: &AlertEntry,
) -> Result<(), String> {
    let timestamp = now().unix_timestamp();
    let signature = sign(
        alerts.secret.expose_secret().as_bytes(),
        timestamp,
        entry.delivery_id.as_str(),
        entry.body.as_bytes(),
    );
    let response = http
        .post(&entry.url)
        .header("content-type", "application/json")
        .header(DELIVERY_HEADER, entry.delivery_id.as_str())
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .header(EVENT_HEADER, &entry.kind)
        .body(entry.body.clone())
        .send()
        .await
        .map_err(request_failed)?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "receiver answered HTTP {}",
            response.status().as_u16()
        ))
    }
}
