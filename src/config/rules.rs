//! `[[rules]]`, `rules_default` and `rules_mode`: the rules checked before the human
//! (see [`crate::domain::rules`]). The file holds them as tables; they are read as JSON
//! values so that a table serde cannot read as a rule is refused under that rule's name.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::{Agent, ConfigError, Settings, invalid};
use crate::domain::rules::{Effect, Policy, RuleSet, RulesMode};

/// Checks the rules the file holds, in file order; the first rule refused is named.
pub fn policy(
    rules: &[Value],
    default: Option<Effect>,
    mode: RulesMode,
) -> Result<Policy, ConfigError> {
    let set = RuleSet::from_values(rules, default).map_err(|e| invalid("rules", e.to_string()))?;
    Ok(Policy::new(set, mode))
}

/// What `check-config` says about rules that load but may not do what their writer
/// means: `rules_default = "allow"` (what it lets through), and a rule naming an agent
/// the configuration does not have (it can never match that agent's calls, and a
/// misspelled name is the usual cause: `workday` for `workday-bot`).
pub(super) fn warnings(policy: &Policy, agents: &[Arc<Agent>]) -> Vec<String> {
    let mut warnings = Vec::new();
    let set = &policy.set;
    if set.default_effect() == Effect::Allow {
        let stopping = set
            .rules()
            .iter()
            .filter(|r| r.effect() != Effect::Allow)
            .count();
        warnings.push(format!(
            "rules_default = \"allow\": every call no rule matches is confirmed at once, \
             without asking anyone: any tool, with any parameters, from any agent; only \
             the {stopping} deny and ask rule(s) stop a call. Unless that is meant, set \
             rules_default = \"ask\" and write allow rules for what may pass unasked"
        ));
    }
    let known: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
    for rule in set.rules() {
        for name in rule.agents().unwrap_or_default() {
            if !known.contains(&name.as_str()) {
                warnings.push(format!(
                    "rule '{}' names the agent '{name}', which no [[agents]] entry is \
                     (the agents are: {}): the rule never matches for it",
                    rule.name(),
                    known.join(", ")
                ));
            }
        }
    }
    warnings
}

impl Settings {
    /// The rules these settings hold, checked.
    pub fn policy(&self) -> Result<Policy, ConfigError> {
        policy(&self.rules, self.rules_default, self.rules_mode)
    }
}

/// Only the rules' keys of a file: what `rules test` reads, from a whole configuration
/// or from a file holding nothing but rules (`config/rules.example.toml`).
#[derive(serde::Deserialize)]
struct RulesOnly {
    #[serde(default)]
    rules: Vec<Value>,
    #[serde(default)]
    rules_default: Option<Effect>,
    #[serde(default)]
    rules_mode: RulesMode,
}

/// The rules the file at `path` holds (its other sections, if any, are not read): for
/// `rules test`, which judges a call without running anything else.
pub fn rules_of_file(path: &Path) -> Result<Policy, ConfigError> {
    use figment::Figment;
    use figment::providers::{Format, Toml};
    if !path.is_file() {
        return Err(ConfigError::Load(format!(
            "{} is not a file",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigError::Load(format!("cannot read rules file {}: {e}", path.display()))
    })?;
    // A syntax error said once, with its line and column, as the configuration's is.
    super::load::check_syntax(path, &text)?;
    let only: RulesOnly = Figment::from(Toml::string(&text))
        .extract()
        .map_err(|e| ConfigError::Load(e.to_string()))?;
    policy(&only.rules, only.rules_default, only.rules_mode)
}

/// The rules of the configuration file at `path` (with its `HITL__…` overrides), for a
/// reload (SIGHUP): the whole file must still read as a configuration, so a reload never
/// takes rules from a file the service could not start with.
pub fn reload(path: &Path) -> Result<Policy, ConfigError> {
    Settings::load(path)?.policy()
}
