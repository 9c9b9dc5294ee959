//! Pending requests survive a restart: deadlines are re-armed, taps still count.

use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::json;

#[tokio::test]
async fn a_pending_request_can_still_be_approved_after_a_restart() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 2}}))
        .await;
    let id = record["id"].as_str().unwrap().to_owned();
    let app = app.restart().await;
    let (s, r) = app.get(&id).await;
    assert_eq!((s, r["status"].as_str()), (StatusCode::OK, Some("pending")));
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let r = app.wait_status(&id, "confirmed").await;
    assert_eq!(r["decided_by"]["id"], ALICE);
}

#[tokio::test]
async fn a_deadline_that_passed_while_down_times_out_at_start_and_edits_the_message() {
    let mut app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {}, "timeout_seconds": 1}))
        .await;
    let id = record["id"].as_str().unwrap().to_owned();
    app.stop().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let app = app.restart().await;
    let r = app.wait_status(&id, "timeout").await;
    assert_eq!(r["via"], "timeout");
    let m = app
        .telegram
        .wait_for_message(OPS_CHAT, message_id, "timeout shown", |m| !m.has_buttons())
        .await;
    assert!(m.visible_text.contains("Timed out"));
}

#[tokio::test]
async fn a_blocked_agent_gets_503_at_shutdown_never_a_false_outcome() {
    let mut app = TestApp::spawn().await;
    let pending = app.create_blocking(json!({"tool": "deploy", "params": {}}));
    app.telegram.wait_for_messages(1).await;
    app.stop().await;
    let (s, b) = pending.await.unwrap();
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("idempotency_key")
    );
}
