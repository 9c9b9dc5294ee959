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
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{READ_RETRY, client, next_step, post_signed};
use crate::config::OutageAlerts;
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
                let settings = &service.config().webhooks;
                let step = next_step(settings, entry.created_at, entry.attempts, error, now());
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

/// POSTs the alert's stored body, signed now, with its [`EVENT_HEADER`].
async fn send(
    http: &reqwest::Client,
    alerts: &OutageAlerts,
    entry: &AlertEntry,
) -> Result<(), String> {
    let request = http.post(&entry.url).header(EVENT_HEADER, &entry.kind);
    let secret = alerts.secret.expose_secret();
    let body = entry.body.clone().into_bytes();
    post_signed(request, secret, entry.delivery_id.as_str(), body).await
}
