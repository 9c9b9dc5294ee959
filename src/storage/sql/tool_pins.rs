//! MCP tool pins: a gateway's listing recorded (its first listing once, by the primary
//! key of `mcp_servers`), a quarantined definition's message, and the Allow that makes
//! it the pin (one conditional `UPDATE` on its button's token).

use sqlx::{Pool, Transaction};
use time::OffsetDateTime;

use super::{Db, append_event};
use crate::domain::audit::{self, PinPlace};
use crate::domain::ids::CallbackToken;
use crate::domain::question::Operator;
use crate::domain::tool_pin::{self, Listed, PendingWhy, PinMode, ToolDefinition};
use crate::storage::StorageError;
use crate::storage::pins::{
    ListedTool, Listing, PinRow, Quarantined, REPOST_AFTER, ToolPin, pin_columns,
};
use crate::storage::rows::{ms, operator_columns};

/// See [`crate::storage::ToolPins::record_listing`]. Runs in the audit transaction, so
/// two listings of one server (two gateways, two replicas) are recorded one after the
/// other, each reading what the other wrote.
pub(crate) async fn record_listing(
    tx: &mut Transaction<'_, Db>,
    l: &Listing<'_>,
    now: OffsetDateTime,
) -> Result<Vec<ListedTool>, StorageError> {
    let first = sqlx::query(
        "INSERT INTO mcp_servers (agent, server, first_listed_at, pin_mode, route)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
    )
    .bind(l.agent)
    .bind(l.server.as_str())
    .bind(ms(now))
    .bind(l.mode.as_str())
    .bind(l.route)
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    let place = PinPlace {
        agent: l.agent,
        server: l.server.as_str(),
        route: l.route,
    };
    if first {
        return record_first(tx, l, &place, now).await;
    }
    let mut out = Vec::with_capacity(l.tools.len());
    for def in l.tools {
        let stored = pin(&mut **tx, l, def.name()).await?;
        let allowed = stored.as_ref().and_then(|p| p.allowed.clone());
        let pending = stored.as_ref().and_then(|p| p.pending.clone());
        let listed = tool_pin::judge(
            allowed.as_ref().map(ToolDefinition::hash),
            pending.as_ref().map(|p| p.definition.hash()),
            def.hash(),
        );
        let held = match (listed, pending) {
            (Listed::Allowed, pending) => {
                if pending.is_some() {
                    // Listed as allowed again: what waited is no longer offered, and
                    // its button must not make it the pin behind the server's back.
                    clear_pending(tx, l, def.name()).await?;
                }
                None
            }
            (Listed::StillPending, Some(p)) => {
                // Shown again only when its message never reached the chat, and
                // claimed (its time moved on) so that one listing of several shows it.
                let show = p.message.is_none()
                    && p.since + REPOST_AFTER <= now
                    && claim_repost(tx, &p.token, l, def.name(), p.since, now).await?;
                Some(Quarantined {
                    why: p.why,
                    token: p.token,
                    allowed,
                    show,
                })
            }
            // (`StillPending` always comes with what is held.)
            (Listed::New | Listed::Changed | Listed::StillPending, _) => {
                let why = if allowed.is_none() {
                    PendingWhy::New
                } else {
                    PendingWhy::Changed
                };
                let token = CallbackToken::generate();
                Some(hold(tx, l, &place, def, why, token, allowed, now).await?)
            }
        };
        out.push(ListedTool {
            definition: def.clone(),
            allowed: held.is_none(),
            first_listing: false,
            pending: held,
        });
    }
    Ok(out)
}

/// The server's first listing: every tool allowed as listed (`first`), or held under one
/// token, to be allowed as a whole (`strict`).
async fn record_first(
    tx: &mut Transaction<'_, Db>,
    l: &Listing<'_>,
    place: &PinPlace<'_>,
    now: OffsetDateTime,
) -> Result<Vec<ListedTool>, StorageError> {
    let mut out = Vec::with_capacity(l.tools.len());
    match l.mode {
        PinMode::First => {
            for def in l.tools {
                sqlx::query(
                    "INSERT INTO mcp_tool_pins (agent, server, tool, first_seen_at,
                         allowed_hash, allowed_json, allowed_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $4)",
                )
                .bind(l.agent)
                .bind(l.server.as_str())
                .bind(def.name())
                .bind(ms(now))
                .bind(def.hash())
                .bind(def.canonical())
                .execute(&mut **tx)
                .await?;
                out.push(ListedTool {
                    definition: def.clone(),
                    allowed: true,
                    first_listing: true,
                    pending: None,
                });
            }
            let tools: Vec<(&str, &str)> = l.tools.iter().map(|d| (d.name(), d.hash())).collect();
            append_event(tx, &audit::tools_pinned(now, place, &tools)).await?;
        }
        PinMode::Strict => {
            let token = CallbackToken::generate();
            let why = PendingWhy::FirstListing;
            for def in l.tools {
                let held = hold(tx, l, place, def, why, token.clone(), None, now).await?;
                out.push(ListedTool {
                    definition: def.clone(),
                    allowed: false,
                    first_listing: true,
                    pending: Some(held),
                });
            }
        }
    }
    Ok(out)
}

/// Holds `def` as the tool's pending definition under `token` (a new row for a tool
/// never seen), replacing any definition held before, whose button then allows nothing;
/// audited `tool_quarantined`. `allowed`: the tool's allowed definition, if any.
#[allow(clippy::too_many_arguments)] // one listing's place and one tool's terms
async fn hold(
    tx: &mut Transaction<'_, Db>,
    l: &Listing<'_>,
    place: &PinPlace<'_>,
    def: &ToolDefinition,
    why: PendingWhy,
    token: CallbackToken,
    allowed: Option<ToolDefinition>,
    now: OffsetDateTime,
) -> Result<Quarantined, StorageError> {
    sqlx::query(
        "INSERT INTO mcp_tool_pins (agent, server, tool, first_seen_at, pending_hash,
             pending_json, pending_since, pending_why, pending_route, pending_token,
             pending_chat_id)
         VALUES ($1, $2, $3, $4, $5, $6, $4, $7, $8, $9, $10)
         ON CONFLICT (agent, server, tool) DO UPDATE SET
             pending_hash = excluded.pending_hash, pending_json = excluded.pending_json,
             pending_since = excluded.pending_since, pending_why = excluded.pending_why,
             pending_route = excluded.pending_route, pending_token = excluded.pending_token,
             pending_chat_id = excluded.pending_chat_id, pending_message_id = NULL",
    )
    .bind(l.agent)
    .bind(l.server.as_str())
    .bind(def.name())
    .bind(ms(now))
    .bind(def.hash())
    .bind(def.canonical())
    .bind(why.as_str())
    .bind(l.route)
    .bind(token.as_str())
    .bind(l.chat_id)
    .execute(&mut **tx)
    .await?;
    let event = audit::tool_quarantined(
        now,
        place,
        def.name(),
        def.hash(),
        allowed.as_ref().map(ToolDefinition::hash),
        why.as_str(),
    );
    append_event(tx, &event).await?;
    Ok(Quarantined {
        why,
        token,
        allowed,
        show: true,
    })
}

async fn clear_pending(
    tx: &mut Transaction<'_, Db>,
    l: &Listing<'_>,
    tool: &str,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE mcp_tool_pins SET pending_hash = NULL, pending_json = NULL,
             pending_since = NULL, pending_why = NULL, pending_route = NULL,
             pending_token = NULL, pending_chat_id = NULL, pending_message_id = NULL
         WHERE agent = $1 AND server = $2 AND tool = $3",
    )
    .bind(l.agent)
    .bind(l.server.as_str())
    .bind(tool)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Takes the right to post a held definition again (its `pending_since` moved from
/// `since` to `now`); false when another listing took it first.
async fn claim_repost(
    tx: &mut Transaction<'_, Db>,
    token: &CallbackToken,
    l: &Listing<'_>,
    tool: &str,
    since: OffsetDateTime,
    now: OffsetDateTime,
) -> Result<bool, StorageError> {
    let claimed = sqlx::query(
        "UPDATE mcp_tool_pins SET pending_since = $1
         WHERE agent = $2 AND server = $3 AND tool = $4 AND pending_token = $5
           AND pending_since = $6 AND pending_message_id IS NULL",
    )
    .bind(ms(now))
    .bind(l.agent)
    .bind(l.server.as_str())
    .bind(tool)
    .bind(token.as_str())
    .bind(ms(since))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(claimed > 0)
}

/// The pin of `tool` of the listing's server, if the tool was ever listed.
async fn pin<'e>(
    db: impl sqlx::Executor<'e, Database = Db>,
    l: &Listing<'_>,
    tool: &str,
) -> Result<Option<ToolPin>, StorageError> {
    let row: Option<PinRow> = sqlx::query_as(concat!(
        "SELECT ",
        pin_columns!(),
        " FROM mcp_tool_pins WHERE agent = $1 AND server = $2 AND tool = $3"
    ))
    .bind(l.agent)
    .bind(l.server.as_str())
    .bind(tool)
    .fetch_optional(db)
    .await?;
    row.map(PinRow::into_pin).transpose()
}

/// See [`crate::storage::ToolPins::set_pin_message`].
pub(crate) async fn set_pin_message(
    pool: &Pool<Db>,
    token: &CallbackToken,
    chat_id: i64,
    message_id: i32,
) -> Result<(), StorageError> {
    sqlx::query(
        "UPDATE mcp_tool_pins SET pending_chat_id = $1, pending_message_id = $2
         WHERE pending_token = $3",
    )
    .bind(chat_id)
    .bind(i64::from(message_id))
    .bind(token.as_str())
    .execute(pool)
    .await?;
    Ok(())
}

/// See [`crate::storage::ToolPins::pending_pins`].
pub(crate) async fn pending_pins(
    pool: &Pool<Db>,
    token: &CallbackToken,
) -> Result<Vec<ToolPin>, StorageError> {
    held_under(pool, token).await
}

/// The pins whose held definition waits under `token`, by tool name.
async fn held_under<'e>(
    db: impl sqlx::Executor<'e, Database = Db>,
    token: &CallbackToken,
) -> Result<Vec<ToolPin>, StorageError> {
    let rows: Vec<PinRow> = sqlx::query_as(concat!(
        "SELECT ",
        pin_columns!(),
        " FROM mcp_tool_pins WHERE pending_token = $1 ORDER BY tool",
        bytewise!()
    ))
    .bind(token.as_str())
    .fetch_all(db)
    .await?;
    rows.into_iter().map(PinRow::into_pin).collect()
}

/// See [`crate::storage::ToolPins::tool_pins`].
pub(crate) async fn tool_pins(
    pool: &Pool<Db>,
    agent: &str,
    server: &str,
) -> Result<Vec<ToolPin>, StorageError> {
    let rows: Vec<PinRow> = sqlx::query_as(concat!(
        "SELECT ",
        pin_columns!(),
        " FROM mcp_tool_pins WHERE agent = $1 AND server = $2 ORDER BY tool",
        bytewise!()
    ))
    .bind(agent)
    .bind(server)
    .fetch_all(pool)
    .await?;
    rows.into_iter().map(PinRow::into_pin).collect()
}

/// See [`crate::storage::ToolPins::allow_pins`]: the rows as they were, then one
/// conditional `UPDATE` on the token. Of two taps (on one replica or two) the second
/// finds the token gone once the first committed (PostgreSQL re-checks the condition
/// after the row lock, SQLite has one writer), so it allows and audits nothing.
pub(crate) async fn allow_pins(
    tx: &mut Transaction<'_, Db>,
    token: &CallbackToken,
    by: &Operator,
    now: OffsetDateTime,
) -> Result<Vec<ToolPin>, StorageError> {
    let before = held_under(&mut **tx, token).await?;
    let (by_id, by_username, by_name) = operator_columns(&Some(by.clone()));
    let allowed: Vec<String> = sqlx::query_scalar(
        "UPDATE mcp_tool_pins SET allowed_hash = pending_hash, allowed_json = pending_json,
             allowed_at = $1, allowed_by_id = $2, allowed_by_username = $3,
             allowed_by_name = $4,
             pending_hash = NULL, pending_json = NULL, pending_since = NULL,
             pending_why = NULL, pending_route = NULL, pending_token = NULL,
             pending_chat_id = NULL, pending_message_id = NULL
         WHERE pending_token = $5
         RETURNING tool",
    )
    .bind(ms(now))
    .bind(by_id)
    .bind(by_username)
    .bind(by_name)
    .bind(token.as_str())
    .fetch_all(&mut **tx)
    .await?;
    let taken: Vec<ToolPin> = before
        .into_iter()
        .filter(|p| allowed.contains(&p.tool))
        .collect();
    for p in &taken {
        let Some(pending) = &p.pending else { continue };
        let place = PinPlace {
            agent: &p.agent,
            server: &p.server,
            route: &pending.route,
        };
        let event = audit::tool_allowed(
            now,
            &place,
            &p.tool,
            pending.definition.hash(),
            p.allowed.as_ref().map(ToolDefinition::hash),
            by,
        );
        append_event(tx, &event).await?;
    }
    Ok(taken)
}
