//! The confirmation flow end to end: an agent asks over HTTP, the fake Telegram shows
//! the question, an operator taps, the agent hears the outcome.

use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::json;

fn deploy(extra: serde_json::Value) -> serde_json::Value {
    let mut body = json!({
        "tool": "deploy",
        "params": {"service": "billing", "env": "prod", "replicas": 3},
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            b.insert(k.clone(), v.clone());
        }
    }
    body
}

#[tokio::test]
async fn an_approval_tap_confirms_a_blocked_request_with_its_parameters() {
    let app = TestApp::spawn().await;
    let pending = app.create_blocking(deploy(json!({"owner_id": "u-42"})));
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(msg.chat_id, OPS_CHAT);
    assert_eq!(
        msg.button_texts(),
        vec!["✅ Approve", "❌ Cancel", "✋ Deny with reason"]
    );

    let q = app
        .telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (status, record) = pending.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["allowed"], true);
    assert_eq!(record["via"], "operator");
    assert_eq!(record["owner_id"], "u-42");
    assert_eq!(record["tool"], "deploy");
    assert_eq!(
        record["parameters"],
        json!({"service": "billing", "env": "prod", "replicas": 3})
    );
    assert_eq!(
        record["decided_by"],
        json!({"id": ALICE, "username": "alice", "name": "Alice"})
    );
    assert!(record["decided_at"].as_str().unwrap().ends_with('Z'));

    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert_eq!(answer.text.as_deref(), Some("✅ Approved"));
    assert!(!answer.show_alert);
    let edited = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "outcome shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        edited
            .visible_text
            .contains("✅ Approved by Alice (@alice) at "),
        "{}",
        edited.visible_text
    );
    assert!(
        edited.visible_text.contains(" UTC"),
        "{}",
        edited.visible_text
    );
    assert!(
        edited.visible_text.contains("\"service\": \"billing\""),
        "the question text is kept"
    );
}

#[tokio::test]
async fn a_cancel_tap_cancels_and_withholds_the_parameters() {
    let app = TestApp::spawn().await;
    let pending = app.create_blocking(deploy(json!({})));
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", bob());
    let (status, record) = pending.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["allowed"], false);
    assert_eq!(record["via"], "operator");
    assert_eq!(record["parameters"], json!(null));
    assert_eq!(record["decided_by"]["id"], BOB);
    assert_eq!(record["decided_by"]["username"], json!(null));
    let edited = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "outcome shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        edited.visible_text.contains("❌ Cancelled by Bob at "),
        "{}",
        edited.visible_text
    );
}

#[tokio::test]
async fn silence_times_out_and_the_blocked_agent_hears_timeout() {
    let app = TestApp::spawn().await;
    let started = std::time::Instant::now();
    let (status, record) = app.create(deploy(json!({"timeout_seconds": 0.5}))).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "timeout");
    assert_eq!(record["via"], "timeout");
    assert_eq!(record["allowed"], false);
    assert!(started.elapsed() >= Duration::from_millis(450));
    let msg = app.telegram.sent_messages().remove(0);
    let edited = app
        .telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "timeout shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        edited.visible_text.contains("⏱ Timed out: not executed"),
        "{}",
        edited.visible_text
    );
}

#[tokio::test]
async fn a_tap_after_the_timeout_changes_nothing_and_says_what_happened() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(deploy(json!({"timeout_seconds": 0.3})))
        .await;
    let id = record["id"].as_str().unwrap();
    app.wait_status(id, "timeout").await;
    let q = app.telegram.tap_with_data(
        OPS_CHAT,
        message_id,
        app.telegram.requests("sendMessage")[0].body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            .as_str()
            .unwrap(),
        alice(),
    );
    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert!(answer.text.unwrap().starts_with("Already decided: "));
    let (_, after) = app.get(id).await;
    assert_eq!(after["status"], "timeout");
}

#[tokio::test]
async fn a_tap_by_a_stranger_changes_nothing_and_gets_an_alert() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    let q = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", mallory());
    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert_eq!(
        answer.text.as_deref(),
        Some("You are not allowed to decide this request")
    );
    assert!(answer.show_alert);
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "pending");
    assert!(app.telegram.message(OPS_CHAT, message_id).has_buttons());
}

#[tokio::test]
async fn an_approver_of_another_route_cannot_decide_here() {
    let app = TestApp::spawn().await;
    // Bob approves `other` but Alice only `ops`; this goes to `other`.
    let (record, message_id) = {
        let mut body = deploy(json!({"route": "other"}));
        body["wait"] = json!("suspend");
        let (s, r) = app.create(body).await;
        assert_eq!(s, StatusCode::ACCEPTED);
        let m = app.telegram.wait_for_messages(1).await.remove(0);
        assert_eq!(m.chat_id, OTHER_CHAT);
        (r, m.message_id)
    };
    let q = app.telegram.tap(OTHER_CHAT, message_id, 0usize, alice());
    assert!(app.telegram.wait_for_callback_answer(&q).await.show_alert);
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "pending");
}

#[tokio::test]
async fn a_double_tap_decides_once_and_the_second_tap_is_told_the_outcome() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    let first = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let first_answer = app.telegram.wait_for_callback_answer(&first).await;
    assert_eq!(first_answer.text.as_deref(), Some("✅ Approved"));
    // The keyboard is gone, but a client with the old message still sends the data.
    let data = app.telegram.requests("sendMessage")[0].body["reply_markup"]["inline_keyboard"][0]
        [1]["callback_data"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = app
        .telegram
        .tap_with_data(OPS_CHAT, message_id, &data, bob());
    let second_answer = app.telegram.wait_for_callback_answer(&second).await;
    assert_eq!(
        second_answer.text.as_deref(),
        Some("Already decided: approved by Alice (@alice)")
    );
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "confirmed");
    assert_eq!(now["decided_by"]["id"], ALICE);
}

#[tokio::test]
async fn concurrent_approve_and_cancel_taps_store_exactly_one_outcome() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    let a = app
        .telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let c = app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
    let answers = [
        app.telegram.wait_for_callback_answer(&a).await,
        app.telegram.wait_for_callback_answer(&c).await,
    ];
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    let winner = if now["status"] == "confirmed" { 0 } else { 1 };
    assert!(
        answers[winner]
            .text
            .as_deref()
            .unwrap()
            .ends_with(if winner == 0 { "Approved" } else { "Cancelled" })
    );
    assert!(
        answers[1 - winner]
            .text
            .as_deref()
            .unwrap()
            .starts_with("Already decided: ")
    );
}

#[tokio::test]
async fn forged_or_malformed_callback_data_is_refused_with_an_alert() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    for data in [
        "a:00000000000000000000000000000000",
        "garbage",
        "a:../../etc/passwd",
        "",
    ] {
        let q = app
            .telegram
            .tap_with_data(OPS_CHAT, message_id, data, alice());
        let answer = app.telegram.wait_for_callback_answer(&q).await;
        assert!(answer.show_alert, "{data}: {answer:?}");
    }
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "pending");
}

#[tokio::test]
async fn a_button_replayed_under_another_message_is_refused() {
    let app = TestApp::spawn().await;
    let (first, _) = app.ask_suspended(deploy(json!({}))).await;
    let (_, second_message) = app
        .ask_suspended(deploy(json!({"params": {"other": true}})))
        .await;
    let first_data = app.telegram.requests("sendMessage")[0].body["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_owned();
    let q = app
        .telegram
        .tap_with_data(OPS_CHAT, second_message, &first_data, alice());
    let answer = app.telegram.wait_for_callback_answer(&q).await;
    assert_eq!(
        answer.text.as_deref(),
        Some("This button does not belong to this message.")
    );
    let (_, now) = app.get(first["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "pending");
}

#[tokio::test]
async fn withdrawing_a_pending_request_cancels_it_and_edits_the_message() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    let id = record["id"].as_str().unwrap();
    let (status, withdrawn) = app.delete(id).await;
    assert_eq!(status, StatusCode::OK, "{withdrawn}");
    assert_eq!(withdrawn["status"], "cancelled");
    assert_eq!(withdrawn["via"], "withdrawn");
    let edited = app
        .telegram
        .wait_for_message(OPS_CHAT, message_id, "withdrawal shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        edited.visible_text.contains("↩ Withdrawn by the agent"),
        "{}",
        edited.visible_text
    );

    let (status, again) = app.delete(id).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(again["error"]["code"], "already_decided");
    assert_eq!(again["confirmation"]["via"], "withdrawn");
}

#[tokio::test]
async fn suspend_returns_202_and_a_long_poll_returns_the_decision_when_it_lands() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app.ask_suspended(deploy(json!({}))).await;
    assert_eq!(record["status"], "pending");
    assert_eq!(record["via"], json!(null));
    assert_eq!(record["decided_at"], json!(null));
    let id = record["id"].as_str().unwrap().to_owned();

    // A long-poll with nothing happening returns the pending record after its wait.
    let started = std::time::Instant::now();
    let (status, still) = app.get_as(TOKEN_A, &id, Some("0.3")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(still["status"], "pending");
    assert!(started.elapsed() >= Duration::from_millis(250));

    let poll = {
        let client = app.client.clone();
        let url = app.url(&format!("/v1/confirmations/{id}?wait=20"));
        tokio::spawn(async move {
            crate::support::app::json_of(client.get(url).bearer_auth(TOKEN_A).send().await.unwrap())
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let (status, decided) = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(decided["status"], "confirmed");
}

#[tokio::test]
async fn a_long_poll_reports_a_timeout() {
    let app = TestApp::spawn().await;
    let (record, _) = app
        .ask_suspended(deploy(json!({"timeout_seconds": 0.4})))
        .await;
    let (status, r) = app
        .get_as(TOKEN_A, record["id"].as_str().unwrap(), Some("10"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(r["status"], "timeout");
}

#[tokio::test]
async fn an_idempotency_key_returns_the_same_request_without_a_second_message() {
    let app = TestApp::spawn().await;
    let body = deploy(json!({"wait": "suspend", "idempotency_key": "job-7"}));
    let (s1, first) = app.create(body.clone()).await;
    let (s2, second) = app.create(body.clone()).await;
    assert_eq!((s1, s2), (StatusCode::ACCEPTED, StatusCode::ACCEPTED));
    assert_eq!(first["id"], second["id"]);
    app.telegram.wait_for_messages(1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(app.telegram.sent_messages().len(), 1);

    // Another agent's same key is its own request.
    let mut other = body.clone();
    other["route"] = json!("other");
    let (_, b) = app.create_as(TOKEN_B, other).await;
    assert_ne!(b["id"], first["id"]);

    // The same key with different arguments is a mistake, not a silent reuse.
    let mut changed = body.clone();
    changed["params"]["replicas"] = json!(4);
    let (s3, err) = app.create(changed).await;
    assert_eq!(s3, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("idempotency_key")
    );
}

#[tokio::test]
async fn a_blocking_agent_that_hangs_up_can_find_its_request_again_by_idempotency_key() {
    let app = TestApp::spawn().await;
    let body = deploy(json!({"idempotency_key": "retry-me"}));
    let hung_up = app.create_blocking(body.clone());
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    hung_up.abort(); // the agent's connection drops
    tokio::time::sleep(Duration::from_millis(100)).await;
    let again = app.create_blocking(body);
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (status, record) = again.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(record["status"], "confirmed");
    assert_eq!(app.telegram.sent_messages().len(), 1, "no second question");
}

#[tokio::test]
async fn an_agent_cannot_see_or_withdraw_another_agents_request() {
    let app = TestApp::spawn().await;
    let (record, _) = app.ask_suspended(deploy(json!({}))).await;
    let id = record["id"].as_str().unwrap();
    let (s, e) = app.get_as(TOKEN_B, id, None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_eq!(e["error"]["code"], "not_found");
    let (s, _) = app.delete_as(TOKEN_B, id).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, mine) = app.get(id).await;
    assert_eq!(mine["status"], "pending");
}

#[tokio::test]
async fn when_telegram_refuses_the_message_the_request_fails_closed_with_the_reason() {
    let app = TestApp::spawn().await;
    app.telegram.fail_next(
        "sendMessage",
        1,
        403,
        "Forbidden: bot was blocked by the user",
    );
    let (status, record) = app.create(deploy(json!({}))).await;
    assert_eq!(status, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "cancelled");
    assert_eq!(record["via"], "fail_closed");
    assert_eq!(record["allowed"], false);
    assert_eq!(record["parameters"], json!(null));
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .contains("bot was blocked by the user"),
        "{record}"
    );

    app.telegram
        .fail_next("sendMessage", 1, 400, "Bad Request: chat not found");
    let (_, record) = app.create(deploy(json!({}))).await;
    assert_eq!(record["via"], "fail_closed");
    assert!(
        record["reason"]
            .as_str()
            .unwrap()
            .contains("chat not found"),
        "{record}"
    );
}

#[tokio::test]
async fn a_brief_flood_limit_on_send_is_waited_out_and_the_question_arrives() {
    let app = TestApp::spawn().await;
    app.telegram.fail_next_with_retry_after("sendMessage", 1, 1);
    let (record, _) = app.ask_suspended(deploy(json!({}))).await;
    let (_, now) = app.get(record["id"].as_str().unwrap()).await;
    assert_eq!(now["status"], "pending");
}

#[tokio::test]
async fn the_message_names_tool_agent_owner_and_shows_briefing_context_params_and_deadline() {
    let app = TestApp::spawn().await;
    let raw = r#"{"tool": "transfer", "wait": "suspend",
        "params": {"to": "<b>Bob</b> & co", "amount": 12.5, "big": 123456789012345678901234567890},
        "owner_id": "alice@example.com", "template": "Send {amount:.2f} EUR to {to}?",
        "context": "Invoice </pre> #42", "allow_edit": true}"#;
    let (s, _) = app.post_raw(Some(TOKEN_A), raw).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let message_id = app.telegram.wait_for_messages(1).await[0].message_id;
    let m = app.telegram.message(OPS_CHAT, message_id);
    assert_eq!(m.parse_mode.as_deref(), Some("HTML"));
    let v = &m.visible_text;
    for needle in [
        "transfer",
        "agent-a",
        "alice@example.com",
        "Send 12.50 EUR to <b>Bob</b> & co?",
        "Invoice </pre> #42",
        "can only be approved or cancelled exactly as shown",
        "\"to\": \"<b>Bob</b> & co\"",
        "\"big\": 123456789012345678901234567890",
        "Deadline: ",
    ] {
        assert!(v.contains(needle), "missing {needle:?} in:\n{v}");
    }
    // Raw text carries the agent's markup escaped.
    assert!(m.text.contains("&lt;b&gt;Bob&lt;/b&gt; &amp; co"));
    for row in &m.buttons {
        for b in row {
            let data = b.callback_data.as_deref().unwrap();
            assert!(data.len() <= 64);
            assert!(!data.contains("Bob") && !data.contains("transfer"));
        }
    }
}

#[tokio::test]
async fn an_edit_capable_tool_is_approved_with_its_original_parameters() {
    let app = TestApp::spawn().await;
    let pending = app.create_blocking(deploy(json!({"allow_edit": true})));
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert_eq!(
        msg.button_texts(),
        vec!["✅ Approve", "❌ Cancel", "✋ Deny with reason"],
        "no edit button"
    );
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (_, record) = pending.await.unwrap();
    assert_eq!(
        record["parameters"],
        json!({"service": "billing", "env": "prod", "replicas": 3})
    );
}

#[tokio::test]
async fn huge_parameters_are_cut_to_fit_telegram_with_a_visible_note() {
    let app = TestApp::spawn().await;
    let (_, message_id) = app
        .ask_suspended(json!({"tool": "upload", "params": {"blob": "x".repeat(20_000)}}))
        .await;
    let m = app.telegram.message(OPS_CHAT, message_id);
    assert!(m.text.encode_utf16().count() <= 4096);
    assert!(
        m.visible_text.contains("✂️ 20000 chars, sha256 ")
            && m.visible_text.contains("attached below as a file"),
        "{}",
        m.visible_text
    );
    // Hundreds of keys cannot all fit: what does not is counted, and the file has it all.
    let many: serde_json::Map<String, serde_json::Value> = (0..900)
        .map(|i| (format!("key_{i:03}"), json!(i)))
        .collect();
    let (_, message_id) = app
        .ask_suspended(json!({"tool": "bulk", "params": many}))
        .await;
    let m = app.telegram.message(OPS_CHAT, message_id);
    assert!(m.text.encode_utf16().count() <= 4096);
    assert!(
        m.visible_text
            .contains("more characters of parameters not shown"),
        "{}",
        m.visible_text
    );
    let file = app.telegram.wait_for_document(OPS_CHAT, message_id).await;
    assert!(
        file.content.contains("\"key_899\": 899"),
        "{}",
        file.content
    );
}

#[tokio::test]
async fn parameters_come_back_byte_for_byte_as_sent() {
    let app = TestApp::spawn().await;
    let raw = r#"{"tool": "pay", "wait": "suspend", "params": {"amount": 1.10, "id": 123456789012345678901234567890, "z": 1.5E+300}}"#;
    let (s, record) = app.post_raw(Some(TOKEN_A), raw).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{record}");
    let id = record["id"].as_str().unwrap().to_owned();
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    app.wait_status(&id, "confirmed").await;
    let r = app
        .client
        .get(app.url(&format!("/v1/confirmations/{id}")))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        r.contains(
            r#""parameters":{"amount": 1.10, "id": 123456789012345678901234567890, "z": 1.5E+300}"#
        ),
        "{r}"
    );
}
