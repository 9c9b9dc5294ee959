//! Approvers away: `/away until <time> [delegate]` keeps a person out of reminders (their
//! delegate is mentioned instead), sends a question nobody but people away could answer
//! to the delegate's private chat, where the delegate decides it, and tells the agent who
//! has it; `/back` ends it; a delegate the route does not allow is refused.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::app::*;
use crate::support::fake_telegram::{SentMessage, TgUser};
use crate::support::interactions::tap;

/// Carol may stand in on both routes; ops reminds after 1 s.
fn with_delegates(toml: String) -> String {
    toml.replacen(
        "forbid_self_approval = true\n",
        &format!("forbid_self_approval = true\nremind_after = [\"1s\"]\ndelegates = [{CAROL}]\n"),
        1,
    )
    .replacen(
        &format!("approvers = [{BOB}]\n"),
        &format!("approvers = [{BOB}]\ndelegates = [{CAROL}]\n"),
        1,
    )
}

async fn say(app: &TestApp, chat: i64, who: TgUser, text: &str) -> SentMessage {
    let before = app.telegram.messages_in(chat).len();
    app.telegram.send_text_message(chat, who, text);
    app.telegram
        .wait_for_message_in(chat, before + 1)
        .await
        .remove(before)
}

fn on_other() -> Value {
    json!({"tool": "deploy", "params": {"env": "prod"}, "route": "other"})
}

#[tokio::test]
async fn with_its_only_approver_away_a_question_goes_to_the_delegate_who_decides_it() {
    let app = TestApp::spawn_with_settings(with_delegates).await;
    let set = say(&app, OTHER_CHAT, bob(), "/away until 2h carol").await;
    assert!(
        set.visible_text.contains("You are away until"),
        "{}",
        set.visible_text
    );
    assert!(
        set.visible_text
            .contains("carol is mentioned in your place"),
        "{}",
        set.visible_text
    );

    let (record, _) = app.ask_suspended(on_other()).await;
    let id = record["id"].as_str().unwrap().to_owned();
    let copy = app.telegram.wait_for_message_in(CAROL as i64, 1).await[0].clone();
    assert!(
        copy.visible_text.contains("deploy"),
        "{}",
        copy.visible_text
    );
    tap(&app, &copy, "✅ Approve", carol()).await;
    let done = app.wait_status(&id, "confirmed").await;
    assert_eq!(done["decided_by"]["id"], CAROL, "{done}");

    // The agent's trail says who had it.
    let events = app.audit_events(&id).await;
    let delegated: Vec<&Value> = events.iter().filter(|e| e["kind"] == "delegated").collect();
    assert_eq!(delegated.len(), 1, "{events:#?}");
    assert_eq!(delegated[0]["detail"]["to"], "carol");

    // Back: the next question stays in the route's chat.
    let back = say(&app, OTHER_CHAT, bob(), "/back").await;
    assert!(
        back.visible_text.contains("Welcome back"),
        "{}",
        back.visible_text
    );
    app.ask_suspended(on_other()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        app.telegram.messages_in(CAROL as i64).len(),
        1,
        "no second copy"
    );
}

#[tokio::test]
async fn a_reminder_skips_the_person_away_and_mentions_their_delegate() {
    let app = TestApp::spawn_with_settings(with_delegates).await;
    say(&app, OPS_CHAT, alice(), "/away until 18:00 @carol").await;
    let (_, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    // The answer to /away, the question, its reminder.
    let reminder = app.telegram.wait_for_message_in(OPS_CHAT, 3).await[2].clone();
    assert_eq!(reminder.reply_to, Some(message_id));
    assert!(
        reminder.text.contains(&format!("tg://user?id={BOB}")),
        "{}",
        reminder.text
    );
    assert!(
        reminder.text.contains(&format!("tg://user?id={CAROL}")),
        "{}",
        reminder.text
    );
    assert!(
        !reminder.text.contains(&format!("tg://user?id={ALICE}")),
        "{}",
        reminder.text
    );
    // Bob can still answer: nothing went to Carol's private chat.
    assert!(app.telegram.messages_in(CAROL as i64).is_empty());
}

#[tokio::test]
async fn away_refuses_a_delegate_the_route_does_not_allow_or_a_time_it_cannot_read() {
    let app = TestApp::spawn_with_settings(with_delegates).await;
    let no = say(&app, OTHER_CHAT, bob(), "/away until 2h alice").await;
    assert!(
        no.visible_text.contains("alice may not decide route other"),
        "{}",
        no.visible_text
    );
    let no = say(&app, OTHER_CHAT, bob(), "/away until someday").await;
    assert!(
        no.visible_text.contains("'someday' is no time"),
        "{}",
        no.visible_text
    );
    let no = say(&app, OTHER_CHAT, bob(), "/away 2h").await;
    assert!(
        no.visible_text.contains("/away until <time>"),
        "{}",
        no.visible_text
    );
    let no = say(&app, OTHER_CHAT, bob(), "/away until 2h mallory").await;
    assert!(
        no.visible_text.contains("'mallory' is no name of [people]"),
        "{}",
        no.visible_text
    );
    // Nothing was set: a question still goes to Bob alone.
    app.ask_suspended(on_other()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(app.telegram.messages_in(CAROL as i64).is_empty());
}
