//! Approvers away, in the store, on both backends: an absence set (replacing the last),
//! read while it runs, ended once by `/back`, each audited; and a delegate's copy of a
//! question added once, streamed naming the delegate.

use std::time::Duration;

use hitl_telegram::domain::audit;
use hitl_telegram::domain::away::{Absence, Delegate};
use hitl_telegram::service::now;

use crate::stores::{TestDb, on_both_backends, op, pending};

on_both_backends! {
    an_absence_runs_until_its_time_or_back_and_each_change_is_audited,
    a_delegates_copy_is_added_once_and_only_while_pending,
}

async fn an_absence_runs_until_its_time_or_back_and_each_change_is_audited(db: TestDb) {
    let s = db.store().await;
    let t = now();
    let away = |until: Duration, delegate: bool| Absence {
        person: 7,
        until: t + until,
        delegate: delegate.then(|| Delegate {
            id: 9,
            name: "carol".into(),
        }),
    };
    s.set_away(&away(Duration::from_secs(60), false), &op(7), t)
        .await
        .unwrap();
    s.set_away(&away(Duration::from_secs(7200), true), &op(7), t)
        .await
        .unwrap();
    let running = s.absences(t).await.unwrap();
    assert_eq!(
        running,
        [away(Duration::from_secs(7200), true)],
        "the last one set"
    );
    assert!(
        s.absences(t + Duration::from_secs(7201))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(s.end_away(7, &op(7), t).await.unwrap());
    assert!(!s.end_away(7, &op(7), t).await.unwrap(), "once");
    assert!(s.absences(t).await.unwrap().is_empty());
    let rows = s.audit_rows(None).await.unwrap();
    audit::verify(&rows).expect("the audit chain holds");
    let kinds: Vec<&str> = rows.iter().map(|r| r.kind.as_str()).collect();
    assert_eq!(kinds, ["away_set", "away_set", "away_ended"]);
}

async fn a_delegates_copy_is_added_once_and_only_while_pending(db: TestDb) {
    let s = db.store().await;
    let q = pending(None);
    s.insert(&q, now()).await.unwrap();
    let copied = s
        .delegate_question(&q.id, "carol", 9, now())
        .await
        .unwrap()
        .expect("added");
    assert!(
        copied
            .copies
            .iter()
            .any(|c| c.recipient == "carol" && c.chat_id == 9)
    );
    assert!(
        s.delegate_question(&q.id, "carol", 9, now())
            .await
            .unwrap()
            .is_none()
    );
    let events = s.events_for(&q.id).await.unwrap();
    assert!(events.iter().any(|e| e.kind == "delegated"), "{events:?}");
}
