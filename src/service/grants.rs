//! Grants (AI-Parrot's `GrantGuard`, FEAT-211): a human approves a *scope*
//! (`tool:deploy`, `tool:*`) for an owner for a bounded time, and while the grant lives
//! every call of the agent in that scope passes the grant check, which comes after the
//! `deny` rules and before the confirmation (the order is [`super::gate`]'s).
//!
//! A grant is always a grant question a person answered yes: an `approval` interaction
//! asked with [`GrantTerms`] (the scope, the owner, how long), by this service
//! ([`Service::ask_grant`], `POST /v1/grants`) or by the agent itself (`POST
//! /v1/interactions` with `interaction.grant`, how the Python package asks for
//! `GrantGuard`). The person is shown the terms on lines of the service's own, and the
//! grant is stored with their yes, in the same write, on exactly those terms
//! (`grant::granted_by_tap`). Presenting the question afterwards
//! ([`GrantBook::present`]) only finds that grant: nothing an agent says then, and
//! nothing written in a question's prose, makes or widens one. Grants are stored and read
//! from the database on every check: a revoke stops them at once on every replica.

use std::sync::Arc;

use serde_json::json;

use super::answer::{After, Judged, Refused, refuse_tap};
use super::{CommandReply, Destination, NewInteraction, Service, ServiceError, Tap, now};
use crate::config::Agent;
use crate::domain::grant::{self, Grant, GrantTerms, Scope};
use crate::domain::ids::{GrantId, OwnerId};
use crate::domain::interaction;
use crate::domain::question::{Question, rfc3339, window_duration};
use crate::metrics::Metrics;
use crate::storage::{Grants, Questions, StorageError};

/// A grant an agent asks for or presents (`POST /v1/grants`).
#[derive(Debug, Clone)]
pub struct GrantRequest {
    pub owner_id: OwnerId,
    pub scope: Scope,
    /// How long it should last: asked, cut to the route's `max_grant_seconds` (`None`:
    /// [`grant::DEFAULT_WINDOW_SECONDS`]); presented, the window the question was asked
    /// with (`None`: whatever it was).
    pub window_seconds: Option<u64>,
    pub route: Option<String>,
    pub reason: Option<String>,
}

/// The grant check a confirmation asks for (`grant_scope`).
#[derive(Debug, Clone)]
pub struct GrantCheck {
    pub scope: Scope,
    /// `require_grant_only`: a live grant confirms the call without window, `allow` rule
    /// or person (a `deny` rule still cancels it).
    pub sufficient: bool,
    /// `grant_optional`: no live grant covering the call does not cancel it; it goes
    /// on to the window, the `allow` rules and a person (an MCP gateway presents the
    /// grant a person may have given, and asks otherwise).
    pub optional: bool,
}

/// The grants as agents ask for them through the API, once they exist: read, presented,
/// checked and revoked (asking for one is a question, [`Service::ask_grant`]).
pub struct GrantBook<'a> {
    questions: &'a dyn Questions,
    grants: &'a dyn Grants,
    metrics: &'a Metrics,
}

impl Service {
    /// The grants (`/v1/grants`).
    pub fn grants(&self) -> GrantBook<'_> {
        GrantBook {
            questions: self.store.as_ref(),
            grants: self.store.as_ref(),
            metrics: &self.metrics,
        }
    }
}

impl GrantBook<'_> {
    /// The grant a person's yes to `record` stored, if it is a grant question answered
    /// yes (`None` for any other question or answer).
    pub async fn of_question(&self, record: &Question) -> Result<Option<Grant>, ServiceError> {
        if record
            .interaction
            .as_ref()
            .and_then(|i| i.grant.as_ref())
            .is_none()
        {
            return Ok(None);
        }
        Ok(self.grants.grant(&GrantId::of_question(&record.id)).await?)
    }

    /// The grant that the grant question `interaction_id` of `agent` stored when a person
    /// answered it yes, if `req` names it as it was asked: the same scope and owner, and
    /// no window but the one approved (or the one the agent asked for, before the route
    /// cut it). Nothing is written: the grant exists from the yes, and this only hands
    /// it to the agent that asked (a presentation names nothing new, so a second one
    /// answers the same).
    pub async fn present(
        &self,
        agent: &Agent,
        interaction_id: &str,
        req: &GrantRequest,
    ) -> Result<Grant, ServiceError> {
        let refused = |field: &str, reason: String| ServiceError::GrantRefused {
            field: field.to_owned(),
            reason,
        };
        let record = self
            .questions
            .find_interaction(&agent.name, interaction_id)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let Some(terms) = record.interaction.as_deref().and_then(|i| i.grant.as_ref()) else {
            return Err(refused(
                "interaction_id",
                "is not a grant question: it was asked without grant terms, so no answer to it \
                 grants anything, whatever its text says (ask with POST /v1/grants, or send the \
                 interaction with a `grant` object)"
                    .into(),
            ));
        };
        if let Some(d) = terms.differs_from(&req.scope, &req.owner_id, req.window_seconds) {
            let approved = match d.field {
                "window_seconds" => format!(
                    "{} ({} from the yes)",
                    d.asked,
                    window_duration(terms.window_seconds)
                ),
                _ => d.asked,
            };
            return Err(refused(
                d.field,
                format!("differs from the grant question's terms: the person approved {approved}"),
            ));
        }
        if let Some(asked) = &req.route
            && *asked != record.route
        {
            return Err(refused(
                "route",
                format!("the grant question was asked on route '{}'", record.route),
            ));
        }
        if !record.is_terminal() {
            return Err(refused(
                "interaction_id",
                "is not answered yet: present it once a person said yes".into(),
            ));
        }
        let Some(g) = self.of_question(&record).await? else {
            return Err(refused(
                "interaction_id",
                "was not answered yes by a person (a refusal, a timeout or a withdrawal grants \
                 nothing)"
                    .into(),
            ));
        };
        if !g.is_live(now()) {
            let ended = match g.revoked_at {
                Some(at) => format!("was revoked at {}", rfc3339(at)),
                None => format!("expired at {}", rfc3339(g.expires_at)),
            };
            return Err(refused(
                "interaction_id",
                format!("granted {}, which {ended}: ask again", g.grant_id),
            ));
        }
        Ok(g)
    }

    /// The live grant of `agent` for `owner_id` that covers `scope`, if any.
    pub async fn check(
        &self,
        agent: &Agent,
        owner_id: &OwnerId,
        scope: &Scope,
    ) -> Result<Option<Grant>, ServiceError> {
        Ok(self
            .grants
            .live_grant_covering(&agent.name, owner_id, scope, now())
            .await?)
    }

    /// The agent's live grants, soonest expiry first.
    pub async fn of_agent(&self, agent: &Agent) -> Result<Vec<Grant>, ServiceError> {
        Ok(self
            .grants
            .live_grants(Some(&agent.name), None, now())
            .await?)
    }

    /// The agent revokes one of its live grants.
    pub async fn revoke_own(&self, agent: &Agent, id: &GrantId) -> Result<Grant, ServiceError> {
        let revoked = self
            .grants
            .revoke_grant(id, Some(&agent.name), None, now())
            .await?
            .ok_or(ServiceError::NotFound)?;
        self.metrics.grant_event("revoked");
        tracing::info!(grant = %revoked.grant_id, agent = %revoked.agent, "grant revoked by its agent");
        Ok(revoked)
    }
}

impl Service {
    /// Asks the route's approvers for a grant: an `approval` interaction of the agent
    /// with the request's terms, its reason (if any) as the question. Returns the
    /// question; a person's yes stores the grant ([`GrantBook::of_question`] finds
    /// it).
    pub async fn ask_grant(
        self: &Arc<Self>,
        agent: &Agent,
        req: &GrantRequest,
        timeout_seconds: f64,
    ) -> Result<Question, ServiceError> {
        let route = match Destination::of(&self.config, agent, req.route.as_deref(), None)? {
            Destination::Route(route) => route,
            Destination::Person { .. } => return Err(ServiceError::NotFound),
        };
        let terms = GrantTerms {
            scope: req.scope.clone(),
            owner_id: req.owner_id.clone(),
            window_seconds: req.window_seconds.unwrap_or(grant::DEFAULT_WINDOW_SECONDS),
            requested_window_seconds: None,
        };
        let question = req
            .reason
            .as_deref()
            .filter(|r| !r.trim().is_empty())
            .unwrap_or(grant::NO_REASON);
        let raw = json!({
            "interaction_id": format!("grant-{}", GrantId::generate().as_str().trim_start_matches("gr_")),
            "question": question,
            "interaction_type": "approval",
            "timeout": timeout_seconds,
            "default_response": false,
            "source_agent": agent.name,
            "grant": terms.to_json(),
        });
        let interaction =
            interaction::parse(&raw, self.config.max_timeout_seconds).map_err(|e| {
                ServiceError::InvalidGrant {
                    field: e.field,
                    reason: e.reason,
                }
            })?;
        let new = NewInteraction {
            interaction,
            route: Some(route.name.clone()),
            recipient: None,
            callback_url: None,
            call: None,
            agent_window_seconds: 0,
        };
        let (record, _) = self.create_interaction(agent, new).await?;
        Ok(record)
    }

    /// A grant's Revoke button (under `/grants`): only on the bot's own message, only by
    /// an approver of the grant's route in that route's chat. The storage revokes it
    /// (and audits who) in one conditional update; a grant already ended says so.
    pub(super) async fn revoke_grant_by_tap(
        &self,
        tap: &Tap,
        id: &GrantId,
    ) -> Result<Judged, StorageError> {
        let refuse = |text, why| refuse_tap(self.store.as_ref(), tap, None, Refused { text, why });
        if tap.from_is_bot || !tap.carries_button {
            return refuse(
                "This button is not valid.",
                "a grant's Revoke button not on the bot's own message",
            )
            .await;
        }
        let may_revoke = |route: &str| {
            self.config.route(route).is_some_and(|r| {
                r.approvers.contains(&tap.from.id)
                    && tap.chat_id == Some(self.chats.chat_of(&r.name, r.chat_id))
            })
        };
        match self
            .commands
            .revoke_grant_as(id, &tap.from, may_revoke)
            .await?
        {
            CommandReply::GrantRevoked { grant, .. } => Ok(Judged::toast(
                format!(
                    "🔒 Revoked: {} can no longer run {} for {} without asking.",
                    grant.agent,
                    grant::scope_in_words(&grant.scope),
                    grant.owner_id
                ),
                After::Nothing,
            )),
            CommandReply::Refused(_) => {
                refuse(
                    "Only an approver of the grant's route, in its chat, can revoke it.",
                    "not an approver of the grant's route in its chat",
                )
                .await
            }
            CommandReply::Invalid(text) => Ok(Judged::alert(text)),
            _ => Ok(Judged::alert("This button is not valid.")),
        }
    }
}

/// The terms a grant question is asked with on `dest` (`None`: the interaction asks
/// for no grant): the window cut to the route's `max_grant_seconds`, and refused
/// where they could not be shown whole, or where nobody could list and revoke the
/// grant (a private chat).
pub(super) fn grant_terms_on(
    agent: &Agent,
    new: &NewInteraction,
    dest: &Destination,
) -> Result<Option<GrantTerms>, ServiceError> {
    let Some(terms) = &new.interaction.grant else {
        return Ok(None);
    };
    let refused = |field: &str, reason: String| ServiceError::InvalidGrant {
        field: field.to_owned(),
        reason,
    };
    let Destination::Route(route) = dest else {
        return Err(refused(
            "interaction.grant",
            "is asked of a route's approvers, who list and revoke grants there (/grants): \
             name a route, not a recipient"
                .into(),
        ));
    };
    if new.call.is_some() {
        return Err(refused(
            "call",
            "does not go with a grant: a grant question is about a scope, not one call".into(),
        ));
    }
    let capped = terms.capped(route.max_grant_seconds);
    let shown = capped.shown_units(&agent.name);
    if shown > GrantTerms::MAX_SHOWN_UNITS {
        return Err(refused(
            "interaction.grant",
            format!(
                "cannot be shown whole: the agent's name, the scope and the owner take {shown} \
                 characters in Telegram, more than the {} a question's terms may (shorten the \
                 scope or the owner)",
                GrantTerms::MAX_SHOWN_UNITS
            ),
        ));
    }
    Ok(Some(capped))
}
