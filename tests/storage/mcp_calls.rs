//! Calls through an MCP gateway (issue 48) in the store, every behaviour on both
//! backends (as `stores.rs` runs its tests): a call's server and annotations read back
//! after the store is closed and opened again, a window is keyed by the server it was
//! opened through (no server included), and a reporter's `unknown` is kept apart from
//! the service's own.

use std::time::Duration;

use hitl_telegram::domain::mcp_call::{Annotations, ServerName};
use hitl_telegram::domain::question::{Decision, Ending, Question};
use hitl_telegram::domain::run_report::{NewRunReport, RunStatus};
use hitl_telegram::service::now;
use hitl_telegram::storage::{Decided, RunReported};

use crate::stores::{TestDb, on_both_backends, op};
use crate::support::questions::question;

on_both_backends! {
    a_calls_server_and_annotations_read_back_after_a_restart,
    a_window_is_keyed_by_the_server_it_was_opened_through,
    a_reported_unknown_is_not_overdue_and_a_later_report_replaces_it,
}

/// A pending call to `server` (none when `None`), carrying `annotations`.
fn to_server(server: Option<&str>, annotations: Option<serde_json::Value>) -> Question {
    let mut q = question().pending();
    q.server = server.map(|s| ServerName::parse(s).unwrap());
    q.annotations = annotations.map(|a| Annotations::from_value(&a).unwrap());
    q
}

/// Operator 1 approving now, with the question's window.
fn approval() -> Decision {
    Ending::Approved {
        by: op(1),
        once: false,
    }
    .decide(now())
}

async fn a_calls_server_and_annotations_read_back_after_a_restart(db: TestDb) {
    let s = db.store().await;
    let with = to_server(
        Some("fs"),
        Some(serde_json::json!({"readOnlyHint": true, "destructiveHint": false})),
    );
    let without = to_server(None, None);
    for q in [&with, &without] {
        s.insert(q, now()).await.unwrap();
    }
    s.close().await;
    let reopened = db.store().await;
    for q in [&with, &without] {
        let read = reopened.get(&q.id).await.unwrap().expect("stored");
        assert_eq!(read.server, q.server);
        assert_eq!(read.annotations, q.annotations);
    }
}

async fn a_window_is_keyed_by_the_server_it_was_opened_through(db: TestDb) {
    let s = db.store().await;
    let a = to_server(Some("fs-a"), None);
    s.insert(&a, now()).await.unwrap();
    assert!(matches!(
        s.decide(&a.id, &approval()).await.unwrap(),
        Decided::Applied(_)
    ));
    let key = a.window_key();
    let found = |s: &std::sync::Arc<dyn hitl_telegram::storage::Store>, server: Option<&str>| {
        let mut key = key.clone();
        key.server = server.map(|n| ServerName::parse(n).unwrap());
        let s = s.clone();
        async move {
            s.live_window(&key, now())
                .await
                .unwrap()
                .map(|w| w.opened_by)
        }
    };
    assert_eq!(found(&s, Some("fs-a")).await, Some(a.id.clone()));
    assert_eq!(found(&s, Some("fs-b")).await, None);
    assert_eq!(found(&s, None).await, None);

    // The same call with no server opens a window of its own beside it, and neither
    // replaces the other.
    let none = to_server(None, None);
    s.insert(&none, now()).await.unwrap();
    s.decide(&none.id, &approval()).await.unwrap();
    assert_eq!(found(&s, None).await, Some(none.id.clone()));
    assert_eq!(found(&s, Some("fs-a")).await, Some(a.id.clone()));

    // Read from the table by another store (a replica, a restart), and revoked one at a
    // time.
    let other = db.store().await;
    assert_eq!(found(&other, Some("fs-a")).await, Some(a.id.clone()));
    assert_eq!(found(&other, None).await, Some(none.id.clone()));
    let revoked = other
        .revoke_window(&a.id, &op(1), -1, now())
        .await
        .unwrap()
        .expect("a live window");
    assert_eq!(
        revoked.window.key.server.as_ref().map(ServerName::as_str),
        Some("fs-a")
    );
    assert_eq!(found(&other, Some("fs-a")).await, None);
    assert_eq!(found(&other, None).await, Some(none.id.clone()));
    assert_eq!(
        s.purge_expired_windows(now() + Duration::from_secs(61))
            .await
            .unwrap(),
        1,
        "the window of the call to no server, expired"
    );
}

async fn a_reported_unknown_is_not_overdue_and_a_later_report_replaces_it(db: TestDb) {
    let s = db.store().await;
    let q = to_server(Some("fs"), None);
    s.insert(&q, now()).await.unwrap();
    s.decide(&q.id, &approval()).await.unwrap();
    let unknown = NewRunReport::new("unknown", None, Some("upstream exited".into()), None).unwrap();
    let taken = match s.report_run(&q.id, "agent", &unknown, now()).await.unwrap() {
        RunReported::Taken(r) => r.run_report.expect("the run"),
        other => panic!("{other:?}"),
    };
    assert_eq!(taken.status, RunStatus::Unknown);
    assert!(!taken.overdue);
    assert_eq!(taken.error.as_deref(), Some("upstream exited"));
    let read = s.get(&q.id).await.unwrap().unwrap().run_report.unwrap();
    assert_eq!(read, taken);
    // The next approver of the tool is told, with the reporter's words.
    let recalled = s
        .recall_run("agent", &q.tool, now() - Duration::from_secs(60))
        .await
        .unwrap()
        .expect("recalled");
    assert_eq!(recalled.status, "unknown");
    assert_eq!(recalled.words.as_deref(), Some("upstream exited"));

    let executed = NewRunReport::new("executed", Some("ok".into()), None, None).unwrap();
    let replaced = match s
        .report_run(&q.id, "agent", &executed, now())
        .await
        .unwrap()
    {
        RunReported::Taken(r) => r.run_report.expect("the run"),
        other => panic!("{other:?}"),
    };
    assert_eq!(replaced.status, RunStatus::Executed);
    assert!(
        s.recall_run("agent", &q.tool, now() - Duration::from_secs(60))
            .await
            .unwrap()
            .is_none(),
        "a run that ended well is not recalled"
    );
}
