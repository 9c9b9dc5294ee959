use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::domain::limits::MAX_BODY_BYTES;
use crate::domain::python;

use super::decide::decided_during_run;
use super::event::{clip, clip_tail, context_line, last_component};
use super::request::{briefing_template, next_key, random_key};
use super::*;

fn event(json: &str) -> HookEvent {
    parse_event(json.as_bytes()).expect("event")
}

const BASH: &str = r#"{"session_id":"s1","transcript_path":"/t.jsonl","cwd":"/home/alice/billing-api","permission_mode":"default","hook_event_name":"PermissionRequest","tool_name":"Bash","tool_input":{"command":"rm -rf build","timeout":120000},"permission_suggestions":[]}"#;

fn no_env(_: &str) -> Option<String> {
    None
}

#[test]
fn the_documented_event_parses() {
    let e = event(BASH);
    assert_eq!(e.tool_name, "Bash");
    assert_eq!(
        e.tool_input.get(),
        r#"{"command":"rm -rf build","timeout":120000}"#
    );
    assert_eq!(e.cwd.as_deref(), Some("/home/alice/billing-api"));
    assert!(e.tool_use_id.is_none());
}

#[test]
fn garbage_events_are_refused_with_a_reason() {
    for bad in [
        "",
        "  \n",
        "not json",
        "[]",
        "{}",
        r#"{"tool_name": "Bash"}"#,
        r#"{"tool_name": "", "tool_input": {}}"#,
        r#"{"tool_name": 3, "tool_input": {}}"#,
        r#"{"tool_name": "Bash", "tool_name": "Write", "tool_input": {}}"#,
        "{\"tool_name\": \"Bash\", \"tool_input\": {\"c\": \"\\ud800\"}}",
    ] {
        assert!(parse_event(bad.as_bytes()).is_err(), "{bad:?} was accepted");
    }
    assert!(parse_event(&[0xff, 0xfe, b'{']).is_err());
}

#[test]
fn read_event_refuses_more_than_one_mebibyte() {
    let big = vec![b' '; MAX_EVENT_BYTES + 1];
    let err = read_event(&big[..]).unwrap_err();
    assert!(err.contains("larger than 1024 KiB"), "{err}");
    assert_eq!(read_event(&b"{}"[..]).unwrap(), b"{}");
}

#[test]
fn params_are_the_tool_input_verbatim_and_non_objects_are_wrapped() {
    let e = event(BASH);
    let p = params_for(&e.tool_input).unwrap();
    assert_eq!(p.get(), r#"{"command":"rm -rf build","timeout":120000}"#);
    let raw = RawValue::from_string("[1, 123456789012345678901234567890]".into()).unwrap();
    assert_eq!(
        params_for(&raw).unwrap().get(),
        r#"{"input": [1, 123456789012345678901234567890]}"#
    );
    let raw = RawValue::from_string("\"ls\"".into()).unwrap();
    assert_eq!(params_for(&raw).unwrap().get(), r#"{"input": "ls"}"#);
    // Nothing is normalised: spacing, key order, escapes, a bidi override, a
    // newline and a number's spelling reach the service as Claude Code wrote them.
    let odd = "{ \"z\" : 1.50, \"command\": \"cat a\u{202e}txt.sh\\n\\u0007echo \\u00e9\" }";
    let raw = RawValue::from_string(odd.into()).unwrap();
    assert_eq!(params_for(&raw).unwrap().get(), odd);
}

fn options() -> HookOptions {
    HookOptions {
        host: Host::Claude,
        url: "http://127.0.0.1:9".into(),
        token_env: "T".into(),
        route: None,
        timeout_seconds: Some(120.0),
        host_timeout_seconds: None,
        fallback: Fallback::Ask,
        owner_from: OwnerFrom::User,
        state_dir: None,
        report_output: false,
        ignore_unknown_fields: false,
    }
}

/// A Write event whose content is `n` ASCII characters.
fn write_event(n: usize) -> String {
    json!({"session_id": "s1", "cwd": "/p", "hook_event_name": "PermissionRequest",
           "tool_name": "Write",
           "tool_input": {"file_path": "/p/a.txt", "content": "x".repeat(n)}})
    .to_string()
}

fn request_for(json: &str) -> Result<Request, String> {
    Request::new(&options(), &event(json), json.as_bytes(), 120.0, &no_env)
}

#[test]
fn an_input_is_sent_whole_up_to_the_services_body_limit_and_denied_past_it() {
    // Find the content length whose request body is exactly the limit.
    let probe = request_for(&write_event(1000)).unwrap();
    let overhead = probe.body(&probe.base_key).len() - 1000;
    let at_limit = MAX_BODY_BYTES - overhead;
    let fits = request_for(&write_event(at_limit)).expect("a body of exactly 64 KiB");
    assert_eq!(fits.body(&fits.base_key).len(), MAX_BODY_BYTES);
    let v: Value = serde_json::from_str(fits.params.get()).unwrap();
    assert_eq!(v["content"].as_str().unwrap().len(), at_limit);

    let over = write_event(at_limit + 1);
    let message = request_for(&over).err().expect("one byte over is denied");
    let input_bytes = event(&over).tool_input.get().len();
    assert!(message.starts_with("Permission denied: this Write call is too large"));
    assert!(
        message.contains(&format!("its input is {input_bytes} bytes"))
            && message.contains(&format!("would be {} bytes", MAX_BODY_BYTES + 1))
            && message.contains("over the 65536 bytes (64 KiB)")
            && message.contains("never shortened"),
        "{message}"
    );
}

#[test]
fn every_later_key_is_no_longer_than_the_first() {
    // The size check measures the body with the first key; a longer later key
    // could push a body that passed it over the limit.
    let e = event(BASH);
    let first = base_key(&e, BASH.as_bytes(), None, None);
    assert!(next_key(Host::Claude, &first, "cf_1").len() <= first.len());
    assert!(random_key(Host::Claude).len() <= first.len());
}

#[test]
fn inputs_the_service_would_refuse_are_denied_naming_why() {
    // Too many keys even when every value is short.
    let many: serde_json::Map<String, Value> =
        (0..1001).map(|i| (format!("k{i}"), json!(i))).collect();
    let e = json!({"tool_name": "mcp__x__y", "tool_input": many}).to_string();
    let message = request_for(&e).err().expect("too many keys");
    assert!(
        message.contains("has 1001 keys, more than the 1000"),
        "{message}"
    );
    // Deeper than the service's parser goes (serde_json alone would take it).
    let deep = format!(
        "{{\"tool_name\": \"Bash\", \"tool_input\": {{\"a\": {}{}}}}}",
        "[".repeat(70),
        "]".repeat(70)
    );
    let message = request_for(&deep).err().expect("too deep");
    assert!(
        message.contains("nesting deeper than 64 levels"),
        "{message}"
    );
    // At the key limit: asked.
    let ok: serde_json::Map<String, Value> =
        (0..1000).map(|i| (format!("k{i}"), json!(i))).collect();
    assert!(request_for(&json!({"tool_name": "t", "tool_input": ok}).to_string()).is_ok());
}

#[test]
fn the_briefing_names_the_tool_and_repeats_no_value() {
    let long = format!("{}; rm -rf /tmp/x", "echo a && ".repeat(600));
    let e = json!({"tool_name": "Bash", "tool_input": {"command": long}}).to_string();
    let r = request_for(&e).unwrap();
    let params = python::json::parse_object(r.params.get()).unwrap();
    let shown = crate::domain::briefing::render(Some(&r.template), "Bash", &params);
    assert_eq!(shown.fallback_reason, None);
    assert_eq!(
        shown.text,
        "Claude Code asks to use Bash with the parameters below."
    );
    // Braces in a tool's name stay literal.
    let t = briefing_template(Host::Claude, "mcp__a{b}__c{{");
    let shown = crate::domain::briefing::render(Some(&t), "mcp__a{b}__c{{", &params);
    assert_eq!(
        shown.text,
        "Claude Code asks to use mcp__a{b}__c{{ with the parameters below."
    );
}

#[test]
fn owner_comes_from_user_cwd_or_session() {
    let e = event(BASH);
    let env = |k: &str| (k == "USER").then(|| "alice".to_owned());
    assert_eq!(
        owner_id(OwnerFrom::User, &e, &env).as_deref(),
        Some("alice")
    );
    let logname = |k: &str| (k == "LOGNAME").then(|| "bob".to_owned());
    assert_eq!(
        owner_id(OwnerFrom::User, &e, &logname).as_deref(),
        Some("bob")
    );
    // No user variable: the project folder.
    assert_eq!(
        owner_id(OwnerFrom::User, &e, &no_env).as_deref(),
        Some("billing-api")
    );
    assert_eq!(
        owner_id(OwnerFrom::Cwd, &e, &env).as_deref(),
        Some("billing-api")
    );
    assert_eq!(
        owner_id(OwnerFrom::Session, &e, &env).as_deref(),
        Some("s1")
    );
    let odd = event(
        r#"{"cwd": "/srv/a\nb/", "tool_name": "Bash", "tool_input": {}, "session_id": "  "}"#,
    );
    assert_eq!(
        owner_id(OwnerFrom::Cwd, &odd, &no_env).as_deref(),
        Some("a b")
    );
    assert_eq!(owner_id(OwnerFrom::Session, &odd, &no_env), None);
}

#[test]
fn the_context_names_directory_session_and_unusual_modes() {
    let e = event(BASH);
    assert_eq!(
        context_line(&e),
        "Claude Code in /home/alice/billing-api · session s1"
    );
    let e = event(
        r#"{"cwd": "/p", "session_id": "s", "permission_mode": "acceptEdits", "agent_id": "a1", "agent_type": "Explore", "tool_name": "Bash", "tool_input": {}}"#,
    );
    assert_eq!(
        context_line(&e),
        "Claude Code in /p · session s · mode acceptEdits · subagent Explore"
    );
    let long = format!(
        r#"{{"cwd": "/{}x", "tool_name": "Bash", "tool_input": {{}}}}"#,
        "d".repeat(5000)
    );
    let line = context_line(&event(&long));
    assert!(line.chars().count() < 400 && line.ends_with("dx"), "{line}");
    // The directory's own characters, for the service to show as escapes: not a
    // space where Claude Code has a newline, nor a stripped bidi override.
    let odd = event(
        r#"{"cwd": "/srv/a\nb\u202e/", "session_id": " ", "tool_name": "Bash", "tool_input": {}}"#,
    );
    assert_eq!(context_line(&odd), "Claude Code in /srv/a\nb\u{202e}/");
}

#[test]
fn keys_are_stable_for_the_same_event_and_differ_otherwise() {
    let e = event(BASH);
    let k = base_key(&e, BASH.as_bytes(), Some("alice"), None);
    assert!(k.starts_with("claude-") && k.len() <= 128);
    // Pinned: a rerun by a newer hook must find the question an older one posted,
    // so the key's derivation does not change with how the input is sent.
    assert_eq!(k, "claude-5b52464ed8ff694357f1a81f885efc191a84713d");
    assert_eq!(k, base_key(&e, BASH.as_bytes(), Some("alice"), None));
    assert_ne!(k, base_key(&e, BASH.as_bytes(), Some("bob"), None));
    assert_ne!(k, base_key(&e, BASH.as_bytes(), Some("alice"), Some("ops")));
    let other = BASH.replace("rm -rf build", "rm -rf dist");
    assert_ne!(
        k,
        base_key(&event(&other), other.as_bytes(), Some("alice"), None)
    );
    // With a tool_use_id the key names that call, whatever else the event says.
    let a = r#"{"session_id":"s1","tool_use_id":"toolu_1","tool_name":"Bash","tool_input":{},"permission_mode":"default"}"#;
    let b = r#"{"session_id":"s1","tool_use_id":"toolu_1","tool_name":"Bash","tool_input":{},"permission_mode":"plan"}"#;
    assert_eq!(
        base_key(&event(a), a.as_bytes(), None, None),
        base_key(&event(b), b.as_bytes(), None, None)
    );
    assert_ne!(
        next_key(Host::Claude, &k, "cf_1"),
        next_key(Host::Claude, &k, "cf_2")
    );
    assert_eq!(
        next_key(Host::Claude, &k, "cf_1"),
        next_key(Host::Claude, &k, "cf_1")
    );
}

fn record(status: &str, via: &str, reason: &str) -> Value {
    json!({"id": "cf_x", "status": status, "via": via, "reason": reason,
           "allowed": status == "confirmed",
           "created_at": "2026-11-30T09:00:00.000Z", "expires_at": "2026-11-30T09:02:00.000Z",
           "decided_at": "2026-11-30T09:01:00.000Z"})
}

fn message(a: &Answer) -> String {
    let r = Host::Claude.answer("PermissionRequest", a.clone());
    let v: Value = serde_json::from_str(r.stdout.as_deref().unwrap()).unwrap();
    assert_eq!(
        v["hookSpecificOutput"]["hookEventName"],
        "PermissionRequest"
    );
    assert_eq!(v["hookSpecificOutput"]["decision"]["behavior"], "deny");
    v["hookSpecificOutput"]["decision"]["message"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn outcomes_map_to_decisions() {
    let allow = Host::Claude.answer(
        "PermissionRequest",
        verdict(&record("confirmed", "operator", "approved by Alice"), 120.0),
    );
    assert_eq!(
        serde_json::from_str::<Value>(allow.stdout.as_deref().unwrap()).unwrap(),
        json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                      "decision": {"behavior": "allow"}}})
    );
    assert_eq!(allow.exit_code, 0);
    assert_eq!(
        message(&verdict(
            &record("cancelled", "operator", "cancelled by Alice (@alice)"),
            120.0
        )),
        "Permission denied on Telegram: cancelled by Alice (@alice). The call was not executed; do not retry it as it is."
    );
    assert_eq!(
        message(&verdict(&record("timeout", "timeout", "x"), 5.0)),
        "Permission denied: no answer on Telegram within 120 s."
    );
    let m = message(&verdict(
        &record(
            "cancelled",
            "fail_closed",
            "not executed: the question could not be delivered to Telegram: Forbidden: bot was blocked by the user",
        ),
        120.0,
    ));
    assert_eq!(
        m,
        "Permission denied: the question could not be delivered to Telegram: Forbidden: bot was blocked by the user; hitl-telegram fails closed."
    );
    assert!(message(&verdict(&record("cancelled", "withdrawn", "w"), 1.0)).contains("withdrawn"));
    // A confirmed record that does not say allowed is not an approval.
    let mut odd = record("confirmed", "operator", "?");
    odd["allowed"] = json!(false);
    assert!(message(&verdict(&odd, 1.0)).contains("ended as confirmed"));
}

#[test]
fn seconds_read_naturally() {
    assert_eq!(seconds(120.0), "120 s");
    assert_eq!(seconds(0.3), "0.3 s");
    assert_eq!(seconds(1.2345), "1.235 s");
}

#[test]
fn a_decision_older_than_the_run_is_stale_by_the_services_clock() {
    let r = record("confirmed", "operator", "approved");
    let decided = OffsetDateTime::parse("2026-11-30T09:01:00Z", &Rfc3339).unwrap();
    let ago = |s: u64| {
        Instant::now()
            .checked_sub(Duration::from_secs(s))
            .expect("the monotonic clock is older than that")
    };
    // The service says it is 09:01:01: decided a second ago, and the run started
    // five seconds ago, so it was decided during the run.
    let now = decided + Duration::from_secs(1);
    assert!(decided_during_run(&r, Some(now), ago(5), decided));
    // Decided a second ago, but the run started just now: an earlier call's.
    assert!(!decided_during_run(&r, Some(now), Instant::now(), decided));
    // An hour before the service's now: earlier, whatever the local clock says.
    let later = decided + Duration::from_secs(3600);
    assert!(!decided_during_run(&r, Some(later), ago(5), decided));
    // No Date header: the local clock decides, with a little slack for skew.
    assert!(decided_during_run(&r, None, Instant::now(), decided));
    assert!(!decided_during_run(&r, None, Instant::now(), later));
    let mut undated = r.clone();
    undated["decided_at"] = Value::Null;
    assert!(!decided_during_run(&undated, Some(now), ago(5), decided));
}

#[test]
fn clean_removes_controls_clip_keeps_them_and_both_cut_visibly() {
    assert_eq!(clean(" a\u{0}b\nc ", 10), "a b c");
    assert_eq!(clean("abcdef", 4), "abc…");
    assert_eq!(clip_tail("/very/long/path", 6), "…/path");
    assert_eq!(clip(" a\u{7}b\nc ", 10), " a\u{7}b\nc ");
    assert_eq!(clip("abcdef", 4), "abc…");
    assert_eq!(clip("a\u{1b}[2J\u{0}b", 20), "a\\x1b[2J\\x00b");
    assert_eq!(clip_tail("/p/\u{1b}", 20), "/p/\\x1b");
    assert_eq!(last_component("/home/alice/proj/"), Some("proj".into()));
    assert_eq!(last_component("C:\\work\\proj"), Some("proj".into()));
    assert_eq!(last_component("/"), None);
}

#[test]
fn a_before_event_with_a_field_its_host_does_not_document_is_refused_unless_told() {
    let with_extra = BASH.replace("\"permission_suggestions\":[]", "\"run_as\":\"root\"");
    let err = Host::Claude
        .parse("PermissionRequest", with_extra.as_bytes(), true)
        .unwrap_err();
    assert!(
        err.contains("a field this hook does not know ('run_as')"),
        "{err}"
    );
    assert!(
        Host::Claude
            .parse("PermissionRequest", with_extra.as_bytes(), false)
            .is_ok()
    );
    // The documented event passes the strict reading.
    assert!(
        Host::Claude
            .parse("PermissionRequest", BASH.as_bytes(), true)
            .is_ok()
    );
}

#[test]
fn a_codex_sandbox_escalation_is_part_of_the_parameters_and_named_in_the_context() {
    let event = r#"{"session_id":"s","turn_id":"t","transcript_path":null,"cwd":"/p",
        "hook_event_name":"PermissionRequest","model":"gpt-5","permission_mode":"default",
        "tool_name":"Bash","tool_input":{"command":"curl https://x"},
        "approval_context":{"sandbox_permissions":"require_escalated","justification":"net"}}"#;
    let e = Host::Codex
        .parse("PermissionRequest", event.as_bytes(), true)
        .unwrap();
    assert_eq!(
        e.tool_input.get(),
        r#"{"command":"curl https://x","approval_context":{"sandbox_permissions":"require_escalated","justification":"net"}}"#
    );
    assert_eq!(
        context_line(&e),
        "Codex in /p · session s · turn t · sandbox: require_escalated"
    );
    // The after event names the command alone, which matches.
    assert_eq!(
        e.match_input.as_deref().unwrap().get(),
        r#"{"command":"curl https://x"}"#
    );
}

#[test]
fn the_approvers_time_never_outlasts_the_hosts_limit() {
    let mut o = options();
    o.host = Host::Gemini;
    o.timeout_seconds = None;
    assert_eq!(o.question_timeout().unwrap(), 50.0);
    // Gemini CLI stops a hook after 60 s: 60 less 5 of margin, less 3 to read it back.
    o.timeout_seconds = Some(300.0);
    assert_eq!(o.question_timeout().unwrap(), 52.0);
    o.timeout_seconds = Some(30.0);
    assert_eq!(o.question_timeout().unwrap(), 30.0);
    o.host_timeout_seconds = Some(3.0);
    assert!(o.question_timeout().unwrap_err().contains("no time to ask"));
    o.host = Host::Claude;
    o.host_timeout_seconds = None;
    o.timeout_seconds = None;
    assert_eq!(o.question_timeout().unwrap(), 120.0);
}

/// Every key of `ours` is one the host's documented answer has, with the same word
/// where the key is a verdict, and a string where it is free text.
fn same_shape(ours: &Value, documented: &Value, at: &str) {
    const VERDICTS: &[&str] = &[
        "hookEventName",
        "behavior",
        "permissionDecision",
        "permission",
        "decision",
    ];
    match (ours, documented) {
        (Value::Object(o), Value::Object(d)) => {
            for (k, v) in o {
                let dv = d
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k}: the host documents no such key"));
                if VERDICTS.contains(&k.as_str()) && v.is_string() {
                    assert_eq!(v, dv, "{at}.{k}");
                } else {
                    same_shape(v, dv, &format!("{at}.{k}"));
                }
            }
        }
        (Value::String(_), Value::String(_)) => {}
        _ => panic!("{at}: {ours} is not shaped as {documented}"),
    }
}

fn documented(path: &str) -> Value {
    let path = format!("{}/tests/fixtures/hooks/{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn every_answer_is_shaped_as_its_host_documents_it() {
    let deny = || Answer::Deny("Permission denied on Telegram: cancelled.".into());
    let cases = [
        (
            Host::Codex,
            "PermissionRequest",
            Answer::Allow,
            "codex/expected_permission_request_allow.json",
        ),
        (
            Host::Codex,
            "PermissionRequest",
            deny(),
            "codex/expected_permission_request_deny.json",
        ),
        (
            Host::Codex,
            "PreToolUse",
            deny(),
            "codex/expected_pre_tool_use_deny.json",
        ),
        (
            Host::Cursor,
            "beforeShellExecution",
            Answer::Allow,
            "cursor/expected_before_shell_execution_allow.json",
        ),
        (
            Host::Cursor,
            "beforeShellExecution",
            deny(),
            "cursor/expected_before_shell_execution_deny.json",
        ),
        (
            Host::Cursor,
            "beforeShellExecution",
            Answer::AskTheHost("the service is down".into()),
            "cursor/expected_before_shell_execution_ask.json",
        ),
        (
            Host::Gemini,
            "BeforeTool",
            Answer::Allow,
            "gemini/expected_before_tool_allow.json",
        ),
        (
            Host::Gemini,
            "BeforeTool",
            deny(),
            "gemini/expected_before_tool_deny.json",
        ),
    ];
    for (host, event, answer, path) in cases {
        let result = host.answer(event, answer);
        assert_eq!(result.exit_code, 0, "{path}");
        let ours: Value = serde_json::from_str(result.stdout.as_deref().unwrap()).unwrap();
        same_shape(&ours, &documented(path), path);
    }
    // Codex's PreToolUse approval is an empty answer; its reserved keys are never sent.
    let allow = Host::Codex.answer("PreToolUse", Answer::Allow);
    assert_eq!((allow.stdout, allow.exit_code), (None, 0));
    // After events answer with the documented no-op, or nothing.
    assert_eq!(
        Host::Gemini
            .after_stdout()
            .map(|s| serde_json::from_str::<Value>(&s).unwrap()),
        Some(documented("gemini/expected_noop.json"))
    );
}
