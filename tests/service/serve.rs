//! The real binary: `serve` starts from a config file, does the job, stops cleanly on
//! SIGTERM, and never writes a token to its log.

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::{ServiceProcess, write_config};
use serde_json::{Value, json};

#[tokio::test]
async fn serve_decides_a_request_stops_on_sigterm_and_logs_no_secret() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let mut service = ServiceProcess::start(&config).await;

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{}/v1/confirmations", service.base);
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

    let status = service.terminate().await;
    // Let the log reader drain the last lines.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let log = service.log_text();
    assert!(status.success(), "exit {status}:\n{log}");
    assert!(log.contains("\"stopped\""), "{log}");
    for secret in [
        BOT_TOKEN,
        TOKEN_A,
        TOKEN_B,
        HOOK_SECRET_A,
        "TEST-bot-token",
        "hunter2",
    ] {
        assert!(!log.contains(secret), "the log contains {secret:?}:\n{log}");
    }
}
