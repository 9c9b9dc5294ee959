//! Telegram out of reach (issue 50): while it leads, with `[telegram]
//! outage_webhook_url` set, this replica asks Telegram every few seconds whether it
//! answers. Past `outage_after_seconds` of failures the outage is stored with its alert
//! (the waiting questions, for the alerting system), and its end likewise: each in one
//! transaction with its audit event, and at most one outage open in the database, so a
//! restart or a new leader announces neither moment twice. The alerts themselves are
//! delivered by the adapter that signs and sends them (`crate::outbox::alerts`).

use std::time::Duration;

use time::OffsetDateTime;

use super::{Service, now};
use crate::config::OutageAlerts;
use crate::domain::audit;
use crate::domain::ids::{DeliveryId, OutageId};
use crate::domain::outage::{ALERT_LISTS_AT_MOST, AlertKind, Outage, Seen, Watch, alert_body};
use crate::storage::{NewAlert, StorageError};

/// How long one probe may take before it counts as failed: Telegram that accepts the
/// connection and never answers is as out of reach as Telegram that refuses it.
const PROBE_PATIENCE: Duration = Duration::from_secs(10);

impl Service {
    /// The watch a new leader starts from: the outage open in the database, if any, is
    /// the one to end, not one to announce again.
    pub async fn outage_watch(&self, alerts: &OutageAlerts) -> Result<Watch, StorageError> {
        let open = self.store.open_outage().await?;
        if let Some(outage) = &open {
            self.metrics.set_telegram_outage(true);
            tracing::warn!(
                outage = outage.id.as_str(),
                "a Telegram outage is open: watching for its end"
            );
        }
        Ok(Watch::new(alerts.after, open))
    }

    /// Asks Telegram once whether it answers, and stores what that changes: an outage
    /// begun or ended, with its alert for `alerts.url`. A storage error leaves the watch
    /// as it was, so the next probe tries again.
    pub async fn probe_telegram(&self, watch: &mut Watch, alerts: &OutageAlerts) {
        let started = now();
        let result = self.messenger.probe(PROBE_PATIENCE.min(alerts.after)).await;
        if let Err(e) = &result {
            tracing::debug!(error = %e, "Telegram did not answer the outage probe");
        }
        let stored = match watch.probed(result, started, now()) {
            Seen::Nothing => return,
            Seen::Began { since, error } => self.begin_outage(watch, alerts, since, &error).await,
            Seen::Ended { outage } => self.end_outage(watch, alerts, &outage).await,
        };
        if let Err(e) = stored {
            tracing::error!(error = %e, "cannot store a Telegram outage; trying again at the next probe");
        }
    }

    async fn begin_outage(
        &self,
        watch: &mut Watch,
        alerts: &OutageAlerts,
        since: OffsetDateTime,
        error: &str,
    ) -> Result<(), StorageError> {
        let outage = Outage {
            id: OutageId::generate(),
            since,
        };
        let at = now();
        let (waiting, count) = self.waiting().await?;
        let body = alert_body(
            AlertKind::Began,
            &outage,
            None,
            Some(error),
            &waiting,
            count,
        );
        let alert = alert(AlertKind::Began, alerts, &body);
        let event = audit::telegram_outage_started(&outage, error, count, at);
        if self
            .store
            .begin_outage(&outage, &event, Some(&alert), at)
            .await?
        {
            tracing::warn!(
                outage = outage.id.as_str(),
                since = %crate::domain::question::rfc3339(since),
                %error,
                waiting = count,
                "Telegram is out of reach: the waiting questions are announced to outage_webhook_url"
            );
            self.metrics.telegram_outage_began();
            watch.began(outage);
        } else if let Some(open) = self.store.open_outage().await? {
            // Another leader's, stored between our read and our write: it is announced.
            watch.began(open);
        }
        Ok(())
    }

    async fn end_outage(
        &self,
        watch: &mut Watch,
        alerts: &OutageAlerts,
        outage: &Outage,
    ) -> Result<(), StorageError> {
        let at = now();
        let (waiting, count) = self.waiting().await?;
        let body = alert_body(AlertKind::Ended, outage, Some(at), None, &waiting, count);
        let alert = alert(AlertKind::Ended, alerts, &body);
        let event = audit::telegram_outage_ended(outage, count, at);
        if self
            .store
            .end_outage(outage, &event, Some(&alert), at)
            .await?
        {
            tracing::info!(
                outage = outage.id.as_str(),
                waiting = count,
                "Telegram answers again: the outage's end is announced to outage_webhook_url"
            );
        }
        self.metrics.set_telegram_outage(false);
        watch.ended();
        Ok(())
    }

    /// The first pending questions (the soonest deadline first) and how many there are.
    async fn waiting(&self) -> Result<(Vec<crate::domain::question::Question>, u64), StorageError> {
        let listed = u32::try_from(ALERT_LISTS_AT_MOST).unwrap_or(u32::MAX);
        let waiting = self.store.pending_of(None, listed).await?;
        let count = self.store.pending().await?.len();
        Ok((waiting, u64::try_from(count).unwrap_or(u64::MAX)))
    }
}

fn alert(kind: AlertKind, alerts: &OutageAlerts, body: &serde_json::Value) -> NewAlert {
    NewAlert {
        delivery_id: DeliveryId::generate(),
        kind,
        url: alerts.url.to_string(),
        body: body.to_string(),
    }
}
