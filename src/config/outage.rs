//! `[telegram] outage_*`: where the waiting questions are announced when Telegram is out
//! of reach for longer than `outage_after_seconds` (issue 50), and the secret that signs
//! those alerts.

use std::time::Duration;

use secrecy::SecretString;

use super::telegram::TelegramSettings;
use super::{ConfigError, EXAMPLE_SECRET_PREFIX, invalid};
use crate::domain::outbox::{Url, link_local_refusal};

/// How long Telegram must fail every probe before an outage is announced, unless
/// `outage_after_seconds` says otherwise: long enough that a few minutes of Telegram's
/// 5xx (which each question's delivery rides out) page nobody.
pub const DEFAULT_OUTAGE_AFTER_SECONDS: u64 = 300;
/// The variable holding the alerts' signing secret unless `outage_webhook_secret_env`
/// says otherwise.
pub const DEFAULT_OUTAGE_SECRET_ENV: &str = "HITL_OUTAGE_WEBHOOK_SECRET";
/// The shortest signing secret accepted: a receiver checks signatures against it, and a
/// short one can be guessed from a few signed alerts.
const MIN_SECRET_LEN: usize = 16;

/// The checked fallback for a Telegram outage.
#[derive(Debug, Clone)]
pub struct OutageAlerts {
    /// Where the alerts are POSTed.
    pub url: Url,
    /// Signs them as the agents' webhooks are signed. `SecretString`'s `Debug` hides it.
    pub secret: SecretString,
    /// How long Telegram must fail every probe first.
    pub after: Duration,
}

impl OutageAlerts {
    /// How often the leader asks Telegram (`getMe`) whether it answers: a quarter of the
    /// patience, so an outage is taken as one within a quarter of it past the patience,
    /// between 1 and 30 s.
    pub fn probe_every(&self) -> Duration {
        (self.after / 4).clamp(Duration::from_secs(1), Duration::from_secs(30))
    }
}

/// `outage_webhook_url` with its secret and `outage_after_seconds`, checked; `None` when
/// no URL is set (then Telegram is not probed, and an outage is only what each
/// question's delivery meets and reports).
pub(super) fn outage_alerts(
    t: &TelegramSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<OutageAlerts>, ConfigError> {
    if !(1..=86_400).contains(&t.outage_after_seconds) {
        return Err(invalid(
            "telegram.outage_after_seconds",
            "must be between 1 and 86400 (a day)",
        ));
    }
    let Some(raw) = &t.outage_webhook_url else {
        return Ok(None);
    };
    let key = "telegram.outage_webhook_url";
    let url = Url::parse(raw)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| invalid(key, format!("'{raw}' is not an http(s) URL")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            key,
            "must not carry a user or password: the alerts are signed with \
             outage_webhook_secret_env instead",
        ));
    }
    if let Some(what) = link_local_refusal(&url) {
        return Err(invalid(
            key,
            format!("points at {what}, where an alert could read the machine's credentials"),
        ));
    }
    let var = &t.outage_webhook_secret_env;
    let secret = env(var)
        .map(|s| s.trim().to_owned())
        .filter(|s| s.len() >= MIN_SECRET_LEN)
        .ok_or_else(|| {
            invalid(
                "telegram.outage_webhook_secret_env",
                format!(
                    "environment variable {var} (the secret that signs the outage alerts) \
                     must be set, to at least {MIN_SECRET_LEN} characters"
                ),
            )
        })?;
    // The example's placeholder is public: a receiver checking it would accept anyone's.
    if secret.starts_with(EXAMPLE_SECRET_PREFIX) {
        return Err(invalid(
            "telegram.outage_webhook_secret_env",
            format!(
                "environment variable {var} is the placeholder from .env.example; set a \
                 random secret (e.g. from `openssl rand -hex 32`)"
            ),
        ));
    }
    Ok(Some(OutageAlerts {
        url,
        secret: SecretString::from(secret),
        after: Duration::from_secs(t.outage_after_seconds),
    }))
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env};
    use crate::config::{Config, Settings};

    fn config(extra: &str, secret: Option<&str>) -> Result<Config, String> {
        let toml = BASE.replacen("[telegram]\n", &format!("[telegram]\n{extra}\n"), 1);
        let s = Settings::from_toml(&toml).map_err(|e| e.to_string())?;
        Config::from_settings(s, &|k| match k {
            "HITL_OUTAGE_WEBHOOK_SECRET" => secret.map(str::to_owned),
            _ => env(k),
        })
        .map_err(|e| e.to_string())
    }

    #[test]
    fn without_a_url_nothing_is_probed_or_announced() {
        assert!(config("", None).unwrap().outage_alerts.is_none());
    }

    #[test]
    fn a_url_needs_a_secret_long_enough_to_sign_with() {
        let url = r#"outage_webhook_url = "https://alerts.example/hitl""#;
        for secret in [None, Some("short")] {
            let e = config(url, secret).unwrap_err();
            assert!(
                e.contains("HITL_OUTAGE_WEBHOOK_SECRET") && e.contains("16"),
                "{e}"
            );
        }
        let e = config(url, Some("replace-with-a-long-random-string")).unwrap_err();
        assert!(e.contains("placeholder"), "{e}");
        let c = config(url, Some("0123456789abcdef")).unwrap();
        let alerts = c.outage_alerts.unwrap();
        assert_eq!(alerts.after.as_secs(), 300);
        assert_eq!(alerts.probe_every().as_secs(), 30);
        assert!(!format!("{alerts:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn a_url_that_is_not_plain_http_or_reaches_metadata_is_refused() {
        let secret = Some("0123456789abcdef");
        for (url, says) in [
            ("ftp://alerts.example/x", "not an http(s) URL"),
            ("https://u:p@alerts.example/x", "user or password"),
            ("http://169.254.169.254/latest", "cloud metadata"),
        ] {
            let e = config(&format!("outage_webhook_url = \"{url}\""), secret).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("u:p"), "{e}");
        }
        let e = config("outage_after_seconds = 0", None).unwrap_err();
        assert!(e.contains("outage_after_seconds"), "{e}");
    }
}
