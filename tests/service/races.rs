//! Exactly once under contention: taps, withdrawals and deadlines racing on the same
//! requests store one outcome each, every loser is told that outcome, and the agent
//! sees it and no other.

use crate::support::app::*;
use crate::support::fake_telegram::CallbackQueryId;
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::Duration;

#[tokio::test]
async fn taps_and_withdrawals_racing_on_the_same_requests_end_each_in_exactly_one_outcome() {
    let app = TestApp::spawn().await;
    let mut asked = Vec::new();
    for i in 0..6 {
        asked.push(
            app.ask_suspended(json!({"tool": "race", "params": {"i": i}}))
                .await,
        );
    }

    let mut taps: Vec<(usize, CallbackQueryId)> = Vec::new();
    let mut withdrawals = Vec::new();
    let mut polls = Vec::new();
    for (n, (record, message_id)) in asked.iter().enumerate() {
        let id = record["id"].as_str().unwrap().to_owned();
        let poll = {
            let client = app.client.clone();
            let url = app.url(&format!("/v1/confirmations/{id}?wait=30"));
            tokio::spawn(async move {
                json_of(client.get(url).bearer_auth(TOKEN_A).send().await.unwrap()).await
            })
        };
        polls.push(poll);
        // Two approvers, both buttons, double taps: all at once.
        taps.push((
            n,
            app.telegram
                .tap(OPS_CHAT, *message_id, "✅ Approve", alice()),
        ));
        taps.push((
            n,
            app.telegram.tap(OPS_CHAT, *message_id, "❌ Cancel", bob()),
        ));
        let client = app.client.clone();
        let url = app.url(&format!("/v1/confirmations/{id}"));
        withdrawals.push(tokio::spawn(async move {
            json_of(
                client
                    .delete(url)
                    .bearer_auth(TOKEN_A)
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }));
        taps.push((
            n,
            app.telegram
                .tap(OPS_CHAT, *message_id, "✅ Approve", alice()),
        ));
        taps.push((
            n,
            app.telegram
                .tap(OPS_CHAT, *message_id, "❌ Cancel", alice()),
        ));
    }

    let mut stored: Vec<Value> = Vec::new();
    for (record, _) in &asked {
        let (_, r) = app
            .get_as(TOKEN_A, record["id"].as_str().unwrap(), Some("20"))
            .await;
        assert_ne!(r["status"], "pending", "{r}");
        stored.push(r);
    }
    // Everyone agrees with what is stored.
    let mut winners = vec![0; asked.len()];
    for (n, q) in &taps {
        let answer = app.telegram.wait_for_callback_answer(q).await.text.unwrap();
        let s = &stored[*n];
        match answer.as_str() {
            "✅ Approved" => {
                assert_eq!(
                    (s["status"].as_str(), s["via"].as_str()),
                    (Some("confirmed"), Some("operator"))
                );
                winners[*n] += 1;
            }
            "❌ Cancelled" => {
                assert_eq!(
                    (s["status"].as_str(), s["via"].as_str()),
                    (Some("cancelled"), Some("operator"))
                );
                winners[*n] += 1;
            }
            other => assert_eq!(
                other,
                format!("Already decided: {}", s["reason"].as_str().unwrap())
            ),
        }
    }
    for (n, w) in withdrawals.into_iter().enumerate() {
        let (status, body) = w.await.unwrap();
        if status == StatusCode::OK {
            assert_eq!(stored[n]["via"], "withdrawn");
            assert_eq!(body["via"], "withdrawn");
            winners[n] += 1;
        } else {
            assert_eq!(status, StatusCode::CONFLICT);
            assert_eq!(body["confirmation"], stored[n]);
        }
    }
    assert!(
        winners.iter().all(|w| *w == 1),
        "exactly one winner per request: {winners:?}"
    );
    for (n, p) in polls.into_iter().enumerate() {
        let (_, seen) = p.await.unwrap();
        assert_eq!(seen, stored[n], "the agent sees the stored outcome");
    }
    for (n, s) in stored.iter().enumerate() {
        assert_eq!(s["allowed"], s["status"] == "confirmed", "request {n}");
    }
}

#[tokio::test]
async fn a_tap_racing_the_deadline_either_wins_or_is_told_about_the_timeout() {
    let app = TestApp::spawn().await;
    for _ in 0..3 {
        let (record, message_id) = app
            .ask_suspended(json!({"tool": "t", "params": {}, "timeout_seconds": 2}))
            .await;
        let id = record["id"].as_str().unwrap();
        // Tap right around the deadline.
        let deadline = time::OffsetDateTime::parse(
            record["expires_at"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap();
        let left = deadline - time::OffsetDateTime::now_utc() - time::Duration::milliseconds(5);
        tokio::time::sleep(left.try_into().unwrap_or_default()).await;
        let q = app
            .telegram
            .tap(OPS_CHAT, message_id, "✅ Approve", alice());
        let answer = app
            .telegram
            .wait_for_callback_answer(&q)
            .await
            .text
            .unwrap();
        let (_, r) = app.get_as(TOKEN_A, id, Some("5")).await;
        match r["status"].as_str().unwrap() {
            "confirmed" => assert_eq!(answer, "✅ Approved"),
            "timeout" => assert!(
                answer.starts_with("Already decided: no operator decided"),
                "{answer}"
            ),
            other => panic!("unexpected {other}"),
        }
    }
}

#[tokio::test]
async fn the_smallest_pool_serves_many_waiting_agents_and_a_decision_together() {
    // `[database] pool_size = 2`, the floor: thirty agents long-polling one question
    // while an operator decides it, and a second question asked meanwhile, contend for
    // two connections; each is served, the decision counted once.
    let app = TestApp::spawn_with_settings(|t| {
        t.replacen("[database]\n", "[database]\npool_size = 2\n", 1)
    })
    .await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 1}}))
        .await;
    let id = record["id"].as_str().unwrap();
    let polls =
        futures_util::future::join_all((0..30).map(|_| app.get_as(TOKEN_A, id, Some("20"))));
    let decide = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.telegram
            .tap(OPS_CHAT, message_id, "✅ Approve", alice());
        app.ask_suspended(json!({"tool": "deploy", "params": {"v": 2}}))
            .await
    };
    let (answers, (second, _)) = tokio::join!(polls, decide);
    assert_eq!(second["status"], "pending");
    for (status, r) in answers {
        assert_eq!(status, StatusCode::OK);
        assert_eq!(r["status"], "confirmed", "{r}");
        assert_eq!(r["decided_by"]["id"], ALICE, "{r}");
    }
}

/// Creates beyond the admission bound (`api::admission::ADMITTED`, 64) wait their turn
/// instead of being read all at once: none is refused or lost for it, each is stored
/// once, and the queue is empty again afterwards.
#[tokio::test]
async fn a_crowd_of_creates_beyond_the_admission_bound_is_each_stored_once() {
    let app = TestApp::spawn_unthrottled().await;
    let crowd = 3 * 64 + 10;
    let answers = futures_util::future::join_all((0..crowd).map(|i| {
        app.create(
            json!({"tool": "crowd", "params": {"i": i}, "wait": "suspend",
                          "idempotency_key": format!("crowd-{i}")}),
        )
    }))
    .await;
    let (mut ids, mut calls) = (HashSet::new(), HashSet::new());
    for (i, (status, record)) in answers.iter().enumerate() {
        assert_eq!(*status, StatusCode::ACCEPTED, "{record}");
        let id = record["id"].as_str().unwrap();
        assert!(ids.insert(id.to_owned()), "one record per create");
        assert!(
            calls.insert(record["args_hash"].to_string()),
            "each its own call"
        );
        // Stored as asked (one group chat cannot post them all before their deadline:
        // those end as timeouts, honestly, as they would one by one).
        let (status, stored) = app.get(id).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            stored["args_hash"], record["args_hash"],
            "create {i}: {stored}"
        );
    }
    let metrics = app.metrics_text().await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "hitl_creates_awaiting_admission 0"),
        "{metrics}"
    );
}
