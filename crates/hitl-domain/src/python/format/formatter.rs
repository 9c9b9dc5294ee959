//! `str.format`: a template's literal text and replacement fields, as
//! `Objects/stringlib/unicode_format.h` reads them (`build_string`, `parse_field`,
//! `get_field_object`), each field's value converted by `repr` and formatted by
//! `format_spec`.

use std::borrow::Cow;
use std::collections::HashMap;

use super::FormatError;
use super::format_spec::{format_text, format_typed};
use super::repr::{Conversion, Full, Sink, bounded_text};
use super::unicodectype::decimal_value;
use crate::python::value::{PyDict, PyValue};

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
pub(super) fn accumulate_digit(value: i64, digit: u32) -> Result<i64, FormatError> {
    value
        .checked_mul(10)
        .and_then(|v| v.checked_add(i64::from(digit)))
        .ok_or(FormatError::Value(
            "Too many decimal digits in format string",
        ))
}

/// Strings and dicts at least this large get memoised lookups; smaller ones are
/// cheaper to scan than to hash.
pub(super) const MEMO_MIN_BYTES: usize = 256;
const MEMO_MIN_ENTRIES: usize = 16;
/// Characters between two remembered byte offsets when indexing a long string.
const CHAR_STRIDE: usize = 64;

/// Facts about large borrowed values, so that a template repeating a field over one
/// of them costs one scan rather than one per field. Keys are addresses of values
/// borrowed for the whole render, so they cannot be reused while the memo lives.
#[derive(Default)]
pub(super) struct Memo<'v> {
    pub(super) quotes: HashMap<(usize, usize), char>,
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
