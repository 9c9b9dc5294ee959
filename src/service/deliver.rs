//! Posting a stored question in Telegram: the first message, the private-chat copies,
//! the file with the full parameters; a question that cannot reach a human fails closed.

use super::*;

impl Service {
    /// Posts the question in its first chat; fails closed when Telegram refuses it.
    pub(super) async fn deliver(self: Arc<Self>, mut record: Confirmation) {
        // A group can be upgraded to a supergroup (new chat id) at most once; allow one
        // more hop for good measure, then fail closed.
        let mut hops = 0;
        let view = self.view(&record, record.chat_id);
        let result = loop {
            match self
                .messenger
                .send_question(&record, record.chat_id, &view)
                .await
            {
                Err(e) if e.migrated_to.is_some() && hops < 2 => {
                    hops += 1;
                    let to = e.migrated_to.unwrap_or(record.chat_id);
                    if let Err(err) = self.move_route_chat(&record, to).await {
                        break Err(DeliveryError::new(format!(
                            "{} (and the move failed: {err})",
                            e.reason
                        )));
                    }
                    record.chat_id = to;
                }
                other => break other,
            }
        };
        match result {
            Ok(message_id) => {
                if let Err(e) = self.store.set_message_id(&record.id, message_id).await {
                    tracing::error!(id = %record.id, error = %e, "could not record the message id");
                }
                self.changed(&record.id);
                self.attach_or_fail_closed(&record, record.chat_id, message_id)
                    .await;
                self.after_delivery(&record.id).await;
            }
            Err(e) if e.missed_deadline => self.time_out_undelivered(&record, &e.reason).await,
            Err(e) => {
                tracing::warn!(id = %record.id, reason = %e.reason, "delivery failed: failing closed");
                let outcome = Outcome::FailedClosed {
                    reason: format!(
                        "the question could not be delivered to Telegram: {}",
                        e.reason
                    ),
                };
                if let Err(e) = self.decide(&record.id, outcome).await {
                    tracing::error!(id = %record.id, error = %e, "could not store the fail-closed outcome");
                }
            }
        }
    }

    /// Nothing refused the question, but it cannot reach its chat before its deadline
    /// (the chat's queue under Telegram's limits, a `retry_after` or an outage past it):
    /// it ends `timeout` now, with a reason that says so. Now rather than at the
    /// deadline, since waiting cannot change it (queued slots only ever move later) and
    /// the agent hears it sooner; an interaction's `timeout_action` is not applied, as
    /// nobody was asked.
    async fn time_out_undelivered(self: &Arc<Self>, record: &Confirmation, why: &str) {
        tracing::warn!(id = %record.id, reason = %why, "the question cannot reach the chat before its deadline: timing out");
        let outcome = Outcome::Unreachable {
            why: why.to_owned(),
        };
        match self.decide(&record.id, outcome).await {
            Ok(Decided::Applied(r)) => {
                self.metrics.question_missed_deadline(&r);
                self.finish(r);
            }
            Ok(_) => {}
            // The scheduler still times it out at the deadline.
            Err(e) => tracing::error!(id = %record.id, error = %e, "could not store the timeout"),
        }
    }

    /// Sends the full parameters along when the question's message had to cut them. An
    /// operator told "attached below" who finds nothing cannot judge the call: if the
    /// file cannot be sent, the question fails closed (its buttons then go).
    pub(super) async fn attach_or_fail_closed(
        &self,
        record: &Confirmation,
        chat_id: i64,
        message_id: i32,
    ) {
        let e = match self
            .messenger
            .send_attachment(record, chat_id, message_id)
            .await
        {
            Ok(_) => {
                if let Err(e) = self.store.mark_attached(&record.id).await {
                    // Recovery would send the file once more: harmless.
                    tracing::warn!(id = %record.id, error = %e, "could not record the sent file");
                }
                return;
            }
            Err(e) => e,
        };
        tracing::warn!(id = %record.id, reason = %e.reason, "the full parameters could not be attached: failing closed");
        let outcome = Outcome::FailedClosed {
            reason: format!(
                "the full parameters could not be attached in Telegram: {}",
                e.reason
            ),
        };
        if let Err(e) = self.decide(&record.id, outcome).await {
            tracing::error!(id = %record.id, error = %e, "could not store the fail-closed outcome");
        }
    }

    /// Posts a further copy of a question in a person's private chat. A copy that cannot
    /// be delivered is logged and audited; the question stays open for the others.
    pub(super) async fn deliver_copy(self: Arc<Self>, record: Confirmation, chat_id: i64) {
        let view = self.view(&record, chat_id);
        match self.messenger.send_question(&record, chat_id, &view).await {
            Ok(message_id) => {
                if let Err(e) = self
                    .store
                    .set_copy_message_id(&record.id, chat_id, message_id, now())
                    .await
                {
                    tracing::error!(id = %record.id, error = %e, "could not record a copy's message id");
                }
                // The others may still decide in full knowledge: a copy's missing file
                // is audited, not a reason to end the question for everyone.
                if let Err(e) = self
                    .messenger
                    .send_attachment(&record, chat_id, message_id)
                    .await
                {
                    tracing::warn!(id = %record.id, chat_id, reason = %e.reason, "a copy's parameters could not be attached");
                    let why = format!("the full parameters could not be attached: {}", e.reason);
                    let event = audit::copy_failed(record.id.as_str(), chat_id, &why, now());
                    if let Err(e) = self.store.record_event(event).await {
                        tracing::error!(id = %record.id, error = %e, "could not audit a failed copy");
                    }
                }
                self.after_delivery(&record.id).await;
            }
            Err(e) => {
                tracing::warn!(id = %record.id, chat_id, reason = %e.reason, "a copy could not be delivered");
                let event = audit::copy_failed(record.id.as_str(), chat_id, &e.reason, now());
                if let Err(e) = self.store.record_event(event).await {
                    tracing::error!(id = %record.id, error = %e, "could not audit a failed copy");
                }
            }
        }
    }

    /// A timeout or withdrawal may have won while a message was on its way: then its
    /// buttons must not stay live.
    pub(super) async fn after_delivery(self: &Arc<Self>, id: &ConfirmationId) {
        match self.store.get(id).await {
            Ok(Some(now)) if now.is_terminal() => self.finish(now),
            Ok(_) => {}
            Err(e) => tracing::error!(id = %id, error = %e, "could not re-read"),
        }
    }

    /// Telegram moved the route's group to a supergroup: remember the new chat (in the
    /// database, so it survives restarts) and move the route's pending requests there.
    pub(super) async fn move_route_chat(
        &self,
        record: &Confirmation,
        to: i64,
    ) -> Result<(), StorageError> {
        tracing::warn!(route = %record.route, from = record.chat_id, to,
            "the route's group became a supergroup; using the new chat id (update the config)");
        self.store
            .move_route_chat(&record.route, record.chat_id, to, now())
            .await?;
        self.moved_chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.route.clone(), to);
        Ok(())
    }
}
