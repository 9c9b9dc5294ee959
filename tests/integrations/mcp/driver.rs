//! The Python MCP client (`scripts/mcp_driver.py`, the official SDK) as a child process
//! the MCP tests drive, and what they read from its results and from the fake Telegram.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::support::app::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mcp_driver.py");

pub(crate) fn mcp_python() -> Option<PathBuf> {
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
pub(crate) enum Transport {
    Stdio,
    Http,
}

/// The Python MCP client as a child process, one JSON command or event per line.
pub(crate) struct Driver {
    child: Child,
    /// Taken (closed) by [`Driver::finish`].
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Driver {
    pub(crate) async fn start(
        python: &PathBuf,
        app: &TestApp,
        transport: Transport,
        token: &str,
    ) -> Driver {
        Self::spawn(python, app.addr, transport, token, Stdio::inherit()).await
    }

    /// [`Self::start`] with the driver's stderr (and so the stdio server's, which the SDK
    /// passes on) captured, and `RUST_LOG` unset: the server's own default logging.
    pub(crate) async fn start_capturing_stderr(
        python: &PathBuf,
        app: &TestApp,
        token: &str,
    ) -> Driver {
        Self::spawn(python, app.addr, Transport::Stdio, token, Stdio::piped()).await
    }

    /// The driver speaking over stdio to the server `argv` starts (the gateway, say), with
    /// `env` added to its environment and its stderr (the server's) captured.
    pub(crate) fn start_command(python: &PathBuf, argv: &[String], env: &[(&str, &str)]) -> Driver {
        Self::start_with_options(python, &[], argv, env)
    }

    /// [`Self::start_command`] with the driver's own `options` (`--sampling-text`, ...).
    pub(crate) fn start_with_options(
        python: &PathBuf,
        options: &[&str],
        argv: &[String],
        env: &[(&str, &str)],
    ) -> Driver {
        let mut command = Command::new(python);
        command.arg(DRIVER).args(options).arg("stdio").args(argv);
        for (k, v) in env {
            command.env(k, v);
        }
        Self::run(command)
    }

    /// The driver speaking Streamable HTTP to `url` with `token` as its bearer, with its
    /// own `options` and its stderr captured.
    pub(crate) fn start_http(python: &PathBuf, options: &[&str], url: &str, token: &str) -> Driver {
        let mut command = Command::new(python);
        command.arg(DRIVER).args(options).args(["http", url, token]);
        Self::run(command)
    }

    fn run(mut command: Command) -> Driver {
        let mut child = command
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the MCP driver");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Driver {
            child,
            stdin: Some(stdin),
            lines,
        }
    }

    /// The server (or a proxy in front of it) at `addr`.
    pub(crate) async fn spawn(
        python: &PathBuf,
        addr: std::net::SocketAddr,
        transport: Transport,
        token: &str,
        stderr: Stdio,
    ) -> Driver {
        let mut command = Command::new(python);
        command.arg(DRIVER);
        match transport {
            Transport::Stdio => {
                command
                    .args(["stdio", env!("CARGO_BIN_EXE_hitl-telegram"), "mcp"])
                    .args(["--url", &format!("http://{addr}")])
                    .args(["--token-env", "MCP_AGENT_TOKEN"])
                    .env("MCP_AGENT_TOKEN", token);
            }
            Transport::Http => {
                command.args(["http", &format!("http://{addr}/mcp"), token]);
            }
        }
        let mut child = command
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("RUST_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("start the MCP driver");
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Driver {
            child,
            stdin: Some(stdin),
            lines,
        }
    }

    pub(crate) async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the MCP driver said nothing for 60 s")
            .expect("read the driver")
            .expect("the MCP driver ended");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    }

    pub(crate) async fn send(&mut self, command: Value) {
        let line = format!("{command}\n");
        let stdin = self.stdin.as_mut().expect("the session is open");
        stdin.write_all(line.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub(crate) async fn ready(&mut self) {
        let event = self.next().await;
        assert_eq!(event["event"], "ready", "{event}");
    }

    /// Starts a tool call; read its events with [`Self::outcome`].
    pub(crate) async fn call(&mut self, tool: &str, args: Value) {
        self.send(json!({"op": "call", "tool": tool, "args": args}))
            .await;
    }

    /// The call's result, and how many progress notifications came before it.
    pub(crate) async fn outcome(&mut self) -> (Value, usize) {
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

    pub(crate) async fn call_now(
        &mut self,
        tool: &str,
        args: Value,
    ) -> (bool, String, Option<Value>) {
        self.call(tool, args).await;
        let (result, _) = self.outcome().await;
        split(&result)
    }

    /// Closes the session (the SDK then stops the stdio server) and returns what was
    /// written to stderr, when it was captured.
    pub(crate) async fn finish(mut self) -> String {
        use tokio::io::AsyncReadExt;
        let mut stderr = self.child.stderr.take();
        drop(self.stdin.take());
        let _ = tokio::time::timeout(Duration::from_secs(20), self.child.wait()).await;
        let mut text = String::new();
        if let Some(stderr) = stderr.as_mut() {
            let _ = tokio::time::timeout(Duration::from_secs(10), stderr.read_to_string(&mut text))
                .await;
        }
        text
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// (is_error, the verdict text, the record the tool attached).
pub(crate) fn split(result: &Value) -> (bool, String, Option<Value>) {
    let texts = result["texts"].as_array().unwrap();
    let verdict = texts[0].as_str().unwrap().to_owned();
    let record = texts
        .get(1)
        .map(|t| serde_json::from_str(t.as_str().unwrap()).unwrap());
    (result["is_error"].as_bool().unwrap(), verdict, record)
}

/// The message in the ops chat whose text holds `needle` (the chat's pacing may hold a
/// message back a few seconds).
pub(crate) async fn question_about(
    app: &TestApp,
    needle: &str,
) -> crate::support::fake_telegram::SentMessage {
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
