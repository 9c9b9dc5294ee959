//! What the [`ToolPins`](super::ToolPins) role takes and gives: an MCP server's listing
//! as a gateway sent it, what became of each tool, and a tool's pin as stored.

use sqlx::FromRow;
use time::OffsetDateTime;

use super::StorageError;
use super::rows::from_ms;
use crate::domain::ids::CallbackToken;
use crate::domain::question::Operator;
use crate::domain::tool_pin::{PendingWhy, PinMode, ServerName, ToolDefinition};

/// How long a quarantined definition whose message never reached the chat (Telegram
/// refused, the process stopped) waits before a later listing posts it again: long
/// enough that a post still on its way is not doubled.
pub const REPOST_AFTER: time::Duration = time::Duration::seconds(60);

/// One `tools/list` result of an agent's gateway, to record.
#[derive(Debug)]
pub struct Listing<'a> {
    pub agent: &'a str,
    pub server: &'a ServerName,
    /// The route whose approvers are asked (and whose chat is told).
    pub route: &'a str,
    /// That route's chat now.
    pub chat_id: i64,
    /// How the server's first listing is taken (later ones are not affected).
    pub mode: PinMode,
    /// In the order listed; names are distinct.
    pub tools: &'a [ToolDefinition],
}

/// What became of one listed tool.
#[derive(Debug, Clone)]
pub struct ListedTool {
    pub definition: ToolDefinition,
    /// Allowed: the gateway may offer and call it.
    pub allowed: bool,
    /// The listing was the server's first (allowed as listed, or held as a whole).
    pub first_listing: bool,
    /// Quarantined: what waits for a person, and whether to show it now.
    pub pending: Option<Quarantined>,
}

/// A listed definition held for a person.
#[derive(Debug, Clone)]
pub struct Quarantined {
    pub why: PendingWhy,
    /// What its Allow button carries.
    pub token: CallbackToken,
    /// The definition allowed before, for a changed one's diff.
    pub allowed: Option<ToolDefinition>,
    /// It is to be shown in the chat now: newly held, or held with no message that
    /// reached the chat for [`REPOST_AFTER`].
    pub show: bool,
}

/// A tool's pin as stored.
#[derive(Debug, Clone)]
pub struct ToolPin {
    pub agent: String,
    pub server: String,
    pub tool: String,
    pub first_seen_at: OffsetDateTime,
    pub allowed: Option<ToolDefinition>,
    pub allowed_at: Option<OffsetDateTime>,
    /// `None` with an allowed definition: taken as first listed.
    pub allowed_by: Option<Operator>,
    pub pending: Option<PendingPin>,
}

/// A definition of a tool waiting for a person.
#[derive(Debug, Clone)]
pub struct PendingPin {
    pub definition: ToolDefinition,
    pub since: OffsetDateTime,
    pub why: PendingWhy,
    pub route: String,
    pub token: CallbackToken,
    /// The message showing it, once Telegram took it.
    pub message: Option<(i64, i32)>,
}

/// The columns of `mcp_tool_pins`, in [`PinRow`]'s order.
macro_rules! pin_columns {
    () => {
        "agent, server, tool, first_seen_at, allowed_json, allowed_at, allowed_by_id,
         allowed_by_username, allowed_by_name, pending_json, pending_since, pending_why,
         pending_route, pending_token, pending_chat_id, pending_message_id"
    };
}
pub(crate) use pin_columns;

/// A row of `mcp_tool_pins` ([`pin_columns`]).
#[derive(FromRow)]
pub(crate) struct PinRow {
    agent: String,
    server: String,
    tool: String,
    first_seen_at: i64,
    allowed_json: Option<String>,
    allowed_at: Option<i64>,
    allowed_by_id: Option<i64>,
    allowed_by_username: Option<String>,
    allowed_by_name: Option<String>,
    pending_json: Option<String>,
    pending_since: Option<i64>,
    pending_why: Option<String>,
    pending_route: Option<String>,
    pending_token: Option<String>,
    pending_chat_id: Option<i64>,
    pending_message_id: Option<i64>,
}

impl PinRow {
    pub(crate) fn into_pin(self) -> Result<ToolPin, StorageError> {
        let id = format!("{}/{}/{}", self.agent, self.server, self.tool);
        let corrupt = |what: &str| StorageError::Corrupt {
            id: id.clone(),
            what: what.to_owned(),
        };
        let time = |v: i64| from_ms(v).ok_or_else(|| corrupt("time out of range"));
        let definition = |json: &str| ToolDefinition::from_stored(json).map_err(|e| corrupt(&e));
        let allowed = self.allowed_json.as_deref().map(definition).transpose()?;
        let allowed_by = match (self.allowed_by_id, self.allowed_by_name) {
            (Some(id), Some(name)) => Some(Operator {
                id: u64::try_from(id).map_err(|_| corrupt("operator id"))?,
                username: self.allowed_by_username,
                name,
            }),
            _ => None,
        };
        let pending = match self.pending_json {
            Some(json) => Some(PendingPin {
                definition: definition(&json)?,
                since: time(self.pending_since.ok_or_else(|| corrupt("pending_since"))?)?,
                why: self
                    .pending_why
                    .as_deref()
                    .and_then(PendingWhy::parse)
                    .ok_or_else(|| corrupt("pending_why"))?,
                route: self.pending_route.ok_or_else(|| corrupt("pending_route"))?,
                token: self
                    .pending_token
                    .as_deref()
                    .and_then(|t| CallbackToken::parse(t).ok())
                    .ok_or_else(|| corrupt("pending_token"))?,
                message: match (self.pending_chat_id, self.pending_message_id) {
                    (Some(chat), Some(message)) => Some((
                        chat,
                        i32::try_from(message).map_err(|_| corrupt("pending_message_id"))?,
                    )),
                    _ => None,
                },
            }),
            None => None,
        };
        Ok(ToolPin {
            first_seen_at: time(self.first_seen_at)?,
            allowed_at: self.allowed_at.map(time).transpose()?,
            agent: self.agent,
            server: self.server,
            tool: self.tool,
            allowed,
            allowed_by,
            pending,
        })
    }
}
