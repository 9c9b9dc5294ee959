//! `[[routes]]`: the Telegram chats questions are posted to, who may decide there, and
//! each route's reminders, escalation and extensions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::on_call::{self, OnCall, ShiftSettings};
use super::suggest::{self, SuggestKeys, Suggesting};
use super::when::{When, WhenSetting};
use super::{BOT_TOKEN_ENV, ConfigError, invalid};
use crate::domain::grant::ScopeMap;
use crate::domain::sla::Sla;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    pub name: String,
    pub chat_id: i64,
    #[serde(default)]
    pub approvers: Vec<u64>,
    /// Refuse taps by the Telegram user mapped to the request's owner.
    #[serde(default)]
    pub forbid_self_approval: bool,
    /// How many matching answers settle a `quorum` interaction here, when the interaction
    /// does not say (`policy.quorum`).
    #[serde(default)]
    pub quorum: Option<u32>,
    /// The longest window one Approve tap here may open; a longer one asked for is cut
    /// to it (and the cut is shown). An hour by default: a standing approval for longer
    /// is a decision for whoever configures the route, not for an agent's request.
    #[serde(default = "default_max_window_seconds")]
    pub max_window_seconds: u64,
    /// The longest a grant approved here lasts (`POST /v1/grants`); a longer one asked
    /// for is cut to it. 8 hours by default: a working day.
    #[serde(default = "default_max_grant_seconds")]
    pub max_grant_seconds: u64,
    /// How long after a call is confirmed the agent has to report what happened
    /// (`POST /v1/confirmations/{id}/outcome`); with no report by then the call's run is
    /// `unknown`, shown as "Not known whether it ran: no report from the agent". Unset: no report is expected.
    #[serde(default)]
    pub expect_outcome_seconds: Option<u64>,
    /// The console (`[mini_app]`) asks for a second, explicit confirmation of Approve on
    /// this route's questions.
    #[serde(default)]
    pub console_confirm: bool,
    /// When to remind the approvers of a question still pending: shares of its timeout
    /// (`"50%"`) or times after it was asked (`"10m"`, `"90s"`, `"2h"`, or seconds).
    #[serde(default)]
    pub remind_after: Vec<WhenSetting>,
    /// When a question still pending is also posted to `escalate_to`.
    #[serde(default)]
    pub escalate_after: Option<WhenSetting>,
    /// The route a question is escalated to.
    #[serde(default)]
    pub escalate_to: Option<String>,
    /// Who may decide once a question is escalated: `"union"` (the approvers of both
    /// routes, in either chat; the default) or `"each"` (each chat's own approvers).
    #[serde(default)]
    pub escalation_approvers: Option<String>,
    /// Offer a "+N min" button: an approver moves the deadline by this many minutes.
    /// Off (unset) by default.
    #[serde(default)]
    pub extend_minutes: Option<u32>,
    /// How many times one question's deadline may be moved.
    #[serde(default = "default_max_extensions")]
    pub max_extensions: u32,
    /// A forum topic (`message_thread_id`) of the route's supergroup: questions,
    /// reminders, command replies and outcomes go there.
    #[serde(default)]
    pub topic_id: Option<i32>,
    /// What scopes of kinds other than `tool` cover for calls on this route: `{
    /// "billing:write" = ["transfer", "refund_*"] }` (see the agents' key of that name).
    #[serde(default)]
    pub grant_scopes: BTreeMap<String, Vec<String>>,
    /// How long a question here should take to decide: its card is marked "at risk" at
    /// three quarters of it and "overdue" past it, and a breach is counted. Unset: none.
    #[serde(default)]
    pub sla_seconds: Option<u64>,
    /// Who is on call when: reminders mention them (every approver may still decide).
    #[serde(default)]
    pub on_call: Vec<ShiftSettings>,
    /// The time zone `on_call` hours are written in (IANA name; `UTC` by default).
    #[serde(default)]
    pub on_call_time_zone: Option<String>,
    /// Who, besides the approvers, may stand in for an approver away (`/away … name`):
    /// while every approver is away, the route's questions go to their private chat.
    #[serde(default)]
    pub delegates: Vec<u64>,
    /// Who may accept rules proposed in the chat, enforce and remove them (approvers of
    /// the route; none by default).
    #[serde(default)]
    pub rule_editors: Vec<u64>,
    /// Tools never proposed as rules (patterns with `*` and `?`).
    #[serde(default)]
    pub never_suggest: Vec<String>,
    /// The days of history proposals are drawn from.
    #[serde(default = "suggest::default_suggest_days")]
    pub suggest_days: u32,
    /// How often the chat is offered proposals unasked, in days; 0: only on `/suggest`.
    #[serde(default = "suggest::default_suggest_every_days")]
    pub suggest_every_days: u32,
    /// How many decisions, all alike, make a proposal.
    #[serde(default = "suggest::default_suggest_min_decisions")]
    pub suggest_min_decisions: u32,
}

/// See [`RouteSettings::max_extensions`].
pub const DEFAULT_MAX_EXTENSIONS: u32 = 3;

fn default_max_extensions() -> u32 {
    DEFAULT_MAX_EXTENSIONS
}

/// A route's escalation (see [`RouteSettings::escalate_after`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    pub after: When,
    /// The route the question is also posted to.
    pub to: String,
    /// Approvers of both routes decide in either chat (else each chat's own).
    pub union: bool,
}

/// See [`RouteSettings::max_window_seconds`].
pub const DEFAULT_MAX_WINDOW_SECONDS: u64 = 3600;

/// See [`RouteSettings::max_grant_seconds`].
pub const DEFAULT_MAX_GRANT_SECONDS: u64 = 8 * 3600;

fn default_max_grant_seconds() -> u64 {
    DEFAULT_MAX_GRANT_SECONDS
}

/// Most reminder points a route may list: each is a message in the chat.
pub const MAX_REMINDERS: usize = 10;

fn default_max_window_seconds() -> u64 {
    DEFAULT_MAX_WINDOW_SECONDS
}

/// A named Telegram destination and who may decide there.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub chat_id: i64,
    pub approvers: HashSet<u64>,
    pub forbid_self_approval: bool,
    pub quorum: Option<u32>,
    /// The longest window an approval on this route opens.
    pub max_window_seconds: u64,
    /// The longest a grant approved on this route lasts.
    pub max_grant_seconds: u64,
    /// How long a confirmed call has to be reported before its run is `unknown`.
    pub expect_outcome_seconds: Option<u64>,
    /// The console asks twice before it approves.
    pub console_confirm: bool,
    /// Reminder points, in the order given.
    pub remind_after: Vec<When>,
    pub escalation: Option<Escalation>,
    /// What one "+N min" tap adds; `None`: no such button.
    pub extend_by: Option<Duration>,
    pub max_extensions: u32,
    /// The forum topic questions of this route go to.
    pub topic_id: Option<i32>,
    /// See [`RouteSettings::grant_scopes`].
    pub grant_scopes: ScopeMap,
    /// Rules proposed from the route's history, and who may accept them.
    pub suggesting: Suggesting,
    /// See [`RouteSettings::sla_seconds`].
    pub sla: Option<Sla>,
    /// See [`RouteSettings::on_call`].
    pub on_call: Option<OnCall>,
    /// See [`RouteSettings::delegates`].
    pub delegates: HashSet<u64>,
}

impl Route {
    pub fn may_decide(&self, user_id: u64) -> bool {
        self.approvers.contains(&user_id)
    }

    /// Whether `user_id` may stand in for an approver away: an approver, or one of the
    /// route's `delegates`.
    pub fn may_stand_in(&self, user_id: u64) -> bool {
        self.approvers.contains(&user_id) || self.delegates.contains(&user_id)
    }
}

/// Checks `[[routes]]` in order: each route's keys, then that no two share a name.
/// `bot_id` is the bot's own user id (from the bot token), which no route may list as an
/// approver.
pub(super) fn check_all(
    settings: Vec<RouteSettings>,
    bot_id: Option<u64>,
) -> Result<HashMap<String, Arc<Route>>, ConfigError> {
    let route_chats: HashMap<String, i64> = settings
        .iter()
        .map(|r| (r.name.clone(), r.chat_id))
        .collect();
    let mut routes = HashMap::new();
    for (i, r) in settings.into_iter().enumerate() {
        let key = format!("routes[{i}]");
        let route = r.checked(&key, &route_chats, bot_id)?;
        if let Some(twice) = routes.insert(route.name.clone(), Arc::new(route)) {
            return Err(invalid(
                format!("{key}.name"),
                format!("route '{}' is defined twice", twice.name),
            ));
        }
    }
    Ok(routes)
}

impl RouteSettings {
    /// Checks one route, `key` saying where it is (`routes[0]`): `route_chats` holds every
    /// route's chat by name, for `escalate_to`. The checks run in a fixed order, so the
    /// first problem reported stays the same.
    fn checked(
        self,
        key: &str,
        route_chats: &HashMap<String, i64>,
        bot_id: Option<u64>,
    ) -> Result<Route, ConfigError> {
        self.check_deciders(key, bot_id)?;
        let remind_after = self.reminders(key)?;
        let escalation = self.escalation(key, route_chats)?;
        let extend_by = self.extend_by(key)?;
        self.check_extensions_and_topic(key)?;
        self.check_limits(key)?;
        let grant_scopes = super::grant_scopes(key, &self.grant_scopes)?;
        let approvers: HashSet<u64> = self.approvers.iter().copied().collect();
        let on_call =
            on_call::checked(key, &self.on_call, self.on_call_time_zone.as_deref(), |p| {
                approvers.contains(&p)
            })?;
        let suggesting = suggest::checked(
            key,
            SuggestKeys {
                rule_editors: &self.rule_editors,
                never_suggest: &self.never_suggest,
                suggest_days: self.suggest_days,
                suggest_every_days: self.suggest_every_days,
                suggest_min_decisions: self.suggest_min_decisions,
            },
            &approvers,
        )?;
        Ok(Route {
            name: self.name,
            chat_id: self.chat_id,
            approvers,
            forbid_self_approval: self.forbid_self_approval,
            quorum: self.quorum,
            max_window_seconds: self.max_window_seconds,
            max_grant_seconds: self.max_grant_seconds,
            expect_outcome_seconds: self.expect_outcome_seconds,
            console_confirm: self.console_confirm,
            remind_after,
            escalation,
            extend_by,
            max_extensions: self.max_extensions,
            topic_id: self.topic_id,
            grant_scopes,
            suggesting,
            sla: self.sla_seconds.and_then(Sla::new),
            on_call,
            delegates: self.delegates.into_iter().collect(),
        })
    }

    /// The name, the chat and the approvers (none of them 0 or the bot itself).
    fn check_deciders(&self, key: &str, bot_id: Option<u64>) -> Result<(), ConfigError> {
        if self.name.trim().is_empty() {
            return Err(invalid(format!("{key}.name"), "must not be empty"));
        }
        if self.approvers.is_empty() {
            return Err(invalid(
                format!("{key}.approvers"),
                format!(
                    "route '{}' has no approvers: nobody could decide",
                    self.name
                ),
            ));
        }
        if self.chat_id == 0 {
            return Err(invalid(format!("{key}.chat_id"), "must not be 0"));
        }
        if self.delegates.contains(&0) {
            return Err(invalid(
                format!("{key}.delegates"),
                "0 is not a Telegram user id",
            ));
        }
        if self.approvers.contains(&0) {
            return Err(invalid(
                format!("{key}.approvers"),
                "0 is not a Telegram user id",
            ));
        }
        if let Some(bot) = bot_id.filter(|id| self.approvers.contains(id)) {
            return Err(invalid(
                format!("{key}.approvers"),
                format!(
                    "{bot} is the bot itself (the id in {BOT_TOKEN_ENV}): a bot cannot tap; list the people who decide"
                ),
            ));
        }
        Ok(())
    }

    /// `max_extensions` and `topic_id`.
    fn check_extensions_and_topic(&self, key: &str) -> Result<(), ConfigError> {
        if !(1..=100).contains(&self.max_extensions) {
            return Err(invalid(
                format!("{key}.max_extensions"),
                "must be between 1 and 100",
            ));
        }
        if self.topic_id.is_some_and(|t| t <= 0) {
            return Err(invalid(
                format!("{key}.topic_id"),
                "must be a forum topic's message_thread_id (a positive number)",
            ));
        }
        if self.topic_id.is_some() && self.chat_id > 0 {
            return Err(invalid(
                format!("{key}.topic_id"),
                "topics exist in forum supergroups only; this chat_id is a private chat",
            ));
        }
        Ok(())
    }

    /// The route's bounds on windows, grants, outcome reports and quorum.
    fn check_limits(&self, key: &str) -> Result<(), ConfigError> {
        if self.max_window_seconds > crate::domain::limits::MAX_WINDOW_SECONDS {
            return Err(invalid(
                format!("{key}.max_window_seconds"),
                format!(
                    "must be at most {} (366 days)",
                    crate::domain::limits::MAX_WINDOW_SECONDS
                ),
            ));
        }
        if self.max_grant_seconds == 0
            || self.max_grant_seconds > crate::domain::limits::MAX_WINDOW_SECONDS
        {
            return Err(invalid(
                format!("{key}.max_grant_seconds"),
                format!(
                    "must be from 1 to {} (366 days)",
                    crate::domain::limits::MAX_WINDOW_SECONDS
                ),
            ));
        }
        if let Some(s) = self.expect_outcome_seconds
            && (s == 0 || s > crate::domain::limits::MAX_WINDOW_SECONDS)
        {
            return Err(invalid(
                format!("{key}.expect_outcome_seconds"),
                format!(
                    "must be from 1 to {} (366 days), or left out when no report is expected",
                    crate::domain::limits::MAX_WINDOW_SECONDS
                ),
            ));
        }
        if self
            .sla_seconds
            .is_some_and(|s| s == 0 || s > crate::domain::limits::MAX_WINDOW_SECONDS)
        {
            return Err(invalid(
                format!("{key}.sla_seconds"),
                format!(
                    "must be from 1 to {} (366 days), or left out for no SLA",
                    crate::domain::limits::MAX_WINDOW_SECONDS
                ),
            ));
        }
        if self.quorum == Some(0) {
            return Err(invalid(format!("{key}.quorum"), "must be at least 1"));
        }
        Ok(())
    }

    /// `remind_after`, parsed: at most [`MAX_REMINDERS`] points.
    fn reminders(&self, key: &str) -> Result<Vec<When>, ConfigError> {
        let mut remind_after = Vec::new();
        for (j, w) in self.remind_after.iter().enumerate() {
            remind_after
                .push(When::parse(w).map_err(|e| invalid(format!("{key}.remind_after[{j}]"), e))?);
        }
        if remind_after.len() > MAX_REMINDERS {
            return Err(invalid(
                format!("{key}.remind_after"),
                format!("at most {MAX_REMINDERS} reminders"),
            ));
        }
        Ok(remind_after)
    }

    /// `escalate_after`, `escalate_to` (both or neither) and `escalation_approvers`.
    fn escalation(
        &self,
        key: &str,
        route_chats: &HashMap<String, i64>,
    ) -> Result<Option<Escalation>, ConfigError> {
        Ok(match (&self.escalate_after, &self.escalate_to) {
            (None, None) => None,
            (Some(after), Some(to)) => {
                match route_chats.get(to) {
                    None => {
                        return Err(invalid(
                            format!("{key}.escalate_to"),
                            format!("names unknown route '{to}'"),
                        ));
                    }
                    // Escalating is asking other people elsewhere; the same chat
                    // would post the question twice to the same people.
                    Some(chat) if *chat == self.chat_id && *to != self.name => {
                        return Err(invalid(
                            format!("{key}.escalate_to"),
                            format!(
                                "route '{to}' posts to the same chat; escalate to a route in another chat"
                            ),
                        ));
                    }
                    Some(_) => {}
                }
                if *to == self.name {
                    return Err(invalid(
                        format!("{key}.escalate_to"),
                        "a route cannot escalate to itself",
                    ));
                }
                let union = match self.escalation_approvers.as_deref() {
                    None | Some("union") => true,
                    Some("each") => false,
                    Some(other) => {
                        return Err(invalid(
                            format!("{key}.escalation_approvers"),
                            format!("'{other}' is neither \"union\" nor \"each\""),
                        ));
                    }
                };
                Some(Escalation {
                    after: When::parse(after)
                        .map_err(|e| invalid(format!("{key}.escalate_after"), e))?,
                    to: to.clone(),
                    union,
                })
            }
            (Some(_), None) => {
                return Err(invalid(
                    format!("{key}.escalate_to"),
                    "escalate_after needs escalate_to: the route to escalate to",
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    format!("{key}.escalate_after"),
                    "escalate_to needs escalate_after: when to escalate",
                ));
            }
        })
    }

    /// `extend_minutes`, as what one "+N min" tap adds.
    fn extend_by(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        Ok(match self.extend_minutes {
            None => None,
            Some(m) if (1..=1440).contains(&m) => Some(Duration::from_secs(u64::from(m) * 60)),
            Some(_) => {
                return Err(invalid(
                    format!("{key}.extend_minutes"),
                    "must be between 1 and 1440 (a day)",
                ));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings};

    #[test]
    fn a_route_without_approvers_is_refused() {
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = []"));
        assert!(e.contains("routes[0].approvers"), "{e}");
    }

    #[test]
    fn route_steps_are_checked_with_the_key_that_is_wrong() {
        let second = "\n[[routes]]\nname = \"leads\"\nchat_id = -100999\napprovers = [3]\n";
        let with = |lines: &str| {
            format!("{BASE}{second}").replace(
                "approvers = [1, 2]\n",
                &format!("approvers = [1, 2]\n{lines}\n"),
            )
        };
        let ok = Config::from_settings(
            Settings::from_toml(&with(
                "remind_after = [\"50%\", \"10m\"]\nescalate_after = \"75%\"\nescalate_to = \"leads\"\nextend_minutes = 15",
            ))
            .unwrap(),
            &env,
        )
        .unwrap();
        let ops = ok.route("ops").unwrap();
        assert_eq!(ops.remind_after.len(), 2);
        assert_eq!(ops.extend_by, Some(Duration::from_secs(900)));
        assert_eq!(ops.max_extensions, DEFAULT_MAX_EXTENSIONS);
        let e = ops.escalation.as_ref().unwrap();
        assert!(e.union && e.to == "leads", "{e:?}");
        for (lines, expected) in [
            ("remind_after = [\"soon\"]", "routes[0].remind_after[0]"),
            (
                "escalate_after = \"1m\"",
                "escalate_after needs escalate_to",
            ),
            (
                "escalate_to = \"leads\"",
                "escalate_to needs escalate_after",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"nowhere\"",
                "names unknown route 'nowhere'",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"ops\"",
                "cannot escalate to itself",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"leads\"\nescalation_approvers = \"all\"",
                "routes[0].escalation_approvers",
            ),
            ("extend_minutes = 0", "routes[0].extend_minutes"),
            (
                "extend_minutes = 5\nmax_extensions = 0",
                "routes[0].max_extensions",
            ),
            ("topic_id = -4", "routes[0].topic_id"),
        ] {
            let e = err_of(&with(lines));
            assert!(e.contains(expected), "{lines}: {e}");
        }
        let same_chat = format!("{BASE}{second}")
            .replace("chat_id = -100999", "chat_id = -100123")
            .replace(
                "approvers = [1, 2]\n",
                "approvers = [1, 2]\nescalate_after = \"1m\"\nescalate_to = \"leads\"\n",
            );
        assert!(
            err_of(&same_chat).contains("same chat"),
            "{}",
            err_of(&same_chat)
        );
    }
}
