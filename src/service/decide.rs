//! Ending a question: the one conditional update that decides it, then the board
//! ([`super::board`]) shows the outcome; timeouts and withdrawals come through here too.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Service, ServiceError, now};
use crate::config::Agent;
use crate::domain::ids::QuestionId;
use crate::domain::interaction::TimeoutAction;
use crate::domain::question::{Ending, Question, Via};
use crate::storage::{Decided, StorageError};

impl Service {
    /// Applies an outcome; wakes waiting agents when it is the one that counts.
    pub(super) async fn decide(
        &self,
        id: &QuestionId,
        outcome: Ending,
    ) -> Result<Decided, StorageError> {
        let decided = self.store.decide(id, &outcome.decide(now())).await?;
        if let Decided::Applied(r) = &decided {
            self.on_decided(r);
        }
        Ok(decided)
    }

    /// After a decision was stored: log it, wake waiting agents and the webhook outbox.
    pub(super) fn on_decided(&self, r: &Question) {
        tracing::info!(id = %r.id, agent = %r.agent, tool = %r.tool,
            status = r.status.as_str(), via = r.via.map(Via::as_str).unwrap_or(""),
            "question decided");
        self.metrics.request_decided(r);
        if let Some(g) = crate::domain::grant::granted_by_tap(r) {
            tracing::info!(grant = %g.grant_id, agent = %g.agent, scope = %g.scope,
                "grant stored with the yes to its question");
            self.metrics.grant_event("created");
        }
        self.changes.decided(r);
        if r.callback_url.is_some() {
            self.outbox_wake.notify_one();
        }
    }

    /// Times the request out if it is still pending at its deadline, applying the
    /// interaction's `timeout_action`. A deadline moved later ("+N min") re-arms instead.
    pub(super) async fn expire(self: &Arc<Self>, id: &QuestionId) {
        match self.store.get(id).await {
            Ok(Some(r)) if !r.is_terminal() && r.expires_at > now() => self.arm(&r),
            Ok(Some(r)) if !r.is_terminal() => self.time_out(r).await,
            Ok(_) => {}
            Err(e) => {
                tracing::error!(id = %id, error = %e, "could not read a due request; retrying");
                self.lead.retry_soon(id);
            }
        }
    }

    /// Ends `record` (pending, past its deadline) as a timeout.
    pub(super) async fn time_out(self: &Arc<Self>, record: Question) {
        let id = &record.id;
        let after = (record.expires_at - record.created_at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        let outcome = match record.interaction.as_deref().map(|i| i.timeout_action) {
            None | Some(TimeoutAction::Cancel) => Ending::TimedOut { after },
            Some(TimeoutAction::Default) => Ending::DefaultOnTimeout {
                value: record
                    .interaction
                    .as_ref()
                    .map(|i| i.default_response.clone())
                    .unwrap_or(Value::Null),
                after,
            },
            Some(action) => Ending::TimedOutWithAction { after, action },
        };
        match self.decide(id, outcome).await {
            Ok(Decided::Applied(r)) => self.board.finish(r),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(id = %id, error = %e, "could not store a timeout; retrying");
                self.lead.retry_soon(id);
            }
        }
    }

    /// The agent takes its confirmation back.
    pub async fn withdraw(
        self: &Arc<Self>,
        agent: &Agent,
        id: &QuestionId,
    ) -> Result<Question, ServiceError> {
        self.asked.get(agent, id).await?;
        self.withdraw_owned(id).await
    }

    pub(super) async fn withdraw_owned(
        self: &Arc<Self>,
        id: &QuestionId,
    ) -> Result<Question, ServiceError> {
        match self.decide(id, Ending::Withdrawn).await? {
            Decided::Applied(r) => {
                self.board.finish(r.clone());
                Ok(r)
            }
            Decided::AlreadyTerminal(r) => Err(ServiceError::AlreadyDecided(Box::new(r))),
            Decided::NotFound => Err(ServiceError::NotFound),
        }
    }

    /// The agent takes its interaction back.
    pub async fn withdraw_interaction(
        self: &Arc<Self>,
        agent: &Agent,
        interaction_id: &str,
    ) -> Result<Question, ServiceError> {
        let record = self.asked.get_interaction(agent, interaction_id).await?;
        self.withdraw_owned(&record.id).await
    }
}
