//! Numbers as rules compare them: a rule's bound (a JSON number from the configuration)
//! against what a call holds, which is a Python value ([`PyValue`]): an `int` of any
//! length, a `float` that may be infinite (`1e400` is `inf` to `json.loads`), or, for a
//! `deny` or an `ask`, a string a tool runtime would read as a number (pydantic's lax
//! mode turns `"9000"` into 9000).
//!
//! Every comparison is exact: integers as integers at any length, an integer against a
//! float without rounding either.

use std::cmp::Ordering;

use num_bigint::{BigInt, Sign};
use serde_json::Number;

use crate::python::json::MAX_INT_DIGITS;
use crate::python::value::PyValue;

/// A finite number read from a call.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Numeric {
    Int(i128),
    /// An integer beyond `i128`: rare, and exact all the same.
    Big(BigInt),
    /// Finite.
    Float(f64),
}

/// What a value reads as, numerically.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum AsNumber {
    Number(Numeric),
    /// `inf`, `-inf` or `nan`: orders against no bound.
    NonFinite,
    /// Not a number at all (text that is not one, `null`, a table).
    NotANumber,
}

impl Numeric {
    fn of_int(i: &BigInt) -> Numeric {
        i128::try_from(i).map_or_else(|_| Numeric::Big(i.clone()), Numeric::Int)
    }

    /// The order of this number against a bound from the configuration.
    pub(super) fn cmp_number(&self, bound: &Number) -> Option<Ordering> {
        match (self, integer(bound)) {
            (Numeric::Int(i), Some(j)) => Some(i.cmp(&j)),
            (Numeric::Int(i), None) => compare_integer_float(*i, bound.as_f64()?),
            (Numeric::Float(f), Some(j)) => compare_integer_float(j, *f).map(Ordering::reverse),
            (Numeric::Float(f), None) => f.partial_cmp(&bound.as_f64()?),
            // Beyond i128 on either side of zero: past every integer a bound can be.
            (Numeric::Big(b), Some(_)) => Some(if b.sign() == Sign::Minus {
                Ordering::Less
            } else {
                Ordering::Greater
            }),
            (Numeric::Big(b), None) => Some(compare_big_float(b, bound.as_f64()?)),
        }
    }
}

/// A Python number exactly as it is: a `bool` is not one here (`exact` readings compare
/// only what is written as a number).
pub(super) fn exact(v: &PyValue) -> AsNumber {
    match v {
        PyValue::Int(i) => AsNumber::Number(Numeric::of_int(i)),
        PyValue::Float(f) if f.is_finite() => AsNumber::Number(Numeric::Float(*f)),
        PyValue::Float(_) => AsNumber::NonFinite,
        _ => AsNumber::NotANumber,
    }
}

/// A value as a tool runtime may read it as a number: a number as it is, a `bool` as 0
/// or 1 (Python's `True == 1`), a string as Python's `int()` (exactly) or `float()`
/// reads it ([`read_text`]).
pub(super) fn loose(v: &PyValue) -> AsNumber {
    match v {
        PyValue::Bool(b) => AsNumber::Number(Numeric::Int(i128::from(*b))),
        PyValue::Str(s) => read_text(s),
        other => exact(other),
    }
}

/// `s` read as Python reads a number out of a string: `int(s)` when it is an integer
/// (exact, as pydantic reads an `int` field), else `float(s)`: surrounding white space
/// ignored, `_` between digits, any script's decimal digits (`٩٠٠٠`), `inf`, `nan`.
pub(super) fn read_text(s: &str) -> AsNumber {
    let Some(ascii) = ascii_digits(s.trim()) else {
        return AsNumber::NotANumber;
    };
    let (sign, body) = match ascii.as_bytes().first() {
        Some(b'+' | b'-') => ascii.split_at(1),
        _ => ("", ascii.as_str()),
    };
    if matches!(
        body.to_ascii_lowercase().as_str(),
        "inf" | "infinity" | "nan"
    ) {
        return AsNumber::NonFinite;
    }
    let Some(shape) = decimal_shape(body) else {
        return AsNumber::NotANumber;
    };
    let digits: String = body.chars().filter(|&c| c != '_').collect();
    if shape == Shape::Integer && digits.len() <= MAX_INT_DIGITS {
        let text = format!("{sign}{digits}");
        if let Ok(i) = text.parse::<i128>() {
            return AsNumber::Number(Numeric::Int(i));
        }
        if let Ok(b) = text.parse::<BigInt>() {
            return AsNumber::Number(Numeric::Big(b));
        }
    }
    // Rust's parse rounds correctly, as CPython's `float()` does.
    match format!("{sign}{digits}").parse::<f64>() {
        Ok(f) if f.is_finite() => AsNumber::Number(Numeric::Float(f)),
        Ok(_) => AsNumber::NonFinite,
        Err(_) => AsNumber::NotANumber,
    }
}

/// `s` with every decimal digit of any script (Unicode `Nd`) written as its ASCII digit,
/// as CPython does before it parses a number; `None` when anything else is not ASCII.
fn ascii_digits(s: &str) -> Option<String> {
    s.chars()
        .map(|c| {
            if c.is_ascii() {
                Some(c)
            } else {
                decimal_value(c).and_then(|d| char::from_digit(d, 10))
            }
        })
        .collect()
}

/// The value of a decimal digit of any script. Unicode assigns `Nd` digits in runs of
/// ten from zero to nine, so a digit's value is its place in its run.
fn decimal_value(c: char) -> Option<u32> {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    let is_digit = |c: char| c.general_category() == GeneralCategory::DecimalNumber;
    if !is_digit(c) {
        return None;
    }
    let code = u32::from(c);
    let run_start = (1..=code)
        .take(60)
        .map(|back| code - back)
        .take_while(|&p| char::from_u32(p).is_some_and(is_digit))
        .count();
    Some(u32::try_from(run_start % 10).unwrap_or(0))
}

#[derive(Debug, PartialEq, Eq)]
enum Shape {
    Integer,
    Decimal,
}

/// Whether `body` (no sign) is one of Python's decimal literals: digits with single `_`
/// between them, an optional fraction, an optional exponent; at least one digit before
/// the exponent.
fn decimal_shape(body: &str) -> Option<Shape> {
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(at) => (&body[..at], Some(&body[at + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = match mantissa.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (mantissa, None),
    };
    let digits_ok = |part: &str, may_be_empty: bool| {
        if part.is_empty() {
            return may_be_empty;
        }
        part.split('_')
            .all(|run| !run.is_empty() && run.bytes().all(|b| b.is_ascii_digit()))
    };
    if !digits_ok(whole, fraction.is_some()) || !fraction.is_none_or(|f| digits_ok(f, true)) {
        return None;
    }
    if whole.is_empty() && fraction.is_none_or(str::is_empty) {
        return None;
    }
    if let Some(e) = exponent {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        if !digits_ok(e, false) {
            return None;
        }
    }
    Some(if fraction.is_none() && exponent.is_none() {
        Shape::Integer
    } else {
        Shape::Decimal
    })
}

/// A JSON integer (`i64` or `u64`) as one type that holds both exactly.
fn integer(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// The order of two JSON numbers, exact for any pair: integers as integers (a `u64`
/// above `i64::MAX` included), an integer and a float without rounding the integer to a
/// float first (2^53 + 1 is more than 9007199254740992.0), floats as floats. `None`
/// only for a number that is none of these, which serde_json does not produce.
pub(super) fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    match (integer(a), integer(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        (Some(x), None) => compare_integer_float(x, b.as_f64()?),
        (None, Some(y)) => compare_integer_float(y, a.as_f64()?).map(Ordering::reverse),
        (None, None) => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// 2^127 as a float: where `i128` ends, the bound both comparisons with a float turn on.
const TWO_127: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// The order of an integer within `i128` and a float.
fn compare_integer_float(i: i128, f: f64) -> Option<Ordering> {
    // Beyond ±2^127 a float orders against every such integer by its side alone
    // (infinities included).
    if f.is_nan() {
        return None;
    }
    if f >= TWO_127 {
        return Some(Ordering::Less);
    }
    if f < -TWO_127 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // Exact: `whole` is an integer inside the range i128 holds.
    let whole_int = whole as i128;
    Some(i.cmp(&whole_int).then_with(|| {
        // Equal integer parts: the fraction decides.
        0.0_f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal)
    }))
}

/// The order of an integer beyond `i128` and a finite float.
fn compare_big_float(b: &BigInt, f: f64) -> Ordering {
    let side = if b.sign() == Sign::Minus {
        Ordering::Less
    } else {
        Ordering::Greater
    };
    if f.abs() < TWO_127 {
        return side;
    }
    // A float this large is an integer, mantissa x 2^exponent: compare exactly.
    let bits = f.abs().to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i64 - 1075;
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    let mut whole = BigInt::from(mantissa) << usize::try_from(exponent).unwrap_or(0);
    if f < 0.0 {
        whole = -whole;
    }
    b.cmp(&whole)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn number(v: Value) -> Number {
        match v {
            Value::Number(n) => n,
            other => panic!("not a number: {other}"),
        }
    }

    #[test]
    fn numbers_compare_exactly_across_integers_and_floats() {
        let cmp = |a: Value, b: Value| compare_numbers(&number(a), &number(b));
        assert_eq!(cmp(json!(1), json!(1.0)), Some(Ordering::Equal));
        assert_eq!(cmp(json!(-1), json!(u64::MAX)), Some(Ordering::Less));
        assert_eq!(
            cmp(json!(u64::MAX), json!(i64::MAX)),
            Some(Ordering::Greater)
        );
        assert_eq!(cmp(json!(i64::MIN), json!(-1e300)), Some(Ordering::Greater));
        // 2^64 as a float: above every u64, although u64::MAX rounds to it.
        assert_eq!(
            cmp(json!(u64::MAX), json!(18446744073709551616.0)),
            Some(Ordering::Less)
        );
        // 2^53 + 1 against 2^53 as a float: a float comparison would call them equal.
        assert_eq!(
            cmp(json!(9_007_199_254_740_993_u64), json!(9007199254740992.0)),
            Some(Ordering::Greater)
        );
        assert_eq!(cmp(json!(-2.5), json!(-2)), Some(Ordering::Less));
        assert_eq!(cmp(json!(-2), json!(-2.5)), Some(Ordering::Greater));
        assert_eq!(cmp(json!(0.1), json!(0.2)), Some(Ordering::Less));
    }

    #[test]
    fn an_integer_of_any_length_compares_exactly_with_a_bound() {
        let big = |s: &str| Numeric::Big(s.parse().unwrap());
        let n = |v: Value| number(v);
        // 10^40 against 1e40 (which is 10000000000000000303786028427003666890752).
        let ten_40 = big(&format!("1{}", "0".repeat(40)));
        assert_eq!(ten_40.cmp_number(&n(json!(1e40))), Some(Ordering::Less));
        assert_eq!(
            big("10000000000000000303786028427003666890752").cmp_number(&n(json!(1e40))),
            Some(Ordering::Equal)
        );
        assert_eq!(
            ten_40.cmp_number(&n(json!(u64::MAX))),
            Some(Ordering::Greater)
        );
        assert_eq!(
            big(&format!("-1{}", "0".repeat(40))).cmp_number(&n(json!(-1e300))),
            Some(Ordering::Greater)
        );
        assert_eq!(ten_40.cmp_number(&n(json!(1e300))), Some(Ordering::Less));
        assert_eq!(
            Numeric::Float(9000.5).cmp_number(&n(json!(9000))),
            Some(Ordering::Greater)
        );
    }

    #[test]
    fn text_reads_as_python_reads_a_number() {
        let int = |i: i128| AsNumber::Number(Numeric::Int(i));
        let float = |f: f64| AsNumber::Number(Numeric::Float(f));
        for (text, reading) in [
            ("9000", int(9000)),
            (" 9000\n", int(9000)),
            ("+9_000", int(9000)),
            ("-0009000", int(-9000)),
            ("9000.0", float(9000.0)),
            ("9e3", float(9000.0)),
            (".5", float(0.5)),
            ("5.", float(5.0)),
            ("1E-2", float(0.01)),
            ("\u{669}\u{660}\u{660}\u{660}", int(9000)), // Arabic-Indic ٩٠٠٠
            ("\u{ff19}\u{ff10}", int(90)),               // fullwidth ９０
            ("\u{1d7d7}", int(9)),                       // mathematical bold 9
            ("1e400", AsNumber::NonFinite),
            ("-Infinity", AsNumber::NonFinite),
            ("iNF", AsNumber::NonFinite),
            ("+nan", AsNumber::NonFinite),
            ("", AsNumber::NotANumber),
            ("1__0", AsNumber::NotANumber),
            ("_1", AsNumber::NotANumber),
            ("1_", AsNumber::NotANumber),
            ("1_.5", AsNumber::NotANumber),
            ("1e_5", AsNumber::NotANumber),
            ("0x10", AsNumber::NotANumber),
            ("1 0", AsNumber::NotANumber),
            ("+-1", AsNumber::NotANumber),
            (".", AsNumber::NotANumber),
            ("e5", AsNumber::NotANumber),
            ("nine", AsNumber::NotANumber),
        ] {
            assert_eq!(read_text(text), reading, "{text:?}");
        }
        let long = "9".repeat(400);
        assert!(matches!(
            read_text(&long),
            AsNumber::Number(Numeric::Big(_))
        ));
        assert_eq!(read_text(&"9".repeat(5000)), AsNumber::NonFinite, "float()");
    }

    #[test]
    fn a_bool_reads_as_zero_or_one_only_loosely() {
        assert_eq!(
            loose(&PyValue::Bool(true)),
            AsNumber::Number(Numeric::Int(1))
        );
        assert_eq!(exact(&PyValue::Bool(true)), AsNumber::NotANumber);
        assert_eq!(exact(&PyValue::Str("5".into())), AsNumber::NotANumber);
        assert_eq!(exact(&PyValue::Float(f64::INFINITY)), AsNumber::NonFinite);
    }
}
