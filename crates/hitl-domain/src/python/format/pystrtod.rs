//! A float as a format spec asks for it: `Python/pystrtod.c`'s `PyOS_double_to_string`
//! and `format_float_short`, over the digits of David Gay's dtoa (`Python/dtoa.c`,
//! modes 0, 2 and 3), which Rust's exact float formatting gives with the same rounding.

use super::FormatError;

#[derive(Debug, Clone, Copy)]
pub(super) struct FloatFlags {
    /// `Py_DTSF_ADD_DOT_0`: an integral result keeps a ".0".
    pub(super) add_dot_0: bool,
    /// `Py_DTSF_ALT`: '#', keep the point and (for 'g') trailing zeros.
    pub(super) alternate: bool,
    /// `Py_DTSF_NO_NEG_0`: 'z', a negative zero after rounding loses its sign.
    pub(super) no_neg_0: bool,
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
pub(super) fn double_to_string(
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
    Ok(format_float_short(
        value, code, mode, precision, flags, upper,
    ))
}

/// `format_float_short`: `value`'s digits in `mode`, laid out for `code` (lowercased;
/// `upper` for E, F, G) with `precision` as `double_to_string` adjusted it.
fn format_float_short(
    value: f64,
    code: char,
    mode: DtoaMode,
    precision: i64,
    flags: FloatFlags,
    upper: bool,
) -> String {
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
    out
}
