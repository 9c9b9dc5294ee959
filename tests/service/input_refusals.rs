//! What you see is what you approve, on the input side: an identifier an operator reads
//! (`tool`, `owner_id`, an interaction's `source_agent`) holds no invisible or
//! layout-changing character; free text holds no NUL or ESC; no body repeats an object key
//! (readers disagree on which value such a key has); and one person named twice among
//! `target_humans` is asked for one answer, not two.
//!
//! Every case goes through the real surface: the HTTP API of the real service against
//! the fake Telegram, asserting on the 422 the agent gets and on what reached, or did not
//! reach, the operators. The Redis bridge's refusal is in `tests/integrations/redis_bridge.rs`.

use std::time::Duration;

use crate::support::app::*;
use crate::support::interactions::{get_interaction, tap, wait_for_status_as};
use reqwest::StatusCode;
use serde_json::{Value, json};

// ----- Helpers ----------------------------------------------------------------------

/// POSTs `body` as it is (so it can repeat a key, which `json!` cannot) to `path` as
/// agent-a.
async fn post_text(app: &TestApp, path: &str, body: impl Into<String>) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(path))
        .bearer_auth(TOKEN_A)
        .header("content-type", "application/json")
        .body(body.into())
        .send()
        .await
        .expect("request");
    json_of(r).await
}

async fn post_json(app: &TestApp, path: &str, body: &Value) -> (StatusCode, Value) {
    post_text(app, path, body.to_string()).await
}

/// Asserts a 422 `invalid_field` whose message is exactly `message`.
fn assert_refused(status: StatusCode, body: &Value, message: &str) {
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "invalid_field", "{body}");
    assert_eq!(body["error"]["message"], message, "{body}");
}

fn invisible_refusal(field: &str, escape: &str) -> String {
    format!("{field}: must not contain invisible or layout-changing characters (found {escape})")
}

/// One character of each class that reads as nothing or moves the text around it, and
/// the escape the refusal names it by.
const INVISIBLE: [(char, &str); 8] = [
    ('\u{85}', "\\x85"),     // Cc: next line
    ('\u{7f}', "\\x7f"),     // Cc: delete
    ('\u{202e}', "\\u202e"), // Cf: right-to-left override
    ('\u{2066}', "\\u2066"), // Cf: left-to-right isolate
    ('\u{200b}', "\\u200b"), // Cf: zero-width space
    ('\u{2028}', "\\u2028"), // Zl: line separator
    ('\u{2029}', "\\u2029"), // Zp: paragraph separator
    ('\u{e000}', "\\ue000"), // Co: private use
];

/// Gives the service a moment to have sent anything it was (wrongly) going to, then
/// checks that nothing reached Telegram.
async fn assert_nothing_sent(app: &TestApp) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = app.telegram.requests("sendMessage");
    assert!(sent.is_empty(), "nothing may be asked: {sent:?}");
}

/// How long an interaction may take to reach a status (`wait_for_status_as`).
const WAIT: Duration = Duration::from_secs(15);

fn approval(id: &str, question: &str) -> Value {
    json!({"interaction_id": id, "question": question, "interaction_type": "approval"})
}

// ----- Identifiers ------------------------------------------------------------------

#[tokio::test]
async fn a_tool_name_with_a_bidi_override_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    // Shown as is, "transfer\u{202e}lanretni" would read "transferinternal".
    let (s, b) = app
        .create(json!({"tool": "transfer\u{202e}lanretni", "params": {}}))
        .await;
    assert_refused(s, &b, &invisible_refusal("tool", "\\u202e"));
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn every_class_of_invisible_character_is_refused_in_tool_and_owner_id() {
    let app = TestApp::spawn().await;
    for (c, escape) in INVISIBLE {
        let name = format!("dep{c}loy");
        let (s, b) = app.create(json!({"tool": name, "params": {}})).await;
        assert_refused(s, &b, &invisible_refusal("tool", escape));

        let (s, b) = app
            .create(json!({"tool": "deploy", "owner_id": name, "params": {}}))
            .await;
        assert_refused(s, &b, &invisible_refusal("owner_id", escape));
    }
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn names_in_any_script_are_still_accepted() {
    let app = TestApp::spawn().await;
    let (s, r) = app
        .create(json!({
            "tool": "déployer_сервис_🔧",
            "owner_id": "Zoë Müller-Łukasiewicz",
            "params": {},
            "wait": "suspend",
        }))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r["tool"], "déployer_сервис_🔧");
    app.telegram.wait_for_messages(1).await;
}

#[tokio::test]
async fn an_interactions_source_agent_with_an_invisible_character_is_refused() {
    let app = TestApp::spawn().await;
    let mut q = approval("src-1", "Deploy?");
    q["source_agent"] = json!("billing\u{200b}-agent");
    let (s, b) = post_json(&app, "/v1/interactions", &json!({"interaction": q})).await;
    assert_refused(
        s,
        &b,
        &invisible_refusal("interaction.source_agent", "\\u200b"),
    );
    assert_nothing_sent(&app).await;
}

// ----- Free text ----------------------------------------------------------------------

#[tokio::test]
async fn nul_and_esc_in_a_confirmations_context_or_template_are_refused() {
    let app = TestApp::spawn().await;
    for field in ["context", "template"] {
        for bad in ["before\u{0}after", "\u{1b}[2J\u{1b}[Hall clear"] {
            let mut body = json!({"tool": "deploy", "params": {}});
            body[field] = json!(bad);
            let (s, b) = app.create(body).await;
            assert_refused(
                s,
                &b,
                &format!("{field}: must not contain NUL or ESC characters"),
            );
        }
    }
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn other_invisible_characters_in_free_text_stay_allowed() {
    let app = TestApp::spawn().await;
    let (s, r) = app
        .create(json!({
            "tool": "deploy",
            "params": {"service": "billing"},
            "context": "release \u{202e}notes\u{200b}\ttabbed",
            "template": "Deploy {service}?\u{2028}Now.",
            "wait": "suspend",
        }))
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    app.telegram.wait_for_messages(1).await;
}

#[tokio::test]
async fn nul_and_esc_in_an_interactions_question_or_context_are_refused() {
    let app = TestApp::spawn().await;
    for field in ["question", "context"] {
        let mut q = approval("text-1", "Deploy?");
        q[field] = json!("Deploy?\u{1b}]8;;https://evil.example\u{7}");
        let (s, b) = post_json(&app, "/v1/interactions", &json!({"interaction": q})).await;
        assert_refused(
            s,
            &b,
            &format!("interaction.{field}: must not contain NUL or ESC characters"),
        );
        q[field] = json!("Deploy?\u{0}");
        let (s, b) = post_json(&app, "/v1/interactions", &json!({"interaction": q})).await;
        assert_refused(
            s,
            &b,
            &format!("interaction.{field}: must not contain NUL or ESC characters"),
        );
    }
    let (s, _) = get_interaction(&app, "text-1", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "nothing was stored");
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn a_notification_with_nul_or_esc_is_refused() {
    let app = TestApp::spawn().await;
    for bad in ["done\u{0}", "done \u{1b}[31mred"] {
        let (s, b) = post_json(&app, "/v1/notifications", &json!({"message": bad})).await;
        assert_refused(s, &b, "message: must not contain NUL or ESC characters");
    }
    assert_nothing_sent(&app).await;
}

// ----- Repeated keys --------------------------------------------------------------------

#[tokio::test]
async fn params_that_repeat_a_key_are_refused_in_confirmations() {
    let app = TestApp::spawn().await;
    // Python (and serde_json) would keep the last amount; a reader that keeps the first
    // would show the operator 1.
    let (s, b) = post_text(
        &app,
        "/v1/confirmations",
        r#"{"tool": "transfer", "params": {"to": "ACME", "amount": 1, "amount": 1000000}}"#,
    )
    .await;
    assert_refused(s, &b, r#"params: repeats key "amount""#);
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn a_key_repeated_deep_inside_params_is_refused_naming_its_object() {
    let app = TestApp::spawn().await;
    for (params, message) in [
        (
            r#"{"to": {"iban": "DE89 3704", "bic": "X", "iban": "GB29 NWBK"}}"#,
            r#"params.to: repeats key "iban""#,
        ),
        (
            r#"{"items": [{"sku": 1}, {"sku": 2}, {"sku": 3, "qty": 1, "qty": 900}]}"#,
            r#"params.items[2]: repeats key "qty""#,
        ),
        // The same key, once escaped: Python reads it as the same key.
        (
            r#"{"payee": {"name": "A", "n\u0061me": "B"}}"#,
            r#"params.payee: repeats key "name""#,
        ),
    ] {
        let body = format!(r#"{{"tool": "transfer", "params": {params}}}"#);
        let (s, b) = post_text(&app, "/v1/confirmations", body).await;
        assert_refused(s, &b, message);
    }
    // The same key in two different objects is no repeat.
    let (s, r) = post_text(
        &app,
        "/v1/confirmations",
        r#"{"tool": "transfer", "wait": "suspend",
            "params": {"from": {"iban": "A"}, "to": {"iban": "B"}, "legs": [{"n": 1}, {"n": 2}]}}"#,
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
}

#[tokio::test]
async fn a_confirmation_body_that_repeats_a_field_is_refused() {
    let app = TestApp::spawn().await;
    let (s, b) = post_text(
        &app,
        "/v1/confirmations",
        r#"{"tool": "read_file", "params": {}, "tool": "delete_file"}"#,
    )
    .await;
    assert_refused(s, &b, r#"body: repeats key "tool""#);
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn a_repeated_key_is_named_with_its_invisible_characters_escaped_and_cut() {
    let app = TestApp::spawn().await;
    let (s, b) = post_text(
        &app,
        "/v1/confirmations",
        r#"{"tool": "t", "params": {"x\u200by": {"a\u202eb": 1, "a\u202eb": 2}}}"#,
    )
    .await;
    assert_refused(s, &b, r#"params["x\u200by"]: repeats key "a\u202eb""#);

    let long = "k".repeat(500);
    let (s, b) = post_text(
        &app,
        "/v1/confirmations",
        format!(r#"{{"tool": "t", "params": {{"{long}": 1, "{long}": 2}}}}"#),
    )
    .await;
    assert_refused(
        s,
        &b,
        &format!("params: repeats key \"{}…\"", "k".repeat(64)),
    );
}

#[tokio::test]
async fn an_interaction_that_repeats_a_key_is_refused() {
    let app = TestApp::spawn().await;
    let form = |values: &str| {
        format!(
            r#"{{"interaction": {{"interaction_id": "form-1", "question": "Pay?",
                "interaction_type": "form", "form_schema": {{"current_values": {values}}}}}}}"#
        )
    };
    for (body, message) in [
        (
            form(r#"{"amount": 10, "amount": 10000}"#),
            r#"interaction.form_schema.current_values: repeats key "amount""#,
        ),
        (
            r#"{"interaction": {"interaction_id": "q-1", "question": "Restart the cache?",
                "interaction_type": "approval", "question": "Drop the database?"}}"#
                .to_owned(),
            r#"interaction: repeats key "question""#,
        ),
        (
            r#"{"interaction": {"interaction_id": "c-1", "question": "Which?",
                "interaction_type": "single_choice",
                "options": [{"key": "a", "label": "Keep"}, {"key": "b", "label": "Keep", "label": "Delete"}]}}"#
                .to_owned(),
            r#"interaction.options[1]: repeats key "label""#,
        ),
        (
            r#"{"interaction": {"interaction_id": "d-1", "question": "Go?",
                "interaction_type": "approval", "timeout_action": "default",
                "default_response": {"approved": false, "approved": true}}}"#
                .to_owned(),
            r#"interaction.default_response: repeats key "approved""#,
        ),
        (
            r#"{"interaction": {"interaction_id": "r-1", "question": "Go?"},
                "route": "other", "route": "ops"}"#
                .to_owned(),
            r#"body: repeats key "route""#,
        ),
    ] {
        let (s, b) = post_text(&app, "/v1/interactions", body).await;
        assert_refused(s, &b, message);
    }
    for id in ["form-1", "q-1", "c-1", "d-1", "r-1"] {
        let (s, _) = get_interaction(&app, id, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{id} was not stored");
    }
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn an_interactions_call_whose_params_repeat_a_key_is_refused() {
    let app = TestApp::spawn().await;
    let (s, b) = post_text(
        &app,
        "/v1/interactions",
        r#"{"interaction": {"interaction_id": "call-1", "question": "Transfer?",
                            "interaction_type": "approval"},
            "call": {"tool": "transfer", "params": {"to": "ACME", "amount": 1, "amount": 1000000}}}"#,
    )
    .await;
    assert_refused(s, &b, r#"call.params: repeats key "amount""#);
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn an_interaction_nested_deeper_than_the_limit_is_refused() {
    let app = TestApp::spawn().await;
    // serde_json alone would take 70 levels; the repeat check reads 64, as every body may.
    let deep = format!("{}true{}", "[".repeat(70), "]".repeat(70));
    let body = format!(
        r#"{{"interaction": {{"interaction_id": "deep-1", "question": "Go?",
            "default_response": {deep}}}}}"#
    );
    let (s, b) = post_text(&app, "/v1/interactions", body).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    let message = b["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("body: nesting deeper than 64 levels"),
        "{message}"
    );
    assert_nothing_sent(&app).await;
}

#[tokio::test]
async fn a_notification_that_repeats_a_key_is_refused() {
    let app = TestApp::spawn().await;
    let (s, b) = post_text(
        &app,
        "/v1/notifications",
        r#"{"message": "Deploy finished.", "message": "Deploy failed: run rollback.sh"}"#,
    )
    .await;
    assert_refused(s, &b, r#"body: repeats key "message""#);
    assert_nothing_sent(&app).await;
}

// ----- Duplicate target humans ---------------------------------------------------------

#[tokio::test]
async fn duplicate_target_humans_count_once() {
    let app = TestApp::spawn().await;
    // alice by name, alice again, and alice by her Telegram id: one person.
    let mut q = approval("dup-1", "Deploy billing?");
    q["consensus_mode"] = json!("all_required");
    q["target_humans"] = json!(["alice", "alice", ALICE.to_string(), "bob"]);
    let (s, r) = post_json(&app, "/v1/interactions", &json!({"interaction": q})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(
        msg.visible_text.contains("👥 0 of 2 answered"),
        "{}",
        msg.visible_text
    );
    wait_for_status_as(&app, TOKEN_A, "dup-1", "delivered", WAIT).await;

    tap(&app, &msg, "✅ Approve", alice()).await;
    wait_for_status_as(&app, TOKEN_A, "dup-1", "partial", WAIT).await;
    app.telegram
        .wait_for_message_text_containing(msg.chat_id, msg.message_id, "👥 1 of 2 answered")
        .await;
    tap(&app, &msg, "✅ Approve", bob()).await;
    let done = wait_for_status_as(&app, TOKEN_A, "dup-1", "completed", WAIT).await;
    assert_eq!(done["result"], true, "{done}");
    assert_eq!(
        done["responses"].as_array().map(Vec::len),
        Some(2),
        "{done}"
    );
}

#[tokio::test]
async fn one_person_named_twice_settles_an_all_required_question_with_one_answer() {
    let app = TestApp::spawn().await;
    let mut q = approval("dup-2", "Rotate the keys?");
    q["consensus_mode"] = json!("all_required");
    q["target_humans"] = json!(["alice", ALICE.to_string()]);
    let (s, r) = post_json(&app, "/v1/interactions", &json!({"interaction": q})).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{r}");
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    // One person asked: no "0 of 2" progress line.
    assert!(
        !msg.visible_text.contains(" of 2 answered"),
        "{}",
        msg.visible_text
    );
    wait_for_status_as(&app, TOKEN_A, "dup-2", "delivered", WAIT).await;

    tap(&app, &msg, "✅ Approve", alice()).await;
    let done = wait_for_status_as(&app, TOKEN_A, "dup-2", "completed", WAIT).await;
    assert_eq!(done["result"], true, "{done}");
    let responses = done["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 1, "{done}");
    assert_eq!(responses[0]["respondent"], "alice", "{done}");
}
