//! `[stats]`: when `/stats` notes a person's approvals as a rubber stamp.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};
use crate::domain::stats::RubberStamp;

/// `[stats]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsSettings {
    /// At least this many approvals in the period (20)...
    pub rubber_stamp_approvals: u64,
    /// ...no cancel, and a median time to decide under this many seconds (3).
    pub rubber_stamp_median_seconds: f64,
}

impl Default for StatsSettings {
    fn default() -> Self {
        let d = RubberStamp::default();
        StatsSettings {
            rubber_stamp_approvals: d.min_approvals,
            rubber_stamp_median_seconds: d.max_median.as_secs_f64(),
        }
    }
}

impl StatsSettings {
    pub(super) fn checked(&self) -> Result<RubberStamp, ConfigError> {
        if self.rubber_stamp_approvals == 0 {
            return Err(invalid(
                "stats.rubber_stamp_approvals",
                "must be at least 1",
            ));
        }
        let s = self.rubber_stamp_median_seconds;
        if !(s > 0.0 && s <= 3600.0) {
            return Err(invalid(
                "stats.rubber_stamp_median_seconds",
                format!("must be more than 0 and at most 3600 seconds, got {s}"),
            ));
        }
        Ok(RubberStamp {
            min_approvals: self.rubber_stamp_approvals,
            max_median: Duration::from_secs_f64(s),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings};

    #[test]
    fn the_rubber_stamp_thresholds_default_and_are_checked() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert_eq!(c.rubber_stamp.min_approvals, 20);
        let toml = format!(
            "{BASE}\n[stats]\nrubber_stamp_approvals = 5\nrubber_stamp_median_seconds = 1.5\n"
        );
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        assert_eq!(c.rubber_stamp.min_approvals, 5);
        assert_eq!(c.rubber_stamp.max_median.as_millis(), 1500);
        let zero = err_of(&format!("{BASE}\n[stats]\nrubber_stamp_approvals = 0\n"));
        assert!(zero.contains("stats.rubber_stamp_approvals"), "{zero}");
        let neg = err_of(&format!(
            "{BASE}\n[stats]\nrubber_stamp_median_seconds = -1\n"
        ));
        assert!(neg.contains("stats.rubber_stamp_median_seconds"), "{neg}");
    }
}
