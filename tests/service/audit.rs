//! The audit trail: every step of a request is recorded, an agent can read its own
//! request's events, and the hash chain exposes any edit or deletion; a head kept from
//! earlier exposes a cut tail, and a request whose stored status no longer matches its
//! decision event is named.

use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Command;

fn kinds(events: &[Value]) -> Vec<&str> {
    events.iter().map(|e| e["kind"].as_str().unwrap()).collect()
}

/// Runs `hitl-telegram audit ...` against the app's database.
pub(super) async fn audit_cli(app: &TestApp, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["audit"];
    all.extend_from_slice(args);
    cli(&app.db_url, &all).await
}

/// Runs the binary with a config whose database is `db_url`.
async fn cli(db_url: &str, args: &[&str]) -> (i32, String, String) {
    cli_env(db_url, args, &[]).await
}

/// [`cli`] with these environment variables set.
async fn cli_env(db_url: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    let toml = settings_toml("http://127.0.0.1:9", db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX);
    std::fs::write(&config, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .args(["--config", config.to_str().unwrap()])
        .args(args)
        .envs(env.iter().copied())
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

/// The requests [`end_requests_without_a_cancel_tap`] ended, by id.
struct Endings {
    timeout: String,
    withdrawn: String,
    failed_closed: String,
    approved: String,
    window_hit: String,
}

/// Ends five requests: one times out, one is withdrawn, one fails closed (the bot is
/// blocked), one is approved for a window by a tap, and one is confirmed by that window.
async fn end_requests_without_a_cancel_tap(app: &TestApp) -> Endings {
    let id = |v: &Value| v["id"].as_str().unwrap().to_owned();
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
    app.wait_status(t["id"].as_str().unwrap(), "timeout").await;
    Endings {
        timeout: id(&t),
        withdrawn: id(&w),
        failed_closed: id(&f),
        approved: id(&win),
        window_hit: id(&hit),
    }
}

#[tokio::test]
async fn timeouts_withdrawals_fail_closed_and_window_hits_are_recorded() {
    let app = TestApp::spawn().await;
    let ended = end_requests_without_a_cancel_tap(&app).await;

    assert_eq!(
        kinds(&app.audit_events(&ended.timeout).await),
        vec!["requested", "delivered", "timeout"]
    );
    assert_eq!(
        kinds(&app.audit_events(&ended.withdrawn).await),
        vec!["requested", "delivered", "withdrawn"]
    );
    let fev = app.audit_events(&ended.failed_closed).await;
    assert_eq!(kinds(&fev), vec!["requested", "fail_closed"]);
    assert!(
        fev[1]["detail"]["reason"]
            .as_str()
            .unwrap()
            .contains("bot was blocked")
    );
    assert_eq!(
        kinds(&app.audit_events(&ended.window_hit).await),
        vec!["window_hit"]
    );
    // Each decision event names the status it stored.
    for (id, status) in [
        (&ended.timeout, "timeout"),
        (&ended.withdrawn, "cancelled"),
        (&ended.failed_closed, "cancelled"),
        (&ended.approved, "confirmed"),
        (&ended.window_hit, "confirmed"),
    ] {
        let events = app.audit_events(id).await;
        assert_eq!(
            events.last().unwrap()["detail"]["status"],
            status,
            "{events:?}"
        );
    }
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
    // Four per question, and the service's own start (`service_started`).
    assert!(out.contains("audit chain OK: 13 events"), "{out}");

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

/// The head `audit verify` printed (`head: SEQ:HASH`), ready for `--expect-head`.
fn printed_head(out: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix("head: "))
        .unwrap_or_else(|| panic!("no head line in:\n{out}"))
        .to_owned()
}

/// Removes audit events after `seq`, as someone with write access to the database file
/// can: the table's triggers are dropped first.
async fn cut_trail_after(db_url: &str, seq: i64) -> u64 {
    let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
    sqlx::query("DROP TRIGGER IF EXISTS audit_events_no_delete")
        .execute(&pool)
        .await
        .unwrap();
    let gone = sqlx::query("DELETE FROM audit_events WHERE seq > ?")
        .bind(seq)
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    pool.close().await;
    gone
}

#[tokio::test]
async fn audit_verify_expect_head_catches_a_truncated_tail() {
    let app = TestApp::spawn().await;
    let (r, m) = app.ask_suspended(json!({"tool": "t", "params": {}})).await;
    app.telegram.tap(OPS_CHAT, m, "❌ Cancel", alice());
    app.wait_status(r["id"].as_str().unwrap(), "cancelled")
        .await;
    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let earlier = printed_head(&out);

    // Forged taps: each is recorded, and someone with the file wants them gone.
    for i in 0..3 {
        let q = app
            .telegram
            .tap_with_data(OPS_CHAT, m, &format!("a:{i:032x}"), mallory());
        app.telegram.wait_for_callback_answer(&q).await;
    }
    let (code, out, err) = audit_cli(&app, &["verify", "--expect-head", &earlier]).await;
    assert_eq!(
        code, 0,
        "a head of an intact trail that grew since: {out}{err}"
    );
    assert!(
        out.contains(&format!(
            "expected head {earlier} is in the trail (3 event(s) since)"
        )),
        "{out}"
    );
    let head = printed_head(&out);
    let (seq, hash) = head.split_once(':').unwrap();
    let seq: i64 = seq.parse().unwrap();

    assert_eq!(cut_trail_after(&app.db_url, seq - 3).await, 3);
    // What is left is a perfectly good chain: only the head kept outside shows the cut.
    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(printed_head(&out), earlier);
    let (code, out, err) = audit_cli(&app, &["verify", "--expect-head", &head]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        !out.contains("head: "),
        "no head to keep from a failed check: {out}"
    );
    assert!(
        err.contains(&format!(
            "audit trail truncated: it ends at event {}, but event {seq} was recorded earlier",
            seq - 3
        )),
        "{err}"
    );
    // The older head still holds: the cut was after it.
    let (code, out, err) = audit_cli(&app, &["verify", "--expect-head", &earlier]).await;
    assert_eq!(code, 0, "{out}{err}");

    // A head whose hash is not the event's: the trail was rewritten up to there.
    let earlier_seq = earlier.split_once(':').unwrap().0;
    let other = format!("{earlier_seq}:{hash}");
    let (code, _, err) = audit_cli(&app, &["verify", "--expect-head", &other]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!(
            "audit trail rewritten: event {earlier_seq} has hash"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn a_status_changed_behind_the_trails_back_is_reported() {
    let app = TestApp::spawn().await;
    let (cancelled, m) = app
        .ask_suspended(json!({"tool": "pay", "params": {}}))
        .await;
    let cancelled = cancelled["id"].as_str().unwrap();
    app.telegram.tap(OPS_CHAT, m, "❌ Cancel", alice());
    app.wait_status(cancelled, "cancelled").await;
    let (_, timed_out) = app
        .create(json!({"tool": "late", "params": {}, "timeout_seconds": 0.2}))
        .await;
    let timed_out = timed_out["id"].as_str().unwrap();
    app.wait_status(timed_out, "timeout").await;
    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("statuses OK: 2 ended request(s), each as its decision event records"),
        "{out}"
    );

    // The requests table has no triggers and no hashes: anyone with the file can
    // turn a cancellation into an approval, or reopen a timed-out question.
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    sqlx::query("UPDATE confirmations SET status = 'confirmed' WHERE id = ?")
        .bind(cancelled)
        .execute(&pool)
        .await
        .unwrap();
    // A pending row has no outcome columns (a CHECK says so): clear them too.
    sqlx::query(
        "UPDATE confirmations SET status = 'pending', via = NULL, decided_at = NULL WHERE id = ?",
    )
    .bind(timed_out)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("(2 problem(s))"), "{err}");
    assert!(
        err.contains(&format!(
            "request {cancelled}: stored status 'confirmed', but its decision (event "
        )) && err.contains("decided) says 'cancelled'"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "request {timed_out}: stored status 'pending', but its decision (event "
        )) && err.contains("timeout) says 'timeout'"),
        "{err}"
    );
}

#[tokio::test]
async fn every_way_a_request_ends_agrees_with_its_decision_event() {
    let app = TestApp::spawn().await;
    end_requests_without_a_cancel_tap(&app).await;
    let (no, m) = app.ask_suspended(json!({"tool": "no", "params": {}})).await;
    app.telegram.tap(OPS_CHAT, m, "❌ Cancel", alice());
    app.wait_status(no["id"].as_str().unwrap(), "cancelled")
        .await;
    // Interactions: answered by a tap, and completed with the default on timeout.
    let post = |body: Value| {
        app.client
            .post(app.url("/v1/interactions"))
            .bearer_auth(TOKEN_A)
            .json(&body)
            .send()
    };
    let before = app.telegram.messages_in(OPS_CHAT).len();
    let r = post(json!({"interaction": {
        "interaction_id": "ask-1", "question": "Go?", "interaction_type": "approval"
    }}))
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let m = app
        .telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .remove(before);
    app.telegram.tap(OPS_CHAT, m.message_id, "❌ Reject", bob());
    // In a chat of its own: the ops chat's pacing (a message a second) would keep it
    // from reaching the chat before its deadline.
    let r = post(json!({"route": "other", "interaction": {
        "interaction_id": "ask-2", "question": "Colour?", "interaction_type": "single_choice",
        "timeout": 0.5, "timeout_action": "default", "default_response": "blue",
        "options": [{"key": "blue", "label": "Blue"}, {"key": "red", "label": "Red"}]
    }}))
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    for (id, status) in [("ask-1", "completed"), ("ask-2", "completed")] {
        let mut seen = Value::Null;
        for _ in 0..15 {
            let r = app
                .client
                .get(app.url(&format!("/v1/interactions/{id}?wait=1")))
                .bearer_auth(TOKEN_A)
                .send()
                .await
                .unwrap();
            seen = r.json().await.unwrap();
            if seen["status"] == status {
                break;
            }
        }
        assert_eq!(seen["status"], status, "{seen}");
    }

    let (code, out, err) = audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("statuses OK: 8 ended request(s), each as its decision event records"),
        "{out}"
    );
}

#[tokio::test]
async fn a_malformed_expected_head_is_refused_with_the_form_it_needs() {
    let app = TestApp::spawn().await;
    for (bad, says) in [
        ("latest", "SEQ:HASH"),
        ("x:abc", "'x' is not an event number"),
        ("7:abc", "64 hexadecimal digits, got 3 characters"),
        (
            &format!("7:{}", "z".repeat(64)) as &str,
            "64 hexadecimal digits, found 'z'",
        ),
    ] {
        let (code, out, err) = audit_cli(&app, &["verify", "--expect-head", bad]).await;
        assert_eq!(code, 2, "{bad}: {out}{err}");
        assert!(
            err.contains("--expect-head") && err.contains(says),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Collects what a tracing subscriber writes.
#[derive(Clone, Default)]
struct LogBuffer(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogBuffer {
    /// The `audit chain head` lines so far, as JSON.
    fn heads(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["message"] == hitl_telegram::audit_head::MESSAGE)
            .collect()
    }
}

/// The first `audit chain head` line logged `when`, waited for (up to 4 s).
async fn loop_for_head(logs: &LogBuffer, when: &str) -> Value {
    for _ in 0..200 {
        if let Some(l) = logs.heads().into_iter().find(|l| l["when"] == when) {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no {when} head line: {:?}", logs.heads())
}

#[tokio::test]
async fn the_head_is_logged_periodically_as_the_trail_grows() {
    let app = TestApp::spawn().await;
    let logs = LogBuffer::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_writer(move || writer.clone())
        .finish();
    // This test's runtime runs on one thread, so everything it awaits logs here.
    let _guard = tracing::subscriber::set_default(subscriber);
    let store: std::sync::Arc<dyn hitl_telegram::storage::Store> = std::sync::Arc::new(
        hitl_telegram::storage::SqliteStore::connect(&app.db_url)
            .await
            .unwrap(),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let logger = tokio::spawn(hitl_telegram::audit_head::log_audit_head(
        store,
        Duration::from_millis(100),
        stop.clone(),
    ));
    // The logger's first line comes one period in (the application logs the start's
    // itself, before recording its start: the binary's test in tests/integrations/cli.rs).
    let first = loop_for_head(&logs, "periodic").await;
    let (_, out, _) = audit_cli(&app, &["verify"]).await;
    assert_eq!(first["head"], printed_head(&out), "{first}");

    let (r, m) = app.ask_suspended(json!({"tool": "t", "params": {}})).await;
    app.telegram.tap(OPS_CHAT, m, "✅ Approve", alice());
    app.wait_status(r["id"].as_str().unwrap(), "confirmed")
        .await;
    let (_, out, _) = audit_cli(&app, &["verify"]).await;
    let head = printed_head(&out);
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = logs.heads();
        if seen
            .iter()
            .any(|l| l["when"] == "periodic" && l["head"] == head.as_str())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line = seen
        .iter()
        .find(|l| l["when"] == "periodic" && l["head"] == head.as_str())
        .unwrap_or_else(|| panic!("no periodic line with head {head}: {seen:?}"));
    let (seq, hash) = head.split_once(':').unwrap();
    assert_eq!(line["seq"].to_string(), seq);
    assert_eq!(line["hash"], hash);
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), logger)
        .await
        .expect("the logger stops when told")
        .unwrap();
}

/// The three commands that read an existing database, each refused at `db_url`: exit 1,
/// `no hitl-telegram database at` and `why` on stderr.
async fn all_refuse(db_url: &str, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let backup = dir.path().join("backup.db");
    for args in [
        &["audit", "verify"][..],
        &["audit", "export"],
        &["backup", backup.to_str().unwrap()],
    ] {
        let (code, out, err) = cli(db_url, args).await;
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(
            err.contains("no hitl-telegram database at") && err.contains(why),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: {out}");
    }
    assert!(!backup.exists(), "no backup of nothing");
}

#[tokio::test]
async fn audit_verify_export_and_backup_refuse_a_missing_sqlite_path_and_create_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo").join("hitl.db");
    all_refuse(
        &format!("sqlite://{}", missing.display()),
        "the file does not exist",
    )
    .await;
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "neither the file nor its folder was created"
    );
    // A file that is there but is no hitl-telegram database is left as it was.
    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    all_refuse(
        &format!("sqlite://{}", empty.display()),
        "holds no hitl-telegram tables",
    )
    .await;
    assert_eq!(std::fs::read(&empty).unwrap(), b"");
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "not a database, but long enough to look like one".repeat(10),
    )
    .unwrap();
    all_refuse(
        &format!("sqlite://{}", text.display()),
        "not a SQLite database",
    )
    .await;
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no -wal or -shm beside them: {names:?}");
}

/// The tables of the PostgreSQL database at `url` (its current schema).
async fn pg_tables(url: &str) -> Vec<String> {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    let tables = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    tables
}

#[tokio::test]
async fn audit_verify_export_and_backup_refuse_an_empty_postgresql_database_and_leave_it_empty() {
    let Some(pg) = crate::support::postgres::PgDatabase::create().await else {
        return;
    };
    all_refuse(&pg.url, "holds no hitl-telegram tables").await;
    assert_eq!(pg_tables(&pg.url).await, Vec::<String>::new());
    // A database name that does not exist is not created either.
    let mut url = reqwest::Url::parse(&pg.url).unwrap();
    let missing = format!("{}_typo", url.path().trim_start_matches('/'));
    url.set_path(&format!("/{missing}"));
    all_refuse(url.as_str(), "the database does not exist").await;
    let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&missing)
            .fetch_one(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert!(!exists);
}

#[tokio::test]
async fn postgresql_commands_log_no_notice_about_the_migrations_table() {
    let Some(pg) = crate::support::postgres::PgDatabase::create().await else {
        return;
    };
    let (code, out, err) = cli(&pg.url, &["migrate"]).await;
    assert_eq!(code, 0, "{out}{err}");
    // Each later command finds the migrations table there already, which PostgreSQL
    // would say in a NOTICE.
    for _ in 0..2 {
        // At INFO, the level sqlx logs a NOTICE at.
        let (code, out, err) =
            cli_env(&pg.url, &["audit", "verify"], &[("RUST_LOG", "info")]).await;
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains("audit chain OK: 0 events"), "{out}");
        assert!(
            !err.contains("_sqlx_migrations") && !err.contains("already exists"),
            "{err}"
        );
    }
}
