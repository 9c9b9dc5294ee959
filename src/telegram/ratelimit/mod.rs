//! Telegram's flood limits, kept on our side so we rarely meet its 429s, and each chat's
//! slots shared fairly between those who post there.
//!
//! Telegram lets a bot send about one message per second to a chat, twenty per minute
//! to a group, and thirty per second overall; past that it answers 429 with
//! `retry_after`, and a bot that keeps pushing earns longer bans. Every `sendMessage`,
//! `sendDocument` and `editMessageText` therefore takes a slot here first
//! ([`RateLimiter::acquire`]). Reservations, 429s, fair turns between [`Share`]s,
//! deadlines and the overall gate are explained in docs/architecture.md ("Module notes").
//!
//! One chat's book of slots, used and reserved, and whose turn it is, is `queue.rs`;
//! this file holds the limiter over all chats and the reservations its callers wait on.

mod queue;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use queue::{ChatQueue, Slot};

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
