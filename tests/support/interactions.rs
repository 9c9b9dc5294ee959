//! The interactions API (`/v1/interactions`: AI-Parrot's `HumanInteraction` in,
//! `HumanResponse` out) and taps on its questions, as the test files that drive it share
//! them.
#![allow(dead_code)] // each test executable uses a subset

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tokio::time::Instant;

use super::app::{TOKEN_A, TestApp, json_of};
use super::fake_telegram::{CallbackAnswer, SentMessage, TgUser};

/// POST /v1/interactions as agent-a.
pub async fn post_interaction(app: &TestApp, body: Value) -> (StatusCode, Value) {
    post_interaction_as(app, TOKEN_A, body).await
}

/// POST /v1/interactions with `token`.
pub async fn post_interaction_as(app: &TestApp, token: &str, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// GET /v1/interactions/{id} as agent-a, long-polling `wait` seconds when given.
pub async fn get_interaction(app: &TestApp, id: &str, wait: Option<&str>) -> (StatusCode, Value) {
    get_interaction_as(app, TOKEN_A, id, wait).await
}

/// GET /v1/interactions/{id} with `token`, long-polling `wait` seconds when given.
pub async fn get_interaction_as(
    app: &TestApp,
    token: &str,
    id: &str,
    wait: Option<&str>,
) -> (StatusCode, Value) {
    let mut url = app.url(&format!("/v1/interactions/{id}"));
    if let Some(w) = wait {
        url.push_str(&format!("?wait={w}"));
    }
    let r = app
        .client
        .get(url)
        .bearer_auth(token)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// DELETE /v1/interactions/{id} as agent-a.
pub async fn delete_interaction(app: &TestApp, id: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .delete(app.url(&format!("/v1/interactions/{id}")))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// Long-polls interaction `id`, as `token` reads it (200 every time), until it reports
/// `status`; fails after `within`, with the last view.
pub async fn wait_for_status_as(
    app: &TestApp,
    token: &str,
    id: &str,
    status: &str,
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (code, view) = get_interaction_as(app, token, id, Some("1")).await;
        assert_eq!(code, StatusCode::OK, "{view}");
        if view["status"] == status {
            return view;
        }
        assert!(
            Instant::now() < deadline,
            "interaction {id} never reached {status}; last seen: {view:#}"
        );
    }
}

/// Taps `button` on `message` as `user` and returns the bot's answer to the tap.
pub async fn tap(
    app: &TestApp,
    message: &SentMessage,
    button: &str,
    user: TgUser,
) -> CallbackAnswer {
    let q = app
        .telegram
        .tap(message.chat_id, message.message_id, button, user);
    app.telegram.wait_for_callback_answer(&q).await
}
