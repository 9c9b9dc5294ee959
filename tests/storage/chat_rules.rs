//! Rules accepted in a chat, in the store, on both backends (`sqlite::…`,
//! `postgres::…`): a proposal stored once under its id, a tap's move applied once (also
//! from two stores on one database, as two replicas), audited, and kept when the store
//! is reopened; the decisions people made, as proposals read them.

use std::time::Duration;

use hitl_telegram::domain::audit;
use hitl_telegram::domain::question::Ending;
use hitl_telegram::domain::rules::chat::chat_rule_id;
use hitl_telegram::domain::rules::{ChatRuleRecord, ChatRuleState, Effect, RawRule};
use hitl_telegram::service::now;

use crate::stores::{TestDb, on_both_backends, op, pending};

on_both_backends! {
    a_proposal_is_one_row_and_a_tap_moves_it_once_audited,
    of_two_stores_moving_one_rule_at_once_exactly_one_moves,
    the_history_of_proposals_is_what_people_decided,
}

fn proposal(route: &str, count: u64) -> ChatRuleRecord {
    let rule: RawRule = serde_json::from_value(serde_json::json!({
        "name": "suggested-read_report-0badcafe",
        "effect": "allow",
        "tools": ["read_report"],
        "agents": ["agent-a"],
        "where": [{"path": "env", "op": "eq", "value": "staging"}],
        "reason": format!("approved {count} times in 7 days, never cancelled"),
    }))
    .unwrap();
    ChatRuleRecord {
        id: chat_rule_id(route, &rule),
        route: route.into(),
        rule,
        summary: "`read_report` with `env = staging`".into(),
        toml: "[[rules]]\n".into(),
        count,
        state: ChatRuleState::Proposed,
        proposed_at: now(),
        added: None,
        changed: None,
    }
}

async fn a_proposal_is_one_row_and_a_tap_moves_it_once_audited(db: TestDb) {
    use ChatRuleState::*;
    let s = db.store().await;
    let first = s
        .propose_chat_rules(&[proposal("ops", 12)], now())
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    // The same proposal later, with more behind it: the same row, its count updated.
    let again = s
        .propose_chat_rules(&[proposal("ops", 14)], now())
        .await
        .unwrap();
    assert_eq!(
        (again[0].id.as_str(), again[0].count),
        (first[0].id.as_str(), 14)
    );
    assert!(
        s.chat_rules().await.unwrap().is_empty(),
        "a proposal decides nothing"
    );
    assert!(s.last_proposed_at("ops").await.unwrap().is_some());
    assert!(s.last_proposed_at("other").await.unwrap().is_none());

    let id = first[0].id.clone();
    let (from, dry) = s
        .move_chat_rule(&id, &[Proposed], DryRun, &op(1), now())
        .await
        .unwrap()
        .expect("moved");
    assert_eq!((from, dry.state), (Proposed, DryRun));
    assert_eq!(dry.added.as_ref().map(|(o, _)| o.id), Some(1));
    // A second tap of the same button moves nothing.
    assert!(
        s.move_chat_rule(&id, &[Proposed], DryRun, &op(1), now())
            .await
            .unwrap()
            .is_none()
    );
    // Proposed again while in force: it stays as it is.
    assert!(
        s.propose_chat_rules(&[proposal("ops", 15)], now())
            .await
            .unwrap()
            .is_empty()
    );
    let (_, on) = s
        .move_chat_rule(&id, &[Proposed, DryRun], Enforce, &op(2), now())
        .await
        .unwrap()
        .expect("enforced");
    assert_eq!(
        on.added.as_ref().map(|(o, _)| o.id),
        Some(1),
        "who added it stays"
    );
    assert_eq!(on.changed.as_ref().map(|(o, _)| o.id), Some(2));
    let in_force = s.chat_rules().await.unwrap();
    assert_eq!(in_force.len(), 1);
    assert_eq!(in_force[0].rule.effect, Effect::Allow);
    assert_eq!(in_force[0].state, Enforce);

    s.move_chat_rule(&id, &[DryRun, Enforce], Removed, &op(1), now())
        .await
        .unwrap()
        .expect("removed");
    assert!(s.chat_rules().await.unwrap().is_empty());
    let rows = s.audit_rows(None).await.unwrap();
    audit::verify(&rows).expect("the audit chain holds");
    let moves: Vec<String> = rows
        .iter()
        .filter(|r| r.kind == "chat_rule_moved")
        .map(|r| {
            let d: serde_json::Value = serde_json::from_str(&r.detail_text).unwrap();
            format!(
                "{}>{}",
                d["from"].as_str().unwrap(),
                d["to"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        moves,
        ["proposed>dry_run", "dry_run>enforce", "enforce>removed"]
    );

    // Kept across a reopen: removed stays removed, and may be proposed again.
    drop(s);
    let s = db.store().await;
    assert_eq!(s.chat_rule(&id).await.unwrap().unwrap().state, Removed);
    assert_eq!(
        s.propose_chat_rules(&[proposal("ops", 16)], now())
            .await
            .unwrap()
            .len(),
        1
    );
}

async fn of_two_stores_moving_one_rule_at_once_exactly_one_moves(db: TestDb) {
    let (a, b) = (db.store().await, db.store().await);
    let id = a
        .propose_chat_rules(&[proposal("ops", 12)], now())
        .await
        .unwrap()[0]
        .id
        .clone();
    let from = [ChatRuleState::Proposed];
    let (one, two) = (op(1), op(2));
    let (x, y) = tokio::join!(
        a.move_chat_rule(&id, &from, ChatRuleState::Enforce, &one, now()),
        b.move_chat_rule(&id, &from, ChatRuleState::Enforce, &two, now()),
    );
    let moved = [x.unwrap(), y.unwrap()].into_iter().flatten().count();
    assert_eq!(moved, 1);
    let rows = a.audit_rows(None).await.unwrap();
    assert_eq!(
        rows.iter().filter(|r| r.kind == "chat_rule_moved").count(),
        1
    );
}

async fn the_history_of_proposals_is_what_people_decided(db: TestDb) {
    let s = db.store().await;
    let asked = now() - Duration::from_secs(3600);
    let endings = [
        Ending::Approved {
            by: op(1),
            once: true,
        },
        Ending::Cancelled(op(2)),
        Ending::TimedOut {
            after: Duration::from_secs(60),
        },
    ];
    for ending in endings {
        let mut q = pending(None);
        q.created_at = asked;
        q.expires_at = asked + Duration::from_secs(600);
        s.insert(&q, asked).await.unwrap();
        s.decide(&q.id, &ending.decide(asked + Duration::from_secs(5)))
            .await
            .unwrap();
    }
    let since = now() - Duration::from_secs(7200);
    let history = s.decided_by_people("ops", since, 100).await.unwrap();
    let mut approved: Vec<bool> = history.iter().map(|d| d.approved).collect();
    approved.sort();
    assert_eq!(approved, [false, true], "a timeout is nobody's decision");
    assert!(
        s.decided_by_people("other", since, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let later = now() - Duration::from_secs(60);
    assert!(
        s.decided_by_people("ops", later, 100)
            .await
            .unwrap()
            .is_empty()
    );
}
