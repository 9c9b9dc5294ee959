//! `hook --for claude|codex|cursor|gemini`: a coding agent's tool-call hook, answered on
//! Telegram (`claude-hook` is `hook --for claude`, kept for the settings that name it).
//!
//! The host runs the hook before a tool call with the call on stdin. This module asks
//! the service as a confirmation (tool = the host's tool name, params = its tool input),
//! waits for the approvers, and maps the outcome: `confirmed` allows, anything else
//! denies, each in the host's own words. When the service cannot be asked at all it
//! denies (fail closed), or with `--fallback ask` leaves it to the host's own prompt
//! where the event has one. The tool input is sent whole, byte for byte as the host
//! gave it, so what the approvers see is the call that runs. After the call, the same
//! command reports what became of it from the host's after event.
//!
//! The parts, in the order a run goes through them: `host` and `hosts` read what the
//! host sent and write its answer, `event` is the event every host's is read into,
//! `request` turns it into the question (checked against the service's limits before
//! anything is sent), `decide` asks and waits under an idempotency key, `api` is the
//! service's `/v1` API as this hook calls it, and `ledger` and `run_report` carry a
//! call's outcome from its after event. `install` writes the hook into a host's
//! settings. This file holds the command's options, the time limits, and how a record
//! becomes the hook's decision. The protocol, the deny messages and the after-event
//! reports: docs/hooks.md.

mod api;
mod decide;
mod event;
mod host;
mod hosts;
pub mod install;
mod ledger;
mod request;
mod run_report;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::domain::text::{self, Layout};

use api::Api;
use decide::{decide, withdraw_pending};
use host::{Answer, answer_margin};
use request::Request;

pub use event::{HookEvent, Ran, Stage, owner_id, read_event};
pub use host::Host;
pub use request::{base_key, params_for};

/// Largest event read from stdin; anything longer is denied unread. Well above what a
/// request to the service may hold ([`MAX_BODY_BYTES`]), so that an event carrying an
/// input that is merely too large is read and denied with its exact size.
///
/// [`MAX_BODY_BYTES`]: crate::domain::limits::MAX_BODY_BYTES
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// What to do when the service cannot give a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fallback {
    /// Deny the tool call (fail closed), saying why.
    Deny,
    /// Leave it to the host's own prompt, where the event has one (Claude Code's and
    /// Codex's `PermissionRequest`, Cursor's `ask`, Gemini CLI's `ask`); deny elsewhere.
    Ask,
}

/// Where the request's `owner_id` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OwnerFrom {
    /// The login name running the host ($USER, $LOGNAME or $USERNAME); the working
    /// directory's last component when none is set.
    User,
    /// The last component of the session's working directory (the project's folder).
    Cwd,
    /// The host's session id (Cursor's conversation id).
    Session,
}

/// The command line of `hook` (and of `claude-hook`, which is `hook --for claude`).
#[derive(Debug, Clone)]
pub struct HookOptions {
    /// The host whose events come on stdin (`--for`).
    pub host: Host,
    pub url: String,
    /// Name of the environment variable holding the agent's bearer token.
    pub token_env: String,
    pub route: Option<String>,
    /// How long the approvers get (`--timeout`); `None` for the host's default.
    pub timeout_seconds: Option<f64>,
    /// How long the host lets the hook run (`--host-timeout`); `None` for the host's
    /// documented default. The hook answers a few seconds before it.
    pub host_timeout_seconds: Option<f64>,
    pub fallback: Fallback,
    pub owner_from: OwnerFrom,
    /// `--state-dir`: where the calls let through wait for their after events
    /// (see `ledger`); the default is read from the environment when `None`.
    pub state_dir: Option<std::path::PathBuf>,
    /// `--report-output`: a successful call's report carries (the start of) the tool's
    /// output as its summary, which the approvers then read in Telegram. Off by default:
    /// a tool's output may hold what should never reach a chat (a `cat .env`).
    pub report_output: bool,
    /// `--ignore-unknown-fields`: read a before event with fields its host does not
    /// document instead of denying it.
    pub ignore_unknown_fields: bool,
}

impl HookOptions {
    /// How long the host lets the hook run, in seconds.
    fn host_timeout(&self) -> f64 {
        self.host_timeout_seconds
            .unwrap_or_else(|| self.host.default_host_timeout_seconds())
    }

    /// How long the hook waits at most, from its start: the host's limit less a margin.
    fn answer_within(&self) -> f64 {
        let limit = self.host_timeout();
        limit - answer_margin(limit)
    }

    /// How long the approvers get: `--timeout`, but never so long that the host would
    /// stop the hook before the question ends (three seconds are kept for reading the
    /// timeout back). `Err` when the two leave no time to ask at all.
    pub fn question_timeout(&self) -> Result<f64, String> {
        let wanted = self
            .timeout_seconds
            .unwrap_or_else(|| self.host.default_timeout_seconds());
        let room = self.answer_within() - 3.0;
        if wanted.is_nan() || wanted <= 0.0 || room < 1.0 {
            return Err(format!(
                "Permission denied: hitl-telegram has no time to ask: --timeout {} with \
                 --host-timeout {} (the hook must answer {} before {} stops it).",
                seconds(wanted),
                seconds(self.host_timeout()),
                seconds(answer_margin(self.host_timeout())),
                self.host.display(),
            ));
        }
        Ok(wanted.min(room))
    }
}

/// What the process prints and how it exits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookResult {
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub exit_code: u8,
}

impl HookResult {
    /// One JSON answer on stdout, exit 0.
    fn json(answer: Value) -> Self {
        HookResult {
            stdout: Some(answer.to_string()),
            stderr: None,
            exit_code: 0,
        }
    }

    /// Exit 2 with `why` on stderr: every host reads it as a block (Claude Code,
    /// Codex, Cursor and Gemini CLI alike), where any other non-zero exit lets the call
    /// run on some of them.
    fn block(why: String) -> Self {
        HookResult {
            stdout: None,
            stderr: Some(format!("hitl-telegram hook: {why}")),
            exit_code: 2,
        }
    }

    /// Exit 0, nothing on stdout; `why`, if any, on stderr.
    fn quiet(why: Option<String>) -> Self {
        HookResult {
            stdout: None,
            stderr: why.map(|w| format!("hitl-telegram hook: {w}")),
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
    let host = opts.host;
    let bytes = match input {
        Ok(bytes) => bytes,
        Err(e) => {
            return host.unreadable(format!(
                "Permission denied: hitl-telegram could not read the hook event ({e})."
            ));
        }
    };
    let name = match hosts::event_name(&bytes) {
        Some(name) => name,
        // Claude Code's events always name themselves, but the hook has always read
        // one that does not as the event it is installed for.
        None if host == Host::Claude => hosts::claude::PERMISSION_REQUEST.to_owned(),
        None => {
            let why = match serde_json::from_slice::<Value>(&bytes) {
                Ok(_) => "the event has no hook_event_name".to_owned(),
                Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => "stdin is empty".to_owned(),
                Err(e) => format!("stdin is not a {} hook event in JSON: {e}", host.display()),
            };
            return host.unreadable(format!(
                "Permission denied: hitl-telegram could not read the hook event ({why})."
            ));
        }
    };
    if host.after_events().contains(&name.as_str()) {
        // After the call ran: nothing to block, and some hosts read a block here as
        // "hide the result from the model". Whatever happens, exit 0.
        let mut result = match host.parse(&name, &bytes, false) {
            Ok(event) => run_report::report(opts, &event, env).await,
            Err(e) => HookResult::quiet(Some(e)),
        };
        result.stdout = host.after_stdout();
        return result;
    }
    if !host.before_events().contains(&name.as_str()) {
        // Another event would not understand this hook's answer and could go ahead;
        // exit 2 blocks every event that can block.
        return HookResult::block(format!(
            "hook --for {} answers {} only, not {}: install it under those events of {}'s \
             hook settings (hitl-telegram hook install --for {} does)",
            host.flag(),
            host.before_events()
                .iter()
                .chain(host.after_events())
                .copied()
                .collect::<Vec<_>>()
                .join(", "),
            clean(&name, 64),
            host.display(),
            host.flag(),
        ));
    }
    let event = match host.parse(&name, &bytes, !opts.ignore_unknown_fields) {
        Ok(event) => event,
        Err(e) => {
            return host.answer(
                &name,
                Answer::Deny(format!(
                    "Permission denied: hitl-telegram could not read the hook event ({e})."
                )),
            );
        }
    };
    // Before anything else can fail: an input the service cannot take whole is denied
    // the same way whatever the environment or `--fallback` say, since no retry and no
    // other prompt would make it fit, and sending it shortened would ask the approvers
    // about less than what runs.
    let request = match opts
        .question_timeout()
        .and_then(|timeout| Request::new(opts, &event, &bytes, timeout, env))
    {
        Ok(r) => r,
        Err(why) => return host.answer(&name, Answer::Deny(why)),
    };
    ask(opts, &event, &request, env).await
}

/// Asks the service and waits for the decision, withdrawing the question if the hook is
/// stopped meanwhile, or when the host's limit comes first.
async fn ask(
    opts: &HookOptions,
    event: &HookEvent,
    request: &Request,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
    let host = opts.host;
    let started = tokio::time::Instant::now();
    let token = match env(&opts.token_env).filter(|t| !t.trim().is_empty()) {
        Some(t) => t,
        None => {
            return host.answer(
                &event.name,
                failure(
                    opts,
                    format!(
                        "the environment variable {} (--token-env) is not set",
                        clean(&opts.token_env, 128)
                    ),
                ),
            );
        }
    };
    let api = match Api::new(&opts.url, token) {
        Ok(api) => api,
        Err(e) => return host.answer(&event.name, failure(opts, e)),
    };
    let pending: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let answer_by = started + Duration::from_secs_f64(opts.answer_within().max(0.0));
    let asked = decide(
        &api,
        request,
        event.tool_use_id.is_some(),
        request.timeout_seconds(),
        pending.clone(),
    );
    tokio::select! {
        outcome = tokio::time::timeout_at(answer_by, asked) => {
            match outcome {
                Ok(Ok(record)) => {
                    let mut result = host.answer(&event.name, verdict(&record, request.timeout_seconds()));
                    if allows(&record) {
                        result.stderr = remember(opts, event, &record, env);
                    }
                    result
                }
                Ok(Err(e)) => {
                    withdraw_pending(&api, &pending).await;
                    host.answer(&event.name, failure(opts, e))
                }
                // The host is about to stop the hook: a no, whatever `--fallback`
                // says, since no prompt would be shown in time either.
                Err(_) => {
                    let withdrawn = withdraw_pending(&api, &pending).await;
                    host.answer(&event.name, Answer::Deny(format!(
                        "Permission denied: no answer on Telegram in time (the hook must answer \
                         within {} for {}){}.",
                        seconds(opts.answer_within()),
                        host.display(),
                        if withdrawn { "; the question was withdrawn" } else { "" }
                    )))
                }
            }
        }
        signal = terminated() => {
            // The host (or the user's Ctrl-C) stopped us: take the question off
            // Telegram so nobody approves a call that no longer waits, and answer no
            // in case the host still reads it.
            let withdrawn = withdraw_pending(&api, &pending).await;
            let mut result = host.answer(&event.name, Answer::Deny(format!(
                "Permission denied: hitl-telegram was stopped by {signal} before anyone answered{}.",
                if withdrawn { "; the question on Telegram was withdrawn" } else { "" }
            )));
            result.stderr = Some(format!(
                "hitl-telegram hook: stopped by {signal}{}",
                if withdrawn { "; the question on Telegram was withdrawn" } else { "" }
            ));
            // And exit 2, which every host reads as a block even where it would no
            // longer read stdout.
            result.exit_code = 2;
            result
        }
    }
}

/// A Claude Code event read as `hook --for claude` reads it, for tests.
#[cfg(test)]
pub(crate) fn parse_event(bytes: &[u8]) -> Result<HookEvent, String> {
    let name = hosts::event_name(bytes).unwrap_or_else(|| hosts::claude::PERMISSION_REQUEST.into());
    Host::Claude.parse(&name, bytes, false)
}

/// The service could not give a decision: deny, or leave it to the host with
/// `--fallback ask`.
fn failure(opts: &HookOptions, why: String) -> Answer {
    match opts.fallback {
        Fallback::Ask => Answer::AskTheHost(why),
        Fallback::Deny => Answer::Deny(format!(
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
    let why = match ledger::state_dir(opts.host, opts.state_dir.as_deref(), env) {
        Some(dir) => ledger::note(&dir, event, id).err()?,
        None => "no --state-dir, XDG_STATE_HOME or HOME to note it in".to_owned(),
    };
    Some(format!(
        "hitl-telegram hook: what becomes of request {id} will not be reported: {why}"
    ))
}

/// Maps a terminal record to the hook's decision.
fn verdict(record: &Value, requested_timeout: f64) -> Answer {
    let text = |k: &str| record.get(k).and_then(Value::as_str).unwrap_or("");
    let reason = clean(text("reason"), 500);
    match (text("status"), text("via")) {
        ("confirmed", _) if allows(record) => Answer::Allow,
        ("cancelled", "operator") => {
            let by = record
                .get("decided_by")
                .and_then(|b| b.get("name"))
                .and_then(Value::as_str)
                .map(|n| clean(n, 64));
            match (record.get("denial_reason").and_then(Value::as_str), by) {
                // Their words as data: quoted as a JSON string, with every invisible
                // character as the escape the operator saw, never a sentence of ours.
                (Some(why), Some(by)) => Answer::Deny(format!(
                    "Permission denied on Telegram by {by}; {}. The call was not executed; do not retry it as it is.",
                    text::their_words(&text::visible_within(why, Layout::Line, 600))
                )),
                _ => Answer::Deny(format!(
                    "Permission denied on Telegram: {}. The call was not executed; do not retry it as it is.",
                    reason
                        .strip_suffix(" (not executed; do not retry this call as it is)")
                        .unwrap_or(&reason)
                )),
            }
        }
        // A `deny` rule of the service: nobody was asked, and the rule says why.
        ("cancelled", "rule") => Answer::Deny(format!(
            "Permission denied without asking anyone: {reason}. The call was not executed; do not retry it as it is."
        )),
        ("cancelled", "fail_closed") => {
            let why = reason.strip_prefix("not executed: ").unwrap_or(&reason);
            Answer::Deny(format!(
                "Permission denied: {why}; hitl-telegram fails closed."
            ))
        }
        ("cancelled", "withdrawn") => Answer::Deny(
            "Permission denied: the question on Telegram was withdrawn before anyone answered."
                .to_owned(),
        ),
        ("timeout", _) => {
            let secs = window_of(record).unwrap_or(requested_timeout);
            Answer::Deny(format!(
                "Permission denied: no answer on Telegram within {}.",
                seconds(secs)
            ))
        }
        (status, _) => Answer::Deny(format!(
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
