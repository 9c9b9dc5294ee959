// Python's own behaviour is checked case by case in `briefing`'s tests, against a
// committed fixture and against python3; these cover what JSON input cannot reach.
use num_bigint::BigInt;

use super::*;
use crate::python::value::PyValue;

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
