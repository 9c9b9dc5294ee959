//! Claude Code's `PostToolUse` and `PostToolUseFailure` events: what became of a call
//! this hook let through, reported to the service so the approver sees it on Telegram.
//!
//! Claude Code sends them after a tool ran (`tool_response`) or failed (`error`, and
//! `is_interrupt` when the user stopped it), with the call's `session_id`, `tool_name`,
//! `tool_input` and `tool_use_id`. The call is found in the [`ledger`](super::ledger)
//! the `PermissionRequest` run wrote when it allowed it; a call found there was
//! `confirmed`, and any other (Claude Code allowed it by its own settings, or this
//! hook never saw it) is left alone, silently.
//!
//! A post hook cannot stop anything that already ran, and whatever it prints might be
//! read by Claude: so it always exits 0 with nothing on stdout, gives up within
//! [`BUDGET`], and says on stderr (which Claude Code keeps for its debug log) only why a
//! report it owed was not delivered.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::client::{Retry, RunReportRequest, V1Client, cut};
use crate::domain::run_report::MAX_REPORT_CHARS;

use super::{HookEvent, HookOptions, HookResult, clean, ledger};

/// The event after a tool call succeeded.
pub const POST_TOOL_USE: &str = "PostToolUse";
/// The event after a tool call failed.
pub const POST_TOOL_USE_FAILURE: &str = "PostToolUseFailure";

/// The longest a post event may keep Claude Code waiting.
const BUDGET: Duration = Duration::from_secs(10);

/// A few quick attempts while the service is out of reach or busy, within [`BUDGET`].
const REPORT_RETRY: Retry = Retry {
    attempts: 3,
    delay: Duration::from_millis(250),
    doubling: true,
    retry_status: |s| s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS,
    busy_waits: false,
    retry_failure: |_| true,
};

/// Whether `name` is one of the post events this hook reports from.
pub(super) fn is_post_event(name: &str) -> bool {
    name == POST_TOOL_USE || name == POST_TOOL_USE_FAILURE
}

/// Whether the event text names a post event, read before (and whatever) the rest of
/// it is, so that a post event this hook cannot read still exits 0.
pub(super) fn names_a_post_event(bytes: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Named {
        hook_event_name: Option<String>,
    }
    serde_json::from_slice::<Named>(bytes)
        .ok()
        .and_then(|n| n.hook_event_name)
        .is_some_and(|n| is_post_event(&n))
}

/// Exit 0, nothing on stdout; `why`, if any, on stderr.
fn quiet(why: Option<String>) -> HookResult {
    HookResult {
        stdout: None,
        stderr: why.map(|w| format!("hitl-telegram claude-hook: {w}")),
        exit_code: 0,
    }
}

/// Reports what became of the call `event` names, if this hook let it through.
pub(super) async fn report(
    opts: &HookOptions,
    event: &HookEvent,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
    let failed = event.hook_event_name.as_deref() == Some(POST_TOOL_USE_FAILURE);
    let Some(dir) = ledger::state_dir(opts.state_dir.as_deref(), env) else {
        return quiet(None);
    };
    let Some(id) = ledger::take_call(&dir, event) else {
        return quiet(None);
    };
    let outcome = if failed {
        let error = event
            .error
            .as_deref()
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .unwrap_or("the tool call failed");
        let error = if event.is_interrupt == Some(true) {
            format!("interrupted by the user: {error}")
        } else {
            error.to_owned()
        };
        RunReportRequest::failed(&error, None)
    } else {
        // The tool's output only when asked for (`--report-output`): it may hold what
        // must never reach a chat.
        let summary = opts.report_output.then(|| summary(event)).flatten();
        RunReportRequest::executed(summary.as_deref(), None)
    };
    let Some(token) = env(&opts.token_env).filter(|t| !t.trim().is_empty()) else {
        return quiet(Some(format!(
            "what became of request {id} was not reported: the environment variable {} \
             (--token-env) is not set",
            clean(&opts.token_env, 128)
        )));
    };
    let base = opts.url.trim().trim_end_matches('/');
    let client = match V1Client::new(base, token.into(), Some(BUDGET / 2)) {
        Ok(client) => client,
        Err(e) => return quiet(Some(format!("cannot set up HTTP: {e}"))),
    };
    let answer = tokio::time::timeout(
        BUDGET,
        client.report(&id, &outcome, None, &REPORT_RETRY, &mut |_| {}),
    )
    .await;
    let why = match answer {
        Ok(Ok(reply)) if reply.status.is_success() => return quiet(None),
        Ok(Ok(reply)) => format!(
            "the service answered {}: {}",
            reply.status,
            clean(&reply.error_detail(), 300)
        ),
        Ok(Err(failure)) => format!(
            "cannot reach the service at {}: {}",
            client.base(),
            crate::telemetry::causes(failure.error())
        ),
        Err(_) => format!("the service did not answer within {} s", BUDGET.as_secs()),
    };
    quiet(Some(format!(
        "what became of request {id} ({}) was not reported: {why}",
        outcome.status.as_str()
    )))
}

/// The summary of a successful call: its `tool_response`, a string as it is and
/// anything else as its JSON text, cut to what the service takes.
fn summary(event: &HookEvent) -> Option<String> {
    let raw = event.tool_response.as_deref()?.get().trim();
    let text = match serde_json::from_str::<Value>(raw) {
        Ok(Value::Null) => return None,
        Ok(Value::String(s)) => s,
        _ => raw.to_owned(),
    };
    let text = cut(&text, MAX_REPORT_CHARS);
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::claude_hook::parse_event;

    #[test]
    fn a_summary_is_the_tool_response_as_text_cut_to_the_limit() {
        let e = parse_event(
            br#"{"tool_name":"Bash","tool_input":{},"tool_response":{"stdout":"ok","stderr":""}}"#,
        )
        .unwrap();
        assert_eq!(
            summary(&e).as_deref(),
            Some(r#"{"stdout":"ok","stderr":""}"#)
        );
        let long = format!(
            r#"{{"tool_name":"Read","tool_input":{{}},"tool_response":"{}"}}"#,
            "y".repeat(900)
        );
        let s = summary(&parse_event(long.as_bytes()).unwrap()).unwrap();
        assert_eq!(s.chars().count(), MAX_REPORT_CHARS);
        let none =
            parse_event(br#"{"tool_name":"T","tool_input":{},"tool_response":null}"#).unwrap();
        assert_eq!(summary(&none), None);
    }
}
