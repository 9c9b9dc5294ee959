//! A Telegram that hangs never blocks the HTTP API or the deadline scheduler.

mod support;

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::json;
use support::app::*;

#[tokio::test]
async fn while_telegram_hangs_the_api_answers_and_deadlines_still_fire() {
    let app = TestApp::spawn().await;
    app.telegram
        .delay_next("sendMessage", 10, Duration::from_secs(4));

    let started = Instant::now();
    let (s, r) = app
        .create(json!({"tool": "t", "params": {}, "wait": "suspend", "timeout_seconds": 0.5}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "suspend does not wait for Telegram"
    );
    let id = r["id"].as_str().unwrap();

    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);

    // The deadline fires on time although the question is still on its way.
    let (_, done) = app.get_as(TOKEN_A, id, Some("3")).await;
    assert_eq!(done["status"], "timeout");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // When Telegram finally answers, the late message does not keep live buttons.
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    let m = app
        .telegram
        .wait_for_message(OPS_CHAT, m.message_id, "outcome shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(m.visible_text.contains("Timed out"), "{}", m.visible_text);
}
