//! The OpenAPI 3.1 document of the agents' API, served at `GET /openapi.json`.
//!
//! Generated from the code: the paths from the handlers' `#[utoipa::path]` attributes,
//! the response schemas from the types the handlers serialise
//! ([`RecordView`](super::record::RecordView),
//! [`ErrorBody`], [`AuditEvent`]). The create body is parsed by hand
//! ([`parse_create`](super::confirmations::parse_create)) so that every refusal names its
//! field; its schema is built here from the same constants the parser checks against,
//! so a limit changes in one place.

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AdditionalProperties, KnownFormat, Object, ObjectBuilder, Schema, SchemaFormat, SchemaType,
    Type,
};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Components, RefOr, Required};
use utoipa::{IntoParams, Modify, OpenApi, PartialSchema, ToSchema};

use super::confirmations::{
    self, MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_LONG_POLL_SECONDS, MAX_PARAM_KEYS,
    MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS,
};
use super::error::{ConflictBody, ErrorBody};
use crate::domain::audit::AuditEvent;
use crate::domain::confirmation::{Status, Via};
use crate::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use crate::domain::pyjson;

/// The name of the bearer-token scheme; the `/v1` handlers' `security(("bearer" = []))`
/// name it (utoipa wants a literal there).
pub const BEARER: &str = "bearer";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hitl-telegram agent API",
        description = "Human-in-the-loop approvals for AI agents: ask, and an operator \
                       approves or cancels in Telegram."
    ),
    paths(
        confirmations::create,
        confirmations::get,
        confirmations::withdraw,
        confirmations::events,
        super::healthz,
        serve,
    ),
    components(schemas(CreateConfirmationBody, ErrorBody, ConflictBody, EventList, Health)),
    modifiers(&BearerAuth),
    tags(
        (name = "confirmations", description = "Ask, read, long-poll and withdraw."),
        (name = "service", description = "Health and this document."),
    )
)]
pub struct ApiDoc;

/// Registers the bearer-token scheme the `/v1` operations name.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The token of one configured agent (the variable its `token_env` names).",
            ))
            .build();
        openapi
            .components
            .get_or_insert_with(Components::new)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
    }
}

/// The document as JSON text, built once.
pub fn document() -> &'static str {
    static DOC: LazyLock<String> = LazyLock::new(|| {
        // Serialising a tree of plain maps, strings and numbers cannot fail.
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
        camel_case_links(&mut doc);
        doc.to_string()
    });
    &DOC
}

/// utoipa 5 writes a Link object's fields in snake case (`operation_id`), where OpenAPI
/// says `operationId`; a client following links (schemathesis does) would not see them.
fn camel_case_links(doc: &mut Value) {
    let operations = doc["paths"].as_object_mut().into_iter().flat_map(|paths| {
        paths
            .values_mut()
            .filter_map(Value::as_object_mut)
            .flat_map(|item| item.values_mut())
    });
    let links = operations
        .filter_map(|op| op.get_mut("responses").and_then(Value::as_object_mut))
        .flat_map(|responses| responses.values_mut())
        .filter_map(|r| r.get_mut("links").and_then(Value::as_object_mut))
        .flat_map(|links| links.values_mut())
        .filter_map(Value::as_object_mut);
    for link in links {
        for (from, to) in [
            ("operation_id", "operationId"),
            ("operation_ref", "operationRef"),
            ("request_body", "requestBody"),
        ] {
            if let Some(v) = link.remove(from) {
                link.insert(to.to_owned(), v);
            }
        }
    }
}

/// `GET /openapi.json`
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "openapi",
    tag = "service",
    responses((status = 200, description = "This document.", body = Object)),
)]
pub async fn serve() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], document()).into_response()
}

/// `GET /v1/confirmations/{id}/events`: `{"events": [...]}`, oldest first.
#[derive(Serialize, ToSchema)]
pub struct EventList {
    pub events: Vec<AuditEvent>,
}

/// `GET /healthz`: `{"status": "ok"}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(schema_with = ok_schema)]
    pub status: String,
}

fn ok_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ok"]))
        .build()
}

/// `status` of a record: every [`Status`].
pub fn status_schema() -> Object {
    let all = [
        Status::Pending,
        Status::Confirmed,
        Status::Cancelled,
        Status::Timeout,
    ];
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(all.map(Status::as_str)))
        .description(Some("`allowed` is true only for `confirmed`."))
        .build()
}

/// `via` of a record: every [`Via`], or null while pending.
pub fn via_schema() -> Object {
    let all = [
        Via::Operator,
        Via::Window,
        Via::Timeout,
        Via::Withdrawn,
        Via::FailClosed,
    ];
    let values = all
        .map(|v| Value::from(v.as_str()))
        .into_iter()
        .chain([Value::Null]);
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .enum_values(Some(values))
        .description(Some(
            "How the request reached its outcome; null while pending.",
        ))
        .build()
}

fn nullable(t: Type) -> SchemaType {
    [t, Type::Null].into_iter().collect()
}

/// A string field that may be null or absent (the parser reads `null` as absent).
fn optional_text(min: usize, max: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .min_length((min > 0).then_some(min))
        .max_length(Some(max))
        .description(Some(description))
        .build()
}

/// Documentation of the `POST /v1/confirmations` body; the body itself is read by
/// [`parse_create`](super::confirmations::parse_create).
///
/// Hand-built rather than derived: utoipa's validation attributes take literals only,
/// and these bounds must be the parser's own constants.
pub struct CreateConfirmationBody;

impl ToSchema for CreateConfirmationBody {}

impl PartialSchema for CreateConfirmationBody {
    fn schema() -> RefOr<Schema> {
        let tool = ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(ToolName::MAX_CHARS))
            .description(Some("The tool's name: not blank, no control characters."))
            .build();
        let params = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .description(Some(format!(
                "The exact call parameters, returned byte for byte when allowed. At most \
                 {MAX_PARAM_KEYS} object keys counted at every depth, nesting at most {} \
                 levels, integers at most {} digits.",
                pyjson::MAX_DEPTH,
                pyjson::MAX_INT_DIGITS
            )))
            .build();
        let owner_id = ObjectBuilder::new()
            .schema_type(nullable(Type::String))
            .min_length(Some(1))
            .max_length(Some(OwnerId::MAX_CHARS))
            .default(Some("anonymous".into()))
            .description(Some(
                "The human on whose behalf the agent acts: not blank, no control characters.",
            ))
            .build();
        let window_seconds = ObjectBuilder::new()
            .schema_type(nullable(Type::Integer))
            .minimum(Some(0))
            .maximum(Some(MAX_WINDOW_SECONDS))
            .description(Some(
                "Confirmation window: identical approved calls pass without asking for \
                 this long. Default: the configuration's `default_window_seconds`.",
            ))
            .build();
        let allow_edit = ObjectBuilder::new()
            .schema_type(nullable(Type::Boolean))
            .default(Some(false.into()))
            .description(Some(
                "The tool allows editing; in Telegram it falls back to approve/cancel.",
            ))
            .build();
        let timeout_seconds = ObjectBuilder::new()
            .schema_type(nullable(Type::Number))
            .exclusive_minimum(Some(0))
            .description(Some(
                "How long to wait for a human; at most the configuration's \
                 `max_timeout_seconds`. Default: its `default_timeout_seconds`.",
            ))
            .build();
        let wait = ObjectBuilder::new()
            .schema_type(nullable(Type::String))
            .enum_values(Some([Value::from("block"), "suspend".into(), Value::Null]))
            .default(Some("block".into()))
            .description(Some(
                "`block`: answer with the decision; `suspend`: answer 202 at once with the \
                 pending record.",
            ))
            .build();
        let callback_url = ObjectBuilder::new()
            .schema_type(nullable(Type::String))
            .format(Some(SchemaFormat::Custom("uri".into())))
            .max_length(Some(MAX_CALLBACK_URL_CHARS))
            .description(Some(
                "An http(s) URL under one of the agent's `callback_url_prefixes`; the \
                 outcome is POSTed there, signed.",
            ))
            .build();

        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("tool", tool)
            .required("tool")
            .property("params", params)
            .required("params")
            .property("owner_id", owner_id)
            .property(
                "template",
                optional_text(
                    0,
                    MAX_TEMPLATE_CHARS,
                    "A Python `str.format` briefing template.",
                ),
            )
            .property("window_seconds", window_seconds)
            .property("allow_edit", allow_edit)
            .property("timeout_seconds", timeout_seconds)
            .property("wait", wait)
            .property(
                "route",
                optional_text(
                    0,
                    MAX_ROUTE_CHARS,
                    "A named Telegram destination this agent may use. Default: the \
                     agent's `default_route`.",
                ),
            )
            .property(
                "idempotency_key",
                optional_text(
                    1,
                    IdempotencyKey::MAX_CHARS,
                    "The same agent and key find the same request for 24 h: not blank, no \
                     control characters.",
                ),
            )
            .property(
                "context",
                optional_text(0, MAX_CONTEXT_CHARS, "Extra text shown to the operator."),
            )
            .property("callback_url", callback_url)
            .examples([
                json!({
                    "tool": "transfer", "params": {"to": "ACME", "amount": 1200.5},
                    "owner_id": "alice", "template": "Send {amount:,.2f} EUR to {to}?",
                    "window_seconds": 600
                }),
                json!({
                    "tool": "deploy", "params": {"service": "billing", "replicas": 3},
                    "wait": "suspend", "idempotency_key": "deploy-billing-42",
                    "context": "Friday release"
                }),
            ])
            // Unknown fields are refused, so a typo cannot silently change behaviour.
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "A tool call to confirm. `null` counts as absent; unknown fields are refused.",
            ))
            .into()
    }
}

/// The `?wait=` query of `GET /v1/confirmations/{id}`, bounded by
/// [`MAX_LONG_POLL_SECONDS`].
pub struct LongPoll;

impl IntoParams for LongPoll {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        let wait = ObjectBuilder::new()
            .schema_type(Type::Number)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
            .minimum(Some(0))
            .maximum(Some(MAX_LONG_POLL_SECONDS))
            .build();
        vec![
            ParameterBuilder::new()
                .name("wait")
                .parameter_in(ParameterIn::Query)
                .required(Required::False)
                .description(Some(
                    "Long-poll: answer when the request is terminal or after this many \
                     seconds, whichever comes first.",
                ))
                .schema(Some(wait))
                .build(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        serde_json::from_str(document()).expect("the document is JSON")
    }

    #[test]
    fn the_create_body_is_closed_and_requires_tool_and_params() {
        let doc = doc();
        let body = &doc["components"]["schemas"]["CreateConfirmationBody"];
        assert_eq!(body["additionalProperties"], false);
        assert_eq!(body["required"], serde_json::json!(["tool", "params"]));
    }

    #[test]
    fn links_use_the_openapi_field_names() {
        let doc = doc();
        let created = &doc["paths"]["/v1/confirmations"]["post"]["responses"]["202"];
        let get = &created["links"]["get"];
        assert_eq!(get["operationId"], "get_confirmation");
        assert_eq!(get["parameters"]["id"], "$response.body#/id");
        assert!(get.get("operation_id").is_none());
    }

    #[test]
    fn limits_come_from_the_parser_constants() {
        let doc = doc();
        let props = &doc["components"]["schemas"]["CreateConfirmationBody"]["properties"];
        assert_eq!(props["tool"]["maxLength"], ToolName::MAX_CHARS);
        assert_eq!(props["template"]["maxLength"], MAX_TEMPLATE_CHARS);
        assert_eq!(props["window_seconds"]["maximum"], MAX_WINDOW_SECONDS);
        let wait = &doc["paths"]["/v1/confirmations/{id}"]["get"]["parameters"][1];
        assert_eq!(wait["name"], "wait");
        assert_eq!(wait["schema"]["maximum"], MAX_LONG_POLL_SECONDS);
    }
}
