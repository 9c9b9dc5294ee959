//! The gateway's core: each message from the host or the upstream, sent on as it came
//! or acted on, with what is in flight kept by id.
//!
//! Ids: the host's requests keep their ids upstream (their responses go straight
//! back); the gateway's own requests (a listing it needs before a call) use ids of the
//! form `"hitl-gateway-N"`, and a host request that used such an id is refused rather
//! than confused with one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::gate::{Asking, Call, Progress, Verdict};
use super::message::{self, Id, Kind, Message, Unreadable, error_response, response, tool_error};
use super::report;
use super::tools::{self, Catalogue, PinMode, Tool};
use super::upstream::{Incoming, Link, unanswered};

/// A host request sent on to the upstream, until its response comes.
#[derive(Debug)]
enum Forwarded {
    /// A confirmed `tools/call`: its question and when it was sent, to report its run.
    Call {
        question: String,
        tool: String,
        sent: Instant,
    },
    /// A `tools/list`: its result is checked against the pins before the host has it.
    List,
    Other,
}

#[derive(Default)]
struct State {
    forwarded: HashMap<Id, Forwarded>,
    /// Calls waiting for a decision, by the host's id: cancelling withdraws.
    waiting: HashMap<Id, CancellationToken>,
    /// The gateway's own requests to the upstream.
    own: HashMap<Id, oneshot::Sender<Message>>,
    next_own: u64,
    catalogue: Catalogue,
    /// The host as it named itself in `initialize`.
    host: Option<String>,
}

/// The router, shared by the tasks it starts.
#[derive(Clone)]
pub struct Router {
    asking: Arc<Asking>,
    pin: PinMode,
    state: Arc<Mutex<State>>,
    host: mpsc::UnboundedSender<String>,
    upstream: Option<mpsc::UnboundedSender<String>>,
}

impl Router {
    pub fn new(asking: Arc<Asking>, pin: PinMode, host: mpsc::UnboundedSender<String>) -> Router {
        Router {
            asking,
            pin,
            state: Arc::default(),
            host,
            upstream: None,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding it would be a bug; the state is still consistent
        // enough to answer with.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn to_host(&self, line: String) {
        let _ = self.host.send(line);
    }

    fn to_upstream(&self, line: String) -> bool {
        self.upstream.as_ref().is_some_and(|u| u.send(line).is_ok())
    }

    /// Routes until the host closes its side (`Ok`) or the upstream is gone (`Err`,
    /// with why, after every request in flight was answered).
    pub async fn run(
        mut self,
        mut from_host: mpsc::UnboundedReceiver<String>,
        link: Link,
    ) -> Result<(), String> {
        let Link { to, mut from } = link;
        self.upstream = Some(to);
        loop {
            tokio::select! {
                line = from_host.recv() => match line {
                    Some(line) => self.on_host_line(&line),
                    None => {
                        self.host_closed();
                        return Ok(());
                    }
                },
                incoming = from.recv() => match incoming {
                    Some(Incoming::Line(line)) => self.on_upstream_line(&line),
                    Some(Incoming::Failed { id, sent, why }) => self.undelivered(&id, sent, &why),
                    Some(Incoming::Gone(why)) => {
                        self.upstream_gone(&why);
                        return Err(why);
                    }
                    None => {
                        let why = "the upstream MCP server's connection ended".to_owned();
                        self.upstream_gone(&why);
                        return Err(why);
                    }
                },
            }
        }
    }

    fn on_host_line(&self, line: &str) {
        let m = match Message::parse(line) {
            Ok(m) => m,
            Err(e) => return self.unreadable_from_host(line, &e),
        };
        match &m.kind {
            Kind::Request { id, .. } if id.to_string().starts_with("\"hitl-gateway-") => {
                self.to_host(error_response(
                    Some(id),
                    -32600,
                    "request ids beginning \"hitl-gateway-\" are the gateway's own",
                ));
            }
            Kind::Request { id, method } if method == "tools/call" => {
                let router = self.clone();
                let id = id.clone();
                let cancel = CancellationToken::new();
                self.state().waiting.insert(id.clone(), cancel.clone());
                tokio::spawn(async move { router.gate(id, m, cancel).await });
            }
            Kind::Request { id, method } => {
                if method == "initialize" {
                    self.state().host = host_name(&m);
                }
                let kind = if method == "tools/list" {
                    Forwarded::List
                } else {
                    Forwarded::Other
                };
                self.state().forwarded.insert(id.clone(), kind);
                if !self.to_upstream(m.text) {
                    self.state().forwarded.remove(id);
                    self.to_host(unanswered(id, "the upstream MCP server is gone"));
                }
            }
            Kind::Notification { method } if method == "notifications/cancelled" => {
                let cancelled = m.params().and_then(|p| p.get("requestId")).and_then(Id::of);
                let waiting = cancelled.and_then(|id| self.state().waiting.remove(&id));
                match waiting {
                    // The upstream never saw the call: the question is withdrawn, and
                    // nothing goes upstream.
                    Some(cancel) => cancel.cancel(),
                    None => {
                        self.to_upstream(m.text);
                    }
                }
            }
            Kind::Notification { .. } | Kind::Response { .. } => {
                self.to_upstream(m.text);
            }
        }
    }

    /// A line from the host that is not a message: answered with JSON-RPC's error
    /// (to its id when one can be read), never passed on.
    fn unreadable_from_host(&self, line: &str, e: &Unreadable) {
        let id = serde_json::from_str::<Value>(line)
            .ok()
            .and_then(|v| v.get("id").and_then(Id::of));
        eprintln!("hitl-telegram gateway: refused a message from the host: {e}");
        self.to_host(error_response(
            id.as_ref(),
            e.code(),
            &format!("hitl-telegram gateway: {e}"),
        ));
    }

    fn on_upstream_line(&self, line: &str) {
        let m = match Message::parse(line) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("hitl-telegram gateway: ignored a line from the upstream: {e}");
                return;
            }
        };
        match &m.kind {
            Kind::Response { id } => {
                if let Some(waiter) = self.state().own.remove(id) {
                    let _ = waiter.send(m);
                    return;
                }
                let forwarded = self.state().forwarded.remove(id);
                match forwarded {
                    Some(Forwarded::Call {
                        question,
                        tool,
                        sent,
                    }) => {
                        report::answered(&self.asking, &question, &tool, &m, sent.elapsed());
                        self.to_host(m.text);
                    }
                    Some(Forwarded::List) => {
                        let router = self.clone();
                        tokio::spawn(async move { router.listed(m).await });
                    }
                    Some(Forwarded::Other) | None => self.to_host(m.text),
                }
            }
            Kind::Notification { method } if method == "notifications/tools/list_changed" => {
                self.state().catalogue.stale = true;
                self.to_host(m.text);
            }
            Kind::Request { .. } | Kind::Notification { .. } => self.to_host(m.text),
        }
    }

    /// A `tools/list` result: pinned with the service, the tools it holds back left
    /// out, then the host has it.
    async fn listed(&self, m: Message) {
        let Some(result) = m.result().cloned() else {
            return self.to_host(m.text);
        };
        let listed = tools::listed(&result);
        let allowed = self.pin_and_take(&listed).await;
        if allowed.len() == listed.len() {
            return self.to_host(m.text);
        }
        let mut result = result;
        if let Some(Value::Array(all)) = result.get_mut("tools") {
            all.retain(|t| {
                t.get("name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| allowed.iter().any(|a| a == n))
            });
        }
        let Kind::Response { id } = &m.kind else {
            return;
        };
        self.to_host(response(id, Value::Object(result)));
    }

    /// Asks the service about `listed` and keeps what it said; the names it allows.
    async fn pin_and_take(&self, listed: &[Map<String, Value>]) -> Vec<String> {
        if self.state().catalogue.all_allowed_as(listed) {
            return names(listed);
        }
        let checked = tools::check(
            &self.asking.client,
            &self.asking.server,
            self.asking.route.as_deref(),
            self.pin,
            listed,
        )
        .await;
        if let Err(why) = &checked {
            eprintln!(
                "hitl-telegram gateway: the tools of {} could not be checked against their pins \
                 ({why}); only tools allowed before and unchanged are offered",
                self.asking.server
            );
        }
        let mut state = self.state();
        state.catalogue.take(listed, checked.as_deref().ok());
        state.catalogue.stale = false;
        listed
            .iter()
            .filter_map(|t| t.get("name").and_then(Value::as_str))
            .filter(|n| state.catalogue.get(n).is_some_and(|t| t.allowed.is_ok()))
            .map(str::to_owned)
            .collect()
    }

    /// The tool `name` as listed now: from what the host listed, or from a listing of
    /// the gateway's own when it is not known yet (a host may call without listing),
    /// the upstream said its list changed since, or it was held back (an approver may
    /// have allowed it since).
    async fn tool(&self, name: &str, meta: Option<&Value>) -> Option<Tool> {
        {
            let state = self.state();
            match state.catalogue.get(name) {
                Some(t) if t.allowed.is_ok() && !state.catalogue.stale => return Some(t.clone()),
                _ => {}
            }
        }
        let listed = self.list_all(meta).await?;
        self.pin_and_take(&listed).await;
        self.state().catalogue.get(name).cloned()
    }

    /// Every page of the upstream's `tools/list`, asked by the gateway itself.
    async fn list_all(&self, meta: Option<&Value>) -> Option<Vec<Map<String, Value>>> {
        let mut all = Vec::new();
        let mut cursor: Option<Value> = None;
        // A bound on pages: an upstream that hands out cursors for ever is not followed.
        for _ in 0..100 {
            let mut params = Map::new();
            if let Some(meta) = meta {
                params.insert("_meta".into(), meta.clone());
            }
            if let Some(c) = cursor.take() {
                params.insert("cursor".into(), c);
            }
            let (tx, rx) = oneshot::channel();
            let id = {
                let mut state = self.state();
                state.next_own += 1;
                let id = Id::own(state.next_own);
                state.own.insert(id.clone(), tx);
                id
            };
            if !self.to_upstream(message::request(&id, "tools/list", Value::Object(params))) {
                return None;
            }
            let answer = tokio::time::timeout(std::time::Duration::from_secs(30), rx).await;
            let Ok(Ok(m)) = answer else {
                self.state().own.remove(&id);
                return None;
            };
            let result = m.result()?;
            all.extend(tools::listed(result));
            match result.get("nextCursor") {
                Some(c) if c.is_string() => cursor = Some(c.clone()),
                _ => return Some(all),
            }
        }
        Some(all)
    }

    /// A `tools/call` from the host: asked about, then sent on or refused.
    async fn gate(&self, id: Id, call: Message, cancel: CancellationToken) {
        // The call is answered once: by whoever takes it out of `waiting` (here, or a
        // host's cancel or the upstream's end, which answer for it themselves).
        let still_waiting = || self.state().waiting.remove(&id).is_some();
        let refuse = |text: String| {
            if still_waiting() {
                self.to_host(response(&id, tool_error(&text)));
            }
        };
        let params = call.params().cloned().unwrap_or_default();
        let Some(name) = params
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            if !still_waiting() {
                return;
            }
            return self.to_host(error_response(
                Some(&id),
                -32602,
                "tools/call needs params.name, a string",
            ));
        };
        let arguments = match call_arguments(&call, &params, &name) {
            Ok(arguments) => arguments,
            Err(refusal) => return refuse(refusal),
        };
        let mut meta = params.get("_meta").cloned();
        if let Some(Value::Object(m)) = &mut meta {
            m.remove("progressToken");
        }
        let Some(listed) = self.tool(&name, meta.as_ref()).await else {
            return refuse(format!(
                "NOT APPROVED: {} does not list a tool named {}, so it was not run.",
                self.asking.server,
                Value::from(name.as_str())
            ));
        };
        if let Err(why) = &listed.allowed {
            return refuse(format!(
                "NOT APPROVED: the tool {name} of {} is held back: {why}. It was not run.",
                self.asking.server
            ));
        }
        let host = self.state().host.clone();
        let send = |line: String| {
            let _ = self.host.send(line);
        };
        let progress = call
            .progress_token()
            .map(|token| Progress { token, send: &send });
        let asked = Call {
            tool: &name,
            arguments: &arguments,
            listed: &listed,
            host: host.as_deref(),
        };
        let verdict = self.asking.decide(&asked, progress, &cancel).await;
        if !still_waiting() {
            // Cancelled by the host, or the upstream is gone, after the decision came:
            // the host no longer waits for this call, so it does not run.
            if let Verdict::Run { id: question, .. } = &verdict {
                report::not_run(
                    &self.asking,
                    question,
                    "the host cancelled the call as it was approved",
                );
            }
            return;
        }
        match verdict {
            Verdict::Run {
                arguments,
                id: question,
            } => {
                self.state().forwarded.insert(
                    id.clone(),
                    Forwarded::Call {
                        question: question.clone(),
                        tool: name.clone(),
                        sent: Instant::now(),
                    },
                );
                if !self.to_upstream(message::with_arguments(&call, &arguments)) {
                    self.state().forwarded.remove(&id);
                    report::not_run(&self.asking, &question, "the upstream MCP server was gone");
                    self.to_host(response(
                        &id,
                        tool_error(&format!(
                            "NOT RUN: {name} was approved, but the upstream MCP server {} is \
                             gone, so it was not run.",
                            self.asking.server
                        )),
                    ));
                }
            }
            Verdict::Refuse(text) => self.to_host(response(&id, tool_error(&text))),
            Verdict::Withdrawn => {}
        }
    }

    /// A request the upstream could not be sent, or whose answer broke off.
    fn undelivered(&self, id: &Id, sent: bool, why: &str) {
        if let Some(waiter) = self.state().own.remove(id) {
            drop(waiter);
            return;
        }
        let forwarded = self.state().forwarded.remove(id);
        match forwarded {
            Some(Forwarded::Call { question, tool, .. }) => {
                if sent {
                    report::unknown(&self.asking, &question, why);
                } else {
                    report::not_run(&self.asking, &question, why);
                }
                let words = if sent {
                    format!(
                        "{tool} was sent to the upstream MCP server, but {why}: whether it ran is not known."
                    )
                } else {
                    format!("NOT RUN: {tool} was approved, but {why}, so it was not run.")
                };
                self.to_host(response(id, tool_error(&words)));
            }
            Some(_) | None => self.to_host(unanswered(id, why)),
        }
    }

    /// The upstream is gone: every call in flight is reported as not known to have run,
    /// every waiting question is withdrawn, and every request is answered.
    fn upstream_gone(&self, why: &str) {
        eprintln!("hitl-telegram gateway: {why}");
        let (forwarded, waiting) = {
            let mut state = self.state();
            state.own.clear();
            (
                std::mem::take(&mut state.forwarded),
                std::mem::take(&mut state.waiting),
            )
        };
        for (id, f) in forwarded {
            match f {
                Forwarded::Call { question, tool, .. } => {
                    report::unknown(&self.asking, &question, why);
                    self.to_host(response(
                        &id,
                        tool_error(&format!(
                            "{tool} was sent to the upstream MCP server, but {why} before it \
                             answered: whether it ran is not known."
                        )),
                    ));
                }
                Forwarded::List | Forwarded::Other => self.to_host(unanswered(&id, why)),
            }
        }
        for (id, cancel) in waiting {
            cancel.cancel();
            self.to_host(response(
                &id,
                tool_error(&format!("NOT APPROVED: {why}, so the call cannot run.")),
            ));
        }
    }

    /// The host closed its side: questions still waiting are withdrawn.
    fn host_closed(&self) {
        for (_, cancel) in std::mem::take(&mut self.state().waiting) {
            cancel.cancel();
        }
    }
}

/// The names of listed tools.
fn names(listed: &[Map<String, Value>]) -> Vec<String> {
    listed
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// `clientInfo` of an `initialize` request, as `name version`, cut and without
/// control characters (it is shown to approvers).
fn host_name(m: &Message) -> Option<String> {
    let info = m.params()?.get("clientInfo")?;
    let name = info.get("name")?.as_str()?;
    let version = info.get("version").and_then(Value::as_str).unwrap_or("");
    let words: String = format!("{name} {version}")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    Some(crate::client::cut(&words, 80))
}

/// The arguments of `call` to ask about: as written (`{}` when there are none), or the
/// refusal when they are not an object.
fn call_arguments(
    call: &Message,
    params: &Map<String, Value>,
    name: &str,
) -> Result<Box<RawValue>, String> {
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::Object(_)) => {
            raw_arguments(&call.text).unwrap_or_else(|| params["arguments"].to_string())
        }
        Some(_) => {
            return Err(format!(
                "NOT APPROVED: the arguments of {name} are not an object, so the call was \
                 not asked about and not run."
            ));
        }
    };
    RawValue::from_string(arguments)
        .map_err(|_| format!("NOT APPROVED: the arguments of {name} could not be read."))
}

/// The `arguments` of a `tools/call` line as it was written (key order and number
/// spelling kept), when they can be found.
fn raw_arguments(line: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        params: CallParams<'a>,
    }
    #[derive(serde::Deserialize)]
    struct CallParams<'a> {
        #[serde(borrow)]
        arguments: &'a RawValue,
    }
    serde_json::from_str::<Call<'_>>(line)
        .ok()
        .map(|c| c.params.arguments.get().to_owned())
}
