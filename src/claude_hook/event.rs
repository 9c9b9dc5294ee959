//! The hook event Claude Code writes on stdin, and what of it the approvers read: the
//! owner it names and the context line under the question, each part bounded but
//! with Claude Code's own characters.

use std::io::Read;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::domain::limits::MAX_BODY_BYTES;

use super::{MAX_EVENT_BYTES, OwnerFrom, clean};

/// The fields of a hook event this command uses (a `PermissionRequest`, or a post
/// event); the others (`transcript_path`, `permission_suggestions`, `mcp_server`, ...)
/// are ignored.
#[derive(Debug, Deserialize)]
pub struct HookEvent {
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub permission_mode: Option<String>,
    #[serde(default)]
    pub hook_event_name: Option<String>,
    pub tool_name: String,
    pub tool_input: Box<RawValue>,
    /// Not sent with `PermissionRequest` today; used when present. The post events
    /// carry it.
    #[serde(default)]
    pub tool_use_id: Option<String>,
    /// `PostToolUse`: what the tool returned.
    #[serde(default)]
    pub tool_response: Option<Box<RawValue>>,
    /// `PostToolUseFailure`: why the tool failed.
    #[serde(default, alias = "error_message")]
    pub error: Option<String>,
    /// `PostToolUseFailure`: whether the user stopped it.
    #[serde(default)]
    pub is_interrupt: Option<bool>,
    /// Set when the call comes from a subagent.
    #[serde(default)]
    pub agent_type: Option<String>,
    #[serde(default)]
    pub agent_id: Option<String>,
}

/// Reads the event, refusing more than [`MAX_EVENT_BYTES`].
pub fn read_event(input: impl Read) -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    input
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read stdin: {e}"))?;
    if buf.len() > MAX_EVENT_BYTES {
        return Err(format!(
            "the event on stdin is larger than {} KiB, far over the {} KiB one request \
             to the service may hold",
            MAX_EVENT_BYTES / 1024,
            MAX_BODY_BYTES / 1024
        ));
    }
    Ok(buf)
}

/// Parses the event, naming what is wrong with it.
pub fn parse_event(bytes: &[u8]) -> Result<HookEvent, String> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err("stdin is empty".into());
    }
    let event: HookEvent = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdin is not a Claude Code hook event in JSON: {e}"))?;
    if event.tool_name.trim().is_empty() {
        return Err("the event's tool_name is empty".into());
    }
    // RawValue checks the syntax only; this also refuses lone surrogates and absurd
    // nesting, which no tool input has.
    serde_json::from_str::<Value>(event.tool_input.get())
        .map_err(|e| format!("the event's tool_input is not valid JSON: {e}"))?;
    Ok(event)
}

/// At most `max` characters, an ellipsis marking the cut, and every character kept as
/// it is: for the context line the approvers read. The service shows invisible
/// characters (controls, bidi overrides) as visible escapes, which it can only do if
/// they reach it; a newline turned into a space here would show a directory that is
/// not the one Claude Code runs in. The two exceptions are NUL and ESC, which the
/// service refuses in free text (they act on the logs and terminals that print it):
/// they are written as the escapes it shows for the others (`\x00`, `\x1b`), so the
/// approvers still see them and a directory name cannot make every call fail.
pub(super) fn clip(s: &str, max: usize) -> String {
    let s = nul_and_esc_escaped(s);
    if s.chars().count() <= max {
        s
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Like [`clip`], but keeps the end of a long path (its most specific part).
pub(super) fn clip_tail(s: &str, max: usize) -> String {
    let s = nul_and_esc_escaped(s);
    let n = s.chars().count();
    if n <= max {
        s
    } else {
        let tail: String = s.chars().skip(n - max.saturating_sub(1)).collect();
        format!("…{tail}")
    }
}

/// `s` with NUL and ESC written as `\x00` and `\x1b`, everything else as it is.
fn nul_and_esc_escaped(s: &str) -> String {
    s.replace('\0', "\\x00").replace('\u{1b}', "\\x1b")
}

pub(super) fn last_component(path: &str) -> Option<String> {
    path.trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .map(|s| clean(s, 256))
        .filter(|s| !s.is_empty())
}

/// The `owner_id` for `--owner-from`; `None` leaves it to the service (`anonymous`).
pub fn owner_id(
    from: OwnerFrom,
    event: &HookEvent,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Option<String> {
    let cwd = || event.cwd.as_deref().and_then(last_component);
    let owner = match from {
        OwnerFrom::User => ["USER", "LOGNAME", "USERNAME"]
            .iter()
            .filter_map(|k| env(k))
            .map(|v| clean(&v, 256))
            .find(|v| !v.is_empty())
            .or_else(cwd),
        OwnerFrom::Cwd => cwd(),
        OwnerFrom::Session => event
            .session_id
            .as_deref()
            .map(|s| clean(s, 256))
            .filter(|s| !s.is_empty()),
    };
    owner.filter(|o| !o.is_empty())
}

/// The line shown to the operator under the question. Each part is bounded (so the
/// line stays well under the service's 2048 characters for `context`) but its
/// characters are Claude Code's own (see [`clip`]).
pub(super) fn context_line(event: &HookEvent) -> String {
    let present = |s: &&str| !s.trim().is_empty();
    let mut parts = vec![format!(
        "Claude Code in {}",
        event
            .cwd
            .as_deref()
            .filter(present)
            .map(|c| clip_tail(c, 300))
            .unwrap_or_else(|| "an unknown directory".into())
    )];
    if let Some(s) = event.session_id.as_deref().filter(present) {
        parts.push(format!("session {}", clip(s, 100)));
    }
    if let Some(m) = event
        .permission_mode
        .as_deref()
        .filter(|m| present(m) && *m != "default")
    {
        parts.push(format!("mode {}", clip(m, 40)));
    }
    if event.agent_id.is_some()
        && let Some(a) = event.agent_type.as_deref().filter(present)
    {
        parts.push(format!("subagent {}", clip(a, 60)));
    }
    parts.join(" · ")
}
