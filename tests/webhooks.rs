//! Signed webhooks: every ending is POSTed to the agent's callback URL, retried until
//! the receiver takes it, across restarts, with a signature the receiver can check.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use support::app::*;

#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// A local receiver that answers 500 to the first `fail_first` deliveries, then 200.
#[derive(Clone)]
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    fail_remaining: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start(fail_first: usize) -> Receiver {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let fail_remaining = Arc::new(Mutex::new(fail_first));
        let state = (seen.clone(), fail_remaining.clone());
        let app = Router::new()
            .route("/hooks/{*rest}", post(receive))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url,
            seen,
            fail_remaining,
        }
    }

    fn set_failing(&self, n: usize) {
        *self.fail_remaining.lock().unwrap() = n;
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until a delivery was accepted (answered 200); returns every attempt so far.
    async fn wait_accepted(&self, n: usize) -> Vec<Received> {
        for _ in 0..400 {
            let seen = self.seen();
            let accepted = seen.len().saturating_sub(self.failed_count(&seen));
            if accepted >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("only {:?} deliveries arrived", self.seen().len());
    }

    fn failed_count(&self, seen: &[Received]) -> usize {
        seen.iter()
            .filter(|r| r.headers.contains_key("x-test-failed"))
            .count()
    }
}

type ReceiverState = (Arc<Mutex<Vec<Received>>>, Arc<Mutex<usize>>);

async fn receive(
    State((seen, fail)): State<ReceiverState>,
    mut headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let failing = {
        let mut f = fail.lock().unwrap();
        if *f > 0 {
            *f -= 1;
            true
        } else {
            false
        }
    };
    if failing {
        headers.insert("x-test-failed", "1".parse().unwrap());
    }
    seen.lock().unwrap().push(Received { headers, body });
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

/// The documented check: HMAC-SHA256 over "<X-Hitl-Timestamp>.<raw body>".
fn signature_is_valid(r: &Received, secret: &str) -> bool {
    let ts = r.headers["x-hitl-timestamp"].to_str().unwrap();
    let sig = r.headers["x-hitl-signature"].to_str().unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    sig == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test]
async fn a_decision_is_posted_signed_and_retried_until_the_receiver_takes_it() {
    let receiver = Receiver::start(2).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 1}, "callback_url": format!("{}/agent-a?k=1", receiver.url)}))
        .await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());

    let seen = receiver.wait_accepted(1).await;
    assert_eq!(seen.len(), 3, "two failures, then success");
    let delivery = seen[0].headers["x-hitl-delivery"].clone();
    for r in &seen {
        assert_eq!(
            r.headers["x-hitl-delivery"], delivery,
            "the delivery id is stable"
        );
        assert!(signature_is_valid(r, HOOK_SECRET_A), "signature of {r:?}");
        assert!(!signature_is_valid(r, "another-secret"));
        let b = body(r);
        assert_eq!(b["id"], record["id"]);
        assert_eq!(b["status"], "confirmed");
        assert_eq!(b["parameters"], json!({"v": 1}));
    }
    let ts: i64 = seen[2].headers["x-hitl-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((time::OffsetDateTime::now_utc().unix_timestamp() - ts).abs() < 60);
    // Delivered means delivered: no more attempts.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.seen().len(), 3);
}

#[tokio::test]
async fn every_kind_of_ending_is_posted() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let hook = format!("{}/x", receiver.url);

    // timeout
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.2, "callback_url": hook}))
        .await;
    // withdrawn
    let (r, _) = app
        .ask_suspended(json!({"tool": "w", "params": {}, "callback_url": hook}))
        .await;
    app.delete(r["id"].as_str().unwrap()).await;
    // cancelled by an operator
    let (_, m) = app
        .ask_suspended(json!({"tool": "c", "params": {}, "callback_url": hook}))
        .await;
    app.telegram.tap(OPS_CHAT, m, "❌ Cancel", bob());
    // fail-closed
    app.telegram
        .fail_next("sendMessage", 1, 400, "Bad Request: chat not found");
    app.create(json!({"tool": "f", "params": {}, "callback_url": hook}))
        .await;
    // confirmed by a window, after an operator opened it
    let (_, m) = app
        .ask_suspended(
            json!({"tool": "win", "params": {}, "window_seconds": 60, "callback_url": hook}),
        )
        .await;
    app.telegram
        .tap(OPS_CHAT, m, "✅ Approve for 1 min", alice());
    receiver.wait_accepted(5).await;
    let (s, hit) = app
        .create(json!({"tool": "win", "params": {}, "window_seconds": 60, "callback_url": hook}))
        .await;
    assert_eq!(
        (s, hit["via"].as_str()),
        (reqwest::StatusCode::OK, Some("window"))
    );

    let seen = receiver.wait_accepted(6).await;
    let mut endings: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let b = body(r);
            (
                b["tool"].as_str().unwrap().to_owned(),
                format!(
                    "{}/{}",
                    b["status"].as_str().unwrap(),
                    b["via"].as_str().unwrap()
                ),
            )
        })
        .collect();
    endings.sort();
    assert_eq!(
        endings,
        vec![
            ("c".to_owned(), "cancelled/operator".to_owned()),
            ("f".to_owned(), "cancelled/fail_closed".to_owned()),
            ("t".to_owned(), "timeout/timeout".to_owned()),
            ("w".to_owned(), "cancelled/withdrawn".to_owned()),
            ("win".to_owned(), "confirmed/operator".to_owned()),
            ("win".to_owned(), "confirmed/window".to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_pending_delivery_survives_a_restart() {
    let receiver = Receiver::start(usize::MAX).await;
    let mut app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let (_, m) = app
        .ask_suspended(
            json!({"tool": "deploy", "params": {}, "callback_url": format!("{}/r", receiver.url)}),
        )
        .await;
    app.telegram.tap(OPS_CHAT, m, "✅ Approve", alice());
    // Let it fail a few times, then stop the service while the receiver is still down.
    while receiver.seen().len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop().await;
    let failures = receiver.seen().len();
    receiver.set_failing(0);
    let _app = app.restart().await;
    let seen = receiver.wait_accepted(1).await;
    assert!(seen.len() > failures);
    let last = seen.last().unwrap();
    assert_eq!(
        last.headers["x-hitl-delivery"],
        seen[0].headers["x-hitl-delivery"]
    );
    assert_eq!(body(last)["status"], "confirmed");
}

#[tokio::test]
async fn a_delivery_is_given_up_after_the_configured_age() {
    let receiver = Receiver::start(usize::MAX).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.1, "callback_url": format!("{}/g", receiver.url)}))
        .await;
    // Rewind the delivery's birth so it is already past the 30 s give-up age.
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    while receiver.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("UPDATE webhook_outbox SET created_at = created_at - 60000")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..200 {
        let (state,): (String,) = sqlx::query_as("SELECT state FROM webhook_outbox")
            .fetch_one(&pool)
            .await
            .unwrap();
        if state == "given_up" {
            let n = receiver.seen().len();
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(receiver.seen().len(), n, "no attempts after giving up");
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the delivery was never given up");
}

#[tokio::test]
async fn a_callback_url_outside_the_agents_prefixes_is_refused() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let host_trick = receiver.url.replace("/hooks", ".evil.example/hooks");
    for url in [
        "https://elsewhere.example/hooks/x".to_owned(),
        format!("{}-evil/x", receiver.url),
        host_trick,
        "not a url".to_owned(),
        "file:///etc/passwd".to_owned(),
    ] {
        let (s, b) = app
            .create(json!({"tool": "t", "params": {}, "callback_url": url}))
            .await;
        assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{url}: {b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("callback_url"),
            "{b}"
        );
    }
    // agent-b has no prefixes at all.
    let (s, _) = app
        .create_as(TOKEN_B, json!({"tool": "t", "params": {}, "route": "other", "callback_url": format!("{}/b", receiver.url)}))
        .await;
    assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY);
}
