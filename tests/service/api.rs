//! The HTTP API's contract for bad requests: every failure is a JSON error with the
//! right status and a message that names what is wrong.

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn assert_error(status: StatusCode, body: &Value, want: StatusCode, code: &str, mentions: &str) {
    assert_eq!(status, want, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(mentions),
        "message {message:?} should mention {mentions:?}"
    );
}

#[tokio::test]
async fn a_request_without_a_token_is_401() {
    let app = TestApp::spawn().await;
    let (s, b) = app.post_raw(None, r#"{"tool": "x", "params": {}}"#).await;
    assert_error(
        s,
        &b,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "Authorization",
    );
}

#[tokio::test]
async fn a_request_with_an_unknown_token_is_401_and_the_token_is_not_echoed() {
    let app = TestApp::spawn().await;
    let (s, b) = app
        .post_raw(Some("not-a-real-token"), r#"{"tool": "x", "params": {}}"#)
        .await;
    assert_error(
        s,
        &b,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "unknown token",
    );
    assert!(!b.to_string().contains("not-a-real-token"));
    let r = app
        .client
        .get(app.url("/v1/confirmations/cf_00000000000000000000000000000000"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn malformed_json_is_400() {
    let app = TestApp::spawn().await;
    for body in [
        r#"{"tool": "x", "params": {"#,
        "",
        "not json",
        r#"{"tool": "x",}"#,
    ] {
        let (s, b) = app.post_raw(Some(TOKEN_A), body).await;
        assert_error(
            s,
            &b,
            StatusCode::BAD_REQUEST,
            "malformed_json",
            "not valid JSON",
        );
    }
}

#[tokio::test]
async fn a_body_over_64_kib_is_413() {
    let app = TestApp::spawn().await;
    let body = format!(
        r#"{{"tool": "x", "params": {{"blob": "{}"}}}}"#,
        "a".repeat(70 * 1024)
    );
    let (s, b) = app.post_raw(Some(TOKEN_A), body).await;
    assert_error(
        s,
        &b,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "65536",
    );
}

#[tokio::test]
async fn each_invalid_field_is_422_naming_the_field_and_why() {
    let app = TestApp::spawn().await;
    let cases: Vec<(Value, &str)> = vec![
        (json!({"params": {}}), "tool: is required"),
        (json!({"tool": "", "params": {}}), "tool: must not be empty"),
        (
            json!({"tool": "x".repeat(129), "params": {}}),
            "tool: must be at most 128",
        ),
        (json!({"tool": 5, "params": {}}), "tool: must be a string"),
        (json!({"tool": "x"}), "params: is required"),
        (
            json!({"tool": "x", "params": [1, 2]}),
            "params: must be a JSON object",
        ),
        (
            json!({"tool": "x", "params": "s"}),
            "params: must be a JSON object",
        ),
        (
            json!({"tool": "x", "params": {}, "window_seconds": -1}),
            "window_seconds: must be an integer >= 0",
        ),
        (
            json!({"tool": "x", "params": {}, "window_seconds": 1.5}),
            "window_seconds: must be an integer >= 0",
        ),
        (
            json!({"tool": "x", "params": {}, "timeout_seconds": 0}),
            "timeout_seconds: must be greater than 0",
        ),
        (
            json!({"tool": "x", "params": {}, "timeout_seconds": 3601}),
            "timeout_seconds: must be greater than 0 and at most 3600",
        ),
        (
            json!({"tool": "x", "params": {}, "timeout_seconds": "soon"}),
            "timeout_seconds: must be a number",
        ),
        (
            json!({"tool": "x", "params": {}, "wait": "forever"}),
            "wait: must be \"block\" or \"suspend\"",
        ),
        (
            json!({"tool": "x", "params": {}, "allow_edit": "yes"}),
            "allow_edit: must be true or false",
        ),
        (
            json!({"tool": "x", "params": {}, "owner_id": ""}),
            "owner_id: must not be empty",
        ),
        (
            json!({"tool": "x", "params": {}, "idempotency_key": "k".repeat(129)}),
            "idempotency_key: must be at most 128",
        ),
        (
            json!({"tool": "x", "params": {}, "context": "c".repeat(2049)}),
            "context: must be at most 2048",
        ),
        (
            json!({"tool": "x", "params": {}, "tmeout_seconds": 5}),
            "tmeout_seconds: is not a known field",
        ),
        (json!([1, 2, 3]), "body: must be a JSON object"),
    ];
    for (body, expected) in cases {
        let (s, b) = app.create(body.clone()).await;
        assert_error(
            s,
            &b,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_field",
            expected,
        );
    }
    assert!(
        app.telegram.sent_messages().is_empty(),
        "nothing reached the chat"
    );
}

#[tokio::test]
async fn a_lone_surrogate_in_params_is_refused_cleanly() {
    let app = TestApp::spawn().await;
    let (s, b) = app
        .post_raw(Some(TOKEN_A), r#"{"tool": "x", "params": {"a": "\ud800"}}"#)
        .await;
    assert!(
        s == StatusCode::UNPROCESSABLE_ENTITY || s == StatusCode::BAD_REQUEST,
        "{s}: {b}"
    );
    assert!(b["error"]["message"].is_string());
}

#[tokio::test]
async fn a_route_the_agent_may_not_use_is_403() {
    let app = TestApp::spawn().await;
    let (s, b) = app
        .create_as(TOKEN_B, json!({"tool": "x", "params": {}, "route": "ops"}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "forbidden", "route 'ops'");
    let (s, b) = app
        .create(json!({"tool": "x", "params": {}, "route": "nowhere"}))
        .await;
    assert_error(s, &b, StatusCode::FORBIDDEN, "forbidden", "route 'nowhere'");
}

#[tokio::test]
async fn an_unknown_or_malformed_id_is_404() {
    let app = TestApp::spawn().await;
    for id in [
        "cf_00000000000000000000000000000000",
        "nope",
        "cf_%27%20OR%201=1",
    ] {
        let (s, b) = app.get(id).await;
        assert_error(s, &b, StatusCode::NOT_FOUND, "not_found", "no confirmation");
        let (s, _) = app.delete(id).await;
        assert_eq!(s, StatusCode::NOT_FOUND);
    }
}

#[tokio::test]
async fn a_long_poll_longer_than_60_seconds_is_422() {
    let app = TestApp::spawn().await;
    let (s, b) = app
        .get_as(TOKEN_A, "cf_00000000000000000000000000000000", Some("61"))
        .await;
    assert_error(
        s,
        &b,
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_field",
        "wait",
    );
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_the_error_format() {
    let app = TestApp::spawn().await;
    let r = app.client.get(app.url("/v2/nothing")).send().await.unwrap();
    let (s, b) = json_of(r).await;
    assert_error(s, &b, StatusCode::NOT_FOUND, "not_found", "no such route");
    let r = app
        .client
        .put(app.url("/v1/confirmations"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    let (s, b) = json_of(r).await;
    assert_eq!(s, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(b["error"]["code"], "method_not_allowed");
}

#[tokio::test]
async fn healthz_answers_without_a_token_when_the_database_does() {
    let app = TestApp::spawn().await;
    let r = app.client.get(app.url("/healthz")).send().await.unwrap();
    let (s, b) = json_of(r).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(b["status"], "ok");
}

#[tokio::test]
async fn defaults_fill_in_owner_timeout_and_route() {
    let app = TestApp::spawn().await;
    let (s, r) = app
        .create(json!({"tool": "x", "params": {}, "wait": "suspend"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert_eq!(r["owner_id"], "anonymous");
    let created = time::OffsetDateTime::parse(
        r["created_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let expires = time::OffsetDateTime::parse(
        r["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(
        (expires - created).whole_seconds(),
        30,
        "config default timeout"
    );
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(m.chat_id, OPS_CHAT, "agent-a's default route");
}
