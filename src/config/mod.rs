//! Settings: the TOML file, environment overrides, and the checks that turn them into a
//! [`Config`] the service can trust.
//!
//! Two layers, on purpose: [`Settings`] is what the file (plus `HITL__SECTION__KEY`
//! environment overrides) says, deserialised strictly so a typo is an error rather than a
//! silently ignored key; [`Config`] is what the service runs on, built by
//! [`Config::from_settings`] only after every cross-reference has been checked and every
//! secret has been read from the environment. Secrets never live in files.
//!
//! Each section of the file has a module of its own, which holds what the file says
//! (`…Settings`), what the service runs on, and the checks that turn one into the other,
//! each naming the key at fault: `server`, `database`, `telegram` (with how updates
//! arrive), `confirmation`, `webhooks`, `redis_bridge` and `metrics`; `load` reads the
//! file and the environment. [`Config::from_settings`] calls their checks in turn, then
//! checks what spans sections.

mod confirmation;
mod database;
mod load;
mod metrics;
mod redis_bridge;
mod server;
mod telegram;
mod webhooks;

pub use confirmation::{ConfirmationSettings, MAX_TIMEOUT_LIMIT};
pub use database::{DatabaseSettings, DatabaseUrl};
pub use load::ENV_OVERRIDE_PREFIX;
pub use metrics::MetricsSettings;
pub use redis_bridge::{RedisBridge, RedisBridgeSettings};
pub use server::{
    DEFAULT_BODY_READ_TIMEOUT_SECONDS, DEFAULT_HEADER_READ_TIMEOUT_SECONDS,
    DEFAULT_IDLE_TIMEOUT_SECONDS, DEFAULT_MAX_CONNECTIONS, HttpLimits, MAX_HTTP_TIMEOUT_SECONDS,
    ServerSettings,
};
pub use telegram::{
    BOT_TOKEN_ENV, DEFAULT_WEBHOOK_PATH, DEFAULT_WEBHOOK_SECRET_ENV, TelegramMode,
    TelegramModeSetting, TelegramSettings, WebhookMode, bot_id_of_token,
};
pub use webhooks::WebhookSettings;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The shortest agent bearer token accepted: a token is the agent's only credential,
/// and a few characters can be guessed over the network.
pub const MIN_AGENT_TOKEN_CHARS: usize = 16;
/// How `.env.example`'s placeholder secrets begin (`replace-with-a-long-random-string`,
/// the bot token's `123456789:replace-me`).
const EXAMPLE_SECRET_PREFIX: &str = "replace-";

/// The group chat id in the shipped example config (`config/default.toml`): a
/// configuration still holding it has not been filled in yet.
pub const EXAMPLE_CHAT_ID: i64 = -1_001_234_567_890;
/// The user ids in the shipped example config (approvers, `[people]`,
/// `[owner_telegram_ids]`).
pub const EXAMPLE_USER_IDS: [u64; 2] = [11_111_111, 22_222_222];

/// The file as written, after environment overrides.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub server: ServerSettings,
    pub database: DatabaseSettings,
    pub telegram: TelegramSettings,
    pub confirmation: ConfirmationSettings,
    #[serde(default)]
    pub webhooks: WebhookSettings,
    /// Maps agents' `owner_id` values to Telegram user ids, for `forbid_self_approval`.
    #[serde(default)]
    pub owner_telegram_ids: HashMap<String, u64>,
    /// People by name, with their Telegram user ids: interaction recipients and
    /// `target_humans` name them (`alice = 11111111`).
    #[serde(default)]
    pub people: HashMap<String, u64>,
    #[serde(default)]
    pub routes: Vec<RouteSettings>,
    #[serde(default)]
    pub agents: Vec<AgentSettings>,
    /// AI-Parrot's `CLIDaemonHumanChannel` Redis queues, served as a channel.
    #[serde(default)]
    pub redis_bridge: Option<RedisBridgeSettings>,
    /// `GET /metrics`.
    #[serde(default)]
    pub metrics: MetricsSettings,
}

/// The first percent-encoded `/`, `\` or `.` (`%2F`, `%5C`, `%2E`, in any case) in
/// `path`, as written. A callback URL's path must hold none: the prefix check compares
/// the encoded path, but a receiver (or a proxy in front of it) that decodes before
/// routing would see another path, such as `/hooks/..%2Fadmin` becoming `/admin`.
pub fn encoded_separator(path: &str) -> Option<&str> {
    path.as_bytes().windows(3).enumerate().find_map(|(i, w)| {
        let code = [w[1].to_ascii_uppercase(), w[2].to_ascii_uppercase()];
        (w[0] == b'%' && matches!(&code, b"2F" | b"5C" | b"2E")).then(|| &path[i..i + 3])
    })
}

/// Why the callback URL `raw` (parsed as `url`) is refused for what its path holds, if
/// it is: a percent-encoded `/`, `\` or `.` (see [`encoded_separator`]). The text as
/// written is checked as well as the parsed path, because parsing resolves encoded dot
/// segments (`/hooks/%2e%2e/x` parses as `/x`).
pub fn callback_path_refusal(raw: &str, url: &reqwest::Url) -> Option<String> {
    let code = encoded_separator(raw_path(raw)).or_else(|| encoded_separator(url.path()))?;
    Some(format!(
        "must not hold {code} in its path: percent-encoded '/', '\\' and '.' (%2F, %5C, \
         %2E, in any case) are refused, because a receiver that decodes them would route \
         the delivery to another path than the one the agent's callback_url_prefixes allow"
    ))
}

/// Host names that are cloud metadata services (Google Cloud's, AWS's `instance-data`,
/// Tencent Cloud's, Equinix Metal's), whose answers include the machine's credentials:
/// each resolves to a link-local or otherwise internal address.
const METADATA_HOSTS: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];

/// Why a callback prefix's host is one a webhook must not reach unless the agent opts in
/// (`allow_link_local_callbacks`), if it is: a link-local address (169.254.0.0/16,
/// fe80::/10, also as an IPv4-mapped IPv6 address), a cloud metadata address
/// (169.254.169.254 is link-local; AWS's fd00:ec2::254, Alibaba Cloud's 100.100.100.200)
/// or one of [`METADATA_HOSTS`]. A webhook is a POST whose URL an agent chooses under the
/// prefix: one to a metadata service is the classic server-side request forgery. The
/// host is the parsed one, so `http://2852039166/` (169.254.169.254 as one number) is
/// caught too; a name that merely resolves to such an address is not.
pub fn link_local_refusal(url: &reqwest::Url) -> Option<&'static str> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let v4 = |ip: Ipv4Addr| {
        if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
            Some("a cloud metadata address")
        } else if ip.is_link_local() {
            Some("a link-local address")
        } else {
            None
        }
    };
    // The parser has normalised the host: IPv4 in dotted form, IPv6 in brackets.
    let host = url.host_str()?;
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        let ip: Ipv6Addr = v6.parse().ok()?;
        return if let Some(mapped) = ip.to_ipv4_mapped() {
            v4(mapped)
        } else if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
            Some("a cloud metadata address")
        } else if ip.segments()[0] & 0xffc0 == 0xfe80 {
            Some("a link-local address")
        } else {
            None
        };
    }
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return v4(ip);
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    METADATA_HOSTS
        .contains(&name.as_str())
        .then_some("a cloud metadata host")
}

/// The path of a URL as written: after the scheme and authority, before `?` or `#`.
fn raw_path(raw: &str) -> &str {
    let rest = raw.split_once("://").map_or(raw, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    rest.find(['/', '\\']).map_or("", |at| &rest[at..])
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSettings {
    pub name: String,
    pub chat_id: i64,
    #[serde(default)]
    pub approvers: Vec<u64>,
    /// Refuse taps by the Telegram user mapped to the request's owner.
    #[serde(default)]
    pub forbid_self_approval: bool,
    /// How many matching answers settle a `quorum` interaction here, when the interaction
    /// does not say (`policy.quorum`).
    #[serde(default)]
    pub quorum: Option<u32>,
    /// The longest window one Approve tap here may open; a longer one asked for is cut
    /// to it (and the cut is shown). An hour by default: a standing approval for longer
    /// is a decision for whoever configures the route, not for an agent's request.
    #[serde(default = "default_max_window_seconds")]
    pub max_window_seconds: u64,
    /// When to remind the approvers of a question still pending: shares of its timeout
    /// (`"50%"`) or times after it was asked (`"10m"`, `"90s"`, `"2h"`, or seconds).
    #[serde(default)]
    pub remind_after: Vec<WhenSetting>,
    /// When a question still pending is also posted to `escalate_to`.
    #[serde(default)]
    pub escalate_after: Option<WhenSetting>,
    /// The route a question is escalated to.
    #[serde(default)]
    pub escalate_to: Option<String>,
    /// Who may decide once a question is escalated: `"union"` (the approvers of both
    /// routes, in either chat; the default) or `"each"` (each chat's own approvers).
    #[serde(default)]
    pub escalation_approvers: Option<String>,
    /// Offer a "+N min" button: an approver moves the deadline by this many minutes.
    /// Off (unset) by default.
    #[serde(default)]
    pub extend_minutes: Option<u32>,
    /// How many times one question's deadline may be moved.
    #[serde(default = "default_max_extensions")]
    pub max_extensions: u32,
    /// A forum topic (`message_thread_id`) of the route's supergroup: questions,
    /// reminders, command replies and outcomes go there.
    #[serde(default)]
    pub topic_id: Option<i32>,
}

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
    fn parse(s: &WhenSetting) -> Result<When, String> {
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

/// See [`RouteSettings::max_extensions`].
pub const DEFAULT_MAX_EXTENSIONS: u32 = 3;

fn default_max_extensions() -> u32 {
    DEFAULT_MAX_EXTENSIONS
}

/// A route's escalation (see [`RouteSettings::escalate_after`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    pub after: When,
    /// The route the question is also posted to.
    pub to: String,
    /// Approvers of both routes decide in either chat (else each chat's own).
    pub union: bool,
}

/// See [`RouteSettings::max_window_seconds`].
pub const DEFAULT_MAX_WINDOW_SECONDS: u64 = 3600;

/// Most reminder points a route may list: each is a message in the chat.
pub const MAX_REMINDERS: usize = 10;

fn default_max_window_seconds() -> u64 {
    DEFAULT_MAX_WINDOW_SECONDS
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    pub name: String,
    pub token_env: String,
    #[serde(default)]
    pub routes: Vec<String>,
    pub default_route: Option<String>,
    /// Variable holding the secret that signs this agent's webhooks.
    pub webhook_secret_env: Option<String>,
    /// `callback_url`s this agent may use must start with one of these.
    #[serde(default)]
    pub callback_url_prefixes: Vec<String>,
    /// Lets `callback_url_prefixes` name link-local and cloud metadata addresses
    /// ([`link_local_refusal`]), which are refused without it.
    #[serde(default)]
    pub allow_link_local_callbacks: bool,
    /// Most `POST /v1/confirmations` per minute (a burst of this many, then a steady
    /// rate); more get 429 with `Retry-After`.
    #[serde(default = "default_requests_per_minute")]
    pub requests_per_minute: u32,
    /// Most requests pending at once; more get 429.
    #[serde(default = "default_max_pending")]
    pub max_pending: u32,
    /// Most `GET /v1/events` streams open at once; more get 429 with `Retry-After`.
    #[serde(default = "default_max_streams")]
    pub max_streams: u32,
    /// Most long-polls (`GET /v1/confirmations/{id}?wait=N`,
    /// `GET /v1/interactions/{id}?wait=N`) waiting at once; more get 429 with
    /// `Retry-After`.
    #[serde(default = "default_max_long_polls")]
    pub max_long_polls: u32,
}

/// See [`AgentSettings::max_streams`]: one stream per agent process is the usual use;
/// eight leaves room for replicas and a reconnect overlapping its old stream.
pub const DEFAULT_MAX_STREAMS: u32 = 8;
/// See [`AgentSettings::max_long_polls`]: one long-poll per pending request at the
/// default `max_pending`.
pub const DEFAULT_MAX_LONG_POLLS: u32 = 100;

fn default_max_streams() -> u32 {
    DEFAULT_MAX_STREAMS
}

fn default_max_long_polls() -> u32 {
    DEFAULT_MAX_LONG_POLLS
}

fn default_requests_per_minute() -> u32 {
    120
}

fn default_max_pending() -> u32 {
    100
}

/// Why a configuration was refused. Each message names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(String),
    #[error("invalid configuration: {key}: {reason}")]
    Invalid { key: String, reason: String },
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

/// A named Telegram destination and who may decide there.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub chat_id: i64,
    pub approvers: HashSet<u64>,
    pub forbid_self_approval: bool,
    pub quorum: Option<u32>,
    /// The longest window an approval on this route opens.
    pub max_window_seconds: u64,
    /// Reminder points, in the order given.
    pub remind_after: Vec<When>,
    pub escalation: Option<Escalation>,
    /// What one "+N min" tap adds; `None`: no such button.
    pub extend_by: Option<Duration>,
    pub max_extensions: u32,
    /// The forum topic questions of this route go to.
    pub topic_id: Option<i32>,
}

impl Route {
    pub fn may_decide(&self, user_id: u64) -> bool {
        self.approvers.contains(&user_id)
    }
}

/// One agent allowed to call the API. Only the SHA-256 of its token is kept, so the token
/// itself cannot leak from memory dumps, `Debug` output or logs.
#[derive(Clone)]
pub struct Agent {
    pub name: String,
    pub token_sha256: [u8; 32],
    pub routes: HashSet<String>,
    pub default_route: String,
    /// Signs webhooks; present whenever `callback_url_prefixes` is not empty.
    pub webhook_secret: Option<SecretString>,
    pub callback_url_prefixes: Vec<reqwest::Url>,
    pub requests_per_minute: u32,
    pub max_pending: u32,
    /// Most event streams open at once.
    pub max_streams: u32,
    /// Most long-polls waiting at once.
    pub max_long_polls: u32,
}

impl Agent {
    /// Whether `url` lies under one of the agent's allowed prefixes: same scheme, host
    /// and port, and a path under the prefix's path at a `/` boundary, so the prefix
    /// `https://a.example/hooks` admits neither `https://a.example.evil.net/...` nor
    /// `https://a.example/hooks-evil`.
    pub fn allows_callback(&self, url: &reqwest::Url) -> bool {
        if !url.username().is_empty() || url.password().is_some() {
            return false;
        }
        if encoded_separator(url.path()).is_some() {
            return false;
        }
        self.callback_url_prefixes.iter().any(|p| {
            p.scheme() == url.scheme()
                && p.host_str() == url.host_str()
                && p.port_or_known_default() == url.port_or_known_default()
                && {
                    let base = p.path();
                    let path = url.path();
                    base.ends_with('/') && path.starts_with(base)
                        || path == base
                        || path.starts_with(&format!("{base}/"))
                }
        })
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.name)
            .field("routes", &self.routes)
            .field("default_route", &self.default_route)
            .field(
                "callback_url_prefixes",
                &self
                    .callback_url_prefixes
                    .iter()
                    .map(|u| u.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The validated configuration the service runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub bind: String,
    pub database_url: DatabaseUrl,
    /// `database.lease_seconds`: how long the leader's lease lasts unrenewed.
    pub lease: Duration,
    pub telegram_api_url: reqwest::Url,
    pub poll_timeout_seconds: u32,
    /// Long polling or the webhook route.
    pub telegram_mode: TelegramMode,
    pub bot_token: SecretString,
    pub default_timeout_seconds: f64,
    pub max_timeout_seconds: f64,
    pub default_window_seconds: u64,
    pub webhooks: WebhookSettings,
    pub owner_telegram_ids: HashMap<String, u64>,
    pub people: HashMap<String, u64>,
    pub routes: HashMap<String, Arc<Route>>,
    pub agents: Vec<Arc<Agent>>,
    pub redis_bridge: Option<RedisBridge>,
    /// The bearer token `GET /metrics` requires, if it requires one.
    pub metrics_token: Option<TokenDigest>,
    /// `[server]`: timeouts and the connection limit of the HTTP server.
    pub http: HttpLimits,
    /// Running as `serve --demo` (one route, the approver's private chat): what the bot
    /// answers to `/start` speaks of the demo rather than of `[[routes]]` in a file the
    /// demo does not read. Set by the caller; `false` from [`Config::from_settings`].
    pub demo: bool,
}

/// A bearer token's SHA-256, the form it is checked in. Never printed: a digest of a
/// weak token can be brute-forced.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest(pub [u8; 32]);

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenDigest([redacted])")
    }
}

/// SHA-256 of a bearer token, the only form in which tokens are kept.
pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Config {
    /// Checks every cross-reference and reads the secrets through `env` (the process
    /// environment in production, a map in tests).
    /// Checks every section and what spans sections, and reads the secrets through `env`
    /// (the process environment in production, a map in tests).
    ///
    /// The sections are checked in a fixed order, so a configuration with several faults
    /// is always refused for the same one; a section that names another's entries
    /// (agents name routes; the Redis bridge an agent, people and a route) is checked
    /// after it, against what its check produced.
    pub fn from_settings(
        s: Settings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        s.server.check_bind()?;
        let (database_url, lease) = s.database.checked()?;
        let telegram_api_url = s.telegram.checked_api_url()?;
        let http = HttpLimits::from_settings(&s.server)?;
        let telegram_mode = telegram::telegram_mode(&s.telegram, env)?;
        s.confirmation.check()?;
        let bot_token = telegram::bot_token(env)?;

        let bot_id = bot_id_of_token(bot_token.trim());

        let route_chats: HashMap<String, i64> = s
            .routes
            .iter()
            .map(|r| (r.name.clone(), r.chat_id))
            .collect();
        let mut routes = HashMap::new();
        for (i, r) in s.routes.into_iter().enumerate() {
            let key = format!("routes[{i}]");
            if r.name.trim().is_empty() {
                return Err(invalid(format!("{key}.name"), "must not be empty"));
            }
            if r.approvers.is_empty() {
                return Err(invalid(
                    format!("{key}.approvers"),
                    format!("route '{}' has no approvers: nobody could decide", r.name),
                ));
            }
            if r.chat_id == 0 {
                return Err(invalid(format!("{key}.chat_id"), "must not be 0"));
            }
            if r.approvers.contains(&0) {
                return Err(invalid(
                    format!("{key}.approvers"),
                    "0 is not a Telegram user id",
                ));
            }
            if let Some(bot) = bot_id.filter(|id| r.approvers.contains(id)) {
                return Err(invalid(
                    format!("{key}.approvers"),
                    format!(
                        "{bot} is the bot itself (the id in {BOT_TOKEN_ENV}): a bot cannot tap; list the people who decide"
                    ),
                ));
            }
            let mut remind_after = Vec::new();
            for (j, w) in r.remind_after.iter().enumerate() {
                remind_after.push(
                    When::parse(w).map_err(|e| invalid(format!("{key}.remind_after[{j}]"), e))?,
                );
            }
            if remind_after.len() > MAX_REMINDERS {
                return Err(invalid(
                    format!("{key}.remind_after"),
                    format!("at most {MAX_REMINDERS} reminders"),
                ));
            }
            let escalation = match (&r.escalate_after, &r.escalate_to) {
                (None, None) => None,
                (Some(after), Some(to)) => {
                    match route_chats.get(to) {
                        None => {
                            return Err(invalid(
                                format!("{key}.escalate_to"),
                                format!("names unknown route '{to}'"),
                            ));
                        }
                        // Escalating is asking other people elsewhere; the same chat
                        // would post the question twice to the same people.
                        Some(chat) if *chat == r.chat_id && *to != r.name => {
                            return Err(invalid(
                                format!("{key}.escalate_to"),
                                format!(
                                    "route '{to}' posts to the same chat; escalate to a route in another chat"
                                ),
                            ));
                        }
                        Some(_) => {}
                    }
                    if *to == r.name {
                        return Err(invalid(
                            format!("{key}.escalate_to"),
                            "a route cannot escalate to itself",
                        ));
                    }
                    let union = match r.escalation_approvers.as_deref() {
                        None | Some("union") => true,
                        Some("each") => false,
                        Some(other) => {
                            return Err(invalid(
                                format!("{key}.escalation_approvers"),
                                format!("'{other}' is neither \"union\" nor \"each\""),
                            ));
                        }
                    };
                    Some(Escalation {
                        after: When::parse(after)
                            .map_err(|e| invalid(format!("{key}.escalate_after"), e))?,
                        to: to.clone(),
                        union,
                    })
                }
                (Some(_), None) => {
                    return Err(invalid(
                        format!("{key}.escalate_to"),
                        "escalate_after needs escalate_to: the route to escalate to",
                    ));
                }
                (None, Some(_)) => {
                    return Err(invalid(
                        format!("{key}.escalate_after"),
                        "escalate_to needs escalate_after: when to escalate",
                    ));
                }
            };
            let extend_by = match r.extend_minutes {
                None => None,
                Some(m) if (1..=1440).contains(&m) => Some(Duration::from_secs(u64::from(m) * 60)),
                Some(_) => {
                    return Err(invalid(
                        format!("{key}.extend_minutes"),
                        "must be between 1 and 1440 (a day)",
                    ));
                }
            };
            if !(1..=100).contains(&r.max_extensions) {
                return Err(invalid(
                    format!("{key}.max_extensions"),
                    "must be between 1 and 100",
                ));
            }
            if r.topic_id.is_some_and(|t| t <= 0) {
                return Err(invalid(
                    format!("{key}.topic_id"),
                    "must be a forum topic's message_thread_id (a positive number)",
                ));
            }
            if r.topic_id.is_some() && r.chat_id > 0 {
                return Err(invalid(
                    format!("{key}.topic_id"),
                    "topics exist in forum supergroups only; this chat_id is a private chat",
                ));
            }
            let route = Route {
                name: r.name.clone(),
                chat_id: r.chat_id,
                approvers: r.approvers.into_iter().collect(),
                forbid_self_approval: r.forbid_self_approval,
                quorum: r.quorum,
                max_window_seconds: r.max_window_seconds,
                remind_after,
                escalation,
                extend_by,
                max_extensions: r.max_extensions,
                topic_id: r.topic_id,
            };
            if r.max_window_seconds > crate::api::confirmations::MAX_WINDOW_SECONDS {
                return Err(invalid(
                    format!("{key}.max_window_seconds"),
                    format!(
                        "must be at most {} (366 days)",
                        crate::api::confirmations::MAX_WINDOW_SECONDS
                    ),
                ));
            }
            if r.quorum == Some(0) {
                return Err(invalid(format!("{key}.quorum"), "must be at least 1"));
            }
            if routes.insert(r.name.clone(), Arc::new(route)).is_some() {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("route '{}' is defined twice", r.name),
                ));
            }
        }

        let mut agents: Vec<Arc<Agent>> = Vec::new();
        for (i, a) in s.agents.into_iter().enumerate() {
            let key = format!("agents[{i}]");
            if a.name.trim().is_empty() {
                return Err(invalid(format!("{key}.name"), "must not be empty"));
            }
            if agents.iter().any(|other| other.name == a.name) {
                return Err(invalid(
                    format!("{key}.name"),
                    format!("agent '{}' is defined twice", a.name),
                ));
            }
            if a.routes.is_empty() {
                return Err(invalid(
                    format!("{key}.routes"),
                    format!("agent '{}' has no routes", a.name),
                ));
            }
            for r in &a.routes {
                if !routes.contains_key(r) {
                    return Err(invalid(
                        format!("{key}.routes"),
                        format!("agent '{}' names unknown route '{r}'", a.name),
                    ));
                }
            }
            let default_route = match a.default_route {
                Some(d) if a.routes.contains(&d) => d,
                Some(d) => {
                    return Err(invalid(
                        format!("{key}.default_route"),
                        format!("'{d}' is not one of agent '{}' routes", a.name),
                    ));
                }
                None if a.routes.len() == 1 => a.routes[0].clone(),
                None => {
                    return Err(invalid(
                        format!("{key}.default_route"),
                        format!("agent '{}' has several routes: name the default", a.name),
                    ));
                }
            };
            let token = env(&a.token_env)
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| {
                    invalid(
                        format!("{key}.token_env"),
                        format!(
                            "environment variable {} (the token of agent '{}') is not set",
                            a.token_env, a.name
                        ),
                    )
                })?;
            let token = token.trim();
            // Checked first: the bot token is refused for what it is, whatever its length.
            if token == bot_token.trim() {
                return Err(invalid(
                    format!("{key}.token_env"),
                    format!(
                        "the token of agent '{}' (in {}) is the bot token ({BOT_TOKEN_ENV}): give the agent a token of its own",
                        a.name, a.token_env
                    ),
                ));
            }
            if token.chars().count() < MIN_AGENT_TOKEN_CHARS {
                return Err(invalid(
                    format!("{key}.token_env"),
                    format!(
                        "the token of agent '{}' (in {}) is {} long; use at least {MIN_AGENT_TOKEN_CHARS} characters (e.g. from `openssl rand -hex 32`)",
                        a.name,
                        a.token_env,
                        match token.chars().count() {
                            1 => "1 character".to_owned(),
                            n => format!("{n} characters"),
                        }
                    ),
                ));
            }
            // The example's placeholder is public: anyone who read .env.example could
            // use it. Refuse it whatever its length.
            if token.starts_with(EXAMPLE_SECRET_PREFIX) {
                return Err(invalid(
                    format!("{key}.token_env"),
                    format!(
                        "the token of agent '{}' (in {}) is the placeholder from .env.example; set a random one (e.g. from `openssl rand -hex 32`)",
                        a.name, a.token_env
                    ),
                ));
            }
            let token_sha256 = token_digest(token);
            if agents
                .iter()
                .any(|other| other.token_sha256 == token_sha256)
            {
                return Err(invalid(
                    format!("{key}.token_env"),
                    format!(
                        "agent '{}' has the same token as another agent: tokens must identify one agent",
                        a.name
                    ),
                ));
            }
            if a.requests_per_minute == 0 {
                return Err(invalid(
                    format!("{key}.requests_per_minute"),
                    "must be at least 1",
                ));
            }
            if a.max_pending == 0 {
                return Err(invalid(format!("{key}.max_pending"), "must be at least 1"));
            }
            if a.max_streams == 0 {
                return Err(invalid(format!("{key}.max_streams"), "must be at least 1"));
            }
            if a.max_long_polls == 0 {
                return Err(invalid(
                    format!("{key}.max_long_polls"),
                    "must be at least 1",
                ));
            }
            let mut callback_url_prefixes = Vec::new();
            for p in &a.callback_url_prefixes {
                let url = reqwest::Url::parse(p)
                    .ok()
                    .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
                    .ok_or_else(|| {
                        invalid(
                            format!("{key}.callback_url_prefixes"),
                            format!("'{p}' is not an http(s) URL"),
                        )
                    })?;
                if let Some(reason) = callback_path_refusal(p, &url) {
                    return Err(invalid(
                        format!("{key}.callback_url_prefixes"),
                        format!("'{p}' {reason}"),
                    ));
                }
                if !a.allow_link_local_callbacks
                    && let Some(what) = link_local_refusal(&url)
                {
                    return Err(invalid(
                        format!("{key}.callback_url_prefixes"),
                        format!(
                            "'{p}' reaches {what}, where a webhook could read the machine's \
                             credentials; if this agent's receiver really lives there, set \
                             {key}.allow_link_local_callbacks = true"
                        ),
                    ));
                }
                callback_url_prefixes.push(url);
            }
            let webhook_secret = match &a.webhook_secret_env {
                Some(var) => Some(
                    env(var)
                        .filter(|t| !t.trim().is_empty())
                        .map(|t| SecretString::from(t.trim().to_owned()))
                        .ok_or_else(|| {
                            invalid(
                                format!("{key}.webhook_secret_env"),
                                format!(
                                    "environment variable {var} (the webhook secret of agent '{}') is not set",
                                    a.name
                                ),
                            )
                        })?,
                ),
                None if !callback_url_prefixes.is_empty() => {
                    return Err(invalid(
                        format!("{key}.webhook_secret_env"),
                        format!(
                            "agent '{}' allows callback URLs, so it needs a webhook secret",
                            a.name
                        ),
                    ));
                }
                None => None,
            };
            agents.push(Arc::new(Agent {
                name: a.name,
                token_sha256,
                routes: a.routes.into_iter().collect(),
                default_route,
                webhook_secret,
                callback_url_prefixes,
                requests_per_minute: a.requests_per_minute,
                max_pending: a.max_pending,
                max_streams: a.max_streams,
                max_long_polls: a.max_long_polls,
            }));
        }
        s.webhooks.check()?;
        if agents.is_empty() {
            return Err(invalid("agents", "at least one agent must be configured"));
        }
        let redis_bridge = match s.redis_bridge {
            Some(b) if b.enabled => Some(b.checked(&agents, &s.people)?),
            _ => None,
        };
        let metrics_token = s.metrics.token(env)?;
        // An agent's token would then also read the metrics, and the reverse.
        if let Some(TokenDigest(digest)) = &metrics_token
            && agents.iter().any(|a| a.token_sha256 == *digest)
        {
            return Err(invalid(
                "metrics.token_env",
                "the metrics token must differ from every agent's token",
            ));
        }

        Ok(Config {
            bind: s.server.bind,
            database_url,
            lease,
            telegram_api_url,
            poll_timeout_seconds: s.telegram.poll_timeout_seconds,
            telegram_mode,
            bot_token: SecretString::from(bot_token),
            default_timeout_seconds: s.confirmation.default_timeout_seconds,
            max_timeout_seconds: s.confirmation.max_timeout_seconds,
            default_window_seconds: s.confirmation.default_window_seconds,
            webhooks: s.webhooks,
            owner_telegram_ids: s.owner_telegram_ids,
            people: s.people,
            routes,
            agents,
            redis_bridge,
            metrics_token,
            http,
            demo: false,
        })
    }

    /// What is accepted but likely wrong: the example's placeholder ids, a bot token
    /// not shaped like `digits:secret`, an open `GET /metrics` on a non-loopback
    /// address. `check-config` prints these and `serve` logs them; neither refuses.
    pub fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let mut routes: Vec<&Arc<Route>> = self.routes.values().collect();
        routes.sort_by(|a, b| a.name.cmp(&b.name));
        for r in routes {
            if r.chat_id == EXAMPLE_CHAT_ID {
                warnings.push(format!(
                    "route '{}': chat_id {EXAMPLE_CHAT_ID} is the example's placeholder; put your group's id there (add the bot to the group and send /start@<bot username> there: the bot answers with the group's chat_id)",
                    r.name
                ));
            }
            let mut placeholders: Vec<u64> = EXAMPLE_USER_IDS
                .into_iter()
                .filter(|id| r.approvers.contains(id))
                .collect();
            placeholders.sort_unstable();
            if !placeholders.is_empty() {
                warnings.push(format!(
                    "route '{}': approvers {placeholders:?} are the example's placeholder ids; put your operators' Telegram user ids there",
                    r.name
                ));
            }
        }
        if let Some(bridge) = &self.redis_bridge
            && let Some(route) = bridge.route.as_deref().and_then(|r| self.route(r))
            && route.extend_by.is_some()
        {
            warnings.push(format!(
                "route '{}' offers more time (extend_minutes) and [redis_bridge] asks there: AI-Parrot agents behind the bridge keep their own timer (the queue protocol cannot move it), so they still give up at the first deadline",
                route.name
            ));
        }
        let mut named: Vec<(&str, &String, &u64)> = self
            .people
            .iter()
            .map(|(k, v)| ("people", k, v))
            .chain(
                self.owner_telegram_ids
                    .iter()
                    .map(|(k, v)| ("owner_telegram_ids", k, v)),
            )
            .filter(|(_, _, id)| EXAMPLE_USER_IDS.contains(id))
            .collect();
        named.sort();
        for (section, name, id) in named {
            warnings.push(format!(
                "[{section}] {name} = {id} is the example's placeholder id"
            ));
        }
        if self
            .bot_token()
            .split_once(':')
            .is_some_and(|(_, secret)| secret.starts_with(EXAMPLE_SECRET_PREFIX))
        {
            warnings.push(format!(
                "{BOT_TOKEN_ENV} is the placeholder from .env.example; put the token @BotFather gave you there"
            ));
        } else if bot_id_of_token(self.bot_token()).is_none() {
            warnings.push(format!(
                "{BOT_TOKEN_ENV} does not look like a bot token (digits:secret, as @BotFather gives it)"
            ));
        }
        let loopback = self
            .bind
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback());
        if !loopback && self.metrics_token.is_none() {
            warnings.push(format!(
                "server.bind {} is not a loopback address and [metrics] token_env is unset: anyone who can reach it may read GET /metrics (under docker compose the port is published on 127.0.0.1 only, which is fine unless you publish it wider)",
                self.bind
            ));
        }
        warnings
    }

    /// Reads everything from the process environment.
    pub fn from_settings_and_process_env(s: Settings) -> Result<Config, ConfigError> {
        Config::from_settings(s, &|k| std::env::var(k).ok())
    }

    /// Whether `token` may read `GET /metrics`: any token when none is configured.
    /// Compared as digests in constant time, like the agents' tokens.
    pub fn metrics_token_accepted(&self, token: Option<&str>) -> bool {
        use subtle::ConstantTimeEq;
        match (&self.metrics_token, token) {
            (None, _) => true,
            (Some(expected), Some(token)) => bool::from(expected.0.ct_eq(&token_digest(token))),
            (Some(_), None) => false,
        }
    }

    /// The agent a bearer token belongs to. Every candidate is compared in constant time,
    /// so response timing says nothing about how close a guess was.
    pub fn agent_for_token(&self, token: &str) -> Option<Arc<Agent>> {
        use subtle::ConstantTimeEq;
        let digest = token_digest(token);
        let mut found = None;
        for agent in &self.agents {
            if bool::from(agent.token_sha256.ct_eq(&digest)) {
                found = Some(agent.clone());
            }
        }
        found
    }

    /// The Telegram user an agent's `owner_id` stands for, if the config maps it.
    pub fn owner_telegram_id(&self, owner_id: &str) -> Option<u64> {
        self.owner_telegram_ids.get(owner_id).copied()
    }

    /// The Telegram user id of a person named in `[people]`.
    pub fn person(&self, name: &str) -> Option<u64> {
        self.people.get(name).copied()
    }

    pub fn route(&self, name: &str) -> Option<&Arc<Route>> {
        self.routes.get(name)
    }

    pub fn bot_token(&self) -> &str {
        self.bot_token.expose_secret()
    }
}

/// What the sections' unit tests share: a small valid configuration, and the
/// environment that holds its secrets.
#[cfg(test)]
mod testing {
    use super::{BOT_TOKEN_ENV, Config, Settings};

    pub(super) const BASE: &str = r#"
[server]
bind = "127.0.0.1:8080"
[database]
url = "sqlite://data/hitl.db"
[telegram]
api_url = "https://api.telegram.org"
poll_timeout_seconds = 10
[confirmation]
default_timeout_seconds = 120
max_timeout_seconds = 86400
default_window_seconds = 0
[[routes]]
name = "ops"
chat_id = -100123
approvers = [1, 2]
[[agents]]
name = "bot"
token_env = "AGENT_TOKEN"
routes = ["ops"]
"#;

    pub(super) fn env(k: &str) -> Option<String> {
        match k {
            BOT_TOKEN_ENV => Some("123:abc".into()),
            "AGENT_TOKEN" => Some("agent-secret-0123456789".into()),
            _ => None,
        }
    }

    pub(super) fn err_of(toml: &str) -> String {
        let s = Settings::from_toml(toml).expect("parses");
        Config::from_settings(s, &env).unwrap_err().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{BASE, env, err_of};
    use super::*;

    #[test]
    fn a_valid_config_is_accepted_and_the_single_route_is_the_default() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert_eq!(c.agents[0].default_route, "ops");
        assert!(c.agent_for_token("agent-secret-0123456789").is_some());
        assert!(c.agent_for_token("agent-secreT").is_none());
    }

    #[test]
    fn an_agent_naming_an_unknown_route_is_refused_naming_the_key() {
        let e = err_of(&BASE.replace(r#"routes = ["ops"]"#, r#"routes = ["nope"]"#));
        assert!(e.contains("agents[0].routes") && e.contains("nope"), "{e}");
    }

    #[test]
    fn a_route_without_approvers_is_refused() {
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = []"));
        assert!(e.contains("routes[0].approvers"), "{e}");
    }

    #[test]
    fn a_missing_agent_token_variable_is_refused_naming_it() {
        let e = err_of(&BASE.replace("AGENT_TOKEN", "MISSING_TOKEN"));
        assert!(
            e.contains("MISSING_TOKEN") && e.contains("agents[0].token_env"),
            "{e}"
        );
    }

    #[test]
    fn callback_prefixes_match_only_at_origin_and_path_boundaries() {
        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"https://a.example/hooks\"]",
        );
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        let a = &c.agents[0];
        let ok = |u: &str| a.allows_callback(&reqwest::Url::parse(u).unwrap());
        assert!(ok("https://a.example/hooks"));
        assert!(ok("https://a.example/hooks/x?y=1"));
        assert!(ok("https://a.example:443/hooks/x"));
        assert!(!ok("https://a.example/hooks-evil"));
        assert!(!ok("https://a.example.evil.net/hooks/x"));
        assert!(!ok("http://a.example/hooks/x"));
        assert!(!ok("https://a.example:8443/hooks/x"));
        assert!(!ok("https://user:pw@a.example/hooks/x"));
    }

    #[test]
    fn callback_prefixes_without_a_webhook_secret_are_refused() {
        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            "routes = [\"ops\"]\ncallback_url_prefixes = [\"https://a.example/\"]",
        );
        let e = err_of(&toml);
        assert!(e.contains("agents[0].webhook_secret_env"), "{e}");
    }

    #[test]
    fn encoded_slashes_backslashes_and_dots_in_a_callback_path_are_refused_in_any_case() {
        let refused = |raw: &str| {
            let url = reqwest::Url::parse(raw).unwrap();
            callback_path_refusal(raw, &url)
        };
        for raw in [
            "https://a.example/hooks/..%2fadmin",
            "https://a.example/hooks/..%2Fadmin",
            "https://a.example/hooks/..%5cadmin",
            "https://a.example/hooks/..%5Cadmin",
            "https://a.example/hooks/a%2ejson",
            "https://a.example/hooks/%2E%2E/admin",
            "https://a.example/hooks/%2e./admin",
        ] {
            let reason = refused(raw).unwrap_or_else(|| panic!("{raw} was accepted"));
            assert!(reason.starts_with("must not hold %"), "{reason}");
        }
        // Parsing resolves the encoded dot segment: only the text as written shows it.
        assert_eq!(
            reqwest::Url::parse("https://a.example/hooks/%2E%2E/admin")
                .unwrap()
                .path(),
            "/admin"
        );
        // Elsewhere than the path, and other encodings, are the receiver's business.
        for raw in [
            "https://a.example/hooks/x?next=%2Fadmin",
            "https://a.example/hooks/x#%2e",
            "https://a.example/hooks/a%20b",
            "https://a.example/hooks/%252f",
            "https://a.example/hooks",
        ] {
            assert_eq!(refused(raw), None, "{raw}");
        }

        let toml = BASE.replace(
            r#"routes = ["ops"]"#,
            "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"https://a.example/hooks\"]",
        );
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let c = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env).unwrap();
        let ok = |u: &str| c.agents[0].allows_callback(&reqwest::Url::parse(u).unwrap());
        assert!(ok("https://a.example/hooks/x"));
        assert!(!ok("https://a.example/hooks/..%2Fadmin"));

        let with_prefix = |p: &str| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\ncallback_url_prefixes = [\"{p}\"]"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = with_prefix("https://a.example/hooks%2Fx").unwrap_err();
        assert!(
            e.contains("agents[0].callback_url_prefixes") && e.contains("%2F"),
            "{e}"
        );
        assert!(with_prefix("https://a.example/hooks?x=%2F").is_ok());
    }

    #[test]
    fn callback_prefixes_to_link_local_and_metadata_addresses_are_refused_unless_the_agent_opts_in()
    {
        let env = |k: &str| {
            if k == "HOOK" {
                Some("s".to_owned())
            } else {
                env(k)
            }
        };
        let with_prefix = |p: &str, opt_in: bool| {
            let toml = BASE.replace(
                r#"routes = ["ops"]"#,
                &format!(
                    "routes = [\"ops\"]\nwebhook_secret_env = \"HOOK\"\n\
                     callback_url_prefixes = [\"https://a.example/hooks\", \"{p}\"]\n\
                     allow_link_local_callbacks = {opt_in}"
                ),
            );
            Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for (prefix, what) in [
            ("http://169.254.169.254", "a cloud metadata address"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "a cloud metadata address",
            ),
            // The same address written as one number, in hex, or IPv4-mapped.
            ("http://2852039166/", "a cloud metadata address"),
            ("http://0xa9fea9fe/", "a cloud metadata address"),
            (
                "http://[::ffff:169.254.169.254]/",
                "a cloud metadata address",
            ),
            ("http://[fd00:ec2::254]/", "a cloud metadata address"),
            ("http://100.100.100.200/", "a cloud metadata address"),
            (
                "http://169.254.170.2/v2/credentials",
                "a link-local address",
            ),
            ("https://169.254.1.1:8443/hooks", "a link-local address"),
            ("http://[fe80::1]/", "a link-local address"),
            ("http://[febf::1]:8080/", "a link-local address"),
            ("http://metadata.google.internal/", "a cloud metadata host"),
            ("http://METADATA.google.internal./", "a cloud metadata host"),
            ("http://metadata/", "a cloud metadata host"),
            ("http://instance-data/", "a cloud metadata host"),
        ] {
            let e = with_prefix(prefix, false).expect_err(prefix);
            assert!(
                e.contains("agents[0].callback_url_prefixes")
                    && e.contains(&format!("'{prefix}' reaches {what}"))
                    && e.contains("agents[0].allow_link_local_callbacks = true"),
                "{prefix}: {e}"
            );
            assert_eq!(
                with_prefix(prefix, true),
                Ok(()),
                "{prefix} with the opt-in"
            );
        }
        for prefix in [
            "http://127.0.0.1:9/hooks",
            "http://10.0.0.5/hooks",
            "http://169.253.255.255/",
            "http://169.255.0.1/",
            "http://[fec0::1]/",
            "http://[fd00:ec2::253]/",
            "https://metadata.example.com/",
            "https://hooks.internal/",
        ] {
            assert_eq!(with_prefix(prefix, false), Ok(()), "{prefix}");
        }
    }

    #[test]
    fn the_debug_output_of_a_config_shows_no_secret() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        let dbg = format!("{c:?}");
        assert!(
            !dbg.contains("123:abc") && !dbg.contains("agent-secret"),
            "{dbg}"
        );
    }

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

    #[test]
    fn route_steps_are_checked_with_the_key_that_is_wrong() {
        let second = "\n[[routes]]\nname = \"leads\"\nchat_id = -100999\napprovers = [3]\n";
        let with = |lines: &str| {
            format!("{BASE}{second}").replace(
                "approvers = [1, 2]\n",
                &format!("approvers = [1, 2]\n{lines}\n"),
            )
        };
        let ok = Config::from_settings(
            Settings::from_toml(&with(
                "remind_after = [\"50%\", \"10m\"]\nescalate_after = \"75%\"\nescalate_to = \"leads\"\nextend_minutes = 15",
            ))
            .unwrap(),
            &env,
        )
        .unwrap();
        let ops = ok.route("ops").unwrap();
        assert_eq!(ops.remind_after.len(), 2);
        assert_eq!(ops.extend_by, Some(Duration::from_secs(900)));
        assert_eq!(ops.max_extensions, DEFAULT_MAX_EXTENSIONS);
        let e = ops.escalation.as_ref().unwrap();
        assert!(e.union && e.to == "leads", "{e:?}");
        for (lines, expected) in [
            ("remind_after = [\"soon\"]", "routes[0].remind_after[0]"),
            (
                "escalate_after = \"1m\"",
                "escalate_after needs escalate_to",
            ),
            (
                "escalate_to = \"leads\"",
                "escalate_to needs escalate_after",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"nowhere\"",
                "names unknown route 'nowhere'",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"ops\"",
                "cannot escalate to itself",
            ),
            (
                "escalate_after = \"1m\"\nescalate_to = \"leads\"\nescalation_approvers = \"all\"",
                "routes[0].escalation_approvers",
            ),
            ("extend_minutes = 0", "routes[0].extend_minutes"),
            (
                "extend_minutes = 5\nmax_extensions = 0",
                "routes[0].max_extensions",
            ),
            ("topic_id = -4", "routes[0].topic_id"),
        ] {
            let e = err_of(&with(lines));
            assert!(e.contains(expected), "{lines}: {e}");
        }
        let same_chat = format!("{BASE}{second}")
            .replace("chat_id = -100999", "chat_id = -100123")
            .replace(
                "approvers = [1, 2]\n",
                "approvers = [1, 2]\nescalate_after = \"1m\"\nescalate_to = \"leads\"\n",
            );
        assert!(
            err_of(&same_chat).contains("same chat"),
            "{}",
            err_of(&same_chat)
        );
    }

    #[test]
    fn short_agent_tokens_the_bot_token_approver_0_and_the_bot_as_approver_are_refused() {
        let with_env = |token: &'static str, toml: &str| {
            let env = move |k: &str| match k {
                "AGENT_TOKEN" => Some(token.to_owned()),
                other => env(other),
            };
            Config::from_settings(Settings::from_toml(toml).unwrap(), &env)
                .map(|_| ())
                .unwrap_err()
                .to_string()
        };
        let e = with_env("fifteen-chars-x", BASE);
        assert!(
            e.contains("agents[0].token_env")
                && e.contains("15 characters")
                && !e.contains("fifteen"),
            "{e}"
        );
        let e = with_env("123:abc", BASE);
        assert!(
            e.contains("agents[0].token_env") && e.contains("is the bot token"),
            "{e}"
        );
        let e = with_env("replace-with-a-long-random-string", BASE);
        assert!(
            e.contains("agents[0].token_env") && e.contains("placeholder from .env.example"),
            "{e}"
        );
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = [1, 0]"));
        assert!(
            e.contains("routes[0].approvers: 0 is not a Telegram user id"),
            "{e}"
        );
        let e = err_of(&BASE.replace("approvers = [1, 2]", "approvers = [1, 123]"));
        assert!(
            e.contains("routes[0].approvers: 123 is the bot itself"),
            "{e}"
        );
    }

    #[test]
    fn placeholders_an_odd_bot_token_and_open_metrics_off_loopback_are_warned_about() {
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert!(c.warnings().is_empty(), "{:?}", c.warnings());
        let toml = BASE
            .replace("chat_id = -100123", "chat_id = -1001234567890")
            .replace("approvers = [1, 2]", "approvers = [11111111, 2]")
            .replace("127.0.0.1:8080", "0.0.0.0:8080");
        let env = |k: &str| match k {
            BOT_TOKEN_ENV => Some("x".into()),
            other => env(other),
        };
        let w = Config::from_settings(Settings::from_toml(&toml).unwrap(), &env)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 4, "{w:?}");
        assert!(w[0].contains("chat_id -1001234567890 is the example's placeholder"));
        assert!(w[1].contains("approvers [11111111] are the example's placeholder"));
        assert!(w[2].contains("does not look like a bot token"));
        assert!(w[3].contains("server.bind 0.0.0.0:8080 is not a loopback address"));

        let env = |k: &str| match k {
            BOT_TOKEN_ENV => Some("123456789:replace-me".into()),
            other => env(other),
        };
        let w = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env)
            .unwrap()
            .warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("is the placeholder from .env.example"),
            "{w:?}"
        );
    }
}
