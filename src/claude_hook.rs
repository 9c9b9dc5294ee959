//! `claude-hook`: Claude Code's `PermissionRequest` hook, answered on Telegram.
//!
//! Claude Code runs a `PermissionRequest` hook when it is about to show a permission
//! dialog, with the event as JSON on stdin (`session_id`, `transcript_path`, `cwd`,
//! `permission_mode`, `hook_event_name`, `tool_name`, `tool_input`,
//! `permission_suggestions`, and `mcp_server` for MCP tools; no `tool_use_id`). The hook
//! answers by exiting 0 with one JSON object on stdout:
//!
//! ```json
//! {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
//!                         "decision": {"behavior": "allow"}}}
//! {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
//!                         "decision": {"behavior": "deny", "message": "..."}}}
//! ```
//!
//! or by exiting 0 with nothing on stdout, which lets Claude Code show its own dialog.
//! (Exit 2 also denies, with stderr as the message; any other exit code is a
//! non-blocking error, after which the dialog shows.)
//!
//! This module asks the service as a confirmation (tool = `tool_name`, params =
//! `tool_input`), waits for the operator, and maps the outcome: `confirmed` allows,
//! anything else denies with a message saying who cancelled, that nobody answered in
//! time, or that the question could not be delivered. When the service cannot be asked
//! at all it denies (fail closed), or with `--fallback ask` prints nothing.
//!
//! Never approved twice by accident: a retried hook finds its request again through an
//! idempotency key derived from the event, but a decision taken *before* this run
//! started is never reused for a later identical call in the same session; that call is
//! asked anew (see [`decide`]).

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::api::confirmations::MAX_PARAM_KEYS;
use crate::domain::pyjson;

/// Largest event read from stdin; anything longer is denied unread.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// How long the operator gets by default (`--timeout`).
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 120.0;
/// The event Claude Code names in `hook_event_name` and expects back in `hookEventName`.
pub const EVENT_NAME: &str = "PermissionRequest";

/// Room for `params` in a create body (the service takes at most 64 KiB in all).
const PARAMS_BUDGET_BYTES: usize = 48 * 1024;
/// Strings longer than this are shortened when the input is too large to send whole.
const LONG_STRING_CHARS: usize = 2000;
const KEPT_STRING_CHARS: usize = 1000;
const PREVIEW_CHARS: usize = 3000;
/// Longest long-poll the service allows.
const LONG_POLL_SECONDS: u32 = 60;
/// How many earlier, already decided identical requests a run steps over before it
/// gives up re-attaching and asks under a fresh random key.
const MAX_HOPS: usize = 16;
/// How long the service may stay unreachable while a question is open.
const OUTAGE_PATIENCE: Duration = Duration::from_secs(30);
/// Slack for clock skew when only the local clock can tell a fresh decision from an
/// earlier one (the service sent no `Date` header).
const CLOCK_SLACK: Duration = Duration::from_secs(2);

/// What to do when the service cannot give a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fallback {
    /// Deny the tool call (fail closed), saying why.
    Deny,
    /// Print nothing, so Claude Code shows its own permission dialog.
    Ask,
}

/// Where the request's `owner_id` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OwnerFrom {
    /// The login name running Claude Code ($USER, $LOGNAME or $USERNAME); the working
    /// directory's last component when none is set.
    User,
    /// The last component of the session's working directory (the project's folder).
    Cwd,
    /// The Claude Code session id.
    Session,
}

/// The command line of `claude-hook`.
#[derive(Debug, Clone)]
pub struct HookOptions {
    pub url: String,
    /// Name of the environment variable holding the agent's bearer token.
    pub token_env: String,
    pub route: Option<String>,
    pub timeout_seconds: f64,
    pub fallback: Fallback,
    pub owner_from: OwnerFrom,
}

/// What the process prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub exit_code: u8,
}

impl HookResult {
    fn allow() -> Self {
        let out = json!({"hookSpecificOutput": {
            "hookEventName": EVENT_NAME,
            "decision": {"behavior": "allow"},
        }});
        HookResult {
            stdout: Some(out.to_string()),
            stderr: None,
            exit_code: 0,
        }
    }

    fn deny(message: impl Into<String>) -> Self {
        let out = json!({"hookSpecificOutput": {
            "hookEventName": EVENT_NAME,
            "decision": {"behavior": "deny", "message": message.into()},
        }});
        HookResult {
            stdout: Some(out.to_string()),
            stderr: None,
            exit_code: 0,
        }
    }

    /// Nothing on stdout: Claude Code shows its own dialog. `why` goes to stderr, which
    /// Claude Code keeps in its debug log.
    fn leave_to_claude_code(why: String) -> Self {
        HookResult {
            stdout: None,
            stderr: Some(format!(
                "hitl-telegram claude-hook: {why}; leaving the decision to Claude Code's own prompt"
            )),
            exit_code: 0,
        }
    }
}

/// The fields of a hook event this command uses; the others (`transcript_path`,
/// `permission_suggestions`, `mcp_server`, ...) are ignored.
#[derive(Debug, Deserialize)]
pub struct HookEvent {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    pub tool_name: String,
    pub tool_input: Box<RawValue>,
    /// Not sent with `PermissionRequest` today; used when present.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// Set when the call comes from a subagent.
    #[serde(default)]
    pub agent_type: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// Reads the event, refusing more than [`MAX_EVENT_BYTES`].
pub fn read_event(input: impl Read) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    input
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read stdin: {e}"))?;
    if buf.len() > MAX_EVENT_BYTES {
        return Err(format!(
            "the event on stdin is larger than {} KiB",
            MAX_EVENT_BYTES / 1024
        ));
    }
    Ok(buf)
}

/// Parses the event, naming what is wrong with it.
pub fn parse_event(bytes: &[u8]) -> Result<HookEvent, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("stdin is empty".into());
    }
    let event: HookEvent = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdin is not a Claude Code hook event in JSON: {e}"))?;
    if event.tool_name.trim().is_empty() {
        return Err("the event's tool_name is empty".into());
    }
    // RawValue checks the syntax only; this also refuses lone surrogates and absurd
    // nesting, which no tool input has.
    serde_json::from_str::<Value>(event.tool_input.get())
        .map_err(|e| format!("the event's tool_input is not valid JSON: {e}"))?;
    Ok(event)
}

/// Runs the hook on `input` (what [`read_event`] returned); `env` looks up environment
/// variables. Never panics on any input; every path ends in one [`HookResult`].
pub async fn run(
    opts: &HookOptions,
    input: Result<Vec<u8>, String>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
    let event = match input.and_then(|bytes| parse_event(&bytes).map(|e| (e, bytes))) {
        Ok(e) => e,
        Err(e) => {
            return HookResult::deny(format!(
                "Permission denied: hitl-telegram could not read the hook event ({e})."
            ));
        }
    };
    let (event, bytes) = event;
    if let Some(name) = event
        .hook_event_name
        .as_deref()
        .filter(|n| *n != EVENT_NAME)
    {
        // Another event would not understand a PermissionRequest decision and could
        // go ahead; exit 2 blocks (fails closed) for every event that can block.
        return HookResult {
            stdout: None,
            stderr: Some(format!(
                "hitl-telegram claude-hook answers {EVENT_NAME} events only, not {}: \
                 install it under \"{EVENT_NAME}\" in the hooks of settings.json",
                clean(name, 64)
            )),
            exit_code: 2,
        };
    }
    let token = match env(&opts.token_env).filter(|t| !t.trim().is_empty()) {
        Some(t) => t,
        None => {
            return failure(
                opts,
                format!(
                    "the environment variable {} (--token-env) is not set",
                    clean(&opts.token_env, 128)
                ),
            );
        }
    };
    let api = match Api::new(&opts.url, token) {
        Ok(api) => api,
        Err(e) => return failure(opts, e),
    };
    let request = Request::new(opts, &event, &bytes, env);
    let pending: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    tokio::select! {
        outcome = decide(&api, &request, event.tool_use_id.is_some(), opts.timeout_seconds, pending.clone()) => {
            match outcome {
                Ok(record) => verdict(&record, opts.timeout_seconds),
                Err(e) => {
                    withdraw_pending(&api, &pending).await;
                    failure(opts, e)
                }
            }
        }
        signal = terminated() => {
            // Claude Code (or the user's Ctrl-C) stopped us: take the question off
            // Telegram so nobody approves a call that no longer waits.
            let withdrawn = withdraw_pending(&api, &pending).await;
            HookResult {
                stdout: None,
                stderr: Some(format!(
                    "hitl-telegram claude-hook: stopped by {signal}{}",
                    if withdrawn { "; the question on Telegram was withdrawn" } else { "" }
                )),
                exit_code: 1,
            }
        }
    }
}

/// The service could not give a decision: deny, or stay silent with `--fallback ask`.
fn failure(opts: &HookOptions, why: String) -> HookResult {
    match opts.fallback {
        Fallback::Ask => HookResult::leave_to_claude_code(why),
        Fallback::Deny => HookResult::deny(format!(
            "Permission denied: hitl-telegram could not get a decision on Telegram ({why}), \
             so it fails closed."
        )),
    }
}

/// Maps a terminal record to the hook's decision.
fn verdict(record: &Value, requested_timeout: f64) -> HookResult {
    let text = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or("");
    let reason = clean(text("reason"), 500);
    match (text("status"), text("via")) {
        ("confirmed", _) if record.get("allowed") == Some(&Value::Bool(true)) => {
            HookResult::allow()
        }
        ("cancelled", "operator") => {
            HookResult::deny(format!("Permission denied on Telegram: {reason}."))
        }
        ("cancelled", "fail_closed") => {
            let why = reason.strip_prefix("not executed: ").unwrap_or(&reason);
            HookResult::deny(format!(
                "Permission denied: {why}; hitl-telegram fails closed."
            ))
        }
        ("cancelled", "withdrawn") => HookResult::deny(
            "Permission denied: the question on Telegram was withdrawn before anyone answered.",
        ),
        ("timeout", _) => {
            let secs = window_of(record).unwrap_or(requested_timeout);
            HookResult::deny(format!(
                "Permission denied: no answer on Telegram within {}.",
                seconds(secs)
            ))
        }
        (status, _) => HookResult::deny(format!(
            "Permission denied: the request ended as {} ({reason}).",
            clean(status, 32)
        )),
    }
}

/// How long the operator had: `expires_at - created_at`, in seconds.
fn window_of(record: &Value) -> Option<f64> {
    let at = |k: &str| {
        record
            .get(k)
            .and_then(Value::as_str)
            .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
    };
    let secs = (at("expires_at")? - at("created_at")?).as_seconds_f64();
    (secs > 0.0).then_some(secs)
}

/// `120 s`, `0.3 s`.
fn seconds(s: f64) -> String {
    if s.fract() == 0.0 && s < 1e12 {
        format!("{} s", s as u64)
    } else {
        format!("{} s", (s * 1000.0).round() / 1000.0)
    }
}

/// Control characters become spaces; trimmed; at most `max` characters (an ellipsis
/// marks a cut).
fn clean(s: &str, max: usize) -> String {
    let s: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let s = s.trim();
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Like [`clean`], but keeps the end of a long path (its most specific part).
fn clean_tail(s: &str, max: usize) -> String {
    let s = clean(s, usize::MAX);
    let n = s.chars().count();
    if n <= max {
        s
    } else {
        let tail: String = s.chars().skip(n - max.saturating_sub(1)).collect();
        format!("…{tail}")
    }
}

fn last_component(path: &str) -> Option<String> {
    path.trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .map(|s| clean(s, 256))
        .filter(|s| !s.is_empty())
}

/// The `owner_id` for `--owner-from`; `None` leaves it to the service (`anonymous`).
pub fn owner_id(
    from: OwnerFrom,
    event: &HookEvent,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Option<String> {
    let cwd = || event.cwd.as_deref().and_then(last_component);
    let owner = match from {
        OwnerFrom::User => ["USER", "LOGNAME", "USERNAME"]
            .iter()
            .filter_map(|k| env(k))
            .map(|v| clean(&v, 256))
            .find(|v| !v.is_empty())
            .or_else(cwd),
        OwnerFrom::Cwd => cwd(),
        OwnerFrom::Session => event
            .session_id
            .as_deref()
            .map(|s| clean(s, 256))
            .filter(|s| !s.is_empty()),
    };
    owner.filter(|o| !o.is_empty())
}

/// The line shown to the operator under the question.
fn context_line(event: &HookEvent, shortened: bool) -> String {
    let mut parts = vec![format!(
        "Claude Code in {}",
        event
            .cwd
            .as_deref()
            .map(|c| clean_tail(c, 300))
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "an unknown directory".into())
    )];
    if let Some(s) = event.session_id.as_deref().map(|s| clean(s, 100)) {
        parts.push(format!("session {s}"));
    }
    if let Some(m) = event
        .permission_mode
        .as_deref()
        .map(|m| clean(m, 40))
        .filter(|m| !m.is_empty() && m != "default")
    {
        parts.push(format!("mode {m}"));
    }
    if event.agent_id.is_some()
        && let Some(a) = event.agent_type.as_deref().map(|a| clean(a, 60))
    {
        parts.push(format!("subagent {a}"));
    }
    if shortened {
        parts.push("long values shortened, with their SHA-256".into());
    }
    parts.join(" · ")
}

fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The idempotency key of the first attempt. With a `tool_use_id` it names that one
/// tool call; without (the documented `PermissionRequest` input) it is a digest of the
/// whole event, so a rerun of the same hook finds the same request.
pub fn base_key(
    event: &HookEvent,
    raw_event: &[u8],
    owner: Option<&str>,
    route: Option<&str>,
) -> String {
    let owner = owner.unwrap_or("").as_bytes();
    let route = route.unwrap_or("").as_bytes();
    let digest = match &event.tool_use_id {
        Some(id) => sha256_hex(&[
            b"claude-hook/tool-use/v1",
            event.session_id.as_deref().unwrap_or("").as_bytes(),
            id.as_bytes(),
            owner,
            route,
        ]),
        None => sha256_hex(&[b"claude-hook/event/v1", raw_event, owner, route]),
    };
    format!("claude-{}", &digest[..40])
}

/// The key after stepping over an earlier, already decided request `stale_id`:
/// deterministic, so every rerun walks the same chain to the same open request.
fn next_key(key: &str, stale_id: &str) -> String {
    let digest = sha256_hex(&[b"claude-hook/next/v1", key.as_bytes(), stale_id.as_bytes()]);
    format!("claude-{}", &digest[..40])
}

fn random_key() -> String {
    format!(
        "claude-r-{}",
        crate::domain::ids::CallbackToken::generate().as_str()
    )
}

/// `params` for the request: `tool_input` verbatim when the service takes it as it is
/// (a non-object is wrapped as `{"input": ...}`); otherwise a faithful preview with long
/// strings shortened and their SHA-256, or, failing that, a digest and a preview of the
/// whole input. The bool says whether anything was shortened.
pub fn params_for(tool_input: &RawValue) -> (Box<RawValue>, bool) {
    let raw = tool_input.get().trim();
    let whole = if raw.starts_with('{') {
        raw.to_owned()
    } else {
        format!("{{\"input\": {raw}}}")
    };
    if fits(&whole)
        && let Ok(v) = RawValue::from_string(whole)
    {
        return (v, false);
    }
    if let Ok(value) = serde_json::from_str::<Value>(raw) {
        let value = if value.is_object() {
            value
        } else {
            json!({ "input": value })
        };
        let short = shorten(value).to_string();
        if fits(&short)
            && let Ok(v) = RawValue::from_string(short)
        {
            return (v, true);
        }
    }
    let summary = json!({
        "note": "the tool input is too large to show: compare its size and SHA-256",
        "input_bytes": raw.len(),
        "input_sha256": sha256_hex(&[raw.as_bytes()]),
        "preview": clean_keep_lines(raw, PREVIEW_CHARS),
    });
    let text = summary.to_string();
    let v = RawValue::from_string(text).unwrap_or_else(|_| {
        RawValue::from_string("{}".to_owned()).expect("an empty object is JSON")
    });
    (v, true)
}

/// Whether the service takes `params` as they are (its own parser and key limit).
fn fits(params: &str) -> bool {
    params.len() <= PARAMS_BUDGET_BYTES
        && pyjson::parse_object(params)
            .map(|p| p.count_keys() <= MAX_PARAM_KEYS)
            .unwrap_or(false)
}

fn clean_keep_lines(s: &str, max: usize) -> String {
    let mut out: String = s.chars().take(max).collect();
    if s.chars().count() > max {
        out.push('…');
    }
    out
}

/// Every string longer than [`LONG_STRING_CHARS`] becomes its start, its length and its
/// SHA-256.
fn shorten(v: Value) -> Value {
    match v {
        Value::String(s) if s.chars().count() > LONG_STRING_CHARS => {
            let head: String = s.chars().take(KEPT_STRING_CHARS).collect();
            Value::String(format!(
                "{head}… [shortened by hitl-telegram: {} characters in all, sha256 {}]",
                s.chars().count(),
                sha256_hex(&[s.as_bytes()])
            ))
        }
        Value::Array(items) => Value::Array(items.into_iter().map(shorten).collect()),
        Value::Object(map) => {
            Value::Object(map.into_iter().map(|(k, v)| (k, shorten(v))).collect())
        }
        other => other,
    }
}

/// Everything of the create body but the idempotency key.
struct Request {
    tool: String,
    params: Box<RawValue>,
    owner_id: Option<String>,
    context: String,
    timeout_seconds: f64,
    route: Option<String>,
    base_key: String,
}

#[derive(Serialize)]
struct CreateBody<'a> {
    tool: &'a str,
    params: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner_id: Option<&'a str>,
    context: &'a str,
    timeout_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a str>,
    wait: &'static str,
    idempotency_key: &'a str,
}

impl Request {
    fn new(
        opts: &HookOptions,
        event: &HookEvent,
        raw_event: &[u8],
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Request {
        let owner_id = owner_id(opts.owner_from, event, env);
        let (params, shortened) = params_for(&event.tool_input);
        Request {
            tool: event.tool_name.clone(),
            params,
            context: context_line(event, shortened),
            timeout_seconds: opts.timeout_seconds,
            route: opts.route.clone(),
            base_key: base_key(event, raw_event, owner_id.as_deref(), opts.route.as_deref()),
            owner_id,
        }
    }

    fn body(&self, key: &str) -> String {
        serde_json::to_string(&CreateBody {
            tool: &self.tool,
            params: &self.params,
            owner_id: self.owner_id.as_deref(),
            context: &self.context,
            timeout_seconds: self.timeout_seconds,
            route: self.route.as_deref(),
            // The pending record comes back at once; the wait is a series of
            // long-polls, none longer than a minute, so no proxy or client timeout
            // cuts it.
            wait: "suspend",
            idempotency_key: key,
        })
        .unwrap_or_default()
    }
}

fn is_terminal(record: &Value) -> bool {
    !matches!(
        record.get("status").and_then(Value::as_str),
        None | Some("pending")
    )
}

/// Asks and waits for a terminal record.
///
/// The first request uses [`base_key`]. If the answer is still pending, this run
/// re-attached to (or created) the open question and waits for it. If it is already
/// decided, and was decided before this run started, it belongs to an earlier identical
/// call: its decision is not reused, and the next key in the chain ([`next_key`]) asks
/// anew. A decision taken during this run (a window hit, or a retry after the
/// decision) is used. With a `tool_use_id` the key names one tool call, whose decision
/// is always the right one.
async fn decide(
    api: &Api,
    req: &Request,
    per_tool_call: bool,
    timeout_seconds: f64,
    pending: Arc<Mutex<Option<String>>>,
) -> Result<Value, String> {
    let started = Instant::now();
    let started_wall = OffsetDateTime::now_utc();
    let patience = Duration::try_from_secs_f64(timeout_seconds)
        .unwrap_or(Duration::from_secs(3600))
        .min(Duration::from_secs(7 * 24 * 3600))
        + Duration::from_secs(90);
    let deadline = started + patience;
    let mut key = req.base_key.clone();
    let mut hops = 0;
    loop {
        let (record, server_now) = api.create(&req.body(&key)).await?;
        let id = record
            .get("id")
            .and_then(Value::as_str)
            .ok_or("the service's answer has no id")?
            .to_owned();
        if !is_terminal(&record) {
            *lock(&pending) = Some(id.clone());
            let done = api.wait_until_terminal(&id, deadline).await?;
            lock(&pending).take();
            return Ok(done);
        }
        if per_tool_call || decided_during_run(&record, server_now, started, started_wall) {
            return Ok(record);
        }
        hops += 1;
        key = if hops < MAX_HOPS {
            next_key(&key, &id)
        } else {
            random_key()
        };
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether a terminal record was decided after this run started. The service's own
/// clock (its `Date` header) measures the decision's age, so clock skew between this
/// machine and the service does not matter; without the header, the local clock does.
///
/// A decision taken during the run is at most `started.elapsed()` old on the service's
/// clock, and the header's whole seconds only make it look younger, so no slack is
/// needed: a fresh decision is never mistaken for an earlier one, and an earlier one
/// passes for fresh only within the header's one-second resolution.
fn decided_during_run(
    record: &Value,
    server_now: Option<OffsetDateTime>,
    started: Instant,
    started_wall: OffsetDateTime,
) -> bool {
    let Some(decided_at) = record
        .get("decided_at")
        .and_then(Value::as_str)
        .and_then(|s| OffsetDateTime::parse(s, &Rfc3339).ok())
    else {
        return false;
    };
    match server_now {
        Some(now) => {
            let age = now - decided_at;
            age <= started.elapsed()
        }
        None => decided_at >= started_wall - CLOCK_SLACK,
    }
}

/// Withdraws the open question, if any; true when one was withdrawn.
async fn withdraw_pending(api: &Api, pending: &Mutex<Option<String>>) -> bool {
    let id = lock(pending).take();
    match id {
        Some(id) => api.withdraw(&id).await,
        None => false,
    }
}

/// SIGTERM, SIGINT or SIGHUP (Ctrl-C elsewhere); never resolves if none can be watched.
async fn terminated() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) {
            return tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                _ = hup.recv() => "SIGHUP",
            };
        }
    }
    #[cfg(not(unix))]
    {
        if tokio::signal::ctrl_c().await.is_ok() {
            return "Ctrl-C";
        }
    }
    std::future::pending().await
}

/// A failed call: worth retrying (the service unreachable, 5xx, 429), or not.
enum CallError {
    Retry(String),
    Fatal(String),
}

impl CallError {
    fn message(self) -> String {
        match self {
            CallError::Retry(m) | CallError::Fatal(m) => m,
        }
    }
}

/// The service's API, as this agent.
struct Api {
    client: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    fn new(url: &str, token: String) -> Result<Api, String> {
        let base = url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must start with http:// or https://, got '{}'",
                clean(url, 200)
            ));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot set up HTTP: {e}"))?;
        Ok(Api {
            client,
            base,
            token,
        })
    }

    /// POST /v1/confirmations, retried a few times while the service is unreachable or
    /// busy. Returns the record and the service's clock.
    async fn create(&self, body: &str) -> Result<(Value, Option<OffsetDateTime>), String> {
        let url = format!("{}/v1/confirmations", self.base);
        let mut delay = Duration::from_millis(250);
        let mut attempt = 1;
        loop {
            let request = self
                .client
                .post(&url)
                .bearer_auth(&self.token)
                .header("content-type", "application/json")
                .timeout(Duration::from_secs(30))
                .body(body.to_owned());
            match self.call(request).await {
                Ok(answer) => return Ok(answer),
                Err(CallError::Retry(e)) if attempt < 4 => {
                    tracing::warn!(attempt, "{e}; retrying");
                }
                Err(e) => return Err(e.message()),
            }
            tokio::time::sleep(delay).await;
            delay *= 2;
            attempt += 1;
        }
    }

    /// Long-polls the record until it is terminal, riding out a short outage.
    async fn wait_until_terminal(&self, id: &str, deadline: Instant) -> Result<Value, String> {
        let url = format!(
            "{}/v1/confirmations/{id}?wait={LONG_POLL_SECONDS}",
            self.base
        );
        let mut outage_since: Option<Instant> = None;
        loop {
            if Instant::now() >= deadline {
                return Err("the service gave no decision in time".into());
            }
            let request = self
                .client
                .get(&url)
                .bearer_auth(&self.token)
                .timeout(Duration::from_secs(u64::from(LONG_POLL_SECONDS) + 15));
            match self.call(request).await {
                Ok((record, _)) if is_terminal(&record) => return Ok(record),
                Ok(_) => outage_since = None,
                Err(CallError::Retry(e)) => {
                    let since = *outage_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= OUTAGE_PATIENCE {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(CallError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// DELETE /v1/confirmations/{id}; true when the question was withdrawn.
    async fn withdraw(&self, id: &str) -> bool {
        let request = self
            .client
            .delete(format!("{}/v1/confirmations/{id}", self.base))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(5));
        matches!(request.send().await, Ok(r) if r.status().is_success())
    }

    async fn call(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(Value, Option<OffsetDateTime>), CallError> {
        let response = request.send().await.map_err(|e| {
            CallError::Retry(format!(
                "cannot reach the service at {}: {}",
                self.base,
                error_chain(&e)
            ))
        })?;
        let status = response.status();
        let server_now = response
            .headers()
            .get(reqwest::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(http_date);
        let text = response.text().await.map_err(|e| {
            CallError::Retry(format!(
                "the service's answer was cut off: {}",
                error_chain(&e)
            ))
        })?;
        if status.is_success() {
            return match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.get("status").and_then(Value::as_str).is_some() => Ok((v, server_now)),
                _ => Err(CallError::Fatal(format!(
                    "the service answered {status} with something that is not a confirmation record"
                ))),
            };
        }
        let detail = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                let e = v.get("error")?;
                Some(format!(
                    "{}: {}",
                    e.get("code")?.as_str()?,
                    e.get("message")?.as_str()?
                ))
            })
            .unwrap_or_else(|| text.clone());
        let message = format!("the service answered {status}: {}", clean(&detail, 300));
        if status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            Err(CallError::Retry(message))
        } else {
            Err(CallError::Fatal(message))
        }
    }
}

/// An error and its causes, on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// An HTTP `Date` header (IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(s: &str) -> Option<OffsetDateTime> {
    let f = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(s.trim(), &f)
        .ok()
        .map(|t| t.assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(json: &str) -> HookEvent {
        parse_event(json.as_bytes()).expect("event")
    }

    const BASH: &str = r#"{"session_id":"s1","transcript_path":"/t.jsonl","cwd":"/home/alice/billing-api","permission_mode":"default","hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"rm -rf build","timeout":120000},"permission_suggestions":[]}"#;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_documented_event_parses_and_unknown_fields_are_ignored() {
        let e = event(BASH);
        assert_eq!(e.tool_name, "Bash");
        assert_eq!(
            e.tool_input.get(),
            r#"{"command":"rm -rf build","timeout":120000}"#
        );
        assert_eq!(e.cwd.as_deref(), Some("/home/alice/billing-api"));
        assert!(e.tool_use_id.is_none());
    }

    #[test]
    fn garbage_events_are_refused_with_a_reason() {
        for bad in [
            "",
            "  \n",
            "not json",
            "[]",
            "{}",
            r#"{"tool_name": "Bash"}"#,
            r#"{"tool_name": "", "tool_input": {}}"#,
            r#"{"tool_name": 3, "tool_input": {}}"#,
            r#"{"tool_name": "Bash", "tool_name": "Write", "tool_input": {}}"#,
            "{\"tool_name\": \"Bash\", \"tool_input\": {\"c\": \"\\ud800\"}}",
        ] {
            assert!(parse_event(bad.as_bytes()).is_err(), "{bad:?} was accepted");
        }
        assert!(parse_event(&[0xff, 0xfe, b'{']).is_err());
    }

    #[test]
    fn read_event_refuses_more_than_one_mebibyte() {
        let big = vec![b' '; MAX_EVENT_BYTES + 1];
        let err = read_event(&big[..]).unwrap_err();
        assert!(err.contains("larger than 1024 KiB"), "{err}");
        assert_eq!(read_event(&b"{}"[..]).unwrap(), b"{}");
    }

    #[test]
    fn params_are_the_tool_input_verbatim_and_non_objects_are_wrapped() {
        let e = event(BASH);
        let (p, short) = params_for(&e.tool_input);
        assert_eq!(p.get(), r#"{"command":"rm -rf build","timeout":120000}"#);
        assert!(!short);
        let raw = RawValue::from_string("[1, 123456789012345678901234567890]".into()).unwrap();
        let (p, short) = params_for(&raw);
        assert_eq!(p.get(), r#"{"input": [1, 123456789012345678901234567890]}"#);
        assert!(!short);
        let raw = RawValue::from_string("\"ls\"".into()).unwrap();
        assert_eq!(params_for(&raw).0.get(), r#"{"input": "ls"}"#);
    }

    #[test]
    fn oversized_inputs_are_shortened_with_a_digest_and_always_fit() {
        let content = "x".repeat(200_000);
        let raw =
            RawValue::from_string(json!({"file_path": "/a/b.txt", "content": content}).to_string())
                .unwrap();
        let (p, short) = params_for(&raw);
        assert!(short);
        assert!(fits(p.get()));
        let v: Value = serde_json::from_str(p.get()).unwrap();
        assert_eq!(v["file_path"], "/a/b.txt");
        let c = v["content"].as_str().unwrap();
        assert!(c.contains("200000 characters in all"), "{c}");
        assert!(c.contains(&sha256_hex(&[content.as_bytes()])));

        // Too many keys even when every string is short: a summary.
        let many: serde_json::Map<String, Value> =
            (0..5000).map(|i| (format!("k{i}"), json!(i))).collect();
        let raw = RawValue::from_string(Value::Object(many).to_string()).unwrap();
        let (p, short) = params_for(&raw);
        assert!(short);
        assert!(fits(p.get()));
        assert!(p.get().contains("input_sha256"));
    }

    #[test]
    fn owner_comes_from_user_cwd_or_session() {
        let e = event(BASH);
        let env = |k: &str| (k == "USER").then(|| "alice".to_owned());
        assert_eq!(
            owner_id(OwnerFrom::User, &e, &env).as_deref(),
            Some("alice")
        );
        let logname = |k: &str| (k == "LOGNAME").then(|| "bob".to_owned());
        assert_eq!(
            owner_id(OwnerFrom::User, &e, &logname).as_deref(),
            Some("bob")
        );
        // No user variable: the project folder.
        assert_eq!(
            owner_id(OwnerFrom::User, &e, &no_env).as_deref(),
            Some("billing-api")
        );
        assert_eq!(
            owner_id(OwnerFrom::Cwd, &e, &env).as_deref(),
            Some("billing-api")
        );
        assert_eq!(
            owner_id(OwnerFrom::Session, &e, &env).as_deref(),
            Some("s1")
        );
        let odd = event(
            r#"{"cwd": "/srv/a\nb/", "tool_name": "Bash", "tool_input": {}, "session_id": "  "}"#,
        );
        assert_eq!(
            owner_id(OwnerFrom::Cwd, &odd, &no_env).as_deref(),
            Some("a b")
        );
        assert_eq!(owner_id(OwnerFrom::Session, &odd, &no_env), None);
    }

    #[test]
    fn the_context_names_directory_session_and_unusual_modes() {
        let e = event(BASH);
        assert_eq!(
            context_line(&e, false),
            "Claude Code in /home/alice/billing-api · session s1"
        );
        let e = event(
            r#"{"cwd": "/p", "session_id": "s", "permission_mode": "acceptEdits", "agent_id": "a1", "agent_type": "Explore", "tool_name": "Bash", "tool_input": {}}"#,
        );
        assert_eq!(
            context_line(&e, true),
            "Claude Code in /p · session s · mode acceptEdits · subagent Explore · long values shortened, with their SHA-256"
        );
        let long = format!(
            r#"{{"cwd": "/{}", "tool_name": "Bash", "tool_input": {{}}}}"#,
            "d".repeat(5000)
        );
        assert!(context_line(&event(&long), false).chars().count() < 400);
    }

    #[test]
    fn keys_are_stable_for_the_same_event_and_differ_otherwise() {
        let e = event(BASH);
        let k = base_key(&e, BASH.as_bytes(), Some("alice"), None);
        assert!(k.starts_with("claude-") && k.len() <= 128);
        assert_eq!(k, base_key(&e, BASH.as_bytes(), Some("alice"), None));
        assert_ne!(k, base_key(&e, BASH.as_bytes(), Some("bob"), None));
        assert_ne!(k, base_key(&e, BASH.as_bytes(), Some("alice"), Some("ops")));
        let other = BASH.replace("rm -rf build", "rm -rf dist");
        assert_ne!(
            k,
            base_key(&event(&other), other.as_bytes(), Some("alice"), None)
        );
        // With a tool_use_id the key names that call, whatever else the event says.
        let a = r#"{"session_id":"s1","tool_use_id":"toolu_1","tool_name":"Bash","tool_input":{},"permission_mode":"default"}"#;
        let b = r#"{"session_id":"s1","tool_use_id":"toolu_1","tool_name":"Bash","tool_input":{},"permission_mode":"plan"}"#;
        assert_eq!(
            base_key(&event(a), a.as_bytes(), None, None),
            base_key(&event(b), b.as_bytes(), None, None)
        );
        assert_ne!(next_key(&k, "cf_1"), next_key(&k, "cf_2"));
        assert_eq!(next_key(&k, "cf_1"), next_key(&k, "cf_1"));
    }

    fn record(status: &str, via: &str, reason: &str) -> Value {
        json!({"id": "cf_x", "status": status, "via": via, "reason": reason,
               "allowed": status == "confirmed",
               "created_at": "2026-11-30T09:00:00.000Z", "expires_at": "2026-11-30T09:02:00.000Z",
               "decided_at": "2026-11-30T09:01:00.000Z"})
    }

    fn message(r: &HookResult) -> String {
        let v: Value = serde_json::from_str(r.stdout.as_deref().unwrap()).unwrap();
        assert_eq!(
            v["hookSpecificOutput"]["hookEventName"],
            "PermissionRequest"
        );
        assert_eq!(v["hookSpecificOutput"]["decision"]["behavior"], "deny");
        v["hookSpecificOutput"]["decision"]["message"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[test]
    fn outcomes_map_to_decisions() {
        let allow = verdict(&record("confirmed", "operator", "approved by Alice"), 120.0);
        assert_eq!(
            serde_json::from_str::<Value>(allow.stdout.as_deref().unwrap()).unwrap(),
            json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                          "decision": {"behavior": "allow"}}})
        );
        assert_eq!(allow.exit_code, 0);
        assert_eq!(
            message(&verdict(
                &record("cancelled", "operator", "cancelled by Alice (@alice)"),
                120.0
            )),
            "Permission denied on Telegram: cancelled by Alice (@alice)."
        );
        assert_eq!(
            message(&verdict(&record("timeout", "timeout", "x"), 5.0)),
            "Permission denied: no answer on Telegram within 120 s."
        );
        let m = message(&verdict(
            &record(
                "cancelled",
                "fail_closed",
                "not executed: the question could not be delivered to Telegram: Forbidden: bot was blocked by the user",
            ),
            120.0,
        ));
        assert_eq!(
            m,
            "Permission denied: the question could not be delivered to Telegram: Forbidden: bot was blocked by the user; hitl-telegram fails closed."
        );
        assert!(
            message(&verdict(&record("cancelled", "withdrawn", "w"), 1.0)).contains("withdrawn")
        );
        // A confirmed record that does not say allowed is not an approval.
        let mut odd = record("confirmed", "operator", "?");
        odd["allowed"] = json!(false);
        assert!(message(&verdict(&odd, 1.0)).contains("ended as confirmed"));
    }

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(seconds(120.0), "120 s");
        assert_eq!(seconds(0.3), "0.3 s");
        assert_eq!(seconds(1.2345), "1.235 s");
    }

    #[test]
    fn a_decision_older_than_the_run_is_stale_by_the_services_clock() {
        let r = record("confirmed", "operator", "approved");
        let decided = OffsetDateTime::parse("2026-11-30T09:01:00Z", &Rfc3339).unwrap();
        let ago = |s: u64| {
            Instant::now()
                .checked_sub(Duration::from_secs(s))
                .expect("the monotonic clock is older than that")
        };
        // The service says it is 09:01:01: decided a second ago, and the run started
        // five seconds ago, so it was decided during the run.
        let now = decided + Duration::from_secs(1);
        assert!(decided_during_run(&r, Some(now), ago(5), decided));
        // Decided a second ago, but the run started just now: an earlier call's.
        assert!(!decided_during_run(&r, Some(now), Instant::now(), decided));
        // An hour before the service's now: earlier, whatever the local clock says.
        let later = decided + Duration::from_secs(3600);
        assert!(!decided_during_run(&r, Some(later), ago(5), decided));
        // No Date header: the local clock decides, with a little slack for skew.
        assert!(decided_during_run(&r, None, Instant::now(), decided));
        assert!(!decided_during_run(&r, None, Instant::now(), later));
        let mut undated = r.clone();
        undated["decided_at"] = Value::Null;
        assert!(!decided_during_run(&undated, Some(now), ago(5), decided));
    }

    #[test]
    fn http_dates_parse() {
        let t = http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.unix_timestamp(), 784_111_777);
        assert!(http_date("yesterday").is_none());
    }

    #[test]
    fn clean_removes_controls_and_cuts_visibly() {
        assert_eq!(clean(" a\u{0}b\nc ", 10), "a b c");
        assert_eq!(clean("abcdef", 4), "abc…");
        assert_eq!(clean_tail("/very/long/path", 6), "…/path");
        assert_eq!(last_component("/home/alice/proj/"), Some("proj".into()));
        assert_eq!(last_component("C:\\work\\proj"), Some("proj".into()));
        assert_eq!(last_component("/"), None);
    }
}
