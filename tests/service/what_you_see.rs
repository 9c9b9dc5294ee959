//! What you see is what you approve: the operator sees every part of the call, the scope
//! of an approval and the true characters, and no agent can pose as the service.
//!
//! Every assertion goes through the real surface: the HTTP API and the fake Telegram's
//! view of messages, buttons and attached files.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::SentMessage;
use hitl_telegram::domain::ids::QuestionId;
use hitl_telegram::storage::{Questions, SqliteStore};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn transfer(params: Value, window: u64) -> Value {
    json!({"tool": "transfer", "params": params, "owner_id": "emp-1",
           "window_seconds": window, "template": "Send {amount} to {to}"})
}

async fn ask(app: &TestApp, body: Value) -> (Value, SentMessage) {
    let (record, message_id) = app.ask_suspended(body).await;
    let chat = app
        .telegram
        .sent_messages()
        .into_iter()
        .find(|m| m.message_id == message_id)
        .map_or(OPS_CHAT, |m| m.chat_id);
    (record, app.telegram.message(chat, message_id))
}

async fn post(app: &TestApp, path: &str, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(path))
        .bearer_auth(TOKEN_A)
        .json(&body)
        .send()
        .await
        .expect("request");
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Long-polls `GET path` until `done` holds; fails after about 15 s.
async fn poll_until(app: &TestApp, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..15 {
        let r = app
            .client
            .get(app.url(&format!("{path}?wait=1")))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .expect("request");
        last = r.json().await.expect("json");
        if done(&last) {
            return last;
        }
    }
    panic!("{path} never got there; last seen: {last:#}");
}

#[tokio::test]
async fn a_window_request_shows_its_scope_and_end_time_and_both_approve_buttons() {
    let app = TestApp::spawn().await;
    let (record, m) = ask(&app, transfer(json!({"amount": 5, "to": "ACME"}), 600)).await;
    assert_eq!(record["window_seconds"], 600);
    assert_eq!(
        m.button_texts(),
        [
            "✅ Approve once",
            "✅ Approve for 10 min",
            "❌ Cancel",
            "✋ Deny with reason"
        ]
    );
    let v = &m.visible_text;
    assert!(
        v.contains(
            "Approve for 10 min also lets identical calls (same tool, owner and arguments) through"
        ),
        "{v}"
    );
    // The latest end: the deadline plus the window, as an absolute time.
    let expires = time::OffsetDateTime::parse(
        record["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let latest = expires + Duration::from_secs(600);
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    assert!(
        v.contains(&format!(
            "until {} at the latest",
            latest.format(&f).unwrap()
        )),
        "{v}"
    );
}

#[tokio::test]
async fn approve_once_opens_no_window_and_says_so() {
    let app = TestApp::spawn().await;
    let body = transfer(json!({"amount": 5, "to": "ACME"}), 600);
    let (record, m) = ask(&app, body.clone()).await;
    let id = record["id"].as_str().unwrap();
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve once", alice());
    let done = app.wait_status(id, "confirmed").await;
    assert_eq!(done["approved_scope"], "once");
    assert_eq!(done["window_seconds"], 0);
    assert_eq!(done["window_until"], Value::Null);
    app.telegram
        .wait_for_message_text_containing(OPS_CHAT, m.message_id, "Approved once by Alice")
        .await;
    // The identical call asks again.
    let (again, _) = ask(&app, body).await;
    assert_eq!(again["status"], "pending");
}

#[tokio::test]
async fn approve_for_the_window_lets_identical_calls_through_and_the_outcome_says_until_when() {
    let app = TestApp::spawn().await;
    let body = transfer(json!({"amount": 5, "to": "ACME"}), 600);
    let (record, m) = ask(&app, body.clone()).await;
    let id = record["id"].as_str().unwrap();
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve for 10 min", alice());
    let done = app.wait_status(id, "confirmed").await;
    assert_eq!(done["approved_scope"], "window");
    assert_eq!(done["window_seconds"], 600);
    assert!(done["window_until"].is_string(), "{done}");
    let shown = app
        .telegram
        .wait_for_message_text_containing(OPS_CHAT, m.message_id, &format!("/revoke {id}"))
        .await;
    assert!(
        shown
            .visible_text
            .contains("Approved by Alice (@alice) for 10 min"),
        "{}",
        shown.visible_text
    );
    assert!(shown.visible_text.contains("identical calls pass until"));
    let (s, hit) = app.create(body).await;
    assert_eq!(s, StatusCode::OK, "{hit}");
    assert_eq!(hit["via"], "window");
}

#[tokio::test]
async fn a_window_over_the_routes_cap_is_cut_and_reported_everywhere() {
    let app = TestApp::spawn().await;
    // A year asked for; the route allows the default hour.
    let (record, m) = ask(&app, transfer(json!({"amount": 1, "to": "X"}), 31_622_400)).await;
    assert_eq!(record["window_seconds"], 3600);
    assert_eq!(record["window_requested_seconds"], 31_622_400);
    assert!(m.button_texts().contains(&"✅ Approve for 1 h"), "{m:?}");
    assert!(
        m.visible_text
            .contains("The agent asked for 366 days; this route allows at most 1 h."),
        "{}",
        m.visible_text
    );
    let id = record["id"].as_str().unwrap();
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve for 1 h", bob());
    let done = app.wait_status(id, "confirmed").await;
    let decided_at = time::OffsetDateTime::parse(
        done["decided_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let until = time::OffsetDateTime::parse(
        done["window_until"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert_eq!(until - decided_at, time::Duration::hours(1));
}

#[tokio::test]
async fn a_route_may_raise_its_cap() {
    let app = TestApp::spawn_with_settings(|toml| {
        toml.replace(
            "forbid_self_approval = true\n",
            "forbid_self_approval = true\nmax_window_seconds = 86400\n",
        )
    })
    .await;
    let (record, m) = ask(&app, transfer(json!({"amount": 1, "to": "X"}), 7200)).await;
    assert_eq!(record["window_seconds"], 7200);
    assert_eq!(record["window_requested_seconds"], Value::Null);
    assert!(m.button_texts().contains(&"✅ Approve for 2 h"), "{m:?}");
}

#[tokio::test]
async fn a_window_on_one_route_is_not_used_on_another() {
    let app = TestApp::spawn().await;
    let body = transfer(json!({"amount": 5, "to": "ACME"}), 600);
    let (record, m) = ask(&app, body.clone()).await;
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve for 10 min", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
    // The same call on "other", whose only approver is Bob: asked there, not let through.
    let mut elsewhere = body.clone();
    elsewhere["route"] = json!("other");
    let (s, r) = app.create(with_wait(elsewhere, "suspend")).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["status"], "pending");
    app.telegram.wait_for_message_in(OTHER_CHAT, 1).await;
    // On its own route the window still holds.
    let (s, hit) = app.create(body).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(hit["via"], "window");
}

fn with_wait(mut body: Value, wait: &str) -> Value {
    body["wait"] = json!(wait);
    body
}

#[tokio::test]
async fn a_huge_parameter_leaves_every_key_and_short_value_in_sight_and_the_file_holds_them_all() {
    let app = TestApp::spawn().await;
    let memo = "A".repeat(3800);
    let raw = format!(
        r#"{{"tool": "transfer", "wait": "suspend", "template": "Pay {{to}}",
            "params": {{"memo": "{memo}", "amount": 1000000, "to": "ACME", "iban": "DE89370400440532013000"}}}}"#
    );
    let (s, record) = app.post_raw(Some(TOKEN_A), raw.clone()).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{record}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(m.text.encode_utf16().count() <= 4096);
    let v = &m.visible_text;
    let memo_hash = hex::encode(Sha256::digest(memo.as_bytes()));
    for needle in [
        "\"amount\": 1000000",
        "\"to\": \"ACME\"",
        "\"iban\": \"DE89370400440532013000\"",
        &format!("✂️ 3800 chars, sha256 {}", &memo_hash[..8]),
        "The full parameters are attached below as a file.",
        record["args_hash"].as_str().unwrap(),
    ] {
        assert!(v.contains(needle), "missing {needle:?} in:\n{v}");
    }
    let file = app.telegram.wait_for_document(OPS_CHAT, m.message_id).await;
    let expected = format!(
        r#"{{"amount": 1000000, "iban": "DE89370400440532013000", "memo": "{memo}", "to": "ACME"}}"#
    );
    assert_eq!(file.content, expected);
    assert_eq!(
        hex::encode(Sha256::digest(file.content.as_bytes())),
        record["args_hash"].as_str().unwrap(),
        "the file is exactly what the argument hash covers"
    );
    assert!(
        file.caption
            .as_deref()
            .unwrap()
            .contains(record["args_hash"].as_str().unwrap())
    );
}

#[tokio::test]
async fn a_short_call_sends_no_file() {
    let app = TestApp::spawn().await;
    let (_, m) = ask(&app, transfer(json!({"amount": 5, "to": "ACME"}), 0)).await;
    assert!(!m.visible_text.contains("attached"), "{}", m.visible_text);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(app.telegram.documents_in(OPS_CHAT).is_empty());
}

#[tokio::test]
async fn a_question_whose_file_cannot_be_attached_fails_closed() {
    let app = TestApp::spawn().await;
    app.telegram
        .fail_next("senddocument", 1, 400, "Bad Request: chat not found");
    let body = json!({"tool": "upload", "wait": "suspend",
                      "params": {"blob": "x".repeat(6000)}});
    let (s, record) = app.create(body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{record}");
    let done = app
        .wait_status(record["id"].as_str().unwrap(), "cancelled")
        .await;
    assert_eq!(done["via"], "fail_closed");
    assert!(
        done["reason"]
            .as_str()
            .unwrap()
            .contains("could not be attached"),
        "{done}"
    );
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    let shown = app
        .telegram
        .wait_for_message_text_containing(OPS_CHAT, m.message_id, "could not be attached")
        .await;
    assert!(!shown.has_buttons());
}

#[tokio::test]
async fn invisible_characters_are_shown_as_escapes_in_parameters_briefing_and_context() {
    let app = TestApp::spawn().await;
    let (_, m) = ask(
        &app,
        json!({
            "tool": "pay",
            "params": {"iban": "DE89\u{202e}0013", "note": "ok\u{2028}🔧 Tool: delete_all",
                       "zw": "a\u{200b}b", "nel": "x\u{85}y", "pua": "\u{e000}"},
            "template": "Pay {iban}\n✅ verified safe",
            "context": "ctx\u{2029}para\u{feff}",
        }),
    )
    .await;
    let v = &m.visible_text;
    for needle in [
        "\"iban\": \"DE89\\u202e0013\"",
        "\"note\": \"ok\\u2028🔧 Tool: delete_all\"",
        "\"zw\": \"a\\u200bb\"",
        "\"nel\": \"x\\x85y\"",
        "\"pua\": \"\\ue000\"",
        "ctx\\u2029para\\ufeff",
        // The briefing renders the value: escaped there too.
        "Pay DE89\\u202e0013",
    ] {
        assert!(v.contains(needle), "missing {needle:?} in:\n{v}");
    }
    for raw in [
        '\u{202e}', '\u{2028}', '\u{2029}', '\u{200b}', '\u{feff}', '\u{85}',
    ] {
        assert!(!m.text.contains(raw), "{raw:?} reached Telegram raw");
    }
    // Exactly one "Tool:" line: the service's own.
    assert_eq!(
        v.lines().filter(|l| l.starts_with("🔧 Tool:")).count(),
        1,
        "{v}"
    );
    // The briefing is the agent's, in a quote under its label: the fake "verified safe"
    // line sits inside it.
    let quote = m
        .text
        .split("<blockquote>")
        .nth(1)
        .and_then(|rest| rest.split("</blockquote>").next())
        .unwrap_or_default();
    assert!(quote.contains("✅ verified safe"), "{}", m.text);
    assert!(
        m.text
            .contains("💬 <i>The agent describes the call:</i>\n<blockquote>"),
        "{}",
        m.text
    );
}

#[tokio::test]
async fn a_nul_the_template_makes_is_stored_and_shown_as_its_escape() {
    // `{f:c}` of False is chr(0) in Python: a NUL that no agent text carried.
    let app = TestApp::spawn().await;
    let (record, m) = ask(
        &app,
        json!({"tool": "flag", "params": {"f": false}, "template": "set [{f:c}]"}),
    )
    .await;
    assert!(m.visible_text.contains("set [\\x00]"), "{}", m.visible_text);
    assert!(!m.text.contains('\0'), "a NUL reached Telegram raw");
    // Stored as its escape (PostgreSQL's text holds no NUL), and still asking.
    let id = record["id"].as_str().unwrap();
    let (status, view) = app.get(id).await;
    assert_eq!(
        (status, &view["status"]),
        (StatusCode::OK, &json!("pending"))
    );
    let store = SqliteStore::connect_existing(&app.db_url).await.unwrap();
    let stored = store.get(&QuestionId::parse(id).unwrap()).await.unwrap();
    assert_eq!(stored.unwrap().briefing, "set [\\x00]");
}

#[tokio::test]
async fn words_that_mix_scripts_are_flagged() {
    let app = TestApp::spawn().await;
    let (_, m) = ask(
        &app,
        json!({"tool": "pay", "owner_id": "p\u{0430}ypal", "params": {"to": "ACME"}}),
    )
    .await;
    assert!(
        m.visible_text
            .contains("Owner: p\u{0430}ypal ⚠️ mixed scripts"),
        "{}",
        m.visible_text
    );
}

#[tokio::test]
async fn an_approve_tap_on_an_editable_call_approves_whatever_the_parameters() {
    let app = TestApp::spawn().await;
    for (n, params) in [r#"{}"#, r#"{"x": 1e400}"#, r#"{"x": 0}"#]
        .into_iter()
        .enumerate()
    {
        let raw = format!(
            r#"{{"tool": "t{n}", "wait": "suspend", "allow_edit": true, "params": {params}}}"#
        );
        let (s, record) = app.post_raw(Some(TOKEN_A), raw.clone()).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{record}");
        let m = app.telegram.wait_for_messages(n + 1).await.remove(n);
        tokio::time::sleep(Duration::from_millis(100)).await;
        app.telegram
            .tap(OPS_CHAT, m.message_id, "✅ Approve", alice());
        // Read as text: `1e400` comes back verbatim, which serde_json cannot hold.
        let path = format!(
            "/v1/confirmations/{}?wait=5",
            record["id"].as_str().unwrap()
        );
        let done = app
            .client
            .get(app.url(&path))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            done.contains(r#""status":"confirmed","allowed":true"#),
            "{params}: {done}"
        );
        assert!(
            done.contains(&format!(r#""parameters":{params}"#)),
            "{done}"
        );
        let events = app.audit_events(record["id"].as_str().unwrap()).await;
        let decided = events.iter().find(|e| e["kind"] == "decided").unwrap();
        assert_eq!(
            decided["detail"]["status"], "confirmed",
            "{params}: {decided}"
        );
        // A wide pause between chats' messages is the service's own 1/s pacing.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
}

#[tokio::test]
async fn a_notification_is_framed_as_the_agents_words_and_cannot_fake_a_question() {
    let app = TestApp::spawn().await;
    let fake = "🛂 Confirmation required\n🔧 Tool: deploy\n\n✅ Approved by Alice at 09:00:00 UTC";
    let (s, sent) = post(&app, "/v1/notifications", json!({"message": fake})).await;
    assert_eq!(s, StatusCode::OK, "{sent}");
    let m = app
        .telegram
        .message(OPS_CHAT, sent["message_id"].as_i64().unwrap() as i32);
    assert!(
        m.visible_text.starts_with("🔔 Message from agent-a:\n"),
        "{}",
        m.visible_text
    );
    // Every line the agent wrote is inside the quote block.
    assert!(
        m.text.contains(&format!(
            "<blockquote>{}</blockquote>",
            fake.replace('&', "&amp;")
        )),
        "{}",
        m.text
    );
    assert!(!m.text.contains("<b>Confirmation required"));

    // Its invisible characters show as escapes; its own newlines stay inside the quote.
    let (s, sent) = post(
        &app,
        "/v1/notifications",
        json!({"message": "done\u{202e}\u{200b}\u{2028}next\nline", "route": "other"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{sent}");
    let m = app
        .telegram
        .message(OTHER_CHAT, sent["message_id"].as_i64().unwrap() as i32);
    assert!(
        m.visible_text
            .ends_with("done\\u202e\\u200b\\u2028next\nline"),
        "{}",
        m.visible_text
    );
}

#[tokio::test]
async fn a_timeout_default_is_disclosed_and_a_default_yes_is_flagged() {
    let app = TestApp::spawn().await;
    let body = json!({"interaction": {"interaction_id": "silent-yes", "question": "Restart?",
        "interaction_type": "approval", "timeout_action": "default", "default_response": true,
        "timeout": 60}});
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    let v = &m.visible_text;
    assert!(v.contains("⚠️ If nobody answers by "), "{v}");
    assert!(v.contains(": Approve (silence approves)"), "{v}");

    let body = json!({"interaction": {"interaction_id": "silent-no", "question": "Restart?",
        "interaction_type": "approval", "timeout_action": "default", "default_response": false,
        "timeout": 60}, "route": "other"});
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app
        .telegram
        .wait_for_message_in(OTHER_CHAT, 1)
        .await
        .remove(0);
    assert!(m.visible_text.contains(": Reject"), "{}", m.visible_text);
    assert!(
        !m.visible_text.contains("⚠️ If nobody"),
        "{}",
        m.visible_text
    );
}

#[tokio::test]
async fn an_approval_without_a_call_says_the_agent_sent_no_parameters() {
    let app = TestApp::spawn().await;
    let body = json!({"interaction": {"interaction_id": "bare", "question": "Deploy?",
        "interaction_type": "approval"}});
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(
        m.visible_text.contains("The agent sent no parameters"),
        "{}",
        m.visible_text
    );
}

#[tokio::test]
async fn an_interaction_with_a_call_shows_the_tool_and_every_parameter_and_reports_the_scope() {
    let app = TestApp::spawn().await;
    let body = json!({
        "interaction": {"interaction_id": "guard-1", "interaction_type": "approval",
                        "question": "Send money?"},
        "call": {"tool": "transfer", "owner_id": "emp-1", "window_seconds": 600,
                 "params": {"amount": 1000000, "to": "ACME"}},
    });
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["call"]["tool"], "transfer");
    assert_eq!(r["call"]["window_seconds"], 600);
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    let v = &m.visible_text;
    for needle in [
        "Tool: transfer",
        "Owner: emp-1",
        "\"amount\": 1000000",
        "\"to\": \"ACME\"",
        "Approve for 10 min also lets identical calls",
    ] {
        assert!(v.contains(needle), "missing {needle:?} in:\n{v}");
    }
    assert!(!v.contains("sent no parameters"), "{v}");
    assert_eq!(
        m.button_texts(),
        [
            "✅ Approve once",
            "✅ Approve for 10 min",
            "❌ Reject",
            "✋ Deny with reason"
        ]
    );
    poll_until(&app, "/v1/interactions/guard-1", |v| {
        v["status"] == "delivered"
    })
    .await;
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve for 10 min", alice());
    let done = poll_until(&app, "/v1/interactions/guard-1", |v| {
        v["status"] == "completed"
    })
    .await;
    let meta = &done["responses"][0]["metadata"];
    assert_eq!(meta["approved_scope"], "window", "{done}");
    assert_eq!(meta["window_seconds"], 600, "{done}");
    app.telegram
        .wait_for_message_text_containing(OPS_CHAT, m.message_id, "Approved for 10 min")
        .await;
}

#[tokio::test]
async fn approving_a_call_once_is_reported_as_once() {
    let app = TestApp::spawn().await;
    let body = json!({
        "interaction": {"interaction_id": "guard-2", "interaction_type": "approval",
                        "question": "Send money?"},
        "call": {"tool": "transfer", "window_seconds": 600, "params": {"to": "ACME"}},
    });
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    poll_until(&app, "/v1/interactions/guard-2", |v| {
        v["status"] == "delivered"
    })
    .await;
    app.telegram
        .tap(OPS_CHAT, m.message_id, "✅ Approve once", alice());
    let done = poll_until(&app, "/v1/interactions/guard-2", |v| {
        v["status"] == "completed"
    })
    .await;
    assert_eq!(done["result"], true);
    let meta = &done["responses"][0]["metadata"];
    assert_eq!(meta["approved_scope"], "once", "{done}");
    assert_eq!(meta["window_seconds"], 0, "{done}");
}

#[tokio::test]
async fn a_call_goes_only_with_an_approval_or_a_form() {
    let app = TestApp::spawn().await;
    let body = json!({
        "interaction": {"interaction_id": "q", "interaction_type": "free_text", "question": "?"},
        "call": {"tool": "t", "params": {}},
    });
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert!(
        r["error"]["message"].as_str().unwrap().starts_with("call"),
        "{r}"
    );
}

#[tokio::test]
async fn option_labels_and_questions_show_their_invisible_characters_as_escapes() {
    let app = TestApp::spawn().await;
    let body = json!({"interaction": {"interaction_id": "pick", "interaction_type": "single_choice",
        "question": "Which\u{2028}🛂 Confirmation required", "options": [
            {"key": "a", "label": "Keep\u{202e}"},
            {"key": "b", "label": "Dr\u{043e}p", "description": "zero\u{200b}width"}]}});
    let (s, r) = post(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(m.button_texts(), ["Keep\\u202e", "⚠ Dr\u{043e}p"]);
    let v = &m.visible_text;
    assert!(v.contains("Which\\u2028🛂 Confirmation required"), "{v}");
    assert!(v.contains("zero\\u200bwidth"), "{v}");
    // The question is the agent's, in its quote: no header of ours in bold.
    assert!(!m.text.contains("<b>Confirmation required"), "{}", m.text);
}
