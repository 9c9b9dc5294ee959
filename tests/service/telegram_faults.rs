//! Telegram misbehaving: flood control, dropped connections, upgraded groups and a
//! seeded mix of all of them. Whatever Telegram does, every question reaches the chat
//! (or fails closed with the reason), every request ends with exactly the outcome an
//! operator tapped, and every message ends up showing it.
//!
//! The retry and pacing policy itself is unit-tested on tokio's paused clock in
//! `src/telegram/client/` and `src/telegram/ratelimit/` (including flood waits
//! longer than any integration test should sit through); these tests check that the
//! pieces hold together against the fake Bot API, with waits of a second or two.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::{FakeTelegram, RecordedRequest};
use hitl_telegram::telegram::client::build_bot;
use reqwest::StatusCode;
use serde_json::{Value, json};
use teloxide::RequestError;
use teloxide::prelude::*;
use tokio::time::Instant;

fn deploy(n: usize) -> Value {
    json!({"tool": "deploy", "params": {"job": format!("job-{n:02}")}})
}

/// A bot speaking to `telegram` directly, without the service in between.
fn raw_bot(telegram: &FakeTelegram) -> Bot {
    build_bot(
        telegram.token(),
        telegram.api_url().parse().expect("URL"),
        1,
    )
}

/// Sends of one chat must be a second apart on the bot's side. The fake stamps their
/// arrival, which trails the send by a few varying milliseconds (more for the first,
/// which opens a connection), hence the allowance.
const ONE_SECOND_AT_ARRIVAL: Duration = Duration::from_millis(850);

#[track_caller]
fn assert_spaced(requests: &[RecordedRequest], at_least: Duration) {
    for pair in requests.windows(2) {
        let gap = pair[1].at - pair[0].at;
        assert!(
            gap >= at_least,
            "{} then {} only {gap:?} apart",
            pair[0].method,
            pair[1].method
        );
    }
}

#[tokio::test]
async fn a_dropped_connection_reaches_teloxide_as_a_network_error() {
    let telegram = FakeTelegram::start().await;
    let bot = raw_bot(&telegram);
    telegram.drop_next("getMe", 1);
    let dropped = bot.get_me().await;
    assert!(
        matches!(dropped, Err(RequestError::Network(_))),
        "{dropped:?}"
    );
    assert!(bot.get_me().await.is_ok(), "the fake itself keeps working");

    // Carried out, then dropped: the client sees the same error, yet the message exists.
    telegram.drop_after_processing_next("sendMessage", 1);
    let sent = bot.send_message(ChatId(OPS_CHAT), "hello").await;
    assert!(matches!(sent, Err(RequestError::Network(_))), "{sent:?}");
    assert_eq!(telegram.sent_messages().len(), 1);
}

#[tokio::test]
async fn a_group_upgrade_reaches_teloxide_with_the_new_chat_id() {
    let telegram = FakeTelegram::start().await;
    let bot = raw_bot(&telegram);
    telegram.fail_next_with_migrate("sendMessage", 1, -1_009_999_999_999);
    let sent = bot.send_message(ChatId(-42), "hello").await;
    assert!(
        matches!(
            sent,
            Err(RequestError::MigrateToChatId(ChatId(-1_009_999_999_999)))
        ),
        "{sent:?}"
    );
    assert!(telegram.sent_messages().is_empty());
}

#[tokio::test]
async fn a_question_to_a_group_that_became_a_supergroup_goes_to_the_new_chat() {
    let app = TestApp::spawn().await;
    let supergroup = -1_009_999_999_999;
    app.telegram
        .fail_next_with_migrate("sendMessage", 1, supergroup);
    let (record, message_id) = app.ask_suspended(deploy(1)).await;
    let sent = app.telegram.sent_messages();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].chat_id, supergroup);

    app.telegram
        .tap(supergroup, message_id, "✅ Approve", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    app.telegram
        .wait_for_message(supergroup, message_id, "outcome shown", |m| {
            !m.has_buttons()
        })
        .await;
}

#[tokio::test]
async fn a_question_whose_connection_drops_is_sent_again_and_can_be_decided() {
    let app = TestApp::spawn().await;
    app.telegram.drop_next("sendMessage", 1);
    let (record, message_id) = app.ask_suspended(deploy(1)).await;
    assert_eq!(app.telegram.requests("sendMessage").len(), 2);
    assert_eq!(app.telegram.sent_messages().len(), 1);

    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let decided = app
        .wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    assert_eq!(decided["decided_by"]["id"], ALICE);
}

// A question delivered over a dropped connection (Telegram posted it, the bot never
// heard back and posted it again): tests/service/every_tap.rs shows both copies count.

#[tokio::test]
async fn questions_to_one_chat_go_out_a_second_apart_without_holding_up_another_chat() {
    let app = TestApp::spawn().await;
    for n in 0..3 {
        let (status, _) = app
            .create(with(deploy(n), json!({"wait": "suspend"})))
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
    }
    let (status, _) = app
        .create(with(
            deploy(9),
            json!({"wait": "suspend", "route": "other"}),
        ))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);

    let sends = app.telegram.wait_for_requests("sendMessage", 4).await;
    let to = |chat: i64| -> Vec<RecordedRequest> {
        sends
            .iter()
            .filter(|r| r.body["chat_id"] == chat)
            .cloned()
            .collect()
    };
    let (ops, other) = (to(OPS_CHAT), to(OTHER_CHAT));
    assert_eq!((ops.len(), other.len()), (3, 1));
    assert_spaced(&ops, ONE_SECOND_AT_ARRIVAL);
    assert!(
        other[0].at < ops[2].at,
        "the other chat waited for the busy one"
    );
}

#[tokio::test]
async fn an_outcome_edit_held_back_by_flood_control_is_made_once_the_wait_is_over() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(1)).await;
    app.telegram
        .fail_next_with_retry_after("editMessageText", 1, 2);
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    app.telegram
        .wait_for_message(OPS_CHAT, message_id, "outcome shown", |m| !m.has_buttons())
        .await;
    // The retry's wait starts when the 429 comes back, after the fake stamped the first
    // edit: no allowance needed.
    let edits = app.telegram.requests("editMessageText");
    assert_eq!(edits.len(), 2);
    assert!(edits[1].at - edits[0].at >= Duration::from_secs(2));
}

#[tokio::test]
async fn a_tap_answer_held_back_by_flood_control_is_given_once_the_wait_is_over() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(1)).await;
    app.telegram
        .fail_next_with_retry_after("answerCallbackQuery", 1, 1);
    let q = app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", alice());
    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert_eq!(answer.text.as_deref(), Some("❌ Cancelled"));
    let answers = app.telegram.requests("answerCallbackQuery");
    assert_eq!(answers.len(), 2);
    assert!(answers[1].at - answers[0].at >= Duration::from_secs(1));
    app.wait_status(record["id"].as_str().unwrap(), "cancelled")
        .await;
}

#[tokio::test]
async fn a_refusal_fails_closed_at_once_without_retrying() {
    let app = TestApp::spawn().await;
    for (code, refusal) in [
        (403, "Forbidden: bot was blocked by the user"),
        (400, "Bad Request: chat not found"),
    ] {
        let before = app.telegram.requests("sendMessage").len();
        app.telegram.fail_next("sendMessage", 1, code, refusal);
        let started = Instant::now();
        // Blocking, with the default 30 s deadline: only an immediate failure returns fast.
        let (status, record) = app.create(deploy(1)).await;
        assert_eq!(status, StatusCode::OK, "{record}");
        assert_eq!(record["via"], "fail_closed");
        assert!(
            record["reason"].as_str().unwrap().contains(refusal),
            "{record}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(app.telegram.requests("sendMessage").len(), before + 1);
    }
}

#[tokio::test]
async fn a_question_telegram_will_not_take_before_its_deadline_times_out() {
    let app = TestApp::spawn().await;
    // Flood control asks for longer than the request may wait: the question cannot
    // reach a human in time, so the request times out (it does not fail closed).
    app.telegram.fail_next_with_retry_after("sendMessage", 1, 5);
    let started = Instant::now();
    let (status, record) = app
        .create(with(deploy(1), json!({"timeout_seconds": 1})))
        .await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "timeout", "{record}");
    assert_eq!(record["via"], "timeout", "{record}");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "sat out the 5 s"
    );
    assert_eq!(app.telegram.requests("sendMessage").len(), 1);
    assert!(app.telegram.sent_messages().is_empty());
}

/// Seeded, so a failure can be replayed: each method meets the same faults in the same
/// order in every run. This seed gives the first twelve sends two drops, a 429 and two
/// slow answers, the first twelve edits two 429s and two slow answers, and the tap
/// answers a drop, a 429 and a slow answer.
const CHAOS_SEED: u64 = 10;

#[tokio::test]
async fn under_chaos_every_question_arrives_and_every_request_ends_as_tapped() {
    let app = TestApp::spawn().await;
    let telegram = &app.telegram;
    telegram.set_wait_timeout(Duration::from_secs(45));
    telegram.chaos(
        &["sendMessage", "editMessageText", "answerCallbackQuery"],
        0.3,
        CHAOS_SEED,
    );
    // Less for getUpdates: the poller backs off 1, 2, 4 s after failures in a row, and a
    // long run of them would only test patience.
    telegram.chaos(&["getUpdates"], 0.1, CHAOS_SEED);

    // Twelve requests over two chats, decided by each route's approver. In one group,
    // twelve questions and twelve outcome edits would pass Telegram's twenty messages a
    // minute, and the test would sit out that minute.
    struct Ask {
        id: String,
        chat: i64,
        approver: crate::support::fake_telegram::TgUser,
        approve: bool,
        job: String,
    }
    let mut asks = Vec::new();
    for n in 0..12 {
        let (route, chat, approver) = if n % 2 == 0 {
            ("ops", OPS_CHAT, alice())
        } else {
            ("other", OTHER_CHAT, bob())
        };
        let body = with(
            deploy(n),
            json!({"wait": "suspend", "route": route, "timeout_seconds": 120}),
        );
        let (status, record) = app.create(body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{record}");
        asks.push(Ask {
            id: record["id"].as_str().unwrap().to_owned(),
            chat,
            approver,
            approve: n % 4 < 2,
            job: format!("job-{n:02}"),
        });
    }

    // Every question arrives, once: chaos drops connections only before Telegram acts.
    let messages = telegram.wait_for_messages(12).await;
    assert_eq!(messages.len(), 12);
    let message_of = |ask: &Ask| {
        let found: Vec<_> = messages
            .iter()
            .filter(|m| m.chat_id == ask.chat && m.visible_text.contains(&ask.job))
            .collect();
        assert_eq!(found.len(), 1, "{} in {messages:#?}", ask.job);
        found[0].message_id
    };

    // Nothing is decided before a tap.
    for ask in &asks {
        let (_, now) = app.get(&ask.id).await;
        assert_eq!(now["status"], "pending", "{now}");
    }
    for ask in &asks {
        let button = if ask.approve {
            "✅ Approve"
        } else {
            "❌ Cancel"
        };
        telegram.tap(ask.chat, message_of(ask), button, &ask.approver);
    }

    for ask in &asks {
        let status = if ask.approve {
            "confirmed"
        } else {
            "cancelled"
        };
        let decided = app.wait_status(&ask.id, status).await;
        assert_eq!(decided["via"], "operator", "{decided}");
        assert_eq!(decided["decided_by"]["id"], ask.approver.id, "{decided}");
        assert_eq!(decided["allowed"], ask.approve, "{decided}");
    }
    for ask in &asks {
        let line = format!(
            "{} by {}",
            if ask.approve { "Approved" } else { "Cancelled" },
            ask.approver.first_name
        );
        telegram
            .wait_for_message(ask.chat, message_of(ask), "outcome shown", |m| {
                !m.has_buttons() && m.visible_text.contains(&line)
            })
            .await;
    }
    assert_eq!(telegram.sent_messages().len(), 12, "no duplicate questions");

    // Even while retrying, no chat got more than a message a second.
    for chat in [OPS_CHAT, OTHER_CHAT] {
        let writes: Vec<_> = telegram
            .all_requests()
            .into_iter()
            .filter(|r| {
                matches!(r.method.as_str(), "sendmessage" | "editmessagetext")
                    && r.body["chat_id"] == chat
            })
            .collect();
        assert_spaced(&writes, ONE_SECOND_AT_ARRIVAL);
    }
    // And chaos did strike where it matters.
    let injected = telegram.injected_faults();
    for method in ["sendmessage", "editmessagetext", "answercallbackquery"] {
        assert!(
            injected.iter().any(|(m, _)| m == method),
            "no fault for {method}: {injected:?}"
        );
    }
}

/// `body` with the fields of `extra` added or replaced.
fn with(mut body: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}
