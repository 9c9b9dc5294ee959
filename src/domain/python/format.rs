//! Python's `str.format`, `format()`, `str()`, `repr()` and `ascii()` over JSON-decoded
//! values.
//!
//! AI-Parrot renders a confirmation briefing with
//! `template.format(tool=..., params=..., **params)`; the operator must read exactly the
//! text Python would have produced, so this module is a port of CPython 3.11
//! (`Objects/stringlib/unicode_format.h` for templates, `Python/formatter_unicode.c`
//! for format specs, `Python/pystrtod.c` for floats), not an imitation of it. The
//! briefing tests check it against python3.
//!
//! Deliberate differences, each of which makes rendering fail where Python would not:
//! - attribute access (`{x.real}`) is never evaluated: a template must not reach into
//!   Python object internals, and JSON values have no attributes worth showing;
//! - no text, a nested format spec included, may exceed the caller's character bound
//!   (Python would accept a nested spec padded out with thousands of zeros);
//! - `{x:c}` naming a lone surrogate fails, as a Rust string cannot hold one.
//!
//! Work is bounded by the input, since both the template and the values may be
//! hostile: widths and precisions are checked against the bound before anything is
//! allocated, conversions stop writing at the bound, and a per-render memo keeps many
//! fields over one large value from rescanning it.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;

use num_bigint::{BigInt, BigUint, Sign};

use crate::domain::python::float_repr::float_repr;
use crate::domain::python::json::MAX_INT_DIGITS;
use crate::domain::python::value::{PyDict, PyValue};

/// Why a value or template could not be formatted. Reasons name the Python exception
/// and the rule, never a parameter value, so they are safe to log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Malformed template or format spec, or a value Python refuses to show.
    #[error("ValueError: {0}")]
    Value(&'static str),
    /// A field names a parameter, or a dict key, that does not exist.
    #[error("KeyError: a field names a missing key")]
    Key,
    /// An index past the end of a list or string, or a positional field (`{0}`, `{}`):
    /// the briefing passes keyword arguments only.
    #[error("IndexError: {0}")]
    Index(&'static str),
    /// A spec or index that does not apply to the value's type.
    #[error("TypeError: {0}")]
    Type(&'static str),
    /// An integer too large for the requested presentation.
    #[error("OverflowError: {0}")]
    Overflow(&'static str),
    /// `{x.attr}`: attributes are never evaluated.
    #[error("attribute access in a field is not supported")]
    Attribute,
    /// `{x:c}` naming a code point a Rust string cannot hold (a lone surrogate).
    #[error("the character is a lone surrogate")]
    Surrogate,
    /// The text would be longer than the caller's bound, in characters.
    #[error("the text would exceed {0} characters")]
    TooLong(usize),
}

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

/// Python's `format(value, spec)`, refusing any result longer than `max_chars`
/// characters before building it.
pub fn format_value(value: &PyValue, spec: &str, max_chars: usize) -> Result<String, FormatError> {
    let spec: Vec<char> = spec.chars().collect();
    format_typed(value, &spec, max_chars, None)
}

/// Python's `template.format(**kwargs)`, where `lookup` answers for the keyword
/// arguments. The whole result is refused, rather than cut, when it would exceed
/// `max_chars` characters: a briefing is shown whole or not at all.
pub fn format_template<'v>(
    template: &str,
    lookup: impl Fn(&str) -> Option<&'v PyValue>,
    max_chars: usize,
) -> Result<String, FormatError> {
    let chars: Vec<char> = template.chars().collect();
    let mut renderer = Renderer {
        lookup,
        max_chars,
        memo: Memo::default(),
    };
    // PEP 3101 allows one level of nesting: `{x:{w}}` works, `{x:{w:{v}}}` does not.
    renderer.build(&chars, 2)
}

// ---------------------------------------------------------------------------------
// Templates (unicode_format.h)
// ---------------------------------------------------------------------------------

/// One rendering of one template: the caller's keyword arguments, the bound, and what
/// has been learnt about the values so far.
struct Renderer<'v, L> {
    lookup: L,
    max_chars: usize,
    memo: Memo<'v>,
}

/// What one replacement field asks for, as `parse_field` splits it.
struct Field<'t> {
    name: &'t [char],
    conversion: Option<char>,
    spec: &'t [char],
    /// The spec holds replacement fields of its own, to render before it is parsed.
    spec_has_fields: bool,
}

impl<'v, L: Fn(&str) -> Option<&'v PyValue>> Renderer<'v, L> {
    /// `build_string`: literal text and fields, left to right; the first error wins.
    fn build(&mut self, input: &[char], depth: u8) -> Result<String, FormatError> {
        if depth == 0 {
            return Err(FormatError::Value("Max string recursion exceeded"));
        }
        let max_chars = self.max_chars;
        let mut out = Sink::new(max_chars);
        let too_long = |_: Full| FormatError::TooLong(max_chars);
        let mut pos = 0;
        while pos < input.len() {
            let start = pos;
            let mut brace = None;
            while let Some(&c) = input.get(pos) {
                pos += 1;
                if c == '{' || c == '}' {
                    brace = Some(c);
                    break;
                }
            }
            let mut literal_end = pos;
            let mut field_follows = false;
            if let Some(c) = brace {
                match input.get(pos) {
                    // A doubled brace is one literal brace.
                    Some(&next) if next == c => pos += 1,
                    _ if c == '}' => {
                        return Err(FormatError::Value(
                            "Single '}' encountered in format string",
                        ));
                    }
                    None => {
                        return Err(FormatError::Value(
                            "Single '{' encountered in format string",
                        ));
                    }
                    Some(_) => {
                        literal_end -= 1;
                        field_follows = true;
                    }
                }
            }
            out.push_chars(&input[start..literal_end])
                .map_err(too_long)?;
            if field_follows {
                let field = parse_field(input, &mut pos)?;
                let text = self.render_field(&field, depth)?;
                out.push_str(&text).map_err(too_long)?;
            }
        }
        Ok(out.text)
    }

    /// `output_markup`: look the value up, convert it, expand the spec, format.
    fn render_field(&mut self, field: &Field<'_>, depth: u8) -> Result<String, FormatError> {
        let value = self.resolve(field.name)?;
        let converted = match field.conversion {
            None => None,
            Some(letter) => {
                let conversion = match letter {
                    's' => Conversion::Str,
                    'r' => Conversion::Repr,
                    'a' => Conversion::Ascii,
                    _ => return Err(FormatError::Value("Unknown conversion specifier")),
                };
                // Only values borrowed for the whole render may be memoised: an owned
                // value's address can be reused by the next one.
                let quotes = match value {
                    Cow::Borrowed(_) => Some(&mut self.memo.quotes),
                    Cow::Owned(_) => None,
                };
                Some(bounded_text(&value, conversion, self.max_chars, quotes)?)
            }
        };
        let expanded;
        let spec: &[char] = if field.spec_has_fields {
            expanded = self
                .build(field.spec, depth - 1)?
                .chars()
                .collect::<Vec<char>>();
            &expanded
        } else {
            field.spec
        };
        match converted {
            Some(text) => format_text(&text, spec, self.max_chars),
            None => {
                let memo = match value {
                    Cow::Borrowed(_) => Some(&mut self.memo),
                    Cow::Owned(_) => None,
                };
                format_typed(&value, spec, self.max_chars, memo)
            }
        }
    }

    /// `get_field_object`: a keyword argument, then `[index]` lookups.
    fn resolve(&mut self, name: &[char]) -> Result<Cow<'v, PyValue>, FormatError> {
        let first_end = name
            .iter()
            .position(|&c| c == '[' || c == '.')
            .unwrap_or(name.len());
        let first = &name[..first_end];
        if first.is_empty() || field_integer(first)?.is_some() {
            return Err(FormatError::Index(
                "positional fields have no arguments; only keyword arguments are passed",
            ));
        }
        let key: String = first.iter().collect();
        let mut value = Cow::Borrowed((self.lookup)(&key).ok_or(FormatError::Key)?);
        let mut pos = first_end;
        while let Some(&c) = name.get(pos) {
            pos += 1;
            match c {
                '.' => return Err(FormatError::Attribute),
                '[' => {
                    let rest = &name[pos..];
                    let close = rest
                        .iter()
                        .position(|&c| c == ']')
                        .ok_or(FormatError::Value("Missing ']' in format string"))?;
                    let item = &rest[..close];
                    pos += close + 1;
                    let index = field_integer(item)?;
                    if item.is_empty() {
                        return Err(FormatError::Value("Empty attribute in format string"));
                    }
                    value = match value {
                        Cow::Borrowed(v) => get_item(v, item, index, Some(&mut self.memo))?,
                        Cow::Owned(v) => Cow::Owned(get_item(&v, item, index, None)?.into_owned()),
                    };
                }
                _ => {
                    return Err(FormatError::Value(
                        "Only '.' or '[' may follow ']' in format field specifier",
                    ));
                }
            }
        }
        Ok(value)
    }
}

/// `parse_field`, starting just after the opening brace and leaving `pos` just after
/// the closing one. Brackets in the name may hold any character, braces included.
fn parse_field<'t>(input: &'t [char], pos: &mut usize) -> Result<Field<'t>, FormatError> {
    let name_start = *pos;
    let mut terminator = None;
    while let Some(&c) = input.get(*pos) {
        *pos += 1;
        match c {
            '{' => return Err(FormatError::Value("unexpected '{' in field name")),
            '[' => {
                while input.get(*pos).is_some_and(|&c| c != ']') {
                    *pos += 1;
                }
            }
            '}' | ':' | '!' => {
                terminator = Some(c);
                break;
            }
            _ => {}
        }
    }
    let Some(terminator) = terminator else {
        return Err(FormatError::Value("expected '}' before end of string"));
    };
    let mut field = Field {
        name: &input[name_start..*pos - 1],
        conversion: None,
        spec: &[],
        spec_has_fields: false,
    };
    if terminator == '}' {
        return Ok(field);
    }
    if terminator == '!' {
        let Some(&letter) = input.get(*pos) else {
            return Err(FormatError::Value(
                "end of string while looking for conversion specifier",
            ));
        };
        *pos += 1;
        field.conversion = Some(letter);
        if let Some(&c) = input.get(*pos) {
            *pos += 1;
            if c == '}' {
                return Ok(field);
            }
            if c != ':' {
                return Err(FormatError::Value(
                    "expected ':' after conversion specifier",
                ));
            }
        }
    }
    let spec_start = *pos;
    let mut depth = 1usize;
    while let Some(&c) = input.get(*pos) {
        *pos += 1;
        match c {
            '{' => {
                field.spec_has_fields = true;
                depth += 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    field.spec = &input[spec_start..*pos - 1];
                    return Ok(field);
                }
            }
            _ => {}
        }
    }
    Err(FormatError::Value("unmatched '{' in format spec"))
}

/// `obj[item]` with Python's rules for JSON values. `index` is the item read as an
/// integer when it is all decimal digits (as `str.format` does); otherwise it is a
/// string key.
fn get_item<'a>(
    value: &'a PyValue,
    item: &[char],
    index: Option<usize>,
    memo: Option<&mut Memo<'a>>,
) -> Result<Cow<'a, PyValue>, FormatError> {
    match (value, index) {
        (PyValue::List(items), Some(i)) => items
            .get(i)
            .map(Cow::Borrowed)
            .ok_or(FormatError::Index("list index out of range")),
        (PyValue::Str(s), Some(i)) => {
            let c = match memo {
                Some(memo) if s.len() >= MEMO_MIN_BYTES => memo.nth_char(s, i),
                _ => s.chars().nth(i),
            };
            c.map(|c| Cow::Owned(PyValue::Str(c.to_string())))
                .ok_or(FormatError::Index("string index out of range"))
        }
        (PyValue::List(_) | PyValue::Str(_), None) => Err(FormatError::Type(
            "sequence indices must be integers, not str",
        )),
        // JSON object keys are strings, so an integer index never matches.
        (PyValue::Dict(_), Some(_)) => Err(FormatError::Key),
        (PyValue::Dict(dict), None) => {
            let key: String = item.iter().collect();
            let found = match memo {
                Some(memo) if dict.len() >= MEMO_MIN_ENTRIES => memo.dict_get(dict, &key),
                _ => dict.get(&key),
            };
            found.map(Cow::Borrowed).ok_or(FormatError::Key)
        }
        _ => Err(FormatError::Type("object is not subscriptable")),
    }
}

/// `get_integer` for field names: `Ok(None)` unless every character is a decimal
/// digit (any script's, as Python accepts `{x[٣]}`).
fn field_integer(chars: &[char]) -> Result<Option<usize>, FormatError> {
    if chars.is_empty() {
        return Ok(None);
    }
    let mut value: i64 = 0;
    for &c in chars {
        let Some(digit) = decimal_value(c) else {
            return Ok(None);
        };
        value = accumulate_digit(value, digit)?;
    }
    // Non-negative by construction; an index beyond usize is out of range anyway.
    Ok(Some(usize::try_from(value).unwrap_or(usize::MAX)))
}

/// One more decimal digit of a `Py_ssize_t`, failing as Python does past its maximum.
fn accumulate_digit(value: i64, digit: u32) -> Result<i64, FormatError> {
    value
        .checked_mul(10)
        .and_then(|v| v.checked_add(i64::from(digit)))
        .ok_or(FormatError::Value(
            "Too many decimal digits in format string",
        ))
}

/// Strings and dicts at least this large get memoised lookups; smaller ones are
/// cheaper to scan than to hash.
const MEMO_MIN_BYTES: usize = 256;
const MEMO_MIN_ENTRIES: usize = 16;
/// Characters between two remembered byte offsets when indexing a long string.
const CHAR_STRIDE: usize = 64;

/// Facts about large borrowed values, so that a template repeating a field over one
/// of them costs one scan rather than one per field. Keys are addresses of values
/// borrowed for the whole render, so they cannot be reused while the memo lives.
#[derive(Default)]
struct Memo<'v> {
    quotes: HashMap<(usize, usize), char>,
    char_offsets: HashMap<(usize, usize), Vec<usize>>,
    dicts: HashMap<usize, HashMap<&'v str, &'v PyValue>>,
}

impl<'v> Memo<'v> {
    fn nth_char(&mut self, s: &'v str, n: usize) -> Option<char> {
        let offsets = self
            .char_offsets
            .entry((s.as_ptr() as usize, s.len()))
            .or_insert_with(|| {
                s.char_indices()
                    .step_by(CHAR_STRIDE)
                    .map(|(offset, _)| offset)
                    .collect()
            });
        let start = *offsets.get(n / CHAR_STRIDE)?;
        s.get(start..)?.chars().nth(n % CHAR_STRIDE)
    }

    fn dict_get(&mut self, dict: &'v PyDict, key: &str) -> Option<&'v PyValue> {
        self.dicts
            .entry(dict as *const PyDict as usize)
            .or_insert_with(|| dict.iter().collect())
            .get(key)
            .copied()
    }
}

// ---------------------------------------------------------------------------------
// str(), repr(), ascii()
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conversion {
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
fn bounded_text(
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
fn magnitude_digits(magnitude: &BigUint) -> Option<String> {
    if magnitude.bits() > MAX_INT_STR_BITS {
        return None;
    }
    let digits = magnitude.to_str_radix(10);
    (digits.len() <= MAX_INT_DIGITS).then_some(digits)
}

/// Text up to a bound in characters; pushing past it fails and keeps the prefix.
struct Sink {
    text: String,
    chars: usize,
    cap: usize,
}

/// The sink reached its bound.
struct Full;

impl Sink {
    fn new(cap: usize) -> Self {
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

    fn push_str(&mut self, s: &str) -> Result<(), Full> {
        // A string's byte length bounds its character count.
        if s.len() <= self.cap - self.chars {
            self.text.push_str(s);
            self.chars += s.chars().count();
            return Ok(());
        }
        s.chars().try_for_each(|c| self.push(c))
    }

    fn push_chars(&mut self, chars: &[char]) -> Result<(), Full> {
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

/// `str.isprintable` for one character. Exact for Unicode 14 (Python 3.11) in the
/// categories that matter here: control (Cc), format (Cf, e.g. U+200B, U+200E,
/// U+FEFF), surrogate (Cs), private use (Co) and separators (Zs other than the ASCII
/// space, Zl, Zp) are not printable. Unassigned code points (Cn) are approximated:
/// only runs of at least 16 are listed, so an isolated unassigned code point, or one
/// assigned after Unicode 14, is shown as printable.
fn is_printable(c: char) -> bool {
    let code = u32::from(c);
    if code < 0x7f {
        return code >= 0x20;
    }
    NOT_PRINTABLE
        .binary_search_by(|&(low, high)| {
            if high < code {
                Ordering::Less
            } else if low > code {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })
        .is_err()
}

/// Inclusive ranges of code points `is_printable` refuses, sorted, generated from
/// Python 3.11's `unicodedata` (see `is_printable` for what is left out).
#[rustfmt::skip]
const NOT_PRINTABLE: &[(u32, u32)] = &[
    (0x0, 0x1F), (0x7F, 0xA0), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
    (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0xE5C, 0xE80), (0xEE0, 0xEFF),
    (0xFDB, 0xFFF), (0x1680, 0x1680), (0x180E, 0x180E), (0x1ACF, 0x1AFF), (0x2000, 0x200F),
    (0x2028, 0x202F), (0x205F, 0x2064), (0x2066, 0x206F), (0x2427, 0x243F), (0x244B, 0x245F),
    (0x2E5E, 0x2E7F), (0x2FD6, 0x2FEF), (0x3000, 0x3000), (0xA62C, 0xA63F), (0xA7DA, 0xA7F1),
    (0xAAC3, 0xAADA), (0xD800, 0xF8FF), (0xFADA, 0xFAFF), (0xFBC3, 0xFBD2), (0xFDD0, 0xFDEF),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x1005E, 0x1007F), (0x101A1, 0x101CF),
    (0x101FE, 0x1027F), (0x103D6, 0x103FF), (0x105BD, 0x105FF), (0x10768, 0x1077F),
    (0x107BB, 0x107FF), (0x108B0, 0x108DF), (0x10940, 0x1097F), (0x10AA0, 0x10ABF),
    (0x10BB0, 0x10BFF), (0x10C49, 0x10C7F), (0x10D3A, 0x10E5F), (0x10EB2, 0x10EFF),
    (0x10F5A, 0x10F6F), (0x10F8A, 0x10FAF), (0x10FCC, 0x10FDF), (0x110BD, 0x110BD),
    (0x110CD, 0x110CD), (0x1123F, 0x1127F), (0x11375, 0x113FF), (0x11462, 0x1147F),
    (0x114DA, 0x1157F), (0x115DE, 0x115FF), (0x1166D, 0x1167F), (0x116CA, 0x116FF),
    (0x11747, 0x117FF), (0x1183C, 0x1189F), (0x1195A, 0x1199F), (0x119E5, 0x119FF),
    (0x11AF9, 0x11BFF), (0x11CB7, 0x11CFF), (0x11DAA, 0x11EDF), (0x11EF9, 0x11FAF),
    (0x1239A, 0x123FF), (0x12544, 0x12F8F), (0x13430, 0x143FF), (0x14647, 0x167FF),
    (0x16B90, 0x16E3F), (0x16E9B, 0x16EFF), (0x16FA0, 0x16FDF), (0x18CD6, 0x18CFF),
    (0x18D09, 0x1AFEF), (0x1B123, 0x1B14F), (0x1B153, 0x1B163), (0x1B2FC, 0x1BBFF),
    (0x1BCA0, 0x1CEFF), (0x1CFC4, 0x1CFFF), (0x1D173, 0x1D17A), (0x1D1EB, 0x1D1FF),
    (0x1D246, 0x1D2DF), (0x1D379, 0x1D3FF), (0x1DAB0, 0x1DEFF), (0x1DF1F, 0x1DFFF),
    (0x1E02B, 0x1E0FF), (0x1E150, 0x1E28F), (0x1E2AF, 0x1E2BF), (0x1E300, 0x1E7DF),
    (0x1E8D7, 0x1E8FF), (0x1E960, 0x1EC70), (0x1ECB5, 0x1ED00), (0x1ED3E, 0x1EDFF),
    (0x1EEBC, 0x1EEEF), (0x1EEF2, 0x1EFFF), (0x1F1AE, 0x1F1E5), (0x1F266, 0x1F2FF),
    (0x1F8B2, 0x1F8FF), (0x1FBCB, 0x1FBEF), (0x1FBFA, 0x1FFFF), (0x2A6E0, 0x2A6FF),
    (0x2EBE1, 0x2F7FF), (0x2FA1E, 0x2FFFF), (0x3134B, 0xE00FF), (0xE01F0, 0xFFFFD),
    (0x100000, 0x10FFFD),
];

/// The value of a decimal digit of any script (`Py_UNICODE_TODECIMAL`), which
/// Python accepts in field indexes, widths and precisions.
fn decimal_value(c: char) -> Option<u32> {
    if let Some(d) = c.to_digit(10) {
        return Some(d);
    }
    let code = u32::from(c);
    let zero = DIGIT_ZEROS.get(DIGIT_ZEROS.partition_point(|&z| z <= code).checked_sub(1)?)?;
    let value = code - zero;
    (value < 10).then_some(value)
}

/// The digit zero of every run of ten decimal digits (category Nd) in Unicode 14.
#[rustfmt::skip]
const DIGIT_ZEROS: &[u32] = &[
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0,
    0xFF10, 0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0,
    0x11650, 0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0,
    0x16B50, 0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

// ---------------------------------------------------------------------------------
// Format specs (formatter_unicode.c)
// ---------------------------------------------------------------------------------

/// `format(value, spec)` dispatched on the value's Python type.
fn format_typed(
    value: &PyValue,
    spec: &[char],
    max_chars: usize,
    memo: Option<&mut Memo<'_>>,
) -> Result<String, FormatError> {
    if spec.is_empty() {
        // Every type formats itself with an empty spec as str() does.
        return match value {
            PyValue::Str(s) => within(s, max_chars),
            _ => {
                let text = bounded_text(
                    value,
                    Conversion::Str,
                    max_chars,
                    memo.map(|m| &mut m.quotes),
                )?;
                within(&text, max_chars)
            }
        };
    }
    match value {
        PyValue::Str(s) => format_text(s, spec, max_chars),
        PyValue::Int(i) => format_int(i, &parse_spec(spec, Some('d'), '>', max_chars)?, max_chars),
        // bool is an int subclass: only the empty spec prints True/False.
        PyValue::Bool(b) => format_int(
            &BigInt::from(u8::from(*b)),
            &parse_spec(spec, Some('d'), '>', max_chars)?,
            max_chars,
        ),
        PyValue::Float(f) => format_float(*f, &parse_spec(spec, None, '>', max_chars)?, max_chars),
        PyValue::None | PyValue::List(_) | PyValue::Dict(_) => Err(FormatError::Type(
            "unsupported format string passed to object.__format__",
        )),
    }
}

/// The text itself, unless it has more than `max_chars` characters.
fn within(text: &str, max_chars: usize) -> Result<String, FormatError> {
    // Bytes bound characters, so most texts are accepted without counting.
    if text.len() > max_chars && text.chars().nth(max_chars).is_some() {
        return Err(FormatError::TooLong(max_chars));
    }
    Ok(text.to_owned())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grouping {
    None,
    Comma,
    Underscore,
    /// `_` with `b`, `o`, `x`, `X`: every four digits.
    UnderscoreFour,
}

/// `InternalFormatSpec`: `[[fill]align][sign][z][#][0][width][grouping][.precision][type]`.
#[derive(Debug, Clone, Copy)]
struct Spec {
    fill: char,
    align: char,
    sign: Option<char>,
    no_neg_0: bool,
    alternate: bool,
    width: Option<usize>,
    grouping: Grouping,
    precision: Option<i64>,
    /// `None` is Python's `'\0'`: no presentation type given for a float.
    ty: Option<char>,
}

/// `parse_internal_render_format_spec`. A width over `max_chars` is refused here:
/// whatever the value, the result would be at least that long.
fn parse_spec(
    spec: &[char],
    default_type: Option<char>,
    default_align: char,
    max_chars: usize,
) -> Result<Spec, FormatError> {
    let mut parsed = Spec {
        fill: ' ',
        align: default_align,
        sign: None,
        no_neg_0: false,
        alternate: false,
        width: None,
        grouping: Grouping::None,
        precision: None,
        ty: default_type,
    };
    let mut pos = 0;
    let mut fill_specified = false;
    let mut align_specified = false;
    match spec {
        [fill, align @ ('<' | '>' | '=' | '^'), ..] => {
            parsed.fill = *fill;
            parsed.align = *align;
            fill_specified = true;
            align_specified = true;
            pos = 2;
        }
        [align @ ('<' | '>' | '=' | '^'), ..] => {
            parsed.align = *align;
            align_specified = true;
            pos = 1;
        }
        _ => {}
    }
    if let Some(&sign @ ('+' | '-' | ' ')) = spec.get(pos) {
        parsed.sign = Some(sign);
        pos += 1;
    }
    if spec.get(pos) == Some(&'z') {
        parsed.no_neg_0 = true;
        pos += 1;
    }
    if spec.get(pos) == Some(&'#') {
        parsed.alternate = true;
        pos += 1;
    }
    if !fill_specified && spec.get(pos) == Some(&'0') {
        parsed.fill = '0';
        if !align_specified && default_align == '>' {
            parsed.align = '=';
        }
        pos += 1;
    }
    if let Some(width) = spec_integer(spec, &mut pos)? {
        let width = usize::try_from(width).unwrap_or(usize::MAX);
        if width > max_chars {
            return Err(FormatError::TooLong(max_chars));
        }
        parsed.width = Some(width);
    }
    if spec.get(pos) == Some(&',') {
        parsed.grouping = Grouping::Comma;
        pos += 1;
    }
    if spec.get(pos) == Some(&'_') {
        if parsed.grouping != Grouping::None {
            return Err(FormatError::Value("Cannot specify both ',' and '_'."));
        }
        parsed.grouping = Grouping::Underscore;
        pos += 1;
    }
    if spec.get(pos) == Some(&',') && parsed.grouping == Grouping::Underscore {
        return Err(FormatError::Value("Cannot specify both ',' and '_'."));
    }
    if spec.get(pos) == Some(&'.') {
        pos += 1;
        parsed.precision = Some(
            spec_integer(spec, &mut pos)?
                .ok_or(FormatError::Value("Format specifier missing precision"))?,
        );
    }
    match &spec[pos.min(spec.len())..] {
        [] => {}
        [ty] => parsed.ty = Some(*ty),
        _ => return Err(FormatError::Value("Invalid format specifier")),
    }
    if parsed.grouping != Grouping::None {
        match parsed.ty {
            None | Some('d' | 'e' | 'f' | 'g' | 'E' | 'G' | '%' | 'F') => {}
            Some('b' | 'o' | 'x' | 'X') if parsed.grouping == Grouping::Underscore => {
                parsed.grouping = Grouping::UnderscoreFour;
            }
            Some(_) => {
                return Err(FormatError::Value(
                    "Cannot specify a thousands separator with this format code",
                ));
            }
        }
    }
    Ok(parsed)
}

/// `get_integer` for specs: the run of decimal digits at `pos`, `None` when empty.
fn spec_integer(spec: &[char], pos: &mut usize) -> Result<Option<i64>, FormatError> {
    let mut value = None;
    while let Some(digit) = spec.get(*pos).copied().and_then(decimal_value) {
        value = Some(accumulate_digit(value.unwrap_or(0), digit)?);
        *pos += 1;
    }
    Ok(value)
}

/// `format_string_internal`: a string, cut to the precision, then padded.
fn format_text(text: &str, spec: &[char], max_chars: usize) -> Result<String, FormatError> {
    if spec.is_empty() {
        return within(text, max_chars);
    }
    let spec = parse_spec(spec, Some('s'), '<', max_chars)?;
    refuse(
        spec.sign.is_some(),
        "Sign not allowed in string format specifier",
    )?;
    refuse(
        spec.no_neg_0,
        "Negative zero coercion (z) not allowed in format specifier",
    )?;
    refuse(
        spec.alternate,
        "Alternate form (#) not allowed in string format specifier",
    )?;
    refuse(
        spec.align == '=',
        "'=' alignment not allowed in string format specifier",
    )?;
    refuse(
        spec.ty != Some('s'),
        "Unknown format code for object of type 'str'",
    )?;
    let keep = match spec.precision {
        Some(p) => usize::try_from(p)
            .unwrap_or(usize::MAX)
            .min(max_chars.saturating_add(1)),
        None => max_chars.saturating_add(1),
    };
    let (end, count) = match text.char_indices().nth(keep) {
        Some((end, _)) => (end, keep),
        None => (text.len(), text.chars().count()),
    };
    if count > max_chars {
        return Err(FormatError::TooLong(max_chars));
    }
    pad(&text[..end], count, &spec, max_chars)
}

/// Python's refusal of a spec feature the type does not support.
fn refuse(refused: bool, reason: &'static str) -> Result<(), FormatError> {
    if refused {
        return Err(FormatError::Value(reason));
    }
    Ok(())
}

/// `calc_padding` and the fill around a string body of `count` characters.
fn pad(body: &str, count: usize, spec: &Spec, max_chars: usize) -> Result<String, FormatError> {
    let total = spec.width.map_or(count, |w| w.max(count));
    if total > max_chars {
        return Err(FormatError::TooLong(max_chars));
    }
    let left = match spec.align {
        '>' => total - count,
        '^' => (total - count) / 2,
        _ => 0,
    };
    let right = total - count - left;
    let mut out = String::with_capacity(body.len() + (left + right) * spec.fill.len_utf8());
    out.extend(std::iter::repeat_n(spec.fill, left));
    out.push_str(body);
    out.extend(std::iter::repeat_n(spec.fill, right));
    Ok(out)
}

/// `format_long_internal` and the float presentations an int converts for.
fn format_int(value: &BigInt, spec: &Spec, max_chars: usize) -> Result<String, FormatError> {
    let ty = spec.ty.unwrap_or('d');
    let (base, prefix) = match ty {
        'b' => (2, "0b"),
        'o' => (8, "0o"),
        'x' => (16, "0x"),
        'X' => (16, "0X"),
        'd' | 'n' | 'c' => (10, ""),
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' | '%' => {
            return format_float(int_to_float(value)?, spec, max_chars);
        }
        _ => {
            return Err(FormatError::Value(
                "Unknown format code for object of type 'int'",
            ));
        }
    };
    refuse(
        spec.precision.is_some(),
        "Precision not allowed in integer format specifier",
    )?;
    refuse(
        spec.no_neg_0,
        "Negative zero coercion (z) not allowed in integer format specifier",
    )?;
    if ty == 'c' {
        refuse(
            spec.sign.is_some(),
            "Sign not allowed with integer format specifier 'c'",
        )?;
        refuse(
            spec.alternate,
            "Alternate form (#) not allowed with integer format specifier 'c'",
        )?;
        let code = u32::try_from(value)
            .ok()
            .filter(|&c| c <= 0x10ffff)
            .ok_or(FormatError::Overflow("%c arg not in range(0x110000)"))?;
        let c = char::from_u32(code).ok_or(FormatError::Surrogate)?;
        let mut remainder = [0; 4];
        let number = Number {
            prefix: "",
            negative: false,
            digits: "",
            decimal: false,
            remainder: c.encode_utf8(&mut remainder),
        };
        return assemble_number(&number, spec, None, max_chars);
    }
    let digits = int_digits(value.magnitude(), base, max_chars)?;
    let digits = if ty == 'X' {
        digits.to_ascii_uppercase()
    } else {
        digits
    };
    let number = Number {
        prefix: if spec.alternate { prefix } else { "" },
        negative: value.sign() == Sign::Minus,
        digits: &digits,
        decimal: false,
        remainder: "",
    };
    // 'n' groups as the current locale does, and Python never leaves the C locale.
    let grouping = if ty == 'n' {
        Grouping::None
    } else {
        spec.grouping
    };
    assemble_number(&number, spec, separator(grouping), max_chars)
}

/// The digits of a magnitude in `base`, refused before conversion when there would be
/// more than `max_chars` of them, or more than Python will show in decimal.
fn int_digits(magnitude: &BigUint, base: u32, max_chars: usize) -> Result<String, FormatError> {
    let bits = magnitude.bits();
    if base == 10 {
        return magnitude_digits(magnitude).ok_or(FormatError::Value(
            "Exceeds the limit (4300 digits) for integer string conversion",
        ));
    }
    let bits_per_digit = u64::from(base.trailing_zeros());
    let count = bits.div_ceil(bits_per_digit).max(1);
    if count > u64::try_from(max_chars).unwrap_or(u64::MAX) {
        return Err(FormatError::TooLong(max_chars));
    }
    Ok(magnitude.to_str_radix(base))
}

/// `PyNumber_Float` on an int: correctly rounded, or OverflowError.
fn int_to_float(value: &BigInt) -> Result<f64, FormatError> {
    let overflow = FormatError::Overflow("int too large to convert to float");
    // 2**1024 is the first int that rounds to infinity; skip the text for larger ones.
    if value.bits() > 1100 {
        return Err(overflow);
    }
    // Rust's float parsing is correctly rounded (ties to even), as Python's is.
    match value.to_string().parse::<f64>() {
        Ok(f) if f.is_finite() => Ok(f),
        _ => Err(overflow),
    }
}

fn separator(grouping: Grouping) -> Option<(char, i64)> {
    match grouping {
        Grouping::None => None,
        Grouping::Comma => Some((',', 3)),
        Grouping::Underscore => Some(('_', 3)),
        Grouping::UnderscoreFour => Some(('_', 4)),
    }
}

/// `format_float_internal`.
fn format_float(value: f64, spec: &Spec, max_chars: usize) -> Result<String, FormatError> {
    if !matches!(
        spec.ty,
        None | Some('e' | 'E' | 'f' | 'F' | 'g' | 'G' | 'n' | '%')
    ) {
        return Err(FormatError::Value(
            "Unknown format code for object of type 'float'",
        ));
    }
    if spec.precision.is_some_and(|p| p > i64::from(i32::MAX)) {
        return Err(FormatError::Value("precision too big"));
    }
    let mut add_dot_0 = false;
    let (mut code, default_precision) = match spec.ty {
        // No type: repr() unless a precision is given, then 'g' that keeps a ".0".
        None => {
            add_dot_0 = true;
            ('r', 0)
        }
        Some('n') => ('g', 6),
        Some(c) => (c, 6),
    };
    let mut value = value;
    let percent = code == '%';
    if percent {
        code = 'f';
        value *= 100.0;
    }
    let precision = match spec.precision {
        None => default_precision,
        Some(p) => {
            if code == 'r' {
                code = 'g';
            }
            p
        }
    };
    let flags = FloatFlags {
        add_dot_0,
        alternate: spec.alternate,
        no_neg_0: spec.no_neg_0,
    };
    let mut text = double_to_string(value, code, precision, flags, max_chars)?;
    if percent {
        text.push('%');
    }
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    // `parse_number`: leading digits, then an optional '.', then the rest verbatim.
    let digits_end = body
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(body.len());
    let (digits, rest) = body.split_at(digits_end);
    let (decimal, remainder) = match rest.strip_prefix('.') {
        Some(after) => (true, after),
        None => (false, rest),
    };
    let number = Number {
        prefix: "",
        negative,
        digits,
        decimal,
        remainder,
    };
    let grouping = if spec.ty == Some('n') {
        Grouping::None
    } else {
        spec.grouping
    };
    assemble_number(&number, spec, separator(grouping), max_chars)
}

/// A number as `calc_number_widths` sees it: `-0x` `1234` `.` `5e+10`.
struct Number<'a> {
    prefix: &'a str,
    negative: bool,
    /// The integer digits, which grouping and zero-padding apply to (ASCII).
    digits: &'a str,
    decimal: bool,
    /// Everything after the decimal point (fraction, exponent, '%', "inf", or the
    /// character of `c`), copied as is.
    remainder: &'a str,
}

/// `calc_number_widths` followed by `fill_number`.
fn assemble_number(
    number: &Number<'_>,
    spec: &Spec,
    grouping: Option<(char, i64)>,
    max_chars: usize,
) -> Result<String, FormatError> {
    let to_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let sign = match (spec.sign, number.negative) {
        (_, true) => Some('-'),
        (Some('+'), false) => Some('+'),
        (Some(' '), false) => Some(' '),
        _ => None,
    };
    let n_remainder = to_i64(number.remainder.chars().count());
    let fixed = i64::from(sign.is_some())
        + to_i64(number.prefix.len())
        + i64::from(number.decimal)
        + n_remainder;
    let width = spec.width.map_or(-1, to_i64);
    // Zero padding with '=' goes inside the digits, so the separators reach into it.
    let min_width = if spec.fill == '0' && spec.align == '=' {
        width - fixed
    } else {
        0
    };
    let grouped = if number.digits.is_empty() {
        String::new()
    } else {
        group_digits(number.digits, min_width, grouping)
    };
    let padding = (width - (fixed + to_i64(grouped.len()))).max(0);
    let (left, inside, right) = match spec.align {
        '<' => (0, 0, padding),
        '^' => (padding / 2, 0, padding - padding / 2),
        '=' => (0, padding, 0),
        _ => (padding, 0, 0),
    };
    let total = fixed + to_i64(grouped.len()) + padding;
    if total > to_i64(max_chars) {
        return Err(FormatError::TooLong(max_chars));
    }
    let fill = |n: i64| std::iter::repeat_n(spec.fill, usize::try_from(n).unwrap_or(0));
    let mut out = String::new();
    out.extend(fill(left));
    out.extend(sign);
    out.push_str(number.prefix);
    out.extend(fill(inside));
    out.push_str(&grouped);
    if number.decimal {
        out.push('.');
    }
    out.push_str(number.remainder);
    out.extend(fill(right));
    Ok(out)
}

/// `_PyUnicode_InsertThousandsGrouping`: separators every `size` digits from the
/// right, and zeros (separated too) until `min_width` is reached.
fn group_digits(digits: &str, min_width: i64, grouping: Option<(char, i64)>) -> String {
    let digits = digits.as_bytes();
    let mut remaining = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let mut min_width = min_width.max(0);
    // Built right to left, then reversed.
    let mut out: Vec<u8> = Vec::new();
    // One group: its separator (rightmost), its digits, then zeros to its left.
    let emit =
        |out: &mut Vec<u8>, remaining: i64, n_chars: i64, n_zeros: i64, sep: Option<char>| {
            if let Some(sep) = sep {
                out.push(sep as u8);
            }
            let end = usize::try_from(remaining).unwrap_or(0);
            let start = end.saturating_sub(usize::try_from(n_chars).unwrap_or(0));
            out.extend(digits.get(start..end).unwrap_or_default().iter().rev());
            out.extend(std::iter::repeat_n(
                b'0',
                usize::try_from(n_zeros).unwrap_or(0),
            ));
        };
    let mut use_separator = false;
    let mut finished = false;
    if let Some((sep, size)) = grouping {
        loop {
            let l = size.min(remaining.max(min_width).max(1));
            let n_chars = remaining.min(l).max(0);
            let n_zeros = (l - remaining).max(0);
            emit(
                &mut out,
                remaining,
                n_chars,
                n_zeros,
                use_separator.then_some(sep),
            );
            use_separator = true;
            remaining -= n_chars;
            min_width -= l;
            if remaining <= 0 && min_width <= 0 {
                finished = true;
                break;
            }
            min_width -= 1;
        }
    }
    if !finished {
        let l = remaining.max(min_width).max(1);
        let n_chars = remaining.min(l).max(0);
        let n_zeros = (l - remaining).max(0);
        let sep = grouping.map(|(sep, _)| sep);
        emit(
            &mut out,
            remaining,
            n_chars,
            n_zeros,
            sep.filter(|_| use_separator),
        );
    }
    out.reverse();
    // Only ASCII digits, zeros and separators were written.
    String::from_utf8(out).unwrap_or_default()
}

// ---------------------------------------------------------------------------------
// Floats (pystrtod.c)
// ---------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct FloatFlags {
    /// `Py_DTSF_ADD_DOT_0`: an integral result keeps a ".0".
    add_dot_0: bool,
    /// `Py_DTSF_ALT`: '#', keep the point and (for 'g') trailing zeros.
    alternate: bool,
    /// `Py_DTSF_NO_NEG_0`: 'z', a negative zero after rounding loses its sign.
    no_neg_0: bool,
}

/// Digits as David Gay's `_Py_dg_dtoa` returns them: no trailing zeros, "0" for zero,
/// and the decimal point `decpt` places after the first digit.
struct Digits {
    digits: String,
    decpt: i64,
}

/// Enough significant digits for any double: the longest exact decimal expansion of
/// one has 767, so asking for more only adds zeros that are stripped anyway.
const MAX_SIGNIFICANT_DIGITS: i64 = 800;

enum DtoaMode {
    /// Mode 0: the shortest digits that read back as the same double.
    Shortest,
    /// Mode 2: at most this many significant digits, correctly rounded.
    Significant(i64),
    /// Mode 3: this many digits after the point, correctly rounded.
    Fixed(i64),
}

/// The digits of a finite, non-negative double. Rust's float formatting is exact and
/// rounds ties to even, as Gay's dtoa does.
fn dtoa(value: f64, mode: DtoaMode) -> Digits {
    let (mantissa, decpt) = match mode {
        DtoaMode::Shortest | DtoaMode::Significant(_) => {
            let text = match mode {
                DtoaMode::Significant(n) => {
                    let n = n.clamp(1, MAX_SIGNIFICANT_DIGITS);
                    format!("{:.*e}", usize::try_from(n - 1).unwrap_or(0), value)
                }
                _ => shortest(value),
            };
            let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
            let exponent: i64 = exponent.parse().unwrap_or(0);
            (mantissa.replace('.', ""), exponent + 1)
        }
        DtoaMode::Fixed(n) => {
            let text = format!("{:.*}", usize::try_from(n).unwrap_or(0), value);
            let (int_part, frac_part) = text.split_once('.').unwrap_or((&text, ""));
            let int_digits = int_part.trim_start_matches('0');
            let decpt = i64::try_from(int_digits.len()).unwrap_or(0);
            if int_digits.is_empty() {
                let frac_digits = frac_part.trim_start_matches('0');
                let skipped = i64::try_from(frac_part.len() - frac_digits.len()).unwrap_or(0);
                (frac_digits.to_owned(), -skipped)
            } else {
                (format!("{int_digits}{frac_part}"), decpt)
            }
        }
    };
    let digits = mantissa.trim_end_matches('0');
    if digits.is_empty() {
        return Digits {
            digits: "0".to_owned(),
            decpt: 1,
        };
    }
    Digits {
        digits: digits.to_owned(),
        decpt,
    }
}

/// The shortest digits that read back as `value`, in Rust's `{:e}` form, choosing
/// among equally short candidates the nearest, ties to even, as Gay's dtoa does.
/// Rust's own shortest output can break an exact tie the other way:
/// 600275917553344.25 prints as ...344.3 where Python prints ...344.2.
fn shortest(value: f64) -> String {
    let text = format!("{value:e}");
    let significant = text
        .split_once('e')
        .map_or(text.len(), |(mantissa, _)| mantissa.replace('.', "").len());
    // Correctly rounded to that many digits, which is the nearest candidate; it reads
    // back as `value` unless `value` sits just above a power of two.
    let nearest = format!("{:.*e}", significant.saturating_sub(1), value);
    if nearest.parse::<f64>() == Ok(value) {
        nearest
    } else {
        text
    }
}

/// `PyOS_double_to_string` with `format_float_short`. `code` is one of e E f F g G r.
fn double_to_string(
    value: f64,
    code: char,
    precision: i64,
    flags: FloatFlags,
    max_chars: usize,
) -> Result<String, FormatError> {
    let upper = code.is_ascii_uppercase();
    let code = code.to_ascii_lowercase();
    if value.is_nan() {
        // The sign of a NaN is never shown.
        return Ok(if upper { "NAN" } else { "nan" }.to_owned());
    }
    if value.is_infinite() {
        let text = if upper { "INF" } else { "inf" };
        return Ok(if value < 0.0 {
            format!("-{text}")
        } else {
            text.to_owned()
        });
    }
    // Each of these writes at least `precision` characters.
    let too_long = match code {
        'e' | 'f' => true,
        'g' => flags.alternate,
        _ => false,
    };
    if too_long && precision > i64::try_from(max_chars).unwrap_or(i64::MAX) {
        return Err(FormatError::TooLong(max_chars));
    }
    let (mode, precision) = match code {
        'e' => (DtoaMode::Significant(precision + 1), precision + 1),
        'f' => (DtoaMode::Fixed(precision), precision),
        'g' => {
            // Precision 0 makes no sense for 'g'; Python reads it as 1.
            let p = precision.max(1);
            (DtoaMode::Significant(p), p)
        }
        _ => (DtoaMode::Shortest, 0),
    };
    let Digits { digits, mut decpt } = dtoa(value.abs(), mode);
    let mut negative = value.is_sign_negative();
    if flags.no_neg_0 && negative && digits == "0" {
        negative = false;
    }
    let digits_len = i64::try_from(digits.len()).unwrap_or(0);
    let mut use_exp = false;
    let mut vdigits_end = digits_len;
    match code {
        'e' => {
            use_exp = true;
            vdigits_end = precision;
        }
        'f' => vdigits_end = decpt + precision,
        'g' => {
            let limit = if flags.add_dot_0 {
                precision - 1
            } else {
                precision
            };
            if decpt <= -4 || decpt > limit {
                use_exp = true;
            }
            if flags.alternate {
                vdigits_end = precision;
            }
        }
        // repr switches to an exponent at 1e16.
        _ => use_exp = decpt <= -4 || decpt > 16,
    }
    let mut exponent = 0;
    if use_exp {
        exponent = decpt - 1;
        decpt = 1;
    }
    let vdigits_start = if decpt <= 0 { decpt - 1 } else { 0 };
    vdigits_end = if !use_exp && flags.add_dot_0 {
        vdigits_end.max(decpt + 1)
    } else {
        vdigits_end.max(decpt)
    };

    let zeros = |out: &mut String, n: i64| {
        out.extend(std::iter::repeat_n('0', usize::try_from(n).unwrap_or(0)));
    };
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if decpt <= 0 {
        zeros(&mut out, decpt - vdigits_start);
        out.push('.');
        zeros(&mut out, -decpt);
    } else {
        zeros(&mut out, -vdigits_start);
    }
    match usize::try_from(decpt) {
        Ok(point) if decpt > 0 && decpt <= digits_len => {
            out.push_str(&digits[..point]);
            out.push('.');
            out.push_str(&digits[point..]);
        }
        _ => out.push_str(&digits),
    }
    if digits_len < decpt {
        zeros(&mut out, decpt - digits_len);
        out.push('.');
        zeros(&mut out, vdigits_end - decpt);
    } else {
        zeros(&mut out, vdigits_end - digits_len);
    }
    if out.ends_with('.') && !flags.alternate {
        out.pop();
    }
    if use_exp {
        out.push(if upper { 'E' } else { 'e' });
        out.push_str(&format!("{exponent:+03}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    // Python's own behaviour is checked case by case in `briefing`'s tests, against a
    // committed fixture and against python3; these cover what JSON input cannot reach.
    use super::*;

    fn int(i: i64) -> PyValue {
        PyValue::Int(BigInt::from(i))
    }

    #[test]
    fn nan_never_shows_its_own_sign_and_follows_the_case_of_the_type() {
        let nan = PyValue::Float(f64::NAN);
        let negative_nan = PyValue::Float(-f64::NAN);
        assert_eq!(format_value(&negative_nan, "", 100).as_deref(), Ok("nan"));
        assert_eq!(py_repr(&negative_nan), "nan");
        assert_eq!(format_value(&nan, "+", 100).as_deref(), Ok("+nan"));
        assert_eq!(
            format_value(&negative_nan, "=+8", 100).as_deref(),
            Ok("+    nan")
        );
        assert_eq!(format_value(&nan, "F", 100).as_deref(), Ok("NAN"));
        assert_eq!(format_value(&nan, "08.2%", 100).as_deref(), Ok("0000nan%"));
    }

    #[test]
    fn a_result_past_the_bound_is_refused_and_one_at_it_is_not() {
        assert_eq!(format_value(&int(1), ">5", 4), Err(FormatError::TooLong(4)));
        assert_eq!(format_value(&int(1), ">4", 4).as_deref(), Ok("   1"));
        let text = PyValue::Str("abcdef".into());
        assert_eq!(format_value(&text, ".3", 4).as_deref(), Ok("abc"));
        assert_eq!(format_value(&text, "", 4), Err(FormatError::TooLong(4)));
        let list = PyValue::List(vec![text; 1000]);
        assert_eq!(format_value(&list, "", 20), Err(FormatError::TooLong(20)));
    }

    #[test]
    fn repr_of_deeply_nested_values_does_not_recurse() {
        let depth = 100_000;
        let mut value = PyValue::List(Vec::new());
        for _ in 0..depth {
            value = PyValue::List(vec![value]);
        }
        assert_eq!(py_repr(&value).len(), 2 * (depth + 1));
        // Dismantled by hand: dropping it whole would recurse as deep as it nests.
        while let PyValue::List(mut items) = value {
            value = items.pop().unwrap_or(PyValue::None);
        }
    }

    #[test]
    fn ints_past_pythons_digit_limit_are_refused_in_decimal_but_not_in_hex() {
        let big = PyValue::Int(BigInt::from(10).pow(4300));
        assert!(matches!(
            format_value(&big, "d", usize::MAX),
            Err(FormatError::Value(_))
        ));
        assert!(matches!(
            format_template("{n!r}", |_| Some(&big), usize::MAX),
            Err(FormatError::Value(_))
        ));
        assert!(format_value(&big, "x", usize::MAX).is_ok());
        // The fallback text must always be producible, so repr() itself never refuses.
        assert_eq!(py_repr(&big).len(), 4301);
    }

    #[test]
    fn a_lone_surrogate_code_point_cannot_be_formatted_as_a_character() {
        assert_eq!(
            format_value(&int(0xD800), "c", 10),
            Err(FormatError::Surrogate)
        );
        assert_eq!(
            format_value(&int(0xE000), "c", 10).as_deref(),
            Ok("\u{e000}")
        );
    }

    #[test]
    fn attribute_access_is_never_evaluated() {
        let x = int(5);
        let lookup = |name: &str| (name == "x").then_some(&x);
        assert_eq!(
            format_template("{x.real}", lookup, 100),
            Err(FormatError::Attribute)
        );
    }

    #[test]
    fn the_generated_tables_are_sorted_and_disjoint() {
        assert!(NOT_PRINTABLE.iter().all(|(low, high)| low <= high));
        assert!(NOT_PRINTABLE.windows(2).all(|w| w[0].1 < w[1].0));
        assert!(DIGIT_ZEROS.windows(2).all(|w| w[0] + 10 <= w[1]));
    }
}
