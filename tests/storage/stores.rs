//! The stores on their own, every behaviour on both backends: a module per backend
//! (`sqlite::…`, `postgres::…`) runs each test below on a database of its own.
//! Exactly-once decisions under contention (also from two stores on one database, as two
//! replicas would be), idempotency keys, windows, the audit chain, the outbox, and
//! reading back what was written.
//!
//! The PostgreSQL runs create a database per test on `HITL_POSTGRES_URL` (see
//! tests/support/postgres.rs) and skip with a note when no server answers, unless
//! `HITL_REQUIRE_POSTGRES=1`. What only SQLite has (file permissions) is tested last.

use std::sync::Arc;
use std::time::Duration;

use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::audit;
use hitl_telegram::domain::authority::{Authority, RouteAuthority};
use hitl_telegram::domain::ids::{IdempotencyKey, OwnerId, QuestionId};
use hitl_telegram::domain::interaction::Answer;
use hitl_telegram::domain::python;
use hitl_telegram::domain::question::{
    Decision, EditApplied, Edited, Ending, Operator, Question, Status,
};
use hitl_telegram::service::now;
use hitl_telegram::storage::{
    self, Administration, Answered, ConnectMode, Decided, DeliveryAttempt, Inserted, LiveWindow,
    Shown, SqliteStore, StorageError, Store,
};

use crate::support::postgres::PgDatabase;
use crate::support::questions::question;

/// One test's database, removed with this value (also `grants.rs`'s).
pub(crate) struct TestDb {
    url: String,
    _keep: Keep,
}

/// What keeps a test database alive: SQLite's folder, or PostgreSQL's database.
enum Keep {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] PgDatabase),
}

impl TestDb {
    /// A SQLite file in a folder that does not exist yet (the store creates it).
    pub(crate) fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().unwrap();
        TestDb {
            url: format!("sqlite://{}/nested/folder/t.db", dir.path().display()),
            _keep: Keep::Sqlite(dir),
        }
    }

    /// A fresh PostgreSQL database; `None`: the test skips (no server).
    pub(crate) async fn postgres() -> Option<TestDb> {
        let db = PgDatabase::create().await?;
        Some(TestDb {
            url: db.url.clone(),
            _keep: Keep::Postgres(db),
        })
    }

    /// A store on this database, migrated: as the service opens it. Each call is one
    /// more store (a process of its own, as far as the store can tell).
    pub(crate) async fn store(&self) -> Arc<dyn Store> {
        let s = self.unmigrated().await;
        s.migrate().await.unwrap();
        s
    }

    /// A store on this database without migrating: as the CLI tools open it.
    async fn unmigrated(&self) -> Arc<dyn Store> {
        storage::connect(&self.url, ConnectMode::Create)
            .await
            .unwrap()
    }

    fn is_postgres(&self) -> bool {
        matches!(self._keep, Keep::Postgres(_))
    }
}

/// Runs each named `async fn(TestDb)` once per backend, as `sqlite::NAME` and
/// `postgres::NAME` (of the module that invokes it, where `TestDb` must be in scope).
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(super::TestDb::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    if let Some(db) = super::TestDb::postgres().await {
                        super::$test(db).await;
                    }
                }
            )*
        }
    };
}
pub(crate) use on_both_backends;

on_both_backends! {
    a_record_reads_back_exactly_as_written,
    of_many_concurrent_decisions_exactly_one_is_applied,
    concurrent_decisions_from_two_stores_on_one_database_apply_exactly_once,
    an_operator_confirmation_opens_a_window_in_the_same_transaction,
    an_edited_approval_replaces_the_call_and_keeps_the_asked_one_in_one_write,
    a_shorter_window_never_cuts_a_longer_one_short,
    windows_are_found_by_another_store_on_the_same_database,
    concurrent_window_hits_are_each_stored_with_their_audit_event,
    window_hits_from_two_stores_at_once_keep_one_unbroken_audit_chain,
    window_hits_among_other_writes_read_back_exactly_and_keep_one_unbroken_audit_chain,
    two_stores_appending_at_once_keep_one_valid_audit_chain,
    stream_events_written_by_two_stores_are_seen_in_order_and_none_is_missed,
    an_idempotency_key_is_released_after_24_hours,
    a_decided_request_whose_key_is_held_answers_with_its_holder_and_the_chain_stays_whole,
    a_question_gains_a_copy_once_per_further_chat_while_pending,
    a_question_is_found_by_its_message_its_copies_and_its_strays,
    every_whole_read_gives_a_question_with_its_answers_copies_and_strays_in_order,
    operator_steps_each_move_a_question_once,
    answers_are_one_per_person_and_a_settling_answer_decides,
    webhooks_beyond_an_agents_backlog_bound_are_dropped_and_audited,
    revoking_a_window_closes_only_that_live_window_and_chains_its_audit_event,
    a_backup_copies_sqlite_and_points_postgres_to_pg_dump,
    replicas_configurations_count_while_renewed_and_stop_when_expired_or_withdrawn,
    pending_questions_and_live_windows_are_listed_for_one_agent_or_all,
}

async fn pending_questions_and_live_windows_are_listed_for_one_agent_or_all(db: TestDb) {
    let s = db.store().await;
    let late = {
        let mut q = pending(None);
        q.expires_at += Duration::from_secs(30);
        q
    };
    let soon = pending(None);
    let theirs = {
        let mut q = pending(None);
        q.agent = "other".into();
        q
    };
    let windowed = pending(None);
    for q in [&late, &soon, &theirs, &windowed] {
        s.insert(q, now()).await.unwrap();
    }
    s.decide(&windowed.id, &approved(1)).await.unwrap();
    let ids = |qs: Vec<Question>| qs.into_iter().map(|q| q.id).collect::<Vec<_>>();
    assert_eq!(
        ids(s.pending_of(Some("agent"), 10).await.unwrap()),
        [soon.id.clone(), late.id.clone()],
        "the soonest deadline first, that agent's only"
    );
    assert_eq!(s.pending_of(Some("agent"), 1).await.unwrap().len(), 1);
    assert_eq!(s.pending_of(None, 10).await.unwrap().len(), 3);
    assert_eq!(
        ids(s.pending_of(Some("other"), 10).await.unwrap()),
        std::slice::from_ref(&theirs.id)
    );
    let opened = |ws: Vec<LiveWindow>| {
        ws.into_iter()
            .map(|w| w.window.opened_by)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        opened(s.live_windows_of(Some("agent"), now()).await.unwrap()),
        std::slice::from_ref(&windowed.id)
    );
    assert_eq!(
        opened(s.live_windows_of(None, now()).await.unwrap()),
        std::slice::from_ref(&windowed.id)
    );
    assert!(
        s.live_windows_of(Some("other"), now())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        s.live_windows_of(None, now() + Duration::from_secs(61))
            .await
            .unwrap()
            .is_empty()
    );
}

/// A pending question of `agent` on route `ops`, with `key` as its idempotency key.
pub(crate) fn pending(key: Option<&str>) -> Question {
    question().idempotency_key(key).pending()
}

pub(crate) fn op(id: u64) -> Operator {
    Operator {
        id,
        username: None,
        name: format!("op{id}"),
    }
}

/// Operator `id` approving now, with the request's window.
fn approved(id: u64) -> Decision {
    Ending::Approved {
        by: op(id),
        once: false,
    }
    .decide(now())
}

/// The chain of the whole trail verifies; returns how many events it holds.
async fn chain_length(s: &dyn Store) -> u64 {
    let rows = s.audit_rows(None).await.unwrap();
    audit::verify(&rows).expect("the audit chain holds").events
}

async fn a_record_reads_back_exactly_as_written(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    assert!(matches!(
        s.insert(&r, now()).await.unwrap(),
        Inserted::New(_)
    ));
    assert_eq!(s.get(&r.id).await.unwrap().unwrap(), r);
    assert_eq!(
        s.find_by_token(&r.callback_token).await.unwrap().unwrap(),
        r
    );
    assert_eq!(s.count_pending("agent").await.unwrap(), 1);
    let gauges = s.gauges().await.unwrap();
    assert_eq!(gauges.pending_by_agent, vec![("agent".to_owned(), 1)]);
    assert_eq!(gauges.oldest_pending_since, Some(r.created_at));
}

/// Sixteen decisions of every kind on one request, spread over `stores`: exactly one
/// applies, and every other sees the stored outcome.
async fn decide_concurrently(stores: &[Arc<dyn Store>]) {
    let r = pending(None);
    stores[0].insert(&r, now()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let s = stores[i as usize % stores.len()].clone();
        let id = r.id.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = match i % 3 {
                0 => Ending::Approved {
                    by: op(i),
                    once: false,
                },
                1 => Ending::Cancelled(op(i)),
                _ => Ending::TimedOut {
                    after: Duration::from_secs(1),
                },
            };
            s.decide(&id, &outcome.decide(now())).await.unwrap()
        }));
    }
    let mut applied = Vec::new();
    let mut lost = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Decided::Applied(r) => applied.push(r),
            Decided::AlreadyTerminal(r) => lost.push(r),
            Decided::NotFound => panic!("not found"),
        }
    }
    assert_eq!(applied.len(), 1);
    assert_eq!(lost.len(), 15);
    for s in stores {
        let stored = s.get(&r.id).await.unwrap().unwrap();
        assert_eq!(stored, applied[0]);
        assert!(
            lost.iter().all(|l| *l == stored),
            "every loser sees the stored outcome"
        );
    }
    let trail = stores[0].events_for(&r.id).await.unwrap();
    let kinds: Vec<&str> = trail.iter().map(|e| e.kind.as_str()).collect();
    // "decided", or "timeout" when a timeout won.
    let decided = audit::decided(&applied[0]).kind;
    assert_eq!(kinds, ["requested", decided], "one decision audited");
}

async fn of_many_concurrent_decisions_exactly_one_is_applied(db: TestDb) {
    decide_concurrently(&[db.store().await]).await;
}

async fn concurrent_decisions_from_two_stores_on_one_database_apply_exactly_once(db: TestDb) {
    decide_concurrently(&[db.store().await, db.store().await]).await;
}

async fn an_operator_confirmation_opens_a_window_in_the_same_transaction(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    assert!(
        s.live_window(&r.window_key(), now())
            .await
            .unwrap()
            .is_none()
    );
    s.decide(&r.id, &approved(1)).await.unwrap();
    let w = s
        .live_window(&r.window_key(), now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(w.opened_by, r.id);
    assert!(
        s.live_window(&r.window_key(), now() + Duration::from_secs(61))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        s.purge_expired_windows(now() + Duration::from_secs(61))
            .await
            .unwrap(),
        1
    );
}

async fn an_edited_approval_replaces_the_call_and_keeps_the_asked_one_in_one_write(db: TestDb) {
    let s = db.store().await;
    let mut r = pending(None);
    r.args_schema = Some(r#"{"type": "object"}"#.into());
    s.insert(&r, now()).await.unwrap();
    let edited = python::json::parse_object(r#"{"a": 2}"#).unwrap();
    let edit = EditApplied {
        params_json: r#"{"a": 2}"#.into(),
        args_hash: ArgsHash::of(&edited),
    };
    let decision = Decision {
        edit: Some(edit.clone()),
        ..approved(1)
    };
    s.decide(&r.id, &decision).await.unwrap();
    let stored = s.get(&r.id).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Confirmed);
    assert_eq!(stored.params_json, edit.params_json);
    assert_eq!(stored.args_hash, edit.args_hash);
    assert_eq!(stored.args_schema, r.args_schema);
    assert_eq!(
        stored.edited,
        Some(Edited {
            original_params_json: r.params_json.clone(),
            original_args_hash: r.args_hash.clone(),
        })
    );
    assert_eq!(stored.asked_args_hash(), &r.args_hash);
    // The window is the edited call's; the call as asked has none.
    let mut key = r.window_key();
    assert!(s.live_window(&key, now()).await.unwrap().is_none());
    key.args_hash = edit.args_hash.clone();
    assert_eq!(
        s.live_window(&key, now()).await.unwrap().unwrap().opened_by,
        r.id
    );
    // A second decision changes nothing: not the outcome, not the call.
    let other = python::json::parse_object(r#"{"a": 3}"#).unwrap();
    let late = Decision {
        edit: Some(EditApplied {
            params_json: r#"{"a": 3}"#.into(),
            args_hash: ArgsHash::of(&other),
        }),
        ..approved(2)
    };
    s.decide(&r.id, &late).await.unwrap();
    let after = s.get(&r.id).await.unwrap().unwrap();
    assert_eq!(after.params_json, edit.params_json);
    assert_eq!(after.edited, stored.edited);
    chain_length(&*s).await;
}

async fn a_shorter_window_never_cuts_a_longer_one_short(db: TestDb) {
    let s = db.store().await;
    let long = question().window_seconds(3600).pending();
    let short = question().window_seconds(60).pending();
    for r in [&long, &short] {
        s.insert(r, now()).await.unwrap();
        s.decide(&r.id, &approved(1)).await.unwrap();
    }
    let w = s
        .live_window(&long.window_key(), now() + Duration::from_secs(120))
        .await
        .unwrap()
        .expect("the hour-long window is still open after the short one ended");
    assert_eq!(w.opened_by, long.id);
}

async fn windows_are_found_by_another_store_on_the_same_database(db: TestDb) {
    let first = db.store().await;
    let r = pending(None);
    first.insert(&r, now()).await.unwrap();
    first.decide(&r.id, &approved(1)).await.unwrap();
    // Another store, migrated (the service restarted, or another replica) and not (a
    // CLI tool): both see the window, while the first store stays open.
    let migrated = db.store().await;
    let plain = db.unmigrated().await;
    for s in [&first, &migrated, &plain] {
        let w = s
            .live_window(&r.window_key(), now())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(w.opened_by, r.id);
        assert!(
            s.live_window(&r.window_key(), now() + Duration::from_secs(61))
                .await
                .unwrap()
                .is_none()
        );
    }
    // And after every store closed (a restart).
    for s in [&first, &migrated, &plain] {
        s.close().await;
    }
    let reopened = db.store().await;
    let w = reopened.live_window(&r.window_key(), now()).await.unwrap();
    assert_eq!(w.map(|w| w.opened_by), Some(r.id.clone()));
    if db.is_postgres() {
        let (first, migrated) = (db.store().await, db.store().await);
        // No window cache on PostgreSQL: a revocation by one store (replica) closes the
        // window for every other at once.
        let revoked = migrated
            .revoke_window(&r.id, &op(2), -1, now())
            .await
            .unwrap();
        assert!(revoked.is_some());
        assert!(
            first
                .live_window(&r.window_key(), now())
                .await
                .unwrap()
                .is_none()
        );
    }
}

fn window_hit() -> Question {
    question().window_hit("confirmed by a window".into())
}

async fn concurrent_window_hits_are_each_stored_with_their_audit_event(db: TestDb) {
    let s = db.store().await;
    let hits: Vec<Question> = (0..64).map(|_| window_hit()).collect();
    let stored = futures_util::future::join_all(hits.iter().map(|h| {
        let s = s.clone();
        async move { s.insert(h, now()).await }
    }))
    .await;
    for (hit, result) in hits.iter().zip(stored) {
        match result.unwrap() {
            Inserted::New(r) => assert_eq!(r.id, hit.id),
            Inserted::Existing(_) => panic!("a window hit is a new record"),
        }
        let back = s.get(&hit.id).await.unwrap().expect("stored");
        assert_eq!(back.status, Status::Confirmed);
        assert_eq!(s.events_for(&hit.id).await.unwrap().len(), 1);
    }
    assert_eq!(chain_length(s.as_ref()).await, 64);
}

/// Two replicas' group commits on one database: each batch chains onto the head the
/// other left, whatever the interleaving.
async fn window_hits_from_two_stores_at_once_keep_one_unbroken_audit_chain(db: TestDb) {
    let (a, b) = (db.store().await, db.store().await);
    let hits: Vec<Question> = (0..200).map(|_| window_hit()).collect();
    let stored = futures_util::future::join_all(hits.iter().enumerate().map(|(n, h)| {
        let s = if n % 2 == 0 { a.clone() } else { b.clone() };
        async move { s.insert(h, now()).await }
    }))
    .await;
    for result in stored {
        assert!(matches!(result.unwrap(), Inserted::New(_)));
    }
    for hit in &hits {
        assert_eq!(a.events_for(&hit.id).await.unwrap().len(), 1);
    }
    assert_eq!(chain_length(a.as_ref()).await, 200);
    assert_eq!(chain_length(b.as_ref()).await, 200);
}

/// A window hit as the service stores it, with text that must come back to the byte.
/// (Every control character but NUL: no text the service stores holds one, since
/// PostgreSQL's `text` cannot; the briefing and Telegram's texts escape it.)
fn window_hit_numbered(n: usize, key: Option<&str>) -> Question {
    question()
        .briefing(format!(
            "tool with: a=1 \u{1} \u{7f} \u{202e} ünïcödé 🚀 {n}"
        ))
        .context(n.is_multiple_of(2).then(|| "ctx\nline two".to_owned()))
        .window_requested_seconds(n.is_multiple_of(3).then_some(86_400))
        .idempotency_key(key)
        .window_hit(format!("confirmed by a window (hit {n})"))
}

async fn window_hits_among_other_writes_read_back_exactly_and_keep_one_unbroken_audit_chain(
    db: TestDb,
) {
    let s = db.store().await;
    let mut tasks = Vec::new();
    let mut hits = Vec::new();
    for round in 0..4 {
        for n in 0..48usize {
            // Every sixth hit carries an idempotency key (on SQLite, written by the
            // group commit's own connection too, as long as the key is free).
            let key = n.is_multiple_of(6).then(|| format!("k{round}-{n}"));
            let hit = window_hit_numbered(round * 100 + n, key.as_deref());
            hits.push(hit.clone());
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                assert!(matches!(
                    s.insert(&hit, now()).await.unwrap(),
                    Inserted::New(_)
                ));
            }));
        }
        for _ in 0..6 {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let r = pending(None);
                s.insert(&r, now()).await.unwrap();
                assert!(matches!(
                    s.decide(&r.id, &approved(7)).await.unwrap(),
                    Decided::Applied(_)
                ));
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    for hit in &hits {
        assert_eq!(&s.get(&hit.id).await.unwrap().unwrap(), hit);
        assert_eq!(s.events_for(&hit.id).await.unwrap().len(), 1);
    }
    let check = |rows: &[audit::StoredRow]| {
        audit::verify(rows).expect("the chain is unbroken");
    };
    let rows = s.audit_rows(None).await.unwrap();
    // A hit's one event, and at least `requested` and `decided` for each of the others.
    assert!(
        rows.len() >= hits.len() + 4 * 6 * 2,
        "{} events",
        rows.len()
    );
    check(&rows);
    let before = rows.len();

    // After a restart the tip is read from the database: the next hits chain on.
    s.close().await;
    drop(s);
    let s = db.store().await;
    s.insert(&window_hit_numbered(999, None), now())
        .await
        .unwrap();
    let rows = s.audit_rows(None).await.unwrap();
    assert_eq!(rows.len(), before + 1);
    check(&rows);
}

async fn two_stores_appending_at_once_keep_one_valid_audit_chain(db: TestDb) {
    let stores = [db.store().await, db.store().await];
    let mut tasks = Vec::new();
    for i in 0..24u64 {
        let s = stores[i as usize % 2].clone();
        tasks.push(tokio::spawn(async move {
            let r = pending(None);
            s.insert(&r, now()).await.unwrap();
            s.decide(&r.id, &approved(i)).await.unwrap();
            s.insert(&window_hit(), now()).await.unwrap();
            s.record_event(audit::copy_failed(r.id.as_str(), 5, "test", now()))
                .await
                .unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Requested, decided, a window hit and a refused copy each: one chain, no fork.
    for s in &stores {
        assert_eq!(chain_length(s.as_ref()).await, 24 * 4);
    }
    let (rows, statuses) = stores[1].audit_snapshot().await.unwrap();
    let report = audit::check(&rows, &statuses, None);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        stores[0].audit_head().await.unwrap(),
        report.head.expect("a head")
    );
}

async fn stream_events_written_by_two_stores_are_seen_in_order_and_none_is_missed(db: TestDb) {
    let stores = [db.store().await, db.store().await];
    let reader = db.store().await;
    let writers: Vec<_> = (0..40usize)
        .map(|i| {
            let s = stores[i % 2].clone();
            tokio::spawn(async move {
                s.insert(&pending(None), now()).await.unwrap();
            })
        })
        .collect();
    // Resumes after the last event seen, as an agent does with Last-Event-ID: an event
    // numbered before it but visible only later would be missed.
    let (mut after, mut seen) = (0, 0);
    loop {
        // Checked before the read, so the last read comes after every commit.
        let finished = writers.iter().all(|w| w.is_finished());
        for e in reader.agent_events("agent", after, 1000).await.unwrap() {
            assert!(e.seq > after, "{} after {after}", e.seq);
            after = e.seq;
            seen += 1;
        }
        if finished {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(seen, 40, "every request's status event was seen");
    assert_eq!(reader.last_agent_event("agent").await.unwrap(), after);
}

async fn an_idempotency_key_is_released_after_24_hours(db: TestDb) {
    let s = db.store().await;
    let first = pending(Some("k"));
    s.insert(&first, now()).await.unwrap();
    let second = pending(Some("k"));
    match s.insert(&second, now()).await.unwrap() {
        Inserted::Existing(e) => assert_eq!(e.id, first.id),
        Inserted::New(_) => panic!("same key within 24 h must return the first"),
    }
    let key = IdempotencyKey::parse("k").unwrap();
    assert_eq!(
        s.find_by_idempotency_key("agent", &key, now())
            .await
            .unwrap()
            .map(|r| r.id),
        Some(first.id.clone())
    );
    let later = now() + Duration::from_secs(24 * 3600 + 1);
    assert!(
        s.find_by_idempotency_key("agent", &key, later)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        s.insert(&second, later).await.unwrap(),
        Inserted::New(_)
    ));
}

async fn a_decided_request_whose_key_is_held_answers_with_its_holder_and_the_chain_stays_whole(
    db: TestDb,
) {
    let s = db.store().await;
    let first = window_hit_numbered(1, Some("k"));
    assert!(matches!(
        s.insert(&first, now()).await.unwrap(),
        Inserted::New(_)
    ));
    // The same key again, decided or pending: the request that holds it answers.
    for again in [window_hit_numbered(2, Some("k")), pending(Some("k"))] {
        match s.insert(&again, now()).await.unwrap() {
            Inserted::Existing(e) => assert_eq!(e.id, first.id),
            Inserted::New(_) => panic!("a held key must answer with its holder"),
        }
        assert!(
            s.get(&again.id).await.unwrap().is_none(),
            "nothing of it stored"
        );
    }
    // The writes after a refused one chain on, and a key past its 24 h is free again.
    let next = window_hit_numbered(3, Some("k2"));
    assert!(matches!(
        s.insert(&next, now()).await.unwrap(),
        Inserted::New(_)
    ));
    let later = now() + Duration::from_secs(24 * 3600 + 1);
    let reused = window_hit_numbered(4, Some("k"));
    assert!(matches!(
        s.insert(&reused, later).await.unwrap(),
        Inserted::New(_)
    ));
    for stored in [&first, &next, &reused] {
        assert_eq!(s.events_for(&stored.id).await.unwrap().len(), 1);
    }
    let rows = s.audit_rows(None).await.unwrap();
    assert_eq!(rows.len(), 3, "one event per stored request");
    audit::verify(&rows).expect("the chain is unbroken");
}

async fn a_question_gains_a_copy_once_per_further_chat_while_pending(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    assert!(s.add_copy(&r.id, "bob", 222, now()).await.unwrap());
    assert!(
        !s.add_copy(&r.id, "bob", 222, now()).await.unwrap(),
        "same chat again"
    );
    assert!(
        !s.add_copy(&r.id, "self", r.chat_id, now()).await.unwrap(),
        "its own chat"
    );
    assert!(s.add_copy(&r.id, "carol", 333, now()).await.unwrap());
    let got = s.get(&r.id).await.unwrap().unwrap();
    let copies: Vec<(&str, i64)> = got
        .copies
        .iter()
        .map(|c| (c.recipient.as_str(), c.chat_id))
        .collect();
    assert_eq!(copies, [("bob", 222), ("carol", 333)], "in the order added");
}

/// Every read of a whole question (by id, token, message, chat, the pending and ended
/// lists, the unshown outcomes) gives its answers, copies and strays exactly as written
/// and in the order written: the values, who answered, the flags, and which messages
/// show the outcome. They are read in the same statement as the question.
async fn every_whole_read_gives_a_question_with_its_answers_copies_and_strays_in_order(db: TestDb) {
    let s = db.store().await;
    let mut r = pending(None);
    r.chat_id = -31;
    s.insert(&r, now()).await.unwrap();
    s.set_message_id(&r.id, 42).await.unwrap();
    let answers = [
        Answer {
            reason: Some("looks \"fine\" — ✓".to_owned()),
            once: true,
            ..answer(7, serde_json::json!({"amount": 1200.5, "to": ["a", "b"]}))
        },
        Answer {
            by: Some(Operator {
                id: 3,
                username: Some("carol".to_owned()),
                name: "Carol".to_owned(),
            }),
            ..answer(3, serde_json::json!("ünïcode"))
        },
        Answer {
            by: None,
            is_default: true,
            ..answer(5, serde_json::json!(null))
        },
    ];
    for a in &answers {
        let added = s.add_answer(&r.id, a, None, None).await.unwrap();
        assert!(matches!(added, Answered::Added(_)), "{added:?}");
    }
    for (recipient, chat) in [("zed", 900), ("bob", 222), ("amy", 555)] {
        assert!(s.add_copy(&r.id, recipient, chat, now()).await.unwrap());
    }
    s.set_copy_message_id(&r.id, 222, 7, now()).await.unwrap();
    s.set_copy_message_id(&r.id, 900, 8, now()).await.unwrap();
    for (chat, message) in [(777, 9), (333, 2)] {
        s.add_stray(&r.id, chat, message, now()).await.unwrap();
    }
    s.decide(&r.id, &approved(1)).await.unwrap();
    s.mark_shown(&r.id, Shown::CopyDecision { chat_id: 222 })
        .await
        .unwrap();
    let stray = Shown::StrayDecision {
        chat_id: 333,
        message_id: 2,
    };
    s.mark_shown(&r.id, stray).await.unwrap();

    let got = s.get(&r.id).await.unwrap().unwrap();
    assert_eq!(got.answers, answers, "every answer, in the order given");
    let copies: Vec<_> = got
        .copies
        .iter()
        .map(|c| {
            (
                c.recipient.as_str(),
                c.chat_id,
                c.message_id,
                c.outcome_shown,
            )
        })
        .collect();
    assert_eq!(
        copies,
        [
            ("zed", 900, Some(8), false),
            ("bob", 222, Some(7), true),
            ("amy", 555, None, false)
        ],
        "in the order added"
    );
    let strays: Vec<_> = got
        .strays
        .iter()
        .map(|s| (s.chat_id, s.message_id, s.outcome_shown))
        .collect();
    assert_eq!(strays, [(777, 9, false), (333, 2, true)]);
    let same = |q: Option<Question>, how: &str| assert_eq!(q.as_ref(), Some(&got), "{how}");
    same(s.find_by_token(&r.callback_token).await.unwrap(), "token");
    same(s.find_by_message(222, 7).await.unwrap(), "copy's message");
    same(s.find_by_message(333, 2).await.unwrap(), "stray's message");
    let unshown = s.unshown_decisions().await.unwrap();
    same(
        unshown.into_iter().find(|q| q.id == r.id),
        "unshown outcomes",
    );
    let ended = s.ended_in_chats(&[222], None, 10).await.unwrap();
    same(ended.into_iter().next(), "ended in a copy's chat");

    // A question with none of them reads back with none, on both backends alike.
    let bare = pending(None);
    s.insert(&bare, now()).await.unwrap();
    let listed = s.pending_in_chat(bare.chat_id).await.unwrap();
    let bare_read = listed.into_iter().find(|q| q.id == bare.id).unwrap();
    assert_eq!(bare_read, bare);
}

async fn a_question_is_found_by_its_message_its_copies_and_its_strays(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    assert!(!s.pending().await.unwrap()[0].delivered);
    s.set_message_id(&r.id, 42).await.unwrap();
    s.add_copy(&r.id, "bob", 222, now()).await.unwrap();
    assert!(
        !s.pending().await.unwrap()[0].delivered,
        "a copy is not posted yet"
    );
    s.set_copy_message_id(&r.id, 222, 7, now()).await.unwrap();
    s.mark_shown(&r.id, Shown::Attachment).await.unwrap();
    let entry = &s.pending().await.unwrap()[0];
    assert!(entry.delivered && entry.attached && entry.route == "ops");
    let stray = s.add_stray(&r.id, 333, 9, now()).await.unwrap().unwrap();
    assert_eq!(stray.strays.len(), 1);
    let again = s.add_stray(&r.id, 333, 9, now()).await.unwrap().unwrap();
    assert_eq!(again.strays.len(), 1, "a stray is learned once");
    let own = s.add_stray(&r.id, -1, 42, now()).await.unwrap().unwrap();
    assert_eq!(own.strays.len(), 1, "its own message is no stray");
    for (chat, message) in [(-1, 42), (222, 7), (333, 9)] {
        let found = s.find_by_message(chat, message).await.unwrap();
        assert_eq!(found.map(|f| f.id), Some(r.id.clone()), "{chat}/{message}");
    }
    assert!(s.find_by_message(222, 42).await.unwrap().is_none());
    assert_eq!(s.pending_in_chat(-1).await.unwrap().len(), 1);

    s.decide(&r.id, &approved(1)).await.unwrap();
    assert_eq!(s.unshown_decisions().await.unwrap().len(), 1);
    s.mark_shown(&r.id, Shown::Decision).await.unwrap();
    s.mark_shown(&r.id, Shown::CopyDecision { chat_id: 222 })
        .await
        .unwrap();
    assert_eq!(s.unshown_decisions().await.unwrap().len(), 1, "the stray");
    let stray = Shown::StrayDecision {
        chat_id: 333,
        message_id: 9,
    };
    s.mark_shown(&r.id, stray).await.unwrap();
    assert!(s.unshown_decisions().await.unwrap().is_empty());
    let kinds: Vec<String> = s
        .events_for(&r.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("requested"));
    assert_eq!(kinds.last().map(String::as_str), Some("decided"));
    assert_eq!(chain_length(s.as_ref()).await, kinds.len() as u64);
}

async fn operator_steps_each_move_a_question_once(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    let to = r.expires_at + Duration::from_secs(300);
    let moved = s
        .extend(&r.id, r.expires_at, to, &op(1), now())
        .await
        .unwrap();
    assert_eq!(
        moved.map(|m| (m.expires_at, m.progress.extensions)),
        Some((to, 1))
    );
    assert!(
        s.extend(&r.id, r.expires_at, to, &op(2), now())
            .await
            .unwrap()
            .is_none(),
        "a second tap that saw the old deadline moves nothing"
    );
    assert!(
        s.claim_reminders(&r.id, 0, 1, now())
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        s.claim_reminders(&r.id, 0, 1, now())
            .await
            .unwrap()
            .is_none()
    );
    let escalated = s
        .escalate(&r.id, "boss", 999, now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(escalated.copies.len(), 1);
    assert!(
        s.escalate(&r.id, "boss", 999, now())
            .await
            .unwrap()
            .is_none()
    );

    let asked = s
        .request_reason(&r.id, &op(3), -1, now())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(asked.progress.reasons_requested, 1);
    s.set_reason_prompt(&r.id, 3, 77).await.unwrap();
    let found = s.reason_request_for(-1, 77, None, 3).await.unwrap();
    assert_eq!(found.map(|f| f.id), Some(r.id.clone()));
    assert!(
        s.reason_request_for(-1, 77, None, 4)
            .await
            .unwrap()
            .is_none()
    );
    let named = s.reason_request_for(-1, 1, Some(&r.id), 3).await.unwrap();
    assert_eq!(named.map(|f| f.id), Some(r.id.clone()));

    s.set_selection(&r.id, 3, &["a".into(), "b".into()])
        .await
        .unwrap();
    assert_eq!(s.selection(&r.id, 3).await.unwrap(), ["a", "b"]);
    assert!(s.selection(&r.id, 4).await.unwrap().is_empty());

    s.move_route_chat("ops", -1, -100, now()).await.unwrap();
    assert_eq!(s.route_chats().await.unwrap(), [("ops".to_owned(), -100)]);
    assert_eq!(s.get(&r.id).await.unwrap().unwrap().chat_id, -100);

    s.decide(&r.id, &approved(1)).await.unwrap();
    assert!(
        s.request_reason(&r.id, &op(3), -1, now())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.extend(&r.id, to, to, &op(1), now())
            .await
            .unwrap()
            .is_none()
    );
    let steps = s.agent_events("agent", 0, 100).await.unwrap();
    assert!(steps.len() >= 6, "each step streamed: {steps:?}");
    chain_length(s.as_ref()).await;
}

fn answer(user: u64, value: serde_json::Value) -> Answer {
    Answer {
        respondent: format!("{user}"),
        by: Some(op(user)),
        value,
        is_default: false,
        once: false,
        reason: None,
        at: now(),
    }
}

/// The console's audit event of an answer (`also`), as the console sends it.
fn console_event(r: &Question, user: u64) -> audit::NewEvent {
    audit::console_decision(
        r.id.as_str(),
        &op(user),
        "approve",
        r.args_hash.as_str(),
        false,
        true,
        now(),
    )
}

async fn answers_are_one_per_person_and_a_settling_answer_decides(db: TestDb) {
    let s = db.store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    let first = s
        .add_answer(&r.id, &answer(1, serde_json::json!(true)), None, None)
        .await
        .unwrap();
    assert!(matches!(first, Answered::Added(ref q) if q.answers.len() == 1));
    let twice = s
        .add_answer(
            &r.id,
            &answer(1, serde_json::json!(false)),
            None,
            Some(&console_event(&r, 1)),
        )
        .await
        .unwrap();
    assert!(matches!(twice, Answered::AlreadyAnswered(_)));
    let settling = approved(2);
    let settled = s
        .add_answer(
            &r.id,
            &answer(2, serde_json::json!(true)),
            Some(&settling),
            Some(&console_event(&r, 2)),
        )
        .await
        .unwrap();
    let Answered::Added(q) = settled else {
        panic!("the second person's answer is stored");
    };
    assert_eq!((q.answers.len(), q.status), (2, Status::Confirmed));
    // The console's event is written with the answer that counted, between its
    // `answered` and the decision, and never with the one that was refused.
    let trail: Vec<(String, String)> = s
        .events_for(&r.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.actor))
        .collect();
    let user2 = "telegram:2".to_owned();
    let from = trail
        .iter()
        .position(|e| *e == ("answered".to_owned(), user2.clone()))
        .expect("the second answer audited");
    assert_eq!(
        trail[from..]
            .iter()
            .take(3)
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>(),
        ["answered", "console_decision", "decided"],
        "{trail:?}"
    );
    assert_eq!(
        trail
            .iter()
            .filter(|(k, _)| k == "console_decision")
            .count(),
        1,
        "{trail:?}"
    );
    let late = s
        .add_answer(&r.id, &answer(3, serde_json::json!(true)), None, None)
        .await
        .unwrap();
    assert!(matches!(late, Answered::Closed(_)));
    let missing = QuestionId::generate();
    assert!(matches!(
        s.add_answer(&missing, &answer(1, serde_json::json!(true)), None, None)
            .await
            .unwrap(),
        Answered::NotFound
    ));
    assert!(
        s.live_window(&r.window_key(), now())
            .await
            .unwrap()
            .is_some()
    );
    chain_length(s.as_ref()).await;
}

async fn webhooks_beyond_an_agents_backlog_bound_are_dropped_and_audited(db: TestDb) {
    let s = db.store().await;
    s.set_outbox_backlog_bound(2);
    for _ in 0..3 {
        let r = question().callback_url("http://127.0.0.1:9/hook").pending();
        s.insert(&r, now()).await.unwrap();
        s.decide(&r.id, &approved(1)).await.unwrap();
    }
    let soon = now() + Duration::from_secs(1);
    let due = s.due_deliveries(soon, 10).await.unwrap();
    assert_eq!(due.len(), 2, "the oldest two are kept");
    assert_eq!(s.due_deliveries_by_agent(soon, 1).await.unwrap().len(), 1);
    let gauges = s.gauges().await.unwrap();
    assert_eq!(gauges.webhook_backlog, 2);
    assert_eq!(gauges.webhook_dropped_by_agent, [("agent".to_owned(), 1)]);

    s.delivery_attempted(&due[0], DeliveryAttempt::Delivered, now())
        .await
        .unwrap();
    let retry_at = now() + Duration::from_secs(60);
    let retry = DeliveryAttempt::Retry {
        next_at: retry_at,
        error: "503".into(),
    };
    s.delivery_attempted(&due[1], retry, now()).await.unwrap();
    assert!(s.due_deliveries(soon, 10).await.unwrap().is_empty());
    assert_eq!(s.next_delivery_due().await.unwrap(), Some(retry_at));
    assert_eq!(
        s.next_delivery_due_after(soon).await.unwrap(),
        Some(retry_at)
    );
    assert_eq!(s.next_delivery_due_after(retry_at).await.unwrap(), None);
    let rows = s.audit_rows(None).await.unwrap();
    let dropped = rows.iter().filter(|r| r.kind == "webhook_dropped").count();
    assert_eq!(dropped, 1);
    chain_length(s.as_ref()).await;
}

async fn revoking_a_window_closes_only_that_live_window_and_chains_its_audit_event(db: TestDb) {
    let s = db.store().await;
    let mine = pending(None);
    let mut theirs = pending(None);
    theirs.route = "other".into();
    theirs.owner_id = OwnerId::parse("someone-else").unwrap();
    for r in [&mine, &theirs] {
        s.insert(r, now()).await.unwrap();
        s.decide(&r.id, &approved(1)).await.unwrap();
    }
    let listed = s.live_windows("ops", now()).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].window.opened_by.clone(), listed[0].route.as_str()),
        (mine.id.clone(), "ops")
    );

    // An expired window is not live: nothing to revoke, nothing written.
    let later = now() + Duration::from_secs(61);
    assert!(
        s.revoke_window(&mine.id, &op(2), -1, later)
            .await
            .unwrap()
            .is_none()
    );
    let revoked = s
        .revoke_window(&mine.id, &op(2), -1, now())
        .await
        .unwrap()
        .expect("a live window");
    assert_eq!(revoked.window.key, mine.window_key());
    assert!(
        s.live_window(&mine.window_key(), now())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        s.live_window_opened_by(&theirs.id, now())
            .await
            .unwrap()
            .is_some(),
        "another window stays open"
    );
    assert!(
        s.revoke_window(&mine.id, &op(2), -1, now())
            .await
            .unwrap()
            .is_none(),
        "a window is revoked once"
    );
    let trail = s.events_for(&mine.id).await.unwrap();
    let kinds: Vec<&str> = trail.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["requested", "decided", "window_revoked"]);
    assert_eq!(trail[2].actor, "telegram:2");
    assert_eq!(chain_length(s.as_ref()).await, 5, "the chain holds");
}

async fn a_backup_copies_sqlite_and_points_postgres_to_pg_dump(db: TestDb) {
    let s = db.store().await;
    s.insert(&pending(None), now()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.db");
    let done = s.backup_to(&file).await;
    if db.is_postgres() {
        let e = done.expect_err("no backup on PostgreSQL");
        assert!(matches!(e, StorageError::Unsupported(_)), "{e:?}");
        assert!(e.to_string().contains("pg_dump"), "{e}");
        assert!(!file.exists());
    } else {
        done.unwrap();
        let copy = SqliteStore::connect_existing(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        assert_eq!(chain_length(&copy).await, 1);
    }
    s.close().await;
}

/// A configuration whose route `ops` has these approvers.
fn authority(approvers: &[u64]) -> Authority {
    let ops = RouteAuthority {
        chat_id: -1,
        topic_id: None,
        approvers: approvers.iter().copied().collect(),
        forbid_self_approval: false,
        quorum: None,
        escalation: None,
    };
    Authority {
        routes: [("ops".to_owned(), ops)].into(),
        people: [("alice".to_owned(), 1)].into(),
        ..Authority::default()
    }
}

async fn replicas_configurations_count_while_renewed_and_stop_when_expired_or_withdrawn(
    db: TestDb,
) {
    // Two stores, as two replicas, each recording its own configuration.
    let (a, b) = (db.store().await, db.store().await);
    let (old, new) = (authority(&[1, 2]), authority(&[1, 3]));
    let lease = Duration::from_secs(30);
    a.hold_config("replica-a", &old, lease).await.unwrap();
    b.hold_config("replica-b", &new, Duration::from_secs(2))
        .await
        .unwrap();
    if !db.is_postgres() {
        // One process: its own configuration is the only one, and nothing is stored.
        assert_eq!(a.live_configs().await.unwrap(), None);
        assert_eq!(a.config_view(&old.fingerprint()).await.unwrap(), None);
        a.release_config("replica-a").await.unwrap();
        return;
    }
    let live = |s: Arc<dyn Store>| async move {
        let mut l: Vec<(String, String)> = s
            .live_configs()
            .await
            .unwrap()
            .expect("PostgreSQL lists the replicas")
            .into_iter()
            .map(|c| (c.holder, c.fingerprint.as_str().to_owned()))
            .collect();
        l.sort();
        l
    };
    let both = vec![
        (
            "replica-a".to_owned(),
            old.fingerprint().as_str().to_owned(),
        ),
        (
            "replica-b".to_owned(),
            new.fingerprint().as_str().to_owned(),
        ),
    ];
    assert_eq!(live(a.clone()).await, both, "either store sees both");
    assert_eq!(live(b.clone()).await, both);
    // The view reads back as recorded, from another store.
    assert_eq!(
        a.config_view(&new.fingerprint()).await.unwrap(),
        Some(new.clone())
    );
    assert_eq!(
        b.config_view(&old.fingerprint()).await.unwrap(),
        Some(old.clone())
    );
    assert_eq!(
        a.config_view(&authority(&[9]).fingerprint()).await.unwrap(),
        None
    );

    // B stops renewing: once its record expired it no longer counts, and the next
    // renewal (anyone's) clears it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(live(a.clone()).await, both[..1].to_vec());
    assert_eq!(
        a.config_view(&new.fingerprint()).await.unwrap(),
        Some(new.clone())
    );
    a.hold_config("replica-a", &old, lease).await.unwrap();
    assert_eq!(a.config_view(&new.fingerprint()).await.unwrap(), None);

    // A renewal with another configuration replaces the holder's record.
    a.hold_config("replica-a", &new, lease).await.unwrap();
    assert_eq!(
        live(b.clone()).await,
        vec![(
            "replica-a".to_owned(),
            new.fingerprint().as_str().to_owned()
        )]
    );
    // Withdrawn at shutdown: gone at once.
    a.release_config("replica-a").await.unwrap();
    assert_eq!(live(b.clone()).await, vec![]);

    // A view this version cannot read is an error naming it, not a view that allows.
    b.hold_config("replica-b", &old, lease).await.unwrap();
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    sqlx::query("UPDATE replica_configs SET view = '{\"routes\": 7}'")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let e = a.config_view(&old.fingerprint()).await.unwrap_err();
    assert!(matches!(e, StorageError::Corrupt { .. }), "{e:?}");
    a.close().await;
    b.close().await;
}

mod postgres_only {
    use super::*;

    #[tokio::test]
    async fn the_audit_trail_refuses_edits_and_deletions() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        let s = db.store().await;
        s.insert(&pending(None), now()).await.unwrap();
        let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
        for sql in [
            "UPDATE audit_events SET actor = 'someone'",
            "DELETE FROM audit_events",
            "TRUNCATE audit_events",
        ] {
            let e = sqlx::query(sql).execute(&pool).await.expect_err(sql);
            assert!(e.to_string().contains("append-only"), "{sql}: {e}");
        }
        pool.close().await;
        assert_eq!(chain_length(s.as_ref()).await, 1);
    }

    #[tokio::test]
    async fn an_unknown_url_parameter_is_refused_by_name_without_its_value() {
        // Refused before connecting: no server needed.
        let url = "postgres://hitl@127.0.0.1:1/hitl?sslmode=disable&sslpassword=s3cret";
        let e = storage::connect(url, ConnectMode::Create)
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, StorageError::UnsupportedParam(_)), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("'sslpassword'") && !text.contains("s3cret"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn every_session_reads_committed_whatever_the_database_default() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        // A database whose default isolation would break the audit lock's argument.
        let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
        let name: (String,) = sqlx::query_as("SELECT current_database()")
            .fetch_one(&pool)
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER DATABASE {} SET default_transaction_isolation = 'serializable'",
            name.0
        )))
        .execute(&pool)
        .await
        .unwrap();
        pool.close().await;
        let s = db.store().await;
        let seen = sqlx::PgPool::connect(&db.url).await.unwrap();
        let (iso,): (String,) = sqlx::query_as("SHOW default_transaction_isolation")
            .fetch_one(&seen)
            .await
            .unwrap();
        assert_eq!(iso, "serializable", "the database's own default");
        seen.close().await;
        drop(s);
        // The store's sessions override it: two stores appending at once keep one chain
        // (under SERIALIZABLE a writer's snapshot would predate the lock it waited for,
        // and it would chain from a stale head).
        two_stores_appending_at_once_keep_one_valid_audit_chain(db).await;
    }

    #[tokio::test]
    async fn migrating_twice_from_two_stores_at_once_is_harmless() {
        let Some(db) = TestDb::postgres().await else {
            return;
        };
        let (a, b) = (db.unmigrated().await, db.unmigrated().await);
        let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
        ra.unwrap();
        rb.unwrap();
        a.insert(&pending(None), now()).await.unwrap();
        assert_eq!(b.count_pending("agent").await.unwrap(), 1);
    }
}

mod sqlite_only {
    use super::*;

    #[cfg(unix)]
    #[tokio::test]
    async fn the_database_and_its_folder_are_private_to_the_service_user() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("state");
        let file = folder.join("hitl.db");
        let s = SqliteStore::connect(&format!("sqlite://{}", file.display()))
            .await
            .unwrap();
        s.migrate().await.unwrap();
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&folder), 0o700);
        assert_eq!(mode(&file), 0o600);
        let wal = folder.join("hitl.db-wal");
        if wal.exists() {
            assert_eq!(mode(&wal), 0o600);
        }
    }

    #[tokio::test]
    async fn an_unknown_database_scheme_is_refused_before_connecting() {
        let e = storage::connect("mysql://u:secret@127.0.0.1/db", ConnectMode::Create)
            .await
            .err()
            .expect("refused");
        assert!(matches!(e, StorageError::UnsupportedUrl(_)), "{e:?}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
}
