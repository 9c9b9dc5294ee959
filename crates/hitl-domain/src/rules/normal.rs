//! The form in which a `deny` or an `ask` compares text: a tool name, an owner, an
//! object key, a string value. A tool runtime that reads `"Transfer "`, `"ＰＲＯＤ"` or
//! `"Admin"` may well take it for `transfer`, `prod` or `admin` (a case-insensitive
//! lookup, a `.strip()`, a validator that lower-cases), so a rule meant for one spelling
//! must catch them all: both sides are compared in Unicode NFKC (fullwidth and other
//! compatibility forms become the plain letter), case folded and with the white space
//! around them trimmed.
//!
//! [`looks_like`] is the other direction: two names that are *not* the same text but
//! that a person cannot tell apart (the UTS #39 skeleton: `trаnsfer` with a Cyrillic
//! `а` is `transfer`'s look-alike). Those are refused rather than compared.

use std::borrow::Cow;

use unicode_normalization::UnicodeNormalization;

/// `s` in the form rules compare: NFKC, case folded, surrounding white space trimmed.
///
/// Case folding is Unicode's full lower-case mapping plus the two folds where Python's
/// `str.casefold()` differs from it on common text (`ß` as `ss`, a final `ς` as `σ`).
/// Already-plain text (ASCII without capitals or surrounding space, most keys and tool
/// names) is returned as it is, without allocating.
pub fn normalise(s: &str) -> Cow<'_, str> {
    let trimmed = s.trim();
    if trimmed
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_uppercase())
    {
        return Cow::Borrowed(trimmed);
    }
    let mut folded = String::with_capacity(trimmed.len());
    for c in trimmed.nfkc() {
        match c {
            'ß' | 'ẞ' => folded.push_str("ss"),
            'ς' => folded.push('σ'),
            c => folded.extend(c.to_lowercase()),
        }
    }
    // Lower-casing can leave a sequence NFKC would write otherwise, and NFKC can turn a
    // compatibility space (U+3000) into one that trimming then removes: once more.
    let again: String = folded.nfkc().collect();
    Cow::Owned(again.trim().to_owned())
}

/// The UTS #39 skeleton of `s`'s normal form: equal skeletons are names a person cannot
/// tell apart.
pub fn skeleton(s: &str) -> String {
    unicode_security::skeleton(&normalise(s)).collect()
}

/// Whether `a` and `b` are look-alikes: the same skeleton, different normal forms.
pub fn looks_like(a: &str, b: &str) -> bool {
    skeleton(a) == skeleton(b) && normalise(a) != normalise(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_width_and_surrounding_space_fold_away() {
        for (spelled, plain) in [
            ("transfer", "transfer"),
            ("Transfer", "transfer"),
            ("transfer ", "transfer"),
            ("\u{3000}TRANSFER\t", "transfer"),
            ("ｔransfer", "transfer"),
            ("ＰＲＯＤ", "prod"),
            ("DROP_table", "drop_table"),
            ("Straße", "strasse"),
            ("ΟΔΟΣ", "οδοσ"),
            ("ﬁle", "file"),
        ] {
            assert_eq!(normalise(spelled), plain, "{spelled:?}");
        }
        assert!(matches!(normalise("amount"), Cow::Borrowed("amount")));
        assert_eq!(normalise("a b"), "a b", "inner space stays");
    }

    #[test]
    fn a_letter_from_another_script_is_a_look_alike_not_the_same_name() {
        let cyrillic = "tr\u{430}nsfer";
        assert_ne!(normalise(cyrillic), "transfer");
        assert!(looks_like(cyrillic, "transfer"));
        assert!(
            looks_like("\u{435}\u{445}\u{435}\u{441}", "exec"),
            "all Cyrillic"
        );
        assert!(!looks_like("Transfer", "transfer"), "the same name");
        assert!(!looks_like("transfers", "transfer"));
    }

    #[test]
    fn wildcards_keep_their_skeleton() {
        assert_eq!(skeleton("drop_*"), "drop_*");
        assert_eq!(skeleton("v?"), "v?");
    }
}
