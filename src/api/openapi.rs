//! The OpenAPI 3.1 document of the agents' API, served at `GET /openapi.json`.
//!
//! Generated from the code: the paths from the handlers' `#[utoipa::path]` attributes,
//! the response schemas from the types the handlers serialise
//! ([`RecordView`](super::record::RecordView),
//! [`ErrorBody`], [`AuditEvent`]). The request bodies are parsed by hand
//! ([`parse_create`](super::confirmations::parse_create),
//! [`interactions::parse_create`](super::interactions::parse_create),
//! [`parse_notification`](super::interactions::parse_notification)) so that every refusal
//! names its field; their schemas are built here from the same constants the parsers
//! check against, so a limit changes in one place. A body schema never refuses what its
//! parser accepts (the API fuzz test checks that every body the schema refuses is
//! refused).

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
use utoipa::openapi::{ArrayBuilder, Components, Ref, RefOr, Required};
use utoipa::{IntoParams, Modify, OpenApi, PartialSchema, ToSchema};

use super::confirmations::{
    self, MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_LONG_POLL_SECONDS, MAX_PARAM_KEYS,
    MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS,
};
use super::error::{ConflictBody, ErrorBody, InteractionConflictBody};
use super::interactions::{self, MAX_NOTIFICATION_CHARS, MAX_RECIPIENT_CHARS, NotificationSent};
use super::record::InteractionView;
use crate::domain::audit::AuditEvent;
use crate::domain::confirmation::{Status, Via};
use crate::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use crate::domain::interaction::{
    ConsensusMode, InteractionType, MAX_CONTEXT_CHARS as MAX_INTERACTION_CONTEXT_CHARS,
    MAX_INTERACTION_ID_CHARS, MAX_OPTION_KEY_CHARS, MAX_OPTION_LABEL_CHARS, MAX_OPTIONS,
    MAX_QUESTION_CHARS, MAX_TARGET_HUMANS, Severity, TimeoutAction,
};
use crate::domain::python;

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
        confirmations::events,
        interactions::create,
        interactions::get,
        interactions::withdraw,
        super::events::stream,
        interactions::notify,
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
        (name = "confirmations", description = "Ask, read, long-poll and withdraw."),
        (name = "interactions", description = "AI-Parrot's human interactions: ask, read, \
            long-poll, withdraw, and stream answers and status changes."),
        (name = "notifications", description = "One-way messages to a route or a person."),
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

/// `GET /healthz`: `{"status": "ok", "config": {...}}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    #[schema(schema_with = ok_schema)]
    pub status: String,
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

/// `once` or `window`: how an operator approved; null unless one did.
pub fn approved_scope_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .enum_values(Some([json!("once"), json!("window"), Value::Null]))
        .description(Some(
            "How an operator approved: `once` (no window opened) or `window`; null unless \
             an operator approved.",
        ))
        .build()
}

/// The `call` of a `POST /v1/interactions` body.
fn call_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Object))
        .property(
            "tool",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(crate::domain::ids::ToolName::MAX_CHARS))
                .description(Some(
                    "The tool's name: not blank, no invisible or layout-changing characters.",
                )),
        )
        .required("tool")
        .property(
            "params",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .description(Some("The call's exact parameters; no repeated keys.")),
        )
        .required("params")
        .property(
            "owner_id",
            ObjectBuilder::new()
                .schema_type(nullable(Type::String))
                .min_length(Some(1))
                .max_length(Some(crate::domain::ids::OwnerId::MAX_CHARS))
                .description(Some("On whose behalf the agent acts; default `anonymous`.")),
        )
        .property(
            "window_seconds",
            ObjectBuilder::new()
                .schema_type(nullable(Type::Integer))
                .minimum(Some(0))
                .maximum(Some(MAX_WINDOW_SECONDS))
                .description(Some(
                    "The window the agent's guard records on approval; cut to the route's \
                     `max_window_seconds` and disclosed to the operator.",
                )),
        )
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .description(Some(
            "The tool call an `approval` or `form` is about (AI-Parrot's ConfirmationGuard \
             through the Python package): the operator sees the tool and every parameter.",
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
            .description(Some(
                "The tool's name: not blank, no invisible or layout-changing characters \
                 (Unicode Cc, Cf, Zl, Zp, Co).",
            ))
            .build();
        let params = ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .description(Some(format!(
                "The exact call parameters, returned byte for byte when allowed. At most \
                 {MAX_PARAM_KEYS} object keys counted at every depth, nesting at most {} \
                 levels, integers at most {} digits; no object may repeat a key.",
                python::json::MAX_DEPTH,
                python::json::MAX_INT_DIGITS
            )))
            .build();
        let owner_id = ObjectBuilder::new()
            .schema_type(nullable(Type::String))
            .min_length(Some(1))
            .max_length(Some(OwnerId::MAX_CHARS))
            .default(Some("anonymous".into()))
            .description(Some(
                "The human on whose behalf the agent acts: not blank, no invisible or \
                 layout-changing characters (Unicode Cc, Cf, Zl, Zp, Co).",
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
                    "A Python `str.format` briefing template: no NUL or ESC characters.",
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
                optional_text(
                    0,
                    MAX_CONTEXT_CHARS,
                    "Extra text shown to the operator: no NUL or ESC characters.",
                ),
            )
            .property("callback_url", callback_url_schema())
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
                "A tool call to confirm. `null` counts as absent; unknown fields and repeated \
                 keys (at any depth) are refused.",
            ))
            .into()
    }
}

/// `callback_url` of a create body.
fn callback_url_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .format(Some(SchemaFormat::Custom("uri".into())))
        .max_length(Some(MAX_CALLBACK_URL_CHARS))
        .description(Some(
            "An http(s) URL under one of the agent's `callback_url_prefixes`, with no \
             percent-encoded `/`, `\\` or `.` (`%2F`, `%5C`, `%2E`) in its path; the \
             outcome is POSTed there, signed.",
        ))
        .build()
}

/// A `?wait=` query parameter, bounded by [`MAX_LONG_POLL_SECONDS`].
fn wait_param(description: &str) -> Parameter {
    let wait = ObjectBuilder::new()
        .schema_type(Type::Number)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Double)))
        .minimum(Some(0))
        .maximum(Some(MAX_LONG_POLL_SECONDS))
        .build();
    ParameterBuilder::new()
        .name("wait")
        .parameter_in(ParameterIn::Query)
        .required(Required::False)
        .description(Some(description))
        .schema(Some(wait))
        .build()
}

/// The `?wait=` query of `GET /v1/confirmations/{id}`.
pub struct LongPoll;

impl IntoParams for LongPoll {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![wait_param(
            "Long-poll: answer when the request is terminal or after this many seconds, \
             whichever comes first.",
        )]
    }
}

/// The `?wait=` query of `GET /v1/interactions/{interaction_id}`.
pub struct ChangePoll;

impl IntoParams for ChangePoll {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        vec![wait_param(
            "Long-poll: answer at the interaction's next change (delivered, an answer, \
             its end) or after this many seconds, whichever comes first. 0 or absent: \
             answer at once.",
        )]
    }
}

/// A nullable string enum of `values`.
fn nullable_enum(values: &[&str], description: &str) -> Object {
    let values = values.iter().map(|v| Value::from(*v)).chain([Value::Null]);
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .enum_values(Some(values))
        .description(Some(description))
        .build()
}

/// `status` of an interaction, in AI-Parrot's words.
pub fn interaction_status_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some([
            "pending",
            "delivered",
            "partial",
            "completed",
            "timeout",
            "cancelled",
        ]))
        .description(Some(
            "`pending` until a message is out, `delivered`, `partial` once someone \
             answered; then `completed` (see `result`), `timeout` or `cancelled`.",
        ))
        .build()
}

/// `interaction_type` of an interaction.
pub fn interaction_type_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(InteractionType::ALL.iter().copied()))
        .build()
}

/// `timeout_action` of an interaction: what a timeout handed back to the agent.
pub fn timeout_action_schema() -> Object {
    nullable_enum(
        &[
            TimeoutAction::Escalate.as_str(),
            TimeoutAction::Retry.as_str(),
        ],
        "When it timed out asking to `escalate` or `retry`: that action, for the agent \
         to take; null otherwise.",
    )
}

/// Any JSON value, `null` included.
pub fn any_value_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some("The settled value once `completed`; null otherwise."))
        .build()
}

/// `responses` of an interaction: AI-Parrot `HumanResponse` objects.
pub fn human_responses_schema() -> ArrayBuilder {
    let text = || ObjectBuilder::new().schema_type(Type::String);
    let response = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("interaction_id", text())
        .required("interaction_id")
        .property(
            "respondent",
            text().description(Some(
                "A name from `target_humans`, else the Telegram user id in decimal; \
                 `system` for a default applied on timeout.",
            )),
        )
        .required("respondent")
        .property("response_type", interaction_type_schema())
        .required("response_type")
        .property(
            "value",
            ObjectBuilder::new()
                .schema_type(SchemaType::AnyValue)
                .description(Some("The answer.")),
        )
        .required("value")
        .property(
            "timestamp",
            text().format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .required("timestamp")
        .property(
            "metadata",
            ObjectBuilder::new()
                .schema_type(Type::Object)
                .additional_properties(Some(AdditionalProperties::FreeForm(true)))
                .description(Some(
                    "`channel`: `telegram`; the Telegram user's `telegram_user_id`, \
                     `telegram_name`, `telegram_username`; `default` and `reason` for a \
                     default applied on timeout.",
                )),
        )
        .required("metadata");
    ArrayBuilder::new()
        .items(response)
        .description(Some("Every answer so far, oldest first."))
}

/// Documentation of AI-Parrot's `HumanInteraction`, as
/// [`interaction::parse`](crate::domain::interaction::parse) reads it. Fields it does not
/// act on are kept and echoed back, so the object is open.
pub struct HumanInteraction;

impl ToSchema for HumanInteraction {}

impl PartialSchema for HumanInteraction {
    fn schema() -> RefOr<Schema> {
        let option = ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "key",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_OPTION_KEY_CHARS))
                    .description(Some("What the answer's value holds; unique.")),
            )
            .required("key")
            .property(
                "label",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_OPTION_LABEL_CHARS))
                    .description(Some("The button's text: not blank.")),
            )
            .required("label")
            .property(
                "description",
                optional_text(0, 1000, "Shown with the option."),
            );
        let options = ArrayBuilder::new()
            .schema_type(nullable(Type::Array))
            .items(option)
            .max_items(Some(MAX_OPTIONS))
            .description(Some(
                "The choices of a `single_choice`, `multi_choice` or `poll` question (at \
                 least one for those).",
            ));
        let target_humans = ArrayBuilder::new()
            .schema_type(nullable(Type::Array))
            .items(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(200)),
            )
            .max_items(Some(MAX_TARGET_HUMANS))
            .description(Some(
                "Who may answer: `[people]` names or Telegram user ids in decimal. Empty \
                 or absent: the route's approvers.",
            ));
        let timeout = ObjectBuilder::new()
            .schema_type(nullable(Type::Number))
            .exclusive_minimum(Some(0))
            .description(Some(
                "Seconds to wait for the answers; at most the configuration's \
                 `max_timeout_seconds`. Default: 7200, or that maximum when smaller.",
            ));
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "interaction_id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_INTERACTION_ID_CHARS))
                    .description(Some(
                        "The agent's id of the question: no control characters, and not \
                         `.` or `..` (no URL path can carry them). The same id again (e.g. \
                         for another recipient) finds the same interaction; percent-encode \
                         it in the paths below.",
                    )),
            )
            .required("interaction_id")
            .property(
                "question",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_QUESTION_CHARS))
                    .description(Some(
                        "What the humans are asked: not blank, no NUL or ESC characters.",
                    )),
            )
            .required("question")
            .property(
                "context",
                optional_text(
                    0,
                    MAX_INTERACTION_CONTEXT_CHARS,
                    "Shown with the question: no NUL or ESC characters.",
                ),
            )
            .property(
                "interaction_type",
                nullable_enum(InteractionType::ALL, "Default: `free_text`."),
            )
            .property("options", options)
            .property(
                "form_schema",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Object))
                    .additional_properties(Some(AdditionalProperties::FreeForm(true)))
                    .description(Some(
                        "A `form`'s fields; it is approved with `current_values`, else the \
                         fields' defaults.",
                    )),
            )
            .property(
                "default_response",
                ObjectBuilder::new()
                    .schema_type(SchemaType::AnyValue)
                    .description(Some(
                        "The answer a timeout with `timeout_action: default` completes with.",
                    )),
            )
            .property("target_humans", target_humans)
            .property(
                "consensus_mode",
                nullable_enum(ConsensusMode::ALL, "Default: `first_response`."),
            )
            .property("timeout", timeout)
            .property(
                "timeout_action",
                nullable_enum(TimeoutAction::ALL, "Default: `cancel`."),
            )
            .property(
                "severity",
                nullable_enum(Severity::ALL, "Default: `normal`."),
            )
            .property(
                "source_agent",
                optional_text(
                    0,
                    200,
                    "Shown to the humans: no invisible or layout-changing characters.",
                ),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(true)))
            .description(Some(
                "AI-Parrot's `HumanInteraction`. Other fields are kept and echoed back; \
                 `policy.quorum` or `metadata.quorum` (an integer from 1 to 1000) sets a \
                 `quorum` question's quorum.",
            ))
            .examples([json!({
                "interaction_id": "deploy-42", "question": "Which environment?",
                "interaction_type": "single_choice",
                "options": [{"key": "staging", "label": "Staging"}, {"key": "prod", "label": "Production"}],
                "timeout": 600
            })])
            .into()
    }
}

/// Documentation of the `POST /v1/interactions` body; the body itself is read by
/// [`interactions::parse_create`](super::interactions::parse_create).
pub struct CreateInteractionBody;

impl ToSchema for CreateInteractionBody {}

impl PartialSchema for CreateInteractionBody {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property("interaction", Ref::from_schema_name("HumanInteraction"))
            .required("interaction")
            .property(
                "route",
                optional_text(
                    0,
                    MAX_ROUTE_CHARS,
                    "A named Telegram destination this agent may use. Default: the \
                     `recipient`'s private chat, else the agent's `default_route`.",
                ),
            )
            .property(
                "recipient",
                optional_text(
                    1,
                    MAX_RECIPIENT_CHARS,
                    "A person (a `[people]` name) to ask in their private chat when no \
                     `route` is given; the same `interaction_id` again with another \
                     recipient sends them a copy.",
                ),
            )
            .property("callback_url", callback_url_schema())
            .property("call", call_schema())
            .examples([json!({
                "interaction": {
                    "interaction_id": "deploy-42", "question": "Deploy billing to production?",
                    "interaction_type": "approval", "timeout": 600
                },
                "route": "ops"
            })])
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(format!(
                "An interaction to ask. `null` counts as absent; unknown fields, repeated keys \
                 (at any depth) and nesting deeper than {} levels are refused.",
                python::json::MAX_DEPTH
            )))
            .into()
    }
}

/// Documentation of the `POST /v1/notifications` body; the body itself is read by
/// [`parse_notification`](super::interactions::parse_notification).
pub struct NotificationBody;

impl ToSchema for NotificationBody {}

impl PartialSchema for NotificationBody {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "message",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_NOTIFICATION_CHARS))
                    .description(Some(
                        "The text to post, as plain text: not blank, no NUL or ESC characters.",
                    )),
            )
            .required("message")
            .property(
                "route",
                optional_text(
                    0,
                    MAX_ROUTE_CHARS,
                    "A named Telegram destination this agent may use. Default: the \
                     `recipient`'s private chat, else the agent's `default_route`.",
                ),
            )
            .property(
                "recipient",
                optional_text(
                    1,
                    MAX_RECIPIENT_CHARS,
                    "A person (a `[people]` name) to message privately when no `route` \
                     is given.",
                ),
            )
            .examples([json!({"message": "Deployed billing to production.", "route": "ops"})])
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "A one-way message. `null` counts as absent; unknown fields and repeated keys \
                 are refused.",
            ))
            .into()
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

    fn documented_fields(body: &Value) -> Vec<&str> {
        let mut fields: Vec<&str> = body["properties"]
            .as_object()
            .expect("properties")
            .keys()
            .map(String::as_str)
            .collect();
        fields.sort_unstable();
        fields
    }

    #[test]
    fn the_interaction_and_notification_bodies_document_exactly_what_their_parsers_know() {
        let doc = doc();
        let schemas = &doc["components"]["schemas"];
        for (name, known) in [
            ("CreateInteractionBody", interactions::FIELDS),
            ("NotificationBody", interactions::NOTIFICATION_FIELDS),
        ] {
            let body = &schemas[name];
            let mut known = known.to_vec();
            known.sort_unstable();
            assert_eq!(documented_fields(body), known, "{name}");
            assert_eq!(body["additionalProperties"], false, "{name}");
        }
        assert_eq!(
            schemas["CreateInteractionBody"]["required"],
            json!(["interaction"])
        );
        assert_eq!(schemas["NotificationBody"]["required"], json!(["message"]));
        assert_eq!(
            schemas["NotificationBody"]["properties"]["message"]["maxLength"],
            MAX_NOTIFICATION_CHARS
        );
        // The interaction itself is open: fields this service does not act on are echoed.
        let interaction = &schemas["HumanInteraction"];
        assert_eq!(interaction["additionalProperties"], true);
        assert_eq!(
            interaction["required"],
            json!(["interaction_id", "question"])
        );
        assert_eq!(
            interaction["properties"]["interaction_id"]["maxLength"],
            MAX_INTERACTION_ID_CHARS
        );
    }

    #[test]
    fn the_interaction_view_documents_every_key_it_serialises() {
        let doc = doc();
        let view = &doc["components"]["schemas"]["Interaction"];
        let mut required: Vec<&str> = view["required"]
            .as_array()
            .expect("required")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        required.sort_unstable();
        assert_eq!(
            documented_fields(view),
            required,
            "every key is always present"
        );
        let post = &doc["paths"]["/v1/interactions"]["post"]["responses"];
        assert_eq!(
            post["202"]["links"]["get"]["operationId"],
            "get_interaction"
        );
        let notify = &doc["paths"]["/v1/notifications"]["post"]["responses"];
        assert!(notify.get("502").is_some(), "Telegram may refuse");
        let events = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"];
        assert!(events.get("text/event-stream").is_some());
    }
}
