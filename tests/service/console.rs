//! The operator's console (a Telegram Mini App, `[mini_app]`): its page is served, its
//! API acts as the Telegram user the signed launch data names (checked: genuine, this
//! bot's, fresh), and that user sees exactly what they could answer by tapping in a chat,
//! every parameter in full; anyone else sees nothing. The `in_a_real_browser_*` tests
//! open the page in a headless Chromium (`support::browser`) and click and type in it as
//! the operator would, against the real service.

use crate::support::app::*;
use crate::support::browser::{Browser, Page};
use hitl_telegram::domain::launch;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::time::Duration;

pub(super) use crate::support::console::{
    as_user, console_get, decide, launch_data, unix_now, with_console,
};

#[tokio::test]
async fn launch_data_must_be_genuine_this_bots_and_fresh() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let genuine = as_user(&app, ALICE, "Alice");
    let (s, r) = console_get(&app, "/app/api/questions", Some(&genuine)).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["questions"], json!([]));

    let changed = genuine.replace(&ALICE.to_string(), &BOB.to_string());
    let other_bot = launch_data(ALICE, "Alice", "999999:another-bots-token", 5);
    let stale = launch_data(ALICE, "Alice", app.telegram.token(), 601);
    for (what, data) in [
        ("a changed field", Some(changed.as_str())),
        ("another bot's token", Some(other_bot.as_str())),
        ("stale", Some(stale.as_str())),
        ("missing", None),
        ("empty", Some("")),
    ] {
        let (s, r) = console_get(&app, "/app/api/questions", data).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {r}");
        assert_eq!(r["error"]["code"], "unauthorized", "{what}");
    }
    // A bearer token of an agent is not a Telegram user.
    let (s, _) = json_of(
        app.client
            .get(app.url("/app/api/questions"))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn an_approver_sees_the_question_in_full_and_anyone_else_sees_nothing() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let long = "x".repeat(5000);
    let (record, _) = app
        .ask_suspended(json!({
            "tool": "transfer",
            "owner_id": "emp-1",
            "params": {"to": "ACME\u{202e}moc.evil", "memo": long, "amount": 1200.50},
            "template": "Send {amount} to {to}?",
            "context": "Invoice #42",
        }))
        .await;
    let id = record["id"].as_str().unwrap();

    let alice = as_user(&app, ALICE, "Alice");
    let (s, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let listed: Vec<&str> = list["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [id]);

    let (s, detail) = console_get(&app, &format!("/app/api/questions/{id}"), Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{detail}");
    let q = &detail["question"];
    assert_eq!(q["tool"], "transfer");
    assert_eq!(q["agent"], "agent-a");
    assert_eq!(q["args_hash"], record["args_hash"]);
    assert_eq!(q["context"], "Invoice #42");
    let params = q["parameters"].as_str().unwrap();
    assert!(params.contains(&long), "every value whole, never cut");
    assert!(params.contains(r#""ACME\u202emoc.evil""#), "{params}");
    assert!(
        params.contains("1200.5"),
        "the number as Python (and the chat) shows it: {params}"
    );
    let kinds: Vec<&str> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"requested"), "{kinds:?}");

    // Carol approves another route only: she does not see it.
    let carol = as_user(&app, CAROL, "Carol");
    let (s, list) = console_get(&app, "/app/api/questions", Some(&carol)).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list["questions"], json!([]));
    let (s, r) = console_get(&app, &format!("/app/api/questions/{id}"), Some(&carol)).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{r}");
    // Mallory approves nothing and is no person: genuine launch data opens nothing, not
    // even an empty list.
    let mallory = as_user(&app, MALLORY, "Mallory");
    for path in [
        "/app/api/questions".to_owned(),
        format!("/app/api/questions/{id}"),
        "/app/api/windows".to_owned(),
        "/app/api/grants".to_owned(),
        "/app/api/ended".to_owned(),
    ] {
        let (s, r) = console_get(&app, &path, Some(&mallory)).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{path}: {r}");
        assert_eq!(r["error"]["code"], "not_found", "{path}");
    }
    let (s, _) = console_get(&app, "/app/api/questions/not-an-id", Some(&alice)).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Whether `v` is a time as the chat writes it: `2026-12-06 03:02:44 UTC`.
fn chat_time(v: &Value) -> bool {
    let t = v.as_str().unwrap_or_default();
    let digits = |r: std::ops::Range<usize>| t[r].bytes().all(|b| b.is_ascii_digit());
    t.len() == 23
        && t.ends_with(" UTC")
        && digits(0..4)
        && &t[4..5] == "-"
        && &t[10..11] == " "
        && digits(11..13)
        && &t[13..14] == ":"
}

#[tokio::test]
async fn the_console_writes_times_as_the_chat_does_and_names_a_questions_kind_in_words() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 3}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let (s, view) = crate::support::interactions::post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "read-q3", "interaction_type": "approval",
               "question": "Approve reading the Q3 sales report (read-only)?\nIt is large."}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{view}");
    let alice = as_user(&app, ALICE, "Alice");
    let (s, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let listed = list["questions"].as_array().unwrap();
    let call = listed.iter().find(|q| q["id"] == id).expect("the call");
    assert_eq!(
        (&call["kind_words"], &call["title"], &call["has_call"]),
        (&json!("confirmation"), &json!("deploy"), &json!(true))
    );
    // The deadline reads as the chat's "⏳ Deadline:" line.
    assert!(chat_time(&call["expires_at"]), "{call}");
    let shown = app.telegram.message(OPS_CHAT, message_id).visible_text;
    assert!(
        shown.contains(&format!(
            "Deadline: {}",
            call["expires_at"].as_str().unwrap()
        )),
        "{shown}"
    );
    // A question without a call is named by its kind, as /pending names it, never by the
    // tool name it is stored under.
    let question = listed
        .iter()
        .find(|q| q["id"] == view["id"])
        .expect("the question");
    assert_eq!(question["kind_words"], "approval question");
    assert_eq!(
        question["title"],
        "❓ approval question “Approve reading the Q3 sales report (read-only)?…”"
    );
    assert_eq!(question["has_call"], false);
    assert!(
        !question["title"]
            .as_str()
            .unwrap()
            .contains("human_interaction")
    );
    // A grant question is named as one, by its terms: approving it stores a grant.
    let (s, grant) = crate::support::interactions::post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "grant-q3", "interaction_type": "approval",
               "question": "May I read reports this week?",
               "grant": {"scope": "tool:read_report", "owner_id": "carol", "window_seconds": 600}}}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{grant}");
    let (_, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    let listed = list["questions"].as_array().unwrap();
    let asked = listed
        .iter()
        .find(|q| q["id"] == grant["id"])
        .expect("the grant question");
    assert_eq!(
        (&asked["kind_words"], &asked["title"]),
        (
            &json!("grant question"),
            &json!("🔑 grant of tool:read_report for carol")
        )
    );

    // Decided, every time of it reads the same way: when, each answer, the trail.
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": record["args_hash"]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, detail) = console_get(&app, &format!("/app/api/questions/{id}"), Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{detail}");
    let q = &detail["question"];
    assert!(chat_time(&q["decided_at"]), "{q}");
    assert!(chat_time(&q["answers"][0]["at"]), "{q}");
    let events = detail["events"].as_array().unwrap();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| chat_time(&e["at"])), "{events:?}");
}

#[tokio::test]
async fn the_page_is_served_with_its_stylesheet_no_inline_style_and_no_secret_only_when_on() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let page = app.client.get(app.url("/app")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self' https://telegram.org"),
        "{csp}"
    );
    assert!(
        csp.contains("style-src 'self';") && !csp.contains("unsafe-inline"),
        "styles from the stylesheet only: {csp}"
    );
    let html = page.text().await.unwrap();
    assert!(html.contains("/app/console.js"), "{html}");
    assert!(
        html.contains("/app/console.css") && !html.contains("<style") && !html.contains("style="),
        "{html}"
    );
    let css = app
        .client
        .get(app.url("/app/console.css"))
        .send()
        .await
        .unwrap();
    assert_eq!(css.status(), StatusCode::OK);
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    assert!(
        css.text().await.unwrap().contains("--tg-theme-bg-color"),
        "the theme's colours"
    );
    let script = app
        .client
        .get(app.url("/app/console.js"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for secret in [app.telegram.token(), TOKEN_A] {
        assert!(!html.contains(secret) && !script.contains(secret));
    }
    assert!(script.contains("tgWebAppData"), "reads the fragment itself");

    let off = TestApp::spawn().await;
    let r = off.client.get(off.url("/app")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let (s, _) = console_get(
        &off,
        "/app/api/questions",
        Some(&as_user(&off, ALICE, "Alice")),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn an_approve_in_the_console_confirms_the_agents_blocked_call_and_the_chat_shows_it() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let blocked =
        app.create_blocking(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 2}}));
    let message = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    let alice = as_user(&app, ALICE, "Alice");
    let (_, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    let q = list["questions"][0].clone();
    let id = q["id"].as_str().unwrap();

    // A stale page (another call's hash) decides nothing.
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": "0".repeat(64)}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
    assert_eq!(r["confirmation"]["status"], "pending");
    // Someone who could not tap it cannot decide it here either.
    let mallory = as_user(&app, MALLORY, "Mallory");
    let (s, _) = decide(
        &app,
        id,
        &mallory,
        json!({"action": "approve", "args_hash": q["args_hash"]}),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": q["args_hash"]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "confirmed");
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["decided_by"]["id"], ALICE);
    assert_eq!(record["parameters"], json!({"v": 2}));
    let shown = app
        .telegram
        .wait_for_message(
            OPS_CHAT,
            message.message_id,
            "the decision in the chat",
            |m| !m.has_buttons(),
        )
        .await;
    assert!(
        shown.visible_text.contains("✅ Approved by Alice"),
        "{}",
        shown.visible_text
    );
    let trail = app.audit_events(id).await;
    let console: Vec<&Value> = trail
        .iter()
        .filter(|e| e["kind"] == "console_decision")
        .collect();
    assert_eq!(console.len(), 1, "{console:?}");
    assert_eq!(console[0]["actor"], format!("telegram:{ALICE}"));
    assert_eq!(console[0]["detail"]["counted"], true);
    // Written with the answer and the decision, between them (one transaction).
    let kinds: Vec<&str> = trail.iter().filter_map(|e| e["kind"].as_str()).collect();
    let at = kinds
        .iter()
        .position(|k| *k == "console_decision")
        .expect("console_decision");
    assert_eq!(
        kinds[at - 1..=at + 1],
        ["answered", "console_decision", "decided"],
        "{kinds:?}"
    );
    // Ended: a second decision is refused with the outcome.
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "cancel", "args_hash": q["args_hash"]}),
    )
    .await;
    assert_eq!(s, StatusCode::CONFLICT, "{r}");
}

#[tokio::test]
async fn a_deny_with_a_reason_from_the_console_reaches_the_agent_as_a_tap_would() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let (record, _) = app
        .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 3}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let bob = as_user(&app, BOB, "Bob");
    let hash = record["args_hash"].clone();
    let (s, r) = decide(&app, id, &bob, json!({"action": "deny", "args_hash": hash})).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "a deny says why: {r}");
    let (s, r) = decide(
        &app,
        id,
        &bob,
        json!({"action": "deny", "reason": "use staging first", "args_hash": hash}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let decided = app.wait_status(id, "cancelled").await;
    assert_eq!(decided["denial_reason"], "use staging first");
    assert_eq!(decided["do_not_retry"], true);
}

#[tokio::test]
async fn a_console_decision_and_a_tap_racing_it_decide_once() {
    let app = TestApp::spawn_with_settings(with_console).await;
    for n in 0..3 {
        let (record, message_id) = app
            .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"n": n}}))
            .await;
        let id = record["id"].as_str().unwrap();
        let alice = as_user(&app, ALICE, "Alice");
        // Bob cancels in the chat while Alice approves in the console.
        app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
        let (s, r) = decide(
            &app,
            id,
            &alice,
            json!({"action": "approve", "args_hash": record["args_hash"]}),
        )
        .await;
        let (_, stored) = app.get(id).await;
        let stored = if stored["status"] == "pending" {
            app.wait_status(
                id,
                if s == StatusCode::OK {
                    "confirmed"
                } else {
                    "cancelled"
                },
            )
            .await
        } else {
            stored
        };
        match s {
            StatusCode::OK => assert_eq!(stored["decided_by"]["id"], ALICE, "{r}"),
            StatusCode::CONFLICT => assert_eq!(stored["decided_by"]["id"], BOB, "{r}"),
            other => panic!("{other}: {r}"),
        }
        let decided: Vec<Value> = app
            .audit_events(id)
            .await
            .into_iter()
            .filter(|e| e["kind"] == "decided")
            .collect();
        assert_eq!(decided.len(), 1, "one decision: {decided:?}");
    }
}

/// How long the page may take to show what a test waits for: generous, since the tests
/// share a small machine with the compiler; a page that works shows it in well under 1 s.
pub(super) const PAGE_WAIT: Duration = Duration::from_secs(20);

/// The console as Telegram opens it for `user_id`: the launch data, signed with the bot's
/// token, in the URL's fragment; on the question `start_param` names (the app's link from
/// a group), on the list without one.
pub(super) fn console_url(
    app: &TestApp,
    user_id: u64,
    name: &str,
    start_param: Option<&str>,
) -> String {
    let user =
        json!({"id": user_id, "first_name": name, "username": name.to_lowercase()}).to_string();
    let auth = unix_now().to_string();
    let mut fields = vec![("user", user.as_str()), ("auth_date", auth.as_str())];
    fields.extend(start_param.map(|id| ("start_param", id)));
    let data = launch::signed(&fields, app.telegram.token());
    let fragment: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("tgWebAppData", &data)
        .append_pair("tgWebAppVersion", "8.0")
        .append_pair("tgWebAppPlatform", "android")
        .finish();
    format!("{}#{fragment}", app.url("/app"))
}

#[tokio::test]
async fn in_a_real_browser_the_page_shows_the_pending_question_with_every_parameter() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let memo = "line item 0042 paid in full; ".repeat(40);
    let (record, _) = app
        .ask_suspended(json!({
            "tool": "transfer",
            "owner_id": "emp-1",
            "params": {"amount": 1200.5, "to": "ACME GmbH", "memo": memo},
            "template": "Send {amount} EUR to {to}?",
        }))
        .await;
    let id = record["id"].as_str().unwrap();
    let page = browser.page().await;
    page.goto(&console_url(&app, ALICE, "Alice", Some(id)))
        .await;
    page.wait_for("#approve", PAGE_WAIT).await;
    let shown = page.text("body").await;
    assert!(
        shown.contains("ACME GmbH") && shown.contains("Signed in by Telegram as Alice"),
        "{shown}"
    );

    // Long, the parameters are folded away; unfolded, all of them are there.
    let folded = "document.querySelector('#parameters').closest('details').open === false";
    assert_eq!(page.eval(folded).await, true);
    page.click("details summary").await;
    let params = page.text("#parameters").await;
    assert!(
        params.contains(memo.trim_end()),
        "every parameter whole: {params}"
    );
}

/// Opens the console for `user_id` on question `id` in `browser`, clicks Approve with the
/// mouse, and returns the page once it says the question is decided.
async fn approve_in_the_page(
    browser: &Browser,
    app: &TestApp,
    (user_id, name): (u64, &str),
    id: &str,
) -> Page {
    let page = browser.page().await;
    page.goto(&console_url(app, user_id, name, Some(id))).await;
    page.wait_for("#approve", PAGE_WAIT).await;
    page.click("#approve").await;
    page.wait_for("#decided", PAGE_WAIT).await;
    page
}

/// The id of the one question `user_id` sees pending in the console.
pub(super) async fn the_pending_question(app: &TestApp, user_id: u64, name: &str) -> String {
    let data = as_user(app, user_id, name);
    let (s, list) = console_get(app, "/app/api/questions", Some(&data)).await;
    assert_eq!(s, StatusCode::OK, "{list}");
    assert_eq!(
        list["questions"].as_array().map(Vec::len),
        Some(1),
        "{list}"
    );
    list["questions"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn in_a_real_browser_an_approve_in_the_page_confirms_the_agents_blocked_call() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let blocked =
        app.create_blocking(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 2}}));
    let message = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    let id = the_pending_question(&app, ALICE, "Alice").await;

    let page = approve_in_the_page(&browser, &app, (ALICE, "Alice"), &id).await;
    let done = page.text("#decided").await;
    assert!(done.contains("approved by Alice"), "{done}");
    assert_eq!(
        page.dialogs(),
        Vec::<String>::new(),
        "a route without console_confirm asks no second time"
    );

    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["decided_by"]["id"], ALICE);
    let shown = app
        .telegram
        .wait_for_message(
            OPS_CHAT,
            message.message_id,
            "the decision in the chat",
            |m| !m.has_buttons(),
        )
        .await;
    assert!(
        shown.visible_text.contains("✅ Approved by Alice"),
        "{}",
        shown.visible_text
    );
}

#[tokio::test]
async fn in_a_real_browser_a_route_that_asks_twice_approves_once_the_page_is_told_ok() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(|toml| {
        with_console(toml).replace(
            "name = \"other\"\n",
            "name = \"other\"\nconsole_confirm = true\n",
        )
    })
    .await;
    let blocked = app.create_blocking(
        json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 3}, "route": "other"}),
    );
    app.telegram.wait_for_message_in(OTHER_CHAT, 1).await;
    let id = the_pending_question(&app, BOB, "Bob").await;

    // The click opens window.confirm; the driver answers OK, as Bob would.
    let page = approve_in_the_page(&browser, &app, (BOB, "Bob"), &id).await;
    let asked = page.dialogs();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("Approve deploy for emp-1?"), "{asked:?}");
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["decided_by"]["id"], BOB);
}

#[tokio::test]
async fn in_a_real_browser_a_reason_typed_in_the_page_reaches_the_agent_with_the_deny() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let (record, _) = app
        .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 4}}))
        .await;
    let id = record["id"].as_str().unwrap();
    // Opened on the list, as the bot's menu button opens it: the question is one tap away.
    let page = browser.page().await;
    page.goto(&console_url(&app, BOB, "Bob", None)).await;
    let card = format!("[data-id=\"{id}\"] button.open");
    page.wait_for(&card, PAGE_WAIT).await;
    page.click(&card).await;
    page.wait_for("#reason", PAGE_WAIT).await;
    page.type_into("#reason", "a first draft").await;
    // Typing again replaces what the field held.
    page.type_into("#reason", "use staging first").await;
    page.click("#deny").await;
    page.wait_for("#decided", PAGE_WAIT).await;

    let decided = app.wait_status(id, "cancelled").await;
    assert_eq!(decided["denial_reason"], "use staging first");
    assert_eq!(decided["decided_by"]["id"], BOB);
}

#[tokio::test]
async fn a_question_offers_the_console_as_a_web_app_in_private_and_as_the_apps_link_in_groups() {
    use crate::support::fake_telegram::BOT_USERNAME;
    use crate::support::interactions::post_interaction;
    let app = TestApp::spawn_with_settings(|toml| {
        with_console(toml).replace(
            "max_age_seconds = 600\n",
            "max_age_seconds = 600\nshort_name = \"console\"\n",
        )
    })
    .await;
    // The bot's menu button opens the console in private chats.
    let menu = app.telegram.wait_for_requests("setChatMenuButton", 1).await;
    assert_eq!(
        menu[0].body["menu_button"]["web_app"]["url"], "http://127.0.0.1:9/app",
        "{:?}",
        menu[0].body
    );

    // In a group: a link to the app registered with @BotFather, naming the question.
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 1}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let group = app.telegram.message(OPS_CHAT, message_id);
    let review = group
        .buttons
        .iter()
        .flatten()
        .find(|b| b.text == "🔎 Review")
        .expect("a Review button");
    assert_eq!(
        review.url.as_deref(),
        Some(format!("https://t.me/{BOT_USERNAME}/console?startapp={id}").as_str())
    );
    assert_eq!(
        review.web_app, None,
        "Telegram refuses web_app buttons in groups"
    );

    // In a private chat: the page itself, as a web_app button.
    let (s, view) = post_interaction(
        &app,
        json!({"interaction": {"interaction_id": "ask-alice", "question": "Ship it?", "interaction_type": "approval"},
               "recipient": "alice"}),
    )
    .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{view}");
    let private = app
        .telegram
        .wait_for_message_in(ALICE as i64, 1)
        .await
        .remove(0);
    let review = private
        .buttons
        .iter()
        .flatten()
        .find(|b| b.text == "🔎 Review")
        .expect("a Review button");
    assert_eq!(
        review.web_app.as_deref(),
        Some(format!("http://127.0.0.1:9/app?q={}", view["id"].as_str().unwrap()).as_str())
    );

    // Once decided the buttons go, the Review button with them.
    app.telegram.tap(OPS_CHAT, message_id, "✅ Approve", bob());
    let decided = app
        .telegram
        .wait_for_message(OPS_CHAT, message_id, "no buttons once decided", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(decided.buttons.is_empty());
}

/// `POST path` (a revoke) as the user of `data`.
async fn console_post(app: &TestApp, path: &str, data: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(path))
        .header("Authorization", format!("tma {data}"))
        .json(&json!({}))
        .send()
        .await
        .expect("console POST");
    json_of(r).await
}

#[tokio::test]
async fn an_approver_lists_and_revokes_the_windows_and_grants_of_their_routes_from_the_console() {
    let app = TestApp::spawn_with_settings(with_console).await;
    // A window: approved for 10 min, then used once.
    let call =
        json!({"tool": "check_in", "owner_id": "emp-1", "params": {"e": 7}, "window_seconds": 600});
    let (record, message_id) = app.ask_suspended(call.clone()).await;
    let id = record["id"].as_str().unwrap();
    let label = approve_label(600);
    app.telegram
        .tap(OPS_CHAT, message_id, label.as_str(), bob());
    app.wait_status(id, "confirmed").await;
    let (s, hit) = app.create(call.clone()).await;
    assert_eq!((s, hit["via"].as_str()), (StatusCode::OK, Some("window")));
    // A grant: asked and approved in the chat.
    let asking = {
        let (client, url) = (app.client.clone(), app.url("/v1/grants"));
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(TOKEN_A)
                .json(&json!({"owner_id": "emp-1", "scope": "tool:deploy"}))
                .send()
                .await
                .unwrap();
            json_of(r).await
        })
    };
    let question = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 2)
        .await
        .remove(1);
    app.telegram
        .tap(OPS_CHAT, question.message_id, "✅ Approve", alice());
    let (s, granted) = asking.await.unwrap();
    assert_eq!(s, StatusCode::CREATED, "{granted}");
    let grant_id = granted["grant"]["grant_id"].as_str().unwrap().to_owned();

    let alice = as_user(&app, ALICE, "Alice");
    let (s, w) = console_get(&app, "/app/api/windows", Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{w}");
    assert_eq!(w["windows"][0]["id"], id);
    assert_eq!(w["windows"][0]["calls"], 1);
    let (_, g) = console_get(&app, "/app/api/grants", Some(&alice)).await;
    assert_eq!(g["grants"][0]["id"], grant_id.as_str());

    // Carol approves another route: she sees neither, and revokes nothing.
    let carol = as_user(&app, CAROL, "Carol");
    let (_, w) = console_get(&app, "/app/api/windows", Some(&carol)).await;
    assert_eq!(w["windows"], json!([]));
    let (_, g) = console_get(&app, "/app/api/grants", Some(&carol)).await;
    assert_eq!(g["grants"], json!([]));
    let (s, _) = console_post(&app, &format!("/app/api/windows/{id}/revoke"), &carol).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, _) = console_post(&app, &format!("/app/api/grants/{grant_id}/revoke"), &carol).await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Alice revokes both: the next identical call asks again, and the grant is gone.
    let (s, r) = console_post(&app, &format!("/app/api/windows/{id}/revoke"), &alice).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (s, r) = console_post(&app, &format!("/app/api/grants/{grant_id}/revoke"), &alice).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let mut again = call.clone();
    again["wait"] = json!("suspend");
    let (s, next) = app.create(again).await;
    assert_eq!(s, StatusCode::ACCEPTED, "the window is closed: {next}");
    let (_, g) = console_get(&app, "/app/api/grants", Some(&alice)).await;
    assert_eq!(g["grants"], json!([]));
    let kinds = app.audit_kinds(id).await;
    assert!(kinds.contains(&"window_revoked".to_owned()), "{kinds:?}");
    // Revoked already: not found.
    let (s, _) = console_post(&app, &format!("/app/api/windows/{id}/revoke"), &alice).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

/// Every page of `GET /app/api/ended?limit=<limit>` as the user of `data`, from the
/// first: the ids of each page, in order. Fails if a page is not 200 or the walk does not
/// end.
async fn ended_pages(app: &TestApp, data: &str, limit: u32) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut before: Option<String> = None;
    for _ in 0..20 {
        let path = match &before {
            Some(c) => format!("/app/api/ended?limit={limit}&before={c}"),
            None => format!("/app/api/ended?limit={limit}"),
        };
        let (s, page) = console_get(app, &path, Some(data)).await;
        assert_eq!(s, StatusCode::OK, "{page}");
        let ids = page["questions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["id"].as_str().unwrap().to_owned())
            .collect();
        pages.push(ids);
        match page["next"].as_str() {
            Some(next) => before = Some(next.to_owned()),
            None => {
                assert_eq!(page["next"], Value::Null);
                return pages;
            }
        }
    }
    panic!("the pages never end: {pages:?}");
}

/// Asks `body` (suspended) and has the user of `data` approve it from the console;
/// returns its id.
async fn approved_in_console(app: &TestApp, body: Value, data: &str) -> String {
    let (record, _) = app.ask_suspended(body).await;
    let id = record["id"].as_str().unwrap().to_owned();
    let approve = json!({"action": "approve", "args_hash": record["args_hash"]});
    let (s, r) = decide(app, &id, data, approve).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    id
}

#[tokio::test]
async fn an_approver_sees_the_questions_ended_in_their_chats_newest_first_with_who_decided_and_the_run()
 {
    let app = TestApp::spawn_with_settings(with_console).await;
    let alice = as_user(&app, ALICE, "Alice");
    let bob_data = as_user(&app, BOB, "Bob");
    let call = |n: u32| json!({"tool": "deploy", "owner_id": "emp-1", "params": {"n": n}, "window_seconds": 0});
    // Alice approves the first from the console, and its run fails.
    let first_id = approved_in_console(&app, call(1), &alice).await;
    // Bob cancels the second by tapping in the chat.
    let (second, message_id) = app.ask_suspended(call(2)).await;
    let second_id = second["id"].as_str().unwrap().to_owned();
    app.telegram.tap(OPS_CHAT, message_id, "❌ Cancel", bob());
    app.wait_status(&second_id, "cancelled").await;
    // Bob approves the third from the console, and it runs.
    let third_id = approved_in_console(&app, call(3), &bob_data).await;
    for (id, run) in [
        // An invisible character in the agent's words shows as its escape, as in chat.
        (
            &first_id,
            json!({"status": "failed", "error": "disk full\u{202e}"}),
        ),
        (
            &third_id,
            json!({"status": "executed", "summary": "deployed"}),
        ),
    ] {
        let r = app
            .client
            .post(app.url(&format!("/v1/confirmations/{id}/outcome")))
            .bearer_auth(TOKEN_A)
            .json(&run)
            .send()
            .await
            .unwrap();
        let (s, body) = json_of(r).await;
        assert_eq!(s, StatusCode::OK, "{body}");
    }
    // Ended in the other route's chat, which only Bob approves: not Alice's to see.
    let mut elsewhere = call(4);
    elsewhere["route"] = json!("other");
    let other_id = approved_in_console(&app, elsewhere, &bob_data).await;
    // Still pending: not ended.
    app.ask_suspended(call(5)).await;

    let (s, page) = console_get(&app, "/app/api/ended", Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["next"], Value::Null, "{page}");
    let qs = page["questions"].as_array().unwrap();
    let ids: Vec<&str> = qs.iter().map(|q| q["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [&third_id, &second_id, &first_id],
        "newest decision first"
    );
    let seen: Vec<(&str, &str)> = qs
        .iter()
        .map(|q| {
            (
                q["status"].as_str().unwrap(),
                q["decided_by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("confirmed", "Bob (@bob)"),
            ("cancelled", "Bob"),
            ("confirmed", "Alice (@alice)")
        ]
    );
    assert_eq!(qs[0]["outcome"]["status"], "executed");
    assert_eq!(qs[0]["outcome"]["summary"], "deployed");
    assert_eq!(qs[1]["outcome"], Value::Null);
    assert_eq!(qs[2]["outcome"]["status"], "failed");
    assert_eq!(qs[2]["outcome"]["error"], "disk full\\u202e");
    assert!(qs.iter().all(|q| q["decided_at"].is_string()));

    // One at a time: each exactly once, in the same order, and then no next page.
    let pages = ended_pages(&app, &alice, 1).await;
    let walked: Vec<&String> = pages.iter().flatten().collect();
    assert_eq!(walked, [&third_id, &second_id, &first_id], "{pages:?}");
    assert!(pages.iter().all(|p| p.len() <= 1), "{pages:?}");
    // Bob approves both routes: he sees all four.
    let walked: Vec<String> = ended_pages(&app, &bob_data, 2).await.concat();
    assert_eq!(walked, [other_id, third_id, second_id, first_id]);

    // Carol approves another route: she sees none (Mallory, who approves nothing, is
    // answered 404: see the first tests).
    let carol = as_user(&app, CAROL, "Carol");
    let (s, page) = console_get(&app, "/app/api/ended", Some(&carol)).await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page, json!({"questions": [], "next": null}));
}

#[tokio::test]
async fn a_page_of_ended_questions_names_a_malformed_cursor_or_limit() {
    let app = TestApp::spawn_with_settings(with_console).await;
    let alice = as_user(&app, ALICE, "Alice");
    for (query, field) in [
        ("before=yesterday", "before"),
        ("before=12.not-an-id", "before"),
        ("before=-5.cf_00000000000000000000000000000000", "before"),
        ("limit=0", "limit"),
        ("limit=51", "limit"),
        ("limit=twenty", "limit"),
    ] {
        let (s, r) = console_get(&app, &format!("/app/api/ended?{query}"), Some(&alice)).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{query}: {r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}: ")), "{query}: {r}");
    }
    let (s, _) = console_get(&app, "/app/api/ended?limit=50", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn in_a_real_browser_the_list_shows_the_recently_ended_questions_with_their_runs() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let alice_data = as_user(&app, ALICE, "Alice");
    let call = |n: u32| json!({"tool": "deploy", "owner_id": "emp-1", "params": {"n": n}, "window_seconds": 0});
    let failed = approved_in_console(&app, call(1), &alice_data).await;
    let ran = approved_in_console(&app, call(2), &alice_data).await;
    let r = app
        .client
        .post(app.url(&format!("/v1/confirmations/{failed}/outcome")))
        .bearer_auth(TOKEN_A)
        .json(&json!({"status": "failed", "error": "disk <b>full</b>"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // The list, as the bot's menu button opens it: no question named.
    let fragment: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("tgWebAppData", &alice_data)
        .append_pair("tgWebAppVersion", "8.0")
        .finish();
    let page = browser.page().await;
    page.goto(&format!("{}#{fragment}", app.url("/app"))).await;
    page.wait_for(
        &format!("[data-ended=\"{failed}\"]"),
        std::time::Duration::from_secs(20),
    )
    .await;
    let dom = page
        .eval("document.body.innerHTML")
        .await
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(dom.contains("id=\"ended\""), "{dom}");
    let (at_ran, at_failed) = (
        dom.find(&format!("data-ended=\"{ran}\"")).expect("listed"),
        dom.find(&format!("data-ended=\"{failed}\""))
            .expect("listed"),
    );
    assert!(at_ran < at_failed, "the latest decision first: {dom}");
    assert!(dom.contains("approved by Alice (@alice)"), "{dom}");
    // The agent's text as text, never as markup.
    assert!(
        dom.contains("🔴 failed: disk &lt;b&gt;full&lt;/b&gt;"),
        "{dom}"
    );
    assert!(
        !dom.contains("id=\"more-ended\""),
        "one page holds both: {dom}"
    );
}
