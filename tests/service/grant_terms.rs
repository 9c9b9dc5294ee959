//! The terms a person approves are the terms stored (issue 46): a grant question carries
//! its scope, owner and window as data, shown under 🔑 on the service's own lines, never
//! cut; the person's yes stores the grant on those terms, from the tap, listed at once;
//! presenting the question afterwards finds that grant and can neither lengthen nor
//! widen it; an approval asked without terms grants nothing, whatever its words.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::SentMessage;
use crate::support::interactions::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn post_grant(app: &TestApp, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url("/v1/grants"))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .expect("POST /v1/grants");
    json_of(r).await
}

async fn live_grants(app: &TestApp) -> Vec<Value> {
    let r = app
        .client
        .get(app.url("/v1/grants"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET /v1/grants");
    let (s, list) = json_of(r).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    list["grants"].as_array().expect("grants").clone()
}

/// The message in the ops chat whose text holds `needle`.
async fn message_with(app: &TestApp, needle: &str) -> SentMessage {
    for _ in 0..500 {
        if let Some(m) = app
            .telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .find(|m| m.visible_text.contains(needle))
        {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "no message with {needle:?}: {:?}",
        app.telegram.messages_in(OPS_CHAT)
    );
}

/// Asks `question` as an approval interaction `id` with `grant` terms (as the Python
/// package asks `GrantGuard`'s), and returns its message.
async fn ask_with_terms(app: &TestApp, id: &str, question: &str, grant: Value) -> SentMessage {
    let (s, b) = post_interaction(
        app,
        json!({"interaction": {"interaction_id": id, "question": question,
                               "interaction_type": "approval", "default_response": false,
                               "grant": grant}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    message_with(app, "🔑 Grant").await
}

fn message_of(b: &Value) -> &str {
    b["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_approval_shown_as_one_minute_never_gives_more() {
    let app = TestApp::spawn().await;
    let (s, asked) = post_grant(
        &app,
        json!({"owner_id": "carol", "scope": "tool:read_report", "window_seconds": 60,
               "reason": "read the Q3 sales report", "wait": "suspend"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{asked}");
    let id = asked["interaction_id"].as_str().unwrap().to_owned();
    let msg = message_with(&app, "🔑 Grant").await;
    assert!(
        msg.visible_text
            .contains("Duration: 1 min from your tap, so until"),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "✅ Approve", alice()).await;
    let ended = wait_for_status_as(&app, TOKEN_A, &id, "completed", Duration::from_secs(10)).await;

    // The grant exists from the tap, for the minute shown, whatever is presented later.
    let grants = live_grants(&app).await;
    assert_eq!(grants.len(), 1, "{grants:?}");
    let g = &grants[0];
    assert_eq!(time_of(&g["created_at"]), time_of(&ended["decided_at"]));
    assert_eq!(
        time_of(&g["expires_at"]) - time_of(&g["created_at"]),
        time::Duration::minutes(1),
        "{g}"
    );
    for (field, body) in [
        ("window_seconds", json!({"window_seconds": 28_800})),
        ("window_seconds", json!({"window_seconds": 59})),
        ("scope", json!({"scope": "tool:*"})),
        ("owner_id", json!({"owner_id": "mallory"})),
        ("route", json!({"route": "other"})),
    ] {
        let mut presented =
            json!({"owner_id": "carol", "scope": "tool:read_report", "interaction_id": id});
        for (k, v) in body.as_object().unwrap() {
            presented[k] = v.clone();
        }
        let (s, b) = post_grant(&app, presented).await;
        assert_eq!(s, StatusCode::CONFLICT, "{field}: {b}");
        assert!(message_of(&b).starts_with(field), "{field}: {b}");
    }
    assert!(
        message_of(
            &post_grant(
                &app,
                json!({"owner_id": "carol", "scope": "tool:read_report",
                       "window_seconds": 28_800, "interaction_id": id}),
            )
            .await
            .1
        )
        .contains("the person approved 60 (1 min from the yes)")
    );
    // Presented as asked (or without a window): that very grant, every time.
    for window in [json!(60), Value::Null] {
        let (s, b) = post_grant(
            &app,
            json!({"owner_id": "carol", "scope": "tool:read_report",
                   "window_seconds": window, "interaction_id": id}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        assert_eq!(b["grant"]["grant_id"], g["grant_id"], "{b}");
        assert_eq!(b["grant"]["expires_at"], g["expires_at"], "{b}");
    }
    assert_eq!(live_grants(&app).await.len(), 1);
}

#[tokio::test]
async fn a_window_the_route_cuts_is_shown_cut_and_either_window_presents_the_cut_grant() {
    let app = TestApp::spawn_with_settings(|s| {
        s.replacen(
            "forbid_self_approval = true\n",
            "forbid_self_approval = true\nmax_grant_seconds = 3600\n",
            1,
        )
    })
    .await;
    let msg = ask_with_terms(
        &app,
        "guard-cut",
        "Deploy all day?",
        json!({"scope": "tool:deploy", "owner_id": "emp-1", "window_seconds": 86_400}),
    )
    .await;
    assert!(
        msg.visible_text.contains(
            "Duration: 1 h from your tap (the agent asked for 1 day; the route allows at most this)"
        ),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_status_as(
        &app,
        TOKEN_A,
        "guard-cut",
        "completed",
        Duration::from_secs(10),
    )
    .await;
    for window in [86_400, 3600] {
        let (s, b) = post_grant(
            &app,
            json!({"owner_id": "emp-1", "scope": "tool:deploy", "window_seconds": window,
                   "interaction_id": "guard-cut"}),
        )
        .await;
        assert_eq!(s, StatusCode::CREATED, "{b}");
        let g = &b["grant"];
        assert_eq!(
            time_of(&g["expires_at"]) - time_of(&g["created_at"]),
            time::Duration::hours(1)
        );
    }
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "window_seconds": 7200,
               "interaction_id": "guard-cut"}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
}

#[tokio::test]
async fn terms_after_a_question_too_long_to_show_are_shown_whole() {
    let app = TestApp::spawn().await;
    // The question: 3,589 characters, its own Scope and Owner lines last.
    let question = format!(
        "Please approve reading the Q3 sales report (read-only). {}\nScope: tool:read_report\nOwner: bob",
        "Details follow. ".repeat(220)
    );
    assert!(question.chars().count() > 3500);
    let msg = ask_with_terms(
        &app,
        "long-1",
        &question,
        json!({"scope": "tool:*", "owner_id": "carol", "window_seconds": 60}),
    )
    .await;
    let text = &msg.visible_text;
    assert!(
        text.contains("more characters of the question not shown"),
        "{text}"
    );
    for line in [
        "🔑 Grant: approving lets agent-a act on these terms only, without asking for each call where a grant is enough (deny rules still apply)",
        "Scope: tool:* (every call of every tool)",
        "Owner: carol",
        "Duration: 1 min from your tap",
        "Listed in /grants from your tap; revoke it there any time.",
    ] {
        assert!(text.contains(line), "{line}: {text}");
    }
    assert!(
        !text.contains("Owner: bob"),
        "the agent's line was cut: {text}"
    );

    // Terms that could not be shown whole are not asked at all.
    let (s, b) = post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "long-2", "question": "Grant?",
                               "interaction_type": "approval",
                               "grant": {"scope": "tool:*", "owner_id": "&".repeat(256),
                                         "window_seconds": 60}}}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        message_of(&b).starts_with("interaction.grant: cannot be shown whole"),
        "{b}"
    );
}

#[tokio::test]
async fn a_plain_approval_with_scope_and_owner_lines_grants_nothing() {
    let app = TestApp::spawn().await;
    let question = "⚠️ Tool 'deploy' requires approval.\nScope: tool:*\nOwner: carol\nApproval window: 480.0 min\n\nDo you approve this action?";
    let (s, b) = post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "plain-1", "question": question,
                               "interaction_type": "approval", "default_response": false}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let msg = message_with(&app, "Scope: tool:*").await;
    assert!(!msg.visible_text.contains("🔑"), "{}", msg.visible_text);
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_status_as(
        &app,
        TOKEN_A,
        "plain-1",
        "completed",
        Duration::from_secs(10),
    )
    .await;
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "carol", "scope": "tool:*", "window_seconds": 28_800,
               "interaction_id": "plain-1"}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{b}");
    assert!(
        message_of(&b).starts_with("interaction_id: is not a grant question"),
        "{b}"
    );
    assert_eq!(live_grants(&app).await, Vec::<Value>::new());
}

#[tokio::test]
async fn grant_terms_are_refused_where_no_yes_could_be_shown_them_or_stored() {
    let app = TestApp::spawn().await;
    let terms = json!({"scope": "tool:deploy", "owner_id": "emp-1", "window_seconds": 60});
    for (body, field) in [
        (
            json!({"interaction": {"interaction_id": "r-1", "question": "Which?",
                                   "interaction_type": "free_text", "grant": terms}}),
            "interaction.grant: goes only with interaction_type \"approval\"",
        ),
        (
            json!({"interaction": {"interaction_id": "r-2", "question": "Grant?",
                                   "interaction_type": "approval", "grant": terms,
                                   "timeout_action": "default", "default_response": true}}),
            "interaction.default_response: must not be true on a grant question",
        ),
        (
            json!({"interaction": {"interaction_id": "r-3", "question": "Grant?",
                                   "interaction_type": "approval", "grant": terms},
                   "recipient": "alice"}),
            "interaction.grant: is asked of a route's approvers",
        ),
        (
            json!({"interaction": {"interaction_id": "r-4", "question": "Grant?",
                                   "interaction_type": "approval", "grant": terms},
                   "call": {"tool": "deploy", "params": {}, "owner_id": "emp-1"}}),
            "call: does not go with a grant",
        ),
        (
            json!({"interaction": {"interaction_id": "r-5", "question": "Grant?",
                                   "interaction_type": "approval",
                                   "grant": {"scope": "tool:deploy", "owner_id": "emp-1",
                                             "window_seconds": 60, "until": "forever"}}}),
            "interaction.grant: has no field 'until'",
        ),
        (
            json!({"interaction": {"interaction_id": "r-6", "question": "Grant?",
                                   "interaction_type": "approval",
                                   "grant": {"scope": "tool:deploy", "owner_id": "emp-1"}}}),
            "interaction.grant.window_seconds: is required",
        ),
    ] {
        let (s, b) = post_interaction(&app, body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{field}: {b}");
        assert!(message_of(&b).starts_with(field), "{field}: {b}");
    }
}

#[tokio::test]
async fn a_granted_question_is_listed_and_audited_from_the_tap_and_kept_across_a_restart() {
    let app = TestApp::spawn().await;
    let msg = ask_with_terms(
        &app,
        "guard-9",
        "⚠️ Tool 'deploy' requires approval.",
        json!({"scope": "tool:deploy", "owner_id": "emp-1", "window_seconds": 900}),
    )
    .await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    let ended = wait_for_status_as(
        &app,
        TOKEN_A,
        "guard-9",
        "completed",
        Duration::from_secs(10),
    )
    .await;
    // Listed before anything is presented: to the agent, and in the chat.
    let grants = live_grants(&app).await;
    assert_eq!(grants.len(), 1, "{grants:?}");
    let g = grants[0].clone();
    assert_eq!(
        (&g["scope"], &g["owner_id"], &g["interaction_id"]),
        (&json!("tool:deploy"), &json!("emp-1"), &json!("guard-9"))
    );
    assert_eq!(g["granted_by"]["id"], ALICE);
    assert_eq!(
        g["reason"], "⚠️ Tool 'deploy' requires approval.",
        "the words read"
    );
    assert_eq!(time_of(&g["created_at"]), time_of(&ended["decided_at"]));
    let shown = app
        .telegram
        .wait_for_message_text_containing(OPS_CHAT, msg.message_id, "🔑 Granted until")
        .await;
    assert!(
        shown.visible_text.contains(g["grant_id"].as_str().unwrap()),
        "{}",
        shown.visible_text
    );
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram.send_text_message(OPS_CHAT, alice(), "/grants");
    let listing = app
        .telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .pop()
        .unwrap();
    assert!(
        listing
            .visible_text
            .contains(g["grant_id"].as_str().unwrap()),
        "{}",
        listing.visible_text
    );
    // Audited in the decision's own write.
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    let audited: Vec<String> = sqlx::query_scalar("SELECT kind FROM audit_events ORDER BY seq")
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert!(audited.iter().any(|k| k == "grant_created"), "{audited:?}");

    // Durable: a restart keeps it, and presenting finds it.
    let app = app.restart().await;
    assert_eq!(live_grants(&app).await, vec![g.clone()]);
    let (s, b) = post_grant(
        &app,
        json!({"owner_id": "emp-1", "scope": "tool:deploy", "window_seconds": 900,
               "interaction_id": "guard-9"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{b}");
    assert_eq!(b["grant"]["grant_id"], g["grant_id"]);
}

#[tokio::test]
async fn a_grant_question_settled_by_a_quorum_is_granted_by_the_yes_that_settled_it() {
    let app = TestApp::spawn().await;
    let (s, b) = post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "quorum-1", "question": "Deploy for a day?",
                               "interaction_type": "approval", "consensus_mode": "quorum",
                               "grant": {"scope": "tool:deploy", "owner_id": "emp-1",
                                         "window_seconds": 600}},
               "route": "council"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{b}");
    let msg = app
        .telegram
        .wait_for_message_in(COUNCIL_CHAT, 1)
        .await
        .remove(0);
    assert!(
        msg.visible_text.contains("🔑 Grant"),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "✅ Approve", alice()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        live_grants(&app).await,
        Vec::<Value>::new(),
        "one yes of two"
    );
    tap(&app, &msg, "✅ Approve", bob()).await;
    wait_for_status_as(
        &app,
        TOKEN_A,
        "quorum-1",
        "completed",
        Duration::from_secs(10),
    )
    .await;
    let grants = live_grants(&app).await;
    assert_eq!(grants.len(), 1, "{grants:?}");
    assert_eq!(grants[0]["granted_by"]["id"], BOB);
    assert_eq!(grants[0]["route"], "council");
}
