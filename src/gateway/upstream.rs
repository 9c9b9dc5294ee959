//! The upstream MCP server, as lines in and out: a program the gateway starts and
//! speaks to over its stdin and stdout (MCP's stdio transport: one JSON-RPC message a
//! line), or a server at a URL (Streamable HTTP: each message POSTed, the answers in
//! the response, as JSON or as a stream of server-sent events).
//!
//! Either way the rest of the gateway sees a [`Link`]: a sender of lines, and a
//! receiver of what comes back, ending with why the upstream is gone.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use secrecy::{ExposeSecret, SecretString};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::message::{Id, Kind, Message, error_response};

/// What comes from the upstream.
#[derive(Debug)]
pub enum Incoming {
    /// One message's line.
    Line(String),
    /// A request the gateway sent could not be delivered or answered (Streamable HTTP
    /// only): `sent` says whether the upstream may have received it.
    Failed { id: Id, sent: bool, why: String },
    /// The upstream is gone, in words naming it.
    Gone(String),
}

/// The two directions.
pub struct Link {
    pub to: mpsc::UnboundedSender<String>,
    pub from: mpsc::UnboundedReceiver<Incoming>,
}

/// Where the upstream is.
#[derive(Clone)]
pub enum Upstream {
    /// A program and its arguments, started by the gateway. `env`: `None` hands it the
    /// gateway's own environment (a gateway the host started, whose environment the
    /// host chose); `Some` gives it only these variables, with `PATH` and `HOME` (a
    /// gateway the service hosts, whose environment holds the service's secrets).
    Command {
        argv: Vec<String>,
        env: Option<Vec<(String, SecretString)>>,
    },
    /// A Streamable HTTP endpoint, with headers (values from the environment).
    Url {
        url: String,
        headers: Vec<(String, SecretString)>,
    },
}

/// Names only: the values are secrets.
impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |pairs: &[(String, SecretString)]| -> Vec<String> {
            pairs.iter().map(|(n, _)| n.clone()).collect()
        };
        match self {
            Upstream::Command { argv, env } => f
                .debug_struct("Command")
                .field("argv", argv)
                .field("env", &env.as_deref().map(names))
                .finish(),
            Upstream::Url { url, headers } => f
                .debug_struct("Url")
                .field("url", url)
                .field("headers", &names(headers))
                .finish(),
        }
    }
}

impl Upstream {
    /// The upstream in words, for what the gateway says on stderr.
    pub fn describe(&self) -> String {
        match self {
            Upstream::Command { argv, .. } => {
                format!("the upstream MCP server `{}`", argv.join(" "))
            }
            Upstream::Url { url, .. } => format!("the upstream MCP server at {url}"),
        }
    }

    /// Starts it (or, for a URL, gets ready to reach it).
    pub fn connect(&self) -> Result<Link, String> {
        match self {
            Upstream::Command { argv, env } => spawn(argv, env.as_deref(), &self.describe()),
            Upstream::Url { url, headers } => http(url, headers, &self.describe()),
        }
    }
}

fn spawn(
    argv: &[String],
    env: Option<&[(String, SecretString)]>,
    described: &str,
) -> Result<Link, String> {
    let (program, args) = argv
        .split_first()
        .ok_or("no upstream command was given after `--`")?;
    let mut command = tokio::process::Command::new(program);
    if let Some(env) = env {
        command.env_clear();
        for kept in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(kept) {
                command.env(kept, value);
            }
        }
        for (name, value) in env {
            command.env(name, value.expose_secret());
        }
    }
    let mut child = command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // The upstream's own log goes where the host keeps the gateway's.
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {described}: {e}"))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(format!("cannot start {described}: no pipes"));
    };
    let (to, mut outgoing) = mpsc::unbounded_channel::<String>();
    let (incoming, from) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(line) = outgoing.recv().await {
            let written = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.write_all(b"\n").await?;
                stdin.flush().await
            };
            if written.await.is_err() {
                break;
            }
        }
        // Closing its stdin is how an MCP client ends a stdio server.
        drop(stdin);
    });
    let described = described.to_owned();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match lines.read_until(b'\n', &mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).trim().to_owned();
                    if !line.is_empty() && incoming.send(Incoming::Line(line)).is_err() {
                        break;
                    }
                }
            }
        }
        // Its stdout closed: it exited or is about to. Wait a moment for its status.
        let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        let why = match status {
            Ok(Ok(s)) => format!("{described} exited ({s})"),
            Ok(Err(e)) => format!("{described} is gone ({e})"),
            Err(_) => {
                let _ = child.kill().await;
                format!("{described} closed its output and was stopped")
            }
        };
        let _ = incoming.send(Incoming::Gone(why));
    });
    Ok(Link { to, from })
}

/// A Streamable HTTP upstream. Each outgoing message is one POST, sent at once and
/// answered in its own task (a long tool call does not hold up the others); the
/// session id the server gives on initialization is sent with every later request, and
/// once initialized a GET stream carries what the server sends on its own (a server
/// without one answers 405, which is fine).
fn http(url: &str, headers: &[(String, SecretString)], described: &str) -> Result<Link, String> {
    let mut fixed = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("{name:?} is not a header name"))?;
        let mut value = HeaderValue::from_str(value.expose_secret())
            .map_err(|_| format!("the value of the header {name} is not a header value"))?;
        value.set_sensitive(true);
        fixed.insert(name, value);
    }
    fixed.insert(
        ACCEPT,
        HeaderValue::from_static("application/json, text/event-stream"),
    );
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .default_headers(fixed)
        .build()
        .map_err(|e| e.to_string())?;
    let (to, mut outgoing) = mpsc::unbounded_channel::<String>();
    let (incoming, from) = mpsc::unbounded_channel();
    let session = std::sync::Arc::new(Session {
        url: url.to_owned(),
        client,
        id: std::sync::Mutex::new(None),
        version: std::sync::Mutex::new(None),
        described: described.to_owned(),
    });
    tokio::spawn(async move {
        let mut initialize: Option<Id> = None;
        while let Some(line) = outgoing.recv().await {
            let message = Message::parse(&line).ok();
            let request_id = match message.as_ref().map(|m| &m.kind) {
                Some(Kind::Request { id, method }) => {
                    if method == "initialize" {
                        initialize = Some(id.clone());
                    }
                    Some(id.clone())
                }
                _ => None,
            };
            if message.as_ref().and_then(Message::method) == Some("notifications/initialized") {
                tokio::spawn(session.clone().listen(incoming.clone()));
            }
            let session = session.clone();
            let incoming = incoming.clone();
            let init = initialize.clone();
            let initializes = request_id.is_some() && request_id == initialize;
            tokio::spawn(async move {
                if let Err((sent, why)) = session
                    .post(line, init.as_ref(), initializes, &incoming)
                    .await
                {
                    match request_id {
                        Some(id) => {
                            let _ = incoming.send(Incoming::Failed { id, sent, why });
                        }
                        None => eprintln!("hitl-telegram gateway: {why}"),
                    }
                }
            });
        }
        session.end().await;
    });
    Ok(Link { to, from })
}

struct Session {
    url: String,
    client: reqwest::Client,
    /// `Mcp-Session-Id`, once the server gave one.
    id: std::sync::Mutex<Option<HeaderValue>>,
    /// `MCP-Protocol-Version`, once initialization agreed on one.
    version: std::sync::Mutex<Option<HeaderValue>>,
    described: String,
}

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";

impl Session {
    fn request(&self, method: reqwest::Method) -> reqwest::RequestBuilder {
        let mut r = self.client.request(method, &self.url);
        if let Some(id) = self.id.lock().map(|g| g.clone()).ok().flatten() {
            r = r.header(SESSION_ID, id);
        }
        if let Some(v) = self.version.lock().map(|g| g.clone()).ok().flatten() {
            r = r.header(PROTOCOL_VERSION, v);
        }
        r
    }

    /// POSTs one message and passes on what comes back. `Err` says whether the server
    /// may have received it, and why it failed.
    async fn post(
        &self,
        line: String,
        initialize: Option<&Id>,
        initializes: bool,
        incoming: &mpsc::UnboundedSender<Incoming>,
    ) -> Result<(), (bool, String)> {
        let response = self
            .request(reqwest::Method::POST)
            .header(CONTENT_TYPE, "application/json")
            .body(line)
            .send()
            .await
            .map_err(|e| {
                (
                    !e.is_connect(),
                    format!("{} could not be reached: {e}", self.described),
                )
            })?;
        // The session is the one the answer to `initialize` names (a server may send an
        // id with other answers, such as a refused `server/discover`, that it will not
        // know again); a new initialization starts a new session.
        if initializes && let Ok(mut g) = self.id.lock() {
            *g = response.headers().get(SESSION_ID).cloned();
        }
        let status = response.status();
        if status == StatusCode::ACCEPTED {
            return Ok(());
        }
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err((
                status != StatusCode::NOT_FOUND && status != StatusCode::UNAUTHORIZED,
                format!(
                    "{} answered {}: {}",
                    self.described,
                    status.as_u16(),
                    crate::client::cut(&body, 300)
                ),
            ));
        }
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let deliver = |line: String| {
            self.note_version(&line, initialize);
            let _ = incoming.send(Incoming::Line(line));
        };
        if is_stream {
            read_events(response, deliver).await.map_err(|e| {
                (
                    true,
                    format!("{}: its answer broke off ({e})", self.described),
                )
            })
        } else {
            let body = response.text().await.map_err(|e| {
                (
                    true,
                    format!("{}: its answer broke off ({e})", self.described),
                )
            })?;
            let body = body.trim();
            if !body.is_empty() {
                deliver(body.to_owned());
            }
            Ok(())
        }
    }

    /// The protocol version an initialize result agreed on, for the header every later
    /// request carries.
    fn note_version(&self, line: &str, initialize: Option<&Id>) {
        let Some(init) = initialize else { return };
        let Ok(m) = Message::parse(line) else { return };
        if m.kind != (Kind::Response { id: init.clone() }) {
            return;
        }
        let version = m
            .result()
            .and_then(|r| r.get("protocolVersion"))
            .and_then(|v| v.as_str())
            .and_then(|v| HeaderValue::from_str(v).ok());
        if let (Some(v), Ok(mut g)) = (version, self.version.lock()) {
            *g = Some(v);
        }
    }

    /// The GET stream of what the server sends on its own (requests to the host such as
    /// sampling, notifications such as a changed tool list), while it lasts.
    async fn listen(self: std::sync::Arc<Self>, incoming: mpsc::UnboundedSender<Incoming>) {
        let Ok(response) = self
            .request(reqwest::Method::GET)
            .header(ACCEPT, "text/event-stream")
            .send()
            .await
        else {
            return;
        };
        if !response.status().is_success() {
            // 405: the server offers no such stream.
            return;
        }
        let _ = read_events(response, |line| {
            let _ = incoming.send(Incoming::Line(line));
        })
        .await;
    }

    /// Ends the session, as the specification asks a client that is done to.
    async fn end(&self) {
        if self.id.lock().map(|g| g.is_some()).unwrap_or(false) {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                self.request(reqwest::Method::DELETE).send(),
            )
            .await;
        }
    }
}

/// Reads a stream of server-sent events, handing each event's data (a JSON-RPC
/// message) to `deliver`.
async fn read_events(
    mut response: reqwest::Response,
    mut deliver: impl FnMut(String),
) -> Result<(), reqwest::Error> {
    // Bytes until a whole line is in: a chunk may end inside a character.
    let mut pending: Vec<u8> = Vec::new();
    let mut data = String::new();
    while let Some(chunk) = response.chunk().await? {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let raw: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                // An event ends: its data is one message.
                if !data.trim().is_empty() {
                    deliver(std::mem::take(&mut data));
                }
                data.clear();
            } else if let Some(value) = line.strip_prefix("data:") {
                if !data.is_empty() {
                    data.push('\n');
                }
                data.push_str(value.strip_prefix(' ').unwrap_or(value));
            }
            // `event:`, `id:`, `retry:` and comments carry nothing the gateway uses:
            // a stream that breaks off is not resumed (see the module notes).
        }
    }
    if !data.trim().is_empty() {
        deliver(data);
    }
    Ok(())
}

/// The error response the host gets for a request the upstream never answered.
pub fn unanswered(id: &Id, why: &str) -> String {
    error_response(Some(id), -32603, why)
}
