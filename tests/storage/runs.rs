//! What happened after the yes, in the store, every behaviour on both backends (as
//! `stores.rs` runs its tests: `sqlite::…`, `postgres::…`): a report taken once, by its
//! agent, on an approved call only, and streamed, audited and chained in the same
//! transaction; the calls owed a report marked `unknown` once, and a late report
//! replacing it; the last failed run recalled; what a window let through; and two
//! stores reporting at once on one database taking one report.

use std::sync::Arc;
use std::time::Duration;

use hitl_telegram::domain::audit;
use hitl_telegram::domain::ids::{CallbackToken, ToolName};
use hitl_telegram::domain::question::{Ending, Question, Status, Via};
use hitl_telegram::domain::run_report::{NewRunReport, RunStatus};
use hitl_telegram::service::now;
use hitl_telegram::storage::{Decided, RunReported, Store};

use crate::stores::{TestDb, on_both_backends, op, pending};

on_both_backends! {
    a_report_is_taken_once_from_its_agent_on_an_approved_call_only,
    a_call_owed_a_report_is_marked_unknown_once_and_a_late_report_replaces_it,
    the_last_failed_run_of_a_tool_is_recalled_and_a_later_success_clears_it,
    a_window_counts_the_calls_it_let_through_and_their_failures,
    of_two_stores_reporting_different_outcomes_at_once_exactly_one_is_taken,
    calls_and_their_reports_arriving_together_each_land_once_on_one_chain,
}

fn report(status: &str, error: Option<&str>) -> NewRunReport {
    NewRunReport::new(status, None, error.map(str::to_owned), Some(12)).unwrap()
}

/// A pending question stored and approved by an operator now; `expect`: the route's
/// `expect_outcome_seconds`.
async fn approved(s: &dyn Store, tool: &str, expect: Option<u64>) -> Question {
    let mut q = pending(None);
    q.tool = ToolName::parse(tool).unwrap();
    q.window_seconds = 0;
    q.expect_outcome_seconds = expect;
    s.insert(&q, now()).await.unwrap();
    let decision = Ending::Approved {
        by: op(7),
        once: false,
    }
    .decide(now());
    match s.decide(&q.id, &decision).await.unwrap() {
        Decided::Applied(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn kinds(s: &dyn Store, q: &Question) -> Vec<String> {
    s.events_for(&q.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

async fn a_report_is_taken_once_from_its_agent_on_an_approved_call_only(db: TestDb) {
    let s = db.store().await;
    let q = approved(&*s, "deploy", None).await;
    let failed = report("failed", Some("disk full"));
    assert!(matches!(
        s.report_run(&q.id, "someone-else", &failed, now())
            .await
            .unwrap(),
        RunReported::NotFound
    ));
    let taken = match s.report_run(&q.id, "agent", &failed, now()).await.unwrap() {
        RunReported::Taken(r) => r,
        other => panic!("{other:?}"),
    };
    let run = taken.run_report.clone().expect("the run");
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref(), Some("disk full"));
    assert_eq!(run.duration_ms, Some(12));
    // Read back the same, from the table.
    assert_eq!(s.get(&q.id).await.unwrap().unwrap().run_report, Some(run));
    assert!(matches!(
        s.report_run(&q.id, "agent", &failed, now()).await.unwrap(),
        RunReported::Same(_)
    ));
    assert!(matches!(
        s.report_run(&q.id, "agent", &report("executed", None), now())
            .await
            .unwrap(),
        RunReported::Conflict(_)
    ));
    let k = kinds(&*s, &q).await;
    assert_eq!(
        k.iter().filter(|k| *k == "outcome_reported").count(),
        1,
        "{k:?}"
    );
    // A webhook-less question streams its run to its agent.
    let events = s.agent_events("agent", 0, 100).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| e.kind == "status" && e.data.contains("\"step\":\"outcome\"")),
        "{events:?}"
    );
    audit::verify(&s.audit_rows(None).await.unwrap()).expect("the chain holds");

    // A pending question: nothing ran.
    let open = pending(None);
    s.insert(&open, now()).await.unwrap();
    assert!(matches!(
        s.report_run(&open.id, "agent", &failed, now())
            .await
            .unwrap(),
        RunReported::NotConfirmed(_)
    ));
}

async fn a_call_owed_a_report_is_marked_unknown_once_and_a_late_report_replaces_it(db: TestDb) {
    let s = db.store().await;
    let owed = approved(&*s, "deploy", Some(1)).await;
    let not_owed = approved(&*s, "deploy", None).await;
    assert!(
        s.overdue_runs(now(), 100).await.unwrap().is_empty(),
        "not yet"
    );
    let later = now() + Duration::from_secs(2);
    let marked = s.overdue_runs(later, 100).await.unwrap();
    let ids: Vec<_> = marked.iter().map(|q| &q.id).collect();
    assert_eq!(ids, [&owed.id]);
    assert_eq!(
        marked[0].run_report.as_ref().map(|e| e.status),
        Some(RunStatus::Unknown)
    );
    assert!(s.overdue_runs(later, 100).await.unwrap().is_empty(), "once");
    assert!(
        kinds(&*s, &owed)
            .await
            .contains(&"outcome_missing".to_owned())
    );
    assert!(
        s.get(&not_owed.id)
            .await
            .unwrap()
            .unwrap()
            .run_report
            .is_none()
    );

    // Not yet shown in Telegram (it has a message): a restart finds it.
    s.set_message_id(&owed.id, 5).await.unwrap();
    let late = report("executed", None);
    let r = match s.report_run(&owed.id, "agent", &late, later).await.unwrap() {
        RunReported::Taken(r) => r,
        other => panic!("{other:?}"),
    };
    let run = r.run_report.unwrap();
    assert_eq!(run.status, RunStatus::Executed);
    let unshown: Vec<_> = s
        .unshown_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert!(unshown.contains(&owed.id), "{unshown:?}");
    s.mark_run_shown(&owed.id, run.reported_at).await.unwrap();
    let unshown: Vec<_> = s
        .unshown_runs()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert!(!unshown.contains(&owed.id), "{unshown:?}");
}

async fn the_last_failed_run_of_a_tool_is_recalled_and_a_later_success_clears_it(db: TestDb) {
    let s = db.store().await;
    let tool = ToolName::parse("transfer").unwrap();
    let since = now() - Duration::from_secs(3600);
    assert!(s.recall_run("agent", &tool, since).await.unwrap().is_none());
    let first = approved(&*s, "transfer", None).await;
    s.report_run(
        &first.id,
        "agent",
        &report("failed", Some("no funds")),
        now(),
    )
    .await
    .unwrap();
    let recalled = s
        .recall_run("agent", &tool, since)
        .await
        .unwrap()
        .expect("recalled");
    assert_eq!(recalled.id, first.id.as_str());
    assert_eq!(recalled.status, "failed");
    assert_eq!(recalled.words.as_deref(), Some("no funds"));
    assert_eq!(recalled.approved_by, "op7");
    // Another agent's, another tool's, or one older than `since`: not recalled.
    assert!(
        s.recall_run("other-agent", &tool, since)
            .await
            .unwrap()
            .is_none()
    );
    let other_tool = ToolName::parse("deploy").unwrap();
    assert!(
        s.recall_run("agent", &other_tool, since)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.recall_run("agent", &tool, now() + Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    // A later run that went fine is the last one now.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let second = approved(&*s, "transfer", None).await;
    s.report_run(&second.id, "agent", &report("executed", None), now())
        .await
        .unwrap();
    assert!(s.recall_run("agent", &tool, since).await.unwrap().is_none());
}

/// A call a window confirmed at once, `after` the window opened.
fn window_hit(opener: &Question) -> Question {
    let mut q = opener.clone();
    q.id = hitl_telegram::domain::ids::QuestionId::generate();
    q.callback_token = CallbackToken::never_shown();
    q.status = Status::Confirmed;
    q.via = Some(Via::Window);
    q.decided_by = None;
    q.message_id = None;
    q.run_report = None;
    let t = now() + Duration::from_millis(2);
    q.created_at = t;
    q.decided_at = Some(t);
    q.expires_at = t + Duration::from_secs(60);
    q
}

/// A question stored and approved by an operator now, opening a 10-minute window.
async fn window_opened(s: &dyn Store) -> Question {
    let mut opener = pending(None);
    opener.window_seconds = 600;
    s.insert(&opener, now()).await.unwrap();
    let decision = Ending::Approved {
        by: op(7),
        once: false,
    }
    .decide(now());
    let Decided::Applied(opener) = s.decide(&opener.id, &decision).await.unwrap() else {
        panic!("not applied")
    };
    opener
}

async fn a_window_counts_the_calls_it_let_through_and_their_failures(db: TestDb) {
    let s = db.store().await;
    let opener = window_opened(&*s).await;
    assert_eq!(s.window_use(&opener.id).await.unwrap().calls, 0);
    let hits: Vec<Question> = (0..3).map(|_| window_hit(&opener)).collect();
    for h in &hits {
        s.insert(h, now()).await.unwrap();
    }
    s.report_run(&hits[0].id, "agent", &report("failed", Some("x")), now())
        .await
        .unwrap();
    s.report_run(&hits[1].id, "agent", &report("executed", None), now())
        .await
        .unwrap();
    let used = s.window_use(&opener.id).await.unwrap();
    assert_eq!((used.calls, used.failed), (3, 1));
}

async fn of_two_stores_reporting_different_outcomes_at_once_exactly_one_is_taken(db: TestDb) {
    let a = db.store().await;
    let b = db.store().await;
    for _ in 0..5 {
        let q = approved(&*a, "deploy", None).await;
        let stores: [Arc<dyn Store>; 2] = [a.clone(), b.clone()];
        let runs = stores.iter().enumerate().map(|(n, s)| {
            let (s, id) = (s.clone(), q.id.clone());
            let r = if n == 0 {
                report("executed", None)
            } else {
                report("failed", Some("boom"))
            };
            tokio::spawn(async move { s.report_run(&id, "agent", &r, now()).await.unwrap() })
        });
        let mut taken = 0;
        for run in runs {
            match run.await.unwrap() {
                RunReported::Taken(_) => taken += 1,
                RunReported::Conflict(_) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(taken, 1);
    }
    audit::verify(&a.audit_rows(None).await.unwrap()).expect("the chain holds");
}

/// An agent looping over allowed calls reports each run while its next call is stored,
/// so reports and window hits share commits (SQLite's group commit writes both); two
/// different reports of one run racing there take one, and every row lands once on one
/// chain.
async fn calls_and_their_reports_arriving_together_each_land_once_on_one_chain(db: TestDb) {
    let s = db.store().await;
    let opener = window_opened(&*s).await;
    let agents = (0..8).map(|n| {
        let (s, opener) = (s.clone(), opener.clone());
        tokio::spawn(async move {
            let mut calls = Vec::new();
            for _ in 0..5 {
                let hit = window_hit(&opener);
                s.insert(&hit, now()).await.unwrap();
                // Two reports of one run at once: one says it ran, the other not.
                let twice = [report("executed", None), report("failed", Some("boom"))].map(|r| {
                    let (s, id) = (s.clone(), hit.id.clone());
                    tokio::spawn(
                        async move { s.report_run(&id, "agent", &r, now()).await.unwrap() },
                    )
                });
                let mut taken = 0;
                for r in twice {
                    match r.await.unwrap() {
                        RunReported::Taken(q) => {
                            assert!(q.run_report.is_some(), "agent {n}: {q:?}");
                            taken += 1;
                        }
                        RunReported::Conflict(_) => {}
                        other => panic!("agent {n}: {other:?}"),
                    }
                }
                assert_eq!(taken, 1, "agent {n}");
                calls.push(hit);
            }
            calls
        })
    });
    let mut calls = Vec::new();
    for agent in agents {
        calls.extend(agent.await.unwrap());
    }
    for call in &calls {
        let stored = s.get(&call.id).await.unwrap().expect("stored");
        assert!(stored.run_report.is_some(), "{stored:?}");
        let k = kinds(&*s, call).await;
        assert_eq!(
            k.iter().filter(|k| *k == "outcome_reported").count(),
            1,
            "{k:?}"
        );
    }
    let used = s.window_use(&opener.id).await.unwrap();
    assert_eq!(used.calls, 40);
    let outcomes = s
        .agent_events("agent", 0, 1_000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.data.contains("\"step\":\"outcome\""))
        .count();
    assert_eq!(outcomes, 40);
    audit::verify(&s.audit_rows(None).await.unwrap()).expect("the chain holds");
}
