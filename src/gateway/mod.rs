//! `hitl-telegram gateway`: an MCP server in front of another, through which every
//! tool call must pass the service's gate. The host (Claude Code, Cursor, any MCP
//! client) starts the gateway instead of the server; the gateway starts the server
//! (or reaches it at a URL) and passes every message both ways unchanged, except:
//!
//! - a `tools/call` is first a question to the service, as the agent whose token the
//!   gateway holds (rules, grants, windows, a person on Telegram). Only a confirmed
//!   call reaches the upstream, with the approved arguments; any other end is a tool
//!   result with `isError` whose text begins `NOT APPROVED`, and nothing runs;
//! - the upstream's answer to a forwarded call is reported as the run's outcome;
//! - a `tools/list` result is checked against the definitions the service pinned, and
//!   a tool that is new or changed since is left out until an approver allows it;
//! - the host's `notifications/cancelled` for a call still waiting withdraws its
//!   question; while it waits, the host hears `notifications/progress`.
//!
//! The router ([`router`]) works on lines, so the same core serves a host on stdio
//! (here) and one over Streamable HTTP (the gateways the service hosts, [`hosted`]).

pub mod gate;
pub mod hosted;
pub mod message;
mod report;
mod router;
pub mod tools;
pub mod upstream;

use std::sync::Arc;

use secrecy::SecretString;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

pub use gate::Asking;
pub use router::Router;
pub use tools::PinMode;
pub use upstream::Upstream;

use crate::client::V1Client;

/// What `hitl-telegram gateway` was told.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The service's base URL.
    pub url: String,
    pub token: SecretString,
    /// The upstream's name: `server` on every question, and what its pins are kept by.
    pub name: String,
    pub route: Option<String>,
    pub owner: Option<String>,
    pub trust_annotations: bool,
    pub pin: PinMode,
    pub timeout_seconds: Option<f64>,
    pub upstream: Upstream,
}

/// Whether `name` can name an upstream: 1 to 64 of `A-Z a-z 0-9 . _ -`, as the
/// service takes it.
pub fn valid_name(name: &str) -> bool {
    crate::domain::mcp_call::ServerName::parse(name).is_ok()
}

/// Runs the gateway on this process's stdin and stdout until the host closes stdin or
/// the upstream is gone. `Err` says, in words naming it, why it could not start or why
/// it ended.
pub async fn run_stdio(options: GatewayOptions) -> Result<(), String> {
    if !valid_name(&options.name) {
        return Err(format!(
            "--name {:?}: an upstream's name is 1 to 64 of the characters A-Z a-z 0-9 . _ -",
            options.name
        ));
    }
    let client = V1Client::new(&options.url, options.token.clone(), None)
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    let asking = Asking {
        client,
        server: options.name.clone(),
        route: options.route.clone(),
        owner: options.owner.clone(),
        trust_annotations: options.trust_annotations,
        timeout_seconds: options.timeout_seconds,
        reports: tokio_util::task::TaskTracker::new(),
    };
    let reports = asking.reports.clone();
    let link = options.upstream.connect()?;
    let (host_out, mut to_stdout) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = to_stdout.recv().await {
            let written = async {
                stdout.write_all(line.as_bytes()).await?;
                stdout.write_all(b"\n").await?;
                stdout.flush().await
            };
            if written.await.is_err() {
                break;
            }
        }
    });
    let (host_in, from_host) = mpsc::unbounded_channel::<String>();
    tokio::spawn(async move {
        let mut stdin = BufReader::new(tokio::io::stdin());
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match stdin.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).trim().to_owned();
                    if !line.is_empty() && host_in.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let router = Router::new(Arc::new(asking), options.pin, host_out);
    let ended = router.run(from_host, link).await;
    // Everything the host is owed is queued: let it be written, and the outcomes
    // reported, before exiting (bounded: a service out of reach does not hold the
    // host's shutdown).
    reports.close();
    let bound = std::time::Duration::from_secs(10);
    let _ = tokio::time::timeout(bound, async {
        reports.wait().await;
        let _ = writer.await;
    })
    .await;
    ended
}
