//! `[redis_bridge]`: AI-Parrot's Redis queues, served as a channel by an agent of the
//! service's own (see `crate::redis_bridge`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use secrecy::SecretString;
use serde::Deserialize;

use super::agents::Agent;
use super::{ConfigError, invalid};

/// `[redis_bridge]`: serve AI-Parrot's `CLIDaemonHumanChannel` queues
/// (`{prefix}:{recipient}:pending|notify|responses`) as if the service were its CLI
/// companion.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisBridgeSettings {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default = "default_redis_url")]
    pub url: String,
    /// AI-Parrot's `queue_prefix`.
    #[serde(default = "default_redis_prefix")]
    pub prefix: String,
    /// The `[[agents]]` name the bridge asks as. Use an agent of its own: every answer
    /// to one of this agent's interactions is pushed back to Redis.
    pub agent: Option<String>,
    /// The `[people]` names whose queues the bridge serves (AI-Parrot's recipients).
    #[serde(default)]
    pub recipients: Vec<String>,
    /// A group route (one of the agent's) to ask in instead of each recipient's private
    /// chat.
    pub route: Option<String>,
    /// The confirmation window of the AI-Parrot agents behind the bridge
    /// (`ConfirmationConfig.window_seconds`): their guard keeps it itself and its
    /// questions do not say so, so the operator is told from here. 0: none.
    #[serde(default)]
    pub agent_window_seconds: u64,
}

fn default_redis_url() -> String {
    "redis://127.0.0.1:6379".to_owned()
}

fn default_redis_prefix() -> String {
    "hitl:cli_queue".to_owned()
}

/// The checked `[redis_bridge]` section, present only when enabled.
#[derive(Clone)]
pub struct RedisBridge {
    /// May hold a password: never shown (see the `Debug` impl).
    pub url: SecretString,
    pub prefix: String,
    /// An agent of [`Config::agents`](super::Config::agents).
    pub agent: String,
    /// Each one a `[people]` name, without duplicates.
    pub recipients: Vec<String>,
    /// One of the agent's routes.
    pub route: Option<String>,
    /// What an approval lets through in the agents' own guard (disclosed, not enforced).
    pub agent_window_seconds: u64,
}

impl std::fmt::Debug for RedisBridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBridge")
            .field("url", &"[redacted]")
            .field("prefix", &self.prefix)
            .field("agent", &self.agent)
            .field("recipients", &self.recipients)
            .field("route", &self.route)
            .field("agent_window_seconds", &self.agent_window_seconds)
            .finish()
    }
}

impl RedisBridgeSettings {
    /// Checks an enabled `[redis_bridge]` against the agents and people.
    pub(super) fn checked(
        self,
        agents: &[Arc<Agent>],
        people: &HashMap<String, u64>,
    ) -> Result<RedisBridge, ConfigError> {
        if let Err(e) = redis::Client::open(self.url.as_str()) {
            // Redis's reason names no part of the URL, which may carry a password.
            return Err(invalid(
                "redis_bridge.url",
                format!("is not a Redis URL like redis://127.0.0.1:6379 ({e})"),
            ));
        }
        if self.prefix.is_empty() {
            return Err(invalid(
                "redis_bridge.prefix",
                "must not be empty (AI-Parrot's default is hitl:cli_queue)",
            ));
        }
        let agent_name = self.agent.ok_or_else(|| {
            invalid(
                "redis_bridge.agent",
                "is required: the name of the [[agents]] entry the bridge asks as (give it an agent of its own)",
            )
        })?;
        let Some(agent) = agents.iter().find(|a| a.name == agent_name) else {
            return Err(invalid(
                "redis_bridge.agent",
                format!("'{agent_name}' is not one of the [[agents]]"),
            ));
        };
        if self.recipients.is_empty() {
            return Err(invalid(
                "redis_bridge.recipients",
                "must name at least one person from [people] whose queue the bridge serves",
            ));
        }
        let mut seen = HashSet::new();
        for (i, r) in self.recipients.iter().enumerate() {
            let key = format!("redis_bridge.recipients[{i}]");
            if !people.contains_key(r) {
                return Err(invalid(key, format!("'{r}' is not in [people]")));
            }
            if r.starts_with("_hitl") {
                return Err(invalid(
                    key,
                    "names starting with _hitl are reserved for the bridge's own keys",
                ));
            }
            if !seen.insert(r.as_str()) {
                return Err(invalid(key, format!("'{r}' is listed twice")));
            }
        }
        if let Some(route) = &self.route
            && !agent.routes.contains(route)
        {
            return Err(invalid(
                "redis_bridge.route",
                format!("'{route}' is not one of agent '{agent_name}' routes"),
            ));
        }
        Ok(RedisBridge {
            url: SecretString::from(self.url),
            prefix: self.prefix,
            agent: agent_name,
            recipients: self.recipients,
            route: self.route,
            agent_window_seconds: self.agent_window_seconds,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings};

    fn with_bridge(section: &str) -> String {
        format!("{BASE}\n[people]\nalice = 1\nbob = 2\n\n[redis_bridge]\n{section}\n")
    }

    #[test]
    fn an_enabled_redis_bridge_gets_the_defaults_and_hides_its_url() {
        let toml = with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\", \"bob\"]\nurl = \"redis://:pw-secret@127.0.0.1:6379\"",
        );
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        let b = c.redis_bridge.as_ref().expect("enabled");
        assert_eq!(b.prefix, "hitl:cli_queue");
        assert_eq!(b.agent, "bot");
        assert_eq!(b.recipients, ["alice", "bob"]);
        assert_eq!(b.route, None);
        assert!(!format!("{c:?}").contains("pw-secret"));
        let s = Settings::from_toml(&with_bridge("agent = \"bot\"")).unwrap();
        assert_eq!(
            s.redis_bridge.as_ref().map(|b| b.url.as_str()),
            Some("redis://127.0.0.1:6379")
        );
        let c = Config::from_settings(s, &env).unwrap();
        assert!(c.redis_bridge.is_none(), "disabled unless enabled = true");
    }

    #[test]
    fn more_time_on_the_bridges_route_is_warned_about() {
        let toml = with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\"]\nroute = \"ops\"",
        );
        let quiet = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        assert!(
            !quiet
                .warnings()
                .iter()
                .any(|w| w.contains("extend_minutes"))
        );
        let toml = toml.replace(
            "approvers = [1, 2]\n",
            "approvers = [1, 2]\nextend_minutes = 5\n",
        );
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        assert!(
            c.warnings()
                .iter()
                .any(|w| w.contains("route 'ops' offers more time") && w.contains("redis_bridge")),
            "{:?}",
            c.warnings()
        );
    }

    #[test]
    fn a_redis_bridge_must_name_a_known_agent_people_and_an_allowed_route() {
        let e = err_of(&with_bridge("enabled = true\nrecipients = [\"alice\"]"));
        assert!(e.contains("redis_bridge.agent"), "{e}");
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"nobody\"\nrecipients = [\"alice\"]",
        ));
        assert!(
            e.contains("redis_bridge.agent") && e.contains("nobody"),
            "{e}"
        );
        let e = err_of(&with_bridge("enabled = true\nagent = \"bot\""));
        assert!(e.contains("redis_bridge.recipients"), "{e}");
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\", \"carol\"]",
        ));
        assert!(
            e.contains("redis_bridge.recipients[1]") && e.contains("carol"),
            "{e}"
        );
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\", \"alice\"]",
        ));
        assert!(e.contains("redis_bridge.recipients[1]"), "{e}");
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\"]\nroute = \"elsewhere\"",
        ));
        assert!(e.contains("redis_bridge.route"), "{e}");
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\"]\nurl = \"http://x\"",
        ));
        assert!(e.contains("redis_bridge.url"), "{e}");
        let e = err_of(&with_bridge(
            "enabled = true\nagent = \"bot\"\nrecipients = [\"alice\"]\nprefix = \"\"",
        ));
        assert!(e.contains("redis_bridge.prefix"), "{e}");
    }
}
