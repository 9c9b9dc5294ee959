//! When a route reminds its approvers or escalates a question still pending:
//! `remind_after` and `escalate_after`, as a share of the question's timeout or a time
//! after it was asked.

use std::time::Duration;

use serde::Deserialize;
use time::OffsetDateTime;

/// A point in a question's life, as the config writes it: `"50%"` of its timeout, or a
/// time after it was asked (`"10m"`, `"90s"`, `"2h"`, or a number of seconds).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum WhenSetting {
    Seconds(u64),
    Text(String),
}

/// See [`WhenSetting`]: parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// This many percent of the question's timeout (as it is now, extensions included).
    Share(u32),
    After(Duration),
}

impl When {
    pub(super) fn parse(s: &WhenSetting) -> Result<When, String> {
        let text = match s {
            WhenSetting::Seconds(0) => return Err("must be after the question is asked".into()),
            WhenSetting::Seconds(n) => return Ok(When::After(Duration::from_secs(*n))),
            WhenSetting::Text(t) => t.trim(),
        };
        let bad = || {
            format!(
                "'{text}' is neither a share of the timeout (\"50%\") nor a duration (\"90s\", \"10m\", \"2h\")"
            )
        };
        if let Some(p) = text.strip_suffix('%') {
            let p: u32 = p.trim().parse().map_err(|_| bad())?;
            if !(1..=99).contains(&p) {
                return Err(format!("'{text}': a share must be between 1% and 99%"));
            }
            return Ok(When::Share(p));
        }
        let (digits, unit) = text
            .find(|c: char| !c.is_ascii_digit())
            .map_or((text, ""), |at| text.split_at(at));
        let n: u64 = digits.parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "" | "s" => n,
            "m" | "min" => n.saturating_mul(60),
            "h" => n.saturating_mul(3600),
            _ => return Err(bad()),
        };
        if secs == 0 {
            return Err("must be after the question is asked".into());
        }
        Ok(When::After(Duration::from_secs(secs)))
    }

    /// The moment this point falls on for a question asked at `created` and due at
    /// `expires`.
    pub fn at(self, created: OffsetDateTime, expires: OffsetDateTime) -> OffsetDateTime {
        match self {
            When::Share(p) => {
                let whole = (expires - created).whole_milliseconds().max(0);
                created + time::Duration::milliseconds((whole * i128::from(p) / 100) as i64)
            }
            When::After(d) => created + d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reminder_and_escalation_points_read_as_shares_or_durations() {
        let parse = |t: &str| When::parse(&WhenSetting::Text(t.into()));
        assert_eq!(parse("50%"), Ok(When::Share(50)));
        assert_eq!(parse(" 90s "), Ok(When::After(Duration::from_secs(90))));
        assert_eq!(parse("10m"), Ok(When::After(Duration::from_secs(600))));
        assert_eq!(parse("2h"), Ok(When::After(Duration::from_secs(7200))));
        assert_eq!(
            When::parse(&WhenSetting::Seconds(30)),
            Ok(When::After(Duration::from_secs(30)))
        );
        for bad in ["0%", "100%", "-5%", "0s", "ten minutes", "5 days", "%", ""] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let t0 = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let due = t0 + Duration::from_secs(100);
        assert_eq!(When::Share(25).at(t0, due), t0 + Duration::from_secs(25));
        assert_eq!(
            When::After(Duration::from_secs(7)).at(t0, due),
            t0 + Duration::from_secs(7)
        );
    }
}
