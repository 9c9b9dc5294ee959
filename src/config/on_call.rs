//! A route's on-call rota (`on_call`, `on_call_time_zone`): who a reminder mentions at
//! a given time. Each entry is one person's weekly hours in the route's time zone (an
//! IANA name, `UTC` by default, read from the database bundled with the binary, so
//! daylight saving time moves the hours as the clocks on the wall do).

use serde::Deserialize;
use time::OffsetDateTime;

use super::{ConfigError, invalid};
use crate::domain::on_call::{DAY_MINUTES, Rota, Shift, day_number, minute_of};

/// One `on_call` entry as the file writes it:
/// `{ person = 111, days = ["mon-fri"], from = "09:00", to = "17:00" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShiftSettings {
    pub person: u64,
    /// Days (`mon` .. `sun`) and ranges of them (`mon-fri`, `sat-sun`).
    pub days: Vec<String>,
    /// `HH:MM`, local time.
    pub from: String,
    /// `HH:MM` (`24:00`: midnight at the end of the day); before `from`: the shift runs
    /// over midnight.
    pub to: String,
}

/// A route's rota in its time zone.
#[derive(Debug, Clone)]
pub struct OnCall {
    pub rota: Rota,
    pub time_zone: jiff::tz::TimeZone,
    pub time_zone_name: String,
}

impl OnCall {
    /// Who is on call at `at`: none when nobody's hours cover it.
    pub fn at(&self, at: OffsetDateTime) -> Vec<u64> {
        let Ok(ts) = jiff::Timestamp::from_second(at.unix_timestamp()) else {
            return Vec::new();
        };
        let offset = self.time_zone.to_offset(ts).seconds();
        let Ok(offset) = time::UtcOffset::from_whole_seconds(offset) else {
            return Vec::new();
        };
        let local = at.to_offset(offset);
        let weekday = usize::from(local.weekday().number_days_from_monday());
        let minute = u16::from(local.hour()) * 60 + u16::from(local.minute());
        self.rota.on_call(weekday, minute)
    }
}

/// Checks a route's rota: each person an approver of the route, days and times as
/// written, the time zone one the database knows. `None` for a route without one.
pub(super) fn checked(
    key: &str,
    shifts: &[ShiftSettings],
    time_zone: Option<&str>,
    is_approver: impl Fn(u64) -> bool,
) -> Result<Option<OnCall>, ConfigError> {
    let name = time_zone.unwrap_or("UTC");
    if shifts.is_empty() {
        if time_zone.is_some() {
            return Err(invalid(
                format!("{key}.on_call_time_zone"),
                "is set but the route has no on_call entries",
            ));
        }
        return Ok(None);
    }
    let tz = jiff::tz::TimeZone::get(name).map_err(|_| {
        invalid(
            format!("{key}.on_call_time_zone"),
            format!("'{name}' is not a time zone name of the IANA database (e.g. Europe/Berlin)"),
        )
    })?;
    let mut rota = Rota::default();
    for (j, s) in shifts.iter().enumerate() {
        let at = format!("{key}.on_call[{j}]");
        if !is_approver(s.person) {
            return Err(invalid(
                format!("{at}.person"),
                format!(
                    "{} is not one of the route's approvers: only they are on call",
                    s.person
                ),
            ));
        }
        let days = days(&s.days).map_err(|e| invalid(format!("{at}.days"), e))?;
        let time = |t: &str, what: &str| {
            minute_of(t).ok_or_else(|| {
                invalid(
                    format!("{at}.{what}"),
                    format!("'{t}' is not a time of day as HH:MM (00:00 to 24:00)"),
                )
            })
        };
        let (from, to) = (time(&s.from, "from")?, time(&s.to, "to")?);
        if from == to || from == DAY_MINUTES {
            return Err(invalid(
                format!("{at}.to"),
                "a shift must last: from and to differ, and from is before 24:00 (00:00 to 24:00 is a whole day)",
            ));
        }
        rota.shifts.push(Shift {
            person: s.person,
            days,
            from,
            to,
        });
    }
    Ok(Some(OnCall {
        rota,
        time_zone: tz,
        time_zone_name: name.to_owned(),
    }))
}

/// `["mon-fri", "sun"]` as marked days; a range may wrap (`fri-mon`).
fn days(items: &[String]) -> Result<[bool; 7], String> {
    if items.is_empty() {
        return Err("must name at least one day (mon .. sun, or a range such as mon-fri)".into());
    }
    let mut days = [false; 7];
    for item in items {
        let unknown = || format!("'{item}' is not a day (mon .. sun) or a range of days (mon-fri)");
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (
                day_number(a).ok_or_else(unknown)?,
                day_number(b).ok_or_else(unknown)?,
            ),
            None => {
                let d = day_number(item).ok_or_else(unknown)?;
                (d, d)
            }
        };
        let mut d = first;
        loop {
            days[d] = true;
            if d == last {
                break;
            }
            d = (d + 1) % 7;
        }
    }
    Ok(days)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shift(person: u64, days: &[&str], from: &str, to: &str) -> ShiftSettings {
        ShiftSettings {
            person,
            days: days.iter().map(|d| (*d).to_owned()).collect(),
            from: from.into(),
            to: to.into(),
        }
    }

    fn utc(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).unwrap()
    }

    #[test]
    fn the_rota_is_read_in_the_routes_time_zone_summer_time_included() {
        let rota = checked(
            "routes[0]",
            &[
                shift(1, &["mon-fri"], "09:00", "17:00"),
                shift(2, &["sat-sun"], "00:00", "24:00"),
            ],
            Some("Europe/Berlin"),
            |_| true,
        )
        .unwrap()
        .unwrap();
        // Monday 2026-07-06 07:30 UTC is 09:30 in Berlin (UTC+2 in summer).
        assert_eq!(rota.at(utc("2026-07-06T07:30:00Z")), [1]);
        // 06:59 UTC is 08:59 there: before the shift.
        assert!(rota.at(utc("2026-07-06T06:59:00Z")).is_empty());
        // In winter (UTC+1) 08:30 UTC is 09:30.
        assert_eq!(rota.at(utc("2026-12-07T08:30:00Z")), [1]);
        // Friday 23:30 UTC is already Saturday in Berlin.
        assert_eq!(rota.at(utc("2026-12-11T23:30:00Z")), [2]);
    }

    #[test]
    fn a_rota_is_refused_naming_what_is_wrong() {
        let refused = |shifts: &[ShiftSettings], tz: Option<&str>| {
            checked("routes[0]", shifts, tz, |p| p == 1)
                .unwrap_err()
                .to_string()
        };
        let ok = shift(1, &["mon"], "09:00", "17:00");
        assert!(
            refused(&[shift(9, &["mon"], "09:00", "17:00")], None)
                .contains("not one of the route's approvers")
        );
        assert!(
            refused(std::slice::from_ref(&ok), Some("Mars/Olympus"))
                .contains("not a time zone name")
        );
        assert!(
            refused(&[shift(1, &["monday"], "09:00", "17:00")], None)
                .contains("'monday' is not a day")
        );
        assert!(refused(&[shift(1, &[], "09:00", "17:00")], None).contains("at least one day"));
        assert!(
            refused(&[shift(1, &["mon"], "9:00", "17:00")], None).contains("'9:00' is not a time")
        );
        assert!(refused(&[shift(1, &["mon"], "09:00", "09:00")], None).contains("must last"));
        assert!(refused(&[], Some("UTC")).contains("no on_call entries"));
        assert!(checked("routes[0]", &[], None, |_| true).unwrap().is_none());
        let wrap = checked(
            "r",
            &[shift(1, &["fri-mon"], "00:00", "24:00")],
            None,
            |_| true,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            wrap.rota.shifts[0].days,
            [true, false, false, false, true, true, true]
        );
    }
}
