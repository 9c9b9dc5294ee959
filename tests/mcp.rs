//! The MCP server, driven by the official Python MCP SDK (`mcp`, pinned; `.ci/run`
//! installs it in `.ci/.venv-mcp`) through `scripts/mcp_driver.py`: the same scenarios
//! over stdio (`hitl-telegram mcp` against the running service) and over streamable
//! HTTP (`/mcp` on the service).
//!
//! Needs `HITL_MCP_PYTHON` (a python with `mcp`); skips without it unless
//! `HITL_REQUIRE_MCP=1`.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::app::*;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mcp_driver.py");

fn mcp_python() -> Option<PathBuf> {
    let required = std::env::var("HITL_REQUIRE_MCP").as_deref() == Ok("1");
    match std::env::var_os("HITL_MCP_PYTHON").filter(|p| !p.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                !required,
                "HITL_REQUIRE_MCP=1 but HITL_MCP_PYTHON is not set (.ci/run installs one)"
            );
            eprintln!("skipped: HITL_MCP_PYTHON is not set (a python with mcp 2.3.0)");
            None
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Stdio,
    Http,
}

/// The Python MCP client as a child process, one JSON command or event per line.
struct Driver {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Driver {
    async fn start(python: &PathBuf, app: &TestApp, transport: Transport, token: &str) -> Driver {
        let mut command = Command::new(python);
        command.arg(DRIVER);
        match transport {
            Transport::Stdio => {
                command
                    .args(["stdio", env!("CARGO_BIN_EXE_hitl-telegram"), "mcp"])
                    .args(["--url", &format!("http://{}", app.addr)])
                    .args(["--token-env", "MCP_AGENT_TOKEN"])
                    .env("MCP_AGENT_TOKEN", token);
            }
            Transport::Http => {
                command.args(["http", &format!("http://{}/mcp", app.addr), token]);
            }
        }
        let mut child = command
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the MCP driver");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Driver {
            child,
            stdin,
            lines,
        }
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the MCP driver said nothing for 60 s")
            .expect("read the driver")
            .expect("the MCP driver ended");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    }

    async fn send(&mut self, command: Value) {
        let line = format!("{command}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn ready(&mut self) {
        let event = self.next().await;
        assert_eq!(event["event"], "ready", "{event}");
    }

    /// Starts a tool call; read its events with [`Self::outcome`].
    async fn call(&mut self, tool: &str, args: Value) {
        self.send(json!({"op": "call", "tool": tool, "args": args}))
            .await;
    }

    /// The call's result, and how many progress notifications came before it.
    async fn outcome(&mut self) -> (Value, usize) {
        let mut progress = 0;
        loop {
            let event = self.next().await;
            match event["event"].as_str() {
                Some("progress") => progress += 1,
                Some("result") => return (event, progress),
                _ => panic!("unexpected event {event}"),
            }
        }
    }

    async fn call_now(&mut self, tool: &str, args: Value) -> (bool, String, Option<Value>) {
        self.call(tool, args).await;
        let (result, _) = self.outcome().await;
        split(&result)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// (is_error, the verdict text, the record the tool attached).
fn split(result: &Value) -> (bool, String, Option<Value>) {
    let texts = result["texts"].as_array().unwrap();
    let verdict = texts[0].as_str().unwrap().to_owned();
    let record = texts
        .get(1)
        .map(|t| serde_json::from_str(t.as_str().unwrap()).unwrap());
    (result["is_error"].as_bool().unwrap(), verdict, record)
}

/// The message in the ops chat whose text holds `needle` (the chat's pacing may hold a
/// message back a few seconds).
async fn question_about(app: &TestApp, needle: &str) -> support::fake_telegram::SentMessage {
    for _ in 0..300 {
        if let Some(m) = app
            .telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .find(|m| m.visible_text.contains(needle))
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no message about {needle:?}: {:#?}",
        app.telegram.messages_in(OPS_CHAT)
    );
}

/// How many messages in the ops chat hold `needle`, once a late second one would have
/// arrived.
async fn times_asked(app: &TestApp, needle: &str) -> usize {
    tokio::time::sleep(Duration::from_millis(300)).await;
    app.telegram
        .messages_in(OPS_CHAT)
        .iter()
        .filter(|m| m.visible_text.contains(needle))
        .count()
}

/// The scenarios every transport must pass, in one session against one service.
async fn every_scenario(transport: Transport) {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn().await;
    let mut mcp = Driver::start(&python, &app, transport, TOKEN_A).await;
    mcp.ready().await;

    // The tools and their schemas: request_approval takes the body of POST
    // /v1/confirmations.
    mcp.send(json!({"op": "list"})).await;
    let tools = mcp.next().await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for name in [
        "request_approval",
        "get_decision",
        "ask_human",
        "notify_human",
    ] {
        assert!(names.contains(&name), "{transport:?}: {names:?}");
    }
    let approval = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "request_approval")
        .unwrap();
    for field in [
        "tool",
        "params",
        "template",
        "context",
        "window_seconds",
        "timeout_seconds",
        "route",
        "owner_id",
        "idempotency_key",
        "wait",
    ] {
        assert!(
            approval["input_schema"]["properties"][field].is_object(),
            "{transport:?}: request_approval lacks {field}: {approval}"
        );
    }
    assert!(
        approval["description"]
            .as_str()
            .unwrap()
            .contains("APPROVED")
    );

    // Approved by a tap, with progress notifications while it waits.
    let call = json!({"tool": "deploy", "params": {"service": "billing", "replicas": 3},
                      "owner_id": "ops", "window_seconds": 60});
    mcp.call("request_approval", call.clone()).await;
    let question = question_about(&app, "billing").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram.tap(
        OPS_CHAT,
        question.message_id,
        approve_label(60).as_str(),
        alice(),
    );
    let (result, progress) = mcp.outcome().await;
    let (error, verdict, record) = split(&result);
    assert!(!error, "{transport:?}: {verdict}");
    assert!(verdict.starts_with("APPROVED"), "{transport:?}: {verdict}");
    assert!(verdict.contains(r#""service":"billing""#), "{verdict}");
    assert!(progress >= 1, "{transport:?}: no progress notification");
    let record = record.unwrap();
    assert_eq!(record["status"], "confirmed");
    // The audit trail shows it like any other agent's request.
    let events = app.audit_events(record["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "requested");
    assert_eq!(events[0]["actor"], "agent:agent-a", "{events:?}");
    assert!(events.iter().any(|e| e["kind"] == "decided"), "{events:?}");

    // The same call inside the window: approved at once, nobody asked.
    let (error, verdict, record) = mcp.call_now("request_approval", call.clone()).await;
    assert!(!error && verdict.starts_with("APPROVED"), "{verdict}");
    assert_eq!(record.unwrap()["via"], "window");
    assert_eq!(app.telegram.messages_in(OPS_CHAT).len(), 1, "asked again");

    // Cancelled: not approved, said so, with the advice not to retry.
    mcp.call(
        "request_approval",
        json!({"tool": "drop_table", "params": {"table": "users"}}),
    )
    .await;
    let question = question_about(&app, "drop_table").await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "❌ Cancel", alice());
    let (result, _) = mcp.outcome().await;
    let (error, verdict, _) = split(&result);
    assert!(!error, "{verdict}");
    assert!(
        verdict.starts_with("NOT APPROVED: cancelled") && verdict.contains("Do not run drop_table"),
        "{verdict}"
    );

    // Nobody answers: a timeout, reported as not approved.
    let (_, verdict, record) = mcp
        .call_now(
            "request_approval",
            json!({"tool": "reboot", "params": {}, "timeout_seconds": 1}),
        )
        .await;
    assert!(
        verdict.starts_with("NOT APPROVED: nobody answered"),
        "{verdict}"
    );
    assert_eq!(record.unwrap()["status"], "timeout");

    // Undeliverable: Telegram refuses for good, the answer is no.
    app.telegram.fail_next(
        "sendMessage",
        1,
        403,
        "Forbidden: bot was kicked from the supergroup chat",
    );
    let (_, verdict, record) = mcp
        .call_now(
            "request_approval",
            json!({"tool": "wipe", "params": {"disk": "sda"}}),
        )
        .await;
    assert!(verdict.starts_with("NOT APPROVED"), "{verdict}");
    assert_eq!(record.unwrap()["via"], "fail_closed");

    // Park and resume: suspend returns the id at once; get_decision waits for the tap.
    let parked = json!({"tool": "migrate", "params": {"to": 42}, "wait": "suspend",
                        "idempotency_key": format!("mcp-{transport:?}-1")});
    let (error, verdict, record) = mcp.call_now("request_approval", parked.clone()).await;
    assert!(
        !error && verdict.starts_with("NOT APPROVED YET"),
        "{verdict}"
    );
    let id = record.unwrap()["id"].as_str().unwrap().to_owned();
    assert!(verdict.contains(&id));
    // The same idempotency key again: the same request, not a second question.
    let (_, _, again) = mcp.call_now("request_approval", parked).await;
    assert_eq!(again.unwrap()["id"], id.as_str());
    let question = question_about(&app, "migrate").await;
    assert_eq!(times_asked(&app, "migrate").await, 1, "asked twice");
    app.telegram
        .tap(OPS_CHAT, question.message_id, "✅ Approve", bob());
    let (error, verdict, _) = mcp
        .call_now("get_decision", json!({"id": id, "wait_seconds": 10}))
        .await;
    assert!(!error && verdict.starts_with("APPROVED"), "{verdict}");

    // Withdrawn by the agent while parked: not approved, said so.
    let (_, _, parked) = mcp
        .call_now(
            "request_approval",
            json!({"tool": "rotate_keys", "params": {}, "wait": "suspend"}),
        )
        .await;
    let id = parked.unwrap()["id"].as_str().unwrap().to_owned();
    question_about(&app, "rotate_keys").await;
    let (s, _) = app.delete(&id).await;
    assert_eq!(s, reqwest::StatusCode::OK);
    let (error, verdict, record) = mcp
        .call_now("get_decision", json!({"id": id, "wait_seconds": 5}))
        .await;
    assert!(
        !error && verdict.starts_with("NOT APPROVED: cancelled"),
        "{verdict}"
    );
    assert!(verdict.contains("Do not run rotate_keys"), "{verdict}");
    assert_eq!(record.unwrap()["via"], "withdrawn");

    // A question with choices, answered by a tap.
    mcp.call(
        "ask_human",
        json!({"question": "Which region?", "interaction_type": "single_choice",
               "options": [{"key": "eu", "label": "Europe"}, {"key": "us", "label": "US"}]}),
    )
    .await;
    let question = question_about(&app, "Which region?").await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "Europe", alice());
    let (result, _) = mcp.outcome().await;
    let (error, verdict, _) = split(&result);
    assert!(
        !error && verdict.starts_with("ANSWERED: \"eu\""),
        "{verdict}"
    );

    // A notification.
    let (error, verdict, _) = mcp
        .call_now("notify_human", json!({"message": "Deployed billing 2.4.1"}))
        .await;
    assert!(!error && verdict.starts_with("SENT"), "{verdict}");
    question_about(&app, "Deployed billing 2.4.1").await;

    // ask_human parked, asked again with the same key: one question; get_decision
    // reads it by its id.
    let parked = json!({"question": "Ship it on Friday?", "wait": "suspend",
                        "idempotency_key": format!("mcp-ask-{transport:?}")});
    let (error, verdict, first) = mcp.call_now("ask_human", parked.clone()).await;
    assert!(!error && verdict.starts_with("NO ANSWER YET"), "{verdict}");
    let (_, _, again) = mcp.call_now("ask_human", parked).await;
    let iid = first.unwrap()["interaction_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(again.unwrap()["interaction_id"], iid.as_str());
    question_about(&app, "Ship it on Friday?").await;
    assert_eq!(
        times_asked(&app, "Ship it on Friday?").await,
        1,
        "asked twice"
    );
    let (error, verdict, _) = mcp
        .call_now("get_decision", json!({"id": iid, "wait_seconds": 0}))
        .await;
    assert!(!error && verdict.starts_with("NO ANSWER YET"), "{verdict}");

    // A wait mode neither tool knows is refused, never taken for "block".
    for (tool, args) in [
        (
            "request_approval",
            json!({"tool": "t", "params": {}, "wait": "later"}),
        ),
        ("ask_human", json!({"question": "q", "wait": "later"})),
    ] {
        let (error, verdict, _) = mcp.call_now(tool, args).await;
        assert!(
            error && verdict.contains("wait must be"),
            "{tool}: {verdict}"
        );
    }

    // The metrics count MCP requests as the agent's own, like any other.
    let metrics = app.metrics_text().await;
    for needle in [r#"tool="deploy""#, r#"tool="migrate""#] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("hitl_requests_created_total")
                    && l.contains(r#"agent="agent-a""#)
                    && l.contains(needle)),
            "{transport:?}: no hitl_requests_created_total for {needle}:\n{metrics}"
        );
    }
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("hitl_window_hits_total") && l.contains(r#"tool="deploy""#)),
        "{metrics}"
    );
}

#[tokio::test]
async fn over_stdio_every_scenario_asks_and_answers_like_the_http_api() {
    every_scenario(Transport::Stdio).await;
}

#[tokio::test]
async fn over_streamable_http_every_scenario_asks_and_answers_like_the_http_api() {
    every_scenario(Transport::Http).await;
}

#[tokio::test]
async fn a_wrong_token_is_refused_on_both_transports_and_nothing_is_asked() {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn().await;

    // /mcp: 401 before MCP starts, so the client cannot even connect.
    let mut http = Driver::start(&python, &app, Transport::Http, "not-a-known-token-123").await;
    let event = http.next().await;
    assert_eq!(event["event"], "error", "{event}");

    // stdio: the server starts, but every call is refused, as not approved.
    let mut stdio = Driver::start(&python, &app, Transport::Stdio, "not-a-known-token-123").await;
    stdio.ready().await;
    let (error, verdict, _) = stdio
        .call_now("request_approval", json!({"tool": "deploy", "params": {}}))
        .await;
    assert!(error, "{verdict}");
    assert!(
        verdict.starts_with("NOT APPROVED") && verdict.contains("401"),
        "{verdict}"
    );

    let r = reqwest::Client::new()
        .post(app.url("/mcp"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    assert!(app.telegram.sent_messages().is_empty());
}

#[tokio::test]
async fn a_dead_service_is_a_visible_no_never_a_protocol_error() {
    let Some(python) = mcp_python() else {
        return;
    };
    let mut app = TestApp::spawn().await;
    app.stop().await;
    let mut stdio = Driver::start(&python, &app, Transport::Stdio, TOKEN_A).await;
    stdio.ready().await;
    let (error, verdict, _) = stdio
        .call_now("request_approval", json!({"tool": "deploy", "params": {}}))
        .await;
    assert!(error, "{verdict}");
    assert!(
        verdict.starts_with("NOT APPROVED: no human could be asked")
            && verdict.contains("Do not run deploy"),
        "{verdict}"
    );
}

/// Without the Python client: what `/mcp` refuses before MCP reads a message.
#[tokio::test]
async fn mcp_over_http_refuses_unknown_tokens_and_oversized_messages() {
    let app = TestApp::spawn().await;
    let post = |token: Option<&str>, body: String| {
        let mut r = app
            .client
            .post(app.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let r = post(None, list.clone()).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    let r = post(Some("not-a-known-token-123"), list).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);
    let huge = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "notify_human",
                                 "arguments": {"message": "x".repeat(200_000)}}});
    let r = post(Some(TOKEN_A), huge.to_string()).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::PAYLOAD_TOO_LARGE);
    assert!(app.telegram.sent_messages().is_empty());
}
