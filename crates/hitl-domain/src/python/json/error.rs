//! Why a text is not JSON that [`parse`](super::parse) accepts: what `json.loads` raises as
//! `json.JSONDecodeError` (`Lib/json/decoder.py`), and the refusals of our own (see
//! `json`'s header), each with the byte offset where it became clear.

use super::{MAX_DEPTH, MAX_INT_DIGITS};

/// Why a text is not JSON we accept, and the byte offset where that became clear.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct JsonError {
    kind: JsonErrorKind,
    offset: usize,
}

impl JsonError {
    pub(super) fn new(kind: JsonErrorKind, offset: usize) -> Self {
        Self { kind, offset }
    }

    /// What is wrong.
    pub fn kind(&self) -> &JsonErrorKind {
        &self.kind
    }

    /// Byte offset into the input where the problem was detected.
    pub fn offset(&self) -> usize {
        self.offset
    }
}

/// The ways a text can fail [`parse`](super::parse). Messages quote at most one
/// character of the input, so an error can be logged or returned to the agent without
/// echoing its parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonErrorKind {
    #[error("unexpected end of input")]
    UnexpectedEnd,
    #[error("expected a value, found {0:?}")]
    ExpectedValue(char),
    #[error("unexpected {0:?} after the JSON value")]
    TrailingData(char),
    #[error("expected ',' or '{close}', found {found:?}")]
    ExpectedCommaOr { close: char, found: char },
    #[error("expected ':' after an object key, found {0:?}")]
    ExpectedColon(char),
    #[error("expected a string key, found {0:?}")]
    ExpectedKey(char),
    #[error("trailing comma before '{0}'")]
    TrailingComma(char),
    #[error("invalid literal (expected true, false or null)")]
    InvalidLiteral,
    #[error("non-standard literal {0} is not allowed")]
    NonStandardLiteral(&'static str),
    #[error("invalid number: {0}")]
    InvalidNumber(&'static str),
    #[error("integer with {0} digits exceeds Python's limit of {MAX_INT_DIGITS} digits")]
    IntegerTooLong(usize),
    #[error("unterminated string")]
    UnterminatedString,
    #[error("raw control character U+{0:04X} in a string (it must be escaped)")]
    ControlCharacter(u8),
    #[error("invalid escape \\{0}")]
    InvalidEscape(char),
    #[error("\\u must be followed by 4 hex digits")]
    InvalidUnicodeEscape,
    #[error("unpaired surrogate \\u{0:04x}")]
    UnpairedSurrogate(u16),
    #[error("nesting deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("top-level value is {0}, expected an object")]
    NotAnObject(&'static str),
    /// Only from [`repeated_key`](super::repeated_key), which reports the key and where it is.
    #[error("an object repeats a key")]
    RepeatedKey,
}
