//! `hook install`: writes the hook into a host's settings file.
//!
//! The file is read as it is (keys in their order), the hook's entries are added or
//! brought up to date, and everything else is kept. An entry is the hook's own when its
//! command runs `hook --for <host>` (or, for Claude Code, `claude-hook`); any other
//! entry is left alone, so a second run changes nothing. A file that is not JSON, or
//! whose `hooks` is not shaped as the host documents, is refused and left untouched.
//! The file is replaced whole (written beside it, then renamed), keeping its mode.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use super::host::{Host, answer_margin};
use super::hosts::{claude, codex, cursor, gemini};

/// Which settings file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The project's, under the current directory.
    Project,
    /// The user's, under `$HOME`.
    User,
}

/// What `hook install` was asked to write.
#[derive(Debug, Clone)]
pub struct Install {
    pub host: Host,
    pub scope: Scope,
    pub url: String,
    pub token_env: String,
    pub route: Option<String>,
    /// The approvers' time (`--timeout`); the host's default when `None`.
    pub timeout_seconds: Option<f64>,
}

/// A JSON value that keeps its object's keys in the order the file has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(IndexMap<String, Json>),
}

/// How long an after event's hook may run: it never waits for a person, and gives up
/// reporting after 10 s.
const AFTER_TIMEOUT_SECONDS: u64 = 15;

/// The seconds the host is told it may let the hook run, beyond the approvers' time:
/// enough for the hook to read the timeout back and answer before the host's limit.
const HOST_SLACK_SECONDS: f64 = 20.0;

/// One hook entry the host's settings get.
struct Entry {
    event: &'static str,
    /// The tool pattern, for hosts that group hooks under a matcher.
    matcher: Option<&'static str>,
    /// In seconds.
    timeout: u64,
}

/// The settings file, relative to the project or the home directory.
fn relative_path(host: Host) -> &'static str {
    match host {
        Host::Claude => ".claude/settings.json",
        Host::Codex => ".codex/hooks.json",
        Host::Cursor => ".cursor/hooks.json",
        Host::Gemini => ".gemini/settings.json",
    }
}

/// Where the settings file is.
fn settings_path(
    host: Host,
    scope: Scope,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<PathBuf, String> {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty()).map(PathBuf::from);
    match scope {
        Scope::Project => std::env::current_dir()
            .map(|d| d.join(relative_path(host)))
            .map_err(|e| format!("cannot tell the current directory: {e}")),
        // Codex keeps the user's settings in $CODEX_HOME when it is set.
        Scope::User if host == Host::Codex && set("CODEX_HOME").is_some() => {
            Ok(set("CODEX_HOME").unwrap_or_default().join("hooks.json"))
        }
        Scope::User => set("HOME")
            .map(|home| home.join(relative_path(host)))
            .ok_or_else(|| "HOME is not set: cannot find the user's settings".to_owned()),
    }
}

/// The entries each host gets: its before events with the approvers' time and some
/// room, its after events with a short limit.
fn entries(host: Host, host_timeout: u64) -> Vec<Entry> {
    let before = |event, matcher| Entry {
        event,
        matcher,
        timeout: host_timeout,
    };
    let after = |event, matcher| Entry {
        event,
        matcher,
        timeout: AFTER_TIMEOUT_SECONDS,
    };
    // Gemini CLI's tools that change something (its shell, file writes and edits, MCP
    // tools): reads and searches are not asked about.
    const GEMINI_TOOLS: &str = "run_shell_command|write_file|replace|mcp_.*";
    match host {
        Host::Claude => vec![
            before(claude::PERMISSION_REQUEST, Some("*")),
            after(claude::POST_TOOL_USE, Some("*")),
            after(claude::POST_TOOL_USE_FAILURE, Some("*")),
        ],
        Host::Codex => vec![
            before(codex::PERMISSION_REQUEST, Some("*")),
            after(codex::POST_TOOL_USE, Some("*")),
        ],
        Host::Cursor => vec![
            before(cursor::BEFORE_SHELL, None),
            before(cursor::BEFORE_MCP, None),
            after(cursor::AFTER_SHELL, None),
            after(cursor::AFTER_MCP, None),
        ],
        Host::Gemini => vec![
            before(gemini::BEFORE_TOOL, Some(GEMINI_TOOLS)),
            after(gemini::AFTER_TOOL, Some(GEMINI_TOOLS)),
        ],
    }
}

/// A word for the shell the host runs the command with: as it is when it needs no
/// quoting, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The command line the host runs.
fn command_line(program: &Path, request: &Install, timeout: f64, host_timeout: u64) -> String {
    let mut words = vec![
        program.display().to_string(),
        "hook".into(),
        "--for".into(),
        request.host.flag().into(),
        "--url".into(),
        request.url.clone(),
        "--token-env".into(),
        request.token_env.clone(),
    ];
    if let Some(route) = &request.route {
        words.extend(["--route".into(), route.clone()]);
    }
    words.extend([
        "--timeout".into(),
        seconds_word(timeout),
        "--host-timeout".into(),
        host_timeout.to_string(),
    ]);
    words
        .iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

fn seconds_word(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{}", s as u64)
    } else {
        format!("{s}")
    }
}

/// Whether a command is this hook's, for `host`.
fn is_ours(command: &str, host: Host) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    let runs = |w: &[&str]| {
        w.windows(3)
            .any(|x| x[0] == "hook" && x[1] == "--for" && x[2] == host.flag())
    };
    let hitl = words.first().is_some_and(|p| p.contains("hitl-telegram"));
    hitl && (runs(&words) || (host == Host::Claude && words.get(1) == Some(&"claude-hook")))
}

/// Installs; returns what was done, for the person who ran it.
pub fn install(
    request: &Install,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<String, String> {
    let host = request.host;
    check_url(&request.url)?;
    if request.token_env.trim().is_empty()
        || !request
            .token_env
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!(
            "--token-env must name an environment variable (letters, digits, _), got {:?}",
            request.token_env
        ));
    }
    // Two minutes whatever the host: its own timeout is written to match.
    let timeout = request.timeout_seconds.unwrap_or(120.0);
    if !(1.0..=7.0 * 24.0 * 3600.0).contains(&timeout) {
        return Err(format!(
            "--timeout must be between 1 and 604800 seconds, got {timeout}"
        ));
    }
    let host_timeout = (timeout + HOST_SLACK_SECONDS).ceil() as u64;
    debug_assert!(timeout + 3.0 <= host_timeout as f64 - answer_margin(host_timeout as f64));
    let program =
        std::env::current_exe().map_err(|e| format!("cannot tell where this program is: {e}"))?;
    let command = command_line(&program, request, timeout, host_timeout);
    let path = settings_path(host, request.scope, env)?;
    let mut settings = read_settings(&path)?;
    let mut changes = Vec::new();
    for entry in entries(host, host_timeout) {
        let change = merge(&mut settings, host, &entry, &command, &path)?;
        changes.push((entry.event, change));
    }
    let changed = changes.iter().any(|(_, c)| *c != Change::Unchanged);
    if changed {
        write_settings(&path, &settings)?;
    }
    let mut out = String::new();
    let _ = writeln!(out, "{}:", path.display());
    for (event, change) in &changes {
        let _ = writeln!(out, "  {event}: {}", change.word());
    }
    if !changed {
        let _ = writeln!(
            out,
            "nothing changed: the hook was already installed as asked"
        );
    } else {
        let _ = writeln!(out, "the hook runs: {command}");
    }
    let _ = write!(
        out,
        "{} must start with {} set to the agent's token (the settings hold its name only).",
        host.display(),
        request.token_env
    );
    if let Some(note) = after_note(host, changed) {
        let _ = write!(out, "\n{note}");
    }
    Ok(out)
}

/// What the person still has to do in the host, if anything.
fn after_note(host: Host, changed: bool) -> Option<&'static str> {
    match host {
        Host::Codex if changed => Some(
            "Codex runs a new or changed hook only once you trust it: open /hooks in Codex \
             and trust the hitl-telegram entries.",
        ),
        Host::Gemini => Some(
            "Gemini CLI runs a project's hooks only in a trusted folder. Its own approval \
             policy still applies after a yes on Telegram.",
        ),
        _ => None,
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("--url is not a URL ({e}): {url:?}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "--url must start with http:// or https://, got {url:?}"
        ));
    }
    Ok(())
}

/// What became of one entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Added,
    Updated,
    Unchanged,
}

impl Change {
    fn word(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Updated => "updated (it ran an older command or timeout)",
            Change::Unchanged => "already there, unchanged",
        }
    }
}

fn read_settings(path: &Path) -> Result<IndexMap<String, Json>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(IndexMap::new()),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if text.trim().is_empty() {
        return Ok(IndexMap::new());
    }
    match serde_json::from_str::<Json>(&text) {
        Ok(Json::Object(map)) => Ok(map),
        Ok(_) => Err(format!(
            "{} is not a JSON object; it was left as it is",
            path.display()
        )),
        Err(e) => Err(format!(
            "cannot parse {} as JSON ({e}); it was left as it is (comments are not JSON)",
            path.display()
        )),
    }
}

fn write_settings(path: &Path, settings: &IndexMap<String, Json>) -> Result<(), String> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut text = serde_json::to_string_pretty(settings)
        .map_err(|e| format!("cannot write the settings: {e}"))?;
    text.push('\n');
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.hitl-telegram-{}", std::process::id()));
    std::fs::write(&temp, text).map_err(|e| format!("cannot write {}: {e}", temp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&temp, meta.permissions());
    }
    std::fs::rename(&temp, path).map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        format!("cannot replace {}: {e}", path.display())
    })
}

/// Adds or updates the hook's entry for `entry.event`.
fn merge(
    settings: &mut IndexMap<String, Json>,
    host: Host,
    entry: &Entry,
    command: &str,
    path: &Path,
) -> Result<Change, String> {
    let shape = |what: &str| {
        format!(
            "{}: {what}, not as {} documents it; it was left as it is",
            path.display(),
            host.display()
        )
    };
    if host == Host::Cursor && !settings.contains_key("version") {
        settings.insert("version".into(), Json::Number(1.into()));
    }
    let hooks = settings
        .entry("hooks".to_owned())
        .or_insert_with(|| Json::Object(IndexMap::new()));
    let Json::Object(hooks) = hooks else {
        return Err(shape("\"hooks\" is not an object"));
    };
    let list = hooks
        .entry(entry.event.to_owned())
        .or_insert_with(|| Json::Array(Vec::new()));
    let Json::Array(list) = list else {
        return Err(shape(&format!(
            "\"hooks\".\"{}\" is not a list",
            entry.event
        )));
    };
    let wanted = handler(host, command, entry.timeout);
    // Cursor lists handlers directly; the others group them under a matcher.
    let grouped = host != Host::Cursor;
    for item in list.iter_mut() {
        let Json::Object(item) = item else {
            return Err(shape(&format!(
                "an entry of \"{}\" is not an object",
                entry.event
            )));
        };
        let candidates: Vec<&mut IndexMap<String, Json>> = if grouped {
            match item.get_mut("hooks") {
                Some(Json::Array(hs)) => hs
                    .iter_mut()
                    .filter_map(|h| match h {
                        Json::Object(h) => Some(h),
                        _ => None,
                    })
                    .collect(),
                Some(_) => {
                    return Err(shape(&format!(
                        "a \"hooks\" in \"{}\" is not a list",
                        entry.event
                    )));
                }
                None => Vec::new(),
            }
        } else {
            vec![item]
        };
        for found in candidates {
            let theirs = match found.get("command") {
                Some(Json::String(c)) => c.clone(),
                _ => continue,
            };
            if !is_ours(&theirs, host) {
                continue;
            }
            let mut changed = false;
            for (k, v) in wanted.iter() {
                if found.get(k) != Some(v) {
                    found.insert(k.clone(), v.clone());
                    changed = true;
                }
            }
            return Ok(if changed {
                Change::Updated
            } else {
                Change::Unchanged
            });
        }
    }
    let added = if grouped {
        let mut group = IndexMap::new();
        if let Some(m) = entry.matcher {
            group.insert("matcher".to_owned(), Json::String(m.to_owned()));
        }
        group.insert("hooks".to_owned(), Json::Array(vec![Json::Object(wanted)]));
        Json::Object(group)
    } else {
        Json::Object(wanted)
    };
    list.push(added);
    Ok(Change::Added)
}

/// One handler as the host documents it.
fn handler(host: Host, command: &str, timeout_seconds: u64) -> IndexMap<String, Json> {
    let mut h = IndexMap::new();
    h.insert("type".to_owned(), Json::String("command".into()));
    h.insert("command".to_owned(), Json::String(command.to_owned()));
    match host {
        // Gemini CLI counts milliseconds and names its hooks (for /hooks disable).
        Host::Gemini => {
            h.insert("name".to_owned(), Json::String("hitl-telegram".into()));
            h.insert(
                "timeout".to_owned(),
                Json::Number((timeout_seconds * 1000).into()),
            );
        }
        // Cursor lets the action through when a hook fails unless told otherwise.
        Host::Cursor => {
            h.insert("timeout".to_owned(), Json::Number(timeout_seconds.into()));
            h.insert("failClosed".to_owned(), Json::Bool(true));
        }
        Host::Claude | Host::Codex => {
            h.insert("timeout".to_owned(), Json::Number(timeout_seconds.into()));
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_word_is_quoted_only_when_it_must_be() {
        assert_eq!(
            shell_word("/usr/bin/hitl-telegram"),
            "/usr/bin/hitl-telegram"
        );
        assert_eq!(shell_word("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
        assert_eq!(shell_word("/home/a b/x"), "'/home/a b/x'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
    }

    #[test]
    fn the_hooks_own_commands_are_recognised_and_no_other() {
        assert!(is_ours(
            "/bin/hitl-telegram hook --for codex --url u",
            Host::Codex
        ));
        assert!(!is_ours(
            "/bin/hitl-telegram hook --for cursor --url u",
            Host::Codex
        ));
        assert!(is_ours(
            "hitl-telegram claude-hook --url u --token-env T",
            Host::Claude
        ));
        assert!(!is_ours("./my-hook.sh hook --for codex", Host::Codex));
        assert!(!is_ours("hitl-telegram claude-hook", Host::Gemini));
    }

    #[test]
    fn keys_keep_their_order_and_numbers_their_spelling() {
        let text = r#"{"z":1,"a":{"y":true,"b":null},"m":[1.5,"x"]}"#;
        let v: Json = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&v).unwrap(), text);
    }
}
