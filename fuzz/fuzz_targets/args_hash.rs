//! The args-hash canonicaliser: `python::json::parse_object`, then `ArgsHash::of` and
//! `dumps_sorted`, on arbitrary text.
//!
//! Beyond "never panics": the hash is the SHA-256 of the canonical text; the canonical
//! text is ASCII and reads back to the same value (so to the same text and hash); the
//! operator's pretty view reads back to the same value in the same order. The one
//! expected exception is a float that overflowed to infinity (`1e400`): Python writes it
//! as `Infinity`, which the parser refuses on purpose.
#![no_main]

use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::python::json::{
    JsonErrorKind, dumps_sorted, dumps_sorted_dict, parse_object, to_pretty_json,
};
use hitl_telegram::domain::python::value::PyValue;
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

/// `v` with every dict's keys in code point order, so values that differ only in key
/// order compare equal.
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

/// A refusal that is only the parser's policy on non-finite literals.
fn refused_for_infinity(value: &PyValue, kind: &JsonErrorKind) -> bool {
    has_infinity(value) && matches!(kind, JsonErrorKind::NonStandardLiteral(_))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(params) = parse_object(text) else {
        return;
    };
    let hash = ArgsHash::of(&params);
    let canonical = dumps_sorted_dict(&params);
    assert!(canonical.is_ascii(), "{canonical:?}");
    assert_eq!(hash, ArgsHash::of(&params));
    assert_eq!(
        hash.as_str(),
        hex::encode(Sha256::digest(canonical.as_bytes()))
    );
    let value = PyValue::Dict(params);
    assert_eq!(dumps_sorted(&value), canonical);

    match parse_object(&canonical) {
        Ok(again) => {
            assert_eq!(dumps_sorted_dict(&again), canonical);
            assert_eq!(ArgsHash::of(&again), hash);
            assert_eq!(sorted(&PyValue::Dict(again)), sorted(&value));
        }
        Err(e) => assert!(
            refused_for_infinity(&value, e.kind()),
            "canonical text refused: {e}: {canonical:?}"
        ),
    }

    let pretty = to_pretty_json(&value);
    match parse_object(&pretty) {
        Ok(again) => assert_eq!(PyValue::Dict(again), value),
        Err(e) => assert!(
            refused_for_infinity(&value, e.kind()),
            "pretty text refused: {e}: {pretty:?}"
        ),
    }
});
