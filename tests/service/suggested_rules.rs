//! Rules suggested from what people decided (issue 50): `/suggest` proposes, from a
//! seeded history, exactly the rule people kept deciding by hand; only a rule editor
//! accepts it; a dry run says what it would have decided, an enforced one decides, both
//! survive a restart, and neither outranks a deny the configuration holds.

use std::time::Duration;

use hitl_telegram::domain::question::{Ending, Operator};
use hitl_telegram::service::now;
use hitl_telegram::storage::{Administration, Questions, SqliteStore};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::app::*;
use crate::support::fake_telegram::{SentMessage, TgUser};
use crate::support::questions::question;

/// The ops route with Alice as its one rule editor (Bob approves there too, but may not
/// accept rules).
fn with_editor(toml: String) -> String {
    toml.replacen(
        "forbid_self_approval = true\n",
        &format!("forbid_self_approval = true\nrule_editors = [{ALICE}]\n"),
        1,
    ) + r#"
[[rules]]
name = "no-prod-drops"
effect = "deny"
tools = ["drop_table"]
where = [{ path = "env", op = "eq", value = "prod" }]
"#
}

/// A configured deny on exactly what the chat's rule allows.
const STAGING_DENY: &str = r#"
[[rules]]
name = "staging-is-frozen"
effect = "deny"
tools = ["read_report"]
where = [{ path = "env", op = "eq", value = "staging" }]
reason = "staging is frozen this week"
"#;

fn person(id: u64, name: &str) -> Operator {
    Operator {
        id,
        username: None,
        name: name.into(),
    }
}

/// Stores `n` calls of agent-a's `tool` with `params` in the ops route, asked an hour
/// ago and ended by `ending()` a few seconds later.
async fn decided(
    store: &SqliteStore,
    tool: &str,
    params: Value,
    n: usize,
    ending: impl Fn() -> Ending,
) {
    for _ in 0..n {
        let asked = now() - Duration::from_secs(3600);
        let mut q = question().pending();
        q.agent = "agent-a".into();
        q.owner_id = hitl_telegram::domain::ids::OwnerId::parse("emp-1").unwrap();
        q.chat_id = OPS_CHAT;
        q.tool = hitl_telegram::domain::ids::ToolName::parse(tool).unwrap();
        q.params_json = params.to_string();
        q.created_at = asked;
        q.expires_at = asked + Duration::from_secs(600);
        store.insert(&q, asked).await.unwrap();
        store
            .decide(&q.id, &ending().decide(asked + Duration::from_secs(3)))
            .await
            .unwrap();
    }
}

fn approved() -> Ending {
    Ending::Approved {
        by: person(ALICE, "Alice"),
        once: true,
    }
}

/// 14 approvals of reading the staging report; 12 of dropping a production table,
/// which a configured deny matches; 14 approvals and one cancel of a restart.
async fn seed(app: &TestApp) {
    let store = SqliteStore::connect_existing(&app.db_url).await.unwrap();
    decided(
        &store,
        "read_report",
        json!({"env": "staging"}),
        14,
        approved,
    )
    .await;
    decided(&store, "drop_table", json!({"env": "prod"}), 12, approved).await;
    decided(&store, "restart", json!({"svc": "db"}), 14, approved).await;
    let cancel = || Ending::Cancelled(person(BOB, "Bob"));
    decided(&store, "restart", json!({"svc": "db"}), 1, cancel).await;
    store.close().await;
}

/// Types `text` as `who` in the ops chat and returns the bot's answer.
async fn ask(app: &TestApp, who: TgUser, text: &str) -> SentMessage {
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram.send_text_message(OPS_CHAT, who, text);
    app.telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .remove(before)
}

/// Taps `label` under `m` as `who`; the toast the bot answered with.
async fn tap(app: &TestApp, m: &SentMessage, label: &str, who: TgUser) -> String {
    let q = app.telegram.tap(OPS_CHAT, m.message_id, label, who);
    app.telegram
        .wait_for_callback_answer(&q)
        .await
        .text
        .unwrap_or_default()
}

fn staging_read() -> Value {
    json!({"tool": "read_report", "params": {"env": "staging"}, "owner_id": "emp-1"})
}

/// The proposal's rule name, read from the message (its hash is the domain's).
fn rule_name(text: &str) -> String {
    let at = text.find("name = \"").expect("a rule name") + 8;
    text[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test]
async fn fourteen_approvals_make_a_proposal_with_its_exact_rule_and_nothing_else_does() {
    let app = TestApp::spawn_with_settings(with_editor).await;
    seed(&app).await;
    let m = ask(&app, alice(), "/suggest").await;
    let text = &m.visible_text;
    assert!(
        text.contains(
            "You approved read_report with env = staging 14 time(s) and never cancelled it: \
             allow it without asking?"
        ),
        "{text}"
    );
    let name = rule_name(text);
    assert!(name.starts_with("suggested-read_report-"), "{name}");
    let rule = format!(
        "[[rules]]\nname = \"{name}\"\neffect = \"allow\"\ntools = [\"read_report\"]\n\
         agents = [\"agent-a\"]\nowners = [\"emp-1\"]\nwhere = [\n  {{ path = \"env\", op = \"eq\", value = \"staging\" }},\n]\n\
         reason = \"approved 14 times in 7 days, never cancelled\"\n"
    );
    assert!(text.contains(&rule), "{text}\n--- expected ---\n{rule}");
    // A call a configured deny matches is never proposed; one cancel among 15 restarts
    // keeps the restart back; only one proposal is made.
    assert!(!text.contains("drop_table"), "{text}");
    assert!(!text.contains("restart"), "{text}");
    assert_eq!(text.matches("[[rules]]").count(), 1, "{text}");
    assert!(text.contains("the rule editors (alice (111111))"), "{text}");
    let labels: Vec<&str> = m
        .buttons
        .iter()
        .flatten()
        .map(|b| b.text.as_str())
        .collect();
    assert_eq!(labels, ["🧪 Try as dry run #1", "✅ Enforce #1"]);
}

#[tokio::test]
async fn only_a_rule_editor_accepts_and_a_dry_run_says_what_it_would_decide() {
    let app = TestApp::spawn_with_settings(with_editor).await;
    seed(&app).await;
    let offer = ask(&app, alice(), "/suggest").await;
    let name = rule_name(&offer.visible_text);

    // Bob approves this route but edits no rules: refused, and nothing changes.
    let toast = tap(&app, &offer, "🧪 Try as dry run #1", bob()).await;
    assert!(toast.contains("Only the route's rule editors"), "{toast}");
    let rules = ask(&app, bob(), "/rules").await;
    assert!(
        rules.visible_text.contains("Route ops: none."),
        "{}",
        rules.visible_text
    );

    let before = app.telegram.messages_in(OPS_CHAT).len();
    let toast = tap(&app, &offer, "🧪 Try as dry run #1", alice()).await;
    assert!(toast.contains("in a dry run"), "{toast}");
    let said = app.telegram.wait_for_message_in(OPS_CHAT, before + 1).await;
    assert!(
        said[before]
            .visible_text
            .contains(&format!("Rule {name} added as a dry run by Alice")),
        "{}",
        said[before].visible_text
    );
    // A second tap moves nothing.
    let again = tap(&app, &offer, "🧪 Try as dry run #1", alice()).await;
    assert!(again.contains("Nothing to do"), "{again}");

    // The call still asks, and its record says what the rule would have done.
    let (r, _) = app.ask_suspended(staging_read()).await;
    let (_, r) = app.get(r["id"].as_str().unwrap()).await;
    assert_eq!(r["status"], "pending", "{r}");
    assert_eq!(r["rule_decision"]["rule"], name.as_str(), "{r}");
    assert_eq!(r["rule_decision"]["effect"], "allow", "{r}");
    assert_eq!(r["rule_decision"]["enforced"], false, "{r}");

    let listed = ask(&app, alice(), "/rules").await;
    assert!(
        listed.visible_text.contains(&format!(
            "{name} (🧪 dry run): allow read_report with env = staging; added by Alice"
        )),
        "{}",
        listed.visible_text
    );
}

#[tokio::test]
async fn an_enforced_chat_rule_decides_across_a_restart_but_never_over_a_configured_deny() {
    let app = TestApp::spawn_with_settings(with_editor).await;
    seed(&app).await;
    let offer = ask(&app, alice(), "/suggest").await;
    let name = rule_name(&offer.visible_text);
    let toast = tap(&app, &offer, "✅ Enforce #1", alice()).await;
    assert!(toast.contains("enforced"), "{toast}");

    let (s, r) = app.create(staging_read()).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "confirmed", "{r}");
    assert_eq!(r["via"], "rule", "{r}");
    assert_eq!(r["rule"], name.as_str(), "{r}");
    // The hash the decision carries is in the trail, put in force by the tap.
    let db = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    let loaded: Vec<(String,)> =
        sqlx::query_as("SELECT detail FROM audit_events WHERE kind = 'rules_loaded'")
            .fetch_all(&db)
            .await
            .unwrap();
    db.close().await;
    let hashes: Vec<Value> = loaded
        .iter()
        .map(|(d,)| serde_json::from_str::<Value>(d).unwrap()["rules_hash"].clone())
        .collect();
    assert!(
        hashes.contains(&r["rule_decision"]["rules_hash"]),
        "{hashes:?} {r}"
    );
    // Another value of the parameter is not what people approved: it asks.
    let (other, _) = app
        .ask_suspended(
            json!({"tool": "read_report", "params": {"env": "prod"}, "owner_id": "emp-1"}),
        )
        .await;
    assert_eq!(other["status"], "pending", "{other}");

    let app = app.restart().await;
    let (_, r) = app.create(staging_read()).await;
    assert_eq!(r["status"], "confirmed", "the database keeps the rule: {r}");
    assert_eq!(r["rule"], name.as_str(), "{r}");

    // The configuration's deny comes first, whatever the chat accepted.
    let app = app.restart_editing(|t| t + STAGING_DENY).await;
    let (_, r) = app.create(staging_read()).await;
    assert_eq!(r["status"], "cancelled", "{r}");
    assert_eq!(r["rule"], "staging-is-frozen", "{r}");

    // Removing it from /rules is audited, and its calls ask again once the deny goes.
    let app = app.restart_editing(|t| t.replace(STAGING_DENY, "")).await;
    let listed = ask(&app, alice(), "/rules").await;
    let remove = format!("🗑 Remove {}", name.chars().take(40).collect::<String>());
    let toast = tap(&app, &listed, &remove, alice()).await;
    assert!(toast.contains("removed"), "{toast}");
    let (r, _) = app.ask_suspended(staging_read()).await;
    let (_, r) = app.get(r["id"].as_str().unwrap()).await;
    assert_eq!(r["status"], "pending", "{r}");
}

/// The command line with the test's environment (tokens) and `args`: exit code, stdout.
async fn cli(args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_hitl-telegram"))
        .args(args)
        .envs(test_env())
        .output()
        .await
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), format!("{stdout}{stderr}"))
}

#[tokio::test]
async fn check_config_and_rules_test_show_the_chat_rules_beside_the_configured_ones() {
    let app = TestApp::spawn_with_settings(with_editor).await;
    seed(&app).await;
    let offer = ask(&app, alice(), "/suggest").await;
    let name = rule_name(&offer.visible_text);
    tap(&app, &offer, "🧪 Try as dry run #1", alice()).await;
    let config = app.write_settings();
    let config = config.to_str().unwrap();

    let (code, out) = cli(&["--config", config, "check-config"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("rules: 1 rule(s), default ask"), "{out}");
    assert!(out.contains("chat rules: 1 in force (0 enforced)"), "{out}");
    assert!(
        out.contains(&format!("  allow {name} on route ops (dry run)")),
        "{out}"
    );

    let call = app.dir.path().join("call.json");
    let body = json!({"tool": "read_report", "agent": "agent-a", "owner_id": "emp-1",
        "route": "ops", "params": {"env": "staging"}});
    std::fs::write(&call, body.to_string()).unwrap();
    let (code, out) = cli(&["--config", config, "rules", "test", call.to_str().unwrap()]).await;
    // A dry run decides nothing: the exit code is the effect it would have, the text
    // says it is only a dry run.
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(&format!("decision: allow\nby: rule '{name}'")),
        "{out}"
    );
    assert!(
        out.contains("chat rule: accepted in route ops's chat, in a dry run"),
        "{out}"
    );
    assert!(out.contains("rules: 1 rule(s), 1 chat rule(s)"), "{out}");
    // On another route the chat's rule is not read.
    let other = body_on(&body, "other");
    std::fs::write(&call, other.to_string()).unwrap();
    let (code, out) = cli(&["--config", config, "rules", "test", call.to_str().unwrap()]).await;
    assert_eq!(code, 4, "{out}");
    assert!(out.contains("by: the rules' default"), "{out}");
}

fn body_on(body: &Value, route: &str) -> Value {
    let mut b = body.clone();
    b["route"] = json!(route);
    b
}

#[tokio::test]
async fn the_leader_offers_due_proposals_unasked_and_not_again_within_the_period() {
    let app = TestApp::spawn_with_settings(with_editor).await;
    seed(&app).await;
    // The history is there now: the next start finds the route's proposals due (none
    // was ever offered) and posts them without anyone asking.
    let app = app.restart().await;
    let offered = app.telegram.wait_for_message_in(OPS_CHAT, 1).await;
    assert!(
        offered[0]
            .visible_text
            .contains("Rules suggested for route ops, from the last 7 day(s)"),
        "{}",
        offered[0].visible_text
    );
    assert_eq!(offered[0].buttons.iter().flatten().count(), 2);
    // Offered a moment ago: the next start offers nothing (suggest_every_days = 7).
    let app = app.restart().await;
    let m = ask(&app, alice(), "/rules").await;
    assert!(
        m.visible_text.contains("Rules accepted in this chat"),
        "{}",
        m.visible_text
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.telegram.messages_in(OPS_CHAT).len(),
        2,
        "the offer and the answer to /rules, nothing more"
    );
}
