//! Rules accepted in a route's chat (issue 50): proposals stored under their id, moved
//! by a tap with one conditional `UPDATE` on the state the tap saw (audited in the same
//! transaction), and the decisions people made that proposals are drawn from.

use sqlx::{Executor, Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit;
use crate::domain::question::Operator;
use crate::domain::rules::suggest::Decided;
use crate::domain::rules::{ChatRuleRecord, ChatRuleState, RawRule};
use crate::storage::StorageError;
use crate::storage::rows::{from_ms, ms, operator_columns};

/// The columns of `chat_rules`, in [`RuleRow`]'s order (a macro, so every statement
/// stays a literal).
macro_rules! columns {
    () => {
        "id, route, rule_json, summary, toml, decisions, state, proposed_at,
         added_at, added_by_id, added_by_username, added_by_name,
         changed_at, changed_by_id, changed_by_username, changed_by_name"
    };
}

type RuleRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<String>,
    Option<String>,
);

/// See [`crate::storage::ChatRulesStore::propose_chat_rules`].
pub(crate) async fn propose_chat_rules(
    pool: &Pool<Db>,
    proposals: &[ChatRuleRecord],
    now: OffsetDateTime,
) -> Result<Vec<ChatRuleRecord>, StorageError> {
    let mut out = Vec::with_capacity(proposals.len());
    for p in proposals {
        let rule_json = serde_json::to_string(&p.rule).map_err(|e| StorageError::Corrupt {
            id: p.id.clone(),
            what: format!("rule_json: {e}"),
        })?;
        // A rule in force or in a dry run stays as it is; one removed may be proposed
        // again (the history still says so).
        let row: Option<RuleRow> = sqlx::query_as(concat!(
            "INSERT INTO chat_rules (id, route, name, effect, rule_json, summary, toml,
                 decisions, state, proposed_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'proposed', $9)
             ON CONFLICT (id) DO UPDATE SET state = 'proposed', decisions = $8,
                 rule_json = $5, summary = $6, toml = $7, proposed_at = $9
             WHERE chat_rules.state IN ('proposed', 'removed')
             RETURNING ",
            columns!()
        ))
        .bind(&p.id)
        .bind(&p.route)
        .bind(&p.rule.name)
        .bind(p.rule.effect.as_str())
        .bind(rule_json)
        .bind(&p.summary)
        .bind(&p.toml)
        .bind(i64::try_from(p.count).unwrap_or(i64::MAX))
        .bind(ms(now))
        .fetch_optional(pool)
        .await?;
        if let Some(row) = row {
            out.push(record(row)?);
        }
    }
    Ok(out)
}

/// See [`crate::storage::ChatRulesStore::chat_rule`].
pub(crate) async fn chat_rule<'e, E: Executor<'e, Database = Db>>(
    e: E,
    id: &str,
) -> Result<Option<ChatRuleRecord>, StorageError> {
    let row: Option<RuleRow> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM chat_rules WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(e)
    .await?;
    row.map(record).transpose()
}

/// See [`crate::storage::ChatRulesStore::chat_rules`].
pub(crate) async fn chat_rules(pool: &Pool<Db>) -> Result<Vec<ChatRuleRecord>, StorageError> {
    let rows: Vec<RuleRow> = sqlx::query_as(concat!(
        "SELECT ",
        columns!(),
        " FROM chat_rules WHERE state IN ('dry_run', 'enforce') ORDER BY added_at, id"
    ))
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(record).collect()
}

/// See [`crate::storage::ChatRulesStore::move_chat_rule`]. The `UPDATE` names the
/// states the tap may move from, so a second tap (here or on another replica) moves
/// nothing.
pub(crate) async fn move_chat_rule(
    tx: &mut Transaction<'_, Db>,
    id: &str,
    from: &[ChatRuleState],
    to: ChatRuleState,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<Option<(ChatRuleState, ChatRuleRecord)>, StorageError> {
    let Some(before) = chat_rule(&mut **tx, id).await? else {
        return Ok(None);
    };
    if !from.contains(&before.state) {
        return Ok(None);
    }
    let (by_id, by_username, by_name) = operator_columns(&Some(by.clone()));
    // Accepting (from a proposal) records who added it; every move records who moved it.
    let adding = before.state == ChatRuleState::Proposed;
    let moved = sqlx::query(
        "UPDATE chat_rules SET state = $1,
             added_at = CASE WHEN $2 THEN $3 ELSE added_at END,
             added_by_id = CASE WHEN $2 THEN $4 ELSE added_by_id END,
             added_by_username = CASE WHEN $2 THEN $5 ELSE added_by_username END,
             added_by_name = CASE WHEN $2 THEN $6 ELSE added_by_name END,
             changed_at = $3, changed_by_id = $4, changed_by_username = $5,
             changed_by_name = $6
         WHERE id = $7 AND state = $8",
    )
    .bind(to.as_str())
    .bind(adding)
    .bind(ms(now))
    .bind(by_id)
    .bind(by_username)
    .bind(by_name)
    .bind(id)
    .bind(before.state.as_str())
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if moved != 1 {
        return Ok(None);
    }
    append_event(tx, &audit::chat_rule_moved(now, &before, to, by)).await?;
    let after = chat_rule(&mut **tx, id)
        .await?
        .ok_or(StorageError::Corrupt {
            id: id.to_owned(),
            what: "chat rule gone within its transaction".into(),
        })?;
    Ok(Some((before.state, after)))
}

/// See [`crate::storage::ChatRulesStore::last_proposed_at`].
pub(crate) async fn last_proposed_at(
    pool: &Pool<Db>,
    route: &str,
) -> Result<Option<OffsetDateTime>, StorageError> {
    let last: Option<i64> =
        sqlx::query_scalar("SELECT MAX(proposed_at) FROM chat_rules WHERE route = $1")
            .bind(route)
            .fetch_one(pool)
            .await?;
    Ok(last.and_then(from_ms))
}

/// What people decided on a route since a time, the latest first (through the index on
/// `(route, created_at)`).
pub(crate) const DECIDED_IN_ROUTE: &str =
    "SELECT agent, tool, owner_id, params_json, status FROM confirmations
     WHERE route = $1 AND created_at >= $2 AND interaction_id IS NULL
       AND via = 'operator' AND status IN ('confirmed', 'cancelled')
     ORDER BY created_at DESC LIMIT $3";

/// See [`crate::storage::ChatRulesStore::decided_by_people`].
pub(crate) async fn decided_by_people(
    pool: &Pool<Db>,
    route: &str,
    since: OffsetDateTime,
    limit: u32,
) -> Result<Vec<Decided>, StorageError> {
    let rows: Vec<(String, String, String, String, String)> = sqlx::query_as(DECIDED_IN_ROUTE)
        .bind(route)
        .bind(ms(since))
        .bind(i64::from(limit))
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(agent, tool, owner, params_json, status)| Decided {
            agent,
            tool,
            owner: Some(owner),
            params_json,
            approved: status == "confirmed",
        })
        .collect())
}

/// A stored row as a record; a row this version cannot read is corrupt, named by id.
fn record(row: RuleRow) -> Result<ChatRuleRecord, StorageError> {
    let (id, route, rule_json, summary, toml, decisions, state, proposed_at) =
        (row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7);
    let corrupt = |what: &str| StorageError::Corrupt {
        id: id.clone(),
        what: what.into(),
    };
    let rule: RawRule = serde_json::from_str(&rule_json).map_err(|_| corrupt("rule_json"))?;
    let state = ChatRuleState::parse(&state).ok_or_else(|| corrupt("state"))?;
    let person = |at: Option<i64>, id: Option<i64>, username, name: Option<String>| match (
        at.and_then(from_ms),
        id.and_then(|i| u64::try_from(i).ok()),
    ) {
        (Some(at), Some(id)) => Some((
            Operator {
                id,
                username,
                name: name.unwrap_or_default(),
            },
            at,
        )),
        _ => None,
    };
    Ok(ChatRuleRecord {
        route,
        rule,
        summary,
        toml,
        count: u64::try_from(decisions).unwrap_or(0),
        state,
        proposed_at: from_ms(proposed_at).ok_or_else(|| corrupt("proposed_at"))?,
        added: person(row.8, row.9, row.10, row.11),
        changed: person(row.12, row.13, row.14, row.15),
        id,
    })
}
