//! Which calls a grant may be presented for (`grant_scope`): a grant a person gave for one
//! tool is never a key to another. A scope of kind `tool` covers the tool it names
//! (`tool:deploy` covers `deploy` and nothing else) or every tool (`tool:*`). A scope of
//! any other kind (`billing:write`) names no tool by itself: it covers a call only where
//! the configuration maps it to tool patterns ([`ScopeMap`], the `grant_scopes` of an
//! agent or a route), and a scope nobody mapped covers nothing.

use std::collections::BTreeMap;

use super::{Scope, TOOL_KIND};
use crate::ids::ToolName;
use crate::rules::Glob;

/// What scopes of kinds other than `tool` stand for: the tool patterns each is mapped to
/// (`"billing:write" = ["transfer", "refund_*"]`). A `tool:` scope has no entry (it names
/// its tool already), so no configuration can make `tool:read_report` cover `drop_table`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScopeMap(Vec<(Scope, Vec<Glob>)>);

/// Why a `grant_scopes` entry was refused: the key at fault (as written) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeMapError {
    pub key: String,
    pub reason: String,
}

impl ScopeMap {
    /// Reads `grant_scopes`: each key a scope ([`Scope::parse`]) of a kind other than
    /// `tool`, each value a non-empty list of tool patterns ([`Glob`], as a rule's
    /// `tools`).
    pub fn parse(entries: &BTreeMap<String, Vec<String>>) -> Result<ScopeMap, ScopeMapError> {
        let mut map = Vec::with_capacity(entries.len());
        for (key, patterns) in entries {
            let refused = |reason: String| ScopeMapError {
                key: key.clone(),
                reason,
            };
            let scope = Scope::parse(key).map_err(|e| refused(format!("is not a scope: {e}")))?;
            if scope.kind() == TOOL_KIND {
                return Err(refused(format!(
                    "a {TOOL_KIND}: scope covers the tool it names ({TOOL_KIND}:* every tool) and cannot be mapped; map scopes of other kinds, such as \"billing:write\""
                )));
            }
            if patterns.is_empty() {
                return Err(refused(
                    "maps to no tool: list the tools it covers, e.g. [\"transfer\", \"refund_*\"]"
                        .into(),
                ));
            }
            let globs = patterns
                .iter()
                .map(|p| Glob::parse(p).map_err(|e| refused(format!("'{p}': {e}"))))
                .collect::<Result<Vec<_>, _>>()?;
            map.push((scope, globs));
        }
        Ok(ScopeMap(map))
    }

    /// The patterns `scope` is mapped to, if it is mapped.
    pub fn patterns(&self, scope: &Scope) -> Option<&[Glob]> {
        self.0
            .iter()
            .find(|(s, _)| s == scope)
            .map(|(_, globs)| globs.as_slice())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How a presented scope covers a call's tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cover {
    /// A `tool:` scope naming the call's tool, or `tool:*`.
    Tool,
    /// A scope of another kind, mapped by `by` (`route 'ops'`, `agent 'billing-bot'`) to
    /// `pattern`, which the tool matches.
    Mapped { by: String, pattern: String },
}

impl Cover {
    /// How the record's reason says it: `tool:* covers drop_table`, or `billing:write
    /// covers transfer (grant_scopes of route 'ops': refund_*)`.
    pub fn describe(&self, scope: &Scope, tool: &ToolName) -> String {
        match self {
            Cover::Tool => format!("{scope} covers {tool}"),
            Cover::Mapped { by, pattern } => {
                format!("{scope} covers {tool} (grant_scopes of {by}: {pattern})")
            }
        }
    }
}

/// Whether a call of `tool` may present `scope`. `maps` are the configured
/// [`ScopeMap`]s, each with who configured it (`agent 'a'`, `route 'ops'`); a scope
/// counts where any of them maps it. The error says why not, naming the scope and the
/// tool.
pub fn cover(
    scope: &Scope,
    tool: &ToolName,
    maps: &[(String, &ScopeMap)],
) -> Result<Cover, String> {
    if scope.kind() == TOOL_KIND {
        return if scope.is_wildcard() || scope.name() == tool.as_str() {
            Ok(Cover::Tool)
        } else {
            Err(format!(
                "'{scope}' does not cover tool '{tool}': a {TOOL_KIND}: scope covers only the tool it names ({TOOL_KIND}:{tool} for this call) or every tool ({TOOL_KIND}:*)"
            ))
        };
    }
    let mut mapped = Vec::new();
    for (by, map) in maps {
        let Some(patterns) = map.patterns(scope) else {
            continue;
        };
        if let Some(p) = patterns.iter().find(|p| p.matches(tool.as_str())) {
            return Ok(Cover::Mapped {
                by: by.clone(),
                pattern: p.as_str().to_owned(),
            });
        }
        let listed: Vec<&str> = patterns.iter().map(Glob::as_str).collect();
        mapped.push(format!("{by} maps it to {}", listed.join(", ")));
    }
    if mapped.is_empty() {
        let whose: Vec<&str> = maps.iter().map(|(by, _)| by.as_str()).collect();
        Err(format!(
            "'{scope}' does not cover tool '{tool}': a scope of kind '{}' covers only the tools grant_scopes maps it to, and no grant_scopes (of {}) maps '{scope}'",
            scope.kind(),
            whose.join(" or ")
        ))
    } else {
        Err(format!(
            "'{scope}' does not cover tool '{tool}': {}",
            mapped.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> Scope {
        Scope::parse(s).unwrap()
    }

    fn tool(s: &str) -> ToolName {
        ToolName::parse(s).unwrap()
    }

    fn map(entries: &[(&str, &[&str])]) -> Result<ScopeMap, ScopeMapError> {
        ScopeMap::parse(
            &entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.iter().map(|p| p.to_string()).collect()))
                .collect(),
        )
    }

    #[test]
    fn a_tool_scope_covers_its_own_tool_or_with_a_star_every_tool_and_nothing_else() {
        assert_eq!(
            cover(&scope("tool:deploy"), &tool("deploy"), &[]),
            Ok(Cover::Tool)
        );
        assert_eq!(
            cover(&scope("tool:*"), &tool("drop_table"), &[]),
            Ok(Cover::Tool)
        );
        let e = cover(&scope("tool:deploy"), &tool("drop_table"), &[]).unwrap_err();
        assert!(
            e.starts_with("'tool:deploy' does not cover tool 'drop_table'")
                && e.contains("tool:drop_table for this call"),
            "{e}"
        );
        // Exactly the name: no other spelling, no prefix.
        for other in ["Deploy", "deploy_all", "deplo"] {
            assert!(
                cover(&scope("tool:deploy"), &tool(other), &[]).is_err(),
                "{other}"
            );
        }
        // A map cannot widen a tool scope: none can be written.
        let e = map(&[("tool:read_report", &["*"])]).unwrap_err();
        assert_eq!(e.key, "tool:read_report");
        assert!(e.reason.contains("cannot be mapped"), "{}", e.reason);
    }

    #[test]
    fn another_kind_covers_only_the_patterns_a_map_gives_it_and_unmapped_covers_nothing() {
        let route = map(&[("billing:write", &["transfer", "refund_*"])]).unwrap();
        let agent = map(&[("report:read", &["read_report"])]).unwrap();
        let maps = [
            ("agent 'a'".to_owned(), &agent),
            ("route 'ops'".to_owned(), &route),
        ];
        let billing = scope("billing:write");
        assert_eq!(
            cover(&billing, &tool("refund_card"), &maps),
            Ok(Cover::Mapped {
                by: "route 'ops'".into(),
                pattern: "refund_*".into()
            })
        );
        assert_eq!(
            Cover::Mapped {
                by: "route 'ops'".into(),
                pattern: "refund_*".into()
            }
            .describe(&billing, &tool("refund_card")),
            "billing:write covers refund_card (grant_scopes of route 'ops': refund_*)"
        );
        let e = cover(&billing, &tool("drop_table"), &maps).unwrap_err();
        assert_eq!(
            e,
            "'billing:write' does not cover tool 'drop_table': route 'ops' maps it to transfer, refund_*"
        );
        let e = cover(&scope("billing:read"), &tool("transfer"), &maps).unwrap_err();
        assert!(
            e.starts_with("'billing:read' does not cover tool 'transfer'")
                && e.contains("no grant_scopes (of agent 'a' or route 'ops') maps 'billing:read'"),
            "{e}"
        );
        // The kind's wildcard is a scope of its own: mapped only if written.
        assert!(cover(&scope("billing:*"), &tool("transfer"), &maps).is_err());
    }

    #[test]
    fn a_map_entry_must_be_a_scope_with_patterns_that_read() {
        assert!(
            map(&[("billing", &["x"])])
                .unwrap_err()
                .reason
                .contains("is not a scope")
        );
        assert!(
            map(&[("billing:write", &[])])
                .unwrap_err()
                .reason
                .contains("maps to no tool")
        );
        let e = map(&[("billing:write", &["refund_[a]"])]).unwrap_err();
        assert!(e.reason.starts_with("'refund_[a]': "), "{}", e.reason);
        assert!(map(&[]).unwrap().is_empty());
    }
}
