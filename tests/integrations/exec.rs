//! `exec`: asks as `ask` does, runs a real command only when the tap approves it (with
//! the approved parameters in `HITL_PARAMS`), reports what became of it, read back
//! through `GET /v1/confirmations/{id}`, and exits with the command's status (or `ask`'s
//! 1/2/3 when nothing ran).

use std::path::Path;
use std::process::Stdio;

use crate::support::app::*;
use serde_json::Value;
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");

/// Starts `exec` against `base` for a `deploy` call, running `command` if approved.
fn exec(base: &str, token: &str, extra: &[&str], command: &[&str]) -> tokio::process::Child {
    Command::new(BIN)
        .args(["exec", "--url", base, "--token", token, "--tool", "deploy"])
        .args(["--param", "service=billing", "--param", "replicas:=3"])
        .args(extra)
        .arg("--")
        .args(command)
        .env("NO_PROXY", "127.0.0.1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn")
}

async fn finish(child: tokio::process::Child) -> (i32, String, String) {
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("exec ends within 60 s")
        .expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Taps `label` on the one question in the ops chat.
async fn answer(app: &TestApp, label: &str) {
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram.tap(OPS_CHAT, msg.message_id, label, alice());
}

/// The one request this agent made, read back through the API.
async fn the_request(app: &TestApp, stderr: &str) -> Value {
    let id = stderr
        .split("(request ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("exec names its request on stderr: {stderr}"));
    let (status, record) = app.get(id).await;
    assert!(status.is_success(), "{record}");
    record
}

fn script(dir: &Path, body: &str) -> String {
    let path = dir.join("step.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn an_approved_command_runs_with_the_approved_parameters_and_is_reported_executed() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let step = script(
        dir.path(),
        r#"printf '%s|%s' "$HITL_PARAMS" "$HITL_CONFIRMATION_ID"; echo "a warning" >&2"#,
    );
    let child = exec(&app.base, TOKEN_A, &[], &["sh", &step]);
    answer(&app, "✅ Approve").await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 0, "{out}\n{err}");
    let record = the_request(&app, &err).await;
    // The command saw the parameters as the service holds them, and the request's id;
    // its stdout is its own, its stderr passed through.
    assert_eq!(
        out,
        format!(
            r#"{{"service": "billing", "replicas": 3}}|{}"#,
            record["id"].as_str().unwrap()
        )
    );
    assert!(err.contains("a warning"), "{err}");
    assert_eq!(record["outcome"]["status"], "executed", "{record}");
    assert!(record["outcome"]["duration_ms"].is_u64(), "{record}");
    assert!(record["outcome"]["error"].is_null(), "{record}");
}

#[tokio::test]
async fn a_failing_command_is_reported_failed_with_its_status_and_last_stderr_line_and_exec_exits_with_its_status()
 {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let step = script(
        dir.path(),
        "echo 'starting' >&2; echo 'disk full on /var' >&2; echo >&2; exit 7",
    );
    let child = exec(&app.base, TOKEN_A, &[], &["sh", &step]);
    answer(&app, "✅ Approve").await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 7, "{out}\n{err}");
    let record = the_request(&app, &err).await;
    assert_eq!(record["outcome"]["status"], "failed", "{record}");
    assert_eq!(
        record["outcome"]["error"], "exit status 7: disk full on /var",
        "{record}"
    );
}

#[tokio::test]
async fn a_command_killed_by_a_signal_exits_as_a_shell_says_and_is_reported_failed() {
    let app = TestApp::spawn().await;
    let child = exec(&app.base, TOKEN_A, &[], &["sh", "-c", "kill -TERM $$"]);
    answer(&app, "✅ Approve").await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 128 + 15, "{out}\n{err}");
    let record = the_request(&app, &err).await;
    assert_eq!(record["outcome"]["status"], "failed", "{record}");
    assert_eq!(
        record["outcome"]["error"], "killed by signal 15",
        "{record}"
    );
}

#[tokio::test]
async fn a_command_that_cannot_be_found_exits_127_and_is_reported_failed() {
    let app = TestApp::spawn().await;
    let child = exec(
        &app.base,
        TOKEN_A,
        &[],
        &["/nonexistent/hitl-no-such-command"],
    );
    answer(&app, "✅ Approve").await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 127, "{out}\n{err}");
    assert!(
        err.contains("cannot start /nonexistent/hitl-no-such-command"),
        "{err}"
    );
    let record = the_request(&app, &err).await;
    assert_eq!(record["outcome"]["status"], "failed", "{record}");
    assert!(
        record["outcome"]["error"]
            .as_str()
            .unwrap()
            .starts_with("cannot start /nonexistent/hitl-no-such-command: "),
        "{record}"
    );
}

#[tokio::test]
async fn a_cancelled_call_runs_nothing_reports_nothing_and_exits_1() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let step = script(dir.path(), &format!("touch '{}'", marker.display()));
    let child = exec(&app.base, TOKEN_A, &[], &["sh", &step]);
    answer(&app, "❌ Cancel").await;
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(!marker.exists(), "the command ran");
    assert_eq!(out, "", "nothing on stdout");
    assert!(err.contains("exec: not run: request cf_"), "{err}");
    let record = the_request(&app, &err).await;
    assert_eq!(record["status"], "cancelled");
    assert!(record["outcome"].is_null(), "{record}");
}

#[tokio::test]
async fn a_call_nobody_answers_runs_nothing_and_exits_2() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let step = script(dir.path(), &format!("touch '{}'", marker.display()));
    let (code, out, err) = finish(exec(
        &app.base,
        TOKEN_A,
        &["--timeout", "0.5"],
        &["sh", &step],
    ))
    .await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(!marker.exists(), "the command ran");
}

#[tokio::test]
async fn a_refused_request_runs_nothing_and_exits_3() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let step = script(dir.path(), &format!("touch '{}'", marker.display()));
    let (code, _, err) = finish(exec(&app.base, "wrong-token", &[], &["sh", &step])).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("unknown token"), "{err}");
    assert!(!marker.exists(), "the command ran");
}

#[tokio::test]
async fn exec_without_a_command_is_refused_by_its_arguments() {
    let out = Command::new(BIN)
        .args([
            "exec",
            "--url",
            "127.0.0.1:1",
            "--token",
            "t",
            "--tool",
            "deploy",
        ])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("COMMAND"), "{err}");
}

#[tokio::test]
async fn a_report_the_service_cannot_take_leaves_the_commands_status_and_says_so() {
    let mut app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let gone = dir.path().join("gone");
    // The command waits until the test has stopped the service, so its report finds
    // nobody.
    let step = script(
        dir.path(),
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done; exit 5",
            started.display(),
            gone.display()
        ),
    );
    let child = exec(&app.base, TOKEN_A, &[], &["sh", &step]);
    answer(&app, "✅ Approve").await;
    for _ in 0..600 {
        if started.exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(started.exists(), "the approved command started");
    app.stop().await;
    std::fs::write(&gone, b"").unwrap();
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 5, "the command's own status: {out}\n{err}");
    assert!(
        err.contains("warning: what became of request cf_") && err.contains("was not reported"),
        "{err}"
    );
}
