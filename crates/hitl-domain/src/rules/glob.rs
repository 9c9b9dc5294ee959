//! A rule's `tools` patterns: `*` for any run of characters (none included) and `?` for
//! exactly one, every other character standing for itself. Nothing more: a class (`[`,
//! `]`), an alternation (`{`, `}`) or an escape (`\`) is refused when the rule is loaded,
//! so a pattern never means more than it reads as.
//!
//! An `allow` matches a tool's name as written ([`Glob::matches`]); a `deny` and an `ask`
//! match it in normal form ([`Glob::matches_normal`]: `Transfer`, `transfer ` and
//! `ｔransfer` are `transfer`, see [`super::normal`]). A name that only *looks* like one a
//! pattern names ([`Glob::looks_like`]: `trаnsfer` with a Cyrillic `а`) is refused before
//! any rule is read.

use std::fmt;

use super::normal::{normalise, skeleton};

/// Why a pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("an empty pattern matches no tool: write the tool's name, or `*` for every tool")]
    Empty,
    #[error(
        "`{0}` is not supported in a pattern (only `*`, any run of characters, and `?`, one \
         character): list each tool instead, e.g. tools = [\"deploy_api\", \"deploy_web\"]"
    )]
    Unsupported(char),
}

/// A checked `tools` pattern.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    /// As written, for messages and the fingerprint.
    text: String,
    /// The same, by character: `?` stands for one character, not one byte.
    chars: Vec<char>,
    /// In normal form (a compatibility character that becomes `*` or `?` there is a
    /// wildcard: the pattern matches more, never less).
    normal: Vec<char>,
    /// The normal form's UTS #39 skeleton (`*` and `?` are their own).
    skeleton: Vec<char>,
}

impl Glob {
    pub fn parse(text: &str) -> Result<Glob, GlobError> {
        if text.is_empty() {
            return Err(GlobError::Empty);
        }
        if let Some(c) = text
            .chars()
            .find(|c| matches!(c, '[' | ']' | '{' | '}' | '\\'))
        {
            return Err(GlobError::Unsupported(c));
        }
        Ok(Glob {
            text: text.to_owned(),
            chars: text.chars().collect(),
            normal: normalise(text).chars().collect(),
            skeleton: skeleton(text).chars().collect(),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `tool`, as written, is matched by the whole pattern (not a part of it).
    pub fn matches(&self, tool: &str) -> bool {
        wildcard(&self.chars, tool)
    }

    /// Whether `normal`, a tool name in normal form ([`normalise`]), is matched by the
    /// pattern in normal form.
    pub fn matches_normal(&self, normal: &str) -> bool {
        wildcard(&self.normal, normal)
    }

    /// Whether a tool whose normal form is `normal` and whose skeleton is `skeleton`
    /// ([`super::normal::skeleton`]) would pass for a name this pattern matches without
    /// being one: a look-alike.
    pub fn looks_like(&self, normal: &str, skeleton: &str) -> bool {
        wildcard(&self.skeleton, skeleton) && !self.matches_normal(normal)
    }
}

/// Whether `pattern` (`*` any run, `?` one character) matches the whole of `name`.
fn wildcard(pattern: &[char], name: &str) -> bool {
    // The classic wildcard walk: on a mismatch, go back to the last `*` and let it
    // take one more character. At most pattern length x name length steps, and
    // names are short (a tool name is at most 128 characters).
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0, 0);
    // Where to resume after the last `*`: the pattern just past it, and the first
    // name character it has not taken yet.
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = name.get(n) {
        match pattern.get(p) {
            Some('*') => {
                star = Some((p + 1, n));
                p += 1;
            }
            Some(&pc) if pc == '?' || pc == c => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((after, taken)) => {
                    star = Some((after, taken + 1));
                    p = after;
                    n = taken + 1;
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|&c| c == '*'))
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(text: &str) -> Glob {
        Glob::parse(text).unwrap()
    }

    #[test]
    fn a_pattern_without_wildcards_matches_only_that_name() {
        assert!(glob("deploy").matches("deploy"));
        assert!(!glob("deploy").matches("deploy_api"));
        assert!(!glob("deploy").matches("redeploy"));
        assert!(!glob("deploy").matches(""));
    }

    #[test]
    fn a_star_takes_any_run_of_characters_including_none() {
        assert!(glob("*").matches(""));
        assert!(glob("*").matches("anything at all"));
        assert!(glob("read_*").matches("read_"));
        assert!(glob("read_*").matches("read_report"));
        assert!(!glob("read_*").matches("unread_report"));
        assert!(glob("*_prod").matches("drop_table_prod"));
        assert!(glob("a*b*c").matches("abc"));
        assert!(glob("a*b*c").matches("a_b_b_c"));
        assert!(!glob("a*b*c").matches("a_b_b_c_d"));
        assert!(glob("**x").matches("x"));
    }

    #[test]
    fn a_question_mark_takes_exactly_one_character() {
        assert!(glob("v?").matches("v1"));
        assert!(glob("v?").matches("vé"));
        assert!(!glob("v?").matches("v"));
        assert!(!glob("v?").matches("v10"));
        assert!(glob("?*").matches("x"));
        assert!(!glob("?*").matches(""));
    }

    #[test]
    fn classes_alternations_escapes_and_empty_patterns_are_refused_by_character() {
        for c in ['[', ']', '{', '}', '\\'] {
            let text = format!("deploy{c}");
            assert_eq!(Glob::parse(&text), Err(GlobError::Unsupported(c)));
            assert!(
                GlobError::Unsupported(c)
                    .to_string()
                    .contains(&format!("`{c}`"))
            );
        }
        assert_eq!(Glob::parse(""), Err(GlobError::Empty));
    }

    #[test]
    fn in_normal_form_case_width_and_surrounding_space_do_not_count() {
        let g = glob("drop_*");
        for tool in ["DROP_table", "ｄｒｏｐ_table", "Drop_Users"] {
            assert!(!g.matches(tool), "{tool} as written");
            assert!(g.matches_normal(&normalise(tool)), "{tool}");
        }
        assert!(!glob("transfer").matches("transfer "));
        assert!(glob("transfer").matches_normal(&normalise(" transfer ")));
        assert!(glob("Transfer").matches_normal("transfer"));
        assert!(!g.matches_normal("dropper"));
    }

    #[test]
    fn a_look_alike_of_a_name_a_pattern_matches_is_told_apart_from_the_name() {
        let look =
            |pattern: &str, tool: &str| glob(pattern).looks_like(&normalise(tool), &skeleton(tool));
        assert!(look("transfer", "tr\u{430}nsfer"));
        assert!(look("drop_*", "dr\u{43e}p_users"));
        assert!(!look("transfer", "Transfer"), "the same name");
        assert!(!look("transfer", "refund"), "another name");
        assert!(!look("*", "tr\u{430}nsfer"), "`*` names no tool");
    }
}
