//! After events (Claude Code's `PostToolUse` and `PostToolUseFailure`, Codex's
//! `PostToolUse`, Cursor's `afterShellExecution`, `afterMCPExecution` and
//! `postToolUse`, Gemini CLI's `AfterTool`): what became of a call this hook let
//! through, reported to the service so the approver sees it on Telegram.
//!
//! The call is found in the [`ledger`](super::ledger) the before event's run wrote
//! when it allowed it; a call found there was `confirmed`, and any other (the host
//! allowed it by its own settings, or this hook never saw it) is left alone, silently.
//!
//! An after hook cannot stop anything that already ran, and whatever it prints might
//! be read by the model (Gemini CLI even hides a call's result on a block): so it
//! always exits 0 with nothing on stdout, gives up within [`BUDGET`], and says on
//! stderr (which hosts keep for their debug logs) only why a report it owed was not
//! delivered.

use std::time::Duration;

use reqwest::StatusCode;

use crate::client::{Retry, RunReportRequest, V1Client, cut};
use crate::domain::run_report::MAX_REPORT_CHARS;

use super::{HookEvent, HookOptions, HookResult, Ran, clean, ledger};

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

/// Reports what became of the call `event` names, if this hook let it through.
pub(super) async fn report(
    opts: &HookOptions,
    event: &HookEvent,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> HookResult {
    let Some(dir) = ledger::state_dir(event.host, opts.state_dir.as_deref(), env) else {
        return HookResult::quiet(None);
    };
    let Some(id) = ledger::take_call(&dir, event) else {
        return HookResult::quiet(None);
    };
    let took = event.duration_ms.map(Duration::from_millis);
    let outcome = match &event.ran {
        Some(Ran::Failed(error)) => RunReportRequest::failed(error, took),
        Some(Ran::NotExecuted(why)) => RunReportRequest::not_executed(Some(why)),
        // The tool's output only when asked for (`--report-output`): it may hold what
        // must never reach a chat.
        Some(Ran::Executed(response)) => {
            let summary = response
                .as_deref()
                .filter(|_| opts.report_output)
                .map(|r| cut(r, MAX_REPORT_CHARS));
            RunReportRequest::executed(summary.as_deref(), took)
        }
        None => return HookResult::quiet(None),
    };
    let Some(token) = env(&opts.token_env).filter(|t| !t.trim().is_empty()) else {
        return HookResult::quiet(Some(format!(
            "what became of request {id} was not reported: the environment variable {} \
             (--token-env) is not set",
            clean(&opts.token_env, 128)
        )));
    };
    let base = opts.url.trim().trim_end_matches('/');
    let client = match V1Client::new(base, token.into(), Some(BUDGET / 2)) {
        Ok(client) => client,
        Err(e) => return HookResult::quiet(Some(format!("cannot set up HTTP: {e}"))),
    };
    let answer = tokio::time::timeout(
        BUDGET,
        client.report(&id, &outcome, None, &REPORT_RETRY, &mut |_| {}),
    )
    .await;
    let why = match answer {
        Ok(Ok(reply)) if reply.status.is_success() => return HookResult::quiet(None),
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
    HookResult::quiet(Some(format!(
        "what became of request {id} ({}) was not reported: {why}",
        outcome.status.as_str()
    )))
}
