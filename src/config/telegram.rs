//! `[telegram]` and the bot token: the Bot API's URL, and how updates arrive (long
//! polling, or Telegram calling the webhook route on the service's own server).

use secrecy::SecretString;
use serde::Deserialize;

use super::{ConfigError, invalid};

/// Environment variable that carries the Telegram bot token.
pub const BOT_TOKEN_ENV: &str = "TELEGRAM_BOT_TOKEN";

/// The bot's own user id: the digits before ':' of a well-formed bot token
/// (`123456789:AA...`). `None` when the token does not have that shape.
pub fn bot_id_of_token(token: &str) -> Option<u64> {
    let (id, secret) = token.split_once(':')?;
    let well_formed = !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_digit())
        && !secret.is_empty()
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if well_formed { id.parse().ok() } else { None }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramSettings {
    pub api_url: String,
    pub poll_timeout_seconds: u32,
    /// How updates arrive: `polling` (the default) or `webhook`.
    #[serde(default)]
    pub mode: TelegramModeSetting,
    /// Webhook mode: the path of the update route on the service's own HTTP server.
    #[serde(default = "default_webhook_path")]
    pub webhook_path: String,
    /// Webhook mode: the public base URL Telegram reaches the service at; the webhook URL
    /// is this joined with `webhook_path`.
    #[serde(default)]
    pub public_url: Option<String>,
    /// Webhook mode: the variable holding the secret Telegram sends back in
    /// `X-Telegram-Bot-Api-Secret-Token`.
    #[serde(default = "default_webhook_secret_env")]
    pub webhook_secret_env: String,
    /// How long Telegram must fail every probe before the waiting questions are
    /// announced to `outage_webhook_url` (issue 50).
    #[serde(default = "default_outage_after")]
    pub outage_after_seconds: u64,
    /// An alerting system's webhook that hears of a Telegram outage and its end.
    #[serde(default)]
    pub outage_webhook_url: Option<String>,
    /// The variable holding the secret that signs those alerts.
    #[serde(default = "default_outage_secret_env")]
    pub outage_webhook_secret_env: String,
}

fn default_outage_after() -> u64 {
    super::outage::DEFAULT_OUTAGE_AFTER_SECONDS
}

fn default_outage_secret_env() -> String {
    super::outage::DEFAULT_OUTAGE_SECRET_ENV.to_owned()
}

/// `[telegram] mode` as written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TelegramModeSetting {
    #[default]
    Polling,
    Webhook,
}

/// Where the webhook route is mounted unless `[telegram] webhook_path` says otherwise.
pub const DEFAULT_WEBHOOK_PATH: &str = "/telegram/webhook";
/// The variable holding the webhook secret unless `[telegram] webhook_secret_env` says
/// otherwise.
pub const DEFAULT_WEBHOOK_SECRET_ENV: &str = "TELEGRAM_WEBHOOK_SECRET";

fn default_webhook_path() -> String {
    DEFAULT_WEBHOOK_PATH.to_owned()
}

fn default_webhook_secret_env() -> String {
    DEFAULT_WEBHOOK_SECRET_ENV.to_owned()
}

impl TelegramSettings {
    /// Checks `api_url` (an http(s) base URL) and `poll_timeout_seconds`.
    pub(super) fn checked_api_url(&self) -> Result<reqwest::Url, ConfigError> {
        let telegram_api_url = reqwest::Url::parse(&self.api_url)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .ok_or_else(|| {
                invalid(
                    "telegram.api_url",
                    format!("'{}' is not an http(s) URL", self.api_url),
                )
            })?;
        // teloxide's HTTP client gives up after 17 s; a longer long-poll would always fail.
        if !(1..=15).contains(&self.poll_timeout_seconds) {
            return Err(invalid(
                "telegram.poll_timeout_seconds",
                "must be between 1 and 15",
            ));
        }
        Ok(telegram_api_url)
    }
}

/// The bot token, read through `env` from [`BOT_TOKEN_ENV`], trimmed.
pub(super) fn bot_token(env: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let bot_token = env(BOT_TOKEN_ENV)
        .filter(|t| !t.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                BOT_TOKEN_ENV,
                "the environment variable with the Telegram bot token is not set",
            )
        })?;
    Ok(bot_token.trim().to_owned())
}

/// How Telegram updates reach the service.
#[derive(Debug, Clone)]
pub enum TelegramMode {
    /// The service long-polls `getUpdates`.
    Polling,
    /// Telegram POSTs updates to the service's own HTTP server.
    Webhook(WebhookMode),
}

/// The checked webhook settings.
#[derive(Debug, Clone)]
pub struct WebhookMode {
    /// The route's path on the service's server; starts with `/`, names no API route.
    pub path: String,
    /// The URL given to `setWebhook`: `public_url` joined with `path`.
    pub url: reqwest::Url,
    /// What Telegram must send in `X-Telegram-Bot-Api-Secret-Token`: 1 to 256 of
    /// `A-Za-z0-9_-`. `SecretString`'s `Debug` does not show it.
    pub secret: SecretString,
}

/// Paths the agents' API (and the operational routes) use; the webhook route may not
/// shadow them. `/metrics` is included for the Prometheus endpoint.
const RESERVED_PATHS: &[&str] = &["/healthz", "/openapi.json", "/metrics", "/mcp"];

/// Checks `[telegram] mode` and, in webhook mode, the keys it needs.
pub(super) fn telegram_mode(
    t: &TelegramSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TelegramMode, ConfigError> {
    let path = &t.webhook_path;
    check_webhook_path(path)?;
    if t.mode == TelegramModeSetting::Polling {
        return Ok(TelegramMode::Polling);
    }
    let public = public_url(t)?;
    let joined = format!("{}{path}", public.as_str().trim_end_matches('/'));
    let url = reqwest::Url::parse(&joined).map_err(|e| {
        invalid(
            "telegram.public_url",
            format!("joined with webhook_path it is not a URL ({e})"),
        )
    })?;
    let secret = webhook_secret(t, env)?;
    Ok(TelegramMode::Webhook(WebhookMode {
        path: path.clone(),
        url,
        secret: SecretString::from(secret),
    }))
}

/// `webhook_path`: a plain path that shadows none of the service's own routes (checked
/// in either mode).
fn check_webhook_path(path: &str) -> Result<(), ConfigError> {
    let path_ok = path.len() > 1
        && path.starts_with('/')
        && !path.contains("//")
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b));
    if !path_ok {
        return Err(invalid(
            "telegram.webhook_path",
            format!(
                "'{path}' is not a path like /telegram/webhook (a leading /, then letters, \
                 digits and - . _ ~ /)"
            ),
        ));
    }
    let trimmed = path.trim_end_matches('/');
    if RESERVED_PATHS.contains(&trimmed)
        || trimmed == "/v1"
        || trimmed.starts_with("/v1/")
        || trimmed.starts_with("/mcp/")
    {
        return Err(invalid(
            "telegram.webhook_path",
            format!(
                "'{path}' collides with the service's API routes (/v1/..., /mcp, /healthz, ...)"
            ),
        ));
    }
    Ok(())
}

/// `public_url`: required in webhook mode; a plain base URL Telegram can call.
fn public_url(t: &TelegramSettings) -> Result<reqwest::Url, ConfigError> {
    let raw = t.public_url.as_deref().ok_or_else(|| {
        invalid(
            "telegram.public_url",
            "is required in webhook mode: the https URL Telegram reaches this service at",
        )
    })?;
    let public = reqwest::Url::parse(raw)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            invalid(
                "telegram.public_url",
                format!("'{raw}' is not an https URL"),
            )
        })?;
    if !public.username().is_empty()
        || public.password().is_some()
        || public.query().is_some()
        || public.fragment().is_some()
    {
        return Err(invalid(
            "telegram.public_url",
            "must be a plain base URL, without user, password, query or fragment",
        ));
    }
    let loopback = public.host_str().is_some_and(|h| {
        h.eq_ignore_ascii_case("localhost")
            || h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    // Telegram calls webhooks over https only; plain http is accepted for a loopback
    // host so a local Bot API server or the test fake can reach the route.
    if public.scheme() != "https" && !loopback {
        return Err(invalid(
            "telegram.public_url",
            format!("'{raw}' must be https (http is accepted for loopback hosts only)"),
        ));
    }
    // Telegram refuses any other port in setWebhook; saying so here beats a retry loop.
    if !loopback && !matches!(public.port_or_known_default(), Some(443 | 80 | 88 | 8443)) {
        return Err(invalid(
            "telegram.public_url",
            "Telegram only calls webhooks on ports 443, 80, 88 or 8443",
        ));
    }
    Ok(public)
}

/// The webhook secret, read from the variable `webhook_secret_env` names.
fn webhook_secret(
    t: &TelegramSettings,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, ConfigError> {
    let var = &t.webhook_secret_env;
    let secret = env(var).ok_or_else(|| {
        invalid(
            "telegram.webhook_secret_env",
            format!("environment variable {var} (the Telegram webhook secret) is not set"),
        )
    })?;
    // Telegram's rule for secret_token; anything else setWebhook would refuse.
    let secret_ok = (1..=256).contains(&secret.len())
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !secret_ok {
        return Err(invalid(
            "telegram.webhook_secret_env",
            format!(
                "environment variable {var} must hold 1 to 256 characters of A-Z, a-z, 0-9, _ \
                 and - (Telegram's rule for the webhook secret)"
            ),
        ));
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::BASE;
    use crate::config::{Config, Settings};

    #[test]
    fn a_missing_bot_token_is_refused() {
        let s = Settings::from_toml(BASE).unwrap();
        let e = Config::from_settings(s, &|_| None).unwrap_err().to_string();
        assert!(e.contains(BOT_TOKEN_ENV), "{e}");
    }

    #[test]
    fn the_bot_id_is_the_digits_before_the_colon_of_a_well_formed_token() {
        assert_eq!(bot_id_of_token("123456789:AAH-x_9"), Some(123_456_789));
        for bad in [
            "x", "123456", ":abc", "12a:abc", "123:", "123:a b", "123:a:b",
        ] {
            assert_eq!(bot_id_of_token(bad), None, "{bad}");
        }
    }
}
