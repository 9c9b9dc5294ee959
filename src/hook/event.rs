//! The hook event a host writes on stdin, as every host's adapter reads it, and what of
//! it the approvers read: the owner it names and the context line under the question,
//! each part bounded but with the host's own characters.

use std::io::Read;

use serde_json::value::RawValue;

use crate::domain::limits::MAX_BODY_BYTES;

use super::host::Host;
use super::{MAX_EVENT_BYTES, OwnerFrom, clean};

/// One hook event, whichever host sent it: what every host's adapter (`hosts`) reads
/// out of its own event, and all the rest of the hook works on.
#[derive(Debug)]
pub struct HookEvent {
    /// Which host sent it.
    pub host: Host,
    /// The host's own name of the event (`PermissionRequest`, `beforeShellExecution`,
    /// `BeforeTool`, ...), for the answer, which some hosts want named.
    pub name: String,
    /// Asked before the call runs, or told after it ran.
    pub stage: Stage,
    pub session_id: Option<String>,
    /// The turn (Codex's `turn_id`, Cursor's `generation_id`), where the host has one.
    pub turn_id: Option<String>,
    pub cwd: Option<String>,
    pub permission_mode: Option<String>,
    pub tool_name: String,
    /// The parameters the approvers are asked about, byte for byte as the host wrote
    /// them (see [`params_for`](super::params_for)).
    pub tool_input: Box<RawValue>,
    /// What names the call's content in both its before and its after event, when the
    /// two spell it differently (Cursor's shell: the `command` alone); else the input.
    pub match_input: Option<Box<RawValue>>,
    /// The host's id of this one tool call, where it has one.
    pub tool_use_id: Option<String>,
    /// The subagent that made the call, where the host says.
    pub subagent: Option<String>,
    /// More for the context line under the question, already bounded (the MCP server
    /// a Cursor call goes to, the sandbox a Codex command asks to leave, ...).
    pub context: Vec<String>,
    /// After the call: the tool's response (as text) when it ran, or its error.
    pub ran: Option<Ran>,
    /// After the call: how long it ran, where the host says (Cursor).
    pub duration_ms: Option<u64>,
}

impl HookEvent {
    /// The event `name` of `host` about `tool` with `input`, nothing else known yet:
    /// what each host's adapter fills in.
    pub(super) fn of(
        host: Host,
        name: &str,
        stage: Stage,
        tool_name: String,
        tool_input: Box<RawValue>,
    ) -> HookEvent {
        HookEvent {
            host,
            name: name.to_owned(),
            stage,
            session_id: None,
            turn_id: None,
            cwd: None,
            permission_mode: None,
            tool_name,
            tool_input,
            match_input: None,
            tool_use_id: None,
            subagent: None,
            context: Vec::new(),
            ran: None,
            duration_ms: None,
        }
    }
}

/// Before or after the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The call waits for the decision.
    Before,
    /// The call ran (or failed); its outcome is reported.
    After,
}

/// What a host's after event says became of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ran {
    /// It ran; the tool's response, as text, if the host gave one.
    Executed(Option<String>),
    /// It failed, with the host's error text.
    Failed(String),
    /// It did not run after all (the host, or another of its hooks, refused it).
    NotExecuted(String),
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

/// At most `max` characters, an ellipsis marking the cut, and every character kept as
/// it is: for the context line the approvers read. The service shows invisible
/// characters (controls, bidi overrides) as visible escapes, which it can only do if
/// they reach it; a newline turned into a space here would show a directory that is
/// not the one the host runs in. The two exceptions are NUL and ESC, which the
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
/// characters are the host's own (see [`clip`]).
pub(super) fn context_line(event: &HookEvent) -> String {
    let present = |s: &&str| !s.trim().is_empty();
    let mut parts = vec![format!(
        "{} in {}",
        event.host.display(),
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
    if let Some(t) = event.turn_id.as_deref().filter(present) {
        parts.push(format!("turn {}", clip(t, 100)));
    }
    if let Some(m) = event
        .permission_mode
        .as_deref()
        .filter(|m| present(m) && *m != "default")
    {
        parts.push(format!("mode {}", clip(m, 40)));
    }
    if let Some(a) = event.subagent.as_deref().filter(present) {
        parts.push(format!("subagent {}", clip(a, 60)));
    }
    parts.extend(event.context.iter().cloned());
    parts.join(" · ")
}
