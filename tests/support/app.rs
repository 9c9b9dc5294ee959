//! Spawns the real service on port 0 with a temporary SQLite database, pointed at a
//! [`FakeTelegram`], and gives tests typed helpers to drive it through its HTTP API.
//!
//! The Telegram mode is chosen by where a test sits ([`webhook_mode`]): in the `service`
//! executable a test under `webhook::` (where `tests/service/main.rs` mounts a file such
//! as `confirmations.rs` a second time) runs the service in webhook mode, with
//! `public_url` set to its own loopback address, and one under `polling::` polls. The
//! same tests so run both ways under `cargo test`.
#![allow(dead_code)] // each test executable uses a subset

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hitl_telegram::Application;
use hitl_telegram::config::{Config, Settings};
/// The label of the button that approves with a question's window ("✅ Approve for 1 min").
use hitl_telegram::telegram::render::approve_for_label;

/// The button that approves a request with its window: "✅ Approve for 1 min", or
/// plain "✅ Approve" when it has none.
#[allow(dead_code)] // each test executable compiles this module; not all of them tap one
pub fn approve_label(window_seconds: u64) -> String {
    if window_seconds == 0 {
        "✅ Approve".to_owned()
    } else {
        approve_for_label(window_seconds)
    }
}
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::fake_telegram::{FakeTelegram, TgUser};

/// The `ops` route's chat and its approvers.
pub const OPS_CHAT: i64 = -1_001_000_000_001;
pub const OTHER_CHAT: i64 = -1_001_000_000_002;
/// A group of three approvers (alice, bob, carol) with `quorum = 2`.
pub const COUNCIL_CHAT: i64 = -1_001_000_000_003;
pub const ALICE: u64 = 111_111;
pub const BOB: u64 = 222_222;
pub const CAROL: u64 = 333_333;
/// Not an approver anywhere.
pub const MALLORY: u64 = 999_999;

pub const TOKEN_A: &str = "token-agent-a-0123456789";
pub const TOKEN_B: &str = "token-agent-b-9876543210";
pub const BOT_TOKEN: &str = "123456:TEST-bot-token";
pub const HOOK_SECRET_A: &str = "webhook-secret-of-agent-a";
/// The Telegram webhook secret (`X-Telegram-Bot-Api-Secret-Token`) in webhook mode.
pub const TELEGRAM_WEBHOOK_SECRET: &str = "telegram-webhook-secret_0123";
/// Where the webhook route is mounted (the default `webhook_path`).
pub const WEBHOOK_PATH: &str = "/telegram/webhook";

/// Where the Telegram mode of the services an executable's tests start comes from: each
/// test executable's `main.rs` says it in its `TELEGRAM_MODE` constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModeRule {
    /// Every test polls (an executable without webhook twins).
    Polling,
    /// By the test's module: under `polling::` it polls, under `webhook::` it runs in
    /// webhook mode, and anywhere else [`webhook_mode`] panics.
    ByModule,
}

/// Whether the calling test runs the service in webhook mode; otherwise it polls.
///
/// Under [`ModeRule::ByModule`] the mode is the first segment of the test's path, read
/// from the name of the thread libtest (and cargo-nextest, through it) runs the test on:
/// `webhook::windows::an_identical_call…` is webhook mode, `polling::windows::…` polls.
/// Called from any other thread (a task on a multi-threaded runtime's worker, a thread a
/// test spawned) or from a test outside those two modules, it panics rather than guess.
pub fn webhook_mode() -> bool {
    match crate::TELEGRAM_MODE {
        ModeRule::Polling => false,
        ModeRule::ByModule => mode_of_test_path(std::thread::current().name()),
    }
}

/// The mode a test at `path` (a libtest thread name) runs in, or a panic that says why
/// there is none.
fn mode_of_test_path(path: Option<&str>) -> bool {
    match path
        .and_then(|p| p.split_once("::"))
        .map(|(first, _)| first)
    {
        Some("webhook") => true,
        Some("polling") => false,
        _ => panic!(
            "webhook_mode(): the Telegram mode is the first segment of the test's path \
             (`polling::…` or `webhook::…`), read from the name of the thread libtest runs \
             the test on, but this thread is named {path:?}. Start the service from the \
             test's own thread (not from a spawned task on a multi-threaded runtime or a \
             thread of the test's), from a test mounted under `polling` or `webhook`, or \
             pass the mode explicitly (`TestApp::spawn_on`)."
        ),
    }
}

/// Rewrites settings TOML (as [`settings_toml`] makes it) for webhook mode with the
/// service reachable at `addr`.
pub fn with_webhook_mode(toml: &str, addr: SocketAddr) -> String {
    toml.replacen(
        "poll_timeout_seconds = 1\n",
        &format!("poll_timeout_seconds = 1\nmode = \"webhook\"\npublic_url = \"http://{addr}\"\n"),
        1,
    )
}
/// The `GET /metrics` token, in `METRICS_TOKEN`, for tests that set `[metrics] token_env`.
pub const METRICS_TOKEN: &str = "metrics-token-0123456789";
/// The secret that signs the outage alerts, in `HITL_OUTAGE_WEBHOOK_SECRET`.
pub const OUTAGE_SECRET: &str = "outage-alert-secret-0123456789";
/// The value of `UPSTREAM_KEY` in [`test_env`]: the header a hosted MCP upstream requires.
pub const UPSTREAM_KEY: &str = "upstream-key-5a7c9e1b";
/// Where agent-a's callbacks may go unless a test says otherwise.
pub const DEFAULT_CALLBACK_PREFIX: &str = "http://127.0.0.1:9/hooks";

pub fn alice() -> TgUser {
    TgUser::new(ALICE, "Alice").username("alice")
}
pub fn bob() -> TgUser {
    TgUser::new(BOB, "Bob")
}
pub fn carol() -> TgUser {
    TgUser::new(CAROL, "Carol").username("carol")
}

pub fn mallory() -> TgUser {
    TgUser::new(MALLORY, "Mallory").username("mallory")
}

/// The configuration every test starts from: agent-a may use `ops` (default) and
/// `other`; agent-b only `other`.
pub fn settings_toml(api_url: &str, db_url: &str) -> String {
    // `HITL_TEST_POOL_SIZE=N` runs every service of the suite with `[database]
    // pool_size = N`: how the smallest pool that passes was found (BENCHMARKS.md).
    let pool = std::env::var("HITL_TEST_POOL_SIZE")
        .map(|n| format!("pool_size = {n}\n"))
        .unwrap_or_default();
    format!(
        r#"
[server]
bind = "127.0.0.1:0"
[database]
url = "{db_url}"
{pool}[telegram]
api_url = "{api_url}"
poll_timeout_seconds = 1
[confirmation]
default_timeout_seconds = 30
max_timeout_seconds = 3600
default_window_seconds = 0
[webhooks]
timeout_seconds = 2
initial_backoff_seconds = 0.05
max_backoff_seconds = 0.2
give_up_after_seconds = 30
[owner_telegram_ids]
"alice-owner" = {ALICE}
[people]
alice = {ALICE}
bob = {BOB}
carol = {CAROL}
[[routes]]
name = "ops"
chat_id = {OPS_CHAT}
approvers = [{ALICE}, {BOB}]
forbid_self_approval = true
[[routes]]
name = "other"
chat_id = {OTHER_CHAT}
approvers = [{BOB}]
[[routes]]
name = "council"
chat_id = {COUNCIL_CHAT}
approvers = [{ALICE}, {BOB}, {CAROL}]
quorum = 2
[[agents]]
name = "agent-a"
token_env = "TOKEN_A"
routes = ["ops", "other", "council"]
default_route = "ops"
webhook_secret_env = "HOOK_A"
callback_url_prefixes = ["{{CALLBACK_PREFIX}}"]
[[agents]]
name = "agent-b"
token_env = "TOKEN_B"
routes = ["other"]
requests_per_minute = 6
max_pending = 2
"#
    )
}

pub fn test_env() -> HashMap<String, String> {
    HashMap::from([
        ("TELEGRAM_BOT_TOKEN".to_owned(), BOT_TOKEN.to_owned()),
        ("TOKEN_A".to_owned(), TOKEN_A.to_owned()),
        ("TOKEN_B".to_owned(), TOKEN_B.to_owned()),
        ("HOOK_A".to_owned(), HOOK_SECRET_A.to_owned()),
        (
            "TELEGRAM_WEBHOOK_SECRET".to_owned(),
            TELEGRAM_WEBHOOK_SECRET.to_owned(),
        ),
        ("METRICS_TOKEN".to_owned(), METRICS_TOKEN.to_owned()),
        // Signs the outage alerts, for tests that set [telegram] outage_webhook_url.
        (
            "HITL_OUTAGE_WEBHOOK_SECRET".to_owned(),
            OUTAGE_SECRET.to_owned(),
        ),
        // A hosted MCP upstream's header (tests/integrations/gateway_hosted.rs).
        ("UPSTREAM_KEY".to_owned(), UPSTREAM_KEY.to_owned()),
    ])
}

pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub client: reqwest::Client,
    pub telegram: Arc<FakeTelegram>,
    pub db_url: String,
    /// Prefix allowed for agent-a's callback URLs.
    pub callback_prefix: String,
    /// Keeps the database folder alive for the test's duration.
    pub dir: Arc<tempfile::TempDir>,
    /// The settings it runs with, kept so a restart runs with the same.
    toml: String,
    /// Whether it runs in webhook mode (a restart keeps the mode).
    pub webhook: bool,
    shutdown: CancellationToken,
    handle: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestApp {
    pub async fn spawn() -> TestApp {
        Self::spawn_with_callback_prefix(DEFAULT_CALLBACK_PREFIX).await
    }

    /// Spawns with agent-a allowed to send webhooks under `prefix`.
    pub async fn spawn_with_callback_prefix(prefix: &str) -> TestApp {
        Self::spawn_with(prefix, |toml| toml).await
    }

    /// Spawns with the settings TOML ([`settings_toml`]) rewritten by `edit`, e.g. to
    /// shorten `default_timeout_seconds`.
    pub async fn spawn_with_settings(edit: impl FnOnce(String) -> String) -> TestApp {
        Self::spawn_with(DEFAULT_CALLBACK_PREFIX, edit).await
    }

    /// Spawns with agent A's rate and pending limits out of the way, for tests that ask
    /// many questions at once.
    pub async fn spawn_unthrottled() -> TestApp {
        Self::spawn_with_settings(|toml| {
            toml.replace(
                "default_route = \"ops\"\n",
                "default_route = \"ops\"\nrequests_per_minute = 100000\nmax_pending = 1000\n",
            )
        })
        .await
    }

    async fn spawn_with(prefix: &str, edit: impl FnOnce(String) -> String) -> TestApp {
        let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
        Self::spawn_on(telegram, webhook_mode(), prefix, edit).await
    }

    /// Spawns against a fake the test prepared (a fault queued, a webhook left over), in
    /// webhook mode or polling mode as `webhook` says (usually [`webhook_mode`]).
    pub async fn spawn_on(
        telegram: Arc<FakeTelegram>,
        webhook: bool,
        prefix: &str,
        edit: impl FnOnce(String) -> String,
    ) -> TestApp {
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
        Self::start(telegram, dir, db_url, prefix.to_owned(), webhook, edit).await
    }

    async fn start(
        telegram: Arc<FakeTelegram>,
        dir: Arc<tempfile::TempDir>,
        db_url: String,
        callback_prefix: String,
        webhook: bool,
        edit: impl FnOnce(String) -> String,
    ) -> TestApp {
        let toml = edit(
            settings_toml(&telegram.api_url(), &db_url)
                .replace("{CALLBACK_PREFIX}", &callback_prefix),
        );
        // Bound first: in webhook mode the address is part of the configuration.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("bound address");
        let running_toml = if webhook {
            with_webhook_mode(&toml, addr)
        } else {
            toml.clone()
        };
        let settings = Settings::from_toml(&running_toml).expect("settings");
        let env = test_env();
        let config = Config::from_settings(settings, &|k| env.get(k).cloned()).expect("config");
        let app = Application::build_on(config, listener)
            .await
            .expect("build");
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(app.run_until_stopped(shutdown.clone()));
        if webhook {
            // Taps injected from now on reach this instance (earlier ones wait in the fake).
            telegram
                .wait_for_webhook(&format!("http://{addr}{WEBHOOK_PATH}"))
                .await;
        }
        TestApp {
            addr,
            base: format!("http://{addr}"),
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            telegram,
            db_url,
            callback_prefix,
            dir,
            toml,
            webhook,
            shutdown,
            handle: Some(handle),
        }
    }

    /// Writes the settings it runs with to a file in its folder, for the command line
    /// (`check-config`, `rules test`, `pending`) to read, and returns its path.
    pub fn write_settings(&self) -> std::path::PathBuf {
        let path = self.dir.path().join("settings.toml");
        std::fs::write(&path, &self.toml).expect("settings file");
        path
    }

    /// Stops the service cleanly and starts a new one on the same database and fake.
    pub async fn restart(mut self) -> TestApp {
        self.stop().await;
        let toml = self.toml.clone();
        Self::start(
            self.telegram.clone(),
            self.dir.clone(),
            self.db_url.clone(),
            self.callback_prefix.clone(),
            self.webhook,
            |_| toml,
        )
        .await
    }

    /// Stops the service cleanly and starts a new one on the same database and fake,
    /// with its settings rewritten by `edit` (new rules, say).
    pub async fn restart_editing(mut self, edit: impl FnOnce(String) -> String) -> TestApp {
        self.stop().await;
        let toml = edit(self.toml.clone());
        Self::start(
            self.telegram.clone(),
            self.dir.clone(),
            self.db_url.clone(),
            self.callback_prefix.clone(),
            self.webhook,
            |_| toml,
        )
        .await
    }

    /// Stops the service cleanly and starts a new one on the database at `db_url` (same
    /// fake and settings otherwise): after a copy of its database elsewhere, say.
    pub async fn restart_on(mut self, db_url: &str) -> TestApp {
        self.stop().await;
        let toml = self.toml.replace(&self.db_url, db_url);
        Self::start(
            self.telegram.clone(),
            self.dir.clone(),
            db_url.to_owned(),
            self.callback_prefix.clone(),
            self.webhook,
            |_| toml,
        )
        .await
    }

    pub async fn stop(&mut self) {
        self.shutdown.cancel();
        if let Some(h) = self.handle.take() {
            tokio::time::timeout(Duration::from_secs(30), h)
                .await
                .expect("service stops within 30 s")
                .expect("service task")
                .expect("service ran cleanly");
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POST /v1/confirmations as agent-a.
    pub async fn create(&self, body: Value) -> (StatusCode, Value) {
        self.create_as(TOKEN_A, body).await
    }

    pub async fn create_as(&self, token: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .client
            .post(self.url("/v1/confirmations"))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .expect("request");
        json_of(r).await
    }

    /// POST raw bytes with the given token (None: no Authorization header).
    pub async fn post_raw(
        &self,
        token: Option<&str>,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .post(self.url("/v1/confirmations"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        json_of(req.send().await.expect("request")).await
    }

    /// Starts a blocking create in the background.
    pub fn create_blocking(&self, body: Value) -> JoinHandle<(StatusCode, Value)> {
        ask_blocking(&self.client, &self.base, body)
    }

    pub async fn get(&self, id: &str) -> (StatusCode, Value) {
        self.get_as(TOKEN_A, id, None).await
    }

    pub async fn get_as(&self, token: &str, id: &str, wait: Option<&str>) -> (StatusCode, Value) {
        let mut url = self.url(&format!("/v1/confirmations/{id}"));
        if let Some(w) = wait {
            url.push_str(&format!("?wait={w}"));
        }
        let r = self
            .client
            .get(url)
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        json_of(r).await
    }

    pub async fn delete(&self, id: &str) -> (StatusCode, Value) {
        self.delete_as(TOKEN_A, id).await
    }

    pub async fn delete_as(&self, token: &str, id: &str) -> (StatusCode, Value) {
        let r = self
            .client
            .delete(self.url(&format!("/v1/confirmations/{id}")))
            .bearer_auth(token)
            .send()
            .await
            .expect("request");
        json_of(r).await
    }

    /// Creates a suspended request and waits until its question is in the chat; returns
    /// the record and the message id.
    pub async fn ask_suspended(&self, mut body: Value) -> (Value, i32) {
        body["wait"] = json!("suspend");
        let before = self.telegram.sent_messages().len();
        let (status, record) = self.create(body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{record}");
        let msgs = self.telegram.wait_for_messages(before + 1).await;
        let msg = msgs.last().expect("a message");
        // Wait until the service has stored the message id, so taps are bound to it.
        self.wait_until_message_recorded(record["id"].as_str().unwrap())
            .await;
        (record, msg.message_id)
    }

    async fn wait_until_message_recorded(&self, id: &str) {
        // The service records the message id right after sendMessage returns.
        let pool = sqlx::SqlitePool::connect(&self.db_url).await.expect("db");
        for _ in 0..200 {
            let row: Option<(Option<i64>,)> =
                sqlx::query_as("SELECT message_id FROM confirmations WHERE id = ?")
                    .bind(id)
                    .fetch_optional(&pool)
                    .await
                    .expect("query");
            if matches!(row, Some((Some(_),))) {
                pool.close().await;
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("message id of {id} was never recorded");
    }

    /// Reads a confirmation until it reaches `status` (long-poll), failing after 10 s.
    /// The audit trail of question `id`, as agent-a sees it
    /// (`GET /v1/confirmations/{id}/events`).
    pub async fn audit_events(&self, id: &str) -> Vec<Value> {
        let r = self
            .client
            .get(self.url(&format!("/v1/confirmations/{id}/events")))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .expect("GET events");
        let (s, b) = json_of(r).await;
        assert_eq!(s, StatusCode::OK, "{b}");
        b["events"].as_array().expect("events").clone()
    }

    /// The kinds of question `id`'s audit events, oldest first.
    pub async fn audit_kinds(&self, id: &str) -> Vec<String> {
        self.audit_events(id)
            .await
            .iter()
            .map(|e| e["kind"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// `GET /metrics` as text (the test config leaves it open on loopback).
    pub async fn metrics_text(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics body")
    }

    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        for _ in 0..20 {
            let (code, r) = self.get_as(TOKEN_A, id, Some("1")).await;
            assert_eq!(code, StatusCode::OK, "{r}");
            if r["status"] == status {
                return r;
            }
        }
        panic!("{id} never reached {status}");
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts a blocking create as agent A on the service at `base` (`http://ADDR`), in the
/// background: for a service this test did not spawn (a process, a container).
pub fn ask_blocking(
    client: &reqwest::Client,
    base: &str,
    body: Value,
) -> JoinHandle<(StatusCode, Value)> {
    let client = client.clone();
    let url = format!("{base}/v1/confirmations");
    tokio::spawn(async move {
        let r = client
            .post(url)
            .bearer_auth(TOKEN_A)
            .json(&body)
            .send()
            .await
            .expect("request");
        json_of(r).await
    })
}

pub async fn json_of(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    let text = r.text().await.expect("body");
    let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON ({status}): {text}"));
    (status, v)
}

/// A time of the API (RFC 3339), as a time to compute with.
pub fn time_of(v: &Value) -> time::OffsetDateTime {
    let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
}
