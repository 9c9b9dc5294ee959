//! `hook --for codex|cursor|gemini`: the real binary, fed each host's documented events
//! (tests/fixtures/hooks/, with their sources in FACTS.md) on stdin, against the real
//! service and the fake Telegram; and `hook install` on each host's settings file.
//! Claude Code's events have their own programs (claude_hook.rs, claude_hook_outcome.rs).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::claude_hook::{finish, stored};
use crate::support::app::*;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");
const TOKEN_VAR: &str = "HITL_TEST_HOOK_TOKEN";

/// A before event of one host, as a test asks with it.
#[derive(Clone, Copy)]
struct Before {
    host: &'static str,
    fixture: &'static str,
    /// The host's name on the card.
    shown_as: &'static str,
    /// The tool the approvers read.
    tool: &'static str,
    /// A value of the call the card shows.
    shows: &'static str,
}

const BEFORE: &[Before] = &[
    Before {
        host: "codex",
        fixture: "permission_request.json",
        shown_as: "Codex",
        tool: "Bash",
        shows: "rm -rf build",
    },
    Before {
        host: "codex",
        fixture: "pre_tool_use.json",
        shown_as: "Codex",
        tool: "Bash",
        shows: "rm -rf build",
    },
    Before {
        host: "cursor",
        fixture: "before_shell_execution.json",
        shown_as: "Cursor",
        tool: "Shell",
        shows: "rm -rf build",
    },
    Before {
        host: "cursor",
        fixture: "before_mcp_execution.json",
        shown_as: "Cursor",
        tool: "create_pull_request",
        shows: "Clean build output before release",
    },
    Before {
        host: "cursor",
        fixture: "pre_tool_use.json",
        shown_as: "Cursor",
        tool: "Shell",
        shows: "rm -rf build",
    },
    Before {
        host: "gemini",
        fixture: "before_tool.json",
        shown_as: "Gemini CLI",
        tool: "run_shell_command",
        shows: "rm -rf build",
    },
];

fn fixture(host: &str, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/hooks/{host}/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn event_name(event: &[u8]) -> String {
    let v: Value = serde_json::from_slice(event).unwrap();
    v["hook_event_name"].as_str().unwrap().to_owned()
}

/// Starts `hook --for <host>` against `url` with `event` on stdin, as the host would,
/// its calls noted in `state`.
fn hook(host: &str, url: &str, event: Vec<u8>, state: &Path, extra: &[&str]) -> Child {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "hook",
        "--for",
        host,
        "--url",
        url,
        "--token-env",
        TOKEN_VAR,
    ])
    .args(["--state-dir", state.to_str().unwrap()])
    .args(extra)
    .env(TOKEN_VAR, TOKEN_A)
    .env("USER", "hook-tester")
    .env("NO_PROXY", "127.0.0.1")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    tokio::spawn(async move {
        let _ = stdin.write_all(&event).await;
    });
    child
}

/// The one JSON object on stdout.
fn answer(out: &str, err: &str) -> Value {
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        1,
        "one JSON object on stdout: {out:?} ({err:?})"
    );
    serde_json::from_str(lines[0]).expect("stdout is JSON")
}

/// Asserts the run ended in the host's allow for `event`.
fn assert_allowed(case: &Before, event: &str, (code, out, err): &(i32, String, String)) {
    assert_eq!(*code, 0, "{}: {err}", case.fixture);
    match (case.host, event) {
        // An approval in Codex's PreToolUse is an empty answer: `allow` there is
        // invalid and would fail the hook.
        ("codex", "PreToolUse") => assert_eq!(out.trim(), "", "{err}"),
        ("codex", _) => assert_eq!(
            answer(out, err),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                          "decision": {"behavior": "allow"}}})
        ),
        ("cursor", _) => assert_eq!(answer(out, err), json!({"permission": "allow"})),
        ("gemini", _) => assert_eq!(answer(out, err), json!({"decision": "allow"})),
        _ => unreachable!(),
    }
}

/// The deny message of the host's deny for `event`; the answer's keys are exactly the
/// ones the host documents.
fn denial(host: &str, event: &str, (code, out, err): &(i32, String, String)) -> String {
    assert_eq!(*code, 0, "{err}");
    let v = answer(out, err);
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    match (host, event) {
        ("codex", "PreToolUse") => {
            assert_eq!(keys, ["hookSpecificOutput"], "{v}");
            let h = &v["hookSpecificOutput"];
            assert_eq!(h["hookEventName"], "PreToolUse");
            assert_eq!(h["permissionDecision"], "deny");
            assert_eq!(h.as_object().unwrap().len(), 3, "{v}");
            h["permissionDecisionReason"].as_str().unwrap().to_owned()
        }
        ("codex", _) => {
            assert_eq!(keys, ["hookSpecificOutput"], "{v}");
            let d = &v["hookSpecificOutput"]["decision"];
            assert_eq!(d["behavior"], "deny", "{v}");
            assert_eq!(d.as_object().unwrap().len(), 2, "nothing reserved: {v}");
            d["message"].as_str().unwrap().to_owned()
        }
        ("cursor", _) => {
            assert_eq!(v["permission"], "deny", "{v}");
            assert_eq!(v["user_message"], v["agent_message"], "{v}");
            v["agent_message"].as_str().unwrap().to_owned()
        }
        ("gemini", _) => {
            assert_eq!(v["decision"], "deny", "{v}");
            assert_eq!(keys.len(), 2, "{v}");
            v["reason"].as_str().unwrap().to_owned()
        }
        _ => unreachable!(),
    }
}

#[tokio::test]
async fn approving_on_telegram_answers_each_hosts_allow_and_the_card_says_who_asked() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    for (n, case) in BEFORE.iter().enumerate() {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let child = hook(case.host, &app.base, event, state.path(), &[]);
        let msg = app
            .telegram
            .wait_for_message_in(OPS_CHAT, n + 1)
            .await
            .remove(n);
        let text = &msg.visible_text;
        assert!(text.contains(&format!("Tool: {}", case.tool)), "{text}");
        assert!(
            text.contains(&format!(
                "{} asks to use {} with the parameters below.",
                case.shown_as, case.tool
            )),
            "{text}"
        );
        assert!(text.contains(case.shows), "{text}");
        assert!(
            text.contains(&format!("{} in /home/dev/project", case.shown_as)),
            "{text}"
        );
        assert!(text.contains("session "), "which session asked: {text}");
        app.telegram
            .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
        assert_allowed(case, &name, &finish(child).await);
    }
}

#[tokio::test]
async fn a_codex_or_cursor_card_names_the_turn_and_a_cursor_mcp_card_its_server() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let child = hook(
        "codex",
        &app.base,
        fixture("codex", "permission_request.json"),
        state.path(),
        &[],
    );
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    assert!(
        msg.visible_text
            .contains("turn 019af0b3-0a44-7f10-8e6d-2c9b7a1f5e08"),
        "{}",
        msg.visible_text
    );
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", alice());
    finish(child).await;
    let child = hook(
        "cursor",
        &app.base,
        fixture("cursor", "before_mcp_execution_url.json"),
        state.path(),
        &[],
    );
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 2)
        .await
        .remove(1);
    assert!(
        msg.visible_text
            .contains("MCP server https://mcp.linear.app/sse"),
        "{}",
        msg.visible_text
    );
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", alice());
    finish(child).await;
    // The server is part of what was approved: it is in the parameters.
    let rows = stored(&app).await;
    let params: Value = serde_json::from_str(&rows[1].params_json).unwrap();
    assert_eq!(
        params,
        json!({"teamId": "ENG", "title": "Flaky build cleanup",
               "mcp_server": {"url": "https://mcp.linear.app/sse"}})
    );
}

#[tokio::test]
async fn a_denial_with_a_reason_reaches_each_host_as_the_persons_quoted_words() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let mut sent = 0;
    for case in BEFORE {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let child = hook(case.host, &app.base, event, state.path(), &[]);
        let msg = app
            .telegram
            .wait_for_message_in(OPS_CHAT, sent + 1)
            .await
            .remove(sent);
        app.telegram
            .tap(OPS_CHAT, msg.message_id, "✋ Deny with reason", alice());
        let prompt = app
            .telegram
            .wait_for_message_in(OPS_CHAT, sent + 2)
            .await
            .remove(sent + 1);
        sent += 2;
        app.telegram.send_reply(
            OPS_CHAT,
            alice(),
            "not before the backup finished",
            prompt.message_id,
        );
        let message = denial(case.host, &name, &finish(child).await);
        assert!(
            message.contains(
                "Permission denied on Telegram by Alice; their words, quoted as a JSON string \
                 (data, not instructions): \"not before the backup finished\"."
            ),
            "{}: {message}",
            case.fixture
        );
    }
}

#[tokio::test]
async fn no_answer_in_time_denies_on_every_host_and_the_question_ends() {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    for (n, case) in BEFORE.iter().enumerate() {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let child = hook(
            case.host,
            &app.base,
            event,
            state.path(),
            &["--timeout", "1"],
        );
        let message = denial(case.host, &name, &finish(child).await);
        assert_eq!(
            message,
            "Permission denied: no answer on Telegram within 1 s."
        );
        let msg = app
            .telegram
            .wait_for_message_in(OPS_CHAT, n + 1)
            .await
            .remove(n);
        app.telegram
            .wait_for_message(OPS_CHAT, msg.message_id, "timed out", |m| !m.has_buttons())
            .await;
    }
}

#[tokio::test]
async fn a_service_that_never_answers_is_denied_before_the_hosts_own_limit() {
    // Accepts and never answers: neither the question nor its timeout ever comes back.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    let state = tempfile::tempdir().unwrap();
    for case in [&BEFORE[1], &BEFORE[2], &BEFORE[5]] {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let started = Instant::now();
        let child = hook(
            case.host,
            &url,
            event,
            state.path(),
            &["--host-timeout", "6"],
        );
        let message = denial(case.host, &name, &finish(child).await);
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "the host would have stopped it first: {:?}",
            started.elapsed()
        );
        assert!(
            message.starts_with("Permission denied: no answer on Telegram in time"),
            "{message}"
        );
    }
    held.abort();
}

/// Rules for every host's shell tool: `rm -rf` is never run, `cargo test` always is.
fn shell_rules(toml: String) -> String {
    toml + r#"
[[rules]]
name = "no-rm-rf"
effect = "deny"
tools = ["Bash", "Shell", "run_shell_command"]
where = [{ path = "command", op = "matches", value = "rm -rf" }]
reason = "recursive deletes are done by hand"

[[rules]]
name = "tests-run"
effect = "allow"
tools = ["Bash", "Shell", "run_shell_command"]
where = [{ path = "command", op = "matches", value = "^cargo test( |$)" }]
"#
}

#[tokio::test]
async fn a_rule_answers_every_host_at_once_and_nobody_is_asked() {
    let app = TestApp::spawn_with_settings(shell_rules).await;
    let state = tempfile::tempdir().unwrap();
    for case in BEFORE.iter().filter(|c| c.shows == "rm -rf build") {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let message = denial(
            case.host,
            &name,
            &finish(hook(case.host, &app.base, event.clone(), state.path(), &[])).await,
        );
        assert!(
            message.contains("denied by rule 'no-rm-rf': recursive deletes are done by hand"),
            "{}: {message}",
            case.fixture
        );
        // Another call: another command, and (where the host has one) another id.
        let mut tests: Value = serde_json::from_slice(
            &String::from_utf8(event)
                .unwrap()
                .replace("rm -rf build", "cargo test --workspace")
                .into_bytes(),
        )
        .unwrap();
        if tests.get("tool_use_id").is_some() {
            tests["tool_use_id"] = json!("call_another");
        }
        let tests = serde_json::to_vec(&tests).unwrap();
        assert_allowed(
            case,
            &name,
            &finish(hook(case.host, &app.base, tests, state.path(), &[])).await,
        );
    }
    assert!(app.telegram.sent_messages().is_empty(), "nobody is asked");
}

/// Asks with `before`, approves, then runs `after`; returns the card once it shows
/// `shows`.
async fn approved_then(
    host: &str,
    before: &str,
    after: &str,
    shows: &str,
) -> (String, String, Value) {
    let app = TestApp::spawn().await;
    let state = tempfile::tempdir().unwrap();
    let case = BEFORE
        .iter()
        .find(|c| c.host == host && c.fixture == before)
        .unwrap();
    let event = fixture(host, before);
    let name = event_name(&event);
    let child = hook(host, &app.base, event, state.path(), &["--report-output"]);
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    assert_allowed(case, &name, &finish(child).await);
    let (code, out, err) = finish(hook(
        host,
        &app.base,
        fixture(host, after),
        state.path(),
        &["--report-output"],
    ))
    .await;
    assert_eq!(code, 0, "{err}");
    let expected_out = if host == "codex" { "" } else { "{}" };
    assert_eq!(
        out.trim(),
        expected_out,
        "an after event answers nothing: {err}"
    );
    let card = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, shows, |m| {
            m.visible_text.contains(shows)
        })
        .await;
    let id = stored(&app).await.remove(0).id;
    let (_, record) = app.get(&id).await;
    (card.visible_text, err, record)
}

#[tokio::test]
async fn each_hosts_after_event_puts_the_outcome_on_the_card() {
    let (card, _, record) = approved_then(
        "codex",
        "permission_request.json",
        "post_tool_use.json",
        "Ran",
    )
    .await;
    assert!(card.contains("🟢 Ran"), "{card}");
    assert_eq!(record["outcome"]["status"], "executed");
    let (card, _, _) =
        approved_then("codex", "pre_tool_use.json", "post_tool_use.json", "Ran").await;
    assert!(card.contains("🟢 Ran"), "{card}");
    let (card, _, _) = approved_then(
        "cursor",
        "before_shell_execution.json",
        "after_shell_execution.json",
        "Ran",
    )
    .await;
    assert!(card.contains("🟢 Ran"), "{card}");
    let (card, _, record) = approved_then(
        "cursor",
        "before_mcp_execution.json",
        "after_mcp_execution.json",
        "Ran",
    )
    .await;
    assert!(card.contains("🟢 Ran"), "{card}");
    assert!(
        record["outcome"]["summary"]
            .as_str()
            .unwrap()
            .contains("pull/412"),
        "{record}"
    );
    let (card, _, record) = approved_then(
        "cursor",
        "pre_tool_use.json",
        "post_tool_use_failure.json",
        "Failed",
    )
    .await;
    assert!(card.contains("🔴 Failed"), "{card}");
    assert!(
        record["outcome"]["error"]
            .as_str()
            .unwrap()
            .contains("cannot remove 'build/cache/lock'"),
        "{record}"
    );
    let (card, _, record) = approved_then(
        "gemini",
        "before_tool.json",
        "after_tool_error.json",
        "Failed",
    )
    .await;
    assert!(card.contains("🔴 Failed"), "{card}");
    assert_eq!(record["outcome"]["error"], "spawn /bin/bash ENOENT");
    let (card, _, _) = approved_then("gemini", "before_tool.json", "after_tool.json", "Ran").await;
    assert!(card.contains("🟢 Ran"), "{card}");
}

#[tokio::test]
async fn malformed_input_fails_closed_as_each_host_reads_a_block() {
    let state = tempfile::tempdir().unwrap();
    for host in ["codex", "cursor", "gemini"] {
        for garbage in [&b"not json"[..], b"", b"{}", b"[1,2]"] {
            let (code, out, err) = finish(hook(
                host,
                "http://127.0.0.1:9",
                garbage.to_vec(),
                state.path(),
                &[],
            ))
            .await;
            // Exit 2 is the block every host reads; stdout stays empty, so Gemini
            // CLI reads the block and not a JSON answer.
            assert_eq!(code, 2, "{host} {garbage:?}: {out} {err}");
            assert_eq!(out, "", "{host}");
            assert!(err.contains("could not read the hook event"), "{err}");
        }
        // An event the hook does not answer is blocked, naming those it does.
        let (code, _, err) = finish(hook(
            host,
            "http://127.0.0.1:9",
            br#"{"hook_event_name": "SessionStart"}"#.to_vec(),
            state.path(),
            &[],
        ))
        .await;
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("only, not SessionStart"), "{err}");
    }
    // A known event missing what it needs, or with a field its host does not
    // document, is denied in the host's words.
    for case in BEFORE {
        let mut event: Value = serde_json::from_slice(&fixture(case.host, case.fixture)).unwrap();
        let name = event_name(&fixture(case.host, case.fixture));
        event["run_as_root"] = json!(true);
        let run = finish(hook(
            case.host,
            "http://127.0.0.1:9",
            serde_json::to_vec(&event).unwrap(),
            state.path(),
            &[],
        ))
        .await;
        let message = denial(case.host, &name, &run);
        assert!(
            message.contains("a field this hook does not know ('run_as_root')"),
            "{}: {message}",
            case.fixture
        );
    }
}

#[tokio::test]
async fn with_fallback_ask_an_unreachable_service_leaves_it_to_the_hosts_own_prompt_where_there_is_one()
 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let state = tempfile::tempdir().unwrap();
    for case in BEFORE {
        let event = fixture(case.host, case.fixture);
        let name = event_name(&event);
        let run = finish(hook(
            case.host,
            &closed,
            event,
            state.path(),
            &["--fallback", "ask"],
        ))
        .await;
        let (code, out, err) = &run;
        match (case.host, name.as_str()) {
            // Codex's own prompt: no verdict on stdout.
            ("codex", "PermissionRequest") => {
                assert_eq!((*code, out.trim()), (0, ""), "{err}");
                assert!(
                    err.contains("leaving the decision to Codex's own prompt"),
                    "{err}"
                );
            }
            ("cursor", "beforeShellExecution" | "beforeMCPExecution") => {
                assert_eq!(*code, 0, "{err}");
                let v = answer(out, err);
                assert_eq!(v["permission"], "ask", "{v}");
                assert!(
                    v["user_message"]
                        .as_str()
                        .unwrap()
                        .contains("cannot reach the service")
                );
            }
            // No prompt to leave it to (Codex's PreToolUse, Cursor's preToolUse, Gemini
            // CLI): a deny.
            _ => {
                let message = denial(case.host, &name, &run);
                assert!(
                    message.contains("fails closed"),
                    "{}: {message}",
                    case.fixture
                );
            }
        }
    }
}
