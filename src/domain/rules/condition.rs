//! A rule's `where` conditions: a dotted path into the call's `params`, an operator and
//! a value, checked once at load (a regular expression compiled then, a number known to
//! be one) and evaluated without I/O.
//!
//! What holds and what does not is chosen so that a condition never holds by accident:
//! a missing path, or a value of another kind than the operator compares, makes every
//! operator false (`ne` included: `ne "production"` does not hold on a missing `env`,
//! nor on `env = 5`). `exists` alone speaks about presence.
//!
//! `matches` is unanchored (a pattern found anywhere in the string holds): a rule that
//! means the whole string writes `^…$`.

use std::cmp::Ordering;
use std::fmt;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

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

/// A dotted path into `params`: each segment is an object key. An array index is not
/// supported (`items.0` looks for the key `"0"` and so never finds an array's item), nor
/// a key holding a dot.
#[derive(Clone, PartialEq, Eq)]
pub struct Path {
    text: String,
    segments: Vec<String>,
}

impl Path {
    pub fn parse(text: &str) -> Result<Path, ConditionError> {
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(ConditionError::BadPath(text.to_owned()));
        }
        Ok(Path {
            text: text.to_owned(),
            segments,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value at this path, if every segment finds a key in an object.
    pub fn find<'v>(&self, params: &'v Value) -> Option<&'v Value> {
        self.segments
            .iter()
            .try_fold(params, |value, key| value.as_object()?.get(key))
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

/// What a condition asks of the value it finds, checked.
#[derive(Clone)]
enum Test {
    Eq(Value),
    Ne(Value),
    /// Never empty.
    In(Vec<Value>),
    /// `lt`, `lte`, `gt` or `gte`: the operator, the orders of the found value against
    /// the bound that it accepts, and the bound.
    Compare(Op, fn(Ordering) -> bool, Number),
    /// Compiled once, at load, under [`REGEX_SIZE_LIMIT`].
    Matches(Regex),
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
            (Op::Eq, Some(v)) => Test::Eq(v),
            (Op::Ne, Some(v)) => Test::Ne(v),
            (Op::In, Some(Value::Array(items))) if items.is_empty() => {
                return Err(ConditionError::EmptyList);
            }
            (Op::In, Some(Value::Array(items))) => Test::In(items),
            (Op::In, Some(v)) => return Err(ConditionError::NotAList(kind(&v))),
            (Op::Lt, Some(Value::Number(n))) => Test::Compare(Op::Lt, Ordering::is_lt, n),
            (Op::Lte, Some(Value::Number(n))) => Test::Compare(Op::Lte, Ordering::is_le, n),
            (Op::Gt, Some(Value::Number(n))) => Test::Compare(Op::Gt, Ordering::is_gt, n),
            (Op::Gte, Some(Value::Number(n))) => Test::Compare(Op::Gte, Ordering::is_ge, n),
            (op @ (Op::Lt | Op::Lte | Op::Gt | Op::Gte), Some(v)) => {
                return Err(ConditionError::NotANumber { op, got: kind(&v) });
            }
            (Op::Matches, Some(Value::String(pattern))) => Test::Matches(
                RegexBuilder::new(&pattern)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| ConditionError::BadRegex(e.to_string()))?,
            ),
            (Op::Matches, Some(v)) => return Err(ConditionError::NotAString(kind(&v))),
        };
        Ok(Condition { path, test })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn op(&self) -> Op {
        match &self.test {
            Test::Eq(_) => Op::Eq,
            Test::Ne(_) => Op::Ne,
            Test::In(_) => Op::In,
            Test::Compare(op, ..) => *op,
            Test::Matches(_) => Op::Matches,
            Test::Exists(_) => Op::Exists,
        }
    }

    /// The value as checked: a `matches` pattern as its text, an `exists` as its boolean
    /// (`true` when it was left out).
    pub fn value(&self) -> Value {
        match &self.test {
            Test::Eq(v) | Test::Ne(v) => v.clone(),
            Test::In(items) => Value::Array(items.clone()),
            Test::Compare(.., n) => Value::Number(n.clone()),
            Test::Matches(re) => Value::String(re.as_str().to_owned()),
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

    /// Whether the condition holds on a call's `params`.
    pub fn holds(&self, params: &Value) -> bool {
        let found = self.path.find(params);
        match (&self.test, found) {
            (Test::Exists(present), found) => found.is_some() == *present,
            (_, None) => false,
            (Test::Eq(v), Some(found)) => same_value(found, v),
            (Test::Ne(v), Some(found)) => same_kind(found, v) && !same_value(found, v),
            (Test::In(items), Some(found)) => items.iter().any(|v| same_value(found, v)),
            (Test::Compare(_, accepts, bound), Some(Value::Number(n))) => {
                compare_numbers(n, bound).is_some_and(accepts)
            }
            (Test::Matches(re), Some(Value::String(s))) => re.is_match(s),
            (Test::Compare(..) | Test::Matches(_), Some(_)) => false,
        }
    }
}

impl fmt::Debug for Condition {
    /// `` `amount` lte 100 ``: how it would read in a message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {} {}", self.path.text, self.op(), self.value())
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

/// Whether two values are of one kind (any two numbers are, integer or not).
fn same_kind(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// JSON equality, except that numbers are equal by value (`1` and `1.0`), at any depth.
/// Recursion goes only as deep as both values are lists or tables, so no deeper than
/// the rule's own value, which a configuration parser already bounded.
pub(super) fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(key, a)| y.get(key).is_some_and(|b| same_value(a, b)))
        }
        _ => a == b,
    }
}

/// A JSON integer (`i64` or `u64`) as one type that holds both exactly.
fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// The order of two JSON numbers, exact for any pair: integers as integers (a `u64`
/// above `i64::MAX` included), an integer and a float without rounding the integer to a
/// float first (2^53 + 1 is more than 9007199254740992.0), floats as floats. `None`
/// only for a number that is none of these, which serde_json does not produce.
pub(super) fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        (Some(x), None) => compare_integer_float(x, b.as_f64()?),
        (None, Some(y)) => compare_integer_float(y, a.as_f64()?).map(Ordering::reverse),
        (None, None) => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// The order of an integer from JSON (within `i64::MIN..=u64::MAX`) and a float.
fn compare_integer_float(i: i128, f: f64) -> Option<Ordering> {
    // 2^64 and -2^63: beyond them a float orders against every such integer by its
    // side alone (infinities included, which JSON cannot carry anyway).
    const ABOVE: f64 = 18_446_744_073_709_551_616.0;
    const BELOW: f64 = -9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return None;
    }
    if f >= ABOVE {
        return Some(Ordering::Less);
    }
    if f < BELOW {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // Exact: `whole` is an integer inside the range i128 holds.
    let whole_int = whole as i128;
    Some(i.cmp(&whole_int).then_with(|| {
        // Equal integer parts: the fraction decides.
        0.0_f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal)
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn condition(path: &str, op: Op, value: Value) -> Condition {
        Condition::parse(path, op, Some(value)).unwrap()
    }

    fn number(v: Value) -> Number {
        match v {
            Value::Number(n) => n,
            other => panic!("not a number: {other}"),
        }
    }

    #[test]
    fn eq_holds_on_an_equal_value_only() {
        let c = condition("env", Op::Eq, json!("production"));
        assert!(c.holds(&json!({"env": "production"})));
        assert!(!c.holds(&json!({"env": "staging"})));
        let c = condition("target", Op::Eq, json!({"env": "prod", "ids": [1, 2]}));
        assert!(c.holds(&json!({"target": {"ids": [1.0, 2], "env": "prod"}})));
        assert!(!c.holds(&json!({"target": {"ids": [2, 1], "env": "prod"}})));
        assert!(condition("x", Op::Eq, Value::Null).holds(&json!({"x": null})));
    }

    #[test]
    fn ne_holds_on_another_value_of_the_same_kind_only() {
        let c = condition("env", Op::Ne, json!("production"));
        assert!(c.holds(&json!({"env": "staging"})));
        assert!(!c.holds(&json!({"env": "production"})));
        assert!(!c.holds(&json!({"env": 5})), "another kind");
        assert!(!c.holds(&json!({"env": ["staging"]})), "another kind");
        assert!(!c.holds(&json!({"env": null})), "another kind");
        assert!(!c.holds(&json!({})), "missing");
        let c = condition("n", Op::Ne, json!(1));
        assert!(c.holds(&json!({"n": 2.5})));
        assert!(!c.holds(&json!({"n": 1.0})));
    }

    #[test]
    fn in_holds_when_one_item_is_equal() {
        let c = condition("env", Op::In, json!(["staging", "dev", 3]));
        assert!(c.holds(&json!({"env": "dev"})));
        assert!(c.holds(&json!({"env": 3.0})));
        assert!(!c.holds(&json!({"env": "production"})));
        assert!(!c.holds(&json!({"env": ["dev"]})));
        assert!(!c.holds(&json!({})));
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
            assert_eq!(c.holds(&at(json!(99))), below, "{op} below");
            assert_eq!(c.holds(&at(json!(100))), equal, "{op} equal");
            assert_eq!(c.holds(&at(json!(100.0))), equal, "{op} equal as a float");
            assert_eq!(c.holds(&at(json!(100.5))), above, "{op} above as a float");
            assert_eq!(c.holds(&at(json!(-1))), below, "{op} negative");
            assert_eq!(c.holds(&at(json!(u64::MAX))), above, "{op} huge");
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
                assert!(!c.holds(&params), "{op} on {params}");
            }
        }
    }

    #[test]
    fn matches_finds_a_match_anywhere_unless_anchored_and_only_in_strings() {
        let c = condition("host", Op::Matches, json!("prod"));
        assert!(c.holds(&json!({"host": "db-prod-1"})));
        assert!(!c.holds(&json!({"host": "db-staging-1"})));
        assert!(!c.holds(&json!({"host": 1})));
        assert!(!c.holds(&json!({"host": ["prod"]})));
        assert!(!c.holds(&json!({})));
        let anchored = condition("host", Op::Matches, json!("^prod-"));
        assert!(anchored.holds(&json!({"host": "prod-db"})));
        assert!(!anchored.holds(&json!({"host": "db-prod-1"})));
    }

    #[test]
    fn exists_speaks_of_presence_whatever_the_value() {
        let present = Condition::parse("target.env", Op::Exists, None).unwrap();
        let absent = condition("target.env", Op::Exists, json!(false));
        for params in [
            json!({"target": {"env": null}}),
            json!({"target": {"env": "x"}}),
        ] {
            assert!(present.holds(&params));
            assert!(!absent.holds(&params));
        }
        for params in [json!({"target": {}}), json!({"target": "env"}), json!({})] {
            assert!(!present.holds(&params));
            assert!(absent.holds(&params));
        }
    }

    #[test]
    fn a_dotted_path_walks_objects_only() {
        let c = condition("target.env", Op::Eq, json!("prod"));
        assert!(c.holds(&json!({"target": {"env": "prod"}})));
        assert!(!c.holds(&json!({"target.env": "prod"})));
        assert!(!c.holds(&json!({"target": [{"env": "prod"}]})));
        let index = condition("items.0", Op::Eq, json!("a"));
        assert!(!index.holds(&json!({"items": ["a"]})));
        assert!(index.holds(&json!({"items": {"0": "a"}})));
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
    fn numbers_compare_exactly_across_integers_and_floats() {
        let cmp = |a: Value, b: Value| compare_numbers(&number(a), &number(b));
        assert_eq!(cmp(json!(1), json!(1.0)), Some(Ordering::Equal));
        assert_eq!(cmp(json!(-1), json!(u64::MAX)), Some(Ordering::Less));
        assert_eq!(
            cmp(json!(u64::MAX), json!(i64::MAX)),
            Some(Ordering::Greater)
        );
        assert_eq!(cmp(json!(i64::MIN), json!(-1e300)), Some(Ordering::Greater));
        // 2^64 as a float: above every u64, although u64::MAX rounds to it.
        assert_eq!(
            cmp(json!(u64::MAX), json!(18446744073709551616.0)),
            Some(Ordering::Less)
        );
        // 2^53 + 1 against 2^53 as a float: a float comparison would call them equal.
        assert_eq!(
            cmp(json!(9_007_199_254_740_993_u64), json!(9007199254740992.0)),
            Some(Ordering::Greater)
        );
        assert_eq!(cmp(json!(-2.5), json!(-2)), Some(Ordering::Less));
        assert_eq!(cmp(json!(-2), json!(-2.5)), Some(Ordering::Greater));
        assert_eq!(cmp(json!(0.1), json!(0.2)), Some(Ordering::Less));
    }
}
