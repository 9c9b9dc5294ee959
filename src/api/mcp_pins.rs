//! `POST /v1/mcp/servers/{server}/tools`: an MCP gateway sends each `tools/list` result
//! of its upstream server and hears, tool by tool, which it may offer (issue 48, "no rug
//! pulls"). What the service does with it is `service::pins`.

use std::collections::HashMap;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::de::{Deserializer, Error};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::AppState;
use super::body::{read, strict_object};
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::field::Route;
use super::limits::rate_limit;
use crate::domain::limits::MAX_LISTED_TOOLS;
use crate::domain::tool_pin::{
    MAX_SERVER_NAME_CHARS, MAX_TOOL_NAME_CHARS, PendingWhy, PinMode, ServerName, ToolDefinition,
};
use crate::service::ToolListing;
use crate::storage::pins::ListedTool;

/// One `tools/list` result of the upstream MCP server, as the gateway got it. `null`
/// counts as absent; unknown fields and repeated keys (at any depth) are refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({
    "tools": [{"name": "read_file", "description": "Read a file.",
               "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}},
                               "required": ["path"]},
               "annotations": {"readOnlyHint": true}}],
    "pin": "first"
})))]
pub struct ToolListingBody {
    /// The `tools` of the `tools/list` result, each exactly as the server sent it (at
    /// most 1,000; names distinct). Pinned: `name`, `title`, `description`,
    /// `inputSchema`, `outputSchema` and `annotations`; other members are not.
    #[serde(deserialize_with = "required_tools")]
    #[schema(value_type = Vec<ListedToolObject>, max_items = 1000)]
    pub tools: Value,
    /// How the server's first listing is taken: `first` (default) allows it as listed
    /// and announces it in the chat; `strict` holds every tool until an approver allows
    /// the listing. Later listings are not affected.
    #[schema(inline)]
    pub pin: Option<PinField>,
    /// The route whose approvers allow held tools (and whose chat is told). Default:
    /// the agent's `default_route`.
    #[schema(inline)]
    pub route: Option<Route>,
}

/// `tools`: required, an array.
fn required_tools<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Err(D::Error::custom(
            "is required (the tools of a tools/list result, as an array)",
        )),
        v @ Value::Array(_) => Ok(v),
        _ => Err(D::Error::custom(
            "must be an array (the tools of a tools/list result)",
        )),
    }
}

/// A tool of a `tools/list` result (MCP's `Tool`): a `name`, and whatever else the
/// server sent.
pub struct ListedToolObject;

impl ToSchema for ListedToolObject {}

impl PartialSchema for ListedToolObject {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "name",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_TOOL_NAME_CHARS)),
            )
            .required("name")
            .description(Some(
                "A tool of an MCP tools/list result, as the server sent it.",
            ))
            .into()
    }
}

/// `pin`: `first` or `strict`.
#[derive(Debug, Clone, Copy)]
pub struct PinField(pub PinMode);

impl<'de> Deserialize<'de> for PinField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: String = super::field::value(d, "\"first\" or \"strict\"")?;
        PinMode::parse(&s)
            .map(PinField)
            .ok_or_else(|| D::Error::custom("must be \"first\" or \"strict\""))
    }
}

impl ToSchema for PinField {}

impl PartialSchema for PinField {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["first", "strict"]))
            .into()
    }
}

/// The answer: each listed tool, in the order given.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolVerdicts {
    pub tools: Vec<ToolVerdict>,
}

/// What one listed tool is.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolVerdict {
    pub name: String,
    /// SHA-256 (hex) of the canonical JSON of its pinned members (`json.dumps(...,
    /// sort_keys=True)` of `name`, `title`, `description`, `inputSchema`,
    /// `outputSchema`, `annotations`, those present).
    pub definition_hash: String,
    pub state: ToolState,
    /// Why it is held, or that it was allowed as a first listing, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `allowed`: offer it and forward its calls. `quarantined`: hide it, and refuse its
/// calls until an approver allows this definition in the chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolState {
    Allowed,
    Quarantined,
}

/// `POST /v1/mcp/servers/{server}/tools`
#[utoipa::path(
    post,
    path = "/v1/mcp/servers/{server}/tools",
    operation_id = "record_mcp_tools",
    tag = "mcp",
    params(("server" = String, Path, description = "The upstream MCP server's name, as the gateway calls it.",
        min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9._-]+$")),
    request_body = ToolListingBody,
    responses(
        (status = 200, description = "Each listed tool, in the order given: `allowed` or `quarantined`.", body = ToolVerdicts),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name (`server`, `tools`, `tools[3].name`, `pin`, `route`).", body = crate::api::error::ErrorBody),
        (status = 429, description = "`rate_limited`: over the agent's `requests_per_minute`.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: the database does not answer; nothing was recorded.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn record(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    path: Result<Path<String>, PathRejection>,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    rate_limit(&state, &agent)?;
    let server = match path {
        Ok(Path(s)) => ServerName::parse(&s).map_err(|why| ApiError::field("server", why))?,
        Err(_) => {
            return Err(ApiError::field(
                "server",
                format!(
                    "must be 1 to {MAX_SERVER_NAME_CHARS} characters of A-Z, a-z, 0-9, '.', '_' and '-'"
                ),
            ));
        }
    };
    let listing = parse(&bytes, server)?;
    let listed = state.service.record_tool_listing(&agent, listing).await?;
    let tools = listed.iter().map(verdict).collect();
    Ok(Json(ToolVerdicts { tools }).into_response())
}

/// Parses and checks a body, naming the first field at fault.
pub fn parse(bytes: &[u8], server: ServerName) -> Result<ToolListing, ApiError> {
    let body: ToolListingBody = read(&strict_object(bytes)?, "")?;
    let Value::Array(listed) = body.tools else {
        return Err(ApiError::field("tools", "must be an array"));
    };
    if listed.len() > MAX_LISTED_TOOLS {
        return Err(ApiError::field(
            "tools",
            format!("must hold at most {MAX_LISTED_TOOLS} tools"),
        ));
    }
    let mut tools = Vec::with_capacity(listed.len());
    let mut seen: HashMap<String, usize> = HashMap::with_capacity(listed.len());
    for (i, tool) in listed.iter().enumerate() {
        let def = ToolDefinition::from_listed(tool).map_err(|why| {
            // `why` is ".name: ..." or ": ...": the place inside the tool, then the words.
            let (place, words) = why.split_once(": ").unwrap_or(("", &why));
            ApiError::field(format!("tools[{i}]{place}"), words.to_owned())
        })?;
        if let Some(first) = seen.insert(def.name().to_owned(), i) {
            return Err(ApiError::field(
                format!("tools[{i}].name"),
                format!("repeats the name of tools[{first}]"),
            ));
        }
        tools.push(def);
    }
    Ok(ToolListing {
        server,
        tools,
        mode: body.pin.map_or(PinMode::First, |p| p.0),
        route: body.route.map(|r| r.0),
    })
}

/// What the gateway is told of one listed tool.
fn verdict(t: &ListedTool) -> ToolVerdict {
    let reason = match (&t.pending, t.first_listing) {
        (None, true) => Some("first listing, allowed as listed".to_owned()),
        (None, false) => None,
        (Some(q), _) => Some(
            match q.why {
                PendingWhy::FirstListing => {
                    "first listing, held until an approver allows it (strict pinning)"
                }
                PendingWhy::New => "a tool not listed before, held until an approver allows it",
                PendingWhy::Changed => {
                    "its definition changed since it was allowed, held until an approver \
                     allows the new one"
                }
            }
            .to_owned(),
        ),
    };
    ToolVerdict {
        name: t.definition.name().to_owned(),
        definition_hash: t.definition.hash().to_owned(),
        state: if t.allowed {
            ToolState::Allowed
        } else {
            ToolState::Quarantined
        },
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(body: &str) -> String {
        match parse(body.as_bytes(), ServerName::parse("fs").unwrap()) {
            Err(ApiError::InvalidField { field, reason }) => format!("{field}: {reason}"),
            Err(other) => format!("{other:?}"),
            Ok(_) => "accepted".into(),
        }
    }

    #[test]
    fn a_listing_is_refused_naming_the_field_at_fault() {
        assert_eq!(
            refusal(r#"{}"#),
            "tools: is required (the tools of a tools/list result, as an array)"
        );
        assert_eq!(
            refusal(r#"{"tools": {}}"#),
            "tools: must be an array (the tools of a tools/list result)"
        );
        assert_eq!(
            refusal(r#"{"tools": [{"name": "a"}, {"title": "x"}]}"#),
            "tools[1].name: is required and must be a string"
        );
        assert_eq!(
            refusal(r#"{"tools": [7]}"#),
            "tools[0]: must be a JSON object (a tool of a tools/list result)"
        );
        assert_eq!(
            refusal(r#"{"tools": [{"name": "a"}, {"name": "a"}]}"#),
            "tools[1].name: repeats the name of tools[0]"
        );
        assert_eq!(
            refusal(r#"{"tools": [], "pin": "loose"}"#),
            "pin: must be \"first\" or \"strict\""
        );
        assert_eq!(
            refusal(r#"{"tools": [], "extra": 1}"#),
            "extra: is not a known field (known: tools, pin, route)"
        );
        let many = format!(
            r#"{{"tools": [{}]}}"#,
            vec![r#"{"name": "x"}"#; 1001].join(",")
        );
        assert_eq!(refusal(&many), "tools: must hold at most 1000 tools");
        assert_eq!(
            refusal(r#"{"tools": [{"name": "a"}], "pin": "strict", "route": null}"#),
            "accepted"
        );
    }
}
