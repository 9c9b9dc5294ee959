//! A condition's dotted path into a call's `params`, and the two ways of finding what is
//! there.
//!
//! - [`Path::find`], for an `allow`: the one value at exactly these keys, walking
//!   objects only. An `allow` lets through only what it names exactly.
//! - [`Path::visit`], for a `deny` and an `ask`: every value a tool runtime might take for
//!   the one at this path. A key matches a segment in its normal form
//!   ([`normalise`](super::normal::normalise): `"Amount "` is `amount`), a key holding
//!   dots matches the segments it spells (`{"invoice.total": …}`), and a list on the way
//!   is walked through (`{"invoice": [{"total": …}]}`). Nothing that could be read as the
//!   value is left out.
//!
//! Both are linear in the size of `params`: a value is reached by one chain of keys, so
//! it is visited at most once, and `params` is bounded by
//! [`MAX_PARAM_KEYS`](crate::limits::MAX_PARAM_KEYS) and the parser's depth.

use std::fmt;
use std::ops::ControlFlow;

use super::condition::ConditionError;
use super::normal::normalise;
use crate::python::value::PyValue;

/// A dotted path into `params`: each segment is an object key. An array index is not
/// supported (`items.0` looks for the key `"0"`).
#[derive(Clone, PartialEq, Eq)]
pub struct Path {
    text: String,
    segments: Vec<String>,
    /// The segments in normal form, for [`Path::visit`].
    normal: Vec<String>,
}

impl Path {
    pub fn parse(text: &str) -> Result<Path, ConditionError> {
        let segments: Vec<String> = text.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(ConditionError::BadPath(text.to_owned()));
        }
        let normal = segments.iter().map(|s| normalise(s).into_owned()).collect();
        Ok(Path {
            text: text.to_owned(),
            segments,
            normal,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value at exactly this path, if every segment finds its key in an object.
    pub fn find<'v>(&self, params: &'v PyValue) -> Option<&'v PyValue> {
        self.segments
            .iter()
            .try_fold(params, |value, key| match value {
                PyValue::Dict(d) => d.get(key),
                _ => None,
            })
    }

    /// Calls `seen` with every value found at this path in any spelling (see the module
    /// header), until it breaks.
    pub fn visit<'v>(
        &self,
        params: &'v PyValue,
        seen: &mut dyn FnMut(&'v PyValue) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.walk(params, 0, seen)
    }

    fn walk<'v>(
        &self,
        value: &'v PyValue,
        at: usize,
        seen: &mut dyn FnMut(&'v PyValue) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if at == self.normal.len() {
            return seen(value);
        }
        match value {
            PyValue::List(items) => {
                for item in items {
                    self.walk(item, at, seen)?;
                }
            }
            PyValue::Dict(d) => {
                for (key, inner) in d.iter() {
                    if let Some(taken) = self.spells(key, at) {
                        self.walk(inner, at + taken, seen)?;
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }

    /// How many segments from `at` on `key` spells in normal form: one for the segment
    /// itself, more for a key that holds dots, `None` when it spells none.
    fn spells(&self, key: &str, at: usize) -> Option<usize> {
        let key = normalise(key);
        let rest = &self.normal[at..];
        if rest.first().is_some_and(|s| *s == key) {
            return Some(1);
        }
        if !key.contains('.') {
            return None;
        }
        let mut taken = 0;
        for part in key.split('.') {
            if rest.get(taken).is_none_or(|s| s != part.trim()) {
                return None;
            }
            taken += 1;
        }
        Some(taken)
    }
}

impl fmt::Debug for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::json::parse;

    /// Every value found at `path` in any spelling, as JSON text.
    fn found(path: &str, params: &str) -> Vec<String> {
        let params = parse(params).unwrap();
        let mut out = Vec::new();
        let _ = Path::parse(path).unwrap().visit(&params, &mut |v| {
            out.push(format!("{v:?}"));
            ControlFlow::Continue(())
        });
        out
    }

    #[test]
    fn find_takes_the_exact_keys_through_objects_only() {
        let path = Path::parse("invoice.total").unwrap();
        let at = |text: &str| path.find(&parse(text).unwrap()).cloned();
        assert!(at(r#"{"invoice": {"total": 5}}"#).is_some());
        for other in [
            r#"{"Invoice": {"total": 5}}"#,
            r#"{"invoice.total": 5}"#,
            r#"{"invoice": [{"total": 5}]}"#,
            r#"{"invoice": {"total ": 5}}"#,
        ] {
            assert!(at(other).is_none(), "{other}");
        }
    }

    #[test]
    fn visit_finds_every_spelling_a_tool_may_read() {
        for params in [
            r#"{"invoice": {"total": 5}}"#,
            r#"{"Invoice": {"TOTAL ": 5}}"#,
            r#"{"invoice.total": 5}"#,
            r#"{"Invoice . Total": 5}"#,
            r#"{"invoice": [{"total": 5}]}"#,
            r#"{"invoice": [[{"x": 1}, {"total": 5}]]}"#,
            r#"{"ｉｎｖｏｉｃｅ": {"total": 5}}"#,
        ] {
            assert_eq!(found("invoice.total", params), ["Int(5)"], "{params}");
        }
        assert_eq!(
            found(
                "amount",
                r#"{"amount": 1, "Amount": 2, "amount ": 3, "other": 4}"#
            ),
            ["Int(1)", "Int(2)", "Int(3)"]
        );
        assert!(found("invoice.total", r#"{"invoice.total.x": 5}"#).is_empty());
        assert!(found("invoice.total", r#"{"invoice": 5, "total": 5}"#).is_empty());
        assert!(found("a.b", r#"{"a.": {"b": 1}}"#).is_empty());
    }

    #[test]
    fn visit_stops_when_told() {
        let params = parse(r#"{"a": [1, 2, 3]}"#).unwrap();
        let mut calls = 0;
        let flow = Path::parse("a").unwrap().visit(&params, &mut |_| {
            calls += 1;
            ControlFlow::Break(())
        });
        assert_eq!(flow, ControlFlow::Break(()));
        assert_eq!(calls, 1);
    }
}
