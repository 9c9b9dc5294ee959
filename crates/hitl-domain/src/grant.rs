//! Grants (issue 35, AI-Parrot's `GrantGuard`): a human lets one agent run every call in
//! a [`Scope`] (`tool:deploy`, or `tool:*` for every tool) for one owner, until the grant
//! expires or is revoked. Checked after the `deny` rules and before a confirmation is
//! asked: "may this owner's agent call this tool at all?"; a grant never covers a call
//! its scope does not name ([`cover`]). Pure values; storage keeps them
//! (`storage::Grants`) so they survive restarts and a revoke holds on every replica at
//! once.
//!
//! A grant is asked for as [`GrantTerms`], data the person is shown as the service words
//! it, and exists from the person's yes on exactly those terms ([`granted_by_tap`]).

mod cover;

use std::fmt;
use std::sync::Arc;

use time::OffsetDateTime;

use super::ids::{GrantId, InvalidValue, OwnerId, QuestionId, ToolName, all_visible};
use super::limits::MAX_WINDOW_SECONDS;
use super::question::{Operator, Question, Status, Via};
use super::text;

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

/// How a grant came to be: the question that asked a human for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrantSource {
    /// A grant question named by its record id. Never written since grant questions
    /// became interactions; read back for rows that may hold it.
    Asked { confirmation_id: QuestionId },
    /// A grant question (an interaction of the agent's, asked with [`GrantTerms`]) a
    /// person answered yes, or (before issue 46) an approval the agent presented. An
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

/// What approving a grant allows, in plain words: "any deploy call", "any call of any
/// tool", or "anything in scope report:q3".
pub fn scope_in_words(scope: &Scope) -> String {
    match (scope.kind(), scope.is_wildcard()) {
        (TOOL_KIND, true) => "any call of any tool".to_owned(),
        (TOOL_KIND, false) => format!("any {} call", scope.name()),
        _ => format!("anything in scope {scope}"),
    }
}

/// What a scope lets through, in words that do not repeat it (the terms show the scope
/// itself on the line before): bounded, whatever the scope's length.
pub fn scope_reach(scope: &Scope) -> &'static str {
    match (scope.kind(), scope.is_wildcard()) {
        (TOOL_KIND, true) => "every call of every tool",
        (TOOL_KIND, false) => "every call of this one tool",
        _ => "whatever this scope names",
    }
}

/// How long a grant lasts when the agent does not say: AI-Parrot's
/// `GrantConfig.window_seconds` default, 15 minutes.
pub const DEFAULT_WINDOW_SECONDS: u64 = 900;

/// The question of a grant asked for without a reason (`POST /v1/grants`): the terms
/// say the rest.
pub const NO_REASON: &str = "The agent asks for a grant (it gave no reason).";

/// The terms of a grant question (issue 46): the scope, the owner and how long, fixed
/// when the person is asked, shown to them on lines of the service's own (never cut),
/// and exactly what their yes stores ([`granted_by_tap`]). Data, never read out of the
/// agent's prose: a question asked without terms grants nothing, whatever it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantTerms {
    pub scope: Scope,
    pub owner_id: OwnerId,
    /// How long the grant lasts from the tap: what the agent asked, cut to the route's
    /// `max_grant_seconds` when the question was asked.
    pub window_seconds: u64,
    /// What the agent asked for when the route's cap cut it (`None`: as asked). An agent
    /// presenting the question may name either.
    pub requested_window_seconds: Option<u64>,
}

/// Why a `grant` object was refused: the field at fault, within the interaction
/// (`grant`, `grant.scope`, `default_response`, ...), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermsError {
    pub field: &'static str,
    pub reason: String,
}

/// Which term of a presented grant differs from the question's (see
/// [`GrantTerms::differs_from`]): the field, and what the question said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermsDiffer {
    pub field: &'static str,
    pub asked: String,
}

impl GrantTerms {
    /// The fields of a `grant` object.
    pub const FIELDS: &'static [&'static str] = &[
        "scope",
        "owner_id",
        "window_seconds",
        "requested_window_seconds",
    ];

    /// The most UTF-16 units the terms' values (the agent's name, the scope and the
    /// owner, each as Telegram is sent it: made visible and HTML-escaped) may take: with
    /// the terms' own words and the rest of the message, what a Telegram message can
    /// always show whole next to a question cut short. Longer terms are refused when
    /// asked (422), never cut.
    pub const MAX_SHOWN_UNITS: usize = 900;

    /// Reads a `grant` object (`{scope, owner_id, window_seconds}`); the terms a
    /// question is stored with also hold `requested_window_seconds` (see
    /// [`GrantTerms::capped`]). Unknown fields are refused: a term this service would
    /// not show must not pass as one the person approved.
    pub fn parse(v: &serde_json::Value) -> Result<GrantTerms, TermsError> {
        let refuse = |field: &'static str, reason: String| TermsError { field, reason };
        let Some(o) = v.as_object() else {
            return Err(refuse(
                "grant",
                "must be an object: {\"scope\", \"owner_id\", \"window_seconds\"}".into(),
            ));
        };
        if let Some(unknown) = o.keys().find(|k| !Self::FIELDS.contains(&k.as_str())) {
            return Err(TermsError {
                field: "grant",
                reason: format!(
                    "has no field '{unknown}' (its fields: scope, owner_id, window_seconds)"
                ),
            });
        }
        let text = |name: &'static str, field: &'static str| match o.get(name) {
            Some(serde_json::Value::String(s)) => Ok(s.as_str()),
            None | Some(serde_json::Value::Null) => Err(refuse(field, "is required".into())),
            Some(_) => Err(refuse(field, "must be a string".into())),
        };
        let scope =
            Scope::parse(text("scope", "grant.scope")?).map_err(|e| refuse("grant.scope", e.0))?;
        let owner_id = OwnerId::parse(text("owner_id", "grant.owner_id")?)
            .map_err(|e| refuse("grant.owner_id", e.0))?;
        let seconds = |name: &'static str, field: &'static str| match o.get(name) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(w) if (1..=MAX_WINDOW_SECONDS).contains(&w) => Ok(Some(w)),
                _ => Err(refuse(
                    field,
                    format!("must be a whole number of seconds from 1 to {MAX_WINDOW_SECONDS}"),
                )),
            },
        };
        let window_seconds =
            seconds("window_seconds", "grant.window_seconds")?.ok_or_else(|| {
                refuse(
                    "grant.window_seconds",
                    "is required: how long the grant lasts from the person's yes".into(),
                )
            })?;
        let requested_window_seconds =
            seconds("requested_window_seconds", "grant.requested_window_seconds")?;
        if requested_window_seconds.is_some_and(|r| r <= window_seconds) {
            return Err(refuse(
                "grant.requested_window_seconds",
                "is set by the service only, when the route's cap cut window_seconds".into(),
            ));
        }
        Ok(GrantTerms {
            scope,
            owner_id,
            window_seconds,
            requested_window_seconds,
        })
    }

    /// The terms of an interaction's `grant` (`None` when it has none): only an
    /// `approval` asks for a grant, and only a person's yes gives one, so terms on a
    /// question whose silence answers yes (`yes_on_silence`: `timeout_action: default`
    /// with `default_response: true`) are refused.
    pub fn of_interaction(
        grant: Option<&serde_json::Value>,
        approval: bool,
        yes_on_silence: bool,
    ) -> Result<Option<GrantTerms>, TermsError> {
        let Some(v) = grant.filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let terms = GrantTerms::parse(v)?;
        if !approval {
            return Err(TermsError {
                field: "grant",
                reason: "goes only with interaction_type \"approval\" (a grant is a yes or a no)"
                    .into(),
            });
        }
        if yes_on_silence {
            return Err(TermsError {
                field: "default_response",
                reason: "must not be true on a grant question with timeout_action \"default\": \
                         only a person's yes gives a grant, never silence"
                    .into(),
            });
        }
        Ok(Some(terms))
    }

    /// The terms as stored with the question (and echoed in its `interaction`).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "scope": self.scope.as_str(),
            "owner_id": self.owner_id.as_str(),
            "window_seconds": self.window_seconds,
        });
        if let Some(r) = self.requested_window_seconds {
            v["requested_window_seconds"] = r.into();
        }
        v
    }

    /// The window the agent asked for, before any cap.
    pub fn asked_window_seconds(&self) -> u64 {
        self.requested_window_seconds.unwrap_or(self.window_seconds)
    }

    /// The terms a route whose `max_grant_seconds` is `max` asks with: the window cut to
    /// it, and what was asked kept when it was cut.
    pub fn capped(&self, max: u64) -> GrantTerms {
        let asked = self.asked_window_seconds();
        let window_seconds = asked.min(max);
        GrantTerms {
            window_seconds,
            requested_window_seconds: (window_seconds < asked).then_some(asked),
            ..self.clone()
        }
    }

    /// Whether `other` asks the same (a repeat of the same question): the same scope,
    /// owner and window asked for, whatever a cap made of it.
    pub fn same_ask(&self, other: &GrantTerms) -> bool {
        self.scope == other.scope
            && self.owner_id == other.owner_id
            && self.asked_window_seconds() == other.asked_window_seconds()
    }

    /// The first term a presentation names differently from these, if any: the scope,
    /// the owner, or a window that is neither the one approved nor the one asked for
    /// (`None`: the presentation leaves the window to the question).
    pub fn differs_from(
        &self,
        scope: &Scope,
        owner: &OwnerId,
        window_seconds: Option<u64>,
    ) -> Option<TermsDiffer> {
        if *scope != self.scope {
            return Some(TermsDiffer {
                field: "scope",
                asked: self.scope.to_string(),
            });
        }
        if *owner != self.owner_id {
            return Some(TermsDiffer {
                field: "owner_id",
                asked: self.owner_id.to_string(),
            });
        }
        match window_seconds {
            Some(w) if w != self.window_seconds && w != self.asked_window_seconds() => {
                Some(TermsDiffer {
                    field: "window_seconds",
                    asked: self.window_seconds.to_string(),
                })
            }
            _ => None,
        }
    }

    /// The UTF-16 units the values of the terms take in Telegram (see
    /// [`GrantTerms::MAX_SHOWN_UNITS`]), `agent` being the agent the grant is for.
    pub fn shown_units(&self, agent: &str) -> usize {
        [agent, self.scope.as_str(), self.owner_id.as_str()]
            .iter()
            .map(|s| text::html_units(&text::visible(s, text::Layout::Line)))
            .sum()
    }
}

/// The grant a decided question stores in the same write as its decision: a grant
/// question (one asked with [`GrantTerms`]) that a person answered yes, on the terms it
/// was asked with, from the moment of that yes. `None` for every other outcome: a no, a
/// timeout (whatever its default), a withdrawal, any question without terms.
///
/// Its id is the question's ([`GrantId::of_question`]): one question, one grant, found
/// again from the question alone.
pub fn granted_by_tap(record: &Question) -> Option<Grant> {
    let i = record.interaction.as_deref()?;
    let terms = i.grant.as_ref()?;
    let yes = record.status == Status::Completed
        && record.via == Some(Via::Operator)
        && record.result == Some(serde_json::Value::Bool(true));
    if !yes {
        return None;
    }
    // A consensus (a route's quorum) settles with no one person named: the grant is
    // the last yes's, the answer that completed it.
    let by = record.decided_by.clone().or_else(|| {
        record
            .answers
            .iter()
            .rev()
            .filter(|a| !a.is_default && a.value == serde_json::Value::Bool(true))
            .find_map(|a| a.by.clone())
    })?;
    let at = record.decided_at?;
    Some(Grant {
        grant_id: GrantId::of_question(&record.id),
        agent: record.agent.clone(),
        owner_id: terms.owner_id.clone(),
        scope: terms.scope.clone(),
        route: record.route.clone(),
        // What the person read from the agent: its question (POST /v1/grants asks its
        // reason), none when it gave no reason.
        reason: (i.question != NO_REASON).then(|| i.question.clone()),
        granted_by: by,
        created_at: at,
        expires_at: at + std::time::Duration::from_secs(terms.window_seconds),
        revoked_at: None,
        revoked_by: None,
        source: GrantSource::Interaction {
            interaction_id: i.interaction_id.clone(),
        },
    })
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

    fn terms(v: serde_json::Value) -> Result<GrantTerms, TermsError> {
        GrantTerms::parse(&v)
    }

    #[test]
    fn grant_terms_are_read_as_data_and_refused_naming_the_field() {
        let t = terms(serde_json::json!({"scope": "tool:*", "owner_id": "carol",
                                         "window_seconds": 60}))
        .unwrap();
        assert_eq!(
            (t.scope.as_str(), t.owner_id.as_str(), t.window_seconds),
            ("tool:*", "carol", 60)
        );
        assert_eq!(GrantTerms::parse(&t.to_json()), Ok(t.clone()));
        for (v, field, why) in [
            (serde_json::json!("tool:*"), "grant", "must be an object"),
            (
                serde_json::json!({"scope": "tool:*", "owner_id": "c", "window_seconds": 1,
                                   "until": 9}),
                "grant",
                "has no field 'until'",
            ),
            (
                serde_json::json!({"owner_id": "c", "window_seconds": 1}),
                "grant.scope",
                "is required",
            ),
            (
                serde_json::json!({"scope": "deploy", "owner_id": "c", "window_seconds": 1}),
                "grant.scope",
                "must be kind:name",
            ),
            (
                serde_json::json!({"scope": "tool:x", "owner_id": 7, "window_seconds": 1}),
                "grant.owner_id",
                "must be a string",
            ),
            (
                serde_json::json!({"scope": "tool:x", "owner_id": "c"}),
                "grant.window_seconds",
                "is required",
            ),
            (
                serde_json::json!({"scope": "tool:x", "owner_id": "c", "window_seconds": 0}),
                "grant.window_seconds",
                "from 1 to",
            ),
            (
                serde_json::json!({"scope": "tool:x", "owner_id": "c", "window_seconds": 1.5}),
                "grant.window_seconds",
                "whole number",
            ),
            (
                serde_json::json!({"scope": "tool:x", "owner_id": "c", "window_seconds": 60,
                                   "requested_window_seconds": 60}),
                "grant.requested_window_seconds",
                "set by the service only",
            ),
        ] {
            let e = terms(v.clone()).expect_err(&v.to_string());
            assert_eq!(e.field, field, "{v}");
            assert!(e.reason.contains(why), "{v}: {}", e.reason);
        }
    }

    #[test]
    fn a_cap_cuts_the_window_and_keeps_what_was_asked() {
        let asked = terms(
            serde_json::json!({"scope": "tool:deploy", "owner_id": "alice",
                                             "window_seconds": 86_400}),
        )
        .unwrap();
        let cut = asked.capped(3600);
        assert_eq!(
            (cut.window_seconds, cut.requested_window_seconds),
            (3600, Some(86_400))
        );
        assert_eq!(cut.asked_window_seconds(), 86_400);
        assert!(cut.same_ask(&asked) && asked.same_ask(&cut));
        // Cut again under another cap: from what was asked, never from the cut.
        assert_eq!(cut.capped(7200).window_seconds, 7200);
        assert_eq!(
            asked.capped(100_000),
            asked,
            "a cap above the ask changes nothing"
        );
        assert_eq!(GrantTerms::parse(&cut.to_json()), Ok(cut.clone()));

        let (deploy, alice) = (scope("tool:deploy"), OwnerId::parse("alice").unwrap());
        assert_eq!(cut.differs_from(&deploy, &alice, None), None);
        assert_eq!(cut.differs_from(&deploy, &alice, Some(3600)), None);
        assert_eq!(cut.differs_from(&deploy, &alice, Some(86_400)), None);
        let d = cut.differs_from(&deploy, &alice, Some(3601)).unwrap();
        assert_eq!((d.field, d.asked.as_str()), ("window_seconds", "3600"));
        let d = cut.differs_from(&scope("tool:*"), &alice, None).unwrap();
        assert_eq!((d.field, d.asked.as_str()), ("scope", "tool:deploy"));
        let bob = OwnerId::parse("bob").unwrap();
        assert_eq!(
            cut.differs_from(&deploy, &bob, Some(3600)).unwrap().field,
            "owner_id"
        );
        let other = terms(
            serde_json::json!({"scope": "tool:deploy", "owner_id": "alice",
                                             "window_seconds": 3600}),
        )
        .unwrap();
        assert!(!cut.same_ask(&other), "asked for an hour, not a day");
    }

    #[test]
    fn terms_are_measured_as_telegram_is_sent_them() {
        let t = terms(serde_json::json!({"scope": "tool:a&b", "owner_id": "<é>",
                                         "window_seconds": 60}))
        .unwrap();
        // agent 5 + "tool:a&amp;b" 12 + "&lt;é&gt;" 9
        assert_eq!(t.shown_units("agent"), 26);
        let emoji = terms(serde_json::json!({"scope": "tool:🔧", "owner_id": "o",
                                             "window_seconds": 60}))
        .unwrap();
        assert_eq!(emoji.shown_units(""), 7 + 1, "an emoji is two UTF-16 units");
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
