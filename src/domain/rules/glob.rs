//! A rule's `tools` patterns: `*` for any run of characters (none included) and `?` for
//! exactly one, every other character standing for itself. Nothing more: a class (`[`,
//! `]`), an alternation (`{`, `}`) or an escape (`\`) is refused when the rule is loaded,
//! so a pattern never means more than it reads as.

use std::fmt;

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
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `tool` is matched by the whole pattern (not a part of it).
    pub fn matches(&self, tool: &str) -> bool {
        // The classic wildcard walk: on a mismatch, go back to the last `*` and let it
        // take one more character. At most pattern length x name length steps, and
        // names are short (a tool name is at most 128 characters).
        let pattern = &self.chars;
        let name: Vec<char> = tool.chars().collect();
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
}
