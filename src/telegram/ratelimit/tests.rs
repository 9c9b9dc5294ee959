use std::sync::Arc;

use super::*;

const MS: Duration = Duration::from_millis(1);

/// Tokio's paused clock fires timers on whole milliseconds.
#[track_caller]
fn assert_at(start: Instant, at: Instant, expected: Duration) {
    let elapsed = at - start;
    assert!(
        elapsed >= expected && elapsed <= expected + MS,
        "expected {expected:?} after the start, got {elapsed:?}"
    );
}

/// A deadline no test reaches.
fn never() -> Instant {
    Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

fn agent(name: &str) -> Share {
    Share::agent(name)
}

/// Waits for a slot in the service's share, with no deadline to speak of.
async fn send(limiter: &RateLimiter, chat: i64) {
    limiter
        .acquire(chat, &Share::Service, never())
        .await
        .expect("a slot");
}

/// Starts `acquire` for `share` in `chat` and lets it take its reservation before
/// returning; the task ends with when the call was let through (or refused).
async fn start_acquire(
    limiter: &Arc<RateLimiter>,
    chat: i64,
    share: &Share,
    deadline: Instant,
) -> tokio::task::JoinHandle<(Result<(), NoSlot>, Instant)> {
    let limiter = limiter.clone();
    let share = share.clone();
    let task = tokio::spawn(async move {
        let result = limiter.acquire(chat, &share, deadline).await;
        (result, Instant::now())
    });
    tokio::task::yield_now().await;
    task
}

/// Starts `acquire` for each (chat, share) in order (reservations are made in that
/// order) and returns when each one was let through, in the same order.
async fn let_through_as(limiter: &Arc<RateLimiter>, calls: &[(i64, Share)]) -> Vec<Instant> {
    let mut tasks = Vec::new();
    for (chat, share) in calls {
        tasks.push(start_acquire(limiter, *chat, share, never()).await);
    }
    let mut times = Vec::new();
    for task in tasks {
        let (result, at) = task.await.expect("acquire task");
        result.expect("a slot");
        times.push(at);
    }
    times
}

/// [`let_through_as`], every call in the service's share.
async fn let_through(limiter: &Arc<RateLimiter>, chats: &[i64]) -> Vec<Instant> {
    let calls: Vec<_> = chats.iter().map(|&c| (c, Share::Service)).collect();
    let_through_as(limiter, &calls).await
}

fn limiter() -> Arc<RateLimiter> {
    Arc::new(RateLimiter::new(Limits::TELEGRAM))
}

#[tokio::test(start_paused = true)]
async fn one_chat_gets_one_message_per_second_in_arrival_order() {
    let limiter = limiter();
    let start = Instant::now();
    let times = let_through(&limiter, &[42, 42, 42, 42]).await;
    for (i, at) in times.into_iter().enumerate() {
        assert_at(start, at, Duration::from_secs(i as u64));
    }
}

#[tokio::test(start_paused = true)]
async fn a_group_gets_at_most_twenty_messages_a_minute() {
    let limiter = limiter();
    let start = Instant::now();
    let times = let_through(&limiter, &[-100; 22]).await;
    for (i, at) in times.iter().take(20).enumerate() {
        assert_at(start, *at, Duration::from_secs(i as u64));
    }
    // The 21st waits until the first leaves the one-minute window, the 22nd until
    // the second does.
    assert_at(start, times[20], Duration::from_secs(60));
    assert_at(start, times[21], Duration::from_secs(61));
}

#[tokio::test(start_paused = true)]
async fn a_private_chat_has_no_per_minute_cap() {
    let limiter = limiter();
    let start = Instant::now();
    let times = let_through(&limiter, &[7; 22]).await;
    assert_at(start, times[21], Duration::from_secs(21));
}

#[tokio::test(start_paused = true)]
async fn all_chats_together_get_thirty_messages_a_second() {
    let limiter = limiter();
    let start = Instant::now();
    let chats: Vec<i64> = (1..=61).collect();
    let mut times = let_through(&limiter, &chats).await;
    times.sort();
    for pair in times.windows(2) {
        // Less a millisecond: the paused clock wakes sleepers on whole milliseconds.
        assert!(pair[1] - pair[0] >= Limits::TELEGRAM.overall_interval - MS);
    }
    let first_second = times
        .iter()
        .filter(|t| **t - start < Duration::from_secs(1));
    assert_eq!(first_second.count(), 30);
    assert!(times[60] - start >= Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_busy_chat_does_not_hold_up_a_quiet_one() {
    let limiter = limiter();
    let start = Instant::now();
    let times = let_through(&limiter, &[1, 1, 1, 2]).await;
    assert_at(start, times[2], Duration::from_secs(2));
    // Chat 2 goes right after chat 1's first message, not after its third.
    assert!(times[3] - start < Duration::from_millis(100));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_moves_the_queued_calls_of_that_chat_back_in_order() {
    let limiter = limiter();
    let start = Instant::now();
    send(&limiter, 5).await; // goes at 0 and, say, gets a 429
    let mut queued = Vec::new();
    for _ in 0..2 {
        queued.push(start_acquire(&limiter, 5, &Share::Service, never()).await);
    }
    limiter.penalize(5, Duration::from_secs(30));
    let other = start_acquire(&limiter, 6, &Share::Service, never()).await;
    let mut times = Vec::new();
    for task in queued {
        times.push(task.await.unwrap().1);
    }
    assert_at(start, times[0], Duration::from_secs(30));
    assert_at(start, times[1], Duration::from_secs(31));
    // Another chat is not penalised.
    assert!(other.await.unwrap().1 - start < Duration::from_secs(1));
    // Nor is a call for the chat that arrives after the 429 let ahead of the queue.
    send(&limiter, 5).await;
    assert_at(start, Instant::now(), Duration::from_secs(32));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_holds_back_the_next_call_when_nothing_waits() {
    let limiter = limiter();
    let start = Instant::now();
    limiter.penalize(-5, Duration::from_secs(11));
    send(&limiter, -5).await;
    assert_at(start, Instant::now(), Duration::from_secs(11));
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_gives_its_slot_back() {
    let limiter = limiter();
    let start = Instant::now();
    send(&limiter, 9).await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(100),
        limiter.acquire(9, &Share::Service, never()),
    )
    .await;
    assert!(gave_up.is_err());
    // The abandoned slot (at 1 s) is free again.
    send(&limiter, 9).await;
    assert_at(start, Instant::now(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn idle_chats_are_forgotten() {
    let limiter = limiter();
    // Twenty chats pass the overall gate within 0.7 s.
    let chats: Vec<i64> = (1..=10).chain(-10..=-1).collect();
    let_through(&limiter, &chats).await;
    assert_eq!(limiter.tracked_chats(), 20);
    // Private chats stop mattering a second after their last message...
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(limiter.tracked_chats(), 10);
    // ...groups a minute after.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(limiter.tracked_chats(), 0);
    limiter.penalize(3, Duration::from_secs(2));
    assert_eq!(limiter.tracked_chats(), 1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(limiter.tracked_chats(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_long_queue_for_one_group_keeps_only_what_it_needs() {
    let limiter = limiter();
    let calls: Vec<_> = (0..45)
        .map(|i| (-1, agent(["a", "b", "c"][i % 3])))
        .collect();
    let _ = let_through_as(&limiter, &calls).await;
    assert_eq!(limiter.tracked_chats(), 1);
    let state = limiter.lock();
    let queue = &state.chats[&-1];
    assert!(queue.slots.len() <= Limits::TELEGRAM.group_messages);
    // Whose turn it is takes one entry per share of the latest turn, not per message.
    assert!(queue.served.len() <= 3);
}

#[tokio::test(start_paused = true)]
async fn a_second_agent_goes_next_instead_of_behind_the_first_ones_backlog() {
    let limiter = limiter();
    let start = Instant::now();
    let mut calls = vec![(42, agent("a")); 10];
    calls.push((42, agent("b")));
    let times = let_through_as(&limiter, &calls).await;
    // B's one message takes the slot after A's first...
    assert_at(start, times[10], Duration::from_secs(1));
    // ...and A's backlog keeps its order, one slot later.
    assert_at(start, times[0], Duration::ZERO);
    for (i, at) in times.iter().enumerate().take(10).skip(1) {
        assert_at(start, *at, Duration::from_secs(i as u64 + 1));
    }
}

#[tokio::test(start_paused = true)]
async fn agents_with_backlogs_take_turns() {
    let limiter = limiter();
    let start = Instant::now();
    let mut calls = vec![(42, agent("a")); 4];
    calls.extend(vec![(42, agent("b")); 4]);
    let times = let_through_as(&limiter, &calls).await;
    for i in 0..4 {
        assert_at(start, times[i], Duration::from_secs(2 * i as u64));
        assert_at(start, times[4 + i], Duration::from_secs(2 * i as u64 + 1));
    }
}

#[tokio::test(start_paused = true)]
async fn in_a_group_another_agents_question_is_not_held_past_the_minute_cap() {
    let limiter = limiter();
    let start = Instant::now();
    let mut calls = vec![(-100, agent("a")); 30];
    calls.push((-100, agent("b")));
    let times = let_through_as(&limiter, &calls).await;
    // Without turns B would be the 31st message, more than a minute away.
    assert_at(start, times[30], Duration::from_secs(1));
    let first_minute = times
        .iter()
        .filter(|t| **t - start < Duration::from_secs(60))
        .count();
    assert_eq!(first_minute, 20);
    // A's 20th message is the one that moved into the next minute.
    assert_at(start, times[19], Duration::from_secs(60));
}

#[tokio::test(start_paused = true)]
async fn each_share_gets_one_slot_per_turn_edits_included() {
    let limiter = limiter();
    let start = Instant::now();
    let mut calls = vec![(-100, agent("a")); 5];
    calls.push((-100, agent("b")));
    calls.push((-100, Share::Service));
    let times = let_through_as(&limiter, &calls).await;
    // A's first, then B's and the outcome edit in turn 0, then A's others.
    assert_at(start, times[5], Duration::from_secs(1));
    assert_at(start, times[6], Duration::from_secs(2));
    assert_at(start, times[1], Duration::from_secs(3));
    assert_at(start, times[4], Duration::from_secs(6));
}

#[tokio::test(start_paused = true)]
async fn an_agent_posting_one_at_a_time_gets_one_slot_per_turn_and_no_more() {
    let limiter = limiter();
    let start = Instant::now();
    let mut backlog = Vec::new();
    for _ in 0..6 {
        backlog.push(start_acquire(&limiter, 42, &agent("b"), never()).await);
    }
    // A asks again as soon as its last message went: it never has a backlog, and
    // still only gets its turn.
    let mut mine = Vec::new();
    for _ in 0..3 {
        limiter.acquire(42, &agent("a"), never()).await.unwrap();
        mine.push(Instant::now());
    }
    for (i, at) in mine.into_iter().enumerate() {
        assert_at(start, at, Duration::from_secs(2 * i as u64 + 1));
    }
    let mut last = start;
    for task in backlog {
        last = last.max(task.await.unwrap().1);
    }
    assert_at(start, last, Duration::from_secs(8));
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_slot_is_after_its_deadline_is_refused_at_once_and_takes_no_place() {
    let limiter = limiter();
    let start = Instant::now();
    let a = agent("a");
    let mut queued = Vec::new();
    for _ in 0..3 {
        queued.push(start_acquire(&limiter, 7, &a, never()).await);
    }
    let refused = limiter
        .acquire(7, &a, start + Duration::from_millis(2500))
        .await
        .unwrap_err();
    assert_eq!(Instant::now(), start, "refused without waiting");
    assert_at(start, refused.earliest, Duration::from_secs(3));
    // The refused call took no slot: the next one of A's goes at 3 s, not 4 s.
    limiter.acquire(7, &a, never()).await.unwrap();
    assert_at(start, Instant::now(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_call_pushed_past_its_deadline_by_another_agents_turn_gives_up_in_time() {
    let limiter = limiter();
    let start = Instant::now();
    let a = agent("a");
    let deadline = start + Duration::from_millis(2500);
    let first = start_acquire(&limiter, 7, &a, never()).await;
    let second = start_acquire(&limiter, 7, &a, never()).await;
    let third = start_acquire(&limiter, 7, &a, deadline).await;
    // B's turn comes before A's second and third: the third moves to 3 s.
    let b = start_acquire(&limiter, 7, &agent("b"), never()).await;
    let (result, at) = third.await.unwrap();
    assert_at(start, result.unwrap_err().earliest, Duration::from_secs(3));
    assert!(at <= deadline, "gave up at {:?}", at - start);
    assert_at(start, b.await.unwrap().1, Duration::from_secs(1));
    assert_at(start, second.await.unwrap().1, Duration::from_secs(2));
    first.await.unwrap().0.unwrap();
    // Its slot went back: the next call goes at 3 s.
    send(&limiter, 7).await;
    assert_at(start, Instant::now(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_reservation_waited_for_in_two_steps_keeps_its_turn_and_spacing() {
    let limiter = limiter();
    let start = Instant::now();
    let a = agent("a");
    let mut backlog = Vec::new();
    for _ in 0..3 {
        backlog.push(start_acquire(&limiter, 42, &a, never()).await);
    }
    let reserved = limiter.reserve_owned(42, &agent("b"), never()).unwrap();
    // B's turn comes after A's first message, as with `acquire`.
    reserved.due().await.unwrap();
    assert_at(start, Instant::now(), Duration::from_secs(1));
    // What the holder does before taking the slot delays it, and the next one is
    // spaced from when it really went.
    tokio::time::sleep(Duration::from_millis(300)).await;
    reserved.start().await.unwrap();
    assert_at(start, Instant::now(), Duration::from_millis(1300));
    let mut times = Vec::new();
    for task in backlog {
        times.push(task.await.unwrap().1);
    }
    assert_at(start, times[1], Duration::from_millis(2300));
    assert_at(start, times[2], Duration::from_millis(3300));
}

#[tokio::test(start_paused = true)]
async fn a_reservation_dropped_when_due_gives_its_slot_back() {
    let limiter = limiter();
    let start = Instant::now();
    send(&limiter, 9).await;
    let reserved = limiter.reserve_owned(9, &agent("a"), never()).unwrap();
    reserved.due().await.unwrap();
    assert_at(start, Instant::now(), Duration::from_secs(1));
    drop(reserved);
    // Nothing went at 1 s: the next call takes that slot.
    send(&limiter, 9).await;
    assert_at(start, Instant::now(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_reservation_pushed_past_its_deadline_hears_so_when_it_wakes() {
    let limiter = limiter();
    let start = Instant::now();
    send(&limiter, 5).await;
    let reserved = limiter
        .reserve_owned(5, &agent("a"), start + Duration::from_secs(10))
        .unwrap();
    limiter.penalize(5, Duration::from_secs(30));
    let no_slot = reserved.due().await.unwrap_err();
    assert_at(start, no_slot.earliest, Duration::from_secs(30));
    assert!(Instant::now() <= start + Duration::from_secs(10));
    // And one that is refused outright takes no place.
    let refused = limiter.reserve_owned(5, &agent("a"), start + Duration::from_secs(10));
    assert!(refused.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_moves_every_share_back_and_keeps_their_turns() {
    let limiter = limiter();
    let start = Instant::now();
    let a = agent("a");
    send(&limiter, 5).await;
    let mut tasks = Vec::new();
    for share in [&a, &a, &agent("b")] {
        tasks.push(start_acquire(&limiter, 5, share, never()).await);
    }
    limiter.penalize(5, Duration::from_secs(30));
    let mut times = Vec::new();
    for task in tasks {
        times.push(task.await.unwrap().1);
    }
    // The service had turn 0; A's first and B's share turn 0, A's second is turn 1.
    assert_at(start, times[0], Duration::from_secs(30));
    assert_at(start, times[2], Duration::from_secs(31));
    assert_at(start, times[1], Duration::from_secs(32));
}
