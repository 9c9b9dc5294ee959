//! AI-Parrot's canonical parameters text, written straight from the agent's JSON text.
//!
//! [`json::dumps_sorted_dict`] of [`json::parse_object`] is the reference:
//! `json.dumps(json.loads(text), sort_keys=True, default=str)` through a Python value
//! tree. A window hit needs only the text, so this module writes the same bytes in one
//! pass over the input without building the tree: scalars and strings are written out
//! as they are read (an integer literal is already its own canonical text), and an
//! object whose keys are not in order has its members, each already written, moved into
//! Python's order at its closing brace.
//!
//! Every refusal is the reference's own: any text this reader does not accept is handed
//! to [`json::parse_object`], which produces the error (or, should this reader ever be
//! stricter than the reference, the canonical text). The reader never accepts a text the
//! reference refuses: it follows the same grammar, limits ([`MAX_DEPTH`],
//! [`MAX_INT_DIGITS`]) and refusals (non-standard literals, lone surrogates).

use std::cell::RefCell;

use crate::python::json::{
    self, JsonError, MAX_DEPTH, MAX_INT_DIGITS, write_json_float, write_str_ascii,
};

/// `json.dumps(json.loads(text), sort_keys=True, default=str)` for an object `text`:
/// byte for byte [`json::dumps_sorted_dict`] of [`json::parse_object`], and the same
/// error when that refuses `text`.
pub fn canonical_sorted(text: &str) -> Result<String, JsonError> {
    with_canonical_sorted(text, str::to_owned)
}

/// [`canonical_sorted`] handed to `f` from a per-thread buffer, so a caller that only
/// reads the text (the args hash) allocates nothing for it.
pub(crate) fn with_canonical_sorted<R>(
    text: &str,
    f: impl FnOnce(&str) -> R,
) -> Result<R, JsonError> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let result = scratch.run(text, f);
            scratch.shrink();
            result
        }
        // Only if `f` itself canonicalises: it gets buffers of its own.
        Err(_) => Scratch::default().run(text, f),
    })
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// A buffer that grew past this many bytes (a huge document) is not kept for the next
/// call, so one hostile request cannot pin memory on a worker thread.
const KEEP_BYTES: usize = 64 * 1024;

/// The buffers one canonicalisation writes into, reused from call to call.
#[derive(Default)]
struct Scratch {
    /// The canonical text.
    out: String,
    /// An object's members while they are put in order.
    moving: String,
    /// Decoded strings that had escapes (an object's keys, until its closing brace).
    decoded: String,
    /// The members of the objects being read, innermost last.
    members: Vec<Member>,
}

impl Scratch {
    fn run<R>(&mut self, text: &str, f: impl FnOnce(&str) -> R) -> Result<R, JsonError> {
        self.out.clear();
        self.decoded.clear();
        self.members.clear();
        let mut reader = Reader {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            scratch: self,
        };
        match reader.document() {
            Ok(()) => Ok(f(&self.out)),
            // The cold path: the reference says why the text is refused.
            Err(Refused) => {
                let dict = json::parse_object(text)?;
                Ok(f(&json::dumps_sorted_dict(&dict)))
            }
        }
    }

    fn shrink(&mut self) {
        let grown = self
            .out
            .capacity()
            .max(self.moving.capacity())
            .max(self.decoded.capacity());
        if grown > KEEP_BYTES || self.members.capacity() > KEEP_BYTES / 32 {
            *self = Scratch::default();
        }
    }
}

/// The text is not one this reader accepts; [`json::parse_object`] says why.
#[derive(Debug)]
struct Refused;

/// Where a decoded string is: in the input (it had no escapes) or in
/// [`Scratch::decoded`].
#[derive(Debug, Clone, Copy)]
enum Span {
    /// In the input, and printable ASCII only: written out as it is, between quotes.
    Plain(usize, usize),
    Input(usize, usize),
    Decoded(usize, usize),
}

/// How [`Reader::string`] treats each byte: [`PLAIN`] is printable ASCII other than
/// `"` and `\` (written as it is), [`STOP`] ends the plain run (`"`, `\`, a raw
/// control character), [`ESCAPED`] is kept but needs `\u` escaping on output (DEL and
/// every byte of a non-ASCII character).
const BYTE_CLASS: [u8; 256] = {
    let mut class = [PLAIN; 256];
    let mut b = 0;
    while b < 256 {
        class[b] = if b < 0x20 || b == b'"' as usize || b == b'\\' as usize {
            STOP
        } else if b >= 0x7f {
            ESCAPED
        } else {
            PLAIN
        };
        b += 1;
    }
    class
};
const PLAIN: u8 = 0;
const STOP: u8 = 1;
const ESCAPED: u8 = 2;

/// One member of an object being read.
#[derive(Debug, Clone, Copy)]
struct Member {
    /// The decoded key, which orders the members.
    key: Span,
    /// Where `"key": value` is in [`Scratch::out`].
    start: usize,
    end: usize,
}

struct Reader<'t, 's> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
    scratch: &'s mut Scratch,
}

impl Reader<'_, '_> {
    /// An object surrounded by nothing but whitespace.
    fn document(&mut self) -> Result<(), Refused> {
        self.skip_ws();
        if self.peek() != Some(b'{') {
            return Err(Refused);
        }
        self.object(1)?;
        self.skip_ws();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn rest(&self) -> &[u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// One value at `pos` (whitespace skipped), inside `depth` open containers.
    fn value(&mut self, depth: usize) -> Result<(), Refused> {
        match self.peek() {
            Some(b'{') => self.object(depth + 1),
            Some(b'[') => self.array(depth + 1),
            Some(b'"') => {
                let span = self.string()?;
                self.write_string(span);
                // A value's decoded text is written; only keys need theirs kept.
                if let Span::Decoded(start, _) = span {
                    self.scratch.decoded.truncate(start);
                }
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b't') => self.literal("true"),
            Some(b'f') => self.literal("false"),
            Some(b'n') => self.literal("null"),
            // `NaN`, `Infinity` and anything else: the reference refuses them.
            _ => Err(Refused),
        }
    }

    fn literal(&mut self, word: &'static str) -> Result<(), Refused> {
        if self.rest().starts_with(word.as_bytes()) {
            self.pos += word.len();
            self.scratch.out.push_str(word);
            Ok(())
        } else {
            Err(Refused)
        }
    }

    /// `[`, at `depth` counting itself.
    fn array(&mut self, depth: usize) -> Result<(), Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.pos += 1;
        self.scratch.out.push('[');
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.scratch.out.push(']');
            return Ok(());
        }
        loop {
            self.skip_ws();
            self.value(depth)?;
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.scratch.out.push_str(", ");
                }
                Some(b']') => {
                    self.pos += 1;
                    self.scratch.out.push(']');
                    return Ok(());
                }
                _ => return Err(Refused),
            }
        }
    }

    /// `{`, at `depth` counting itself.
    fn object(&mut self, depth: usize) -> Result<(), Refused> {
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        self.pos += 1;
        self.scratch.out.push('{');
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.scratch.out.push('}');
            return Ok(());
        }
        let first_member = self.scratch.members.len();
        let body = self.scratch.out.len();
        let decoded = self.scratch.decoded.len();
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(Refused);
            }
            if self.scratch.members.len() > first_member {
                self.scratch.out.push_str(", ");
            }
            let start = self.scratch.out.len();
            let key = self.string()?;
            self.write_string(key);
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(Refused);
            }
            self.pos += 1;
            self.scratch.out.push_str(": ");
            self.skip_ws();
            self.value(depth)?;
            let end = self.scratch.out.len();
            self.scratch.members.push(Member { key, start, end });
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(Refused),
            }
        }
        self.sort_members(first_member, body);
        self.scratch.members.truncate(first_member);
        self.scratch.decoded.truncate(decoded);
        self.scratch.out.push('}');
        Ok(())
    }

    /// Puts the members from `first` on, written from `body` on in [`Scratch::out`], in
    /// Python's order: keys by code point (which is UTF-8 byte order), and of a repeated
    /// key only the last value, as `json.loads` keeps it.
    fn sort_members(&mut self, first: usize, body: usize) {
        let Scratch {
            out,
            moving,
            decoded,
            members,
        } = &mut *self.scratch;
        let text = self.text;
        let key = |m: &Member| -> &str {
            match m.key {
                Span::Plain(s, e) | Span::Input(s, e) => text.get(s..e),
                Span::Decoded(s, e) => decoded.get(s..e),
            }
            .unwrap_or_default()
        };
        let Some(members) = members.get_mut(first..) else {
            return;
        };
        // Tool parameters written in order (by a `sort_keys` encoder) stay as written.
        if members.windows(2).all(|w| key(&w[0]) < key(&w[1])) {
            return;
        }
        // Stable: a repeated key's last value stays last among its equals.
        members.sort_by(|a, b| key(a).cmp(key(b)));
        moving.clear();
        moving.push_str(out.get(body..).unwrap_or_default());
        out.truncate(body);
        let mut written = false;
        for (i, m) in members.iter().enumerate() {
            if members.get(i + 1).is_some_and(|next| key(next) == key(m)) {
                continue;
            }
            if written {
                out.push_str(", ");
            }
            written = true;
            // `out` is ASCII, so every offset is a char boundary.
            out.push_str(moving.get(m.start - body..m.end - body).unwrap_or_default());
        }
    }

    /// A string at `pos` (the opening quote), decoded: in place when it has no escapes,
    /// else into [`Scratch::decoded`].
    fn string(&mut self) -> Result<Span, Refused> {
        self.pos += 1;
        let start = self.pos;
        let mut plain = true;
        loop {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(Refused);
            };
            match BYTE_CLASS[usize::from(b)] {
                PLAIN => self.pos += 1,
                ESCAPED => {
                    plain = false;
                    self.pos += 1;
                }
                _ => break,
            }
        }
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let end = self.pos - 1;
                Ok(if plain {
                    Span::Plain(start, end)
                } else {
                    Span::Input(start, end)
                })
            }
            Some(b'\\') => self.escaped_string(start),
            // A raw control character.
            _ => Err(Refused),
        }
    }

    /// The rest of a string from its first escape at `pos`; `start` is its first byte.
    fn escaped_string(&mut self, start: usize) -> Result<Span, Refused> {
        let text = self.text;
        let decoded = &mut self.scratch.decoded;
        let from = decoded.len();
        decoded.push_str(text.get(start..self.pos).ok_or(Refused)?);
        loop {
            let run = self.pos;
            while let Some(b) = self.bytes.get(self.pos).copied() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // Stops only on ASCII bytes, so on char boundaries.
            decoded.push_str(text.get(run..self.pos).ok_or(Refused)?);
            match self.bytes.get(self.pos).copied() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Span::Decoded(from, decoded.len()));
                }
                Some(b'\\') => {
                    let c = escape(self.bytes, &mut self.pos)?;
                    decoded.push(c);
                }
                _ => return Err(Refused),
            }
        }
    }

    fn write_string(&mut self, span: Span) {
        let s = match span {
            Span::Plain(s, e) => {
                // Nothing to escape: the common case, copied in one go.
                let out = &mut self.scratch.out;
                out.push('"');
                out.push_str(self.text.get(s..e).unwrap_or_default());
                out.push('"');
                return;
            }
            Span::Input(s, e) => self.text.get(s..e),
            Span::Decoded(s, e) => self.scratch.decoded.get(s..e),
        }
        .unwrap_or_default();
        write_str_ascii(&mut self.scratch.out, s);
    }

    /// A number, by the reference's grammar: an integer literal is its own canonical
    /// text (no leading zeros are allowed; only `-0` differs, as `0`), anything with a
    /// fraction or exponent is a float written as Python's `repr`.
    fn number(&mut self) -> Result<(), Refused> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(Refused);
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            // `-Infinity` and the like.
            _ => return Err(Refused),
        }
        let int_digits = self.pos - int_start;
        let mut is_float = false;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let from = self.pos;
            self.digits();
            if self.pos == from {
                return Err(Refused);
            }
            is_float = true;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            let from = self.pos;
            self.digits();
            if self.pos == from {
                return Err(Refused);
            }
            is_float = true;
        }
        let literal = self.text.get(start..self.pos).ok_or(Refused)?;
        let out = &mut self.scratch.out;
        if is_float {
            if !write_short_decimal(out, literal) {
                write_json_float(out, literal.parse::<f64>().map_err(|_| Refused)?);
            }
        } else if int_digits > MAX_INT_DIGITS {
            return Err(Refused);
        } else if literal == "-0" {
            out.push('0');
        } else {
            out.push_str(literal);
        }
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }
}

/// Python's `repr` of a float literal without an exponent whose repr is the literal
/// itself, trailing zeros of its fraction dropped (`2.50` is `2.5`, `-0.000` is
/// `-0.0`), written to `out`; `false`, writing nothing, for any other literal.
///
/// Why this is exact: a decimal of at most 15 significant digits (`DBL_DIG`) survives
/// the trip to the nearest double and back to 15 digits, so no other decimal of 15
/// digits or fewer reads as the same double, and the shortest round-tripping digits
/// that `repr` prints are the literal's own. `repr` writes them positionally for a
/// decimal exponent from -4 to 15, which bounds the leading zeros of `0.000ddd` to
/// three; such values are normal doubles, far from the subnormal range where the
/// `DBL_DIG` guarantee stops.
fn write_short_decimal(out: &mut String, literal: &str) -> bool {
    let (negative, unsigned) = match literal.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, literal),
    };
    let Some((int_part, fraction)) = unsigned.split_once('.') else {
        return false;
    };
    if !(int_part.bytes().all(|b| b.is_ascii_digit())
        && fraction.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    let fraction = fraction.trim_end_matches('0');
    let significant = if int_part == "0" {
        let leading_zeros = fraction.len() - fraction.trim_start_matches('0').len();
        if leading_zeros > 3 {
            return false;
        }
        fraction.len() - leading_zeros
    } else {
        int_part.len() + fraction.len()
    };
    if significant > 15 {
        return false;
    }
    if negative {
        out.push('-');
    }
    out.push_str(int_part);
    out.push('.');
    out.push_str(if fraction.is_empty() { "0" } else { fraction });
    true
}

/// The escape at `*pos` (the backslash), decoded, `*pos` moved past it; a surrogate
/// pair is one escape. Lone surrogates are refused, as the reference refuses them.
fn escape(bytes: &[u8], pos: &mut usize) -> Result<char, Refused> {
    let c = match bytes.get(*pos + 1).copied() {
        Some(b'"') => '"',
        Some(b'\\') => '\\',
        Some(b'/') => '/',
        Some(b'b') => '\u{8}',
        Some(b'f') => '\u{c}',
        Some(b'n') => '\n',
        Some(b'r') => '\r',
        Some(b't') => '\t',
        Some(b'u') => {
            let unit = hex4(bytes, *pos + 2)?;
            *pos += 6;
            let code = match unit {
                0xD800..=0xDBFF => {
                    // Only an immediately following `\u` low surrogate completes it.
                    if bytes.get(*pos..*pos + 2) != Some(b"\\u") {
                        return Err(Refused);
                    }
                    let low = hex4(bytes, *pos + 2)?;
                    if !(0xDC00..=0xDFFF).contains(&low) {
                        return Err(Refused);
                    }
                    *pos += 6;
                    0x10000 + ((u32::from(unit) - 0xD800) << 10) + (u32::from(low) - 0xDC00)
                }
                0xDC00..=0xDFFF => return Err(Refused),
                _ => u32::from(unit),
            };
            return char::from_u32(code).ok_or(Refused);
        }
        _ => return Err(Refused),
    };
    *pos += 2;
    Ok(c)
}

/// Four hex digits at `at`, either case.
fn hex4(bytes: &[u8], at: usize) -> Result<u16, Refused> {
    let digits = bytes.get(at..at + 4).ok_or(Refused)?;
    let mut unit: u16 = 0;
    for &b in digits {
        let digit = char::from(b).to_digit(16).ok_or(Refused)?;
        // Four hex digits always fit in u16.
        unit = (unit << 4) | digit as u16;
    }
    Ok(unit)
}

#[cfg(test)]
mod tests;
