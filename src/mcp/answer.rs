//! What the model reads back: an outcome in words it reads right (`APPROVED` only when
//! approved), and a refusal or an unreachable API as not approved, saying why.

use axum::http::StatusCode;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::Value;

use crate::domain::text;

use super::v1::Answer;

pub(super) fn text_result(text: String, record: Option<&Value>, error: bool) -> CallToolResult {
    let mut blocks = vec![ContentBlock::text(text)];
    if let Some(record) = record {
        blocks.push(ContentBlock::text(record.to_string()));
    }
    if error {
        CallToolResult::error(blocks)
    } else {
        CallToolResult::success(blocks)
    }
}

/// What the API's answer means for the model, in words it reads right.
pub(super) fn decision_text(record: &Value) -> String {
    let tool = record["tool"].as_str().unwrap_or("the call");
    let id = record["id"].as_str().unwrap_or("?");
    let reason = record["reason"].as_str().unwrap_or("");
    match record["status"].as_str() {
        Some("confirmed") => format!(
            "APPROVED ({reason}). Run {tool} now with exactly these parameters: {}. Request \
             {id}. After running it, call report_outcome with id \"{id}\" and status \
             \"executed\" (with a one-line summary), or \"failed\" (with the error); if you \
             do not run it after all, report status \"not_executed\".",
            record["parameters"]
        ),
        Some("cancelled") => match record["denial_reason"].as_str() {
            Some(why) => format!(
                "NOT APPROVED: the operator denied it; {}. Do not run {tool}, and do not retry \
                 the same call. Request {id}.",
                text::their_words(why)
            ),
            None => format!(
                "NOT APPROVED: cancelled ({reason}). Do not run {tool}, and do not retry the same \
                 call; ask the human what to do instead. Request {id}."
            ),
        },
        Some("timeout") => format!(
            "NOT APPROVED: nobody answered in time ({reason}). Do not run {tool}. Request {id}."
        ),
        _ => format!(
            "NOT APPROVED YET: the request {id} is still waiting for a human. Do not run {tool} \
             now; call get_decision with id \"{id}\" to wait for the decision."
        ),
    }
}

/// What a report of an outcome came to, in words the model reads right: `REPORTED`
/// only when the service took it.
pub(super) fn reported_text(id: &str, answer: Answer) -> CallToolResult {
    match answer {
        Answer::Ok(s, record) if s.is_success() => {
            let status = record["outcome"]["status"].as_str().unwrap_or("?");
            text_result(
                format!(
                    "REPORTED: {status}. Request {id}. The human who approved it sees this \
                     outcome on Telegram; nothing else to do for this call."
                ),
                Some(&record),
                false,
            )
        }
        Answer::Ok(s, body) => {
            let message = body["error"]["message"]
                .as_str()
                .map_or_else(|| body.to_string(), str::to_owned);
            let next = match s {
                StatusCode::NOT_FOUND => {
                    "There is no request of yours with this id: use the id request_approval \
                     returned."
                }
                StatusCode::CONFLICT => {
                    "Only an approved request takes an outcome, and only one: do not report \
                     this call again."
                }
                StatusCode::UNPROCESSABLE_ENTITY => {
                    "Fix the arguments and call report_outcome again."
                }
                _ => "Try report_outcome again later.",
            };
            text_result(
                format!(
                    "NOT REPORTED: the approval service refused the report ({} {message}). \
                     Request {id}. {next}",
                    s.as_u16()
                ),
                None,
                true,
            )
        }
        Answer::Unreachable(why) => text_result(
            format!(
                "NOT REPORTED: the approval service could not be reached ({why}). Request \
                 {id}. Call report_outcome again later."
            ),
            None,
            true,
        ),
    }
}

pub(super) fn answer_text(record: &Value) -> String {
    let id = record["interaction_id"].as_str().unwrap_or("?");
    match record["status"].as_str() {
        Some("completed") => match record["denial_reason"].as_str() {
            Some(why) => format!(
                "ANSWERED: {} (the operator said no; {}). Question {id}.",
                record["result"],
                text::their_words(why)
            ),
            None => format!("ANSWERED: {}. Question {id}.", record["result"]),
        },
        Some("timeout") => format!("NO ANSWER: nobody answered in time. Question {id}."),
        Some("cancelled") => format!(
            "NO ANSWER: the question was cancelled ({}). Question {id}.",
            record["reason"].as_str().unwrap_or("")
        ),
        _ => format!(
            "NO ANSWER YET: question {id} is still open; call get_decision with id \"{id}\" \
             to wait for the answer."
        ),
    }
}

/// A request the API refused or could not take: not approved, said so.
pub(super) fn refused(what: &str, status: StatusCode, body: &Value) -> CallToolResult {
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| body.to_string());
    text_result(
        format!(
            "NOT APPROVED: the approval service refused the request ({} {message}). Do not run \
             {what}.",
            status.as_u16()
        ),
        None,
        true,
    )
}

pub(super) fn unreachable(what: &str, why: &str) -> CallToolResult {
    text_result(
        format!("NOT APPROVED: no human could be asked ({why}). Do not run {what}."),
        None,
        true,
    )
}

/// A failed API answer in a few words: its status and the error's message.
pub(super) fn failure(answer: Answer) -> String {
    match answer {
        Answer::Ok(status, body) => format!(
            "{} {}",
            status.as_u16(),
            body["error"]["message"]
                .as_str()
                .map_or_else(|| body.to_string(), str::to_owned)
        ),
        Answer::Unreachable(why) => why,
    }
}
