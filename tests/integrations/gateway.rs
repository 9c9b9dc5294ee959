//! `hitl-telegram gateway` in front of real MCP servers, with the official Python MCP
//! SDK as the host (`scripts/mcp_driver.py`): the filesystem server from npm
//! (`@modelcontextprotocol/server-filesystem`, which `.ci/run` installs and names in
//! `HITL_MCP_FS_SERVER`). A read a rule allows runs at once with nobody asked; a write
//! waits for a person and writes exactly what was approved (or what was edited in the
//! console), a cancel writes nothing and the host reads NOT APPROVED; with the service
//! out of reach nothing reaches the server; a server that will not start is said in
//! words naming its command.
//!
//! Needs `HITL_MCP_PYTHON` and `HITL_MCP_FS_SERVER`; skips without them unless
//! `HITL_REQUIRE_MCP=1` / `HITL_REQUIRE_MCP_FS=1`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::mcp::{Driver, mcp_python, question_about};
use crate::support::app::*;
use crate::support::console::{as_user, console_get, decide, with_console};

/// The reads the tests' rule lets through without asking.
const READS_RULE: &str = r#"
[[rules]]
name = "fs-reads"
effect = "allow"
tools = ["read_text_file", "read_file", "list_directory", "list_allowed_directories"]
servers = ["fs"]
reason = "reading the share is harmless"
"#;

/// The command that starts the npm filesystem server, or `None` (skipped).
fn fs_server() -> Option<Vec<String>> {
    let required = std::env::var("HITL_REQUIRE_MCP_FS").as_deref() == Ok("1");
    match std::env::var("HITL_MCP_FS_SERVER")
        .ok()
        .filter(|p| !p.is_empty())
    {
        Some(p) if p.ends_with(".js") => Some(vec!["node".into(), p]),
        Some(p) => Some(vec![p]),
        None => {
            assert!(
                !required,
                "HITL_REQUIRE_MCP_FS=1 but HITL_MCP_FS_SERVER is not set (.ci/run installs it)"
            );
            eprintln!("skipped: HITL_MCP_FS_SERVER is not set");
            None
        }
    }
}

/// The gateway's command line for `upstream` against the service at `url`, as agent-a.
pub(crate) fn gateway_argv(url: &str, extra: &[&str], upstream: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        env!("CARGO_BIN_EXE_hitl-telegram").into(),
        "gateway".into(),
        "--url".into(),
        url.into(),
        "--token-env".into(),
        "GW_AGENT_TOKEN".into(),
        "--name".into(),
        "fs".into(),
    ];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    argv.push("--".into());
    argv.extend(upstream.iter().cloned());
    argv
}

/// The host, connected through the gateway to the filesystem server sharing `share`.
async fn host(python: &PathBuf, app_url: &str, share: &Path, fs: &[String]) -> Driver {
    let mut upstream = fs.to_vec();
    upstream.push(share.display().to_string());
    let argv = gateway_argv(app_url, &["--timeout", "60"], &upstream);
    let mut host = Driver::start_command(python, &argv, &[("GW_AGENT_TOKEN", TOKEN_A)]);
    host.ready().await;
    host
}

pub(crate) fn text_of(result: &Value) -> String {
    result["texts"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// Waits until the message `id` in the ops chat holds `needle` (the card is edited
/// after a decision and after the run is reported).
pub(crate) async fn card_shows(app: &TestApp, message_id: i32, needle: &str) -> String {
    for _ in 0..100 {
        let text = app.telegram.message(OPS_CHAT, message_id).visible_text;
        if text.contains(needle) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "the card never showed {needle:?}: {}",
        app.telegram.message(OPS_CHAT, message_id).visible_text
    );
}

#[tokio::test]
async fn a_read_a_rule_allows_runs_at_once_and_nobody_is_asked() {
    let (Some(python), Some(fs)) = (mcp_python(), fs_server()) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let share_path = share.path().canonicalize().unwrap();
    std::fs::write(share_path.join("report.txt"), "quarterly numbers").unwrap();
    let app = TestApp::spawn_with_settings(|t| t + READS_RULE).await;
    let mut host = host(&python, &app.url(""), &share_path, &fs).await;

    let file = share_path.join("report.txt").display().to_string();
    host.call("read_text_file", json!({"path": file})).await;
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(text_of(&result), "quarterly numbers");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !app.telegram
            .messages_in(OPS_CHAT)
            .iter()
            .any(|m| m.visible_text.contains("report.txt")),
        "nobody is asked about a read the rules allow: {:#?}",
        app.telegram.messages_in(OPS_CHAT)
    );
    host.finish().await;
}

#[tokio::test]
async fn a_write_waits_for_a_person_and_writes_exactly_what_was_approved_and_nothing_on_cancel() {
    let (Some(python), Some(fs)) = (mcp_python(), fs_server()) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let share_path = share.path().canonicalize().unwrap();
    let app = TestApp::spawn_with_settings(|t| t + READS_RULE).await;
    let mut host = host(&python, &app.url(""), &share_path, &fs).await;

    // Approved: the file holds exactly the content on the card, and the card says it ran.
    let approved = share_path.join("approved.txt");
    host.call(
        "write_file",
        json!({"path": approved.display().to_string(), "content": "exactly this, 1.50 EUR"}),
    )
    .await;
    let card = question_about(&app, "approved.txt").await;
    assert!(
        card.visible_text.contains("exactly this, 1.50 EUR"),
        "{}",
        card.visible_text
    );
    assert!(
        card.visible_text.contains("write_file"),
        "{}",
        card.visible_text
    );
    assert!(!approved.exists(), "nothing runs before the tap");
    app.telegram
        .tap(OPS_CHAT, card.message_id, "✅ Approve", alice());
    let (result, progress) = host.outcome().await;
    assert_eq!(result["is_error"], false, "{result}");
    assert!(progress >= 1, "the host heard of the wait");
    assert_eq!(
        std::fs::read_to_string(&approved).unwrap(),
        "exactly this, 1.50 EUR"
    );
    card_shows(&app, card.message_id, "Ran").await;

    // Cancelled: nothing is written, and the host reads NOT APPROVED.
    let cancelled = share_path.join("cancelled.txt");
    host.call(
        "write_file",
        json!({"path": cancelled.display().to_string(), "content": "never"}),
    )
    .await;
    let card = question_about(&app, "cancelled.txt").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "❌ Cancel", alice());
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], true, "{result}");
    assert!(text_of(&result).starts_with("NOT APPROVED"), "{result}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !cancelled.exists(),
        "a cancelled write never reaches the server"
    );
    host.finish().await;
}

#[tokio::test]
async fn an_edit_in_the_console_writes_the_edited_content() {
    let (Some(python), Some(fs)) = (mcp_python(), fs_server()) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let share_path = share.path().canonicalize().unwrap();
    let app = TestApp::spawn_with_settings(|t| with_console(t + READS_RULE)).await;
    let mut host = host(&python, &app.url(""), &share_path, &fs).await;

    let target = share_path.join("notes.txt").display().to_string();
    host.call(
        "write_file",
        json!({"path": target, "content": "draft with a typo"}),
    )
    .await;
    question_about(&app, "notes.txt").await;
    let alice = as_user(&app, ALICE, "Alice");
    let (_, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    let q = list["questions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["tool"] == "write_file")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    let (s, r) = decide(
        &app,
        q["id"].as_str().unwrap(),
        &alice,
        json!({"action": "approve", "args_hash": q["args_hash"],
               "parameters": {"path": target, "content": "the corrected text"}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        std::fs::read_to_string(share_path.join("notes.txt")).unwrap(),
        "the corrected text"
    );
    host.finish().await;
}

#[tokio::test]
async fn with_the_service_out_of_reach_nothing_reaches_the_server() {
    let (Some(python), Some(fs)) = (mcp_python(), fs_server()) else {
        return;
    };
    let share = tempfile::tempdir().unwrap();
    let share_path = share.path().canonicalize().unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let mut host = host(&python, &url, &share_path, &fs).await;
    let target = share_path.join("x.txt");
    host.call(
        "write_file",
        json!({"path": target.display().to_string(), "content": "no"}),
    )
    .await;
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], true, "{result}");
    let text = text_of(&result);
    assert!(text.starts_with("NOT APPROVED"), "{text}");
    assert!(!target.exists());
    host.finish().await;
}

#[tokio::test]
async fn an_upstream_that_will_not_start_is_said_in_words_naming_its_command() {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn().await;
    let argv = gateway_argv(
        &app.url(""),
        &[],
        &["/nonexistent/mcp-server".into(), "--flag".into()],
    );
    let mut host = Driver::start_command(&python, &argv, &[("GW_AGENT_TOKEN", TOKEN_A)]);
    let event = host.next().await;
    assert_eq!(event["event"], "error", "{event}");
    let stderr = host.finish().await;
    assert!(
        stderr.contains("cannot start the upstream MCP server `/nonexistent/mcp-server --flag`"),
        "{stderr}"
    );
}
