//! Before anyone is asked: what settles a call, in one order, written once here (and as
//! the table "What comes first" in docs/rules.md), for every way a call comes in:
//!
//! 1. a `deny` rule: cancelled, `via: "rule"`, whatever grant the call presents;
//! 2. the grant the call presents (`grant_scope`): none live that covers it, cancelled
//!    (on, when the grant is `grant_optional`); one that is enough
//!    (`require_grant_only`), confirmed; otherwise on;
//! 3. a live window for the identical call: confirmed;
//! 4. an `allow` rule: confirmed (an `ask` rule, or none, goes on);
//! 5. a person.
//!
//! Before any of it, the scope a call presents must cover the call's tool
//! ([`PresentedGrant::new`], refused otherwise): a grant a person gave for one tool
//! is never a key to another. A rules' dry run changes nothing here: its `deny` is an
//! `ask` ([`super::judge::Judgement::applied`]), so the call goes on as if there were no
//! rules, and the record says what the rules would have done.

use std::sync::Arc;

use serde_json::Value;
use time::OffsetDateTime;

use super::ServiceError;
use super::grants::GrantCheck;
use super::judge::{Judgement, Origin, Rules, rule_reason};
use crate::config::{Agent, Route};
use crate::domain::grant::{self, Cover};
use crate::domain::ids::ToolName;
use crate::domain::interaction::InteractionType;
use crate::domain::question::{Question, Status, UnaskedEnd, Via, Window, rfc3339};
use crate::domain::rules::Effect;
use crate::storage::{Grants, Windows};

/// A `grant_scope` checked against the call it came with: it covers the call's tool.
#[derive(Debug, Clone)]
pub(super) struct PresentedGrant {
    pub check: GrantCheck,
    /// How the scope covers the tool, said in the record's reason.
    cover: Cover,
}

impl PresentedGrant {
    /// `check` as the call of `tool` to `route` presents it, or the 422 saying why its
    /// scope does not cover `tool` (naming both). Nothing is read or stored.
    pub(super) fn new(
        agent: &Agent,
        route: &Route,
        tool: &ToolName,
        check: &GrantCheck,
    ) -> Result<Self, ServiceError> {
        let maps = [
            (format!("agent '{}'", agent.name), &agent.grant_scopes),
            (format!("route '{}'", route.name), &route.grant_scopes),
        ];
        let cover =
            grant::cover(&check.scope, tool, &maps).map_err(ServiceError::ScopeNotCovering)?;
        Ok(PresentedGrant {
            check: check.clone(),
            cover,
        })
    }
}

/// What settled a call before anyone was asked.
#[derive(Debug)]
enum Settled {
    /// A rule's `deny` (first of all) or `allow` (after the grant and the window).
    Rule(Effect),
    /// The grant check: no live grant covering the call (`cancelled`), or one that is
    /// enough (`confirmed`); `reason` names the scope, and the grant.
    Grant { status: Status, reason: String },
    /// A live window for the identical call.
    Window(Window),
}

/// The gates a call passes before anyone is asked (the steps above): a confirmation
/// passes every one; an interaction carrying a call passes the rules only (it presents
/// no grant, and its agent keeps its own window); one without a call passes none, as no
/// rule is about what it asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gates {
    /// Steps 1 and 4: the rules judge the call.
    pub rules: bool,
    /// Step 2: the grant the call presents, when it presents one.
    pub grant: bool,
    /// Step 3: a live window for the identical call.
    pub window: bool,
}

impl Gates {
    pub const ALL: Gates = Gates {
        rules: true,
        grant: true,
        window: true,
    };
    pub const RULES: Gates = Gates {
        rules: true,
        grant: false,
        window: false,
    };
    pub const NONE: Gates = Gates {
        rules: false,
        grant: false,
        window: false,
    };
}

/// A question past its gates: ended there (to be stored as it is), or on to a person.
/// The rules' judgement, holding a rate's gate, lives as long as this value: the caller
/// keeps it until the ended record is stored, and drops it before asking anyone.
pub(super) struct Admission<'a> {
    pub ended: bool,
    _judgement: Option<Judgement<'a>>,
}

/// The gates themselves: the rules in force, and the windows and grants they read.
pub(super) struct Gate {
    rules: Arc<Rules>,
    windows: Arc<dyn Windows>,
    grants: Arc<dyn Grants>,
}

impl Gate {
    pub(super) fn new(
        rules: Arc<Rules>,
        windows: Arc<dyn Windows>,
        grants: Arc<dyn Grants>,
    ) -> Self {
        Gate {
            rules,
            windows,
            grants,
        }
    }

    /// The rules in force ([`super::judge`]).
    pub(super) fn rules(&self) -> &Rules {
        &self.rules
    }

    /// The one admission of a new question: `record` passes `gates` in the order of this
    /// module's header (the rules judge its call, and the record keeps their verdict);
    /// what settles it ends it here ([`Question::end_at_creation`]).
    pub(super) async fn admit(
        &self,
        record: &mut Question,
        gates: Gates,
        grant: Option<&PresentedGrant>,
        now: OffsetDateTime,
    ) -> Result<Admission<'_>, ServiceError> {
        let judgement = if gates.rules {
            let judgement = self
                .rules
                .judge(
                    &record.agent,
                    &record.route,
                    &record.tool,
                    &record.owner_id,
                    &record.params_json,
                    Origin::of(record),
                    now,
                )
                .await?;
            record.rule = judgement.verdict.clone();
            Some(judgement)
        } else {
            None
        };
        let effect = judgement.as_ref().map_or(Effect::Ask, Judgement::applied);
        let ending = self
            .before_asking(record, effect, gates, grant, now)
            .await?
            .and_then(|settled| settled.ending(record));
        let ended = ending.is_some();
        if let Some(ending) = ending {
            record.end_at_creation(ending, now);
        }
        Ok(Admission {
            ended,
            _judgement: judgement,
        })
    }

    /// What settles `record` before anyone is asked, in the order of this module's
    /// header, through `gates` only; `effect` is the rules' (judged once by
    /// [`Self::admit`]; `ask` when the rules are no gate of it), `None`: a person is
    /// asked. The grant and the window are read only when the order reaches them: a
    /// call without `grant_scope` reads no grant, a `deny` reads nothing.
    async fn before_asking(
        &self,
        record: &Question,
        effect: Effect,
        gates: Gates,
        grant: Option<&PresentedGrant>,
        now: OffsetDateTime,
    ) -> Result<Option<Settled>, ServiceError> {
        if effect == Effect::Deny {
            return Ok(Some(Settled::Rule(Effect::Deny)));
        }
        if gates.grant
            && let Some(presented) = grant
            && let Some(settled) = self.grant_check(record, presented, now).await?
        {
            return Ok(Some(settled));
        }
        if gates.window
            && let Some(window) = self.windows.live_window(&record.window_key(), now).await?
        {
            return Ok(Some(Settled::Window(window)));
        }
        Ok((effect == Effect::Allow).then_some(Settled::Rule(Effect::Allow)))
    }

    /// The grant check (step 2): `None` when the call goes on (a live grant that is not
    /// enough by itself).
    async fn grant_check(
        &self,
        record: &Question,
        presented: &PresentedGrant,
        now: OffsetDateTime,
    ) -> Result<Option<Settled>, ServiceError> {
        let check = &presented.check;
        let live = self
            .grants
            .live_grant_covering(&record.agent, &record.owner_id, &check.scope, now)
            .await?;
        Ok(match (live, check.sufficient) {
            (None, _) if check.optional => None,
            (None, _) => Some(Settled::Grant {
                status: Status::Cancelled,
                reason: format!("no grant for {} (owner {})", check.scope, record.owner_id),
            }),
            (Some(g), true) => Some(Settled::Grant {
                status: Status::Confirmed,
                reason: format!(
                    "allowed by grant {} ({} for {}, granted by {}, until {}): {}",
                    g.grant_id,
                    g.scope,
                    g.owner_id,
                    g.granted_by,
                    rfc3339(g.expires_at),
                    presented.cover.describe(&check.scope, &record.tool),
                ),
            }),
            (Some(_), false) => None,
        })
    }
}

impl Settled {
    /// How `record` ends as settled; `None`: it goes on to a person after all (an
    /// `allow` rule settles only an approval among interactions: a form still needs a
    /// person to fill it).
    fn ending(self, record: &Question) -> Option<UnaskedEnd> {
        let (status, via, reason) = match self {
            Settled::Rule(effect) => return rule_ending(record, effect),
            Settled::Grant { status, reason } => (status, Via::Grant, reason),
            Settled::Window(window) => (Status::Confirmed, Via::Window, window.reason()),
        };
        Some(UnaskedEnd {
            status,
            via,
            reason,
            result: None,
        })
    }
}

/// How the rules end `record` (`effect` is `allow` or `deny`): a confirmation is
/// confirmed or cancelled; an interaction's call is completed, an approval on the rules'
/// yes or no, any other kind (by a `deny` only) on null, as nothing was answered.
fn rule_ending(record: &Question, effect: Effect) -> Option<UnaskedEnd> {
    let (status, result) = match (&record.interaction, effect) {
        (None, Effect::Allow) => (Status::Confirmed, None),
        (None, _) => (Status::Cancelled, None),
        (Some(i), Effect::Deny) => (
            Status::Completed,
            Some(match i.kind {
                InteractionType::Approval => Value::Bool(false),
                _ => Value::Null,
            }),
        ),
        (Some(i), Effect::Allow) if i.kind == InteractionType::Approval => {
            (Status::Completed, Some(Value::Bool(true)))
        }
        (Some(_), _) => return None,
    };
    Some(UnaskedEnd {
        status,
        via: Via::Rule,
        reason: record.rule.as_ref().map_or_else(
            || "decided before asking by the rules".to_owned(),
            rule_reason,
        ),
        result,
    })
}
