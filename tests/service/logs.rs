//! What the real binary writes to stderr, where it goes in production: a pipe (`docker
//! logs`, journald, a file, Claude Code reading the hook's stderr) gets plain text
//! without colour codes; a terminal gets colour unless `NO_COLOR` says otherwise; a
//! network failure names its cause and never the bot token.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::write_config;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");
/// The start of every ANSI escape sequence the log formatter writes.
const ESC: &str = "\x1b[";
/// A bot token shaped like Telegram's (a 35-character secret), the shape teloxide
/// recognises and rewrites in error URLs; its secret must appear in no log line.
const REAL_SHAPED_TOKEN: &str = "7355608123:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq";
const TOKEN_SECRET: &str = "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawq";

/// `serve` on `config`, stderr piped; `extra` goes before the subcommand.
fn serve(config: &Path, token: &str, extra: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(BIN)
        .args(extra)
        .args(["serve", "--config", config.to_str().expect("utf-8 path")])
        .env("TELEGRAM_BOT_TOKEN", token)
        .env("TOKEN_A", TOKEN_A)
        .env("TOKEN_B", TOKEN_B)
        .env("HOOK_A", HOOK_SECRET_A)
        .env("RUST_LOG", "debug")
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("NO_COLOR")
        .env_remove("HITL_LOG_JSON")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the service")
}

/// Collects `child`'s stderr lines until one contains `needle` (up to 30 s), then
/// stops the child; returns everything read.
async fn stderr_until(mut child: Child, needle: &str) -> String {
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let sink = log.clone();
    let needle = needle.to_owned();
    let found = tokio::time::timeout(Duration::from_secs(30), async move {
        while let Ok(Some(line)) = lines.next_line().await {
            let hit = line.contains(&needle);
            sink.lock().unwrap().push(line);
            if hit {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let _ = child.kill().await;
    let text = log.lock().unwrap().join("\n");
    assert!(found, "never logged the expected line; the log:\n{text}");
    text
}

#[tokio::test]
async fn serve_logs_plain_text_without_colour_codes_into_a_pipe() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let child = serve(&config, BOT_TOKEN, &[], &[]);
    let log = stderr_until(child, "hitl-telegram is serving").await;
    assert!(!log.contains(ESC), "colour codes in a pipe:\n{log:?}");
    // Text, not JSON: the format that would be coloured on a terminal.
    let serving = log
        .lines()
        .find(|l| l.contains("hitl-telegram is serving"))
        .expect("the serving line");
    assert!(!serving.starts_with('{'), "{serving}");
    assert!(serving.contains("INFO"), "{serving}");
}

#[tokio::test]
async fn hitl_log_json_switches_serve_to_json_lines() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let child = serve(&config, BOT_TOKEN, &[], &[("HITL_LOG_JSON", "true")]);
    let log = stderr_until(child, "hitl-telegram is serving").await;
    assert!(!log.contains(ESC), "{log:?}");
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(v["level"].is_string(), "{line}");
    }
}

#[tokio::test]
async fn a_network_failure_names_its_cause_and_never_the_bot_token() {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = dir.path().join("config.toml");
    // Port 9 (discard) on loopback: nothing listens, so every call is refused.
    let toml = settings_toml("http://127.0.0.1:9", &db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX);
    std::fs::write(&config, toml).unwrap();
    let child = serve(&config, REAL_SHAPED_TOKEN, &[], &[]);
    let log = stderr_until(child, "Connection refused").await;
    let line = log
        .lines()
        .find(|l| l.contains("Connection refused"))
        .expect("the failure");
    assert!(line.contains("network error talking to Telegram"), "{line}");
    assert!(!log.contains(TOKEN_SECRET), "the bot token leaked:\n{log}");
}

/// A `PermissionRequest` event as Claude Code sends it.
fn hook_event() -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/claude/bash_rm_build.json",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[tokio::test]
async fn the_claude_hooks_stderr_is_plain_text_in_a_pipe() {
    // The service is unreachable, so the hook logs its retries before it denies.
    let mut child = Command::new(BIN)
        .args(["claude-hook", "--url", "http://127.0.0.1:9"])
        .args(["--token-env", "HITL_TEST_LOGS_TOKEN"])
        .env("HITL_TEST_LOGS_TOKEN", TOKEN_A)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn the hook");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(&hook_event()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the hook ends")
        .expect("its output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("retrying"), "{stderr}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(!stderr.contains(ESC), "colour codes in a pipe: {stderr:?}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(ESC));
}

/// Runs the hook against an unreachable service under a pseudo-terminal (util-linux's
/// `script`), `no_color` as `NO_COLOR`, and returns what the terminal showed.
async fn hook_on_a_terminal(no_color: Option<&str>) -> String {
    let dir = tempfile::tempdir().unwrap();
    let event = dir.path().join("event.json");
    std::fs::write(&event, hook_event()).unwrap();
    let inner = format!(
        "'{BIN}' claude-hook --url http://127.0.0.1:9 --token-env HITL_TEST_LOGS_TOKEN \
         < '{}'",
        event.display()
    );
    let mut cmd = Command::new("script");
    cmd.args(["--quiet", "--return", "--command", &inner, "/dev/null"])
        .env("HITL_TEST_LOGS_TOKEN", TOKEN_A)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("the hook ends")
        .expect("util-linux's `script` runs the hook under a terminal");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.contains("retrying"), "{shown:?}");
    shown
}

#[tokio::test]
async fn a_terminal_gets_colour_unless_no_color_is_set() {
    let coloured = hook_on_a_terminal(None).await;
    assert!(coloured.contains(ESC), "{coloured:?}");
    let plain = hook_on_a_terminal(Some("1")).await;
    assert!(!plain.contains(ESC), "NO_COLOR ignored: {plain:?}");
    // An empty NO_COLOR counts as unset (no-color.org).
    let empty = hook_on_a_terminal(Some("")).await;
    assert!(empty.contains(ESC), "{empty:?}");
}
