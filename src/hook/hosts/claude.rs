//! Claude Code: `PermissionRequest` before a call (only when Claude Code would show its
//! own dialog), `PostToolUse` and `PostToolUseFailure` after it. The answer is
//! `hookSpecificOutput.decision.behavior` `allow` or `deny` with a `message`; nothing
//! on stdout leaves the decision to Claude Code's dialog. Source: the hooks reference
//! at code.claude.com/docs/en/hooks.

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::super::HookResult;
use super::super::event::{HookEvent, Ran, Stage};
use super::super::host::{Answer, Host};
use super::{checked_input, named, read};

pub const PERMISSION_REQUEST: &str = "PermissionRequest";
pub const POST_TOOL_USE: &str = "PostToolUse";
pub const POST_TOOL_USE_FAILURE: &str = "PostToolUseFailure";

pub(in super::super) const BEFORE: &[&str] = &[PERMISSION_REQUEST];
pub(in super::super) const AFTER: &[&str] = &[POST_TOOL_USE, POST_TOOL_USE_FAILURE];

/// The fields Claude Code documents for a `PermissionRequest`.
const KNOWN: &[&str] = &[
    "session_id",
    "transcript_path",
    "cwd",
    "permission_mode",
    "hook_event_name",
    "tool_name",
    "tool_input",
    "permission_suggestions",
    "mcp_server",
    "tool_use_id",
    "agent_id",
    "agent_type",
];

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    permission_mode: Option<String>,
    tool_name: String,
    tool_input: Box<RawValue>,
    /// Not sent with `PermissionRequest` today; used when present. The post events
    /// carry it.
    #[serde(default)]
    tool_use_id: Option<String>,
    /// `PostToolUse`: what the tool returned.
    #[serde(default)]
    tool_response: Option<Box<RawValue>>,
    /// `PostToolUseFailure`: why the tool failed.
    #[serde(default, alias = "error_message")]
    error: Option<String>,
    /// `PostToolUseFailure`: whether the user stopped it.
    #[serde(default)]
    is_interrupt: Option<bool>,
    /// Set when the call comes from a subagent.
    #[serde(default)]
    agent_type: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
}

pub(in super::super) fn parse(name: &str, bytes: &[u8], strict: bool) -> Result<HookEvent, String> {
    let (e, stage): (Event, _) = read(bytes, Host::Claude, name, AFTER, strict, KNOWN)?;
    let after = stage == Stage::After;
    named(&e.tool_name)?;
    checked_input(&e.tool_input)?;
    let ran = after.then(|| {
        if name == POST_TOOL_USE_FAILURE {
            let error = e
                .error
                .as_deref()
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .unwrap_or("the tool call failed");
            Ran::Failed(if e.is_interrupt == Some(true) {
                format!("interrupted by the user: {error}")
            } else {
                error.to_owned()
            })
        } else {
            Ran::Executed(e.tool_response.as_deref().and_then(super::response_text))
        }
    });
    Ok(HookEvent {
        session_id: e.session_id,
        cwd: e.cwd,
        permission_mode: e.permission_mode,
        tool_use_id: e.tool_use_id,
        subagent: e.agent_id.and(e.agent_type),
        ran,
        ..HookEvent::of(Host::Claude, name, stage, e.tool_name, e.tool_input)
    })
}

/// `hookSpecificOutput.decision` for a `PermissionRequest` (Codex reads the same).
pub(in super::super) fn permission_request(answer: Answer, host: &str) -> HookResult {
    let decision = match answer {
        Answer::Allow => json!({"behavior": "allow"}),
        Answer::Deny(message) => json!({"behavior": "deny", "message": message}),
        // Nothing on stdout: the host shows its own dialog.
        Answer::AskTheHost(why) => {
            return HookResult::quiet(Some(format!(
                "{why}; leaving the decision to {host}'s own prompt"
            )));
        }
    };
    HookResult::json(json!({"hookSpecificOutput": {
        "hookEventName": PERMISSION_REQUEST,
        "decision": decision,
    }}))
}

pub(in super::super) fn answer(_name: &str, answer: Answer) -> HookResult {
    permission_request(answer, "Claude Code")
}

/// A deny that Claude Code's `PermissionRequest` reads, where the event could not be
/// read: the hook was installed for `PermissionRequest`, and a deny there is the block.
/// An event named as another goes through [`HookResult::block`] instead.
pub(in super::super) fn block(why: String) -> HookResult {
    permission_request(Answer::Deny(why), "Claude Code")
}
