//! `[[mcp_upstreams]]`: MCP servers the service itself fronts with the gateway, served
//! at `/mcp/upstreams/{name}` to the agents listed (see `crate::gateway::hosted`).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use secrecy::SecretString;
use serde::Deserialize;

use super::agents::Agent;
use super::{ConfigError, invalid};
use crate::domain::mcp_call::ServerName;
use crate::domain::tool_pin::PinMode;

/// The most sessions one agent may hold open on one upstream: each is an upstream
/// connection (for a command, a process of its own).
pub const DEFAULT_MAX_SESSIONS: u32 = 8;

/// One `[[mcp_upstreams]]` entry as the file writes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpUpstreamSettings {
    pub name: String,
    /// A Streamable HTTP endpoint (`http(s)://…`); or else `command`.
    pub url: Option<String>,
    /// A program and its arguments, started for each session and spoken to over stdio.
    pub command: Option<Vec<String>>,
    /// The command's environment: `{ VARIABLE = "SERVICE_VARIABLE" }`, each value read
    /// from the service's environment. Nothing else of it is passed on but `PATH` and
    /// `HOME`: the service's own secrets stay its own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Headers sent to a `url` upstream: `{ Authorization = "SERVICE_VARIABLE" }`.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The `[[agents]]` that may use it; to every other agent it does not exist.
    #[serde(default)]
    pub agents: Vec<String>,
    /// Where its questions go (one of each listed agent's routes); the agent's default
    /// route when unset.
    pub route: Option<String>,
    /// Whether rules may match its tools' annotations (untrusted hints otherwise).
    #[serde(default)]
    pub trust_annotations: bool,
    /// `first` (the default): the first listing is allowed, later changes quarantined;
    /// `strict`: the first listing is quarantined too.
    #[serde(default)]
    pub pin: PinMode,
    /// How long a call waits for a decision (the service's default when unset).
    pub timeout_seconds: Option<f64>,
    #[serde(default = "default_max_sessions")]
    pub max_sessions: u32,
}

fn default_max_sessions() -> u32 {
    DEFAULT_MAX_SESSIONS
}

/// Where a checked upstream is. Values read from the environment are secrets: never
/// shown (see the `Debug` impl).
#[derive(Clone)]
pub enum UpstreamSource {
    Command {
        argv: Vec<String>,
        env: Vec<(String, SecretString)>,
    },
    Url {
        url: String,
        headers: Vec<(String, SecretString)>,
    },
}

impl std::fmt::Debug for UpstreamSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |pairs: &[(String, SecretString)]| -> Vec<String> {
            pairs.iter().map(|(n, _)| n.clone()).collect()
        };
        match self {
            UpstreamSource::Command { argv, env } => f
                .debug_struct("Command")
                .field("argv", argv)
                .field("env", &names(env))
                .finish(),
            UpstreamSource::Url { url, headers } => f
                .debug_struct("Url")
                .field("url", url)
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

/// A checked `[[mcp_upstreams]]` entry.
#[derive(Debug, Clone)]
pub struct McpUpstream {
    pub name: String,
    pub source: UpstreamSource,
    /// Names of [`Config::agents`](super::Config::agents), without duplicates.
    pub agents: HashSet<String>,
    pub route: Option<String>,
    pub trust_annotations: bool,
    pub pin: PinMode,
    pub timeout_seconds: Option<f64>,
    pub max_sessions: u32,
}

/// Checks `[[mcp_upstreams]]` in order against the agents (and their routes), reading
/// the variables they name through `env`.
pub(super) fn check_all(
    settings: Vec<McpUpstreamSettings>,
    agents: &[Arc<Agent>],
    max_timeout_seconds: f64,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Arc<McpUpstream>>, ConfigError> {
    let mut names = HashSet::new();
    let mut checked = Vec::with_capacity(settings.len());
    for (i, s) in settings.into_iter().enumerate() {
        let key = format!("mcp_upstreams[{i}]");
        if !names.insert(s.name.clone()) {
            return Err(invalid(
                format!("{key}.name"),
                format!("'{}' is used by an earlier entry", s.name),
            ));
        }
        checked.push(Arc::new(s.checked(
            &key,
            agents,
            max_timeout_seconds,
            env,
        )?));
    }
    Ok(checked)
}

impl McpUpstreamSettings {
    fn checked(
        self,
        key: &str,
        agents: &[Arc<Agent>],
        max_timeout_seconds: f64,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<McpUpstream, ConfigError> {
        if ServerName::parse(&self.name).is_err() {
            return Err(invalid(
                format!("{key}.name"),
                "is 1 to 64 of the characters A-Z a-z 0-9 . _ - (it is part of the URL)",
            ));
        }
        let source = self.source(key, env)?;
        let listed = self.checked_agents(key, agents)?;
        if let Some(t) = self.timeout_seconds
            && !(t.is_finite() && t > 0.0 && t <= max_timeout_seconds)
        {
            return Err(invalid(
                format!("{key}.timeout_seconds"),
                format!(
                    "must be more than 0 and at most confirmation.max_timeout_seconds ({max_timeout_seconds})"
                ),
            ));
        }
        if self.max_sessions == 0 {
            return Err(invalid(format!("{key}.max_sessions"), "must be at least 1"));
        }
        Ok(McpUpstream {
            name: self.name,
            source,
            agents: listed,
            route: self.route,
            trust_annotations: self.trust_annotations,
            pin: self.pin,
            timeout_seconds: self.timeout_seconds,
            max_sessions: self.max_sessions,
        })
    }

    /// `url` or `command`, with what each reads from the environment.
    fn source(
        &self,
        key: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<UpstreamSource, ConfigError> {
        let read = |section: &str, pairs: &BTreeMap<String, String>| {
            pairs
                .iter()
                .map(|(name, var)| match env(var) {
                    Some(value) => Ok((name.clone(), SecretString::from(value))),
                    None => Err(invalid(
                        format!("{key}.{section}.{name}"),
                        format!("the environment variable {var} is not set"),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
        };
        match (&self.url, &self.command) {
            (Some(url), None) => {
                if !self.env.is_empty() {
                    return Err(invalid(
                        format!("{key}.env"),
                        "is for a command's environment; a url upstream takes headers",
                    ));
                }
                let parsed = reqwest::Url::parse(url)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some());
                if parsed.is_none() {
                    return Err(invalid(
                        format!("{key}.url"),
                        "is not an http(s) URL like http://127.0.0.1:3001/mcp",
                    ));
                }
                for name in self.headers.keys() {
                    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                        return Err(invalid(
                            format!("{key}.headers.{name}"),
                            "is not a header name",
                        ));
                    }
                }
                let headers = read("headers", &self.headers)?;
                for (name, value) in &headers {
                    use secrecy::ExposeSecret as _;
                    if reqwest::header::HeaderValue::from_str(value.expose_secret()).is_err() {
                        return Err(invalid(
                            format!("{key}.headers.{name}"),
                            "its variable's value is not a header value (no line breaks)",
                        ));
                    }
                }
                Ok(UpstreamSource::Url {
                    url: url.clone(),
                    headers,
                })
            }
            (None, Some(argv)) => {
                if argv.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(invalid(
                        format!("{key}.command"),
                        "must start with the program to run, e.g. [\"npx\", \"-y\", \"@modelcontextprotocol/server-filesystem\", \"/srv/share\"]",
                    ));
                }
                if !self.headers.is_empty() {
                    return Err(invalid(
                        format!("{key}.headers"),
                        "are for a url upstream; a command takes env",
                    ));
                }
                Ok(UpstreamSource::Command {
                    argv: argv.clone(),
                    env: read("env", &self.env)?,
                })
            }
            (Some(_), Some(_)) => Err(invalid(key.to_owned(), "give url or command, not both")),
            (None, None) => Err(invalid(
                key.to_owned(),
                "needs url (a Streamable HTTP endpoint) or command (a program spoken to over stdio)",
            )),
        }
    }

    /// The listed agents, each one of `[[agents]]` and, with `route`, one that may ask
    /// there.
    fn checked_agents(
        &self,
        key: &str,
        agents: &[Arc<Agent>],
    ) -> Result<HashSet<String>, ConfigError> {
        if self.agents.is_empty() {
            return Err(invalid(
                format!("{key}.agents"),
                "must name at least one of the [[agents]] that may use this upstream",
            ));
        }
        let mut listed = HashSet::new();
        for (j, name) in self.agents.iter().enumerate() {
            let at = format!("{key}.agents[{j}]");
            let Some(agent) = agents.iter().find(|a| &a.name == name) else {
                return Err(invalid(
                    at,
                    format!("'{name}' is not one of the [[agents]]"),
                ));
            };
            if let Some(route) = &self.route
                && !agent.routes.contains(route)
            {
                return Err(invalid(
                    at,
                    format!(
                        "agent '{name}' may not ask on route '{route}' (its routes do not list it)"
                    ),
                ));
            }
            if !listed.insert(name.clone()) {
                return Err(invalid(at, format!("'{name}' is listed twice")));
            }
        }
        Ok(listed)
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings, UpstreamSource};

    fn with(entry: &str) -> String {
        format!("{BASE}\n[[mcp_upstreams]]\n{entry}\n")
    }

    #[test]
    fn an_upstream_is_read_with_its_secrets_hidden_from_debug() {
        let toml = with(
            "name = \"fs\"\nurl = \"http://127.0.0.1:9/mcp\"\nagents = [\"bot\"]\n\
             headers = { Authorization = \"AGENT_TOKEN\" }",
        );
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        let upstream = &c.mcp_upstreams[0];
        assert!(
            matches!(&upstream.source, UpstreamSource::Url { headers, .. } if headers.len() == 1)
        );
        let shown = format!("{c:?}");
        assert!(
            shown.contains("Authorization") && !shown.contains("agent-secret"),
            "{shown}"
        );
    }

    #[test]
    fn bad_upstreams_are_refused_naming_the_key() {
        for (entry, key, words) in [
            (
                "name = \"fs\"\ncommand = [\"srv\"]\nagents = [\"nobody\"]",
                "mcp_upstreams[0].agents[0]",
                "'nobody' is not one of the [[agents]]",
            ),
            (
                "name = \"fs\"\ncommand = [\"srv\"]",
                "mcp_upstreams[0].agents",
                "at least one",
            ),
            (
                "name = \"f s\"\ncommand = [\"srv\"]\nagents = [\"bot\"]",
                "mcp_upstreams[0].name",
                "A-Z a-z 0-9",
            ),
            (
                "name = \"fs\"\nagents = [\"bot\"]",
                "mcp_upstreams[0]",
                "needs url",
            ),
            (
                "name = \"fs\"\ncommand = [\"srv\"]\nurl = \"http://x/\"\nagents = [\"bot\"]",
                "mcp_upstreams[0]",
                "not both",
            ),
            (
                "name = \"fs\"\ncommand = [\"srv\"]\nagents = [\"bot\"]\nenv = { T = \"NOT_SET_ANYWHERE\" }",
                "mcp_upstreams[0].env.T",
                "NOT_SET_ANYWHERE is not set",
            ),
            (
                "name = \"fs\"\nurl = \"ftp://x/\"\nagents = [\"bot\"]",
                "mcp_upstreams[0].url",
                "http(s)",
            ),
            (
                "name = \"fs\"\ncommand = [\"srv\"]\nagents = [\"bot\"]\nroute = \"elsewhere\"",
                "mcp_upstreams[0].agents[0]",
                "may not ask on route 'elsewhere'",
            ),
            (
                "name = \"fs\"\ncommand = [\"\"]\nagents = [\"bot\"]",
                "mcp_upstreams[0].command",
                "the program",
            ),
        ] {
            let e = err_of(&with(entry));
            assert!(e.contains(key) && e.contains(words), "{entry}: {e}");
        }
        let twice = format!(
            "{}\n[[mcp_upstreams]]\nname = \"fs\"\ncommand = [\"srv\"]\nagents = [\"bot\"]\n",
            with("name = \"fs\"\ncommand = [\"srv\"]\nagents = [\"bot\"]")
        );
        let e = err_of(&twice);
        assert!(
            e.contains("mcp_upstreams[1].name") && e.contains("earlier"),
            "{e}"
        );
    }
}
