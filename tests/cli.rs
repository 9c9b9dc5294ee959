//! The command line: `ask` gates a shell step on a tap (exit 0/1/2/3), `check-config`
//! refuses bad configurations naming the key, `migrate` prepares the database.

mod support;

use std::process::Stdio;

use serde_json::Value;
use support::app::*;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");

fn ask(app: &TestApp, token: &str, extra: &[&str]) -> tokio::process::Child {
    Command::new(BIN)
        .args([
            "ask", "--url", &app.base, "--token", token, "--tool", "deploy",
        ])
        .args(["--param", "service=billing", "--param", "replicas:=3"])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn")
}

async fn finish(child: tokio::process::Child) -> (i32, String, String) {
    let out = child.wait_with_output().await.expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn ask_exits_0_when_approved_and_prints_the_record() {
    let app = TestApp::spawn().await;
    let child = ask(
        &app,
        TOKEN_A,
        &["--template", "Deploy {service} x{replicas}?"],
    );
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(
        msg.visible_text.contains("\"replicas\": 3"),
        "{}",
        msg.visible_text
    );
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 0, "{out}{err}");
    let record: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["parameters"]["replicas"], 3);
}

#[tokio::test]
async fn ask_exits_1_when_cancelled() {
    let app = TestApp::spawn().await;
    let child = ask(&app, TOKEN_A, &[]);
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", alice());
    let (code, out, _) = finish(child).await;
    assert_eq!(code, 1, "{out}");
}

#[tokio::test]
async fn ask_exits_2_on_timeout() {
    let app = TestApp::spawn().await;
    let (code, out, _) = finish(ask(&app, TOKEN_A, &["--timeout", "0.3"])).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("\"timeout\""));
}

#[tokio::test]
async fn ask_exits_3_on_an_error_and_says_why() {
    let app = TestApp::spawn().await;
    let (code, _, err) = finish(ask(&app, "wrong-token", &[])).await;
    assert_eq!(code, 3);
    assert!(err.contains("unknown token"), "{err}");
    let (code, _, err) = finish(ask(&app, TOKEN_A, &["--param", "novalue"])).await;
    assert_eq!(code, 3);
    assert!(err.contains("key=value"), "{err}");
}

fn config_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("TELEGRAM_BOT_TOKEN")
        .env_remove("HITL_AGENT_WORKDAY_TOKEN")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[tokio::test]
async fn check_config_accepts_the_shipped_config_when_the_tokens_are_set() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", "t")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
}

#[tokio::test]
async fn check_config_refuses_a_missing_token_variable_naming_it() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HITL_AGENT_WORKDAY_TOKEN") && err.contains("agents[0].token_env"),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_refuses_an_unknown_route_in_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml"))
            .unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        shipped.replace(r#"routes = ["ops"]"#, r#"routes = ["ops", "finance"]"#),
    )
    .unwrap();
    let out = config_cmd(&["--config", path.to_str().unwrap(), "check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", "t")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown route 'finance'"), "{err}");
}

#[tokio::test]
async fn demo_mode_needs_only_the_operator_id_and_two_tokens() {
    let out = config_cmd(&["check-config", "--demo"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", "t")
        .env("HITL_DEMO_OPERATOR_ID", "424242")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = config_cmd(&["check-config", "--demo"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", "t")
        .env_remove("HITL_DEMO_OPERATOR_ID")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("HITL_DEMO_OPERATOR_ID"));
}

#[tokio::test]
async fn an_environment_variable_overrides_a_single_key() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", "t")
        .env("HITL__TELEGRAM__POLL_TIMEOUT_SECONDS", "99")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("telegram.poll_timeout_seconds"));
}

#[tokio::test]
async fn migrate_creates_the_database_and_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub/dir/hitl.db");
    let out = config_cmd(&["migrate"])
        .env("HITL__DATABASE__URL", format!("sqlite://{}", db.display()))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists());
}

#[tokio::test]
async fn check_config_shows_webhook_mode_and_refuses_it_without_the_secret() {
    let webhook = |secret: Option<&str>| {
        let mut c = config_cmd(&["check-config"]);
        c.env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("HITL_AGENT_WORKDAY_TOKEN", "t")
            .env("HITL__TELEGRAM__MODE", "webhook")
            .env("HITL__TELEGRAM__PUBLIC_URL", "https://hitl.example.com")
            .env_remove("TELEGRAM_WEBHOOK_SECRET");
        if let Some(s) = secret {
            c.env("TELEGRAM_WEBHOOK_SECRET", s);
        }
        c
    };
    let out = webhook(Some("s3cret_value-1")).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("webhook at https://hitl.example.com/telegram/webhook")
            && !stdout.contains("s3cret_value-1"),
        "{stdout}"
    );

    let out = webhook(None).output().await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("telegram.webhook_secret_env") && err.contains("TELEGRAM_WEBHOOK_SECRET"),
        "{err}"
    );
}

/// The `head` field of the service's `audit chain head` log lines logged `when`.
fn logged_heads(log: &str, when: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "audit chain head" && v["when"] == when)
        .map(|v| v["head"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn serve_logs_the_audit_head_at_shutdown_and_verify_accepts_it() {
    use support::fake_telegram::FakeTelegram;
    use support::process::{ServiceProcess, write_config};

    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let mut service = ServiceProcess::start(&config).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let record: Value = client
        .post(format!("{}/v1/confirmations", service.base))
        .bearer_auth(TOKEN_A)
        .json(&serde_json::json!({"tool": "t", "params": {}, "timeout_seconds": 0.2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(record["status"], "timeout", "{record}");
    assert!(service.terminate().await.success());
    // Let the log reader drain the last lines.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let log = service.log_text();

    assert_eq!(
        logged_heads(&log, "start"),
        vec![format!("0:{}", "0".repeat(64))],
        "a fresh database starts empty:\n{log}"
    );
    let shutdown = logged_heads(&log, "shutdown");
    assert_eq!(shutdown.len(), 1, "{log}");
    let out = Command::new(BIN)
        .args(["--config", config.to_str().unwrap()])
        .args(["audit", "verify", "--expect-head", &shutdown[0]])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("head: {}", shutdown[0])),
        "the logged head is the trail's final head: {stdout}"
    );
}
