//! The calls this hook let through, waiting for their host's after event to say what
//! became of them.
//!
//! A `PermissionRequest` event (Claude Code's, Codex's) or Cursor's shell event carries
//! no id of the call, and its idempotency key is a digest of the whole event (see
//! [`base_key`](super::base_key)), which an after event cannot rebuild; re-posting a
//! key to find the request would ask the operator anew whenever the key is not there.
//! So the run that allows a call writes down the confirmation's id, and the after event
//! of the same call takes it (see [`call_keys`]).
//!
//! Only ids are written (never a token or a parameter), in a directory only its user
//! may read. An entry no after event took (the host was stopped before the call ran,
//! or reports no such event: Codex after a failure) is dropped after a day.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::domain::args_hash::ArgsHash;

use super::HookEvent;
use super::host::Host;
use super::request::{params_for, sha256_hex};

/// How long an entry waits for its post event.
const KEEP: Duration = Duration::from_secs(24 * 3600);

/// Where the entries live: `--state-dir` (or `HITL_HOOK_STATE_DIR`), else, for Claude
/// Code, `HITL_CLAUDE_HOOK_STATE_DIR` as before `hook` existed, else
/// `$XDG_STATE_HOME/hitl-telegram/<host>-hook`, else
/// `~/.local/state/hitl-telegram/<host>-hook`; `None` when none is known.
pub(super) fn state_dir(
    host: Host,
    given: Option<&Path>,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Option<PathBuf> {
    if let Some(dir) = given {
        return Some(dir.to_owned());
    }
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    if host == Host::Claude
        && let Some(dir) = set("HITL_CLAUDE_HOOK_STATE_DIR")
    {
        return Some(dir);
    }
    set("XDG_STATE_HOME")
        .or_else(|| set("HOME").map(|home| home.join(".local/state")))
        .map(|base| {
            base.join("hitl-telegram")
                .join(format!("{}-hook", host.flag()))
        })
}

/// The keys the tool call `event` may be noted under, the one to note it under first:
/// its `tool_use_id`'s if it has one, then the one of its session, turn, tool and input
/// hash. An after event may have a `tool_use_id` its before event lacked, so it looks
/// under both, and finds the call whichever way it was noted.
///
/// One empty file per allowed call, `<state dir>/<call key>/<time>-<id>`. The call key
/// is the tool call's `tool_use_id` when the event has one, otherwise the session, the
/// turn (where the host names one), the tool and the args hash of its input (the
/// service's own hash, so an after event whose input is spelled differently still
/// matches; the part of it both events carry, where they differ). Identical calls in
/// one turn are taken oldest first, in the order the host runs them, and removing the
/// file is the claim, so two after events never report the same confirmation.
pub(super) fn call_keys(event: &HookEvent) -> Vec<String> {
    let session = event.session_id.as_deref().unwrap_or("").as_bytes();
    let turn = event.turn_id.as_deref().unwrap_or("").as_bytes();
    let mut keys = Vec::with_capacity(2);
    if let Some(id) = &event.tool_use_id {
        keys.push(sha256_hex(&[
            b"claude-hook/ledger/tool-use/v2",
            event.host.flag().as_bytes(),
            session,
            id.as_bytes(),
        ]));
    }
    // The service's hash of the parameters it was asked about, so the key does not
    // depend on how the host spaced or ordered the input's JSON; an input the hash
    // refuses (the service refused it too) falls back to its text.
    let content = event.match_input.as_deref().unwrap_or(&event.tool_input);
    let input = params_for(content)
        .ok()
        .and_then(|p| ArgsHash::of_json(p.get()).ok())
        .map_or_else(
            || content.get().trim().to_owned(),
            |h| h.as_str().to_owned(),
        );
    keys.push(sha256_hex(&[
        b"claude-hook/ledger/input/v2",
        event.host.flag().as_bytes(),
        session,
        turn,
        event.tool_name.as_bytes(),
        input.as_bytes(),
    ]));
    keys.into_iter().map(|k| k[..40].to_owned()).collect()
}

/// Notes the call `event` names as allowed by the confirmation `id`.
pub(super) fn note(dir: &Path, event: &HookEvent, id: &str) -> Result<(), String> {
    let keys = call_keys(event);
    remember(dir, &keys[0], id)
}

/// Takes the call `event` names: its confirmation's id, if this hook let it through.
pub(super) fn take_call(dir: &Path, event: &HookEvent) -> Option<String> {
    call_keys(event).iter().find_map(|key| take(dir, key))
}

/// Writes down that the call `key` was allowed as the confirmation `id`.
fn remember(dir: &Path, key: &str, id: &str) -> Result<(), String> {
    // The id becomes part of a file name: only the service's own form is taken.
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "the service's id {id:?} is not one this hook can keep"
        ));
    }
    forget_old(dir);
    let calls = dir.join(key);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let entry = calls.join(format!("{nanos:024}-{id}"));
    // Twice: a post event that just took the last entry removes the emptied directory,
    // which may happen between making it and writing into it.
    let mut last = None;
    for _ in 0..2 {
        if let Err(e) = private_dir(&calls) {
            last = Some(e);
            continue;
        }
        match std::fs::write(&entry, b"") {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(format!(
        "cannot write to {}: {}",
        calls.display(),
        last.map_or_else(String::new, |e| e.to_string())
    ))
}

/// Takes the oldest entry of the call `key`: its confirmation id, or `None` when this
/// hook let no such call through (or another post event took it first).
fn take(dir: &Path, key: &str) -> Option<String> {
    let calls = dir.join(key);
    let mut names: Vec<String> = std::fs::read_dir(&calls)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    let taken = names.into_iter().find_map(|name| {
        // Removing is the claim: of two runs, one succeeds.
        std::fs::remove_file(calls.join(&name)).ok()?;
        name.split_once('-').map(|(_, id)| id.to_owned())
    });
    // Fails, harmlessly, while other entries wait.
    let _ = std::fs::remove_dir(&calls);
    taken
}

/// The directory and its parents, made readable by their user only.
fn private_dir(path: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(path)
}

/// Drops the entries older than [`KEEP`] and the directories they leave empty.
fn forget_old(dir: &Path) {
    let Ok(calls) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    for call in calls.flatten() {
        let path = call.path();
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age > KEEP);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let _ = std::fs::remove_dir(&path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::parse_event;

    fn event(json: &str) -> HookEvent {
        parse_event(json.as_bytes()).unwrap()
    }

    #[test]
    fn a_post_event_finds_the_call_by_session_tool_and_input_however_its_json_is_spelled() {
        let dir = tempfile::tempdir().unwrap();
        let asked = event(
            r#"{"hook_event_name":"PermissionRequest","session_id":"s1","tool_name":"Bash",
                "tool_input":{"command":"ls","description":"list"},"permission_suggestions":[]}"#,
        );
        let ran = r#"{"hook_event_name":"PostToolUse","session_id":"s1","tool_name":"Bash",
                "tool_input":{ "description": "list", "command": "ls" },
                "tool_use_id":"toolu_1","tool_response":{"stdout":"a"}}"#;
        note(dir.path(), &asked, "cf_1").unwrap();
        for other in [
            r#"{"session_id":"s2","tool_name":"Bash","tool_input":{"command":"ls","description":"list"}}"#,
            r#"{"session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls -a","description":"list"}}"#,
            r#"{"session_id":"s1","tool_name":"Read","tool_input":{"command":"ls","description":"list"}}"#,
        ] {
            assert_eq!(take_call(dir.path(), &event(other)), None, "{other}");
        }
        assert_eq!(take_call(dir.path(), &event(ran)).as_deref(), Some("cf_1"));
        assert_eq!(take_call(dir.path(), &event(ran)), None, "taken once");
    }

    #[test]
    fn a_call_noted_by_its_tool_use_id_is_found_by_it_first() {
        let dir = tempfile::tempdir().unwrap();
        let asked = event(
            r#"{"session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"toolu_2"}"#,
        );
        let same_input_other_call = event(
            r#"{"session_id":"s1","tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"toolu_3"}"#,
        );
        note(dir.path(), &asked, "cf_2").unwrap();
        assert_eq!(take_call(dir.path(), &same_input_other_call), None);
        assert_eq!(take_call(dir.path(), &asked).as_deref(), Some("cf_2"));
    }

    #[test]
    fn identical_calls_are_taken_oldest_first_and_each_once() {
        let dir = tempfile::tempdir().unwrap();
        remember(dir.path(), "k", "cf_1").unwrap();
        std::thread::sleep(Duration::from_millis(2));
        remember(dir.path(), "k", "cf_2").unwrap();
        assert_eq!(take(dir.path(), "k").as_deref(), Some("cf_1"));
        assert_eq!(take(dir.path(), "k").as_deref(), Some("cf_2"));
        assert_eq!(take(dir.path(), "k"), None);
        assert_eq!(take(dir.path(), "never"), None);
        assert!(
            !dir.path().join("k").exists(),
            "the emptied directory is gone"
        );
    }

    #[test]
    fn an_id_that_is_no_file_name_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        assert!(remember(dir.path(), "k", "../x").is_err());
        assert!(remember(dir.path(), "k", "").is_err());
    }

    #[test]
    fn the_state_dir_follows_xdg_then_home() {
        let env = |k: &str| match k {
            "HOME" => Some("/home/u".to_owned()),
            _ => None,
        };
        assert_eq!(
            state_dir(Host::Claude, None, &env).unwrap(),
            PathBuf::from("/home/u/.local/state/hitl-telegram/claude-hook")
        );
        let xdg = |k: &str| (k == "XDG_STATE_HOME").then(|| "/s".to_owned());
        assert_eq!(
            state_dir(Host::Claude, None, &xdg).unwrap(),
            PathBuf::from("/s/hitl-telegram/claude-hook")
        );
        assert_eq!(state_dir(Host::Claude, None, &|_| None), None);
        assert_eq!(
            state_dir(Host::Gemini, None, &env).unwrap(),
            PathBuf::from("/home/u/.local/state/hitl-telegram/gemini-hook")
        );
        let old = |k: &str| (k == "HITL_CLAUDE_HOOK_STATE_DIR").then(|| "/c".to_owned());
        assert_eq!(
            state_dir(Host::Claude, None, &old).unwrap(),
            PathBuf::from("/c")
        );
    }
}
