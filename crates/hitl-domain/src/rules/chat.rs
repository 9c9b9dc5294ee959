//! Rules accepted in a route's chat (issue 50): proposals drawn from the decisions people
//! made there ([`super::suggest`]), which a route's `rule_editors` try as a dry run and
//! later enforce. They are stored in the database (every replica reads the same ones),
//! and they only ever come after the configuration's rules: a call any configured rule
//! matches is decided by that rule, so a chat rule can never undercut a configured
//! `deny` (nor an `ask`, nor loosen an `allow`'s rate).
//!
//! A chat rule is about the calls of its own route only: the history it was drawn from
//! is that route's, and its editors are that route's.

use std::fmt;

use serde_json::json;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::raw::RawRule;
use super::{Effect, Rule, RuleCall, RuleSet};
use crate::question::Operator;

/// Where a chat rule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatRuleState {
    /// Shown in the chat, accepted by nobody yet: decides nothing.
    Proposed,
    /// Accepted as a dry run: every call it matches still asks, and the message says what
    /// it would have decided.
    DryRun,
    /// Decides the calls it matches.
    Enforce,
    /// Removed by an editor: decides nothing, kept for the record.
    Removed,
}

impl ChatRuleState {
    pub fn as_str(self) -> &'static str {
        match self {
            ChatRuleState::Proposed => "proposed",
            ChatRuleState::DryRun => "dry_run",
            ChatRuleState::Enforce => "enforce",
            ChatRuleState::Removed => "removed",
        }
    }

    pub fn parse(s: &str) -> Option<ChatRuleState> {
        Some(match s {
            "proposed" => ChatRuleState::Proposed,
            "dry_run" => ChatRuleState::DryRun,
            "enforce" => ChatRuleState::Enforce,
            "removed" => ChatRuleState::Removed,
            _ => return None,
        })
    }

    /// Whether rules in this state are read when a call is judged.
    pub fn in_force(self) -> bool {
        matches!(self, ChatRuleState::DryRun | ChatRuleState::Enforce)
    }
}

/// The id a chat rule is stored and tapped under: 16 hex digits of the SHA-256 of its
/// route and its name (which a proposal's name draws from what the rule does, not from
/// its counts), so the same proposal made twice, with more decisions behind it the
/// second time, is one row.
pub fn chat_rule_id(route: &str, rule: &RawRule) -> String {
    let canonical = json!({ "route": route, "name": rule.name });
    hex::encode(&Sha256::digest(canonical.to_string())[..8])
}

/// A chat rule as stored: the rule, where it stands, and who moved it there.
#[derive(Clone, PartialEq)]
pub struct ChatRuleRecord {
    pub id: String,
    pub route: String,
    pub rule: RawRule,
    /// What the proposal said in words ("`read_report` with `env = staging`").
    pub summary: String,
    /// The rule in the configuration's own syntax, as proposed.
    pub toml: String,
    /// How many decisions the proposal was drawn from.
    pub count: u64,
    pub state: ChatRuleState,
    pub proposed_at: OffsetDateTime,
    /// Who accepted it (as a dry run or enforced at once), and when.
    pub added: Option<(Operator, OffsetDateTime)>,
    /// Who last changed its state (enforced or removed it), and when.
    pub changed: Option<(Operator, OffsetDateTime)>,
}

impl fmt::Debug for ChatRuleRecord {
    /// Without the rule's values: a `where` may name values people consider private.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatRuleRecord")
            .field("id", &self.id)
            .field("route", &self.route)
            .field("name", &self.rule.name)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// One chat rule in force: checked, with its route and whether it decides.
#[derive(Debug, Clone)]
pub struct ChatRule {
    pub id: String,
    pub route: String,
    pub rule: Rule,
    /// `false`: a dry run.
    pub enforced: bool,
}

/// The chat rules in force, in the order they were accepted.
#[derive(Debug, Clone, Default)]
pub struct ChatRules {
    rules: Vec<ChatRule>,
}

impl ChatRules {
    /// The records in force among `records`, checked as the configuration's rules are.
    /// A stored rule that no longer loads (written by a later version, or edited by
    /// hand) is left out, and named in the second list: it decides nothing, which is
    /// the safe side (its calls ask), and whoever reads the log learns why.
    pub fn of(records: &[ChatRuleRecord]) -> (ChatRules, Vec<String>) {
        let mut rules = Vec::new();
        let mut refused = Vec::new();
        for r in records.iter().filter(|r| r.state.in_force()) {
            match RuleSet::parse(vec![r.rule.clone()], None) {
                Ok(set) => rules.extend(set.rules().first().cloned().map(|rule| ChatRule {
                    id: r.id.clone(),
                    route: r.route.clone(),
                    rule,
                    enforced: r.state == ChatRuleState::Enforce,
                })),
                Err(e) => refused.push(format!("chat rule {} ({}): {e}", r.id, r.rule.name)),
            }
        }
        (ChatRules { rules }, refused)
    }

    pub fn rules(&self) -> &[ChatRule] {
        &self.rules
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules of `route`, as plain rules (for the suggestions, which never propose
    /// what one of them already covers).
    pub fn of_route<'a>(&'a self, route: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules
            .iter()
            .filter(move |c| c.route == route)
            .map(|c| &c.rule)
    }

    /// The canonical form the rules hash carries: each rule with its route and state.
    pub(super) fn canonical(&self) -> serde_json::Value {
        json!(
            self.rules
                .iter()
                .map(|c| json!({
                    "id": c.id,
                    "route": c.route,
                    "enforced": c.enforced,
                    "rule": c.rule.canonical(),
                }))
                .collect::<Vec<_>>()
        )
    }

    /// The chat rule that decides `call` on `route`, if any: among the enforced ones
    /// first (a `deny`, else an `ask`, else an `allow`, as the configuration's), then
    /// among those in a dry run, whose decision is only recorded.
    pub(super) fn decide(&self, call: &RuleCall<'_>, route: &str) -> Option<&ChatRule> {
        let matching: Vec<&ChatRule> = self
            .rules
            .iter()
            .filter(|c| c.route == route && c.rule.matches(call))
            .collect();
        let first = |enforced: bool| {
            [Effect::Deny, Effect::Ask, Effect::Allow]
                .into_iter()
                .find_map(|effect| {
                    matching
                        .iter()
                        .find(|c| c.enforced == enforced && c.rule.effect() == effect)
                        .copied()
                })
        };
        first(true).or_else(|| first(false))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use time::OffsetDateTime;

    use super::*;
    use crate::rules::{Policy, RulesMode};

    fn record(route: &str, rule: Value, state: ChatRuleState) -> ChatRuleRecord {
        let rule: RawRule = serde_json::from_value(rule).unwrap();
        ChatRuleRecord {
            id: chat_rule_id(route, &rule),
            route: route.into(),
            rule,
            summary: String::new(),
            toml: String::new(),
            count: 14,
            state,
            proposed_at: OffsetDateTime::UNIX_EPOCH,
            added: None,
            changed: None,
        }
    }

    fn staging_allow(name: &str) -> Value {
        json!({"name": name, "effect": "allow", "tools": ["read_report"],
               "where": [{"path": "env", "op": "eq", "value": "staging"}]})
    }

    fn policy(configured: Value, default: Option<Effect>, chat: &[ChatRuleRecord]) -> Policy {
        let list = configured.as_array().unwrap().clone();
        let set = RuleSet::from_values(&list, default).unwrap();
        Policy::new(set, RulesMode::Enforce).with_chat(ChatRules::of(chat).0)
    }

    fn judge(p: &Policy, route: &str) -> crate::rules::RuleVerdict {
        let params = crate::python::json::parse(r#"{"env": "staging"}"#).unwrap();
        let call = RuleCall {
            tool: "read_report",
            agent: "agent-a",
            owner: Some("alice"),
            params: &params,
            server: None,
            annotations: None,
        };
        p.judge(&call, route).0
    }

    #[test]
    fn a_chat_rule_decides_only_where_no_configured_rule_does_and_only_on_its_route() {
        let chat = [
            record(
                "ops",
                staging_allow("chat-enforced"),
                ChatRuleState::Enforce,
            ),
            record("ops", staging_allow("chat-dry"), ChatRuleState::DryRun),
        ];
        let deny = json!([{"name": "frozen", "effect": "deny", "tools": ["read_*"]}]);
        let v = judge(&policy(deny, None, &chat), "ops");
        assert_eq!(
            (v.effect, v.rule.as_deref()),
            (Effect::Deny, Some("frozen"))
        );
        assert!(v.enforced);

        let none = json!([]);
        let v = judge(&policy(none.clone(), None, &chat), "ops");
        assert_eq!(
            (v.effect, v.rule.as_deref()),
            (Effect::Allow, Some("chat-enforced"))
        );
        assert!(v.enforced);
        let v = judge(&policy(none.clone(), None, &chat), "billing");
        assert_eq!(
            (v.effect, v.rule),
            (Effect::Ask, None),
            "another route's chat rule"
        );

        // A dry run says what it would do, and decides nothing.
        let dry = [record(
            "ops",
            staging_allow("chat-dry"),
            ChatRuleState::DryRun,
        )];
        let v = judge(&policy(none.clone(), None, &dry), "ops");
        assert_eq!(
            (v.effect, v.rule.as_deref(), v.enforced),
            (Effect::Allow, Some("chat-dry"), false)
        );
        assert_eq!(v.applied(), Effect::Ask);
        // In front of a deny default it is not read: the default still decides.
        let v = judge(&policy(none, Some(Effect::Deny), &dry), "ops");
        assert_eq!((v.effect, v.rule, v.enforced), (Effect::Deny, None, true));
    }

    #[test]
    fn the_rules_hash_carries_the_chat_rules_and_is_the_configurations_without_them() {
        let none = json!([]);
        let bare = policy(none.clone(), None, &[]);
        assert_eq!(bare.fingerprint(), bare.set.fingerprint());
        let dry = policy(
            none.clone(),
            None,
            &[record("ops", staging_allow("x"), ChatRuleState::DryRun)],
        );
        let on = policy(
            none,
            None,
            &[record("ops", staging_allow("x"), ChatRuleState::Enforce)],
        );
        assert_ne!(dry.fingerprint(), bare.fingerprint());
        assert_ne!(dry.fingerprint(), on.fingerprint(), "enforcing changes it");
        let proposed = policy(
            json!([]),
            None,
            &[record("ops", staging_allow("x"), ChatRuleState::Proposed)],
        );
        assert_eq!(
            proposed.fingerprint(),
            bare.fingerprint(),
            "a proposal is not in force"
        );
    }
}
