//! A Telegram that hangs never blocks the HTTP API or the deadline scheduler; a database
//! out of reach is a 503 the agent may retry, never a false outcome.

use std::time::{Duration, Instant};

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::json;

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

#[tokio::test]
async fn a_database_that_stays_locked_is_a_503_to_retry_and_decides_nothing() {
    use sqlx::{Connection, SqliteConnection};
    let app = TestApp::spawn().await;
    // Serving first: the start writes to the database too (the replica's configuration,
    // the audit's `service_started`), and a start that cannot write fails, as it should,
    // which is not what this test is about.
    let health = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    // Another process holds SQLite's write lock past the store's busy timeout (5 s).
    let mut holder = SqliteConnection::connect(&app.db_url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut holder)
        .await
        .unwrap();
    let body = json!({"tool": "t", "params": {}, "wait": "suspend", "idempotency_key": "k-1"});
    let (s, r) = app.create(body.clone()).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{r}");
    assert_eq!(r["error"]["code"], "unavailable", "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("retry"),
        "{r}"
    );
    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    holder.close().await.unwrap();
    // The same call again, once the database answers, is one new question.
    let (s, r) = app.create(body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["status"], "pending");
}
