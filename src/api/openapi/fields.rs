//! The schemas of single fields, which the derived types name through `schema_with`
//! and the hand-built bodies share: a record's `status`, `via` and `approved_scope`, an
//! interaction's status, type, timeout action and answers, and the `?wait=` queries.

use serde_json::{Value, json};
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::schema::{
    AdditionalProperties, KnownFormat, Object, ObjectBuilder, SchemaFormat, SchemaType, Type,
};
use utoipa::openapi::{ArrayBuilder, Required};

use crate::domain::interaction::{InteractionType, TimeoutAction};
use crate::domain::limits::MAX_LONG_POLL_SECONDS;
use crate::domain::question::{Status, Via};

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
/// `allow`, `ask` or `deny`.
pub fn effect_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["allow", "ask", "deny"]))
        .build()
}

/// A run's status, as `outcome.status` holds it.
pub fn run_status_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["executed", "failed", "not_executed", "unknown"]))
        .build()
}

pub fn via_schema() -> Object {
    let all = [
        Via::Operator,
        Via::Window,
        Via::Timeout,
        Via::Withdrawn,
        Via::FailClosed,
        Via::Rule,
        Via::Grant,
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

pub(super) fn nullable(t: Type) -> SchemaType {
    [t, Type::Null].into_iter().collect()
}

/// A string field that may be null or absent (the parser reads `null` as absent).
pub(super) fn optional_text(min: usize, max: usize, description: &str) -> Object {
    ObjectBuilder::new()
        .schema_type(nullable(Type::String))
        .min_length((min > 0).then_some(min))
        .max_length(Some(max))
        .description(Some(description))
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
pub(super) fn nullable_enum(values: &[&str], description: &str) -> Object {
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
