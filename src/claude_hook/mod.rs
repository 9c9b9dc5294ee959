//! `claude-hook`: Claude Code's `PermissionRequest` hook, answered on Telegram.
//!
//! This module asks the service as a confirmation (tool = `tool_name`, params =
//! `tool_input`), waits for the operator, and maps the outcome: `confirmed` allows,
//! anything else denies. When the service cannot be asked at all it denies (fail closed),
//! or with `--fallback ask` prints nothing. The tool input is sent whole, byte for byte as
//! Claude Code gave it, so what the approvers see is the call that runs.
//!
//! The parts, in the order a run goes through them: `event` reads what Claude Code
//! sent, `request` turns it into the question (checked against the service's limits
//! before anything is sent), `decide` asks and waits under an idempotency key, and
//! `api` is the service's `/v1` API as this hook calls it. This file holds the
//! command's options, what it prints, and how a record becomes the hook's decision. The
//! protocol, the deny messages and the post-event reports: docs/architecture.md.

mod api;
mod decide;
mod event;
mod ledger;
mod request;
mod run_report;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::domain::text::{self, Layout};

use api::Api;
use decide::{decide, withdraw_pending};
use request::Request;

pub use event::{HookEvent, owner_id, parse_event, read_event};
pub use request::{base_key, params_for};

/// Largest event read from stdin; anything longer is denied unread. Well above what a
/// request to the service may hold ([`MAX_BODY_BYTES`]), so that an event carrying an
/// input that is merely too large is read and denied with its exact size.
///
/// [`MAX_BODY_BYTES`]: crate::domain::limits::MAX_BODY_BYTES
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// How long the operator gets by default (`--timeout`).
pub const DEFAULT_TIMEOUT_SECONDS: f64 = 120.0;
/// The event Claude Code names in `hook_event_name` and expects back in `hookEventName`.
pub const EVENT_NAME: &str = "PermissionRequest";

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
    /// `--state-dir`: where the calls let through wait for their post events
    /// (see `ledger`); the default is read from the environment when `None`.
    pub state_dir: Option<std::path::PathBuf>,
    /// `--report-output`: a successful call's report carries (the start of) the tool's
    /// output as its summary, which the approvers then read in Telegram. Off by default:
    /// a tool's output may hold what should never reach a chat (a `cat .env`).
    pub report_output: bool,
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

/// Runs the hook on `input` (what [`read_event`] returned); `env` looks up environment
/// variables. Never panics on any input; every path ends in one [`HookResult`].
pub async fn run(
    opts: &HookOptions,
    input: Result<Vec<u8>, String>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
    let (event, bytes) = match read(input) {
        Ok(e) => e,
        Err(result) => return result,
    };
    if event
        .hook_event_name
        .as_deref()
        .is_some_and(run_report::is_post_event)
    {
        return run_report::report(opts, &event, env).await;
    }
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
    ask(opts, &event, &request, env).await
}

/// The event parsed, with its bytes; or what to answer when it does not parse.
fn read(input: Result<Vec<u8>, String>) -> Result<(HookEvent, Vec<u8>), HookResult> {
    let post = input.as_deref().is_ok_and(run_report::names_a_post_event);
    match input.and_then(|bytes| parse_event(&bytes).map(|e| (e, bytes))) {
        Ok(e) => Ok(e),
        // A post event comes after the call ran: a deny would mean nothing, and it must
        // not block Claude Code whatever it holds.
        Err(e) if post => Err(HookResult {
            stdout: None,
            stderr: Some(format!("hitl-telegram claude-hook: {e}")),
            exit_code: 0,
        }),
        Err(e) => Err(HookResult::deny(format!(
            "Permission denied: hitl-telegram could not read the hook event ({e})."
        ))),
    }
}

/// Asks the service and waits for the decision, withdrawing the question if the hook is
/// stopped meanwhile.
async fn ask(
    opts: &HookOptions,
    event: &HookEvent,
    request: &Request,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
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
        outcome = decide(&api, request, event.tool_use_id.is_some(), opts.timeout_seconds, pending.clone()) => {
            match outcome {
                Ok(record) => {
                    let mut result = verdict(&record, opts.timeout_seconds);
                    if allows(&record) {
                        result.stderr = remember(opts, event, &record, env);
                    }
                    result
                }
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

/// Whether the record lets the call run.
fn allows(record: &Value) -> bool {
    record.get("status").and_then(Value::as_str) == Some("confirmed")
        && record.get("allowed") == Some(&Value::Bool(true))
}

/// Notes the confirmed call, so that its post event can report what became of it;
/// why not, for stderr, when it cannot be noted (the call still runs: a report is
/// worth less than the work the approver let through).
fn remember(
    opts: &HookOptions,
    event: &HookEvent,
    record: &Value,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Option<String> {
    let id = record.get("id").and_then(Value::as_str).unwrap_or_default();
    let why = match ledger::state_dir(opts.state_dir.as_deref(), env) {
        Some(dir) => ledger::note(&dir, event, id).err()?,
        None => "no --state-dir, XDG_STATE_HOME or HOME to note it in".to_owned(),
    };
    Some(format!(
        "hitl-telegram claude-hook: what becomes of request {id} will not be reported: {why}"
    ))
}

/// Maps a terminal record to the hook's decision.
fn verdict(record: &Value, requested_timeout: f64) -> HookResult {
    let text = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or("");
    let reason = clean(text("reason"), 500);
    match (text("status"), text("via")) {
        ("confirmed", _) if allows(record) => HookResult::allow(),
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
        // A `deny` rule of the service: nobody was asked, and the rule says why.
        ("cancelled", "rule") => HookResult::deny(format!(
            "Permission denied without asking anyone: {reason}. The call was not executed; do not retry it as it is."
        )),
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
/// about: see [`clip`](event::clip).
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
