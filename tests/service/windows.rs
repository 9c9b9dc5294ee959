//! Confirmation windows: an approved call lets identical calls through for a while,
//! and nothing else.

use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Asks, has Alice approve, and returns the decided record.
async fn approve_once(app: &TestApp, body: Value) -> Value {
    let (record, message_id) = app.ask_suspended(body).await;
    let label = approve_label(record["window_seconds"].as_u64().unwrap());
    app.telegram
        .tap(OPS_CHAT, message_id, label.as_str(), alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await
}

fn call(params: Value, window: u64) -> Value {
    json!({"tool": "check_in", "params": params, "owner_id": "emp-1", "window_seconds": window})
}

#[tokio::test]
async fn an_identical_call_inside_the_window_is_confirmed_at_once_without_a_message() {
    let app = TestApp::spawn().await;
    let first = approve_once(&app, call(json!({"employee": 7, "at": "09:00"}), 60)).await;
    let messages = app.telegram.sent_messages().len();

    // Same call, keys in another order: same args hash, same window.
    let (s, r) = app
        .create(call(json!({"at": "09:00", "employee": 7}), 60))
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r["status"], "confirmed");
    assert_eq!(r["via"], "window");
    assert_eq!(r["allowed"], true);
    assert_eq!(r["args_hash"], first["args_hash"]);
    assert_eq!(r["parameters"], json!({"at": "09:00", "employee": 7}));
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains(first["id"].as_str().unwrap())
    );

    // Suspend mode gets the same instant 200.
    let mut suspended = call(json!({"employee": 7, "at": "09:00"}), 60);
    suspended["wait"] = json!("suspend");
    let (s, r) = app.create(suspended).await;
    assert_eq!((s, r["via"].as_str()), (StatusCode::OK, Some("window")));

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        app.telegram.sent_messages().len(),
        messages,
        "no new question"
    );
}

#[tokio::test]
async fn different_arguments_owner_tool_or_agent_always_ask() {
    let app = TestApp::spawn().await;
    approve_once(&app, call(json!({"employee": 7}), 60)).await;
    let variants = [
        call(json!({"employee": 8}), 60),
        call(json!({"employee": 7.0}), 60),
        {
            let mut b = call(json!({"employee": 7}), 60);
            b["owner_id"] = json!("emp-2");
            b
        },
        {
            let mut b = call(json!({"employee": 7}), 60);
            b["tool"] = json!("check_out");
            b
        },
    ];
    for (i, mut body) in variants.into_iter().enumerate() {
        body["wait"] = json!("suspend");
        let (s, r) = app.create(body).await;
        assert_eq!(s, StatusCode::ACCEPTED, "variant {i}: {r}");
        assert_eq!(r["status"], "pending");
    }
    let mut other_agent = call(json!({"employee": 7}), 60);
    other_agent["route"] = json!("other");
    other_agent["wait"] = json!("suspend");
    let (s, _) = app.create_as(TOKEN_B, other_agent).await;
    assert_eq!(s, StatusCode::ACCEPTED, "windows are per agent");
}

#[tokio::test]
async fn a_zero_window_always_asks() {
    let app = TestApp::spawn().await;
    approve_once(&app, call(json!({"employee": 7}), 0)).await;
    let mut again = call(json!({"employee": 7}), 0);
    again["wait"] = json!("suspend");
    let (s, r) = app.create(again).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::ACCEPTED, Some("pending"))
    );
}

#[tokio::test]
async fn a_cancelled_call_opens_no_window() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(call(json!({"employee": 7}), 60)).await;
    app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", alice());
    app.wait_status(record["id"].as_str().unwrap(), "cancelled")
        .await;
    let mut again = call(json!({"employee": 7}), 60);
    again["wait"] = json!("suspend");
    let (s, _) = app.create(again).await;
    assert_eq!(s, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn a_window_closes_when_it_expires() {
    let app = TestApp::spawn().await;
    approve_once(&app, call(json!({"employee": 7}), 1)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut again = call(json!({"employee": 7}), 1);
    again["wait"] = json!("suspend");
    let (s, r) = app.create(again).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::ACCEPTED, Some("pending"))
    );
}

#[tokio::test]
async fn a_window_survives_a_restart() {
    let app = TestApp::spawn().await;
    approve_once(&app, call(json!({"employee": 7}), 3600)).await;
    let app = app.restart().await;
    let (s, r) = app.create(call(json!({"employee": 7}), 3600)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(r["via"], "window");
}

#[tokio::test]
async fn the_args_hash_is_ai_parrots_compute_args_hash() {
    let app = TestApp::spawn().await;
    // AIPARROT.md's example: json.dumps(..., sort_keys=True) gives
    // {"a": "\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}
    let raw = r#"{"tool": "t", "wait": "suspend", "params": {"b":1,"a":"é","c":[1.0,1e16,1e-5]}}"#;
    let (s, r) = app.post_raw(Some(TOKEN_A), raw).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    use sha2::Digest;
    let expected = hex::encode(sha2::Sha256::digest(
        br#"{"a": "\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}"#,
    ));
    assert_eq!(r["args_hash"], expected);
}

#[tokio::test]
async fn expired_windows_are_purged_from_the_database() {
    let app = TestApp::spawn().await;
    approve_once(&app, call(json!({"employee": 7}), 1)).await;
    let count = |url: String| async move {
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM windows")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    };
    assert_eq!(count(app.db_url.clone()).await, 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let app = app.restart().await; // the purge runs at start, then every 10 minutes
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(count(app.db_url.clone()).await, 0);
}

#[tokio::test]
async fn a_whole_number_written_as_a_float_is_a_valid_window() {
    let app = TestApp::spawn().await;
    let raw = r#"{"tool": "t", "params": {}, "window_seconds": 600.0, "wait": "suspend"}"#;
    let (s, r) = app.post_raw(Some(TOKEN_A), raw).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
}
