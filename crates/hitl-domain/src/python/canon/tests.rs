use super::*;

fn tree(text: &str) -> Result<String, JsonError> {
    json::parse_object(text).map(|dict| json::dumps_sorted_dict(&dict))
}

#[test]
fn keys_are_put_in_pythons_order_at_every_depth_and_a_repeat_keeps_its_last_value() {
    let text = r#"{"z":{"b":1,"a":[{"y":2,"x":1}]},"é":1,"\u00e9":2,"a":-0,"a":-0.0}"#;
    assert_eq!(
        canonical_sorted(text).as_deref(),
        Ok(r#"{"a": -0.0, "z": {"a": [{"x": 1, "y": 2}], "b": 1}, "\u00e9": 2}"#)
    );
    assert_eq!(canonical_sorted(text), tree(text));
}

#[test]
fn a_refused_text_gets_the_references_own_error() {
    for text in [
        "",
        "[]",
        r#"{"a":NaN}"#,
        r#"{"a":-Infinity}"#,
        r#"{"a":01}"#,
        r#"{"a":"\ud800"}"#,
        "{\"a\":\"\u{1}\"}",
        r#"{"a":1,}"#,
        r#"{"a":1} x"#,
    ] {
        let error = tree(text).expect_err(text);
        assert_eq!(canonical_sorted(text), Err(error), "{text}");
    }
    let deep = format!(
        "{{\"a\":{}{}}}",
        "[".repeat(MAX_DEPTH),
        "]".repeat(MAX_DEPTH)
    );
    assert!(tree(&deep).is_err());
    assert_eq!(canonical_sorted(&deep), tree(&deep));
}

#[test]
fn a_short_decimal_is_its_own_repr_and_anything_else_goes_the_long_way() {
    for (literal, repr) in [
        ("2.50", Some("2.5")),
        ("-0.000", Some("-0.0")),
        ("0.0001", Some("0.0001")),
        ("0.00001", None),
        ("123456789012345.0", Some("123456789012345.0")),
        ("1234567890123456.0", None),
        ("0.1000000000000000055511151231257827", None),
        ("1.5e3", None),
    ] {
        let mut out = String::new();
        let short = write_short_decimal(&mut out, literal);
        assert_eq!(short.then_some(out.as_str()), repr, "{literal}");
        let text = format!("{{\"f\":{literal}}}");
        assert_eq!(canonical_sorted(&text), tree(&text), "{literal}");
    }
}

#[test]
fn a_huge_document_does_not_pin_its_buffers_on_the_thread() {
    let big = format!("{{\"k\":\"{}\"}}", "x".repeat(4 * KEEP_BYTES));
    assert_eq!(canonical_sorted(&big), tree(&big));
    SCRATCH.with(|cell| {
        let scratch = cell.borrow();
        assert!(
            scratch.out.capacity() <= KEEP_BYTES,
            "{}",
            scratch.out.capacity()
        );
    });
}
