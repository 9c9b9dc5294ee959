//! The fields of the request bodies: how each is read (in the words the API has always
//! used; a body's struct names them with `deserialize_with`) and documented (with the
//! limits it is read with, so a limit changes in one place).
//!
//! Every reader here is handed `null` for an absent field (see [`super::body::read`]):
//! an optional one reads it as absent, a required one says it is required.

use serde::de::{Deserialize, Deserializer, Error};
use serde_json::value::RawValue;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::edit::ArgsSchema;
use crate::domain::grant::Scope;
use crate::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use crate::domain::limits::{
    MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_NOTIFICATION_CHARS, MAX_PARAM_KEYS,
    MAX_RECIPIENT_CHARS, MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS,
};
use crate::domain::mcp_call::{Annotations, ServerName};
use crate::domain::python::value::PyDict;
use crate::domain::run_report::MAX_REPORT_CHARS;
use crate::domain::schema::name_schema;
use crate::domain::{python, text};

/// A `T`, or "must be `expected`".
pub fn value<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
    expected: &str,
) -> Result<T, D::Error> {
    T::deserialize(d).map_err(|_| D::Error::custom(format!("must be {expected}")))
}

/// A domain value its `parse` checks, refused in its own words.
fn parsed<T, E: Error>(
    s: Option<String>,
    parse: impl Fn(&str) -> Result<T, crate::domain::ids::InvalidValue>,
) -> Result<Option<T>, E> {
    s.map(|s| parse(&s).map_err(|e| E::custom(e.0))).transpose()
}

/// `tool`: required, a [`ToolName`].
pub fn tool<'de, D: Deserializer<'de>>(d: D) -> Result<ToolName, D::Error> {
    parsed(value(d, "a string")?, ToolName::parse)?.ok_or_else(|| D::Error::custom("is required"))
}

/// `owner_id`: an [`OwnerId`]; absent, the caller's default.
pub fn owner<'de, D: Deserializer<'de>>(d: D) -> Result<Option<OwnerId>, D::Error> {
    parsed(value(d, "a string")?, OwnerId::parse)
}

/// `idempotency_key`: an [`IdempotencyKey`].
pub fn idempotency_key<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<IdempotencyKey>, D::Error> {
    parsed(value(d, "a string")?, IdempotencyKey::parse)
}

/// `grant_scope`: a [`Scope`].
pub fn grant_scope<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Scope>, D::Error> {
    parsed(value(d, "a string such as \"tool:deploy\"")?, Scope::parse)
}

/// `server`: a [`ServerName`], the MCP server a gateway sends the call to.
pub fn server<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ServerName>, D::Error> {
    parsed(value(d, "a string")?, ServerName::parse)
}

/// `annotations`: an object of booleans ([`Annotations`]); a refusal names the member at
/// fault.
pub fn annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Annotations>, D::Error> {
    let v: Option<serde_json::Value> = value(d, "an object of booleans")?;
    v.map(|v| {
        Annotations::from_value(&v).map_err(|e| match e.key {
            Some(key) => D::Error::custom(format!(
                "member \"{}\": {}",
                text::visible(&key, text::Layout::Line),
                e.why
            )),
            None => D::Error::custom(e.why),
        })
    })
    .transpose()
}

/// `true` or `false`; absent, `false`.
pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(value::<D, Option<bool>>(d, "true or false")?.unwrap_or(false))
}

/// A number of seconds, checked against the configuration once read.
pub fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    value(d, "a number")
}

/// `window_seconds` of a call: whole seconds up to [`MAX_WINDOW_SECONDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window(pub u64);

/// Reads a [`Window`] as a number, so `600.0` (what Python's json.dumps writes for a
/// float that holds a whole number) counts as the integer it is, as JSON Schema says.
pub fn window<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Window>, D::Error> {
    match value::<D, Option<f64>>(d, "an integer >= 0")? {
        None => Ok(None),
        Some(w) if w.is_finite() && w >= 0.0 && w.fract() == 0.0 => {
            if w > MAX_WINDOW_SECONDS as f64 {
                return Err(D::Error::custom(format!(
                    "must be at most {MAX_WINDOW_SECONDS} (366 days)"
                )));
            }
            Ok(Some(Window(w as u64)))
        }
        Some(_) => Err(D::Error::custom("must be an integer >= 0")),
    }
}

impl ToSchema for Window {}

impl PartialSchema for Window {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0))
            .maximum(Some(MAX_WINDOW_SECONDS))
            .into()
    }
}

/// `args_schema`: the tool's argument schema, checked as a JSON Schema.
pub fn args_schema<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ArgsSchema>, D::Error> {
    let raw: Option<Box<RawValue>> = value(d, "a JSON object")?;
    raw.map(|r| ArgsSchema::parse(r.get()).map_err(|e| D::Error::custom(e.0)))
        .transpose()
}

/// `block`: answer with the final decision; `suspend`: answer at once with the pending
/// record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitMode {
    #[default]
    Block,
    Suspend,
}

/// `wait`: `"block"` (the default) or `"suspend"`.
pub fn wait<'de, D: Deserializer<'de>>(d: D) -> Result<WaitMode, D::Error> {
    const WORDS: &str = "\"block\" or \"suspend\"";
    match value::<D, Option<String>>(d, WORDS)?.as_deref() {
        None | Some("block") => Ok(WaitMode::Block),
        Some("suspend") => Ok(WaitMode::Suspend),
        Some(_) => Err(D::Error::custom(format!("must be {WORDS}"))),
    }
}

/// A call's parameters: a JSON object, kept exactly as the agent sent it.
pub struct Params {
    pub dict: PyDict,
    /// The object as sent, byte for byte.
    pub json: String,
}

impl<'de> Deserialize<'de> for Params {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw: Option<Box<RawValue>> = value(d, "a JSON object")?;
        let raw = raw.ok_or_else(|| D::Error::custom("is required (a JSON object)"))?;
        let dict = python::json::parse_object(raw.get())
            .map_err(|e| D::Error::custom(format!("must be a JSON object: {e}")))?;
        let keys = dict.count_keys();
        if keys > MAX_PARAM_KEYS {
            return Err(D::Error::custom(format!(
                "has {keys} keys; the limit is {MAX_PARAM_KEYS}"
            )));
        }
        Ok(Params {
            dict,
            json: raw.get().to_owned(),
        })
    }
}

impl ToSchema for Params {}

impl PartialSchema for Params {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .description(Some(format!(
                "The exact call parameters, returned byte for byte when allowed. At most \
                 {MAX_PARAM_KEYS} object keys counted at every depth, nesting at most {} \
                 levels, integers at most {} digits; no object may repeat a key.",
                python::json::MAX_DEPTH,
                python::json::MAX_INT_DIGITS
            )))
            .into()
    }
}

/// A string of at most `max` characters (`shown`: NUL and ESC refused, as the operator
/// is shown it; other invisible characters are shown as escapes).
pub fn bounded<E: Error>(s: String, max: usize, shown: bool) -> Result<String, E> {
    if s.chars().count() > max {
        return Err(E::custom(format!("must be at most {max} characters")));
    }
    if shown && text::has_nul_or_esc(&s) {
        return Err(E::custom("must not contain NUL or ESC characters"));
    }
    Ok(s)
}

/// Declares a text field: a string of at most `max` characters (`min`: its schema's
/// `minLength`, if any), and its schema.
macro_rules! text_field {
    ($(#[$doc:meta])* $name:ident, min = $min:expr, max = $max:expr, shown = $shown:expr $(, format = $format:expr)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name(pub String);

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = $crate::api::field::value(d, "a string")?;
                $crate::api::field::bounded(s, $max, $shown).map($name)
            }
        }

        impl utoipa::ToSchema for $name {}

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                use utoipa::openapi::schema::{ObjectBuilder, Type};
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length($min)
                    .max_length(Some($max))
                    $(.format(Some(utoipa::openapi::schema::SchemaFormat::Custom($format.into()))))?
                    .into()
            }
        }
    };
}

pub(crate) use text_field;

text_field!(
    /// A Python `str.format` briefing template.
    Template, min = None, max = MAX_TEMPLATE_CHARS, shown = true
);
text_field!(
    /// Extra text shown to the operator.
    Context, min = None, max = MAX_CONTEXT_CHARS, shown = true
);
text_field!(
    /// A named Telegram destination.
    Route, min = None, max = MAX_ROUTE_CHARS, shown = false
);
text_field!(
    /// A run's `summary` or `error`, as reported.
    ReportText, min = None, max = MAX_REPORT_CHARS, shown = false
);
text_field!(
    /// A callback URL, before it is checked against the agent's prefixes.
    CallbackUrl, min = None, max = MAX_CALLBACK_URL_CHARS, shown = false, format = "uri"
);

impl ToSchema for WaitMode {}

impl PartialSchema for WaitMode {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["block", "suspend"]))
            .into()
    }
}

/// `recipient`: a `[people]` name, not empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient(pub String);

impl<'de> Deserialize<'de> for Recipient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = bounded(value(d, "a string")?, MAX_RECIPIENT_CHARS, false)?;
        if name.is_empty() {
            return Err(D::Error::custom(
                "must not be empty (a name from the configuration's [people])",
            ));
        }
        Ok(Recipient(name))
    }
}

impl ToSchema for Recipient {}

impl PartialSchema for Recipient {
    fn schema() -> RefOr<Schema> {
        name_schema(MAX_RECIPIENT_CHARS, None)
    }
}

/// A notification's `message`: required, not blank, shown as plain text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message(pub String);

impl<'de> Deserialize<'de> for Message {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let message: Option<String> = value(d, "a string")?;
        let message = message
            .map(|m| bounded(m, MAX_NOTIFICATION_CHARS, true))
            .transpose()?
            .ok_or_else(|| D::Error::custom("is required (a string)"))?;
        if message.trim().is_empty() {
            return Err(D::Error::custom("must not be blank"));
        }
        Ok(Message(message))
    }
}

impl ToSchema for Message {}

impl PartialSchema for Message {
    fn schema() -> RefOr<Schema> {
        name_schema(
            MAX_NOTIFICATION_CHARS,
            Some("The text to post, as plain text: not blank, no NUL or ESC characters."),
        )
    }
}
