//! `/v1/interactions` (AI-Parrot's `HumanInteraction`: ask, read with long-poll,
//! withdraw) and `/v1/notifications` (one-way messages).

use std::collections::HashMap;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::{Deserializer, Error};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::AppState;
use super::admission::Admitted;
use super::body::{RawObject, allowed_callback_url, read, strict_object};
/// The console (`api::console`) still reads its bodies through this path.
use super::call::CallBody;
use super::error::ApiError;
use super::extract::{AuthAgent, Body};
use super::field::{CallbackUrl, Message, Recipient, Route};
use super::limits::{Held, rate_limit};
use super::record::InteractionView;
use crate::config::{Agent, Config};
use crate::domain::interaction::InteractionType;
use crate::domain::interaction::{self, MAX_INTERACTION_ID_CHARS};
use crate::domain::limits::MAX_LONG_POLL_SECONDS;
#[cfg(test)]
use crate::domain::limits::MAX_ROUTE_CHARS;
use crate::domain::python;
use crate::service::{Call, NewInteraction};

/// The limits of a notification's fields (their one home is [`crate::domain::limits`]).
pub use crate::domain::limits::{MAX_NOTIFICATION_CHARS, MAX_RECIPIENT_CHARS};

/// An interaction to ask. `null` counts as absent; unknown fields, repeated keys (at any
/// depth) and nesting deeper than [`python::json::MAX_DEPTH`] levels are refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(description = format!(
    "An interaction to ask. `null` counts as absent; unknown fields, repeated keys (at any \
     depth) and nesting deeper than {} levels are refused.",
    python::json::MAX_DEPTH
))]
#[schema(examples(json!({
    "interaction": {
        "interaction_id": "deploy-42", "question": "Deploy billing to production?",
        "interaction_type": "approval", "timeout": 600
    },
    "route": "ops"
})))]
pub struct CreateInteractionBody {
    // Checked by `interaction::parse` once read (it needs the configuration).
    #[serde(deserialize_with = "required_interaction")]
    #[schema(value_type = crate::api::openapi::HumanInteraction)]
    pub interaction: Value,
    /// A named Telegram destination this agent may use. Default: the `recipient`'s
    /// private chat, else the agent's `default_route`.
    #[schema(inline)]
    pub route: Option<Route>,
    /// A person (a `[people]` name) to ask in their private chat when no `route` is
    /// given; the same `interaction_id` again with another recipient sends them a copy.
    #[schema(inline)]
    pub recipient: Option<Recipient>,
    /// An http(s) URL under one of the agent's `callback_url_prefixes`, with no
    /// percent-encoded `/`, `\` or `.` (`%2F`, `%5C`, `%2E`) in its path; the outcome is
    /// POSTed there, signed.
    #[schema(inline)]
    pub callback_url: Option<CallbackUrl>,
    // Read once the interaction is: it goes only with some kinds.
    #[schema(value_type = Option<CallBody>, inline)]
    pub call: Option<Box<RawValue>>,
}

/// `interaction`: required.
fn required_interaction<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    match Value::deserialize(d)? {
        Value::Null => Err(D::Error::custom(
            "is required (a JSON object: AI-Parrot's HumanInteraction)",
        )),
        v => Ok(v),
    }
}
/// A one-way message. `null` counts as absent; unknown fields and repeated keys are
/// refused.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"message": "Deployed billing to production.", "route": "ops"})))]
pub struct NotificationBody {
    #[schema(inline)]
    pub message: Message,
    /// A named Telegram destination this agent may use. Default: the `recipient`'s
    /// private chat, else the agent's `default_route`.
    #[schema(inline)]
    pub route: Option<Route>,
    /// A person (a `[people]` name) to message privately when no `route` is given.
    #[schema(inline)]
    pub recipient: Option<Recipient>,
}

/// A checked `POST /v1/notifications` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub message: String,
    pub route: Option<String>,
    pub recipient: Option<String>,
}

/// `POST /v1/notifications`: where the message went.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotificationSent {
    /// The Telegram chat the message was posted in.
    pub chat_id: i64,
    /// The message's id in that chat.
    pub message_id: i32,
}

/// Parses and checks a `POST /v1/interactions` body for `agent`, naming the first field
/// at fault (inside the interaction as `interaction.<path>`).
pub fn parse_create(
    bytes: &[u8],
    config: &Config,
    agent: &Agent,
) -> Result<NewInteraction, ApiError> {
    let body: CreateInteractionBody = read(&strict_object(bytes)?, "")?;
    let interaction = interaction::parse(&body.interaction, config.max_timeout_seconds)
        .map_err(|e| ApiError::field(e.field, e.reason))?;
    let call = call(body.call.as_deref(), &interaction)?;
    Ok(NewInteraction {
        interaction,
        route: body.route.map(|r| r.0),
        recipient: body.recipient.map(|r| r.0),
        callback_url: body
            .callback_url
            .map(|u| allowed_callback_url(&u.0, agent))
            .transpose()?,
        call,
        // An agent over HTTP that keeps a window of its own sends it in `call`.
        agent_window_seconds: 0,
    })
}

/// `call`: the tool call an `approval` (or `form`) is about, so the operator sees the
/// tool and its exact parameters as a confirmation shows them, kept byte for byte as
/// `POST /v1/confirmations` keeps them.
fn call(
    raw: Option<&RawValue>,
    interaction: &interaction::Interaction,
) -> Result<Option<Call>, ApiError> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if !matches!(
        interaction.kind,
        InteractionType::Approval | InteractionType::Form
    ) {
        return Err(ApiError::field(
            "call",
            "goes only with an approval or form interaction",
        ));
    }
    let fields: RawObject = serde_json::from_str(raw.get())
        .map_err(|_| ApiError::field("call", "must be a JSON object"))?;
    let c: CallBody = read(&fields, "call.")?;
    Ok(Some(Call {
        tool: c.tool,
        params: c.params.dict,
        params_json: c.params.json,
        owner_id: c
            .owner_id
            .unwrap_or_else(crate::domain::ids::OwnerId::anonymous),
        // An agent that keeps no window says nothing: none.
        window_seconds: c.window_seconds.map_or(0, |w| w.0),
        args_schema: c.args_schema,
    }))
}

/// Parses and checks a `POST /v1/notifications` body.
pub fn parse_notification(bytes: &[u8]) -> Result<Notification, ApiError> {
    let body: NotificationBody = read(&strict_object(bytes)?, "")?;
    Ok(Notification {
        message: body.message.0,
        route: body.route.map(|r| r.0),
        recipient: body.recipient.map(|r| r.0),
    })
}

/// The `interaction_id` of the path, percent-decoded. One that cannot have been stored
/// (too long, empty, control characters, not UTF-8) names nothing: 404.
fn interaction_id(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    let not_found = || ApiError::NotFound("no interaction with this interaction_id".into());
    let Path(id) = path.map_err(|_| not_found())?;
    if id.is_empty()
        || id.chars().count() > MAX_INTERACTION_ID_CHARS
        || id.chars().any(char::is_control)
    {
        return Err(not_found());
    }
    Ok(id)
}

/// `?wait=N`: how long to long-poll, `None` for not at all.
fn long_poll(
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Option<Duration>, ApiError> {
    let bad = || {
        ApiError::field(
            "wait",
            format!("must be a number of seconds from 0 to {MAX_LONG_POLL_SECONDS}"),
        )
    };
    let Query(query) = query.map_err(|_| bad())?;
    match query.get("wait") {
        None => Ok(None),
        Some(w) => match w.parse::<f64>() {
            Ok(s) if s.is_finite() && (0.0..=MAX_LONG_POLL_SECONDS).contains(&s) => {
                Ok(Some(Duration::from_secs_f64(s)).filter(|d| !d.is_zero()))
            }
            _ => Err(bad()),
        },
    }
}

fn respond(status: StatusCode, r: &crate::domain::question::Question) -> Response {
    (status, Json(InteractionView::from(r))).into_response()
}

/// `POST /v1/interactions`
#[utoipa::path(
    post,
    path = "/v1/interactions",
    operation_id = "create_interaction",
    tag = "interactions",
    request_body = CreateInteractionBody,
    responses(
        (status = 200, description = "The interaction already existed (the same `interaction_id` again, e.g. for another recipient, who then gets their own copy): it as it is now.",
            body = InteractionView, links(
                ("get" = (operation_id = "get_interaction", parameters(("interaction_id" = "$response.body#/interaction_id")))),
                ("withdraw" = (operation_id = "withdraw_interaction", parameters(("interaction_id" = "$response.body#/interaction_id")))),
            )),
        (status = 202, description = "Asked: the new interaction, on its way to Telegram.", body = InteractionView, links(
                ("get" = (operation_id = "get_interaction", parameters(("interaction_id" = "$response.body#/interaction_id")))),
                ("withdraw" = (operation_id = "withdraw_interaction", parameters(("interaction_id" = "$response.body#/interaction_id")))),
            )),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`conflict`: this `interaction_id` already names a different interaction (question or type differ).", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name (`interaction.<field>` inside the interaction); also an unknown `recipient`, and `target_humans` of whom nobody may answer on the route.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`rate_limited`: over the agent's `requests_per_minute` or `max_pending`.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: shutting down, or the database is out of reach for now; retry with the same `interaction_id`.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    // Before the body, held until the interaction is stored (see `api::admission`).
    _admitted: Admitted,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    rate_limit(&state, &agent)?;
    let new = parse_create(&bytes, state.service.config(), &agent)?;
    super::trace::record_tool(crate::service::INTERACTION_TOOL);
    let (record, is_new) = state
        .service
        .create_interaction(&agent, new)
        .await
        .map_err(ApiError::interaction)?;
    // Settled at once (a rule decided its call): the answer is here, as for a
    // confirmation a window or a rule ended.
    let status = if is_new && !record.is_terminal() {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok(respond(status, &record))
}

/// `GET /v1/interactions/{interaction_id}?wait=N`
#[utoipa::path(
    get,
    path = "/v1/interactions/{interaction_id}",
    operation_id = "get_interaction",
    tag = "interactions",
    params(
        ("interaction_id" = String, Path, description = "The interaction's own `interaction_id` (percent-encoded)."),
        crate::api::openapi::ChangePoll,
    ),
    responses(
        (status = 200, description = "The interaction (changed, or as it was when the wait ran out).", body = InteractionView),
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown `interaction_id`, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: `wait` is not a number of seconds in range.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: with `wait`, this agent already has `max_long_polls` long-polls waiting.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 503, description = "`unavailable`: shutting down during a long-poll, or the database is out of reach for now.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let id = interaction_id(path)?;
    let wait = long_poll(query)?;
    let record = match wait {
        Some(d) => {
            let _slot = state
                .slots
                .take(&agent.name, Held::LongPoll, agent.max_long_polls)?;
            state
                .service
                .wait_for_change(&agent, &id, d, &state.stop)
                .await
        }
        None => state.service.asked().get_interaction(&agent, &id).await,
    }
    .map_err(ApiError::interaction)?;
    Ok(respond(StatusCode::OK, &record))
}

/// `DELETE /v1/interactions/{interaction_id}`
#[utoipa::path(
    delete,
    path = "/v1/interactions/{interaction_id}",
    operation_id = "withdraw_interaction",
    tag = "interactions",
    params(("interaction_id" = String, Path, description = "The interaction's own `interaction_id` (percent-encoded).")),
    responses(
        (status = 200, description = "Withdrawn: the interaction, now `cancelled`.", body = InteractionView),
        crate::api::error::Unauthenticated,
        (status = 404, description = "`not_found`: unknown `interaction_id`, or another agent's.", body = crate::api::error::ErrorBody),
        (status = 409, description = "`already_decided`: it already ended; the interaction as it ended is under `interaction`.", body = crate::api::error::InteractionConflictBody),
    ),
    security(("bearer" = [])),
)]
pub async fn withdraw(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let id = interaction_id(path)?;
    let record = state
        .service
        .withdraw_interaction(&agent, &id)
        .await
        .map_err(ApiError::interaction)?;
    Ok(respond(StatusCode::OK, &record))
}

/// `POST /v1/notifications`
#[utoipa::path(
    post,
    path = "/v1/notifications",
    operation_id = "send_notification",
    tag = "notifications",
    request_body = NotificationBody,
    responses(
        (status = 200, description = "Telegram took the message.", body = NotificationSent),
        crate::api::error::BodyRefused,
        crate::api::error::Unauthenticated,
        (status = 403, description = "`forbidden`: the route is not allowed for this agent.", body = crate::api::error::ErrorBody),
        (status = 422, description = "`invalid_field`: the message starts with the field's name; also an unknown `recipient`.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`rate_limited`: over the agent's `requests_per_minute`; or not sent because the bot's own pace for the chat (Telegram's limits: one message a second, 20 a minute to a group) has no slot within the 8 s a notification waits. Telegram was not called; the message says when the next slot is free, and `Retry-After` how far off it is.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
        (status = 502, description = "`undeliverable`: Telegram refused the message or could not be reached; the message says why.", body = crate::api::error::ErrorBody),
    ),
    security(("bearer" = [])),
)]
pub async fn notify(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    Body(bytes): Body,
) -> Result<Response, ApiError> {
    rate_limit(&state, &agent)?;
    let n = parse_notification(&bytes)?;
    let (chat_id, message_id) = state
        .service
        .notify(
            &agent,
            n.route.as_deref(),
            n.recipient.as_deref(),
            &n.message,
        )
        .await?;
    Ok((
        StatusCode::OK,
        Json(NotificationSent {
            chat_id,
            message_id,
        }),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::domain::interaction::InteractionType;
    use serde_json::json;

    fn config() -> Config {
        let toml = r#"
[server]
bind = "127.0.0.1:0"
[database]
url = "sqlite://data/hitl.db"
[telegram]
api_url = "https://api.telegram.org"
poll_timeout_seconds = 10
[confirmation]
default_timeout_seconds = 30
max_timeout_seconds = 3600
default_window_seconds = 0
[[routes]]
name = "ops"
chat_id = -100
approvers = [1]
[[agents]]
name = "a"
token_env = "TOKEN_A"
routes = ["ops"]
default_route = "ops"
webhook_secret_env = "HOOK_A"
callback_url_prefixes = ["https://hooks.example/a"]
"#;
        let settings = Settings::from_toml(toml).expect("settings");
        let env = |k: &str| match k {
            "TELEGRAM_BOT_TOKEN" => Some("999:x".to_owned()),
            "TOKEN_A" => Some("token-a-0123456789".to_owned()),
            "HOOK_A" => Some("hook-secret".to_owned()),
            _ => None,
        };
        Config::from_settings(settings, &env).expect("config")
    }

    fn create(body: Value) -> Result<NewInteraction, ApiError> {
        let config = config();
        let agent = config
            .agent_for_token("token-a-0123456789")
            .expect("agent a");
        parse_create(body.to_string().as_bytes(), &config, &agent)
    }

    /// The field a refusal names, or a panic.
    fn refused_field(r: Result<impl std::fmt::Debug, ApiError>) -> String {
        match r {
            Err(ApiError::InvalidField { field, .. }) => field,
            other => panic!("expected a 422, got {other:?}"),
        }
    }

    fn question() -> Value {
        json!({"interaction_id": "q-1", "question": "Ship it?", "interaction_type": "approval"})
    }

    #[test]
    fn a_minimal_interaction_parses_with_everything_else_absent() {
        let new = create(json!({"interaction": question()})).expect("valid");
        assert_eq!(new.interaction.interaction_id, "q-1");
        assert_eq!(new.interaction.kind, InteractionType::Approval);
        assert_eq!(new.route, None);
        assert_eq!(new.recipient, None);
        assert_eq!(new.callback_url, None);
        let nulls = json!({"interaction": question(), "route": null, "recipient": null, "callback_url": null});
        assert!(create(nulls).is_ok(), "null counts as absent");
    }

    #[test]
    fn route_recipient_and_callback_are_read() {
        let new = create(json!({
            "interaction": question(), "route": "ops", "recipient": "alice",
            "callback_url": "https://hooks.example/a/q1"
        }))
        .expect("valid");
        assert_eq!(new.route.as_deref(), Some("ops"));
        assert_eq!(new.recipient.as_deref(), Some("alice"));
        assert_eq!(
            new.callback_url.as_deref(),
            Some("https://hooks.example/a/q1")
        );
    }

    #[test]
    fn unknown_fields_are_refused_by_name() {
        match create(json!({"interaction": question(), "recipients": ["alice"]})) {
            Err(ApiError::InvalidField { field, reason }) => {
                assert_eq!(field, "recipients");
                assert!(reason.contains("known: interaction, route, recipient, callback_url"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_interaction_is_required_and_checked_with_its_path() {
        assert_eq!(refused_field(create(json!({}))), "interaction");
        assert_eq!(
            refused_field(create(json!({"interaction": null}))),
            "interaction"
        );
        assert_eq!(
            refused_field(create(json!({"interaction": "ask alice"}))),
            "interaction"
        );
        assert_eq!(
            refused_field(create(json!({"interaction": {"question": "Ship it?"}}))),
            "interaction.interaction_id"
        );
        let never = json!({"interaction_id": "q", "question": "x", "timeout": -1});
        assert_eq!(
            refused_field(create(json!({"interaction": never}))),
            "interaction.timeout",
        );
    }

    #[test]
    fn bounds_and_types_of_the_other_fields() {
        let long_route = "r".repeat(MAX_ROUTE_CHARS + 1);
        assert_eq!(
            refused_field(create(
                json!({"interaction": question(), "route": long_route})
            )),
            "route"
        );
        assert_eq!(
            refused_field(create(json!({"interaction": question(), "route": 7}))),
            "route"
        );
        let long_name = "n".repeat(MAX_RECIPIENT_CHARS + 1);
        assert_eq!(
            refused_field(create(
                json!({"interaction": question(), "recipient": long_name})
            )),
            "recipient"
        );
        assert_eq!(
            refused_field(create(json!({"interaction": question(), "recipient": ""}))),
            "recipient"
        );
        for url in [
            "ftp://hooks.example/a",
            "not a url",
            "https://hooks.example/ab",
            "https://evil.example/a",
        ] {
            assert_eq!(
                refused_field(create(
                    json!({"interaction": question(), "callback_url": url})
                )),
                "callback_url",
                "{url}"
            );
        }
    }

    #[test]
    fn bodies_that_are_not_objects() {
        let config = config();
        let agent = config.agent_for_token("token-a-0123456789").expect("agent");
        assert!(matches!(
            parse_create(b"{\"interaction\":", &config, &agent),
            Err(ApiError::MalformedJson(_))
        ));
        assert_eq!(refused_field(parse_create(b"[1]", &config, &agent)), "body");
        assert!(matches!(
            parse_notification(b"nope"),
            Err(ApiError::MalformedJson(_))
        ));
        assert_eq!(refused_field(parse_notification(b"\"hi\"")), "body");
    }

    #[test]
    fn notifications_need_a_message_within_bounds() {
        let ok = parse_notification(br#"{"message": "Deployed.", "recipient": "alice"}"#)
            .expect("valid");
        assert_eq!(
            ok,
            Notification {
                message: "Deployed.".into(),
                route: None,
                recipient: Some("alice".into())
            }
        );
        let exactly = json!({"message": "é".repeat(MAX_NOTIFICATION_CHARS)}).to_string();
        assert!(
            parse_notification(exactly.as_bytes()).is_ok(),
            "chars, not bytes"
        );
        for bad in [
            json!({}),
            json!({"message": null}),
            json!({"message": ""}),
            json!({"message": " \n "}),
            json!({"message": 5}),
            json!({"message": "x".repeat(MAX_NOTIFICATION_CHARS + 1)}),
        ] {
            assert_eq!(
                refused_field(parse_notification(bad.to_string().as_bytes())),
                "message",
                "{bad}"
            );
        }
        assert_eq!(
            refused_field(parse_notification(
                br#"{"message": "hi", "callback_url": "https://x"}"#
            )),
            "callback_url"
        );
    }

    #[test]
    fn path_ids_that_cannot_be_stored_are_not_found() {
        let ok = |s: &str| interaction_id(Ok(Path(s.to_owned())));
        assert_eq!(ok("a/b c").expect("valid"), "a/b c");
        assert!(ok(&"x".repeat(MAX_INTERACTION_ID_CHARS)).is_ok());
        for bad in [
            String::new(),
            "x".repeat(MAX_INTERACTION_ID_CHARS + 1),
            "a\nb".to_owned(),
        ] {
            assert!(matches!(ok(&bad), Err(ApiError::NotFound(_))), "{bad:?}");
        }
    }

    #[test]
    fn wait_is_bounded() {
        let q = |w: &str| {
            long_poll(Ok(Query(HashMap::from([(
                "wait".to_owned(),
                w.to_owned(),
            )]))))
        };
        assert_eq!(long_poll(Ok(Query(HashMap::new()))).expect("none"), None);
        assert_eq!(q("0").expect("zero"), None);
        assert_eq!(q("1.5").expect("valid"), Some(Duration::from_millis(1500)));
        assert!(q("60").is_ok());
        for bad in ["60.5", "-1", "NaN", "inf", "soon"] {
            assert_eq!(refused_field(q(bad)), "wait", "{bad}");
        }
    }
}
