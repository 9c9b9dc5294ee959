//! AI-Parrot's general human-in-the-loop questions (`HumanInteraction` in,
//! `HumanResponse` out) end to end: an agent posts a question over HTTP, the fake
//! Telegram shows it, people tap buttons or reply, and the agent reads the answers back.
//!
//! Every assertion goes through the real surface: the HTTP API, and the fake Telegram's
//! view of messages, buttons and tap answers. Nothing here waits a fixed time for
//! something to happen: it waits on the fake (`wait_for_*`) or long-polls the API.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::support::app::*;
use crate::support::fake_telegram::{CallbackAnswer, SentMessage, TgUser};
use crate::support::interactions::{delete_interaction, get_interaction, post_interaction, tap};
use reqwest::StatusCode;
use serde_json::{Value, json};

// ----- Helpers ----------------------------------------------------------------------

/// A minimal `HumanInteraction`.
fn interaction(id: &str, kind: &str, question: &str) -> Value {
    json!({"interaction_id": id, "question": question, "interaction_type": kind})
}

/// `base` with the fields of `extra` set (shallow).
fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    base
}

fn approval(id: &str) -> Value {
    interaction(id, "approval", "Deploy billing to prod?")
}

fn colours(id: &str, kind: &str) -> Value {
    with(
        interaction(id, kind, "Which colour for the new dashboard?"),
        json!({"options": [
            {"key": "blue", "label": "Blue"},
            {"key": "green", "label": "Green", "description": "the safe one"},
            {"key": "red", "label": "Red"},
        ]}),
    )
}

async fn view(app: &TestApp, id: &str) -> Value {
    let (status, v) = get_interaction(app, id, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    v
}

async fn notify(app: &TestApp, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url("/v1/notifications"))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// Long-polls the interaction until it reports `status`; fails after about 15 s.
async fn wait_for_status(app: &TestApp, id: &str, status: &str) -> Value {
    wait_until(app, id, &format!("status {status}"), |v| {
        v["status"] == status
    })
    .await
}

/// Long-polls the interaction until `done` holds for it; fails after about 15 s.
async fn wait_until(app: &TestApp, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = view(app, id).await;
    for _ in 0..15 {
        if done(&last) {
            return last;
        }
        let (code, v) = get_interaction(app, id, Some("1")).await;
        assert_eq!(code, StatusCode::OK, "{v}");
        last = v;
    }
    if done(&last) {
        return last;
    }
    panic!("interaction {id} never reached {what}; last seen: {last:#}");
}

/// Posts a question that must land in `chat`, waits until its message is out (status
/// no longer `pending`), and returns the 202 body and the message.
async fn ask(app: &TestApp, body: Value, chat: i64) -> (Value, SentMessage) {
    let id = body["interaction"]["interaction_id"]
        .as_str()
        .expect("an interaction_id")
        .to_owned();
    let before = app.telegram.messages_in(chat).len();
    let (status, created) = post_interaction(app, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let message = app
        .telegram
        .wait_for_message_in(chat, before + 1)
        .await
        .remove(before);
    // Out (`delivered`), or already past it when its timeout is short.
    wait_until(app, &id, "its message recorded", |v| {
        v["status"] != "pending"
    })
    .await;
    (created, message)
}

/// Replays a button that is no longer shown, as a stale client can.
async fn stale_tap(
    app: &TestApp,
    message: &SentMessage,
    button: &str,
    user: TgUser,
) -> CallbackAnswer {
    let data = message
        .buttons
        .iter()
        .flatten()
        .find(|b| b.text == button)
        .and_then(|b| b.callback_data.clone())
        .unwrap_or_else(|| panic!("no button {button:?} in {:?}", message.button_texts()));
    let q = app
        .telegram
        .tap_with_data(message.chat_id, message.message_id, &data, user);
    app.telegram.wait_for_callback_answer(&q).await
}

/// Waits until `message` shows `needle` (as the operator sees it).
async fn wait_for_text(app: &TestApp, message: &SentMessage, needle: &str) -> SentMessage {
    let what = format!("message to show {needle:?}");
    app.telegram
        .wait_for_message(message.chat_id, message.message_id, what, |m| {
            m.visible_text.contains(needle)
        })
        .await
}

/// Waits until the question's message shows its outcome: `needle`, and no buttons.
async fn wait_for_outcome(app: &TestApp, message: &SentMessage, needle: &str) -> SentMessage {
    let what = format!("outcome {needle:?} shown and the buttons removed");
    app.telegram
        .wait_for_message(message.chat_id, message.message_id, what, |m| {
            !m.has_buttons() && m.visible_text.contains(needle)
        })
        .await
}

/// Checks one `HumanResponse`: exactly AI-Parrot's fields (its model forbids extras).
fn assert_response(r: &Value, interaction_id: &str, respondent: &str, kind: &str, value: &Value) {
    let keys: BTreeSet<&str> = r
        .as_object()
        .unwrap_or_else(|| panic!("a response is an object: {r}"))
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from([
            "interaction_id",
            "respondent",
            "response_type",
            "value",
            "timestamp",
            "metadata"
        ]),
        "{r}"
    );
    assert_eq!(r["interaction_id"], interaction_id, "{r}");
    assert_eq!(r["respondent"], respondent, "{r}");
    assert_eq!(r["response_type"], kind, "{r}");
    assert_eq!(&r["value"], value, "{r}");
    let ts = r["timestamp"].as_str().expect("timestamp is a string");
    assert!(ts.ends_with('Z') && ts.contains('T'), "ISO 8601 UTC: {ts}");
    assert!(r["metadata"].is_object(), "{r}");
}

fn responses(v: &Value) -> &Vec<Value> {
    v["responses"].as_array().expect("responses is a list")
}

fn id_of(user: u64) -> String {
    user.to_string()
}

/// The value inside a conflict result's `responses` entry (a bare value or a response).
fn conflict_values(result: &Value) -> Vec<Value> {
    assert_eq!(result["conflict"], true, "{result}");
    result["responses"]
        .as_array()
        .unwrap_or_else(|| panic!("conflict result lists the responses: {result}"))
        .iter()
        .map(|r| r.get("value").cloned().unwrap_or_else(|| r.clone()))
        .collect()
}

/// Waits until the audit trail of record `record_id` says a message went to `chat_id`.
async fn wait_until_delivered_in(app: &TestApp, record_id: &str, chat_id: i64) {
    for _ in 0..500 {
        let r = app
            .client
            .get(app.url(&format!("/v1/confirmations/{record_id}/events")))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .expect("request");
        let (status, body) = json_of(r).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let delivered = body["events"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["kind"] == "delivered" && e["detail"]["chat_id"] == json!(chat_id));
        if delivered {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{record_id} was never recorded as delivered in chat {chat_id}");
}

// ----- Every interaction type -------------------------------------------------------

#[tokio::test]
async fn an_approval_is_shown_with_approve_and_reject_and_approve_answers_true() {
    let app = TestApp::spawn().await;
    let sent = with(
        approval("appr-1"),
        json!({
            "question": "Deploy <billing> & friends?",
            "context": "Release 4.2 passed staging.",
            "source_agent": "release-bot",
            "severity": "critical",
            "policy_id": "pol-7",
            "source_flow": "release",
            "an_unknown_field": {"kept": [1, 2]},
        }),
    );
    let (created, msg) = ask(&app, json!({"interaction": sent.clone()}), OPS_CHAT).await;
    assert_eq!(created["status"], "pending", "{created}");
    assert_eq!(created["interaction_id"], "appr-1");
    assert_eq!(created["interaction_type"], "approval");
    assert_eq!(created["route"], "ops");
    assert_eq!(created["responses"], json!([]));
    assert_eq!(created["result"], json!(null));
    assert_eq!(created["decided_at"], json!(null));
    assert_eq!(
        created["interaction"], sent,
        "the interaction is echoed as sent"
    );
    assert!(created["id"].as_str().unwrap().starts_with("cf_"));

    assert_eq!(
        msg.button_texts(),
        vec!["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
    let text = &msg.visible_text;
    assert!(text.contains("Deploy <billing> & friends?"), "{text}");
    assert!(
        text.starts_with("🚨 "),
        "critical severity is flagged: {text}"
    );
    assert!(text.contains("Release 4.2 passed staging."), "{text}");
    assert!(text.contains("release-bot"), "{text}");
    assert!(text.contains("⏳ Deadline: "), "{text}");

    let answer = tap(&app, &msg, "✅ Approve", alice()).await;
    assert!(!answer.show_alert, "{answer:?}");
    let done = wait_for_status(&app, "appr-1", "completed").await;
    assert_eq!(done["result"], true);
    assert_eq!(responses(&done).len(), 1, "{done}");
    assert_response(
        &responses(&done)[0],
        "appr-1",
        &id_of(ALICE),
        "approval",
        &json!(true),
    );
    assert_eq!(
        responses(&done)[0]["metadata"]["telegram_user_id"],
        json!(ALICE)
    );
    assert!(done["decided_at"].as_str().unwrap().ends_with('Z'));
    let edited = wait_for_outcome(&app, &msg, "Approved — Alice (@alice) at ").await;
    assert!(
        edited.visible_text.contains("Deploy <billing> & friends?"),
        "the question stays: {}",
        edited.visible_text
    );
}

#[tokio::test]
async fn an_approval_rejected_answers_false() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(&app, json!({"interaction": approval("appr-2")}), OPS_CHAT).await;
    tap(&app, &msg, "❌ Reject", bob()).await;
    let done = wait_for_status(&app, "appr-2", "completed").await;
    assert_eq!(done["result"], false);
    assert_response(
        &responses(&done)[0],
        "appr-2",
        &id_of(BOB),
        "approval",
        &json!(false),
    );
    wait_for_outcome(&app, &msg, "Rejected — Bob at ").await;
}

#[tokio::test]
async fn a_single_choice_shows_one_button_per_option_and_answers_the_chosen_key() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(
        &app,
        json!({"interaction": colours("pick-1", "single_choice")}),
        OPS_CHAT,
    )
    .await;
    assert_eq!(msg.button_texts(), vec!["Blue", "Green", "Red"]);
    assert!(
        msg.visible_text.contains("Green: the safe one"),
        "option descriptions are shown: {}",
        msg.visible_text
    );
    tap(&app, &msg, "Green", bob()).await;
    let done = wait_for_status(&app, "pick-1", "completed").await;
    assert_eq!(done["result"], "green");
    assert_response(
        &responses(&done)[0],
        "pick-1",
        &id_of(BOB),
        "single_choice",
        &json!("green"),
    );
    wait_for_outcome(&app, &msg, "Green — Bob at ").await;
}

#[tokio::test]
async fn a_poll_in_a_group_shows_the_running_tally_and_answers_the_winning_key() {
    let app = TestApp::spawn().await;
    let poll = with(
        interaction("lunch-1", "poll", "Lunch on Friday?"),
        json!({
            "options": [{"key": "pizza", "label": "Pizza"}, {"key": "sushi", "label": "Sushi"}],
            "consensus_mode": "majority",
        }),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": poll, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    assert_eq!(msg.button_texts(), vec!["Pizza", "Sushi"]);
    assert!(
        !msg.visible_text.contains("📊"),
        "no tally before any vote: {}",
        msg.visible_text
    );

    tap(&app, &msg, "Pizza", alice()).await;
    let shown = wait_for_text(&app, &msg, "📊 Pizza: 1 · Sushi: 0").await;
    assert!(
        shown.visible_text.contains("👥 1 of 3 answered"),
        "{}",
        shown.visible_text
    );
    assert!(shown.has_buttons());
    assert_eq!(
        wait_for_status(&app, "lunch-1", "partial").await["result"],
        json!(null)
    );

    tap(&app, &msg, "Sushi", bob()).await;
    let shown = wait_for_text(&app, &msg, "📊 Pizza: 1 · Sushi: 1").await;
    assert!(
        shown.visible_text.contains("👥 2 of 3 answered"),
        "{}",
        shown.visible_text
    );

    tap(&app, &msg, "Pizza", carol()).await;
    let done = wait_for_status(&app, "lunch-1", "completed").await;
    assert_eq!(done["result"], "pizza");
    let got: Vec<(&Value, &Value)> = responses(&done)
        .iter()
        .map(|r| (&r["respondent"], &r["value"]))
        .collect();
    assert_eq!(
        got,
        vec![
            (&json!(id_of(ALICE)), &json!("pizza")),
            (&json!(id_of(BOB)), &json!("sushi")),
            (&json!(id_of(CAROL)), &json!("pizza")),
        ]
    );
    for r in responses(&done) {
        assert_eq!(r["response_type"], "poll");
    }
    wait_for_outcome(&app, &msg, "📊 Pizza: 2 · Sushi: 1").await;
}

#[tokio::test]
async fn a_multi_choice_shows_each_tappers_selection_and_done_answers_the_keys_in_option_order() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(
        &app,
        json!({"interaction": colours("multi-1", "multi_choice")}),
        OPS_CHAT,
    )
    .await;
    assert_eq!(
        msg.button_texts(),
        vec!["☐ Blue", "☐ Green", "☐ Red", "✔️ Done"]
    );

    // Alice ticks Red, then Blue, then Green and Green again (off).
    let answer = tap(&app, &msg, "☐ Red", alice()).await;
    assert_eq!(answer.text.as_deref(), Some("Selected: Red"));
    let msg = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "Red ticked", |m| {
            m.button_texts().contains(&"☑ Red")
        })
        .await;
    tap(&app, &msg, "☐ Blue", alice()).await;
    let msg = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "Blue and Red ticked", |m| {
            m.button_texts() == vec!["☑ Blue", "☐ Green", "☑ Red", "✔️ Done"]
        })
        .await;
    tap(&app, &msg, "☐ Green", alice()).await;
    let msg = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "Green ticked", |m| {
            m.button_texts().contains(&"☑ Green")
        })
        .await;
    let answer = tap(&app, &msg, "☑ Green", alice()).await;
    assert_eq!(answer.text.as_deref(), Some("Selected: Blue, Red"));
    let msg = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "Green unticked", |m| {
            m.button_texts() == vec!["☑ Blue", "☐ Green", "☑ Red", "✔️ Done"]
        })
        .await;

    // Bob's tap shows Bob's own selection, not Alice's.
    tap(&app, &msg, "☐ Green", bob()).await;
    let msg = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "Bob's selection shown", |m| {
            m.button_texts() == vec!["☐ Blue", "☑ Green", "☐ Red", "✔️ Done"]
        })
        .await;
    let done_view = view(&app, "multi-1").await;
    assert_eq!(
        done_view["status"], "delivered",
        "toggling is not answering"
    );
    assert_eq!(done_view["responses"], json!([]));

    tap(&app, &msg, "✔️ Done", alice()).await;
    let done = wait_for_status(&app, "multi-1", "completed").await;
    assert_eq!(done["result"], json!(["blue", "red"]));
    assert_eq!(responses(&done).len(), 1);
    assert_response(
        &responses(&done)[0],
        "multi-1",
        &id_of(ALICE),
        "multi_choice",
        &json!(["blue", "red"]),
    );
    wait_for_outcome(&app, &msg, "Blue, Red — Alice (@alice) at ").await;
}

#[tokio::test]
async fn a_free_text_question_asks_for_a_reply_and_the_approvers_reply_is_the_answer() {
    let app = TestApp::spawn().await;
    let q = interaction("why-1", "free_text", "Why did the nightly build fail?");
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    assert!(msg.force_reply, "the client opens a reply");
    assert!(!msg.has_buttons());
    assert!(
        msg.visible_text.contains("Reply to this message"),
        "{}",
        msg.visible_text
    );

    app.telegram
        .send_reply(OPS_CHAT, bob(), "Flaky <disk> & full", msg.message_id);
    let done = wait_for_status(&app, "why-1", "completed").await;
    assert_eq!(done["result"], "Flaky <disk> & full");
    assert_response(
        &responses(&done)[0],
        "why-1",
        &id_of(BOB),
        "free_text",
        &json!("Flaky <disk> & full"),
    );
    wait_for_text(&app, &msg, "“Flaky <disk> & full” — Bob at ").await;
}

#[tokio::test]
async fn free_text_ignores_chatter_replies_to_other_messages_and_replies_by_people_not_asked() {
    let app = TestApp::spawn().await;
    // Another message of the bot in the same group, and another question.
    let (status, note) = notify(
        &app,
        json!({"message": "Nightly build failed", "route": "ops"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{note}");
    let note_id = note["message_id"].as_i64().unwrap() as i32;
    let (_, other_question) =
        ask(&app, json!({"interaction": approval("other-q")}), OPS_CHAT).await;

    let q = with(
        interaction("why-2", "free_text", "What should the release notes say?"),
        json!({"target_humans": ["alice"]}),
    );
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;

    app.telegram
        .send_text_message(OPS_CHAT, alice(), "just chatting, ignore me");
    app.telegram
        .send_reply(OPS_CHAT, alice(), "a reply to the notification", note_id);
    app.telegram.send_reply(
        OPS_CHAT,
        alice(),
        "a reply to the approval question",
        other_question.message_id,
    );
    app.telegram.send_reply(
        OPS_CHAT,
        bob(),
        "bob is an approver but not asked",
        msg.message_id,
    );
    app.telegram.send_reply(
        OPS_CHAT,
        mallory(),
        "mallory is no approver",
        msg.message_id,
    );
    app.telegram
        .send_reply(OPS_CHAT, alice(), "Faster deploys.", msg.message_id);

    let done = wait_for_status(&app, "why-2", "completed").await;
    assert_eq!(done["result"], "Faster deploys.");
    assert_eq!(responses(&done).len(), 1, "{done}");
    assert_response(
        &responses(&done)[0],
        "why-2",
        "alice",
        "free_text",
        &json!("Faster deploys."),
    );
    wait_for_text(&app, &msg, "“Faster deploys.”").await;
    let untouched = view(&app, "other-q").await;
    assert_eq!(untouched["status"], "delivered", "{untouched}");
    assert_eq!(untouched["responses"], json!([]));
}

#[tokio::test]
async fn a_form_shows_its_current_values_and_approve_answers_exactly_those() {
    let app = TestApp::spawn().await;
    let current = json!({"path": "/etc/app.conf", "mode": "0644", "backup": true, "retries": 3});
    let form = with(
        interaction("form-1", "form", "Write the config file?"),
        json!({"form_schema": {
            "properties": {"path": {"type": "string", "default": "/tmp/x"}},
            "current_values": current,
        }}),
    );
    let (_, msg) = ask(&app, json!({"interaction": form}), OPS_CHAT).await;
    assert_eq!(
        msg.button_texts(),
        vec!["✅ Approve", "❌ Cancel", "✋ Deny with reason"]
    );
    let text = &msg.visible_text;
    assert!(text.contains("\"path\": \"/etc/app.conf\""), "{text}");
    assert!(text.contains("\"backup\": true"), "{text}");
    assert!(
        !text.contains("/tmp/x"),
        "current values win over defaults: {text}"
    );
    assert!(
        text.contains("Editing is not available in Telegram"),
        "{text}"
    );

    tap(&app, &msg, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "form-1", "completed").await;
    assert_eq!(done["result"], current);
    assert_response(
        &responses(&done)[0],
        "form-1",
        &id_of(ALICE),
        "form",
        &current,
    );
    wait_for_outcome(&app, &msg, "Alice (@alice) at ").await;
}

#[tokio::test]
async fn a_form_without_current_values_shows_and_answers_the_field_defaults() {
    let app = TestApp::spawn().await;
    let form = with(
        interaction("form-2", "form", "Scale the service?"),
        json!({"form_schema": {"properties": {
            "replicas": {"type": "integer", "default": 3},
            "env": {"type": "string", "default": "staging"},
        }}}),
    );
    let (_, msg) = ask(&app, json!({"interaction": form}), OPS_CHAT).await;
    assert!(
        msg.visible_text.contains("\"replicas\": 3"),
        "{}",
        msg.visible_text
    );
    assert!(
        msg.visible_text.contains("\"env\": \"staging\""),
        "{}",
        msg.visible_text
    );
    tap(&app, &msg, "✅ Approve", bob()).await;
    let done = wait_for_status(&app, "form-2", "completed").await;
    let defaults = json!({"replicas": 3, "env": "staging"});
    assert_eq!(done["result"], defaults);
    assert_response(
        &responses(&done)[0],
        "form-2",
        &id_of(BOB),
        "form",
        &defaults,
    );
}

/// AI-Parrot's `form` responses must hold a dict: a cancelled form is sent as the
/// `free_text` answer its manager also accepts for a form, with value null.
#[tokio::test]
async fn a_cancelled_form_answers_null_as_free_text() {
    let app = TestApp::spawn().await;
    let form = with(
        interaction("form-3", "form", "Delete the backups?"),
        json!({"form_schema": {"current_values": {"older_than_days": 30}}}),
    );
    let (_, msg) = ask(&app, json!({"interaction": form}), OPS_CHAT).await;
    tap(&app, &msg, "❌ Cancel", alice()).await;
    let done = wait_for_status(&app, "form-3", "completed").await;
    assert_eq!(done["result"], json!(null));
    assert_response(
        &responses(&done)[0],
        "form-3",
        &id_of(ALICE),
        "free_text",
        &json!(null),
    );
    wait_for_outcome(&app, &msg, "❌ Cancelled — Alice (@alice) at ").await;
}

// ----- Consensus --------------------------------------------------------------------

#[tokio::test]
async fn first_response_closes_on_the_first_answer_and_later_taps_are_told_it_is_decided() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(
        &app,
        json!({"interaction": approval("first-1"), "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "❌ Reject", carol()).await;
    let done = wait_for_status(&app, "first-1", "completed").await;
    assert_eq!(done["result"], false);
    wait_for_outcome(&app, &msg, "Rejected — Carol (@carol) at ").await;

    let late = stale_tap(&app, &msg, "✅ Approve", alice()).await;
    assert!(late.show_alert, "{late:?}");
    assert!(
        late.text
            .as_deref()
            .unwrap_or("")
            .starts_with("Already decided: "),
        "{late:?}"
    );
    let after = view(&app, "first-1").await;
    assert_eq!(after["status"], "completed");
    assert_eq!(after["result"], false);
    assert_eq!(responses(&after).len(), 1);
}

#[tokio::test]
async fn all_required_waits_for_every_target_human_and_names_them_as_respondents() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("all-1"),
        json!({"consensus_mode": "all_required", "target_humans": ["alice", "bob"]}),
    );
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    assert!(
        msg.visible_text.contains("👥 0 of 2 answered"),
        "{}",
        msg.visible_text
    );

    tap(&app, &msg, "✅ Approve", bob()).await;
    let partial = wait_for_status(&app, "all-1", "partial").await;
    assert_eq!(partial["result"], json!(null));
    assert_response(
        &responses(&partial)[0],
        "all-1",
        "bob",
        "approval",
        &json!(true),
    );
    let shown = wait_for_text(&app, &msg, "👥 1 of 2 answered").await;
    assert!(shown.has_buttons(), "still open");

    tap(&app, &msg, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "all-1", "completed").await;
    assert_eq!(done["result"], true);
    let who: Vec<&Value> = responses(&done).iter().map(|r| &r["respondent"]).collect();
    assert_eq!(who, vec!["bob", "alice"]);
    wait_for_outcome(&app, &msg, "Approved").await;
}

#[tokio::test]
async fn all_required_closes_early_on_a_conflict() {
    let app = TestApp::spawn().await;
    let q = with(approval("all-2"), json!({"consensus_mode": "all_required"}));
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    tap(&app, &msg, "❌ Reject", bob()).await;
    let done = wait_for_status(&app, "all-2", "completed").await;
    assert_eq!(
        conflict_values(&done["result"]),
        vec![json!(true), json!(false)]
    );
    assert_eq!(responses(&done).len(), 2);
    wait_for_outcome(&app, &msg, "⚖️ No agreement").await;

    let late = stale_tap(&app, &msg, "✅ Approve", carol()).await;
    assert!(late.show_alert);
    assert!(late.text.unwrap().starts_with("Already decided: "));
    assert_eq!(responses(&view(&app, "all-2").await).len(), 2);
}

#[tokio::test]
async fn majority_closes_once_a_value_has_more_than_half_of_the_expected_answers() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("maj-1"),
        json!({"consensus_mode": "majority", "target_humans": ["alice", "bob", "carol"]}),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "✅ Approve", carol()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    assert_eq!(view(&app, "maj-1").await["status"], "partial");
    tap(&app, &msg, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "maj-1", "completed").await;
    assert_eq!(done["result"], true);
    let who: Vec<&Value> = responses(&done).iter().map(|r| &r["respondent"]).collect();
    assert_eq!(who, vec!["carol", "alice"]);
    wait_for_outcome(&app, &msg, "Approved").await;
}

#[tokio::test]
async fn majority_ends_without_agreement_when_no_value_can_reach_it() {
    let app = TestApp::spawn().await;
    let q = with(
        colours("maj-2", "single_choice"),
        json!({"consensus_mode": "majority"}),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "Blue", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    tap(&app, &msg, "Green", bob()).await;
    wait_for_text(&app, &msg, "👥 2 of 3 answered").await;
    assert_eq!(view(&app, "maj-2").await["status"], "partial");
    tap(&app, &msg, "Red", carol()).await;
    let done = wait_for_status(&app, "maj-2", "completed").await;
    assert_eq!(
        conflict_values(&done["result"]),
        vec![json!("blue"), json!("green"), json!("red")]
    );
    wait_for_outcome(&app, &msg, "⚖️ No agreement").await;
}

#[tokio::test]
async fn quorum_uses_the_routes_quorum_when_the_interaction_names_none() {
    let app = TestApp::spawn().await;
    let q = with(approval("quo-1"), json!({"consensus_mode": "quorum"}));
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "✅ Approve", bob()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    assert_eq!(view(&app, "quo-1").await["status"], "partial");
    tap(&app, &msg, "✅ Approve", carol()).await;
    let done = wait_for_status(&app, "quo-1", "completed").await;
    assert_eq!(done["result"], true, "council's quorum is 2");
    assert_eq!(responses(&done).len(), 2);
    wait_for_outcome(&app, &msg, "Approved").await;
}

#[tokio::test]
async fn quorum_from_the_interactions_policy_overrides_the_routes() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("quo-2"),
        json!({"consensus_mode": "quorum", "policy": {"quorum": 3}}),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    tap(&app, &msg, "✅ Approve", bob()).await;
    let shown = wait_for_text(&app, &msg, "👥 2 of 3 answered").await;
    assert!(shown.has_buttons(), "two are not the policy's three");
    assert_eq!(view(&app, "quo-2").await["status"], "partial");
    tap(&app, &msg, "✅ Approve", carol()).await;
    let done = wait_for_status(&app, "quo-2", "completed").await;
    assert_eq!(done["result"], true);
    assert_eq!(responses(&done).len(), 3);
}

#[tokio::test]
async fn quorum_ends_without_agreement_when_no_value_can_reach_it() {
    let app = TestApp::spawn().await;
    let q = with(
        colours("quo-3", "single_choice"),
        json!({"consensus_mode": "quorum", "policy": {"quorum": 3}}),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "Blue", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    // With one answer left, neither blue (1 + 1) nor green (1 + 1) can reach 3.
    tap(&app, &msg, "Green", bob()).await;
    let done = wait_for_status(&app, "quo-3", "completed").await;
    assert_eq!(
        conflict_values(&done["result"]),
        vec![json!("blue"), json!("green")]
    );
    wait_for_outcome(&app, &msg, "⚖️ No agreement").await;
}

#[tokio::test]
async fn one_no_vetoes_a_quorum_approval_at_once() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("quo-veto"),
        json!({"consensus_mode": "quorum", "policy": {"quorum": 2}}),
    );
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    let shown = wait_for_text(&app, &msg, "👥 0 of 3 answered").await;
    assert!(
        shown.visible_text.contains("one no ends it"),
        "the veto is said up front: {}",
        shown.visible_text
    );
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    // Bob's no ends it, although Carol could still make a quorum of two yeses.
    tap(&app, &msg, "❌ Reject", bob()).await;
    let done = wait_for_status(&app, "quo-veto", "completed").await;
    assert_eq!(done["result"], false, "{done}");
    assert_eq!(done["do_not_retry"], true, "{done}");
    assert!(
        done["reason"]
            .as_str()
            .unwrap()
            .starts_with("vetoed by Bob"),
        "{done}"
    );
    assert_eq!(responses(&done).len(), 2);
    let outcome = wait_for_outcome(&app, &msg, "Rejected").await;
    assert!(!outcome.has_buttons());
    // Carol's late tap changes nothing.
    let late = stale_tap(&app, &msg, "✅ Approve", carol()).await;
    assert!(late.text.unwrap_or_default().contains("Already decided"));
    assert_eq!(view(&app, "quo-veto").await["result"], false);
}

#[tokio::test]
async fn quorum_without_a_configured_size_needs_a_majority() {
    let app = TestApp::spawn().await;
    // `ops` has no quorum and two approvers: a majority is both.
    let q = with(approval("quo-4"), json!({"consensus_mode": "quorum"}));
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_text(&app, &msg, "👥 1 of 2 answered").await;
    assert_eq!(view(&app, "quo-4").await["status"], "partial");
    tap(&app, &msg, "✅ Approve", bob()).await;
    let done = wait_for_status(&app, "quo-4", "completed").await;
    assert_eq!(done["result"], true);
}

// ----- Who may answer ---------------------------------------------------------------

#[tokio::test]
async fn a_stranger_cannot_answer_and_nothing_is_stored() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(&app, json!({"interaction": approval("who-1")}), OPS_CHAT).await;
    let refused = tap(&app, &msg, "✅ Approve", mallory()).await;
    assert!(refused.show_alert, "{refused:?}");
    assert_eq!(
        refused.text.as_deref(),
        Some("You are not allowed to decide this request")
    );
    let still = view(&app, "who-1").await;
    assert_eq!(still["status"], "delivered");
    assert_eq!(still["responses"], json!([]));
    assert!(app.telegram.message(OPS_CHAT, msg.message_id).has_buttons());

    tap(&app, &msg, "❌ Reject", alice()).await;
    let done = wait_for_status(&app, "who-1", "completed").await;
    assert_eq!(done["result"], false);
    assert_eq!(responses(&done).len(), 1);
    assert_eq!(responses(&done)[0]["respondent"], id_of(ALICE));
}

#[tokio::test]
async fn an_approver_of_another_route_cannot_answer_here() {
    let app = TestApp::spawn().await;
    // `other` has only Bob.
    let (_, msg) = ask(
        &app,
        json!({"interaction": approval("who-2"), "route": "other"}),
        OTHER_CHAT,
    )
    .await;
    let refused = tap(&app, &msg, "✅ Approve", alice()).await;
    assert!(refused.show_alert);
    let still = view(&app, "who-2").await;
    assert_eq!(still["status"], "delivered");
    assert_eq!(still["responses"], json!([]));
}

#[tokio::test]
async fn an_approver_outside_target_humans_cannot_answer() {
    let app = TestApp::spawn().await;
    let q = with(approval("who-3"), json!({"target_humans": ["alice"]}));
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    let refused = tap(&app, &msg, "✅ Approve", bob()).await;
    assert!(refused.show_alert, "{refused:?}");
    assert_eq!(
        refused.text.as_deref(),
        Some("This question is for other people.")
    );
    let still = view(&app, "who-3").await;
    assert_eq!(still["status"], "delivered");
    assert_eq!(still["responses"], json!([]));

    tap(&app, &msg, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "who-3", "completed").await;
    assert_response(
        &responses(&done)[0],
        "who-3",
        "alice",
        "approval",
        &json!(true),
    );
}

#[tokio::test]
async fn target_humans_given_as_telegram_ids_narrow_who_answers_and_name_the_respondent() {
    let app = TestApp::spawn().await;
    let q = with(approval("who-4"), json!({"target_humans": [id_of(BOB)]}));
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    assert!(tap(&app, &msg, "✅ Approve", alice()).await.show_alert);
    assert_eq!(view(&app, "who-4").await["responses"], json!([]));
    tap(&app, &msg, "✅ Approve", bob()).await;
    let done = wait_for_status(&app, "who-4", "completed").await;
    assert_response(
        &responses(&done)[0],
        "who-4",
        &id_of(BOB),
        "approval",
        &json!(true),
    );
}

#[tokio::test]
async fn target_humans_of_whom_nobody_may_answer_on_the_route_are_refused() {
    let app = TestApp::spawn().await;
    let q = with(approval("who-5"), json!({"target_humans": ["alice"]}));
    let (status, body) = post_interaction(&app, json!({"interaction": q, "route": "other"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("interaction.target_humans"),
        "{body}"
    );
    let (status, _) = get_interaction(&app, "who-5", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_second_answer_by_the_same_person_is_refused_and_the_first_stands() {
    let app = TestApp::spawn().await;
    let q = with(approval("twice-1"), json!({"consensus_mode": "majority"}));
    let (_, msg) = ask(
        &app,
        json!({"interaction": q, "route": "council"}),
        COUNCIL_CHAT,
    )
    .await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    let msg = wait_for_text(&app, &msg, "👥 1 of 3 answered").await;
    let again = tap(&app, &msg, "❌ Reject", alice()).await;
    assert!(again.show_alert, "{again:?}");
    assert_eq!(again.text.as_deref(), Some("You already answered."));
    let still = view(&app, "twice-1").await;
    assert_eq!(still["status"], "partial");
    assert_eq!(responses(&still).len(), 1);
    assert_eq!(responses(&still)[0]["value"], true);
}

// ----- Timeouts ---------------------------------------------------------------------

#[tokio::test]
async fn timeout_action_cancel_ends_as_timeout_and_later_taps_change_nothing() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("to-cancel"),
        json!({"timeout": 1.0, "timeout_action": "cancel"}),
    );
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    let ended = wait_for_status(&app, "to-cancel", "timeout").await;
    assert_eq!(ended["result"], json!(null));
    assert_eq!(ended["responses"], json!([]));
    assert_eq!(ended["timeout_action"], json!(null));
    wait_for_outcome(&app, &msg, "⏱ Timed out").await;

    let late = stale_tap(&app, &msg, "✅ Approve", alice()).await;
    assert!(late.show_alert, "{late:?}");
    assert!(late.text.unwrap().starts_with("Already decided: "));
    let after = view(&app, "to-cancel").await;
    assert_eq!(after["status"], "timeout");
    assert_eq!(after["responses"], json!([]));
}

#[tokio::test]
async fn timeout_action_default_completes_with_the_default_response_marked_as_default() {
    let app = TestApp::spawn().await;
    let q = with(
        colours("to-default", "single_choice"),
        json!({"timeout": 1.0, "timeout_action": "default", "default_response": "blue"}),
    );
    let (_, msg) = ask(&app, json!({"interaction": q}), OPS_CHAT).await;
    let done = wait_for_status(&app, "to-default", "completed").await;
    assert_eq!(done["result"], "blue");
    assert_eq!(responses(&done).len(), 1, "{done}");
    let r = &responses(&done)[0];
    assert_response(r, "to-default", "system", "single_choice", &json!("blue"));
    assert_eq!(r["metadata"]["default"], true, "{r}");
    wait_for_outcome(&app, &msg, "⏱ Timed out").await;

    let late = stale_tap(&app, &msg, "Red", bob()).await;
    assert!(late.text.unwrap().starts_with("Already decided: "));
    assert_eq!(view(&app, "to-default").await["result"], "blue");
}

#[tokio::test]
async fn timeout_actions_escalate_and_retry_are_reported_as_timeout_with_the_action() {
    let app = TestApp::spawn().await;
    // Different chats: Telegram's pacing of one message a second per chat would
    // otherwise hold the second question back past its one-second timeout.
    let cases = [
        ("escalate", "ops", OPS_CHAT),
        ("retry", "other", OTHER_CHAT),
    ];
    let mut messages = Vec::new();
    for (action, route, chat) in cases {
        let q = with(
            approval(&format!("to-{action}")),
            json!({"timeout": 1.0, "timeout_action": action, "escalation_targets": ["carol"]}),
        );
        messages.push(
            ask(&app, json!({"interaction": q, "route": route}), chat)
                .await
                .1,
        );
    }
    for ((action, _, _), msg) in cases.into_iter().zip(&messages) {
        let ended = wait_for_status(&app, &format!("to-{action}"), "timeout").await;
        assert_eq!(ended["timeout_action"], action, "{ended}");
        assert_eq!(ended["result"], json!(null));
        assert_eq!(ended["responses"], json!([]));
        wait_for_outcome(&app, msg, &format!("({action} requested)")).await;
    }
}

// ----- Withdrawal -------------------------------------------------------------------

#[tokio::test]
async fn withdrawing_edits_the_message_removes_the_buttons_and_refuses_later_answers() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(
        &app,
        json!({"interaction": colours("wd-1", "single_choice")}),
        OPS_CHAT,
    )
    .await;
    let (status, withdrawn) = delete_interaction(&app, "wd-1").await;
    assert_eq!(status, StatusCode::OK, "{withdrawn}");
    assert_eq!(withdrawn["status"], "cancelled");
    assert_eq!(withdrawn["interaction_id"], "wd-1");
    wait_for_outcome(&app, &msg, "↩ Withdrawn by the agent").await;

    let late = stale_tap(&app, &msg, "Blue", alice()).await;
    assert!(late.show_alert);
    assert!(late.text.unwrap().starts_with("Already decided: "));
    let after = view(&app, "wd-1").await;
    assert_eq!(after["status"], "cancelled");
    assert_eq!(after["responses"], json!([]));

    let (status, again) = delete_interaction(&app, "wd-1").await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(again["error"]["code"], "already_decided");
    assert_eq!(again["interaction"]["status"], "cancelled");

    let (status, _) = delete_interaction(&app, "never-asked").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_withdrawn_free_text_question_ignores_later_replies() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(
        &app,
        json!({"interaction": interaction("wd-2", "free_text", "Any objections?")}),
        OPS_CHAT,
    )
    .await;
    let (status, _) = delete_interaction(&app, "wd-2").await;
    assert_eq!(status, StatusCode::OK);
    wait_for_text(&app, &msg, "↩ Withdrawn by the agent").await;
    app.telegram
        .send_reply(OPS_CHAT, alice(), "too late", msg.message_id);
    // A later update answered in the same chat: the poller has fetched the reply by then
    // (Telegram hands out updates in order), so a wrongly accepted reply would show.
    let (_, probe) = ask(&app, json!({"interaction": approval("wd-probe")}), OPS_CHAT).await;
    tap(&app, &probe, "✅ Approve", alice()).await;
    wait_for_status(&app, "wd-probe", "completed").await;
    let after = view(&app, "wd-2").await;
    assert_eq!(after["status"], "cancelled");
    assert_eq!(after["responses"], json!([]));
    assert_eq!(after["result"], json!(null));
}

// ----- Recipients in private chats --------------------------------------------------

#[tokio::test]
async fn one_interaction_for_two_recipients_reaches_both_private_chats_and_both_answers_count() {
    let app = TestApp::spawn().await;
    let q = with(
        approval("pm-1"),
        json!({"consensus_mode": "all_required", "target_humans": ["alice", "bob"]}),
    );
    let (created, to_alice) = ask(
        &app,
        json!({"interaction": q.clone(), "recipient": "alice"}),
        ALICE as i64,
    )
    .await;
    assert_eq!(created["route"], "@alice");
    assert_eq!(created["recipients"], json!(["alice"]));
    assert_eq!(
        to_alice.button_texts(),
        vec!["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );

    let (status, again) =
        post_interaction(&app, json!({"interaction": q, "recipient": "bob"})).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], created["id"], "one record per interaction");
    assert_eq!(again["recipients"], json!(["alice", "bob"]));
    let to_bob = app
        .telegram
        .wait_for_message_in(BOB as i64, 1)
        .await
        .remove(0);
    assert_eq!(
        to_bob.button_texts(),
        vec!["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
    wait_until_delivered_in(&app, created["id"].as_str().unwrap(), BOB as i64).await;

    tap(&app, &to_bob, "✅ Approve", bob()).await;
    let partial = wait_for_status(&app, "pm-1", "partial").await;
    assert_response(
        &responses(&partial)[0],
        "pm-1",
        "bob",
        "approval",
        &json!(true),
    );
    wait_for_text(&app, &to_alice, "👥 1 of 2 answered").await;
    wait_for_text(&app, &to_bob, "👥 1 of 2 answered").await;

    tap(&app, &to_alice, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "pm-1", "completed").await;
    assert_eq!(done["result"], true);
    let who: Vec<&Value> = responses(&done).iter().map(|r| &r["respondent"]).collect();
    assert_eq!(who, vec!["bob", "alice"]);
    wait_for_outcome(&app, &to_alice, "Approved").await;
    wait_for_outcome(&app, &to_bob, "Approved").await;
    assert!(
        app.telegram.messages_in(OPS_CHAT).is_empty(),
        "no group involved"
    );
}

#[tokio::test]
async fn an_answer_in_one_private_chat_closes_the_copy_in_the_other() {
    let app = TestApp::spawn().await;
    let q = colours("pm-2", "single_choice");
    let (created, to_alice) = ask(
        &app,
        json!({"interaction": q.clone(), "recipient": "alice"}),
        ALICE as i64,
    )
    .await;
    let (status, _) = post_interaction(&app, json!({"interaction": q, "recipient": "bob"})).await;
    assert_eq!(status, StatusCode::OK);
    let to_bob = app
        .telegram
        .wait_for_message_in(BOB as i64, 1)
        .await
        .remove(0);
    wait_until_delivered_in(&app, created["id"].as_str().unwrap(), BOB as i64).await;

    tap(&app, &to_alice, "Red", alice()).await;
    let done = wait_for_status(&app, "pm-2", "completed").await;
    assert_eq!(done["result"], "red");
    assert_response(
        &responses(&done)[0],
        "pm-2",
        &id_of(ALICE),
        "single_choice",
        &json!("red"),
    );
    wait_for_outcome(&app, &to_alice, "Red — Alice (@alice)").await;
    wait_for_outcome(&app, &to_bob, "Red — Alice (@alice)").await;
    let late = stale_tap(&app, &to_bob, "Blue", bob()).await;
    assert!(late.text.unwrap().starts_with("Already decided: "));
}

#[tokio::test]
async fn a_free_text_reply_to_a_private_copy_answers_the_question() {
    let app = TestApp::spawn().await;
    let q = interaction("pm-text", "free_text", "Which ticket tracks the outage?");
    let (created, to_alice) = ask(
        &app,
        json!({"interaction": q.clone(), "recipient": "alice"}),
        ALICE as i64,
    )
    .await;
    let (status, _) = post_interaction(&app, json!({"interaction": q, "recipient": "bob"})).await;
    assert_eq!(status, StatusCode::OK);
    let to_bob = app
        .telegram
        .wait_for_message_in(BOB as i64, 1)
        .await
        .remove(0);
    assert!(to_bob.force_reply);
    wait_until_delivered_in(&app, created["id"].as_str().unwrap(), BOB as i64).await;

    app.telegram
        .send_reply(BOB as i64, bob(), "OPS-1234", to_bob.message_id);
    let done = wait_for_status(&app, "pm-text", "completed").await;
    assert_eq!(done["result"], "OPS-1234");
    assert_response(
        &responses(&done)[0],
        "pm-text",
        &id_of(BOB),
        "free_text",
        &json!("OPS-1234"),
    );
    wait_for_text(&app, &to_alice, "“OPS-1234” — Bob at ").await;
    wait_for_text(&app, &to_bob, "“OPS-1234” — Bob at ").await;
}

#[tokio::test]
async fn in_a_private_chat_only_its_person_may_answer() {
    let app = TestApp::spawn().await;
    let (_, to_alice) = ask(
        &app,
        json!({"interaction": approval("pm-3"), "recipient": "alice"}),
        ALICE as i64,
    )
    .await;
    // Bob is an approver elsewhere, but this is Alice's chat.
    let refused = tap(&app, &to_alice, "✅ Approve", bob()).await;
    assert!(refused.show_alert, "{refused:?}");
    assert_eq!(view(&app, "pm-3").await["responses"], json!([]));
    tap(&app, &to_alice, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "pm-3", "completed").await;
    assert_eq!(responses(&done)[0]["respondent"], id_of(ALICE));
}

#[tokio::test]
async fn a_recipient_with_a_route_is_asked_in_the_routes_group() {
    let app = TestApp::spawn().await;
    let (created, msg) = ask(
        &app,
        json!({"interaction": approval("pm-4"), "route": "other", "recipient": "bob"}),
        OTHER_CHAT,
    )
    .await;
    assert_eq!(created["route"], "other");
    assert!(app.telegram.messages_in(BOB as i64).is_empty());
    tap(&app, &msg, "✅ Approve", bob()).await;
    wait_for_status(&app, "pm-4", "completed").await;
}

#[tokio::test]
async fn an_unknown_recipient_without_a_route_is_refused_naming_recipient() {
    let app = TestApp::spawn().await;
    let (status, body) = post_interaction(
        &app,
        json!({"interaction": approval("pm-5"), "recipient": "zed"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "invalid_field");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("recipient"),
        "{body}"
    );
}

#[tokio::test]
async fn a_private_chat_the_bot_cannot_reach_fails_the_question_closed() {
    let app = TestApp::spawn().await;
    app.telegram.forbid_private_chat(ALICE);
    let (status, created) = post_interaction(
        &app,
        json!({"interaction": approval("pm-6"), "recipient": "alice"}),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{created}");
    let ended = wait_for_status(&app, "pm-6", "cancelled").await;
    assert_eq!(ended["responses"], json!([]));
    assert_eq!(ended["result"], json!(null));
    assert!(app.telegram.messages_in(ALICE as i64).is_empty());
}

#[tokio::test]
async fn a_copy_the_bot_cannot_deliver_leaves_the_question_open_for_the_others() {
    let app = TestApp::spawn().await;
    app.telegram.forbid_private_chat(BOB);
    let q = approval("pm-7");
    let (_, to_alice) = ask(
        &app,
        json!({"interaction": q.clone(), "recipient": "alice"}),
        ALICE as i64,
    )
    .await;
    let (status, _) = post_interaction(&app, json!({"interaction": q, "recipient": "bob"})).await;
    assert_eq!(status, StatusCode::OK);
    app.telegram.wait_for_requests("sendMessage", 2).await;
    tap(&app, &to_alice, "✅ Approve", alice()).await;
    let done = wait_for_status(&app, "pm-7", "completed").await;
    assert_eq!(done["result"], true);
    assert!(app.telegram.messages_in(BOB as i64).is_empty());
}

// ----- Repeats ----------------------------------------------------------------------

#[tokio::test]
async fn posting_the_same_interaction_again_returns_200_with_the_same_record_and_no_new_message() {
    let app = TestApp::spawn().await;
    let body = json!({"interaction": approval("rep-1")});
    let (created, msg) = ask(&app, body.clone(), OPS_CHAT).await;
    let (status, again) = post_interaction(&app, body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["id"], created["id"]);
    assert_eq!(again["interaction_id"], "rep-1");
    assert_eq!(again["status"], "delivered");

    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_status(&app, "rep-1", "completed").await;
    wait_for_outcome(&app, &msg, "Approved").await;
    assert_eq!(
        app.telegram.messages_in(OPS_CHAT).len(),
        1,
        "one message only"
    );

    // Once it is over, a repeat still names the same record, as it ended.
    let (status, ended) = post_interaction(&app, json!({"interaction": approval("rep-1")})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ended["id"], created["id"]);
    assert_eq!(ended["status"], "completed");
    assert_eq!(ended["result"], true);
}

#[tokio::test]
async fn the_same_interaction_id_for_a_different_question_is_a_conflict() {
    let app = TestApp::spawn().await;
    ask(&app, json!({"interaction": approval("rep-2")}), OPS_CHAT).await;
    let other_question = with(approval("rep-2"), json!({"question": "Delete prod?"}));
    let (status, body) = post_interaction(&app, json!({"interaction": other_question})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conflict");
    let other_type = with(approval("rep-2"), json!({"interaction_type": "free_text"}));
    let (status, _) = post_interaction(&app, json!({"interaction": other_type})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let now = view(&app, "rep-2").await;
    assert_eq!(now["interaction"]["question"], "Deploy billing to prod?");
}

// ----- Long-poll --------------------------------------------------------------------

#[tokio::test]
async fn a_long_poll_returns_at_the_next_change_not_at_the_end_of_its_wait() {
    let app = TestApp::spawn().await;
    let (_, msg) = ask(&app, json!({"interaction": approval("lp-1")}), OPS_CHAT).await;
    let poll = {
        let client = app.client.clone();
        let url = app.url("/v1/interactions/lp-1?wait=60");
        tokio::spawn(async move {
            let started = Instant::now();
            let r = json_of(client.get(url).bearer_auth(TOKEN_A).send().await.unwrap()).await;
            (r, started.elapsed())
        })
    };
    tap(&app, &msg, "✅ Approve", alice()).await;
    let ((status, changed), took) = poll.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["status"], "completed");
    assert!(
        took < Duration::from_secs(30),
        "woke up on the change: {took:?}"
    );
}

// ----- Notifications ----------------------------------------------------------------

#[tokio::test]
async fn a_notification_to_a_route_is_posted_in_its_group_with_a_bell() {
    let app = TestApp::spawn().await;
    let (status, sent) = notify(
        &app,
        json!({"message": "Deployed <billing> & done.", "route": "other"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    assert_eq!(sent["chat_id"], json!(OTHER_CHAT));
    let msg = app
        .telegram
        .message(OTHER_CHAT, sent["message_id"].as_i64().unwrap() as i32);
    // The agent's words, framed as its message (never a line of the service's own).
    assert_eq!(
        msg.visible_text,
        "🔔 Message from agent-a:\nDeployed <billing> & done."
    );
    assert!(!msg.has_buttons());
    assert!(!msg.force_reply);
}

#[tokio::test]
async fn a_notification_to_a_person_goes_to_their_private_chat() {
    let app = TestApp::spawn().await;
    let (status, sent) = notify(
        &app,
        json!({"message": "Your report is ready", "recipient": "bob"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    assert_eq!(sent["chat_id"], json!(BOB));
    let msg = app
        .telegram
        .message(BOB as i64, sent["message_id"].as_i64().unwrap() as i32);
    assert_eq!(
        msg.visible_text,
        "🔔 Message from agent-a:\nYour report is ready"
    );
}

#[tokio::test]
async fn a_notification_without_route_or_recipient_goes_to_the_agents_default_route() {
    let app = TestApp::spawn().await;
    let (status, sent) = notify(&app, json!({"message": "Heartbeat"})).await;
    assert_eq!(status, StatusCode::OK, "{sent}");
    assert_eq!(sent["chat_id"], json!(OPS_CHAT));
    let (status, body) = notify(&app, json!({"message": "hi", "recipient": "zed"})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("recipient")
    );
}

#[tokio::test]
async fn a_notification_the_bots_own_pace_has_no_slot_for_says_so_and_when_and_telegram_is_never_called()
 {
    let app = TestApp::spawn().await;
    // Twelve at once to one chat: the bot sends one a second there, and a notification
    // waits at most 8 s for its slot, so the last ones have none.
    let sends = (0..12).map(|i| {
        app.client
            .post(app.url("/v1/notifications"))
            .bearer_auth(TOKEN_A)
            .json(&json!({"message": format!("paced {i}")}))
            .send()
    });
    let mut sent = 0;
    let mut refused = Vec::new();
    for r in futures_util::future::join_all(sends).await {
        let r = r.expect("request");
        let retry_after = r.headers().get("retry-after").cloned();
        let (status, body) = json_of(r).await;
        match status {
            StatusCode::OK => sent += 1,
            StatusCode::TOO_MANY_REQUESTS => refused.push((retry_after, body)),
            other => panic!("{other}: {body}"),
        }
    }
    assert!(!refused.is_empty(), "all {sent} went");
    for (retry_after, body) in &refused {
        assert_eq!(body["error"]["code"], "rate_limited", "{body}");
        let message = body["error"]["message"].as_str().expect("a message");
        assert!(
            message.starts_with("not sent: the bot's pace for this chat")
                && message.contains("Telegram was not called"),
            "{message}"
        );
        assert!(!message.contains("Telegram did not take"), "{message}");
        // "the next slot is free at 2026-12-05 12:59:11 UTC, in 9 s at the earliest"
        let (_, at) = message
            .split_once("the next slot is free at ")
            .expect("when the next slot is free");
        let (when, rest) = at.split_once(" UTC, in ").expect("a time in UTC");
        let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
        let when = time::PrimitiveDateTime::parse(when, &f)
            .unwrap_or_else(|e| panic!("{when}: {e}"))
            .assume_utc();
        let now = time::OffsetDateTime::now_utc();
        assert!(
            when > now - time::Duration::seconds(2) && when < now + time::Duration::seconds(20),
            "{message}"
        );
        let secs: u64 = rest.split(' ').next().unwrap().parse().expect("seconds");
        let retry_after: u64 = retry_after
            .as_ref()
            .expect("Retry-After")
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // Both count from the same slot, read a moment apart.
        assert!(retry_after.abs_diff(secs) <= 1, "{retry_after}: {message}");
        // Refused at once (its slot was past its 8 s), or when it woke near the end of
        // its wait and found its slot moved just past it.
        assert!((1..=12).contains(&secs), "{message}");
    }
    // Telegram saw exactly the notifications that went, not one attempt of the others.
    let asked = app
        .telegram
        .requests("sendMessage")
        .iter()
        .filter(|r| {
            r.body["text"]
                .as_str()
                .is_some_and(|t| t.contains("paced "))
        })
        .count();
    assert_eq!(asked, sent);
    assert_eq!(sent + refused.len(), 12);
}
