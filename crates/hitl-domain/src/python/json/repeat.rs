//! The finding of the strict reading ([`repeated_key`](super::repeated_key)): an object
//! key that appears twice, and where.
//!
//! Python keeps the last value of a repeated key, while another reader of the same text
//! may keep the first, so a document that repeats one can mean one thing to the operator
//! and another to the tool. The API refuses such documents instead of choosing, and says
//! which key and where, in words it can return and log: the key is agent text, so it is
//! shown with its invisible characters escaped and cut to a bound.

use std::fmt::Write as _;

use crate::text::{Layout, visible};

/// One step from a document's top-level value down to a nested one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// Longest key, in characters as shown, that a [`RepeatedKey`] quotes; the rest is cut.
const MAX_SHOWN_KEY_CHARS: usize = 64;

/// An object key that appears twice in the same object, and where that object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepeatedKey {
    /// From the top-level value down to the object that repeats the key.
    pub(super) path: Vec<Step>,
    pub(super) key: String,
}

impl RepeatedKey {
    /// The key that appears twice, as decoded (`"\u00e9"` and `"é"` are the same key).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Where the object that repeats the key sits, from the top-level value:
    /// `params.items[2]`, empty for the top-level object itself. Keys that are not plain
    /// words are quoted (`params["a.b"]`), and shown as [`RepeatedKey::reason`] shows them.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for step in &self.path {
            match step {
                Step::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
                Step::Key(k) if is_plain_key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Step::Key(k) => {
                    let _ = write!(out, "[{}]", shown_key(k));
                }
            }
        }
        out
    }

    /// [`RepeatedKey::path`] below `root`, the name the caller gives the top-level value:
    /// `root` alone for the top-level object, else `root.params`.
    pub fn path_below(&self, root: &str) -> String {
        let path = self.path();
        match (root, path.as_str()) {
            (_, "") => root.to_owned(),
            ("", _) => path,
            _ if path.starts_with('[') => format!("{root}{path}"),
            _ => format!("{root}.{path}"),
        }
    }

    /// `repeats key "amount"`. The key is agent text: invisible characters show as
    /// escapes (see [`text::visible`](crate::text::visible)) and a long key is
    /// cut, so the message can be returned and logged as it is.
    pub fn reason(&self) -> String {
        format!("repeats key {}", shown_key(&self.key))
    }
}

/// A key that reads unambiguously after a `.` in a path.
fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars().count() <= MAX_SHOWN_KEY_CHARS
        && k.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// `k` in double quotes, with quotes, backslashes and invisible characters escaped and
/// at most [`MAX_SHOWN_KEY_CHARS`] characters of it shown (`…` marks a cut).
fn shown_key(k: &str) -> String {
    let mut out = String::from("\"");
    let mut shown = 0;
    for c in k.chars() {
        let piece = match c {
            '"' => "\\\"".to_owned(),
            '\\' => "\\\\".to_owned(),
            c => visible(c.encode_utf8(&mut [0; 4]), Layout::Line),
        };
        let width = piece.chars().count();
        if shown + width > MAX_SHOWN_KEY_CHARS {
            out.push('…');
            break;
        }
        shown += width;
        out.push_str(&piece);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use crate::python::json::{JsonErrorKind, MAX_DEPTH, dumps_sorted, parse, repeated_key};

    fn canonical(text: &str) -> String {
        dumps_sorted(&parse(text).expect("valid JSON"))
    }

    /// `repeated_key` as (path, reason), for JSON it accepts.
    fn repeat(text: &str) -> Option<(String, String)> {
        repeated_key(text)
            .expect("JSON the parser accepts")
            .map(|r| (r.path(), r.reason()))
    }

    fn at(path: &str, key: &str) -> Option<(String, String)> {
        Some((path.to_owned(), format!("repeats key \"{key}\"")))
    }

    #[test]
    fn the_strict_reading_finds_a_repeated_key_at_any_depth_and_names_its_object() {
        assert_eq!(repeat(r#"{"to":"ACME","amount":1}"#), None);
        assert_eq!(
            repeat(r#"{"amount":1,"to":"x","amount":2}"#),
            at("", "amount")
        );
        assert_eq!(
            repeat(r#"{"params":{"to":{"iban":"A","bic":"B","iban":"C"}}}"#),
            at("params.to", "iban")
        );
        assert_eq!(
            repeat(r#"{"params":{"items":[1,{},{"sku":1,"sku":2}]}}"#),
            at("params.items[2]", "sku")
        );
        assert_eq!(repeat(r#"[[{"a":1}],[{"b":1,"b":1}]]"#), at("[1][0]", "b"));
        // The same key in two objects is no repeat.
        assert_eq!(
            repeat(r#"{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]}"#),
            None
        );
        // Escaped or not, the same decoded key is the same key, as Python sees it.
        assert_eq!(repeat(r#"{"é":1,"\u00e9":2}"#), at("", "é"));
        // A key with a dot, or any other non-word, is quoted in the path.
        assert_eq!(repeat(r#"{"a.b":{"c":1,"c":2}}"#), at(r#"["a.b"]"#, "c"));
    }

    #[test]
    fn the_first_repeat_in_document_order_is_the_one_reported() {
        assert_eq!(repeat(r#"{"a":1,"a":{"b":1,"b":2}}"#), at("", "a"));
        assert_eq!(repeat(r#"{"a":{"b":1,"b":2},"a":1}"#), at("a", "b"));
        let mut members: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        members.push("\"k30\":0".into());
        assert_eq!(repeat(&format!("{{{}}}", members.join(","))), at("", "k30"));
    }

    #[test]
    fn a_repeated_key_is_shown_with_its_invisible_characters_escaped_and_cut() {
        let r = repeated_key("{\"a\u{202e}b\":1,\"a\\u202eb\":2}")
            .unwrap()
            .expect("a repeat");
        assert_eq!(r.key(), "a\u{202e}b");
        assert_eq!(r.reason(), r#"repeats key "a\u202eb""#);
        assert_eq!(
            repeat(r#"{"x\u200by":{"q\"\\":1,"q\"\\":2}}"#),
            Some((r#"["x\u200by"]"#.into(), r#"repeats key "q\"\\""#.into()))
        );
        let long = "k".repeat(100);
        assert_eq!(
            repeat(&format!(r#"{{"{long}":1,"{long}":2}}"#)),
            Some((
                String::new(),
                format!("repeats key \"{}…\"", "k".repeat(64))
            ))
        );
        // An escape is never cut in half.
        let bidi = "\\u202e".repeat(20);
        let shown = repeat(&format!(r#"{{"{bidi}":1,"{bidi}":2}}"#)).unwrap().1;
        assert_eq!(shown, format!("repeats key \"{}…\"", "\\u202e".repeat(10)));
    }

    #[test]
    fn a_repeat_path_reads_below_the_callers_root() {
        let r = |text: &str| repeated_key(text).unwrap().expect("a repeat");
        assert_eq!(
            r(r#"{"a":1,"a":2}"#).path_below("interaction"),
            "interaction"
        );
        assert_eq!(
            r(r#"{"form_schema":{"a":1,"a":2}}"#).path_below("interaction"),
            "interaction.form_schema"
        );
        assert_eq!(r(r#"[{"a":1,"a":2}]"#).path_below("body"), "body[0]");
        assert_eq!(r(r#"{"p":{"a":1,"a":2}}"#).path_below(""), "p");
    }

    #[test]
    fn the_strict_reading_refuses_what_parse_refuses_and_parse_still_keeps_the_last_value() {
        assert_eq!(
            repeated_key(r#"{"a":1,}"#).unwrap_err().kind(),
            &JsonErrorKind::TrailingComma('}')
        );
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            repeated_key(&deep).unwrap_err().kind(),
            &JsonErrorKind::TooDeep
        );
        assert_eq!(
            repeated_key("NaN").unwrap_err().kind(),
            &JsonErrorKind::NonStandardLiteral("NaN")
        );
        assert_eq!(repeated_key(r#"{"a":1}"#), Ok(None));
        assert_eq!(canonical(r#"{"a":1,"a":2}"#), r#"{"a": 2}"#);
    }
}
