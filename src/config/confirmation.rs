//! `[confirmation]`: how long a question waits for its answer, and the window an
//! approval opens unless the request says otherwise.

use serde::Deserialize;

use super::{ConfigError, invalid};

/// The largest `confirmation.max_timeout_seconds` accepted.
pub const MAX_TIMEOUT_LIMIT: f64 = 366.0 * 24.0 * 3600.0;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfirmationSettings {
    pub default_timeout_seconds: f64,
    pub max_timeout_seconds: f64,
    pub default_window_seconds: u64,
}

impl ConfirmationSettings {
    /// Checks the timeouts: each a number of seconds greater than 0, the default at most
    /// the longest.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !(self.max_timeout_seconds.is_finite() && self.max_timeout_seconds > 0.0) {
            return Err(invalid(
                "confirmation.max_timeout_seconds",
                "must be a number greater than 0",
            ));
        }
        // A deadline is stored as epoch milliseconds; a year is far beyond any human wait
        // and keeps every deadline arithmetic far from overflow.
        if self.max_timeout_seconds > MAX_TIMEOUT_LIMIT {
            return Err(invalid(
                "confirmation.max_timeout_seconds",
                format!("must be at most {MAX_TIMEOUT_LIMIT} (366 days)"),
            ));
        }
        if !(self.default_timeout_seconds.is_finite()
            && self.default_timeout_seconds > 0.0
            && self.default_timeout_seconds <= self.max_timeout_seconds)
        {
            return Err(invalid(
                "confirmation.default_timeout_seconds",
                "must be greater than 0 and at most confirmation.max_timeout_seconds",
            ));
        }
        Ok(())
    }
}
