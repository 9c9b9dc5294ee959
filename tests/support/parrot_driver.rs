//! The harness of the end-to-end tests with the real AI-Parrot (`tests/integrations/aiparrot_e2e.rs`,
//! `tests/integrations/aiparrot_redis_e2e.rs`): finding the interpreter with ai-parrot, running a
//! Python driver (`clients/python/e2e/driver*.py`) and reading its protocol, one JSON
//! object per stdout line (`ready`, `asked`, `result`, `done`, or `skip`/`fatal`), and
//! waiting for the questions it posted to show up in Telegram.

#![allow(dead_code)] // each test executable uses a subset

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::fake_telegram::{FakeTelegram, SentMessage};

/// Where the Python channel's sources live (put on the driver's `PYTHONPATH`).
const CLIENT_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/src");

/// Whether `.ci/run` demands this prerequisite (`var=1`) rather than letting the test
/// skip without it.
pub fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// The interpreter with ai-parrot: `$HITL_AIPARROT_PYTHON`; `None` (the test skips)
/// when it is unset, unless `HITL_REQUIRE_AIPARROT=1`.
pub fn parrot_python() -> Option<PathBuf> {
    let Some(path) = std::env::var_os("HITL_AIPARROT_PYTHON").filter(|p| !p.is_empty()) else {
        assert!(
            !required("HITL_REQUIRE_AIPARROT"),
            "HITL_REQUIRE_AIPARROT=1 but HITL_AIPARROT_PYTHON is not set: point it at a \
             python with ai-parrot 1.2.4 (.ci/run installs one in .ci/.venv-parrot)"
        );
        eprintln!(
            "skipped: HITL_AIPARROT_PYTHON is not set (a python with ai-parrot 1.2.4; \
             .ci/run installs one)"
        );
        return None;
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "HITL_AIPARROT_PYTHON={} is not a file",
        path.display()
    );
    Some(path)
}

/// A driver process and its protocol lines.
pub struct Driver {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    /// Its stderr (logs), kept for failure messages.
    stderr: Arc<Mutex<Vec<String>>>,
    /// Every protocol event so far, in order.
    seen: Vec<Value>,
    /// The longest the driver may stay silent.
    event_wait: Duration,
}

impl Driver {
    /// Starts `script` with `python` and the extra environment `env`.
    pub fn start(
        python: &Path,
        script: &str,
        env: &[(&str, String)],
        event_wait: Duration,
    ) -> Driver {
        let pythonpath = match std::env::var("PYTHONPATH") {
            Ok(p) if !p.is_empty() => format!("{CLIENT_SRC}:{p}"),
            _ => CLIENT_SRC.to_owned(),
        };
        let mut cmd = Command::new(python);
        cmd.arg(script)
            .env("PYTHONPATH", pythonpath)
            .env("PYTHONUNBUFFERED", "1")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("the driver starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let mut err_lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        Driver {
            child,
            lines,
            stderr,
            seen: Vec::new(),
            event_wait,
        }
    }

    /// Waits for the driver to exit after `done`; panics unless it succeeds.
    pub async fn finish(&mut self, within: Duration) {
        let status = tokio::time::timeout(within, self.child.wait())
            .await
            .expect("the driver exits after done")
            .expect("exit status");
        assert!(status.success(), "driver: {status:?}\n{}", self.log_tail());
    }

    pub fn full_log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    pub fn log_tail(&self) -> String {
        let log = self.stderr.lock().unwrap();
        let from = log.len().saturating_sub(150);
        log[from..].join("\n")
    }

    /// The next protocol event; panics (with the driver's log) on silence, exit or a
    /// `fatal` report.
    pub async fn next(&mut self) -> Value {
        loop {
            let line = match tokio::time::timeout(self.event_wait, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) | Ok(Err(_)) => {
                    let status = self.child.wait().await.ok();
                    panic!(
                        "the driver exited ({status:?}) after {:?}; its log:\n{}",
                        self.seen,
                        self.log_tail()
                    );
                }
                Err(_) => panic!(
                    "the driver said nothing for {:?} after {:?}; its log:\n{}",
                    self.event_wait,
                    self.seen,
                    self.log_tail()
                ),
            };
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                self.stderr.lock().unwrap().push(format!("(stdout) {line}"));
                continue;
            };
            if event["event"] == "fatal" {
                panic!(
                    "the driver failed: {}; its log:\n{}",
                    event["error"],
                    self.log_tail()
                );
            }
            self.seen.push(event.clone());
            return event;
        }
    }
}

/// An agent's view of an interaction through the API; `None` while it is not stored.
pub async fn interaction(
    client: &reqwest::Client,
    base: &str,
    token: &str,
    id: &str,
) -> Option<Value> {
    let r = client
        .get(format!("{base}/v1/interactions/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET interaction");
    if r.status() == reqwest::StatusCode::NOT_FOUND {
        return None;
    }
    assert!(r.status().is_success(), "GET {id}: {}", r.status());
    Some(r.json().await.expect("JSON"))
}

/// Waits (up to 10 s) until the question is stored and its message is in Telegram
/// (status past `pending`), so a tap is bound to it.
pub async fn wait_delivered(client: &reqwest::Client, base: &str, token: &str, id: &str) -> Value {
    for _ in 0..200 {
        if let Some(view) = interaction(client, base, token, id).await
            && view["status"] != "pending"
        {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} was never delivered");
}

/// The bot's message in `chat` showing `text` that is not one of `matched` (waits up
/// to 20 s).
pub async fn wait_for_question(
    telegram: &FakeTelegram,
    chat: i64,
    text: &str,
    matched: &[(i64, i32)],
) -> SentMessage {
    for _ in 0..400 {
        if let Some(m) = telegram
            .messages_in(chat)
            .into_iter()
            .find(|m| m.visible_text.contains(text) && !matched.contains(&(chat, m.message_id)))
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no message showing {text:?} in chat {chat}; the chat has: {:?}",
        telegram
            .messages_in(chat)
            .iter()
            .map(|m| m.visible_text.clone())
            .collect::<Vec<_>>()
    );
}
