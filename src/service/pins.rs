//! MCP tool pins (issue 48, "no rug pulls"): a gateway sends each `tools/list` result of
//! its upstream server, and hears which tools it may offer. What nobody allowed yet (a
//! tool added after the first listing, a definition that changed, or with `strict` the
//! first listing itself) is held, and shown in the route's chat with an Allow button;
//! an approver of the route allows it there, once, however often it is tapped.
//!
//! The storage decides what is held, in one transaction under the audit lock
//! ([`ToolPins::record_listing`]); this file says it in the chat, in the background (a
//! gateway's listing waits for no message), and takes the taps.

use std::sync::Arc;

use time::OffsetDateTime;

use super::answer::{After, Judged, Refused, cut_for_toast, refuse_tap};
use super::{Destination, Service, ServiceError, Tap, now};
use crate::config::Agent;
use crate::domain::ids::CallbackToken;
use crate::domain::question::Operator;
use crate::domain::tool_pin::{
    self, DefinitionDiff, PendingWhy, PinMode, ServerName, ToolDefinition,
};
use crate::storage::StorageError;
use crate::storage::pins::{ListedTool, Listing, ToolPin};

/// A message about an MCP server's tools, as the chat shows it.
#[derive(Debug, Clone)]
pub struct PinNotice {
    /// The agent whose gateway listed them.
    pub agent: String,
    pub server: String,
    pub kind: NoticeKind,
    /// Who allowed what it shows, and when (the message after the tap).
    pub allowed: Option<(Operator, OffsetDateTime)>,
}

/// What a [`PinNotice`] is about.
#[derive(Debug, Clone)]
pub enum NoticeKind {
    /// The server's first listing, allowed as listed: its tools' names. No button.
    Pinned { tools: Vec<String> },
    /// A strict first listing, held as a whole: its tools' names, and the button that
    /// allows them all.
    FirstHeld {
        tools: Vec<String>,
        token: CallbackToken,
    },
    /// A tool that was not listed before: its definition, and its Allow button.
    New {
        definition: ToolDefinition,
        token: CallbackToken,
    },
    /// A tool whose definition changed: what changed, and its Allow button.
    Changed {
        name: String,
        diff: DefinitionDiff,
        token: CallbackToken,
    },
}

impl NoticeKind {
    /// The token its Allow button carries (`None`: no button).
    pub fn token(&self) -> Option<&CallbackToken> {
        match self {
            NoticeKind::Pinned { .. } => None,
            NoticeKind::FirstHeld { token, .. }
            | NoticeKind::New { token, .. }
            | NoticeKind::Changed { token, .. } => Some(token),
        }
    }
}

/// What a gateway asks to have recorded: one `tools/list` result of its server.
#[derive(Debug, Clone)]
pub struct ToolListing {
    pub server: ServerName,
    /// In the order listed; names are distinct.
    pub tools: Vec<ToolDefinition>,
    pub mode: PinMode,
    /// The route to ask (default: the agent's `default_route`).
    pub route: Option<String>,
}

impl Service {
    /// Records `agent`'s listing of its server's tools and says, tool by tool in the
    /// order listed, whether it is allowed; what is newly held (or held with no message
    /// in the chat for a while) is shown in the route's chat, in the background.
    pub async fn record_tool_listing(
        self: &Arc<Self>,
        agent: &Agent,
        listing: ToolListing,
    ) -> Result<Vec<ListedTool>, ServiceError> {
        let route = match Destination::of(&self.config, agent, listing.route.as_deref(), None)? {
            Destination::Route(route) => route,
            // Without a recipient the destination is always a route.
            Destination::Person { .. } => {
                return Err(ServiceError::RouteNotAllowed(agent.default_route.clone()));
            }
        };
        let chat_id = self.chats.chat_of(&route.name, route.chat_id);
        let listed = self
            .store
            .record_listing(
                &Listing {
                    agent: &agent.name,
                    server: &listing.server,
                    route: &route.name,
                    chat_id,
                    mode: listing.mode,
                    tools: &listing.tools,
                },
                now(),
            )
            .await?;
        for notice in notices(&agent.name, listing.server.as_str(), &listed) {
            let me = self.clone();
            let thread = route.topic_id;
            self.tasks.spawn(async move {
                me.post_pin_notice(chat_id, thread, notice).await;
            });
        }
        Ok(listed)
    }

    /// Posts `notice` and records its message, so a tap on it finds what it shows. A
    /// message Telegram refused is posted again by a later listing (see
    /// [`REPOST_AFTER`](crate::storage::pins::REPOST_AFTER)); meanwhile what it shows stays
    /// held, so nothing is allowed by the failure.
    async fn post_pin_notice(&self, chat_id: i64, thread: Option<i32>, notice: PinNotice) {
        let sent = self
            .messenger
            .send_pin_notice(chat_id, thread, &notice)
            .await;
        match (sent, notice.kind.token()) {
            (Ok(message_id), Some(token)) => {
                if let Err(e) = self.store.set_pin_message(token, chat_id, message_id).await {
                    tracing::warn!(error = %e, server = %notice.server, "could not record the message showing held MCP tools");
                }
            }
            (Ok(_), None) => {}
            (Err(e), _) => {
                tracing::warn!(reason = %e.reason, chat_id, server = %notice.server,
                    "could not show an MCP server's tools in the chat");
            }
        }
    }

    /// An Allow button under a message about held MCP tools: only on the bot's own
    /// message in the route's chat, only by an approver of the route (by every live
    /// replica's configuration, as a question's buttons). The storage allows with one
    /// conditional update, so a second tap (here or on another replica) allows nothing.
    pub(super) async fn allow_tools_by_tap(
        self: &Arc<Self>,
        tap: &Tap,
        token: &CallbackToken,
    ) -> Result<Judged, StorageError> {
        let refuse = |refused: Refused| refuse_tap(self.store.as_ref(), tap, None, refused);
        let pins = self.store.pending_pins(token).await?;
        let Some(route) = pins
            .iter()
            .find_map(|p| p.pending.as_ref().map(|h| h.route.clone()))
        else {
            return Ok(Judged::toast(NOTHING_HELD, After::Nothing));
        };
        let posted_in = self
            .config
            .route(&route)
            .map(|r| self.chats.chat_of(&r.name, r.chat_id));
        let on_its_message = pins.iter().any(|p| {
            p.pending
                .as_ref()
                .and_then(|h| h.message)
                .is_some_and(|(chat, message)| {
                    tap.chat_id == Some(chat) && tap.message_id == Some(message)
                })
        });
        let (Some(chat_id), Some(message_id)) = (tap.chat_id, tap.message_id) else {
            return refuse(Refused {
                text: "This button does not belong to this message.",
                why: "callback data without a chat message",
            })
            .await;
        };
        if posted_in != Some(chat_id) || !(on_its_message || tap.carries_button) {
            return refuse(Refused {
                text: "This button does not belong to this message.",
                why: "an MCP tools Allow button from another chat or message",
            })
            .await;
        }
        if let Some(refused) = self
            .agree
            .may_not_approve_route(&route, &tap.from, tap.from_is_bot)
            .await?
        {
            return refuse(refused).await;
        }
        let at = now();
        let allowed = self.store.allow_pins(token, &tap.from, at).await?;
        let Some(notice) = notice_of(&allowed, Some((tap.from.clone(), at))) else {
            return Ok(Judged::toast(NOTHING_HELD, After::Nothing));
        };
        tracing::info!(user_id = tap.from.id, server = %notice.server, tools = allowed.len(),
            "MCP tool definitions allowed");
        let text = format!(
            "✅ Allowed: {} of {}",
            match allowed.len() {
                1 => format!("the tool {}", allowed[0].tool),
                n => format!("{n} tools"),
            },
            notice.server
        );
        let me = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = me
                .messenger
                .show_pin_notice(chat_id, message_id, &notice)
                .await
            {
                tracing::warn!(reason = %e.reason, chat_id, "could not show MCP tools as allowed");
            }
        });
        Ok(Judged::toast(cut_for_toast(&text), After::Nothing))
    }
}

/// What a tap on an Allow button under which nothing waits any more is told.
const NOTHING_HELD: &str = "Nothing waits under this button any more: it was allowed already, or a newer definition replaced it.";

/// The messages a recorded listing calls for: one announcing a first listing taken as
/// listed; one per token of what is to be shown now (a strict first listing's tools
/// share one).
fn notices(agent: &str, server: &str, listed: &[ListedTool]) -> Vec<PinNotice> {
    let notice = |kind| PinNotice {
        agent: agent.to_owned(),
        server: server.to_owned(),
        kind,
        allowed: None,
    };
    let mut out = Vec::new();
    let pinned: Vec<String> = listed
        .iter()
        .filter(|t| t.first_listing && t.allowed)
        .map(|t| t.definition.name().to_owned())
        .collect();
    if !pinned.is_empty() {
        out.push(notice(NoticeKind::Pinned { tools: pinned }));
    }
    let mut first_held: Vec<(CallbackToken, Vec<String>)> = Vec::new();
    for t in listed {
        let Some(q) = t.pending.as_ref().filter(|q| q.show) else {
            continue;
        };
        let name = t.definition.name().to_owned();
        match (q.why, &q.allowed) {
            (PendingWhy::FirstListing, _) => {
                match first_held.iter_mut().find(|(token, _)| *token == q.token) {
                    Some((_, names)) => names.push(name),
                    None => first_held.push((q.token.clone(), vec![name])),
                }
            }
            (PendingWhy::Changed, Some(old)) => out.push(notice(NoticeKind::Changed {
                name,
                diff: tool_pin::diff(old, &t.definition),
                token: q.token.clone(),
            })),
            _ => out.push(notice(NoticeKind::New {
                definition: t.definition.clone(),
                token: q.token.clone(),
            })),
        }
    }
    for (token, tools) in first_held {
        out.push(notice(NoticeKind::FirstHeld { tools, token }));
    }
    out
}

/// The message that showed the definitions `pins` held (as they were just before they
/// were allowed), shown `allowed`; `None` when none was held.
fn notice_of(pins: &[ToolPin], allowed: Option<(Operator, OffsetDateTime)>) -> Option<PinNotice> {
    let first = pins.first()?;
    let pending = first.pending.as_ref()?;
    let kind = match (pending.why, &first.allowed) {
        (PendingWhy::FirstListing, _) => NoticeKind::FirstHeld {
            tools: pins.iter().map(|p| p.tool.clone()).collect(),
            token: pending.token.clone(),
        },
        (PendingWhy::Changed, Some(old)) => NoticeKind::Changed {
            name: first.tool.clone(),
            diff: tool_pin::diff(old, &pending.definition),
            token: pending.token.clone(),
        },
        _ => NoticeKind::New {
            definition: pending.definition.clone(),
            token: pending.token.clone(),
        },
    };
    Some(PinNotice {
        agent: first.agent.clone(),
        server: first.server.clone(),
        kind,
        allowed,
    })
}
