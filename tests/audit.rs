//! The audit trail: every step of a request is recorded, an agent can read its own
//! request's events, and the hash chain exposes any edit or deletion.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::app::*;
use tokio::process::Command;

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

/// Runs `hitl-telegram audit ...` against the app's database.
async fn audit_cli(app: &TestApp, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    cli(&app.db_url, &all).await
}

/// Runs the binary with a config whose database is `db_url`.
async fn cli(db_url: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let toml = settings_toml("http://127.0.0.1:9", db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX);
    std::fs::write(&config, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_requests_life_is_recorded_step_by_step_and_readable_by_its_agent() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"password": "hunter2"}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let q = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", mallory());
    app.telegram.wait_for_callback_answer(&q).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    app.wait_status(id, "confirmed").await;

    let ev = app.audit_events(id).await;
    assert_eq!(
        kinds(&ev),
        vec![
            "requested",
            "delivered",
            "refused_tap",
            "answered",
            "decided"
        ]
    );
    assert_eq!(ev[0]["actor"], "agent:agent-a");
    assert_eq!(ev[0]["detail"]["args_hash"], record["args_hash"]);
    assert_eq!(ev[1]["detail"]["message_id"], message_id);
    assert_eq!(ev[2]["actor"], format!("telegram:{MALLORY}"));
    assert_eq!(ev[2]["detail"]["why"], "not an approver of the route");
    assert_eq!(ev[3]["actor"], format!("telegram:{ALICE}"));
    assert_eq!(ev[3]["detail"]["respondent"], ALICE.to_string());
    // The answer's value is only hashed: a free-text answer may hold anything.
    assert!(ev[3]["detail"].get("value").is_none());
    assert_eq!(ev[4]["actor"], format!("telegram:{ALICE}"));
    assert_eq!(ev[4]["detail"]["button"], "approve");
    assert_eq!(ev[4]["detail"]["operator"]["username"], "alice");
    for e in &ev {
        assert_eq!(e["hash"].as_str().unwrap().len(), 64);
    }
    let text = Value::Array(ev).to_string();
    assert!(
        !text.contains("hunter2"),
        "no parameter values in the trail"
    );

    let (s, _) = app.get_as(TOKEN_B, id, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let r = app
        .client
        .get(app.url(&format!("/v1/confirmations/{id}/events")))
        .bearer_auth(TOKEN_B)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "another agent cannot read the events"
    );
}

#[tokio::test]
async fn timeouts_withdrawals_fail_closed_and_window_hits_are_recorded() {
    let app = TestApp::spawn().await;
    let (_, t) = app
        .create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.2}))
        .await;
    let (w, _) = app.ask_suspended(json!({"tool": "w", "params": {}})).await;
    app.delete(w["id"].as_str().unwrap()).await;
    app.telegram.fail_next(
        "sendMessage",
        1,
        403,
        "Forbidden: bot was blocked by the user",
    );
    let (_, f) = app.create(json!({"tool": "f", "params": {}})).await;
    let (win, m) = app
        .ask_suspended(json!({"tool": "win", "params": {}, "window_seconds": 60}))
        .await;
    app.telegram.tap(OPS_CHAT, m, "✅ Approve for 1 min", bob());
    app.wait_status(win["id"].as_str().unwrap(), "confirmed")
        .await;
    let (_, hit) = app
        .create(json!({"tool": "win", "params": {}, "window_seconds": 60}))
        .await;

    assert_eq!(
        kinds(&app.audit_events(t["id"].as_str().unwrap()).await),
        vec!["requested", "delivered", "timeout"]
    );
    assert_eq!(
        kinds(&app.audit_events(w["id"].as_str().unwrap()).await),
        vec!["requested", "delivered", "withdrawn"]
    );
    let fev = app.audit_events(f["id"].as_str().unwrap()).await;
    assert_eq!(kinds(&fev), vec!["requested", "fail_closed"]);
    assert!(
        fev[1]["detail"]["reason"]
            .as_str()
            .unwrap()
            .contains("bot was blocked")
    );
    assert_eq!(
        kinds(&app.audit_events(hit["id"].as_str().unwrap()).await),
        vec!["window_hit"]
    );
}

#[tokio::test]
async fn a_tap_with_forged_data_is_recorded_even_without_a_request() {
    let app = TestApp::spawn().await;
    let (_, message_id) = app.ask_suspended(json!({"tool": "x", "params": {}})).await;
    let q = app.telegram.tap_with_data(
        OPS_CHAT,
        message_id,
        "a:00000000000000000000000000000000",
        mallory(),
    );
    app.telegram.wait_for_callback_answer(&q).await;
    let (code, out, err) = audit_cli(&app, &["export"]).await;
    assert_eq!(code, 0, "{err}");
    let refused: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "refused_tap")
        .collect();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0]["detail"]["why"], "unknown callback token");
    assert_eq!(refused[0]["confirmation_id"], Value::Null);
}

#[tokio::test]
async fn an_owner_cannot_decide_their_own_request_where_self_approval_is_forbidden() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "pay", "params": {}, "owner_id": "alice-owner"}))
        .await;
    let q = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert!(answer.show_alert);
    assert_eq!(
        answer.text.as_deref(),
        Some("You cannot decide a request made on your own behalf.")
    );
    let (_, r) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(r["status"], "pending");
    app.telegram.tap(OPS_CHAT, message_id, "✅ Approve", bob());
    let r = app
        .wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    assert_eq!(r["decided_by"]["id"], BOB);
    // Alice may still decide other owners' requests.
    let (other, m2) = app
        .ask_suspended(json!({"tool": "pay", "params": {}, "owner_id": "bob-owner"}))
        .await;
    app.telegram.tap(OPS_CHAT, m2, "✅ Approve", alice());
    app.wait_status(other["id"].as_str().unwrap(), "confirmed")
        .await;
}

#[tokio::test]
async fn audit_verify_passes_on_an_intact_trail_and_names_the_first_edited_or_deleted_event() {
    let app = TestApp::spawn().await;
    for i in 0..3 {
        let (r, m) = app
            .ask_suspended(json!({"tool": "t", "params": {"i": i}}))
            .await;
        app.telegram.tap(OPS_CHAT, m, "❌ Cancel", alice());
        app.wait_status(r["id"].as_str().unwrap(), "cancelled")
            .await;
    }
    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("audit chain OK: 12 events"), "{out}");

    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    // The table refuses edits outright...
    assert!(
        sqlx::query("UPDATE audit_events SET actor = 'x' WHERE seq = 4")
            .execute(&pool)
            .await
            .is_err()
    );
    assert!(
        sqlx::query("DELETE FROM audit_events WHERE seq = 4")
            .execute(&pool)
            .await
            .is_err()
    );
    // ...and someone who drops the triggers is caught by the chain.
    sqlx::query("DROP TRIGGER audit_events_no_update")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("DROP TRIGGER audit_events_no_delete")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE audit_events SET actor = 'telegram:1' WHERE seq = 6")
        .execute(&pool)
        .await
        .unwrap();
    let (code, _, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("broken at event 6"), "{err}");

    sqlx::query("DELETE FROM audit_events WHERE seq = 3")
        .execute(&pool)
        .await
        .unwrap();
    let (code, _, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("broken at event 4"), "{err}");
    pool.close().await;
}

#[tokio::test]
async fn audit_export_since_writes_only_later_events_as_json_lines() {
    let app = TestApp::spawn().await;
    app.create(json!({"tool": "early", "params": {}, "timeout_seconds": 0.1}))
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cut = time::OffsetDateTime::now_utc();
    app.create(json!({"tool": "late", "params": {}, "timeout_seconds": 0.1}))
        .await;
    let since = cut
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let (code, out, err) = audit_cli(&app, &["export", "--since", &since]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!lines.is_empty());
    assert!(
        lines.iter().all(|e| e["seq"].as_i64().unwrap() > 3),
        "{out}"
    );
    assert!(lines.iter().any(|e| e["detail"]["tool"] == "late"));
    let (code, _, err) = audit_cli(&app, &["export", "--since", "yesterday"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("RFC 3339"), "{err}");
}

/// Runs `hitl-telegram backup FILE` against `db_url`: exit code and all output.
async fn backup_cli(db_url: &str, file: &std::path::Path) -> (i32, String) {
    let (code, out, err) = cli(db_url, &["backup", file.to_str().unwrap()]).await;
    (code, out + &err)
}

#[tokio::test]
async fn a_backup_taken_while_serving_holds_every_request_and_an_intact_audit_chain() {
    let app = TestApp::spawn().await;
    let (r, m) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 1}}))
        .await;
    app.telegram.tap(OPS_CHAT, m, "✅ Approve", alice());
    app.wait_status(r["id"].as_str().unwrap(), "confirmed")
        .await;

    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("hitl-backup.db");
    let (code, text) = backup_cli(&app.db_url, &file).await;
    assert_eq!(code, 0, "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "the copy is readable by its owner only"
        );
    }

    let copy_url = format!("sqlite://{}", file.display());
    let pool = sqlx::SqlitePool::connect(&copy_url).await.unwrap();
    let (status,): (String,) = sqlx::query_as("SELECT status FROM confirmations WHERE id = ?")
        .bind(r["id"].as_str().unwrap())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "confirmed");
    pool.close().await;
    let (code, verify, err) = cli(&copy_url, &["audit", "verify"]).await;
    assert_eq!(code, 0, "{verify}{err}");
    assert!(verify.contains("audit chain OK"), "{verify}");

    // Never over an existing file, and never from a database that is not there.
    let (code, text) = backup_cli(&app.db_url, &file).await;
    assert_ne!(code, 0);
    assert!(text.contains("already exists"), "{text}");
    let missing = format!("sqlite://{}/nothing-here.db", out.path().display());
    let (code, text) = backup_cli(&missing, &out.path().join("b2.db")).await;
    assert_ne!(code, 0, "{text}");
    assert!(
        !out.path().join("nothing-here.db").exists(),
        "no empty database created"
    );
}
