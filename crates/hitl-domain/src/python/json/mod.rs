//! JSON read and written exactly as Python's `json` module does it.
//!
//! AI-Parrot decides whether a confirmation window covers a call by hashing
//! `json.dumps(params, sort_keys=True, default=str)`, where `params` is what
//! `json.loads` made of the agent's text. To compute the same hash we must decode to the
//! same Python values (exact big integers, correctly rounded floats, dicts that keep the
//! first position and last value of a repeated key) and print them back with the same
//! bytes (`", "`/`": "` separators, ASCII escapes, `float.__repr__`).
//!
//! The parser is stricter than Python where Python is lax in ways an agent has no
//! business relying on: `NaN`/`Infinity` literals and lone surrogates are refused, and so
//! is nesting deeper than [`MAX_DEPTH`], so hostile input can neither smuggle values that
//! have no faithful representation nor exhaust the stack. Each file names the CPython
//! source it follows.

/// `json.loads`, as `Lib/json/decoder.py` (`JSONObject`, `JSONArray`,
/// `py_scanstring`) and `Lib/json/scanner.py` (`_scan_once`, `NUMBER_RE`) read a text
/// (`Modules/_json.c` is the same in C); and [`repeated_key`], the strict reading.
mod decoder;
/// `json.dumps`, as `Lib/json/encoder.py` and `Modules/_json.c`'s encoder
/// (`encoder_listencode_*`, `py_encode_basestring_ascii`, `py_encode_basestring`)
/// write it, with the two settings used here: the canonical `sort_keys=True` text and
/// the `indent=2, ensure_ascii=False` text shown to operators. Floats are written by
/// [`float_repr`](super::float_repr).
mod encoder;
/// Why a text is refused, and at which byte.
mod error;
/// The repeated key the strict reading reports, and how it is shown.
mod repeat;

pub use decoder::{parse, parse_object, repeated_key};
pub use encoder::{dumps_sorted, dumps_sorted_dict, to_pretty_json};
pub(crate) use encoder::{write_json_float, write_str_ascii};
pub use error::{JsonError, JsonErrorKind};
pub use repeat::RepeatedKey;

/// Deepest nesting of arrays and objects [`parse`] accepts; the top-level container is
/// level 1. Tool parameters are shallow in practice, and the bound keeps every recursive
/// walk over a parsed value (here and in the rest of the domain) far from the stack limit.
pub const MAX_DEPTH: usize = 64;

/// Python 3.11+ refuses to convert longer digit strings to `int` (`sys.int_info
/// .default_max_str_digits`), and `json.loads` fails with it; we agree rather than hash
/// a value the agent's own Python could never have produced.
pub const MAX_INT_DIGITS: usize = 4300;
