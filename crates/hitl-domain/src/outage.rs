//! Telegram out of reach (issue 50): when the bot cannot reach Telegram for longer than
//! `[telegram] outage_after_seconds`, nobody can see a question or tap an answer, so the
//! questions waiting are announced to an alerting system's webhook, once when the outage
//! is taken as one and once when it ends.
//!
//! [`Watch`] turns the probes' results into those two moments; [`alert_body`] is what
//! the alerting system receives. Both are pure: the probing, the storing (one outage
//! open at a time, in the database, so a restart or another replica does not announce
//! it twice) and the signed delivery sit above.

use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::ids::OutageId;
use crate::question::{Question, operator_time, rfc3339};

/// How many waiting questions an alert lists at most; the count is always whole. An
/// alerting system shows the first lines of a payload, and a backlog of thousands
/// would make the one delivery that matters too large to be accepted.
pub const ALERT_LISTS_AT_MOST: usize = 50;

/// An outage taken as one (and announced, when a fallback URL is configured).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    pub id: OutageId,
    /// The start of the first probe that failed.
    pub since: OffsetDateTime,
}

/// What a probe's result changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Nothing to store or announce.
    Nothing,
    /// Telegram has failed every probe since `since`, for longer than the patience:
    /// an outage begins (the caller stores it, then calls [`Watch::began`]).
    Began {
        since: OffsetDateTime,
        error: String,
    },
    /// A probe succeeded while `outage` was open: it ends (the caller stores its end,
    /// then calls [`Watch::ended`]).
    Ended { outage: Outage },
}

/// Probes' results in, outages' beginnings and ends out. A failure shorter than the
/// patience is no outage: Telegram answers 5xx for seconds now and then, and each
/// question's own delivery rides those out.
#[derive(Debug, Clone)]
pub struct Watch {
    patience: Duration,
    /// The start of the first of the probes failing in a row, if the last one failed.
    failing_since: Option<OffsetDateTime>,
    /// The outage stored and not ended yet (read back at start, so a restart during an
    /// outage announces its end, not a second beginning).
    open: Option<Outage>,
}

impl Watch {
    pub fn new(patience: Duration, open: Option<Outage>) -> Watch {
        Watch {
            patience,
            // An outage open at start has lasted since at least its own start.
            failing_since: open.as_ref().map(|o| o.since),
            open,
        }
    }

    /// The probe that started at `started` answered `result`; it is now `now`.
    pub fn probed(
        &mut self,
        result: Result<(), String>,
        started: OffsetDateTime,
        now: OffsetDateTime,
    ) -> Seen {
        match result {
            Ok(()) => {
                self.failing_since = None;
                match &self.open {
                    Some(outage) => Seen::Ended {
                        outage: outage.clone(),
                    },
                    None => Seen::Nothing,
                }
            }
            Err(error) => {
                let since = *self.failing_since.get_or_insert(started);
                let long = (now - since).try_into().unwrap_or(Duration::ZERO) >= self.patience;
                if self.open.is_none() && long {
                    Seen::Began { since, error }
                } else {
                    Seen::Nothing
                }
            }
        }
    }

    /// The outage [`Seen::Began`] asked for is stored (or another replica's was found
    /// open): it is the one to end.
    pub fn began(&mut self, outage: Outage) {
        self.open = Some(outage);
    }

    /// The open outage's end is stored (or it was found ended already).
    pub fn ended(&mut self) {
        self.open = None;
    }

    /// The outage open now, if any.
    pub fn open(&self) -> Option<&Outage> {
        self.open.as_ref()
    }
}

/// Which of an outage's two moments an alert announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlertKind {
    Began,
    Ended,
}

impl AlertKind {
    /// The alert's `event`, also its kind in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Began => "telegram_outage_started",
            AlertKind::Ended => "telegram_outage_ended",
        }
    }
}

/// The JSON an alerting system receives for `kind` of `outage`: what is going on in one
/// sentence (`summary`, for systems that show only a title), when it started (and
/// ended), the error the last probe met, how many questions wait and the first
/// [`ALERT_LISTS_AT_MOST`] of them, the soonest deadline first.
///
/// A waiting question is listed by id, route, agent, tool (or that it is a free-form
/// question) and its times: never its parameters or briefing, which may hold what the
/// agent's owner would not send to an alerting system read by a whole on-call team. The
/// alert says who must look, and where (`hitl-telegram pending`), not what to decide.
pub fn alert_body(
    kind: AlertKind,
    outage: &Outage,
    ended_at: Option<OffsetDateTime>,
    error: Option<&str>,
    waiting: &[Question],
    waiting_count: u64,
) -> Value {
    let questions = match waiting_count {
        1 => "1 question is".to_owned(),
        n => format!("{n} questions are"),
    };
    let summary = match (kind, ended_at) {
        (AlertKind::Ended, Some(end)) => format!(
            "Telegram is reachable again after {} (since {}); {questions} waiting for an \
             answer.",
            lasted(end - outage.since),
            operator_time(outage.since)
        ),
        _ => format!(
            "Telegram has been unreachable since {}: approvers cannot see or answer \
             questions; {questions} waiting.",
            operator_time(outage.since)
        ),
    };
    let listed: Vec<Value> = waiting
        .iter()
        .take(ALERT_LISTS_AT_MOST)
        .map(|q| {
            json!({
                "id": q.id.as_str(),
                "route": q.route,
                "agent": q.agent,
                "tool": if q.interaction.is_some() { None } else { Some(q.tool.as_str()) },
                "kind": if q.interaction.is_some() { "interaction" } else { "confirmation" },
                "created_at": rfc3339(q.created_at),
                "expires_at": rfc3339(q.expires_at),
            })
        })
        .collect();
    json!({
        "event": kind.as_str(),
        "outage_id": outage.id.as_str(),
        "since": rfc3339(outage.since),
        "ended_at": ended_at.map(rfc3339),
        "summary": summary,
        "error": error,
        "waiting_count": waiting_count,
        "waiting": listed,
        "waiting_listed": listed.len(),
    })
}

/// A duration as an operator reads it: "4 min 10 s", "2 h 5 min", "12 s".
fn lasted(d: time::Duration) -> String {
    let s = d.whole_seconds().max(0);
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, sec) => format!("{sec} s"),
        (0, min, sec) => format!("{min} min {sec} s"),
        (h, min, _) => format!("{h} h {min} min"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-12-07 10:00:00 UTC);

    fn secs(n: i64) -> OffsetDateTime {
        T0 + time::Duration::seconds(n)
    }

    fn failed(w: &mut Watch, at: i64) -> Seen {
        w.probed(Err("down".into()), secs(at), secs(at))
    }

    #[test]
    fn failures_shorter_than_the_patience_are_no_outage() {
        let mut w = Watch::new(Duration::from_secs(60), None);
        assert_eq!(failed(&mut w, 0), Seen::Nothing);
        assert_eq!(failed(&mut w, 59), Seen::Nothing);
        assert_eq!(w.probed(Ok(()), secs(61), secs(61)), Seen::Nothing);
        // The clock starts again at the next failure.
        assert_eq!(failed(&mut w, 100), Seen::Nothing);
        assert_eq!(failed(&mut w, 159), Seen::Nothing);
    }

    #[test]
    fn an_outage_begins_once_from_its_first_failure_and_ends_at_the_first_success() {
        let mut w = Watch::new(Duration::from_secs(60), None);
        assert_eq!(failed(&mut w, 0), Seen::Nothing);
        let began = failed(&mut w, 60);
        assert_eq!(
            began,
            Seen::Began {
                since: secs(0),
                error: "down".into()
            }
        );
        // Until stored, the next failure asks again (a storage error is retried).
        assert_eq!(failed(&mut w, 70), began);
        let outage = Outage {
            id: OutageId::generate(),
            since: secs(0),
        };
        w.began(outage.clone());
        assert_eq!(failed(&mut w, 80), Seen::Nothing, "announced once");
        assert_eq!(
            w.probed(Ok(()), secs(90), secs(90)),
            Seen::Ended {
                outage: outage.clone()
            }
        );
        w.ended();
        assert_eq!(w.probed(Ok(()), secs(95), secs(95)), Seen::Nothing);
    }

    #[test]
    fn a_probe_that_hangs_counts_from_when_it_started() {
        let mut w = Watch::new(Duration::from_secs(30), None);
        assert!(matches!(
            w.probed(Err("no answer".into()), secs(0), secs(30)),
            Seen::Began { since, .. } if since == secs(0)
        ));
    }

    #[test]
    fn an_outage_open_at_start_is_ended_not_announced_again() {
        let outage = Outage {
            id: OutageId::generate(),
            since: secs(-600),
        };
        let mut w = Watch::new(Duration::from_secs(60), Some(outage.clone()));
        assert_eq!(failed(&mut w, 0), Seen::Nothing);
        assert_eq!(w.probed(Ok(()), secs(5), secs(5)), Seen::Ended { outage });
    }

    #[test]
    fn the_alert_says_what_happens_and_lists_no_parameters() {
        let outage = Outage {
            id: OutageId::generate(),
            since: secs(0),
        };
        let body = alert_body(AlertKind::Began, &outage, None, Some("refused"), &[], 0);
        assert_eq!(body["event"], "telegram_outage_started");
        assert_eq!(body["since"], "2026-12-07T10:00:00.000Z");
        assert_eq!(body["waiting_count"], 0);
        assert_eq!(
            body["summary"],
            "Telegram has been unreachable since 2026-12-07 10:00:00 UTC: approvers \
             cannot see or answer questions; 0 questions are waiting."
        );
        let end = alert_body(AlertKind::Ended, &outage, Some(secs(250)), None, &[], 1);
        assert_eq!(end["event"], "telegram_outage_ended");
        assert_eq!(end["ended_at"], "2026-12-07T10:04:10.000Z");
        assert_eq!(
            end["summary"],
            "Telegram is reachable again after 4 min 10 s (since 2026-12-07 10:00:00 \
             UTC); 1 question is waiting for an answer."
        );
    }

    #[test]
    fn durations_read_as_an_operator_says_them() {
        assert_eq!(lasted(time::Duration::seconds(12)), "12 s");
        assert_eq!(lasted(time::Duration::seconds(7_500)), "2 h 5 min");
    }
}
