//! Grants (AI-Parrot's `GrantGuard`, durable): asked in Telegram and approved (by the
//! service, or as an interaction with grant terms, then presented); checked (`tool:*`
//! covers every tool), listed, revoked, expired; another agent's invisible; kept across
//! a restart. Presented with a call (`grant_scope`): after the deny rules and before the
//! window, the allow rules and any person, and never for a tool its scope does not
//! cover. (What the person is shown and what their yes stores: `grant_terms.rs`.)

use std::time::Duration;

use crate::support::app::*;
use crate::support::grants::{approved_grant, gated, presenting};
use crate::support::interactions::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn post_grant_as(app: &TestApp, token: &str, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url("/v1/grants"))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("POST /v1/grants");
    json_of(r).await
}

/// `POST /v1/grants` as agent-a, blocking until the question ends, in a task of its
/// own so that the test can answer it in Telegram meanwhile.
fn ask_blocking(app: &TestApp, body: Value) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let client = app.client.clone();
    let url = app.url("/v1/grants");
    tokio::spawn(async move {
        let r = client
            .post(url)
            .bearer_auth(TOKEN_A)
            .json(&body)
            .send()
            .await
            .unwrap();
        json_of(r).await
    })
}

async fn post_grant(app: &TestApp, body: Value) -> (StatusCode, Value) {
    post_grant_as(app, TOKEN_A, body).await
}

async fn check_as(app: &TestApp, token: &str, owner: &str, scope: &str) -> Value {
    let r = app
        .client
        .get(app.url("/v1/grants/check"))
        .query(&[("owner_id", owner), ("scope", scope)])
        .bearer_auth(token)
        .send()
        .await
        .expect("GET /v1/grants/check");
    let (s, b) = json_of(r).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    b
}

async fn check(app: &TestApp, owner: &str, scope: &str) -> bool {
    check_as(app, TOKEN_A, owner, scope).await["allowed"]
        .as_bool()
        .expect("allowed")
}

async fn revoke_as(app: &TestApp, token: &str, id: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .delete(app.url(&format!("/v1/grants/{id}")))
        .bearer_auth(token)
        .send()
        .await
        .expect("DELETE");
    json_of(r).await
}

/// AI-Parrot's `GrantGuard` asks its own approval first, with its terms as data (as the
/// Python package sends it): this one, for `window_seconds`, answered yes by Alice.
/// Returns its interaction id.
async fn guard_approval(
    app: &TestApp,
    id: &str,
    scope: &str,
    owner: &str,
    window_seconds: u64,
) -> String {
    let question = format!(
        "⚠️ Tool 'deploy' requires approval.\nScope: {scope}\nOwner: {owner}\nApproval window: 15.0 min\n\nDo you approve this action?"
    );
    let before = app.telegram.sent_messages().len();
    let (s, b) = post_interaction(
        app,
        json!({"interaction": {"interaction_id": id, "question": question,
                               "interaction_type": "approval", "default_response": false,
                               "grant": {"scope": scope, "owner_id": owner,
                                         "window_seconds": window_seconds}}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let mut msg = None;
    for _ in 0..500 {
        msg = app
            .telegram
            .sent_messages()
            .into_iter()
            .skip(before)
            .find(|m| m.visible_text.contains(&format!("Scope: {scope}")));
        if msg.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let msg = msg.expect("the guard's question");
    tap(app, &msg, "✅ Approve", alice()).await;
    wait_for_status_as(app, TOKEN_A, id, "completed", Duration::from_secs(10)).await;
    id.to_owned()
}

#[tokio::test]
async fn a_grant_asked_and_approved_in_telegram_covers_its_scope_for_its_owner_only() {
    let app = TestApp::spawn().await;
    let asking = ask_blocking(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy",
                          "window_seconds": 3600, "reason": "release day"}),
    );
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    let text = &msg.visible_text;
    for line in [
        "release day",
        "🔑 Grant: approving lets agent-a act on these terms only, without asking for each call where a grant is enough (deny rules still apply)",
        "Scope: tool:deploy (every call of this one tool)",
        "Owner: emp-1",
        "Duration: 1 h from your tap",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    tap(&app, &msg, "✅ Approve", alice()).await;
    let (s, answer) = asking.await.unwrap();
    assert_eq!(s, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["status"], "granted");
    let grant = &answer["grant"];
    assert_eq!(grant["scope"], "tool:deploy");
    assert_eq!(grant["owner_id"], "emp-1");
    assert_eq!(grant["agent"], "agent-a");
    assert_eq!(grant["granted_by"]["id"], ALICE);
    assert_eq!(grant["live"], true);
    assert_eq!(grant["reason"], "release day");
    assert!(grant["grant_id"].as_str().unwrap().starts_with("gr_"));

    assert!(check(&app, "emp-1", "tool:deploy").await);
    let covered = check_as(&app, TOKEN_A, "emp-1", "tool:deploy").await;
    assert_eq!(covered["grant"]["grant_id"], grant["grant_id"]);
    assert!(
        !check(&app, "emp-1", "tool:drop_table").await,
        "another tool"
    );
    assert!(!check(&app, "emp-2", "tool:deploy").await, "another owner");

    // Durable: a restart keeps it.
    let app = app.restart().await;
    assert!(check(&app, "emp-1", "tool:deploy").await);
    let r = app
        .client
        .get(app.url("/v1/grants"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    let (_, list) = json_of(r).await;
    assert_eq!(list["grants"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn a_grant_refused_in_telegram_stores_nothing() {
    let app = TestApp::spawn().await;
    let asking = ask_blocking(&app, json!({"owner_id": "emp-1", "scope": "tool:*"}));
    let msg = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    assert!(
        msg.visible_text
            .contains("Scope: tool:* (every call of every tool)"),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "❌ Reject", alice()).await;
    let (s, answer) = asking.await.unwrap();
    assert_eq!(
        (s, answer["status"].as_str()),
        (StatusCode::OK, Some("refused")),
        "{answer}"
    );
    assert_eq!(answer["grant"], Value::Null);
    assert!(!check(&app, "emp-1", "tool:deploy").await);
}

#[tokio::test]
async fn a_wildcard_grant_question_covers_every_tool_and_presenting_it_again_answers_the_same_grant()
 {
    let app = TestApp::spawn().await;
    let id = guard_approval(&app, "guard-1", "tool:*", "emp-1", 900).await;
    // Granted by the yes itself, before anything is presented.
    assert!(check(&app, "emp-1", "tool:deploy").await);
    let body = json!({"owner_id": "emp-1", "scope": "tool:*", "window_seconds": 900,
                      "interaction_id": id});
    let (s, answer) = post_grant(&app, body.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["grant"]["interaction_id"], "guard-1");
    assert!(check(&app, "emp-1", "tool:deploy").await);
    assert!(check(&app, "emp-1", "tool:anything_else").await);

    let (s, again) = post_grant(&app, body).await;
    assert_eq!(s, StatusCode::CREATED, "{again}");
    assert_eq!(again["grant"], answer["grant"]);
}

#[tokio::test]
async fn presenting_another_scope_an_unanswered_question_or_an_ended_grant_gets_nothing() {
    let app = TestApp::spawn().await;
    // The yes was about tool:deploy; the agent asks for tool:*.
    let id = guard_approval(&app, "guard-2", "tool:deploy", "emp-1", 900).await;
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:*", "interaction_id": id}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert_eq!(
        b["error"]["message"],
        "scope: differs from the grant question's terms: the person approved tool:deploy",
        "{b}"
    );

    // Not answered yet.
    let (s, asked) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:x", "wait": "suspend"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{asked}");
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:x",
               "interaction_id": asked["interaction_id"]}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not answered yet"),
        "{b}"
    );
    // Answered yes: asked without a reason, the grant has none.
    let mut found = None;
    for _ in 0..500 {
        found = app
            .telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .find(|m| m.visible_text.contains("Scope: tool:x ("));
        if found.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let msg = found.expect("the grant question for tool:x");
    assert!(
        msg.visible_text.contains("it gave no reason"),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "✅ Approve", alice()).await;
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:x",
               "interaction_id": asked["interaction_id"]}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["grant"]["reason"], Value::Null, "{b}");

    // Revoked: presenting it afterwards gets no grant.
    let (_, g) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": id}),
    )
    .await;
    let grant_id = g["grant"]["grant_id"].as_str().unwrap().to_owned();
    assert_eq!(revoke_as(&app, TOKEN_A, &grant_id).await.0, StatusCode::OK);
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": "guard-2"}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("was revoked at"),
        "{b}"
    );

    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": "nope"}),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{b}");
    assert!(!check(&app, "emp-1", "tool:deploy").await);
}

#[tokio::test]
async fn a_grant_expires_and_a_revoked_one_stops_at_once() {
    let app = TestApp::spawn().await;
    // A second after the yes.
    guard_approval(&app, "guard-3", "tool:deploy", "emp-1", 1).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!check(&app, "emp-1", "tool:deploy").await, "expired");
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": "guard-3"}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("expired at"),
        "{b}"
    );

    let id = guard_approval(&app, "guard-4", "tool:deploy", "emp-1", 900).await;
    let (_, g) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": id}),
    )
    .await;
    let grant_id = g["grant"]["grant_id"].as_str().unwrap().to_owned();
    assert!(check(&app, "emp-1", "tool:deploy").await);
    // Another agent neither sees nor revokes it.
    assert_eq!(
        check_as(&app, TOKEN_B, "emp-1", "tool:deploy").await["allowed"],
        false
    );
    let r = app
        .client
        .get(app.url("/v1/grants"))
        .bearer_auth(TOKEN_B)
        .send()
        .await
        .unwrap();
    assert_eq!(json_of(r).await.1["grants"], json!([]));
    assert_eq!(
        revoke_as(&app, TOKEN_B, &grant_id).await.0,
        StatusCode::NOT_FOUND
    );

    let (s, revoked) = revoke_as(&app, TOKEN_A, &grant_id).await;
    assert_eq!(s, StatusCode::OK, "{revoked}");
    assert_eq!(revoked["live"], false);
    assert!(revoked["revoked_at"].is_string());
    assert!(!check(&app, "emp-1", "tool:deploy").await);
    assert_eq!(
        revoke_as(&app, TOKEN_A, &grant_id).await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn grant_then_confirm_without_a_grant_cancels_and_with_one_asks_or_is_enough() {
    let app = TestApp::spawn().await;
    let call = |extra: Value| {
        let mut body = json!({"tool": "deploy", "params": {"service": "billing"},
                              "owner_id": "emp-1", "grant_scope": "tool:deploy"});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    let (s, r) = app.create(call(json!({}))).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("cancelled"), Some("grant"))
    );
    assert_eq!(r["reason"], "no grant for tool:deploy (owner emp-1)");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.telegram.sent_messages().is_empty(), "nobody asked");

    let id = guard_approval(&app, "guard-5", "tool:deploy", "emp-1", 900).await;
    post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "interaction_id": id}),
    )
    .await;
    let asked_before = app.telegram.sent_messages().len();
    // A live grant: the confirmation is asked as usual.
    let (r, _) = app.ask_suspended(call(json!({}))).await;
    assert_eq!(r["status"], "pending");
    assert_eq!(app.telegram.sent_messages().len(), asked_before + 1);
    // ...or, with require_grant_only, the grant is enough.
    let (s, r) = app.create(call(json!({"require_grant_only": true}))).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("confirmed"), Some("grant"))
    );
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("allowed by grant gr_")
            && reason.ends_with(": tool:deploy covers deploy"),
        "{r}"
    );
    assert_eq!(r["parameters"], json!({"service": "billing"}));
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "grant_decided", "{events:?}");
}

#[tokio::test]
async fn an_optional_grant_is_enough_when_live_and_without_one_the_call_is_asked_not_cancelled() {
    let app = TestApp::spawn().await;
    let optional = json!({"tool": "deploy", "params": {"service": "web"}, "owner_id": "emp-1",
                          "grant_scope": "tool:deploy", "require_grant_only": true,
                          "grant_optional": true});
    // No grant: asked, as if none had been presented.
    let (r, _) = app.ask_suspended(optional.clone()).await;
    assert_eq!(r["status"], "pending", "{r}");
    assert_eq!(app.telegram.sent_messages().len(), 1, "a person is asked");
    // Optional without require_grant_only would change nothing: refused, naming it.
    let mut useless = optional.clone();
    useless["require_grant_only"] = json!(false);
    let (s, b) = app.create(useless).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("grant_optional: needs require_grant_only"),
        "{b}"
    );
    // A live grant: enough by itself.
    approved_grant(&app, "tool:deploy", "emp-1").await;
    let (s, r) = app.create(optional).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("confirmed"), Some("grant")),
        "{r}"
    );
}

/// How many requests of `tool` are stored, whatever became of them.
async fn stored(app: &TestApp, tool: &str) -> i64 {
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM confirmations WHERE tool = ?")
        .bind(tool)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

#[tokio::test]
async fn a_grant_for_one_tool_presented_with_another_is_refused_naming_both_and_nothing_is_stored()
{
    let app = TestApp::spawn().await;
    approved_grant(&app, "tool:deploy", "emp-1").await;
    let asked = app.telegram.sent_messages().len();
    for only in [true, false] {
        let (s, b) = app
            .create(presenting(
                "drop_table",
                json!({"table": "users"}),
                "tool:deploy",
                only,
            ))
            .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
        assert_eq!(b["error"]["code"], "invalid_field");
        let message = b["error"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("grant_scope: 'tool:deploy' does not cover tool 'drop_table'"),
            "{message}"
        );
    }
    // An idempotency key does not make it a request either.
    let mut keyed = presenting("drop_table", json!({}), "tool:deploy", true);
    keyed["idempotency_key"] = json!("k-1");
    assert_eq!(app.create(keyed).await.0, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(stored(&app, "drop_table").await, 0, "nothing stored");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.telegram.sent_messages().len(), asked, "nobody asked");

    // The tool it names is covered.
    let (s, r) = app
        .create(presenting("deploy", json!({}), "tool:deploy", true))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("confirmed"), Some("grant"))
    );
}

#[tokio::test]
async fn a_deny_rule_beats_a_live_wildcard_grant_with_or_without_require_grant_only() {
    let app = TestApp::spawn_with_settings(gated).await;
    let grant = approved_grant(&app, "tool:*", "emp-1").await;
    let asked = app.telegram.sent_messages().len();
    for only in [true, false] {
        let (s, r) = app
            .create(presenting(
                "drop_table",
                json!({"env": "prod"}),
                "tool:*",
                only,
            ))
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(
            (r["status"].as_str(), r["via"].as_str(), r["rule"].as_str()),
            (Some("cancelled"), Some("rule"), Some("no-drops-in-prod")),
            "require_grant_only {only}: {r}"
        );
        assert_eq!(r["do_not_retry"], true);
        assert_eq!(
            r["reason"],
            "denied by rule 'no-drops-in-prod': production tables are never dropped by agents"
        );
        let events = app.audit_events(r["id"].as_str().unwrap()).await;
        assert_eq!(events[0]["kind"], "rule_decided", "{events:?}");
    }
    // What no deny matches, the grant confirms, naming itself and the scope that covered
    // the call, in the record and in the audit trail.
    let (_, r) = app
        .create(presenting(
            "drop_table",
            json!({"env": "staging"}),
            "tool:*",
            true,
        ))
        .await;
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("confirmed"), Some("grant")),
        "{r}"
    );
    let reason = r["reason"].as_str().unwrap();
    let id = grant["grant_id"].as_str().unwrap();
    assert!(
        reason.starts_with(&format!(
            "allowed by grant {id} (tool:* for emp-1, granted by "
        )) && reason.ends_with("): tool:* covers drop_table"),
        "{reason}"
    );
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "grant_decided", "{events:?}");
    assert_eq!(events[0]["detail"]["reason"], reason);
    assert_eq!(events[0]["detail"]["status"], "confirmed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.telegram.sent_messages().len(), asked, "nobody asked");
}

#[tokio::test]
async fn a_scope_of_another_kind_covers_only_the_tools_a_mapping_names_and_an_unmapped_one_none() {
    let app = TestApp::spawn_with_settings(gated).await;
    approved_grant(&app, "billing:write", "emp-1").await;
    // Mapped by route ops: its tools, confirmed by the grant, the reason saying how.
    for (tool, pattern) in [("transfer", "transfer"), ("refund_card", "refund_*")] {
        let (s, r) = app
            .create(presenting(
                tool,
                json!({"amount": 9000}),
                "billing:write",
                true,
            ))
            .await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(
            (r["status"].as_str(), r["via"].as_str()),
            (Some("confirmed"), Some("grant")),
            "{r}"
        );
        assert!(
            r["reason"].as_str().unwrap().ends_with(&format!(
                "): billing:write covers {tool} (grant_scopes of route 'ops': {pattern})"
            )),
            "{r}"
        );
    }
    // Any other tool is refused, naming the scope, the tool and what it is mapped to.
    let refusal = |b: &Value| b["error"]["message"].as_str().unwrap().to_owned();
    let (s, b) = app
        .create(presenting(
            "drop_table",
            json!({"env": "staging"}),
            "billing:write",
            true,
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert_eq!(
        refusal(&b),
        "grant_scope: 'billing:write' does not cover tool 'drop_table': route 'ops' maps it to transfer, refund_*"
    );
    // On a route that does not map it, it covers nothing.
    let mut elsewhere = presenting("transfer", json!({"amount": 1}), "billing:write", true);
    elsewhere["route"] = json!("other");
    let (s, b) = app.create(elsewhere).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        refusal(&b)
            .contains("no grant_scopes (of agent 'agent-a' or route 'other') maps 'billing:write'"),
        "{b}"
    );
    // Unmapped anywhere: refused.
    let (s, b) = app
        .create(presenting(
            "transfer",
            json!({"amount": 1}),
            "billing:read",
            true,
        ))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        refusal(&b).starts_with("grant_scope: 'billing:read' does not cover tool 'transfer'"),
        "{b}"
    );
    // The agent's own mapping counts on every one of its routes: covered, and with no
    // grant for it, cancelled by the grant check.
    let mut reading = presenting("read_report", json!({}), "report:read", true);
    reading["route"] = json!("other");
    let (s, r) = app.create(reading).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["reason"], "no grant for report:read (owner emp-1)");
    assert_eq!(stored(&app, "drop_table").await, 0);
}

#[tokio::test]
async fn in_a_dry_run_a_deny_does_not_stop_a_grant_and_the_record_says_what_it_would_have_done() {
    let app =
        TestApp::spawn_with_settings(|t| format!("rules_mode = \"dry_run\"\n{}", gated(t))).await;
    approved_grant(&app, "tool:*", "emp-1").await;
    let (s, r) = app
        .create(presenting(
            "drop_table",
            json!({"env": "prod"}),
            "tool:*",
            true,
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        (r["status"].as_str(), r["via"].as_str()),
        (Some("confirmed"), Some("grant")),
        "{r}"
    );
    assert_eq!(r["rule_decision"]["effect"], "deny");
    assert_eq!(r["rule_decision"]["enforced"], false);
    let events = app.audit_events(r["id"].as_str().unwrap()).await;
    assert_eq!(events[0]["kind"], "grant_decided", "{events:?}");
    assert_eq!(events[0]["detail"]["rules"]["effect"], "deny");
    assert_eq!(events[0]["detail"]["rules"]["enforced"], false);
}

#[tokio::test]
async fn bad_grant_requests_are_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    for (body, field) in [
        (json!({"scope": "tool:deploy"}), "owner_id"),
        (json!({"owner_id": "a"}), "scope"),
        (json!({"owner_id": "a", "scope": "deploy"}), "scope"),
        (json!({"owner_id": "a", "scope": "tool:de*ploy"}), "scope"),
        (
            json!({"owner_id": "a", "scope": "tool:x", "window_seconds": 0}),
            "window_seconds",
        ),
        (
            json!({"owner_id": "a", "scope": "tool:x", "bogus": 1}),
            "bogus",
        ),
        (
            json!({"owner_id": "a", "scope": "tool:x", "interaction_id": "i", "wait": "suspend"}),
            "interaction_id",
        ),
    ] {
        let (s, b) = post_grant(&app, body.clone()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {b}");
        assert!(
            b["error"]["message"].as_str().unwrap().starts_with(field),
            "{body}: {b}"
        );
    }
    let (s, b) = app
        .create(json!({"tool": "t", "params": {}, "require_grant_only": true}))
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
}

/// Types `text` as `user` in the ops chat and returns the bot's answer containing `needle`.
async fn answer_to(
    app: &TestApp,
    user: crate::support::fake_telegram::TgUser,
    text: &str,
    needle: &str,
) -> crate::support::fake_telegram::SentMessage {
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram.send_text_message(OPS_CHAT, user, text);
    for _ in 0..500 {
        if let Some(m) = app
            .telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .skip(before)
            .find(|m| m.visible_text.contains(needle))
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer to {text:?} containing {needle:?}");
}

#[tokio::test]
async fn operators_list_grants_with_slash_grants_and_revoke_them_with_its_button_or_slash_revoke() {
    let app = TestApp::spawn().await;
    let mut ids = Vec::new();
    for (n, scope) in ["tool:deploy", "tool:*"].into_iter().enumerate() {
        let id = guard_approval(&app, &format!("guard-c{n}"), scope, "emp-1", 900).await;
        let (_, g) = post_grant(
            &app,
            json!({"owner_id": "emp-1", "scope": scope, "interaction_id": id}),
        )
        .await;
        ids.push(g["grant"]["grant_id"].as_str().unwrap().to_owned());
    }
    let list = answer_to(&app, bob(), "/grants", "Live grants (2)").await;
    let text = &list.visible_text;
    assert!(text.contains(&ids[0]) && text.contains(&ids[1]), "{text}");
    assert!(
        text.contains("agent-a may run any deploy call for owner emp-1"),
        "{text}"
    );
    assert!(text.contains("granted by Alice"), "{text}");
    let label = "🔒 Revoke tool:deploy for emp-1";
    assert!(
        list.buttons.iter().flatten().any(|b| b.text == label),
        "{:?}",
        list.buttons
    );

    // Carol approves no route of this chat: her tap is refused, the grant lives on.
    let q = app.telegram.tap(OPS_CHAT, list.message_id, label, carol());
    let refused = app.telegram.wait_for_callback_answer(&q).await;
    assert!(refused.show_alert, "{refused:?}");
    assert!(check(&app, "emp-1", "tool:deploy").await);

    let q = app.telegram.tap(OPS_CHAT, list.message_id, label, bob());
    let done = app.telegram.wait_for_callback_answer(&q).await;
    assert_eq!(
        done.text.as_deref(),
        Some("🔒 Revoked: agent-a can no longer run any deploy call for emp-1 without asking.")
    );
    // Stopped at once. (The wildcard grant still covers deploy calls, so the list, not
    // the check, shows which grant is left.)
    let r = app
        .client
        .get(app.url("/v1/grants"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    let (_, live) = json_of(r).await;
    let live: Vec<&str> = live["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["grant_id"].as_str().unwrap())
        .collect();
    assert_eq!(live, [ids[1].as_str()]);
    // A second tap: already revoked.
    let q = app.telegram.tap(OPS_CHAT, list.message_id, label, bob());
    let again = app.telegram.wait_for_callback_answer(&q).await;
    assert!(
        again.text.unwrap().contains("There is no live grant"),
        "second tap"
    );

    let revoked = answer_to(&app, alice(), &format!("/revoke {}", ids[1]), "revoked by").await;
    assert!(
        revoked
            .visible_text
            .contains("can no longer run any call of any tool for owner emp-1"),
        "{}",
        revoked.visible_text
    );
    assert!(
        !check(&app, "emp-1", "tool:deploy").await,
        "no grant covers it any more"
    );
    let events_pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    let actors: Vec<(String,)> =
        sqlx::query_as("SELECT actor FROM audit_events WHERE kind = 'grant_revoked' ORDER BY seq")
            .fetch_all(&events_pool)
            .await
            .unwrap();
    events_pool.close().await;
    assert_eq!(
        actors,
        [(format!("telegram:{BOB}"),), (format!("telegram:{ALICE}"),)]
    );
}
