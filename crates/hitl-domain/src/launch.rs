//! A Telegram Mini App's launch data (`initData`), checked as Telegram specifies for the
//! bot's own server: `secret = HMAC_SHA256(key = "WebAppData", msg = bot_token)`, and the
//! data is genuine when `hex(HMAC_SHA256(key = secret, msg = data_check_string))` equals
//! its `hash`, where `data_check_string` is every received field but `hash`, URL-decoded,
//! sorted by key, as `key=value` lines joined by `\n`.
//!
//! What it proves is who the user is and that Telegram launched the page for this bot,
//! not that they meant any decision: the console decides only on an explicit request
//! that names the question and the args hash the page showed.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use time::OffsetDateTime;

/// The longest launch data read: Telegram's is a few hundred bytes.
pub const MAX_LAUNCH_DATA_BYTES: usize = 8 * 1024;

/// The Telegram user the launch data names.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct LaunchUser {
    pub id: u64,
    pub first_name: String,
    #[serde(default)]
    pub last_name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
}

// The person's name only; enough to tell who is asking in a log, nothing more.
impl std::fmt::Debug for LaunchUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LaunchUser({})", self.id)
    }
}

/// Launch data that passed the check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub user: LaunchUser,
    pub auth_date: OffsetDateTime,
    /// What `?startapp=` carried (a question's id, when opened from its button).
    pub start_param: Option<String>,
}

/// Why launch data was refused. The words say what to do, and never echo the data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    #[error("no launch data: open the console from Telegram")]
    Missing,
    #[error("the launch data is not Telegram's (it is {0})")]
    Malformed(&'static str),
    #[error(
        "the launch data's signature does not match this bot: open the console from Telegram again"
    )]
    BadSignature,
    #[error(
        "the launch data is {age_seconds} s old, older than the {max_seconds} s allowed: open the console from Telegram again"
    )]
    Stale { age_seconds: i64, max_seconds: u64 },
}

/// Checks `init_data` (the query string Telegram hands the page) against `bot_token`;
/// data signed more than `max_age` before `now` (or too far in the future) is stale.
pub fn check(
    init_data: &str,
    bot_token: &str,
    now: OffsetDateTime,
    max_age: Duration,
) -> Result<Launch, LaunchError> {
    if init_data.trim().is_empty() {
        return Err(LaunchError::Missing);
    }
    if init_data.len() > MAX_LAUNCH_DATA_BYTES {
        return Err(LaunchError::Malformed("too long"));
    }
    let mut fields: Vec<(String, String)> = url::form_urlencoded::parse(init_data.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(LaunchError::Malformed("a field given twice"));
    }
    let Some(at) = fields.iter().position(|(k, _)| k == "hash") else {
        return Err(LaunchError::Malformed("without its hash"));
    };
    let (_, hash) = fields.swap_remove(at);
    let Ok(hash) = hex::decode(&hash) else {
        return Err(LaunchError::Malformed("with a hash that is not hex"));
    };
    fields.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    // Telegram's own check string keeps `signature` (its Ed25519 signature for third
    // parties, Bot API 8.0); some clients leave it out. Either is an HMAC under this
    // bot's token, which nobody else can make.
    let signed = signs(&fields, bot_token, &hash)
        || (fields.iter().any(|(k, _)| k == "signature")
            && signs(
                &fields
                    .iter()
                    .filter(|(k, _)| k != "signature")
                    .cloned()
                    .collect::<Vec<_>>(),
                bot_token,
                &hash,
            ));
    if !signed {
        return Err(LaunchError::BadSignature);
    }
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let auth_date = field("auth_date")
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok())
        .ok_or(LaunchError::Malformed("without a readable auth_date"))?;
    let age = (now - auth_date).whole_seconds();
    // A minute of clock skew ahead is allowed; more is as suspect as an old date.
    if age > i64::try_from(max_age.as_secs()).unwrap_or(i64::MAX) || age < -60 {
        return Err(LaunchError::Stale {
            age_seconds: age,
            max_seconds: max_age.as_secs(),
        });
    }
    let user: LaunchUser = field("user")
        .and_then(|u| serde_json::from_str(u).ok())
        .ok_or(LaunchError::Malformed("without a readable user"))?;
    Ok(Launch {
        user,
        auth_date,
        start_param: field("start_param").map(str::to_owned),
    })
}

/// Whether `hash` is the HMAC of `fields` (sorted) under `bot_token`'s secret.
fn signs(fields: &[(String, String)], bot_token: &str, hash: &[u8]) -> bool {
    let check_string = fields
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n");
    sign(&check_string, bot_token).as_slice().ct_eq(hash).into()
}

/// `HMAC_SHA256(key = HMAC_SHA256("WebAppData", bot_token), msg = check_string)`.
fn sign(check_string: &str, bot_token: &str) -> Vec<u8> {
    let mut secret = <Hmac<Sha256> as Mac>::new_from_slice(b"WebAppData")
        .expect("HMAC takes a key of any length");
    secret.update(bot_token.as_bytes());
    let secret = secret.finalize().into_bytes();
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(&secret).expect("HMAC takes a key of any length");
    mac.update(check_string.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Launch data for `fields`, signed with `bot_token` as Telegram signs it: what tests
/// (and the browser test's page) are given.
pub fn signed(fields: &[(&str, &str)], bot_token: &str) -> String {
    let mut sorted: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let check_string = sorted
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("\n");
    let hash = hex::encode(sign(&check_string, bot_token));
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in fields {
        out.append_pair(k, v);
    }
    out.append_pair("hash", &hash);
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "123456:ABC-test-token";
    const USER: &str = r#"{"id":111,"first_name":"Alice","username":"alice","photo_url":"https:\/\/t.me\/i\/a.jpg"}"#;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_765_000_000).unwrap()
    }

    fn data(auth: i64) -> String {
        signed(
            &[
                ("user", USER),
                ("auth_date", &auth.to_string()),
                ("chat_type", "private"),
                ("start_param", "cf_0123"),
            ],
            TOKEN,
        )
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn genuine_launch_data_names_its_user_and_start_param() {
        let t = now().unix_timestamp() - 10;
        let l = check(&data(t), TOKEN, now(), HOUR).unwrap();
        assert_eq!(l.user.id, 111);
        assert_eq!(l.user.username.as_deref(), Some("alice"));
        assert_eq!(l.start_param.as_deref(), Some("cf_0123"));
        assert_eq!(format!("{:?}", l.user), "LaunchUser(111)");
    }

    #[test]
    fn a_changed_field_another_bots_token_stale_or_missing_data_is_refused() {
        let t = now().unix_timestamp() - 10;
        let genuine = data(t);
        let changed = genuine.replace("111", "222");
        assert_eq!(
            check(&changed, TOKEN, now(), HOUR),
            Err(LaunchError::BadSignature)
        );
        assert_eq!(
            check(&genuine, "999:other-bot", now(), HOUR),
            Err(LaunchError::BadSignature)
        );
        let old = data(now().unix_timestamp() - 3601);
        assert!(matches!(
            check(&old, TOKEN, now(), HOUR),
            Err(LaunchError::Stale { .. })
        ));
        let ahead = data(now().unix_timestamp() + 600);
        assert!(matches!(
            check(&ahead, TOKEN, now(), HOUR),
            Err(LaunchError::Stale { .. })
        ));
        assert_eq!(check("", TOKEN, now(), HOUR), Err(LaunchError::Missing));
        let unsigned = genuine.split("&hash=").next().unwrap().to_owned();
        assert!(matches!(
            check(&unsigned, TOKEN, now(), HOUR),
            Err(LaunchError::Malformed(_))
        ));
        let twice = format!("{genuine}&user=x");
        assert!(matches!(
            check(&twice, TOKEN, now(), HOUR),
            Err(LaunchError::Malformed(_))
        ));
    }

    #[test]
    fn the_check_string_is_over_the_decoded_values_as_received() {
        // The `user` JSON keeps its `\/`: re-serialising it would change the string.
        let t = (now().unix_timestamp() - 5).to_string();
        let fields = [("auth_date", t.as_str()), ("user", USER)];
        let check_string = format!("auth_date={t}\nuser={USER}");
        let hash = hex::encode(sign(&check_string, TOKEN));
        let raw = format!(
            "user={}&auth_date={t}&hash={hash}",
            url::form_urlencoded::byte_serialize(USER.as_bytes()).collect::<String>()
        );
        assert!(check(&raw, TOKEN, now(), HOUR).is_ok());
        assert!(check(&signed(&fields, TOKEN), TOKEN, now(), HOUR).is_ok());
    }

    #[test]
    fn a_signature_field_is_accepted_in_the_check_string_or_out_of_it() {
        let t = (now().unix_timestamp() - 5).to_string();
        let with = signed(
            &[("auth_date", &t), ("signature", "c2ln"), ("user", USER)],
            TOKEN,
        );
        assert!(check(&with, TOKEN, now(), HOUR).is_ok());
        let without = signed(&[("auth_date", &t), ("user", USER)], TOKEN);
        let hash = without.split("&hash=").nth(1).unwrap();
        let sent = format!(
            "auth_date={t}&signature=c2ln&user={}&hash={hash}",
            url::form_urlencoded::byte_serialize(USER.as_bytes()).collect::<String>()
        );
        assert!(check(&sent, TOKEN, now(), HOUR).is_ok());
    }
}
