//! The gateway in front of the tests' own MCP server on the official Python SDK
//! (`tests/fixtures/mcp/upstream_server.py`), whose tools fail, die, change under the
//! host and ask the host back, over both transports upstream: a tool's error is
//! reported `failed` and an upstream that dies mid-call `unknown`, on the card; a
//! host's cancel withdraws the waiting question and nothing reaches the upstream; the
//! host's answers to sampling and elicitation, resources, prompts, completion, logging
//! and ping pass through; a tool that changes or appears later is held back until an
//! approver taps Allow; a Streamable HTTP upstream is gated the same way, its header's
//! value from the environment; a grant a person gave lets a call through unasked.
//!
//! Needs `HITL_MCP_PYTHON`; skips without it unless `HITL_REQUIRE_MCP=1`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

use crate::gateway::{card_shows, gateway_argv, text_of};
use crate::mcp::{Driver, mcp_python, question_about};
use crate::support::app::*;
use crate::support::grants::approved_grant;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp/upstream_server.py"
);

/// What the tests let through without asking: everything but the tools a test wants
/// a person to decide.
fn allow(tools: &[&str]) -> impl FnOnce(String) -> String {
    let list = tools
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    move |toml| {
        toml + &format!(
            "\n[[rules]]\nname = \"fixture-tools\"\neffect = \"allow\"\ntools = [{list}]\nservers = [\"fs\"]\n"
        )
    }
}

/// The fixture over stdio, recording the calls that reach it in `record`.
fn fixture(python: &Path, record: &Path) -> Vec<String> {
    vec![
        python.display().to_string(),
        FIXTURE.into(),
        "--record".into(),
        record.display().to_string(),
    ]
}

/// The host, with the driver's `options`, through the gateway to `upstream`.
async fn host(python: &PathBuf, app: &TestApp, options: &[&str], upstream: &[String]) -> Driver {
    let argv = gateway_argv(&app.url(""), &["--timeout", "60"], upstream);
    let mut host =
        Driver::start_with_options(python, options, &argv, &[("GW_AGENT_TOKEN", TOKEN_A)]);
    host.ready().await;
    host
}

/// The fixture over Streamable HTTP on a port of its own, requiring the header `header`
/// (`NAME=VALUE`) and recording the calls that reach it in `record`: the process (it
/// stops when dropped) and its URL.
pub(crate) async fn http_fixture(
    python: &Path,
    record: &Path,
    header: &str,
) -> (tokio::process::Child, String) {
    let mut upstream = tokio::process::Command::new(python)
        .arg(FIXTURE)
        .args(["--http", "0", "--require-header", header, "--record"])
        .arg(record)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(upstream.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the HTTP upstream said its URL")
        .unwrap()
        .unwrap();
    (upstream, url)
}

/// The tools the upstream reached, by name, in the order they were called.
pub(crate) fn reached(record: &Path) -> Vec<String> {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "call")
        .map(|e| e["tool"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn listed_names(host: &mut Driver) -> Vec<String> {
    host.send(json!({"op": "list"})).await;
    let tools = host.next().await;
    tools["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_tools_error_is_reported_failed_and_an_upstream_that_dies_mid_call_unknown() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app = TestApp::spawn().await;
    let mut host = host(&python, &app, &[], &fixture(&python, &record)).await;

    host.call("fail", json!({"message": "disk full 42"})).await;
    let card = question_about(&app, "disk full 42").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "✅ Approve", alice());
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], true, "{result}");
    assert_eq!(text_of(&result), "disk full 42");
    let shown = card_shows(&app, card.message_id, "Failed").await;
    assert!(shown.contains("disk full 42"), "{shown}");

    host.call("die", json!({})).await;
    let card = question_about(&app, "the MCP tool die").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "✅ Approve", alice());
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        text_of(&result).contains("whether it ran is not known"),
        "{result}"
    );
    card_shows(&app, card.message_id, "Not known whether it ran").await;
    assert_eq!(reached(&record), ["fail", "die"]);
    let stderr = host.finish().await;
    assert!(
        stderr.contains("upstream_server.py"),
        "the upstream named: {stderr}"
    );
}

#[tokio::test]
async fn a_hosts_cancel_withdraws_the_waiting_question_and_nothing_reaches_the_upstream() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app = TestApp::spawn().await;
    let mut host = host(&python, &app, &[], &fixture(&python, &record)).await;

    host.send(json!({"op": "start", "id": "c1", "tool": "echo", "args": {"text": "cancel me 7"}}))
        .await;
    let started = host.next().await;
    assert_eq!(started["event"], "started", "{started}");
    let card = question_about(&app, "cancel me 7").await;
    // While it waits, the host hears what it waits for.
    let progress = host.next().await;
    assert_eq!(progress["event"], "progress", "{progress}");
    assert!(
        progress["message"]
            .as_str()
            .unwrap_or_default()
            .contains("waiting for a person on Telegram to approve echo on fs"),
        "{progress}"
    );
    host.send(json!({"op": "cancel", "id": "c1"})).await;
    loop {
        let event = host.next().await;
        if event["event"] == "cancelled" {
            break;
        }
        assert_eq!(event["event"], "progress", "{event}");
    }
    card_shows(&app, card.message_id, "Withdrawn").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(reached(&record).is_empty(), "{:?}", reached(&record));
    host.finish().await;
}

#[tokio::test]
async fn sampling_elicitation_and_everything_else_pass_through_both_ways() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app =
        TestApp::spawn_with_settings(allow(&["ask_sampling", "ask_elicitation", "log"])).await;
    let options = [
        "--sampling-text",
        "sampled by the host",
        "--elicit-action",
        "accept",
        "--elicit-content",
        r#"{"answer": "yes please"}"#,
    ];
    let mut host = host(&python, &app, &options, &fixture(&python, &record)).await;

    let (error, text, _) = host
        .call_now("ask_sampling", json!({"prompt": "say something"}))
        .await;
    assert!(!error && text.contains("sampled by the host"), "{text}");
    let (error, text, _) = host
        .call_now("ask_elicitation", json!({"message": "go on?"}))
        .await;
    assert!(!error, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    assert_eq!(answer["action"], "accept");
    assert_eq!(answer["content"]["answer"], "yes please");

    host.send(json!({"op": "resources"})).await;
    let resources = host.next().await;
    assert_eq!(
        resources["resources"][0]["uri"], "fixture://greeting",
        "{resources}"
    );
    host.send(json!({"op": "read", "uri": "fixture://greeting"}))
        .await;
    let read = host.next().await;
    assert_eq!(
        read["contents"][0]["text"], "hello from the fixture",
        "{read}"
    );
    host.send(json!({"op": "prompt", "name": "greet", "args": {"name": "Ada"}}))
        .await;
    let prompt = host.next().await;
    assert_eq!(
        prompt["messages"][0]["text"], "Say hello to Ada.",
        "{prompt}"
    );
    host.send(json!({"op": "complete", "prompt": "greet", "argument": "name", "value": "A"}))
        .await;
    let completion = host.next().await;
    assert_eq!(completion["values"], json!(["Ada", "Alan"]), "{completion}");
    host.send(json!({"op": "ping"})).await;
    assert_eq!(host.next().await["event"], "pong");
    let (error, text, _) = host.call_now("log", json!({"message": "a line 5"})).await;
    assert!(!error, "{text}");
    host.send(json!({"op": "inbox", "wait_for": "notifications/message", "timeout": 10}))
        .await;
    let inbox = host.next().await;
    assert!(inbox.to_string().contains("a line 5"), "{inbox}");
    host.finish().await;
}

#[tokio::test]
async fn a_tool_that_changes_or_appears_later_is_held_back_until_an_approver_allows_it() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app =
        TestApp::spawn_with_settings(allow(&["echo", "change_description", "add_tool", "sneaky"]))
            .await;
    let mut host = host(&python, &app, &[], &fixture(&python, &record)).await;
    assert!(listed_names(&mut host).await.contains(&"echo".to_owned()));

    // echo's description changes under the host: it is no longer offered, a call of it
    // is refused, and the chat shows what changed with an Allow button.
    let (error, text, _) = host
        .call_now(
            "change_description",
            json!({"description": "Echoes; also mails ~/.ssh away"}),
        )
        .await;
    assert!(!error, "{text}");
    host.send(
        json!({"op": "inbox", "wait_for": "notifications/tools/list_changed", "timeout": 10}),
    )
    .await;
    let inbox = host.next().await;
    assert!(inbox.to_string().contains("list_changed"), "{inbox}");
    assert!(!listed_names(&mut host).await.contains(&"echo".to_owned()));
    let (error, text, _) = host.call_now("echo", json!({"text": "held 1"})).await;
    assert!(error && text.starts_with("NOT APPROVED"), "{text}");
    assert!(text.contains("held back"), "{text}");
    let notice = question_about(&app, "mails ~/.ssh away").await;
    app.telegram
        .tap(OPS_CHAT, notice.message_id, "✅ Allow", alice());
    card_shows(&app, notice.message_id, "Allowed by").await;
    assert!(listed_names(&mut host).await.contains(&"echo".to_owned()));
    let (error, text, _) = host.call_now("echo", json!({"text": "allowed 2"})).await;
    assert!(!error && text == "allowed 2", "{text}");

    // A tool added later is held back too.
    let (error, text, _) = host.call_now("add_tool", json!({"name": "sneaky"})).await;
    assert!(!error, "{text}");
    assert!(!listed_names(&mut host).await.contains(&"sneaky".to_owned()));
    let (error, text, _) = host.call_now("sneaky", json!({"text": "x"})).await;
    assert!(error && text.starts_with("NOT APPROVED"), "{text}");
    assert_eq!(
        reached(&record),
        ["change_description", "echo", "add_tool"],
        "held-back calls never reach the upstream"
    );
    host.finish().await;
}

#[tokio::test]
async fn a_streamable_http_upstream_is_gated_the_same_way_with_its_header_from_the_environment() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let (_upstream, url) = http_fixture(&python, &record, "X-Upstream-Key=s3cret-key").await;

    let app = TestApp::spawn().await;
    let argv = gateway_argv(
        &app.url(""),
        &[
            "--upstream-url",
            &url,
            "--upstream-header",
            "X-Upstream-Key=UPSTREAM_KEY",
        ],
        &[],
    );
    let mut host = Driver::start_command(
        &python,
        &argv,
        &[("GW_AGENT_TOKEN", TOKEN_A), ("UPSTREAM_KEY", "s3cret-key")],
    );
    host.ready().await;
    host.call("echo", json!({"text": "over http 9"})).await;
    let card = question_about(&app, "over http 9").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "✅ Approve", alice());
    let (result, _) = host.outcome().await;
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(text_of(&result), "over http 9");
    card_shows(&app, card.message_id, "Ran").await;

    host.call("echo", json!({"text": "refused over http 3"}))
        .await;
    let card = question_about(&app, "refused over http 3").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "❌ Cancel", alice());
    let (result, _) = host.outcome().await;
    assert!(text_of(&result).starts_with("NOT APPROVED"), "{result}");
    assert_eq!(reached(&record), ["echo"]);
    let stderr = host.finish().await;
    assert!(!stderr.contains("s3cret-key"), "{stderr}");
}

#[tokio::test]
async fn a_grant_a_person_gave_lets_a_call_through_and_without_one_a_person_is_asked() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app = TestApp::spawn().await;
    approved_grant(&app, "tool:echo", "emp-1").await;
    let argv = gateway_argv(
        &app.url(""),
        &["--timeout", "60", "--owner", "emp-1"],
        &fixture(&python, &record),
    );
    let mut host = Driver::start_command(&python, &argv, &[("GW_AGENT_TOKEN", TOKEN_A)]);
    host.ready().await;

    // The grant covers echo for emp-1: it runs, nobody asked.
    let (error, text, _) = host.call_now("echo", json!({"text": "granted 6"})).await;
    assert!(!error && text == "granted 6", "{text}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // (The chat hears of the tools' first listing, which is no question.)
    let asked: Vec<String> = app
        .telegram
        .messages_in(OPS_CHAT)
        .into_iter()
        .map(|m| m.visible_text)
        .filter(|t| t.contains("granted 6"))
        .collect();
    assert!(asked.is_empty(), "nobody asked: {asked:?}");
    // It does not cover fail: a person is asked, and a cancel runs nothing.
    host.call("fail", json!({"message": "not granted 4"})).await;
    let card = question_about(&app, "not granted 4").await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "❌ Cancel", alice());
    let (result, _) = host.outcome().await;
    assert!(text_of(&result).starts_with("NOT APPROVED"), "{result}");
    assert_eq!(reached(&record), ["echo"]);
    host.finish().await;
}
