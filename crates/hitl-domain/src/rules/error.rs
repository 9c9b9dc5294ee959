//! Why a set of rules was refused at load: always the rule (by name, or by its place in
//! the file when it has none), what is wrong with it, and how to write it instead.

use std::fmt;

use super::Effect;
use super::condition::ConditionError;
use super::glob::GlobError;
use crate::text::{self, Layout};

/// A rule that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{rule}: {problem}")]
pub struct RuleError {
    pub rule: RuleLabel,
    pub problem: Problem,
}

/// How a message names a rule: `rule 'small-transfers'`, or `rule #3 (no name)` when
/// its name is missing or empty, counting the `[[rules]]` tables from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleLabel {
    /// Its place in the file, from 1.
    pub number: usize,
    /// Its name, when it has a non-empty one.
    pub name: Option<String>,
}

impl RuleLabel {
    pub(super) fn new(number: usize, name: Option<&str>) -> RuleLabel {
        RuleLabel {
            number,
            name: name.filter(|n| !n.trim().is_empty()).map(str::to_owned),
        }
    }
}

impl fmt::Display for RuleLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            // Escaped and cut: a name refused for an invisible character or its length
            // is shown as well, and must not hide or flood the message.
            Some(name) => write!(
                f,
                "rule '{}'",
                text::visible_within(name, Layout::Line, MAX_NAME_CHARS)
            ),
            None => write!(f, "rule #{} (no name)", self.number),
        }
    }
}

/// What is wrong with a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Not the shape of a rule: an unknown key, an unknown `effect` or `op`, a missing
    /// key, a value of the wrong type (serde's message, with where it is in the rule).
    #[error("{0}")]
    Shape(String),
    #[error(
        "it is {0}, not a table: write each rule as a [[rules]] table with at least `name`, \
         `effect` and `tools`"
    )]
    NotATable(&'static str),
    #[error("`name` is empty: give every rule a name, e.g. name = \"small-transfers\"")]
    NoName,
    #[error(
        "the name is also rule #{first}'s (this is rule #{number}): rule names must be \
         unique, rename one"
    )]
    DuplicateName { first: usize, number: usize },
    #[error(
        "`name` holds an invisible or layout-changing character ({0}): a name is shown to \
         operators, write it with visible characters only"
    )]
    InvisibleName(String),
    #[error("`name` is {0} characters long: keep it to at most {max}", max = MAX_NAME_CHARS)]
    LongName(usize),
    #[error(
        "`tools` is empty: list the tools the rule is about, e.g. tools = [\"read_*\"], \
         or tools = [\"*\"] for every tool"
    )]
    NoTools,
    #[error("tools pattern {glob:?}: {error}")]
    Glob { glob: String, error: GlobError },
    #[error("servers pattern {glob:?}: {error}")]
    ServerGlob { glob: String, error: GlobError },
    /// An `annotations` entry that is not `name = true` or `name = false`.
    #[error(
        "`annotations.{key}` is {kind}: each annotation is matched as a boolean, write e.g. \
         annotations = {{ readOnlyHint = true }}"
    )]
    AnnotationNotBoolean { key: String, kind: &'static str },
    /// An `annotations` name a call could never carry.
    #[error("`annotations` key {key:?}: {why}")]
    AnnotationKey { key: String, why: String },
    #[error(
        "`annotations` is empty, so it would say nothing: name at least one annotation, or \
         leave `annotations` out"
    )]
    EmptyAnnotations,
    #[error(
        "`{0}` is an empty list, so the rule could never match: name at least one, or leave \
         `{0}` out to match them all"
    )]
    EmptyList(&'static str),
    /// The condition at `where[index]` (from 0, as it sits in the rule's list).
    #[error("`where[{index}]` on {path:?}: {error}")]
    Condition {
        index: usize,
        path: String,
        error: ConditionError,
    },
    #[error(
        "`rate` is only for an `allow` rule (it counts the calls an allow lets through), \
         and this rule's effect is `{0}`: remove the rate"
    )]
    RateNotOnAllow(Effect),
    #[error("`rate.{0}` is 0: it must be a whole number of at least 1")]
    RateZero(&'static str),
    /// An `allow` bounded on one side only: a value past the other side would pass.
    #[error(
        "an allow on `{path}` must be bounded at both ends: it has `{has}` but no {missing} \
         ({why}); add e.g. {example}",
        missing = open.missing(),
        why = open.why(),
        example = open.example(path)
    )]
    OneSided {
        path: String,
        /// The bound it has, as `lte 100`.
        has: String,
        /// The side left open.
        open: Side,
    },
    /// Bounds on one path that no number satisfies together.
    #[error(
        "its conditions on `{path}` can never all hold (`{lower}` and `{upper}`), so the \
         rule would never match: every `where` condition must hold at once; to act on \
         values outside a band, write one rule for each side"
    )]
    EmptyBand {
        path: String,
        lower: String,
        upper: String,
    },
}

/// The longest rule name: names travel in messages, API records and audit events.
pub const MAX_NAME_CHARS: usize = 128;

/// A side of a numeric band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// No `gt`/`gte`.
    Lower,
    /// No `lt`/`lte`.
    Upper,
}

impl Side {
    fn missing(self) -> &'static str {
        match self {
            Side::Lower => "`gt`/`gte`",
            Side::Upper => "`lt`/`lte`",
        }
    }

    fn why(self) -> &'static str {
        match self {
            Side::Lower => "any lower value, a negative one included, would pass",
            Side::Upper => "any higher value would pass",
        }
    }

    /// A condition that closes the band, as TOML.
    fn example(self, path: &str) -> String {
        match self {
            Side::Lower => format!("{{ path = {path:?}, op = \"gte\", value = 0 }}"),
            Side::Upper => {
                format!("{{ path = {path:?}, op = \"lte\", value = N }}, N the most to allow")
            }
        }
    }
}
