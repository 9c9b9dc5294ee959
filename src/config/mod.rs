//! Settings: the TOML file, environment overrides, and the checks that turn them into a
//! [`Config`] the service can trust.
//!
//! Two layers, on purpose: [`Settings`] is what the file (plus `HITL__SECTION__KEY`
//! environment overrides) says, deserialised strictly so a typo is an error rather than a
//! silently ignored key; [`Config`] is what the service runs on, built by
//! [`Config::from_settings`] only after every cross-reference has been checked and every
//! secret has been read from the environment. Secrets never live in files.
//!
//! Each section of the file has a module of its own holding what the file says
//! (`…Settings`), what the service runs on, and the checks between them, each naming the
//! key at fault; `load` reads the file and the environment. [`Config::from_settings`]
//! calls the sections' checks in turn, then checks what spans sections.

mod agents;
mod confirmation;
mod database;
mod load;
mod mcp_upstreams;
mod metrics;
mod mini_app;
mod on_call;
mod outage;
mod redis_bridge;
mod routes;
mod rules;
mod server;
mod stats;
mod suggest;
mod telegram;
mod webhooks;
mod when;

pub use agents::{
    Agent, AgentSettings, DEFAULT_MAX_LONG_POLLS, DEFAULT_MAX_STREAMS, MIN_AGENT_TOKEN_CHARS,
};
pub use confirmation::{ConfirmationSettings, MAX_TIMEOUT_LIMIT};
pub use database::{DatabaseSettings, DatabaseUrl};
pub use load::ENV_OVERRIDE_PREFIX;
pub use mcp_upstreams::{DEFAULT_MAX_SESSIONS, McpUpstream, McpUpstreamSettings, UpstreamSource};
pub use metrics::MetricsSettings;
pub use mini_app::{MiniApp, MiniAppSettings};
pub use outage::{DEFAULT_OUTAGE_AFTER_SECONDS, DEFAULT_OUTAGE_SECRET_ENV, OutageAlerts};
pub use redis_bridge::{RedisBridge, RedisBridgeSettings};
pub use routes::{
    DEFAULT_MAX_EXTENSIONS, DEFAULT_MAX_GRANT_SECONDS, DEFAULT_MAX_WINDOW_SECONDS, Escalation,
    MAX_REMINDERS, Route, RouteSettings,
};
pub use rules::{reload as reload_rules, rules_of_file};
pub use server::{
    DEFAULT_BODY_READ_TIMEOUT_SECONDS, DEFAULT_HEADER_READ_TIMEOUT_SECONDS,
    DEFAULT_IDLE_TIMEOUT_SECONDS, DEFAULT_MAX_CONNECTIONS, HttpLimits, MAX_HTTP_TIMEOUT_SECONDS,
    ServerSettings,
};
pub use stats::StatsSettings;
pub use suggest::{
    DEFAULT_SUGGEST_DAYS, DEFAULT_SUGGEST_MIN_DECISIONS, MAX_SUGGEST_DAYS, Suggesting,
};
pub use telegram::{
    BOT_TOKEN_ENV, DEFAULT_WEBHOOK_PATH, DEFAULT_WEBHOOK_SECRET_ENV, TelegramMode,
    TelegramModeSetting, TelegramSettings, WebhookMode, bot_id_of_token,
};
pub use webhooks::OutboxSettings;
pub use when::{When, WhenSetting};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::domain::grant::ScopeMap;
use crate::domain::rules::{Effect, Policy, RulesMode};

/// How `.env.example`'s placeholder secrets begin (`replace-with-a-long-random-string`,
/// the bot token's `123456789:replace-me`).
const EXAMPLE_SECRET_PREFIX: &str = "replace-";

/// The group chat id in the shipped example config (`config/default.toml`): a
/// configuration still holding it has not been filled in yet.
pub const EXAMPLE_CHAT_ID: i64 = -1_001_234_567_890;
/// The user ids in the shipped example config (approvers, `[people]`,
/// `[owner_telegram_ids]`).
pub const EXAMPLE_USER_IDS: [u64; 2] = [11_111_111, 22_222_222];

/// The file as written, after environment overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub telegram: TelegramSettings,
    pub confirmation: ConfirmationSettings,
    #[serde(default)]
    pub webhooks: OutboxSettings,
    /// Maps agents' `owner_id` values to Telegram user ids, for `forbid_self_approval`.
    #[serde(default)]
    pub owner_telegram_ids: HashMap<String, u64>,
    /// People by name, with their Telegram user ids: interaction recipients and
    /// `target_humans` name them (`alice = 11111111`).
    #[serde(default)]
    pub people: HashMap<String, u64>,
    #[serde(default)]
    pub routes: Vec<RouteSettings>,
    #[serde(default)]
    pub agents: Vec<AgentSettings>,
    /// AI-Parrot's `CLIDaemonHumanChannel` Redis queues, served as a channel.
    #[serde(default)]
    pub redis_bridge: Option<RedisBridgeSettings>,
    /// `GET /metrics`.
    #[serde(default)]
    pub metrics: MetricsSettings,
    /// `[mini_app]`: the operator's console in Telegram.
    #[serde(default)]
    pub mini_app: MiniAppSettings,
    /// `[[rules]]`: what is allowed, asked or denied before anyone is asked (checked by
    /// [`crate::domain::rules::RuleSet::from_values`], naming the rule at fault).
    #[serde(default)]
    pub rules: Vec<serde_json::Value>,
    /// The effect when no rule matches (`ask` when unset).
    #[serde(default)]
    pub rules_default: Option<Effect>,
    /// `[[mcp_upstreams]]`: MCP servers served through the gateway at
    /// `/mcp/upstreams/{name}`.
    #[serde(default)]
    pub mcp_upstreams: Vec<McpUpstreamSettings>,
    /// `enforce` (the default) or `dry_run`.
    #[serde(default)]
    pub rules_mode: RulesMode,
    /// `[stats]`: what `/stats` notes.
    #[serde(default)]
    pub stats: StatsSettings,
}

/// Why a configuration was refused. Each message names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(String),
    #[error("invalid configuration: {key}: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// `grant_scopes` of an agent or a route (`key` says which, `agents[0]`), read into the
/// map the grant check uses ([`ScopeMap`]), the entry at fault named as TOML writes it.
fn grant_scopes(
    key: &str,
    entries: &BTreeMap<String, Vec<String>>,
) -> Result<ScopeMap, ConfigError> {
    ScopeMap::parse(entries)
        .map_err(|e| invalid(format!("{key}.grant_scopes.{:?}", e.key), e.reason))
}

/// The validated configuration the service runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub bind: String,
    pub database_url: DatabaseUrl,
    /// `database.lease_seconds`: how long the leader's lease lasts unrenewed.
    pub lease: Duration,
    /// `database.pool_size`: the connections the service opens at most (`None`: the
    /// backend's default).
    pub pool_size: Option<u32>,
    pub telegram_api_url: reqwest::Url,
    pub poll_timeout_seconds: u32,
    /// Long polling or the webhook route.
    pub telegram_mode: TelegramMode,
    /// Where a Telegram outage is announced, when `[telegram] outage_webhook_url` is set.
    pub outage_alerts: Option<OutageAlerts>,
    pub bot_token: SecretString,
    pub default_timeout_seconds: f64,
    pub max_timeout_seconds: f64,
    pub default_window_seconds: u64,
    pub webhooks: OutboxSettings,
    pub owner_telegram_ids: HashMap<String, u64>,
    pub people: HashMap<String, u64>,
    pub routes: HashMap<String, Arc<Route>>,
    pub agents: Vec<Arc<Agent>>,
    pub redis_bridge: Option<RedisBridge>,
    /// The bearer token `GET /metrics` requires, if it requires one.
    pub metrics_token: Option<TokenDigest>,
    /// When `/stats` notes a person's approvals as a rubber stamp (`[stats]`).
    pub rubber_stamp: crate::domain::stats::RubberStamp,
    /// The operator's console (`[mini_app]`), when it is on.
    pub mini_app: Option<MiniApp>,
    /// `[server]`: timeouts and the connection limit of the HTTP server.
    pub http: HttpLimits,
    /// The rules checked before anyone is asked, as the file said at start (a SIGHUP
    /// reloads them into the service, not here).
    pub rules: Arc<Policy>,
    /// `[[mcp_upstreams]]`, in the file's order.
    pub mcp_upstreams: Vec<Arc<McpUpstream>>,
    /// Running as `serve --demo` (one route, the approver's private chat): what the bot
    /// answers to `/start` speaks of the demo rather than of `[[routes]]` in a file the
    /// demo does not read. Set by the caller; `false` from [`Config::from_settings`].
    pub demo: bool,
}

/// A bearer token's SHA-256, the form it is checked in. Never printed: a digest of a
/// weak token can be brute-forced.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest(pub [u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest([redacted])")
    }
}

/// SHA-256 of a bearer token, the only form in which tokens are kept.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Config {
    /// Checks every section and what spans sections, and reads the secrets through `env`
    /// (the process environment in production, a map in tests).
    ///
    /// The sections are checked in a fixed order, so a configuration with several faults
    /// is always refused for the same one; a section that names another's entries
    /// (agents name routes; the Redis bridge an agent, people and a route) is checked
    /// after it, against what its check produced.
    pub fn from_settings(
        s: Settings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        s.server.check_bind()?;
        let (database_url, lease, pool_size) = s.database.checked()?;
        let telegram_api_url = s.telegram.checked_api_url()?;
        let http = HttpLimits::from_settings(&s.server)?;
        let telegram_mode = telegram::telegram_mode(&s.telegram, env)?;
        let outage_alerts = outage::outage_alerts(&s.telegram, env)?;
        s.confirmation.check()?;
        let bot_token = telegram::bot_token(env)?;
        let routes = routes::check_all(s.routes, bot_id_of_token(&bot_token))?;
        let agents = agents::check_all(s.agents, &routes, &bot_token, env)?;
        s.webhooks.check()?;
        if agents.is_empty() {
            return Err(invalid("agents", "at least one agent must be configured"));
        }
        let redis_bridge = match s.redis_bridge {
            Some(b) if b.enabled => Some(b.checked(&agents, &s.people)?),
            _ => None,
        };
        let metrics_token = s.metrics.token(env)?;
        let rubber_stamp = s.stats.checked()?;
        let mini_app = s.mini_app.checked()?;
        let rules = Arc::new(rules::policy(&s.rules, s.rules_default, s.rules_mode)?);
        let mcp_upstreams = mcp_upstreams::check_all(
            s.mcp_upstreams,
            &agents,
            s.confirmation.max_timeout_seconds,
            env,
        )?;
        // An agent's token would then also read the metrics, and the reverse.
        if let Some(TokenDigest(digest)) = &metrics_token
            && agents.iter().any(|a| a.token_sha256 == *digest)
        {
            return Err(invalid(
                "metrics.token_env",
                "the metrics token must differ from every agent's token",
            ));
        }

        Ok(Config {
            bind: s.server.bind,
            database_url,
            lease,
            pool_size,
            telegram_api_url,
            poll_timeout_seconds: s.telegram.poll_timeout_seconds,
            telegram_mode,
            outage_alerts,
            bot_token: SecretString::from(bot_token),
            default_timeout_seconds: s.confirmation.default_timeout_seconds,
            max_timeout_seconds: s.confirmation.max_timeout_seconds,
            default_window_seconds: s.confirmation.default_window_seconds,
            webhooks: s.webhooks,
            owner_telegram_ids: s.owner_telegram_ids,
            people: s.people,
            routes,
            agents,
            redis_bridge,
            metrics_token,
            rubber_stamp,
            mini_app,
            http,
            rules,
            mcp_upstreams,
            demo: false,
        })
    }

    /// What is accepted but likely wrong: the example's placeholder ids, a bot token
    /// not shaped like `digits:secret`, an open `GET /metrics` on a non-loopback
    /// address. `check-config` prints these and `serve` logs them; neither refuses.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut routes: Vec<&Arc<Route>> = self.routes.values().collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        for r in routes {
            if r.chat_id == EXAMPLE_CHAT_ID {
                warnings.push(format!(
                    "route '{}': chat_id {EXAMPLE_CHAT_ID} is the example's placeholder; put your group's id there (add the bot to the group and send /start@<bot username> there: the bot answers with the group's chat_id)",
                    r.name
                ));
            }
            let mut placeholders: Vec<u64> = EXAMPLE_USER_IDS
                .into_iter()
                .filter(|id| r.approvers.contains(id))
                .collect();
            placeholders.sort_unstable();
            if !placeholders.is_empty() {
                warnings.push(format!(
                    "route '{}': approvers {placeholders:?} are the example's placeholder ids; put your operators' Telegram user ids there",
                    r.name
                ));
            }
        }
        if let Some(bridge) = &self.redis_bridge
            && let Some(route) = bridge.route.as_deref().and_then(|r| self.route(r))
            && route.extend_by.is_some()
        {
            warnings.push(format!(
                "route '{}' offers more time (extend_minutes) and [redis_bridge] asks there: AI-Parrot agents behind the bridge keep their own timer (the queue protocol cannot move it), so they still give up at the first deadline",
                route.name
            ));
        }
        let mut named: Vec<(&str, &String, &u64)> = self
            .people
            .iter()
            .map(|(k, v)| ("people", k, v))
            .chain(
                self.owner_telegram_ids
                    .iter()
                    .map(|(k, v)| ("owner_telegram_ids", k, v)),
            )
            .filter(|(_, _, id)| EXAMPLE_USER_IDS.contains(id))
            .collect();
        named.sort();
        for (section, name, id) in named {
            warnings.push(format!(
                "[{section}] {name} = {id} is the example's placeholder id"
            ));
        }
        if self
            .bot_token()
            .split_once(':')
            .is_some_and(|(_, secret)| secret.starts_with(EXAMPLE_SECRET_PREFIX))
        {
            warnings.push(format!(
                "{BOT_TOKEN_ENV} is the placeholder from .env.example; put the token @BotFather gave you there"
            ));
        } else if bot_id_of_token(self.bot_token()).is_none() {
            warnings.push(format!(
                "{BOT_TOKEN_ENV} does not look like a bot token (digits:secret, as @BotFather gives it)"
            ));
        }
        let loopback = self
            .bind
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback());
        if !loopback && self.metrics_token.is_none() {
            warnings.push(format!(
                "server.bind {} is not a loopback address and [metrics] token_env is unset: anyone who can reach it may read GET /metrics (under docker compose the port is published on 127.0.0.1 only, which is fine unless you publish it wider)",
                self.bind
            ));
        }
        warnings.extend(rules::warnings(&self.rules, &self.agents));
        warnings
    }

    /// Reads everything from the process environment.
    pub fn from_settings_and_process_env(s: Settings) -> Result<Config, ConfigError> {
        Config::from_settings(s, &|k| std::env::var(k).ok())
    }

    /// Whether `token` may read `GET /metrics`: any token when none is configured.
    /// Compared as digests in constant time, like the agents' tokens.
    pub fn metrics_token_accepted(&self, token: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        match (&self.metrics_token, token) {
            (None, _) => true,
            (Some(expected), Some(token)) => bool::from(expected.0.ct_eq(&token_digest(token))),
            (Some(_), None) => false,
        }
    }

    /// The agent a bearer token belongs to. Every candidate is compared in constant time,
    /// so response timing says nothing about how close a guess was.
    pub fn agent_for_token(&self, token: &str) -> Option<Arc<Agent>> {
        use subtle::ConstantTimeEq;
        let digest = token_digest(token);
        let mut found = None;
        for agent in &self.agents {
            if bool::from(agent.token_sha256.ct_eq(&digest)) {
                found = Some(agent.clone());
            }
        }
        found
    }

    /// The Telegram user an agent's `owner_id` stands for, if the config maps it.
    pub fn owner_telegram_id(&self, owner_id: &str) -> Option<u64> {
        self.owner_telegram_ids.get(owner_id).copied()
    }

    /// The Telegram user id of a person named in `[people]`.
    pub fn person(&self, name: &str) -> Option<u64> {
        self.people.get(name).copied()
    }

    /// Whether Telegram user `user_id` may open the console (`[mini_app]`): an approver
    /// of some route (escalation routes are routes too) or a person of `[people]`, whose
    /// private chats questions are sent to. Anyone else could answer nothing there.
    pub fn may_open_console(&self, user_id: u64) -> bool {
        self.routes.values().any(|r| r.may_decide(user_id))
            || self.people.values().any(|&p| p == user_id)
    }

    /// A person's `[people]` name, if they have one (the first in sorted order when
    /// several names map to one id).
    pub fn name_of(&self, user_id: u64) -> Option<String> {
        let mut names: Vec<&String> = self
            .people
            .iter()
            .filter(|(_, id)| **id == user_id)
            .map(|(name, _)| name)
            .collect();
        names.sort();
        names.first().map(|n| (*n).clone())
    }

    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.get(name)
    }

    pub fn bot_token(&self) -> &str {
        self.bot_token.expose_secret()
    }
}

/// What the sections' unit tests share: a small valid configuration, and the
/// environment that holds its secrets.
#[cfg(test)]
mod testing {
    use super::{BOT_TOKEN_ENV, Config, Settings};

    pub(super) const BASE: &str = r#"
[server]
bind = "127.0.0.1:8080"
[database]
url = "sqlite://data/hitl.db"
[telegram]
api_url = "https://api.telegram.org"
poll_timeout_seconds = 10
[confirmation]
default_timeout_seconds = 120
max_timeout_seconds = 86400
default_window_seconds = 0
[[routes]]
name = "ops"
chat_id = -100123
approvers = [1, 2]
[[agents]]
name = "bot"
token_env = "AGENT_TOKEN"
routes = ["ops"]
"#;

    pub(super) fn env(k: &str) -> Option<String> {
        match k {
            BOT_TOKEN_ENV => Some("123:abc".into()),
            "AGENT_TOKEN" => Some("agent-secret-0123456789".into()),
            _ => None,
        }
    }

    pub(super) fn err_of(toml: &str) -> String {
        let s = Settings::from_toml(toml).expect("parses");
        Config::from_settings(s, &env).unwrap_err().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{BASE, env};
    use super::*;

    #[test]
    fn a_valid_config_is_accepted_and_the_single_route_is_the_default() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert_eq!(c.agents[0].default_route, "ops");
        assert!(c.agent_for_token("agent-secret-0123456789").is_some());
        assert!(c.agent_for_token("agent-secreT").is_none());
    }

    #[test]
    fn the_debug_output_of_a_config_shows_no_secret() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("123:abc") && !dbg.contains("agent-secret"),
            "{dbg}"
        );
    }

    #[test]
    fn placeholders_an_odd_bot_token_and_open_metrics_off_loopback_are_warned_about() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let toml = BASE
            .replace("chat_id = -100123", "chat_id = -1001234567890")
            .replace("approvers = [1, 2]", "approvers = [11111111, 2]")
            .replace("127.0.0.1:8080", "0.0.0.0:8080");
        let env = |k: &str| match k {
            BOT_TOKEN_ENV => Some("x".into()),
            other => env(other),
        };
        let w = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w[0].contains("chat_id -1001234567890 is the example's placeholder"));
        assert!(w[1].contains("approvers [11111111] are the example's placeholder"));
        assert!(w[2].contains("does not look like a bot token"));
        assert!(w[3].contains("server.bind 0.0.0.0:8080 is not a loopback address"));

        let env = |k: &str| match k {
            BOT_TOKEN_ENV => Some("123456789:replace-me".into()),
            other => env(other),
        };
        let w = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("is the placeholder from .env.example"),
            "{w:?}"
        );
    }

    #[test]
    fn an_allow_default_and_a_rule_naming_an_unknown_agent_are_warned_about() {
        let toml = format!(
            "rules_default = \"allow\"\n{BASE}\n[[rules]]\nname = \"no-drops\"\neffect = \"deny\"\ntools = [\"drop_*\"]\n\n[[rules]]\nname = \"pings\"\neffect = \"allow\"\ntools = [\"ping\"]\nagents = [\"bot\", \"workday\"]\n"
        );
        let w = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with(
                "rules_default = \"allow\": every call no rule matches is confirmed at once"
            ),
            "{w:?}"
        );
        assert!(
            w[0].contains("only the 1 deny and ask rule(s) stop a call"),
            "{w:?}"
        );
        assert_eq!(
            w[1],
            "rule 'pings' names the agent 'workday', which no [[agents]] entry is (the agents are: bot): the rule never matches for it"
        );
        let known = toml
            .replace("rules_default = \"allow\"\n", "")
            .replace("\"bot\", \"workday\"", "\"bot\"");
        let w = Config::from_settings(Settings::from_toml(&known).unwrap(), &env)
            .unwrap()
            .warnings();
        assert!(w.is_empty(), "{w:?}");
    }
}
