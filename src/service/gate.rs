//! Before anyone is asked: what settles a call, in one order, written once here (and as
//! the table "What comes first" in docs/rules.md), for every way a call comes in:
//!
//! 1. a `deny` rule: cancelled, `via: "rule"`, whatever grant the call presents;
//! 2. the grant the call presents (`grant_scope`): none live that covers it, cancelled;
//!    one that is enough (`require_grant_only`), confirmed; otherwise on;
//! 3. a live window for the identical call: confirmed;
//! 4. an `allow` rule: confirmed (an `ask` rule, or none, goes on);
//! 5. a person.
//!
//! Before any of it, the scope a call presents must cover the call's tool
//! ([`Service::presented_grant`], refused otherwise): a grant a person gave for one tool
//! is never a key to another. A rules' dry run changes nothing here: its `deny` is an
//! `ask` ([`super::judge::Judgement::applied`]), so the call goes on as if there were no
//! rules, and the record says what the rules would have done.

use time::OffsetDateTime;

use super::grants::GrantCheck;
use super::{Service, ServiceError};
use crate::config::{Agent, Route};
use crate::domain::grant::{self, Cover};
use crate::domain::ids::{CallbackToken, ToolName};
use crate::domain::question::{Question, Status, Via, Window, rfc3339};
use crate::domain::rules::Effect;

/// A `grant_scope` checked against the call it came with: it covers the call's tool.
#[derive(Debug, Clone)]
pub(super) struct PresentedGrant {
    pub check: GrantCheck,
    /// How the scope covers the tool, said in the record's reason.
    cover: Cover,
}

/// What settled a call before anyone was asked.
#[derive(Debug)]
pub(super) enum Settled {
    /// A rule's `deny` (first of all) or `allow` (after the grant and the window).
    Rule(Effect),
    /// The grant check: no live grant covering the call (`cancelled`), or one that is
    /// enough (`confirmed`); `reason` names the scope, and the grant.
    Grant { status: Status, reason: String },
    /// A live window for the identical call.
    Window(Window),
}

/// Whether a path looks for a live window (step 3): a confirmation does; an interaction
/// carrying a call is not confirmed by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LookForWindow {
    Yes,
    No,
}

impl Service {
    /// `check` as the call of `tool` to `route` presents it, or the 422 saying why its
    /// scope does not cover `tool` (naming both). Nothing is read or stored.
    pub(super) fn presented_grant(
        &self,
        agent: &Agent,
        route: &Route,
        tool: &ToolName,
        check: &GrantCheck,
    ) -> Result<PresentedGrant, ServiceError> {
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

    /// What settles `record` before anyone is asked, in the order of this module's
    /// header; `effect` is the rules' (judged once by the caller), `None`: a person is
    /// asked. The grant and the window are read only when the order reaches them: a
    /// call without `grant_scope` reads no grant, a `deny` reads nothing.
    pub(super) async fn before_asking(
        &self,
        record: &Question,
        effect: Effect,
        grant: Option<&PresentedGrant>,
        window: LookForWindow,
        now: OffsetDateTime,
    ) -> Result<Option<Settled>, ServiceError> {
        if effect == Effect::Deny {
            return Ok(Some(Settled::Rule(Effect::Deny)));
        }
        if let Some(presented) = grant
            && let Some(settled) = self.grant_check(record, presented, now).await?
        {
            return Ok(Some(settled));
        }
        if window == LookForWindow::Yes
            && let Some(window) = self.store.live_window(&record.window_key(), now).await?
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
            .store
            .live_grant_covering(&record.agent, &record.owner_id, &check.scope, now)
            .await?;
        Ok(match (live, check.sufficient) {
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
    /// Ends `record` as settled: a confirmation, never asked (its callback token is
    /// never shown). An interaction ends by a rule only, through
    /// [`super::create::end_by_rule`], with the answer it settles on.
    pub(super) fn end(self, record: &mut Question, now: OffsetDateTime) {
        let (status, via, reason) = match self {
            Settled::Rule(effect) => {
                super::create::end_by_rule(record, effect, now, None);
                return;
            }
            Settled::Grant { status, reason } => (status, Via::Grant, reason),
            Settled::Window(window) => (Status::Confirmed, Via::Window, window.reason()),
        };
        record.status = status;
        record.via = Some(via);
        record.callback_token = CallbackToken::never_shown();
        record.reason = reason;
        record.decided_at = Some(now);
    }
}
