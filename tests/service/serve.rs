//! The real binary: `serve` starts from a config file, does the job, stops cleanly on
//! SIGTERM, and never writes a token to its log.

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::{ServiceProcess, write_config};
use std::time::Duration;

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

/// A rule in the `[[rules]]` form, for the config file.
fn rule(name: &str, effect: &str) -> String {
    format!("\n[[rules]]\nname = \"{name}\"\neffect = \"{effect}\"\ntools = [\"purge_cache\"]\n")
}

/// The details of the trail's `kind` events at `db_url`, oldest first.
async fn events_of(db_url: &str, kind: &str) -> Vec<Value> {
    let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT detail FROM audit_events WHERE kind = $1 ORDER BY seq")
            .bind(kind)
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    rows.into_iter()
        .map(|(d,)| serde_json::from_str(&d).unwrap())
        .collect()
}

/// The `rules_loaded` events of the trail at `db_url`, oldest first.
async fn rules_loaded(db_url: &str) -> Vec<Value> {
    events_of(db_url, "rules_loaded").await
}

/// The binary's own allocator options reach jemalloc (a linker that dropped the
/// exported symbol would leave its ten-second default): jemalloc prints the options it
/// runs with at exit when asked to in the environment, which adds to, and does not
/// replace, the binary's own.
#[test]
fn the_binary_returns_freed_memory_to_the_system_within_a_second() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stats = String::from_utf8_lossy(&out.stderr);
    assert!(
        stats.contains("opt.dirty_decay_ms: 1000 "),
        "jemalloc's options: {}",
        stats
            .lines()
            .filter(|l| l.contains("decay"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test]
async fn each_start_records_the_release_it_runs_as_version_and_healthz_report_it() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let printed = std::process::Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .arg("--version")
        .output()
        .unwrap();
    let printed = String::from_utf8(printed.stdout).unwrap();
    // `hitl-telegram 1.0.0 (commit 0123456789ab)`: the crate's version and a commit.
    let (version, commit) = printed
        .trim()
        .strip_prefix("hitl-telegram ")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|rest| rest.split_once(" (commit "))
        .unwrap_or_else(|| panic!("--version printed {printed:?}"));
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit:?}"
    );

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for start in 1..=2 {
        let mut service = ServiceProcess::start(&config).await;
        let health: Value = client
            .get(format!("{}/healthz", service.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (&health["version"], &health["commit"]),
            (&json!(version), &json!(commit)),
            "{health}"
        );
        assert!(service.terminate().await.success());
        let started = events_of(&db_url, "service_started").await;
        assert_eq!(started.len(), start, "one event per start: {started:?}");
        let last = &started[start - 1];
        assert_eq!(
            (&last["version"], &last["commit"]),
            (&json!(version), &json!(commit))
        );
        assert_eq!(
            last["rules_hash"].as_str().map(str::len),
            Some(64),
            "{last}"
        );
    }
}

#[tokio::test]
async fn sighup_reloads_the_rules_keeps_the_last_good_set_when_the_file_is_invalid_and_audits_the_new_hash()
 {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let base = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, base.clone() + &rule("purges-denied", "deny")).unwrap();
    let mut service = ServiceProcess::start(&config).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let purge = || async {
        client
            .post(format!("{}/v1/confirmations", service.base))
            .bearer_auth(TOKEN_A)
            .json(&json!({"tool": "purge_cache", "params": {}}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let hangup = || {
        let pid = service.child.id().expect("running").to_string();
        assert!(
            std::process::Command::new("kill")
                .args(["-HUP", &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    let first = purge().await;
    assert_eq!(
        (first["status"].as_str(), first["rule"].as_str()),
        (Some("cancelled"), Some("purges-denied"))
    );

    // An invalid file: the last good rules stay, and the log says why.
    std::fs::write(
        &config,
        base.clone() + &rule("", "allow") + "bogus_key = 1\n",
    )
    .unwrap();
    hangup();
    assert!(
        service
            .logs_within("the last good rules stay in force", Duration::from_secs(10))
            .await,
        "{}",
        service.log_text()
    );
    let still = purge().await;
    assert_eq!(still["rule"], "purges-denied", "{still}");
    assert!(rules_loaded(&db_url).await.is_empty());

    // A valid file: the new rules decide from now on, and the trail names their hash.
    std::fs::write(&config, base + &rule("purges-allowed", "allow")).unwrap();
    hangup();
    assert!(
        service
            .logs_within("rules reloaded", Duration::from_secs(10))
            .await,
        "{}",
        service.log_text()
    );
    let now = purge().await;
    assert_eq!(
        (now["status"].as_str(), now["rule"].as_str()),
        (Some("confirmed"), Some("purges-allowed"))
    );
    let loaded = rules_loaded(&db_url).await;
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert_eq!(loaded[0]["rules_hash"], now["rule_decision"]["rules_hash"]);
    assert_eq!(
        loaded[0]["previous_rules_hash"],
        first["rule_decision"]["rules_hash"]
    );
    assert_ne!(loaded[0]["rules_hash"], loaded[0]["previous_rules_hash"]);
    assert!(service.terminate().await.success());
}
