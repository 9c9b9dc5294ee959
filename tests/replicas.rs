//! Several replicas of the service on one PostgreSQL database (issue 17): real service
//! processes in webhook mode, each on a port of its own, the fake Telegram sending every
//! update to the replica that set the webhook last. What one replica decides must reach
//! the agents waiting on another at once, not at their deadline.
//!
//! Each test makes a database of its own on the local server (tests/support/postgres.rs)
//! and skips itself without one, unless `HITL_REQUIRE_POSTGRES=1` (`.ci/run`).

mod support;

use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::{Connection, postgres::PgConnection};
use support::app::*;
use support::fake_telegram::FakeTelegram;
use support::postgres::PgDatabase;
use support::process::ServiceProcess;

/// Far longer than any test waits: an outcome that arrives means a tap decided it, never
/// the deadline.
const QUESTION_TIMEOUT_SECONDS: u64 = 600;
/// How long an outcome may take to reach another replica: "at once", with room for a
/// loaded machine (a polling loop of seconds would need the deadline to end the wait).
const HEARD_WITHIN: Duration = Duration::from_secs(10);

/// A replica: the real binary in webhook mode at a loopback port of its own.
async fn replica(dir: &Path, name: &str, telegram: &FakeTelegram, db_url: &str) -> ServiceProcess {
    // The address is part of the configuration (the webhook's URL), so it is chosen
    // before the process starts: a port the kernel just handed out, freed again.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let toml = with_webhook_mode(
        &settings_toml(&telegram.api_url(), db_url)
            .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX)
            .replace("bind = \"127.0.0.1:0\"", &format!("bind = \"{addr}\"")),
        addr,
    );
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).expect("write config");
    let process = ServiceProcess::start(&config).await;
    telegram
        .wait_for_webhook(&format!("http://{addr}{WEBHOOK_PATH}"))
        .await;
    process
}

fn deploy() -> Value {
    json!({
        "tool": "deploy",
        "params": {"service": "billing", "env": "prod", "replicas": 3},
        "timeout_seconds": QUESTION_TIMEOUT_SECONDS,
        "window_seconds": 600,
    })
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    body: &Value,
) -> (StatusCode, Value) {
    let r = client
        .post(format!("{base}{path}"))
        .bearer_auth(TOKEN_A)
        .json(body)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// Two replicas on one fresh database, B set the webhook last: every update, taps
/// included, goes to B alone. `None`: no PostgreSQL here (the test skips itself).
struct Replicas {
    telegram: FakeTelegram,
    a: ServiceProcess,
    b: ServiceProcess,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
    db: PgDatabase,
}

impl Replicas {
    async fn start() -> Option<Replicas> {
        let db = PgDatabase::create().await?;
        let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let a = replica(dir.path(), "a", &telegram, &db.url).await;
        let b = replica(dir.path(), "b", &telegram, &db.url).await;
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        Some(Replicas {
            telegram,
            a,
            b,
            client,
            _dir: dir,
            db,
        })
    }

    /// An agent asking on A and blocking until the outcome.
    fn block_on_a(&self) -> tokio::task::JoinHandle<(StatusCode, Value)> {
        let (client, base) = (self.client.clone(), self.a.base.clone());
        tokio::spawn(async move { post(&client, &base, "/v1/confirmations", &deploy()).await })
    }

    /// What the agent blocked on A hears, within [`HEARD_WITHIN`].
    async fn outcome_on_a(
        &self,
        blocked: tokio::task::JoinHandle<(StatusCode, Value)>,
    ) -> (StatusCode, Value) {
        tokio::time::timeout(HEARD_WITHIN, blocked)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the agent blocked on replica A did not hear the tap within {HEARD_WITHIN:?}\n\
                     A:\n{}\nB:\n{}",
                    self.a.log_text(),
                    self.b.log_text()
                )
            })
            .expect("the blocked request")
    }
}

#[tokio::test]
async fn an_agent_blocked_on_one_replica_hears_at_once_the_tap_another_replica_received() {
    let Some(r) = Replicas::start().await else {
        return;
    };
    let Replicas {
        telegram,
        a,
        b,
        client,
        ..
    } = &r;

    let blocked = r.block_on_a();
    let msg = telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(msg.chat_id, OPS_CHAT);
    telegram.tap(OPS_CHAT, msg.message_id, approve_label(600), alice());

    let (status, record) = r.outcome_on_a(blocked).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed", "{record}");
    assert_eq!(record["via"], "operator", "{record}");
    assert_eq!(record["decided_by"]["id"], ALICE, "{record}");
    // The tap went to B, and B decided: A only heard of it.
    let decided_on = |p: &ServiceProcess| p.log_text().contains("question decided");
    assert!(decided_on(b), "B decided:\n{}", b.log_text());
    assert!(!decided_on(a), "A did not decide:\n{}", a.log_text());
    assert!(
        telegram
            .webhook_deliveries()
            .iter()
            .all(|d| d.url.starts_with(&b.base)),
        "every update went to B"
    );

    // The window the tap opened on B lets the identical call through on A at once, and
    // the same on B: neither replica holds a stale view of the windows.
    for replica in [a, b] {
        let (status, hit) = post(client, &replica.base, "/v1/confirmations", &deploy()).await;
        assert_eq!(status, StatusCode::OK, "{hit}");
        assert_eq!(
            (hit["status"].as_str(), hit["via"].as_str()),
            (Some("confirmed"), Some("window")),
            "{hit}"
        );
    }
    assert_eq!(telegram.sent_messages().len(), 1, "window hits ask nobody");
}

#[tokio::test]
async fn a_replica_that_lost_its_connection_to_the_change_feed_still_hears_the_outcome() {
    let Some(r) = Replicas::start().await else {
        return;
    };
    let Replicas { telegram, .. } = &r;

    let blocked = r.block_on_a();
    let msg = telegram.wait_for_messages(1).await.remove(0);
    // The server ends every listening session (as a failover or a network cut would),
    // and the tap comes at once: its notice may go by before A listens again.
    let mut admin = PgConnection::connect(&r.db.url)
        .await
        .expect("admin connection");
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%' \
         AND pid <> pg_backend_pid()) ended",
    )
    .fetch_one(&mut admin)
    .await
    .expect("terminate the listeners");
    assert_eq!(ended, 2, "one listening session per replica");
    telegram.tap(OPS_CHAT, msg.message_id, approve_label(600), alice());

    let (status, record) = r.outcome_on_a(blocked).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed", "{record}");
    assert_eq!(record["via"], "operator", "{record}");
}

#[tokio::test]
async fn an_event_stream_on_one_replica_carries_an_answer_another_replica_received() {
    let Some(r) = Replicas::start().await else {
        return;
    };
    let Replicas {
        telegram,
        a,
        b,
        client,
        ..
    } = &r;

    // A listens to agent-a's events from the start.
    let mut stream = client
        .get(format!("{}/v1/events", a.base))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(stream.status(), StatusCode::OK);

    let (status, view) = post(
        client,
        &a.base,
        "/v1/interactions",
        &json!({
            "interaction": {
                "interaction_id": "across-replicas",
                "question": "Proceed across replicas?",
                "interaction_type": "approval",
                "target_humans": ["alice"],
                "timeout": QUESTION_TIMEOUT_SECONDS as f64,
            },
            "route": "ops",
        }),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    let msg = telegram.wait_for_messages(1).await.remove(0);
    telegram.tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());

    // The stream on A carries the answer and the end that B recorded.
    let mut text = String::new();
    let heard = tokio::time::timeout(HEARD_WITHIN, async {
        while !text.contains("\"status\":\"completed\"") {
            match stream.chunk().await.expect("the event stream") {
                Some(bytes) => text.push_str(&String::from_utf8_lossy(&bytes)),
                None => panic!("the event stream ended:\n{text}"),
            }
        }
    })
    .await;
    assert!(
        heard.is_ok(),
        "the stream on A did not carry B's decision within {HEARD_WITHIN:?}:\n{text}\nB:\n{}",
        b.log_text()
    );
    assert!(text.contains("event: response"), "{text}");
    assert!(
        b.log_text().contains("question decided"),
        "B decided:\n{}",
        b.log_text()
    );
}
