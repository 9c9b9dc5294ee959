//! Deterministic rules before the human (issue 35): `[[rules]]` that `allow` the safe
//! calls, `deny` the forbidden ones and `ask` for the rest, evaluated without I/O.
//!
//! A rule names the tools it is about (patterns with `*` and `?`), optionally the agents
//! and owners, and conditions on the call's `params` that must all hold
//! ([`Condition`]). [`RuleSet::parse`] checks a whole set once, at load, and refuses
//! (naming the rule) anything that could not be applied as read: unknown keys or
//! operators, bad patterns and regular expressions, values of the wrong kind, an `allow`
//! whose numeric band is open on one side, bounds that never hold together, a `rate`
//! anywhere but on an `allow`. An `allow` reads a call exactly, a `deny` and an `ask`
//! fail closed ([`Reading`]); [`RuleSet::evaluate`] has no ordering traps.

pub mod chat;
mod compare;
mod condition;
mod error;
mod glob;
mod load;
pub mod normal;
mod number;
mod path;
mod raw;
pub mod suggest;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;
use std::num::NonZeroU64;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

pub use chat::{ChatRule, ChatRuleRecord, ChatRuleState, ChatRules};
pub use condition::{Condition, ConditionError, Op, Reading};
pub use error::{MAX_NAME_CHARS, Problem, RuleError, RuleLabel, Side};
pub use glob::{Glob, GlobError};
pub use path::Path;
pub use raw::{RawCondition, RawRate, RawRule};

use crate::mcp_call::Annotations;
use crate::python::value::PyValue;

/// What a rule does with a call it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    /// Confirmed at once, without asking.
    Allow,
    /// Asked of a person, as every call is without rules.
    Ask,
    /// Cancelled at once, without asking.
    Deny,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Ask => "ask",
            Effect::Deny => "deny",
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `allow` rule's limit: at most `max` calls it lets through per `per_seconds`.
/// Counting is the caller's; past the limit the call asks, naming the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub max: NonZeroU64,
    pub per_seconds: NonZeroU64,
}

/// One checked rule: every pattern, condition and regular expression in it is valid,
/// and its `rate`, if any, is on an `allow`.
#[derive(Debug, Clone)]
pub struct Rule {
    name: String,
    effect: Effect,
    /// Never empty.
    tools: Vec<Glob>,
    /// `None`: every agent. Never an empty list.
    agents: Option<Vec<String>>,
    /// `None`: every owner, and calls with none. Never an empty list.
    owners: Option<Vec<String>>,
    /// `owners` in normal form, for a `deny` and an `ask`.
    normal_owners: Option<Vec<String>>,
    /// `None`: calls to any server, and calls naming none. Never an empty list.
    servers: Option<Vec<Glob>>,
    /// `None`: whatever the call's annotations. Never empty.
    annotations: Option<Annotations>,
    conditions: Vec<Condition>,
    /// Only on an `allow`.
    rate: Option<Rate>,
    reason: Option<String>,
}

impl Rule {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn effect(&self) -> Effect {
        self.effect
    }

    pub fn tools(&self) -> &[Glob] {
        &self.tools
    }

    pub fn agents(&self) -> Option<&[String]> {
        self.agents.as_deref()
    }

    pub fn owners(&self) -> Option<&[String]> {
        self.owners.as_deref()
    }

    pub fn servers(&self) -> Option<&[Glob]> {
        self.servers.as_deref()
    }

    pub fn annotations(&self) -> Option<&Annotations> {
        self.annotations.as_ref()
    }

    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Whether the rule is about this call: one of its patterns matches the tool, the
    /// agent and the owner are among those it lists (a rule that lists owners never
    /// matches a call made on behalf of none), one of its `servers` patterns matches the
    /// call's MCP server (a rule that lists servers never matches a call to none), the
    /// call carries every annotation the rule lists with the same value (a call without
    /// annotations never matches a rule that lists some), and every condition holds; all
    /// read as the rule's effect calls for ([`Reading`]). The agent is the service's own
    /// name for the caller, compared as written either way.
    pub fn matches(&self, call: &RuleCall<'_>) -> bool {
        self.applies(&Subject::of(call))
    }

    fn applies(&self, s: &Subject<'_, '_>) -> bool {
        let reading = Reading::of(self.effect);
        let tool = |g: &Glob| match reading {
            Reading::Exact => g.matches(s.call.tool),
            Reading::Loose => g.matches_normal(&s.tool),
        };
        let owner = || match (reading, &self.owners, &self.normal_owners) {
            (_, None, _) => true,
            (Reading::Exact, Some(owners), _) => s
                .call
                .owner
                .is_some_and(|owner| owners.iter().any(|o| o == owner)),
            (Reading::Loose, _, normal) => s.owner.as_deref().is_some_and(|owner| {
                normal
                    .as_ref()
                    .is_some_and(|owners| owners.iter().any(|o| o == owner))
            }),
        };
        // A server's name is plain ASCII (`ServerName`), so its normal form is its lower
        // case: a `deny` on `prod-db` also catches `PROD-DB`.
        let server = |g: &Glob| match (reading, s.call.server) {
            (_, None) => false,
            (Reading::Exact, Some(server)) => g.matches(server),
            (Reading::Loose, Some(server)) => g.matches_normal(&normal::normalise(server)),
        };
        self.tools.iter().any(tool)
            && self
                .servers
                .as_ref()
                .is_none_or(|servers| servers.iter().any(server))
            && self.annotations.as_ref().is_none_or(|wanted| {
                s.call
                    .annotations
                    .is_some_and(|carried| carried.carries(wanted))
            })
            && self
                .agents
                .as_ref()
                .is_none_or(|agents| agents.iter().any(|a| a == s.call.agent))
            && owner()
            && self
                .conditions
                .iter()
                .all(|c| c.holds(s.call.params, reading))
    }

    /// The rule in the fingerprint's canonical form.
    fn canonical(&self) -> Value {
        let mut rule = json!({
            "name": self.name,
            "effect": self.effect,
            "tools": self.tools.iter().map(Glob::as_str).collect::<Vec<_>>(),
            "agents": self.agents,
            "owners": self.owners,
            "where": self.conditions.iter().map(|c| json!({
                "path": c.path().as_str(),
                "op": c.op(),
                "value": c.value(),
            })).collect::<Vec<_>>(),
            "rate": self.rate.map(|r| json!({
                "max": r.max.get(),
                "per_seconds": r.per_seconds.get(),
            })),
            "reason": self.reason,
        });
        // Only when used, so a rule set written before these keys keeps its hash; when
        // used, they change it.
        if let Some(servers) = &self.servers {
            rule["servers"] = json!(servers.iter().map(Glob::as_str).collect::<Vec<_>>());
        }
        if let Some(annotations) = &self.annotations {
            rule["annotations"] = annotations.to_json();
        }
        rule
    }
}

/// The call a set of rules decides on.
#[derive(Clone, Copy)]
pub struct RuleCall<'a> {
    pub tool: &'a str,
    pub agent: &'a str,
    /// On whose behalf the agent acts, when it says.
    pub owner: Option<&'a str>,
    /// The call's parameters as Python decoded them (`python::json::parse`): what the
    /// tool is handed, `1e400` as `inf` included. An object; anything else has no path.
    pub params: &'a PyValue,
    /// The MCP server the call goes to, when a gateway sent it (`None`: no server).
    pub server: Option<&'a str>,
    /// The tool's MCP annotations the call carries, if any.
    pub annotations: Option<&'a Annotations>,
}

/// A call with what every rule compares computed once: the tool and the owner in normal
/// form.
struct Subject<'c, 'a> {
    call: &'c RuleCall<'a>,
    tool: Cow<'a, str>,
    owner: Option<Cow<'a, str>>,
}

impl<'c, 'a> Subject<'c, 'a> {
    fn of(call: &'c RuleCall<'a>) -> Self {
        Subject {
            call,
            tool: normal::normalise(call.tool),
            owner: call.owner.map(normal::normalise),
        }
    }
}

/// A tool name that looks like one a rule's pattern names without being it
/// ([`RuleSet::look_alike`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookAlike {
    pub rule: String,
    pub pattern: String,
}

impl fmt::Display for LookAlike {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "looks like `{}`, which rule '{}' names, but is another name (a letter from \
             another script, or another look-alike character): name the tool as the rules do",
            self.pattern, self.rule
        )
    }
}

impl fmt::Debug for RuleCall<'_> {
    /// Without the parameters: their values may be secrets, and logs carry none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("tool", &self.tool)
            .field("agent", &self.agent)
            .field("owner", &self.owner)
            .field("server", &self.server)
            .field("annotations", &self.annotations)
            .finish_non_exhaustive()
    }
}

/// What the rules decided, and who decided it.
#[derive(Debug, Clone, Copy)]
pub struct Ruling<'a> {
    pub effect: Effect,
    pub by: DecidedBy<'a>,
}

/// The rule that decided, or the set's default when none matched.
#[derive(Clone, Copy)]
pub enum DecidedBy<'a> {
    Rule(&'a Rule),
    Default,
}

impl fmt::Debug for DecidedBy<'_> {
    /// The rule by its name: a decision's log line needs no more.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecidedBy::Rule(rule) => f.debug_tuple("Rule").field(&rule.name).finish(),
            DecidedBy::Default => f.write_str("Default"),
        }
    }
}

impl<'a> Ruling<'a> {
    fn by(rule: &'a Rule) -> Ruling<'a> {
        Ruling {
            effect: rule.effect,
            by: DecidedBy::Rule(rule),
        }
    }

    pub fn rule(&self) -> Option<&'a Rule> {
        match self.by {
            DecidedBy::Rule(rule) => Some(rule),
            DecidedBy::Default => None,
        }
    }

    pub fn rule_name(&self) -> Option<&'a str> {
        self.rule().map(Rule::name)
    }

    pub fn reason(&self) -> Option<&'a str> {
        self.rule().and_then(Rule::reason)
    }

    /// The deciding `allow` rule's rate, which the caller must count: past it, the call
    /// asks instead, naming this rule.
    pub fn rate(&self) -> Option<Rate> {
        self.rule().and_then(Rule::rate)
    }
}

/// The SHA-256 of a [`RuleSet`]'s canonical form, in lowercase hex: the same rules in
/// the same order with the same default give the same fingerprint, any change another.
/// It records which rules were in force when a rule decided.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// All 64 digits, for the audit trail.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `rules:` and the first 16 digits: enough to tell rule sets apart where people
    /// read (`check-config`, a log line).
    pub fn short(&self) -> String {
        format!("rules:{}", self.0.get(..16).unwrap_or(&self.0))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.short())
    }
}

/// A checked set of rules in file order, with the effect when none matches.
#[derive(Debug, Clone)]
pub struct RuleSet {
    rules: Vec<Rule>,
    default: Effect,
    fingerprint: Fingerprint,
}

impl RuleSet {
    /// `rules_default` when the configuration says nothing: every call asks, as without
    /// rules.
    pub const DEFAULT_EFFECT: Effect = Effect::Ask;

    /// Checks `rules`, in file order; `default` is `rules_default` (`None`:
    /// [`Self::DEFAULT_EFFECT`]). The first rule refused is named in the error.
    pub fn parse(rules: Vec<RawRule>, default: Option<Effect>) -> Result<RuleSet, RuleError> {
        let mut loader = load::Loader::default();
        for raw in rules {
            loader.push(raw)?;
        }
        Ok(RuleSet::new(loader.into_rules(), default))
    }

    /// As [`Self::parse`], from the `[[rules]]` tables as values (a configuration
    /// extracts them as `serde_json::Value` from any format, TOML included), so that a
    /// table serde cannot read as a rule (an unknown key or op, a missing `tools`) is
    /// refused under its rule's name rather than as a position in a list.
    pub fn from_values(rules: &[Value], default: Option<Effect>) -> Result<RuleSet, RuleError> {
        let mut loader = load::Loader::default();
        for (index, value) in rules.iter().enumerate() {
            loader.push(load::raw_from_value(index + 1, value)?)?;
        }
        Ok(RuleSet::new(loader.into_rules(), default))
    }

    fn new(rules: Vec<Rule>, default: Option<Effect>) -> RuleSet {
        let default = default.unwrap_or(Self::DEFAULT_EFFECT);
        let canonical = json!({
            "default": default,
            "rules": rules.iter().map(Rule::canonical).collect::<Vec<_>>(),
        });
        // A `Value`'s text is compact JSON with object keys in order: one set, one text.
        let fingerprint = Fingerprint(hex::encode(Sha256::digest(canonical.to_string())));
        RuleSet {
            rules,
            default,
            fingerprint,
        }
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The first pattern (in file order) `tool` only looks like (UTS #39: the same
    /// skeleton, another normal form), such as `trаnsfer` with a Cyrillic `а` against a
    /// rule on `transfer`: such a call would pass every rule meant for the name it
    /// imitates, so it is refused before the rules are read. `None` for a name that is
    /// what it looks like.
    pub fn look_alike(&self, tool: &str) -> Option<LookAlike> {
        let normal = normal::normalise(tool);
        let skeleton = normal::skeleton(tool);
        self.rules.iter().find_map(|rule| {
            rule.tools
                .iter()
                .find(|g| g.looks_like(&normal, &skeleton))
                .map(|g| LookAlike {
                    rule: rule.name.clone(),
                    pattern: g.as_str().to_owned(),
                })
        })
    }

    pub fn default_effect(&self) -> Effect {
        self.default
    }

    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The decision on `call`: the first matching `deny` in file order, else the first
    /// matching `ask`, else the first matching `allow`, else the set's default (`ask`
    /// unless `rules_default` says otherwise), so there are no ordering traps. The
    /// [`Ruling`] names the rule that decided. A rule's `rate` is not counted here: the
    /// engine stays pure, and the caller, which holds the counters, turns an `allow` past
    /// its rate into an `ask` that names the same rule.
    pub fn evaluate(&self, call: &RuleCall<'_>) -> Ruling<'_> {
        let subject = Subject::of(call);
        let (mut ask, mut allow) = (None, None);
        for rule in self.rules.iter().filter(|r| r.applies(&subject)) {
            match rule.effect {
                Effect::Deny => return Ruling::by(rule),
                Effect::Ask => {
                    ask.get_or_insert(rule);
                }
                Effect::Allow => {
                    allow.get_or_insert(rule);
                }
            }
        }
        match ask.or(allow) {
            Some(rule) => Ruling::by(rule),
            None => Ruling {
                effect: self.default,
                by: DecidedBy::Default,
            },
        }
    }
}

/// `rules_mode`: whether the rules' decisions are carried out, or only recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RulesMode {
    /// `allow` and `deny` answer at once; `ask` asks.
    #[default]
    Enforce,
    /// Every call asks, and the message, the record and the audit say what the rules
    /// would have done: a new rule set is tried on real traffic before it decides.
    DryRun,
}

impl RulesMode {
    pub fn as_str(self) -> &'static str {
        match self {
            RulesMode::Enforce => "enforce",
            RulesMode::DryRun => "dry_run",
        }
    }
}

/// The rules in force: the configuration's checked set and how it is applied, and the
/// rules accepted in the routes' chats ([`chat`]), which come after it.
#[derive(Debug, Clone)]
pub struct Policy {
    pub set: RuleSet,
    pub mode: RulesMode,
    chat: ChatRules,
    /// The fingerprint of the whole: the set's own while no chat rule is in force (so a
    /// configuration keeps its hash), else one over both.
    fingerprint: Fingerprint,
}

impl Policy {
    /// The configuration's rules alone.
    pub fn new(set: RuleSet, mode: RulesMode) -> Policy {
        let fingerprint = set.fingerprint().clone();
        Policy {
            set,
            mode,
            chat: ChatRules::default(),
            fingerprint,
        }
    }

    /// The same configuration's rules, with `chat` as the chat rules in force.
    pub fn with_chat(&self, chat: ChatRules) -> Policy {
        let fingerprint = if chat.is_empty() {
            self.set.fingerprint().clone()
        } else {
            let canonical = json!({
                "configured": self.set.fingerprint().as_str(),
                "chat": chat.canonical(),
            });
            Fingerprint(hex::encode(Sha256::digest(canonical.to_string())))
        };
        Policy {
            set: self.set.clone(),
            mode: self.mode,
            chat,
            fingerprint,
        }
    }

    pub fn chat(&self) -> &ChatRules {
        &self.chat
    }

    /// What the decisions record as `rules_hash`: every rule in force, the chat's too.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Whether the rules can change anything: with no rule, an `ask` default and no dry
    /// run to report, every call asks as it would without rules, and nothing is recorded
    /// about them (the window-hit path stays as lean as before).
    pub fn is_inert(&self) -> bool {
        self.set.rules().is_empty()
            && self.chat.is_empty()
            && self.set.default_effect() == Effect::Ask
            && self.mode == RulesMode::Enforce
    }

    /// The verdict on `call`, asked on `route`, before any `rate` is counted (see
    /// [`RuleVerdict::past_rate`]). A configured rule that matches decides; only when
    /// none does are the route's chat rules read, then the default.
    pub fn judge(&self, call: &RuleCall<'_>, route: &str) -> (RuleVerdict, Option<Rate>) {
        let decision = self.set.evaluate(call);
        // A dry run is reported only where the call asks anyway: in front of a `deny`
        // or `allow` default it would turn that decision into a question.
        let chat = match decision.by {
            DecidedBy::Default => self
                .chat
                .decide(call, route)
                .filter(|c| c.enforced || decision.effect == Effect::Ask),
            DecidedBy::Rule(_) => None,
        };
        let enforced = self.mode == RulesMode::Enforce;
        let verdict = match chat {
            Some(c) => RuleVerdict {
                effect: c.rule.effect(),
                rule: Some(c.rule.name().to_owned()),
                reason: c.rule.reason().map(str::to_owned),
                rules_hash: self.fingerprint.as_str().to_owned(),
                enforced: enforced && c.enforced,
                past_rate: false,
            },
            None => RuleVerdict {
                effect: decision.effect,
                rule: decision.rule_name().map(str::to_owned),
                reason: decision.reason().map(str::to_owned),
                rules_hash: self.fingerprint.as_str().to_owned(),
                enforced,
                past_rate: false,
            },
        };
        let rate = if chat.is_some() {
            None
        } else {
            decision.rate()
        };
        (verdict, rate)
    }
}

/// What the rules decided on one call, kept with its record: the effect, the rule that
/// decided (`None`: the default), its reason, the fingerprint of the set in force, and
/// whether the decision was carried out (`false` in a dry run, where every call asks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleVerdict {
    pub effect: Effect,
    pub rule: Option<String>,
    pub reason: Option<String>,
    pub rules_hash: String,
    pub enforced: bool,
    /// An `allow` whose rule had let its `rate` through already: the call asks, naming
    /// the rule.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub past_rate: bool,
}

impl RuleVerdict {
    /// The `allow` turned into an `ask` because its rule's rate is used up.
    pub fn past_rate(mut self) -> RuleVerdict {
        if self.effect == Effect::Allow {
            self.effect = Effect::Ask;
            self.past_rate = true;
        }
        self
    }

    /// What happens to the call: the verdict's effect when enforced, `ask` in a dry run.
    pub fn applied(&self) -> Effect {
        if self.enforced {
            self.effect
        } else {
            Effect::Ask
        }
    }

    /// The rule in words, for the operator and the agent: `rule 'x'` or `the rules'
    /// default`.
    pub fn by(&self) -> String {
        match &self.rule {
            Some(name) => format!("rule '{name}'"),
            None => "the rules' default".to_owned(),
        }
    }
}
