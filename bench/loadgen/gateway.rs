//! B7: what `hitl-telegram gateway` adds to an MCP call. The same upstream (the tests'
//! MCP server on the official Python SDK, `tests/fixtures/mcp/upstream_server.py`) is
//! called directly and through the gateway, one call at a time, side by side in one
//! run; an `allow` rule lets the calls through, so the figure is the gateway's own work
//! plus its round trip to the service, never a person. Needs `HITL_MCP_PYTHON` (a
//! python with `mcp`); without it the rows say so.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, ensure};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;

use super::service::{self, AGENT_TOKEN, Setup};
use super::{Args, Fake, percentile, row};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp/upstream_server.py"
);

/// The rule that lets the benchmark's calls through without asking.
const RULE: &str = "\n[[rules]]\nname = \"bench-echo\"\neffect = \"allow\"\ntools = [\"echo\"]\n\
                    servers = [\"bench\"]\n";

/// An MCP server on stdio, spoken to a line at a time.
struct Stdio2 {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Stdio2 {
    async fn start(argv: &[String]) -> anyhow::Result<Stdio2> {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .env("HITL_BENCH_AGENT_TOKEN", AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", argv[0]))?;
        let stdin = child.stdin.take().context("stdin")?;
        let lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut s = Stdio2 {
            child,
            stdin,
            lines,
            next: 0,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "hitl-loadgen", "version": "0"}}),
        )
        .await?;
        s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(s)
    }

    async fn send(&mut self, message: Value) -> anyhow::Result<()> {
        self.stdin
            .write_all(format!("{message}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// One request, and its result.
    async fn request(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(30), self.lines.next_line())
                .await
                .context("no answer in 30 s")??
                .context("the server ended")?;
            let m: Value = serde_json::from_str(&line)?;
            if m["id"] == json!(id) {
                ensure!(m.get("error").is_none(), "{method}: {m}");
                return Ok(m["result"].clone());
            }
        }
    }

    /// Round trips of `n` calls of `method`, in microseconds, sorted.
    async fn time(&mut self, n: usize, method: &str, params: &Value) -> anyhow::Result<Vec<u32>> {
        let mut took = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let result = self.request(method, params.clone()).await?;
            took.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
            ensure!(result["isError"] != json!(true), "{method}: {result}");
        }
        took.sort_unstable();
        Ok(took)
    }
}

/// Direct and through the gateway: (call, list) round trips, sorted.
struct Figures {
    call: Vec<u32>,
    list: Vec<u32>,
}

async fn measure(argv: &[String], n: usize) -> anyhow::Result<(Figures, Stdio2)> {
    let mut s = Stdio2::start(argv).await?;
    let call = json!({"name": "echo", "arguments": {"text": "bench"}});
    // Warm up both paths (the gateway's first listing pins the tools).
    s.time(5, "tools/list", &json!({})).await?;
    s.time(20, "tools/call", &call).await?;
    let list = s.time(n / 5 + 1, "tools/list", &json!({})).await?;
    let call = s.time(n, "tools/call", &call).await?;
    Ok((Figures { call, list }, s))
}

pub async fn b7(args: &Args) -> anyhow::Result<()> {
    let Some(python) = std::env::var_os("HITL_MCP_PYTHON").map(PathBuf::from) else {
        row(
            "B7",
            "gateway: a call a rule allows, added",
            "not measured (HITL_MCP_PYTHON unset)".into(),
            "p50 ≤ 2 ms, p99 ≤ 5 ms",
            None,
            args.smoke,
        );
        return Ok(());
    };
    let fake = Fake::start().await?;
    let dir = service::TempDir::new()?;
    let setup = Setup {
        dir: dir.path().to_owned(),
        port: service::free_port()?,
        telegram_url: fake.url(),
        chats: vec![1_000],
        database_url: None,
        extra: RULE.into(),
    };
    let mut running = setup.spawn(&args.service_bin)?;
    running.wait_serving(Duration::from_secs(30)).await?;
    let n = if args.smoke { 20 } else { 1_000 };
    let upstream = vec![python.display().to_string(), FIXTURE.to_owned()];
    let (direct, _d) = measure(&upstream, n).await.context("direct")?;
    let gateway = gateway_argv(&args.service_bin, setup.addr(), &upstream);
    let (through, s) = measure(&gateway, n).await.context("through the gateway")?;
    tokio::time::sleep(Duration::from_secs(if args.smoke { 1 } else { 3 })).await;
    let idle = service::memory_of(s.child.id().unwrap_or(0))?;
    running.kill()?;

    let added = |p: f64| percentile(&through.call, p) - percentile(&direct.call, p);
    let (p50, p99) = (added(0.5), added(0.99));
    row(
        "B7",
        "gateway: a call a rule allows, added p50 / p99",
        format!(
            "+{p50:.2} ms / +{p99:.2} ms (direct {:.2} / {:.2} ms)",
            percentile(&direct.call, 0.5),
            percentile(&direct.call, 0.99)
        ),
        "≤ 2 ms / ≤ 5 ms",
        Some(p50 <= 2.0 && p99 <= 5.0),
        args.smoke,
    );
    let list = percentile(&through.list, 0.5) - percentile(&direct.list, 0.5);
    row(
        "B7",
        "  tools/list added p50",
        format!(
            "+{list:.2} ms (direct {:.2} ms)",
            percentile(&direct.list, 0.5)
        ),
        "≤ 1 ms",
        Some(list <= 1.0),
        args.smoke,
    );
    row(
        "B7",
        "  gateway idle RSS",
        format!("{:.1} MiB", idle.rss as f64 / 1024.0),
        "(report)",
        None,
        args.smoke,
    );
    Ok(())
}

fn gateway_argv(bin: &Path, service: std::net::SocketAddr, upstream: &[String]) -> Vec<String> {
    let mut argv = vec![
        bin.display().to_string(),
        "gateway".into(),
        "--url".into(),
        format!("http://{service}"),
        "--token-env".into(),
        "HITL_BENCH_AGENT_TOKEN".into(),
        "--name".into(),
        "bench".into(),
        "--".into(),
    ];
    argv.extend(upstream.iter().cloned());
    argv
}
