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
//! time, or that the question could not be delivered. An operator's deny reason is
//! quoted in it as their words, a JSON string with invisible characters escaped
//! ([`text::their_words`]), so Claude reads it as data, not as an instruction. When the
//! service cannot be asked at all it denies (fail closed), or with `--fallback ask`
//! prints nothing.
//!
//! The tool input is sent whole, byte for byte as Claude Code gave it, and nothing in
//! it is shortened or rewritten here: the service shows every key, cuts a long value
//! visibly (its length and a hash) and then attaches the whole input, and shows
//! invisible characters as escapes. What the approvers see is therefore the call that
//! runs, never a head whose tail (`; rm -rf ...`) was dropped. An input too large for
//! one request to the service is denied before anything is posted, saying its size
//! and the limit, whatever `--fallback` says.
//!
//! Never approved twice by accident: a retried hook finds its request again through an
//! idempotency key derived from the event, but a decision taken *before* this run
//! started is never reused for a later identical call in the same session; that call is
//! asked anew (see [`decide`]).

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::client::{
    Failure, Kind, NewConfirmation, OUTAGE_PATIENCE, OUTAGE_RETRY, Outage, Reply, Retry, Retrying,
    V1Client, is_terminal,
};
use crate::domain::limits::{MAX_BODY_BYTES, MAX_LONG_POLL_SECONDS, MAX_PARAM_KEYS};
use crate::domain::python;
use crate::domain::text::{self, Layout};

/// Largest event read from stdin; anything longer is denied unread. Well above what a
/// request to the service may hold ([`MAX_BODY_BYTES`]), so that an event carrying an
/// input that is merely too large is read and denied with its exact size.
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// How long the operator gets by default (`--timeout`).
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 120.0;
/// The event Claude Code names in `hook_event_name` and expects back in `hookEventName`.
pub const EVENT_NAME: &str = "PermissionRequest";

/// Longest long-poll the service allows.
const LONG_POLL_SECONDS: u32 = MAX_LONG_POLL_SECONDS as u32;
/// How many earlier, already decided identical requests a run steps over before it
/// gives up re-attaching and asks under a fresh random key.
const MAX_HOPS: usize = 16;
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
            "the event on stdin is larger than {} KiB, far over the {} KiB one request \
             to the service may hold",
            MAX_EVENT_BYTES / 1024,
            MAX_BODY_BYTES / 1024
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
    // Before anything else can fail: an input the service cannot take whole is denied
    // the same way whatever the environment or `--fallback` say, since no retry and no
    // other prompt would make it fit, and sending it shortened would ask the approvers
    // about less than what runs.
    let request = match Request::new(opts, &event, &bytes, env) {
        Ok(r) => r,
        Err(why) => return HookResult::deny(why),
    };
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
            let by = record
                .get("decided_by")
                .and_then(|b| b.get("name"))
                .and_then(Value::as_str)
                .map(|n| clean(n, 64));
            match (record.get("denial_reason").and_then(Value::as_str), by) {
                // Their words as data: quoted as a JSON string, with every invisible
                // character as the escape the operator saw, never a sentence of ours.
                (Some(why), Some(by)) => HookResult::deny(format!(
                    "Permission denied on Telegram by {by}; {}. The call was not executed; do not retry it as it is.",
                    text::their_words(&text::visible_within(why, Layout::Line, 600))
                )),
                _ => HookResult::deny(format!(
                    "Permission denied on Telegram: {}. The call was not executed; do not retry it as it is.",
                    reason
                        .strip_suffix(" (not executed; do not retry this call as it is)")
                        .unwrap_or(&reason)
                )),
            }
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

/// For what the hook itself writes (Claude Code's deny message, stderr) and for the
/// owner id: control characters become spaces, so a reason or name from elsewhere
/// cannot break the one line of JSON or the terminal, and the service does not refuse
/// the owner (it takes no control characters in an identifier); trimmed; at most `max`
/// characters (an ellipsis marks a cut). Never applied to what the approvers are asked
/// about: see [`clip`].
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

/// At most `max` characters, an ellipsis marking the cut, and every character kept as
/// it is: for the context line the approvers read. The service shows invisible
/// characters (controls, bidi overrides) as visible escapes, which it can only do if
/// they reach it; a newline turned into a space here would show a directory that is
/// not the one Claude Code runs in. The two exceptions are NUL and ESC, which the
/// service refuses in free text (they act on the logs and terminals that print it):
/// they are written as the escapes it shows for the others (`\x00`, `\x1b`), so the
/// approvers still see them and a directory name cannot make every call fail.
fn clip(s: &str, max: usize) -> String {
    let s = nul_and_esc_escaped(s);
    if s.chars().count() <= max {
        s
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Like [`clip`], but keeps the end of a long path (its most specific part).
fn clip_tail(s: &str, max: usize) -> String {
    let s = nul_and_esc_escaped(s);
    let n = s.chars().count();
    if n <= max {
        s
    } else {
        let tail: String = s.chars().skip(n - max.saturating_sub(1)).collect();
        format!("…{tail}")
    }
}

/// `s` with NUL and ESC written as `\x00` and `\x1b`, everything else as it is.
fn nul_and_esc_escaped(s: &str) -> String {
    s.replace('\0', "\\x00").replace('\u{1b}', "\\x1b")
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

/// The line shown to the operator under the question. Each part is bounded (so the
/// line stays well under the service's 2048 characters for `context`) but its
/// characters are Claude Code's own (see [`clip`]).
fn context_line(event: &HookEvent) -> String {
    let present = |s: &&str| !s.trim().is_empty();
    let mut parts = vec![format!(
        "Claude Code in {}",
        event
            .cwd
            .as_deref()
            .filter(present)
            .map(|c| clip_tail(c, 300))
            .unwrap_or_else(|| "an unknown directory".into())
    )];
    if let Some(s) = event.session_id.as_deref().filter(present) {
        parts.push(format!("session {}", clip(s, 100)));
    }
    if let Some(m) = event
        .permission_mode
        .as_deref()
        .filter(|m| present(m) && *m != "default")
    {
        parts.push(format!("mode {}", clip(m, 40)));
    }
    if event.agent_id.is_some()
        && let Some(a) = event.agent_type.as_deref().filter(present)
    {
        parts.push(format!("subagent {}", clip(a, 60)));
    }
    parts.join(" · ")
}

/// The briefing, the line the approvers read above the parameters. It names the tool
/// and repeats no value of the input: the service cuts a long briefing to its head, so
/// a briefing that quoted the command would show a long command's head alone, as if
/// it were all of it. The parameters block is the one place the call is shown, every
/// key visible and every cut marked. (A template, so braces in the tool's name are
/// doubled to stay literal. An input with a key named `tool` or `params` makes the
/// service fall back to its own `<tool> with: k=v` briefing, as Python's `str.format`
/// would; nothing here can change that without changing the input.)
fn briefing_template(tool: &str) -> String {
    let tool = tool.replace('{', "{{").replace('}', "}}");
    format!("Claude Code asks to use {tool} with the parameters below.")
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

/// `params` for the request: `tool_input` exactly as Claude Code wrote it, byte for
/// byte (key order, number spelling and escapes included), so what the approvers see
/// and what `args_hash` covers is the call that runs. A non-object, which the API does
/// not take as `params`, is wrapped as `{"input": ...}`, its text unchanged.
pub fn params_for(tool_input: &RawValue) -> Result<Box<RawValue>, String> {
    let raw = tool_input.get().trim();
    let whole = if raw.starts_with('{') {
        raw.to_owned()
    } else {
        format!("{{\"input\": {raw}}}")
    };
    RawValue::from_string(whole).map_err(|e| format!("the tool input is not valid JSON: {e}"))
}

/// Everything of the create body but the idempotency key.
struct Request {
    tool: String,
    params: Box<RawValue>,
    owner_id: Option<String>,
    template: String,
    context: String,
    timeout_seconds: f64,
    route: Option<String>,
    base_key: String,
}

impl Request {
    /// The request for `event`, or the deny message when the service could not take
    /// its input whole.
    ///
    /// Checked here, before anything is sent, against the service's own limits (the
    /// body size and the key count, with its own parser), so Claude Code is told the
    /// size and the limit rather than a bare 413, and so the question is never posted
    /// shortened: an approval of a head would run the tail unseen.
    fn new(
        opts: &HookOptions,
        event: &HookEvent,
        raw_event: &[u8],
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Request, String> {
        let tool_name = clean(&event.tool_name, 128);
        let params = params_for(&event.tool_input).map_err(|e| {
            format!("Permission denied: hitl-telegram cannot send this {tool_name} call for approval ({e}).")
        })?;
        let owner_id = owner_id(opts.owner_from, event, env);
        let request = Request {
            tool: event.tool_name.clone(),
            params,
            template: briefing_template(&event.tool_name),
            context: context_line(event),
            timeout_seconds: opts.timeout_seconds,
            route: opts.route.clone(),
            base_key: base_key(event, raw_event, owner_id.as_deref(), opts.route.as_deref()),
            owner_id,
        };
        // Every later key (`next_key`, `random_key`) is no longer than the first, so
        // this is the largest body the run sends.
        let body_bytes = request.body(&request.base_key).len();
        if body_bytes > MAX_BODY_BYTES {
            return Err(format!(
                "Permission denied: this {tool_name} call is too large to ask about on \
                 Telegram: its input is {} bytes, and the request carrying it would be \
                 {body_bytes} bytes, over the {MAX_BODY_BYTES} bytes ({} KiB) the \
                 hitl-telegram service takes. The input is never shortened for approval, \
                 so nothing was asked. Split the work into smaller calls.",
                event.tool_input.get().len(),
                MAX_BODY_BYTES / 1024
            ));
        }
        let keys = python::json::parse_object(request.params.get())
            .map_err(|e| {
                format!(
                    "Permission denied: the hitl-telegram service cannot take this \
                     {tool_name} call's input as it is ({}), so nothing was asked.",
                    clean(&e.to_string(), 300)
                )
            })?
            .count_keys();
        if keys > MAX_PARAM_KEYS {
            return Err(format!(
                "Permission denied: this {tool_name} call's input has {keys} keys, more \
                 than the {MAX_PARAM_KEYS} the hitl-telegram service takes, so it cannot \
                 be shown whole on Telegram and nothing was asked. Split the work into \
                 smaller calls."
            ));
        }
        Ok(request)
    }

    fn body(&self, key: &str) -> String {
        NewConfirmation {
            tool: &self.tool,
            params: &self.params,
            owner_id: self.owner_id.as_deref(),
            template: Some(&self.template),
            context: Some(&self.context),
            timeout_seconds: Some(self.timeout_seconds),
            route: self.route.as_deref(),
            window_seconds: None,
            wait: "suspend",
            idempotency_key: key,
        }
        .to_json()
    }
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

/// The statuses worth another attempt: the service busy or failing.
fn worth_retrying(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Creating a question: four attempts in all, a quarter of a second apart and then
/// twice as long each time, while the service cannot be reached or is busy.
const CREATE_RETRY: Retry = Retry {
    attempts: 4,
    delay: Duration::from_millis(250),
    doubling: true,
    retry_status: worth_retrying,
    busy_waits: false,
    retry_failure: |_| true,
};

/// The service's API, as this agent.
struct Api {
    client: V1Client,
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
        let client = V1Client::new(&base, token.into(), None)
            .map_err(|e| format!("cannot set up HTTP: {e}"))?;
        Ok(Api { client })
    }

    /// POST /v1/confirmations, retried a few times while the service is unreachable or
    /// busy. Returns the record and the service's clock.
    async fn create(&self, body: &str) -> Result<(Value, Option<OffsetDateTime>), String> {
        let mut attempt = 0;
        let answer = self
            .client
            .create(
                body,
                Some(Duration::from_secs(30)),
                &CREATE_RETRY,
                &mut |retrying| {
                    attempt += 1;
                    let e = match retrying {
                        Retrying::Status(reply) => self.status_error(reply),
                        Retrying::Failed(failure) => self.failure(failure),
                        Retrying::Busy(_) => return,
                    };
                    tracing::warn!(attempt, "{e}; retrying");
                },
            )
            .await;
        self.record(answer).map_err(CallError::message)
    }

    /// Long-polls the record until it is terminal, riding out a short outage.
    async fn wait_until_terminal(&self, id: &str, deadline: Instant) -> Result<Value, String> {
        let mut outage = Outage::new(OUTAGE_PATIENCE);
        loop {
            if Instant::now() >= deadline {
                return Err("the service gave no decision in time".into());
            }
            let answer = self
                .client
                .poll(
                    Kind::Confirmation,
                    id,
                    LONG_POLL_SECONDS.into(),
                    Some(Duration::from_secs(u64::from(LONG_POLL_SECONDS) + 15)),
                    &Retry::ONCE,
                    &mut |_| {},
                )
                .await;
            match self.record(answer) {
                Ok((record, _)) if is_terminal(&record) => return Ok(record),
                Ok(_) => outage.over(),
                Err(CallError::Retry(e)) => {
                    if !outage.bearable() {
                        return Err(e);
                    }
                    tokio::time::sleep(OUTAGE_RETRY).await;
                }
                Err(CallError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// DELETE /v1/confirmations/{id}; true when the question was withdrawn.
    async fn withdraw(&self, id: &str) -> bool {
        matches!(
            self.client
                .withdraw(Kind::Confirmation, id, Some(Duration::from_secs(5)))
                .await,
            Ok(r) if r.status.is_success()
        )
    }

    /// The record and the service's clock in an answer, or why there is none.
    fn record(
        &self,
        answer: Result<Reply, Failure>,
    ) -> Result<(Value, Option<OffsetDateTime>), CallError> {
        let reply = answer.map_err(|f| CallError::Retry(self.failure(&f)))?;
        let status = reply.status;
        if status.is_success() {
            return match reply.json() {
                Ok(v) if v.get("status").and_then(Value::as_str).is_some() => Ok((v, reply.date)),
                _ => Err(CallError::Fatal(format!(
                    "the service answered {status} with something that is not a confirmation record"
                ))),
            };
        }
        let message = self.status_error(&reply);
        if worth_retrying(status) {
            Err(CallError::Retry(message))
        } else {
            Err(CallError::Fatal(message))
        }
    }

    fn status_error(&self, reply: &Reply) -> String {
        format!(
            "the service answered {}: {}",
            reply.status,
            clean(&reply.error_detail(), 300)
        )
    }

    fn failure(&self, failure: &Failure) -> String {
        match failure {
            Failure::Unreachable(e) => format!(
                "cannot reach the service at {}: {}",
                self.client.base(),
                crate::telemetry::causes(e)
            ),
            Failure::CutOff(_, e) => format!(
                "the service's answer was cut off: {}",
                crate::telemetry::causes(e)
            ),
        }
    }
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
        let p = params_for(&e.tool_input).unwrap();
        assert_eq!(p.get(), r#"{"command":"rm -rf build","timeout":120000}"#);
        let raw = RawValue::from_string("[1, 123456789012345678901234567890]".into()).unwrap();
        assert_eq!(
            params_for(&raw).unwrap().get(),
            r#"{"input": [1, 123456789012345678901234567890]}"#
        );
        let raw = RawValue::from_string("\"ls\"".into()).unwrap();
        assert_eq!(params_for(&raw).unwrap().get(), r#"{"input": "ls"}"#);
        // Nothing is normalised: spacing, key order, escapes, a bidi override, a
        // newline and a number's spelling reach the service as Claude Code wrote them.
        let odd = "{ \"z\" : 1.50, \"command\": \"cat a\u{202e}txt.sh\\n\\u0007echo \\u00e9\" }";
        let raw = RawValue::from_string(odd.into()).unwrap();
        assert_eq!(params_for(&raw).unwrap().get(), odd);
    }

    fn options() -> HookOptions {
        HookOptions {
            url: "http://127.0.0.1:9".into(),
            token_env: "T".into(),
            route: None,
            timeout_seconds: 120.0,
            fallback: Fallback::Ask,
            owner_from: OwnerFrom::User,
        }
    }

    /// A Write event whose content is `n` ASCII characters.
    fn write_event(n: usize) -> String {
        json!({"session_id": "s1", "cwd": "/p", "hook_event_name": "PermissionRequest",
               "tool_name": "Write",
               "tool_input": {"file_path": "/p/a.txt", "content": "x".repeat(n)}})
        .to_string()
    }

    fn request_for(json: &str) -> Result<Request, String> {
        Request::new(&options(), &event(json), json.as_bytes(), &no_env)
    }

    #[test]
    fn an_input_is_sent_whole_up_to_the_services_body_limit_and_denied_past_it() {
        // Find the content length whose request body is exactly the limit.
        let probe = request_for(&write_event(1000)).unwrap();
        let overhead = probe.body(&probe.base_key).len() - 1000;
        let at_limit = MAX_BODY_BYTES - overhead;
        let fits = request_for(&write_event(at_limit)).expect("a body of exactly 64 KiB");
        assert_eq!(fits.body(&fits.base_key).len(), MAX_BODY_BYTES);
        let v: Value = serde_json::from_str(fits.params.get()).unwrap();
        assert_eq!(v["content"].as_str().unwrap().len(), at_limit);

        let over = write_event(at_limit + 1);
        let message = request_for(&over).err().expect("one byte over is denied");
        let input_bytes = event(&over).tool_input.get().len();
        assert!(message.starts_with("Permission denied: this Write call is too large"));
        assert!(
            message.contains(&format!("its input is {input_bytes} bytes"))
                && message.contains(&format!("would be {} bytes", MAX_BODY_BYTES + 1))
                && message.contains("over the 65536 bytes (64 KiB)")
                && message.contains("never shortened"),
            "{message}"
        );
    }

    #[test]
    fn every_later_key_is_no_longer_than_the_first() {
        // The size check measures the body with the first key; a longer later key
        // could push a body that passed it over the limit.
        let e = event(BASH);
        let first = base_key(&e, BASH.as_bytes(), None, None);
        assert!(next_key(&first, "cf_1").len() <= first.len());
        assert!(random_key().len() <= first.len());
    }

    #[test]
    fn inputs_the_service_would_refuse_are_denied_naming_why() {
        // Too many keys even when every value is short.
        let many: serde_json::Map<String, Value> =
            (0..1001).map(|i| (format!("k{i}"), json!(i))).collect();
        let e = json!({"tool_name": "mcp__x__y", "tool_input": many}).to_string();
        let message = request_for(&e).err().expect("too many keys");
        assert!(
            message.contains("has 1001 keys, more than the 1000"),
            "{message}"
        );
        // Deeper than the service's parser goes (serde_json alone would take it).
        let deep = format!(
            "{{\"tool_name\": \"Bash\", \"tool_input\": {{\"a\": {}{}}}}}",
            "[".repeat(70),
            "]".repeat(70)
        );
        let message = request_for(&deep).err().expect("too deep");
        assert!(
            message.contains("nesting deeper than 64 levels"),
            "{message}"
        );
        // At the key limit: asked.
        let ok: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
        assert!(request_for(&json!({"tool_name": "t", "tool_input": ok}).to_string()).is_ok());
    }

    #[test]
    fn the_briefing_names_the_tool_and_repeats_no_value() {
        let long = format!("{}; rm -rf /tmp/x", "echo a && ".repeat(600));
        let e = json!({"tool_name": "Bash", "tool_input": {"command": long}}).to_string();
        let r = request_for(&e).unwrap();
        let params = python::json::parse_object(r.params.get()).unwrap();
        let shown = crate::domain::briefing::render(Some(&r.template), "Bash", &params);
        assert_eq!(shown.fallback_reason, None);
        assert_eq!(
            shown.text,
            "Claude Code asks to use Bash with the parameters below."
        );
        // Braces in a tool's name stay literal.
        let t = briefing_template("mcp__a{b}__c{{");
        let shown = crate::domain::briefing::render(Some(&t), "mcp__a{b}__c{{", &params);
        assert_eq!(
            shown.text,
            "Claude Code asks to use mcp__a{b}__c{{ with the parameters below."
        );
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
            context_line(&e),
            "Claude Code in /home/alice/billing-api · session s1"
        );
        let e = event(
            r#"{"cwd": "/p", "session_id": "s", "permission_mode": "acceptEdits", "agent_id": "a1", "agent_type": "Explore", "tool_name": "Bash", "tool_input": {}}"#,
        );
        assert_eq!(
            context_line(&e),
            "Claude Code in /p · session s · mode acceptEdits · subagent Explore"
        );
        let long = format!(
            r#"{{"cwd": "/{}x", "tool_name": "Bash", "tool_input": {{}}}}"#,
            "d".repeat(5000)
        );
        let line = context_line(&event(&long));
        assert!(line.chars().count() < 400 && line.ends_with("dx"), "{line}");
        // The directory's own characters, for the service to show as escapes: not a
        // space where Claude Code has a newline, nor a stripped bidi override.
        let odd = event(
            r#"{"cwd": "/srv/a\nb\u202e/", "session_id": " ", "tool_name": "Bash", "tool_input": {}}"#,
        );
        assert_eq!(context_line(&odd), "Claude Code in /srv/a\nb\u{202e}/");
    }

    #[test]
    fn keys_are_stable_for_the_same_event_and_differ_otherwise() {
        let e = event(BASH);
        let k = base_key(&e, BASH.as_bytes(), Some("alice"), None);
        assert!(k.starts_with("claude-") && k.len() <= 128);
        // Pinned: a rerun by a newer hook must find the question an older one posted,
        // so the key's derivation does not change with how the input is sent.
        assert_eq!(k, "claude-5b52464ed8ff694357f1a81f885efc191a84713d");
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
            "Permission denied on Telegram: cancelled by Alice (@alice). The call was not executed; do not retry it as it is."
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
    fn clean_removes_controls_clip_keeps_them_and_both_cut_visibly() {
        assert_eq!(clean(" a\u{0}b\nc ", 10), "a b c");
        assert_eq!(clean("abcdef", 4), "abc…");
        assert_eq!(clip_tail("/very/long/path", 6), "…/path");
        assert_eq!(clip(" a\u{7}b\nc ", 10), " a\u{7}b\nc ");
        assert_eq!(clip("abcdef", 4), "abc…");
        assert_eq!(clip("a\u{1b}[2J\u{0}b", 20), "a\\x1b[2J\\x00b");
        assert_eq!(clip_tail("/p/\u{1b}", 20), "/p/\\x1b");
        assert_eq!(last_component("/home/alice/proj/"), Some("proj".into()));
        assert_eq!(last_component("C:\\work\\proj"), Some("proj".into()));
        assert_eq!(last_component("/"), None);
    }
}
