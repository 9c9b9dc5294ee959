//! One JSON-RPC message as the gateway reads it: what it is (a request, a notification
//! or a response) and the few members the gateway acts on, with the text it arrived
//! as kept whole, so what is merely passed along reaches the other side byte for byte.
//!
//! A line that is not one JSON object, or that repeats a key anywhere, is refused
//! rather than passed on: readers disagree on which value a repeated key has, so the
//! gateway and the upstream could read two different calls out of one line (one the
//! gate saw, one that runs).

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::domain::python;

/// A JSON-RPC id, by its JSON text (`7` and `"7"` are different ids).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(String);

impl Id {
    /// The id as JSON, to put back into a message.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }

    /// An id of the gateway's own requests: a string no host or upstream is likely to
    /// use, and never one they used (see [`super::Router`]).
    pub fn own(n: u64) -> Id {
        Id(format!("\"hitl-gateway-{n}\""))
    }

    /// The id `v` names: a string or a number, else none.
    pub fn of(v: &Value) -> Option<Id> {
        match v {
            Value::String(_) | Value::Number(_) => Some(Id(v.to_string())),
            _ => None,
        }
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A request: it has a method and an id, and wants a response.
    Request { id: Id, method: String },
    /// A notification: a method and no id.
    Notification { method: String },
    /// A response (a `result` or an `error`) to the request `id`.
    Response { id: Id },
}

/// One message: its kind, its members, and the text it came as.
#[derive(Debug, Clone)]
pub struct Message {
    pub kind: Kind,
    pub body: Map<String, Value>,
    pub text: String,
}

/// Why a line is not a message the gateway passes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("repeats the key {0:?}: the gateway and the server could read it differently")]
    RepeatedKey(String),
    #[error("not a JSON-RPC message (an object with a method, or a result or an error)")]
    NotAMessage,
    #[error("a batch (a JSON array) of messages, which MCP no longer has")]
    Batch,
}

impl Unreadable {
    /// JSON-RPC's code for it: -32700 for what is not JSON, -32600 otherwise.
    pub fn code(&self) -> i64 {
        match self {
            Unreadable::NotJson(_) => -32700,
            _ => -32600,
        }
    }
}

impl Message {
    /// Reads one line.
    pub fn parse(line: &str) -> Result<Message, Unreadable> {
        let value: Value =
            serde_json::from_str(line).map_err(|e| Unreadable::NotJson(e.to_string()))?;
        if let Some(repeated) = python::json::repeated_key(line).ok().flatten() {
            return Err(Unreadable::RepeatedKey(repeated.path()));
        }
        let body = match value {
            Value::Object(body) => body,
            Value::Array(_) => return Err(Unreadable::Batch),
            _ => return Err(Unreadable::NotAMessage),
        };
        let id = body.get("id").and_then(Id::of);
        let method = body
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let kind = match (method, id) {
            (Some(method), Some(id)) => Kind::Request { id, method },
            (Some(method), None) if !body.contains_key("id") => Kind::Notification { method },
            (None, Some(id)) if body.contains_key("result") || body.contains_key("error") => {
                Kind::Response { id }
            }
            _ => return Err(Unreadable::NotAMessage),
        };
        Ok(Message {
            kind,
            body,
            text: line.to_owned(),
        })
    }

    /// The method of a request or a notification.
    pub fn method(&self) -> Option<&str> {
        match &self.kind {
            Kind::Request { method, .. } | Kind::Notification { method } => Some(method),
            Kind::Response { .. } => None,
        }
    }

    /// `params`, when it is an object.
    pub fn params(&self) -> Option<&Map<String, Value>> {
        self.body.get("params").and_then(Value::as_object)
    }

    /// `result`, when it is an object.
    pub fn result(&self) -> Option<&Map<String, Value>> {
        self.body.get("result").and_then(Value::as_object)
    }

    /// The progress token a request carries (`params._meta.progressToken`).
    pub fn progress_token(&self) -> Option<Value> {
        self.params()?
            .get("_meta")?
            .get("progressToken")
            .filter(|t| t.is_string() || t.is_number())
            .cloned()
    }
}

/// A response to `id` with `result`.
pub fn response(id: &Id, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.json(), "result": result}).to_string()
}

/// An error response to `id` (`null` when the request's id could not be read).
pub fn error_response(id: Option<&Id>, code: i64, message: &str) -> String {
    let id = id.map_or(Value::Null, Id::json);
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

/// A notification.
pub fn notification(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// A request of the gateway's own.
pub fn request(id: &Id, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.json(), "method": method, "params": params}).to_string()
}

/// A tool result in the words of a refusal: `isError`, one text block.
pub fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// The `tools/call` request `call` with its `arguments` replaced by `arguments`, the
/// approved parameters verbatim (their key order and every digit of their numbers):
/// what the upstream runs is exactly what the decision's args hash covers.
pub fn with_arguments(call: &Message, arguments: &RawValue) -> String {
    #[derive(serde::Serialize)]
    struct Call<'a> {
        jsonrpc: &'a Value,
        id: &'a Value,
        method: &'a Value,
        params: Params<'a>,
    }
    #[derive(serde::Serialize)]
    struct Params<'a> {
        #[serde(flatten)]
        rest: Map<String, Value>,
        arguments: &'a RawValue,
    }
    let mut rest = call.params().cloned().unwrap_or_default();
    rest.remove("arguments");
    let two = Value::String("2.0".into());
    let call = Call {
        jsonrpc: call.body.get("jsonrpc").unwrap_or(&two),
        id: &call.body["id"],
        method: &call.body["method"],
        params: Params { rest, arguments },
    };
    // Values and valid raw JSON: serializing cannot fail.
    serde_json::to_string(&call).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        let m = Message::parse(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#).unwrap();
        assert_eq!(
            m.kind,
            Kind::Request {
                id: Id("7".into()),
                method: "tools/call".into()
            }
        );
        let n = Message::parse(r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#).unwrap();
        assert!(matches!(n.kind, Kind::Notification { .. }));
        let r = Message::parse(r#"{"jsonrpc":"2.0","id":"7","result":{}}"#).unwrap();
        assert_eq!(
            r.kind,
            Kind::Response {
                id: Id("\"7\"".into())
            }
        );
    }

    #[test]
    fn a_line_that_repeats_a_key_or_is_not_a_message_is_refused() {
        let twice = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","name":"write"}}"#;
        assert!(matches!(
            Message::parse(twice),
            Err(Unreadable::RepeatedKey(_))
        ));
        assert!(matches!(Message::parse("{"), Err(Unreadable::NotJson(_))));
        assert_eq!(Message::parse("[]").unwrap_err(), Unreadable::Batch);
        assert_eq!(
            Message::parse(r#"{"id":1}"#).unwrap_err(),
            Unreadable::NotAMessage
        );
        assert_eq!(
            Message::parse(r#"{"id":null,"method":"x"}"#).unwrap_err(),
            Unreadable::NotAMessage
        );
    }

    #[test]
    fn the_forwarded_call_carries_the_approved_arguments_verbatim_and_the_rest_as_sent() {
        let call = Message::parse(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"pay","arguments":{"a":1},"_meta":{"progressToken":"p"}}}"#,
        )
        .unwrap();
        let approved = RawValue::from_string(r#"{"amount": 1000.50, "to": "x"}"#.into()).unwrap();
        let out = with_arguments(&call, &approved);
        assert!(
            out.contains(r#""arguments":{"amount": 1000.50, "to": "x"}"#),
            "{out}"
        );
        let back = Message::parse(&out).unwrap();
        assert_eq!(back.params().unwrap()["name"], "pay");
        assert_eq!(back.progress_token(), Some(json!("p")));
    }
}
