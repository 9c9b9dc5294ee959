//! Rules before the human (`[[rules]]`): a `deny` ends a call at once, an `allow`
//! confirms it at once, an `ask` asks and says which rule asked; the record, the audit
//! trail, the message and the metrics name the rule; a dry run only says what the rules
//! would have done; a window never lets through a call a `deny` matches now.

use std::time::Duration;

use crate::support::app::*;
use crate::support::interactions::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The rules every test here runs with, in this order in the file: a staging allow
/// that a later production deny overrides, an amount band, a rate, a rule that asks.
const RULES: &str = r#"
[[rules]]
name = "reads-anywhere"
effect = "allow"
tools = ["read_*"]
reason = "reading is harmless"

[[rules]]
name = "no-drops-in-prod"
effect = "deny"
tools = ["drop_*", "read_*"]
where = [{ path = "env", op = "eq", value = "prod" }]
reason = "production tables are never dropped by agents"

[[rules]]
name = "small-transfers"
effect = "allow"
tools = ["transfer"]
where = [{ path = "amount", op = "gte", value = 0 }, { path = "amount", op = "lte", value = 100 }]

[[rules]]
name = "two-pings-an-hour"
effect = "allow"
tools = ["ping"]
rate = { max = 2, per_seconds = 3600 }

[[rules]]
name = "deploys-ask"
effect = "ask"
tools = ["deploy"]
agents = ["agent-a"]
reason = "a deploy needs a person"
"#;

fn with_rules(toml: String) -> String {
    toml + RULES
}

fn call(tool: &str, params: Value) -> Value {
    json!({"tool": tool, "params": params, "owner_id": "emp-1"})
}

/// The rules' fingerprint the record of `r` names.
fn rules_hash(r: &Value) -> String {
    r["rule_decision"]["rules_hash"]
        .as_str()
        .expect("a rules hash")
        .to_owned()
}

#[tokio::test]
async fn a_deny_rule_cancels_at_once_naming_the_rule_and_nobody_is_asked() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let (s, r) = app
        .create(call("drop_table", json!({"env": "prod", "table": "users"})))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "cancelled");
    assert_eq!(r["via"], "rule");
    assert_eq!(r["allowed"], false);
    assert_eq!(r["rule"], "no-drops-in-prod");
    assert_eq!(r["do_not_retry"], true);
    assert_eq!(r["parameters"], Value::Null);
    assert_eq!(
        r["reason"],
        "denied by rule 'no-drops-in-prod': production tables are never dropped by agents"
    );
    assert_eq!(r["rule_decision"]["effect"], "deny");
    assert_eq!(r["rule_decision"]["enforced"], true);
    assert_eq!(rules_hash(&r).len(), 64);

    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["rule_decided"], "{events:#?}");
    let detail = &events[0]["detail"];
    assert_eq!(detail["status"], "cancelled");
    assert_eq!(detail["rules"]["rule"], "no-drops-in-prod");
    assert_eq!(detail["rules"]["rules_hash"], rules_hash(&r).as_str());

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.telegram.sent_messages().is_empty(), "nobody is asked");
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(
            r#"rule_decisions_total{effect="deny",rule="no-drops-in-prod",mode="enforce"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_allow_rule_confirms_at_once_with_the_parameters_and_no_message() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let (s, r) = app
        .create(call("read_report", json!({"env": "staging", "id": 7})))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "confirmed");
    assert_eq!(r["via"], "rule");
    assert_eq!(r["rule"], "reads-anywhere");
    assert_eq!(r["parameters"], json!({"env": "staging", "id": 7}));
    assert_eq!(
        r["reason"],
        "allowed by rule 'reads-anywhere': reading is harmless"
    );
    assert_eq!(r["do_not_retry"], false);
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "rule_decided");
    assert_eq!(events[0]["detail"]["status"], "confirmed");

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.telegram.sent_messages().is_empty());
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(
            r#"rule_decisions_total{effect="allow",rule="reads-anywhere",mode="enforce"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_matching_deny_wins_over_an_earlier_allow_in_the_file() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    // `reads-anywhere` comes first and matches; `no-drops-in-prod` matches too.
    let (_, r) = app
        .create(call("read_report", json!({"env": "prod"})))
        .await;
    assert_eq!(
        (r["status"].as_str(), r["rule"].as_str()),
        (Some("cancelled"), Some("no-drops-in-prod"))
    );
}

#[tokio::test]
async fn an_amount_band_allows_inside_and_asks_outside_on_a_missing_path_or_another_type() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let (_, inside) = app.create(call("transfer", json!({"amount": 100}))).await;
    assert_eq!(
        (inside["status"].as_str(), inside["rule"].as_str()),
        (Some("confirmed"), Some("small-transfers"))
    );
    for params in [
        json!({"amount": 100.5}),
        json!({"amount": -1}),
        json!({"to": "ACME"}),
        json!({"amount": "50"}),
    ] {
        let mut body = call("transfer", params.clone());
        body["wait"] = json!("suspend");
        let (s, r) = app.create(body).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{params}: {r}");
        assert_eq!(r["status"], "pending");
        // No rule matched: the default asked.
        assert_eq!(r["rule"], Value::Null, "{params}");
        assert_eq!(r["rule_decision"]["effect"], "ask");
    }
}

#[tokio::test]
async fn an_ask_rule_posts_the_question_naming_the_rule_and_why_in_message_record_and_audit() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let (r, _) = app
        .ask_suspended(call("deploy", json!({"service": "billing"})))
        .await;
    assert_eq!(r["rule"], "deploys-ask");
    assert_eq!(r["rule_decision"]["effect"], "ask");
    assert_eq!(r["rule_decision"]["reason"], "a deploy needs a person");
    let msg = app.telegram.sent_messages().pop().expect("the question");
    assert!(
        msg.visible_text
            .contains("📏 Asked by rule deploys-ask: a deploy needs a person"),
        "{}",
        msg.visible_text
    );
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "requested");
    assert_eq!(events[0]["detail"]["rules"]["rule"], "deploys-ask");
    assert_eq!(events[0]["detail"]["rules"]["effect"], "ask");
    assert_eq!(
        events[0]["detail"]["rules"]["rules_hash"],
        rules_hash(&r).as_str()
    );

    // The rule names agent-a only: agent-b's deploy is the default's to decide.
    let (s, b) = app
        .create_as(
            TOKEN_B,
            json!({"tool": "deploy", "params": {}, "route": "other", "wait": "suspend"}),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    assert_eq!(b["rule"], Value::Null);
}

#[tokio::test]
async fn an_allow_past_its_rate_asks_naming_the_rule_and_the_count_survives_a_restart() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    for n in 0..2 {
        let (_, r) = app.create(call("ping", json!({"n": n}))).await;
        assert_eq!(
            (r["status"].as_str(), r["via"].as_str()),
            (Some("confirmed"), Some("rule")),
            "{r}"
        );
    }
    // Counted in the database: a restart does not give the rate back.
    let app = app.restart().await;
    let (r, _) = app.ask_suspended(call("ping", json!({"n": 3}))).await;
    assert_eq!(r["status"], "pending");
    assert_eq!(r["rule"], "two-pings-an-hour");
    assert_eq!(r["rule_decision"]["effect"], "ask");
    assert_eq!(r["rule_decision"]["past_rate"], true);
    let msg = app.telegram.sent_messages().pop().expect("the question");
    assert!(
        msg.visible_text.contains(
            "Asked because rule two-pings-an-hour has let through as many calls as its rate allows"
        ),
        "{}",
        msg.visible_text
    );
}

#[tokio::test]
async fn in_a_dry_run_every_call_asks_and_says_what_the_rules_would_have_done() {
    let app =
        TestApp::spawn_with_settings(|t| format!("rules_mode = \"dry_run\"\n{}", with_rules(t)))
            .await;
    let (r, message_id) = app
        .ask_suspended(call("drop_table", json!({"env": "prod"})))
        .await;
    assert_eq!(r["status"], "pending");
    assert_eq!(r["rule"], "no-drops-in-prod");
    assert_eq!(r["rule_decision"]["effect"], "deny");
    assert_eq!(r["rule_decision"]["enforced"], false);
    let msg = app.telegram.sent_messages().pop().expect("the question");
    assert!(
        msg.visible_text.contains(
            "Rules in dry run: rule no-drops-in-prod would have denied it without asking: production tables are never dropped by agents"
        ),
        "{}",
        msg.visible_text
    );
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["detail"]["rules"]["enforced"], false);
    assert_eq!(events[0]["detail"]["rules"]["effect"], "deny");
    // The human still decides.
    app.telegram
        .tap(OPS_CHAT, message_id, approve_label(0).as_str(), alice());
    let done = app
        .wait_status(r["id"].as_str().unwrap(), "confirmed")
        .await;
    assert_eq!(done["via"], "operator");
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(
            r#"rule_decisions_total{effect="deny",rule="no-drops-in-prod",mode="dry_run"} 1"#
        ),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_live_window_does_not_let_through_a_call_a_deny_rule_now_matches() {
    // No rules: Alice approves a migration for a window.
    let app = TestApp::spawn().await;
    let mut body = call("migrate", json!({"db": "orders"}));
    body["window_seconds"] = json!(600);
    let (first, message_id) = app.ask_suspended(body.clone()).await;
    app.telegram
        .tap(OPS_CHAT, message_id, approve_label(600).as_str(), alice());
    app.wait_status(first["id"].as_str().unwrap(), "confirmed")
        .await;
    let (_, hit) = app.create(body.clone()).await;
    assert_eq!(hit["via"], "window");

    // A rule written since forbids it: the window no longer lets it through.
    let app = app
        .restart_editing(|t| {
            t + r#"
[[rules]]
name = "orders-frozen"
effect = "deny"
tools = ["migrate"]
where = [{ path = "db", op = "eq", value = "orders" }]
"#
        })
        .await;
    let (s, r) = app.create(body).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("cancelled"), Some("rule"))
    );
    assert_eq!(r["rule"], "orders-frozen");
}

#[tokio::test]
async fn an_interaction_carrying_a_call_is_settled_by_a_deny_and_an_allow_rule() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    let approval = |id: &str, tool: &str, params: Value| {
        json!({
            "interaction": {"interaction_id": id, "question": "Run it?", "interaction_type": "approval"},
            "call": {"tool": tool, "owner_id": "emp-1", "params": params},
        })
    };
    let (s, denied) = post_interaction(
        &app,
        approval("i-deny", "drop_table", json!({"env": "prod"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{denied}");
    assert_eq!(denied["status"], "completed");
    assert_eq!(denied["result"], false);
    assert_eq!(denied["rule"], "no-drops-in-prod");
    assert_eq!(denied["do_not_retry"], true);
    assert!(
        denied["reason"]
            .as_str()
            .unwrap()
            .starts_with("denied by rule 'no-drops-in-prod'")
    );

    let (s, allowed) = post_interaction(
        &app,
        approval("i-allow", "read_report", json!({"env": "dev"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{allowed}");
    assert_eq!(allowed["status"], "completed");
    assert_eq!(allowed["result"], true);
    assert_eq!(allowed["rule"], "reads-anywhere");
    assert_eq!(allowed["do_not_retry"], false);

    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.telegram.sent_messages().is_empty(), "nobody is asked");
}

#[tokio::test]
async fn a_deny_rule_ends_a_call_before_anything_else_even_for_an_agent_at_its_max_pending() {
    let app = TestApp::spawn_with_settings(with_rules).await;
    // agent-b may hold two pending requests: both are taken, a third call is refused.
    let on_other = |tool: &str, params: Value| {
        let mut body = call(tool, params);
        body["route"] = json!("other");
        body["wait"] = json!("suspend");
        body
    };
    for n in 0..2 {
        let (s, r) = app
            .create_as(TOKEN_B, on_other("deploy", json!({"n": n})))
            .await;
        assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    }
    let (s, r) = app
        .create_as(TOKEN_B, on_other("deploy", json!({"n": 2})))
        .await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{r}");

    // A call a deny matches is still ended by the rule, as a confirmation and as the
    // call an interaction carries: nothing is counted, asked or stored pending first.
    let (s, r) = app
        .create_as(TOKEN_B, on_other("drop_table", json!({"env": "prod"})))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str(), r["rule"].as_str()),
        (Some("cancelled"), Some("rule"), Some("no-drops-in-prod"))
    );
    let (s, i) = post_interaction_as(
        &app,
        TOKEN_B,
        json!({
            "interaction": {"interaction_id": "i-b", "question": "Drop it?", "interaction_type": "approval"},
            "route": "other",
            "call": {"tool": "drop_table", "owner_id": "emp-1", "params": {"env": "prod"}},
        }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{i}");
    assert_eq!(
        (
            i["status"].as_str(),
            i["result"].as_bool(),
            i["rule"].as_str()
        ),
        (Some("completed"), Some(false), Some("no-drops-in-prod"))
    );
    // The chat's pacing may hold the two questions back a moment.
    app.telegram.wait_for_message_in(OTHER_CHAT, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        app.telegram.messages_in(OTHER_CHAT).len(),
        2,
        "only the two pending calls were asked"
    );
}
