//! Approvers away (`/away until <time> [delegate]`, `/back`; issue 50): while away, a
//! person is not mentioned in reminders (their delegate is, in their place), and a
//! question nobody but away people could answer goes to a delegate's private chat.
//! Pure: the caller stores the absences and passes the time.

use std::time::Duration;

use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, Time};

/// The longest one can be away in one go: longer is a configuration change (take the
/// person off `approvers`), not an absence.
pub const MAX_AWAY: Duration = Duration::from_secs(90 * 86_400);

/// Who stands in for someone away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegate {
    pub id: u64,
    /// The `[people]` name the delegate was named by.
    pub name: String,
}

/// One person away until a time, and who stands in, if anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absence {
    pub person: u64,
    pub until: OffsetDateTime,
    pub delegate: Option<Delegate>,
}

/// Whether `person` is away at `now` by `absences`.
pub fn is_away(absences: &[Absence], person: u64, now: OffsetDateTime) -> bool {
    absences.iter().any(|a| a.person == person && a.until > now)
}

/// Who a reminder addressed to `people` mentions at `now`: each one not away, and in
/// place of each one away their delegate (when the delegate is not away too); each once,
/// in order.
pub fn mentioned(people: &[u64], absences: &[Absence], now: OffsetDateTime) -> Vec<u64> {
    let mut out = Vec::new();
    for &p in people {
        let stand_in = match absences.iter().find(|a| a.person == p && a.until > now) {
            None => Some(p),
            Some(a) => a
                .delegate
                .as_ref()
                .map(|d| d.id)
                .filter(|d| !is_away(absences, *d, now)),
        };
        if let Some(id) = stand_in.filter(|id| !out.contains(id)) {
            out.push(id);
        }
    }
    out
}

/// The delegate a question of a route whose deciders are `approvers` goes to at `now`:
/// when every one of them is away, the first (by id) away approver's delegate who is
/// not away. `None` while someone can still answer, or nobody named a delegate.
pub fn delegate_for<'a>(
    approvers: impl IntoIterator<Item = &'a u64>,
    absences: &'a [Absence],
    now: OffsetDateTime,
) -> Option<&'a Delegate> {
    let mut ids: Vec<u64> = approvers.into_iter().copied().collect();
    ids.sort_unstable();
    if ids.is_empty() || !ids.iter().all(|id| is_away(absences, *id, now)) {
        return None;
    }
    ids.iter().find_map(|id| {
        absences
            .iter()
            .find(|a| a.person == *id && a.until > now)
            .and_then(|a| a.delegate.as_ref())
            .filter(|d| !is_away(absences, d.id, now))
    })
}

const DATE: &[BorrowedFormatItem<'static>] = format_description!("[year]-[month]-[day]");
const CLOCK: &[BorrowedFormatItem<'static>] = format_description!("[hour]:[minute]");

/// `/away until …`'s time, read from the start of `words` (UTC): `18:00` (the next
/// time the clock says so), `2026-12-24` (that day's start), `2026-12-24 09:00`, or a
/// span from now (`90m`, `8h`, `3d`). The time and how many words it took; or why not.
pub fn parse_until(words: &[&str], now: OffsetDateTime) -> Result<(OffsetDateTime, usize), String> {
    let first = *words
        .first()
        .ok_or("say until when: /away until 18:00, until 2026-12-24 09:00, or until 3d")?;
    let (until, used) = if let Ok(date) = time::Date::parse(first, DATE) {
        match words.get(1).and_then(|w| Time::parse(w, CLOCK).ok()) {
            Some(clock) => (PrimitiveDateTime::new(date, clock).assume_utc(), 2),
            None => (date.midnight().assume_utc(), 1),
        }
    } else if let Ok(clock) = Time::parse(first, CLOCK) {
        let today = now.replace_time(clock);
        (
            if today > now {
                today
            } else {
                today + Duration::from_secs(86_400)
            },
            1,
        )
    } else if let Some(span) = span(first) {
        (now + span, 1)
    } else {
        return Err(format!(
            "'{first}' is no time: write 18:00, 2026-12-24, 2026-12-24 09:00 (UTC), or a span such as 90m, 8h, 3d"
        ));
    };
    if until <= now {
        return Err("that time has passed already".into());
    }
    if until - now > MAX_AWAY {
        return Err(
            "at most 90 days: for longer, take the person off the route's approvers".into(),
        );
    }
    Ok((until, used))
}

/// `90m`, `8h`, `3d`.
fn span(word: &str) -> Option<Duration> {
    let unit = match word.chars().last()? {
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return None,
    };
    let n: u64 = word[..word.len() - 1].parse().ok().filter(|n| *n > 0)?;
    Some(Duration::from_secs(n.checked_mul(unit)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    }

    fn away(person: u64, until: &str, delegate: Option<u64>) -> Absence {
        Absence {
            person,
            until: at(until),
            delegate: delegate.map(|id| Delegate {
                id,
                name: format!("p{id}"),
            }),
        }
    }

    #[test]
    fn until_reads_a_clock_a_date_a_date_and_clock_or_a_span() {
        let now = at("2026-12-07T10:00:00Z");
        assert_eq!(
            parse_until(&["18:00"], now),
            Ok((at("2026-12-07T18:00:00Z"), 1))
        );
        assert_eq!(
            parse_until(&["09:00", "bob"], now),
            Ok((at("2026-12-08T09:00:00Z"), 1))
        );
        assert_eq!(
            parse_until(&["2026-12-24"], now),
            Ok((at("2026-12-24T00:00:00Z"), 1))
        );
        assert_eq!(
            parse_until(&["2026-12-24", "09:30", "bob"], now),
            Ok((at("2026-12-24T09:30:00Z"), 2))
        );
        assert_eq!(
            parse_until(&["3d"], now),
            Ok((at("2026-12-10T10:00:00Z"), 1))
        );
        assert_eq!(
            parse_until(&["90m"], now),
            Ok((at("2026-12-07T11:30:00Z"), 1))
        );
        assert!(
            parse_until(&["soon"], now)
                .unwrap_err()
                .contains("'soon' is no time")
        );
        assert!(
            parse_until(&["2026-12-01"], now)
                .unwrap_err()
                .contains("passed")
        );
        assert!(
            parse_until(&["91d"], now)
                .unwrap_err()
                .contains("at most 90 days")
        );
        assert!(parse_until(&["0h"], now).is_err());
        assert!(parse_until(&[], now).is_err());
    }

    #[test]
    fn an_away_person_is_mentioned_through_their_delegate_until_they_are_back() {
        let now = at("2026-12-07T10:00:00Z");
        let absences = [
            away(1, "2026-12-07T18:00:00Z", Some(3)),
            away(2, "2026-12-07T09:00:00Z", None),
        ];
        // 2's absence ended at 09:00: mentioned again.
        assert_eq!(mentioned(&[1, 2], &absences, now), [3, 2]);
        assert_eq!(mentioned(&[1, 3], &absences, now), [3], "once");
        let later = at("2026-12-07T18:00:00Z");
        assert_eq!(mentioned(&[1, 2], &absences, later), [1, 2]);
        let no_delegate = [away(1, "2026-12-07T18:00:00Z", None)];
        assert_eq!(mentioned(&[1, 2], &no_delegate, now), [2]);
    }

    #[test]
    fn a_question_goes_to_a_delegate_only_when_every_approver_is_away() {
        let now = at("2026-12-07T10:00:00Z");
        let absences = [away(1, "2026-12-07T18:00:00Z", Some(3))];
        assert_eq!(delegate_for(&[1], &absences, now).map(|d| d.id), Some(3));
        assert_eq!(delegate_for(&[1, 2], &absences, now), None, "2 can answer");
        let both = [
            away(1, "2026-12-07T18:00:00Z", Some(3)),
            away(3, "2026-12-07T12:00:00Z", None),
        ];
        assert_eq!(
            delegate_for(&[1], &both, now),
            None,
            "the delegate is away too"
        );
        assert_eq!(
            delegate_for(&[1], &absences, at("2026-12-07T19:00:00Z")),
            None
        );
    }
}
