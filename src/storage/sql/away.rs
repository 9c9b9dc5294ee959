//! Approvers away: an absence set (replacing the person's last) or ended, each audited in
//! the same transaction, and the absences still running.

use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit;
use crate::domain::away::{Absence, Delegate};
use crate::domain::question::Operator;
use crate::storage::StorageError;
use crate::storage::rows::{from_ms, ms, user_column};

/// See [`crate::storage::AwayStore::set_away`].
pub(crate) async fn set_away(
    tx: &mut Transaction<'_, Db>,
    a: &Absence,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO away (person, until, delegate_id, delegate_name, set_at)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (person) DO UPDATE SET until = $2, delegate_id = $3,
             delegate_name = $4, set_at = $5",
    )
    .bind(user_column(a.person))
    .bind(ms(a.until))
    .bind(a.delegate.as_ref().map(|d| user_column(d.id)))
    .bind(a.delegate.as_ref().map(|d| d.name.as_str()))
    .bind(ms(now))
    .execute(&mut **tx)
    .await?;
    append_event(tx, &audit::away_set(a, by, now)).await
}

/// See [`crate::storage::AwayStore::end_away`].
pub(crate) async fn end_away(
    tx: &mut Transaction<'_, Db>,
    person: u64,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<bool, StorageError> {
    let ended = sqlx::query("UPDATE away SET until = $1 WHERE person = $2 AND until > $1")
        .bind(ms(now))
        .bind(user_column(person))
        .execute(&mut **tx)
        .await?
        .rows_affected()
        == 1;
    if ended {
        append_event(tx, &audit::away_ended(person, by, now)).await?;
    }
    Ok(ended)
}

/// See [`crate::storage::AwayStore::absences`].
pub(crate) async fn absences(
    pool: &Pool<Db>,
    now: OffsetDateTime,
) -> Result<Vec<Absence>, StorageError> {
    let rows: Vec<(i64, i64, Option<i64>, Option<String>)> = sqlx::query_as(
        "SELECT person, until, delegate_id, delegate_name FROM away WHERE until > $1
         ORDER BY person",
    )
    .bind(ms(now))
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(person, until, d_id, d_name)| {
            let corrupt = |what: &str| StorageError::Corrupt {
                id: format!("away:{person}"),
                what: what.into(),
            };
            Ok(Absence {
                person: u64::try_from(person).map_err(|_| corrupt("person"))?,
                until: from_ms(until).ok_or_else(|| corrupt("until"))?,
                delegate: match (d_id, d_name) {
                    (Some(id), Some(name)) => Some(Delegate {
                        id: u64::try_from(id).map_err(|_| corrupt("delegate_id"))?,
                        name,
                    }),
                    _ => None,
                },
            })
        })
        .collect()
}
