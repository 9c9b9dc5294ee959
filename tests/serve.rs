//! The real binary: `serve` starts from a config file, does the job, stops cleanly on
//! SIGTERM, and never writes a token to its log.

mod support;

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::app::*;
use support::fake_telegram::FakeTelegram;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

#[tokio::test]
async fn serve_decides_a_request_stops_on_sigterm_and_logs_no_secret() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = dir.path().join("config.toml");
    std::fs::write(&config, settings_toml(&telegram.api_url(), &db_url)).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .args(["--log-json", "serve", "--config", config.to_str().unwrap()])
        .env("TELEGRAM_BOT_TOKEN", BOT_TOKEN)
        .env("TOKEN_A", TOKEN_A)
        .env("TOKEN_B", TOKEN_B)
        .env("RUST_LOG", "debug")
        .env("NO_PROXY", "127.0.0.1")
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = Vec::new();
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            log.push(line.clone());
            if let Ok(v) = serde_json::from_str::<Value>(&line)
                && v["message"] == "hitl-telegram is serving"
            {
                return v["addr"].as_str().unwrap().to_owned();
            }
        }
        panic!("the service exited before serving:\n{}", log.join("\n"));
    })
    .await
    .expect("serving within 30 s");

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("http://{addr}/v1/confirmations");
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .bearer_auth(TOKEN_A)
                .json(&json!({"tool": "deploy", "params": {"secret_param": "hunter2"}}))
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    let msg = telegram.wait_for_messages(1).await.remove(0);
    telegram.tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let record = pending.await.unwrap();
    assert_eq!(record["status"], "confirmed");

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("stops within 30 s of SIGTERM")
        .unwrap();
    while let Ok(Some(line)) = lines.next_line().await {
        log.push(line);
    }
    let log = log.join("\n");
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("stopped"), "{log}");
    for secret in [BOT_TOKEN, TOKEN_A, TOKEN_B, "TEST-bot-token", "hunter2"] {
        assert!(!log.contains(secret), "the log contains {secret:?}:\n{log}");
    }
}
