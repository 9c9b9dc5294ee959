//! Codex: `PermissionRequest` (when Codex would ask on its own screen: shell, exec and
//! network approvals arrive as tool `Bash`), `PreToolUse` (before every call it
//! matches), `PostToolUse` (after a call that ran; Codex sends none for a failure).
//!
//! Codex's output schemas take no unknown key, and reserve `updatedInput`,
//! `updatedPermissions` and `interrupt` (present, they make the answer fail): none is
//! ever written. A `PermissionRequest` reads Claude Code's `decision`; nothing on
//! stdout leaves it to Codex's own prompt. A `PreToolUse` blocks only with
//! `permissionDecision: "deny"` and a reason; an empty answer lets the call run, and
//! `allow` or `ask` there are invalid (and the call would run). Sources:
//! developers.openai.com/codex/hooks and openai/codex
//! `codex-rs/hooks/schema/generated/*.command.{input,output}.schema.json`.

use serde::Deserialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::super::HookResult;
use super::super::event::{HookEvent, Ran, Stage, clip};
use super::super::host::{Answer, Host};
use super::{checked_input, claude, named, object_of, read, with_key};

pub const PERMISSION_REQUEST: &str = "PermissionRequest";
pub const PRE_TOOL_USE: &str = "PreToolUse";
pub const POST_TOOL_USE: &str = "PostToolUse";

pub(in super::super) const BEFORE: &[&str] = &[PERMISSION_REQUEST, PRE_TOOL_USE];
pub(in super::super) const AFTER: &[&str] = &[POST_TOOL_USE];

/// The fields of Codex's `PermissionRequest` and `PreToolUse` inputs (both schemas
/// take no other).
const KNOWN: &[&str] = &[
    "session_id",
    "turn_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "model",
    "permission_mode",
    "tool_name",
    "tool_input",
    "tool_use_id",
    "approval_context",
];

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    turn_id: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    permission_mode: Option<String>,
    tool_name: String,
    tool_input: Box<RawValue>,
    #[serde(default)]
    tool_use_id: Option<String>,
    /// `PermissionRequest`: whether the command asks to leave the sandbox or widen it
    /// (`sandbox_permissions`, `additional_permissions`, `justification`).
    #[serde(default)]
    approval_context: Option<Box<RawValue>>,
    /// `PostToolUse`: what the tool returned.
    #[serde(default)]
    tool_response: Option<Box<RawValue>>,
}

/// The part of `approval_context` the context line names.
#[derive(Deserialize, Default)]
struct ApprovalContext {
    #[serde(default)]
    sandbox_permissions: Option<String>,
}

pub(in super::super) fn parse(name: &str, bytes: &[u8], strict: bool) -> Result<HookEvent, String> {
    let (mut e, stage): (Event, _) = read(bytes, Host::Codex, name, AFTER, strict, KNOWN)?;
    let after = stage == Stage::After;
    named(&e.tool_name)?;
    checked_input(&e.tool_input)?;
    let mut context = Vec::new();
    // Codex names a shell command with its `description` before and without it after:
    // the command alone matches the two.
    let mut match_input = command_of(&e.tool_input)
        .map(|command| object_of(&[("command", &command)]))
        .transpose()?;
    if let Some(approval) = e.approval_context.take() {
        checked_input(&approval)?;
        let mode: ApprovalContext = serde_json::from_str(approval.get()).unwrap_or_default();
        if let Some(m) = mode.sandbox_permissions.filter(|m| m != "use_default") {
            context.push(format!("sandbox: {}", clip(&m, 60)));
        }
        // What the command may do outside its sandbox is part of what is approved: it
        // goes into the parameters (and so into the args hash, the rules and the
        // windows), beside the command. The post event names the call by its input.
        let input = std::mem::replace(&mut e.tool_input, object_of(&[])?);
        e.tool_input = with_key(&input, "approval_context", &approval)?;
        match_input = match_input.or(Some(input));
    }
    let ran =
        after.then(|| Ran::Executed(e.tool_response.as_deref().and_then(super::response_text)));
    Ok(HookEvent {
        session_id: e.session_id,
        turn_id: e.turn_id,
        cwd: e.cwd,
        permission_mode: e.permission_mode,
        match_input,
        tool_use_id: e.tool_use_id,
        context,
        ran,
        ..HookEvent::of(Host::Codex, name, stage, e.tool_name, e.tool_input)
    })
}

/// The `command` of a tool input, as its raw JSON string, when it has one.
fn command_of(input: &RawValue) -> Option<Box<RawValue>> {
    let fields: std::collections::BTreeMap<String, Box<RawValue>> =
        serde_json::from_str(input.get()).ok()?;
    let command = fields.get("command")?;
    command
        .get()
        .trim_start()
        .starts_with('"')
        .then(|| command.clone())
}

pub(in super::super) fn answer(name: &str, answer: Answer) -> HookResult {
    if name == PERMISSION_REQUEST {
        return claude::permission_request(answer, "Codex");
    }
    // PreToolUse: only a deny with a reason blocks; an empty answer is the approval.
    let reason = match answer {
        Answer::Allow => return HookResult::quiet(None),
        Answer::Deny(reason) => reason,
        Answer::AskTheHost(why) => format!(
            "Permission denied: {why}; Codex's PreToolUse has no prompt of its own to \
             leave the decision to, so hitl-telegram fails closed."
        ),
    };
    HookResult::json(json!({"hookSpecificOutput": {
        "hookEventName": PRE_TOOL_USE,
        "permissionDecision": "deny",
        "permissionDecisionReason": reason,
    }}))
}
