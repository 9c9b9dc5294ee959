//! Python's `repr(float)`: `Objects/floatobject.c`'s `float_repr`, which is
//! `PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0)` (`Python/pystrtod.c`) over the
//! shortest round-tripping digits of David Gay's dtoa (`Python/dtoa.c`, mode 0).
//! `json.dumps` (through `floatstr`) and `repr()` both print floats with it; `format`
//! ports the rest of `PyOS_double_to_string`, for format specs.

use std::fmt::Write as _;

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
pub(super) fn write_float_repr(out: &mut String, f: f64) {
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
}
