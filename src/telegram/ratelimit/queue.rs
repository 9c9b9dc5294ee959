//! One chat's book: the slots it used recently and those reserved in it, spaced by the
//! chat's limits, and the turns in which its shares (each agent's and the service's)
//! take their slots.

use std::collections::{HashSet, VecDeque};

use tokio::time::Instant;

use super::{Limits, Share};

#[derive(Default)]
pub(super) struct ChatQueue {
    /// Slots used recently and slots reserved, in time order (each at least
    /// `per_chat_interval` after the one before); the reserved ones in turn order. Used
    /// slots stay only while they still constrain a new one: the last, and for groups
    /// the last `group_messages` within `group_window`.
    pub(super) slots: VecDeque<Slot>,
    /// Set by a 429: no slot of this chat may start before it, including slots reserved
    /// after the 429 arrived.
    pub(super) not_before: Option<Instant>,
    /// The latest turn a slot of this chat started in.
    pub(super) turn: u64,
    /// The shares that started a slot in `turn`: their next reservation belongs to the
    /// next turn. At most one entry per share that posted in the latest turn.
    pub(super) served: HashSet<Share>,
}

pub(super) struct Slot {
    pub(super) ticket: u64,
    pub(super) at: Instant,
    /// The caller went ahead; the slot now only spaces out the ones after it.
    pub(super) used: bool,
    pub(super) share: Share,
    pub(super) turn: u64,
}

impl ChatQueue {
    /// The earliest instant a slot placed at index `j` may take, the slots now at `j`
    /// and after moving behind it.
    pub(super) fn earliest_at(
        &self,
        j: usize,
        now: Instant,
        group: bool,
        limits: &Limits,
    ) -> Instant {
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
    pub(super) fn turn_for(&self, share: &Share) -> u64 {
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
    pub(super) fn place_for(&self, turn: u64) -> usize {
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
    pub(super) fn respace(&mut self, from: usize, group: bool, limits: &Limits) {
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

    pub(super) fn position(&self, ticket: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.ticket == ticket)
    }

    /// The slot at `j` starts: the chat's turn moves on to it. A slot of an earlier
    /// turn starting late (its caller woke after a later one) changes nothing.
    pub(super) fn start(&mut self, j: usize) {
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
    pub(super) fn prune(&mut self, now: Instant, group: bool, limits: &Limits) -> bool {
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
