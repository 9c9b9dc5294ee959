//! `[[agents]]`: who may call the API, with which token, on which routes, where its
//! webhooks may go, and how much of the service it may hold at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use secrecy::SecretString;
use serde::Deserialize;

use super::routes::Route;
use super::{BOT_TOKEN_ENV, ConfigError, EXAMPLE_SECRET_PREFIX, invalid, token_digest};
use crate::domain::grant::ScopeMap;
use crate::domain::outbox::{Url, callback_path_refusal, link_local_refusal, under_prefix};

/// The shortest agent bearer token accepted: a token is the agent's only credential,
/// and a few characters can be guessed over the network.
pub const MIN_AGENT_TOKEN_CHARS: usize = 16;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub name: String,
    pub token_env: String,
    #[serde(default)]
    pub routes: Vec<String>,
    pub default_route: Option<String>,
    /// Variable holding the secret that signs this agent's webhooks.
    pub webhook_secret_env: Option<String>,
    /// `callback_url`s this agent may use must start with one of these.
    #[serde(default)]
    pub callback_url_prefixes: Vec<String>,
    /// Lets `callback_url_prefixes` name link-local and cloud metadata addresses
    /// ([`link_local_refusal`]), which are refused without it.
    #[serde(default)]
    pub allow_link_local_callbacks: bool,
    /// Most `POST /v1/confirmations` per minute (a burst of this many, then a steady
    /// rate); more get 429 with `Retry-After`.
    #[serde(default = "default_requests_per_minute")]
    pub requests_per_minute: u32,
    /// Most requests pending at once; more get 429.
    #[serde(default = "default_max_pending")]
    pub max_pending: u32,
    /// Most `GET /v1/events` streams open at once; more get 429 with `Retry-After`.
    #[serde(default = "default_max_streams")]
    pub max_streams: u32,
    /// Most long-polls (`GET /v1/confirmations/{id}?wait=N`,
    /// `GET /v1/interactions/{id}?wait=N`) waiting at once; more get 429 with
    /// `Retry-After`.
    #[serde(default = "default_max_long_polls")]
    pub max_long_polls: u32,
    /// What this agent's scopes of kinds other than `tool` cover: `{ "billing:write" =
    /// ["transfer", "refund_*"] }`. A `grant_scope` of such a kind covers a call only
    /// where this map or its route's maps it to a pattern the tool matches.
    #[serde(default)]
    pub grant_scopes: BTreeMap<String, Vec<String>>,
}

/// See [`AgentSettings::max_streams`]: one stream per agent process is the usual use;
/// eight leaves room for replicas and a reconnect overlapping its old stream.
pub const DEFAULT_MAX_STREAMS: u32 = 8;
/// See [`AgentSettings::max_long_polls`]: one long-poll per pending request at the
/// default `max_pending`.
pub const DEFAULT_MAX_LONG_POLLS: u32 = 100;

fn default_max_streams() -> u32 {
    DEFAULT_MAX_STREAMS
}

fn default_max_long_polls() -> u32 {
    DEFAULT_MAX_LONG_POLLS
}

fn default_requests_per_minute() -> u32 {
    120
}

fn default_max_pending() -> u32 {
    100
}

/// One agent allowed to call the API. Only the SHA-256 of its token is kept, so the token
/// itself cannot leak from memory dumps, `Debug` output or logs.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    pub token_sha256: [u8; 32],
    pub routes: HashSet<String>,
    pub default_route: String,
    /// Signs webhooks; present whenever `callback_url_prefixes` is not empty.
    pub webhook_secret: Option<SecretString>,
    pub callback_url_prefixes: Vec<Url>,
    pub requests_per_minute: u32,
    pub max_pending: u32,
    /// Most event streams open at once.
    pub max_streams: u32,
    /// Most long-polls waiting at once.
    pub max_long_polls: u32,
    /// See [`AgentSettings::grant_scopes`].
    pub grant_scopes: ScopeMap,
}

impl Agent {
    /// Whether `url` lies under one of the agent's allowed prefixes ([`under_prefix`]).
    pub fn allows_callback(&self, url: &Url) -> bool {
        under_prefix(url, &self.callback_url_prefixes)
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("routes", &self.routes)
            .field("default_route", &self.default_route)
            .field(
                "callback_url_prefixes",
                &self
                    .callback_url_prefixes
                    .iter()
                    .map(|u| u.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Checks `[[agents]]` in order, against the routes and the bot token (`bot_token`,
/// trimmed), reading each agent's secrets through `env`.
pub(super) fn check_all(
    settings: Vec<AgentSettings>,
    routes: &HashMap<String, Arc<Route>>,
    bot_token: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Arc<Agent>>, ConfigError> {
    let mut agents: Vec<Arc<Agent>> = Vec::new();
    for (i, a) in settings.into_iter().enumerate() {
        let key = format!("agents[{i}]");
        let agent = a.checked(&key, &agents, routes, bot_token, env)?;
        agents.push(Arc::new(agent));
    }
    Ok(agents)
}

impl AgentSettings {
    /// Checks one agent, `key` saying where it is (`agents[0]`): `others` are the agents
    /// before it, whose names and tokens it may not share.
    fn checked(
        self,
        key: &str,
        others: &[Arc<Agent>],
        routes: &HashMap<String, Arc<Route>>,
        bot_token: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Agent, ConfigError> {
        if self.name.trim().is_empty() {
            return Err(invalid(format!("{key}.name"), "must not be empty"));
        }
        if others.iter().any(|other| other.name == self.name) {
            return Err(invalid(
                format!("{key}.name"),
                format!("agent '{}' is defined twice", self.name),
            ));
        }
        if self.routes.is_empty() {
            return Err(invalid(
                format!("{key}.routes"),
                format!("agent '{}' has no routes", self.name),
            ));
        }
        for r in &self.routes {
            if !routes.contains_key(r) {
                return Err(invalid(
                    format!("{key}.routes"),
                    format!("agent '{}' names unknown route '{r}'", self.name),
                ));
            }
        }
        let default_route = self.default_route(key)?;
        let token_sha256 = self.token_sha256(key, others, bot_token, env)?;
        if self.requests_per_minute == 0 {
            return Err(invalid(
                format!("{key}.requests_per_minute"),
                "must be at least 1",
            ));
        }
        if self.max_pending == 0 {
            return Err(invalid(format!("{key}.max_pending"), "must be at least 1"));
        }
        if self.max_streams == 0 {
            return Err(invalid(format!("{key}.max_streams"), "must be at least 1"));
        }
        if self.max_long_polls == 0 {
            return Err(invalid(
                format!("{key}.max_long_polls"),
                "must be at least 1",
            ));
        }
        let callback_url_prefixes = self.callback_url_prefixes(key)?;
        let webhook_secret = self.webhook_secret(key, !callback_url_prefixes.is_empty(), env)?;
        let grant_scopes = super::grant_scopes(key, &self.grant_scopes)?;
        Ok(Agent {
            name: self.name,
            token_sha256,
            routes: self.routes.into_iter().collect(),
            default_route,
            webhook_secret,
            callback_url_prefixes,
            requests_per_minute: self.requests_per_minute,
            max_pending: self.max_pending,
            max_streams: self.max_streams,
            max_long_polls: self.max_long_polls,
            grant_scopes,
        })
    }

    /// `default_route`: one of the agent's routes, which may go unsaid when it has one.
    fn default_route(&self, key: &str) -> Result<String, ConfigError> {
        match &self.default_route {
            Some(d) if self.routes.contains(d) => Ok(d.clone()),
            Some(d) => Err(invalid(
                format!("{key}.default_route"),
                format!("'{d}' is not one of agent '{}' routes", self.name),
            )),
            None if self.routes.len() == 1 => Ok(self.routes[0].clone()),
            None => Err(invalid(
                format!("{key}.default_route"),
                format!("agent '{}' has several routes: name the default", self.name),
            )),
        }
    }

    /// The SHA-256 of the agent's token, read through `env` from `token_env`: long
    /// enough, neither the bot token nor the example's placeholder, and no other agent's.
    fn token_sha256(
        &self,
        key: &str,
        others: &[Arc<Agent>],
        bot_token: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<[u8; 32], ConfigError> {
        let token = env(&self.token_env)
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| {
                invalid(
                    format!("{key}.token_env"),
                    format!(
                        "environment variable {} (the token of agent '{}') is not set",
                        self.token_env, self.name
                    ),
                )
            })?;
        let token = token.trim();
        // Checked first: the bot token is refused for what it is, whatever its length.
        if token == bot_token {
            return Err(invalid(
                format!("{key}.token_env"),
                format!(
                    "the token of agent '{}' (in {}) is the bot token ({BOT_TOKEN_ENV}): give the agent a token of its own",
                    self.name, self.token_env
                ),
            ));
        }
        if token.chars().count() < MIN_AGENT_TOKEN_CHARS {
            return Err(invalid(
                format!("{key}.token_env"),
                format!(
                    "the token of agent '{}' (in {}) is {} long; use at least {MIN_AGENT_TOKEN_CHARS} characters (e.g. from `openssl rand -hex 32`)",
                    self.name,
                    self.token_env,
                    match token.chars().count() {
                        1 => "1 character".to_owned(),
                        n => format!("{n} characters"),
                    }
                ),
            ));
        }
        // The example's placeholder is public: anyone who read .env.example could
        // use it. Refuse it whatever its length.
        if token.starts_with(EXAMPLE_SECRET_PREFIX) {
            return Err(invalid(
                format!("{key}.token_env"),
                format!(
                    "the token of agent '{}' (in {}) is the placeholder from .env.example; set a random one (e.g. from `openssl rand -hex 32`)",
                    self.name, self.token_env
                ),
            ));
        }
        let token_sha256 = token_digest(token);
        if others
            .iter()
            .any(|other| other.token_sha256 == token_sha256)
        {
            return Err(invalid(
                format!("{key}.token_env"),
                format!(
                    "agent '{}' has the same token as another agent: tokens must identify one agent",
                    self.name
                ),
            ));
        }
        Ok(token_sha256)
    }

    /// `callback_url_prefixes`, parsed: http(s) URLs whose path holds no encoded
    /// separator and whose host is not link-local unless the agent opts in.
    fn callback_url_prefixes(&self, key: &str) -> Result<Vec<Url>, ConfigError> {
        let mut callback_url_prefixes = Vec::new();
        for p in &self.callback_url_prefixes {
            let url = Url::parse(p)
                .ok()
                .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                .ok_or_else(|| {
                    invalid(
                        format!("{key}.callback_url_prefixes"),
                        format!("'{p}' is not an http(s) URL"),
                    )
                })?;
            if let Some(reason) = callback_path_refusal(p, &url) {
                return Err(invalid(
                    format!("{key}.callback_url_prefixes"),
                    format!("'{p}' {reason}"),
                ));
            }
            if !self.allow_link_local_callbacks
                && let Some(what) = link_local_refusal(&url)
            {
                return Err(invalid(
                    format!("{key}.callback_url_prefixes"),
                    format!(
                        "'{p}' reaches {what}, where a webhook could read the machine's \
                         credentials; if this agent's receiver really lives there, set \
                         {key}.allow_link_local_callbacks = true"
                    ),
                ));
            }
            callback_url_prefixes.push(url);
        }
        Ok(callback_url_prefixes)
    }

    /// The secret that signs the agent's webhooks, read through `env` from
    /// `webhook_secret_env`: required when the agent allows callback URLs.
    fn webhook_secret(
        &self,
        key: &str,
        allows_callbacks: bool,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<SecretString>, ConfigError> {
        Ok(match &self.webhook_secret_env {
            Some(var) => Some(
                env(var)
                    .filter(|t| !t.trim().is_empty())
                    .map(|t| SecretString::from(t.trim().to_owned()))
                    .ok_or_else(|| {
                        invalid(
                            format!("{key}.webhook_secret_env"),
                            format!(
                                "environment variable {var} (the webhook secret of agent '{}') is not set",
                                self.name
                            ),
                        )
                    })?,
            ),
            None if allows_callbacks => {
                return Err(invalid(
                    format!("{key}.webhook_secret_env"),
                    format!(
                        "agent '{}' allows callback URLs, so it needs a webhook secret",
                        self.name
                    ),
                ));
            }
            None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings};
    use crate::domain::outbox::{UNDER_HOOKS, UNDER_HOOKS_PREFIX, Url};

    #[test]
    fn an_agent_naming_an_unknown_route_is_refused_naming_the_key() {
        let e = err_of(&BASE.replace(r#"routes = ["ops"]"#, r#"routes = ["nope"]"#));
        assert!(e.contains("agents[0].routes") && e.contains("nope"), "{e}");
    }

    #[test]
    fn a_missing_agent_token_variable_is_refused_naming_it() {
        let e = err_of(&BASE.replace("AGENT_TOKEN", "MISSING_TOKEN"));
        assert!(
            e.contains("MISSING_TOKEN") && e.contains("agents[0].token_env"),
            "{e}"
        );
    }

    #[test]
    fn grant_scopes_of_agents_and_routes_are_read_and_a_bad_entry_is_refused_naming_it() {
        let with = |agent: &str, route: &str| {
            let toml = BASE
                .replace(
                    r#"routes = ["ops"]"#,
                    &format!("routes = [\"ops\"]\ngrant_scopes = {{ {agent} }}"),
                )
                .replace(
                    "approvers = [1, 2]",
                    &format!("approvers = [1, 2]\ngrant_scopes = {{ {route} }}"),
                );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map_err(|e| e.to_string())
        };
        let c = with(
            r#""billing:write" = ["transfer", "refund_*"]"#,
            r#""report:read" = ["read_report"]"#,
        )
        .unwrap();
        let scope = |s: &str| crate::domain::grant::Scope::parse(s).unwrap();
        let agent = &c.agents[0].grant_scopes;
        let patterns: Vec<&str> = agent
            .patterns(&scope("billing:write"))
            .unwrap()
            .iter()
            .map(|g| g.as_str())
            .collect();
        assert_eq!(patterns, ["transfer", "refund_*"]);
        assert!(
            c.route("ops")
                .unwrap()
                .grant_scopes
                .patterns(&scope("report:read"))
                .is_some()
        );
        assert!(with("", "").unwrap().agents[0].grant_scopes.is_empty());

        for (agent, route, key, why) in [
            (
                r#""tool:read_report" = ["*"]"#,
                "",
                r#"agents[0].grant_scopes."tool:read_report""#,
                "cannot be mapped",
            ),
            (
                r#""billing" = ["x"]"#,
                "",
                r#"agents[0].grant_scopes."billing""#,
                "is not a scope",
            ),
            (
                "",
                r#""billing:write" = []"#,
                r#"routes[0].grant_scopes."billing:write""#,
                "maps to no tool",
            ),
            (
                "",
                r#""billing:write" = ["refund_{a,b}"]"#,
                r#"routes[0].grant_scopes."billing:write""#,
                "'refund_{a,b}': `{` is not supported",
            ),
        ] {
            let e = with(agent, route).unwrap_err();
            assert!(e.contains(&format!("{key}: ")) && e.contains(why), "{e}");
        }
    }

    #[test]
    fn callback_prefixes_without_a_webhook_secret_are_refused() {
        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            "routes = [\"ops\"]\ncallback_url_prefixes = [\"https://a.example/\"]",
        );
        let e = err_of(&toml);
        assert!(e.contains("agents[0].webhook_secret_env"), "{e}");
    }

    #[test]
    fn short_agent_tokens_the_bot_token_approver_0_and_the_bot_as_approver_are_refused() {
        let with_env = |token: &'static str, toml: &str| {
            let env = move |k: &str| match k {
                "AGENT_TOKEN" => Some(token.to_owned()),
                other => env(other),
            };
            Config::from_settings(Settings::from_toml(toml).unwrap(), &env)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = with_env("fifteen-chars-x", BASE);
        assert!(
            e.contains("agents[0].token_env")
                && e.contains("15 characters")
                && !e.contains("fifteen"),
            "{e}"
        );
        let e = with_env("123:abc", BASE);
        assert!(
            e.contains("agents[0].token_env") && e.contains("is the bot token"),
            "{e}"
        );
        let e = with_env("replace-with-a-long-random-string", BASE);
        assert!(
            e.contains("agents[0].token_env") && e.contains("placeholder from .env.example"),
            "{e}"
        );
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = [1, 0]"));
        assert!(
            e.contains("routes[0].approvers: 0 is not a Telegram user id"),
            "{e}"
        );
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = [1, 123]"));
        assert!(
            e.contains("routes[0].approvers: 123 is the bot itself"),
            "{e}"
        );
    }

    #[test]
    fn a_callback_url_is_allowed_only_under_a_prefix_at_its_boundaries_and_no_prefix_may_hold_an_encoded_separator()
     {
        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            &format!(
                "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"{UNDER_HOOKS_PREFIX}\"]"
            ),
        );
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        // The configured prefix is UNDER_HOOKS_PREFIX: the agent agrees with every case.
        for &(url, allowed) in UNDER_HOOKS {
            assert_eq!(
                c.agents[0].allows_callback(&Url::parse(url).unwrap()),
                allowed,
                "{url}"
            );
        }

        let with_prefix = |p: &str| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"{p}\"]"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = with_prefix("https://a.example/hooks%2Fx").unwrap_err();
        assert!(
            e.contains("agents[0].callback_url_prefixes") && e.contains("%2F"),
            "{e}"
        );
        assert!(with_prefix("https://a.example/hooks?x=%2F").is_ok());
    }

    #[test]
    fn callback_prefixes_to_link_local_and_metadata_addresses_are_refused_unless_the_agent_opts_in()
    {
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let with_prefix = |p: &str, opt_in: bool| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\n\
                     callback_url_prefixes = [\"https://a.example/hooks\", \"{p}\"]\n\
                     allow_link_local_callbacks = {opt_in}"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for (prefix, what) in [
            ("http://169.254.169.254", "a cloud metadata address"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "a cloud metadata address",
            ),
            // The same address written as one number, in hex, or IPv4-mapped.
            ("http://2852039166/", "a cloud metadata address"),
            ("http://0xa9fea9fe/", "a cloud metadata address"),
            (
                "http://[::ffff:169.254.169.254]/",
                "a cloud metadata address",
            ),
            ("http://[fd00:ec2::254]/", "a cloud metadata address"),
            ("http://100.100.100.200/", "a cloud metadata address"),
            (
                "http://169.254.170.2/v2/credentials",
                "a link-local address",
            ),
            ("https://169.254.1.1:8443/hooks", "a link-local address"),
            ("http://[fe80::1]/", "a link-local address"),
            ("http://[febf::1]:8080/", "a link-local address"),
            ("http://metadata.google.internal/", "a cloud metadata host"),
            ("http://METADATA.google.internal./", "a cloud metadata host"),
            ("http://metadata/", "a cloud metadata host"),
            ("http://instance-data/", "a cloud metadata host"),
        ] {
            let e = with_prefix(prefix, false).expect_err(prefix);
            assert!(
                e.contains("agents[0].callback_url_prefixes")
                    && e.contains(&format!("'{prefix}' reaches {what}"))
                    && e.contains("agents[0].allow_link_local_callbacks = true"),
                "{prefix}: {e}"
            );
            assert_eq!(
                with_prefix(prefix, true),
                Ok(()),
                "{prefix} with the opt-in"
            );
        }
        for prefix in [
            "http://127.0.0.1:9/hooks",
            "http://10.0.0.5/hooks",
            "http://169.253.255.255/",
            "http://169.255.0.1/",
            "http://[fec0::1]/",
            "http://[fd00:ec2::253]/",
            "https://metadata.example.com/",
            "https://hooks.internal/",
        ] {
            assert_eq!(with_prefix(prefix, false), Ok(()), "{prefix}");
        }
    }
}
