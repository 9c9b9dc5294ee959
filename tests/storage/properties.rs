//! Properties of the parsers and renderers that face hostile input, checked over
//! generated cases rather than examples.
//!
//! The unit tests pin exact outputs (often against Python itself); these check what must
//! hold for every input: the args hash ignores how a document is spelled, the briefing
//! renderer never panics and never exceeds its bound, callback data is accepted only in
//! the form we produce, and a request `parse_create` accepts can be sent again with the
//! same meaning. The generators lean towards the inputs that matter (braces and format
//! specs, near-miss callback data, every request field valid or just past its limit)
//! instead of uniform noise, which would almost never get past the first check.
//!
//! Failure persistence is off so a failing run leaves no file behind; a case proptest
//! finds is worth keeping as a named unit test next to the code it breaks.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use hitl_telegram::api::confirmations::{
    MAX_CONTEXT_CHARS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS, WaitMode, parse_create,
};
use hitl_telegram::config::{Agent, Config, Settings};
use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::briefing::{MAX_BRIEFING_CHARS, fallback, render};
use hitl_telegram::domain::ids::CallbackToken;
use hitl_telegram::domain::python::canon::canonical_sorted;
use hitl_telegram::domain::python::json::{
    JsonErrorKind, dumps_sorted, dumps_sorted_dict, parse, parse_object,
};
use hitl_telegram::domain::python::value::{PyDict, PyValue};
use hitl_telegram::service::{NewConfirmation, TapAction};
use hitl_telegram::telegram::render::{callback_data, parse_callback_data};
use num_bigint::BigInt;
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use sha2::{Digest, Sha256};

/// `cases` runs per property, without regression files (see the header).
fn cases(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------
// A model of JSON documents, and the many ways of spelling one
// ---------------------------------------------------------------------------------

/// A JSON document as a model: what it means, not how it is written. Every spelling
/// [`spell`] produces decodes to the same Python value.
#[derive(Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    /// `digits` has no leading zero (or is `"0"`).
    Int {
        negative: bool,
        digits: String,
    },
    /// The value `digits × 10^exp`, always written with a fraction or an exponent.
    Float {
        negative: bool,
        digits: String,
        exp: i32,
    },
    Str(String),
    Array(Vec<Json>),
    /// Keys are unique (as decoded), so no spelling can change which value wins.
    Object(Vec<(String, Json)>),
}

/// A tiny deterministic generator (splitmix64) for spelling choices: proptest picks the
/// seed, so a failing case shrinks and replays like any other.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

fn digits_strategy(max_len: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("0".to_owned()),
        4 => proptest::string::string_regex(&format!("[1-9][0-9]{{0,{max_len}}}"))
            .expect("valid regex"),
    ]
}

fn text_strategy(max_len: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        // proptest's `char` leans towards awkward code points (controls, surrogate
        // neighbours, the last planes), which is what escaping code must survive.
        2 => prop::collection::vec(any::<char>(), 0..max_len).prop_map(String::from_iter),
        1 => "[a-z_]{0,8}",
        1 => prop::collection::vec(
            prop::sample::select(vec!['"', '\\', '/', '\n', '\u{7f}', 'é', '😀', '\u{2028}', '{', '}', 'a']),
            0..max_len,
        )
        .prop_map(String::from_iter),
    ]
}

fn json_leaf() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (any::<bool>(), digits_strategy(30))
            .prop_map(|(negative, digits)| Json::Int { negative, digits }),
        (
            any::<bool>(),
            digits_strategy(20),
            prop_oneof![8 => -30i32..30, 1 => -420i32..-300, 1 => 300i32..420],
        )
            .prop_map(|(negative, digits, exp)| Json::Float {
                negative,
                digits,
                exp
            }),
        text_strategy(12).prop_map(Json::Str),
    ]
}

fn unique_keys(entries: Vec<(String, Json)>) -> Vec<(String, Json)> {
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect()
}

fn json_value() -> impl Strategy<Value = Json> {
    json_leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Json::Array),
            prop::collection::vec((text_strategy(6), inner), 0..6)
                .prop_map(|entries| Json::Object(unique_keys(entries))),
        ]
    })
}

/// An object whose keys often repeat, at any depth: `json.loads` keeps each repeated
/// key's last value, and the direct canonicaliser must agree. (The API refuses repeated
/// keys before hashing, but the hash itself must still be AI-Parrot's.)
fn json_object_with_repeats() -> impl Strategy<Value = Json> {
    let key = || prop_oneof![3 => "[ab]{0,1}", 1 => text_strategy(3)];
    let value = json_leaf().prop_recursive(3, 24, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec((key(), inner), 0..5).prop_map(Json::Object),
        ]
    });
    prop::collection::vec((key(), value), 0..6).prop_map(Json::Object)
}

/// The direct canonicaliser against the tree: the same text, or the same refusal.
fn check_direct_matches_tree(text: &str) -> Result<(), TestCaseError> {
    let tree = parse_object(text).map(|dict| dumps_sorted_dict(&dict));
    prop_assert_eq!(&canonical_sorted(text), &tree, "{}", text);
    prop_assert_eq!(
        ArgsHash::of_json(text),
        parse_object(text).map(|dict| ArgsHash::of(&dict)),
        "{}",
        text
    );
    Ok(())
}

/// A top-level object: what tool parameters are.
fn json_object() -> impl Strategy<Value = Json> {
    prop::collection::vec((text_strategy(8), json_value()), 0..8)
        .prop_map(|entries| Json::Object(unique_keys(entries)))
}

/// Python's view of the model. Objects keep the model's order.
fn model_value(json: &Json) -> PyValue {
    match json {
        Json::Null => PyValue::None,
        Json::Bool(b) => PyValue::Bool(*b),
        Json::Int { negative, digits } => {
            let n: BigInt = digits.parse().expect("digits");
            PyValue::Int(if *negative { -n } else { n })
        }
        Json::Float {
            negative,
            digits,
            exp,
        } => {
            let f: f64 = format!("{digits}e{exp}").parse().expect("float");
            PyValue::Float(if *negative { -f } else { f })
        }
        Json::Str(s) => PyValue::Str(s.clone()),
        Json::Array(items) => PyValue::List(items.iter().map(model_value).collect()),
        Json::Object(entries) => PyValue::Dict(
            entries
                .iter()
                .map(|(k, v)| (k.clone(), model_value(v)))
                .collect(),
        ),
    }
}

/// One way of writing `json`: object members in a shuffled order, optional whitespace
/// between tokens, characters raw or escaped, numbers with the point moved and zeros
/// added. With `choices` at a fixed seed the spelling is fixed too.
fn spell(json: &Json, choices: &mut Choices) -> String {
    let mut out = String::new();
    spell_into(&mut out, json, choices);
    out
}

fn ws(out: &mut String, choices: &mut Choices) {
    while choices.one_in(3) {
        out.push([' ', '\n', '\t', '\r'][choices.below(4)]);
    }
}

fn spell_into(out: &mut String, json: &Json, choices: &mut Choices) {
    match json {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int { negative, digits } => {
            if *negative {
                out.push('-');
            }
            out.push_str(digits);
        }
        Json::Float {
            negative,
            digits,
            exp,
        } => spell_float(out, *negative, digits, *exp, choices),
        Json::Str(s) => spell_str(out, s, choices),
        Json::Array(items) => {
            out.push('[');
            ws(out, choices);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                    ws(out, choices);
                }
                spell_into(out, item, choices);
                ws(out, choices);
            }
            out.push(']');
        }
        Json::Object(entries) => {
            let mut order: Vec<usize> = (0..entries.len()).collect();
            // Fisher-Yates with the spelling's own choices.
            for i in (1..order.len()).rev() {
                order.swap(i, choices.below(i + 1));
            }
            out.push('{');
            ws(out, choices);
            for (n, &i) in order.iter().enumerate() {
                let (key, value) = &entries[i];
                if n > 0 {
                    out.push(',');
                    ws(out, choices);
                }
                spell_str(out, key, choices);
                ws(out, choices);
                out.push(':');
                ws(out, choices);
                spell_into(out, value, choices);
                ws(out, choices);
            }
            out.push('}');
        }
    }
}

/// `digits × 10^exp`, with the decimal point after `point` of the digits (the exponent
/// compensating), trailing fraction zeros, and the exponent's letter case and sign
/// varied. The decimal value never changes, so the correctly rounded float does not.
fn spell_float(out: &mut String, negative: bool, digits: &str, exp: i32, choices: &mut Choices) {
    if negative {
        out.push('-');
    }
    // A leading zero is only allowed alone before the point.
    let point = if digits == "0" {
        1
    } else {
        1 + choices.below(digits.len())
    };
    let (int_part, frac_part) = digits.split_at(point);
    let shown_exp = exp + frac_part.len() as i32;
    out.push_str(int_part);
    let zeros = choices.below(3);
    if !frac_part.is_empty() || zeros > 0 || choices.one_in(2) {
        out.push('.');
        out.push_str(frac_part);
        for _ in 0..zeros.max(usize::from(frac_part.is_empty())) {
            out.push('0');
        }
        if shown_exp == 0 && choices.one_in(2) {
            return;
        }
    }
    out.push(if choices.one_in(2) { 'e' } else { 'E' });
    if shown_exp >= 0 && choices.one_in(2) {
        out.push('+');
    }
    out.push_str(&shown_exp.to_string());
}

fn spell_str(out: &mut String, s: &str, choices: &mut Choices) {
    out.push('"');
    for c in s.chars() {
        let must_escape = c == '"' || c == '\\' || c < ' ';
        if !must_escape && !choices.one_in(4) {
            out.push(c);
            continue;
        }
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            _ => None,
        };
        match short {
            Some(escape) if choices.one_in(2) => out.push_str(escape),
            _ => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    if choices.one_in(2) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    } else {
                        out.push_str(&format!("\\u{unit:04X}"));
                    }
                }
            }
        }
    }
    out.push('"');
}

/// `v` with every dict's keys in code point order, so two values that differ only in
/// key order compare equal.
fn sorted(v: &PyValue) -> PyValue {
    match v {
        PyValue::List(items) => PyValue::List(items.iter().map(sorted).collect()),
        PyValue::Dict(dict) => {
            let mut entries: Vec<(String, PyValue)> = dict
                .iter()
                .map(|(k, v)| (k.to_owned(), sorted(v)))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            PyValue::Dict(entries.into_iter().collect())
        }
        other => other.clone(),
    }
}

fn has_infinity(v: &PyValue) -> bool {
    match v {
        PyValue::Float(f) => f.is_infinite(),
        PyValue::List(items) => items.iter().any(has_infinity),
        PyValue::Dict(dict) => dict.iter().any(|(_, v)| has_infinity(v)),
        _ => false,
    }
}

/// What must hold of any parameters object the parser accepted: the hash is the SHA-256
/// of `dumps_sorted`, computing it again changes nothing, and the canonical text reads
/// back to the same value (hence the same hash), except that an overflowed float prints
/// as `Infinity`, which Python writes but our parser refuses on purpose.
fn check_canonical_round_trip(dict: &PyDict) -> Result<(), TestCaseError> {
    let hash = ArgsHash::of(dict);
    prop_assert_eq!(&hash, &ArgsHash::of(dict));
    let canonical = dumps_sorted_dict(dict);
    prop_assert!(canonical.is_ascii());
    prop_assert_eq!(
        hash.as_str(),
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let value = PyValue::Dict(dict.clone());
    prop_assert_eq!(&dumps_sorted(&value), &canonical);
    match parse_object(&canonical) {
        Ok(again) => {
            prop_assert_eq!(sorted(&PyValue::Dict(again.clone())), sorted(&value));
            prop_assert_eq!(dumps_sorted_dict(&again), canonical);
            prop_assert_eq!(ArgsHash::of(&again), hash);
        }
        Err(e) => {
            prop_assert!(has_infinity(&value), "{e}: {canonical}");
            prop_assert!(
                matches!(e.kind(), JsonErrorKind::NonStandardLiteral(_)),
                "{e}"
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn the_args_hash_ignores_key_order_whitespace_escapes_and_number_spelling(
        doc in json_object(),
        seed_a in any::<u64>(),
        seed_b in any::<u64>(),
    ) {
        let a = spell(&doc, &mut Choices(seed_a));
        let b = spell(&doc, &mut Choices(seed_b));
        let parsed_a = parse_object(&a).map_err(|e| TestCaseError::fail(format!("{e}: {a}")))?;
        let parsed_b = parse_object(&b).map_err(|e| TestCaseError::fail(format!("{e}: {b}")))?;
        prop_assert_eq!(ArgsHash::of(&parsed_a), ArgsHash::of(&parsed_b), "{} vs {}", a, b);
        // Same text, parsed twice: same hash.
        let again = parse_object(&a).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(ArgsHash::of(&again), ArgsHash::of(&parsed_a));
    }

    #[test]
    fn the_parser_decodes_what_the_model_means_whatever_the_spelling(
        doc in json_object(),
        seed in any::<u64>(),
    ) {
        let text = spell(&doc, &mut Choices(seed));
        let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert_eq!(sorted(&parsed), sorted(&model_value(&doc)), "{}", text);
    }

    #[test]
    fn the_canonical_text_is_the_hash_input_and_reads_back_to_the_same_hash(
        doc in json_object(),
        seed in any::<u64>(),
    ) {
        let text = spell(&doc, &mut Choices(seed));
        let dict = parse_object(&text).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        check_canonical_round_trip(&dict)?;
    }

    #[test]
    fn a_damaged_document_is_refused_or_canonicalises_like_any_other(
        doc in json_object(),
        seed in any::<u64>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<char>()), 1..4),
    ) {
        let mut text: Vec<char> = spell(&doc, &mut Choices(seed)).chars().collect();
        for (at, op, c) in edits {
            let i = at.index(text.len() + 1);
            match op {
                0 if i < text.len() => { text.remove(i); }
                1 if i < text.len() => text[i] = c,
                _ => text.insert(i, c),
            }
        }
        let text: String = text.into_iter().collect();
        if let Ok(dict) = parse_object(&text) {
            check_canonical_round_trip(&dict)?;
        }
    }

    #[test]
    fn arbitrary_text_never_panics_the_parser(text in ".{0,64}") {
        if let Ok(dict) = parse_object(&text) {
            check_canonical_round_trip(&dict)?;
        }
        check_direct_matches_tree(&text)?;
    }

    #[test]
    fn the_direct_canonicaliser_writes_what_the_tree_writes_however_it_is_spelled(
        doc in prop_oneof![json_object(), json_object_with_repeats()],
        seed in any::<u64>(),
    ) {
        check_direct_matches_tree(&spell(&doc, &mut Choices(seed)))?;
    }

    #[test]
    fn a_decimal_written_without_exponent_canonicalises_as_the_tree_writes_its_repr(
        negative in any::<bool>(),
        int_part in prop_oneof!["0", "[1-9][0-9]{0,17}"],
        fraction in prop_oneof!["0{0,6}[0-9]{1,12}0{0,3}", "[0-9]{1,20}"],
    ) {
        let sign = if negative { "-" } else { "" };
        check_direct_matches_tree(&format!(r#"{{"f": {sign}{int_part}.{fraction}}}"#))?;
    }

    #[test]
    fn the_direct_canonicaliser_refuses_a_damaged_document_as_the_tree_does(
        doc in prop_oneof![json_object(), json_object_with_repeats()],
        seed in any::<u64>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, prop_oneof![
            any::<char>(),
            prop::sample::select(vec!['{', '}', '[', ']', '"', '\\', ',', ':', '-', '0', '.', 'e', 'u', 'N']),
        ]), 1..4),
    ) {
        let mut text: Vec<char> = spell(&doc, &mut Choices(seed)).chars().collect();
        for (at, op, c) in edits {
            let i = at.index(text.len() + 1);
            match op {
                0 if i < text.len() => { text.remove(i); }
                1 if i < text.len() => text[i] = c,
                _ => text.insert(i, c),
            }
        }
        check_direct_matches_tree(&text.into_iter().collect::<String>())?;
    }
}

// ---------------------------------------------------------------------------------
// The briefing renderer
// ---------------------------------------------------------------------------------

/// Names templates refer to; `tool` and `params` are the renderer's own.
const NAMES: &[&str] = &["a", "b", "x", "n", "s", "items", "d", "é"];

fn py_leaf() -> impl Strategy<Value = PyValue> {
    prop_oneof![
        Just(PyValue::None),
        any::<bool>().prop_map(PyValue::Bool),
        any::<i64>().prop_map(|i| PyValue::Int(BigInt::from(i))),
        // Past Python's 4300-digit limit for printing an int, now and then.
        (1usize..4400, 0u8..10).prop_map(|(len, d)| {
            PyValue::Int(
                format!("{}{}", (d % 9) + 1, "7".repeat(len))
                    .parse()
                    .expect("digits"),
            )
        }),
        any::<f64>().prop_map(PyValue::Float),
        prop::sample::select(vec![
            0.0,
            -0.0,
            0.5,
            2.5,
            1e16,
            1e-5,
            f64::INFINITY,
            f64::NAN
        ])
        .prop_map(PyValue::Float),
        text_strategy(16).prop_map(PyValue::Str),
        (0usize..3000).prop_map(|n| PyValue::Str("é{}".repeat(n))),
    ]
}

fn py_value() -> impl Strategy<Value = PyValue> {
    py_leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(PyValue::List),
            prop::collection::vec((prop::sample::select(NAMES), inner), 0..5).prop_map(|entries| {
                PyValue::Dict(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect(),
                )
            }),
        ]
    })
}

fn params_strategy() -> impl Strategy<Value = PyDict> {
    let name = prop_oneof![
        30 => prop::sample::select(NAMES).prop_map(str::to_owned),
        // A parameter named like a keyword argument makes Python raise: fallback.
        1 => prop::sample::select(vec!["tool", "params"]).prop_map(str::to_owned),
        3 => text_strategy(4),
    ];
    prop::collection::vec((name, py_value()), 0..6).prop_map(|e| e.into_iter().collect())
}

fn tool_strategy() -> impl Strategy<Value = String> {
    prop_oneof![Just("deploy".to_owned()), text_strategy(10)]
}

fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(NAMES).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["tool", "params", "missing", "0", "", " ", "a.real", "a b"])
            .prop_map(str::to_owned),
    ]
}

fn index_strategy() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "[0]", "[1]", "[-1]", "[a]", "[99]", "[]", "[x", "[0][0]", "[é]",
    ])
    .prop_map(str::to_owned)
}

/// A number for a width or precision: small, at the output bound, or absurd.
fn count_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0usize..40).prop_map(|n| n.to_string()),
        2 => ((MAX_BRIEFING_CHARS - 4)..(MAX_BRIEFING_CHARS + 4)).prop_map(|n| n.to_string()),
        1 => Just("999999999999999999999999".to_owned()),
        1 => Just("007".to_owned()),
    ]
}

/// `[[fill]align][sign][z][#][0][width][grouping][.precision][type]`, each part
/// optional, sometimes with a nested `{field}` in place of a part.
fn spec_strategy() -> impl Strategy<Value = String> {
    let fill_align = prop_oneof![
        3 => Just(String::new()),
        2 => prop::sample::select(vec!["<", ">", "^", "="]).prop_map(str::to_owned),
        1 => (prop::sample::select(vec!['*', '0', ' ', '{', 'é', '}']), prop::sample::select(vec!["<", ">", "^", "="]))
            .prop_map(|(f, a)| format!("{f}{a}")),
    ];
    let sign = prop::sample::select(vec!["", "", "+", "-", " "]);
    let flags = prop::sample::select(vec!["", "", "z", "#", "0", "z#0"]);
    let width = prop_oneof![
        2 => Just(String::new()),
        2 => count_strategy(),
        1 => field_name().prop_map(|n| format!("{{{n}}}")),
    ];
    let grouping = prop::sample::select(vec!["", "", ",", "_", ",_"]);
    let precision = prop_oneof![
        2 => Just(String::new()),
        2 => count_strategy().prop_map(|n| format!(".{n}")),
        1 => Just(".".to_owned()),
        1 => field_name().prop_map(|n| format!(".{{{n}}}")),
    ];
    let kind = prop::sample::select(vec![
        "", "", "b", "c", "d", "e", "E", "f", "F", "g", "G", "n", "o", "s", "x", "X", "%", "q",
        "ss",
    ]);
    (fill_align, sign, flags, width, grouping, precision, kind).prop_map(
        |(fa, sign, flags, width, grouping, precision, kind)| {
            format!("{fa}{sign}{flags}{width}{grouping}{precision}{kind}")
        },
    )
}

/// One replacement field, well formed or nearly so.
fn field_strategy() -> impl Strategy<Value = String> {
    (
        field_name(),
        prop::collection::vec(index_strategy(), 0..2),
        prop::sample::select(vec!["", "", "", "!r", "!s", "!a", "!x", "!", "!rr"]),
        prop_oneof![2 => Just(None), 3 => spec_strategy().prop_map(Some)],
    )
        .prop_map(|(name, indexes, conversion, spec)| {
            let spec = spec.map(|s| format!(":{s}")).unwrap_or_default();
            format!("{{{name}{}{conversion}{spec}}}", indexes.concat())
        })
}

/// Templates made of fields and literal text (with doubled braces now and then).
fn spec_heavy_template() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => field_strategy(),
            1 => prop::sample::select(vec!["Deploy ", " to ", "{{", "}}", " ✓ ", "\n", "%"])
                .prop_map(str::to_owned),
        ],
        0..8,
    )
    .prop_map(|parts| parts.concat())
}

/// Templates from a token soup dominated by the characters the parser acts on.
fn brace_heavy_template() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "{", "}", "{{", "}}", "{a}", "{x", "a}", "[", "]", "[0]", "!", "!r", ":", ":>", ".",
            "0", "9", "8192", ",", "_", "d", "f", "%", "s", "x", "é", " ", "{tool}", "{params}",
            "{x:{", "}}}", "{{{",
        ]),
        0..24,
    )
    .prop_map(|parts| parts.concat())
}

fn any_template() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => spec_heavy_template(),
        2 => brace_heavy_template(),
        1 => prop::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter),
    ]
}

/// The renderer's contract for any input: a rendered briefing is within the bound, and
/// anything else is exactly the fallback text.
fn check_briefing(
    template: Option<&str>,
    tool: &str,
    params: &PyDict,
) -> Result<(), TestCaseError> {
    let briefing = render(template, tool, params);
    match &briefing.fallback_reason {
        None => prop_assert!(
            briefing.text.chars().count() <= MAX_BRIEFING_CHARS,
            "{} characters from {:?}",
            briefing.text.chars().count(),
            template
        ),
        Some(_) => prop_assert_eq!(&briefing.text, &fallback(tool, params)),
    }
    prop_assert_eq!(render(template, tool, params), briefing);
    Ok(())
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn the_renderer_never_panics_and_never_exceeds_its_bound(
        template in any_template(),
        tool in tool_strategy(),
        params in params_strategy(),
    ) {
        check_briefing(Some(&template), &tool, &params)?;
    }

    #[test]
    fn without_a_template_the_briefing_is_the_fallback(
        tool in tool_strategy(),
        params in params_strategy(),
    ) {
        let briefing = render(None, &tool, &params);
        prop_assert_eq!(briefing.text, fallback(&tool, &params));
        prop_assert!(briefing.fallback_reason.is_some());
    }

    #[test]
    fn text_with_doubled_braces_renders_as_itself(
        text in prop_oneof![
            brace_heavy_template(),
            prop::collection::vec(any::<char>(), 0..40).prop_map(String::from_iter),
        ],
        params in params_strategy(),
    ) {
        prop_assume!(params.get("tool").is_none() && params.get("params").is_none());
        let template = text.replace('{', "{{").replace('}', "}}");
        let briefing = render(Some(&template), "t", &params);
        prop_assert_eq!(briefing.fallback_reason, None);
        prop_assert_eq!(briefing.text, text);
    }

    #[test]
    fn output_past_the_bound_falls_back_and_output_within_it_does_not(
        len in 0usize..3000,
        repeats in 1usize..8,
        padding in 0usize..40,
    ) {
        let params: PyDict = [("s".to_owned(), PyValue::Str("é".repeat(len)))]
            .into_iter()
            .collect();
        let template = format!("{}{}", "-".repeat(padding), "{s}".repeat(repeats));
        let briefing = render(Some(&template), "t", &params);
        let expected_chars = padding + len * repeats;
        if expected_chars <= MAX_BRIEFING_CHARS {
            prop_assert_eq!(briefing.fallback_reason, None);
            prop_assert_eq!(briefing.text.chars().count(), expected_chars);
        } else {
            prop_assert_eq!(briefing.text, fallback("t", &params));
        }
    }
}

// ---------------------------------------------------------------------------------
// Callback data
// ---------------------------------------------------------------------------------

fn token_strategy() -> impl Strategy<Value = CallbackToken> {
    "[0-9a-f]{32}".prop_map(|s| CallbackToken::parse(&s).expect("32 lowercase hex digits"))
}

fn action_strategy() -> impl Strategy<Value = TapAction> {
    prop_oneof![
        Just(TapAction::Approve),
        Just(TapAction::ApproveWindow),
        Just(TapAction::Cancel),
        Just(TapAction::DenyWithReason),
        Just(TapAction::Extend),
    ]
}

/// Data one mistake away from what we produce, with the oracle's verdict computed by
/// hand: accepted only as `a:`, `c:`, `r:` (deny with reason) or `x:` (more time)
/// followed by exactly 32 lowercase hex digits.
fn near_miss_data() -> impl Strategy<Value = (String, bool)> {
    (
        prop::sample::select(vec!["a", "c", "r", "x", "A", "C", "X", "z", "", "ac", " a"]),
        prop::sample::select(vec![":", ":", ":", "", "::", ";", ": "]),
        prop_oneof![
            3 => "[0-9a-f]{32}",
            1 => "[0-9a-fA-F]{32}",
            1 => "[0-9a-f]{30,34}",
            1 => "[0-9a-g]{32}",
            1 => "[0-9a-f]{32}[\n :é]",
        ],
    )
        .prop_map(|(tag, sep, token)| {
            let valid = matches!(tag, "a" | "c" | "r" | "x")
                && sep == ":"
                && token.len() == 32
                && token
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            (format!("{tag}{sep}{token}"), valid)
        })
}

proptest! {
    #![proptest_config(cases(2000))]

    #[test]
    fn callback_data_we_produce_parses_back_and_fits_telegram(
        action in action_strategy(),
        token in token_strategy(),
    ) {
        let data = callback_data(action, &token);
        prop_assert!(data.len() <= 64);
        prop_assert_eq!(parse_callback_data(&data), Some((action, token)));
    }

    #[test]
    fn callback_data_is_accepted_only_in_the_form_we_produce(
        (data, valid) in near_miss_data(),
    ) {
        let parsed = parse_callback_data(&data);
        prop_assert_eq!(parsed.is_some(), valid, "{:?}", data);
        if let Some((action, token)) = parsed {
            prop_assert_eq!(callback_data(action, &token), data);
        }
    }

    #[test]
    fn arbitrary_callback_data_never_panics_and_accepted_data_round_trips(data in ".{0,70}") {
        if let Some((action, token)) = parse_callback_data(&data) {
            prop_assert_eq!(callback_data(action, &token), data);
        }
    }
}

// ---------------------------------------------------------------------------------
// The request parser
// ---------------------------------------------------------------------------------

/// A configuration with two routes and one agent that may use callback URLs under
/// `https://hooks.example/cb`, built the way the service builds its own.
static CONFIG: LazyLock<(Config, Arc<Agent>)> = LazyLock::new(|| {
    let settings = Settings::from_toml(
        r#"
        [server]
        bind = "127.0.0.1:0"
        [database]
        url = "sqlite::memory:"
        [telegram]
        api_url = "http://127.0.0.1:9/"
        poll_timeout_seconds = 1
        [confirmation]
        default_timeout_seconds = 120
        max_timeout_seconds = 86400
        default_window_seconds = 30
        [[routes]]
        name = "ops"
        chat_id = -100
        approvers = [1]
        [[routes]]
        name = "other"
        chat_id = -200
        approvers = [2]
        [[agents]]
        name = "bot"
        token_env = "BOT_TOKEN"
        routes = ["ops", "other"]
        default_route = "ops"
        webhook_secret_env = "BOT_SECRET"
        callback_url_prefixes = ["https://hooks.example/cb"]
        "#,
    )
    .expect("test settings parse");
    let env = |key: &str| match key {
        "TELEGRAM_BOT_TOKEN" => Some("123:telegram".to_owned()),
        "BOT_TOKEN" => Some("agent-token-0123456789".to_owned()),
        "BOT_SECRET" => Some("webhook-secret".to_owned()),
        _ => None,
    };
    let config = Config::from_settings(settings, &env).expect("test config is valid");
    let agent = config.agents[0].clone();
    (config, agent)
});

/// A request body: members in order, each value as JSON text. `params_text` is what
/// `params` holds, so the parser's copy can be compared with it byte for byte.
#[derive(Debug, Clone)]
struct Body {
    members: Vec<(String, String)>,
}

impl Body {
    fn text(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|(k, v)| format!("{}: {v}", json_string(k)))
            .collect();
        format!("{{{}}}", members.join(", "))
    }

    fn params_text(&self) -> Option<&str> {
        self.members
            .iter()
            .find(|(k, _)| k == "params")
            .map(|(_, v)| v.as_str())
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// Strings around a bounded field's limits: typical, empty, blank, with a control
/// character, exactly at the limit and one past it.
fn bounded_string(limit: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9_.-]{1,12}",
        2 => text_strategy(12),
        1 => prop::sample::select(vec!["", "  ", "a\nb", "\u{0}", "é"]).prop_map(str::to_owned),
        1 => (limit.saturating_sub(1)..limit + 2).prop_map(|n| "é".repeat(n)),
    ]
}

fn json_text_of(s: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    s.prop_map(|s| json_string(&s))
}

fn timeout_text() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => (1u64..100_000).prop_map(|ms| format!("{}.{:03}", ms / 1000, ms % 1000)),
        2 => (1u64..100_000_000).prop_map(|ms| format!("{}.{:03}", ms / 1000, ms % 1000)),
        2 => (0.0f64..90_000.0).prop_map(|f| format!("{f:?}")),
        1 => prop::sample::select(vec![
            "0", "-1", "0.0001", "0.0015", "1.001", "86400", "86400.0001", "1e3", "1e400",
            "\"10\"", "true",
        ])
        .prop_map(str::to_owned),
    ]
}

fn callback_url_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z0-9/._?=#%-]{0,16}".prop_map(|path| format!("https://hooks.example/cb/{path}")),
        2 => prop::sample::select(vec![
            "https://hooks.example/cb",
            "https://hooks.example/cbx",
            "https://HOOKS.example:443/cb/../cb/a?b=c#d",
            "https://hooks.example/cb/%2e%2e/x",
            "https://user:pw@hooks.example/cb",
            "https://hooks.example.evil.net/cb",
            "http://hooks.example/cb",
            "ftp://hooks.example/cb",
            "https://hooks.example/cb/é/ü?q=ä",
            "https://hooks.example/cb\\x",
            " https://hooks.example/cb/trim ",
            "not a url",
        ])
        .prop_map(str::to_owned),
    ]
    .prop_map(|s| json_string(&s))
}

/// One member's value for each known field, mostly valid, sometimes the wrong type,
/// sometimes `null` (which counts as absent).
fn member_strategy() -> impl Strategy<Value = (String, String)> {
    let value_for = |name: &'static str| -> BoxedStrategy<(String, String)> {
        let value: BoxedStrategy<String> = match name {
            "tool" => json_text_of(bounded_string(128)).boxed(),
            "params" => prop_oneof![
                8 => (json_object(), any::<u64>()).prop_map(|(doc, seed)| spell(&doc, &mut Choices(seed))),
                1 => prop::sample::select(vec!["[1]", "1", "\"{}\"", "{\"a\": 1e400}", "{\"a\":\"\\ud800\"}"])
                    .prop_map(str::to_owned),
            ]
            .boxed(),
            "owner_id" => json_text_of(bounded_string(256)).boxed(),
            "template" => prop_oneof![
                4 => json_text_of(spec_heavy_template()),
                1 => json_text_of(bounded_string(MAX_TEMPLATE_CHARS)),
            ]
            .boxed(),
            "window_seconds" => prop_oneof![
                3 => (0u64..100_000).prop_map(|n| n.to_string()),
                1 => prop::sample::select(vec![
                    MAX_WINDOW_SECONDS.to_string(),
                    (MAX_WINDOW_SECONDS + 1).to_string(),
                    "-1".to_owned(),
                    "1.5".to_owned(),
                    "\"60\"".to_owned(),
                    u64::MAX.to_string(),
                ]),
            ]
            .boxed(),
            "allow_edit" => prop::sample::select(vec!["true", "false", "\"yes\"", "1"])
                .prop_map(str::to_owned)
                .boxed(),
            "timeout_seconds" => timeout_text().boxed(),
            "wait" => prop::sample::select(vec!["\"block\"", "\"suspend\"", "\"later\"", "1"])
                .prop_map(str::to_owned)
                .boxed(),
            "route" => prop_oneof![
                3 => prop::sample::select(vec!["ops", "other"]).prop_map(json_string),
                1 => json_text_of(bounded_string(128)),
            ]
            .boxed(),
            "idempotency_key" => json_text_of(bounded_string(128)).boxed(),
            "context" => json_text_of(bounded_string(MAX_CONTEXT_CHARS)).boxed(),
            "callback_url" => callback_url_text().boxed(),
            _ => prop::sample::select(vec!["1", "\"x\"", "{}"]).prop_map(str::to_owned).boxed(),
        };
        prop_oneof![
            12 => value,
            1 => Just("null".to_owned()),
        ]
        .prop_map(move |v| (name.to_owned(), v))
        .boxed()
    };
    prop_oneof![
        value_for("tool"),
        value_for("params"),
        value_for("owner_id"),
        value_for("template"),
        value_for("window_seconds"),
        value_for("allow_edit"),
        value_for("timeout_seconds"),
        value_for("wait"),
        value_for("route"),
        value_for("idempotency_key"),
        value_for("context"),
        value_for("callback_url"),
    ]
}

/// Bodies that mostly pass: `tool` and `params` first (required), then any members in
/// any order, with now and then an unknown field.
fn body_strategy() -> impl Strategy<Value = Body> {
    (
        json_text_of(prop_oneof![
            8 => Just("deploy".to_owned()),
            1 => bounded_string(128),
        ]),
        (json_object(), any::<u64>()).prop_map(|(doc, seed)| spell(&doc, &mut Choices(seed))),
        prop::collection::vec(member_strategy(), 0..8),
        prop_oneof![12 => Just(None), 1 => Just(Some(("timeout".to_owned(), "5".to_owned())))],
        any::<prop::sample::Index>(),
    )
        .prop_map(|(tool, params, mut members, unknown, shuffle)| {
            members.insert(0, ("params".to_owned(), params));
            members.insert(0, ("tool".to_owned(), tool));
            // One of each: a body that repeats a member is refused whole (see
            // tests/service/input_refusals.rs), and would say nothing about the fields.
            let mut seen = std::collections::HashSet::new();
            members.retain(|(name, _)| seen.insert(name.clone()));
            if let Some(unknown) = unknown {
                let at = shuffle.index(members.len() + 1);
                members.insert(at, unknown);
            }
            Body { members }
        })
}

/// The accepted request written out again as an agent would send it.
fn resend(new: &NewConfirmation, wait: WaitMode) -> String {
    let mut members = vec![
        format!("\"tool\": {}", json_string(new.tool.as_str())),
        format!("\"params\": {}", new.params_json),
        format!("\"owner_id\": {}", json_string(new.owner_id.as_str())),
        format!("\"window_seconds\": {}", new.window_seconds),
        format!("\"allow_edit\": {}", new.allow_edit),
        format!(
            "\"timeout_seconds\": {}.{:03}",
            new.timeout.as_secs(),
            new.timeout.subsec_millis()
        ),
        format!(
            "\"wait\": {}",
            match wait {
                WaitMode::Block => "\"block\"",
                WaitMode::Suspend => "\"suspend\"",
            }
        ),
    ];
    for (name, value) in [
        ("template", &new.template),
        ("route", &new.route),
        ("context", &new.context),
        ("callback_url", &new.callback_url),
    ] {
        if let Some(value) = value {
            members.push(format!("\"{name}\": {}", json_string(value)));
        }
    }
    if let Some(key) = &new.idempotency_key {
        members.push(format!(
            "\"idempotency_key\": {}",
            json_string(key.as_str())
        ));
    }
    format!("{{{}}}", members.join(", "))
}

fn assert_same_request(a: &NewConfirmation, b: &NewConfirmation) -> Result<(), TestCaseError> {
    prop_assert_eq!(&a.tool, &b.tool);
    prop_assert_eq!(&a.params, &b.params);
    prop_assert_eq!(&a.params_json, &b.params_json);
    prop_assert_eq!(&a.owner_id, &b.owner_id);
    prop_assert_eq!(&a.template, &b.template);
    prop_assert_eq!(a.window_seconds, b.window_seconds);
    prop_assert_eq!(a.allow_edit, b.allow_edit);
    prop_assert_eq!(a.timeout, b.timeout);
    prop_assert_eq!(&a.route, &b.route);
    prop_assert_eq!(&a.idempotency_key, &b.idempotency_key);
    prop_assert_eq!(&a.context, &b.context);
    prop_assert_eq!(&a.callback_url, &b.callback_url);
    Ok(())
}

proptest! {
    #![proptest_config(cases(1500))]

    #[test]
    fn an_accepted_request_sent_again_means_the_same_request(body in body_strategy()) {
        let (config, agent) = &*CONFIG;
        let text = body.text();
        let Ok((new, wait)) = parse_create(text.as_bytes(), config, agent) else {
            return Ok(());
        };
        // The parameters are kept exactly as sent, and mean what the parser says.
        prop_assert_eq!(Some(new.params_json.as_str()), body.params_text());
        let reparsed = parse_object(&new.params_json)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&reparsed, &new.params);
        prop_assert!(new.timeout >= Duration::from_millis(1));
        prop_assert!(new.timeout <= Duration::from_secs_f64(config.max_timeout_seconds));
        prop_assert!(new.window_seconds <= MAX_WINDOW_SECONDS);

        let again = resend(&new, wait);
        let (new_again, wait_again) = parse_create(again.as_bytes(), config, agent)
            .map_err(|e| TestCaseError::fail(format!("{e:?}\nfirst: {text}\nagain: {again}")))?;
        prop_assert_eq!(wait_again, wait);
        assert_same_request(&new, &new_again)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_request_parser(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            body_strategy().prop_map(|b| b.text().into_bytes()),
        ],
        cut in any::<prop::sample::Index>(),
    ) {
        let (config, agent) = &*CONFIG;
        let cut = cut.index(bytes.len() + 1);
        let _ = parse_create(&bytes, config, agent);
        let _ = parse_create(&bytes[..cut], config, agent);
    }
}

/// A body with only a timeout, written with three decimals as `resend` writes one.
fn timeout_body(ms: u64) -> String {
    format!(
        r#"{{"tool": "t", "params": {{}}, "timeout_seconds": {}.{:03}}}"#,
        ms / 1000,
        ms % 1000
    )
}

proptest! {
    #![proptest_config(cases(2000))]

    /// Storage keeps deadlines to the millisecond, so a timeout given in whole
    /// milliseconds must be kept exactly: `2.007 * 1000.0` is 2007.0000000000002 in
    /// binary floating point, and rounding that up would add a millisecond every time
    /// the request is sent again.
    #[test]
    fn a_timeout_in_whole_milliseconds_is_kept_exactly(ms in 1u64..=86_400_000) {
        let (config, agent) = &*CONFIG;
        let body = timeout_body(ms);
        let (new, _) = parse_create(body.as_bytes(), config, agent)
            .map_err(|e| TestCaseError::fail(format!("{e:?}: {body}")))?;
        prop_assert_eq!(new.timeout, Duration::from_millis(ms), "{}", body);
    }
}

#[test]
fn the_smallest_timeout_that_floating_point_rounds_up_is_kept() {
    let (config, agent) = &*CONFIG;
    for (text, ms) in [
        ("2.007", 2007),
        ("4.001", 4001),
        ("0.0001", 1),
        ("0.0015", 2),
    ] {
        let body = format!(r#"{{"tool": "t", "params": {{}}, "timeout_seconds": {text}}}"#);
        let (new, _) = parse_create(body.as_bytes(), config, agent).expect("accepted");
        assert_eq!(new.timeout, Duration::from_millis(ms), "{text}");
    }
}
