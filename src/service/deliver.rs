//! Posting a stored question in Telegram: the first message, the private-chat copies,
//! the file with the full parameters; a question that cannot reach a human fails closed.
//!
//! A question may queue for minutes behind Telegram's limits (thirty messages a second
//! for the bot, one a second per chat), and with thousands of agents blocked at once,
//! thousands do. While it queues, a delivery holds only a [`Queued`]: the question's id
//! and the keys the chat's queue needs. The record is read back, checked and rendered
//! once its turn comes: a question decided or withdrawn meanwhile is not posted, and
//! its slot goes back.
//!
//! The longer why is in docs/architecture.md, "Module notes".

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use super::{DeliveryError, Service, Turn, now};
use crate::domain::audit;
use crate::domain::ids::QuestionId;
use crate::domain::question::{Ending, Question};
use crate::storage::{Decided, Messages, Questions, Shown, StorageError};

/// A message of a question waiting for its turn in a chat: what it needs until then.
pub(super) struct Queued {
    id: QuestionId,
    /// The chat to post in: the question's own (first message) or a copy's.
    chat_id: i64,
    /// Whose share of the chat the message goes in.
    agent: Box<str>,
    /// A turn after this is no turn (the question has ended by then).
    expires_at: OffsetDateTime,
    /// A further copy (in a person's private chat, or the escalation route's) rather
    /// than the question's first message.
    copy: bool,
}

/// How long [`record_message_id`] waits before trying again, at first and at
/// most.
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(200);
const RECORD_RETRY_LAST: Duration = Duration::from_secs(5);

/// A message of a question this process is delivering (queued or sending); given back
/// when the delivery ends.
struct Posting {
    service: Arc<Service>,
    key: (QuestionId, i64),
}

impl Posting {
    /// `None` when this process is delivering that message already.
    fn take(service: &Arc<Service>, q: &Queued) -> Option<Posting> {
        let key = (q.id.clone(), q.chat_id);
        let taken = service
            .posting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone());
        // Made only when taken (and after the lock is released): dropping one gives
        // its key back.
        taken.then(|| Posting {
            service: service.clone(),
            key,
        })
    }
}

impl Drop for Posting {
    fn drop(&mut self) {
        self.service
            .posting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.key);
    }
}

impl Queued {
    /// The first message of `record`, in its own chat.
    pub(super) fn first(record: &Question) -> Self {
        Queued {
            id: record.id.clone(),
            chat_id: record.chat_id,
            agent: record.agent.as_str().into(),
            expires_at: record.expires_at,
            copy: false,
        }
    }

    /// A further copy of `record`, in `chat_id`.
    pub(super) fn copy(record: &Question, chat_id: i64) -> Self {
        Queued {
            chat_id,
            copy: true,
            ..Queued::first(record)
        }
    }
}

impl Service {
    /// Posts a message of a question once its turn comes: its first message, which
    /// fails the question closed when Telegram refuses it, or a further copy.
    pub(super) async fn deliver(self: Arc<Self>, q: Queued) {
        // One delivery of a message at a time in this process: a take-over (after the
        // lease was lost and won back, or the change feed was) finds the question still
        // unposted while this process is posting it.
        let Some(_posting) = Posting::take(&self, &q) else {
            tracing::debug!(id = %q.id, chat_id = q.chat_id, "already being posted here");
            return;
        };
        let turn = self
            .messenger
            .question_turn(q.chat_id, &q.agent, q.expires_at)
            .await;
        // Boxed: what follows holds the record, its view and the send, and inline that
        // state would make every queued delivery's task as large while it waits.
        if q.copy {
            Box::pin(self.deliver_copy_in_turn(q, turn)).await
        } else {
            Box::pin(self.deliver_first_in_turn(q, turn)).await
        }
    }

    /// The question's first message, its turn come (or refused); fails closed when
    /// Telegram refuses it.
    async fn deliver_first_in_turn(self: Arc<Self>, q: Queued, turn: Result<Turn, DeliveryError>) {
        let turn = match turn {
            Ok(turn) => turn,
            Err(e) => return self.undelivered(&q.id, e).await,
        };
        // Returning drops `turn`, which gives the slot back.
        let mut record = match still_to_post(self.store.as_ref(), &q, |r| r.message_id.is_none())
            .await
        {
            Ok(Some(record)) => record,
            Ok(None) => return,
            // Nobody could be asked about a question that cannot be read.
            Err(e) => {
                let e = DeliveryError::new(format!("it could not be read back to post it: {e}"));
                return self.undelivered(&q.id, e).await;
            }
        };
        // A group can be upgraded to a supergroup (new chat id) at most once; allow one
        // more hop for good measure, then fail closed.
        let mut hops = 0;
        let mut turn = Some(turn);
        let view = self.board.view(&record, record.chat_id);
        let result = loop {
            let turn = match turn.take() {
                Some(turn) => turn,
                None => match self
                    .messenger
                    .question_turn(record.chat_id, &record.agent, record.expires_at)
                    .await
                {
                    Ok(turn) => turn,
                    Err(e) => break Err(e),
                },
            };
            match self
                .messenger
                .send_question(&record, record.chat_id, &view, turn)
                .await
            {
                Err(e) if e.migrated_to.is_some() && hops < 2 => {
                    hops += 1;
                    let to = e.migrated_to.unwrap_or(record.chat_id);
                    if let Err(err) = self.chats.move_route_chat(&record, to).await {
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
                record_message_id(self.store.as_ref(), &record, message_id).await;
                self.changes.changed(&record.id);
                self.attach_or_fail_closed(&record, record.chat_id, message_id)
                    .await;
                self.after_delivery(&record.id).await;
            }
            Err(e) => self.undelivered(&record.id, e).await,
        }
    }

    /// The question's first message could not be posted: a timeout when only time
    /// stood in the way, else fail-closed.
    async fn undelivered(self: &Arc<Self>, id: &QuestionId, e: DeliveryError) {
        if e.missed_deadline {
            return self.time_out_undelivered(id, &e.reason).await;
        }
        tracing::warn!(id = %id, reason = %e.reason, "delivery failed: failing closed");
        let outcome = Ending::FailedClosed {
            reason: format!(
                "the question could not be delivered to Telegram: {}",
                e.reason
            ),
        };
        if let Err(e) = self.decide(id, outcome).await {
            tracing::error!(id = %id, error = %e, "could not store the fail-closed outcome");
        }
    }

    /// Nothing refused the question, but it cannot reach its chat before its deadline
    /// (the chat's queue under Telegram's limits, a `retry_after` or an outage past it):
    /// it ends `timeout` now, with a reason that says so. Now rather than at the
    /// deadline, since waiting cannot change it (queued slots only ever move later) and
    /// the agent hears it sooner; an interaction's `timeout_action` is not applied, as
    /// nobody was asked.
    async fn time_out_undelivered(self: &Arc<Self>, id: &QuestionId, why: &str) {
        tracing::warn!(id = %id, reason = %why, "the question cannot reach the chat before its deadline: timing out");
        let outcome = Ending::Unreachable {
            why: why.to_owned(),
        };
        match self.decide(id, outcome).await {
            Ok(Decided::Applied(r)) => {
                self.metrics.question_missed_deadline(&r);
                self.board.finish(r);
            }
            Ok(_) => {}
            // The scheduler still times it out at the deadline.
            Err(e) => tracing::error!(id = %id, error = %e, "could not store the timeout"),
        }
    }

    /// Sends the full parameters along when the question's message had to cut them. An
    /// operator told "attached below" who finds nothing cannot judge the call: if the
    /// file cannot be sent, the question fails closed (its buttons then go).
    pub(super) async fn attach_or_fail_closed(
        &self,
        record: &Question,
        chat_id: i64,
        message_id: i32,
    ) {
        let e = match self
            .messenger
            .send_attachment(record, chat_id, message_id)
            .await
        {
            Ok(_) => {
                if let Err(e) = self.store.mark_shown(&record.id, Shown::Attachment).await {
                    // Recovery would send the file once more: harmless.
                    tracing::warn!(id = %record.id, error = %e, "could not record the sent file");
                }
                return;
            }
            Err(e) => e,
        };
        tracing::warn!(id = %record.id, reason = %e.reason, "the full parameters could not be attached: failing closed");
        let outcome = Ending::FailedClosed {
            reason: format!(
                "the full parameters could not be attached in Telegram: {}",
                e.reason
            ),
        };
        if let Err(e) = self.decide(&record.id, outcome).await {
            tracing::error!(id = %record.id, error = %e, "could not store the fail-closed outcome");
        }
    }

    /// A further copy of a question, its turn come (or refused). A copy that cannot be
    /// delivered is logged and audited; the question stays open for the others.
    async fn deliver_copy_in_turn(self: Arc<Self>, q: Queued, turn: Result<Turn, DeliveryError>) {
        let chat_id = q.chat_id;
        let sent = match turn {
            Ok(turn) => {
                let unposted = |r: &Question| {
                    !r.copies
                        .iter()
                        .any(|c| c.chat_id == chat_id && c.message_id.is_some())
                };
                match still_to_post(self.store.as_ref(), &q, unposted).await {
                    Ok(Some(record)) => {
                        let view = self.board.view(&record, chat_id);
                        let sent = self
                            .messenger
                            .send_question(&record, chat_id, &view, turn)
                            .await;
                        sent.map(|message_id| (record, message_id))
                    }
                    Ok(None) => return,
                    Err(e) => Err(DeliveryError::new(format!(
                        "the question could not be read back to post it: {e}"
                    ))),
                }
            }
            Err(e) => Err(e),
        };
        match sent {
            Ok((record, message_id)) => {
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
                tracing::warn!(id = %q.id, chat_id, reason = %e.reason, "a copy could not be delivered");
                let event = audit::copy_failed(q.id.as_str(), chat_id, &e.reason, now());
                if let Err(e) = self.store.record_event(event).await {
                    tracing::error!(id = %q.id, error = %e, "could not audit a failed copy");
                }
            }
        }
    }

    /// A timeout or withdrawal may have won while a message was on its way: then its
    /// buttons must not stay live.
    pub(super) async fn after_delivery(self: &Arc<Self>, id: &QuestionId) {
        match self.store.get(id).await {
            Ok(Some(now)) if now.is_terminal() => self.board.finish(now),
            Ok(_) => {}
            Err(e) => tracing::error!(id = %id, error = %e, "could not re-read"),
        }
    }
}

/// Records the posted message's id, trying again while the database is out of reach
/// (until the question's deadline): a question whose post is not recorded would be
/// posted again by the next take-over. A tap on the message decides it meanwhile
/// anyway (its buttons name the question).
async fn record_message_id(messages: &dyn Messages, record: &Question, message_id: i32) {
    let mut wait = RECORD_RETRY_FIRST;
    loop {
        match messages.set_message_id(&record.id, message_id).await {
            Ok(()) => return,
            Err(e) if e.is_unavailable() && now() < record.expires_at => {
                tracing::warn!(id = %record.id, error = %e, "cannot record the message id yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(RECORD_RETRY_LAST);
            }
            Err(e) => {
                tracing::error!(id = %record.id, error = %e, "could not record the message id");
                return;
            }
        }
    }
}

/// The question as it is now, if its message in `q`'s chat is still to be posted: it
/// is pending and `unposted` (its message there has no id yet).
async fn still_to_post(
    questions: &dyn Questions,
    q: &Queued,
    unposted: impl FnOnce(&Question) -> bool,
) -> Result<Option<Question>, StorageError> {
    let record = questions.get(&q.id).await?;
    let record = record.filter(|r| !r.is_terminal() && unposted(r));
    if record.is_none() {
        tracing::debug!(id = %q.id, chat_id = q.chat_id,
            "ended or posted while it waited for its turn: not posted");
    }
    Ok(record)
}
