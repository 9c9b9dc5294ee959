//! Grants (issue 35, AI-Parrot's `GrantGuard`): a human lets one agent run every call in
//! a [`Scope`] (`tool:deploy`, or `tool:*` for every tool) for one owner, until the grant
//! expires or is revoked. Checked after the `deny` rules and before a confirmation is
//! asked: "may this owner's agent call this tool at all?"; a grant never covers a call
//! its scope does not name ([`cover`]). Pure values; storage keeps them
//! (`storage::Grants`) so they survive restarts and a revoke holds on every replica at
//! once.

mod cover;

use std::fmt;
use std::sync::Arc;

use time::OffsetDateTime;

use super::ids::{ConfirmationId, GrantId, InvalidValue, OwnerId, ToolName, all_visible};
use super::question::Operator;

pub use cover::{Cover, ScopeMap, ScopeMapError, cover};

/// What a grant lets through: `kind:name`, such as `tool:deploy`, or `kind:*` for every
/// name of that kind. One checking constructor ([`Scope::parse`]), so a scope that
/// exists has a kind and a name and nothing hidden in either.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The whole text, as stored and shown.
    text: Arc<str>,
    /// Where the first `:` is: the kind is before it, the name after.
    colon: usize,
}

/// The name that stands for every name of a kind.
const WILDCARD: &str = "*";

/// The kind of scope a tool call asks for ([`Scope::for_tool`]).
pub const TOOL_KIND: &str = "tool";

impl Scope {
    /// Longest scope text, in characters: a kind, a colon and a tool name (at most
    /// [`ToolName::MAX_CHARS`]) fit with room to spare.
    pub const MAX_CHARS: usize = 200;

    /// Reads `kind:name`. The kind is a word of lowercase ASCII letters, digits, `_` and
    /// `-` (so `tool` and `Tool ` cannot name two kinds that read alike); the name is
    /// anything visible without surrounding spaces, split off at the first `:` (so it may
    /// hold colons itself); `*` is allowed only as the whole name.
    pub fn parse(s: &str) -> Result<Scope, InvalidValue> {
        Self::read(s, all_visible)
    }

    /// A scope read back from storage, checked as [`Scope::parse`] checks it but for
    /// invisible characters, of which only control characters are refused: as for the
    /// names of `ids`, a row written before the rules grew stricter must still load.
    pub fn from_stored(s: &str) -> Result<Scope, InvalidValue> {
        Self::read(s, |s| {
            if s.chars().any(char::is_control) {
                Err(invalid("must not contain control characters"))
            } else {
                Ok(())
            }
        })
    }

    fn read(
        s: &str,
        characters: fn(&str) -> Result<(), InvalidValue>,
    ) -> Result<Scope, InvalidValue> {
        let n = s.chars().count();
        if s.is_empty() {
            return Err(invalid(
                "must not be empty (write kind:name, such as tool:deploy)",
            ));
        }
        if n > Self::MAX_CHARS {
            return Err(InvalidValue(format!(
                "must be at most {} characters (got {n})",
                Self::MAX_CHARS
            )));
        }
        characters(s)?;
        let Some(colon) = s.find(':') else {
            return Err(invalid(
                "must be kind:name, such as tool:deploy (or tool:* for every tool)",
            ));
        };
        let (kind, name) = (&s[..colon], &s[colon + 1..]);
        if kind.is_empty() {
            return Err(invalid(
                "must name a kind before the colon, such as tool:deploy",
            ));
        }
        if !kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        {
            return Err(InvalidValue(format!(
                "the kind '{kind}' may hold only lowercase letters, digits, _ and - (such as tool)"
            )));
        }
        if name.is_empty() {
            return Err(invalid(
                "must name something after the colon, such as tool:deploy (or tool:* for every tool)",
            ));
        }
        if name.trim() != name {
            return Err(invalid("the name must not begin or end with a space"));
        }
        if name != WILDCARD && name.contains('*') {
            return Err(InvalidValue(format!(
                "may use * only as the whole name ({kind}:*, every {kind}), not within one"
            )));
        }
        Ok(Scope {
            text: s.into(),
            colon,
        })
    }

    /// The scope a call of `tool` asks for: `tool:<name>`, the name taken as it is. A
    /// tool name needs none of [`Scope::parse`]'s checks to be a scope one may ask about
    /// (it is visible and bounded already); one that `parse` would refuse (a `*` inside,
    /// a space at an end) is covered by `tool:*` only, since no grant can name it.
    pub fn for_tool(tool: &ToolName) -> Scope {
        Scope {
            text: format!("{TOOL_KIND}:{tool}").into(),
            colon: TOOL_KIND.len(),
        }
    }

    /// `kind:*` for this scope's kind: the other scope besides itself that covers it.
    pub fn wildcard(&self) -> Scope {
        Scope {
            text: format!("{}:{WILDCARD}", self.kind()).into(),
            colon: self.colon,
        }
    }

    /// Whether a grant of this scope lets a call asking for `other` through: `kind:*`
    /// covers every scope of its kind (itself too); any other scope covers only itself.
    pub fn covers(&self, other: &Scope) -> bool {
        self == other || (self.is_wildcard() && self.kind() == other.kind())
    }

    /// Whether this is `kind:*`.
    pub fn is_wildcard(&self) -> bool {
        self.name() == WILDCARD
    }

    pub fn kind(&self) -> &str {
        &self.text[..self.colon]
    }

    pub fn name(&self) -> &str {
        &self.text[self.colon + 1..]
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn invalid(why: &str) -> InvalidValue {
    InvalidValue(why.to_owned())
}

/// How a grant came to be: the question that asked a human for it, or an approval the
/// agent had asked for itself and presented once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantSource {
    /// A grant question (`POST /v1/grants`) a human approved.
    Asked { confirmation_id: ConfirmationId },
    /// An approval (an interaction of the agent's, answered yes) that the agent turned
    /// into this grant: how AI-Parrot's `GrantGuard` asks first and stores after. An
    /// interaction becomes a grant at most once (the database refuses a second).
    Interaction { interaction_id: String },
}

/// A durable grant: while live ([`Grant::is_live`]), every call of `agent` for `owner_id`
/// whose scope [`Scope::covers`] lets through passes the grant check.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub grant_id: GrantId,
    /// The agent that asked; only it (and the route's operators) may see or revoke it.
    pub agent: String,
    /// The human on whose behalf the agent acts.
    pub owner_id: OwnerId,
    pub scope: Scope,
    /// The route whose approvers granted it: they list and revoke it in their chat.
    pub route: String,
    /// Why the agent asked, as it said.
    pub reason: Option<String>,
    /// Who approved it.
    pub granted_by: Operator,
    pub created_at: OffsetDateTime,
    pub expires_at: OffsetDateTime,
    /// When it was revoked, if it was (before it expired).
    pub revoked_at: Option<OffsetDateTime>,
    /// The operator who revoked it; `None` with `revoked_at` set: the agent revoked it.
    pub revoked_by: Option<Operator>,
    pub source: GrantSource,
}

impl Grant {
    /// Whether the grant lets calls through at `now`: not revoked, and not yet expired
    /// (a grant expiring at `now` has ended).
    pub fn is_live(&self, now: OffsetDateTime) -> bool {
        self.revoked_at.is_none() && self.expires_at > now
    }
}

/// How long after a human answered yes an approval may be presented to become a grant
/// (`POST /v1/grants` with `interaction_id`): long enough for an agent to store what it
/// just asked, too short to dig out an old yes.
pub const PRESENTATION_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

/// What approving a grant allows, in plain words: "any deploy call", "any call of any
/// tool", or "anything in scope report:q3".
pub fn scope_in_words(scope: &Scope) -> String {
    match (scope.kind(), scope.is_wildcard()) {
        (TOOL_KIND, true) => "any call of any tool".to_owned(),
        (TOOL_KIND, false) => format!("any {} call", scope.name()),
        _ => format!("anything in scope {scope}"),
    }
}

/// The question a grant is asked with. Its `Scope:` and `Owner:` lines are what
/// [`approval_names`] checks when the approval is presented, the same lines AI-Parrot's
/// `GrantGuard` writes in its own question, so an approval of something else never
/// becomes a grant.
pub fn question(
    agent: &str,
    scope: &Scope,
    owner: &OwnerId,
    window: &str,
    latest_end: &str,
    reason: Option<&str>,
) -> String {
    let mut text = format!(
        "🔑 Grant request: approving lets {agent} run {} for {owner}, without asking, for {window} after your tap (until {latest_end} at the latest). Revoke it any time with /grants.\nScope: {scope}\nOwner: {owner}",
        scope_in_words(scope),
    );
    if let Some(reason) = reason {
        text.push_str(&format!("\nReason given by the agent: {reason}"));
    }
    text
}

/// Whether an approval's question names `scope` and `owner` on lines of their own
/// (`Scope: tool:deploy`, `Owner: alice`): what the human saw and said yes to.
pub fn approval_names(question: &str, scope: &Scope, owner: &OwnerId) -> bool {
    let line = |want: String| question.lines().any(|l| l.trim() == want);
    line(format!("Scope: {scope}")) && line(format!("Owner: {owner}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(s: &str) -> Scope {
        Scope::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn refused(s: &str) -> String {
        match Scope::parse(s) {
            Ok(scope) => panic!("{s} parsed as {scope:?}"),
            Err(InvalidValue(why)) => why,
        }
    }

    #[test]
    fn an_approval_names_the_scope_and_owner_only_on_lines_of_their_own() {
        let owner = OwnerId::parse("alice").unwrap();
        let q = question(
            "agent-a",
            &scope("tool:deploy"),
            &owner,
            "8 h",
            "17:00 UTC",
            None,
        );
        assert!(
            q.contains("approving lets agent-a run any deploy call for alice"),
            "{q}"
        );
        assert!(approval_names(&q, &scope("tool:deploy"), &owner));
        assert!(!approval_names(&q, &scope("tool:*"), &owner));
        assert!(!approval_names(
            &q,
            &scope("tool:deploy"),
            &OwnerId::parse("bob").unwrap()
        ));
        // AI-Parrot's GrantGuard words it its own way, with the same two lines.
        let parrot = "⚠️ Tool 'deploy' requires approval.\nScope: tool:deploy\nOwner: alice\nApproval window: 15.0 min\n\nDo you approve this action?";
        assert!(approval_names(parrot, &scope("tool:deploy"), &owner));
        // Named in passing is not named.
        assert!(!approval_names(
            "Scope: tool:deploy, Owner: alice",
            &scope("tool:deploy"),
            &owner
        ));
        assert_eq!(scope_in_words(&scope("tool:*")), "any call of any tool");
        assert_eq!(
            scope_in_words(&scope("report:q3")),
            "anything in scope report:q3"
        );
    }

    #[test]
    fn a_scope_is_a_kind_and_a_name() {
        let s = scope("tool:deploy");
        assert_eq!(
            (s.kind(), s.name(), s.as_str()),
            ("tool", "deploy", "tool:deploy")
        );
        assert!(!s.is_wildcard());
        let every = scope("tool:*");
        assert!(every.is_wildcard());
        assert_eq!(every.to_string(), "tool:*");
        // Split at the first colon: a name may hold colons, a kind never does.
        let s = scope("tool:mcp:github:create_issue");
        assert_eq!((s.kind(), s.name()), ("tool", "mcp:github:create_issue"));
        assert!(Scope::parse("resource-v2:db_prod").is_ok());
        assert!(Scope::parse("tool:déploy 🔧").is_ok());
    }

    #[test]
    fn a_malformed_scope_is_refused_saying_why() {
        assert!(refused("").contains("must not be empty"));
        assert!(refused("deploy").contains("must be kind:name"));
        assert!(refused(":deploy").contains("must name a kind"));
        assert!(refused("tool:").contains("must name something after the colon"));
        assert!(refused("Tool:deploy").contains("the kind 'Tool' may hold only"));
        assert!(refused(" tool:deploy").contains("may hold only"));
        assert!(refused("*:deploy").contains("may hold only"));
        assert!(refused("tool: deploy").contains("must not begin or end with a space"));
        assert!(refused("tool:deploy ").contains("must not begin or end with a space"));
        assert_eq!(
            refused("tool:dep*"),
            "may use * only as the whole name (tool:*, every tool), not within one"
        );
        assert!(refused("tool:**").contains("only as the whole name"));
        assert!(refused("tool:a\nb").contains("invisible or layout-changing"));
        assert!(refused("tool:dep\u{200b}loy").contains("(found \\u200b)"));
        // Read back from storage, only control characters are refused.
        assert!(Scope::from_stored("tool:dep\u{200b}loy").is_ok());
        assert!(Scope::from_stored("tool:a\nb").is_err());
        assert!(Scope::from_stored("tool").is_err());
    }

    #[test]
    fn a_scope_is_bounded_in_characters() {
        let longest = format!("tool:{}", "é".repeat(Scope::MAX_CHARS - 5));
        assert!(Scope::parse(&longest).is_ok());
        let longer = format!("{longest}é");
        assert_eq!(
            refused(&longer),
            format!("must be at most {} characters (got 201)", Scope::MAX_CHARS)
        );
    }

    #[test]
    fn a_wildcard_covers_its_kind_and_any_other_scope_only_itself() {
        let every = scope("tool:*");
        let deploy = scope("tool:deploy");
        assert!(every.covers(&deploy));
        assert!(every.covers(&every));
        assert!(deploy.covers(&deploy));
        assert!(!deploy.covers(&every), "one tool never covers them all");
        assert!(!deploy.covers(&scope("tool:deploy_all")));
        assert!(!deploy.covers(&scope("tool:Deploy")));
        assert!(!every.covers(&scope("resource:deploy")), "another kind");
        assert!(!every.covers(&scope("resource:*")));
    }

    #[test]
    fn a_tool_calls_scope_is_the_tool_under_its_kind() {
        let tool = ToolName::parse("deploy").unwrap();
        assert_eq!(Scope::for_tool(&tool), scope("tool:deploy"));
        assert_eq!(Scope::for_tool(&tool).wildcard(), scope("tool:*"));
        // A tool no grant can name is covered by tool:* alone.
        let odd = Scope::for_tool(&ToolName::parse("de*ploy").unwrap());
        assert_eq!(odd.as_str(), "tool:de*ploy");
        assert!(scope("tool:*").covers(&odd));
        let longest = ToolName::parse(&"x".repeat(ToolName::MAX_CHARS)).unwrap();
        assert!(Scope::parse(Scope::for_tool(&longest).as_str()).is_ok());
    }

    #[test]
    fn a_grant_is_live_until_it_expires_or_is_revoked() {
        let t = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let mut g = Grant {
            grant_id: GrantId::generate(),
            agent: "agent-a".into(),
            owner_id: OwnerId::parse("alice").unwrap(),
            scope: scope("tool:deploy"),
            route: "ops".into(),
            reason: None,
            granted_by: Operator {
                id: 1,
                username: None,
                name: "Op".into(),
            },
            created_at: t,
            expires_at: t + time::Duration::hours(1),
            revoked_at: None,
            revoked_by: None,
            source: GrantSource::Interaction {
                interaction_id: "i-1".into(),
            },
        };
        assert!(g.is_live(t));
        assert!(g.is_live(g.expires_at - time::Duration::milliseconds(1)));
        assert!(!g.is_live(g.expires_at), "ended at its expiry");
        g.revoked_at = Some(t + time::Duration::minutes(1));
        assert!(!g.is_live(t + time::Duration::minutes(2)));
    }
}
