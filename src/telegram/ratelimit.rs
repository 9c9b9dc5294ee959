//! Telegram's flood limits, kept on our side so we rarely meet its 429s, and each chat's
//! slots shared fairly between those who post there.
//!
//! Telegram lets a bot send about one message per second to a chat, twenty per minute
//! to a group, and thirty per second overall; past that it answers 429 with
//! `retry_after`, and a bot that keeps pushing earns longer bans. Every `sendMessage`,
//! `sendDocument` and `editMessageText` therefore takes a slot here first
//! ([`RateLimiter::acquire`]).
//!
//! Slots are reservations: a caller computes the earliest instant the limits allow,
//! writes it down and sleeps until then; nobody polls. A 429 for a chat
//! ([`RateLimiter::penalize`]) moves that chat's waiting reservations back as a block, so
//! calls already queued wait too and keep their order.
//!
//! A chat's slots are served in turns between [`Share`]s: each agent posting there is
//! one, the service's own messages about questions already in the chat are another. A
//! reservation belongs to the turn being served, or to the next one if its share already
//! had a slot in it, and in any case to the turn after its share's latest waiting
//! reservation; the book is kept in turn order, arrival order within a turn. (Start-time
//! fair queueing, one message as the unit.) So an agent with a backlog of thirty
//! questions gets one slot per turn like everyone else, and another agent's question goes
//! next instead of after the thirty; within a share, calls keep their arrival order.
//! Placing a newcomer ahead of a backlog moves the reservations behind it, like a 429
//! does: only ever later, with their spacing kept, so a caller that wakes finds its slot
//! either due or further on, and sleeps again.
//!
//! A caller with work to do once its slot comes (a question read back from the store
//! and rendered only then, so that it does not wait in memory) reserves and waits in two
//! steps ([`RateLimiter::reserve_owned`], then [`Reservation::due`] and
//! [`Reservation::start`]): the place in the book and the turns are the same.
//!
//! Every reservation has a deadline. One whose earliest slot is after it is refused at
//! once ([`NoSlot`]) and takes no place; one that a newcomer's turn or a 429 pushes past
//! it gives up when its caller wakes (still before the deadline) and gives its place
//! back. Since slots only ever move later, a refused call could not have gone in time.
//!
//! The overall limit is a gate passed when a chat slot comes due rather than a second
//! reservation: slots for different chats are not reserved in time order (one chat's
//! next slot may be a minute away, another's now), and a gate taken in the order slots
//! come due keeps a busy chat from holding up a quiet one.
//!
//! Memory follows the chats in use: a chat whose slots no longer constrain anything
//! (one second after its last message for a private chat, one minute for a group) is
//! forgotten, and with it whose turn it was.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
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

/// Whose turn a message is sent in: a chat serves its shares in turns (see the module
/// docs), one slot each per turn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Share {
    /// The service's messages about questions already in the chat (outcome and progress
    /// edits, the attached parameters) and its answers to operator commands. One share
    /// of their own rather than strict priority: a backlog timing out at once must not
    /// take a group's twenty slots a minute for its outcome edits, and no question
    /// backlog can hold an outcome back by more than a turn.
    Service,
    /// An agent's questions and notifications, by agent name.
    Agent(Arc<str>),
}

impl Share {
    pub fn agent(name: &str) -> Share {
        Share::Agent(name.into())
    }
}

/// No slot of the chat came free for the call before its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoSlot {
    /// The earliest instant the call could have gone, as things stood (they only get
    /// later).
    pub earliest: Instant,
}

/// Groups, supergroups and channels have negative ids in the Bot API.
fn is_group(chat_id: i64) -> bool {
    chat_id < 0
}

/// Paces calls to Telegram per chat and overall, and shares each chat fairly; see the
/// module docs. One per bot token: Telegram counts per bot, so every sender through a
/// token must share it.
pub struct RateLimiter {
    limits: Limits,
    state: Mutex<State>,
}

struct State {
    chats: HashMap<i64, ChatQueue>,
    /// Identifies a reservation while its caller sleeps, since 429s and turns move
    /// reservations.
    next_ticket: u64,
    /// The overall gate: no message starts before this.
    overall_free_at: Instant,
}

#[derive(Default)]
struct ChatQueue {
    /// Slots used recently and slots reserved, in time order (each at least
    /// `per_chat_interval` after the one before); the reserved ones in turn order. Used
    /// slots stay only while they still constrain a new one: the last, and for groups
    /// the last `group_messages` within `group_window`.
    slots: VecDeque<Slot>,
    /// Set by a 429: no slot of this chat may start before it, including slots reserved
    /// after the 429 arrived.
    not_before: Option<Instant>,
    /// The latest turn a slot of this chat started in.
    turn: u64,
    /// The shares that started a slot in `turn`: their next reservation belongs to the
    /// next turn. At most one entry per share that posted in the latest turn.
    served: HashSet<Share>,
}

struct Slot {
    ticket: u64,
    at: Instant,
    /// The caller went ahead; the slot now only spaces out the ones after it.
    used: bool,
    share: Share,
    turn: u64,
}

impl ChatQueue {
    /// The earliest instant a slot placed at index `j` may take, the slots now at `j`
    /// and after moving behind it.
    fn earliest_at(&self, j: usize, now: Instant, group: bool, limits: &Limits) -> Instant {
        let mut at = now;
        if let Some(not_before) = self.not_before {
            at = at.max(not_before);
        }
        if let Some(before) = j.checked_sub(1).and_then(|i| self.slots.get(i)) {
            at = at.max(before.at + limits.per_chat_interval);
        }
        if let Some(oldest) = self.window_start(j, group, limits) {
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

    /// The turn a new reservation of `share` belongs to: the one being served, or the
    /// next if `share` already had its slot in it; after its own latest waiting
    /// reservation in any case, so a share's calls keep their order.
    fn turn_for(&self, share: &Share) -> u64 {
        let mut turn = self.turn + u64::from(self.served.contains(share));
        if let Some(last) = self
            .slots
            .iter()
            .rev()
            .find(|s| !s.used && s.share == *share)
        {
            turn = turn.max(last.turn + 1);
        }
        turn
    }

    /// Where a reservation of `turn` goes: after every used slot and every waiting one
    /// of an earlier or the same turn.
    fn place_for(&self, turn: u64) -> usize {
        let mut j = self.slots.len();
        while j > 0 && !self.slots[j - 1].used && self.slots[j - 1].turn > turn {
            j -= 1;
        }
        j
    }

    /// After the slot before `from` moved later (or a slot was placed there), moves
    /// every later slot as far as the limits require. Slots only ever move later, so
    /// the order holds. A used slot that follows (its caller woke before an earlier
    /// one) moves too: it then pretends to have gone later than it did, which can only
    /// space the next ones out more.
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

    /// The slot at `j` starts: the chat's turn moves on to it. A slot of an earlier
    /// turn starting late (its caller woke after a later one) changes nothing.
    fn start(&mut self, j: usize) {
        let slot = &mut self.slots[j];
        slot.used = true;
        if slot.turn > self.turn {
            self.turn = slot.turn;
            self.served.clear();
        }
        if slot.turn == self.turn {
            self.served.insert(slot.share.clone());
        }
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
        // Counted among the used slots, not all: a reservation may be placed right
        // after the used ones (another share's turn), so they must still space it out.
        let mut used = self.slots.iter().take_while(|s| s.used).count();
        while let Some(front) = self.slots.front() {
            let spent = front.used && (used > keep || front.at + horizon <= now);
            if !spent {
                break;
            }
            self.slots.pop_front();
            used -= 1;
        }
        if self.not_before.is_some_and(|t| t <= now) {
            self.not_before = None;
        }
        // With nothing waiting or constraining, whose turn it was no longer matters:
        // the next caller would go at once whatever its turn.
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

    /// Waits until a message to `chat_id` may go, in `share`'s turn. Returns `Ok` when
    /// the caller should send, or [`NoSlot`] (at once, or when the caller wakes, always
    /// by `deadline`) when the chat cannot take it before `deadline`. Dropping the
    /// future before then gives the slot back.
    pub async fn acquire(
        &self,
        chat_id: i64,
        share: &Share,
        deadline: Instant,
    ) -> Result<(), NoSlot> {
        let ticket = self.reserve(chat_id, share, deadline)?;
        Place {
            limiter: self,
            chat_id,
            ticket,
            deadline,
            taken: false,
        }
        .start()
        .await
    }

    /// [`acquire`] in two steps, for a caller that has work to do between its slot
    /// coming due and its message going (a question read from the store and rendered
    /// only then, so that it does not wait in memory): reserves now, or refuses at once
    /// like `acquire`; [`Reservation::due`] then waits for the slot without taking it,
    /// [`Reservation::start`] takes it. Dropping the reservation before it started gives
    /// the slot back.
    ///
    /// [`acquire`]: RateLimiter::acquire
    pub fn reserve_owned(
        self: &Arc<Self>,
        chat_id: i64,
        share: &Share,
        deadline: Instant,
    ) -> Result<Reservation, NoSlot> {
        let ticket = self.reserve(chat_id, share, deadline)?;
        Ok(Reservation(Place {
            limiter: self.clone(),
            chat_id,
            ticket,
            deadline,
            taken: false,
        }))
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

    /// Places a reservation for `share` in `chat_id`'s book at its turn, or refuses it
    /// when that place is after `deadline` (then nothing moves).
    fn reserve(&self, chat_id: i64, share: &Share, deadline: Instant) -> Result<u64, NoSlot> {
        let now = Instant::now();
        let group = is_group(chat_id);
        let mut guard = self.lock();
        let state = &mut *guard;
        state.sweep(now, &self.limits);
        let queue = state.chats.entry(chat_id).or_default();
        let turn = queue.turn_for(share);
        let j = queue.place_for(turn);
        let at = queue.earliest_at(j, now, group, &self.limits);
        if at > deadline {
            return Err(NoSlot { earliest: at });
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        queue.slots.insert(
            j,
            Slot {
                ticket,
                at,
                used: false,
                share: share.clone(),
                turn,
            },
        );
        queue.respace(j + 1, group, &self.limits);
        Ok(ticket)
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
            queue.start(j);
            // Woken late or held at the gate: the chat's next slots count from when
            // this one really goes.
            if queue.slots[j].at < go {
                queue.slots[j].at = go;
                queue.respace(j + 1, group, &self.limits);
            }
        }
        Ok(go)
    }

    /// When the reservation is due (now, if it is gone: it cannot be waited for).
    fn due_at(&self, chat_id: i64, ticket: u64) -> Instant {
        let now = Instant::now();
        let state = self.lock();
        state
            .chats
            .get(&chat_id)
            .and_then(|q| q.position(ticket).map(|j| q.slots[j].at))
            .map_or(now, |at| at.max(now))
    }

    fn cancel(&self, chat_id: i64, ticket: u64) {
        let mut state = self.lock();
        if let Some(queue) = state.chats.get_mut(&chat_id)
            && let Some(j) = queue.position(ticket)
            && !queue.slots[j].used
        {
            // Later slots keep their times: moving them earlier would buy little and
            // could break the spacing from slots already used. The share's turns are
            // read from the book, so a share whose calls gave up is not held back for
            // the turns they would have had.
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
/// abandoned (the caller's deadline passed, its task was dropped). `L` is how it reaches
/// the limiter: borrowed inside [`RateLimiter::acquire`], owned in a [`Reservation`].
struct Place<L: Deref<Target = RateLimiter>> {
    limiter: L,
    chat_id: i64,
    ticket: u64,
    deadline: Instant,
    taken: bool,
}

impl<L: Deref<Target = RateLimiter>> Place<L> {
    /// Sleeps until the slot is due and takes it; see [`RateLimiter::acquire`].
    async fn start(mut self) -> Result<(), NoSlot> {
        loop {
            match self.limiter.try_start(self.chat_id, self.ticket) {
                Ok(go) => {
                    self.taken = true;
                    tokio::time::sleep_until(go).await;
                    return Ok(());
                }
                // Moved past the deadline by a 429 or another share's turn: the slot
                // goes back (dropping `self`) for those who can still use it.
                Err(due) if due > self.deadline => return Err(NoSlot { earliest: due }),
                // Not due (yet, or any more: it moved): sleep until it is.
                Err(due) => tokio::time::sleep_until(due).await,
            }
        }
    }
}

impl<L: Deref<Target = RateLimiter>> Drop for Place<L> {
    fn drop(&mut self) {
        if !self.taken {
            self.limiter.cancel(self.chat_id, self.ticket);
        }
    }
}

/// A slot reserved in a chat's book that its holder has not taken yet (see
/// [`RateLimiter::reserve_owned`]). It keeps its place in the turns like any waiting
/// call; dropped unused, it gives the slot back.
pub struct Reservation(Place<Arc<RateLimiter>>);

impl Reservation {
    /// The chat the slot is in.
    pub fn chat_id(&self) -> i64 {
        self.0.chat_id
    }

    /// Sleeps until the slot is due, without taking it (a 429 or another share's turn
    /// may still move it before [`start`](Reservation::start)); [`NoSlot`] when it was
    /// moved past the deadline, then the slot goes back with the reservation.
    pub async fn due(&self) -> Result<(), NoSlot> {
        let place = &self.0;
        loop {
            let due = place.limiter.due_at(place.chat_id, place.ticket);
            if due > place.deadline {
                return Err(NoSlot { earliest: due });
            }
            if due <= Instant::now() {
                return Ok(());
            }
            tokio::time::sleep_until(due).await;
        }
    }

    /// Takes the slot: at once if it is still due, else once it is (as
    /// [`RateLimiter::acquire`] would), and through the overall gate.
    pub async fn start(self) -> Result<(), NoSlot> {
        self.0.start().await
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
}
