use super::*;
use crate::python::json::{dumps_sorted, to_pretty_json};

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
