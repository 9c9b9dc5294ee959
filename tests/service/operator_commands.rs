//! Operator commands in Telegram (`/start`, `/pending`, `/windows`, `/revoke`, `/help`), driven
//! as an operator would: typed into the fake Telegram's chats, answered in the chat, with
//! their effects checked through the agents' HTTP API.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::{FakeTelegram, SentMessage, TgUser};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A group that is no route's chat.
const RANDOM_GROUP: i64 = -1_001_555_000_777;
/// How long a test gives the service to (not) answer before it concludes silence.
const SILENCE: Duration = Duration::from_millis(700);

/// Types `text` as `user` in `chat` and returns the bot's answer there: its first new
/// message without buttons (a question posted meanwhile has them).
async fn command(app: &TestApp, chat: i64, user: TgUser, text: &str) -> SentMessage {
    let before = app.telegram.messages_in(chat).len();
    app.telegram.send_text_message(chat, user, text);
    for _ in 0..500 {
        let answer = app
            .telegram
            .messages_in(chat)
            .into_iter()
            .skip(before)
            .find(|m| !m.has_buttons() && !m.force_reply && !m.visible_text.contains("required"));
        if let Some(answer) = answer {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer to {text:?} in chat {chat}");
}

/// Types `text` as `user` in `chat` and asserts that the bot says nothing there.
async fn silence_after(app: &TestApp, chat: i64, user: TgUser, text: &str) {
    let before = app.telegram.messages_in(chat).len();
    app.telegram.send_text_message(chat, user, text);
    tokio::time::sleep(SILENCE).await;
    let after = app.telegram.messages_in(chat);
    assert_eq!(
        after.len(),
        before,
        "the bot answered {text:?}: {:?}",
        after.last().map(|m| &m.visible_text)
    );
}

/// Waits until the startup registration is done (getMe answered, so the bot knows its
/// username; setMyCommands comes after it).
async fn registered(app: &TestApp) {
    app.telegram.wait_for_requests("setMyCommands", 1).await;
}

fn call(tool: &str, owner: &str, window: u64) -> Value {
    json!({"tool": tool, "params": {"target": "billing"}, "owner_id": owner,
           "window_seconds": window})
}

/// Asks `body` as agent-a, has `user` approve it in `chat`, and returns the record.
async fn approved(app: &TestApp, body: Value, chat: i64, user: TgUser) -> Value {
    let (record, message_id) = app.ask_suspended(body).await;
    let label = approve_label(record["window_seconds"].as_u64().unwrap());
    app.telegram.tap(chat, message_id, label.as_str(), user);
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await
}

/// Asks a free-text interaction `id` in the ops chat as agent-a.
async fn ask_free_text(app: &TestApp, id: &str, question: &str) {
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(TOKEN_A)
        .json(
            &json!({"interaction": {"interaction_id": id, "question": question,
            "interaction_type": "free_text"}}),
        )
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(r).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

#[tokio::test]
async fn the_eleven_commands_are_registered_with_telegram_at_start() {
    let app = TestApp::spawn().await;
    registered(&app).await;
    let commands = app.telegram.my_commands();
    let names: Vec<&str> = commands.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "start", "pending", "windows", "grants", "revoke", "stats", "suggest", "rules", "away",
            "back", "help"
        ]
    );
    assert!(commands.iter().all(|(_, d)| d.len() >= 3 && d.len() <= 256));
    // The menu shows no arguments, so a command that takes one says how in its description.
    assert!(
        commands.contains(&(
            "revoke".to_owned(),
            "Close a confirmation window or revoke a grant now: /revoke <window or grant id>"
                .to_owned()
        ))
    );
}

#[tokio::test]
async fn a_failed_registration_is_retried_while_the_service_keeps_serving() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    // Not a 5xx: teloxide sleeps 10 s before it reports one.
    telegram.fail_next("getMe", 1, 400, "Bad Request: try again");
    telegram.fail_next_with_retry_after("setMyCommands", 1, 2);
    let app = TestApp::spawn_on(
        std::sync::Arc::new(telegram),
        webhook_mode(),
        DEFAULT_CALLBACK_PREFIX,
        |t| t,
    )
    .await;
    let (status, record) = app
        .create(json!({"tool": "deploy", "params": {},
        "wait": "suspend"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{record}");
    app.telegram.wait_for_requests("setMyCommands", 2).await;
    assert_eq!(app.telegram.requests("getMe").len(), 2);
    assert_eq!(app.telegram.my_commands().len(), 11);
    let answer = command(&app, OPS_CHAT, alice(), "/pending@hitl_test_bot").await;
    assert!(
        answer.visible_text.contains("deploy"),
        "{}",
        answer.visible_text
    );
}

#[tokio::test]
async fn pending_lists_open_requests_oldest_first_with_links_and_not_decided_ones() {
    let app = TestApp::spawn().await;
    let (first, first_msg) = app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    let (_, second_msg) = app.ask_suspended(call("restart_db", "emp-2", 0)).await;
    approved(&app, call("drop_cache", "emp-3", 0), OPS_CHAT, alice()).await;
    // Another route's request is not this chat's business.
    let mut elsewhere = call("rotate_keys", "emp-4", 0);
    elsewhere["route"] = json!("other");
    elsewhere["wait"] = json!("suspend");
    assert_eq!(app.create(elsewhere).await.0, StatusCode::ACCEPTED);
    // An interaction asked in the chat is listed too.
    ask_free_text(&app, "colour-1", "Blue <or> green?").await;
    app.telegram.wait_for_message_in(OPS_CHAT, 4).await;

    let answer = command(&app, OPS_CHAT, bob(), "/pending").await;
    let text = &answer.visible_text;
    assert!(text.contains("Open requests (3)"), "{text}");
    let deploy = text.find("deploy_billing").expect("the first request");
    let restart = text.find("restart_db").expect("the second request");
    let question = text.find("Blue <or> green?").expect("the interaction");
    assert!(
        deploy < restart && restart < question,
        "oldest first: {text}"
    );
    assert!(!text.contains("drop_cache"), "decided: {text}");
    assert!(!text.contains("rotate_keys"), "another route's: {text}");
    assert!(text.contains("agent-a") && text.contains("emp-1") && text.contains("left"));
    for message in [first_msg, second_msg] {
        let link = format!("href=\"https://t.me/c/1000000001/{message}\"");
        assert!(answer.text.contains(&link), "{link} in {}", answer.text);
    }
    assert_eq!(answer.parse_mode.as_deref(), Some("HTML"));
    // Nothing was decided by listing.
    let (_, r) = app.get(first["id"].as_str().unwrap()).await;
    assert_eq!(r["status"], "pending");
}

#[tokio::test]
async fn pending_from_a_non_approver_is_refused_and_names_nothing() {
    let app = TestApp::spawn().await;
    app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    let answer = command(&app, OPS_CHAT, mallory(), "/pending").await;
    assert!(
        answer.visible_text.contains("Only approvers"),
        "{}",
        answer.visible_text
    );
    assert!(!answer.visible_text.contains("deploy_billing"));
    // An approver of another route is a stranger here too.
    let answer = command(&app, OTHER_CHAT, alice(), "/windows").await;
    assert!(answer.visible_text.contains("Only approvers"));
    // A bot is never answered, even one whose id is an approver's.
    silence_after(&app, OPS_CHAT, alice().bot(), "/pending").await;

    // Each refusal in a route's chat is on the audit trail: who, where, what, why.
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    let refused: Vec<(String, String)> = sqlx::query_as(
        "SELECT actor, detail FROM audit_events WHERE kind = 'refused_command' ORDER BY seq",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    let actors: Vec<&str> = refused.iter().map(|(a, _)| a.as_str()).collect();
    let (mallory_id, alice_id) = (format!("telegram:{MALLORY}"), format!("telegram:{ALICE}"));
    assert_eq!(actors, [&mallory_id, &alice_id, &alice_id]);
    let first: Value = serde_json::from_str(&refused[0].1).unwrap();
    assert_eq!(first["command"], "pending");
    assert_eq!(first["chat_id"], OPS_CHAT);
    let last: Value = serde_json::from_str(&refused[2].1).unwrap();
    assert_eq!(last["why"], "a bot cannot use operator commands");
}

#[tokio::test]
async fn commands_in_a_group_that_is_no_routes_chat_get_no_answer() {
    let app = TestApp::spawn().await;
    app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    silence_after(&app, RANDOM_GROUP, alice(), "/pending").await;
    silence_after(&app, RANDOM_GROUP, alice(), "/windows").await;
    // Not even setting up answers another bot: two bots never keep each other talking.
    silence_after(&app, RANDOM_GROUP, alice().bot(), "/start").await;
    silence_after(&app, OPS_CHAT, alice().bot(), "/help").await;
    // In a private chat the person is told where commands work, and nothing else.
    let answer = command(&app, ALICE as i64, alice(), "/pending").await;
    assert!(
        answer.visible_text.contains("only in a route's chat"),
        "{}",
        answer.visible_text
    );
    assert!(!answer.visible_text.contains("deploy_billing"));
}

#[tokio::test]
async fn a_command_addressed_to_this_bot_works_and_one_for_another_bot_is_ignored() {
    let app = TestApp::spawn().await;
    registered(&app).await;
    app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    let answer = command(&app, OPS_CHAT, alice(), "/pending@hitl_test_bot").await;
    assert!(answer.visible_text.contains("deploy_billing"));
    silence_after(&app, OPS_CHAT, alice(), "/pending@other_bot").await;
    // Telegram's command names are case-sensitive: this is not ours.
    silence_after(&app, OPS_CHAT, alice(), "/Pending").await;
}

#[tokio::test]
async fn windows_lists_a_window_opened_by_an_approval() {
    let app = TestApp::spawn().await;
    let empty = command(&app, OPS_CHAT, alice(), "/windows").await;
    assert!(empty.visible_text.contains("No live confirmation windows"));
    let opener = approved(&app, call("check_in", "emp-1", 600), OPS_CHAT, alice()).await;
    let id = opener["id"].as_str().unwrap();
    approved(&app, call("check_in", "emp-9", 0), OPS_CHAT, alice()).await;

    let answer = command(&app, OPS_CHAT, bob(), "/windows").await;
    let text = &answer.visible_text;
    assert!(text.contains("Live confirmation windows (1)"), "{text}");
    assert!(text.contains(id), "{text}");
    assert!(text.contains("check_in") && text.contains("emp-1") && text.contains("agent-a"));
    assert!(text.contains("UTC") && text.contains("min left"), "{text}");
    assert!(text.contains("/revoke"), "{text}");
    // The window belongs to the ops route: the other route's chat does not see it.
    let other = command(&app, OTHER_CHAT, bob(), "/windows").await;
    assert!(
        other.visible_text.contains("No live confirmation windows"),
        "{}",
        other.visible_text
    );
}

#[tokio::test]
async fn revoke_closes_a_window_records_who_did_it_and_the_next_identical_call_asks_again() {
    let app = TestApp::spawn().await;
    let opener = approved(&app, call("check_in", "emp-1", 600), OPS_CHAT, alice()).await;
    let id = opener["id"].as_str().unwrap();
    // The window works before the revoke.
    let (s, r) = app.create(call("check_in", "emp-1", 600)).await;
    assert_eq!((s, r["via"].as_str()), (StatusCode::OK, Some("window")));

    let answer = command(&app, OPS_CHAT, bob(), &format!("/revoke {id}")).await;
    let text = &answer.visible_text;
    assert!(
        text.contains(&format!("Window {id} closed by Bob")),
        "{text}"
    );
    assert!(
        text.contains("check_in") && text.contains("emp-1"),
        "{text}"
    );

    let trail = app.audit_events(id).await;
    let revoked = trail
        .iter()
        .find(|e| e["kind"] == "window_revoked")
        .unwrap_or_else(|| panic!("no window_revoked event: {trail:?}"));
    assert_eq!(revoked["actor"], format!("telegram:{BOB}"));
    assert_eq!(revoked["detail"]["operator"]["name"], "Bob");
    assert_eq!(revoked["detail"]["chat_id"], OPS_CHAT);
    assert_eq!(revoked["detail"]["tool"], "check_in");

    let mut again = call("check_in", "emp-1", 600);
    again["wait"] = json!("suspend");
    let (s, r) = app.create(again).await;
    assert_eq!(
        (s, r["status"].as_str()),
        (StatusCode::ACCEPTED, Some("pending")),
        "{r}"
    );
    let listed = command(&app, OPS_CHAT, alice(), "/windows").await;
    assert!(listed.visible_text.contains("No live confirmation windows"));
    // A second revoke of the same window says it is gone.
    let twice = command(&app, OPS_CHAT, alice(), &format!("/revoke {id}")).await;
    assert!(
        twice.visible_text.contains(&format!("no live window {id}")),
        "{}",
        twice.visible_text
    );
}

#[tokio::test]
async fn revoke_refuses_another_routes_window_and_names_what_is_wrong_with_an_id() {
    let app = TestApp::spawn().await;
    let mut body = call("check_in", "emp-1", 600);
    body["route"] = json!("other");
    let theirs = approved(&app, body, OTHER_CHAT, bob()).await;
    let id = theirs["id"].as_str().unwrap();

    let answer = command(&app, OPS_CHAT, alice(), &format!("/revoke {id}")).await;
    assert!(
        answer.visible_text.contains("belongs to another route"),
        "{}",
        answer.visible_text
    );
    let mut same = call("check_in", "emp-1", 600);
    same["route"] = json!("other");
    let (s, r) = app.create(same).await;
    assert_eq!(
        (s, r["via"].as_str()),
        (StatusCode::OK, Some("window")),
        "still open"
    );
    assert!(
        !app.audit_events(id)
            .await
            .iter()
            .any(|e| e["kind"] == "window_revoked")
    );

    let unknown = "cf_00000000000000000000000000000000";
    let cases = [
        (
            format!("/revoke {unknown}"),
            format!("no live window {unknown}"),
        ),
        (
            "/revoke".to_owned(),
            "needs the id of a window or a grant".to_owned(),
        ),
        (
            "/revoke cf_123".to_owned(),
            "'cf_123' is neither a window id".to_owned(),
        ),
        (
            format!("/revoke {unknown} {unknown}"),
            "takes one id".to_owned(),
        ),
        (
            "/frobnicate@hitl_test_bot".to_owned(),
            "not a command of this bot".to_owned(),
        ),
    ];
    registered(&app).await;
    for (typed, expected) in cases {
        let answer = command(&app, OPS_CHAT, alice(), &typed).await;
        assert!(
            answer.visible_text.contains(&expected),
            "{typed}: {}",
            answer.visible_text
        );
    }
    // A non-approver learns nothing about ids, not even whether they are well-formed.
    let answer = command(&app, OPS_CHAT, mallory(), "/revoke cf_123").await;
    assert!(answer.visible_text.contains("Only approvers"));
}

#[tokio::test]
async fn help_says_what_each_command_does() {
    let app = TestApp::spawn().await;
    let answer = command(&app, OPS_CHAT, alice(), "/help").await;
    for name in [
        "/pending",
        "/windows",
        "/grants",
        "/revoke <window or grant id>",
        "/help",
    ] {
        assert!(
            answer.visible_text.contains(name),
            "{name}: {}",
            answer.visible_text
        );
    }
}

#[tokio::test]
async fn a_free_text_answer_that_starts_with_a_slash_is_still_an_answer() {
    let app = TestApp::spawn().await;
    ask_free_text(&app, "path-1", "Which folder is full?").await;
    let question = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    // Wait for the message id to be stored, or the reply would not match the question.
    for _ in 0..100 {
        let r = app
            .client
            .get(app.url("/v1/interactions/path-1"))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .unwrap();
        let (_, v) = json_of(r).await;
        if v["status"] != "pending" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.telegram
        .send_reply(OPS_CHAT, alice(), "/var/log", question.message_id);
    app.telegram
        .wait_for_message_text_containing(OPS_CHAT, question.message_id, "/var/log")
        .await;
}

#[tokio::test]
async fn pending_shows_a_questions_invisible_characters_as_escapes() {
    let app = TestApp::spawn().await;
    registered(&app).await;
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(TOKEN_A)
        .json(
            &json!({"interaction": {"interaction_id": "bidi", "interaction_type": "approval",
            "question": "Drop \u{202e}prod\u{200b}"}}),
        )
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    app.telegram.wait_for_message_in(OPS_CHAT, 1).await;
    let answer = command(&app, OPS_CHAT, alice(), "/pending").await;
    assert!(
        answer.visible_text.contains("Drop \\u202eprod\\u200b"),
        "{}",
        answer.visible_text
    );
    assert!(!answer.text.contains('\u{202e}'), "{}", answer.text);
}

#[tokio::test]
async fn start_in_a_routes_group_names_the_route_the_chat_and_the_user() {
    let app = TestApp::spawn().await;
    let answer = command(&app, OPS_CHAT, alice(), "/start").await;
    let text = &answer.visible_text;
    assert!(text.contains(&format!("Chat id: {OPS_CHAT}")), "{text}");
    assert!(text.contains(&format!("Your user id: {ALICE}")), "{text}");
    assert!(
        text.contains("This chat is the chat of route ops."),
        "{text}"
    );
    assert!(!text.contains("not one of its approvers"), "{text}");
    assert_eq!(answer.parse_mode.as_deref(), Some("HTML"));
    assert!(
        answer.text.contains(&format!("<code>{OPS_CHAT}</code>")),
        "{}",
        answer.text
    );
}

#[tokio::test]
async fn help_from_an_approver_lists_the_commands_and_what_the_chat_is() {
    let app = TestApp::spawn().await;
    let answer = command(&app, OTHER_CHAT, bob(), "/help").await;
    let text = &answer.visible_text;
    assert!(text.contains("/revoke <window or grant id>"), "{text}");
    assert!(text.contains(&format!("Chat id: {OTHER_CHAT}")), "{text}");
    assert!(
        text.contains("This chat is the chat of route other."),
        "{text}"
    );
    assert_eq!(
        text.matches("/revoke").count(),
        1,
        "usage said once: {text}"
    );
}

#[tokio::test]
async fn start_from_a_non_approver_in_a_routes_group_says_how_to_become_one_and_nothing_more() {
    let app = TestApp::spawn().await;
    app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    for typed in ["/start", "/help"] {
        let answer = command(&app, OPS_CHAT, mallory(), typed).await;
        let text = &answer.visible_text;
        assert!(text.contains(&format!("Your user id: {MALLORY}")), "{text}");
        assert!(
            text.contains("This chat is the chat of route ops."),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "You are not one of its approvers: to make you one, add {MALLORY} to its approvers."
            )),
            "{text}"
        );
        // Neither what is pending nor the commands' list.
        assert!(!text.contains("deploy_billing"), "{text}");
        assert!(!text.contains("/revoke <window id>"), "{text}");
    }
}

#[tokio::test]
async fn start_in_a_group_that_is_no_route_says_which_line_to_add() {
    let app = TestApp::spawn().await;
    app.ask_suspended(call("deploy_billing", "emp-1", 0)).await;
    registered(&app).await;
    for typed in ["/start", "/help@hitl_test_bot"] {
        let answer = command(&app, RANDOM_GROUP, alice(), typed).await;
        let text = &answer.visible_text;
        assert!(text.contains(&format!("Chat id: {RANDOM_GROUP}")), "{text}");
        assert!(text.contains(&format!("Your user id: {ALICE}")), "{text}");
        assert!(
            text.contains(&format!(
                "This chat is not a route: add chat_id = {RANDOM_GROUP} to a [[routes]] entry"
            )),
            "{text}"
        );
        // A stranger's group learns nothing about the routes or what is pending.
        for secret in ["ops", "council", "deploy_billing", "approver of"] {
            assert!(!text.contains(secret), "{secret}: {text}");
        }
    }
}

#[tokio::test]
async fn start_in_a_private_chat_says_which_routes_the_user_approves() {
    let app = TestApp::spawn().await;
    let private = ALICE as i64;
    let answer = command(&app, private, alice(), "/start").await;
    let text = &answer.visible_text;
    assert!(text.contains(&format!("Chat id: {ALICE}")), "{text}");
    assert!(text.contains(&format!("Your user id: {ALICE}")), "{text}");
    assert!(text.contains("This chat is not a route"), "{text}");
    assert!(
        text.contains("You are an approver of routes council, ops."),
        "{text}"
    );

    let private = MALLORY as i64;
    let answer = command(&app, private, mallory(), "/start").await;
    let text = &answer.visible_text;
    assert!(
        text.contains(&format!(
            "You are not an approver of any route: to make you one, add {MALLORY} to a \
             route's approvers."
        )),
        "{text}"
    );
}
