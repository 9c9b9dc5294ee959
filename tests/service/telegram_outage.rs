//! Telegram out of reach for longer than `[telegram] outage_after_seconds`: the waiting
//! questions are announced to the alerting system's webhook, signed, once per outage
//! (a restart in the middle announces nothing twice), and the outage's end likewise.
//! Run in both modes: in webhook mode nothing polls Telegram, and the outage must be
//! noticed all the same.

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

use crate::support::app::*;

/// An alerting system's webhook on a loopback port: it keeps what it receives.
#[derive(Clone, Default)]
struct AlertSink {
    got: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

impl AlertSink {
    async fn start() -> (AlertSink, String) {
        let sink = AlertSink::default();
        let app = Router::new()
            .route("/alerts/hitl", post(take))
            .with_state(sink.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/alerts/hitl", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (sink, url)
    }

    fn alerts(&self) -> Vec<(HeaderMap, Bytes)> {
        self.got.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize, within: Duration) -> Vec<(HeaderMap, Bytes)> {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.alerts().len() >= n {
                return self.alerts();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{n} alerts expected, {} arrived", self.alerts().len());
    }
}

async fn take(State(sink): State<AlertSink>, headers: HeaderMap, body: Bytes) -> StatusCode {
    sink.got.lock().unwrap().push((headers, body));
    StatusCode::NO_CONTENT
}

/// The receiver's check, as for the agents' webhooks: HMAC-SHA256 under the alerts'
/// secret over "<X-Hitl-Timestamp>.<X-Hitl-Delivery>.<raw body>".
fn signed(headers: &HeaderMap, body: &[u8]) -> bool {
    let h = |name: &str| headers[name].to_str().unwrap().to_owned();
    let mut mac = Hmac::<Sha256>::new_from_slice(OUTAGE_SECRET.as_bytes()).unwrap();
    mac.update(format!("{}.{}.", h("x-hitl-timestamp"), h("x-hitl-delivery")).as_bytes());
    mac.update(body);
    h("x-hitl-signature") == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// `GET /metrics` once it shows `needle` (within 5 s).
async fn metrics_showing(app: &TestApp, needle: &str) -> String {
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = app.metrics_text().await;
        if metrics.contains(needle) {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the metrics never showed {needle:?}:\n{metrics}");
}

fn with_alerts(url: &str) -> impl FnOnce(String) -> String {
    let url = url.to_owned();
    move |toml| {
        toml.replacen(
            "poll_timeout_seconds = 1\n",
            &format!(
                "poll_timeout_seconds = 1\noutage_after_seconds = 2\n\
                 outage_webhook_url = \"{url}\"\n"
            ),
            1,
        )
    }
}

#[tokio::test]
async fn an_outage_of_telegram_is_announced_once_with_the_waiting_questions_and_so_is_its_end() {
    let (sink, url) = AlertSink::start().await;
    let app = TestApp::spawn_with_settings(with_alerts(&url)).await;
    let (asked, _) = app
        .ask_suspended(json!({
            "tool": "deploy",
            "params": {"password": "hunter2-do-not-page-this"},
            "timeout_seconds": 600,
        }))
        .await;

    // Telegram answers: nothing to announce, however long that lasts.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(sink.alerts().is_empty(), "no outage, no alert");

    app.telegram.go_down();
    let alerts = sink.wait_for(1, Duration::from_secs(30)).await;
    let (headers, body) = &alerts[0];
    assert!(signed(headers, body), "signed with the alerts' secret");
    assert_eq!(headers["x-hitl-event"], "telegram_outage_started");
    let text = String::from_utf8_lossy(body);
    assert!(
        !text.contains("hunter2"),
        "a question's parameters stay out of the alert: {text}"
    );
    let started: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(started["event"], "telegram_outage_started");
    assert_eq!(started["waiting_count"], 1);
    assert_eq!(started["waiting"][0]["id"], asked["id"]);
    assert_eq!(started["waiting"][0]["tool"], "deploy");
    assert_eq!(started["waiting"][0]["route"], "ops");
    let summary = started["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("Telegram has been unreachable since ")
            && summary.ends_with("1 question is waiting."),
        "{summary}"
    );

    // The attempt is counted once the receiver has answered.
    let metrics = metrics_showing(&app, "hitl_outage_alerts_total{result=\"delivered\"} 1\n").await;
    assert!(metrics.contains("\nhitl_telegram_outage 1\n"), "{metrics}");
    assert!(
        metrics.contains("\nhitl_telegram_outages_total 1\n"),
        "{metrics}"
    );

    // Still down, and (polling: a restart in webhook mode waits for setWebhook, which
    // Telegram down refuses) the service restarted: the outage is the same one, not
    // announced again.
    let app = if app.webhook {
        app
    } else {
        app.restart().await
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sink.alerts().len(), 1, "once per outage");

    app.telegram.come_back();
    let alerts = sink.wait_for(2, Duration::from_secs(30)).await;
    let (headers, body) = &alerts[1];
    assert!(signed(headers, body));
    assert_ne!(headers["x-hitl-delivery"], alerts[0].0["x-hitl-delivery"]);
    let ended: Value = serde_json::from_slice(body).unwrap();
    assert_eq!(ended["event"], "telegram_outage_ended");
    assert_eq!(ended["outage_id"], started["outage_id"]);
    assert_eq!(ended["since"], started["since"]);
    assert!(ended["ended_at"].is_string(), "{ended}");
    assert!(
        ended["summary"]
            .as_str()
            .unwrap()
            .starts_with("Telegram is reachable again after "),
        "{ended}"
    );

    metrics_showing(&app, "\nhitl_telegram_outage 0\n").await;

    // Reachable again: nothing more is sent, and the question is still answerable.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(sink.alerts().len(), 2);
    let id = asked["id"].as_str().unwrap();
    let (_, record) = app.get_as(TOKEN_A, id, None).await;
    assert_eq!(record["status"], "pending", "{record}");
}
