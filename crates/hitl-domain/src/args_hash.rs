//! The fingerprint of a tool call's parameters, identical to AI-Parrot's.
//!
//! A confirmation window lets a repeated call through without asking again when its
//! `(owner, tool, args_hash)` matches one already approved. AI-Parrot computes the hash as
//! `sha256(json.dumps(params, sort_keys=True, default=str))`; we must produce the same
//! hex string for the same parameters, or windows recorded on one side would never match
//! on the other. [`ArgsHash`] can only be built by hashing parameters or by parsing a
//! well-formed stored hash, so a value of this type is always 64 lowercase hex digits.

use std::fmt;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::python::canon;
use crate::python::json::{JsonError, dumps_sorted_dict};
use crate::python::value::PyDict;

/// Lowercase hex SHA-256 of the parameters' canonical Python JSON.
///
/// Shared text behind an `Arc`, so the copies that travel with a request (storage,
/// window lookup, audit log) cost a reference count, not an allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArgsHash(Arc<str>);

/// A stored value that is not an args hash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgsHashError {
    #[error("an args hash has 64 characters, got {0}")]
    WrongLength(usize),
    #[error("an args hash is lowercase hex, found {found:?} at index {index}")]
    NotLowercaseHex { index: usize, found: char },
}

impl ArgsHash {
    /// AI-Parrot's `compute_args_hash(params)`.
    pub fn of(params: &PyDict) -> ArgsHash {
        ArgsHash::of_canonical(&dumps_sorted_dict(params))
    }

    /// AI-Parrot's `compute_args_hash(json.loads(text))` for a JSON object `text`, the
    /// same hash as [`ArgsHash::of`] of [`parse_object`](crate::python::json::parse_object)
    /// but written straight from the text (see [`canon`]), with the same refusals.
    pub fn of_json(text: &str) -> Result<ArgsHash, JsonError> {
        canon::with_canonical_sorted(text, ArgsHash::of_canonical)
    }

    /// The hash of a canonical text already written.
    fn of_canonical(canonical: &str) -> ArgsHash {
        let digest = Sha256::digest(canonical.as_bytes());
        // Lowercase hex by hand: `hex::encode` goes through a char iterator, a visible
        // share of a window hit's cost.
        // Written on the stack, so the `Arc` is the only allocation.
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0u8; 64];
        for (pair, byte) in text.chunks_exact_mut(2).zip(digest) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0x0f)];
        }
        // Hex digits are ASCII, so this never falls back.
        ArgsHash(std::str::from_utf8(&text).unwrap_or_default().into())
    }

    /// Accept a hash read back from storage or sent by a client: exactly 64 lowercase hex
    /// characters (uppercase is refused so one hash has one spelling and compares equal
    /// to itself as text, in SQL as in Rust).
    pub fn parse(s: &str) -> Result<ArgsHash, ArgsHashError> {
        let len = s.chars().count();
        if len != 64 {
            return Err(ArgsHashError::WrongLength(len));
        }
        if let Some((index, found)) = s
            .char_indices()
            .find(|(_, c)| !matches!(c, '0'..='9' | 'a'..='f'))
        {
            return Err(ArgsHashError::NotLowercaseHex { index, found });
        }
        Ok(ArgsHash(s.into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArgsHash({})", self.0)
    }
}

impl AsRef<str> for ArgsHash {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for ArgsHash {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// Deserialising goes through [`ArgsHash::parse`], so a malformed hash in a request body
/// or a stored record is an error, never a value.
impl<'de> serde::Deserialize<'de> for ArgsHash {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        ArgsHash::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python::json::{dumps_sorted, parse_object, to_pretty_json};
    use crate::python::value::PyValue;

    /// Written by `scripts/gen_args_hash_vectors.py` from Python's own `json` module.
    const VECTORS: &str = include_str!("../../../tests/fixtures/args_hash_vectors.json");

    #[derive(serde::Deserialize)]
    struct Vector {
        name: String,
        params_json: String,
        canonical: String,
        args_hash: String,
    }

    /// One line of the script's `--random` mode.
    #[derive(serde::Deserialize)]
    struct RandomVector {
        params_json: String,
        args_hash: String,
        canonical: String,
        pretty: String,
    }

    fn hash_of(text: &str) -> ArgsHash {
        ArgsHash::of(&parse_object(text).expect("valid object"))
    }

    #[test]
    fn every_committed_vector_gives_pythons_canonical_text_and_hash() {
        let vectors: Vec<Vector> = serde_json::from_str(VECTORS).expect("fixture is JSON");
        assert!(vectors.len() >= 60, "only {} vectors", vectors.len());
        for v in &vectors {
            let params =
                parse_object(&v.params_json).unwrap_or_else(|e| panic!("{}: refused: {e}", v.name));
            assert_eq!(
                dumps_sorted(&PyValue::Dict(params.clone())),
                v.canonical,
                "{}",
                v.name
            );
            assert_eq!(ArgsHash::of(&params).as_str(), v.args_hash, "{}", v.name);
            assert_eq!(
                canon::canonical_sorted(&v.params_json).as_deref(),
                Ok(v.canonical.as_str()),
                "{}: the direct canonicaliser",
                v.name
            );
            assert_eq!(
                ArgsHash::of_json(&v.params_json).map(|h| h.to_string()),
                Ok(v.args_hash.clone()),
                "{}",
                v.name
            );
        }
    }

    #[test]
    fn the_aiparrot_example_has_the_hash_python_computes() {
        assert_eq!(
            hash_of(r#"{"b":1,"a":"é","c":[1.0,1e16,1e-5]}"#).as_str(),
            hex::encode(Sha256::digest(
                br#"{"a": "\u00e9", "b": 1, "c": [1.0, 1e+16, 1e-05]}"#
            ))
        );
    }

    #[test]
    fn random_documents_hash_as_python_hashes_them() {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/gen_args_hash_vectors.py"
        );
        let output = match std::process::Command::new("python3")
            .args([script, "--random", "300", "--seed", "20250101"])
            .output()
        {
            Ok(output) => output,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                eprintln!("skipping the Python cross-check: python3 is not on PATH");
                return;
            }
            Err(e) => panic!("could not run {script}: {e}"),
        };
        assert!(
            output.status.success(),
            "{script} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).expect("script prints UTF-8");
        let mut count = 0;
        for (line_no, line) in stdout.lines().enumerate() {
            let v: RandomVector = serde_json::from_str(line).expect("script prints JSON lines");
            let params = parse_object(&v.params_json)
                .unwrap_or_else(|e| panic!("line {line_no}: refused: {e}\n{}", v.params_json));
            let value = PyValue::Dict(params.clone());
            assert_eq!(
                dumps_sorted(&value),
                v.canonical,
                "line {line_no}: {}",
                v.params_json
            );
            assert_eq!(to_pretty_json(&value), v.pretty, "line {line_no}");
            assert_eq!(
                ArgsHash::of(&params).as_str(),
                v.args_hash,
                "line {line_no}"
            );
            assert_eq!(
                canon::canonical_sorted(&v.params_json).as_deref(),
                Ok(v.canonical.as_str()),
                "line {line_no}: the direct canonicaliser: {}",
                v.params_json
            );
            count += 1;
        }
        assert_eq!(count, 300);
    }

    #[test]
    fn key_order_and_spelling_do_not_change_the_hash() {
        let a = hash_of(r#"{"b":1,"a":"é","c":[1.0,1e16,1e-5]}"#);
        let b =
            hash_of(" { \"c\" : [ 1.00 , 1E+16 , 0.00001 ] , \"a\" : \"\\u00e9\" , \"b\" : 1 } ");
        assert_eq!(a, b);
    }

    #[test]
    fn values_python_tells_apart_hash_differently() {
        assert_ne!(hash_of(r#"{"n":1}"#), hash_of(r#"{"n":1.0}"#));
        assert_ne!(hash_of(r#"{"n":1}"#), hash_of(r#"{"n":true}"#));
        assert_ne!(hash_of(r#"{"n":0.0}"#), hash_of(r#"{"n":-0.0}"#));
        assert_ne!(hash_of(r#"{"s":"e\u0301"}"#), hash_of(r#"{"s":"é"}"#));
        assert_eq!(hash_of(r#"{"n":-0}"#), hash_of(r#"{"n":0}"#));
    }

    #[test]
    fn a_hash_is_64_lowercase_hex_characters() {
        let h = hash_of("{}");
        assert_eq!(
            h.as_str(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert_eq!(h.to_string(), h.as_str());
        assert_eq!(ArgsHash::parse(h.as_str()), Ok(h.clone()));
    }

    #[test]
    fn parse_refuses_anything_but_64_lowercase_hex_characters() {
        let good = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(ArgsHash::parse(""), Err(ArgsHashError::WrongLength(0)));
        assert_eq!(
            ArgsHash::parse(&good[1..]),
            Err(ArgsHashError::WrongLength(63))
        );
        assert_eq!(
            ArgsHash::parse(&format!("{good}\n")),
            Err(ArgsHashError::WrongLength(65))
        );
        assert_eq!(
            ArgsHash::parse(&good.to_uppercase()),
            Err(ArgsHashError::NotLowercaseHex {
                index: 5,
                found: 'F'
            })
        );
        let with_g = format!("g{}", &good[1..]);
        assert_eq!(
            ArgsHash::parse(&with_g),
            Err(ArgsHashError::NotLowercaseHex {
                index: 0,
                found: 'g'
            })
        );
        // 64 characters but more than 64 bytes.
        let with_e_acute = format!("é{}", &good[1..]);
        assert!(ArgsHash::parse(&with_e_acute).is_err());
    }

    #[test]
    fn serde_uses_the_plain_string_and_validates_on_the_way_in() {
        let h = hash_of(r#"{"a":1}"#);
        let json = serde_json::to_string(&h).expect("serialises");
        assert_eq!(json, format!("\"{h}\""));
        assert_eq!(serde_json::from_str::<ArgsHash>(&json).ok(), Some(h));
        assert!(serde_json::from_str::<ArgsHash>("\"abc\"").is_err());
    }
}
