//! One host's session with a hosted upstream: a [`Router`] of its own in front of an
//! upstream connection of its own, and the HTTP streams its messages go out on.
//!
//! Where a message for the host goes (Streamable HTTP has no single line back):
//! - a response, on the stream of the POST that carried its request;
//! - a progress notification, on the stream of the POST whose request gave its token;
//! - anything else (the upstream's requests for sampling, elicitation or roots, its
//!   notifications), on the session's GET stream when one is open, else on a POST
//!   stream still open (the call it most likely belongs to), else kept (a bounded
//!   backlog) until a GET stream opens.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use crate::config::McpUpstream;
use crate::gateway::message::{Id, Kind, Message};
use crate::gateway::upstream::Link;
use crate::gateway::{Asking, PinMode, Router};

/// The most messages kept for a GET stream nobody has opened yet; older ones go first.
const BACKLOG: usize = 256;

/// A POST waiting for its response.
struct Waiter {
    to: mpsc::UnboundedSender<String>,
    /// An event stream (which may carry more than the response) or a JSON answer.
    stream: bool,
    /// Its request's progress token, as JSON text.
    progress: Option<String>,
}

#[derive(Default)]
struct Lanes {
    posts: HashMap<Id, Waiter>,
    progress: HashMap<String, Id>,
    stream: Option<mpsc::UnboundedSender<String>>,
    backlog: VecDeque<String>,
}

/// Why a request could not be put to the session.
pub enum Refused {
    /// Its id is that of a request still in flight.
    IdInUse,
    /// The session has ended.
    Ended,
}

pub struct Session {
    pub id: String,
    pub agent: String,
    pub upstream: Arc<McpUpstream>,
    to_router: Mutex<Option<mpsc::UnboundedSender<String>>>,
    lanes: Mutex<Lanes>,
    last_seen: Mutex<Instant>,
    /// Its router has stopped: the session is gone, even if something still holds it
    /// (an upstream that dies at once can stop it before it is listed).
    finished: AtomicBool,
}

impl Session {
    /// Starts a session: its router on `link`, asking as `asking` says; `ended` is
    /// called once the router has stopped (the host ended the session, or the upstream
    /// is gone) with why, when it was the upstream.
    pub fn start(
        id: String,
        agent: String,
        upstream: Arc<McpUpstream>,
        asking: Asking,
        link: Link,
        ended: impl FnOnce(&Session, Option<String>) + Send + 'static,
    ) -> Arc<Session> {
        let pin = match upstream.pin {
            crate::domain::tool_pin::PinMode::First => PinMode::First,
            crate::domain::tool_pin::PinMode::Strict => PinMode::Strict,
        };
        let (host_out, mut for_host) = mpsc::unbounded_channel::<String>();
        let (to_router, from_host) = mpsc::unbounded_channel::<String>();
        let session = Arc::new(Session {
            id,
            agent,
            upstream,
            to_router: Mutex::new(Some(to_router)),
            lanes: Mutex::default(),
            last_seen: Mutex::new(Instant::now()),
            finished: AtomicBool::new(false),
        });
        let router = Router::new(Arc::new(asking), pin, host_out);
        let running = session.clone();
        tokio::spawn(async move {
            let why = router.run(from_host, link).await.err();
            running.finished.store(true, Ordering::Release);
            running.close();
            ended(&running, why);
        });
        let delivering = session.clone();
        tokio::spawn(async move {
            while let Some(line) = for_host.recv().await {
                delivering.deliver(line);
            }
            // Every router handle is gone: nothing more will come. Ending the streams
            // still open tells their clients so.
            let mut lanes = delivering.lanes();
            lanes.posts.clear();
            lanes.stream = None;
        });
        session
    }

    fn lanes(&self) -> std::sync::MutexGuard<'_, Lanes> {
        self.lanes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks the session used now.
    pub fn touch(&self) {
        *self
            .last_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
    }

    /// Whether its router has stopped (the host ended it, or the upstream is gone).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }

    /// Whether it has gone unused for `idle`, with nothing in flight and no stream open.
    pub fn idle_for(&self, idle: Duration) -> bool {
        let quiet = self
            .last_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .elapsed()
            >= idle;
        let lanes = self.lanes();
        quiet && lanes.posts.is_empty() && lanes.stream.as_ref().is_none_or(|s| s.is_closed())
    }

    /// Ends the session: the router hears the host is gone (a call still waiting for a
    /// decision has its question withdrawn) and the upstream is let go.
    pub fn close(&self) {
        self.to_router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
    }

    /// A notification or a response from the host: passed to the router.
    pub fn send(&self, m: &Message) -> Result<(), Refused> {
        let sent = self
            .to_router
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|to| to.send(one_line(&m.text)).is_ok());
        if sent { Ok(()) } else { Err(Refused::Ended) }
    }

    /// A request from the host: passed to the router, its response (and, for a
    /// `stream`, what belongs with it) to come on the receiver.
    pub fn request(
        &self,
        id: &Id,
        m: &Message,
        stream: bool,
    ) -> Result<mpsc::UnboundedReceiver<String>, Refused> {
        let (to, from) = mpsc::unbounded_channel();
        {
            let mut lanes = self.lanes();
            if lanes.posts.contains_key(id) {
                return Err(Refused::IdInUse);
            }
            let progress = m.progress_token().map(|t| t.to_string());
            if let Some(token) = &progress {
                lanes.progress.insert(token.clone(), id.clone());
            }
            lanes.posts.insert(
                id.clone(),
                Waiter {
                    to,
                    stream,
                    progress,
                },
            );
        }
        match self.send(m) {
            Ok(()) => Ok(from),
            Err(refused) => {
                self.forget(id);
                Err(refused)
            }
        }
    }

    fn forget(&self, id: &Id) {
        let mut lanes = self.lanes();
        if let Some(w) = lanes.posts.remove(id)
            && let Some(token) = w.progress
        {
            lanes.progress.remove(&token);
        }
    }

    /// Opens the session's GET stream (a second one replaces the first), with what was
    /// kept for it.
    pub fn open_stream(&self) -> mpsc::UnboundedReceiver<String> {
        let (to, from) = mpsc::unbounded_channel();
        let mut lanes = self.lanes();
        for line in lanes.backlog.drain(..) {
            let _ = to.send(line);
        }
        lanes.stream = Some(to);
        from
    }

    /// One message from the router for the host.
    fn deliver(&self, line: String) {
        let m = Message::parse(&line).ok();
        let mut lanes = self.lanes();
        match m.as_ref().map(|m| &m.kind) {
            Some(Kind::Response { id }) => {
                if let Some(w) = lanes.posts.remove(id) {
                    if let Some(token) = &w.progress {
                        lanes.progress.remove(token);
                    }
                    let _ = w.to.send(line);
                    return;
                }
            }
            Some(Kind::Notification { method }) if method == "notifications/progress" => {
                let token = m
                    .as_ref()
                    .and_then(Message::params)
                    .and_then(|p| p.get("progressToken"))
                    .map(Value::to_string);
                let waiter = token
                    .and_then(|t| lanes.progress.get(&t))
                    .and_then(|id| lanes.posts.get(id))
                    .filter(|w| w.stream);
                if let Some(w) = waiter {
                    let _ = w.to.send(line);
                    return;
                }
            }
            _ => {}
        }
        if let Some(stream) = &lanes.stream {
            if stream.send(line.clone()).is_ok() {
                return;
            }
            lanes.stream = None;
        }
        if let Some(w) = lanes.posts.values().find(|w| w.stream && !w.to.is_closed()) {
            let _ = w.to.send(line);
            return;
        }
        if lanes.backlog.len() == BACKLOG {
            lanes.backlog.pop_front();
            tracing::warn!(
                upstream = %self.upstream.name,
                agent = %self.agent,
                "a hosted MCP session's backlog is full (no GET stream open): its oldest message was dropped"
            );
        }
        lanes.backlog.push_back(line);
    }
}

/// The message on one line, as a stdio upstream needs it: a line break inside a JSON
/// text can only be whitespace between its tokens (a string cannot hold one raw), so
/// it is replaced by a space and nothing else changes.
fn one_line(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect()
}
