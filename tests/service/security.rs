//! Hostile and runaway agents: rate and pending limits, input bounds, every kind of
//! Unicode handled or refused cleanly (never a 500), and no notification of theirs that
//! turns an approver's reply into a deny reason.

use crate::support::app::*;
use crate::support::interactions::tap;
use reqwest::StatusCode;
use serde_json::{Value, json};

#[tokio::test]
async fn an_agent_over_its_request_rate_gets_429_with_retry_after() {
    let app = TestApp::spawn().await;
    // agent-b may make 6 requests per minute; refused ones count too.
    for _ in 0..6 {
        let (s, _) = app
            .create_as(TOKEN_B, json!({"tool": "t", "params": {}, "route": "ops"}))
            .await;
        assert_eq!(s, StatusCode::FORBIDDEN);
    }
    let r = app
        .client
        .post(app.url("/v1/confirmations"))
        .bearer_auth(TOKEN_B)
        .json(&json!({"tool": "t", "params": {}, "route": "other"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&retry), "{retry}");
    let (_, b) = json_of(r).await;
    assert_eq!(b["error"]["code"], "rate_limited");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests_per_minute")
    );
    // Another agent is not affected.
    let (s, _) = app
        .create(json!({"tool": "t", "params": {}, "wait": "suspend"}))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn an_agent_at_its_pending_limit_gets_429_until_one_ends() {
    let app = TestApp::spawn().await;
    let body =
        |i: i32| json!({"tool": "t", "params": {"i": i}, "route": "other", "wait": "suspend"});
    let (_, first) = app.create_as(TOKEN_B, body(1)).await;
    let (s, _) = app.create_as(TOKEN_B, body(2)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let (s, b) = app.create_as(TOKEN_B, body(3)).await;
    assert_eq!(s, StatusCode::TOO_MANY_REQUESTS, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_pending")
    );
    app.delete_as(TOKEN_B, first["id"].as_str().unwrap()).await;
    let (s, _) = app.create_as(TOKEN_B, body(4)).await;
    assert_eq!(s, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn too_many_keys_or_too_deep_params_are_refused_naming_the_limit() {
    let app = TestApp::spawn().await;
    let many: serde_json::Map<String, serde_json::Value> =
        (0..1001).map(|i| (format!("k{i}"), json!(i))).collect();
    let (s, b) = app.create(json!({"tool": "t", "params": many})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the limit is 1000"),
        "{b}"
    );

    let deep = format!(
        r#"{{"tool": "t", "params": {{"a": {}1{}}}}}"#,
        "[".repeat(70),
        "]".repeat(70)
    );
    let (s, b) = app.post_raw(Some(TOKEN_A), deep).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["error"]["message"].as_str().unwrap().contains("64"),
        "{b}"
    );
    assert!(app.telegram.sent_messages().is_empty());
}

#[tokio::test]
async fn unicode_of_every_kind_is_shown_or_refused_cleanly() {
    let app = TestApp::spawn().await;
    let tricky = "\u{202E}evil\u{200B}\u{200D}👨‍👩‍👧 \u{FEFF}مرحبا 𝔘𝔫𝔦";
    // Identifiers take every visible character but no invisible one (see
    // tests/service/input_refusals.rs): no bidi override, no zero-width joiner.
    let (s, r) = app
        .create(json!({
            "tool": "tool👩 مرحبا 𝔘𝔫𝔦",
            "owner_id": "مرحبا 𝔘𝔫𝔦",
            "context": tricky,
            "template": "{name} {name!r}",
            "params": {"name": tricky, tricky: "key"},
            "wait": "suspend",
        }))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    // Every visible character as sent; the invisible ones (bidi override, zero-width
    // space, BOM) as escapes, the joiners inside the family emoji kept.
    let shown = "\\u202eevil\\u200b\\u200d👨\u{200d}👩\u{200d}👧 \\ufeffمرحبا 𝔘𝔫𝔦";
    assert!(m.visible_text.contains(shown), "{}", m.visible_text);
    assert!(!m.visible_text.contains('\u{202e}'), "{}", m.visible_text);

    // Lone surrogates and control characters: refused with a 4xx, never a 500.
    for raw in [
        r#"{"tool": "\ud800", "params": {}}"#,
        r#"{"tool": "t", "params": {}, "context": "\udfff"}"#,
        r#"{"tool": "t", "params": {"\ud83d": 1}}"#,
        r#"{"tool": "a\u0000b", "params": {}}"#,
        r#"{"tool": "t", "owner_id": "x\ny", "params": {}}"#,
    ] {
        let (s, b) = app.post_raw(Some(TOKEN_A), raw).await;
        assert!(s.is_client_error(), "{raw}: {s} {b}");
        assert!(b["error"]["message"].is_string());
    }
}

#[tokio::test]
async fn markup_in_parameters_template_output_and_context_shows_literally() {
    let app = TestApp::spawn().await;
    let (s, _) = app
        .create(json!({
            "tool": "<b>t</b>",
            "params": {"x": "</pre><a href=\"tg://x\">&amp;</a>", "y": "*bold* _it_ `code`"},
            "template": "<i>{x}</i> {y}",
            "context": "<tg-spoiler>&lt;</tg-spoiler>",
            "wait": "suspend",
        }))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED);
    let m = app.telegram.wait_for_messages(1).await.remove(0);
    for needle in [
        "<b>t</b>",
        "<i></pre><a href=\"tg://x\">&amp;</a></i> *bold* _it_ `code`",
        "<tg-spoiler>&lt;</tg-spoiler>",
    ] {
        assert!(
            m.visible_text.contains(needle),
            "missing {needle:?} in {}",
            m.visible_text
        );
    }
}

#[tokio::test]
async fn a_reply_to_a_notification_naming_a_request_is_never_its_deny_reason() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let question = app.telegram.message(OPS_CHAT, message_id);
    tap(&app, &question, "✋ Deny with reason", alice()).await;
    let prompt = app.telegram.wait_for_message_in(OPS_CHAT, 2).await[1].clone();

    // The agent's notification names the request, even in the prompt's own words.
    let r = app
        .client
        .post(app.url("/v1/notifications"))
        .bearer_auth(TOKEN_A)
        .json(&json!({"route": "ops", "message": format!(
            "ref {id}\n✋ Alice, why deny deploy ({id})? Reply to this message with your \
             reason by noon."
        )}))
        .send()
        .await
        .expect("POST");
    let (status, note) = json_of(r).await;
    assert_eq!(status, StatusCode::OK, "{note}");
    let note_id = note["message_id"].as_i64().unwrap() as i32;
    app.telegram
        .send_reply(OPS_CHAT, alice(), "on it, checking prod", note_id);
    // A command in the same chat is handled after that reply: its answer says the reply was.
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram
        .send_text_message(OPS_CHAT, alice(), "/pending");
    app.telegram.wait_for_message_in(OPS_CHAT, before + 1).await;

    let (_, now) = app.get(id).await;
    assert_eq!(now["status"], "pending", "{now}");
    assert_eq!(now["denial_reason"], Value::Null, "{now}");
    let shown = app.telegram.message(OPS_CHAT, message_id);
    assert!(shown.has_buttons(), "{}", shown.visible_text);
    assert!(
        !shown.visible_text.contains("Denied"),
        "{}",
        shown.visible_text
    );

    // The reply to the bot's own prompt is the reason.
    app.telegram.send_reply(
        OPS_CHAT,
        alice(),
        "not during the freeze",
        prompt.message_id,
    );
    let ended = app.wait_status(id, "cancelled").await;
    assert_eq!(ended["denial_reason"], "not during the freeze", "{ended}");
    let shown = app
        .telegram
        .wait_for_message(OPS_CHAT, message_id, "the denial shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        shown.visible_text.ends_with(": not during the freeze"),
        "{}",
        shown.visible_text
    );
}
