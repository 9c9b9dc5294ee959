//! Operator commands (`/start`, `/pending`, `/windows`, `/revoke`, `/help`): which there
//! are ([`Command`]), who may use them and what they do. Telegram's syntax (reading a
//! message's text into a [`Command`]) and how the answers read live in
//! `crate::telegram::commands`.
//!
//! Fail closed: a command counts only in a chat that is some route's chat, and only from
//! a (human) approver of that route (by every live replica's configuration while they
//! differ: see `super::agree`); it then sees and touches only what belongs to the
//! routes it approves there. In any other group the bot stays silent (it may have been
//! added anywhere, and a reply would tell strangers what it is for); in a private chat
//! that is no route's it says where commands work; a non-approver in a route's chat
//! gets a refusal that names nothing pending; other bots get no answer at all, so two
//! bots can never keep each other talking.
//!
//! The longer why is in docs/architecture.md, "Module notes".

use std::sync::Arc;

use time::OffsetDateTime;

use super::agree::Agree;
use super::away::AwaySet;
use super::chats::Chats;
use super::judge::Rules;
use super::suggest::Offer;
use super::{Service, now};
use crate::config::{Config, Route};
use crate::domain::audit;
use crate::domain::grant::Grant;
use crate::domain::ids::{GrantId, QuestionId};
use crate::domain::question::{Operator, Question};
use crate::domain::rules::{ChatRuleRecord, ChatRuleState};
use crate::domain::stats::{self, Stats};
use crate::metrics::Metrics;
use crate::storage::{
    Audit, AwayStore, ChatRulesStore, Grants, LiveWindow, Questions, Runs, StorageError, WindowUse,
    Windows,
};

/// A command the service acts on. The Telegram adapter reads it from a message's text
/// (`crate::telegram::commands::parse`), the only place one is built, so a `Revoke`
/// always carries a well-formed id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// What this chat and this person are to the service; also what a private chat
    /// with the bot starts with (a deep-link payload after it is ignored).
    Start,
    Pending,
    Windows,
    /// The live grants of the chat's routes, each with a Revoke button.
    Grants,
    /// A window (by the id of the request that opened it: a request opens at most one
    /// window, so it is unambiguous and already in that request's audit trail) or a
    /// grant (by its id).
    Revoke(RevokeTarget),
    /// Who decided what and how fast, over this many days.
    Stats(u32),
    /// Rules proposed from the chat's history, now.
    Suggest,
    /// The rules accepted in the chat, each with its buttons.
    Rules,
    /// The sender is away: the words after `until` (the time, then a delegate's name).
    Away(Vec<String>),
    /// The sender is back.
    Back,
    Help,
}

/// What `/revoke` closes, told apart by the id's form (`cf_…` or `gr_…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeTarget {
    Window(QuestionId),
    Grant(GrantId),
}

impl Command {
    /// The command's name, for logs and the audit trail.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Start => "start",
            Command::Pending => "pending",
            Command::Windows => "windows",
            Command::Grants => "grants",
            Command::Revoke(_) => "revoke",
            Command::Stats(_) => "stats",
            Command::Suggest => "suggest",
            Command::Rules => "rules",
            Command::Away(_) => "away",
            Command::Back => "back",
            Command::Help => "help",
        }
    }
}

/// One of our commands, typed wrong. The operator is told exactly which way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("/revoke needs the id of a window or a grant: /revoke <id> (see /windows and /grants)")]
    RevokeWithoutId,
    #[error(
        "'{0}' is neither a window id (cf_ followed by 32 hex digits, see /windows) nor a grant id (gr_ followed by 32 hex digits, see /grants)"
    )]
    MalformedId(String),
    #[error("/revoke takes one id, not several")]
    RevokeTooManyIds,
    #[error("/{0} is not a command of this bot; see /help")]
    Unknown(String),
    #[error("/stats takes a number of days from 1 to {max}, not '{0}'", max = MAX_STATS_DAYS)]
    StatsDays(String),
    #[error(
        "/away until <time> [delegate]: for example /away until 18:00 bob, /away until 2026-12-24 09:00, /away until 3d (times in UTC)"
    )]
    AwayWithoutUntil,
    #[error("/back takes nothing after it")]
    BackWithWords,
}

/// A command as typed in a chat.
#[derive(Debug, Clone)]
pub struct CommandMessage {
    pub chat_id: i64,
    /// The forum topic it was typed in (`message_thread_id`), if any.
    pub thread: Option<i32>,
    /// The command's own message, which the answer replies to.
    pub message_id: i32,
    pub from: Operator,
    pub from_is_bot: bool,
    /// What was typed, parsed; an error is one of our commands typed wrong.
    pub command: Result<Command, CommandError>,
}

/// What a command answers; the Telegram adapter decides how it reads.
#[derive(Debug, Clone)]
pub enum CommandReply {
    /// The open questions of the chat's routes, oldest first.
    Pending(Vec<Question>),
    /// The live windows opened from the chat's routes, soonest expiry first, each with
    /// the calls it let through and how many of them failed.
    Windows(Vec<(LiveWindow, WindowUse)>),
    /// A window was closed.
    Revoked {
        /// Boxed: a window (with its key) dwarfs the other answers.
        window: Box<LiveWindow>,
        by: Operator,
    },
    /// The live grants of the chat's routes, soonest expiry first.
    Grants(Vec<Grant>),
    /// A grant was revoked (by `/revoke` or its button).
    GrantRevoked { grant: Box<Grant>, by: Operator },
    /// `/start` or `/help`: what this chat and this person are to the service.
    Setup(Setup),
    /// `/stats`: over `days`, each of the chat's routes' figures.
    Stats {
        days: u32,
        routes: Vec<(String, Stats)>,
    },
    /// `/suggest`, or the proposals offered on a schedule: each route's.
    Suggestions(Vec<Offer>),
    /// `/rules`: each of the chat's routes with its chat rules in force, and how many
    /// rules the configuration holds (which come first).
    ChatRules {
        routes: Vec<(String, Vec<ChatRuleRecord>)>,
        configured: usize,
    },
    /// `/away`: until when, who stands in, and the routes nobody else approves.
    Away(AwaySet),
    /// `/back`: whether an absence was running.
    Back { was_away: bool },
    /// A chat rule moved by a tap: accepted, enforced or removed.
    ChatRuleMoved {
        rule: Box<ChatRuleRecord>,
        from: ChatRuleState,
        by: Operator,
    },
    /// Not allowed here or not for this person.
    Refused(String),
    /// Allowed, but it cannot be done as asked (a typo, an unknown or foreign window).
    Invalid(String),
}

/// What `/start` and `/help` tell: everything needed to make this chat a route's and
/// this person its approver, and nothing that is not already theirs to see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    /// `/help` from an approver of this chat's route: the operator commands come first.
    pub commands: bool,
    pub chat_id: i64,
    pub user_id: u64,
    /// The names of the routes whose chat this is, sorted; empty when it is no route's.
    pub routes: Vec<String>,
    /// Whether the person approves one of [`Setup::routes`].
    pub approves_here: bool,
    /// In a private chat only: the routes the person approves anywhere, sorted.
    pub approver_of: Option<Vec<String>>,
    /// The service runs as `serve --demo`: its one route is set by the demo, not by
    /// `[[routes]]` in a file, so the answer says how the demo works instead.
    pub demo: bool,
}

/// The longest period `/stats` reads, in days.
pub const MAX_STATS_DAYS: u32 = 90;
/// The most ended calls `/stats` reads per route (the latest): a bound on one command's
/// work, far above what a route's people decide in `MAX_STATS_DAYS`.
const MAX_STATS_ROWS: u32 = 100_000;

/// The statistics of each of `routes` over the `days` before `now`, with `config`'s
/// rubber-stamp thresholds: what `/stats` and the console show alike.
pub(super) async fn route_stats(
    questions: &dyn Questions,
    routes: &[Arc<Route>],
    days: u32,
    config: &Config,
    now: OffsetDateTime,
) -> Result<Vec<(String, Stats)>, StorageError> {
    let since = now - std::time::Duration::from_secs(u64::from(days) * 86_400);
    let mut out = Vec::with_capacity(routes.len());
    for route in routes {
        let ended = questions
            .ended_since(&route.name, since, MAX_STATS_ROWS)
            .await?;
        out.push((route.name.clone(), stats::of(&ended, config.rubber_stamp)));
    }
    Ok(out)
}

const NOT_AN_APPROVER: &str = "Only approvers of this chat's route can use operator commands.";
const NOT_A_ROUTE_CHAT: &str = "Operator commands work only in a route's chat.";
const NOT_AN_APPROVER_EVERYWHERE: &str = "Only approvers of this chat's route can use operator \
     commands, and the service's configuration is being changed: not every replica lists you \
     as one yet.";

/// What the operator commands read and change, and who may use them where.
pub(super) struct Commands {
    pub(super) config: Arc<Config>,
    /// The rules in force, and the chat's as stored ([`super::suggest`]).
    pub(super) rules: Arc<Rules>,
    pub(super) chat_rules: Arc<dyn ChatRulesStore>,
    pub(super) away: Arc<dyn AwayStore>,
    chats: Arc<Chats>,
    agree: Arc<Agree>,
    questions: Arc<dyn Questions>,
    windows: Arc<dyn Windows>,
    grants: Arc<dyn Grants>,
    runs: Arc<dyn Runs>,
    audit: Arc<dyn Audit>,
    metrics: Arc<Metrics>,
}

/// The storage roles the commands use.
pub(super) struct CommandStores {
    pub away: Arc<dyn AwayStore>,
    pub rules: Arc<Rules>,
    pub chat_rules: Arc<dyn ChatRulesStore>,
    pub questions: Arc<dyn Questions>,
    pub windows: Arc<dyn Windows>,
    pub grants: Arc<dyn Grants>,
    pub runs: Arc<dyn Runs>,
    pub audit: Arc<dyn Audit>,
}

impl Service {
    /// Acts on an operator command and answers it in its chat (through the messenger and
    /// so its rate limits), unless the sender must not be answered at all.
    pub async fn handle_command(self: &Arc<Self>, m: CommandMessage) {
        let reply = match self.commands.judge(&m).await {
            Ok(Some(reply)) => reply,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(error = %e, chat_id = m.chat_id, "could not process a command");
                CommandReply::Invalid("Something went wrong; nothing was changed.".to_owned())
            }
        };
        if matches!(
            reply,
            CommandReply::Away(_) | CommandReply::Back { was_away: true }
        ) {
            self.absences_changed().await;
        }
        if let Err(e) = self
            .messenger
            .send_command_reply(m.chat_id, m.thread, Some(m.message_id), &reply)
            .await
        {
            tracing::warn!(chat_id = m.chat_id, reason = %e.reason, "could not answer a command");
        }
    }
}

impl Commands {
    pub(super) fn new(
        config: Arc<Config>,
        chats: Arc<Chats>,
        agree: Arc<Agree>,
        stores: CommandStores,
        metrics: Arc<Metrics>,
    ) -> Self {
        let CommandStores {
            away,
            rules,
            chat_rules,
            questions,
            windows,
            grants,
            runs,
            audit,
        } = stores;
        Commands {
            config,
            rules,
            chat_rules,
            away,
            chats,
            agree,
            questions,
            windows,
            grants,
            runs,
            audit,
            metrics,
        }
    }

    /// Logs and audits a command refused in a route's chat (as refused taps are), so the
    /// trail shows who tried to read or change what they may not.
    async fn refuse_command(&self, m: &CommandMessage, why: &str) -> Result<(), StorageError> {
        let name = m.command.as_ref().map_or("invalid", Command::name);
        tracing::warn!(
            chat_id = m.chat_id,
            user_id = m.from.id,
            command = name,
            why,
            "operator command refused"
        );
        let event = audit::refused_command(&m.from, m.chat_id, name, why, now());
        self.audit.record_event(event).await
    }

    /// The answer to `/start` or `/help` from a person in `m`'s chat, whose routes are
    /// `routes` (by name, sorted) and of which the person approves one or not. In a
    /// private chat it lists the routes the person approves by every live replica's
    /// configuration.
    async fn setup(
        &self,
        m: &CommandMessage,
        routes: Vec<String>,
        approves_here: bool,
    ) -> Result<CommandReply, StorageError> {
        // Positive chat ids are private chats: what the person approves is theirs to know.
        let approver_of = if m.chat_id > 0 {
            let others = self.agree.other_configs().await?;
            let mut of: Vec<String> = self
                .config
                .routes
                .values()
                .filter(|r| r.may_decide(m.from.id))
                .filter(|r| others.all(|view| view.approves(&r.name, m.from.id)))
                .map(|r| r.name.clone())
                .collect();
            of.sort();
            Some(of)
        } else {
            None
        };
        Ok(CommandReply::Setup(Setup {
            commands: approves_here && matches!(m.command, Ok(Command::Help)),
            chat_id: m.chat_id,
            user_id: m.from.id,
            routes,
            approves_here,
            approver_of,
            demo: self.config.demo,
        }))
    }

    /// What a command answers, if anything: who may use it here first, then what it
    /// does ([`Commands::apply`]).
    pub(super) async fn judge(
        &self,
        m: &CommandMessage,
    ) -> Result<Option<CommandReply>, StorageError> {
        let here = self.chats.routes_in_chat(m.chat_id, m.thread);
        if m.from_is_bot {
            if !here.is_empty() {
                self.refuse_command(m, "a bot cannot use operator commands")
                    .await?;
            }
            return Ok(None);
        }
        let names: Vec<String> = here.iter().map(|r| r.name.clone()).collect();
        let setting_up = matches!(&m.command, Ok(Command::Start | Command::Help));
        if here.is_empty() {
            if setting_up {
                tracing::info!(
                    chat_id = m.chat_id,
                    user_id = m.from.id,
                    "setup command answered in a chat that is no route's"
                );
                return Ok(Some(self.setup(m, names, false).await?));
            }
            tracing::info!(
                chat_id = m.chat_id,
                user_id = m.from.id,
                "operator command outside any route's chat ignored"
            );
            // Positive chat ids are private chats: the person asked the bot directly.
            return Ok((m.chat_id > 0).then(|| CommandReply::Refused(NOT_A_ROUTE_CHAT.into())));
        }
        let mine = match self.approved_here(m, here, setting_up).await? {
            Ok(mine) => mine,
            Err(refused) => return Ok(Some(refused)),
        };
        if mine.is_empty() {
            if setting_up {
                return Ok(Some(self.setup(m, names, false).await?));
            }
            self.refuse_command(m, "not an approver of the chat's route")
                .await?;
            return Ok(Some(CommandReply::Refused(NOT_AN_APPROVER.into())));
        }
        let command = match &m.command {
            Ok(c) => c,
            Err(e) => return Ok(Some(CommandReply::Invalid(e.to_string()))),
        };
        Ok(Some(self.apply(m, command, &mine, names).await?))
    }

    /// The routes of `here` (the chat's) the sender approves, by this replica's
    /// configuration and every other live one's; the refusal to answer with when only
    /// this replica's allows them (and they are not setting up).
    async fn approved_here(
        &self,
        m: &CommandMessage,
        here: Vec<Arc<Route>>,
        setting_up: bool,
    ) -> Result<Result<Vec<Arc<Route>>, CommandReply>, StorageError> {
        let own: Vec<Arc<Route>> = here
            .into_iter()
            .filter(|r| r.may_decide(m.from.id))
            .collect();
        // This replica's configuration allows it: so must every other live one's.
        if own.is_empty() {
            return Ok(Ok(own));
        }
        let others = self.agree.other_configs().await?;
        let moved = |route: &str| self.chats.moved_chat(route);
        let (mine, refused): (Vec<_>, Vec<_>) = own.into_iter().partition(|r| {
            others
                .all(|view| view.approves_in_chat(&r.name, m.chat_id, m.thread, m.from.id, &moved))
        });
        if mine.is_empty() && !setting_up {
            tracing::warn!(chat_id = m.chat_id, user_id = m.from.id,
                routes = ?refused.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
                "another live replica's configuration does not allow this command");
            self.refuse_command(
                m,
                "the replicas' configurations differ: not an approver of the chat's route in every one",
            )
            .await?;
            return Ok(Err(CommandReply::Refused(
                NOT_AN_APPROVER_EVERYWHERE.into(),
            )));
        }
        Ok(Ok(mine))
    }

    /// Does what an approver of `mine` (the chat's routes they approve) asked.
    async fn apply(
        &self,
        m: &CommandMessage,
        command: &Command,
        mine: &[Arc<Route>],
        names: Vec<String>,
    ) -> Result<CommandReply, StorageError> {
        let is_mine = |route: &str| mine.iter().any(|r| r.name == route);
        let now = now();
        Ok(match command {
            Command::Start | Command::Help => self.setup(m, names, true).await?,
            Command::Pending => {
                let mut open = self.questions.pending_in_chat(m.chat_id).await?;
                open.retain(|r| is_mine(&r.route));
                CommandReply::Pending(open)
            }
            Command::Windows => self.windows(mine, now).await?,
            Command::Suggest => self.suggest(mine, now).await?,
            Command::Away(words) => self.away(m, words, mine, now).await?,
            Command::Back => self.back(m, now).await?,
            Command::Rules => self.chat_rules_of(mine).await?,
            &Command::Stats(days) => CommandReply::Stats {
                days,
                routes: route_stats(self.questions.as_ref(), mine, days, &self.config, now).await?,
            },
            Command::Grants => {
                let mut live = Vec::new();
                for route in mine {
                    live.extend(
                        self.grants
                            .live_grants(None, Some(&route.name), now)
                            .await?,
                    );
                }
                live.sort_by(|a, b| (a.expires_at, &a.grant_id).cmp(&(b.expires_at, &b.grant_id)));
                CommandReply::Grants(live)
            }
            Command::Revoke(RevokeTarget::Grant(id)) => {
                self.revoke_grant_as(id, &m.from, |route| is_mine(route))
                    .await?
            }
            Command::Revoke(RevokeTarget::Window(id)) => {
                self.revoke_window(m, id, is_mine, now).await?
            }
        })
    }

    /// `/windows`: the live windows of `mine`, each with what it let through.
    async fn windows(
        &self,
        mine: &[Arc<Route>],
        now: OffsetDateTime,
    ) -> Result<CommandReply, StorageError> {
        let mut live = Vec::new();
        for route in mine {
            live.extend(self.windows.live_windows(&route.name, now).await?);
        }
        live.sort_by(|a, b| {
            (a.window.expires_at, &a.window.opened_by)
                .cmp(&(b.window.expires_at, &b.window.opened_by))
        });
        let mut used = Vec::with_capacity(live.len());
        for w in live {
            let u = self.runs.window_use(&w.window.opened_by).await?;
            used.push((w, u));
        }
        Ok(CommandReply::Windows(used))
    }

    /// `/revoke` of the window request `id` opened, if it is live and of a route
    /// `is_mine` accepts.
    async fn revoke_window(
        &self,
        m: &CommandMessage,
        id: &QuestionId,
        is_mine: impl Fn(&str) -> bool,
        now: OffsetDateTime,
    ) -> Result<CommandReply, StorageError> {
        // The opening request's route never changes, so checking it first and
        // deleting by the same id after cannot close another route's window.
        Ok(match self.windows.live_window_opened_by(id, now).await? {
            None => CommandReply::Invalid(format!(
                "There is no live window {id}: it may have expired or been revoked \
                 already (see /windows)."
            )),
            Some(w) if !is_mine(&w.route) => {
                tracing::warn!(chat_id = m.chat_id, user_id = m.from.id, id = %id,
                    "revoke of another route's window refused");
                CommandReply::Refused(format!(
                    "Window {id} belongs to another route; revoke it in that route's chat."
                ))
            }
            Some(_) => {
                match self
                    .windows
                    .revoke_window(id, &m.from, m.chat_id, now)
                    .await?
                {
                    Some(window) => {
                        tracing::info!(id = %id, user_id = m.from.id, route = %window.route,
                            "confirmation window revoked");
                        CommandReply::Revoked {
                            window: Box::new(window),
                            by: m.from.clone(),
                        }
                    }
                    None => CommandReply::Invalid(format!(
                        "There is no live window {id}: it expired or was revoked just now."
                    )),
                }
            }
        })
    }

    /// An operator revokes grant `id` (by `/revoke` or its button), if it is live and of
    /// a route `may_revoke` accepts (one they approve, in its chat).
    pub(super) async fn revoke_grant_as(
        &self,
        id: &GrantId,
        by: &Operator,
        may_revoke: impl Fn(&str) -> bool,
    ) -> Result<CommandReply, StorageError> {
        let now = now();
        let gone = || {
            CommandReply::Invalid(format!(
                "There is no live grant {id}: it may have expired or been revoked already (see /grants)."
            ))
        };
        let Some(grant) = self.grants.grant(id).await? else {
            return Ok(gone());
        };
        if !may_revoke(&grant.route) {
            tracing::warn!(user_id = by.id, grant = %id, "revoke of another route's grant refused");
            return Ok(CommandReply::Refused(format!(
                "Grant {id} belongs to another route; revoke it in that route's chat."
            )));
        }
        Ok(
            match self.grants.revoke_grant(id, None, Some(by), now).await? {
                Some(grant) => {
                    tracing::info!(grant = %id, user_id = by.id, route = %grant.route, "grant revoked");
                    self.metrics.grant_event("revoked");
                    CommandReply::GrantRevoked {
                        grant: Box::new(grant),
                        by: by.clone(),
                    }
                }
                None => gone(),
            },
        )
    }
}
