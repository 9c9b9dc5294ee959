//! Identifier and bounded-string types. Each has one checking constructor, so a value
//! that exists is valid and nothing downstream re-checks it.

use std::fmt;
use std::sync::Arc;

use rand::RngCore;

use super::text;

/// Why a value was refused; the API layer names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub String);

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

/// 128 bits in 32 hex digits: 48 bits of milliseconds since the epoch, then 80 random
/// bits. Still unguessable, and in creation order: a table keyed by such values grows at
/// its end, where a random key dirties a random page of its index on every insert (for
/// window hits, whose records go in by the thousand per second, that page per index per
/// hit was the bound; see BENCHMARKS.md).
fn time_ordered_hex() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut random = [0u8; 10];
    rand::rng().fill_bytes(&mut random);
    // The low 48 bits: enough until the year 10889.
    format!("{:012x}{}", millis & 0xffff_ffff_ffff, hex::encode(random))
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Declares an id made of a fixed prefix and 32 lowercase hex digits (see
/// [`time_ordered_hex`]).
macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $what:literal) => {
        $(#[$doc])*
        // Shared text: the copies that travel with a request (windows, the audit trail,
        // the log) cost a reference count, not an allocation.
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn generate() -> Self {
                $name(format!("{}{}", $prefix, time_ordered_hex()).into())
            }

            pub fn parse(s: &str) -> Result<Self, InvalidValue> {
                match s.strip_prefix($prefix) {
                    Some(rest) if is_lower_hex(rest, 32) => Ok($name(s.into())),
                    _ => Err(InvalidValue(concat!("is not ", $what).into())),
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
    };
}

prefixed_id!(
    /// A confirmation request's id: `cf_`, then its creation time and 80 random bits in
    /// hex. Unguessable, so one agent cannot enumerate another's requests (which it could
    /// not read anyway).
    QuestionId,
    "cf_",
    "a confirmation id (cf_ followed by 32 hex digits)"
);

prefixed_id!(
    /// A webhook delivery's id (`wh_`, its creation time and 80 random bits): the same on every
    /// retry, so a receiver can drop duplicates.
    DeliveryId,
    "wh_",
    "a delivery id"
);

prefixed_id!(
    /// A Telegram outage's id (`out_`, when it was taken as one and 80 random bits): the
    /// key that makes its beginning and end each announced once.
    OutageId,
    "out_",
    "an outage id (out_ followed by 32 hex digits)"
);

prefixed_id!(
    /// A grant's id (`gr_`, its creation time and 80 random bits): unguessable, so an
    /// agent cannot name another agent's grant (which it could not revoke anyway), and
    /// in creation order, like the other ids.
    GrantId,
    "gr_",
    "a grant id (gr_ followed by 32 hex digits)"
);

impl GrantId {
    /// The id of the grant that the grant question `question` stores on a person's yes:
    /// its own digits under `gr_`, so one question has one grant, found again from the
    /// question alone (and as unguessable as the question's id).
    pub fn of_question(question: &QuestionId) -> GrantId {
        let digits = question.as_str().trim_start_matches("cf_");
        GrantId(format!("gr_{digits}").into())
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for QuestionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The secret a button carries: 128 random bits, bound to one request (and through it
/// to one chat and message). Carries nothing about the call itself.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CallbackToken(String);

impl CallbackToken {
    pub fn generate() -> Self {
        CallbackToken(random_hex(16))
    }

    /// The token of a record no button will ever carry (a window hit, decided as it is
    /// stored): unique, as the column requires, but in creation order rather than
    /// random, so storing it costs the token's index no random page. It is no secret and
    /// needs none: no message shows it, and a tap that named it would find a decided
    /// record.
    pub fn never_shown() -> Self {
        CallbackToken(time_ordered_hex())
    }

    pub fn parse(s: &str) -> Result<Self, InvalidValue> {
        if is_lower_hex(s, 32) {
            Ok(CallbackToken(s.to_owned()))
        } else {
            Err(InvalidValue("is not a callback token".into()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for CallbackToken {
    // A token is as good as a tap for whoever holds it: keep it out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CallbackToken(..)")
    }
}

/// Refuses control characters (Unicode Cc): the rule every bounded name was accepted
/// under before invisible characters were refused as well.
fn no_control(s: &str) -> Result<(), InvalidValue> {
    if s.chars().any(char::is_control) {
        Err(InvalidValue("must not contain control characters".into()))
    } else {
        Ok(())
    }
}

/// Refuses every invisible or layout-changing character ([`text::is_invisible`]): a name
/// an operator approves must read as what it is, and a bidi override or a zero-width
/// space would let `deploy` and `dep\u200bloy` (or a reversed name) look the same.
pub(crate) fn all_visible(s: &str) -> Result<(), InvalidValue> {
    match text::first_invisible(s) {
        Some(c) => Err(InvalidValue(format!(
            "must not contain invisible or layout-changing characters (found {})",
            text::escape_char(c)
        ))),
        None => Ok(()),
    }
}

/// A tool's name: every character visible ([`all_visible`]), and no word in it mixing
/// scripts ([`text::mixed_script_word`]): `trаnsfer` with a Cyrillic `а` reads as
/// `transfer` to the operator and to every rule written for it, while it is another
/// name. A tool is named by code, in one script per word; rules (`trаnsfer` against a
/// rule on `transfer`, see `domain::rules::RuleSet::look_alike`) catch look-alikes
/// written in one script (`ехес` in Cyrillic), but only of the names they spell out.
fn tool_name(s: &str) -> Result<(), InvalidValue> {
    all_visible(s)?;
    match text::mixed_script_word(s) {
        Some(word) => Err(InvalidValue(format!(
            "must not mix scripts within a word (\"{}\" does: a letter of one script among \
             another's, such as a Cyrillic \"а\" among Latin letters, can pass for another \
             tool's name); name the tool in one script",
            word.chars()
                .map(|c| if c.is_ascii() {
                    c.to_string()
                } else {
                    text::escape_char(c)
                })
                .collect::<String>()
        ))),
        None => Ok(()),
    }
}

/// Declares a bounded, non-empty, single-line string type whose characters `$check`
/// accepts.
macro_rules! bounded_name {
    ($(#[$doc:meta])* $name:ident, $max:expr, $check:expr) => {
        $(#[$doc])*
        // Shared text, as for the ids above.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            pub const MAX_CHARS: usize = $max;

            pub fn parse(s: &str) -> Result<Self, InvalidValue> {
                Self::bounded(s)?;
                $check(s)?;
                Ok($name(s.into()))
            }

            /// A value read back from storage, checked by the rules every stored value
            /// was accepted under (bounded, not blank, no control characters) rather than
            /// by [`Self::parse`]'s: a row written before the rules grew stricter must
            /// still load, or one old window would keep the service from starting.
            pub fn from_stored(s: &str) -> Result<Self, InvalidValue> {
                Self::bounded(s)?;
                no_control(s)?;
                Ok($name(s.into()))
            }

            fn bounded(s: &str) -> Result<(), InvalidValue> {
                let n = s.chars().count();
                if s.trim().is_empty() {
                    Err(InvalidValue("must not be empty".into()))
                } else if n > Self::MAX_CHARS {
                    Err(InvalidValue(format!(
                        "must be at most {} characters (got {n})",
                        Self::MAX_CHARS
                    )))
                } else {
                    Ok(())
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

bounded_name!(
    /// The name of the tool the agent wants to run: every character visible, no word
    /// mixing scripts.
    ToolName,
    128,
    tool_name
);
bounded_name!(
    /// The human on whose behalf the agent acts (`"anonymous"` when the agent says
    /// nothing): every character visible.
    OwnerId,
    256,
    all_visible
);
bounded_name!(
    /// A key under which the same agent's retries find the same request. Never shown to
    /// an operator, so only control characters are refused: a stricter rule would turn
    /// a retry with a key accepted before into a 422.
    IdempotencyKey,
    128,
    no_control
);

impl OwnerId {
    pub fn anonymous() -> Self {
        OwnerId("anonymous".into())
    }
}

/// `id` as one segment of an API path, for this crate's own clients of the API (the MCP
/// tools, the Claude Code hook): every byte but ASCII letters, digits, `-` and `_`
/// percent-encoded, so an `interaction_id` holding `/`, `?`, `#` or `%` names itself and
/// not another path, a query or a fragment. (`.` is encoded too, but URL parsers resolve
/// `%2E%2E` as `..` anyway: that is why the API refuses `.` and `..` as an id.)
pub fn path_segment(id: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_back_and_garbage_does_not() {
        let id = QuestionId::generate();
        assert_eq!(QuestionId::parse(id.as_str()).unwrap(), id);
        assert!(QuestionId::parse("cf_xyz").is_err());
        assert!(QuestionId::parse(&id.as_str().to_uppercase()).is_err());
        let g = GrantId::generate();
        assert_eq!(GrantId::parse(g.as_str()).unwrap(), g);
        assert!(
            GrantId::parse(id.as_str()).is_err(),
            "a confirmation id is no grant id"
        );
        let of = GrantId::of_question(&id);
        assert_eq!(GrantId::parse(of.as_str()).unwrap(), of);
        assert_eq!(of.as_str()[3..], id.as_str()[3..]);
        let t = CallbackToken::generate();
        assert_eq!(CallbackToken::parse(t.as_str()).unwrap(), t);
        assert!(CallbackToken::parse("../../etc").is_err());
    }

    #[test]
    fn ids_sort_in_creation_order_and_never_repeat() {
        let first = QuestionId::generate();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let later: Vec<QuestionId> = (0..100).map(|_| QuestionId::generate()).collect();
        assert!(
            later.iter().all(|id| *id > first),
            "{first:?} sorts after {later:?}"
        );
        let distinct: std::collections::HashSet<_> = later.iter().collect();
        assert_eq!(distinct.len(), later.len());
        assert!(
            later
                .iter()
                .all(|id| QuestionId::parse(id.as_str()).is_ok())
        );
        let token = CallbackToken::never_shown();
        assert!(CallbackToken::parse(token.as_str()).unwrap() == token);
        assert!(CallbackToken::never_shown() != token);
    }

    #[test]
    fn a_tool_name_is_bounded_and_single_line() {
        assert!(ToolName::parse("deploy").is_ok());
        assert!(ToolName::parse("").is_err());
        assert!(ToolName::parse("  ").is_err());
        assert!(ToolName::parse("a\nb").is_err());
        assert!(ToolName::parse(&"é".repeat(128)).is_ok());
        assert!(ToolName::parse(&"é".repeat(129)).is_err());
    }

    #[test]
    fn a_name_refuses_every_class_of_invisible_character_and_names_it() {
        for (c, shown) in [
            ('\u{0}', "\\x00"),      // Cc
            ('\u{85}', "\\x85"),     // Cc (NEL)
            ('\u{202e}', "\\u202e"), // Cf: bidi override
            ('\u{200b}', "\\u200b"), // Cf: zero-width space
            ('\u{feff}', "\\ufeff"), // Cf: byte order mark
            ('\u{2028}', "\\u2028"), // Zl
            ('\u{2029}', "\\u2029"), // Zp
            ('\u{e000}', "\\ue000"), // Co
        ] {
            let s = format!("dep{c}loy");
            let expected =
                format!("must not contain invisible or layout-changing characters (found {shown})");
            assert_eq!(ToolName::parse(&s), Err(InvalidValue(expected.clone())));
            assert_eq!(OwnerId::parse(&s), Err(InvalidValue(expected)));
        }
        assert!(ToolName::parse("déploy 🔧 Москва").is_ok());
    }

    #[test]
    fn a_tool_name_mixing_scripts_within_a_word_is_refused_and_one_script_per_word_is_not() {
        for name in ["tr\u{430}nsfer", "send_m\u{43e}ney", "drop-t\u{430}ble"] {
            let refused = ToolName::parse(name).unwrap_err().0;
            assert!(
                refused.contains("must not mix scripts within a word"),
                "{refused}"
            );
            assert!(
                refused.contains("\\u04"),
                "the odd letter shown escaped: {refused}"
            );
        }
        for name in [
            "transfer",
            "ｔransfer",
            "отчёт_q3",
            "send_деньги",
            "déploy 🔧 Москва",
            "検索_ツール",
        ] {
            assert!(ToolName::parse(name).is_ok(), "{name}");
        }
        assert!(
            ToolName::from_stored("tr\u{430}nsfer").is_ok(),
            "a stored name still loads"
        );
    }

    #[test]
    fn an_idempotency_key_and_a_stored_name_keep_the_control_character_rule() {
        assert!(IdempotencyKey::parse("key\u{200b}").is_ok());
        assert!(IdempotencyKey::parse("key\n").is_err());
        assert_eq!(
            ToolName::from_stored("dep\u{200b}loy").map(|t| t.to_string()),
            Ok("dep\u{200b}loy".to_owned())
        );
        assert!(OwnerId::from_stored("a\nb").is_err());
        assert!(ToolName::from_stored(&"é".repeat(129)).is_err());
    }

    #[test]
    fn a_callback_token_never_prints() {
        let t = CallbackToken::generate();
        assert!(!format!("{t:?}").contains(t.as_str()));
    }

    #[test]
    fn an_id_is_one_path_segment_whatever_it_holds() {
        assert_eq!(path_segment("cf_0123abc"), "cf_0123abc");
        assert_eq!(path_segment("a/b?c#d%e f"), "a%2Fb%3Fc%23d%25e%20f");
        assert_eq!(path_segment("é"), "%C3%A9");
        assert_eq!(path_segment(".."), "%2E%2E");
    }
}
