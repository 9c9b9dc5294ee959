//! The question a hook event becomes: its parameters (the tool input byte for byte),
//! its briefing, its idempotency keys, and the check against the service's limits
//! that denies an input too large before anything is posted.

use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::client::{NewConfirmation, Suspend};
use crate::domain::limits::{MAX_BODY_BYTES, MAX_PARAM_KEYS};
use crate::domain::python;

use super::event::{HookEvent, context_line, owner_id};
use super::host::Host;
use super::{HookOptions, clean};

/// The briefing, the line the approvers read above the parameters. It names the tool
/// and repeats no value of the input: the service cuts a long briefing to its head, so
/// a briefing that quoted the command would show a long command's head alone, as if
/// it were all of it. The parameters block is the one place the call is shown, every
/// key visible and every cut marked. (A template, so braces in the tool's name are
/// doubled to stay literal. An input with a key named `tool` or `params` makes the
/// service fall back to its own `<tool> with: k=v` briefing, as Python's `str.format`
/// would; nothing here can change that without changing the input.)
pub(super) fn briefing_template(host: Host, tool: &str) -> String {
    let tool = tool.replace('{', "{{").replace('}', "}}");
    format!(
        "{} asks to use {tool} with the parameters below.",
        host.display()
    )
}

pub(super) fn sha256_hex(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    hex::encode(h.finalize())
}

/// The idempotency key of the first attempt. With a `tool_use_id` it names that one
/// tool call; without (Claude Code's and Codex's `PermissionRequest`, Cursor's shell
/// and MCP events) it is a digest of the whole event, so a rerun of the same hook finds
/// the same request. Each host's keys are its own (`claude-`, `codex-`, ...).
pub fn base_key(
    event: &HookEvent,
    raw_event: &[u8],
    owner: Option<&str>,
    route: Option<&str>,
) -> String {
    let owner = owner.unwrap_or("").as_bytes();
    let route = route.unwrap_or("").as_bytes();
    // Claude Code's keys are derived as before other hosts existed (a rerun by a newer
    // hook finds the question an older one posted); every other host's name its host.
    let host: &[&[u8]] = match event.host {
        Host::Claude => &[],
        other => &[other.flag().as_bytes()],
    };
    let digest = match &event.tool_use_id {
        Some(id) => sha256_hex(
            &[
                &[&b"claude-hook/tool-use/v1"[..]][..],
                host,
                &[
                    event.session_id.as_deref().unwrap_or("").as_bytes(),
                    id.as_bytes(),
                    owner,
                    route,
                ],
            ]
            .concat(),
        ),
        None => sha256_hex(
            &[
                &[&b"claude-hook/event/v1"[..]][..],
                host,
                &[raw_event, owner, route],
            ]
            .concat(),
        ),
    };
    format!("{}-{}", event.host.flag(), &digest[..40])
}

/// The key after stepping over an earlier, already decided request `stale_id`:
/// deterministic, so every rerun walks the same chain to the same open request.
pub(super) fn next_key(host: Host, key: &str, stale_id: &str) -> String {
    let digest = sha256_hex(&[b"claude-hook/next/v1", key.as_bytes(), stale_id.as_bytes()]);
    format!("{}-{}", host.flag(), &digest[..40])
}

pub(super) fn random_key(host: Host) -> String {
    format!(
        "{}-r-{}",
        host.flag(),
        crate::domain::ids::CallbackToken::generate().as_str()
    )
}

/// `params` for the request: the tool input exactly as the host wrote it, byte for
/// byte (key order, number spelling and escapes included), so what the approvers see
/// and what `args_hash` covers is the call that runs. A non-object, which the API does
/// not take as `params`, is wrapped as `{"input": ...}`, its text unchanged.
pub fn params_for(tool_input: &RawValue) -> Result<Box<RawValue>, String> {
    let raw = tool_input.get().trim();
    let whole = if raw.starts_with('{') {
        raw.to_owned()
    } else {
        format!("{{\"input\": {raw}}}")
    };
    RawValue::from_string(whole).map_err(|e| format!("the tool input is not valid JSON: {e}"))
}

/// Everything of the create body but the idempotency key.
pub(super) struct Request {
    pub(super) host: Host,
    tool: String,
    pub(super) params: Box<RawValue>,
    owner_id: Option<String>,
    pub(super) template: String,
    context: String,
    timeout_seconds: f64,
    route: Option<String>,
    pub(super) base_key: String,
}

impl Request {
    /// The request for `event`, or the deny message when the service could not take
    /// its input whole.
    ///
    /// Checked here, before anything is sent, against the service's own limits (the
    /// body size and the key count, with its own parser), so Claude Code is told the
    /// size and the limit rather than a bare 413, and so the question is never posted
    /// shortened: an approval of a head would run the tail unseen.
    pub(super) fn new(
        opts: &HookOptions,
        event: &HookEvent,
        raw_event: &[u8],
        timeout_seconds: f64,
        env: &(dyn Fn(&str) -> Option<String> + Sync),
    ) -> Result<Request, String> {
        let tool_name = clean(&event.tool_name, 128);
        let params = params_for(&event.tool_input).map_err(|e| {
            format!("Permission denied: hitl-telegram cannot send this {tool_name} call for approval ({e}).")
        })?;
        let owner_id = owner_id(opts.owner_from, event, env);
        let request = Request {
            tool: event.tool_name.clone(),
            params,
            host: event.host,
            template: briefing_template(event.host, &event.tool_name),
            context: context_line(event),
            timeout_seconds,
            route: opts.route.clone(),
            base_key: base_key(event, raw_event, owner_id.as_deref(), opts.route.as_deref()),
            owner_id,
        };
        // Every later key (`next_key`, `random_key`) is no longer than the first, so
        // this is the largest body the run sends.
        let body_bytes = request.body(&request.base_key).len();
        if body_bytes > MAX_BODY_BYTES {
            return Err(format!(
                "Permission denied: this {tool_name} call is too large to ask about on \
                 Telegram: its input is {} bytes, and the request carrying it would be \
                 {body_bytes} bytes, over the {MAX_BODY_BYTES} bytes ({} KiB) the \
                 hitl-telegram service takes. The input is never shortened for approval, \
                 so nothing was asked. Split the work into smaller calls.",
                event.tool_input.get().len(),
                MAX_BODY_BYTES / 1024
            ));
        }
        let keys = python::json::parse_object(request.params.get())
            .map_err(|e| {
                format!(
                    "Permission denied: the hitl-telegram service cannot take this \
                     {tool_name} call's input as it is ({}), so nothing was asked.",
                    clean(&e.to_string(), 300)
                )
            })?
            .count_keys();
        if keys > MAX_PARAM_KEYS {
            return Err(format!(
                "Permission denied: this {tool_name} call's input has {keys} keys, more \
                 than the {MAX_PARAM_KEYS} the hitl-telegram service takes, so it cannot \
                 be shown whole on Telegram and nothing was asked. Split the work into \
                 smaller calls."
            ));
        }
        Ok(request)
    }

    /// How long the approvers get.
    pub(super) fn timeout_seconds(&self) -> f64 {
        self.timeout_seconds
    }

    pub(super) fn body(&self, key: &str) -> String {
        NewConfirmation {
            tool: &self.tool,
            params: &self.params,
            owner_id: self.owner_id.as_deref(),
            template: Some(&self.template),
            context: Some(&self.context),
            timeout_seconds: Some(self.timeout_seconds),
            route: self.route.as_deref(),
            window_seconds: None,
            allow_edit: false,
            args_schema: None,
            server: None,
            annotations: None,
            grant: None,
            wait: Suspend,
            idempotency_key: key,
        }
        .to_json()
    }
}
