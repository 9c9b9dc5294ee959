//! The real `hitl-telegram` binary as a child process: started from a config file,
//! its address read from its JSON log, its whole log kept for assertions.
#![allow(dead_code)] // each test executable uses a subset

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::app::*;
use super::fake_telegram::FakeTelegram;

pub struct ServiceProcess {
    pub child: Child,
    /// `http://ADDR`, once it serves (empty before [`ServiceProcess::serving`]).
    pub base: String,
    pub log: Arc<Mutex<Vec<String>>>,
    /// Its address, from the log line that says it is serving.
    addr: Option<tokio::sync::oneshot::Receiver<String>>,
}

/// A loopback port the kernel just handed out, freed again: for a process whose address
/// must be known before it starts (a webhook's URL, a client told where to reconnect).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Rewrites `config` (as [`write_config`] wrote it) to listen on a port chosen now, so a
/// restarted service comes back where its clients expect it. Returns the port.
pub fn pin_port(config: &Path) -> u16 {
    let port = free_port();
    let toml = std::fs::read_to_string(config).expect("read config");
    let any_port = "bind = \"127.0.0.1:0\"";
    assert!(toml.contains(any_port), "the base settings changed");
    let pinned = toml.replace(any_port, &format!("bind = \"127.0.0.1:{port}\""));
    std::fs::write(config, pinned).expect("write config");
    port
}

/// Writes the standard test config (against `telegram`, on `db_url`) into `dir`.
pub fn write_config(dir: &Path, telegram: &FakeTelegram, db_url: &str) -> PathBuf {
    let path = dir.join("config.toml");
    let toml = settings_toml(&telegram.api_url(), db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX);
    std::fs::write(&path, toml).expect("write config");
    path
}

impl ServiceProcess {
    /// Starts `serve` and waits (up to 30 s) until it logs that it is serving.
    pub async fn start(config: &Path) -> ServiceProcess {
        let mut process = Self::spawn(config, &[], &[]);
        process.serving().await;
        process
    }

    /// Starts `serve` with `extra` arguments and `env` over the test environment (a
    /// value of `None` removes the variable), without waiting for it to serve: for what
    /// it does before ([`ServiceProcess::serving`] then waits).
    pub fn spawn(config: &Path, extra: &[&str], env: &[(&str, Option<&str>)]) -> ServiceProcess {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hitl-telegram"));
        command
            .args([
                "--log-json",
                "serve",
                "--config",
                config.to_str().expect("utf-8 path"),
            ])
            .args(extra)
            .envs(test_env())
            .env("RUST_LOG", "debug")
            .env("NO_PROXY", "127.0.0.1");
        for (key, value) in env {
            match value {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        let mut child = command
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the service");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel();
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let sink = log.clone();
        tokio::spawn(async move {
            let mut addr_tx = Some(addr_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["message"] == "hitl-telegram is serving"
                    && let Some(tx) = addr_tx.take()
                {
                    let _ = tx.send(v["addr"].as_str().unwrap_or_default().to_owned());
                }
                sink.lock().unwrap().push(line);
            }
        });
        ServiceProcess {
            child,
            base: String::new(),
            log,
            addr: Some(addr_rx),
        }
    }

    /// Waits (up to 30 s) until it logs that it is serving, and notes its address.
    pub async fn serving(&mut self) {
        let addr_rx = self.addr.take().expect("serving() once");
        let addr = match tokio::time::timeout(Duration::from_secs(30), addr_rx).await {
            Ok(Ok(a)) => a,
            _ => panic!("the service did not start:\n{}", self.log_text()),
        };
        self.base = format!("http://{addr}");
    }

    pub fn log_text(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Whether the log holds `needle` within `within`: a line the process wrote is read
    /// from its stderr a moment later, possibly after what it did was seen elsewhere.
    pub async fn logs_within(&self, needle: &str, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.log_text().contains(needle) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no shutdown code runs.
    pub async fn kill9(&mut self) {
        self.child.kill().await.expect("SIGKILL");
    }

    /// SIGTERM, then waits (up to 30 s) for the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("exits within 30 s of SIGTERM")
            .expect("exit status")
    }
}
