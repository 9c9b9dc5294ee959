//! What became of a forwarded call, reported to the service without the agent's help:
//! the upstream's result is the outcome (`isError` a failure, anything else executed,
//! its first text cut as the summary or the error), the upstream gone mid-call is
//! `unknown`. Reports are sent in the background and retried a little; one that still
//! fails is said on stderr (the service marks the run `unknown` when its route expects
//! a report).

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use crate::client::{Retry, RunReportRequest};

use super::gate::Asking;
use super::message::Message;

const REPORT_RETRY: Retry = Retry {
    attempts: 3,
    delay: Duration::from_millis(250),
    doubling: true,
    retry_status: |s| s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS,
    busy_waits: false,
    retry_failure: |_| true,
};

/// The upstream answered the call (`m`, a response) after `took`.
pub fn answered(asking: &Arc<Asking>, question: &str, tool: &str, m: &Message, took: Duration) {
    let report = match (m.result(), m.body.get("error")) {
        (Some(result), _) => {
            let text = first_text(result);
            if result.get("isError") == Some(&Value::Bool(true)) {
                RunReportRequest::failed(
                    text.as_deref().unwrap_or("the tool answered with an error"),
                    Some(took),
                )
            } else {
                RunReportRequest::executed(text.as_deref(), Some(took))
            }
        }
        (None, Some(error)) => {
            let message = error.get("message").and_then(Value::as_str).unwrap_or("");
            let code = error.get("code").map(Value::to_string).unwrap_or_default();
            RunReportRequest::failed(
                &format!("the MCP server answered {tool} with error {code}: {message}"),
                Some(took),
            )
        }
        (None, None) => {
            RunReportRequest::failed("the MCP server's answer held no result", Some(took))
        }
    };
    send(asking, question, report);
}

/// The call was sent but whether it ran is not known (`why`).
pub fn unknown(asking: &Arc<Asking>, question: &str, why: &str) {
    send(asking, question, RunReportRequest::unknown(why));
}

/// The call was approved but never reached the upstream (`why`).
pub fn not_run(asking: &Arc<Asking>, question: &str, why: &str) {
    send(asking, question, RunReportRequest::not_executed(Some(why)));
}

fn send(asking: &Arc<Asking>, question: &str, report: RunReportRequest) {
    let tracker = asking.reports.clone();
    let asking = asking.clone();
    let question = question.to_owned();
    tracker.spawn(async move {
        let sent = asking
            .client
            .report(
                &question,
                &report,
                Some(Duration::from_secs(10)),
                &REPORT_RETRY,
                &mut |_| {},
            )
            .await;
        match sent {
            Ok(reply) if reply.status.is_success() => {}
            Ok(reply) => eprintln!(
                "hitl-telegram gateway: the outcome of {question} was not taken ({} {})",
                reply.status.as_u16(),
                reply.error_detail()
            ),
            Err(failure) => eprintln!(
                "hitl-telegram gateway: the outcome of {question} could not be reported ({})",
                failure.error()
            ),
        }
    });
}

/// The first text block of a tool result.
fn first_text(result: &serde_json::Map<String, Value>) -> Option<String> {
    result
        .get("content")?
        .as_array()?
        .iter()
        .find(|b| b.get("type").and_then(Value::as_str) == Some("text"))?
        .get("text")?
        .as_str()
        .map(str::to_owned)
}
