//! Rules suggested from what people decided (issue 50): `/suggest` (and, every
//! `suggest_every_days`, the leader unasked) draws proposals from a route's decision
//! history ([`crate::domain::rules::suggest`]) and shows them in its chat; the route's
//! `rule_editors` try one as a dry run or enforce it with a tap, enforce a dry run later,
//! and remove one from `/rules`. Accepted rules live in the database, so every replica
//! reads the same ones ([`Service::keep_chat_rules`] rereads them), and they come after
//! the configuration's rules ([`crate::domain::rules::Policy::judge`]).

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::answer::{After, Judged, Refused, cut_for_toast, refuse_tap};
use super::commands::{CommandReply, Commands};
use super::{Service, Tap, now};
use crate::config::Route;
use crate::domain::audit;
use crate::domain::question::Operator;
use crate::domain::rules::chat::chat_rule_id;
use crate::domain::rules::suggest::{self, Suggestion};
use crate::domain::rules::{ChatRuleRecord, ChatRuleState, ChatRules, Policy};
use crate::storage::StorageError;

/// The most decisions a proposal round reads per route (the latest): a bound on one
/// round's work, far above what a route's people decide in its history period.
const MAX_HISTORY_ROWS: u32 = 50_000;
/// The most proposals one message shows (the ones backed by most decisions).
pub const MAX_SHOWN_PROPOSALS: usize = 5;
/// How often a replica rereads the chat rules another replica may have changed.
pub const CHAT_RULES_REFRESH: Duration = Duration::from_secs(10);
/// How often the leader looks for routes whose proposals are due.
pub const OFFER_CHECK_EVERY: Duration = Duration::from_secs(3600);

/// What a chat-rule button does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRuleAction {
    /// A proposal, accepted as a dry run.
    DryRun,
    /// A proposal or a dry run, enforced.
    Enforce,
    /// A dry run or an enforced rule, removed.
    Remove,
}

impl ChatRuleAction {
    /// The states a tap of this button moves a rule from, and the state it moves it to.
    fn moves(self) -> (&'static [ChatRuleState], ChatRuleState) {
        use ChatRuleState::*;
        match self {
            ChatRuleAction::DryRun => (&[Proposed], DryRun),
            ChatRuleAction::Enforce => (&[Proposed, DryRun], Enforce),
            ChatRuleAction::Remove => (&[DryRun, Enforce], Removed),
        }
    }
}

/// A chat-rule button as tapped: what it does, to which rule (its id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatRuleTap {
    pub action: ChatRuleAction,
    pub id: String,
}

/// One route's proposals, as a message shows them.
#[derive(Debug, Clone)]
pub struct Offer {
    pub route: String,
    /// The days of history they were drawn from.
    pub days: u32,
    pub proposals: Vec<ChatRuleRecord>,
    /// Who may accept them: user id and `[people]` name, if any (empty: nobody; the
    /// message says how to change that, and shows no buttons).
    pub editors: Vec<(u64, Option<String>)>,
}

impl Commands {
    /// `/suggest`: each of `mine` (the chat's routes the person approves) with the
    /// proposals its history makes now.
    pub(super) async fn suggest(
        &self,
        mine: &[Arc<Route>],
        now: OffsetDateTime,
    ) -> Result<CommandReply, StorageError> {
        let mut offers = Vec::with_capacity(mine.len());
        for route in mine {
            offers.push(self.offer(route, now).await?);
        }
        Ok(CommandReply::Suggestions(offers))
    }

    /// The proposals `route`'s history makes now, stored so their buttons can find them.
    pub(super) async fn offer(
        &self,
        route: &Route,
        now: OffsetDateTime,
    ) -> Result<Offer, StorageError> {
        let s = &route.suggesting;
        let since = now - Duration::from_secs(u64::from(s.days) * 86_400);
        let history = self
            .chat_rules
            .decided_by_people(&route.name, since, MAX_HISTORY_ROWS)
            .await?;
        let policy = self.rules.policy();
        let chat: Vec<_> = policy.chat().of_route(&route.name).collect();
        let found = suggest::suggest(&history, &policy.set, &chat, &s.never, s.thresholds, s.days);
        let records: Vec<ChatRuleRecord> = found
            .into_iter()
            .take(MAX_SHOWN_PROPOSALS)
            .map(|p| record_of(&route.name, p, now))
            .collect();
        let proposals = self.chat_rules.propose_chat_rules(&records, now).await?;
        let mut ids: Vec<u64> = s.editors.iter().copied().collect();
        ids.sort_unstable();
        let editors = ids
            .into_iter()
            .map(|id| (id, self.config.name_of(id)))
            .collect();
        Ok(Offer {
            route: route.name.clone(),
            days: s.days,
            proposals,
            editors,
        })
    }

    /// `/rules`: the chat rules of `mine` in force.
    pub(super) async fn chat_rules_of(
        &self,
        mine: &[Arc<Route>],
    ) -> Result<CommandReply, StorageError> {
        let all = self.chat_rules.chat_rules().await?;
        let routes = mine
            .iter()
            .map(|r| {
                let of: Vec<ChatRuleRecord> =
                    all.iter().filter(|c| c.route == r.name).cloned().collect();
                (r.name.clone(), of)
            })
            .collect();
        Ok(CommandReply::ChatRules {
            routes,
            configured: self.rules.policy().set.rules().len(),
        })
    }
}

/// A proposal as stored: proposed, on `route`, now.
fn record_of(route: &str, p: Suggestion, now: OffsetDateTime) -> ChatRuleRecord {
    ChatRuleRecord {
        id: chat_rule_id(route, &p.rule),
        route: route.to_owned(),
        rule: p.rule,
        summary: p.summary,
        toml: p.toml,
        count: p.count,
        state: ChatRuleState::Proposed,
        proposed_at: now,
        added: None,
        changed: None,
    }
}

impl Service {
    /// Reads the chat rules in force from the database and puts them in force here;
    /// whether they changed. A stored rule that no longer loads is left out (its calls
    /// ask), and logged.
    pub async fn load_chat_rules(&self) -> Result<bool, StorageError> {
        let records = self.store.chat_rules().await?;
        let (chat, refused) = ChatRules::of(&records);
        for why in refused {
            tracing::error!(why, "a stored chat rule does not load; it decides nothing");
        }
        Ok(self.rules().set_chat(chat))
    }

    /// Rereads the chat rules (and the absences) every `every` until `stop`: a rule
    /// accepted or removed, or an `/away`, through another replica is in force here
    /// within that time.
    pub async fn keep_chat_rules(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.load_chat_rules().await {
                tracing::warn!(error = %e, "could not reread the chat rules; the last read stay in force");
            }
            match self.load_absences().await {
                // An /away through another replica: the leader sends what it strands.
                Ok(true) if self.lead.leading() => self.delegate_pending().await,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e,
                    "could not reread the absences; the last read stay in force"),
            }
        }
    }

    /// While leading: every `every`, offers each route whose `suggest_every_days` have
    /// passed since its last proposal the proposals its history makes (posted only when
    /// there are some).
    pub async fn offer_on_schedule(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        loop {
            for route in self.config.routes.values() {
                if let Err(e) = self.offer_if_due(route).await {
                    tracing::warn!(error = %e, route = %route.name, "could not offer rule proposals");
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    async fn offer_if_due(&self, route: &Route) -> Result<(), StorageError> {
        let Some(every_days) = route.suggesting.every_days else {
            return Ok(());
        };
        let at = now();
        let last = self.store.last_proposed_at(&route.name).await?;
        let due =
            last.is_none_or(|l| at - l >= Duration::from_secs(u64::from(every_days) * 86_400));
        if !due {
            return Ok(());
        }
        let offer = self.commands.offer(route, at).await?;
        if offer.proposals.is_empty() {
            return Ok(());
        }
        let chat_id = self.chats.chat_of(&route.name, route.chat_id);
        let reply = CommandReply::Suggestions(vec![offer]);
        if let Err(e) = self
            .messenger
            .send_command_reply(chat_id, route.topic_id, None, &reply)
            .await
        {
            tracing::warn!(reason = %e.reason, route = %route.name, "could not offer rule proposals");
        }
        Ok(())
    }

    /// A tap on a chat-rule button: by one of the rule's route's `rule_editors`, on a
    /// message of the bot's in that route's chat that carries the button; then one
    /// conditional update moves the rule, so a second tap (here or on another replica)
    /// moves nothing.
    pub(super) async fn chat_rule_by_tap(
        self: &Arc<Self>,
        tap: &Tap,
        t: &ChatRuleTap,
    ) -> Result<Judged, StorageError> {
        let refuse = |refused: Refused| refuse_tap(self.store.as_ref(), tap, None, refused);
        let Some(rule) = self.store.chat_rule(&t.id).await? else {
            return Ok(Judged::toast(GONE, After::Nothing));
        };
        let route = self.config.route(&rule.route);
        let posted_in = route.map(|r| self.chats.chat_of(&r.name, r.chat_id));
        let (Some(route), Some(chat_id)) = (route, tap.chat_id) else {
            return refuse(Refused {
                text: "This button does not belong to this message.",
                why: "a chat rule button without its route or chat",
            })
            .await;
        };
        if posted_in != Some(chat_id) || !tap.carries_button || tap.from_is_bot {
            return refuse(Refused {
                text: "This button does not belong to this message.",
                why: "a chat rule button from another chat or message",
            })
            .await;
        }
        if !route.suggesting.may_edit(tap.from.id) {
            return refuse(Refused {
                text: "Only the route's rule editors can accept, enforce or remove its chat rules.",
                why: "not a rule editor of the route",
            })
            .await;
        }
        let (from, to) = t.action.moves();
        let at = now();
        let Some((before, after)) = self
            .store
            .move_chat_rule(&t.id, from, to, &tap.from, at)
            .await?
        else {
            return Ok(Judged::toast(
                format!(
                    "Nothing to do: this rule is {} now.",
                    state_words(rule.state)
                ),
                After::Nothing,
            ));
        };
        tracing::info!(user_id = tap.from.id, route = %after.route, rule = %after.rule.name,
            from = before.as_str(), to = after.state.as_str(), "chat rule moved");
        // In force here at once; the other replicas reread within CHAT_RULES_REFRESH.
        let previous = self.rules().policy();
        match self.load_chat_rules().await {
            Ok(true) => self.record_rules_in_force(&previous, at).await?,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "could not reread the chat rules after a tap"),
        }
        let toast = format!("{}: {}", state_words(after.state), after.rule.name);
        self.announce_move(chat_id, route.topic_id, after, before, tap.from.clone());
        Ok(Judged::toast(cut_for_toast(&toast), After::Nothing))
    }

    /// Records the rules hash now in force (`rules_loaded`, as a reload does), so the
    /// hash the next decisions carry is in the trail with the set it replaced.
    async fn record_rules_in_force(
        &self,
        previous: &Policy,
        at: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let policy = self.rules().policy();
        let event = audit::rules_loaded(
            at,
            policy.fingerprint().as_str(),
            previous.fingerprint().as_str(),
            policy.set.rules().len() + policy.chat().rules().len(),
            policy.mode.as_str(),
        );
        self.store.record_event(event).await
    }

    /// Says in the chat what a tap did to a rule, for everyone there to read.
    fn announce_move(
        self: &Arc<Self>,
        chat_id: i64,
        thread: Option<i32>,
        rule: ChatRuleRecord,
        from: ChatRuleState,
        by: Operator,
    ) {
        let me = self.clone();
        self.tasks.spawn(async move {
            let reply = CommandReply::ChatRuleMoved {
                rule: Box::new(rule),
                from,
                by,
            };
            if let Err(e) = me
                .messenger
                .send_command_reply(chat_id, thread, None, &reply)
                .await
            {
                tracing::warn!(reason = %e.reason, chat_id, "could not say a chat rule moved");
            }
        });
    }
}

/// What a tap on the button of a rule no longer stored is told.
const GONE: &str = "This rule is not stored (any more).";

/// A state as the chat reads it.
pub fn state_words(state: ChatRuleState) -> &'static str {
    match state {
        ChatRuleState::Proposed => "proposed",
        ChatRuleState::DryRun => "in a dry run",
        ChatRuleState::Enforce => "enforced",
        ChatRuleState::Removed => "removed",
    }
}
