//! What an agent reads about its own requests, and how it waits for them to change.

use super::*;

impl Service {
    /// The agent's own confirmation, or `NotFound` (also for another agent's, and for an
    /// interaction, which the agent knows by its `interaction_id`).
    pub async fn get(&self, agent: &Agent, id: &ConfirmationId) -> Result<Question, ServiceError> {
        match self.owned(agent, id).await? {
            r if r.interaction.is_none() => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's own question of any kind, by record id (its audit trail is read so).
    pub async fn owned(
        &self,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Question, ServiceError> {
        match self.store.get(id).await? {
            Some(r) if r.agent == agent.name => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's interaction with its own `interaction_id`.
    pub async fn get_interaction(
        &self,
        agent: &Agent,
        interaction_id: &str,
    ) -> Result<Question, ServiceError> {
        self.store
            .find_interaction(&agent.name, interaction_id)
            .await?
            .ok_or(ServiceError::NotFound)
    }

    /// Waits until the request is terminal or `max_wait` passes, then returns it as it is.
    /// `stop` (shutdown) ends the wait with [`ServiceError::ShuttingDown`], never with a
    /// made-up outcome.
    pub async fn wait(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
    ) -> Result<Question, ServiceError> {
        self.wait_until(agent, id, max_wait, stop, |r| r.is_terminal())
            .await
    }

    /// Waits for the next change of an interaction (delivered, an answer, its end), at
    /// most `max_wait`, and returns it as it is then.
    pub async fn wait_for_change(
        self: &Arc<Self>,
        agent: &Agent,
        interaction_id: &str,
        max_wait: Duration,
        stop: &CancellationToken,
    ) -> Result<Question, ServiceError> {
        let first = self.get_interaction(agent, interaction_id).await?;
        let seen = (first.public_status(), first.answers.len());
        self.wait_until(agent, &first.id, Some(max_wait), stop, move |r| {
            r.is_terminal() || (r.public_status(), r.answers.len()) != seen
        })
        .await
    }

    pub(super) async fn wait_until(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
        done: impl Fn(&Question) -> bool,
    ) -> Result<Question, ServiceError> {
        let give_up = max_wait.map(|d| Instant::now() + d);
        // What the last wake-up handed over: the record a decision of this process
        // committed (see `Waiters`), answered with instead of being read again.
        let mut handed: Handed = None;
        loop {
            if let Some(r) = handed.take()
                && r.agent == agent.name
                && done(&r)
            {
                tracing::debug!(id = %id, "wait over");
                return Ok(Arc::unwrap_or_clone(r));
            }
            // Subscribe before reading, so a change landing in between is not missed.
            let mut changed = self.waiters.subscribe(id);
            // Boxed, and the record dropped before waiting: an agent may wait for an
            // hour, and what this future holds meanwhile is what a blocked agent costs.
            let record = Box::pin(self.owned(agent, id)).await?;
            if done(&record) || give_up.is_some_and(|g| Instant::now() >= g) {
                tracing::debug!(id = %id, "wait over");
                return Ok(record);
            }
            let overdue = instant_at(record.expires_at, now()) + WAITER_GRACE;
            drop(record);
            let wake = give_up.map_or(overdue, |g| g.min(overdue));
            tokio::select! {
                _ = changed.changed() => handed = changed.borrow_and_update().clone(),
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= overdue {
                        Box::pin(self.expire(id)).await;
                    }
                }
                _ = stop.cancelled() => return Err(ServiceError::ShuttingDown),
            }
        }
    }
}
