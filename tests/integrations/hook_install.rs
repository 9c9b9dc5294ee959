//! `hook install --for <host>`: the real binary writing each host's settings file, as a
//! person runs it in a project (or for their user), over the files those hosts have.

use std::path::Path;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");

/// A settings file as each host has it before the hook is installed.
fn existing(host: &str) -> (&'static str, String) {
    let fixture = |name: &str| {
        let path = format!(
            "{}/tests/fixtures/hooks/{host}/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    match host {
        "claude" => (
            ".claude/settings.json",
            json!({
                "permissions": {"allow": ["Bash(cargo test:*)"], "deny": ["Read(./.env)"]},
                "hooks": {"PostToolUse": [{"matcher": "Write|Edit",
                    "hooks": [{"type": "command", "command": "npx prettier --write"}]}]},
                "model": "opus"
            })
            .to_string(),
        ),
        "codex" => (".codex/hooks.json", fixture("existing_hooks.json")),
        "cursor" => (".cursor/hooks.json", fixture("existing_hooks.json")),
        "gemini" => (".gemini/settings.json", fixture("existing_settings.json")),
        _ => unreachable!(),
    }
}

/// Runs `hook install` in `dir` (a project) with `home` as $HOME.
fn install(dir: &Path, home: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN)
        .args(["hook", "install"])
        .args(args)
        .args([
            "--url",
            "http://127.0.0.1:8080",
            "--token-env",
            "HITL_AGENT_TOKEN",
        ])
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("CODEX_HOME")
        .output()
        .expect("run hook install");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every key of `before` is in `after` with the same value, but for the lists of
/// `hooks`, which keep every entry they had (in order) and may gain more.
fn keeps_everything(before: &Value, after: &Value, at: &str) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let there = a.get(k).unwrap_or_else(|| panic!("{at}.{k} was lost"));
                keeps_everything(v, there, &format!("{at}.{k}"));
            }
        }
        (Value::Array(b), Value::Array(a)) if at.contains(".hooks.") => {
            assert!(a.len() >= b.len(), "{at} lost entries");
            assert_eq!(&a[..b.len()], &b[..], "{at} changed its entries");
        }
        _ => assert_eq!(before, after, "{at} changed"),
    }
}

/// The hook's command lines for `event` in a host's settings.
fn commands(host: &str, settings: &Value, event: &str) -> Vec<(String, Value)> {
    let list = settings["hooks"][event]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let handlers: Vec<Value> = if host == "cursor" {
        list
    } else {
        list.iter()
            .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    handlers
        .into_iter()
        .filter(|h| {
            h["command"]
                .as_str()
                .is_some_and(|c| c.contains("hitl-telegram"))
        })
        .map(|h| (h["command"].as_str().unwrap().to_owned(), h))
        .collect()
}

#[test]
fn install_merges_into_each_hosts_settings_keeping_every_key_and_is_idempotent() {
    let events: &[(&str, &[&str])] = &[
        (
            "claude",
            &["PermissionRequest", "PostToolUse", "PostToolUseFailure"],
        ),
        ("codex", &["PermissionRequest", "PostToolUse"]),
        (
            "cursor",
            &[
                "beforeShellExecution",
                "beforeMCPExecution",
                "afterShellExecution",
                "afterMCPExecution",
            ],
        ),
        ("gemini", &["BeforeTool", "AfterTool"]),
    ];
    for (host, events) in events {
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let (relative, text) = existing(host);
        let path = project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        let (code, out, err) = install(project.path(), home.path(), &["--for", host, "--project"]);
        assert_eq!(code, 0, "{host}: {out}{err}");
        for event in *events {
            assert!(out.contains(&format!("{event}: added")), "{host}: {out}");
        }
        let before: Value = serde_json::from_str(&text).unwrap();
        let after: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        keeps_everything(&before, &after, "");
        // Keys stay in the order the file had them.
        let order = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            order(&after)[..order(&before).len()],
            order(&before)[..],
            "{host}"
        );
        for event in *events {
            let ours = commands(host, &after, event);
            assert_eq!(ours.len(), 1, "{host} {event}: {after}");
            let (command, handler) = &ours[0];
            assert!(command.starts_with(BIN), "{command}");
            assert!(
                command.contains(&format!(
                    "hook --for {host} --url http://127.0.0.1:8080 --token-env HITL_AGENT_TOKEN"
                )),
                "{command}"
            );
            assert!(!command.contains("token-agent"), "no token is written");
            let timeout = handler["timeout"].as_u64().unwrap();
            let before_event =
                !event.starts_with("Post") && !event.starts_with("after") && *event != "AfterTool";
            if before_event {
                // The host lets the hook run longer than the approvers' two minutes.
                let seconds = if *host == "gemini" {
                    timeout / 1000
                } else {
                    timeout
                };
                assert!(seconds > 120, "{host} {event}: {handler}");
                assert!(
                    command.contains("--timeout 120 --host-timeout"),
                    "{command}"
                );
            }
            if *host == "cursor" {
                assert_eq!(handler["failClosed"], true, "{handler}");
            }
        }
        if *host == "cursor" {
            assert_eq!(after["version"], 1);
        }
        // Again: nothing changes, byte for byte.
        let written = std::fs::read(&path).unwrap();
        let (code, out, err) = install(project.path(), home.path(), &["--for", host]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("nothing changed"), "{host}: {out}");
        assert_eq!(std::fs::read(&path).unwrap(), written, "{host}");
        // Another timeout updates the hook's own entries in place and adds none.
        let (code, out, _) = install(
            project.path(),
            home.path(),
            &["--for", host, "--timeout", "300"],
        );
        assert_eq!(code, 0);
        assert!(out.contains("updated"), "{out}");
        let again: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for event in *events {
            assert_eq!(commands(host, &again, event).len(), 1, "{host} {event}");
        }
    }
}

#[test]
fn install_refuses_a_settings_file_it_cannot_parse_and_leaves_it_untouched() {
    for (host, relative) in [
        ("claude", ".claude/settings.json"),
        ("codex", ".codex/hooks.json"),
        ("cursor", ".cursor/hooks.json"),
        ("gemini", ".gemini/settings.json"),
    ] {
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let path = project.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for text in [
            "{ // a comment\n \"hooks\": {} }",
            "{\"hooks\": []}",
            "{\"hooks\": {\"PermissionRequest\": {}, \"beforeShellExecution\": 3, \"BeforeTool\": 1}}",
        ] {
            std::fs::write(&path, text).unwrap();
            let (code, out, err) = install(project.path(), home.path(), &["--for", host]);
            assert_eq!(code, 1, "{host} {text}: {out}");
            assert!(err.contains("left as it is"), "{err}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        }
    }
}

#[test]
fn install_for_the_user_writes_under_home_and_makes_the_directory() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (code, out, err) = install(project.path(), home.path(), &["--for", "gemini", "--user"]);
    assert_eq!(code, 0, "{err}");
    let path = home.path().join(".gemini/settings.json");
    assert!(out.contains(&path.display().to_string()), "{out}");
    let settings: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(commands("gemini", &settings, "BeforeTool").len(), 1);
    assert!(!project.path().join(".gemini").exists());
}
