//! Telegram's flood limits, kept on our side so we rarely meet its 429s.
//!
//! Telegram lets a bot send about one message per second to a chat, twenty per minute
//! to a group, and thirty per second overall; past that it answers 429 with
//! `retry_after`, and a bot that keeps pushing earns longer bans. Every `sendMessage`
//! and `editMessageText` therefore takes a slot here first ([`RateLimiter::acquire`]).
//!
//! Slots are reservations: a caller computes the earliest instant the limits allow,
//! writes it down and sleeps until then. Callers for one chat queue in arrival order and
//! nobody polls. A 429 for a chat ([`RateLimiter::penalize`]) moves that chat's waiting
//! reservations back as a block, so calls already queued wait too and keep their order.
//!
//! The overall limit is a gate passed when a chat slot comes due rather than a second
//! reservation: slots for different chats are not reserved in time order (one chat's
//! next slot may be a minute away, another's now), and a gate taken in the order slots
//! come due keeps a busy chat from holding up a quiet one.
//!
//! Memory follows the chats in use: a chat whose slots no longer constrain anything
//! (one second after its last message for a private chat, one minute for a group) is
//! forgotten.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The limits to keep. [`Limits::TELEGRAM`] in production; tests may pass others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Minimum time between two messages to one chat.
    pub per_chat_interval: Duration,
    /// At most this many messages to one group chat...
    pub group_messages: usize,
    /// ...within any window this long.
    pub group_window: Duration,
    /// Minimum time between any two messages of the bot. Thirty per second spread
    /// evenly rather than in bursts: a burst allowance would need a second reservation
    /// book, and a few tens of milliseconds is nothing to an operator.
    pub overall_interval: Duration,
}

impl Limits {
    /// What Telegram documents for bots (core.telegram.org/bots/faq).
    pub const TELEGRAM: Limits = Limits {
        per_chat_interval: Duration::from_secs(1),
        group_messages: 20,
        group_window: Duration::from_secs(60),
        // Rounded up: gaps of 1/30 s rounded down would fit 31 messages in one second.
        overall_interval: Duration::from_nanos(1_000_000_000u64.div_ceil(30)),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Limits::TELEGRAM
    }
}

/// Groups, supergroups and channels have negative ids in the Bot API.
fn is_group(chat_id: i64) -> bool {
    chat_id < 0
}

/// Paces calls to Telegram per chat and overall; see the module docs. One per bot
/// token: Telegram counts per bot, so every sender through a token must share it.
pub struct RateLimiter {
    limits: Limits,
    state: Mutex<State>,
}

struct State {
    chats: HashMap<i64, ChatQueue>,
    /// Identifies a reservation while its caller sleeps, since 429s move reservations.
    next_ticket: u64,
    /// The overall gate: no message starts before this.
    overall_free_at: Instant,
}

#[derive(Default)]
struct ChatQueue {
    /// Slots used recently and slots reserved, in time order (each at least
    /// `per_chat_interval` after the one before). Used slots stay only while they still
    /// constrain a new one: the last, and for groups the last `group_messages` within
    /// `group_window`.
    slots: VecDeque<Slot>,
    /// Set by a 429: no slot of this chat may start before it, including slots reserved
    /// after the 429 arrived.
    not_before: Option<Instant>,
}

struct Slot {
    ticket: u64,
    at: Instant,
    /// The caller went ahead; the slot now only spaces out the ones after it.
    used: bool,
}

impl ChatQueue {
    /// The earliest instant a new slot may take.
    fn next_free(&self, now: Instant, group: bool, limits: &Limits) -> Instant {
        let mut at = now;
        if let Some(not_before) = self.not_before {
            at = at.max(not_before);
        }
        if let Some(last) = self.slots.back() {
            at = at.max(last.at + limits.per_chat_interval);
        }
        if let Some(oldest) = self.window_start(self.slots.len(), group, limits) {
            at = at.max(oldest + limits.group_window);
        }
        at
    }

    /// For a slot at index `j` of a group: the slot `group_messages` places before it,
    /// which must be a full window earlier.
    fn window_start(&self, j: usize, group: bool, limits: &Limits) -> Option<Instant> {
        if !group || limits.group_messages == 0 {
            return None;
        }
        let i = j.checked_sub(limits.group_messages)?;
        self.slots.get(i).map(|s| s.at)
    }

    /// After the slot before `from` moved later, moves every later slot as far as the
    /// limits require. Slots only ever move later, so the order holds. A used slot that
    /// follows (its caller woke before an earlier one) moves too: it then pretends to
    /// have gone later than it did, which can only space the next ones out more.
    fn respace(&mut self, from: usize, group: bool, limits: &Limits) {
        for j in from.max(1)..self.slots.len() {
            let mut at = self.slots[j]
                .at
                .max(self.slots[j - 1].at + limits.per_chat_interval);
            if let Some(oldest) = self.window_start(j, group, limits) {
                at = at.max(oldest + limits.group_window);
            }
            self.slots[j].at = at;
        }
    }

    fn position(&self, ticket: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.ticket == ticket)
    }

    /// Drops used slots that no longer constrain a new one; true when nothing is left,
    /// so the chat can be forgotten.
    fn prune(&mut self, now: Instant, group: bool, limits: &Limits) -> bool {
        let keep = if group {
            limits.group_messages.max(1)
        } else {
            1
        };
        let horizon = if group {
            limits.group_window.max(limits.per_chat_interval)
        } else {
            limits.per_chat_interval
        };
        while let Some(front) = self.slots.front() {
            let spent = front.used && (self.slots.len() > keep || front.at + horizon <= now);
            if !spent {
                break;
            }
            self.slots.pop_front();
        }
        if self.not_before.is_some_and(|t| t <= now) {
            self.not_before = None;
        }
        self.slots.is_empty() && self.not_before.is_none()
    }
}

impl RateLimiter {
    pub fn new(limits: Limits) -> Self {
        RateLimiter {
            limits,
            state: Mutex::new(State {
                chats: HashMap::new(),
                next_ticket: 0,
                overall_free_at: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding the lock; if something ever did, pacing with the
        // state as it stands is better than failing every later call.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a message to `chat_id` may go. Returns when the caller should send;
    /// dropping the future before then gives the slot back.
    pub async fn acquire(&self, chat_id: i64) {
        let ticket = self.reserve(chat_id);
        let mut place = Place {
            limiter: self,
            chat_id,
            ticket,
            taken: false,
        };
        loop {
            match self.try_start(chat_id, ticket) {
                Ok(go) => {
                    place.taken = true;
                    tokio::time::sleep_until(go).await;
                    return;
                }
                // Not due (yet, or any more: a 429 moved it): sleep until it is.
                Err(due) => tokio::time::sleep_until(due).await,
            }
        }
    }

    /// Telegram answered 429 for `chat_id`: nothing more goes to that chat for
    /// `retry_after`, and the calls already waiting move back with their spacing.
    pub fn penalize(&self, chat_id: i64, retry_after: Duration) {
        let until = Instant::now() + retry_after;
        let group = is_group(chat_id);
        let mut state = self.lock();
        let queue = state.chats.entry(chat_id).or_default();
        queue.not_before = Some(queue.not_before.map_or(until, |t| t.max(until)));
        if let Some(j) = queue.slots.iter().position(|s| !s.used)
            && queue.slots[j].at < until
        {
            queue.slots[j].at = until;
            queue.respace(j + 1, group, &self.limits);
        }
    }

    /// How many chats the limiter remembers, after forgetting the idle ones.
    pub fn tracked_chats(&self) -> usize {
        let mut state = self.lock();
        state.sweep(Instant::now(), &self.limits);
        state.chats.len()
    }

    fn reserve(&self, chat_id: i64) -> u64 {
        let now = Instant::now();
        let mut guard = self.lock();
        let state = &mut *guard;
        state.sweep(now, &self.limits);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        let queue = state.chats.entry(chat_id).or_default();
        let at = queue.next_free(now, is_group(chat_id), &self.limits);
        queue.slots.push_back(Slot {
            ticket,
            at,
            used: false,
        });
        ticket
    }

    /// If the reservation is due, marks it used and passes the overall gate: `Ok` with
    /// the instant to send at (now, or a few tens of milliseconds later). Otherwise
    /// `Err` with the instant it comes due. One lock for both, so a 429 cannot slip in
    /// between the check and the start.
    fn try_start(&self, chat_id: i64, ticket: u64) -> Result<Instant, Instant> {
        let now = Instant::now();
        let mut guard = self.lock();
        let state = &mut *guard;
        let group = is_group(chat_id);
        let queue = state.chats.get_mut(&chat_id);
        let j = queue.as_ref().and_then(|q| q.position(ticket));
        if let (Some(queue), Some(j)) = (&queue, j)
            && queue.slots[j].at > now
        {
            return Err(queue.slots[j].at);
        }
        let go = now.max(state.overall_free_at);
        state.overall_free_at = go + self.limits.overall_interval;
        // A reservation always exists while its caller waits (chats with waiting slots
        // are never forgotten); without one, the overall gate is still honoured.
        if let (Some(queue), Some(j)) = (queue, j) {
            queue.slots[j].used = true;
            // Woken late or held at the gate: the chat's next slots count from when
            // this one really goes.
            if queue.slots[j].at < go {
                queue.slots[j].at = go;
                queue.respace(j + 1, group, &self.limits);
            }
        }
        Ok(go)
    }

    fn cancel(&self, chat_id: i64, ticket: u64) {
        let mut state = self.lock();
        if let Some(queue) = state.chats.get_mut(&chat_id)
            && let Some(j) = queue.position(ticket)
            && !queue.slots[j].used
        {
            // Later slots keep their times: moving them earlier would buy little and
            // could break the spacing from slots already used.
            queue.slots.remove(j);
        }
    }
}

impl State {
    fn sweep(&mut self, now: Instant, limits: &Limits) {
        self.chats
            .retain(|&chat_id, queue| !queue.prune(now, is_group(chat_id), limits));
    }
}

/// A reservation its caller is waiting on; returned to the limiter if the wait is
/// abandoned (the caller's deadline passed, its task was dropped).
struct Place<'a> {
    limiter: &'a RateLimiter,
    chat_id: i64,
    ticket: u64,
    taken: bool,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        if !self.taken {
            self.limiter.cancel(self.chat_id, self.ticket);
        }
    }
}

#[cfg(test)]
mod tests {
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

    /// Starts `acquire` for each chat in order (reservations are made in that order)
    /// and returns when each one was let through, in the same order.
    async fn let_through(limiter: &Arc<RateLimiter>, chats: &[i64]) -> Vec<Instant> {
        let mut tasks = Vec::new();
        for &chat in chats {
            let limiter = limiter.clone();
            tasks.push(tokio::spawn(async move {
                limiter.acquire(chat).await;
                Instant::now()
            }));
            // Let the task take its reservation before the next one starts.
            tokio::task::yield_now().await;
        }
        let mut times = Vec::new();
        for task in tasks {
            times.push(task.await.expect("acquire task"));
        }
        times
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
        limiter.acquire(5).await; // goes at 0 and, say, gets a 429
        let queued: Vec<_> = (0..2)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    limiter.acquire(5).await;
                    Instant::now()
                })
            })
            .collect();
        tokio::task::yield_now().await;
        limiter.penalize(5, Duration::from_secs(30));
        let other = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                limiter.acquire(6).await;
                Instant::now()
            })
        };
        let mut times = Vec::new();
        for task in queued {
            times.push(task.await.unwrap());
        }
        assert_at(start, times[0], Duration::from_secs(30));
        assert_at(start, times[1], Duration::from_secs(31));
        // Another chat is not penalised.
        assert!(other.await.unwrap() - start < Duration::from_secs(1));
        // Nor is a call for the chat that arrives after the 429 let ahead of the queue.
        limiter.acquire(5).await;
        assert_at(start, Instant::now(), Duration::from_secs(32));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_holds_back_the_next_call_when_nothing_waits() {
        let limiter = limiter();
        let start = Instant::now();
        limiter.penalize(-5, Duration::from_secs(11));
        limiter.acquire(-5).await;
        assert_at(start, Instant::now(), Duration::from_secs(11));
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_waiting_gives_its_slot_back() {
        let limiter = limiter();
        let start = Instant::now();
        limiter.acquire(9).await;
        let gave_up = tokio::time::timeout(Duration::from_millis(100), limiter.acquire(9)).await;
        assert!(gave_up.is_err());
        // The abandoned slot (at 1 s) is free again.
        limiter.acquire(9).await;
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
        let _ = let_through(&limiter, &[-1; 45]).await;
        assert_eq!(limiter.tracked_chats(), 1);
        let state = limiter.lock();
        assert!(state.chats[&-1].slots.len() <= Limits::TELEGRAM.group_messages);
    }
}
