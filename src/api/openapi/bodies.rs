//! AI-Parrot's `HumanInteraction`, documented by hand: the domain reads it
//! ([`interaction::parse`](crate::domain::interaction::parse)) field by field, and its
//! schema is built here from the same constants, so a limit changes in one place and the
//! schema never refuses what the parser accepts. The API's own bodies are declared once,
//! as structs, beside their handlers.

use serde_json::json;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{ArrayBuilder, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::domain::ids::OwnerId;
use crate::domain::interaction::{
    ConsensusMode, InteractionType, MAX_CONTEXT_CHARS as MAX_INTERACTION_CONTEXT_CHARS,
    MAX_INTERACTION_ID_CHARS, MAX_OPTION_KEY_CHARS, MAX_OPTION_LABEL_CHARS, MAX_OPTIONS,
    MAX_QUESTION_CHARS, MAX_TARGET_HUMANS, Severity, TimeoutAction,
};
use crate::domain::limits::MAX_WINDOW_SECONDS;
use crate::domain::schema::scope_schema;

use super::fields::{nullable, nullable_enum, optional_text};

/// Documentation of AI-Parrot's `HumanInteraction`, as
/// [`interaction::parse`](crate::domain::interaction::parse) reads it. Fields it does not
/// act on are kept and echoed back, so the object is open.
pub struct HumanInteraction;

impl ToSchema for HumanInteraction {}

impl PartialSchema for HumanInteraction {
    fn schema() -> RefOr<Schema> {
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
            .property("options", options_schema())
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
            .property("target_humans", target_humans_schema())
            .property(
                "consensus_mode",
                nullable_enum(ConsensusMode::ALL, "Default: `first_response`."),
            )
            .property("timeout", timeout_schema())
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

/// `options` of an interaction.
fn options_schema() -> ArrayBuilder {
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
    ArrayBuilder::new()
        .schema_type(nullable(Type::Array))
        .items(option)
        .max_items(Some(MAX_OPTIONS))
        .description(Some(
            "The choices of a `single_choice`, `multi_choice` or `poll` question (at \
             least one for those).",
        ))
}

/// `target_humans` of an interaction.
fn target_humans_schema() -> ArrayBuilder {
    ArrayBuilder::new()
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
        ))
}

/// `timeout` of an interaction.
fn timeout_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(nullable(Type::Number))
        .exclusive_minimum(Some(0))
        .description(Some(
            "Seconds to wait for the answers; at most the configuration's \
             `max_timeout_seconds`. Default: 7200, or that maximum when smaller.",
        ))
}

/// The `grant` of an interaction: the terms of a grant question.
fn grant_terms_schema() -> ObjectBuilder {
    let scope =
        scope_schema().description(Some("What the grant covers: `tool:deploy`, or `tool:*`."));
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
