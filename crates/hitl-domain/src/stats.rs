//! Honest statistics of a route's decisions (`/stats`): per approver and per tool, how
//! many questions, how long people took to decide (median and 90th percentile), and
//! how the calls ended: cancelled, timed out, let through by a rule, a window or a
//! grant, and the runs that failed after a yes. And a factual note where a person
//! approved many questions, cancelled none, and took a few seconds at the median: the
//! pattern of approvals nobody really reads.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::question::{Status, Via};

/// One ended call, as the statistics read it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub tool: String,
    /// The person who decided it, when a person did: their id and name.
    pub person: Option<(u64, String)>,
    pub status: Status,
    pub via: Option<Via>,
    /// How long the question waited for its decision.
    pub waited: Duration,
    /// Whether it ran and failed after a yes.
    pub run_failed: bool,
}

/// When a person's approvals earn the "rubber stamp" note.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RubberStamp {
    /// At least this many approvals in the period...
    pub min_approvals: u64,
    /// ...none cancelled, and a median time to decide under this.
    pub max_median: Duration,
}

impl Default for RubberStamp {
    fn default() -> Self {
        RubberStamp {
            min_approvals: 20,
            max_median: Duration::from_secs(3),
        }
    }
}

/// The figures of one group (a person, or a tool).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Figures {
    /// Questions in the group.
    pub asked: u64,
    /// Decided by a person.
    pub by_people: u64,
    /// Median and 90th percentile of the time people took, when any decided.
    pub median: Option<Duration>,
    pub p90: Option<Duration>,
    pub approved: u64,
    pub cancelled: u64,
    pub timed_out: u64,
    pub by_rule: u64,
    pub by_window: u64,
    pub by_grant: u64,
    pub failed_runs: u64,
}

/// A person's figures, under their name.
#[derive(Debug, Clone, PartialEq)]
pub struct Person {
    pub id: u64,
    pub name: String,
    pub figures: Figures,
    /// The rubber-stamp note applies.
    pub rubber_stamp: bool,
}

/// The statistics of a period.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stats {
    pub total: Figures,
    /// People, the most decisions first.
    pub people: Vec<Person>,
    /// Tools, the most questions first (then by name).
    pub tools: Vec<(String, Figures)>,
}

/// The `q`th quantile (0 to 1) of sorted `xs`, by the nearest rank: a value someone
/// actually took, never an interpolation between two.
pub fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Adds one call to a group's running figures (the times are kept to sort later).
fn add(f: &mut Figures, times: &mut Vec<Duration>, e: &Ended) {
    f.asked += 1;
    if e.person.is_some() {
        f.by_people += 1;
        times.push(e.waited);
    }
    match (e.status, e.via) {
        (Status::Confirmed, Some(Via::Rule)) => f.by_rule += 1,
        (Status::Confirmed, Some(Via::Window)) => f.by_window += 1,
        (Status::Confirmed, Some(Via::Grant)) => f.by_grant += 1,
        (Status::Confirmed, _) => f.approved += 1,
        (Status::Timeout, _) => f.timed_out += 1,
        (Status::Cancelled, _) => f.cancelled += 1,
        _ => {}
    }
    if e.run_failed {
        f.failed_runs += 1;
    }
}

fn finish(f: &mut Figures, mut times: Vec<Duration>) {
    times.sort();
    f.median = quantile(&times, 0.5);
    f.p90 = quantile(&times, 0.9);
}

/// The statistics of `ended`.
pub fn of(ended: &[Ended], stamp: RubberStamp) -> Stats {
    let mut total = (Figures::default(), Vec::new());
    let mut people: BTreeMap<u64, (String, Figures, Vec<Duration>)> = BTreeMap::new();
    let mut tools: BTreeMap<String, (Figures, Vec<Duration>)> = BTreeMap::new();
    for e in ended {
        add(&mut total.0, &mut total.1, e);
        let (f, t) = tools.entry(e.tool.clone()).or_default();
        add(f, t, e);
        if let Some((id, name)) = &e.person {
            let (n, f, t) = people
                .entry(*id)
                .or_insert_with(|| (name.clone(), Figures::default(), Vec::new()));
            // The latest name they decided under.
            n.clone_from(name);
            add(f, t, e);
        }
    }
    let mut stats = Stats::default();
    finish(&mut total.0, total.1);
    stats.total = total.0;
    for (id, (name, mut f, t)) in people {
        finish(&mut f, t);
        let rubber_stamp = f.approved >= stamp.min_approvals
            && f.cancelled == 0
            && f.median.is_some_and(|m| m < stamp.max_median);
        stats.people.push(Person {
            id,
            name,
            figures: f,
            rubber_stamp,
        });
    }
    stats.people.sort_by(|a, b| {
        b.figures
            .by_people
            .cmp(&a.figures.by_people)
            .then(a.id.cmp(&b.id))
    });
    for (tool, (mut f, t)) in tools {
        finish(&mut f, t);
        stats.tools.push((tool, f));
    }
    stats
        .tools
        .sort_by(|a, b| b.1.asked.cmp(&a.1.asked).then(a.0.cmp(&b.0)));
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn by(person: u64, tool: &str, status: Status, waited: u64) -> Ended {
        Ended {
            tool: tool.into(),
            person: Some((person, format!("p{person}"))),
            status,
            via: Some(Via::Operator),
            waited: secs(waited),
            run_failed: false,
        }
    }

    #[test]
    fn quantiles_are_nearest_rank_values_someone_took() {
        let xs: Vec<Duration> = (1..=10).map(secs).collect();
        assert_eq!(quantile(&xs, 0.5), Some(secs(5)));
        assert_eq!(quantile(&xs, 0.9), Some(secs(9)));
        assert_eq!(quantile(&xs[..1], 0.9), Some(secs(1)));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[secs(2), secs(4)], 0.5), Some(secs(2)));
    }

    #[test]
    fn figures_per_person_and_tool_with_how_each_call_ended() {
        let mut ended = vec![
            by(1, "deploy", Status::Confirmed, 10),
            by(1, "deploy", Status::Cancelled, 30),
            by(2, "deploy", Status::Confirmed, 50),
            by(2, "restart", Status::Confirmed, 70),
        ];
        ended.push(Ended {
            person: None,
            via: Some(Via::Rule),
            ..by(0, "restart", Status::Confirmed, 0)
        });
        ended.push(Ended {
            person: None,
            via: Some(Via::Timeout),
            ..by(0, "deploy", Status::Timeout, 120)
        });
        ended[0].run_failed = true;
        let s = of(&ended, RubberStamp::default());
        assert_eq!(s.total.asked, 6);
        assert_eq!(s.total.by_people, 4);
        assert_eq!(
            (s.total.median, s.total.p90),
            (Some(secs(30)), Some(secs(70)))
        );
        assert_eq!(
            (
                s.total.approved,
                s.total.cancelled,
                s.total.timed_out,
                s.total.by_rule
            ),
            (3, 1, 1, 1)
        );
        assert_eq!(s.total.failed_runs, 1);
        assert_eq!(s.tools[0].0, "deploy");
        assert_eq!(s.tools[0].1.asked, 4);
        assert_eq!(s.tools[0].1.median, Some(secs(30)));
        assert_eq!(s.people.len(), 2);
        assert_eq!(
            (s.people[0].id, s.people[0].figures.median),
            (1, Some(secs(10)))
        );
        assert_eq!(s.people[1].figures.median, Some(secs(50)));
    }

    #[test]
    fn many_quick_approvals_and_no_cancel_earn_the_note_and_one_cancel_does_not() {
        let quick: Vec<Ended> = (0..20)
            .map(|_| by(7, "read", Status::Confirmed, 1))
            .collect();
        let s = of(&quick, RubberStamp::default());
        assert!(s.people[0].rubber_stamp);
        let mut one_cancel = quick.clone();
        one_cancel.push(by(7, "read", Status::Cancelled, 1));
        assert!(!of(&one_cancel, RubberStamp::default()).people[0].rubber_stamp);
        let few = &quick[..19];
        assert!(!of(few, RubberStamp::default()).people[0].rubber_stamp);
        let slow: Vec<Ended> = (0..20)
            .map(|_| by(7, "read", Status::Confirmed, 3))
            .collect();
        assert!(!of(&slow, RubberStamp::default()).people[0].rubber_stamp);
    }
}
