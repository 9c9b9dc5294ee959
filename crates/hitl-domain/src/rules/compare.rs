//! How a condition compares a value found in a call with the rule's: exactly, for an
//! `allow` ([`exactly_equal`], [`same_kind`]), or as a tool runtime may read it, for a
//! `deny` and an `ask` ([`Wanted`], [`loosely_equal`], [`compares`], and the list walks
//! [`any_item`] and [`every_item`]). What each reading means is in the header of
//! [`super::condition`].

use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::normal::normalise;
use super::number::{self, AsNumber, Numeric};
use crate::python::value::PyValue;

/// A rule's value in the form [`Reading::Loose`](super::condition::Reading::Loose)
/// compares with, computed at load.
#[derive(Clone)]
pub(super) enum Wanted {
    Null,
    Bool(bool),
    Number(Number),
    /// The text in normal form, and the number it reads as (`"9000"`), if any.
    Text(String, Option<Number>),
    List(Vec<Wanted>),
    /// Keys in normal form.
    Table(Vec<(String, Wanted)>),
}

impl Wanted {
    /// Recursion goes as deep as the rule's own value, which the configuration's parser
    /// already bounded.
    pub(super) fn of(v: &Value) -> Wanted {
        match v {
            Value::Null => Wanted::Null,
            Value::Bool(b) => Wanted::Bool(*b),
            Value::Number(n) => Wanted::Number(n.clone()),
            Value::String(s) => {
                let number = match number::read_text(s) {
                    AsNumber::Number(Numeric::Int(i)) => i64::try_from(i)
                        .map(Number::from)
                        .ok()
                        .or_else(|| u64::try_from(i).ok().map(Number::from)),
                    AsNumber::Number(Numeric::Float(f)) => Number::from_f64(f),
                    _ => None,
                };
                Wanted::Text(normalise(s).into_owned(), number)
            }
            Value::Array(items) => Wanted::List(items.iter().map(Wanted::of).collect()),
            Value::Object(map) => Wanted::Table(
                map.iter()
                    .map(|(k, v)| (normalise(k).into_owned(), Wanted::of(v)))
                    .collect(),
            ),
        }
    }
}

/// Whether a call's value is of the rule value's kind (any two finite numbers are,
/// integer or not; an infinite one is of no kind a rule can write).
pub(super) fn same_kind(found: &PyValue, v: &Value) -> bool {
    match (v, found) {
        (Value::Number(_), PyValue::Int(_)) => true,
        (Value::Number(_), PyValue::Float(f)) => f.is_finite(),
        (Value::Null, PyValue::None)
        | (Value::Bool(_), PyValue::Bool(_))
        | (Value::String(_), PyValue::Str(_))
        | (Value::Array(_), PyValue::List(_))
        | (Value::Object(_), PyValue::Dict(_)) => true,
        _ => false,
    }
}

/// JSON equality, except that numbers are equal by value (`1` and `1.0`), at any depth.
/// Recursion goes only as deep as both values are lists or tables, so no deeper than
/// the rule's own value, which a configuration parser already bounded.
pub(super) fn exactly_equal(found: &PyValue, v: &Value) -> bool {
    match (v, found) {
        (Value::Null, PyValue::None) => true,
        (Value::Bool(b), PyValue::Bool(x)) => b == x,
        (Value::Number(n), found) => {
            matches!(number::exact(found), AsNumber::Number(x) if x.cmp_number(n) == Some(Ordering::Equal))
        }
        (Value::String(s), PyValue::Str(x)) => s == x,
        (Value::Array(items), PyValue::List(found)) => {
            items.len() == found.len() && found.iter().zip(items).all(|(f, v)| exactly_equal(f, v))
        }
        (Value::Object(map), PyValue::Dict(found)) => {
            map.len() == found.len()
                && map
                    .iter()
                    .all(|(key, v)| found.get(key).is_some_and(|f| exactly_equal(f, v)))
        }
        _ => false,
    }
}

/// Equality as a tool runtime may see it: text in normal form, a number and text that
/// reads as it (`"9000"` and 9000), a boolean and 0 or 1 or the words pydantic takes for
/// it (`"yes"`, `"off"`), lists item by item, tables by keys in normal form. Recursion
/// as [`exactly_equal`]'s.
pub(super) fn loosely_equal(found: &PyValue, wanted: &Wanted) -> bool {
    let is_number = |n: &Number| matches!(number::loose(found), AsNumber::Number(x) if x.cmp_number(n) == Some(Ordering::Equal));
    match (wanted, found) {
        (Wanted::Null, PyValue::None) => true,
        (Wanted::Bool(b), PyValue::Bool(x)) => b == x,
        (Wanted::Bool(b), PyValue::Str(s)) => bool_word(s) == Some(*b),
        (Wanted::Bool(b), PyValue::Int(_) | PyValue::Float(_)) => {
            is_number(&Number::from(u8::from(*b)))
        }
        (Wanted::Number(n), _) => is_number(n),
        (Wanted::Text(text, _), PyValue::Str(s)) => normalise(s) == text.as_str(),
        (Wanted::Text(_, Some(n)), PyValue::Int(_) | PyValue::Float(_)) => is_number(n),
        (Wanted::List(items), PyValue::List(found)) => {
            items.len() == found.len() && found.iter().zip(items).all(|(f, w)| loosely_equal(f, w))
        }
        (Wanted::Table(entries), PyValue::Dict(found)) => {
            entries.len() == found.len()
                && entries.iter().all(|(key, w)| {
                    found
                        .iter()
                        .any(|(k, f)| normalise(k) == key.as_str() && loosely_equal(f, w))
                })
        }
        _ => false,
    }
}

/// The boolean pydantic's lax mode reads `s` as, if any.
fn bool_word(s: &str) -> Option<bool> {
    match normalise(s).as_ref() {
        "true" | "1" | "yes" | "on" | "t" | "y" => Some(true),
        "false" | "0" | "no" | "off" | "f" | "n" => Some(false),
        _ => None,
    }
}

/// Whether `test` holds on `value` or, when it is a list, on any item (at any depth:
/// the parser bounds it).
pub(super) fn any_item(value: &PyValue, test: &dyn Fn(&PyValue) -> bool) -> bool {
    test(value) || matches!(value, PyValue::List(items) if items.iter().any(|i| any_item(i, test)))
}

/// Whether `test` holds on `value` or, when it is a list that is not empty, on every
/// item: `["staging"]` is `"staging"` to an `ne`, `["staging", "prod"]` is not.
pub(super) fn every_item(value: &PyValue, test: &dyn Fn(&PyValue) -> bool) -> bool {
    test(value)
        || matches!(value, PyValue::List(items) if !items.is_empty() && items.iter().all(|i| every_item(i, test)))
}

/// A loose `lt`/`lte`/`gt`/`gte` on one value: a number (or what reads as one) on the
/// accepted side of the bound, any item of a list, and anything that cannot be compared
/// (a non-finite number, text that is no number, `null`, a table, an empty list).
pub(super) fn compares(value: &PyValue, accepts: fn(Ordering) -> bool, bound: &Number) -> bool {
    match value {
        PyValue::List(items) => {
            items.is_empty() || items.iter().any(|i| compares(i, accepts, bound))
        }
        value => match number::loose(value) {
            AsNumber::Number(n) => n.cmp_number(bound).is_none_or(accepts),
            AsNumber::NonFinite | AsNumber::NotANumber => true,
        },
    }
}
