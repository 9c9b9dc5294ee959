//! `claude-hook` installed for `PostToolUse` and `PostToolUseFailure` too: the real
//! binary reports what became of a call it allowed on Telegram, read back through
//! `GET /v1/confirmations/{id}`'s `outcome`, and stays silent (exit 0, nothing on
//! stdout) for everything else.
//!
//! The post events have the fields Claude Code's hooks reference gives them:
//! `session_id`, `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`,
//! `tool_name`, `tool_input`, `tool_use_id`, and `tool_response` (`PostToolUse`) or
//! `error` and `is_interrupt` (`PostToolUseFailure`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::claude_hook::{decision, finish, fixture, hook, stored};
use crate::support::app::*;

/// The post event Claude Code sends after the call `bash_rm_build.json` asked about,
/// its input spaced and ordered differently, as another serialisation may.
fn post_event(name: &str, extra: Value) -> Vec<u8> {
    let mut event = json!({
        "session_id": "6f1c2a4e-8d3b-4c77-9a0e-2b5d1f9e7c31",
        "transcript_path": "/home/alice/.claude/projects/-home-alice-billing-api/6f1c2a4e-8d3b-4c77-9a0e-2b5d1f9e7c31.jsonl",
        "cwd": "/home/alice/billing-api",
        "permission_mode": "default",
        "hook_event_name": name,
        "tool_name": "Bash",
        "tool_input": {
            "description": "Clean the build directory and rebuild in release mode",
            "command": "rm -rf build && cargo build --release"
        },
        "tool_use_id": "toolu_01ABC123"
    });
    for (k, v) in extra.as_object().unwrap() {
        event[k] = v.clone();
    }
    serde_json::to_vec_pretty(&event).unwrap()
}

/// Asks with the recorded `PermissionRequest`, approves, and returns the request's id.
async fn approved(app: &TestApp, state: &str) -> String {
    let child = hook(
        &app.base,
        Some(TOKEN_A),
        fixture("bash_rm_build.json"),
        &["--state-dir", state],
    );
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(decision(&out, &err), json!({"behavior": "allow"}));
    stored(app).await.remove(0).id
}

/// Runs a post event; it must end quietly: exit 0, nothing on stdout. Returns stderr.
async fn post(app: &TestApp, state: &str, event: Vec<u8>) -> String {
    post_with(app, state, event, &[]).await
}

/// [`post`] with these further arguments.
async fn post_with(app: &TestApp, state: &str, event: Vec<u8>, more: &[&str]) -> String {
    let started = Instant::now();
    let (code, out, err) = finish(hook(
        &app.base,
        Some(TOKEN_A),
        event,
        &[&["--state-dir", state], more].concat(),
    ))
    .await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "", "a post event prints nothing Claude would read");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "it kept Claude Code waiting"
    );
    err
}

#[tokio::test]
async fn post_tool_use_of_an_approved_call_reports_it_executed_with_the_tools_response() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let state = state.path().to_str().unwrap();
    let event = post_event(
        "PostToolUse",
        json!({"tool_response": {"stdout": "Finished release [optimized]", "stderr": "",
                                 "interrupted": false, "isImage": false}}),
    );
    let id = approved(&app, state).await;
    let err = post_with(&app, state, event.clone(), &["--report-output"]).await;
    assert_eq!(err, "");
    let (_, record) = app.get(&id).await;
    assert_eq!(record["outcome"]["status"], "executed", "{record}");
    assert!(
        record["outcome"]["summary"]
            .as_str()
            .unwrap()
            .contains("Finished release [optimized]"),
        "{record}"
    );
    // Taken once: the same event again finds nothing to report and says nothing.
    assert_eq!(post(&app, state, event).await, "");
}

#[tokio::test]
async fn without_report_output_the_tools_output_stays_out_of_the_chat() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let state = state.path().to_str().unwrap();
    let id = approved(&app, state).await;
    let event = post_event(
        "PostToolUse",
        json!({"tool_response": {"stdout": "AWS_SECRET_ACCESS_KEY=abc123", "stderr": ""}}),
    );
    assert_eq!(post(&app, state, event).await, "");
    let (_, record) = app.get(&id).await;
    assert_eq!(record["outcome"]["status"], "executed", "{record}");
    assert_eq!(record["outcome"]["summary"], Value::Null, "{record}");
    let shown: Vec<String> = app
        .telegram
        .sent_messages()
        .into_iter()
        .map(|m| app.telegram.message(m.chat_id, m.message_id).visible_text)
        .collect();
    assert!(shown.iter().all(|t| !t.contains("abc123")), "{shown:?}");
}

#[tokio::test]
async fn post_tool_use_failure_of_an_approved_call_reports_it_failed_with_claude_codes_error() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let state = state.path().to_str().unwrap();
    let id = approved(&app, state).await;
    let event = post_event(
        "PostToolUseFailure",
        json!({"error": "Command exited with non-zero status code 101", "is_interrupt": false}),
    );
    assert_eq!(post(&app, state, event).await, "");
    let (_, record) = app.get(&id).await;
    assert_eq!(record["outcome"]["status"], "failed", "{record}");
    assert_eq!(
        record["outcome"]["error"], "Command exited with non-zero status code 101",
        "{record}"
    );
}

#[tokio::test]
async fn a_post_event_of_a_call_the_hook_never_asked_about_does_nothing_silently() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let state = state.path().to_str().unwrap();
    let err = post(
        &app,
        state,
        post_event("PostToolUse", json!({"tool_response": "ok"})),
    )
    .await;
    assert_eq!(err, "");
    let err = post(
        &app,
        state,
        post_event("PostToolUseFailure", json!({"error": "boom"})),
    )
    .await;
    assert_eq!(err, "");
    // And one it cannot even read: still exit 0, nothing on stdout.
    post(
        &app,
        state,
        br#"{"hook_event_name": "PostToolUse"}"#.to_vec(),
    )
    .await;
    assert!(stored(&app).await.is_empty(), "nothing was asked");
    assert!(app.telegram.sent_messages().is_empty());
}

#[tokio::test]
async fn a_report_the_service_cannot_take_still_exits_0_quickly_and_says_why_on_stderr() {
    let mut app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let state = state.path().to_str().unwrap();
    let id = approved(&app, state).await;
    app.stop().await;
    let err = post(
        &app,
        state,
        post_event("PostToolUse", json!({"tool_response": "ok"})),
    )
    .await;
    assert!(
        err.contains(&format!(
            "what became of request {id} (executed) was not reported"
        )),
        "{err}"
    );
}
