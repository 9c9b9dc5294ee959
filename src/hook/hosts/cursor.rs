//! Cursor: `beforeShellExecution` and `beforeMCPExecution` (answered `allow`, `deny`
//! or `ask`), `preToolUse` (every tool; `ask` is not enforced there), and after them
//! `afterShellExecution`, `afterMCPExecution`, `postToolUse`, `postToolUseFailure`.
//!
//! The answer is always one explicit `{"permission": ...}`: Cursor reads no output, or
//! a failed hook, as "let it through" unless the hook's `failClosed` is set, and exit 2
//! as a block. An after event gets `{}`. Only `preToolUse` and its after events carry a
//! `tool_use_id`; the shell and MCP events are matched by conversation, generation and
//! content, and `afterShellExecution` has no exit code (it reports `executed`). Source:
//! cursor.com/docs/hooks.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::super::HookResult;
use super::super::event::{HookEvent, Ran, Stage, clip};
use super::super::host::{Answer, Host};
use super::{checked_input, named, object_of, raw_string, read, response_text, with_key};

pub const BEFORE_SHELL: &str = "beforeShellExecution";
pub const BEFORE_MCP: &str = "beforeMCPExecution";
pub const PRE_TOOL_USE: &str = "preToolUse";
pub const AFTER_SHELL: &str = "afterShellExecution";
pub const AFTER_MCP: &str = "afterMCPExecution";
pub const POST_TOOL_USE: &str = "postToolUse";
pub const POST_TOOL_USE_FAILURE: &str = "postToolUseFailure";

pub(in super::super) const BEFORE: &[&str] = &[BEFORE_SHELL, BEFORE_MCP, PRE_TOOL_USE];
pub(in super::super) const AFTER: &[&str] =
    &[AFTER_SHELL, AFTER_MCP, POST_TOOL_USE, POST_TOOL_USE_FAILURE];

/// Cursor documents no default for a hook's `timeout` ("platform default"): the hook
/// assumes a minute, and `hook install` writes the timeout it needs, with `failClosed`.
pub const DEFAULT_HOOK_TIMEOUT_SECONDS: f64 = 60.0;

/// The name the approvers read for a shell command: Cursor's own for its shell tool.
const SHELL_TOOL: &str = "Shell";

/// Every field Cursor documents for its three before events.
const KNOWN: &[&str] = &[
    "conversation_id",
    "generation_id",
    "model",
    "hook_event_name",
    "cursor_version",
    "workspace_roots",
    "user_email",
    "transcript_path",
    "command",
    "cwd",
    "sandbox",
    "tool_name",
    "tool_input",
    "url",
    "tool_use_id",
    "agent_message",
];

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    generation_id: Option<String>,
    #[serde(default)]
    workspace_roots: Vec<String>,
    #[serde(default)]
    cwd: Option<String>,
    /// Shell: the command line.
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    sandbox: Option<bool>,
    #[serde(default)]
    tool_name: Option<String>,
    /// `preToolUse`, `postToolUse`: an object; the MCP events: a JSON string.
    #[serde(default)]
    tool_input: Option<Box<RawValue>>,
    /// MCP: the server, by URL or by command.
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    result_json: Option<String>,
    #[serde(default)]
    tool_output: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    failure_type: Option<String>,
    #[serde(default)]
    is_interrupt: Option<bool>,
    #[serde(default)]
    duration: Option<f64>,
}

pub(in super::super) fn parse(name: &str, bytes: &[u8], strict: bool) -> Result<HookEvent, String> {
    let (e, stage): (Event, _) = read(bytes, Host::Cursor, name, AFTER, strict, KNOWN)?;
    let after = stage == Stage::After;
    let mut context = Vec::new();
    let (tool, input, match_input) = match name {
        BEFORE_SHELL | AFTER_SHELL => {
            let command = e.command.as_deref().ok_or("the event has no command")?;
            let command = raw_string(command)?;
            let mut pairs: Vec<(&str, &RawValue)> = vec![("command", &command)];
            let cwd = e.cwd.as_deref().map(raw_string).transpose()?;
            let sandbox = e
                .sandbox
                .map(|s| serde_json::value::to_raw_value(&s))
                .transpose()
                .map_err(|e| e.to_string())?;
            if let Some(cwd) = &cwd {
                pairs.push(("cwd", cwd));
            }
            if let Some(sandbox) = &sandbox {
                pairs.push(("sandbox", sandbox));
            }
            // The after event names the command alone: that is what matches the two.
            let matched = object_of(&[("command", &command)])?;
            (SHELL_TOOL.to_owned(), object_of(&pairs)?, Some(matched))
        }
        BEFORE_MCP | AFTER_MCP => {
            let tool = e.tool_name.clone().ok_or("the event has no tool_name")?;
            let arguments = mcp_arguments(e.tool_input.as_deref())?;
            // Which server runs the tool is part of what is approved: two servers may
            // each have a `delete`. The after event has no server: it matches by the
            // arguments alone.
            let server = match (&e.url, &e.command) {
                (Some(url), _) => Some(json!({"url": url})),
                (None, Some(command)) => Some(json!({"command": command})),
                (None, None) => None,
            };
            let input = match &server {
                Some(server) if name == BEFORE_MCP => {
                    context.push(format!("MCP server {}", clip(&server_text(server), 200)));
                    let server = serde_json::value::to_raw_value(server)
                        .map_err(|e| format!("cannot build the parameters: {e}"))?;
                    with_key(&arguments, "mcp_server", &server)?
                }
                _ => arguments.clone(),
            };
            (tool, input, Some(arguments))
        }
        _ => {
            let tool = e.tool_name.clone().ok_or("the event has no tool_name")?;
            let input = e.tool_input.clone().ok_or("the event has no tool_input")?;
            (tool, input, None)
        }
    };
    named(&tool)?;
    checked_input(&input)?;
    let ran = after.then(|| ran(name, &e));
    Ok(HookEvent {
        session_id: e.conversation_id,
        turn_id: e.generation_id,
        cwd: e.cwd.or_else(|| e.workspace_roots.first().cloned()),
        match_input,
        tool_use_id: e.tool_use_id,
        context,
        ran,
        duration_ms: e
            .duration
            .filter(|d| d.is_finite() && *d >= 0.0)
            .map(|d| d as u64),
        ..HookEvent::of(Host::Cursor, name, stage, tool, input)
    })
}

/// An MCP call's arguments: Cursor sends them as a JSON string holding an object. A
/// string that is no JSON object is asked about as it is, under `input`.
fn mcp_arguments(raw: Option<&RawValue>) -> Result<Box<RawValue>, String> {
    let raw = raw.ok_or("the event has no tool_input")?;
    let text = match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) => s,
        Ok(Value::Object(_)) => return Ok(raw.to_owned()),
        _ => return Err("the event's tool_input is neither a JSON string nor an object".into()),
    };
    let trimmed = text.trim();
    if trimmed.starts_with('{') && serde_json::from_str::<Value>(trimmed).is_ok() {
        return RawValue::from_string(trimmed.to_owned()).map_err(|e| e.to_string());
    }
    object_of(&[("input", &raw_string(&text)?)])
}

fn server_text(server: &Value) -> String {
    server
        .get("url")
        .or_else(|| server.get("command"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// What an after event says became of the call.
fn ran(name: &str, e: &Event) -> Ran {
    match name {
        AFTER_SHELL => Ran::Executed(e.output.clone().filter(|o| !o.trim().is_empty())),
        AFTER_MCP => {
            let result = e.result_json.as_deref().unwrap_or("");
            match serde_json::from_str::<Value>(result) {
                Ok(v) if v.get("isError") == Some(&Value::Bool(true)) => {
                    Ran::Failed(mcp_error_text(&v))
                }
                _ => Ran::Executed(Some(result.to_owned()).filter(|r| !r.trim().is_empty())),
            }
        }
        POST_TOOL_USE => {
            let output = e.tool_output.as_deref().unwrap_or("");
            let code = serde_json::from_str::<Value>(output)
                .ok()
                .and_then(|v| v.get("exitCode").and_then(Value::as_i64));
            match code {
                Some(code) if code != 0 => Ran::Failed(format!("exit code {code}")),
                _ => Ran::Executed(
                    RawValue::from_string(json!(output).to_string())
                        .ok()
                        .as_deref()
                        .and_then(response_text),
                ),
            }
        }
        _ => {
            let error = e
                .error_message
                .as_deref()
                .map(str::trim)
                .filter(|m| !m.is_empty())
                .unwrap_or("the tool call failed")
                .to_owned();
            match e.failure_type.as_deref() {
                Some("permission_denied") => {
                    Ran::NotExecuted(format!("Cursor did not run it: {error}"))
                }
                Some("timeout") => Ran::Failed(format!("timed out: {error}")),
                _ if e.is_interrupt == Some(true) => {
                    Ran::Failed(format!("interrupted by the user: {error}"))
                }
                _ => Ran::Failed(error),
            }
        }
    }
}

/// The text of an MCP error result (`content[].text`), or a plain sentence.
fn mcp_error_text(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|i| i.get("text")?.as_str())
                .collect()
        })
        .unwrap_or_default();
    if texts.is_empty() {
        "the MCP tool returned an error".to_owned()
    } else {
        texts.join("\n")
    }
}

pub(in super::super) fn answer(name: &str, answer: Answer) -> HookResult {
    let permission = match answer {
        Answer::Allow => json!({"permission": "allow"}),
        Answer::Deny(message) => deny(&message),
        Answer::AskTheHost(why) if name != PRE_TOOL_USE => json!({
            "permission": "ask",
            "user_message": format!("hitl-telegram could not get a decision on Telegram ({why}); \
                                     decide here."),
        }),
        // Cursor does not enforce `ask` for preToolUse: a deny is the one safe answer.
        Answer::AskTheHost(why) => deny(&format!(
            "Permission denied: {why}; Cursor's preToolUse has no prompt of its own to leave \
             the decision to, so hitl-telegram fails closed."
        )),
    };
    HookResult::json(permission)
}

fn deny(message: &str) -> Value {
    json!({"permission": "deny", "user_message": message, "agent_message": message})
}
