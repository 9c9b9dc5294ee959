//! What a call that came through an MCP gateway says of itself (issue 48): the name of
//! the MCP server (the upstream) it goes to, and the tool's annotations
//! (`readOnlyHint`, `destructiveHint`, …). Both are shown to the person asked, matched by
//! the rules (`servers`, `annotations`), and the server is part of a window's key: an
//! approval of a call to one server never lets the same call to another through.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use super::ids::InvalidValue;

/// The most characters of a server's name.
pub const MAX_SERVER_CHARS: usize = 64;

/// The most annotations one call may carry (MCP defines four; the rest is room for a
/// server's own hints, not for a payload).
pub const MAX_ANNOTATIONS: usize = 16;

/// The most characters of an annotation's name.
pub const MAX_ANNOTATION_KEY_CHARS: usize = 64;

/// The name of the MCP server a call goes to: 1 to [`MAX_SERVER_CHARS`] characters of
/// `[A-Za-z0-9._-]`. So narrow because it is shown, matched by glob patterns and kept
/// in a window's key: no character in it can hide, mislead or be a wildcard.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerName(Arc<str>);

impl ServerName {
    pub fn parse(s: &str) -> Result<Self, InvalidValue> {
        if s.is_empty() {
            return Err(InvalidValue("must not be empty".into()));
        }
        let chars = s.chars().count();
        if chars > MAX_SERVER_CHARS {
            return Err(InvalidValue(format!(
                "is {chars} characters long; at most {MAX_SERVER_CHARS}"
            )));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(InvalidValue(format!(
                "holds {c:?}: only letters A-Z and a-z, digits, '.', '_' and '-' are allowed"
            )));
        }
        Ok(ServerName(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A call's MCP tool annotations: each a name (1 to [`MAX_ANNOTATION_KEY_CHARS`]
/// characters, no control character) and a boolean, at most [`MAX_ANNOTATIONS`] of them,
/// in name order (so two calls with the same annotations compare equal however they were
/// written).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Annotations(BTreeMap<String, bool>);

/// Why annotations were refused: `key` is the annotation at fault, when one is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationsError {
    pub key: Option<String>,
    pub why: String,
}

impl Annotations {
    /// The annotations in `value`, a JSON object of booleans.
    pub fn from_value(value: &Value) -> Result<Annotations, AnnotationsError> {
        let Value::Object(members) = value else {
            return Err(AnnotationsError {
                key: None,
                why: "must be an object of booleans, e.g. {\"readOnlyHint\": true}".into(),
            });
        };
        if members.len() > MAX_ANNOTATIONS {
            return Err(AnnotationsError {
                key: None,
                why: format!("has {} members; at most {MAX_ANNOTATIONS}", members.len()),
            });
        }
        let mut out = BTreeMap::new();
        for (key, v) in members {
            let refuse = |why: String| AnnotationsError {
                key: Some(key.clone()),
                why,
            };
            check_key(key).map_err(|e| refuse(e.0))?;
            match v {
                Value::Bool(b) => {
                    out.insert(key.clone(), *b);
                }
                other => {
                    return Err(refuse(format!(
                        "must be true or false, not {}",
                        kind(other)
                    )));
                }
            }
        }
        Ok(Annotations(out))
    }

    /// Annotations as stored ([`Self::to_json`]); `None` when the text is not such an
    /// object (a corrupt row).
    pub fn from_stored(text: &str) -> Option<Annotations> {
        let value: Value = serde_json::from_str(text).ok()?;
        Annotations::from_value(&value).ok()
    }

    /// From checked pairs (a rule's table, already checked at load).
    pub fn from_pairs(pairs: BTreeMap<String, bool>) -> Annotations {
        Annotations(pairs)
    }

    /// The annotations as a JSON object, in name order.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), Value::Bool(*v)))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<bool> {
        self.0.get(key).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, bool)> {
        self.0.iter().map(|(k, v)| (k.as_str(), *v))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every one of `required` is here with the same value: how a rule's
    /// `annotations` matches a call.
    pub fn carries(&self, required: &Annotations) -> bool {
        required.iter().all(|(k, v)| self.get(k) == Some(v))
    }

    /// The annotations in a few words for a person (`read-only, not destructive`): MCP's
    /// four hints in words, any other as `name=value`. Empty when there are none.
    pub fn brief(&self) -> String {
        self.iter()
            .map(|(k, v)| match (k, v) {
                ("readOnlyHint", true) => "read-only".to_owned(),
                ("readOnlyHint", false) => "not read-only".to_owned(),
                ("destructiveHint", true) => "destructive".to_owned(),
                ("destructiveHint", false) => "not destructive".to_owned(),
                ("idempotentHint", true) => "idempotent".to_owned(),
                ("idempotentHint", false) => "not idempotent".to_owned(),
                ("openWorldHint", true) => "open world".to_owned(),
                ("openWorldHint", false) => "closed world".to_owned(),
                (k, v) => format!("{k}={v}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// An annotation's name: 1 to [`MAX_ANNOTATION_KEY_CHARS`] characters, no control
/// character (it is shown, and a newline or an escape would change what is shown).
pub fn check_key(key: &str) -> Result<(), InvalidValue> {
    if key.is_empty() {
        return Err(InvalidValue(
            "an annotation's name must not be empty".into(),
        ));
    }
    let chars = key.chars().count();
    if chars > MAX_ANNOTATION_KEY_CHARS {
        return Err(InvalidValue(format!(
            "the name is {chars} characters long; at most {MAX_ANNOTATION_KEY_CHARS}"
        )));
    }
    if let Some(c) = key.chars().find(|c| c.is_control()) {
        return Err(InvalidValue(format!(
            "the name holds the control character {}",
            super::text::escape_char(c)
        )));
    }
    Ok(())
}

/// A JSON value's kind, in a refusal.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_server_name_is_short_plain_ascii() {
        for ok in ["fs", "db-prod", "a.b_c-1", &"x".repeat(64)] {
            assert_eq!(ServerName::parse(ok).unwrap().as_str(), ok);
        }
        for bad in ["", "fs*", "f s", "db/1", "ｆs", "fs\n", &"x".repeat(65)] {
            assert!(ServerName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(
            ServerName::parse("f s")
                .unwrap_err()
                .0
                .contains("only letters")
        );
    }

    #[test]
    fn annotations_are_booleans_under_short_visible_names() {
        let a = Annotations::from_value(&json!({"readOnlyHint": true, "x": false})).unwrap();
        assert_eq!(a.get("readOnlyHint"), Some(true));
        assert_eq!(a.to_json(), json!({"readOnlyHint": true, "x": false}));
        assert_eq!(Annotations::from_stored(&a.to_json().to_string()), Some(a));
        let refused = |v: Value| Annotations::from_value(&v).unwrap_err();
        assert_eq!(refused(json!([])).key, None);
        assert_eq!(
            refused(json!({"readOnlyHint": "yes"})),
            AnnotationsError {
                key: Some("readOnlyHint".into()),
                why: "must be true or false, not a string".into()
            }
        );
        assert_eq!(refused(json!({"": true})).key, Some(String::new()));
        assert!(refused(json!({"a\u{1b}": true})).why.contains("control"));
        assert!(refused(json!({"k".repeat(65): true})).why.contains("65"));
        let many: serde_json::Map<String, Value> =
            (0..17).map(|i| (format!("k{i}"), json!(true))).collect();
        assert!(refused(Value::Object(many)).why.contains("at most 16"));
    }

    #[test]
    fn a_call_carries_a_rules_annotations_only_with_the_same_values() {
        let call = Annotations::from_value(&json!({"readOnlyHint": true, "openWorldHint": false}))
            .unwrap();
        let want = |v: Value| Annotations::from_value(&v).unwrap();
        assert!(call.carries(&want(json!({"readOnlyHint": true}))));
        assert!(!call.carries(&want(json!({"readOnlyHint": false}))));
        assert!(!call.carries(&want(json!({"destructiveHint": false}))));
        assert_eq!(call.brief(), "closed world, read-only");
    }
}
