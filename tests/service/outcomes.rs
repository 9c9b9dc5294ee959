//! After the yes (issue 36): the agent reports what happened when it ran the confirmed
//! call, and the approvers see it where they decided (every copy of the question); only
//! the asking agent reports, only on a confirmed call, once; a route that expects a
//! report shows "Not known whether it ran" when none came, until a late one replaces it;
//! the next approver of the same tool hears of a failure; windows count what they let
//! through; the event stream, the webhooks and the audit chain carry every report.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::SentMessage;
use reqwest::StatusCode;
use serde_json::{Value, json};

fn call(tool: &str, params: Value) -> Value {
    json!({"tool": tool, "params": params, "owner_id": "emp-1"})
}

/// `route ops` with these lines added.
fn ops_with(lines: &str) -> impl FnOnce(String) -> String {
    let lines = lines.to_owned();
    move |toml| {
        toml.replacen(
            "forbid_self_approval = true\n",
            &format!("forbid_self_approval = true\n{lines}\n"),
            1,
        )
    }
}

/// `POST /v1/confirmations/{id}/outcome` as the agent of `token`.
async fn report_as(app: &TestApp, token: &str, id: &str, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(&format!("/v1/confirmations/{id}/outcome")))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("POST outcome");
    json_of(r).await
}

pub(super) async fn report(app: &TestApp, id: &str, body: Value) -> (StatusCode, Value) {
    report_as(app, TOKEN_A, id, body).await
}

/// Asks `body` in the ops chat, has Bob approve it, and returns the record and the
/// message.
pub(super) async fn approved(app: &TestApp, body: Value) -> (Value, i32) {
    let (record, message_id) = app.ask_suspended(body).await;
    let label = approve_label(record["window_seconds"].as_u64().unwrap());
    app.telegram
        .tap(OPS_CHAT, message_id, label.as_str(), bob());
    let id = record["id"].as_str().unwrap();
    (app.wait_status(id, "confirmed").await, message_id)
}

/// Types `text` as Alice in the ops chat and returns the bot's answer.
pub(super) async fn command(app: &TestApp, text: &str) -> SentMessage {
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram.send_text_message(OPS_CHAT, alice(), text);
    for _ in 0..500 {
        let answer = app
            .telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .skip(before)
            .find(|m| m.from_bot && !m.has_buttons());
        if let Some(answer) = answer {
            return answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no answer to {text:?}");
}

/// Waits until message `message_id` of `chat` shows `line`; returns its text.
async fn shows(app: &TestApp, chat: i64, message_id: i32, line: &str) -> String {
    app.telegram
        .wait_for_message(chat, message_id, line, |m| m.visible_text.contains(line))
        .await
        .visible_text
}

#[tokio::test]
async fn each_status_reported_is_shown_below_the_decision_on_every_copy() {
    let app =
        TestApp::spawn_with_settings(ops_with("escalate_after = \"1s\"\nescalate_to = \"other\""))
            .await;
    let cases = [
        (
            json!({"status": "executed", "summary": "deployed v2 to 3 hosts", "duration_ms": 1200}),
            "🟢 Ran in 1.2 s: deployed v2 to 3 hosts",
        ),
        (
            json!({"status": "failed", "error": "host 2 refused: disk full", "duration_ms": 800}),
            "🔴 Failed: host 2 refused: disk full (after 800 ms)",
        ),
        (
            json!({"status": "not_executed", "summary": "the user changed their mind"}),
            "⚪ Not run: the user changed their mind",
        ),
    ];
    for (n, (body, line)) in cases.into_iter().enumerate() {
        let (record, message_id) = app
            .ask_suspended(call("deploy", json!({"version": n})))
            .await;
        let id = record["id"].as_str().unwrap();
        // The copy the escalation posts in the other route's chat.
        let copy = app.telegram.wait_for_message_in(OTHER_CHAT, n + 1).await[n].clone();
        app.telegram
            .tap(OTHER_CHAT, copy.message_id, "✅ Approve", bob());
        app.wait_status(id, "confirmed").await;

        let (s, r) = report(&app, id, body.clone()).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["outcome"]["status"], body["status"], "{r}");
        assert_eq!(
            r["outcome"]["summary"],
            body.get("summary").cloned().unwrap_or(Value::Null)
        );
        assert_eq!(
            r["outcome"]["error"],
            body.get("error").cloned().unwrap_or(Value::Null)
        );
        assert_eq!(
            r["outcome"]["duration_ms"],
            body.get("duration_ms").cloned().unwrap_or(Value::Null)
        );
        assert!(r["outcome"]["reported_at"].is_string(), "{r}");
        for (chat, message) in [(OPS_CHAT, message_id), (OTHER_CHAT, copy.message_id)] {
            let text = shows(&app, chat, message, line).await;
            // Below the decision line, which stays.
            let decided = text.find("✅ Approved by Bob").expect(&text);
            assert!(text.find(line).unwrap() > decided, "{text}");
        }
        let (_, read) = app.get(id).await;
        assert_eq!(read["outcome"], r["outcome"]);
    }
    let metrics = app.metrics_text().await;
    for status in ["executed", "failed", "not_executed"] {
        assert!(
            metrics.contains(&format!(
                r#"outcomes_total{{agent="agent-a",tool="deploy",status="{status}"}} 1"#
            )),
            "{metrics}"
        );
    }
}

#[tokio::test]
async fn a_reported_text_is_shown_with_its_invisible_characters_as_escapes() {
    let app = TestApp::spawn().await;
    let (record, message_id) = approved(&app, call("deploy", json!({"v": 1}))).await;
    let id = record["id"].as_str().unwrap();
    let sneaky = "done <b>\u{202e}gnp.exe";
    let (s, r) = report(&app, id, json!({"status": "executed", "summary": sneaky})).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(
        r["outcome"]["summary"], sneaky,
        "the agent reads it as sent"
    );
    let text = shows(&app, OPS_CHAT, message_id, "🟢 Ran: done").await;
    assert!(text.contains("done <b>\\u202egnp.exe"), "{text}");
    let raw = app.telegram.message(OPS_CHAT, message_id).text;
    assert!(raw.contains("done &lt;b&gt;"), "HTML-escaped: {raw}");
}

#[tokio::test]
async fn only_the_asking_agent_reports_only_a_confirmed_call_and_only_once() {
    let app = TestApp::spawn().await;
    let executed = json!({"status": "executed", "summary": "ok", "duration_ms": 5});

    // Pending: nothing ran yet.
    let (pending, message_id) = app.ask_suspended(call("deploy", json!({"v": 1}))).await;
    let pending_id = pending["id"].as_str().unwrap();
    let (s, r) = report(&app, pending_id, executed.clone()).await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
    assert_eq!(r["error"]["code"], "conflict");
    assert!(
        r["error"]["message"].as_str().unwrap().contains("pending"),
        "{r}"
    );
    assert_eq!(r["confirmation"]["id"], pending_id);

    // Cancelled: 409 with the record, nothing stored.
    app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
    app.wait_status(pending_id, "cancelled").await;
    let (s, r) = report(&app, pending_id, executed.clone()).await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{r}"
    );
    assert_eq!(r["confirmation"]["outcome"], Value::Null);

    let (record, _) = approved(&app, call("deploy", json!({"v": 2}))).await;
    let id = record["id"].as_str().unwrap();
    // Another agent's confirmation is not found, as for reads; so is an unknown id.
    let (s, r) = report_as(&app, TOKEN_B, id, executed.clone()).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{r}");
    let (s, _) = report(
        &app,
        "cf_00000000000000000000000000000000",
        executed.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = report(&app, "not-an-id", executed.clone()).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    // Bodies it cannot take name their field.
    for (body, field) in [
        (json!({"status": "executed", "error": "x"}), "error"),
        (json!({"status": "done"}), "status"),
        (json!({"status": "not_executed", "error": "x"}), "error"),
        (
            json!({"status": "executed", "duration_ms": -3}),
            "duration_ms",
        ),
        (
            json!({"status": "executed", "summary": "x".repeat(501)}),
            "summary",
        ),
        (json!({"status": "executed", "exit_code": 0}), "exit_code"),
    ] {
        let (s, r) = report(&app, id, body.clone()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {r}");
        assert!(
            r["error"]["message"].as_str().unwrap().starts_with(field),
            "{body}: {r}"
        );
    }

    // The report; the same report again (a retry) is taken once; a different one is not.
    let (s, first) = report(&app, id, executed.clone()).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    let (s, again) = report(&app, id, executed.clone()).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["outcome"], first["outcome"]);
    let (s, r) = report(
        &app,
        id,
        json!({"status": "failed", "error": "it did not, after all"}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
    assert_eq!(r["confirmation"]["outcome"], first["outcome"]);
    let reported: Vec<Value> = app
        .audit_events(id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "outcome_reported")
        .collect();
    assert_eq!(reported.len(), 1, "{reported:#?}");
    assert_eq!(reported[0]["actor"], "agent:agent-a");
    assert_eq!(reported[0]["detail"]["status"], "executed");
}

#[tokio::test]
async fn window_hits_take_outcomes_and_the_window_counts_what_it_let_through() {
    let app = TestApp::spawn().await;
    let body = json!({"tool": "check_in", "params": {"employee": 7}, "owner_id": "emp-1", "window_seconds": 600});
    let (opener, _) = approved(&app, body.clone()).await;
    let opener_id = opener["id"].as_str().unwrap();
    let mut hits = Vec::new();
    for _ in 0..3 {
        let (s, r) = app.create(body.clone()).await;
        assert_eq!(s, StatusCode::OK, "{r}");
        assert_eq!(r["via"], "window");
        hits.push(r["id"].as_str().unwrap().to_owned());
    }
    // Each hit is its own record and takes its own report.
    let (s, r) = report(&app, &hits[0], json!({"status": "executed"})).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, r) = report(
        &app,
        &hits[1],
        json!({"status": "failed", "error": "timeout"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["status"], "failed");

    let (_, read) = app.get(opener_id).await;
    assert_eq!(
        read["window_use"],
        json!({"calls": 3, "failed": 1}),
        "{read}"
    );
    let (_, hit) = app.get(&hits[2]).await;
    assert_eq!(hit["window_use"], Value::Null, "a hit opened no window");

    let answer = command(&app, "/windows").await;
    assert!(
        answer
            .visible_text
            .contains("let through 3 calls, ⚠️ 1 failed"),
        "{}",
        answer.visible_text
    );
}

#[tokio::test]
async fn a_rule_allowed_call_takes_an_outcome_too() {
    let app = TestApp::spawn_with_settings(|toml| {
        toml + "\n[[rules]]\nname = \"reads\"\neffect = \"allow\"\ntools = [\"read_*\"]\n"
    })
    .await;
    let (s, r) = app.create(call("read_report", json!({"id": 1}))).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["via"], "rule");
    let (s, r) = report(
        &app,
        r["id"].as_str().unwrap(),
        json!({"status": "executed", "duration_ms": 3}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["duration_ms"], 3);
}

#[tokio::test]
async fn with_no_report_in_time_the_message_says_so_and_a_late_report_replaces_it() {
    let app = TestApp::spawn_with_settings(ops_with("expect_outcome_seconds = 1")).await;
    let (record, message_id) = approved(&app, call("deploy", json!({"v": 1}))).await;
    let id = record["id"].as_str().unwrap();
    assert_eq!(record["outcome"], Value::Null);

    let text = shows(
        &app,
        OPS_CHAT,
        message_id,
        "🟠 Not known whether it ran: no report from the agent",
    )
    .await;
    assert!(text.contains("✅ Approved by Bob"), "{text}");
    let (_, read) = app.get(id).await;
    assert_eq!(read["outcome"]["status"], "unknown", "{read}");
    let kinds = app.audit_kinds(id).await;
    assert!(kinds.contains(&"outcome_missing".to_owned()), "{kinds:?}");

    // The late report is taken, and shown instead.
    let (s, r) = report(
        &app,
        id,
        json!({"status": "executed", "summary": "late but fine"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["status"], "executed");
    let text = shows(&app, OPS_CHAT, message_id, "🟢 Ran: late but fine").await;
    assert!(!text.contains("No report"), "{text}");
    let missing = app
        .audit_events(id)
        .await
        .into_iter()
        .find(|e| e["kind"] == "outcome_reported")
        .expect("the report audited");
    assert_eq!(missing["detail"]["replaced"], "unknown");
    let metrics = app.metrics_text().await;
    assert!(
        metrics.contains(r#"outcomes_total{agent="agent-a",tool="deploy",status="unknown"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_next_question_of_a_tool_that_failed_says_so_and_pending_marks_it() {
    let app = TestApp::spawn().await;
    let (record, _) = approved(&app, call("transfer", json!({"amount": 5}))).await;
    let id = record["id"].as_str().unwrap();
    let (s, _) = report(
        &app,
        id,
        json!({"status": "failed", "error": "insufficient funds"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    // Another tool: nothing recalled.
    let (other, other_message) = app.ask_suspended(call("deploy", json!({"v": 1}))).await;
    assert_eq!(other["recalled"], Value::Null);
    let text = app.telegram.message(OPS_CHAT, other_message).visible_text;
    assert!(!text.contains("The last approved"), "{text}");

    // The same tool again (other values): the approver is told.
    let (again, message_id) = app
        .ask_suspended(call("transfer", json!({"amount": 7})))
        .await;
    assert_eq!(again["recalled"]["id"], id, "{again}");
    assert_eq!(again["recalled"]["status"], "failed");
    assert_eq!(again["recalled"]["error"], "insufficient funds");
    let text = app.telegram.message(OPS_CHAT, message_id).visible_text;
    let clock = &record["decided_at"].as_str().unwrap()[11..19];
    let expected =
        format!("⚠️ The last approved transfer ({clock} UTC, by Bob) failed: insufficient funds");
    assert!(text.contains(&expected), "{expected}\n{text}");

    let answer = command(&app, "/pending").await;
    let lines: Vec<&str> = answer.visible_text.lines().collect();
    let transfer = lines
        .iter()
        .find(|l| l.contains("transfer"))
        .expect("listed");
    assert!(transfer.contains("⚠️ last run failed"), "{transfer}");
    let deploy = lines.iter().find(|l| l.contains("deploy")).expect("listed");
    assert!(!deploy.contains("⚠️"), "{deploy}");
}

#[tokio::test]
async fn a_report_reaches_the_event_stream_and_the_webhook_and_the_trail_verifies() {
    let hooks = WebhookSink::start().await;
    let app = TestApp::spawn_with_callback_prefix(&hooks.url).await;
    let mut body = call("deploy", json!({"v": 1}));
    body["callback_url"] = json!(format!("{}/a", hooks.url));
    let (record, _) = approved(&app, body).await;
    let id = record["id"].as_str().unwrap();
    hooks.wait_for(1).await;

    let mut stream = app
        .client
        .get(app.url("/v1/events"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("GET /v1/events");
    assert_eq!(stream.status(), StatusCode::OK);
    let (s, _) = report(&app, id, json!({"status": "failed", "error": "exit 3"})).await;
    assert_eq!(s, StatusCode::OK);

    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("\"step\":\"outcome\"") {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .expect("the outcome event within 10 s")
            .expect("stream")
            .expect("more of the stream");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    let data = seen
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .find(|d| d.contains("\"step\":\"outcome\""))
        .expect("its data");
    let event: Value = serde_json::from_str(data).expect("JSON data");
    assert_eq!(event["id"], id);
    assert_eq!(event["status"], "confirmed");
    assert_eq!(event["outcome"]["status"], "failed");
    assert_eq!(event["outcome"]["error"], "exit 3");

    // A second signed delivery, with the record as it now is.
    let delivered = hooks.wait_for(2).await;
    let last: Value = serde_json::from_slice(&delivered[1]).unwrap();
    assert_eq!(last["id"], id);
    assert_eq!(last["outcome"]["status"], "failed");

    let (code, out, err) = super::audit::audit_cli(&app, &["verify"]).await;
    assert_eq!(code, 0, "{out}\n{err}");
}

/// A receiver of the service's webhooks that takes every delivery.
struct WebhookSink {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
}

impl WebhookSink {
    async fn start() -> WebhookSink {
        use axum::routing::post;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        let app = axum::Router::new().route(
            "/hooks/{*rest}",
            post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    kept.lock().unwrap().push(body.to_vec());
                    StatusCode::OK
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        WebhookSink { url, seen }
    }

    async fn wait_for(&self, n: usize) -> Vec<Vec<u8>> {
        for _ in 0..400 {
            let seen = self.seen.lock().unwrap().clone();
            if seen.len() >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("fewer than {n} deliveries arrived");
    }
}

#[tokio::test]
async fn a_report_telegram_did_not_show_is_shown_after_a_restart() {
    let app = TestApp::spawn().await;
    let (record, message_id) = approved(&app, call("deploy", json!({"v": 1}))).await;
    let id = record["id"].as_str().unwrap().to_owned();
    app.telegram
        .wait_for_message(OPS_CHAT, message_id, "the decision shown", |m| {
            !m.has_buttons()
        })
        .await;
    // Telegram refuses the edit that shows the report: the report itself is stored.
    app.telegram.fail_next(
        "editMessageText",
        1,
        400,
        "Bad Request: not enough rights to edit",
    );
    let (s, _) = report(
        &app,
        &id,
        json!({"status": "executed", "summary": "all good"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = app.telegram.message(OPS_CHAT, message_id).visible_text;
    assert!(!text.contains("all good"), "{text}");

    let app = app.restart().await;
    let text = shows(&app, OPS_CHAT, message_id, "🟢 Ran: all good").await;
    assert!(text.contains("✅ Approved by Bob"), "{text}");
    let (_, read) = app.get(&id).await;
    assert_eq!(read["outcome"]["status"], "executed");
}

#[tokio::test]
async fn an_approval_carrying_a_call_takes_a_report_when_answered_yes_and_is_owed_one() {
    use crate::support::interactions::*;
    let app = TestApp::spawn_with_settings(ops_with("expect_outcome_seconds = 1")).await;
    let approval = |id: &str| {
        json!({
            "interaction": {"interaction_id": id, "question": "Transfer?", "interaction_type": "approval"},
            "call": {"tool": "transfer", "owner_id": "emp-1", "params": {"amount": 5}},
        })
    };
    let mut ids = Vec::new();
    for (n, (iid, button)) in [("i-yes", "✅ Approve"), ("i-no", "❌ Reject")]
        .into_iter()
        .enumerate()
    {
        let (s, view) = post_interaction(&app, approval(iid)).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{view}");
        let message = app.telegram.wait_for_message_in(OPS_CHAT, n + 1).await[n].clone();
        wait_for_status_as(&app, TOKEN_A, iid, "delivered", Duration::from_secs(10)).await;
        tap(&app, &message, button, bob()).await;
        let done =
            wait_for_status_as(&app, TOKEN_A, iid, "completed", Duration::from_secs(10)).await;
        ids.push((done["id"].as_str().unwrap().to_owned(), message.message_id));
    }
    // Answered yes: owed a report (the route expects one within a second), shown.
    let (yes, message_id) = &ids[0];
    shows(
        &app,
        OPS_CHAT,
        *message_id,
        "🟠 Not known whether it ran: no report from the agent",
    )
    .await;
    let (s, r) = report(&app, yes, json!({"status": "executed", "summary": "sent"})).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["outcome"]["status"], "executed");
    shows(&app, OPS_CHAT, *message_id, "🟢 Ran: sent").await;
    // Answered no: nothing ran, nothing is owed.
    let (no, _) = &ids[1];
    let (s, r) = report(&app, no, json!({"status": "executed"})).await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
}
