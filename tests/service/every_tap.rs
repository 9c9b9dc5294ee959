//! Every tap counts, once and in order: the first of two taps decides, a tap is
//! acknowledged to Telegram only once it is stored, and a copy of a question the service
//! never stored the id of (Telegram took the message, the answer was lost) decides like
//! any other and shows the outcome. They run in both modes (`polling::` and `webhook::`).

use std::time::Duration;

use crate::support::app::*;
use serde_json::json;

/// Holds SQLite's write lock on the service's database until dropped (rolled back), as a
/// slow disk or a long checkpoint would: whatever the service writes meanwhile waits.
struct WriteLock {
    conn: sqlx::SqliteConnection,
}

impl WriteLock {
    async fn take(db_url: &str) -> WriteLock {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(db_url).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut conn)
            .await
            .unwrap();
        WriteLock { conn }
    }

    async fn release(mut self) {
        sqlx::query("ROLLBACK")
            .execute(&mut self.conn)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn of_two_taps_reaching_the_service_together_the_first_decides_and_the_second_is_told() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().unwrap();

    // Alice taps Approve, Bob taps Cancel a moment later; Telegram hands both over at
    // once (one getUpdates batch, or two webhook connections at the same time).
    app.telegram.set_webhook_connections(2);
    app.telegram.hold_updates();
    let alice_tap = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let bob_tap = app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
    app.telegram.release_updates();

    let decided = app.wait_status(id, "confirmed").await;
    assert_eq!(decided["decided_by"]["id"], ALICE, "{decided}");
    let to_alice = app.telegram.wait_for_callback_answer(&alice_tap).await;
    assert_eq!(to_alice.text.as_deref(), Some("✅ Approved"));
    let to_bob = app.telegram.wait_for_callback_answer(&bob_tap).await;
    let told = to_bob.text.unwrap_or_default();
    assert!(
        told.contains("Already decided") && told.contains("approved by Alice"),
        "{told}"
    );
    // Bob's Cancel is not an answer of its own.
    let decisions = app
        .audit_events(id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "decided")
        .count();
    assert_eq!(decisions, 1);
}

#[tokio::test]
async fn taps_on_different_questions_in_one_batch_are_each_decided_by_their_own_first_tap() {
    let app = TestApp::spawn().await;
    let mut asked = Vec::new();
    for i in 0..4 {
        asked.push(
            app.ask_suspended(json!({"tool": "t", "params": {"i": i}}))
                .await,
        );
    }
    app.telegram.set_webhook_connections(8);
    app.telegram.hold_updates();
    // Even questions: Bob cancels first; odd ones: Alice approves first.
    for (i, (_, message_id)) in asked.iter().enumerate() {
        let (first, second) = if i % 2 == 0 {
            ((("❌ Cancel"), bob()), ("✅ Approve", alice()))
        } else {
            (("✅ Approve", alice()), ("❌ Cancel", bob()))
        };
        app.telegram.tap(OPS_CHAT, *message_id, first.0, first.1);
        app.telegram.tap(OPS_CHAT, *message_id, second.0, second.1);
    }
    app.telegram.release_updates();
    for (i, (record, _)) in asked.iter().enumerate() {
        let expected = if i % 2 == 0 { "cancelled" } else { "confirmed" };
        app.wait_status(record["id"].as_str().unwrap(), expected)
            .await;
    }
}

#[tokio::test]
async fn a_tap_is_acknowledged_to_telegram_only_once_its_decision_is_stored() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {}}))
        .await;
    let id = record["id"].as_str().unwrap();

    let lock = WriteLock::take(&app.db_url).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    // Long enough for the service to have the update (polls last 1 s) and be waiting on
    // the database; shorter than its 5 s busy timeout.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    if app.webhook {
        let acknowledged = app
            .telegram
            .webhook_deliveries()
            .iter()
            .any(|d| d.status.is_some_and(|s| (200..300).contains(&s)));
        assert!(!acknowledged, "{:?}", app.telegram.webhook_deliveries());
    } else {
        assert!(
            !app.telegram.requests("getUpdates").is_empty(),
            "the service polls"
        );
    }
    assert_eq!(
        app.telegram.pending_updates(),
        1,
        "Telegram was told the tap was handled before it was stored"
    );
    lock.release().await;

    let decided = app.wait_status(id, "confirmed").await;
    assert_eq!(decided["decided_by"]["id"], ALICE);
    for _ in 0..200 {
        if app.telegram.pending_updates() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the stored tap was never acknowledged");
}

/// The message id the service stored for question `id`, once it did.
async fn stored_message_id(db_url: &str, id: &str) -> i32 {
    let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
    for _ in 0..500 {
        let row: Option<(Option<i64>,)> =
            sqlx::query_as("SELECT message_id FROM confirmations WHERE id = ?")
                .bind(id)
                .fetch_optional(&pool)
                .await
                .unwrap();
        if let Some((Some(m),)) = row {
            pool.close().await;
            return m as i32;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the message id of {id} was never stored");
}

/// Waits until each of the messages lost its buttons and shows `outcome`.
async fn outcome_on_every_copy(app: &TestApp, message_ids: &[i32], outcome: &str) {
    for &message_id in message_ids {
        let shown = app
            .telegram
            .wait_for_message(OPS_CHAT, message_id, "the outcome, no buttons", |m| {
                !m.has_buttons()
            })
            .await;
        assert!(
            shown.visible_text.contains(outcome),
            "{}",
            shown.visible_text
        );
    }
}

/// Asks a question whose `sendMessage` Telegram carries out but whose answer never
/// arrives (the connection drops): the service sends it again. Returns the record, the
/// message id of the copy the service knows nothing of, and that of the one it stored.
async fn ask_with_a_lost_answer(
    app: &TestApp,
    body: serde_json::Value,
) -> (serde_json::Value, i32, i32) {
    app.telegram.drop_after_processing_next("sendMessage", 1);
    let before = app.telegram.messages_in(OPS_CHAT).len();
    let mut body = body;
    body["wait"] = json!("suspend");
    let (status, record) = app.create(body).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED, "{record}");
    app.telegram.wait_for_message_in(OPS_CHAT, before + 2).await;
    let stored = stored_message_id(&app.db_url, record["id"].as_str().unwrap()).await;
    let copies = app.telegram.messages_in(OPS_CHAT);
    assert_eq!(copies.len(), before + 2, "the question was posted twice");
    let lost = copies[before].message_id;
    assert_ne!(lost, stored);
    assert!(copies[before].has_buttons());
    (record, lost, stored)
}

#[tokio::test]
async fn a_tap_on_a_copy_whose_id_was_never_stored_decides_and_every_copy_shows_the_outcome() {
    let app = TestApp::spawn().await;
    let (record, lost, stored) =
        ask_with_a_lost_answer(&app, json!({"tool": "deploy", "params": {"env": "prod"}})).await;
    let id = record["id"].as_str().unwrap();

    // The operator taps the first message they see: it counts.
    let tap = app.telegram.tap(OPS_CHAT, lost, "✅ Approve", alice());
    let answer = app.telegram.wait_for_callback_answer(&tap).await;
    assert_eq!(answer.text.as_deref(), Some("✅ Approved"), "{answer:?}");
    let decided = app.wait_status(id, "confirmed").await;
    assert_eq!(decided["decided_by"]["id"], ALICE);

    outcome_on_every_copy(&app, &[lost, stored], "Approved by Alice").await;
    let found: Vec<_> = app
        .audit_events(id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "copy_found")
        .collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["detail"]["message_id"], lost);
}

#[tokio::test]
async fn a_copy_whose_id_was_never_stored_gets_the_timeout_shown_when_it_is_tapped() {
    let app = TestApp::spawn().await;
    let (record, lost, stored) = ask_with_a_lost_answer(
        &app,
        json!({"tool": "deploy", "params": {}, "timeout_seconds": 4}),
    )
    .await;
    let id = record["id"].as_str().unwrap();
    app.wait_status(id, "timeout").await;
    app.telegram
        .wait_for_message(OPS_CHAT, stored, "the outcome, no buttons", |m| {
            !m.has_buttons()
        })
        .await;

    // Nobody can tell the service of the first copy but Telegram, through a tap on it;
    // the first one makes it show the timeout too, and decides nothing.
    let tap = app.telegram.tap(OPS_CHAT, lost, "✅ Approve", alice());
    let answer = app.telegram.wait_for_callback_answer(&tap).await;
    assert!(
        answer
            .text
            .as_deref()
            .unwrap_or("")
            .contains("Already decided"),
        "{answer:?}"
    );
    let shown = app
        .telegram
        .wait_for_message(OPS_CHAT, lost, "the outcome, no buttons", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        shown.visible_text.contains("Timed out"),
        "{}",
        shown.visible_text
    );
    assert_eq!(app.wait_status(id, "timeout").await["status"], "timeout");
}

#[tokio::test]
async fn a_copy_learned_from_a_refused_tap_is_edited_by_the_timeout_that_follows() {
    let app = TestApp::spawn().await;
    let (record, lost, stored) = ask_with_a_lost_answer(
        &app,
        json!({"tool": "deploy", "params": {}, "timeout_seconds": 4}),
    )
    .await;
    let id = record["id"].as_str().unwrap();

    // A stranger's tap decides nothing, but tells the service of the copy.
    let tap = app.telegram.tap(OPS_CHAT, lost, "✅ Approve", mallory());
    let refused = app.telegram.wait_for_callback_answer(&tap).await;
    assert!(refused.show_alert, "{refused:?}");
    assert_eq!(app.get(id).await.1["status"], "pending");

    // Nobody else taps: the timeout edits both copies.
    app.wait_status(id, "timeout").await;
    outcome_on_every_copy(&app, &[lost, stored], "Timed out").await;
}

#[tokio::test]
async fn a_forward_of_the_question_into_its_chat_is_no_copy_of_it() {
    // Only the bot's own messages are learned as copies: the fake marks a message typed
    // by a user (which a forward is) as theirs, and a token under it is refused.
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let data = app
        .telegram
        .message(OPS_CHAT, message_id)
        .buttons
        .concat()
        .into_iter()
        .find(|b| b.text == "✅ Approve")
        .and_then(|b| b.callback_data)
        .unwrap();
    let forward = app
        .telegram
        .send_text_message(OPS_CHAT, carol(), "look at this");
    let tap = app
        .telegram
        .tap_with_data(OPS_CHAT, forward, &data, alice());
    let refused = app.telegram.wait_for_callback_answer(&tap).await;
    assert_eq!(
        refused.text.as_deref(),
        Some("This button does not belong to this message.")
    );
    assert_eq!(app.get(id).await.1["status"], "pending");
}
