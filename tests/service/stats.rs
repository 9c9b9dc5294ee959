//! `/stats`: a route's decisions as its chat reads them, against a history seeded into
//! the database with known times to decide.

use std::time::Duration;

use hitl_telegram::domain::question::{Ending, Operator};
use hitl_telegram::service::now;
use hitl_telegram::storage::{Administration, Questions, SqliteStore};

use reqwest::StatusCode;

use super::console::{PAGE_WAIT, console_url};
use crate::support::app::*;
use crate::support::browser::Browser;
use crate::support::console::{as_user, console_get, with_console};
use crate::support::questions::question;

fn person(id: u64, name: &str) -> Operator {
    Operator {
        id,
        username: None,
        name: name.into(),
    }
}

/// Stores a question of `tool` in the ops chat asked an hour ago and ended by `ending`
/// `after` seconds.
async fn ended(store: &SqliteStore, tool: &str, ending: Ending, after: u64) {
    let asked = now() - Duration::from_secs(3600);
    let mut q = question().pending();
    q.chat_id = OPS_CHAT;
    q.tool = hitl_telegram::domain::ids::ToolName::parse(tool).unwrap();
    q.created_at = asked;
    q.expires_at = asked + Duration::from_secs(600);
    store.insert(&q, asked).await.unwrap();
    store
        .decide(&q.id, &ending.decide(asked + Duration::from_secs(after)))
        .await
        .unwrap();
}

/// Types `text` as Alice in the ops chat and returns the bot's answer.
async fn ask(app: &TestApp, text: &str) -> String {
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram.send_text_message(OPS_CHAT, alice(), text);
    app.telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .remove(before)
        .visible_text
}

/// Seeds the ops route's history: Alice approved deploy after 2, 4, 6, 8 and 10 s (median
/// 6 s, 90th percentile 10 s); Bob cancelled one after 30 s; a restart timed out; Carol
/// approved read_report twenty times within a second each and cancelled none.
async fn seed(app: &TestApp) {
    let store = SqliteStore::connect_existing(&app.db_url).await.unwrap();
    let alice_op = person(ALICE, "Alice");
    for after in [2, 4, 6, 8, 10] {
        let approve = Ending::Approved {
            by: alice_op.clone(),
            once: true,
        };
        ended(&store, "deploy", approve, after).await;
    }
    ended(&store, "deploy", Ending::Cancelled(person(BOB, "Bob")), 30).await;
    ended(
        &store,
        "restart_db",
        Ending::TimedOut {
            after: Duration::from_secs(600),
        },
        600,
    )
    .await;
    for _ in 0..20 {
        let approve = Ending::Approved {
            by: person(CAROL, "Carol"),
            once: true,
        };
        ended(&store, "read_report", approve, 1).await;
    }
    store.close().await;
}

#[tokio::test]
async fn stats_give_each_persons_and_tools_medians_and_how_calls_ended() {
    let app = TestApp::spawn().await;
    seed(&app).await;
    let text = ask(&app, "/stats").await;
    assert!(text.contains("Decisions in the last 7 days"), "{text}");
    assert!(
        text.contains("Route ops: 27 calls, 26 decided by a person"),
        "{text}"
    );
    assert!(
        text.contains(
            "• Alice: 5 decided (median 6.0 s, 90th percentile 10 s) · 5 approved, 0 cancelled"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "• Bob: 1 decided (median 30 s, 90th percentile 30 s) · 0 approved, 1 cancelled"
        ),
        "{text}"
    );
    assert!(
        text.contains("⚠️ approved 20 questions and cancelled none, half of them in under 1.0 s"),
        "{text}"
    );
    assert!(
        !text.contains(
            "Alice: 5 decided (median 6.0 s, 90th percentile 10 s) · 5 approved, 0 cancelled\n  ⚠️"
        ),
        "{text}"
    );
    assert!(
        text.contains("• deploy: 6 calls, 6 decided by a person (median 6.0 s, 90th percentile 30 s) · ✅ approved 5 (83%) · ❌ cancelled 1 (17%)"),
        "{text}"
    );
    assert!(
        text.contains("• restart_db: 1 call, 0 decided by a person · ⏰ timed out 1 (100%)"),
        "{text}"
    );

    // One day still holds the hour-old history; a period past 90 days is refused.
    assert!(
        ask(&app, "/stats 1")
            .await
            .contains("Decisions in the last 1 day")
    );
    let refused = ask(&app, "/stats 400").await;
    assert!(
        refused.contains("/stats takes a number of days from 1 to 90, not '400'"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_console_shows_the_same_figures_to_its_routes_approvers_only() {
    let app = TestApp::spawn_with_settings(with_console).await;
    seed(&app).await;
    let alice = as_user(&app, ALICE, "Alice");
    let (status, stats) = console_get(&app, "/app/api/stats", Some(&alice)).await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["days"], 7);
    let ops = stats["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "ops")
        .expect("Alice approves ops");
    assert_eq!(ops["total"]["asked"], 27);
    let alices = ops["people"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Alice")
        .unwrap();
    assert_eq!(alices["figures"]["median_seconds"], 6.0);
    assert_eq!(alices["figures"]["p90_seconds"], 10.0);
    let (status, _) = console_get(&app, "/app/api/stats?days=0", Some(&alice)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let mallory = as_user(&app, MALLORY, "Mallory");
    let (status, _) = console_get(&app, "/app/api/stats", Some(&mallory)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // In a real browser, the page shows what the chat says.
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let page = browser.page().await;
    page.goto(&console_url(&app, ALICE, "Alice", None)).await;
    page.wait_for("#stats [data-route=ops] [data-person]", PAGE_WAIT)
        .await;
    let shown = page.text("#stats [data-route=ops]").await;
    assert!(
        shown.contains("Alice: 5 decided (median 6.0 s, 90th percentile 10 s)"),
        "{shown}"
    );
    assert!(
        shown.contains("⚠️ approved 20 and cancelled none"),
        "{shown}"
    );
}
