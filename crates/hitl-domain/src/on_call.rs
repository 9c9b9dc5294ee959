//! A route's on-call rota (issue 50): who is on call at a local weekday and time, so a
//! reminder mentions them rather than every approver (anyone who approves the route
//! may still decide). Pure: the caller turns an instant into the rota's local time, in
//! the route's time zone.

/// Minutes in a day: a shift ends at most here (`24:00`).
pub const DAY_MINUTES: u16 = 24 * 60;

/// One person's weekly hours: on the days marked (Monday first), from `from` to `to`
/// (minutes after midnight). A shift whose `to` is before its `from` runs over
/// midnight into the next day (`22:00`-`06:00`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shift {
    pub person: u64,
    pub days: [bool; 7],
    pub from: u16,
    pub to: u16,
}

impl Shift {
    /// Whether the shift covers `minute` of `weekday` (0 Monday .. 6 Sunday).
    pub fn covers(&self, weekday: usize, minute: u16) -> bool {
        let day = |d: usize| self.days.get(d % 7).copied().unwrap_or(false);
        if self.from < self.to {
            day(weekday) && (self.from..self.to).contains(&minute)
        } else {
            (day(weekday) && minute >= self.from) || (day(weekday + 6) && minute < self.to)
        }
    }
}

/// A route's shifts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rota {
    pub shifts: Vec<Shift>,
}

impl Rota {
    /// Who is on call at `minute` of `weekday` (0 Monday), each once, in rota order.
    pub fn on_call(&self, weekday: usize, minute: u16) -> Vec<u64> {
        let mut people = Vec::new();
        for s in self.shifts.iter().filter(|s| s.covers(weekday, minute)) {
            if !people.contains(&s.person) {
                people.push(s.person);
            }
        }
        people
    }
}

/// `mon`..`sun` as a day number (0 Monday); `None` for anything else.
pub fn day_number(name: &str) -> Option<usize> {
    ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        .iter()
        .position(|d| d.eq_ignore_ascii_case(name))
}

/// `HH:MM` as minutes after midnight, `24:00` included; `None` for anything else.
pub fn minute_of(text: &str) -> Option<u16> {
    let (h, m) = text.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    let minute = h * 60 + m;
    (m < 60 && minute <= DAY_MINUTES).then_some(minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shift(person: u64, days: &[usize], from: &str, to: &str) -> Shift {
        let mut d = [false; 7];
        for &i in days {
            d[i] = true;
        }
        Shift {
            person,
            days: d,
            from: minute_of(from).unwrap(),
            to: minute_of(to).unwrap(),
        }
    }

    #[test]
    fn a_day_shift_covers_its_days_from_its_start_to_just_before_its_end() {
        let rota = Rota {
            shifts: vec![shift(1, &[0, 1, 2, 3, 4], "09:00", "17:00")],
        };
        assert_eq!(rota.on_call(0, 9 * 60), [1]);
        assert_eq!(rota.on_call(4, 17 * 60 - 1), [1]);
        assert!(rota.on_call(4, 17 * 60).is_empty());
        assert!(rota.on_call(0, 9 * 60 - 1).is_empty());
        assert!(rota.on_call(5, 12 * 60).is_empty(), "Saturday");
    }

    #[test]
    fn a_night_shift_runs_over_midnight_into_the_next_day() {
        let rota = Rota {
            shifts: vec![
                shift(2, &[6], "22:00", "06:00"),
                shift(3, &[6], "00:00", "24:00"),
            ],
        };
        assert_eq!(rota.on_call(6, 23 * 60), [2, 3], "Sunday night");
        assert_eq!(rota.on_call(0, 5 * 60), [2], "into Monday morning");
        assert!(rota.on_call(0, 6 * 60).is_empty());
        assert_eq!(rota.on_call(6, 5 * 60), [3]);
    }

    #[test]
    fn times_and_days_read_only_as_written() {
        assert_eq!(minute_of("00:00"), Some(0));
        assert_eq!(minute_of("24:00"), Some(1440));
        assert_eq!(minute_of("07:30"), Some(450));
        for bad in ["7:30", "24:01", "12:60", "12-00", "", "ab:cd"] {
            assert_eq!(minute_of(bad), None, "{bad}");
        }
        assert_eq!(day_number("Mon"), Some(0));
        assert_eq!(day_number("sun"), Some(6));
        assert_eq!(day_number("monday"), None);
    }
}
