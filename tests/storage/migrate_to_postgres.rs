//! `hitl-telegram migrate-to-postgres`: a SQLite database copied into an empty
//! PostgreSQL one; the service started on the copy carries on where it stopped (the same
//! questions, windows, grants and audit trail, a pending question still decided by a tap
//! on its message), a second copy into the same database is refused, and a source whose audit
//! trail fails verification is refused before anything reaches PostgreSQL.
//!
//! Skips itself without a PostgreSQL server, unless `HITL_REQUIRE_POSTGRES=1` (`.ci/run`).

use std::time::Duration;

use crate::support::app::*;
use crate::support::postgres::PgDatabase;
use hitl_telegram::domain::grant::{Grant, GrantSource, Scope};
use hitl_telegram::domain::ids::{GrantId, OwnerId, QuestionId, ToolName};
use hitl_telegram::domain::question::Operator;
use hitl_telegram::service::now;
use hitl_telegram::storage::{self, ConnectMode, GrantInserted};
use reqwest::StatusCode;
use serde_json::json;
use tokio::process::Command;

/// Runs the binary with a config whose database is `db_url`, `HITL_MIGRATE_TO` set to
/// `to`: (exit code, stdout, stderr).
async fn cli(db_url: &str, to: &str, args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("c.toml");
    let toml = settings_toml("http://127.0.0.1:9", db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX);
    std::fs::write(&config, toml).expect("write config");
    let out = Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .args(["--config", config.to_str().expect("utf-8 path")])
        .args(args)
        .env("HITL_MIGRATE_TO", to)
        .output()
        .await
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `head: SEQ:HASH` line a command printed.
fn head_of(stdout: &str) -> String {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("head: "))
        .unwrap_or_else(|| panic!("no head in:\n{stdout}"))
        .to_owned()
}

#[tokio::test]
async fn a_sqlite_database_copied_to_postgresql_carries_on_where_it_stopped() {
    let Some(pg) = PgDatabase::create().await else {
        return;
    };
    let mut app = TestApp::spawn().await;
    // A decided call that opened a window, and a question still waiting.
    let windowed =
        json!({"tool": "deploy", "params": {"service": "billing"}, "window_seconds": 600});
    let (decided, message) = app.ask_suspended(windowed.clone()).await;
    let decided_id = decided["id"].as_str().expect("id").to_owned();
    app.telegram
        .tap(OPS_CHAT, message, approve_label(600), alice());
    app.wait_status(&decided_id, "confirmed").await;
    let (pending, pending_message) = app
        .ask_suspended(json!({"tool": "drop_table", "params": {"table": "users"}}))
        .await;
    let pending_id = pending["id"].as_str().expect("id").to_owned();
    // An answered interaction: answers and stream events, numbered by sequences.
    answer_interaction(&app, "before-the-copy", 3).await;
    app.stop().await;
    let sqlite = app.db_url.clone();
    // Grants (stored directly: no API writes them yet): one from the decided question,
    // live, and one from the interaction, revoked.
    let grants = store_grants(&sqlite, &decided_id).await;

    let (code, out, err) = cli(&sqlite, "", &["audit", "verify"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let head = head_of(&out);
    let (code, out, err) = cli(&sqlite, &pg.url, &["migrate-to-postgres"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("confirmations: 3 row(s)"), "{out}");
    assert!(out.contains("grants: 2 row(s)"), "{out}");
    assert!(out.contains("audit chain OK on PostgreSQL"), "{out}");
    assert_eq!(head_of(&out), head, "the same chain, to the same head");

    // The service on the copy.
    let app = app.restart_on(&pg.url).await;
    let r = app
        .client
        .get(app.url(&format!("/v1/confirmations/{decided_id}")))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET");
    let (status, view) = json_of(r).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["status"], "confirmed", "{view}");
    assert_eq!(view["decided_by"]["id"], ALICE, "{view}");
    // The window came along: the identical call is let through without asking.
    let (status, hit) = app.create(windowed).await;
    assert_eq!(status, StatusCode::OK, "{hit}");
    assert_eq!(hit["via"], "window", "{hit}");
    // The waiting question is still waiting, and its message in the chat still decides it.
    app.telegram
        .tap(OPS_CHAT, pending_message, "✅ Approve", alice());
    app.wait_status(&pending_id, "confirmed").await;
    // The grants came along as they were: the live one lets its calls through, the
    // revoked one does not, and the interaction stays used.
    check_grants(&pg.url, &grants).await;

    // New answers and stream events are numbered after the copied ones.
    answer_interaction(&app, "after-the-copy", 4).await;
    let r = app
        .client
        .get(app.url("/v1/events?after=0"))
        .bearer_auth(TOKEN_A)
        .header("accept", "text/event-stream")
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(r.status(), StatusCode::OK);

    // Into a database that holds data: refused, nothing written.
    let (code, out, err) = cli(&sqlite, &pg.url, &["migrate-to-postgres"]).await;
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("already holds"), "{err}");
}

#[tokio::test]
async fn a_source_whose_audit_trail_fails_verification_is_refused_and_postgresql_stays_empty() {
    let Some(pg) = PgDatabase::create().await else {
        return;
    };
    let mut app = TestApp::spawn().await;
    let (asked, message) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"service": "billing"}}))
        .await;
    let id = asked["id"].as_str().expect("id").to_owned();
    app.telegram.tap(OPS_CHAT, message, "✅ Approve", alice());
    app.wait_status(&id, "confirmed").await;
    app.stop().await;
    let sqlite = app.db_url.clone();
    // Someone rewrites who decided, past the triggers that refuse it.
    let pool = sqlx::SqlitePool::connect(&sqlite).await.expect("sqlite");
    for sql in [
        "DROP TRIGGER audit_events_no_update",
        "UPDATE audit_events SET actor = 'telegram:1' WHERE kind = 'decided'",
    ] {
        sqlx::query(sql).execute(&pool).await.expect(sql);
    }
    pool.close().await;

    let (code, out, err) = cli(&sqlite, &pg.url, &["migrate-to-postgres"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("fails verification, so nothing was copied") && err.contains("broken at"),
        "{err}"
    );
    assert!(!out.contains("row(s)"), "{out}");
    // PostgreSQL was never touched: not a row, not even the tables.
    let target = sqlx::PgPool::connect(&pg.url).await.expect("postgres");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema()",
    )
    .fetch_all(&target)
    .await
    .expect("tables");
    target.close().await;
    assert_eq!(tables, Vec::<String>::new());
}

/// Asks the approval `id` in the `ops` route and approves it as Alice; `n` messages are
/// in the chat once it is posted.
async fn answer_interaction(app: &TestApp, id: &str, n: usize) {
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(TOKEN_A)
        .json(&json!({
            "interaction": {
                "interaction_id": id,
                "question": format!("Proceed with {id}?"),
                "interaction_type": "approval",
                "timeout": 600.0,
            },
            "route": "ops",
        }))
        .send()
        .await
        .expect("POST /v1/interactions");
    let (status, view) = json_of(r).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, n)
        .await
        .remove(n - 1);
    assert!(msg.text.contains(id), "{}", msg.text);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let cf = view["id"].as_str().expect("id").to_owned();
    app.wait_status(&cf, "completed").await;
}

/// Stores in the SQLite database at `url` a live grant of `agent-a` from the question
/// `decided` and a revoked one from the interaction `before-the-copy`; returns both as
/// stored.
async fn store_grants(url: &str, decided: &str) -> [Grant; 2] {
    let store = storage::connect(url, ConnectMode::Existing)
        .await
        .expect("the SQLite store");
    let t = now();
    let alice = Operator {
        id: ALICE,
        username: Some("alice".into()),
        name: "Alice".into(),
    };
    let live = Grant {
        grant_id: GrantId::generate(),
        agent: "agent-a".into(),
        owner_id: OwnerId::parse("alice").expect("owner"),
        scope: Scope::parse("tool:deploy").expect("scope"),
        route: "ops".into(),
        reason: Some("the nightly deploy".into()),
        granted_by: alice.clone(),
        created_at: t,
        expires_at: t + Duration::from_secs(8 * 3600),
        revoked_at: None,
        revoked_by: None,
        source: GrantSource::Asked {
            confirmation_id: QuestionId::parse(decided).expect("id"),
        },
    };
    let presented = Grant {
        grant_id: GrantId::generate(),
        scope: Scope::parse("tool:*").expect("scope"),
        reason: None,
        source: GrantSource::Interaction {
            interaction_id: "before-the-copy".into(),
        },
        ..live.clone()
    };
    for g in [&live, &presented] {
        let inserted = store.insert_grant(g).await.expect("insert");
        assert_eq!(inserted, GrantInserted::New(g.clone()));
    }
    let revoked = store
        .revoke_grant(&presented.grant_id, None, Some(&alice), t)
        .await
        .expect("revoke")
        .expect("live until now");
    store.close().await;
    [live, revoked]
}

/// The grants of [`store_grants`] in the PostgreSQL database at `url`, and what they
/// still do there.
async fn check_grants(url: &str, [live, revoked]: &[Grant; 2]) {
    let store = storage::connect(url, ConnectMode::Existing)
        .await
        .expect("the PostgreSQL store");
    for g in [live, revoked] {
        let copied = store.grant(&g.grant_id).await.expect("read");
        assert_eq!(copied.as_ref(), Some(g));
    }
    let deploy = Scope::for_tool(&ToolName::parse("deploy").expect("tool"));
    let covering = store
        .live_grant_covering("agent-a", &live.owner_id, &deploy, now())
        .await
        .expect("lookup");
    assert_eq!(covering.as_ref(), Some(live));
    let again = Grant {
        grant_id: GrantId::generate(),
        ..revoked.clone()
    };
    let inserted = store.insert_grant(&again).await.expect("insert");
    assert_eq!(inserted, GrantInserted::InteractionUsed);
    store.close().await;
}
