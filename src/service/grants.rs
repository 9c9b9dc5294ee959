//! Grants (AI-Parrot's `GrantGuard`, FEAT-211): a human approves a *scope*
//! (`tool:deploy`, `tool:*`) for an owner for a bounded time, and while the grant lives
//! every call of the agent in that scope passes the grant check, which comes after the
//! `deny` rules and before the confirmation (the order is [`super::gate`]'s).
//!
//! A grant is always an approval a person answered yes: one this service asks
//! ([`Service::ask_grant`], an `approval` interaction whose question states the scope,
//! the owner and how long), or one the agent asked itself and presents within
//! [`grant::PRESENTATION_WINDOW`] ([`Service::grant_from_approval`]): how `GrantGuard`
//! asks first and stores after. Either way the approval becomes a grant once, and only
//! when its question named that scope and that owner. Grants are stored and read from
//! the database on every check: a revoke stops them at once on every replica.

use super::*;
use crate::domain::grant::{self, Grant, GrantSource, Scope};
use crate::domain::ids::GrantId;
use crate::domain::question::{operator_time, window_duration};
use crate::storage::GrantInserted;

/// A grant an agent asks for (`POST /v1/grants`).
#[derive(Debug, Clone)]
pub struct GrantRequest {
    pub owner_id: OwnerId,
    pub scope: Scope,
    /// How long it should last; cut to the route's `max_grant_seconds`.
    pub window_seconds: u64,
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
}

impl Service {
    /// Asks the route's approvers for a grant: an `approval` interaction of the agent,
    /// worded so that [`grant::approval_names`] finds the scope and owner in it. Returns
    /// the question; once a person answered yes, [`Service::grant_from_approval`] turns
    /// it into the grant.
    pub async fn ask_grant(
        self: &Arc<Self>,
        agent: &Agent,
        req: &GrantRequest,
        timeout_seconds: f64,
    ) -> Result<Question, ServiceError> {
        let route = match self.destination(agent, req.route.as_deref(), None)? {
            Destination::Route(route) => route,
            Destination::Person { .. } => return Err(ServiceError::NotFound),
        };
        let window = req.window_seconds.min(route.max_grant_seconds);
        let latest_end =
            now() + Duration::from_secs_f64(timeout_seconds) + Duration::from_secs(window);
        let question = grant::question(
            &agent.name,
            &req.scope,
            &req.owner_id,
            &window_duration(window),
            &operator_time(latest_end),
            req.reason.as_deref(),
        );
        let raw = json!({
            "interaction_id": format!("grant-{}", GrantId::generate().as_str().trim_start_matches("gr_")),
            "question": question,
            "interaction_type": "approval",
            "timeout": timeout_seconds,
            "default_response": false,
            "source_agent": agent.name,
        });
        let interaction =
            interaction::parse(&raw, self.config.max_timeout_seconds).map_err(|e| {
                ServiceError::GrantRefused {
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

    /// Stores the grant that the approval `interaction_id` (an interaction of `agent`,
    /// answered yes by a person on one of its routes within the last
    /// [`grant::PRESENTATION_WINDOW`], whose question names `req`'s scope and owner)
    /// allows. The grant runs from that yes, for `req.window_seconds` cut to the route's
    /// `max_grant_seconds`. An approval becomes a grant once.
    pub async fn grant_from_approval(
        &self,
        agent: &Agent,
        interaction_id: &str,
        req: &GrantRequest,
    ) -> Result<Grant, ServiceError> {
        let refused = |reason: String| ServiceError::GrantRefused {
            field: "interaction_id".into(),
            reason,
        };
        let record = self
            .store
            .find_interaction(&agent.name, interaction_id)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let Some(i) = record.interaction.as_deref() else {
            return Err(ServiceError::NotFound);
        };
        if i.kind != InteractionType::Approval {
            return Err(refused(format!(
                "is a {} question, not an approval",
                i.kind.as_str()
            )));
        }
        let yes = record.status == Status::Completed
            && record.via == Some(Via::Operator)
            && record.result == Some(Value::Bool(true));
        let (Some(by), Some(decided_at), true) =
            (record.decided_by.clone(), record.decided_at, yes)
        else {
            return Err(refused(
                "was not answered yes by a person (a refusal, a timeout's default or a pending question grants nothing)".into(),
            ));
        };
        let now = now();
        if now - decided_at > grant::PRESENTATION_WINDOW {
            return Err(refused(format!(
                "was answered more than {} s ago: present an approval within {} s of the yes, or ask again",
                grant::PRESENTATION_WINDOW.as_secs(),
                grant::PRESENTATION_WINDOW.as_secs()
            )));
        }
        if !grant::approval_names(&i.question, &req.scope, &req.owner_id) {
            return Err(refused(format!(
                "asked something else: its question has no line 'Scope: {}' and 'Owner: {}', so the person who said yes did not see this grant",
                req.scope, req.owner_id
            )));
        }
        let route = match self.config.route(&record.route) {
            Some(r) if agent.routes.contains(&record.route) => r.clone(),
            _ => {
                return Err(refused(format!(
                    "was answered in {}, not on one of this agent's routes",
                    record.route
                )));
            }
        };
        if let Some(asked) = &req.route
            && *asked != route.name
        {
            return Err(ServiceError::GrantRefused {
                field: "route".into(),
                reason: format!("the approval was answered on route '{}'", route.name),
            });
        }
        let window = req.window_seconds.min(route.max_grant_seconds);
        let g = Grant {
            grant_id: GrantId::generate(),
            agent: agent.name.clone(),
            owner_id: req.owner_id.clone(),
            scope: req.scope.clone(),
            route: route.name.clone(),
            reason: req.reason.clone(),
            granted_by: by,
            created_at: now,
            expires_at: decided_at + Duration::from_secs(window),
            revoked_at: None,
            revoked_by: None,
            source: GrantSource::Interaction {
                interaction_id: interaction_id.to_owned(),
            },
        };
        if !g.is_live(now) {
            return Err(refused(format!(
                "allowed {} from the yes, which has passed",
                window_duration(window)
            )));
        }
        match self.store.insert_grant(&g).await? {
            GrantInserted::New(g) | GrantInserted::Existing(g) => {
                tracing::info!(grant = %g.grant_id, agent = %g.agent, scope = %g.scope,
                    "grant stored");
                self.metrics.grant_event("created");
                Ok(g)
            }
            GrantInserted::InteractionUsed => Err(refused(
                "was already turned into a grant: an approval grants once".into(),
            )),
        }
    }

    /// The live grant of `agent` for `owner_id` that covers `scope`, if any.
    pub async fn check_grant(
        &self,
        agent: &Agent,
        owner_id: &OwnerId,
        scope: &Scope,
    ) -> Result<Option<Grant>, ServiceError> {
        Ok(self
            .store
            .live_grant_covering(&agent.name, owner_id, scope, now())
            .await?)
    }

    /// The agent's live grants, soonest expiry first.
    pub async fn grants_of(&self, agent: &Agent) -> Result<Vec<Grant>, ServiceError> {
        Ok(self
            .store
            .live_grants(Some(&agent.name), None, now())
            .await?)
    }

    /// The agent revokes one of its live grants.
    pub async fn revoke_own_grant(
        &self,
        agent: &Agent,
        id: &GrantId,
    ) -> Result<Grant, ServiceError> {
        let revoked = self
            .store
            .revoke_grant(id, Some(&agent.name), None, now())
            .await?
            .ok_or(ServiceError::NotFound)?;
        self.metrics.grant_event("revoked");
        tracing::info!(grant = %revoked.grant_id, agent = %revoked.agent, "grant revoked by its agent");
        Ok(revoked)
    }
}
