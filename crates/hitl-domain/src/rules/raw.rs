//! A rule as the configuration writes it (`[[rules]]`), before it is checked: serde's
//! shape and nothing more. Unknown keys are refused here; everything else that can be
//! wrong is refused by [`super::RuleSet::parse`], with the rule's name.
//!
//! Serialized with the same keys (`where`, options left out when `None`), so a rule
//! stored as JSON reads back through [`super::RuleSet::from_values`] as the same rule.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::Effect;
use super::condition::Op;

/// One `[[rules]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    /// Unique in the set: shown to the operator, in the API record and in the audit.
    pub name: String,
    pub effect: Effect,
    /// Patterns of the tools the rule is about (`*` and `?`); at least one.
    pub tools: Vec<String>,
    /// When given, the rule is about these agents only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Vec<String>>,
    /// When given, the rule is about calls made on behalf of these owners only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owners: Option<Vec<String>>,
    /// When given, the rule is about calls to these MCP servers only (patterns, as
    /// `tools`); a call that names no server never matches it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub servers: Option<Vec<String>>,
    /// When given, the rule is about calls that carry every one of these MCP tool
    /// annotations with exactly this value (`{ readOnlyHint = true }`); a call without
    /// annotations never matches it. Values are checked as booleans at load, under the
    /// rule's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, Value>>,
    /// Conditions on the call's `params`, all of which must hold.
    #[serde(default, rename = "where", skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RawCondition>,
    /// On an `allow`: how many calls it lets through per period before they ask.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RawRate>,
    /// Shown with the decision: why the rule exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One `where` condition: `{ path = "amount", op = "lte", value = 100 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCondition {
    pub path: String,
    pub op: Op,
    /// Required by every operator but `exists`. `Some(Value::Null)` is a JSON `null`
    /// written as the value (from a JSON source; TOML has none), not a missing value.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub value: Option<Value>,
}

/// `rate = { max = 20, per_seconds = 3600 }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRate {
    pub max: u64,
    pub per_seconds: u64,
}

/// A value that is there, whatever it is (`null` included): serde's `Option` would read
/// a `null` as no value.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}
