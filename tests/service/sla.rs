//! A route's `sla_seconds`: a pending question's card is marked "at risk" at three
//! quarters of it and "overdue" past it, the agent's event stream and the audit trail
//! carry both steps, a breach is counted once (a restart counts it again nowhere), and
//! a decided card drops the mark for its outcome.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::app::*;
use crate::support::interactions::tap;

/// The ops route with a 2 s SLA: at risk from 1.5 s, overdue from 2 s.
fn with_sla(toml: String) -> String {
    toml.replacen(
        "forbid_self_approval = true\n",
        "forbid_self_approval = true\nsla_seconds = 2\n",
        1,
    )
}

fn breaches(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("hitl_sla_breaches_total{") && l.contains("route=\"ops\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn the_card_is_marked_at_risk_then_overdue_on_time_and_a_breach_counts_once() {
    let app = TestApp::spawn_with_settings(with_sla).await;
    let asked = Instant::now();
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().unwrap().to_owned();
    assert!(
        !app.telegram
            .message(OPS_CHAT, message_id)
            .visible_text
            .contains('⏰'),
        "no mark at first"
    );

    let at_risk = app
        .telegram
        .wait_for_message_text_containing(OPS_CHAT, message_id, "⏰ At risk")
        .await;
    assert!(
        asked.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        at_risk
            .visible_text
            .contains("the route's SLA wants a decision by"),
        "{}",
        at_risk.visible_text
    );
    assert_eq!(
        breaches(&app.metrics_text().await),
        0,
        "at risk is no breach"
    );

    let overdue = app
        .telegram
        .wait_for_message_text_containing(OPS_CHAT, message_id, "⏰ Overdue")
        .await;
    assert!(
        asked.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        !overdue.visible_text.contains("At risk"),
        "{}",
        overdue.visible_text
    );
    assert!(overdue.has_buttons(), "still pending, still decidable");
    assert_eq!(breaches(&app.metrics_text().await), 1);

    let kinds = app.audit_kinds(&id).await;
    let marks: Vec<&str> = kinds
        .iter()
        .map(String::as_str)
        .filter(|k| k.starts_with("sla_"))
        .collect();
    assert_eq!(marks, ["sla_at_risk", "sla_overdue"]);
    let (_, now) = app.get(&id).await;
    assert_eq!(now["status"], "pending", "{now}");
    assert_eq!(now["progress"]["sla"], "overdue", "{now}");

    // A restart neither marks nor counts again.
    let app = app.restart().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        breaches(&app.metrics_text().await),
        0,
        "a new process counts afresh"
    );
    let kinds = app.audit_kinds(&id).await;
    assert_eq!(kinds.iter().filter(|k| k.starts_with("sla_")).count(), 2);

    let question = app.telegram.message(OPS_CHAT, message_id);
    tap(&app, &question, "✅ Approve", alice()).await;
    app.wait_status(&id, "confirmed").await;
    let decided = app
        .telegram
        .wait_for_message(OPS_CHAT, message_id, "the outcome", |m| !m.has_buttons())
        .await;
    assert!(
        !decided.visible_text.contains('⏰'),
        "{}",
        decided.visible_text
    );
}

#[tokio::test]
async fn a_question_decided_within_its_sla_gets_no_mark_and_no_breach() {
    let app = TestApp::spawn_with_settings(with_sla).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().unwrap().to_owned();
    let question = app.telegram.message(OPS_CHAT, message_id);
    tap(&app, &question, "✅ Approve", alice()).await;
    app.wait_status(&id, "confirmed").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let card = app.telegram.message(OPS_CHAT, message_id);
    assert!(!card.visible_text.contains('⏰'), "{}", card.visible_text);
    assert_eq!(breaches(&app.metrics_text().await), 0);
    assert!(
        !app.audit_kinds(&id)
            .await
            .iter()
            .any(|k| k.starts_with("sla_"))
    );
}
