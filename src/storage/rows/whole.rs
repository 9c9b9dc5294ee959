//! A whole question as one statement reads it: the `confirmations` row with its answers,
//! copies and strays, each a JSON list of rows built by a correlated subquery (the
//! statement is each backend's `select_whole_where!`). One statement instead of the row
//! and three child reads: on PostgreSQL each read is a round trip, and a tap reads its
//! question whole twice (issue 51, point 2).

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use sqlx::FromRow;

use super::{Row, corrupt_in, from_ms};
use crate::domain::interaction::Answer;
use crate::domain::question::{Copy, Operator, Question, Stray};
use crate::storage::StorageError;

/// A `confirmations` row and its children, as JSON lists of rows in stored order.
#[derive(FromRow)]
pub(in crate::storage) struct WholeRow {
    #[sqlx(flatten)]
    row: Row,
    answers_json: String,
    copies_json: String,
    strays_json: String,
}

/// An answer as listed: respondent, user id, username, name, value (JSON text), whether
/// it was the default, whether "once", reason, time (ms).
type AnswerRow = (
    String,
    Option<i64>,
    Option<String>,
    Option<String>,
    String,
    Flag,
    Flag,
    Option<String>,
    i64,
);
/// A copy as listed: recipient, chat, message, whether it shows the outcome.
type CopyRow = (String, i64, Option<i64>, Flag);
/// A stray as listed: chat, message, whether it shows the outcome.
type StrayRow = (i64, i64, Flag);

impl WholeRow {
    /// The question with its answers, copies and strays.
    pub(in crate::storage) fn into_domain(self) -> Result<Question, StorageError> {
        let mut r = self.row.into_domain()?;
        let id = r.id.to_string();
        let corrupt = corrupt_in(&id);
        let answers: Vec<AnswerRow> =
            serde_json::from_str(&self.answers_json).map_err(|_| corrupt("answers"))?;
        let copies: Vec<CopyRow> =
            serde_json::from_str(&self.copies_json).map_err(|_| corrupt("copies"))?;
        let strays: Vec<StrayRow> =
            serde_json::from_str(&self.strays_json).map_err(|_| corrupt("strays"))?;
        let mut out = Vec::with_capacity(answers.len());
        for (respondent, user_id, username, name, value, is_default, once, reason, at) in answers {
            out.push(Answer {
                respondent,
                by: match (user_id, name) {
                    (Some(id), Some(name)) => Some(Operator {
                        id: u64::try_from(id).map_err(|_| corrupt("answer user_id"))?,
                        username,
                        name,
                    }),
                    _ => None,
                },
                value: serde_json::from_str(&value).map_err(|_| corrupt("answer value"))?,
                is_default: is_default.0,
                once: once.0,
                reason,
                at: from_ms(at).ok_or_else(|| corrupt("answer time"))?,
            });
        }
        r.answers = out;
        r.copies = copies
            .into_iter()
            .map(|(recipient, chat_id, message_id, shown)| Copy {
                recipient,
                chat_id,
                message_id: message_id.and_then(|m| i32::try_from(m).ok()),
                outcome_shown: shown.0,
            })
            .collect();
        r.strays = strays
            .into_iter()
            .filter_map(|(chat_id, message_id, shown)| {
                Some(Stray {
                    chat_id,
                    message_id: i32::try_from(message_id).ok()?,
                    outcome_shown: shown.0,
                })
            })
            .collect();
        Ok(r)
    }
}

/// A `BOOLEAN` column inside a JSON list: PostgreSQL writes `true`/`false`, SQLite (whose
/// booleans are integers) `1`/`0`.
struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct FlagVisitor;
        impl Visitor<'_> for FlagVisitor {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a boolean, 0 or 1")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flag, E> {
                match v {
                    0 => Ok(Flag(false)),
                    1 => Ok(Flag(true)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Flag, E> {
                u64::try_from(v)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
                    .and_then(|v| self.visit_u64(v))
            }
        }
        d.deserialize_any(FlagVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::Flag;

    /// Both backends' spellings of a boolean read; anything else is refused, so a
    /// corrupt list is reported rather than read as `false`.
    #[test]
    fn a_listed_boolean_reads_as_either_backend_writes_it() {
        let read = |j: &str| serde_json::from_str::<Flag>(j).map(|f| f.0).ok();
        assert_eq!(read("true"), Some(true));
        assert_eq!(read("false"), Some(false));
        assert_eq!(read("1"), Some(true));
        assert_eq!(read("0"), Some(false));
        assert_eq!(read("2"), None);
        assert_eq!(read("-1"), None);
        assert_eq!(read("\"1\""), None);
    }
}
