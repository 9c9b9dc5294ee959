//! Gemini CLI: `BeforeTool` before a call, `AfterTool` after it. The answer is
//! `{"decision": "allow" | "deny", "reason"}` on stdout (nothing else may be there);
//! exit 2 with the reason on stderr blocks, any other exit only warns and the tool
//! runs. An `AfterTool` must never answer `deny` or exit 2: Gemini CLI would hide the
//! tool's result from the model; it gets `{}`, the documented no-op.
//!
//! `allow` does not skip Gemini CLI's own policy: in its default mode it may still ask
//! on its own screen after the approvers said yes. Neither event has an id of the call:
//! the two are matched by session and content. A shell command's exit code is not in
//! `AfterTool` (only as text in the output), so a non-zero exit reports `executed`;
//! a tool that failed to run (`tool_response.error`) reports `failed`. Sources:
//! google-gemini/gemini-cli docs/hooks/reference.md and docs/hooks/index.md.

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::super::HookResult;
use super::super::event::{HookEvent, Ran, Stage, clip};
use super::super::host::{Answer, Host};
use super::{checked_input, named, read, response_text};

pub const BEFORE_TOOL: &str = "BeforeTool";
pub const AFTER_TOOL: &str = "AfterTool";

pub(in super::super) const BEFORE: &[&str] = &[BEFORE_TOOL];
pub(in super::super) const AFTER: &[&str] = &[AFTER_TOOL];

/// The fields Gemini CLI documents for `BeforeTool`.
const KNOWN: &[&str] = &[
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "timestamp",
    "tool_name",
    "tool_input",
    "mcp_context",
    "original_request_name",
];

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    tool_name: String,
    tool_input: Box<RawValue>,
    #[serde(default)]
    mcp_context: Option<McpContext>,
    #[serde(default)]
    tool_response: Option<ToolResponse>,
}

#[derive(Deserialize)]
struct McpContext {
    #[serde(default)]
    server_name: Option<String>,
}

#[derive(Deserialize)]
struct ToolResponse {
    #[serde(default, rename = "llmContent")]
    llm_content: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ToolError>,
}

#[derive(Deserialize)]
struct ToolError {
    #[serde(default)]
    message: Option<String>,
}

pub(in super::super) fn parse(name: &str, bytes: &[u8], strict: bool) -> Result<HookEvent, String> {
    let (e, stage): (Event, _) = read(bytes, Host::Gemini, name, AFTER, strict, KNOWN)?;
    let after = stage == Stage::After;
    named(&e.tool_name)?;
    checked_input(&e.tool_input)?;
    let mut context = Vec::new();
    if let Some(server) = e
        .mcp_context
        .as_ref()
        .and_then(|m| m.server_name.as_deref())
    {
        context.push(format!("MCP server {}", clip(server, 100)));
    }
    let ran = after.then(|| match &e.tool_response {
        Some(ToolResponse {
            error: Some(error), ..
        }) => Ran::Failed(
            error
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| "the tool call failed".to_owned()),
        ),
        Some(r) => Ran::Executed(r.llm_content.as_deref().and_then(response_text)),
        None => Ran::Executed(None),
    });
    Ok(HookEvent {
        session_id: e.session_id,
        cwd: e.cwd,
        context,
        ran,
        ..HookEvent::of(Host::Gemini, name, stage, e.tool_name, e.tool_input)
    })
}

pub(in super::super) fn answer(_name: &str, answer: Answer) -> HookResult {
    match answer {
        Answer::Allow => HookResult::json(json!({"decision": "allow"})),
        Answer::Deny(reason) => HookResult::json(json!({"decision": "deny", "reason": reason})),
        // Gemini CLI documents no "ask": an allow goes on to its own policy, which in
        // its auto-approving modes runs the call unasked. A deny is the one safe answer.
        Answer::AskTheHost(why) => HookResult::json(json!({
            "decision": "deny",
            "reason": format!(
                "Permission denied: {why}; Gemini CLI's BeforeTool has no prompt of its own \
                 to leave the decision to, so hitl-telegram fails closed."
            ),
        })),
    }
}
