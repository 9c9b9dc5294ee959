//! Python's `str()`, `repr()` and `ascii()` of JSON values: `Objects/unicodeobject.c`'s
//! `unicode_repr` (and `ascii()`'s `backslashreplace`), `Objects/listobject.c`'s
//! `list_repr`, `Objects/dictobject.c`'s `dict_repr`, and `Objects/longobject.c`'s
//! limit on the decimal digits of an int; floats print as
//! [`float_repr`](crate::python::float_repr::float_repr) writes them.

use std::collections::HashMap;

use num_bigint::{BigInt, BigUint, Sign};

use super::FormatError;
use super::formatter::MEMO_MIN_BYTES;
use super::unicodectype::is_printable;
use crate::python::float_repr::float_repr;
use crate::python::json::MAX_INT_DIGITS;
use crate::python::value::PyValue;

/// Python's `str(value)`.
pub fn py_str(value: &PyValue) -> String {
    unbounded_text(value, Conversion::Str)
}

/// Python's `repr(value)`.
pub fn py_repr(value: &PyValue) -> String {
    unbounded_text(value, Conversion::Repr)
}

/// Python's `ascii(value)`: `repr` with every non-ASCII character escaped.
pub fn py_ascii(value: &PyValue) -> String {
    unbounded_text(value, Conversion::Ascii)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Conversion {
    Str,
    Repr,
    Ascii,
}

/// No int of more bits has `MAX_INT_DIGITS` (4300) decimal digits or fewer; checked
/// first so a huge int is refused without converting it. Python's limit applies to
/// int-to-text as much as text-to-int, so the parser's constant is ours too.
const MAX_INT_STR_BITS: u64 = 14_300;

fn unbounded_text(value: &PyValue, conversion: Conversion) -> String {
    let mut sink = Sink::new(usize::MAX);
    let mut writer = TextWriter {
        sink: &mut sink,
        ascii: conversion == Conversion::Ascii,
        // The fallback text must always be producible, so it shows every digit.
        limit_digits: false,
        quotes: None,
    };
    // Nothing can stop an unbounded writer that ignores the digit limit.
    let _ = writer.value(value, conversion);
    sink.text
}

/// The converted text, cut one character past `max_chars` so callers can tell it is
/// too long without it ever being built whole.
pub(super) fn bounded_text(
    value: &PyValue,
    conversion: Conversion,
    max_chars: usize,
    quotes: Option<&mut HashMap<(usize, usize), char>>,
) -> Result<String, FormatError> {
    let mut sink = Sink::new(max_chars.saturating_add(1));
    let mut writer = TextWriter {
        sink: &mut sink,
        ascii: conversion == Conversion::Ascii,
        limit_digits: true,
        quotes,
    };
    match writer.value(value, conversion) {
        Ok(()) | Err(Stop::Full) => Ok(sink.text),
        Err(Stop::Digits) => Err(FormatError::Value(
            "Exceeds the limit (4300 digits) for integer string conversion",
        )),
    }
}

/// Why writing a value stopped early.
enum Stop {
    Full,
    Digits,
}

impl From<Full> for Stop {
    fn from(_: Full) -> Self {
        Stop::Full
    }
}

/// Writes `str()`, `repr()` or `ascii()` of a value into a sink.
struct TextWriter<'s, 'q> {
    sink: &'s mut Sink,
    ascii: bool,
    /// Refuse ints past Python's digit limit, as a template field must.
    limit_digits: bool,
    /// Quote choice of long strings already scanned, when memoising is safe.
    quotes: Option<&'q mut HashMap<(usize, usize), char>>,
}

/// A container being written, with whether its next item is its first.
enum Open<'a> {
    List(std::slice::Iter<'a, PyValue>, bool),
    Dict(Box<dyn Iterator<Item = (&'a str, &'a PyValue)> + 'a>, bool),
}

impl TextWriter<'_, '_> {
    fn value(&mut self, value: &PyValue, conversion: Conversion) -> Result<(), Stop> {
        if let (Conversion::Str, PyValue::Str(s)) = (conversion, value) {
            return Ok(self.sink.push_str(s)?);
        }
        // An explicit stack rather than recursion: nesting depth comes from the input
        // and must not be able to overflow the thread's stack.
        let mut stack: Vec<Open<'_>> = Vec::new();
        self.open_or_scalar(value, &mut stack)?;
        while let Some(top) = stack.last_mut() {
            match top {
                Open::List(items, first) => match items.next() {
                    Some(item) => {
                        if !std::mem::replace(first, false) {
                            self.sink.push_str(", ")?;
                        }
                        self.open_or_scalar(item, &mut stack)?;
                    }
                    None => {
                        self.sink.push(']')?;
                        stack.pop();
                    }
                },
                Open::Dict(entries, first) => match entries.next() {
                    Some((key, item)) => {
                        if !std::mem::replace(first, false) {
                            self.sink.push_str(", ")?;
                        }
                        self.str_repr(key)?;
                        self.sink.push_str(": ")?;
                        self.open_or_scalar(item, &mut stack)?;
                    }
                    None => {
                        self.sink.push('}')?;
                        stack.pop();
                    }
                },
            }
        }
        Ok(())
    }

    fn open_or_scalar<'a>(
        &mut self,
        value: &'a PyValue,
        stack: &mut Vec<Open<'a>>,
    ) -> Result<(), Stop> {
        match value {
            PyValue::None => self.sink.push_str("None")?,
            PyValue::Bool(true) => self.sink.push_str("True")?,
            PyValue::Bool(false) => self.sink.push_str("False")?,
            PyValue::Int(i) => {
                let digits = if self.limit_digits {
                    decimal_digits(i).ok_or(Stop::Digits)?
                } else {
                    i.to_string()
                };
                self.sink.push_str(&digits)?;
            }
            PyValue::Float(f) => self.sink.push_str(&float_repr(*f))?,
            PyValue::Str(s) => self.str_repr(s)?,
            PyValue::List(items) => {
                self.sink.push('[')?;
                stack.push(Open::List(items.iter(), true));
            }
            PyValue::Dict(dict) => {
                self.sink.push('{')?;
                stack.push(Open::Dict(Box::new(dict.iter()), true));
            }
        }
        Ok(())
    }

    /// `unicode_repr`, escaping every non-ASCII character too when writing `ascii()`
    /// (which is `repr` followed by the `backslashreplace` error handler).
    fn str_repr(&mut self, s: &str) -> Result<(), Full> {
        let pick = || {
            if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            }
        };
        let quote = match self.quotes.as_deref_mut() {
            Some(memo) if s.len() >= MEMO_MIN_BYTES => *memo
                .entry((s.as_ptr() as usize, s.len()))
                .or_insert_with(pick),
            _ => pick(),
        };
        self.sink.push(quote)?;
        for c in s.chars() {
            match c {
                _ if c == quote || c == '\\' => {
                    self.sink.push('\\')?;
                    self.sink.push(c)?;
                }
                '\t' => self.sink.push_str("\\t")?,
                '\n' => self.sink.push_str("\\n")?,
                '\r' => self.sink.push_str("\\r")?,
                ' '..='~' => self.sink.push(c)?,
                _ if !c.is_ascii() && !self.ascii && is_printable(c) => self.sink.push(c)?,
                _ => self.sink.push_escape(c)?,
            }
        }
        self.sink.push(quote)
    }
}

/// Decimal text of an int, or `None` past Python's digit limit.
fn decimal_digits(value: &BigInt) -> Option<String> {
    let digits = magnitude_digits(value.magnitude())?;
    Some(match value.sign() {
        Sign::Minus => format!("-{digits}"),
        _ => digits,
    })
}

/// Decimal digits of a magnitude, or `None` past Python's digit limit (the sign does
/// not count towards it).
pub(super) fn magnitude_digits(magnitude: &BigUint) -> Option<String> {
    if magnitude.bits() > MAX_INT_STR_BITS {
        return None;
    }
    let digits = magnitude.to_str_radix(10);
    (digits.len() <= MAX_INT_DIGITS).then_some(digits)
}

/// Text up to a bound in characters; pushing past it fails and keeps the prefix.
pub(super) struct Sink {
    pub(super) text: String,
    chars: usize,
    cap: usize,
}

/// The sink reached its bound.
pub(super) struct Full;

impl Sink {
    pub(super) fn new(cap: usize) -> Self {
        Sink {
            text: String::new(),
            chars: 0,
            cap,
        }
    }

    fn push(&mut self, c: char) -> Result<(), Full> {
        if self.chars >= self.cap {
            return Err(Full);
        }
        self.text.push(c);
        self.chars += 1;
        Ok(())
    }

    pub(super) fn push_str(&mut self, s: &str) -> Result<(), Full> {
        // A string's byte length bounds its character count.
        if s.len() <= self.cap - self.chars {
            self.text.push_str(s);
            self.chars += s.chars().count();
            return Ok(());
        }
        s.chars().try_for_each(|c| self.push(c))
    }

    pub(super) fn push_chars(&mut self, chars: &[char]) -> Result<(), Full> {
        chars.iter().try_for_each(|&c| self.push(c))
    }

    /// `\xNN`, `\uNNNN` or `\UNNNNNNNN`, the shortest that holds the code point.
    fn push_escape(&mut self, c: char) -> Result<(), Full> {
        let code = u32::from(c);
        let (tag, width) = match code {
            0..=0xff => ('x', 2),
            0x100..=0xffff => ('u', 4),
            _ => ('U', 8),
        };
        self.push('\\')?;
        self.push(tag)?;
        for shift in (0..width).rev() {
            let nibble = (code >> (4 * shift)) & 0xf;
            self.push(char::from_digit(nibble, 16).unwrap_or('0'))?;
        }
        Ok(())
    }
}
