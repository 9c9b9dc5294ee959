//! Grants: storing one (an interaction or a question used once), the lookups a call's
//! grant check and the listings run, and revoking. Every read goes to the table: a
//! revoke committed by any process sharing the database stops the grant at once.

// The backend's dialect macros (`bytewise!` and the like) come from the parent
// backend module (see `mod.rs`).
use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit;
use crate::domain::grant::{Grant, GrantSource, Scope};
use crate::domain::ids::{GrantId, OwnerId};
use crate::domain::question::Operator;
use crate::storage::rows::{
    GrantRow, grant_columns, ms, operator_columns, select_grants_where, user_column,
};
use crate::storage::{GrantInserted, StorageError};

/// See [`crate::storage::Grants::insert_grant`]. One statement: `ON CONFLICT DO NOTHING`
/// lets the unique indexes decide (an interaction or a question already used), so two
/// processes inserting at once cannot both succeed.
pub(crate) async fn insert_grant(
    tx: &mut Transaction<'_, Db>,
    g: &Grant,
) -> Result<GrantInserted, StorageError> {
    let (confirmation_id, interaction_id) = match &g.source {
        GrantSource::Asked { confirmation_id } => (Some(confirmation_id.as_str()), None),
        GrantSource::Interaction { interaction_id } => (None, Some(interaction_id.as_str())),
    };
    let (revoked_by_id, revoked_by_username, revoked_by_name) = operator_columns(&g.revoked_by);
    let written = sqlx::query(concat!(
        "INSERT INTO grants (",
        grant_columns!(),
        ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
            $17)
         ON CONFLICT DO NOTHING"
    ))
    .bind(g.grant_id.as_str())
    .bind(&g.agent)
    .bind(g.owner_id.as_str())
    .bind(g.scope.as_str())
    .bind(&g.route)
    .bind(g.reason.as_deref())
    .bind(user_column(g.granted_by.id))
    .bind(g.granted_by.username.as_deref())
    .bind(&g.granted_by.name)
    .bind(ms(g.created_at))
    .bind(ms(g.expires_at))
    .bind(g.revoked_at.map(ms))
    .bind(revoked_by_id)
    .bind(revoked_by_username)
    .bind(revoked_by_name)
    .bind(confirmation_id)
    .bind(interaction_id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if written == 1 {
        append_event(tx, &audit::grant_created(g)).await?;
        return Ok(GrantInserted::New(g.clone()));
    }
    // Nothing written: a unique index held the source already. (Or the new grant's
    // random id was taken, which 80 random bits make a fault, not a case.)
    match &g.source {
        GrantSource::Asked { confirmation_id } => {
            let held = select_grant(
                &mut **tx,
                select_grants_where!("confirmation_id = $1"),
                confirmation_id.as_str(),
            )
            .await?;
            if let Some(existing) = held {
                return Ok(GrantInserted::Existing(existing));
            }
        }
        GrantSource::Interaction { interaction_id } => {
            let used: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM grants WHERE agent = $1 AND interaction_id = $2)",
            )
            .bind(&g.agent)
            .bind(interaction_id)
            .fetch_one(&mut **tx)
            .await?;
            if used {
                return Ok(GrantInserted::InteractionUsed);
            }
        }
    }
    Err(StorageError::Corrupt {
        id: g.grant_id.to_string(),
        what: "the new grant's id is taken by another grant".into(),
    })
}

/// See [`crate::storage::Grants::grant`].
pub(crate) async fn grant(pool: &Pool<Db>, id: &GrantId) -> Result<Option<Grant>, StorageError> {
    select_grant(pool, select_grants_where!("grant_id = $1"), id.as_str()).await
}

/// The grant `sql` selects by its one parameter, `key` (a unique column).
async fn select_grant<'e>(
    db: impl sqlx::Executor<'e, Database = Db>,
    sql: &'static str,
    key: &str,
) -> Result<Option<Grant>, StorageError> {
    let row: Option<GrantRow> = sqlx::query_as(sql).bind(key).fetch_optional(db).await?;
    row.map(GrantRow::into_domain).transpose()
}

/// See [`crate::storage::Grants::live_grant_covering`]: the scope itself or its kind's
/// `*` are the only scopes that cover it ([`Scope::covers`]), so one indexed lookup of
/// the two answers.
pub(crate) async fn live_grant_covering(
    pool: &Pool<Db>,
    agent: &str,
    owner_id: &OwnerId,
    scope: &Scope,
    now: OffsetDateTime,
) -> Result<Option<Grant>, StorageError> {
    let row: Option<GrantRow> = sqlx::query_as(select_grants_where!(concat!(
        "agent = $1 AND owner_id = $2 AND scope IN ($3, $4)
           AND revoked_at IS NULL AND expires_at > $5
         ORDER BY expires_at DESC, grant_id",
        bytewise!(),
        " DESC LIMIT 1"
    )))
    .bind(agent)
    .bind(owner_id.as_str())
    .bind(scope.as_str())
    .bind(scope.wildcard().as_str())
    .bind(ms(now))
    .fetch_optional(pool)
    .await?;
    row.map(GrantRow::into_domain).transpose()
}

/// See [`crate::storage::Grants::live_grants`]. One statement for every choice of filters:
/// the live grants are the few rows past `now` on the expiry index, whatever else is asked.
pub(crate) async fn live_grants(
    pool: &Pool<Db>,
    agent: Option<&str>,
    route: Option<&str>,
    now: OffsetDateTime,
) -> Result<Vec<Grant>, StorageError> {
    let rows: Vec<GrantRow> = sqlx::query_as(select_grants_where!(concat!(
        "revoked_at IS NULL AND expires_at > $1
           AND ($2 IS NULL OR agent = $2) AND ($3 IS NULL OR route = $3)
         ORDER BY expires_at, grant_id",
        bytewise!()
    )))
    .bind(ms(now))
    .bind(agent)
    .bind(route)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(GrantRow::into_domain).collect()
}

/// See [`crate::storage::Grants::revoke_grant`]: one conditional `UPDATE`, so of two
/// revokes at once (on one replica or two) exactly one changes the row; the other's
/// condition no longer holds once the first committed (PostgreSQL re-checks it after the
/// row lock, SQLite has one writer).
pub(crate) async fn revoke_grant(
    tx: &mut Transaction<'_, Db>,
    id: &GrantId,
    agent: Option<&str>,
    by: Option<&Operator>,
    now: OffsetDateTime,
) -> Result<Option<Grant>, StorageError> {
    let (by_id, by_username, by_name) = operator_columns(&by.cloned());
    let row: Option<GrantRow> = sqlx::query_as(concat!(
        "UPDATE grants SET revoked_at = $1, revoked_by_id = $2, revoked_by_username = $3,
             revoked_by_name = $4
         WHERE grant_id = $5 AND ($6 IS NULL OR agent = $6)
           AND revoked_at IS NULL AND expires_at > $1
         RETURNING ",
        grant_columns!()
    ))
    .bind(ms(now))
    .bind(by_id)
    .bind(by_username)
    .bind(by_name)
    .bind(id.as_str())
    .bind(agent)
    .fetch_optional(&mut **tx)
    .await?;
    let revoked = row.map(GrantRow::into_domain).transpose()?;
    if let Some(g) = &revoked {
        append_event(tx, &audit::grant_revoked(g, now)).await?;
    }
    Ok(revoked)
}
