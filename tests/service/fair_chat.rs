//! Fair shares of a chat: agents posting to the same Telegram chat take turns for its
//! slots under Telegram's limits (one message a second per chat, twenty a minute per
//! group), so one agent's backlog never keeps another agent's question, or an outcome,
//! out of the chat; and a question that cannot reach the chat before its deadline ends
//! `timeout` at once, saying so, and is counted; one that ends while it waits for its
//! turn (withdrawn, say) is never posted.
//!
//! These run against Telegram's real limits: a turn is one second, so each test takes a
//! few seconds, where the first come, first served queue they guard against would need
//! more than a minute (and the tests would fail on the fake's wait timeout).

use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A suspended question of `tool` on `route`, willing to wait `timeout` seconds.
fn question(tool: &str, route: &str, timeout: f64) -> Value {
    json!({
        "tool": tool,
        "params": {},
        "route": route,
        "wait": "suspend",
        "timeout_seconds": timeout,
    })
}

/// Where the message whose text names `tool` is among the bot's messages in `chat`.
fn position_of(app: &TestApp, chat: i64, tool: &str) -> Option<usize> {
    app.telegram
        .messages_in(chat)
        .iter()
        .position(|m| m.visible_text.contains(tool))
}

#[tokio::test]
async fn two_agents_sharing_a_group_route_one_with_a_backlog_the_other_still_gets_its_turn() {
    let app = TestApp::spawn().await;
    // Agent A suspends thirty questions in the shared group, well inside its limits
    // (120 a minute, 100 pending): at twenty a minute they take more than a minute.
    for i in 0..30 {
        let (status, r) = app
            .create(question(&format!("a-backlog-{i:02}"), "other", 600.0))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    }
    app.telegram.wait_for_message_in(OTHER_CHAT, 1).await;
    let sent_before = app.telegram.messages_in(OTHER_CHAT).len();

    // Agent B asks one question there, with 30 s to spare: behind A's thirty it would
    // time out before reaching the chat.
    let (status, b) = app
        .create_as(TOKEN_B, question("b-question", "other", 30.0))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{b}");
    let b_id = b["id"].as_str().unwrap();
    // The next couple of messages in the chat: B's turn comes right after the message
    // of A's in progress (one more of A's may slip in while B's request is on its way).
    let next = sent_before + 3;
    let reached = app.telegram.wait_for_message_in(OTHER_CHAT, next).await;
    let b_at = reached[..next]
        .iter()
        .position(|m| m.visible_text.contains("b-question"))
        .unwrap_or_else(|| {
            panic!(
                "B's question is not among the next messages in the chat: {:?}",
                reached.iter().map(|m| &m.visible_text).collect::<Vec<_>>()
            )
        });

    // It is a live question, and A's backlog goes on after it, in A's order.
    let (_, b_now) = app.get_as(TOKEN_B, b_id, None).await;
    assert_eq!(b_now["status"], "pending", "{b_now}");
    let after = app.telegram.wait_for_message_in(OTHER_CHAT, b_at + 2).await;
    let a_tools: Vec<usize> = after
        .iter()
        .filter_map(|m| {
            let i = m.visible_text.find("a-backlog-")?;
            m.visible_text[i + 10..i + 12].parse().ok()
        })
        .collect();
    let mut in_order = a_tools.clone();
    in_order.sort_unstable();
    assert_eq!(a_tools, in_order, "A's questions keep their order");
    assert!(after[b_at + 1].visible_text.contains("a-backlog-"));
}

#[tokio::test]
async fn a_question_that_cannot_reach_the_chat_before_its_deadline_times_out_at_once_saying_so() {
    let app = TestApp::spawn().await;
    // Five questions take the `ops` chat's next five slots, one a second.
    for i in 0..5 {
        let (status, r) = app
            .create(question(&format!("queued-{i}"), "ops", 600.0))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    }
    // The sixth could go in 5 s, but may wait only 2 s. Blocking: the agent hears the
    // outcome as soon as it is known, before the five ahead of it are even sent.
    let (status, late) = app
        .create(json!({"tool": "too-late", "params": {}, "timeout_seconds": 2}))
        .await;
    assert_eq!(status, StatusCode::OK, "{late}");
    assert!(app.telegram.messages_in(OPS_CHAT).len() < 5);
    assert_eq!(late["status"], "timeout", "{late}");
    assert_eq!(late["via"], "timeout", "{late}");
    assert_eq!(late["allowed"], false, "{late}");
    let reason = late["reason"].as_str().unwrap();
    assert!(
        reason.contains("could not reach the chat before its deadline")
            && reason.contains("rate limits"),
        "{reason}"
    );

    // It never goes out, and took no slot: the five go on as before.
    app.telegram.wait_for_message_in(OPS_CHAT, 5).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(app.telegram.messages_in(OPS_CHAT).len(), 5);
    assert_eq!(position_of(&app, OPS_CHAT, "too-late"), None);

    let metrics = app.metrics_text().await;
    let counted: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("hitl_questions_missed_deadline_total{"))
        .collect();
    assert_eq!(counted.len(), 1, "{metrics}");
    assert!(
        counted[0].contains(r#"agent="agent-a""#) && counted[0].contains(r#"route="ops""#),
        "{}",
        counted[0]
    );
    assert!(counted[0].ends_with(" 1"), "{}", counted[0]);
}

#[tokio::test]
async fn an_outcome_is_shown_without_waiting_behind_an_agents_backlog() {
    let app = TestApp::spawn().await;
    let (_, message_id) = app
        .ask_suspended(json!({"tool": "decide-me", "params": {}}))
        .await;
    for i in 0..12 {
        let (status, r) = app
            .create(question(&format!("backlog-{i}"), "ops", 600.0))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    }
    app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
    let sent_at_tap = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram
        .wait_for_message(OPS_CHAT, message_id, "outcome shown", |m| !m.has_buttons())
        .await;
    // The edit takes the service's turn: at most a couple of the backlog's messages go
    // first (behind all twelve it would come ten seconds later).
    let sent_at_edit = app.telegram.messages_in(OPS_CHAT).len();
    assert!(
        sent_at_edit <= sent_at_tap + 3,
        "{} of the backlog went before the outcome",
        sent_at_edit - sent_at_tap
    );
}

#[tokio::test]
async fn a_question_withdrawn_while_it_waits_for_its_turn_is_never_posted() {
    let app = TestApp::spawn().await;
    // Five questions queue for the `ops` chat's next slots, one a second.
    let mut ids = Vec::new();
    for i in 0..5 {
        let (status, r) = app
            .create(question(&format!("queued-{i}"), "ops", 600.0))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{r}");
        ids.push(r["id"].as_str().unwrap().to_owned());
    }
    // The third is withdrawn long before its turn, two seconds away.
    let (status, withdrawn) = app.delete(&ids[2]).await;
    assert_eq!(status, StatusCode::OK, "{withdrawn}");
    assert_eq!(withdrawn["via"], "withdrawn", "{withdrawn}");
    assert!(app.telegram.messages_in(OPS_CHAT).len() < 3);

    // The others go out in their order; the third never does, not even to show its
    // outcome.
    app.telegram.wait_for_message_in(OPS_CHAT, 4).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let texts: Vec<String> = app
        .telegram
        .messages_in(OPS_CHAT)
        .iter()
        .map(|m| m.visible_text.clone())
        .collect();
    assert_eq!(texts.len(), 4, "{texts:?}");
    for (text, i) in texts.iter().zip([0, 1, 3, 4]) {
        assert!(text.contains(&format!("queued-{i}")), "{texts:?}");
    }
    let (_, last) = app.get(&ids[4]).await;
    assert_eq!(last["status"], "pending", "{last}");
}
