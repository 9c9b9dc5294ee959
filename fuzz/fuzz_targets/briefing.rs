//! The briefing renderer (`briefing::render`, Python's `str.format`) on an arbitrary
//! template and arbitrary parameters.
//!
//! The input is `params JSON, 0xFF, template`: 0xFF never occurs in UTF-8, so it cannot
//! be part of either. Parameters that do not parse as an object are replaced by a fixed
//! set covering every value type, so most inputs exercise the template parser rather
//! than stop at the JSON. The renderer must never panic; a rendered briefing has at most
//! `MAX_BRIEFING_CHARS` characters, and anything else is exactly the fallback text.
#![no_main]

use std::sync::LazyLock;

use hitl_telegram::domain::briefing::{MAX_BRIEFING_CHARS, fallback, render};
use hitl_telegram::domain::python::json::parse_object;
use hitl_telegram::domain::python::value::PyDict;
use libfuzzer_sys::fuzz_target;

/// One parameter of each kind a template can meet, under the names a dictionary or a
/// mutation is likely to hit.
static DEFAULT_PARAMS: LazyLock<PyDict> = LazyLock::new(|| {
    parse_object(
        r#"{"a": 1, "b": 2.5, "x": "text {x} é😀", "n": -123456789012345678901234567890,
            "f": 1e-7, "g": 1e400, "s": "ab", "e": "", "t": true, "z": null,
            "items": [1, "two", 3.0, null, [4]], "d": {"k": "v", "0": 1, "a": {"b": "c"}},
            "0": "zero", "é": "acute"}"#,
    )
    .expect("the default parameters are valid")
});

fuzz_target!(|data: &[u8]| {
    let (params_bytes, template_bytes) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    let parsed = std::str::from_utf8(params_bytes)
        .ok()
        .and_then(|text| parse_object(text).ok());
    let params = parsed.as_ref().unwrap_or(&DEFAULT_PARAMS);
    let template = String::from_utf8_lossy(template_bytes);

    let briefing = render(Some(&template), "tool", params);
    match &briefing.fallback_reason {
        None => assert!(
            briefing.text.chars().count() <= MAX_BRIEFING_CHARS,
            "rendered {} characters",
            briefing.text.chars().count()
        ),
        Some(_) => assert_eq!(briefing.text, fallback("tool", params)),
    }
});
