//! Reading a request body: a JSON object that repeats no key and names only known
//! fields, and the checks of single fields several bodies share. Every refusal names
//! its field, in the words the API has always used.

use std::collections::BTreeMap;

use serde::de::value::MapDeserializer;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::error::ApiError;
use crate::config::Agent;
use crate::domain::outbox::{Url, callback_path_refusal};
use crate::domain::{python, text};

/// A JSON object's members as raw JSON, read as sent.
pub type RawObject = BTreeMap<String, Box<RawValue>>;

/// The 422 for a body that repeats an object key: the field is the path of the object
/// that repeats it, from the body's root (`params.to: repeats key "iban"`; `body` for the
/// body itself). Readers disagree on which value a repeated key has (serde_json and
/// Python keep the last, others the first), so what the operator is shown could differ
/// from what the tool gets: such a body is refused rather than read either way.
pub fn repeated_key_error(r: &python::json::RepeatedKey) -> ApiError {
    let path = r.path();
    let field = if path.is_empty() {
        "body".to_owned()
    } else {
        path
    };
    ApiError::field(field, r.reason())
}

/// The 422 naming the first key of `keys` not in `known`, if any.
pub fn unknown_field<'a>(
    mut keys: impl Iterator<Item = &'a String>,
    at: &str,
    known: &[&str],
) -> Result<(), ApiError> {
    match keys.find(|k| !known.contains(&k.as_str())) {
        Some(unknown) => Err(ApiError::field(
            format!("{at}{unknown}"),
            format!("is not a known field (known: {})", known.join(", ")),
        )),
        None => Ok(()),
    }
}

/// The body as a JSON object whose keys are all in `known`, repeating no key anywhere
/// (see [`repeated_key_error`]: serde_json would silently keep the last value).
pub fn object(bytes: &[u8], known: &[&str]) -> Result<Map<String, Value>, ApiError> {
    let body: Map<String, Value> = serde_json::from_slice(bytes).map_err(not_an_object)?;
    strictly_readable(bytes)?;
    unknown_field(body.keys(), "", known)?;
    Ok(body)
}

/// The body as its members, raw, repeating no key anywhere, for [`read`]. Refused as
/// [`object`] refuses it: read whole first, so a number out of range is a body that is
/// not JSON (400) here too.
pub fn strict_object(bytes: &[u8]) -> Result<RawObject, ApiError> {
    serde_json::from_slice::<Map<String, Value>>(bytes).map_err(not_an_object)?;
    strictly_readable(bytes)?;
    serde_json::from_slice(bytes).map_err(not_an_object)
}

fn not_an_object(e: serde_json::Error) -> ApiError {
    if e.is_data() {
        ApiError::field("body", "must be a JSON object")
    } else {
        ApiError::MalformedJson(e.to_string())
    }
}

/// Refuses a body that repeats a key, or that the strict reader cannot read.
fn strictly_readable(bytes: &[u8]) -> Result<(), ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    match python::json::repeated_key(text) {
        Ok(None) => Ok(()),
        Ok(Some(r)) => Err(repeated_key_error(&r)),
        // What serde_json takes and the strict reader does not is nesting past
        // `python::json::MAX_DEPTH` (serde_json allows 128): refused, as docs/security.md
        // promises for every body, rather than read without the check.
        Err(e) => Err(ApiError::field("body", e.to_string())),
    }
}

/// A string field of at most `max` characters; `null` counts as absent.
pub fn text(body: &Map<String, Value>, name: &str, max: usize) -> Result<Option<String>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > max => Err(ApiError::field(
            name,
            format!("must be at most {max} characters"),
        )),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::field(name, "must be a string")),
    }
}

/// Free text shown to the operator: other invisible characters are shown as escapes, NUL
/// and ESC are refused (see [`text::has_nul_or_esc`]).
pub fn free_text(value: Option<String>, name: &str) -> Result<Option<String>, ApiError> {
    match value {
        Some(v) if text::has_nul_or_esc(&v) => Err(ApiError::field(
            name,
            "must not contain NUL or ESC characters",
        )),
        v => Ok(v),
    }
}

/// The fields `T` declares, in their order: serde's own list, so a body's struct is the
/// one place its fields are named.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    // It fails by design: the list is all it is for.
    let _ = T::deserialize(FieldNames(&mut fields));
    fields
}

/// Reads `raw` as `T`, whose fields are the only ones it may have. The fields are read in
/// `T`'s order whatever order the agent wrote them in, an absent one as `null`, so the
/// same body always names the same field at fault, and a required one can say so in its
/// own words. A refusal names the field (with `at` before it: `call.` inside `call`).
pub fn read<T: DeserializeOwned>(raw: &RawObject, at: &str) -> Result<T, ApiError> {
    let fields = fields_of::<T>();
    unknown_field(raw.keys(), at, fields)?;
    let values = fields
        .iter()
        .map(|f| (*f, raw.get(*f).map_or(RawValue::NULL, |v| &**v)));
    let map = MapDeserializer::<_, serde_json::Error>::new(values);
    serde_path_to_error::deserialize(map).map_err(|e| {
        let field = format!("{at}{}", e.path());
        ApiError::field(field, reason(e.inner()))
    })
}

/// The words of a refusal without serde_json's ` at line 1 column 7`: the field reads
/// one value, so the place in it says nothing.
fn reason(e: &serde_json::Error) -> String {
    let words = e.to_string();
    let place = format!(" at line {} column {}", e.line(), e.column());
    match words.strip_suffix(&place) {
        Some(bare) if e.line() > 0 => bare.to_owned(),
        _ => words,
    }
}

/// A deserializer that only notes the fields a struct asks for.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("only the field names were asked for"))
    }

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// A body as its members, raw: refused when it is not a JSON object (400 when not JSON
/// at all) or repeats a key. A body the strict reader cannot read is left to the field
/// checks: every value in it is read strictly, and they name the field at fault.
pub fn raw_object(bytes: &[u8]) -> Result<RawObject, ApiError> {
    let body: RawObject = serde_json::from_slice(bytes).map_err(not_an_object)?;
    if let Ok(Ok(Some(r))) = std::str::from_utf8(bytes).map(python::json::repeated_key) {
        return Err(repeated_key_error(&r));
    }
    Ok(body)
}

/// A `callback_url` as stored: an http(s) URL under one of the agent's prefixes.
pub fn allowed_callback_url(u: &str, agent: &Agent) -> Result<String, ApiError> {
    let url = Url::parse(u)
        .ok()
        .filter(|p| matches!(p.scheme(), "http" | "https"))
        .ok_or_else(|| ApiError::field("callback_url", "must be an http(s) URL"))?;
    if let Some(reason) = callback_path_refusal(u, &url) {
        return Err(ApiError::field("callback_url", reason));
    }
    if agent.allows_callback(&url) {
        Ok(url.to_string())
    } else {
        Err(ApiError::field(
            "callback_url",
            "is not under any of this agent's callback_url_prefixes",
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Sample {
        #[serde(deserialize_with = "crate::api::field::tool")]
        #[allow(dead_code)]
        tool: crate::domain::ids::ToolName,
        #[serde(default, deserialize_with = "crate::api::field::flag")]
        #[allow(dead_code)]
        flag: bool,
    }

    fn refusal(body: &str) -> String {
        match read::<Sample>(&raw_object(body.as_bytes()).expect("an object"), "at.") {
            Err(ApiError::InvalidField { field, reason }) => format!("{field}: {reason}"),
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn fields_are_read_in_declaration_order_in_the_apis_words() {
        assert_eq!(fields_of::<Sample>(), ["tool", "flag"]);
        // Absent counts as null, and a required field says so in its own words.
        assert_eq!(refusal(r#"{}"#), "at.tool: is required");
        assert_eq!(refusal(r#"{"tool": null}"#), "at.tool: is required");
        // The first field at fault in the struct's order, whatever the body's order.
        assert_eq!(
            refusal(r#"{"flag": 1, "tool": 2}"#),
            "at.tool: must be a string"
        );
        // No serde_json position after the words.
        assert_eq!(
            refusal(r#"{"tool": "t", "flag": "yes"}"#),
            "at.flag: must be true or false"
        );
        assert_eq!(
            refusal(r#"{"tool": "t", "x": 1}"#),
            "at.x: is not a known field (known: tool, flag)"
        );
        assert!(read::<Sample>(&raw_object(br#"{"tool": "t"}"#).expect("object"), "").is_ok());
    }
}
