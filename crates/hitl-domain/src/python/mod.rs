//! The Python-compatibility port: tool parameters seen, hashed and shown exactly as
//! AI-Parrot's Python sees, hashes and shows them.
//!
//! AI-Parrot decides whether a confirmation window covers a call by hashing
//! `json.dumps(params, sort_keys=True, default=str)` of what `json.loads` made of the
//! agent's text, and renders the operator's briefing with Python's `str.format`. A
//! byte of difference is a window that never matches or a briefing that says something
//! else, so these modules port CPython 3.11 rather than imitate it; the tests check them
//! against vectors python3 wrote (`tests/fixtures/args_hash_vectors.json`,
//! `briefing_cases.json`) and against python3 itself where it is installed.
//!
//! The args hash and the briefing (`domain::args_hash`, `domain::briefing`) stand on this
//! port; of the rest of the domain it uses only `domain::text`, to show a repeated key.

/// `json.dumps(json.loads(text), sort_keys=True)` written in one pass over
/// the text, byte for byte the same as [`json`]'s round trip.
pub mod canon;
/// `repr(float)`, as `json.dumps` and `repr()` print a float
/// (`Objects/floatobject.c`, `Python/pystrtod.c`, the shortest digits of
/// `Python/dtoa.c`).
pub mod float_repr;
/// `str.format`, `format()`, `str()`, `repr()` and `ascii()`
/// (`Objects/stringlib/unicode_format.h`, `Python/formatter_unicode.c`,
/// `Python/pystrtod.c`, the `repr` of `str`, `list` and `dict` in `Objects/`, and
/// `Objects/unicodectype.c`), one file each.
pub mod format;
/// `json.loads` and `json.dumps` (`Lib/json/decoder.py`, `scanner.py`,
/// `encoder.py` and their C accelerators in `Modules/_json.c`), plus the strict reading
/// that finds a repeated key.
pub mod json;
/// A JSON document as Python holds it (`int` at any length, `dict` in
/// insertion order with a repeated key keeping its first position and last value).
pub mod value;
