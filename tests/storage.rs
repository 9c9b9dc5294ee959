//! The SQLite store on its own: exactly-once decisions under contention, idempotency
//! keys, and reading back what was written.

use std::sync::Arc;
use std::time::Duration;

use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::confirmation::{
    Confirmation, Decision, Operator, Outcome, PENDING_REASON, Status, Via,
};
use hitl_telegram::domain::ids::{
    CallbackToken, ConfirmationId, IdempotencyKey, OwnerId, ToolName,
};
use hitl_telegram::domain::pyjson;
use hitl_telegram::service::now;
use hitl_telegram::storage::{Decided, Inserted, SqliteStore, Store};

async fn store() -> (Arc<SqliteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    (open(&dir).await, dir)
}

/// The store in `dir` (created on first use), migrated, as the service opens it.
async fn open(dir: &tempfile::TempDir) -> Arc<SqliteStore> {
    let s = SqliteStore::connect(&format!(
        "sqlite://{}/nested/folder/t.db",
        dir.path().display()
    ))
    .await
    .unwrap();
    s.migrate().await.unwrap();
    Arc::new(s)
}

fn pending(key: Option<&str>) -> Confirmation {
    let params = pyjson::parse_object(r#"{"a": 1}"#).unwrap();
    let t = now();
    Confirmation {
        id: ConfirmationId::generate(),
        agent: "agent".into(),
        route: "ops".into(),
        chat_id: -1,
        tool: ToolName::parse("tool").unwrap(),
        owner_id: OwnerId::anonymous(),
        args_hash: ArgsHash::of(&params),
        params_json: r#"{"a": 1}"#.into(),
        briefing: "tool with: a=1".into(),
        context: Some("ctx".into()),
        allow_edit: true,
        window_seconds: 60,
        window_requested_seconds: None,
        approved_once: false,
        has_call: false,
        idempotency_key: key.map(|k| IdempotencyKey::parse(k).unwrap()),
        callback_token: CallbackToken::generate(),
        callback_url: None,
        message_id: None,
        status: Status::Pending,
        via: None,
        reason: PENDING_REASON.into(),
        decided_by: None,
        created_at: t,
        expires_at: t + Duration::from_secs(60),
        decided_at: None,
        interaction: None,
        result: None,
        timeout_action: None,
        answers: Vec::new(),
        copies: Vec::new(),
        strays: Vec::new(),
        denial_reason: None,
        progress: Default::default(),
    }
}

fn op(id: u64) -> Operator {
    Operator {
        id,
        username: None,
        name: format!("op{id}"),
    }
}

/// Operator `id` approving now, with the request's window.
fn approved(id: u64) -> Decision {
    Outcome::Approved {
        by: op(id),
        once: false,
    }
    .decide(now())
}

#[tokio::test]
async fn a_record_reads_back_exactly_as_written_and_the_database_folder_is_created() {
    let (s, _dir) = store().await;
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
}

#[tokio::test]
async fn of_many_concurrent_decisions_exactly_one_is_applied() {
    let (s, _dir) = store().await;
    let r = pending(None);
    s.insert(&r, now()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16u64 {
        let s = s.clone();
        let id = r.id.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = match i % 3 {
                0 => Outcome::Approved {
                    by: op(i),
                    once: false,
                },
                1 => Outcome::Cancelled(op(i)),
                _ => Outcome::TimedOut {
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
    let stored = s.get(&r.id).await.unwrap().unwrap();
    assert_eq!(stored, applied[0]);
    assert!(
        lost.iter().all(|l| *l == stored),
        "every loser sees the stored outcome"
    );
}

#[tokio::test]
async fn an_operator_confirmation_opens_a_window_in_the_same_transaction() {
    let (s, _dir) = store().await;
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

#[tokio::test]
async fn a_shorter_window_never_cuts_a_longer_one_short() {
    let (s, _dir) = store().await;
    let long = Confirmation {
        window_seconds: 3600,
        ..pending(None)
    };
    let short = Confirmation {
        window_seconds: 60,
        ..pending(None)
    };
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

#[tokio::test]
async fn windows_are_found_again_by_a_store_reopened_on_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/t.db", dir.path().display());
    let r = pending(None);
    {
        let s = SqliteStore::connect(&url).await.unwrap();
        s.migrate().await.unwrap();
        s.insert(&r, now()).await.unwrap();
        s.decide(&r.id, &approved(1)).await.unwrap();
        s.close().await;
    }
    // Migrated (the service), and not (a CLI tool): both see the window.
    let migrated = SqliteStore::connect(&url).await.unwrap();
    migrated.migrate().await.unwrap();
    let plain = SqliteStore::connect(&url).await.unwrap();
    for s in [&migrated, &plain] {
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
}

#[tokio::test]
async fn concurrent_window_hits_are_each_stored_with_their_audit_event() {
    let (s, _dir) = store().await;
    let hits: Vec<Confirmation> = (0..64)
        .map(|_| Confirmation {
            status: Status::Confirmed,
            via: Some(Via::Window),
            reason: "confirmed by a window".into(),
            decided_at: Some(now()),
            ..pending(None)
        })
        .collect();
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
}

/// A window hit as the service stores it, with text that must come back to the byte.
fn window_hit(n: usize, key: Option<&str>) -> Confirmation {
    Confirmation {
        status: Status::Confirmed,
        via: Some(Via::Window),
        reason: format!("confirmed by a window (hit {n})"),
        decided_at: Some(now()),
        briefing: format!("tool with: a=1 \0 \u{202e} ünïcödé 🚀 {n}"),
        context: n.is_multiple_of(2).then(|| "ctx\nline two".to_owned()),
        window_requested_seconds: n.is_multiple_of(3).then_some(86_400),
        ..pending(key)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn window_hits_among_other_writes_read_back_exactly_and_keep_one_unbroken_audit_chain() {
    let (s, dir) = store().await;
    let mut tasks = Vec::new();
    let mut hits = Vec::new();
    for round in 0..4 {
        for n in 0..48usize {
            // Every sixth hit carries an idempotency key: such a batch is written
            // through the other path, which must leave the chain's tip to be read again.
            let key = n.is_multiple_of(6).then(|| format!("k{round}-{n}"));
            let hit = window_hit(round * 100 + n, key.as_deref());
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
    let check = |rows: &[hitl_telegram::domain::audit::StoredRow]| {
        hitl_telegram::domain::audit::verify(rows).expect("the chain is unbroken");
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

    // After a restart the tip is read from the file: the next hits chain on.
    s.close().await;
    drop(s);
    let s = open(&dir).await;
    let more = window_hit(999, None);
    s.insert(&more, now()).await.unwrap();
    let rows = s.audit_rows(None).await.unwrap();
    assert_eq!(rows.len(), before + 1);
    check(&rows);
}

#[tokio::test]
async fn an_idempotency_key_is_released_after_24_hours() {
    let (s, _dir) = store().await;
    let first = pending(Some("k"));
    s.insert(&first, now()).await.unwrap();
    let second = pending(Some("k"));
    match s.insert(&second, now()).await.unwrap() {
        Inserted::Existing(e) => assert_eq!(e.id, first.id),
        Inserted::New(_) => panic!("same key within 24 h must return the first"),
    }
    let later = now() + Duration::from_secs(24 * 3600 + 1);
    assert!(
        s.find_by_idempotency_key("agent", &IdempotencyKey::parse("k").unwrap(), later)
            .await
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        s.insert(&second, later).await.unwrap(),
        Inserted::New(_)
    ));
}

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
async fn a_question_gains_a_copy_once_per_further_chat_while_pending() {
    let (s, _dir) = store().await;
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
    let got = s.get(&r.id).await.unwrap().unwrap();
    assert_eq!(got.copies.len(), 1);
    assert_eq!(
        (got.copies[0].recipient.as_str(), got.copies[0].chat_id),
        ("bob", 222)
    );
}

#[tokio::test]
async fn revoking_a_window_closes_only_that_live_window_and_chains_its_audit_event() {
    let (s, _dir) = store().await;
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
    let rows = s.audit_rows(None).await.unwrap();
    assert_eq!(
        hitl_telegram::domain::audit::verify(&rows).unwrap().events,
        5,
        "the chain holds"
    );
}
