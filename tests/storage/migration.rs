//! A group upgraded to a supergroup: Telegram answers with `migrate_to_chat_id`; the
//! question is sent again to the new chat, and the route keeps using it, across restarts.

use crate::support::app::*;
use serde_json::json;

const SUPERGROUP: i64 = -1_009_999_999_999;

#[tokio::test]
async fn a_question_follows_its_group_into_the_supergroup_and_the_route_stays_moved() {
    let app = TestApp::spawn().await;
    app.telegram
        .fail_next_with_migrate("sendMessage", 1, SUPERGROUP);
    let (record, message_id) = app.ask_suspended(json!({"tool": "t", "params": {}})).await;
    let msg = app.telegram.message(SUPERGROUP, message_id);
    assert!(msg.has_buttons());
    app.telegram
        .tap(SUPERGROUP, message_id, "✅ Approve", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;

    let (next, _) = app.ask_suspended(json!({"tool": "t2", "params": {}})).await;
    let sent = app.telegram.sent_messages();
    assert_eq!(
        sent.last().unwrap().chat_id,
        SUPERGROUP,
        "the next question goes straight there"
    );

    let app = app.restart().await;
    let (after_restart, _) = app.ask_suspended(json!({"tool": "t3", "params": {}})).await;
    let sent = app.telegram.sent_messages();
    assert_eq!(
        sent.last().unwrap().chat_id,
        SUPERGROUP,
        "the move survives a restart"
    );
    assert_ne!(next["id"], after_restart["id"]);
    assert!(
        sent.iter().all(|m| m.chat_id != OPS_CHAT),
        "nothing was posted to the old group"
    );
}
