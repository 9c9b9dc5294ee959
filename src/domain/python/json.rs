//! JSON read and written exactly as Python's `json` module does it.
//!
//! AI-Parrot decides whether a confirmation window covers a call by hashing
//! `json.dumps(params, sort_keys=True, default=str)`, where `params` is what
//! `json.loads` made of the agent's text. To compute the same hash we must decode to the
//! same Python values (exact big integers, correctly rounded floats, dicts that keep the
//! first position and last value of a repeated key) and print them back with the same
//! bytes (`", "`/`": "` separators, ASCII escapes, `float.__repr__`).
//!
//! The parser is stricter than Python where Python is lax in ways an agent has no
//! business relying on: `NaN`/`Infinity` literals and lone surrogates are refused, and so
//! is nesting deeper than [`MAX_DEPTH`], so hostile input can neither smuggle values that
//! have no faithful representation nor exhaust the stack.
//!
//! [`repeated_key`] is the strict reading of the same grammar: Python keeps the last value
//! of a repeated key, while another reader of the same text may keep the first, so a
//! document that repeats one can mean one thing to the operator and another to the tool.
//! The API refuses such documents instead of choosing.

use std::collections::HashSet;
use std::fmt::Write as _;

use num_bigint::BigInt;

use crate::domain::python::value::{PyDict, PyValue};
use crate::domain::text::{Layout, visible};

/// Deepest nesting of arrays and objects [`parse`] accepts; the top-level container is
/// level 1. Tool parameters are shallow in practice, and the bound keeps every recursive
/// walk over a parsed value (here and in the rest of the domain) far from the stack limit.
pub const MAX_DEPTH: usize = 64;

/// Python 3.11+ refuses to convert longer digit strings to `int` (`sys.int_info
/// .default_max_str_digits`), and `json.loads` fails with it; we agree rather than hash
/// a value the agent's own Python could never have produced.
pub const MAX_INT_DIGITS: usize = 4300;

/// Why a text is not JSON we accept, and the byte offset where that became clear.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct JsonError {
    kind: JsonErrorKind,
    offset: usize,
}

impl JsonError {
    fn new(kind: JsonErrorKind, offset: usize) -> Self {
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

/// The ways a text can fail [`parse`]. Messages quote at most one character of the input,
/// so an error can be logged or returned to the agent without echoing its parameters.
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
    /// Only from [`repeated_key`], which reports the key and where it is.
    #[error("an object repeats a key")]
    RepeatedKey,
}

/// One step from a document's top-level value down to a nested one.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

/// Longest key, in characters as shown, that a [`RepeatedKey`] quotes; the rest is cut.
const MAX_SHOWN_KEY_CHARS: usize = 64;

/// An object key that appears twice in the same object, and where that object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepeatedKey {
    /// From the top-level value down to the object that repeats the key.
    path: Vec<Step>,
    key: String,
}

impl RepeatedKey {
    /// The key that appears twice, as decoded (`"\u00e9"` and `"é"` are the same key).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Where the object that repeats the key sits, from the top-level value:
    /// `params.items[2]`, empty for the top-level object itself. Keys that are not plain
    /// words are quoted (`params["a.b"]`), and shown as [`RepeatedKey::reason`] shows them.
    pub fn path(&self) -> String {
        let mut out = String::new();
        for step in &self.path {
            match step {
                Step::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
                Step::Key(k) if is_plain_key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Step::Key(k) => {
                    let _ = write!(out, "[{}]", shown_key(k));
                }
            }
        }
        out
    }

    /// [`RepeatedKey::path`] below `root`, the name the caller gives the top-level value:
    /// `root` alone for the top-level object, else `root.params`.
    pub fn path_below(&self, root: &str) -> String {
        let path = self.path();
        match (root, path.as_str()) {
            (_, "") => root.to_owned(),
            ("", _) => path,
            _ if path.starts_with('[') => format!("{root}{path}"),
            _ => format!("{root}.{path}"),
        }
    }

    /// `repeats key "amount"`. The key is agent text: invisible characters show as
    /// escapes (see [`text::visible`](crate::domain::text::visible)) and a long key is
    /// cut, so the message can be returned and logged as it is.
    pub fn reason(&self) -> String {
        format!("repeats key {}", shown_key(&self.key))
    }
}

/// A key that reads unambiguously after a `.` in a path.
fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars().count() <= MAX_SHOWN_KEY_CHARS
        && k.chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
}

/// `k` in double quotes, with quotes, backslashes and invisible characters escaped and
/// at most [`MAX_SHOWN_KEY_CHARS`] characters of it shown (`…` marks a cut).
fn shown_key(k: &str) -> String {
    let mut out = String::from("\"");
    let mut shown = 0;
    for c in k.chars() {
        let piece = match c {
            '"' => "\\\"".to_owned(),
            '\\' => "\\\\".to_owned(),
            c => visible(c.encode_utf8(&mut [0; 4]), Layout::Line),
        };
        let width = piece.chars().count();
        if shown + width > MAX_SHOWN_KEY_CHARS {
            out.push('…');
            break;
        }
        shown += width;
        out.push_str(&piece);
    }
    out.push('"');
    out
}

/// Decode `text` as Python's `json.loads` would, refusing what this module's header says
/// we refuse.
pub fn parse(text: &str) -> Result<PyValue, JsonError> {
    Parser::new(text, false).document()
}

/// The first repeated object key of `text` in document order, at any depth, if there is
/// one; `Err` when `text` is not JSON that [`parse`] accepts. Keys compare as decoded, as
/// Python compares them.
pub fn repeated_key(text: &str) -> Result<Option<RepeatedKey>, JsonError> {
    let mut parser = Parser::new(text, true);
    match parser.document() {
        Ok(_) => Ok(None),
        Err(e) if e.kind == JsonErrorKind::RepeatedKey => Ok(parser.repeat.take()),
        Err(e) => Err(e),
    }
}

/// [`parse`], for places where only an object makes sense (tool parameters).
pub fn parse_object(text: &str) -> Result<PyDict, JsonError> {
    match parse(text)? {
        PyValue::Dict(dict) => Ok(dict),
        other => {
            let start = text.len() - text.trim_start_matches(is_json_ws).len();
            Err(JsonError::new(
                JsonErrorKind::NotAnObject(python_type_phrase(&other)),
                start,
            ))
        }
    }
}

fn python_type_phrase(v: &PyValue) -> &'static str {
    match v {
        PyValue::None => "null",
        PyValue::Bool(_) => "a boolean",
        PyValue::Int(_) | PyValue::Float(_) => "a number",
        PyValue::Str(_) => "a string",
        PyValue::List(_) => "an array",
        PyValue::Dict(_) => "an object",
    }
}

fn is_json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

struct Parser<'a> {
    bytes: &'a [u8],
    /// The same input as `bytes`, kept to slice number literals and to report the
    /// offending character (not just its first byte) in errors.
    text: &'a str,
    pos: usize,
    /// `Some` only in [`repeated_key`]'s strict reading: the path to the value being read,
    /// so a repeat can say where it is. `None` costs the Python-compatible parse nothing.
    path: Option<Vec<Step>>,
    /// The repeat that stopped the strict reading.
    repeat: Option<RepeatedKey>,
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, strict: bool) -> Self {
        Parser {
            bytes: text.as_bytes(),
            text,
            pos: 0,
            path: strict.then(Vec::new),
            repeat: None,
        }
    }

    /// The whole input as one value, surrounded by nothing but whitespace.
    fn document(&mut self) -> Result<PyValue, JsonError> {
        self.skip_ws();
        let value = self.value(0)?;
        self.skip_ws();
        match self.peek_char() {
            None => Ok(value),
            Some(c) => Err(self.err(JsonErrorKind::TrailingData(c))),
        }
    }

    fn err(&self, kind: JsonErrorKind) -> JsonError {
        JsonError::new(kind, self.pos)
    }

    /// Enters `step` of the path (strict reading only).
    fn push_step(&mut self, step: impl FnOnce() -> Step) {
        if let Some(path) = &mut self.path {
            path.push(step());
        }
    }

    fn pop_step(&mut self) {
        if let Some(path) = &mut self.path {
            path.pop();
        }
    }

    fn rest(&self) -> &[u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn peek_char(&self) -> Option<char> {
        self.text
            .get(self.pos..)
            .and_then(|rest| rest.chars().next())
    }

    /// The error for "something else was expected here": end of input, or the character.
    fn unexpected(&self, kind: impl FnOnce(char) -> JsonErrorKind) -> JsonError {
        match self.peek_char() {
            None => self.err(JsonErrorKind::UnexpectedEnd),
            Some(c) => self.err(kind(c)),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// One value starting at `pos` (whitespace already skipped). `depth` is the number of
    /// containers already open around it; recursion is bounded by [`MAX_DEPTH`].
    fn value(&mut self, depth: usize) -> Result<PyValue, JsonError> {
        match self.peek() {
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
            Some(b'{') => self.object(depth + 1).map(PyValue::Dict),
            Some(b'[') => self.array(depth + 1).map(PyValue::List),
            Some(b'"') => self.string().map(PyValue::Str),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true", PyValue::Bool(true)),
            Some(b'f') => self.literal("false", PyValue::Bool(false)),
            Some(b'n') => self.literal("null", PyValue::None),
            Some(b'N') if self.rest().starts_with(b"NaN") => {
                Err(self.err(JsonErrorKind::NonStandardLiteral("NaN")))
            }
            Some(b'I') if self.rest().starts_with(b"Infinity") => {
                Err(self.err(JsonErrorKind::NonStandardLiteral("Infinity")))
            }
            Some(_) => Err(self.unexpected(JsonErrorKind::ExpectedValue)),
        }
    }

    fn literal(&mut self, word: &str, value: PyValue) -> Result<PyValue, JsonError> {
        if self.rest().starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(value)
        } else {
            Err(self.err(JsonErrorKind::InvalidLiteral))
        }
    }

    fn enter(&self, depth: usize) -> Result<(), JsonError> {
        if depth > MAX_DEPTH {
            Err(self.err(JsonErrorKind::TooDeep))
        } else {
            Ok(())
        }
    }

    fn array(&mut self, depth: usize) -> Result<Vec<PyValue>, JsonError> {
        self.enter(depth)?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(items);
        }
        loop {
            self.skip_ws();
            if self.peek() == Some(b']') && !items.is_empty() {
                return Err(self.err(JsonErrorKind::TrailingComma(']')));
            }
            let index = items.len();
            self.push_step(|| Step::Index(index));
            items.push(self.value(depth)?);
            self.pop_step();
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(items);
                }
                _ => {
                    return Err(self
                        .unexpected(|found| JsonErrorKind::ExpectedCommaOr { close: ']', found }));
                }
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<PyDict, JsonError> {
        self.enter(depth)?;
        self.pos += 1; // '{'
        // Collected first and turned into a dict at the end: `PyDict::from_iter` gives
        // Python's semantics for repeated keys (first position, last value) in linear
        // time, where inserting one by one would be quadratic in the number of keys.
        let mut members: Vec<(String, PyValue)> = Vec::new();
        // The strict reading's keys so far, to spot a repeat where it is written.
        let mut seen: Option<HashSet<String>> = self.path.is_some().then(HashSet::new);
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(PyDict::new());
        }
        loop {
            self.skip_ws();
            match self.peek() {
                Some(b'"') => {}
                Some(b'}') if !members.is_empty() => {
                    return Err(self.err(JsonErrorKind::TrailingComma('}')));
                }
                _ => return Err(self.unexpected(JsonErrorKind::ExpectedKey)),
            }
            let key_at = self.pos;
            let key = self.string()?;
            if let Some(seen) = &mut seen
                && !seen.insert(key.clone())
            {
                self.repeat = Some(RepeatedKey {
                    path: self.path.clone().unwrap_or_default(),
                    key,
                });
                return Err(JsonError::new(JsonErrorKind::RepeatedKey, key_at));
            }
            self.skip_ws();
            match self.peek() {
                Some(b':') => self.pos += 1,
                _ => return Err(self.unexpected(JsonErrorKind::ExpectedColon)),
            }
            self.skip_ws();
            self.push_step(|| Step::Key(key.clone()));
            let value = self.value(depth)?;
            self.pop_step();
            members.push((key, value));
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(members.into_iter().collect());
                }
                _ => {
                    return Err(self
                        .unexpected(|found| JsonErrorKind::ExpectedCommaOr { close: '}', found }));
                }
            }
        }
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1; // opening '"'
        // Bytes rather than chars: the input is valid UTF-8 and every byte we act on is
        // ASCII, so copying the other bytes through unchanged keeps the result valid.
        let mut out: Vec<u8> = Vec::new();
        loop {
            let start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // No escape at all (the usual key or value): one copy of the slice, without
            // the byte buffer and its second UTF-8 check.
            if out.is_empty()
                && self.peek() == Some(b'"')
                && let Some(plain) = self.text.get(start..self.pos)
            {
                self.pos += 1;
                return Ok(plain.to_owned());
            }
            out.extend_from_slice(self.bytes.get(start..self.pos).unwrap_or_default());
            match self.peek() {
                None => return Err(JsonError::new(JsonErrorKind::UnterminatedString, start)),
                Some(b'"') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => {
                    let c = self.escape()?;
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                Some(b) => return Err(self.err(JsonErrorKind::ControlCharacter(b))),
            }
        }
        // Cannot fail (see above); mapped rather than unwrapped all the same.
        String::from_utf8(out).map_err(|_| self.err(JsonErrorKind::UnterminatedString))
    }

    /// One escape sequence at `pos` (the backslash), a surrogate pair counting as one.
    fn escape(&mut self) -> Result<char, JsonError> {
        let backslash = self.pos;
        self.pos += 1;
        let simple = match self.peek() {
            None => return Err(self.err(JsonErrorKind::UnterminatedString)),
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.pos += 1;
                return self.unicode_escape(backslash);
            }
            Some(_) => return Err(self.unexpected(JsonErrorKind::InvalidEscape)),
        };
        self.pos += 1;
        Ok(simple)
    }

    /// The `XXXX` of `\uXXXX` at `pos`; `backslash` is where the escape began.
    fn unicode_escape(&mut self, backslash: usize) -> Result<char, JsonError> {
        let unit = self.hex4()?;
        let code = match unit {
            0xD800..=0xDBFF => {
                // Only an immediately following `\u` low surrogate completes the pair;
                // anything else leaves a lone surrogate, which Python would keep in the
                // str but which has no UTF-8 form (and could not be hashed as sent).
                let low = if self.rest().starts_with(b"\\u") {
                    let after_high = self.pos;
                    self.pos += 2;
                    let low = self.hex4()?;
                    if (0xDC00..=0xDFFF).contains(&low) {
                        Some(low)
                    } else {
                        self.pos = after_high;
                        None
                    }
                } else {
                    None
                };
                match low {
                    Some(low) => {
                        0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                    }
                    None => {
                        return Err(JsonError::new(
                            JsonErrorKind::UnpairedSurrogate(unit),
                            backslash,
                        ));
                    }
                }
            }
            0xDC00..=0xDFFF => {
                return Err(JsonError::new(
                    JsonErrorKind::UnpairedSurrogate(unit),
                    backslash,
                ));
            }
            _ => u32::from(unit),
        };
        char::from_u32(code)
            .ok_or_else(|| JsonError::new(JsonErrorKind::InvalidUnicodeEscape, backslash))
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let mut unit: u16 = 0;
        for _ in 0..4 {
            let digit = self
                .peek()
                .and_then(|b| char::from(b).to_digit(16))
                .ok_or_else(|| self.err(JsonErrorKind::InvalidUnicodeEscape))?;
            // Four hex digits always fit in u16.
            unit = (unit << 4) | digit as u16;
            self.pos += 1;
        }
        Ok(unit)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-? (0 | [1-9][0-9]*) (.[0-9]+)? ([eE][+-]?[0-9]+)?`, as RFC 8259 and Python's
    /// scanner both read it: an integer literal becomes `int`, anything else `float`.
    fn number(&mut self) -> Result<PyValue, JsonError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
            if self.rest().starts_with(b"Infinity") {
                return Err(JsonError::new(
                    JsonErrorKind::NonStandardLiteral("-Infinity"),
                    start,
                ));
            }
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.err(JsonErrorKind::InvalidNumber("leading zeros")));
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => {
                return Err(self.err(JsonErrorKind::InvalidNumber("expected a digit after '-'")));
            }
        }
        let int_digits = self.pos - int_start;
        let mut is_float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber("expected a digit after '.'")));
            }
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber(
                    "expected a digit in the exponent",
                )));
            }
            is_float = true;
        }
        // Both ends sit on ASCII bytes, so this slice is always on char boundaries.
        let literal = self.text.get(start..self.pos).unwrap_or_default();
        if is_float {
            // Rust's parser is correctly rounded like Python's `float()`, and likewise
            // overflows to infinity and underflows to zero instead of failing.
            literal
                .parse::<f64>()
                .map(PyValue::Float)
                .map_err(|_| JsonError::new(JsonErrorKind::InvalidNumber("not a float"), start))
        } else if int_digits > MAX_INT_DIGITS {
            Err(JsonError::new(
                JsonErrorKind::IntegerTooLong(int_digits),
                start,
            ))
        } else if int_digits <= 18 {
            // Fits an i64; skips BigInt's general decimal conversion for the usual case.
            literal
                .parse::<i64>()
                .map(|i| PyValue::Int(BigInt::from(i)))
                .map_err(|_| JsonError::new(JsonErrorKind::InvalidNumber("not an integer"), start))
        } else {
            literal
                .parse::<BigInt>()
                .map(PyValue::Int)
                .map_err(|_| JsonError::new(JsonErrorKind::InvalidNumber("not an integer"), start))
        }
    }
}

/// `json.dumps(v, sort_keys=True, default=str)`: the text AI-Parrot hashes.
pub fn dumps_sorted(v: &PyValue) -> String {
    let mut out = String::new();
    write_sorted(&mut out, v);
    out
}

/// [`dumps_sorted`] of `PyValue::Dict(dict)`, without cloning the dict to wrap it.
pub fn dumps_sorted_dict(dict: &PyDict) -> String {
    // Room for a typical tool call's parameters without regrowing.
    let mut out = String::with_capacity(256);
    write_sorted_dict(&mut out, dict);
    out
}

fn write_sorted(out: &mut String, v: &PyValue) {
    match v {
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_sorted(out, item);
            }
            out.push(']');
        }
        PyValue::Dict(dict) => write_sorted_dict(out, dict),
        PyValue::Str(s) => write_str_ascii(out, s),
        scalar => write_scalar(out, scalar),
    }
}

fn write_sorted_dict(out: &mut String, dict: &PyDict) {
    let mut entries: Vec<(&str, &PyValue)> = dict.iter().collect();
    // Python compares str by code point; UTF-8 byte order is the same order (and keys
    // are unique, so the values are never compared).
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_str_ascii(out, key);
        out.push_str(": ");
        write_sorted(out, value);
    }
    out.push('}');
}

/// `None`, `bool`, `int` and `float` print the same in both of Python's encoders.
fn write_scalar(out: &mut String, v: &PyValue) {
    match v {
        PyValue::None => out.push_str("null"),
        PyValue::Bool(true) => out.push_str("true"),
        PyValue::Bool(false) => out.push_str("false"),
        // Small integers skip BigInt's general radix conversion.
        PyValue::Int(i) => match i64::try_from(i) {
            Ok(small) => {
                let _ = write!(out, "{small}");
            }
            Err(_) => {
                let _ = write!(out, "{i}");
            }
        },
        PyValue::Float(f) => write_json_float(out, *f),
        // Containers and strings are handled by the callers.
        PyValue::Str(_) | PyValue::List(_) | PyValue::Dict(_) => {}
    }
}

/// `json`'s `floatstr`: the repr, except the non-finite values that `allow_nan=True`
/// spells as JavaScript does.
pub(crate) fn write_json_float(out: &mut String, f: f64) {
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else {
        write_float_repr(out, f);
    }
}

/// `ensure_ascii=True` string escaping (`py_encode_basestring_ascii`).
pub(crate) fn write_str_ascii(out: &mut String, s: &str) {
    out.push('"');
    // The common case, printable ASCII only, is copied in one go.
    if s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    push_unicode_escape(out, *unit);
                }
            }
        }
    }
    out.push('"');
}

/// `\uXXXX` in lowercase hex, as Python writes it; by hand, since `write!` costs a
/// formatter per character of non-ASCII text.
fn push_unicode_escape(out: &mut String, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(HEX[usize::from((unit >> shift) & 0xf)]));
    }
}

/// `ensure_ascii=False` string escaping (`py_encode_basestring`): only `"`, `\` and
/// C0 controls are escaped; DEL and everything non-ASCII pass through.
fn write_str_unicode(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\0'..='\u{1f}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            _ => out.push(c),
        }
    }
    out.push('"');
}

/// `json.dumps(v, indent=2, ensure_ascii=False)`: the parameters as the agent sent them
/// (insertion order, characters unescaped), laid out for an operator to read.
pub fn to_pretty_json(v: &PyValue) -> String {
    let mut out = String::new();
    write_pretty(&mut out, v, 0);
    out
}

fn newline_indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

fn write_pretty(out: &mut String, v: &PyValue, level: usize) {
    match v {
        // Python prints empty containers on one line even when indenting.
        PyValue::List(items) if items.is_empty() => out.push_str("[]"),
        PyValue::Dict(dict) if dict.is_empty() => out.push_str("{}"),
        PyValue::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(out, level + 1);
                write_pretty(out, item, level + 1);
            }
            newline_indent(out, level);
            out.push(']');
        }
        PyValue::Dict(dict) => {
            out.push('{');
            for (i, (key, value)) in dict.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline_indent(out, level + 1);
                write_str_unicode(out, key);
                out.push_str(": ");
                write_pretty(out, value, level + 1);
            }
            newline_indent(out, level);
            out.push('}');
        }
        PyValue::Str(s) => write_str_unicode(out, s),
        scalar => write_scalar(out, scalar),
    }
}

/// Python's `repr(f)`: shortest digits that round-trip, positional notation for decimal
/// exponents from -4 to 15 (with `.0` when integral: `0.0001`, `1e15` as
/// `1000000000000000.0`), scientific otherwise (`1e-05`, `1e+16`, `1.5e+300`); `inf`,
/// `-inf` and `nan` for the non-finite values.
pub fn float_repr(f: f64) -> String {
    let mut out = String::new();
    if f.is_nan() {
        out.push_str("nan");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "inf" } else { "-inf" });
    } else {
        write_float_repr(&mut out, f);
    }
    out
}

/// The shortest digits that round-trip to `f`, closest to its exact value among those,
/// in Rust's `{:e}` layout (`6.1318977157965325e14`, `-1e-5`): the digits David Gay's
/// dtoa (mode 0) gives Python's repr.
///
/// `{:e}` alone finds the right *number* of digits but breaks an exact tie between two
/// equally close candidates upwards, where dtoa rounds half to even:
/// 613189771579653.25 is `613189771579653.3` in Rust and `613189771579653.2` in Python.
/// Formatting to that many digits with `{:.N$e}` rounds exactly and half to even; when
/// that candidate also round-trips it is the one dtoa picks. (It may not round-trip
/// just above a power of two, where the gap below is half the gap above; then the
/// shortest mode's answer stands.)
fn shortest_scientific(f: f64) -> String {
    let shortest = format!("{f:e}");
    let mantissa = shortest
        .split_once('e')
        .map_or(shortest.as_str(), |(m, _)| m);
    let digits = mantissa.bytes().filter(u8::is_ascii_digit).count();
    let nearest = format!("{f:.0$e}", digits.saturating_sub(1));
    if nearest != shortest && nearest.parse::<f64>() == Ok(f) {
        nearest
    } else {
        shortest
    }
}

/// The finite case of [`float_repr`].
fn write_float_repr(out: &mut String, f: f64) {
    let sci = shortest_scientific(f);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let exp: i32 = exp.parse().unwrap_or(0);
    // Python's `decpt`: the value is 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    let ndigits = digits.len() as i32;
    if negative {
        out.push('-');
    }
    if !(-4 < decpt && decpt <= 16) {
        let (first, rest) = digits.split_at(digits.len().min(1));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.unsigned_abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..-decpt {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt >= ndigits {
        out.push_str(&digits);
        for _ in 0..decpt - ndigits {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        let (int_part, frac_part) = digits.split_at(decpt as usize);
        out.push_str(int_part);
        out.push('.');
        out.push_str(frac_part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(text: &str) -> JsonErrorKind {
        match parse(text) {
            Ok(v) => panic!("{text:?} parsed as {v:?}"),
            Err(e) => e.kind().clone(),
        }
    }

    fn canonical(text: &str) -> String {
        dumps_sorted(&parse(text).expect("valid JSON"))
    }

    fn pretty(text: &str) -> String {
        to_pretty_json(&parse(text).expect("valid JSON"))
    }

    fn int(text: &str) -> PyValue {
        PyValue::Int(text.parse().expect("integer"))
    }

    #[test]
    fn the_aiparrot_example_serialises_as_python_does() {
        assert_eq!(
            canonical(r#"{"b":1,"a":"é","c":[1.0,1e16,1e-5]}"#),
            r#"{"a": "\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}"#
        );
    }

    #[test]
    fn scalars_decode_to_their_python_types() {
        assert_eq!(parse("null"), Ok(PyValue::None));
        assert_eq!(parse(" true "), Ok(PyValue::Bool(true)));
        assert_eq!(parse("false"), Ok(PyValue::Bool(false)));
        assert_eq!(parse("-0"), Ok(int("0")));
        assert_eq!(parse("1.0"), Ok(PyValue::Float(1.0)));
        assert_eq!(parse("1E5"), Ok(PyValue::Float(100000.0)));
        assert_eq!(parse(r#""a\/b""#), Ok(PyValue::Str("a/b".into())));
    }

    #[test]
    fn integers_keep_every_digit() {
        let digits = "123456789".repeat(20);
        assert_eq!(parse(&digits), Ok(int(&digits)));
        let negative = format!("-{digits}");
        assert_eq!(dumps_sorted(&int(&negative)), negative);
        assert_eq!(canonical("[9007199254740993]"), "[9007199254740993]");
    }

    #[test]
    fn integers_up_to_pythons_digit_limit_are_accepted_and_longer_ones_refused() {
        let limit = "9".repeat(MAX_INT_DIGITS);
        assert!(parse(&limit).is_ok());
        assert!(parse(&format!("-{limit}")).is_ok());
        let over = "9".repeat(MAX_INT_DIGITS + 1);
        assert_eq!(kind_of(&over), JsonErrorKind::IntegerTooLong(4301));
        assert_eq!(
            kind_of(&format!("[-{over}]")),
            JsonErrorKind::IntegerTooLong(4301)
        );
        // Floats have no such limit in Python.
        assert!(parse(&format!("{over}.0")).is_ok());
    }

    #[test]
    fn floats_are_correctly_rounded_and_overflow_to_infinity() {
        assert_eq!(parse("1e400"), Ok(PyValue::Float(f64::INFINITY)));
        assert_eq!(parse("-1e400"), Ok(PyValue::Float(f64::NEG_INFINITY)));
        assert_eq!(parse("1e-400"), Ok(PyValue::Float(0.0)));
        assert_eq!(parse("4.9e-324"), Ok(PyValue::Float(5e-324)));
        // Exactly halfway between 1.0 and the next double: ties to even...
        assert_eq!(
            parse("1.00000000000000011102230246251565404236316680908203125"),
            Ok(PyValue::Float(1.0))
        );
        // ...and one digit past halfway, far beyond 17 significant digits, rounds up.
        assert_eq!(
            parse("1.00000000000000011102230246251565404236316680908203126"),
            Ok(PyValue::Float(1.0000000000000002))
        );
        let huge_exponent = format!("1e{}", "9".repeat(500));
        assert_eq!(parse(&huge_exponent), Ok(PyValue::Float(f64::INFINITY)));
        let zero_huge_exponent = format!("0e{}", "9".repeat(500));
        assert_eq!(parse(&zero_huge_exponent), Ok(PyValue::Float(0.0)));
        assert_eq!(canonical("[1e400, -1e400]"), "[Infinity, -Infinity]");
    }

    #[test]
    fn negative_zero_float_keeps_its_sign() {
        match parse("-0.0") {
            Ok(PyValue::Float(f)) => assert!(f == 0.0 && f.is_sign_negative()),
            other => panic!("{other:?}"),
        }
        assert_eq!(canonical("[-0.0, -0, 0e0, -0E-5]"), "[-0.0, 0, 0.0, -0.0]");
    }

    #[test]
    fn escapes_decode_and_surrogate_pairs_combine() {
        assert_eq!(
            parse(r#""\"\\\/\b\f\n\r\t\u00e9\u00C9""#),
            Ok(PyValue::Str("\"\\/\u{8}\u{c}\n\r\té\u{c9}".into()))
        );
        assert_eq!(
            parse(r#""\ud83d\ude00\uD83D\uDE00""#),
            Ok(PyValue::Str("😀😀".into()))
        );
        assert_eq!(
            parse(r#""\udbff\udfff""#),
            Ok(PyValue::Str("\u{10FFFF}".into()))
        );
        assert_eq!(parse("\"raw é 😀\""), Ok(PyValue::Str("raw é 😀".into())));
    }

    #[test]
    fn a_repeated_key_keeps_its_first_position_and_its_last_value() {
        let dict = parse_object(r#"{"a":1,"b":2,"a":{"x":3}}"#).expect("object");
        let keys: Vec<&str> = dict.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b"]);
        assert_eq!(
            dict.get("a"),
            Some(&PyValue::Dict(parse_object(r#"{"x":3}"#).expect("object")))
        );
        assert_eq!(
            pretty(r#"{"a":1,"b":2,"a":3}"#),
            "{\n  \"a\": 3,\n  \"b\": 2\n}"
        );
        // An escaped spelling of the same key is the same key.
        assert_eq!(canonical(r#"{"é":1,"\u00e9":2}"#), r#"{"\u00e9": 2}"#);
    }

    /// `repeated_key` as (path, reason), for JSON it accepts.
    fn repeat(text: &str) -> Option<(String, String)> {
        repeated_key(text)
            .expect("JSON the parser accepts")
            .map(|r| (r.path(), r.reason()))
    }

    fn at(path: &str, key: &str) -> Option<(String, String)> {
        Some((path.to_owned(), format!("repeats key \"{key}\"")))
    }

    #[test]
    fn the_strict_reading_finds_a_repeated_key_at_any_depth_and_names_its_object() {
        assert_eq!(repeat(r#"{"to":"ACME","amount":1}"#), None);
        assert_eq!(
            repeat(r#"{"amount":1,"to":"x","amount":2}"#),
            at("", "amount")
        );
        assert_eq!(
            repeat(r#"{"params":{"to":{"iban":"A","bic":"B","iban":"C"}}}"#),
            at("params.to", "iban")
        );
        assert_eq!(
            repeat(r#"{"params":{"items":[1,{},{"sku":1,"sku":2}]}}"#),
            at("params.items[2]", "sku")
        );
        assert_eq!(repeat(r#"[[{"a":1}],[{"b":1,"b":1}]]"#), at("[1][0]", "b"));
        // The same key in two objects is no repeat.
        assert_eq!(
            repeat(r#"{"a":{"x":1},"b":{"x":1},"c":[{"x":1},{"x":2}]}"#),
            None
        );
        // Escaped or not, the same decoded key is the same key, as Python sees it.
        assert_eq!(repeat(r#"{"é":1,"\u00e9":2}"#), at("", "é"));
        // A key with a dot, or any other non-word, is quoted in the path.
        assert_eq!(repeat(r#"{"a.b":{"c":1,"c":2}}"#), at(r#"["a.b"]"#, "c"));
    }

    #[test]
    fn the_first_repeat_in_document_order_is_the_one_reported() {
        assert_eq!(repeat(r#"{"a":1,"a":{"b":1,"b":2}}"#), at("", "a"));
        assert_eq!(repeat(r#"{"a":{"b":1,"b":2},"a":1}"#), at("a", "b"));
        let mut members: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        members.push("\"k30\":0".into());
        assert_eq!(repeat(&format!("{{{}}}", members.join(","))), at("", "k30"));
    }

    #[test]
    fn a_repeated_key_is_shown_with_its_invisible_characters_escaped_and_cut() {
        let r = repeated_key("{\"a\u{202e}b\":1,\"a\\u202eb\":2}")
            .unwrap()
            .expect("a repeat");
        assert_eq!(r.key(), "a\u{202e}b");
        assert_eq!(r.reason(), r#"repeats key "a\u202eb""#);
        assert_eq!(
            repeat(r#"{"x\u200by":{"q\"\\":1,"q\"\\":2}}"#),
            Some((r#"["x\u200by"]"#.into(), r#"repeats key "q\"\\""#.into()))
        );
        let long = "k".repeat(100);
        assert_eq!(
            repeat(&format!(r#"{{"{long}":1,"{long}":2}}"#)),
            Some((
                String::new(),
                format!("repeats key \"{}…\"", "k".repeat(64))
            ))
        );
        // An escape is never cut in half.
        let bidi = "\\u202e".repeat(20);
        let shown = repeat(&format!(r#"{{"{bidi}":1,"{bidi}":2}}"#)).unwrap().1;
        assert_eq!(shown, format!("repeats key \"{}…\"", "\\u202e".repeat(10)));
    }

    #[test]
    fn a_repeat_path_reads_below_the_callers_root() {
        let r = |text: &str| repeated_key(text).unwrap().expect("a repeat");
        assert_eq!(
            r(r#"{"a":1,"a":2}"#).path_below("interaction"),
            "interaction"
        );
        assert_eq!(
            r(r#"{"form_schema":{"a":1,"a":2}}"#).path_below("interaction"),
            "interaction.form_schema"
        );
        assert_eq!(r(r#"[{"a":1,"a":2}]"#).path_below("body"), "body[0]");
        assert_eq!(r(r#"{"p":{"a":1,"a":2}}"#).path_below(""), "p");
    }

    #[test]
    fn the_strict_reading_refuses_what_parse_refuses_and_parse_still_keeps_the_last_value() {
        assert_eq!(
            repeated_key(r#"{"a":1,}"#).unwrap_err().kind(),
            &JsonErrorKind::TrailingComma('}')
        );
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(
            repeated_key(&deep).unwrap_err().kind(),
            &JsonErrorKind::TooDeep
        );
        assert_eq!(
            repeated_key("NaN").unwrap_err().kind(),
            &JsonErrorKind::NonStandardLiteral("NaN")
        );
        assert_eq!(repeated_key(r#"{"a":1}"#), Ok(None));
        assert_eq!(canonical(r#"{"a":1,"a":2}"#), r#"{"a": 2}"#);
    }

    #[test]
    fn repeated_keys_in_a_large_object_behave_as_in_a_small_one() {
        // Past 16 keys the dict indexes its keys instead of scanning them: a key repeated
        // on either side of that point still keeps its first position and last value.
        let mut members: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        members.push("\"k3\":\"late\"".into());
        members.push("\"k30\":\"later\"".into());
        let dict = parse_object(&format!("{{{}}}", members.join(","))).expect("object");
        assert_eq!(dict.len(), 40);
        let keys: Vec<&str> = dict.iter().map(|(k, _)| k).collect();
        assert_eq!(keys[3], "k3");
        assert_eq!(keys[30], "k30");
        assert_eq!(dict.get("k3"), Some(&PyValue::Str("late".into())));
        assert_eq!(dict.get("k30"), Some(&PyValue::Str("later".into())));
        assert_eq!(dict.get("k39"), Some(&PyValue::Int(39.into())));
    }

    #[test]
    fn an_object_with_a_hundred_thousand_keys_parses_without_quadratic_work() {
        // Inserting key by key scans the dict each time: minutes here, not milliseconds.
        let members: Vec<String> = (0..100_000).map(|i| format!("\"k{i}\":{i}")).collect();
        let text = format!("{{{},\"k7\":-1}}", members.join(","));
        let dict = parse_object(&text).expect("object");
        assert_eq!(dict.len(), 100_000);
        assert_eq!(dict.iter().nth(7), Some(("k7", &int("-1"))));
        assert_eq!(dict.iter().last(), Some(("k99999", &int("99999"))));
    }

    #[test]
    fn keys_sort_by_code_point_at_every_depth() {
        assert_eq!(
            canonical(r#"{"b":{"z":1,"a":[{"d":0,"c":0}]},"a":0,"B":0}"#),
            r#"{"B": 0, "a": 0, "b": {"a": [{"c": 0, "d": 0}], "z": 1}}"#
        );
        // UTF-16 order would put the astral key before U+FF5E and U+E000.
        assert_eq!(
            canonical(r#"{"😀":1,"～":2,"\ue000":3}"#),
            r#"{"\ue000": 3, "\uff5e": 2, "\ud83d\ude00": 1}"#
        );
    }

    #[test]
    fn ensure_ascii_escapes_everything_outside_printable_ascii() {
        assert_eq!(
            canonical(r#"["\u0000\u001f\u007f\u0080 ~\"\\/\b\f\n\r\t", "é😀"]"#),
            r#"["\u0000\u001f\u007f\u0080 ~\"\\/\b\f\n\r\t", "\u00e9\ud83d\ude00"]"#
        );
    }

    #[test]
    fn empty_containers_print_without_spaces() {
        assert_eq!(canonical(r#"{"a":[],"b":{}}"#), r#"{"a": [], "b": {}}"#);
        assert_eq!(canonical(" [ ] "), "[]");
        assert_eq!(canonical("{ }"), "{}");
    }

    #[test]
    fn float_repr_matches_python() {
        let cases: &[(f64, &str)] = &[
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e16, "1.5e+16"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (1.2345e-5, "1.2345e-05"),
            (1.5e300, "1.5e+300"),
            (-1.5e-300, "-1.5e-300"),
            (123456789012345.0, "123456789012345.0"),
            (1234567890123456.0, "1234567890123456.0"),
            (12345678901234567.0, "1.2345678901234568e+16"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (0.30000000000000004, "0.30000000000000004"),
            (1e23, "1e+23"),
            (123.456, "123.456"),
            // Exact ties between two shortest candidates round half to even.
            (613189771579653.0 + 0.25, "613189771579653.2"),
            (-613189771579653.0 - 0.25, "-613189771579653.2"),
            (20519081774826.0 + 0.5625, "20519081774826.562"),
            (-2.5, "-2.5"),
            (1e100, "1e+100"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for (f, expected) in cases {
            assert_eq!(float_repr(*f), *expected, "repr of {f:e}");
        }
    }

    #[test]
    fn json_spells_non_finite_floats_as_javascript_does() {
        assert_eq!(
            dumps_sorted(&PyValue::List(vec![
                PyValue::Float(f64::INFINITY),
                PyValue::Float(f64::NEG_INFINITY),
                PyValue::Float(f64::NAN),
            ])),
            "[Infinity, -Infinity, NaN]"
        );
        assert_eq!(
            to_pretty_json(&PyValue::Float(f64::NEG_INFINITY)),
            "-Infinity"
        );
    }

    #[test]
    fn pretty_output_keeps_insertion_order_and_indents_by_two() {
        assert_eq!(
            pretty(r#"{"z":1,"a":[1,{"b":[]},{}],"c":"é\u2028\u007f\u0001\"","d":1e16}"#),
            "{\n  \"z\": 1,\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    },\n    {}\n  ],\n  \"c\": \"é\u{2028}\u{7f}\\u0001\\\"\",\n  \"d\": 1e+16\n}"
        );
    }

    #[test]
    fn pretty_output_of_empty_and_scalar_values_is_one_line() {
        assert_eq!(pretty("{}"), "{}");
        assert_eq!(pretty("[]"), "[]");
        assert_eq!(pretty("1.50"), "1.5");
        assert_eq!(pretty("\"😀\\n\""), "\"😀\\n\"");
        assert_eq!(pretty("[[]]"), "[\n  []\n]");
    }

    #[test]
    fn whitespace_is_allowed_between_every_token() {
        assert_eq!(
            canonical(" \t\r\n{ \n\"a\" \r: \t[ 1 , 2 ] ,\"b\":{ } } \n"),
            r#"{"a": [1, 2], "b": {}}"#
        );
    }

    #[test]
    fn non_standard_literals_are_refused() {
        assert_eq!(kind_of("NaN"), JsonErrorKind::NonStandardLiteral("NaN"));
        assert_eq!(
            kind_of("[Infinity]"),
            JsonErrorKind::NonStandardLiteral("Infinity")
        );
        assert_eq!(
            kind_of(r#"{"a":-Infinity}"#),
            JsonErrorKind::NonStandardLiteral("-Infinity")
        );
        assert_eq!(kind_of("tru"), JsonErrorKind::InvalidLiteral);
        assert_eq!(kind_of("True"), JsonErrorKind::ExpectedValue('T'));
        assert_eq!(kind_of("nul"), JsonErrorKind::InvalidLiteral);
    }

    #[test]
    fn lone_surrogates_are_refused() {
        for text in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""\ud800x""#,
            r#""\ud800\n""#,
            r#""\ud800\u0041""#,
            r#""\ud800\ud800""#,
            r#""\ude00\ud83d""#,
        ] {
            assert!(
                matches!(kind_of(text), JsonErrorKind::UnpairedSurrogate(_)),
                "{text}"
            );
        }
        let err = parse(r#"{"key": "ab\ud800"}"#).expect_err("lone surrogate");
        assert_eq!(err.to_string(), r"unpaired surrogate \ud800 at byte 11");
    }

    #[test]
    fn raw_control_characters_in_strings_are_refused() {
        assert_eq!(kind_of("\"a\nb\""), JsonErrorKind::ControlCharacter(b'\n'));
        assert_eq!(kind_of("\"\u{0}\""), JsonErrorKind::ControlCharacter(0));
        assert_eq!(
            kind_of("{\"a\tb\":1}"),
            JsonErrorKind::ControlCharacter(b'\t')
        );
        // DEL is not a control character to JSON.
        assert_eq!(parse("\"\u{7f}\""), Ok(PyValue::Str("\u{7f}".into())));
    }

    #[test]
    fn bad_escapes_are_refused() {
        assert_eq!(kind_of(r#""\x41""#), JsonErrorKind::InvalidEscape('x'));
        assert_eq!(kind_of(r#""\'""#), JsonErrorKind::InvalidEscape('\''));
        assert_eq!(kind_of(r#""\u12""#), JsonErrorKind::InvalidUnicodeEscape);
        assert_eq!(kind_of(r#""\u12g4""#), JsonErrorKind::InvalidUnicodeEscape);
        assert_eq!(kind_of(r#""\u"#), JsonErrorKind::InvalidUnicodeEscape);
        assert_eq!(kind_of("\"\\"), JsonErrorKind::UnterminatedString);
        assert_eq!(kind_of("\"abc"), JsonErrorKind::UnterminatedString);
    }

    #[test]
    fn malformed_numbers_are_refused() {
        assert_eq!(kind_of("01"), JsonErrorKind::InvalidNumber("leading zeros"));
        assert_eq!(
            kind_of("-01.5"),
            JsonErrorKind::InvalidNumber("leading zeros")
        );
        assert!(matches!(kind_of("1."), JsonErrorKind::InvalidNumber(_)));
        assert!(matches!(kind_of("1.e5"), JsonErrorKind::InvalidNumber(_)));
        assert!(matches!(kind_of("1e"), JsonErrorKind::InvalidNumber(_)));
        assert!(matches!(kind_of("1e+"), JsonErrorKind::InvalidNumber(_)));
        assert!(matches!(kind_of("-"), JsonErrorKind::InvalidNumber(_)));
        assert!(matches!(kind_of("-a"), JsonErrorKind::InvalidNumber(_)));
        assert_eq!(kind_of("+1"), JsonErrorKind::ExpectedValue('+'));
        assert_eq!(kind_of(".5"), JsonErrorKind::ExpectedValue('.'));
        assert_eq!(kind_of("0x10"), JsonErrorKind::TrailingData('x'));
        assert_eq!(kind_of("1_000"), JsonErrorKind::TrailingData('_'));
        // Only ASCII digits count, unlike Python's `int()` on its own.
        assert_eq!(kind_of("[١]"), JsonErrorKind::ExpectedValue('١'));
    }

    #[test]
    fn trailing_garbage_is_refused() {
        assert_eq!(kind_of("{} x"), JsonErrorKind::TrailingData('x'));
        assert_eq!(kind_of("[1] [2]"), JsonErrorKind::TrailingData('['));
        assert_eq!(kind_of("1 2"), JsonErrorKind::TrailingData('2'));
        assert_eq!(kind_of("{}\u{0}"), JsonErrorKind::TrailingData('\0'));
        let err = parse("{\"a\": 1}  é").expect_err("trailing");
        assert_eq!(
            err.to_string(),
            "unexpected 'é' after the JSON value at byte 10"
        );
    }

    #[test]
    fn structural_mistakes_are_refused() {
        assert_eq!(kind_of(""), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of("   "), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of("[1,]"), JsonErrorKind::TrailingComma(']'));
        assert_eq!(kind_of(r#"{"a":1,}"#), JsonErrorKind::TrailingComma('}'));
        assert_eq!(kind_of("[,1]"), JsonErrorKind::ExpectedValue(','));
        assert_eq!(kind_of("{,}"), JsonErrorKind::ExpectedKey(','));
        assert_eq!(kind_of("{a:1}"), JsonErrorKind::ExpectedKey('a'));
        assert_eq!(kind_of("{'a':1}"), JsonErrorKind::ExpectedKey('\''));
        assert_eq!(kind_of(r#"{"a" 1}"#), JsonErrorKind::ExpectedColon('1'));
        assert_eq!(
            kind_of(r#"{"a":1 "b":2}"#),
            JsonErrorKind::ExpectedCommaOr {
                close: '}',
                found: '"'
            }
        );
        assert_eq!(
            kind_of("[1 2]"),
            JsonErrorKind::ExpectedCommaOr {
                close: ']',
                found: '2'
            }
        );
        assert_eq!(kind_of("[1"), JsonErrorKind::UnexpectedEnd);
        assert_eq!(kind_of(r#"{"a":"#), JsonErrorKind::UnexpectedEnd);
        assert_eq!(
            kind_of("\u{feff}{}"),
            JsonErrorKind::ExpectedValue('\u{feff}')
        );
        // Only JSON's four whitespace characters separate tokens.
        assert_eq!(kind_of("\u{a0}{}"), JsonErrorKind::ExpectedValue('\u{a0}'));
        assert_eq!(kind_of("{}\u{b}"), JsonErrorKind::TrailingData('\u{b}'));
    }

    #[test]
    fn nesting_up_to_the_limit_is_accepted_and_deeper_is_refused() {
        let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&at_limit).is_ok());
        let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(kind_of(&over), JsonErrorKind::TooDeep);
        let objects = format!(
            "{}1{}",
            r#"{"a":"#.repeat(MAX_DEPTH + 1),
            "}".repeat(MAX_DEPTH + 1)
        );
        let err = parse(&objects).expect_err("too deep");
        assert_eq!(err.to_string(), "nesting deeper than 64 levels at byte 320");
    }

    #[test]
    fn hostile_deep_nesting_is_refused_without_overflowing_the_stack() {
        let open = "[".repeat(100_000);
        assert_eq!(kind_of(&open), JsonErrorKind::TooDeep);
        let objects = r#"{"a":"#.repeat(100_000);
        assert_eq!(kind_of(&objects), JsonErrorKind::TooDeep);
        let mixed = r#"[{"":"#.repeat(50_000);
        assert_eq!(kind_of(&mixed), JsonErrorKind::TooDeep);
    }

    #[test]
    fn parse_object_refuses_other_top_level_values() {
        assert_eq!(
            parse_object(" [1]").expect_err("array").to_string(),
            "top-level value is an array, expected an object at byte 1"
        );
        assert!(matches!(
            parse_object("\"{}\"").map_err(|e| e.kind().clone()),
            Err(JsonErrorKind::NotAnObject("a string"))
        ));
        assert!(parse_object("null").is_err());
        assert!(parse_object("{} {}").is_err());
        assert_eq!(parse_object(" {} ").map(|d| d.len()), Ok(0));
    }

    #[test]
    fn error_messages_never_echo_the_input_at_length() {
        let secret = "s3cr3t".repeat(1000);
        for text in [
            format!("{{\"token\": \"{secret}"),
            format!("{{\"token\": \"{secret}\" x"),
            format!("{{\"token\": \"{secret}\\q\"}}"),
            format!("[{secret}]"),
        ] {
            let message = parse(&text).expect_err("invalid").to_string();
            assert!(message.len() < 100, "{message}");
            assert!(!message.contains("s3cr3t"), "{message}");
        }
    }
}
