//! `format(value, spec)`: the format-spec mini-language
//! (`[[fill]align][sign][z][#][0][width][grouping][.precision][type]`) as
//! `Python/formatter_unicode.c` parses and applies it to `str`, `int` (and `bool`) and
//! `float`; floats are turned into digits by `pystrtod`.

use num_bigint::{BigInt, BigUint, Sign};

use super::FormatError;
use super::formatter::{Memo, accumulate_digit};
use super::pystrtod::{FloatFlags, double_to_string};
use super::repr::{Conversion, bounded_text, magnitude_digits};
use super::unicodectype::decimal_value;
use crate::python::value::PyValue;

/// Python's `format(value, spec)`, refusing any result longer than `max_chars`
/// characters before building it.
pub fn format_value(value: &PyValue, spec: &str, max_chars: usize) -> Result<String, FormatError> {
    let spec: Vec<char> = spec.chars().collect();
    format_typed(value, &spec, max_chars, None)
}

/// `format(value, spec)` dispatched on the value's Python type.
pub(super) fn format_typed(
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
    let (mut pos, fill_specified, align_specified) = parse_fill_align(spec, &mut parsed);
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
    grouping_for_type(&mut parsed)?;
    Ok(parsed)
}

/// `[[fill]align]` at the start of `spec`: where the rest begins, and whether a fill and
/// an align were given.
fn parse_fill_align(spec: &[char], parsed: &mut Spec) -> (usize, bool, bool) {
    match spec {
        [fill, align @ ('<' | '>' | '=' | '^'), ..] => {
            parsed.fill = *fill;
            parsed.align = *align;
            (2, true, true)
        }
        [align @ ('<' | '>' | '=' | '^'), ..] => {
            parsed.align = *align;
            (1, false, true)
        }
        _ => (0, false, false),
    }
}

/// A thousands separator only with the types that take one; `_` groups binary, octal
/// and hex digits by four.
fn grouping_for_type(parsed: &mut Spec) -> Result<(), FormatError> {
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
    Ok(())
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
pub(super) fn format_text(
    text: &str,
    spec: &[char],
    max_chars: usize,
) -> Result<String, FormatError> {
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
