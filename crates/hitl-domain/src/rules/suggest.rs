//! Rules proposed from a route's decision history (issue 50): "You approved
//! `read_report` with `env = staging` 14 times in 7 days and never cancelled it: allow it
//! without asking?". Pure: the caller reads the history and the rules in force, and
//! decides what to show.
//!
//! A proposal is only ever a rule that states exactly what people kept deciding, and
//! that nothing already in force decides:
//!
//! | # | Step       | Rule                                                                 |
//! |---|------------|----------------------------------------------------------------------|
//! | 1 | Group      | by agent, tool, and each top-level key with its string or boolean value, or "a number" |
//! | 1 | Skip       | params not an object; a value `null`, a list, a table, an integer outside `i64`, a non-finite number; a key no `Path` names alone (empty, holding `.`); a tool a pattern would read as one |
//! | 2 | Effect     | at least `min_decisions`, all approved: `allow`; all cancelled: `deny`; a mix: nothing |
//! | 3 | Conditions | string, boolean: `eq`; number: `gte` least and `lte` greatest seen, always both; keys sorted |
//! | 4 | Rule       | `suggested-<tool>-<8 hex>`, `tools`, `agents`, `owners` when all calls name one, `where`, `reason` |
//! | 5 | Never      | a configured rule or a chat rule matches a call of the group; `never_suggest` matches the tool; the rule matches a call decided the other way |
//! | 6 | Load       | [`RuleSet::parse`] accepts the rule and it matches every call it was drawn from, else dropped |
//! | 7 | Order      | most decisions first, then tool, agent, rule name                    |
//! | 8 | TOML       | a `[[rules]]` table: TOML basic strings (controls as `\uXXXX`), numbers as JSON writes them |
//!
//! Why each holds back what it does:
//!
//! - Skipped calls are those no rule states exactly: TOML has no `null` and no integer
//!   past `i64`, a list or a table would be compared whole, and a key holding a dot
//!   would be read as a path. A tool name with `*` or `?` (as written, or once in normal
//!   form, where a `deny` reads it) would become a pattern for more tools.
//! - Configured rules come first, so a chat rule could never decide a call one of them
//!   matches, and a configured `deny` must never be undercut: a group with one such call
//!   is left alone, whatever the configured rule's effect.
//! - A rule cannot say "no other keys": `env = staging` also covers
//!   `{"env": "staging", "force": true}`. One call of the history decided the other way
//!   that the proposed rule matches is enough to keep it back.
//! - The name's hex is the SHA-256 of the rule's canonical JSON without its name and its
//!   reason, so it names what the rule does and stays the same while the counts grow;
//!   the tool is cut so the whole fits [`MAX_NAME_CHARS`].
//! - A number band is never open on one side: the loader refuses such an `allow`, and a
//!   band covers exactly what was seen.

use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;
use std::fmt;
use std::fmt::Write as _;

use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

use super::condition::Op;
use super::error::MAX_NAME_CHARS;
use super::glob::Glob;
use super::normal::normalise;
use super::number::compare_numbers;
use super::raw::{RawCondition, RawRule};
use super::{Effect, Rule, RuleCall, RuleSet};
use crate::python::json::parse;
use crate::python::value::{PyDict, PyValue};
use crate::text::{self, Layout};

/// One call a person decided on a route (timeouts, rule/window/grant endings are not given).
#[derive(Clone, PartialEq, Eq)]
pub struct Decided {
    pub agent: String,
    pub tool: String,
    pub owner: Option<String>,
    /// The call's parameters as the agent sent them (JSON text).
    pub params_json: String,
    /// `true`: approved; `false`: cancelled.
    pub approved: bool,
}

impl fmt::Debug for Decided {
    /// Without the parameters: their values may be secrets, and logs carry none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decided")
            .field("agent", &self.agent)
            .field("tool", &self.tool)
            .field("owner", &self.owner)
            .field("approved", &self.approved)
            .finish_non_exhaustive()
    }
}

/// How much history a proposal needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// The fewest decisions, all the same way, a proposal is drawn from.
    pub min_decisions: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { min_decisions: 10 }
    }
}

/// A proposed rule, with what backs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Suggestion {
    /// `Allow` (all approved) or `Deny` (all cancelled).
    pub effect: Effect,
    /// How many decisions back it.
    pub count: u64,
    pub agent: String,
    pub tool: String,
    /// The proposed rule, which [`RuleSet::parse`] accepts.
    pub rule: RawRule,
    /// The calls it is about, in words: "`read_report` with `env = staging`".
    pub summary: String,
    /// The rule as a `[[rules]]` table of the configuration.
    pub toml: String,
}

/// A top-level value as grouping tells values apart: numbers are one kind, as the
/// proposal covers them with a band.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Shape {
    Text(String),
    Bool(bool),
    Number,
}

/// Each top-level key with its shape, sorted by key.
type Keys = Vec<(String, Shape)>;

/// Agent, tool, and the keys.
type GroupKey<'h> = (&'h str, &'h str, Keys);

/// The calls of one group, and the least and greatest value of each numeric key.
#[derive(Default)]
struct Group {
    calls: Vec<usize>,
    approved: u64,
    bands: BTreeMap<String, (Number, Number)>,
}

/// A call of the history with its parameters as Python decoded them (`None`: not JSON).
struct Call<'h> {
    decided: &'h Decided,
    params: Option<PyValue>,
}

impl Call<'_> {
    fn rule_call(&self) -> Option<RuleCall<'_>> {
        Some(RuleCall {
            tool: &self.decided.tool,
            agent: &self.decided.agent,
            owner: self.decided.owner.as_deref(),
            params: self.params.as_ref()?,
            server: None,
            annotations: None,
        })
    }
}

/// What the rules in force and the operator's settings rule out.
struct Context<'a> {
    configured: &'a RuleSet,
    chat: &'a [&'a Rule],
    never_suggest: &'a [Glob],
}

/// The rules `history` supports and nothing in force already decides, as the module
/// header says; `days` is the period the history covers, for the reason's words.
pub fn suggest(
    history: &[Decided],
    configured: &RuleSet,
    chat: &[&Rule],
    never_suggest: &[Glob],
    thresholds: Thresholds,
    days: u32,
) -> Vec<Suggestion> {
    let calls: Vec<Call<'_>> = history
        .iter()
        .map(|decided| Call {
            decided,
            params: parse(&decided.params_json).ok(),
        })
        .collect();
    let context = Context {
        configured,
        chat,
        never_suggest,
    };
    let min = u64::from(thresholds.min_decisions);
    let mut out: Vec<Suggestion> = groups(&calls)
        .into_iter()
        .filter(|(_, group)| group.calls.len() as u64 >= min)
        .filter_map(|(key, group)| propose(&calls, &key, &group, &context, days))
        .collect();
    out.sort_by(|a, b| {
        (Reverse(a.count), &a.tool, &a.agent, &a.rule.name).cmp(&(
            Reverse(b.count),
            &b.tool,
            &b.agent,
            &b.rule.name,
        ))
    });
    out
}

/// The history by agent, tool and shape (step 1).
fn groups<'h>(calls: &[Call<'h>]) -> BTreeMap<GroupKey<'h>, Group> {
    let mut groups: BTreeMap<GroupKey<'h>, Group> = BTreeMap::new();
    for (index, call) in calls.iter().enumerate() {
        let Some(PyValue::Dict(dict)) = &call.params else {
            continue;
        };
        if !names_one_tool(&call.decided.tool) {
            continue;
        }
        let Some((shape, numbers)) = shape(dict) else {
            continue;
        };
        let key = (
            call.decided.agent.as_str(),
            call.decided.tool.as_str(),
            shape,
        );
        let group = groups.entry(key).or_default();
        group.calls.push(index);
        group.approved += u64::from(call.decided.approved);
        for (name, n) in numbers {
            let band = group
                .bands
                .entry(name)
                .or_insert_with(|| (n.clone(), n.clone()));
            if compare_numbers(&n, &band.0) == Some(Ordering::Less) {
                band.0 = n.clone();
            }
            if compare_numbers(&n, &band.1) == Some(Ordering::Greater) {
                band.1 = n;
            }
        }
    }
    groups
}

/// Whether a pattern naming `tool` would name that tool only: no wildcard as written or
/// in normal form (where a deny reads it), nothing [`Glob::parse`] refuses.
fn names_one_tool(tool: &str) -> bool {
    let wild = |s: &str| s.contains(['*', '?']);
    Glob::parse(tool).is_ok() && !wild(tool) && !wild(&normalise(tool))
}

/// The keys of `params` with their shapes, and the numeric values; `None` when a rule
/// could not state some key's value exactly.
fn shape(params: &PyDict) -> Option<(Keys, Vec<(String, Number)>)> {
    let mut shapes = BTreeMap::new();
    let mut numbers = Vec::new();
    for (key, value) in params.iter() {
        // A `Path` splits on dots, and has no empty segment.
        if key.is_empty() || key.contains('.') {
            return None;
        }
        let shape = match value {
            PyValue::Str(s) => Shape::Text(s.clone()),
            PyValue::Bool(b) => Shape::Bool(*b),
            PyValue::Int(i) => {
                numbers.push((key.to_owned(), Number::from(i64::try_from(i).ok()?)));
                Shape::Number
            }
            PyValue::Float(f) => {
                numbers.push((key.to_owned(), Number::from_f64(*f)?));
                Shape::Number
            }
            PyValue::None | PyValue::List(_) | PyValue::Dict(_) => return None,
        };
        shapes.insert(key.to_owned(), shape);
    }
    Some((shapes.into_iter().collect(), numbers))
}

/// The proposal for one group large enough, if it stands (steps 2 to 6).
fn propose(
    calls: &[Call<'_>],
    (agent, tool, shape): &GroupKey<'_>,
    group: &Group,
    context: &Context<'_>,
    days: u32,
) -> Option<Suggestion> {
    let count = group.calls.len() as u64;
    let effect = match group.approved {
        n if n == count => Effect::Allow,
        0 => Effect::Deny,
        _ => return None,
    };
    if context
        .never_suggest
        .iter()
        .any(|g| g.matches(tool) || g.matches_normal(&normalise(tool)))
    {
        return None;
    }
    let members: Vec<RuleCall<'_>> = group
        .calls
        .iter()
        .filter_map(|&i| calls[i].rule_call())
        .collect();
    let in_force = context
        .configured
        .rules()
        .iter()
        .chain(context.chat.iter().copied());
    for rule in in_force {
        if members.iter().any(|call| rule.matches(call)) {
            return None;
        }
    }
    let raw = raw_rule(effect, (agent, tool, shape), group, calls, days)?;
    let set = RuleSet::parse(vec![raw.clone()], None).ok()?;
    let rule = set.rules().first()?;
    if !members.iter().all(|call| rule.matches(call)) {
        return None;
    }
    let approved = effect == Effect::Allow;
    let overruled = calls
        .iter()
        .filter(|c| c.decided.approved != approved)
        .filter_map(Call::rule_call)
        .any(|call| rule.matches(&call));
    if overruled {
        return None;
    }
    Some(Suggestion {
        effect,
        count,
        agent: (*agent).to_owned(),
        tool: (*tool).to_owned(),
        summary: summary(tool, shape, group),
        toml: toml(&raw)?,
        rule: raw,
    })
}

/// The proposed rule (steps 3 and 4).
fn raw_rule(
    effect: Effect,
    (agent, tool, shape): (&str, &str, &[(String, Shape)]),
    group: &Group,
    calls: &[Call<'_>],
    days: u32,
) -> Option<RawRule> {
    let mut conditions = Vec::new();
    for (key, value) in shape {
        let condition = |op, value| RawCondition {
            path: key.clone(),
            op,
            value: Some(value),
        };
        match value {
            Shape::Text(s) => conditions.push(condition(Op::Eq, Value::String(s.clone()))),
            Shape::Bool(b) => conditions.push(condition(Op::Eq, Value::Bool(*b))),
            Shape::Number => {
                let (least, greatest) = group.bands.get(key)?;
                conditions.push(condition(Op::Gte, Value::Number(least.clone())));
                conditions.push(condition(Op::Lte, Value::Number(greatest.clone())));
            }
        }
    }
    let first_owner = calls[*group.calls.first()?].decided.owner.as_ref();
    let one_owner = first_owner.filter(|owner| {
        group
            .calls
            .iter()
            .all(|&i| calls[i].decided.owner.as_ref() == Some(*owner))
    });
    let mut raw = RawRule {
        name: String::new(),
        effect,
        tools: vec![tool.to_owned()],
        agents: Some(vec![agent.to_owned()]),
        owners: one_owner.map(|owner| vec![owner.clone()]),
        servers: None,
        annotations: None,
        conditions,
        rate: None,
        reason: None,
    };
    raw.name = name(tool, &raw)?;
    raw.reason = Some(reason(effect, group.calls.len() as u64, days));
    Some(raw)
}

/// `suggested-<tool>-<8 hex>`, the tool cut so the name fits.
fn name(tool: &str, unnamed: &RawRule) -> Option<String> {
    let mut canonical = serde_json::to_value(unnamed).ok()?;
    let fields = canonical.as_object_mut()?;
    fields.remove("name");
    fields.remove("reason");
    let digest = Sha256::digest(canonical.to_string());
    let hash = hex::encode(&digest[..4]);
    let room = MAX_NAME_CHARS - "suggested-".len() - 1 - hash.len();
    let tool: String = tool.chars().take(room).collect();
    Some(format!("suggested-{tool}-{hash}"))
}

/// "approved 14 times in 7 days, never cancelled".
fn reason(effect: Effect, count: u64, days: u32) -> String {
    let (did, never) = match effect {
        Effect::Deny => ("cancelled", "approved"),
        Effect::Allow | Effect::Ask => ("approved", "cancelled"),
    };
    let times = if count == 1 { "time" } else { "times" };
    let day = if days == 1 { "day" } else { "days" };
    format!("{did} {count} {times} in {days} {day}, never {never}")
}

/// "`transfer` with `currency = EUR`, `amount` from 10 to 90": exact values first, then
/// bands, each in key order; every text as an operator can see it.
fn summary(tool: &str, shape: &[(String, Shape)], group: &Group) -> String {
    let shown = |s: &str| text::visible(s, Layout::Line);
    let mut parts = Vec::new();
    for (key, value) in shape {
        match value {
            Shape::Text(s) => parts.push(format!("`{} = {}`", shown(key), shown(s))),
            Shape::Bool(b) => parts.push(format!("`{} = {b}`", shown(key))),
            Shape::Number => {}
        }
    }
    for (key, (least, greatest)) in &group.bands {
        if compare_numbers(least, greatest) == Some(Ordering::Equal) {
            parts.push(format!("`{} = {least}`", shown(key)));
        } else {
            parts.push(format!("`{}` from {least} to {greatest}", shown(key)));
        }
    }
    if parts.is_empty() {
        format!("`{}` with no parameters", shown(tool))
    } else {
        format!("`{}` with {}", shown(tool), parts.join(", "))
    }
}

/// The rule as a `[[rules]]` table; `None` for a value TOML cannot write (a `null`),
/// which no proposal holds.
fn toml(rule: &RawRule) -> Option<String> {
    let list = |items: &[String]| {
        let items: Vec<String> = items.iter().map(|s| basic_string(s)).collect();
        format!("[{}]", items.join(", "))
    };
    let mut out = String::from("[[rules]]\n");
    let _ = writeln!(out, "name = {}", basic_string(&rule.name));
    let _ = writeln!(out, "effect = {}", basic_string(rule.effect.as_str()));
    let _ = writeln!(out, "tools = {}", list(&rule.tools));
    for (key, items) in [("agents", &rule.agents), ("owners", &rule.owners)] {
        if let Some(items) = items {
            let _ = writeln!(out, "{key} = {}", list(items));
        }
    }
    if !rule.conditions.is_empty() {
        out.push_str("where = [\n");
        for c in &rule.conditions {
            let value = match &c.value {
                Some(v) => format!(", value = {}", toml_value(v)?),
                None => String::new(),
            };
            let path = basic_string(&c.path);
            let op = basic_string(c.op.as_str());
            let _ = writeln!(out, "  {{ path = {path}, op = {op}{value} }},");
        }
        out.push_str("]\n");
    }
    if let Some(reason) = &rule.reason {
        let _ = writeln!(out, "reason = {}", basic_string(reason));
    }
    Some(out)
}

fn toml_value(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(basic_string(s)),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// `s` as a TOML basic string: quotes and backslashes escaped, every control character
/// as `\uXXXX` (TOML refuses them raw, and an escape shows what is there).
fn basic_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
#[path = "suggest_tests.rs"]
mod tests;
