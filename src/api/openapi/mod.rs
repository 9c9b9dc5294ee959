//! The OpenAPI 3.1 document of the agents' API, served at `GET /openapi.json`.
//!
//! Generated from the code: the paths from the handlers' `#[utoipa::path]` attributes,
//! the request bodies from the structs the handlers read them into (each declared once
//! beside its handler, its fields' limits on their types in `api::field`), the
//! responses from the types the handlers serialise and the shared refusals
//! (`api::error::Unauthenticated`, `BodyRefused`). A body schema never refuses what its
//! reader accepts (the API fuzz test checks that every body the schema refuses is
//! refused). `bodies.rs` documents AI-Parrot's `HumanInteraction`, which the domain
//! reads by hand; `fields.rs` the single fields the derived types name through
//! `schema_with`, and the `?wait=` queries.

mod bodies;
mod fields;
#[cfg(test)]
mod tests;

pub use bodies::HumanInteraction;
pub use fields::{
    ChangePoll, LongPoll, any_value_schema, approved_scope_schema, effect_schema,
    human_responses_schema, interaction_status_schema, interaction_type_schema, run_status_schema,
    status_schema, timeout_action_schema, via_schema,
};

use std::sync::LazyLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::Components;
use utoipa::openapi::schema::{Object, ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use super::confirmations::{self, CreateConfirmationBody};
use super::error::{ConflictBody, ErrorBody, InteractionConflictBody};
use super::interactions::{self, CreateInteractionBody, NotificationBody, NotificationSent};
use super::record::InteractionView;
use crate::domain::audit::AuditEvent;

/// The name of the bearer-token scheme; the `/v1` handlers' `security(("bearer" = []))`
/// name it (utoipa wants a literal there).
pub const BEARER: &str = "bearer";
/// The scheme `GET /metrics` names: its own token, when `[metrics] token_env` is set.
pub const METRICS_BEARER: &str = "metrics_bearer";

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
        super::listing::confirmations,
        super::listing::windows,
        confirmations::events,
        super::run_reports::report,
        interactions::create,
        interactions::get,
        interactions::withdraw,
        super::events::stream,
        interactions::notify,
        super::grants::create,
        super::grants::check,
        super::grants::list,
        super::grants::revoke,
        super::mcp_pins::record,
        super::healthz,
        super::metrics::serve,
        serve,
    ),
    components(schemas(
        CreateConfirmationBody,
        CreateInteractionBody,
        HumanInteraction,
        NotificationBody,
        NotificationSent,
        super::grants::CreateGrantBody,
        super::run_reports::OutcomeBody,
        super::grants::GrantView,
        super::grants::GrantAnswer,
        super::grants::GrantCheckView,
        super::grants::GrantList,
        super::listing::ConfirmationList,
        super::listing::WindowView,
        super::listing::WindowList,
        super::mcp_pins::ToolListingBody,
        super::mcp_pins::ToolVerdicts,
        InteractionView,
        ErrorBody,
        ConflictBody,
        InteractionConflictBody,
        EventList,
        Health,
        HealthConfig
    )),
    modifiers(&BearerAuth),
    tags(
        (name = "confirmations", description = "Ask, read, long-poll, withdraw, and report \
            what happened when the confirmed call ran."),
        (name = "interactions", description = "AI-Parrot's human interactions: ask, read, \
            long-poll, withdraw, and stream answers and status changes."),
        (name = "notifications", description = "One-way messages to a route or a person."),
        (name = "grants", description = "AI-Parrot's GrantGuard grants, durable: ask for \
            one, present an approval, check, list and revoke."),
        (name = "mcp", description = "MCP gateways: each upstream tools/list result \
            recorded against the tools' pinned definitions; new and changed ones held until \
            an approver allows them."),
        (name = "service", description = "Health, metrics and this document."),
    )
)]
pub struct ApiDoc;

/// Registers the bearer-token schemes the `/v1` operations and `/metrics` name.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The token of one configured agent (the variable its `token_env` names).",
            ))
            .build();
        let metrics = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "The metrics token (the variable `[metrics] token_env` names); \
                 GET /metrics is open when none is configured.",
            ))
            .build();
        let components = openapi.components.get_or_insert_with(Components::new);
        components.add_security_scheme(BEARER, SecurityScheme::Http(scheme));
        components.add_security_scheme(METRICS_BEARER, SecurityScheme::Http(metrics));
    }
}

/// The document as JSON text, built once.
pub fn document() -> &'static str {
    static DOC: LazyLock<String> = LazyLock::new(|| {
        // Serialising a tree of plain maps, strings and numbers cannot fail.
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serialises");
        camel_case_links(&mut doc);
        merge_nullable(&mut doc);
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

/// utoipa writes a body field of its own type, inlined, as `oneOf` an item or two: the
/// field's description around the type's schema, and `{"type": "null"}` beside it when
/// the field may be null. Written as the one schema they mean (the type's, with the
/// field's description and default, and `null` among its types and values), as the
/// hand-built bodies were; a `oneOf` of anything else is left as it is.
fn merge_nullable(v: &mut Value) {
    match v {
        Value::Array(items) => items.iter_mut().for_each(merge_nullable),
        Value::Object(map) => {
            map.values_mut().for_each(merge_nullable);
            let Some(Value::Array(items)) = map.get("oneOf") else {
                return;
            };
            let null = serde_json::json!({"type": "null"});
            let (may_be_null, item) = match items.as_slice() {
                [item] => (false, item),
                [first, item] if *first == null => (true, item),
                _ => return,
            };
            let Some(Value::String(kind)) = item.get("type") else {
                return;
            };
            let mut merged = item.as_object().cloned().unwrap_or_default();
            if may_be_null {
                merged.insert("type".into(), serde_json::json!([kind, "null"]));
                if let Some(Value::Array(values)) = merged.get_mut("enum") {
                    values.push(Value::Null);
                }
            }
            map.remove("oneOf");
            for (k, field_says) in std::mem::take(map) {
                merged.insert(k, field_says);
            }
            *map = merged;
        }
        _ => {}
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

/// `GET /healthz`: `{"status": "ok", "version": "1.0.0", "commit": "0123456789ab",
/// "config": {...}}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(schema_with = ok_schema)]
    pub status: String,
    /// This replica's release (CHANGELOG.md names each).
    #[schema(example = "1.0.0")]
    pub version: String,
    /// The commit it was built from in hex (12 digits as git gives it; 7 to 40 when the
    /// build was given `HITL_BUILD_COMMIT`), or `unknown`.
    #[schema(example = "0123456789ab")]
    pub commit: String,
    pub config: HealthConfig,
}

/// What the live replicas' configurations say about who may decide
/// ([`crate::service::ConfigReport`]). While they differ, an operator's action counts only
/// if every one allows it.
#[derive(Serialize, ToSchema)]
pub struct HealthConfig {
    /// This replica's configuration: the first 12 hex digits of its fingerprint.
    pub fingerprint: String,
    /// Live replicas, this one included (1 with SQLite).
    pub replicas: u64,
    /// Distinct configurations among them.
    pub configurations: u64,
    /// Whether they all run this replica's configuration.
    pub agree: bool,
    /// What differs, by name and without ids (`route 'ops': approvers`); the log says
    /// the values.
    pub differences: Vec<String>,
}

fn ok_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["ok"]))
        .build()
}
