//! The questions that ended, as the console pages them (`Questions::ended_in_chats`), on
//! both backends (as `stores.rs` runs its tests: `sqlite::…`, `postgres::…`): the latest
//! decision first, a question found by its first chat or a copy, the calls a window let
//! through left out, and a walk by cursor visiting each once.

use std::time::Duration;

use hitl_telegram::domain::question::{Ending, Question, Status, Via};
use hitl_telegram::service::now;
use hitl_telegram::storage::{Decided, EndedCursor, Store};
use time::OffsetDateTime;

use crate::stores::{TestDb, on_both_backends, op, pending};

on_both_backends! {
    ended_questions_come_newest_decision_first_by_their_chats_and_copies,
    a_walk_by_cursor_visits_every_ended_question_once,
}

const A: i64 = -1;
const B: i64 = -2;
const C: i64 = -3;

/// A question asked in `chat` and approved by operator 7 at `at`.
async fn ended_in(s: &dyn Store, chat: i64, at: OffsetDateTime, copy_to: Option<i64>) -> Question {
    let mut q = pending(None);
    q.chat_id = chat;
    s.insert(&q, now()).await.unwrap();
    if let Some(c) = copy_to {
        assert!(s.add_copy(&q.id, "alice", c, now()).await.unwrap());
    }
    let decision = Ending::Approved {
        by: op(7),
        once: true,
    }
    .decide(at);
    match s.decide(&q.id, &decision).await.unwrap() {
        Decided::Applied(r) => r,
        other => panic!("{other:?}"),
    }
}

/// A call a window let through in `chat` at `at`: stored confirmed, never asked.
async fn window_hit(s: &dyn Store, chat: i64, at: OffsetDateTime) -> Question {
    let q = Question {
        chat_id: chat,
        status: Status::Confirmed,
        via: Some(Via::Window),
        reason: "confirmed by a window".into(),
        decided_at: Some(at),
        ..pending(None)
    };
    s.insert(&q, now()).await.unwrap();
    q
}

fn ids(qs: &[Question]) -> Vec<String> {
    qs.iter().map(|q| q.id.to_string()).collect()
}

/// Stores, in chats A, B and C, questions decided one millisecond apart (two in the same
/// millisecond), a window hit and a pending question; returns the ended ones asked in
/// A or B (C's has a copy in A), newest decision first.
async fn history(s: &dyn Store) -> Vec<Question> {
    let t = now();
    let at = |n: u64| t + Duration::from_millis(n);
    let first = ended_in(s, A, at(1), None).await;
    let in_b = ended_in(s, B, at(2), None).await;
    let copied = ended_in(s, C, at(3), Some(A)).await;
    let mut tied = vec![
        ended_in(s, A, at(4), None).await,
        ended_in(s, A, at(4), None).await,
    ];
    // The same millisecond: the greater id first.
    tied.sort_by(|x, y| y.id.as_str().cmp(x.id.as_str()));
    window_hit(s, A, at(5)).await;
    s.insert(&pending(None), now()).await.unwrap();
    let mut newest_first = tied;
    newest_first.extend([copied, in_b, first]);
    newest_first
}

async fn ended_questions_come_newest_decision_first_by_their_chats_and_copies(db: TestDb) {
    let s = db.store().await;
    let all = history(&*s).await;
    let got = s.ended_in_chats(&[A, B], None, 50).await.unwrap();
    assert_eq!(ids(&got), ids(&all));
    assert_eq!(got[0].status, Status::Confirmed);
    assert_eq!(got[0].decided_by, Some(op(7)));
    // A's own, and C's by its copy in A; not B's.
    let in_a: Vec<Question> = all.iter().filter(|q| q.chat_id != B).cloned().collect();
    let got = s.ended_in_chats(&[A], None, 50).await.unwrap();
    assert_eq!(ids(&got), ids(&in_a));
    let got = s.ended_in_chats(&[C], None, 50).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].chat_id, C);
    assert!(s.ended_in_chats(&[], None, 50).await.unwrap().is_empty());
    assert!(s.ended_in_chats(&[-99], None, 50).await.unwrap().is_empty());
    // At most `limit`.
    let got = s.ended_in_chats(&[A, B], None, 2).await.unwrap();
    assert_eq!(ids(&got), ids(&all[..2]));
}

async fn a_walk_by_cursor_visits_every_ended_question_once(db: TestDb) {
    let s = db.store().await;
    let all = history(&*s).await;
    for limit in [1, 2, 3] {
        let mut walked = Vec::new();
        let mut cursor: Option<EndedCursor> = None;
        loop {
            let page = s
                .ended_in_chats(&[A, B], cursor.as_ref(), limit)
                .await
                .unwrap();
            assert!(page.len() <= limit as usize);
            let Some(last) = page.last() else { break };
            cursor = EndedCursor::after(last);
            // The cursor's text form reads back as itself.
            let c = cursor.clone().unwrap();
            assert_eq!(EndedCursor::parse(&c.to_string()), Some(c));
            walked.extend(ids(&page));
        }
        assert_eq!(walked, ids(&all), "limit {limit}");
    }
}
