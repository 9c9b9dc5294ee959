//! A rule's `where` conditions: a dotted path into the call's `params`, an operator and
//! a value, checked once at load (a regular expression compiled then, a number known to
//! be one) and evaluated without I/O, on the call as Python decoded it (an `int` of any
//! length, `1e400` as `inf`: what the tool will be handed).
//!
//! A condition reads the call one of two ways, by its rule's effect ([`Reading`]): an
//! `allow` exactly, a `deny` and an `ask` loosely, failing closed.
//!
//! `matches` is unanchored (a pattern found anywhere in the string holds): a rule that
//! means the whole string writes `^…$`.

use std::cmp::Ordering;
use std::fmt;
use std::ops::ControlFlow;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use super::compare::{
    Wanted, any_item, compares, every_item, exactly_equal, loosely_equal, same_kind,
};
use super::normal::normalise;
use super::number::{self, AsNumber};
use super::path::Path;
use crate::python::value::PyValue;

/// A `where` operator, as written in the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Equal to the value (numbers numerically: 1 equals 1.0).
    Eq,
    /// Present, of the value's kind, and not equal to it.
    Ne,
    /// Equal to one of the value's items.
    In,
    Lt,
    Lte,
    Gt,
    Gte,
    /// A string in which the value, a regular expression, finds a match anywhere, as
    /// `regex` searches: `prod` matches `db-prod-1`. Anchors are the writer's to add
    /// (`^prod-`, `^(staging|dev)$`).
    Matches,
    /// Present (the value, a boolean, `true` when left out), or absent (`false`).
    Exists,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Eq => "eq",
            Op::Ne => "ne",
            Op::In => "in",
            Op::Lt => "lt",
            Op::Lte => "lte",
            Op::Gt => "gt",
            Op::Gte => "gte",
            Op::Matches => "matches",
            Op::Exists => "exists",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The largest compiled program a `matches` pattern may become. Patterns are written by
/// operators, but a counted repetition (`\w{1000}{100}`) grows fast: a typo should be
/// refused at load, not cost every evaluation.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Why a `where` condition was refused (the rule and the condition's place are added by
/// the caller).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error(
        "the path {0:?} has an empty segment: write keys joined by dots, such as \"amount\" \
         or \"target.env\""
    )]
    BadPath(String),
    #[error("`{0}` needs a `value`: add one, e.g. value = \"production\"")]
    MissingValue(Op),
    #[error("`in` needs a list as its value, not {0}: write e.g. value = [\"staging\", \"dev\"]")]
    NotAList(&'static str),
    #[error("`in` with an empty list can never hold: list at least one value")]
    EmptyList,
    #[error("`{op}` compares numbers, and its value is {got}: write a number, e.g. value = 100")]
    NotANumber { op: Op, got: &'static str },
    #[error(
        "`matches` needs a regular expression as a string, not {0}: write e.g. \
         value = \"^prod-\""
    )]
    NotAString(&'static str),
    #[error("`matches` has an invalid regular expression: {0}")]
    BadRegex(String),
    #[error(
        "`exists` takes `true` (present) or `false` (absent) as its value, not {0}: write \
         value = false, or leave the value out for true"
    )]
    NotABool(&'static str),
}

/// How a rule reads a call: what its effect calls for.
///
/// An `allow` only lets through what it names exactly, as written; a `deny` and an `ask`
/// fail closed, matching every spelling of the call a tool runtime may read as the one
/// they name (a tool or a key in another case, `"9000"` for 9000, a list holding the
/// value, a number that is no finite number): see [`super::normal`]. A tool name that
/// only looks like one a rule names ([`super::RuleSet::look_alike`]) is for the caller
/// to refuse before any rule is read.
///
/// A condition reads the call one of two ways, by its rule's effect:
///
/// - **An `allow` reads exactly.** It lets through only what it names as written: a
///   missing path, or a value of another kind than the operator compares, makes every
///   operator false (`ne` included: `ne "production"` does not hold on a missing `env`,
///   nor on `env = 5`); `"50"` is no number to `amount lte 100`.
/// - **A `deny` and an `ask` read loosely: they fail closed.** Tool runtimes coerce
///   (pydantic's lax mode takes `"9000"` for 9000, Python reads `1e400` as `inf`), so
///   every way the call may be read counts, and the condition holds when it holds on any
///   of them: keys and string values in normal form (NFKC, case folded, trimmed: see
///   [`super::normal`]), every value found at the path in any spelling (see
///   [`Path::visit`]), any item of a list, text that reads as a number as that number.
///   For `lt`/`lte`/`gt`/`gte`, a value that cannot be compared (a non-finite number,
///   text that is no number, `null`, a table, an empty list) holds: a numeric `deny`
///   matches what it cannot rule out. `ne` holds when the exact path is missing (a tool
///   that does not read `"Env"` as `env` takes its own default) or when any value found
///   in any spelling is not equal to the rule's (a list is equal when all its items are);
///   `exists` holds when the path is found in any spelling, `exists = false` when the
///   exact path is missing (`"Amount"` is not the `amount` a tool asks for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// An `allow`'s: only what the rule names exactly, as written, holds.
    Exact,
    /// A `deny`'s and an `ask`'s: every way a tool runtime may read the call counts,
    /// and a value that cannot be compared matches rather than passes (see the type's
    /// docs).
    Loose,
}

impl Reading {
    /// The reading an effect calls for: `allow` reads exactly, `deny` and `ask` loosely.
    pub fn of(effect: super::Effect) -> Reading {
        match effect {
            super::Effect::Allow => Reading::Exact,
            super::Effect::Deny | super::Effect::Ask => Reading::Loose,
        }
    }
}

/// What a condition asks of the value it finds, checked. A value to compare with is
/// kept as written (for [`Reading::Exact`], the fingerprint and messages) and as
/// [`Wanted`] (for [`Reading::Loose`]).
#[derive(Clone)]
enum Test {
    Eq(Value, Wanted),
    Ne(Value, Wanted),
    /// Never empty.
    In(Vec<Value>, Vec<Wanted>),
    /// `lt`, `lte`, `gt` or `gte`: the operator, the orders of the found value against
    /// the bound that it accepts, and the bound.
    Compare(Op, fn(Ordering) -> bool, Number),
    /// Compiled once, at load, under [`REGEX_SIZE_LIMIT`]: as written, and ignoring case
    /// for [`Reading::Loose`].
    Matches {
        exact: Regex,
        folded: Regex,
    },
    Exists(bool),
}

/// One checked `where` condition.
#[derive(Clone)]
pub struct Condition {
    path: Path,
    test: Test,
}

impl Condition {
    /// Checks that `value` is what `op` compares with, and compiles a `matches` pattern.
    pub fn parse(path: &str, op: Op, value: Option<Value>) -> Result<Condition, ConditionError> {
        let path = Path::parse(path)?;
        let test = match (op, value) {
            (Op::Exists, None) => Test::Exists(true),
            (Op::Exists, Some(Value::Bool(b))) => Test::Exists(b),
            (Op::Exists, Some(v)) => return Err(ConditionError::NotABool(kind(&v))),
            (op, None) => return Err(ConditionError::MissingValue(op)),
            (Op::Eq, Some(v)) => Test::Eq(v.clone(), Wanted::of(&v)),
            (Op::Ne, Some(v)) => Test::Ne(v.clone(), Wanted::of(&v)),
            (Op::In, Some(Value::Array(items))) if items.is_empty() => {
                return Err(ConditionError::EmptyList);
            }
            (Op::In, Some(Value::Array(items))) => {
                let wanted = items.iter().map(Wanted::of).collect();
                Test::In(items, wanted)
            }
            (Op::In, Some(v)) => return Err(ConditionError::NotAList(kind(&v))),
            (Op::Lt, Some(Value::Number(n))) => Test::Compare(Op::Lt, Ordering::is_lt, n),
            (Op::Lte, Some(Value::Number(n))) => Test::Compare(Op::Lte, Ordering::is_le, n),
            (Op::Gt, Some(Value::Number(n))) => Test::Compare(Op::Gt, Ordering::is_gt, n),
            (Op::Gte, Some(Value::Number(n))) => Test::Compare(Op::Gte, Ordering::is_ge, n),
            (op @ (Op::Lt | Op::Lte | Op::Gt | Op::Gte), Some(v)) => {
                return Err(ConditionError::NotANumber { op, got: kind(&v) });
            }
            (Op::Matches, Some(Value::String(pattern))) => Test::Matches {
                exact: regex(&pattern, false)?,
                folded: regex(&pattern, true)?,
            },
            (Op::Matches, Some(v)) => return Err(ConditionError::NotAString(kind(&v))),
        };
        Ok(Condition { path, test })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn op(&self) -> Op {
        match &self.test {
            Test::Eq(..) => Op::Eq,
            Test::Ne(..) => Op::Ne,
            Test::In(..) => Op::In,
            Test::Compare(op, ..) => *op,
            Test::Matches { .. } => Op::Matches,
            Test::Exists(_) => Op::Exists,
        }
    }

    /// The value as checked: a `matches` pattern as its text, an `exists` as its boolean
    /// (`true` when it was left out).
    pub fn value(&self) -> Value {
        match &self.test {
            Test::Eq(v, _) | Test::Ne(v, _) => v.clone(),
            Test::In(items, _) => Value::Array(items.clone()),
            Test::Compare(.., n) => Value::Number(n.clone()),
            Test::Matches { exact, .. } => Value::String(exact.as_str().to_owned()),
            Test::Exists(b) => Value::Bool(*b),
        }
    }

    /// The bound of a `lt`/`lte`/`gt`/`gte`, with its operator.
    pub(super) fn bound(&self) -> Option<(Op, &Number)> {
        match &self.test {
            Test::Compare(op, _, n) => Some((*op, n)),
            _ => None,
        }
    }

    /// Whether the condition holds on a call's `params`, read as `reading` says.
    pub fn holds(&self, params: &PyValue, reading: Reading) -> bool {
        match reading {
            Reading::Exact => self.holds_exactly(params),
            Reading::Loose => self.holds_loosely(params),
        }
    }

    fn holds_exactly(&self, params: &PyValue) -> bool {
        let found = self.path.find(params);
        match (&self.test, found) {
            (Test::Exists(present), found) => found.is_some() == *present,
            (_, None) => false,
            (Test::Eq(v, _), Some(found)) => exactly_equal(found, v),
            (Test::Ne(v, _), Some(found)) => same_kind(found, v) && !exactly_equal(found, v),
            (Test::In(items, _), Some(found)) => items.iter().any(|v| exactly_equal(found, v)),
            (Test::Compare(_, accepts, bound), Some(found)) => match number::exact(found) {
                AsNumber::Number(n) => n.cmp_number(bound).is_some_and(accepts),
                AsNumber::NonFinite | AsNumber::NotANumber => false,
            },
            (Test::Matches { exact, .. }, Some(PyValue::Str(s))) => exact.is_match(s),
            (Test::Matches { .. }, Some(_)) => false,
        }
    }

    /// The module header says what holds; each test stops at the first value it holds on.
    fn holds_loosely(&self, params: &PyValue) -> bool {
        let any = |test: &mut dyn FnMut(&PyValue) -> bool| {
            self.path
                .visit(params, &mut |found| {
                    if test(found) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .is_break()
        };
        match &self.test {
            Test::Exists(true) => any(&mut |_| true),
            // Absent as the tool reads it: `"Amount"` is not the `amount` a tool asks for.
            Test::Exists(false) => self.path.find(params).is_none(),
            Test::Eq(_, wanted) => {
                any(&mut |found| any_item(found, &|item| loosely_equal(item, wanted)))
            }
            Test::In(_, wanted) => any(&mut |found| {
                any_item(found, &|item| wanted.iter().any(|w| loosely_equal(item, w)))
            }),
            // Missing as the tool reads it (`"Env"` may not be its `env`: it then takes
            // its own default), or another value in any spelling.
            Test::Ne(_, wanted) => {
                self.path.find(params).is_none()
                    || any(&mut |found| !every_item(found, &|item| loosely_equal(item, wanted)))
            }
            Test::Compare(_, accepts, bound) => any(&mut |found| compares(found, *accepts, bound)),
            Test::Matches { folded, .. } => any(&mut |found| {
                any_item(found, &|item| match item {
                    PyValue::Str(s) => folded.is_match(s) || folded.is_match(&normalise(s)),
                    _ => false,
                })
            }),
        }
    }
}

fn regex(pattern: &str, ignore_case: bool) -> Result<Regex, ConditionError> {
    RegexBuilder::new(pattern)
        .case_insensitive(ignore_case)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| ConditionError::BadRegex(e.to_string()))
}

impl fmt::Debug for Condition {
    /// `` `amount` lte 100 ``: how it would read in a message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {} {}", self.path.as_str(), self.op(), self.value())
    }
}

/// What a value is, in the configuration's words, for messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a table",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::python::json::parse;

    fn condition(path: &str, op: Op, value: Value) -> Condition {
        Condition::parse(path, op, Some(value)).unwrap()
    }

    /// `params` as Python decodes it: what a call's parameters are to the rules.
    fn py(params: &Value) -> PyValue {
        parse(&params.to_string()).unwrap()
    }

    /// Whether `c` holds on `params` as an `allow` reads them.
    fn exactly(c: &Condition, params: &Value) -> bool {
        c.holds(&py(params), Reading::Exact)
    }

    /// Whether `c` holds on the JSON text `params` as a `deny` or an `ask` reads them.
    fn loosely(c: &Condition, params: &str) -> bool {
        c.holds(&parse(params).unwrap(), Reading::Loose)
    }

    #[test]
    fn eq_holds_on_an_equal_value_only() {
        let c = condition("env", Op::Eq, json!("production"));
        assert!(exactly(&c, &json!({"env": "production"})));
        assert!(!exactly(&c, &json!({"env": "staging"})));
        let c = condition("target", Op::Eq, json!({"env": "prod", "ids": [1, 2]}));
        assert!(exactly(
            &c,
            &json!({"target": {"ids": [1.0, 2], "env": "prod"}})
        ));
        assert!(!exactly(
            &c,
            &json!({"target": {"ids": [2, 1], "env": "prod"}})
        ));
        assert!(exactly(
            &condition("x", Op::Eq, Value::Null),
            &json!({"x": null})
        ));
    }

    #[test]
    fn ne_holds_on_another_value_of_the_same_kind_only() {
        let c = condition("env", Op::Ne, json!("production"));
        assert!(exactly(&c, &json!({"env": "staging"})));
        assert!(!exactly(&c, &json!({"env": "production"})));
        assert!(!exactly(&c, &json!({"env": 5})), "another kind");
        assert!(!exactly(&c, &json!({"env": ["staging"]})), "another kind");
        assert!(!exactly(&c, &json!({"env": null})), "another kind");
        assert!(!exactly(&c, &json!({})), "missing");
        let c = condition("n", Op::Ne, json!(1));
        assert!(exactly(&c, &json!({"n": 2.5})));
        assert!(!exactly(&c, &json!({"n": 1.0})));
    }

    #[test]
    fn in_holds_when_one_item_is_equal() {
        let c = condition("env", Op::In, json!(["staging", "dev", 3]));
        assert!(exactly(&c, &json!({"env": "dev"})));
        assert!(exactly(&c, &json!({"env": 3.0})));
        assert!(!exactly(&c, &json!({"env": "production"})));
        assert!(!exactly(&c, &json!({"env": ["dev"]})));
        assert!(!exactly(&c, &json!({})));
    }

    #[test]
    fn each_numeric_comparison_holds_on_its_side_of_the_bound() {
        let at = |n: Value| json!({ "amount": n });
        for (op, below, equal, above) in [
            (Op::Lt, true, false, false),
            (Op::Lte, true, true, false),
            (Op::Gt, false, false, true),
            (Op::Gte, false, true, true),
        ] {
            let c = condition("amount", op, json!(100));
            assert_eq!(exactly(&c, &at(json!(99))), below, "{op} below");
            assert_eq!(exactly(&c, &at(json!(100))), equal, "{op} equal");
            assert_eq!(
                exactly(&c, &at(json!(100.0))),
                equal,
                "{op} equal as a float"
            );
            assert_eq!(
                exactly(&c, &at(json!(100.5))),
                above,
                "{op} above as a float"
            );
            assert_eq!(exactly(&c, &at(json!(-1))), below, "{op} negative");
            assert_eq!(exactly(&c, &at(json!(u64::MAX))), above, "{op} huge");
        }
    }

    #[test]
    fn a_numeric_comparison_never_holds_on_a_string_or_a_missing_value() {
        for op in [Op::Lt, Op::Lte, Op::Gt, Op::Gte] {
            let c = condition("amount", op, json!(100));
            for params in [
                json!({"amount": "50"}),
                json!({"amount": "500"}),
                json!({"amount": null}),
                json!({"amount": [50]}),
                json!({"amount": true}),
                json!({}),
                json!([1, 2]),
                json!("amount"),
            ] {
                assert!(!exactly(&c, &params), "{op} on {params}");
            }
        }
    }

    #[test]
    fn matches_finds_a_match_anywhere_unless_anchored_and_only_in_strings() {
        let c = condition("host", Op::Matches, json!("prod"));
        assert!(exactly(&c, &json!({"host": "db-prod-1"})));
        assert!(!exactly(&c, &json!({"host": "db-staging-1"})));
        assert!(!exactly(&c, &json!({"host": 1})));
        assert!(!exactly(&c, &json!({"host": ["prod"]})));
        assert!(!exactly(&c, &json!({})));
        let anchored = condition("host", Op::Matches, json!("^prod-"));
        assert!(exactly(&anchored, &json!({"host": "prod-db"})));
        assert!(!exactly(&anchored, &json!({"host": "db-prod-1"})));
    }

    #[test]
    fn exists_speaks_of_presence_whatever_the_value() {
        let present = Condition::parse("target.env", Op::Exists, None).unwrap();
        let absent = condition("target.env", Op::Exists, json!(false));
        for params in [
            json!({"target": {"env": null}}),
            json!({"target": {"env": "x"}}),
        ] {
            assert!(exactly(&present, &params));
            assert!(!exactly(&absent, &params));
        }
        for params in [json!({"target": {}}), json!({"target": "env"}), json!({})] {
            assert!(!exactly(&present, &params));
            assert!(exactly(&absent, &params));
        }
    }

    #[test]
    fn a_dotted_path_walks_objects_only() {
        let c = condition("target.env", Op::Eq, json!("prod"));
        assert!(exactly(&c, &json!({"target": {"env": "prod"}})));
        assert!(!exactly(&c, &json!({"target.env": "prod"})));
        assert!(!exactly(&c, &json!({"target": [{"env": "prod"}]})));
        let index = condition("items.0", Op::Eq, json!("a"));
        assert!(!exactly(&index, &json!({"items": ["a"]})));
        assert!(exactly(&index, &json!({"items": {"0": "a"}})));
    }

    #[test]
    fn a_value_of_the_wrong_kind_for_its_operator_is_refused() {
        let e = |op, v| Condition::parse("x", op, Some(v)).unwrap_err();
        assert_eq!(e(Op::In, json!("a")), ConditionError::NotAList("a string"));
        assert_eq!(e(Op::In, json!([])), ConditionError::EmptyList);
        assert_eq!(
            e(Op::Lte, json!("100")),
            ConditionError::NotANumber {
                op: Op::Lte,
                got: "a string"
            }
        );
        assert_eq!(
            e(Op::Matches, json!(1)),
            ConditionError::NotAString("a number")
        );
        assert_eq!(
            e(Op::Exists, json!("yes")),
            ConditionError::NotABool("a string")
        );
        assert_eq!(
            Condition::parse("x", Op::Eq, None).unwrap_err(),
            ConditionError::MissingValue(Op::Eq)
        );
        for path in ["", "a..b", ".a", "a."] {
            assert_eq!(
                Condition::parse(path, Op::Exists, None).unwrap_err(),
                ConditionError::BadPath(path.to_owned())
            );
        }
    }

    #[test]
    fn a_bad_or_oversized_regex_is_refused_with_the_regex_error() {
        let bad = Condition::parse("x", Op::Matches, Some(json!("(unclosed"))).unwrap_err();
        assert!(matches!(&bad, ConditionError::BadRegex(m) if m.contains("unclosed")));
        let huge = Condition::parse("x", Op::Matches, Some(json!(r"\w{1000}{1000}"))).unwrap_err();
        assert!(
            matches!(&huge, ConditionError::BadRegex(m) if m.contains("size limit")),
            "{huge}"
        );
    }

    #[test]
    fn a_loose_eq_or_in_compares_text_in_normal_form_and_any_item_of_a_list() {
        let prod = condition("env", Op::Eq, json!("prod"));
        for params in [
            r#"{"env": "prod"}"#,
            r#"{"env": "PROD"}"#,
            r#"{"env": "prod "}"#,
            r#"{"env": "ｐｒｏｄ"}"#,
            r#"{"env": ["prod"]}"#,
            r#"{"env": ["dev", ["Prod"]]}"#,
            r#"{"ENV ": "prod"}"#,
            r#"{"env": "dev", "Env": "prod"}"#,
        ] {
            assert!(loosely(&prod, params), "{params}");
        }
        for params in [
            r#"{"env": "production"}"#,
            r#"{"env": "pr od"}"#,
            r#"{"env": 5}"#,
            r#"{"env": {"name": "prod"}}"#,
            r#"{}"#,
        ] {
            assert!(!loosely(&prod, params), "{params}");
        }
        let roles = condition("role", Op::In, json!(["admin", "root"]));
        for params in [
            r#"{"role": "Admin"}"#,
            r#"{"role": ["admin"]}"#,
            r#"{"role": " ROOT"}"#,
        ] {
            assert!(loosely(&roles, params), "{params}");
            assert!(
                !exactly(&roles, &serde_json::from_str(params).unwrap()),
                "{params}"
            );
        }
        assert!(!loosely(&roles, r#"{"role": "user"}"#));
    }

    #[test]
    fn a_loose_eq_takes_a_number_and_text_that_reads_as_it_for_each_other() {
        let amount = condition("amount", Op::Eq, json!(9000));
        for params in [
            r#"{"amount": 9000}"#,
            r#"{"amount": 9000.0}"#,
            r#"{"amount": "9000"}"#,
            r#"{"amount": " 9e3 "}"#,
            r#"{"amount": [1, "9_000"]}"#,
        ] {
            assert!(loosely(&amount, params), "{params}");
        }
        assert!(!loosely(&amount, r#"{"amount": "9000 EUR"}"#));
        let text = condition("amount", Op::Eq, json!("9000"));
        assert!(loosely(&text, r#"{"amount": 9000}"#));
        assert!(!exactly(&text, &json!({"amount": 9000})));
        let flag = condition("dry_run", Op::Eq, json!(false));
        for params in [
            r#"{"dry_run": false}"#,
            r#"{"dry_run": "no"}"#,
            r#"{"dry_run": "False"}"#,
            r#"{"dry_run": 0}"#,
        ] {
            assert!(loosely(&flag, params), "{params}");
        }
        assert!(!loosely(&flag, r#"{"dry_run": "maybe"}"#));
        let target = condition("target", Op::Eq, json!({"env": "prod", "ids": [1, 2]}));
        assert!(loosely(
            &target,
            r#"{"target": {"Env": "PROD", "ids": ["1", 2.0]}}"#
        ));
        assert!(!loosely(
            &target,
            r#"{"target": {"env": "prod", "ids": [2, 1]}}"#
        ));
    }

    #[test]
    fn a_loose_numeric_comparison_holds_on_what_reads_past_its_bound_or_cannot_be_compared() {
        let over = condition("amount", Op::Gt, json!(1000));
        for params in [
            r#"{"amount": 9000}"#,
            r#"{"amount": "9000"}"#,
            r#"{"amount": " 9_000 "}"#,
            r#"{"amount": [9000]}"#,
            r#"{"amount": [1, [9000]]}"#,
            r#"{"amount": {"value": 9000}}"#,
            r#"{"amount": {"value": 1}}"#,
            r#"{"amount": 1e400}"#,
            r#"{"amount": -1e400}"#,
            r#"{"amount": "inf"}"#,
            r#"{"amount": "nan"}"#,
            r#"{"amount": "nine thousand"}"#,
            r#"{"amount": null}"#,
            r#"{"amount": []}"#,
            r#"{"Amount": 9000}"#,
            r#"{"amount ": 9000}"#,
            r#"{"amount": 50, "AMOUNT": 9000}"#,
            r#"{"amount": 100000000000000000000000000000000000000000000}"#,
        ] {
            assert!(loosely(&over, params), "{params}");
        }
        for params in [
            r#"{"amount": 50}"#,
            r#"{"amount": "50"}"#,
            r#"{"amount": [50, "999.5"]}"#,
            r#"{"amount": true}"#,
            r#"{}"#,
            r#"{"other": 9000}"#,
        ] {
            assert!(!loosely(&over, params), "{params}");
        }
    }

    #[test]
    fn a_loose_ne_holds_unless_the_exact_key_and_every_spelling_hold_the_rules_value() {
        let c = condition("env", Op::Ne, json!("staging"));
        for params in [
            r#"{}"#,
            r#"{"env": "prod"}"#,
            r#"{"env": 5}"#,
            r#"{"env": null}"#,
            r#"{"env": {"name": "staging"}}"#,
            r#"{"env": ["staging", "prod"]}"#,
            r#"{"env": []}"#,
            r#"{"env": "staging", "ENV": "prod"}"#,
            r#"{"Env": "staging"}"#,
            r#"{"env.": "staging"}"#,
        ] {
            assert!(loosely(&c, params), "{params}");
        }
        for params in [
            r#"{"env": "staging"}"#,
            r#"{"env": "Staging "}"#,
            r#"{"env": ["staging"]}"#,
            r#"{"env": "staging", "Env": "STAGING"}"#,
        ] {
            assert!(!loosely(&c, params), "{params}");
        }
    }

    #[test]
    fn loose_exists_finds_any_spelling_and_loose_absence_is_of_the_exact_key() {
        let present = Condition::parse("invoice.total", Op::Exists, None).unwrap();
        let absent = condition("invoice.total", Op::Exists, json!(false));
        for params in [
            r#"{"invoice": {"total": 1}}"#,
            r#"{"Invoice": {"Total": 1}}"#,
            r#"{"invoice.total": 1}"#,
            r#"{"invoice": [{"total": 1}]}"#,
        ] {
            assert!(loosely(&present, params), "{params}");
        }
        assert!(!loosely(&present, r#"{"invoice": {}}"#));
        assert!(!loosely(&absent, r#"{"invoice": {"total": 1}}"#));
        for params in [
            r#"{"invoice.total": 1}"#,
            r#"{"Invoice": {"total": 1}}"#,
            r#"{}"#,
        ] {
            assert!(loosely(&absent, params), "{params}");
        }
    }

    #[test]
    fn a_loose_match_ignores_case_width_and_surrounding_space() {
        let c = condition("host", Op::Matches, json!("^prod-"));
        for params in [
            r#"{"host": "prod-db"}"#,
            r#"{"host": "PROD-db"}"#,
            r#"{"host": " prod-db"}"#,
            r#"{"host": "ｐｒｏｄ-db"}"#,
            r#"{"host": ["db", "prod-1"]}"#,
        ] {
            assert!(loosely(&c, params), "{params}");
        }
        assert!(!loosely(&c, r#"{"host": "db-prod-1"}"#));
        assert!(!loosely(&c, r#"{"host": 5}"#));
        assert!(!exactly(&c, &json!({"host": "PROD-db"})));
    }

    #[test]
    fn an_exact_reading_never_takes_another_kind_or_spelling() {
        let band = [
            condition("amount", Op::Gte, json!(0)),
            condition("amount", Op::Lte, json!(100)),
        ];
        for params in [
            json!({"amount": "50"}),
            json!({"amount": [50]}),
            json!({"amount": {"value": 50}}),
            json!({"Amount": 50}),
            json!({"amount ": 50}),
            json!({"amount": true}),
        ] {
            assert!(!band.iter().all(|c| exactly(c, &params)), "{params}");
        }
        assert!(band.iter().all(|c| exactly(c, &json!({"amount": 50}))));
        let inf = parse(r#"{"amount": -1e400}"#).unwrap();
        assert!(
            !band[1].holds(&inf, Reading::Exact),
            "-inf is no number to an allow"
        );
        let ne = condition("n", Op::Ne, json!(1));
        assert!(!ne.holds(&parse(r#"{"n": 1e400}"#).unwrap(), Reading::Exact));
    }
}
