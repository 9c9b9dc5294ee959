//! Python's `str.format`, `format()`, `str()`, `repr()` and `ascii()` over JSON-decoded
//! values.
//!
//! AI-Parrot renders a confirmation briefing with
//! `template.format(tool=..., params=..., **params)`; the operator must read exactly the
//! text Python would have produced, so this module is a port of CPython 3.11
//! (`Objects/stringlib/unicode_format.h` for templates, `Python/formatter_unicode.c`
//! for format specs, `Python/pystrtod.c` for floats), not an imitation of it. The
//! briefing tests check it against python3. Where it deliberately fails where Python
//! would not, and how its work is bounded: docs/architecture.md ("Module notes"). Each
//! file names the CPython source it follows.

/// `format(value, spec)`, the format-spec mini-language for `str`,
/// `int` and `float` (`Python/formatter_unicode.c`).
mod format_spec;
/// `str.format` itself, the template and its replacement fields
/// (`Objects/stringlib/unicode_format.h`: `build_string`, `parse_field`,
/// `get_field_object`).
mod formatter;
/// A float as a spec asks for it (`Python/pystrtod.c`'s
/// `PyOS_double_to_string` over `Python/dtoa.c`'s digits); `repr(float)` itself is
/// [`float_repr`](super::float_repr).
mod pystrtod;
/// `str()`, `repr()` and `ascii()` of JSON values (`Objects/unicodeobject.c`'s
/// `unicode_repr`, `Objects/listobject.c`'s `list_repr`, `Objects/dictobject.c`'s
/// `dict_repr`, `Objects/longobject.c`'s limit on decimal digits).
mod repr;
/// The Unicode properties the port reads, `str.isprintable` and the
/// value of a decimal digit of any script (`Objects/unicodectype.c`, Python 3.11's
/// tables).
mod unicodectype;

pub use format_spec::format_value;
pub use formatter::format_template;
pub use repr::{py_ascii, py_repr, py_str};

/// Why a value or template could not be formatted. Reasons name the Python exception
/// and the rule, never a parameter value, so they are safe to log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// Malformed template or format spec, or a value Python refuses to show.
    #[error("ValueError: {0}")]
    Value(&'static str),
    /// A field names a parameter, or a dict key, that does not exist.
    #[error("KeyError: a field names a missing key")]
    Key,
    /// An index past the end of a list or string, or a positional field (`{0}`, `{}`):
    /// the briefing passes keyword arguments only.
    #[error("IndexError: {0}")]
    Index(&'static str),
    /// A spec or index that does not apply to the value's type.
    #[error("TypeError: {0}")]
    Type(&'static str),
    /// An integer too large for the requested presentation.
    #[error("OverflowError: {0}")]
    Overflow(&'static str),
    /// `{x.attr}`: attributes are never evaluated.
    #[error("attribute access in a field is not supported")]
    Attribute,
    /// `{x:c}` naming a code point a Rust string cannot hold (a lone surrogate).
    #[error("the character is a lone surrogate")]
    Surrogate,
    /// The text would be longer than the caller's bound, in characters.
    #[error("the text would exceed {0} characters")]
    TooLong(usize),
}

#[cfg(test)]
mod tests;
