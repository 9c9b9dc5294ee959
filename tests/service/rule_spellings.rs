//! Deny rules fail closed (issue 46): with `rules_default = "allow"`, a call spelled
//! otherwise than its `deny` rule (a number as text, in a list or a table, a raw `1e400`,
//! a key or a tool in another case or width or with a trailing space, a dotted key, a
//! list on the path) is still cancelled by that rule, since a tool runtime would read it
//! as the call the rule forbids. A tool name that only looks like one a rule names is
//! refused. An approver's edit in the console is held to the same reading.

use super::console::{as_user, with_console};
use crate::support::app::*;
use crate::support::interactions::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One deny rule per kind of value, and an allow default: whatever no deny stops runs.
const RULES: &str = r#"
[[rules]]
name = "big-transfers"
effect = "deny"
tools = ["transfer"]
where = [{ path = "amount", op = "gt", value = 1000 }]

[[rules]]
name = "no-drops-in-prod"
effect = "deny"
tools = ["drop_*"]
where = [{ path = "env", op = "in", value = ["prod", "production"] }]

[[rules]]
name = "big-invoices"
effect = "deny"
tools = ["pay_invoice"]
where = [{ path = "invoice.total", op = "gte", value = 5000 }]

[[rules]]
name = "no-admins"
effect = "deny"
tools = ["grant_role"]
where = [{ path = "role", op = "eq", value = "admin" }]

[[rules]]
name = "no-exec"
effect = "deny"
tools = ["exec"]
"#;

fn allow_by_default(toml: String) -> String {
    format!("rules_default = \"allow\"\n{toml}{RULES}")
}

/// Every spelling of a call a deny rule is meant for: the tool, the `params` as raw JSON
/// text (`1e400` is no `serde_json::Value`), and the rule that must cancel it.
const SPELLINGS: &[(&str, &str, &str)] = &[
    ("transfer", r#"{"amount": "9000"}"#, "big-transfers"),
    ("transfer", r#"{"amount": [9000]}"#, "big-transfers"),
    (
        "transfer",
        r#"{"amount": {"value": 9000}}"#,
        "big-transfers",
    ),
    ("transfer", r#"{"amount": 1e400}"#, "big-transfers"),
    ("transfer", r#"{"Amount": 9000}"#, "big-transfers"),
    ("transfer", r#"{"amount ": 9000}"#, "big-transfers"),
    ("Transfer", r#"{"amount": 9000}"#, "big-transfers"),
    ("transfer ", r#"{"amount": 9000}"#, "big-transfers"),
    ("ｔransfer", r#"{"amount": 9000}"#, "big-transfers"),
    ("DROP_table", r#"{"env": "prod"}"#, "no-drops-in-prod"),
    ("drop_table", r#"{"env": "PROD"}"#, "no-drops-in-prod"),
    ("drop_table", r#"{"env": "prod "}"#, "no-drops-in-prod"),
    ("drop_table", r#"{"env": ["prod"]}"#, "no-drops-in-prod"),
    ("pay_invoice", r#"{"invoice.total": 5000}"#, "big-invoices"),
    (
        "pay_invoice",
        r#"{"invoice": [{"total": 5000}]}"#,
        "big-invoices",
    ),
    ("grant_role", r#"{"role": "Admin"}"#, "no-admins"),
    ("grant_role", r#"{"role": ["admin"]}"#, "no-admins"),
];

/// Names that look like a rule's tool without being it: `trаnsfer` with a Cyrillic `а`
/// (a word mixing scripts), and `ехес`, all four letters Cyrillic (one script, the
/// skeleton of `exec`). Each with what the 422 says.
const LOOK_ALIKES: &[(&str, &str)] = &[
    ("tr\u{430}nsfer", "must not mix scripts within a word"),
    (
        "\u{435}\u{445}\u{435}\u{441}",
        "looks like `exec`, which rule 'no-exec' names",
    ),
];

/// `POST /v1/confirmations` of `tool` with the raw `params` text.
async fn create_raw(app: &TestApp, tool: &str, params: &str) -> (StatusCode, Value) {
    let body = format!(
        r#"{{"tool": {}, "owner_id": "emp-1", "params": {params}}}"#,
        json!(tool)
    );
    app.post_raw(Some(TOKEN_A), body).await
}

#[tokio::test]
async fn no_spelling_of_a_denied_call_is_confirmed_by_an_allow_default() {
    let app = TestApp::spawn_with_settings(allow_by_default).await;
    // The test can fail: the same tools with harmless values run.
    for (tool, params) in [
        ("transfer", r#"{"amount": "50"}"#),
        ("drop_table", r#"{"env": ["staging"]}"#),
        ("pay_invoice", r#"{"invoice": [{"total": 10}]}"#),
        ("grant_role", r#"{"role": "viewer"}"#),
    ] {
        let (s, r) = create_raw(&app, tool, params).await;
        assert_eq!(s, StatusCode::OK, "{tool} {params}: {r}");
        assert_eq!(r["status"], "confirmed", "{tool} {params}: {r}");
        assert_eq!(r["rule"], Value::Null, "the default allowed it: {r}");
    }
    for &(tool, params, rule) in SPELLINGS {
        let (s, r) = create_raw(&app, tool, params).await;
        assert_eq!(s, StatusCode::OK, "{tool:?} {params}: {r}");
        assert_eq!(r["status"], "cancelled", "{tool:?} {params}: {r}");
        assert_eq!(r["via"], "rule", "{tool:?} {params}: {r}");
        assert_eq!(r["rule"], rule, "{tool:?} {params}: {r}");
        assert_eq!(r["do_not_retry"], true, "{tool:?} {params}: {r}");
    }
    for &(tool, says) in LOOK_ALIKES {
        let (s, r) = create_raw(&app, tool, r#"{"amount": 9000}"#).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{tool:?}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("tool: "), "{r}");
        assert!(message.contains(says), "{tool:?}: {r}");
    }
    assert!(
        app.telegram.sent_messages().is_empty(),
        "nobody was asked about any of them"
    );
}

#[tokio::test]
async fn an_interaction_carrying_a_call_is_held_to_the_same_reading() {
    let app = TestApp::spawn_with_settings(allow_by_default).await;
    let approval = |id: &str, tool: &str, params: Value| {
        json!({
            "interaction": {"interaction_id": id, "question": "Run it?", "interaction_type": "approval"},
            "call": {"tool": tool, "owner_id": "emp-1", "params": params},
        })
    };
    let (s, r) = post_interaction(
        &app,
        approval("i-text", "Transfer", json!({"Amount": "9000"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["result"], false, "{r}");
    assert_eq!(r["rule"], "big-transfers", "{r}");
    for &(tool, says) in LOOK_ALIKES {
        let (s, r) = post_interaction(&app, approval("i-look", tool, json!({}))).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{tool:?}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("call.tool: "), "{r}");
        assert!(message.contains(says), "{tool:?}: {r}");
    }
}

/// The console on, and a rule that asks about any call marked `review`, so that calls
/// the denies let through wait for a person who may edit them.
fn console_and_review(toml: String) -> String {
    with_console(allow_by_default(toml))
        + "\n[[rules]]\nname = \"review\"\neffect = \"ask\"\ntools = [\"*\"]\nwhere = [{ path = \"review\", op = \"exists\" }]\n"
}

/// The console's decision on `id` with a raw body: `parameters` may hold `1e400`.
async fn decide_raw(app: &TestApp, id: &str, user: &str, body: String) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(&format!("/app/api/questions/{id}/decision")))
        .header("Authorization", format!("tma {user}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("decision");
    json_of(r).await
}

#[tokio::test]
async fn no_spelling_of_a_denied_call_is_taken_as_a_console_edit() {
    let app = TestApp::spawn_with_settings(console_and_review).await;
    let alice = as_user(&app, ALICE, "Alice");
    // A question per tool spelling, each with harmless parameters and a schema that
    // takes any object (the agent's schema is loose: only the rules stand in the way).
    let mut questions = std::collections::HashMap::new();
    for tool in [
        "transfer",
        "drop_table",
        "pay_invoice",
        "grant_role",
        "Transfer",
        "transfer ",
        "ｔransfer",
        "DROP_table",
    ] {
        let (record, _) = app
            .ask_suspended(json!({
                "tool": tool,
                "owner_id": "emp-1",
                "params": {"review": true},
                "allow_edit": true,
                "args_schema": {"type": "object"},
            }))
            .await;
        assert_eq!(record["rule"], "review", "{record}");
        questions.insert(tool, record);
    }
    // The edits: each spelling of the parameters on the rule's own tool, and the plain
    // denied parameters on each other spelling of the tool (the tool is not editable;
    // the look-alikes never got this far, see above).
    let mut edits: Vec<(&str, String, &str)> = SPELLINGS
        .iter()
        .filter(|(tool, ..)| questions.contains_key(tool))
        .map(|&(tool, params, rule)| {
            let plain_tool =
                ["transfer", "drop_table", "pay_invoice", "grant_role"].contains(&tool);
            let params = if plain_tool {
                params.replacen('{', r#"{"review": true, "#, 1)
            } else {
                r#"{"review": true, "amount": 9000, "env": "prod"}"#.to_owned()
            };
            (tool, params, rule)
        })
        .collect();
    edits.push((
        "transfer",
        r#"{"review": true, "amount": 9000}"#.to_owned(),
        "big-transfers",
    ));
    for (tool, params, rule) in &edits {
        let record = &questions[tool];
        let id = record["id"].as_str().unwrap();
        let body = format!(
            r#"{{"action": "approve", "args_hash": {}, "parameters": {params}}}"#,
            record["args_hash"]
        );
        let (s, r) = decide_raw(&app, id, &alice, body).await;
        // The console reads its body with serde_json, which has no infinity: a raw
        // 1e400 is refused as malformed before the rules are asked, refused all the same.
        if params.contains("1e400") {
            assert_eq!(s, StatusCode::BAD_REQUEST, "{params}: {r}");
            assert!(r["error"].to_string().contains("out of range"), "{r}");
        } else {
            assert_eq!(
                s,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{tool:?} {params}: {r}"
            );
            assert!(
                r["error"].to_string().contains(&format!("rule '{rule}'")),
                "{tool:?} {params}: {r}"
            );
        }
        let (_, now) = app.get(id).await;
        assert_eq!(now["status"], "pending", "{tool:?} {params}: {now}");
    }
    // The test can fail: a harmless edit is taken.
    let record = &questions["Transfer"];
    let body = format!(
        r#"{{"action": "approve", "args_hash": {}, "parameters": {{"review": true, "amount": "50"}}}}"#,
        record["args_hash"]
    );
    let (s, r) = decide_raw(&app, record["id"].as_str().unwrap(), &alice, body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
}
