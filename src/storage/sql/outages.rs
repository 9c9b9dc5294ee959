//! Telegram outages: the one open, its beginning and end (each with its audit event and
//! its alert in one transaction), and the alerts' deliveries.

use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit::{self, NewEvent};
use crate::domain::ids::{DeliveryId, OutageId};
use crate::domain::outage::Outage;
use crate::storage::rows::{from_ms, ms};
use crate::storage::{AlertEntry, DeliveryAttempt, NewAlert, StorageError};

/// See [`crate::storage::Outages::open_outage`].
pub(crate) async fn open_outage(pool: &Pool<Db>) -> Result<Option<Outage>, StorageError> {
    let row: Option<(String, i64)> =
        sqlx::query_as("SELECT id, since FROM telegram_outages WHERE ended_at IS NULL")
            .fetch_optional(pool)
            .await?;
    row.map(|(id, since)| {
        let corrupt = |what: &str| StorageError::Corrupt {
            id: id.clone(),
            what: what.into(),
        };
        Ok(Outage {
            id: OutageId::parse(&id).map_err(|_| corrupt("id"))?,
            since: from_ms(since).ok_or_else(|| corrupt("since"))?,
        })
    })
    .transpose()
}

/// See [`crate::storage::Outages::begin_outage`]. The partial unique index on open
/// outages turns a second leader's beginning into no row.
pub(crate) async fn begin_outage(
    tx: &mut Transaction<'_, Db>,
    outage: &Outage,
    event: &NewEvent,
    alert: Option<&NewAlert>,
    now: OffsetDateTime,
) -> Result<bool, StorageError> {
    let began = sqlx::query(
        "INSERT INTO telegram_outages (id, since, began_at) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(outage.id.as_str())
    .bind(ms(outage.since))
    .bind(ms(now))
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if began {
        queue_alert(tx, &outage.id, alert, now).await?;
        append_event(tx, event).await?;
    }
    Ok(began)
}

/// See [`crate::storage::Outages::end_outage`].
pub(crate) async fn end_outage(
    tx: &mut Transaction<'_, Db>,
    outage: &Outage,
    event: &NewEvent,
    alert: Option<&NewAlert>,
    now: OffsetDateTime,
) -> Result<bool, StorageError> {
    let ended =
        sqlx::query("UPDATE telegram_outages SET ended_at = $1 WHERE id = $2 AND ended_at IS NULL")
            .bind(ms(now))
            .bind(outage.id.as_str())
            .execute(&mut **tx)
            .await?
            .rows_affected()
            == 1;
    if ended {
        queue_alert(tx, &outage.id, alert, now).await?;
        append_event(tx, event).await?;
    }
    Ok(ended)
}

async fn queue_alert(
    tx: &mut Transaction<'_, Db>,
    outage: &OutageId,
    alert: Option<&NewAlert>,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    let Some(a) = alert else {
        return Ok(());
    };
    sqlx::query(
        "INSERT INTO outage_alerts (delivery_id, outage_id, kind, url, body, created_at,
             next_attempt_at)
         VALUES ($1, $2, $3, $4, $5, $6, $6)",
    )
    .bind(a.delivery_id.as_str())
    .bind(outage.as_str())
    .bind(a.kind.as_str())
    .bind(&a.url)
    .bind(&a.body)
    .bind(ms(now))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// See [`crate::storage::Outages::due_alerts`].
pub(crate) async fn due_alerts(
    pool: &Pool<Db>,
    now: OffsetDateTime,
    limit: u32,
) -> Result<Vec<AlertEntry>, StorageError> {
    type AlertRow = (String, String, String, String, String, i64, i64);
    let rows: Vec<AlertRow> = sqlx::query_as(
        "SELECT delivery_id, outage_id, kind, url, body, created_at, attempts
         FROM outage_alerts WHERE state = 'pending' AND next_attempt_at <= $1
         ORDER BY next_attempt_at, created_at LIMIT $2",
    )
    .bind(ms(now))
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(
            |(delivery, outage, kind, url, body, created_at, attempts)| {
                let corrupt = |what: &str| StorageError::Corrupt {
                    id: delivery.clone(),
                    what: what.into(),
                };
                Ok(AlertEntry {
                    delivery_id: DeliveryId::parse(&delivery)
                        .map_err(|_| corrupt("delivery_id"))?,
                    outage_id: OutageId::parse(&outage).map_err(|_| corrupt("outage_id"))?,
                    created_at: from_ms(created_at).ok_or_else(|| corrupt("created_at"))?,
                    attempts: u32::try_from(attempts).unwrap_or(u32::MAX),
                    kind,
                    url,
                    body,
                })
            },
        )
        .collect()
}

/// See [`crate::storage::Outages::next_alert_due_after`].
pub(crate) async fn next_alert_due_after(
    pool: &Pool<Db>,
    after: OffsetDateTime,
) -> Result<Option<OffsetDateTime>, StorageError> {
    let (due,): (Option<i64>,) = sqlx::query_as(
        "SELECT MIN(next_attempt_at) FROM outage_alerts
         WHERE state = 'pending' AND next_attempt_at > $1",
    )
    .bind(ms(after))
    .fetch_one(pool)
    .await?;
    Ok(due.and_then(from_ms))
}

/// The audit event of an alert's attempt, when it is final.
pub(crate) fn alert_event(
    entry: &AlertEntry,
    result: &DeliveryAttempt,
    now: OffsetDateTime,
) -> Option<NewEvent> {
    let (outage, delivery) = (entry.outage_id.as_str(), entry.delivery_id.as_str());
    match result {
        DeliveryAttempt::Delivered => Some(audit::outage_alert(
            outage,
            delivery,
            &entry.kind,
            None,
            now,
        )),
        DeliveryAttempt::Retry { .. } => None,
        DeliveryAttempt::GiveUp { error } => Some(audit::outage_alert(
            outage,
            delivery,
            &entry.kind,
            Some(error),
            now,
        )),
    }
}
