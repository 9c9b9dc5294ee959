//! Ending a question: the one conditional update that decides it, then showing the
//! outcome in every message of it; timeouts and withdrawals come through here too.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Service, ServiceError, now, runs};
use crate::config::Agent;
use crate::domain::ids::ConfirmationId;
use crate::domain::interaction::TimeoutAction;
use crate::domain::question::{Outcome, Question, Via};
use crate::storage::{Decided, Shown, StorageError};

impl Service {
    /// Applies an outcome; wakes waiting agents when it is the one that counts.
    pub(super) async fn decide(
        &self,
        id: &ConfirmationId,
        outcome: Outcome,
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

    /// Shows a decided request's outcome in every message of it, in the background, and
    /// records that it did, so a restart can finish what a crash interrupted.
    pub(super) fn finish(self: &Arc<Self>, record: Question) {
        // Another replica leads: it hears of the outcome and shows it (or, should it die
        // first, the next leader finds it unshown).
        if !self.lead.leading() {
            tracing::debug!(id = %record.id, "left to the leader to show");
            return;
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            // Under the question's edit stripe, read afresh: a run reported meanwhile is
            // shown by this edit too, and never undone by it (see `runs::EditStripes`).
            let _editing = me.edits.lock(&record.id).await;
            let record = runs::afresh(me.store.as_ref(), record).await;
            let mut shown = Vec::new();
            for (chat_id, message_id) in record.messages().collect::<Vec<_>>() {
                let Some(message_id) = message_id else {
                    continue;
                };
                shown.push((chat_id, message_id));
                if me.show_outcome(&record, chat_id, message_id).await {
                    let what = if chat_id == record.chat_id {
                        Shown::Outcome
                    } else {
                        Shown::CopyOutcome { chat_id }
                    };
                    let marked = me.store.mark_shown(&record.id, what).await;
                    if let Err(e) = marked {
                        tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                    }
                }
            }
            for stray in record.strays.iter().filter(|s| !s.outcome_shown) {
                // A tap that raced the storing of the id can make a known message a
                // stray too: it is edited once, with the message it is.
                if shown.contains(&(stray.chat_id, stray.message_id)) {
                    let what = Shown::StrayOutcome {
                        chat_id: stray.chat_id,
                        message_id: stray.message_id,
                    };
                    let marked = me.store.mark_shown(&record.id, what).await;
                    if let Err(e) = marked {
                        tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                    }
                } else {
                    me.show_stray_outcome(&record, stray.chat_id, stray.message_id)
                        .await;
                }
            }
        });
    }

    /// Shows the outcome on one message learned from a tap after the question ended.
    pub(super) fn show_outcome_on(
        self: &Arc<Self>,
        record: Question,
        chat_id: i64,
        message_id: i32,
    ) {
        let me = self.clone();
        self.tasks.spawn(async move {
            me.show_stray_outcome(&record, chat_id, message_id).await;
        });
    }

    async fn show_stray_outcome(&self, record: &Question, chat_id: i64, message_id: i32) {
        if self.show_outcome(record, chat_id, message_id).await
            && let Err(e) = self
                .store
                .mark_shown(
                    &record.id,
                    Shown::StrayOutcome {
                        chat_id,
                        message_id,
                    },
                )
                .await
        {
            tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
        }
    }

    /// Edits one message of a decided request to its outcome; whether it now shows it.
    async fn show_outcome(&self, record: &Question, chat_id: i64, message_id: i32) -> bool {
        let view = self.view(record, chat_id);
        match self
            .messenger
            .update_message(record, chat_id, message_id, &view)
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(id = %record.id, reason = %e.reason, "could not update the message");
                false
            }
        }
    }

    /// Shows a pending question's progress (answers so far, a poll's tally) in every
    /// message of it, in the background.
    pub(super) fn refresh(self: &Arc<Self>, record: Question) {
        let me = self.clone();
        self.tasks.spawn(async move {
            // Edits run in the background: if the question ended meanwhile, showing
            // progress now could put back the buttons the outcome edit removed.
            let record = match me.store.get(&record.id).await {
                Ok(Some(now)) if !now.is_terminal() => now,
                _ => return,
            };
            let strays = record.strays.iter().map(|s| (s.chat_id, Some(s.message_id)));
            let all: Vec<_> = record.messages().chain(strays).collect();
            for (chat_id, message_id) in all {
                if let Some(message_id) = message_id {
                    let view = me.view(&record, chat_id);
                    if let Err(e) = me
                        .messenger
                        .update_message(&record, chat_id, message_id, &view)
                        .await
                    {
                        tracing::debug!(id = %record.id, reason = %e.reason, "could not show progress");
                    }
                }
            }
        });
    }

    /// Times the request out if it is still pending at its deadline, applying the
    /// interaction's `timeout_action`. A deadline moved later ("+N min") re-arms instead.
    pub(super) async fn expire(self: &Arc<Self>, id: &ConfirmationId) {
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
            None | Some(TimeoutAction::Cancel) => Outcome::TimedOut { after },
            Some(TimeoutAction::Default) => Outcome::DefaultOnTimeout {
                value: record
                    .interaction
                    .as_ref()
                    .map(|i| i.default_response.clone())
                    .unwrap_or(Value::Null),
                after,
            },
            Some(action) => Outcome::TimedOutWithAction { after, action },
        };
        match self.decide(id, outcome).await {
            Ok(Decided::Applied(r)) => self.finish(r),
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
        id: &ConfirmationId,
    ) -> Result<Question, ServiceError> {
        self.asked.get(agent, id).await?;
        self.withdraw_owned(id).await
    }

    pub(super) async fn withdraw_owned(
        self: &Arc<Self>,
        id: &ConfirmationId,
    ) -> Result<Question, ServiceError> {
        match self.decide(id, Outcome::Withdrawn).await? {
            Decided::Applied(r) => {
                self.finish(r.clone());
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
