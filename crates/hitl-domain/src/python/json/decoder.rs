//! `json.loads`, as CPython reads a text: `Lib/json/decoder.py` (`JSONObject`,
//! `JSONArray`, `py_scanstring`) and `Lib/json/scanner.py` (`_scan_once` and its
//! `NUMBER_RE`), which `Modules/_json.c` implements in C. One recursive-descent
//! [`Parser`] does both modules' work: `value` is `_scan_once`, `object`/`array` are
//! `JSONObject`/`JSONArray`, `string` is `scanstring`, `number` is `NUMBER_RE` and its
//! `int`/`float` conversion.
//!
//! It also reads strictly ([`repeated_key`]): the same grammar, stopping at the first
//! repeated key instead of keeping its last value.

use std::collections::HashSet;

use num_bigint::BigInt;

use super::error::{JsonError, JsonErrorKind};
use super::repeat::{RepeatedKey, Step};
use super::{MAX_DEPTH, MAX_INT_DIGITS};
use crate::python::value::{PyDict, PyValue};

/// Decode `text` as Python's `json.loads` would, refusing what `json`'s header says we
/// refuse.
pub fn parse(text: &str) -> Result<PyValue, JsonError> {
    Parser::new(text, false).document()
}

/// The first repeated object key of `text` in document order, at any depth, if there is
/// one; `Err` when `text` is not JSON that [`parse`] accepts. Keys compare as decoded, as
/// Python compares them.
///
/// This is the strict reading of the same grammar: Python keeps the last value
/// of a repeated key, while another reader of the same text may keep the first, so a
/// document that repeats one can mean one thing to the operator and another to the tool.
/// The API refuses such documents instead of choosing.
pub fn repeated_key(text: &str) -> Result<Option<RepeatedKey>, JsonError> {
    let mut parser = Parser::new(text, true);
    match parser.document() {
        Ok(_) => Ok(None),
        Err(e) if *e.kind() == JsonErrorKind::RepeatedKey => Ok(parser.repeat.take()),
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

#[cfg(test)]
mod tests;
