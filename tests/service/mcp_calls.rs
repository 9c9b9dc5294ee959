//! Calls through an MCP gateway (issue 48), as the service takes them: a confirmation
//! names the MCP server it goes to and carries the tool's annotations; the approver sees
//! both, the record returns them, the rules match them (`servers`, `annotations`), a
//! window never crosses from one server to another, and a reporter may say it cannot
//! tell whether the call ran (`unknown`).

use super::outcomes::{approved, command, report};
use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A call of `tool` to MCP server `server` (none when `None`), carrying `annotations`.
fn mcp_call(tool: &str, server: Option<&str>, annotations: Option<Value>) -> Value {
    let mut body =
        json!({"tool": tool, "params": {"path": "/srv/share/a.txt"}, "owner_id": "emp-1"});
    if let Some(server) = server {
        body["server"] = json!(server);
    }
    if let Some(a) = annotations {
        body["annotations"] = a;
    }
    body
}

/// Waits until message `message_id` of the ops chat shows `line`; returns its text.
async fn shows(app: &TestApp, message_id: i32, line: &str) -> String {
    app.telegram
        .wait_for_message(OPS_CHAT, message_id, line, |m| {
            m.visible_text.contains(line)
        })
        .await
        .visible_text
}

/// Asks `body` (suspended) and checks that it waits for a person: nothing before one
/// (rule or window) settled it.
async fn asks(app: &TestApp, mut body: Value) {
    body["wait"] = json!("suspend");
    let (s, r) = app.create(body.clone()).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::ACCEPTED, Some("pending")),
        "{body}: {r}"
    );
}

/// The field and reason of a 422 `invalid_field`.
fn refusal(s: StatusCode, r: &Value) -> (String, String) {
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert_eq!(r["error"]["code"], "invalid_field", "{r}");
    let message = r["error"]["message"].as_str().expect("a message");
    let (field, reason) = message.split_once(": ").expect("field: reason");
    (field.to_owned(), reason.to_owned())
}

#[tokio::test]
async fn a_call_through_a_gateway_shows_its_server_and_hints_on_the_card_and_in_the_record() {
    let app = TestApp::spawn().await;
    let annotations = json!({"readOnlyHint": false, "destructiveHint": true});
    let (record, message_id) = app
        .ask_suspended(mcp_call(
            "write_file",
            Some("fs"),
            Some(annotations.clone()),
        ))
        .await;
    assert_eq!(record["server"], "fs", "{record}");
    assert_eq!(record["annotations"], annotations, "{record}");

    let text = shows(&app, message_id, "🔌 MCP server: fs").await;
    assert!(
        text.contains("👤 Owner: emp-1\n🔌 MCP server: fs\n🏷 Hints (the server's own): destructive, not read-only\n"),
        "{text}"
    );
    // The args hash is the parameters' alone: the same call without a server hashes
    // the same.
    let (s, plain) = app
        .create(
            json!({"tool": "write_file", "params": {"path": "/srv/share/a.txt"},
                       "owner_id": "emp-1", "wait": "suspend"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{plain}");
    assert_eq!(plain["args_hash"], record["args_hash"]);
    assert_eq!(plain["server"], Value::Null);
    assert_eq!(plain["annotations"], Value::Null);
    let plain_message = app.telegram.wait_for_messages(2).await[1].clone();
    assert!(
        !plain_message.visible_text.contains("MCP server"),
        "{}",
        plain_message.visible_text
    );

    let id = record["id"].as_str().unwrap();
    let (_, read) = app.get(id).await;
    assert_eq!(read["server"], "fs");
    assert_eq!(read["annotations"], annotations);
    // The audit trail says which server the call went to.
    let events = app.audit_events(id).await;
    assert_eq!(events[0]["kind"], "requested", "{events:?}");
    assert_eq!(events[0]["detail"]["server"], "fs");
    assert_eq!(events[0]["detail"]["annotations"], annotations);
}

#[tokio::test]
async fn a_bad_server_or_annotations_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    let cases = [
        (json!({"server": ""}), "server", "must not be empty"),
        (json!({"server": "f s"}), "server", "holds ' '"),
        (json!({"server": "fs/1"}), "server", "only letters"),
        (json!({"server": "x".repeat(65)}), "server", "at most 64"),
        (json!({"server": 7}), "server", "must be a string"),
        (
            json!({"annotations": {"readOnlyHint": "yes"}}),
            "annotations",
            "member \"readOnlyHint\": must be true or false, not a string",
        ),
        (
            json!({"annotations": [true]}),
            "annotations",
            "object of booleans",
        ),
        (
            json!({"annotations": {"": true}}),
            "annotations",
            "must not be empty",
        ),
        (
            json!({"annotations": {"a\u{1b}b": true}}),
            "annotations",
            "control character",
        ),
        (
            json!({"annotations": (0..17).map(|i| (format!("k{i}"), json!(true))).collect::<serde_json::Map<_, _>>()}),
            "annotations",
            "has 17 members; at most 16",
        ),
    ];
    for (extra, field, words) in cases {
        let mut body = mcp_call("read_file", None, None);
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (s, r) = app.create(body).await;
        let (f, reason) = refusal(s, &r);
        assert_eq!(f, field, "{extra}: {r}");
        assert!(reason.contains(words), "{extra}: {reason}");
    }
    assert!(app.telegram.sent_messages().is_empty(), "nothing was asked");
}

/// Rules on servers and annotations, for the tests that need them.
const RULES: &str = r#"
[[rules]]
name = "fs-reads"
effect = "allow"
tools = ["read_*"]
servers = ["fs", "docs-*"]

[[rules]]
name = "no-prod-db"
effect = "deny"
tools = ["*"]
servers = ["prod-db"]
reason = "agents never touch the production database"

[[rules]]
name = "read-only-tools"
effect = "allow"
tools = ["query"]
annotations = { readOnlyHint = true }

[[rules]]
name = "destructive-asks"
effect = "ask"
tools = ["*"]
annotations = { destructiveHint = true }
reason = "the server says it destroys"
"#;

fn with_rules(toml: String) -> String {
    toml + RULES
}

#[tokio::test]
async fn a_servers_rule_decides_only_the_calls_to_its_servers() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    for server in ["fs", "docs-wiki"] {
        let (s, r) = app.create(mcp_call("read_file", Some(server), None)).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(
            (r["status"].as_str(), r["via"].as_str()),
            (Some("confirmed"), Some("rule"))
        );
        assert_eq!(r["rule"], "fs-reads");
    }
    let (s, r) = app
        .create(mcp_call("drop_table", Some("prod-db"), None))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "cancelled");
    assert_eq!(r["rule"], "no-prod-db");
    assert_eq!(
        r["reason"],
        "denied by rule 'no-prod-db': agents never touch the production database"
    );
    // Another server, or none, is not what the rule names: a person is asked.
    for server in [Some("git"), None] {
        asks(&app, mcp_call("read_file", server, None)).await;
    }
    assert_eq!(app.telegram.wait_for_messages(2).await.len(), 2);
}

#[tokio::test]
async fn an_annotations_rule_matches_only_calls_that_carry_the_annotation() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let (s, r) = app
        .create(mcp_call(
            "query",
            Some("db"),
            Some(json!({"readOnlyHint": true, "openWorldHint": false})),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["rule"].as_str()),
        (Some("confirmed"), Some("read-only-tools"))
    );

    // The same tool without the annotation, or with another value of it, asks.
    for annotations in [None, Some(json!({"readOnlyHint": false})), Some(json!({}))] {
        asks(&app, mcp_call("query", Some("db"), annotations.clone())).await;
    }

    // Every question asked so far is in the chat before the next is asked.
    app.telegram.wait_for_messages(3).await;
    // An `ask` on `destructiveHint` names itself on the card.
    let (record, message_id) = app
        .ask_suspended(mcp_call(
            "write_file",
            Some("fs"),
            Some(json!({"destructiveHint": true})),
        ))
        .await;
    assert_eq!(record["rule"], "destructive-asks");
    shows(
        &app,
        message_id,
        "📏 Asked by rule destructive-asks: the server says it destroys",
    )
    .await;
}

#[tokio::test]
async fn a_window_opened_through_one_server_passes_no_call_through_another_or_none() {
    let app = TestApp::spawn().await;
    let with_window = |server: Option<&str>| {
        let mut body = mcp_call("write_file", server, None);
        body["window_seconds"] = json!(600);
        body
    };
    approved(&app, with_window(Some("fs-a"))).await;

    // The same call to the same server: the window confirms it.
    let (s, r) = app.create(with_window(Some("fs-a"))).await;
    assert_eq!(
        (s, r["via"].as_str()),
        (StatusCode::OK, Some("window")),
        "{r}"
    );

    // To another server, or to none: asked.
    for server in [Some("fs-b"), None] {
        asks(&app, with_window(server)).await;
    }

    // And the other way round: a window opened with no server passes no server's call.
    let app = TestApp::spawn().await;
    approved(&app, with_window(None)).await;
    asks(&app, with_window(Some("fs-a"))).await;
    let (s, r) = app.create(with_window(None)).await;
    assert_eq!(
        (s, r["via"].as_str()),
        (StatusCode::OK, Some("window")),
        "{r}"
    );
}

#[tokio::test]
async fn a_repeat_with_the_same_idempotency_key_must_name_the_same_server_and_annotations() {
    let app = TestApp::spawn().await;
    let keyed = |server: &str, annotations: Value| {
        let mut body = mcp_call("write_file", Some(server), Some(annotations));
        body["wait"] = json!("suspend");
        body["idempotency_key"] = json!("call-7");
        body
    };
    let (s, first) = app
        .create(keyed("fs", json!({"destructiveHint": true})))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{first}");
    let (s, again) = app
        .create(keyed("fs", json!({"destructiveHint": true})))
        .await;
    assert_eq!(
        (s, &again["id"]),
        (StatusCode::ACCEPTED, &first["id"]),
        "{again}"
    );

    let (s, r) = app
        .create(keyed("db", json!({"destructiveHint": true})))
        .await;
    let (field, reason) = refusal(s, &r);
    assert_eq!(field, "idempotency_key");
    assert!(reason.contains("server or annotations differ"), "{reason}");
    let (s, r) = app
        .create(keyed("fs", json!({"destructiveHint": false})))
        .await;
    assert_eq!(refusal(s, &r).0, "idempotency_key");
}

#[tokio::test]
async fn a_reported_unknown_shows_on_the_card_and_in_the_record_until_a_later_report_replaces_it() {
    let app = TestApp::spawn().await;
    let (record, message_id) = approved(&app, mcp_call("write_file", Some("fs"), None)).await;
    let id = record["id"].as_str().unwrap();

    let unknown = json!({"status": "unknown", "error": "the upstream MCP server exited mid-call"});
    let (s, r) = report(&app, id, unknown.clone()).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["status"], "unknown");
    assert_eq!(
        r["outcome"]["error"],
        "the upstream MCP server exited mid-call"
    );
    let text = shows(
        &app,
        message_id,
        "🟠 Not known whether it ran: the upstream MCP server exited mid-call",
    )
    .await;
    assert!(text.contains("✅ Approved by Bob"), "{text}");
    let kinds = app.audit_kinds(id).await;
    assert!(kinds.contains(&"outcome_reported".to_owned()), "{kinds:?}");

    // The same report again is the same; `error` is refused with another status.
    let (s, _) = report(&app, id, unknown).await;
    assert_eq!(s, StatusCode::OK);
    let (s, r) = report(&app, id, json!({"status": "executed", "error": "x"})).await;
    assert_eq!(refusal(s, &r).0, "error");

    // The next approver of the tool hears of it, as of a failure.
    let (next, next_message) = app
        .ask_suspended(mcp_call("write_file", Some("fs"), None))
        .await;
    assert_eq!(next["recalled"]["status"], "unknown", "{next}");
    assert_eq!(
        next["recalled"]["error"],
        "the upstream MCP server exited mid-call"
    );
    shows(
        &app,
        next_message,
        "not known whether it ran: the upstream MCP server exited mid-call",
    )
    .await;

    // A later, better report replaces it.
    let (s, r) = report(
        &app,
        id,
        json!({"status": "executed", "summary": "written"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["status"], "executed");
    shows(&app, message_id, "🟢 Ran: written").await;
}

#[tokio::test]
async fn server_and_annotations_survive_a_restart() {
    let app = TestApp::spawn().await;
    let annotations = json!({"idempotentHint": true});
    let (record, _) = app
        .ask_suspended(mcp_call("read_file", Some("fs"), Some(annotations.clone())))
        .await;
    let id = record["id"].as_str().unwrap().to_owned();
    let app = app.restart().await;
    let (s, read) = app.get(&id).await;
    assert_eq!(s, StatusCode::OK, "{read}");
    assert_eq!(read["server"], "fs");
    assert_eq!(read["annotations"], annotations);
}

#[tokio::test]
async fn windows_names_a_windows_server_and_pending_marks_a_run_reported_unknown() {
    let app = TestApp::spawn().await;
    let mut body = mcp_call("write_file", Some("fs"), None);
    body["window_seconds"] = json!(600);
    let (record, _) = approved(&app, body).await;
    let windows = command(&app, "/windows").await.visible_text;
    assert!(
        windows.contains("write_file via MCP server fs for owner emp-1"),
        "{windows}"
    );

    let id = record["id"].as_str().unwrap();
    let (s, r) = report(&app, id, json!({"status": "unknown"})).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    // Another call of the tool (the window covers the first one's parameters only).
    let mut next = mcp_call("write_file", Some("fs"), None);
    next["params"] = json!({"path": "/srv/share/b.txt"});
    app.ask_suspended(next).await;
    let pending = command(&app, "/pending").await.visible_text;
    assert!(
        pending.contains("⚠️ last run: not known whether it ran"),
        "{pending}"
    );
}
