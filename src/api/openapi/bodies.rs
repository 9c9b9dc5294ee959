//! The request bodies, documented by hand: each is parsed by hand so that a refusal names
//! its field, and its schema is built from the parser's own constants, so a limit
//! changes in one place and the schema never refuses what the parser accepts.

use serde_json::{Value, json};
use utoipa::openapi::schema::{
    AdditionalProperties, Object, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{ArrayBuilder, Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::api::confirmations::{
    MAX_CALLBACK_URL_CHARS, MAX_CONTEXT_CHARS, MAX_PARAM_KEYS, MAX_ROUTE_CHARS, MAX_TEMPLATE_CHARS,
    MAX_WINDOW_SECONDS,
};
use crate::api::interactions::{MAX_NOTIFICATION_CHARS, MAX_RECIPIENT_CHARS};
use crate::domain::ids::{IdempotencyKey, OwnerId, ToolName};
use crate::domain::interaction::{
    ConsensusMode, InteractionType, MAX_CONTEXT_CHARS as MAX_INTERACTION_CONTEXT_CHARS,
    MAX_INTERACTION_ID_CHARS, MAX_OPTION_KEY_CHARS, MAX_OPTION_LABEL_CHARS, MAX_OPTIONS,
    MAX_QUESTION_CHARS, MAX_TARGET_HUMANS, Severity, TimeoutAction,
};
use crate::domain::python;

use super::fields::{nullable, nullable_enum, optional_text};

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
        .property("args_schema", args_schema_schema())
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .description(Some(
            "The tool call an `approval` or `form` is about (AI-Parrot's ConfirmationGuard \
             through the Python package): the operator sees the tool and every parameter.",
        ))
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
                "The tool allows editing: in the chat it falls back to approve/cancel; with \
                 `args_schema` and the console on, the call can be edited there before it \
                 is approved (the answer then says `edited` and gives the new parameters).",
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
            .property("args_schema", args_schema_schema())
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
            .property(
                "grant_scope",
                grant_scope_schema(
                    "The grant the call presents, checked after the `deny` rules and before the \
                 window, the `allow` rules and any person: the scope (`tool:deploy`; `tool:*` \
                 covers every tool) a live grant of this agent for `owner_id` must cover. \
                 Without one the request is `cancelled` at once, `via: \"grant\"`, nobody \
                 asked. It must cover `tool` (`tool:<tool>` or `tool:*`; another kind only \
                 where the configuration's `grant_scopes` maps it to `tool`), else 422 \
                 `invalid_field` naming both, nothing stored.",
                ),
            )
            .property(
                "require_grant_only",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Boolean))
                    .default(Some(false.into()))
                    .description(Some(
                        "With `grant_scope`: a live grant confirms the call at once \
                         (`via: \"grant\"`), without window, `allow` rule or person; a \
                         `deny` rule still cancels it.",
                    )),
            )
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
/// A grant's scope: `kind:name`, `kind:*` for every name of the kind.
pub fn grant_scope_schema(description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .pattern(Some(r"^[a-z0-9_-]+:(\*|[^*\s]([^*]*[^*\s])?)$"))
        .min_length(Some(3))
        .max_length(Some(crate::domain::grant::Scope::MAX_CHARS))
        .description(Some(description))
        .build()
}

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
            .property("grant", grant_terms_schema())
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

/// The `grant` of an interaction: the terms of a grant question.
fn grant_terms_schema() -> ObjectBuilder {
    let mut scope = grant_scope_schema("What the grant covers: `tool:deploy`, or `tool:*`.");
    scope.schema_type = Type::String.into();
    ObjectBuilder::new()
        .schema_type(nullable(Type::Object))
        .property(
            "owner_id",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1))
                .max_length(Some(OwnerId::MAX_CHARS))
                .description(Some("On whose behalf the agent acts.")),
        )
        .required("owner_id")
        .property("scope", scope)
        .required("scope")
        .property(
            "window_seconds",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .minimum(Some(1))
                .maximum(Some(MAX_WINDOW_SECONDS))
                .description(Some(
                    "How long the grant lasts from the person's yes; cut to the route's \
                     `max_grant_seconds` when asked (the record then also holds \
                     `requested_window_seconds`, what was asked).",
                )),
        )
        .required("window_seconds")
        .additional_properties(Some(AdditionalProperties::FreeForm(false)))
        .description(Some(
            "Makes an `approval` a grant question: the approvers of the route (a route, never \
             a private chat) are shown these terms on the service's own lines, never cut, \
             and a person's yes stores the grant on them, from the tap (`GET /v1/grants`, \
             `/grants`). Present the interaction to `POST /v1/grants` to get it. Refused \
             (422) with a `call`, with `default_response: true` and `timeout_action: \
             default`, or when the terms could not be shown whole. Without it, no answer \
             to an approval grants anything, whatever its question says.",
        ))
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

/// Documentation of the `POST /v1/grants` body; the body itself is read by
/// `api::grants::parse_create`.
pub struct CreateGrantBody;

impl ToSchema for CreateGrantBody {}

impl PartialSchema for CreateGrantBody {
    fn schema() -> RefOr<Schema> {
        let mut scope =
            grant_scope_schema("What the grant covers: `tool:deploy`, or `tool:*` for every tool.");
        scope.schema_type = Type::String.into();
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "owner_id",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(OwnerId::MAX_CHARS))
                    .description(Some("On whose behalf the agent acts.")),
            )
            .required("owner_id")
            .property("scope", scope)
            .required("scope")
            .property(
                "window_seconds",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Integer))
                    .minimum(Some(1))
                    .maximum(Some(MAX_WINDOW_SECONDS))
                    .default(Some(super::super::grants::DEFAULT_GRANT_SECONDS.into()))
                    .description(Some(
                        "How long the grant lasts from the yes; cut to the route's \
                         `max_grant_seconds` (8 h by default) when asked. Presenting: \
                         the window the question was asked with (either the one \
                         approved or the one asked for), or nothing.",
                    )),
            )
            .property(
                "route",
                optional_text(
                    0,
                    MAX_ROUTE_CHARS,
                    "Where to ask (one of this agent's routes). Default: the agent's \
                     `default_route`.",
                ),
            )
            .property(
                "reason",
                optional_text(
                    0,
                    super::super::grants::MAX_REASON_CHARS,
                    "Why the agent asks, shown to the approvers: no NUL or ESC characters.",
                ),
            )
            .property(
                "interaction_id",
                optional_text(
                    1,
                    crate::domain::interaction::MAX_INTERACTION_ID_CHARS,
                    "Present a grant question instead of asking: an interaction of this \
                     agent asked with `grant` terms (or by this endpoint) that a person \
                     answered yes. Answers the grant their yes stored; `scope`, `owner_id` \
                     and (when given) `window_seconds` must be the question's terms (409 \
                     naming the one that differs).",
                ),
            )
            .property(
                "wait",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::String))
                    .enum_values(Some([Value::from("block"), "suspend".into(), Value::Null]))
                    .default(Some("block".into()))
                    .description(Some(
                        "`block`: answer once the question ended; `suspend`: answer 202 at \
                         once (not with `interaction_id`).",
                    )),
            )
            .property(
                "timeout_seconds",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Number))
                    .exclusive_minimum(Some(0))
                    .description(Some(
                        "How long the question waits for an answer (not with \
                         `interaction_id`). Default: the configuration's \
                         `default_timeout_seconds`.",
                    )),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "A grant to ask for, or an approval to present. `null` counts as absent; \
                 unknown fields and repeated keys are refused.",
            ))
            .into()
    }
}

/// Documentation of the `POST /v1/confirmations/{id}/outcome` body; the body itself is
/// read by `api::outcomes::parse_report`.
pub struct OutcomeBody;

impl ToSchema for OutcomeBody {}

impl PartialSchema for OutcomeBody {
    fn schema() -> RefOr<Schema> {
        use crate::domain::execution::MAX_REPORT_CHARS;
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .property(
                "status",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(["executed", "failed", "not_executed"]))
                    .description(Some(
                        "`executed`: the call ran; `failed`: it ran, or began to, and \
                         failed; `not_executed`: it was not run after all.",
                    )),
            )
            .required("status")
            .property(
                "summary",
                optional_text(
                    0,
                    MAX_REPORT_CHARS,
                    "What came of it, in a line, shown under the decision in every message \
                     of the question (invisible characters as visible escapes).",
                ),
            )
            .property(
                "error",
                optional_text(
                    0,
                    MAX_REPORT_CHARS,
                    "Why it failed; only with `status: \"failed\"`.",
                ),
            )
            .property(
                "duration_ms",
                ObjectBuilder::new()
                    .schema_type(nullable(Type::Integer))
                    .minimum(Some(0))
                    .maximum(Some(super::super::outcomes::MAX_DURATION_MS))
                    .description(Some("How long the run took, in milliseconds.")),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "What happened when the agent ran the confirmed call. `null` counts as \
                 absent; unknown fields and repeated keys are refused.",
            ))
            .into()
    }
}

/// `args_schema`: the tool's JSON Schema, for edit before execute in the console.
fn args_schema_schema() -> utoipa::openapi::schema::Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Object))
        .description(Some(format!(
            "The tool's argument schema as JSON Schema (pydantic's `model_json_schema()`), at \
             most {} bytes; no `$ref` outside it (nothing is fetched). With `allow_edit` and \
             the console (`[mini_app]`) on, an operator may edit the call there before \
             approving it: the form is built from it and the edit checked against it. An \
             invalid schema is refused (422).",
            crate::domain::limits::MAX_ARGS_SCHEMA_BYTES
        )))
        .build()
}
