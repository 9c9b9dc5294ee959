//! `[mini_app]`: the operator's console, a Telegram Mini App the service serves itself
//! (`GET /app` and `/app/api/`), opened from Telegram at `{public_url}/app`.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// How fresh launch data must be by default: an hour, as most Mini Apps allow.
pub const DEFAULT_MAX_AGE_SECONDS: u64 = 3600;
/// The longest freshness allowed: a day. Older launch data proves little about who is
/// holding the phone now.
pub const MAX_MAX_AGE_SECONDS: u64 = 24 * 3600;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiniAppSettings {
    #[serde(default)]
    pub enabled: bool,
    /// The HTTPS origin Telegram opens (`https://hitl.example.com`); the page is
    /// `{public_url}/app`.
    #[serde(default)]
    pub public_url: Option<String>,
    /// The app's short name registered with @BotFather (`/newapp`), for links from
    /// groups (`https://t.me/<bot>/<short_name>`).
    #[serde(default)]
    pub short_name: Option<String>,
    /// How old launch data may be, in seconds.
    #[serde(default = "default_max_age")]
    pub max_age_seconds: u64,
}

fn default_max_age() -> u64 {
    DEFAULT_MAX_AGE_SECONDS
}

/// The console, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniApp {
    /// The origin, without a trailing slash.
    pub public_url: String,
    pub short_name: Option<String>,
    pub max_age: Duration,
}

impl MiniAppSettings {
    /// `None` when the console is off.
    pub(super) fn checked(&self) -> Result<Option<MiniApp>, ConfigError> {
        if !self.enabled {
            return Ok(None);
        }
        let url = self.public_url.as_deref().map(str::trim).unwrap_or("");
        let parsed = reqwest::Url::parse(url).map_err(|_| {
            invalid(
                "mini_app.public_url",
                "is required with enabled = true: the HTTPS origin Telegram opens, such as https://hitl.example.com",
            )
        })?;
        // Telegram opens Mini Apps over HTTPS only; loopback http is for tests and a
        // local try.
        let loopback = matches!(parsed.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
        if parsed.scheme() != "https" && !(parsed.scheme() == "http" && loopback) {
            return Err(invalid(
                "mini_app.public_url",
                "must be an https:// origin (Telegram opens Mini Apps over HTTPS only)",
            ));
        }
        if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(
                "mini_app.public_url",
                "must be an origin only (scheme, host and port), without a path: the page is served at /app",
            ));
        }
        if let Some(name) = &self.short_name {
            let shaped = (3..=30).contains(&name.len())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !shaped {
                return Err(invalid(
                    "mini_app.short_name",
                    "must be the app's short name as registered with @BotFather: 3 to 30 letters, digits or underscores",
                ));
            }
        }
        if self.max_age_seconds == 0 || self.max_age_seconds > MAX_MAX_AGE_SECONDS {
            return Err(invalid(
                "mini_app.max_age_seconds",
                format!("must be from 1 to {MAX_MAX_AGE_SECONDS} (a day)"),
            ));
        }
        Ok(Some(MiniApp {
            public_url: url.trim_end_matches('/').to_owned(),
            short_name: self.short_name.clone(),
            max_age: Duration::from_secs(self.max_age_seconds),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: &str, short: Option<&str>, age: u64) -> MiniAppSettings {
        MiniAppSettings {
            enabled: true,
            public_url: Some(url.into()),
            short_name: short.map(str::to_owned),
            max_age_seconds: age,
        }
    }

    #[test]
    fn the_console_needs_an_https_origin_a_short_name_of_botfathers_shape_and_a_bounded_age() {
        let ok = settings("https://hitl.example.com/", Some("console"), 3600)
            .checked()
            .unwrap()
            .unwrap();
        assert_eq!(ok.public_url, "https://hitl.example.com");
        assert!(
            settings("http://127.0.0.1:8080", None, 60)
                .checked()
                .is_ok()
        );
        for (url, short, age, key) in [
            ("", None, 3600, "mini_app.public_url"),
            ("http://hitl.example.com", None, 3600, "mini_app.public_url"),
            (
                "https://hitl.example.com/app",
                None,
                3600,
                "mini_app.public_url",
            ),
            (
                "https://hitl.example.com",
                Some("a"),
                3600,
                "mini_app.short_name",
            ),
            (
                "https://hitl.example.com",
                Some("bad-name"),
                3600,
                "mini_app.short_name",
            ),
            (
                "https://hitl.example.com",
                None,
                0,
                "mini_app.max_age_seconds",
            ),
            (
                "https://hitl.example.com",
                None,
                86401,
                "mini_app.max_age_seconds",
            ),
        ] {
            let e = settings(url, short, age).checked().unwrap_err();
            assert!(e.to_string().contains(key), "{url} {short:?} {age}: {e}");
        }
        let off = MiniAppSettings::default();
        assert_eq!(off.checked().unwrap(), None);
    }
}
