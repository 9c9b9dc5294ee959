//! What only webhook mode does: the secret header guards the update route, `setWebhook`
//! is called (and retried) at start and never undone at shutdown, a polling instance
//! takes a bot back from a leftover webhook, and the configuration says what is wrong.
//! The taps-and-replies behaviours themselves run in both modes (`polling::` and `webhook::` in `main.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use hitl_telegram::config::{Config, Settings};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn webhook_app() -> TestApp {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    TestApp::spawn_on(telegram, true, DEFAULT_CALLBACK_PREFIX, |t| t).await
}

/// Asks a question in the ops chat, taps Approve as Alice, and checks that it counted.
async fn alice_approves_a_question(app: &TestApp) {
    let (record, message_id) = app.ask_suspended(deploy()).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let r = app
        .wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    assert_eq!(r["decided_by"]["id"], ALICE);
}

fn deploy() -> Value {
    json!({"tool": "deploy", "params": {"v": 1}})
}

/// A callback query update for the Approve button of `message_id` in the ops chat, as
/// Telegram would POST it.
fn approve_update(app: &TestApp, message_id: i32, user_id: u64) -> Value {
    let message = app.telegram.message(OPS_CHAT, message_id);
    let data = message.buttons[0][0].callback_data.clone().expect("data");
    json!({
        "update_id": 900_000_001,
        "callback_query": {
            "id": "8800000000000000001",
            "from": {"id": user_id, "is_bot": false, "first_name": "Alice"},
            "chat_instance": "1",
            "data": data,
            "message": {
                "message_id": message_id,
                "date": 1_700_000_000,
                "chat": {"id": OPS_CHAT, "type": "supergroup", "title": "ops"},
                "text": "question",
            },
        },
    })
}

async fn post_update(
    app: &TestApp,
    secret: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (StatusCode, String) {
    let mut req = app
        .client
        .post(app.url(WEBHOOK_PATH))
        .header("content-type", "application/json")
        .body(body);
    if let Some(s) = secret {
        req = req.header("X-Telegram-Bot-Api-Secret-Token", s);
    }
    let r = req.send().await.expect("request");
    (r.status(), r.text().await.expect("body"))
}

#[tokio::test]
async fn an_update_without_the_right_secret_gets_401_and_changes_nothing() {
    let app = webhook_app().await;
    let (record, message_id) = app.ask_suspended(deploy()).await;
    let id = record["id"].as_str().unwrap();
    let update = approve_update(&app, message_id, ALICE).to_string();

    for secret in [None, Some("wrong-secret"), Some("")] {
        let (status, body) = post_update(&app, secret, update.clone()).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{secret:?}: {body}");
        let body: Value = serde_json::from_str(&body).expect("JSON error body");
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, r) = app.get(id).await;
    assert_eq!(r["status"], "pending", "{r}");
    assert!(app.telegram.callback_answers().is_empty());

    // The same update with the secret counts: the refusal was about the secret only.
    let (status, _) = post_update(&app, Some(TELEGRAM_WEBHOOK_SECRET), update).await;
    assert_eq!(status, StatusCode::OK);
    let r = app.wait_status(id, "confirmed").await;
    assert_eq!(r["decided_by"]["id"], ALICE);
}

#[tokio::test]
async fn telegram_retries_a_refused_update_until_the_secret_matches() {
    let app = webhook_app().await;
    let (record, message_id) = app.ask_suspended(deploy()).await;
    let id = record["id"].as_str().unwrap();
    let url = app.telegram.webhook().expect("set").url;
    // Telegram holding a stale secret (say, another deployment's).
    app.telegram.set_webhook(&url, Some("stale-secret"));
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    // Two refusals: Telegram got a 401 and tried again.
    let mut refused = app.telegram.webhook_deliveries();
    for _ in 0..100 {
        if refused.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        refused = app.telegram.webhook_deliveries();
    }
    assert!(refused.len() >= 2, "{refused:?}");
    assert!(refused.iter().all(|d| d.status == Some(401)), "{refused:?}");
    let (_, r) = app.get(id).await;
    assert_eq!(r["status"], "pending", "{r}");

    app.telegram
        .set_webhook(&url, Some(TELEGRAM_WEBHOOK_SECRET));
    let r = app.wait_status(id, "confirmed").await;
    assert_eq!(r["decided_by"]["id"], ALICE);
}

#[tokio::test]
async fn a_body_that_is_not_an_update_gets_400_and_an_unknown_kind_is_ignored() {
    let app = webhook_app().await;
    for garbage in ["not json", "{}", "[1,2]", r#"{"update_id": "x"}"#] {
        let (status, body) = post_update(&app, Some(TELEGRAM_WEBHOOK_SECRET), garbage).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{garbage}: {body}");
        let body: Value = serde_json::from_str(&body).expect("JSON error body");
        assert_eq!(body["error"]["code"], "malformed_json");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a Telegram Update"),
            "{body}"
        );
    }
    // A kind the service does not handle: 200, or Telegram would resend it forever.
    let poll = json!({"update_id": 5, "poll": {"id": "1", "question": "?"}}).to_string();
    let (status, body) = post_update(&app, Some(TELEGRAM_WEBHOOK_SECRET), poll).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = post_update(&app, Some(TELEGRAM_WEBHOOK_SECRET), vec![b'x'; 70 * 1024]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn set_webhook_is_called_at_start_with_the_url_the_secret_and_the_handled_kinds() {
    let app = webhook_app().await;
    let calls = app.telegram.requests("setWebhook");
    assert_eq!(calls.len(), 1);
    let body = &calls[0].body;
    assert_eq!(body["url"], format!("http://{}{WEBHOOK_PATH}", app.addr));
    assert_eq!(body["secret_token"], TELEGRAM_WEBHOOK_SECRET);
    let kinds: Value = serde_json::from_str(body["allowed_updates"].as_str().unwrap()).unwrap();
    assert_eq!(kinds, json!(["callback_query", "message"]));
    assert!(app.telegram.requests("getUpdates").is_empty());
    let hook = app.telegram.webhook().expect("set");
    assert_eq!(hook.secret_token.as_deref(), Some(TELEGRAM_WEBHOOK_SECRET));
}

#[tokio::test]
async fn shutdown_leaves_the_webhook_set_and_a_restart_sets_it_again() {
    let mut app = webhook_app().await;
    let (record, message_id) = app.ask_suspended(deploy()).await;
    let id = record["id"].as_str().unwrap().to_owned();
    app.stop().await;
    assert!(app.telegram.requests("deleteWebhook").is_empty());
    assert!(app.telegram.webhook().is_some());

    // A tap while no instance runs waits at Telegram and reaches the next one.
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let app = app.restart().await;
    assert_eq!(app.telegram.requests("setWebhook").len(), 2);
    let r = app.wait_status(&id, "confirmed").await;
    assert_eq!(r["decided_by"]["id"], ALICE);
    assert!(app.telegram.requests("deleteWebhook").is_empty());
}

#[tokio::test]
async fn a_failing_set_webhook_is_retried_and_then_taps_work() {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    telegram.fail_next(
        "setWebhook",
        1,
        400,
        "Bad Request: bad webhook: Failed to resolve host: Name or service not known",
    );
    let app = TestApp::spawn_on(telegram, true, DEFAULT_CALLBACK_PREFIX, |t| t).await;
    assert_eq!(app.telegram.requests("setWebhook").len(), 2);
    alice_approves_a_question(&app).await;
}

#[tokio::test]
async fn polling_mode_deletes_a_leftover_webhook_and_receives_taps() {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    telegram.set_webhook("https://old.example/telegram/webhook", Some("old"));
    let app = TestApp::spawn_on(telegram, false, DEFAULT_CALLBACK_PREFIX, |t| t).await;
    app.telegram.wait_for_requests("deleteWebhook", 1).await;
    alice_approves_a_question(&app).await;
    assert!(app.telegram.webhook().is_none());
    assert_eq!(app.telegram.requests("deleteWebhook").len(), 1);
    let delete = &app.telegram.requests("deleteWebhook")[0].body;
    assert_ne!(delete["drop_pending_updates"], true, "{delete}");
}

// ----- Configuration -------------------------------------------------------------------

/// The test settings with `telegram_lines` added to `[telegram]`.
fn toml_with(telegram_lines: &str) -> String {
    settings_toml("http://127.0.0.1:9", "sqlite://unused.db")
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX)
        .replacen(
            "poll_timeout_seconds = 1\n",
            &format!("poll_timeout_seconds = 1\n{telegram_lines}\n"),
            1,
        )
}

/// The error `Config::from_settings` gives for [`toml_with`]`(telegram_lines)` with the
/// test environment changed by `edit_env`.
fn config_error(
    telegram_lines: &str,
    edit_env: impl FnOnce(&mut std::collections::HashMap<String, String>),
) -> String {
    let mut env = test_env();
    edit_env(&mut env);
    let settings = Settings::from_toml(&toml_with(telegram_lines)).expect("settings parse");
    match Config::from_settings(settings, &|k| env.get(k).cloned()) {
        Ok(_) => panic!("accepted: {telegram_lines}"),
        Err(e) => e.to_string(),
    }
}

fn config_ok(telegram_lines: &str) -> Config {
    let env = test_env();
    let settings = Settings::from_toml(&toml_with(telegram_lines)).expect("settings parse");
    Config::from_settings(settings, &|k| env.get(k).cloned()).expect("accepted")
}

#[tokio::test]
async fn webhook_mode_without_public_url_is_refused_naming_the_key() {
    let e = config_error("mode = \"webhook\"", |_| {});
    assert!(e.contains("telegram.public_url"), "{e}");
}

#[tokio::test]
async fn webhook_mode_without_the_secret_variable_is_refused_naming_it() {
    let e = config_error(
        "mode = \"webhook\"\npublic_url = \"https://hitl.example.com\"",
        |env| {
            env.remove("TELEGRAM_WEBHOOK_SECRET");
        },
    );
    assert!(
        e.contains("telegram.webhook_secret_env") && e.contains("TELEGRAM_WEBHOOK_SECRET"),
        "{e}"
    );
}

#[tokio::test]
async fn a_webhook_secret_telegram_would_refuse_is_refused_without_showing_it() {
    for bad in ["has space", "semi;colon", "", &"a".repeat(257)] {
        let e = config_error(
            "mode = \"webhook\"\npublic_url = \"https://hitl.example.com\"",
            |env| {
                env.insert("TELEGRAM_WEBHOOK_SECRET".into(), bad.to_owned());
            },
        );
        assert!(e.contains("telegram.webhook_secret_env"), "{e}");
        if !bad.is_empty() {
            assert!(!e.contains(bad), "the secret leaked: {e}");
        }
    }
}

#[tokio::test]
async fn an_http_public_url_is_refused_unless_the_host_is_loopback() {
    let e = config_error(
        "mode = \"webhook\"\npublic_url = \"http://hitl.example.com\"",
        |_| {},
    );
    assert!(
        e.contains("telegram.public_url") && e.contains("https"),
        "{e}"
    );
    for url in [
        "http://127.0.0.1:8080",
        "http://localhost:8080",
        "http://[::1]:8080",
    ] {
        let c = config_ok(&format!("mode = \"webhook\"\npublic_url = \"{url}\""));
        assert!(!format!("{c:?}").contains(TELEGRAM_WEBHOOK_SECRET));
    }
    let e = config_error(
        "mode = \"webhook\"\npublic_url = \"https://hitl.example.com:9443\"",
        |_| {},
    );
    assert!(
        e.contains("telegram.public_url") && e.contains("443"),
        "{e}"
    );
}

#[tokio::test]
async fn a_webhook_path_must_start_with_a_slash_and_leave_the_api_alone() {
    for path in [
        "telegram",
        "/v1/confirmations",
        "/healthz",
        "/v1",
        "/mcp",
        "/mcp/hook",
        "/a/{x}",
        "/",
    ] {
        let e = config_error(&format!("webhook_path = \"{path}\""), |_| {});
        assert!(e.contains("telegram.webhook_path"), "{path}: {e}");
    }
}

#[tokio::test]
async fn the_webhook_url_is_the_public_url_joined_with_the_path() {
    let c = config_ok(
        "mode = \"webhook\"\npublic_url = \"https://hitl.example.com/base/\"\nwebhook_path = \"/tg/hook\"",
    );
    match c.telegram_mode {
        hitl_telegram::config::TelegramMode::Webhook(w) => {
            assert_eq!(w.url.as_str(), "https://hitl.example.com/base/tg/hook");
            assert_eq!(w.path, "/tg/hook");
        }
        other => panic!("not webhook mode: {other:?}"),
    }
}

#[tokio::test]
async fn polling_mode_retries_a_failed_delete_webhook_and_then_receives_taps() {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    telegram.set_webhook("https://old.example/telegram/webhook", Some("old"));
    telegram.fail_next_with_retry_after("deleteWebhook", 1, 1);
    let app = TestApp::spawn_on(telegram, false, DEFAULT_CALLBACK_PREFIX, |t| t).await;
    app.telegram.wait_for_requests("deleteWebhook", 2).await;
    alice_approves_a_question(&app).await;
    assert!(app.telegram.webhook().is_none());
}
