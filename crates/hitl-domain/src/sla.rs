//! A route's `sla_seconds` (issue 50): how long its questions should take to decide.
//! A pending question is marked "at risk" once three quarters of it have passed and
//! "overdue" once all of it has, on its card for the approvers and in the agent's event
//! stream; a question still pending at its SLA is a breach, counted once.
//!
//! Pure: the marks are a function of when the question was asked, the SLA and the time
//! now, so the clock is the caller's (and the tests').

use std::time::Duration;

use time::OffsetDateTime;

/// A mark on a pending question's card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SlaMark {
    /// Three quarters of the SLA have passed.
    AtRisk,
    /// The SLA has passed: a breach.
    Overdue,
}

impl SlaMark {
    /// The mark the `shown`-th claimed step stands for (1: at risk, 2: overdue).
    pub fn of_count(shown: u32) -> Option<SlaMark> {
        match shown {
            0 => None,
            1 => Some(SlaMark::AtRisk),
            _ => Some(SlaMark::Overdue),
        }
    }

    /// How many marks up to this one (what is stored).
    pub fn count(self) -> u32 {
        match self {
            SlaMark::AtRisk => 1,
            SlaMark::Overdue => 2,
        }
    }
}

/// A route's SLA: at most this long from asking to deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sla(Duration);

impl Sla {
    /// `None` for zero: an SLA nobody could meet is a configuration error, refused by
    /// the caller.
    pub fn new(seconds: u64) -> Option<Sla> {
        (seconds > 0).then(|| Sla(Duration::from_secs(seconds)))
    }

    pub fn duration(self) -> Duration {
        self.0
    }

    /// When a question asked at `asked` gets `mark`.
    pub fn at(self, asked: OffsetDateTime, mark: SlaMark) -> OffsetDateTime {
        match mark {
            SlaMark::AtRisk => asked + self.0 * 3 / 4,
            SlaMark::Overdue => asked + self.0,
        }
    }

    /// The mark a question asked at `asked` carries at `now`, if any.
    pub fn mark_at(self, asked: OffsetDateTime, now: OffsetDateTime) -> Option<SlaMark> {
        [SlaMark::Overdue, SlaMark::AtRisk]
            .into_iter()
            .find(|m| self.at(asked, *m) <= now)
    }

    /// When the mark after the `shown` ones falls (`None`: both were shown).
    pub fn next_at(self, asked: OffsetDateTime, shown: u32) -> Option<OffsetDateTime> {
        match shown {
            0 => Some(self.at(asked, SlaMark::AtRisk)),
            1 => Some(self.at(asked, SlaMark::Overdue)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_question_is_at_risk_at_three_quarters_of_its_sla_and_overdue_at_all_of_it() {
        let sla = Sla::new(600).unwrap();
        let asked = at(0);
        assert_eq!(sla.mark_at(asked, at(449)), None);
        assert_eq!(sla.mark_at(asked, at(450)), Some(SlaMark::AtRisk));
        assert_eq!(sla.mark_at(asked, at(599)), Some(SlaMark::AtRisk));
        assert_eq!(sla.mark_at(asked, at(600)), Some(SlaMark::Overdue));
        assert_eq!(sla.mark_at(asked, at(86_400)), Some(SlaMark::Overdue));
    }

    #[test]
    fn the_next_mark_follows_what_was_shown_and_ends_after_overdue() {
        let sla = Sla::new(120).unwrap();
        assert_eq!(sla.next_at(at(0), 0), Some(at(90)));
        assert_eq!(sla.next_at(at(0), 1), Some(at(120)));
        assert_eq!(sla.next_at(at(0), 2), None);
        assert_eq!(SlaMark::of_count(0), None);
        assert_eq!(SlaMark::of_count(1), Some(SlaMark::AtRisk));
        assert_eq!(SlaMark::of_count(2), Some(SlaMark::Overdue));
        assert_eq!(SlaMark::Overdue.count(), 2);
    }

    #[test]
    fn a_zero_sla_is_none() {
        assert_eq!(Sla::new(0), None);
        assert_eq!(Sla::new(1).map(Sla::duration), Some(Duration::from_secs(1)));
    }
}
