//! One adapter per host: its event names, its events read into a [`HookEvent`], and an
//! [`Answer`] written back as that host reads it. Each host's documentation is the
//! specification; the fixtures of tests/fixtures/hooks/ are its examples.
//!
//! [`HookEvent`]: super::event::HookEvent
//! [`Answer`]: super::host::Answer

pub mod claude;
pub mod codex;
pub mod cursor;
pub mod gemini;

use std::collections::BTreeMap;

use serde_json::Value;
use serde_json::value::RawValue;

use super::clean;
use super::event::Stage;
use super::host::Host;

/// The event `name` of `host` read as `T`, and whether it comes after the call (an
/// after event in `after`). A before event is read strictly unless told otherwise:
/// fields outside `known` refuse it.
pub(super) fn read<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    host: Host,
    name: &str,
    after: &[&str],
    strict: bool,
    known: &[&str],
) -> Result<(T, Stage), String> {
    let stage = if after.contains(&name) {
        Stage::After
    } else {
        Stage::Before
    };
    if strict && stage == Stage::Before {
        only_known_fields(bytes, host.display(), name, known)?;
    }
    let event = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdin is not a {} hook event in JSON: {e}", host.display()))?;
    Ok((event, stage))
}

/// Refuses a field outside `known`: a host that sends something this hook does not
/// understand may be saying something about the call the approvers would not see.
pub(super) fn only_known_fields(
    bytes: &[u8],
    host: &str,
    event: &str,
    known: &[&str],
) -> Result<(), String> {
    let fields: BTreeMap<String, &RawValue> = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdin is not a {host} hook event in JSON: {e}"))?;
    let unknown: Vec<String> = fields
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("'{}'", clean(k, 64)))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the {host} {event} event has {} this hook does not know ({}), so it cannot show \
         the approvers the whole call; update hitl-telegram, or run the hook with \
         --ignore-unknown-fields",
        if unknown.len() == 1 {
            "a field"
        } else {
            "fields"
        },
        unknown.join(", ")
    ))
}

/// Checks that a tool input is JSON the service can read (RawValue checks the syntax
/// only; this also refuses lone surrogates and absurd nesting, which no input has).
pub(super) fn checked_input(raw: &RawValue) -> Result<(), String> {
    serde_json::from_str::<Value>(raw.get())
        .map(|_| ())
        .map_err(|e| format!("the event's tool input is not valid JSON: {e}"))
}

/// Refuses an empty tool name.
pub(super) fn named(tool: &str) -> Result<(), String> {
    if tool.trim().is_empty() {
        return Err("the event's tool name is empty".into());
    }
    Ok(())
}

/// The event's `hook_event_name`, read before (and whatever) the rest of it is.
pub(super) fn event_name(bytes: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Named {
        hook_event_name: Option<String>,
    }
    serde_json::from_slice::<Named>(bytes)
        .ok()
        .and_then(|n| n.hook_event_name)
}

/// `{"key": value}` as raw JSON, the value's text as it is.
pub(super) fn object_of(pairs: &[(&str, &RawValue)]) -> Result<Box<RawValue>, String> {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}:{}", Value::from(*k), v.get()))
        .collect();
    RawValue::from_string(format!("{{{}}}", body.join(",")))
        .map_err(|e| format!("cannot build the parameters: {e}"))
}

/// `object` (raw JSON text of an object) with `key` added last, its other bytes as they
/// are: what the hook adds to the parameters because it changes what runs (Codex's
/// `approval_context`, a Cursor MCP call's `mcp_server`). Refused when `object` is no
/// object or already has `key`: the agent's own value must never pass for the host's.
pub(super) fn with_key(
    object: &RawValue,
    key: &str,
    value: &RawValue,
) -> Result<Box<RawValue>, String> {
    let fields: BTreeMap<String, &RawValue> = serde_json::from_str(object.get())
        .map_err(|e| format!("the call's input is not a JSON object: {e}"))?;
    if fields.contains_key(key) {
        return Err(format!(
            "the call's input already has a key '{}', which hitl-telegram adds itself",
            clean(key, 64)
        ));
    }
    let text = object.get().trim();
    let inner = text[1..text.len() - 1].trim();
    let added = format!("{}:{}", Value::from(key), value.get());
    let whole = if inner.is_empty() {
        format!("{{{added}}}")
    } else {
        format!("{{{inner},{added}}}")
    };
    RawValue::from_string(whole).map_err(|e| format!("cannot build the parameters: {e}"))
}

/// A string as raw JSON.
pub(super) fn raw_string(s: &str) -> Result<Box<RawValue>, String> {
    serde_json::value::to_raw_value(s).map_err(|e| format!("cannot build the parameters: {e}"))
}

/// A tool's response as the text a report may carry: a string as it is, anything else
/// as its JSON text, nothing for `null` or an empty string.
pub(super) fn response_text(raw: &RawValue) -> Option<String> {
    let raw = raw.get().trim();
    let text = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Null) => return None,
        Ok(Value::String(s)) => s,
        _ => raw.to_owned(),
    };
    (!text.trim().is_empty()).then_some(text)
}
