//! An operator's tap or reply becomes an answer: who may answer, what the button means,
//! and, once the answers settle the question, the decision.
//!
//! A tap is judged in three steps: its question and message are found ([`Tapped::find`]),
//! who may answer is checked ([`Agree::may_not_answer`](super::Agree::may_not_answer)), and the button is read
//! ([`interpret`]); the console's decision goes through the last two as well.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use time::OffsetDateTime;

use super::console::ConsoleAnswer;
use super::interpret::{Meaning, Said, Verdict, in_option_order, interpret, labels_of};
use super::{Button, Reply, Service, Tap, TapAction, now};
use crate::config::Config;
use crate::domain::audit;
use crate::domain::ids::QuestionId;
use crate::domain::interaction::{self, Answer, Consensus, ConsensusMode, InteractionType};
use crate::domain::question::{self, Decision, Ending, Operator, Question, Status};
use crate::domain::text;
use crate::storage::{Answered, Audit, Decided, Messages, Questions, Steps, StorageError};

/// How a tap (or an answer from elsewhere) came out: what the person is told, and what
/// the chat shows next.
pub(super) struct Judged {
    /// The tap's answer, within Telegram's 200 characters.
    pub(super) text: String,
    /// Shown as an alert the person must dismiss, not as a toast.
    pub(super) alert: bool,
    pub(super) after: After,
}

impl Judged {
    pub(super) fn toast(text: impl Into<String>, after: After) -> Judged {
        Judged {
            text: text.into(),
            alert: false,
            after,
        }
    }

    pub(super) fn alert(text: impl Into<String>) -> Judged {
        Judged {
            text: text.into(),
            alert: true,
            after: After::Nothing,
        }
    }

    /// A late answer: it never overwrites the stored outcome; an interaction says so
    /// with an alert the operator must dismiss.
    fn late(r: &Question) -> Judged {
        Judged {
            text: already_decided(r),
            alert: r.interaction.is_some(),
            after: After::Nothing,
        }
    }
}

/// A refused tap or reply: what the person is told (as an alert) and the audit's reason.
#[derive(Debug, Clone, Copy)]
pub(super) struct Refused {
    pub(super) text: &'static str,
    pub(super) why: &'static str,
}

impl From<(&'static str, &'static str)> for Refused {
    fn from((text, why): (&'static str, &'static str)) -> Refused {
        Refused { text, why }
    }
}

impl Refused {
    /// Logs and audits the refusal of `from`'s tap or reply (in `chat_id` on
    /// `message_id`, about question `id` when known).
    pub(super) async fn audit(
        self,
        audit: &dyn Audit,
        from: &Operator,
        chat_id: Option<i64>,
        message_id: Option<i32>,
        id: Option<&QuestionId>,
    ) -> Result<Judged, StorageError> {
        let why = self.why;
        tracing::warn!(user_id = from.id, chat_id = ?chat_id, id = ?id.map(|i| i.as_str()), why, "answer refused");
        let event = audit::refused_tap(
            id.map(|i| i.as_str()),
            from,
            chat_id,
            message_id,
            why,
            now(),
        );
        audit.record_event(event).await?;
        Ok(Judged::alert(self.text))
    }
}

/// Audits the refusal of `tap` (about question `id` when known).
pub(super) async fn refuse_tap(
    audit: &dyn Audit,
    tap: &Tap,
    id: Option<&QuestionId>,
    refused: Refused,
) -> Result<Judged, StorageError> {
    refused
        .audit(audit, &tap.from, tap.chat_id, tap.message_id, id)
        .await
}

/// A tap's question and the message it was on: the first step of judging a tap.
struct Tapped {
    record: Question,
    action: TapAction,
    chat_id: i64,
    message_id: i32,
    /// The message was a copy of the question the service had no id for, learned now.
    learned: bool,
}

impl Tapped {
    /// The question `tap`'s button belongs to, if the button was on one of its messages;
    /// else the refusal (with the question, when it was found).
    async fn find(
        questions: &dyn Questions,
        messages: &dyn Messages,
        tap: &Tap,
    ) -> Result<Result<Tapped, (Option<QuestionId>, Refused)>, StorageError> {
        let refused =
            |id: Option<&QuestionId>, text, why| Err((id.cloned(), Refused { text, why }));
        let Some(Button { action, token }) = tap.button.clone() else {
            return Ok(refused(
                None,
                "This button is not valid.",
                "malformed callback data",
            ));
        };
        let Some(mut record) = questions.find_by_token(&token).await? else {
            return Ok(refused(
                None,
                "This request is unknown.",
                "unknown callback token",
            ));
        };
        // The token is bound to the chats the question was posted in; a token replayed in
        // another chat is refused. Within them, a message of the bot's own the service
        // has no id for is a copy it never heard of: a crash (or a connection lost after
        // Telegram took the message) between posting and storing the message id, and the
        // question posted again. It carries the question's buttons, so it is learned here
        // and counts like any copy: its tap decides, and the outcome is shown on it.
        let in_chat = record.messages().any(|(chat, _)| tap.chat_id == Some(chat));
        let known = record.messages().any(|(chat, message)| {
            tap.chat_id == Some(chat) && message.is_some() && message == tap.message_id
        }) || record
            .strays
            .iter()
            .any(|s| tap.chat_id == Some(s.chat_id) && tap.message_id == Some(s.message_id));
        // While a delivery is in flight its message id is not stored yet.
        let in_flight = record
            .messages()
            .any(|(chat, message)| tap.chat_id == Some(chat) && message.is_none());
        let (Some(chat_id), Some(message_id)) = (tap.chat_id, tap.message_id) else {
            return Ok(refused(
                Some(&record.id),
                "This button does not belong to this message.",
                "callback data without a chat message",
            ));
        };
        if !in_chat || !(known || in_flight || tap.carries_button) {
            return Ok(refused(
                Some(&record.id),
                "This button does not belong to this message.",
                "callback data from another chat or message",
            ));
        }
        let learned = !known && tap.carries_button;
        if learned {
            tracing::warn!(id = %record.id, chat_id, message_id,
                "a tap on a copy of the question the service had no id for: learning it");
            if let Some(stored) = messages
                .add_stray(&record.id, chat_id, message_id, now())
                .await?
            {
                record = stored;
            }
        }
        Ok(Ok(Tapped {
            record,
            action,
            chat_id,
            message_id,
            learned,
        }))
    }
}

/// A multi-choice toggle: option `key` in or out of `from`'s selection, shown on the
/// message they tapped. Nothing is answered until they send it.
async fn toggle(
    steps: &dyn Steps,
    record: Question,
    from: &Operator,
    chat_id: i64,
    message_id: i32,
    key: String,
) -> Result<Judged, StorageError> {
    let mut selection = steps.selection(&record.id, from.id).await?;
    match selection.iter().position(|k| *k == key) {
        Some(at) => {
            selection.remove(at);
        }
        None => selection.push(key),
    }
    let selection = in_option_order(&record, selection);
    steps.set_selection(&record.id, from.id, &selection).await?;
    let text = if selection.is_empty() {
        "Nothing selected".to_owned()
    } else {
        cut_for_toast(&format!("Selected: {}", labels_of(&record, &selection)))
    };
    Ok(Judged::toast(
        text,
        After::ShowSelection {
            record,
            chat_id,
            message_id,
            selection,
        },
    ))
}

impl Service {
    /// An operator tapped a button. Returns once the tap is decided (its answer or
    /// decision committed, or its refusal audited): only then may Telegram be told the
    /// update was handled. The tap is answered and the messages edited in the
    /// background, so the operator's client never keeps spinning. An `Err` means
    /// nothing was stored: the update is to be handled again (Telegram redelivers it).
    pub async fn handle_tap(self: &Arc<Self>, tap: Tap) -> Result<(), StorageError> {
        let (judged, result) = match self.judge_tap(&tap).await {
            Ok(judged) => (judged, Ok(())),
            Err(e) => {
                tracing::error!(error = %e, "could not process a tap; it is handled again when Telegram resends it");
                (
                    Judged::alert(
                        "This tap could not be recorded yet; it is being retried. The message shows the outcome once there is one.",
                    ),
                    Err(e),
                )
            }
        };
        let Judged { text, alert, after } = judged;
        let me = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = me.messenger.answer_tap(&tap.query_id, &text, alert).await {
                tracing::debug!(reason = %e.reason, "could not answer a tap");
            }
        });
        self.then(after);
        result
    }

    /// Judges a tap: its question and message, who may answer, what the button means;
    /// then the answer, or whatever else the button asks for.
    pub(super) async fn judge_tap(self: &Arc<Self>, tap: &Tap) -> Result<Judged, StorageError> {
        let audit: &dyn Audit = self.store.as_ref();
        if let Some(id) = &tap.revoke_grant {
            return self.revoke_grant_by_tap(tap, id).await;
        }
        if let Some(token) = &tap.allow_tools {
            return self.allow_tools_by_tap(tap, token).await;
        }
        if let Some(t) = &tap.chat_rule {
            return self.chat_rule_by_tap(tap, t).await;
        }
        let found = Tapped::find(self.store.as_ref(), self.store.as_ref(), tap).await?;
        let Tapped {
            record,
            action,
            chat_id,
            message_id,
            learned,
        } = match found {
            Ok(tapped) => tapped,
            Err((id, refused)) => return refuse_tap(audit, tap, id.as_ref(), refused).await,
        };
        if learned && record.is_terminal() {
            // Ended while nobody knew of this copy: it gets the outcome now.
            self.board
                .show_decision_on(record.clone(), chat_id, message_id);
        }
        if let Some(refused) = self
            .agree
            .may_not_answer(&self.chats, &record, chat_id, &tap.from, tap.from_is_bot)
            .await?
        {
            return refuse_tap(audit, tap, Some(&record.id), refused).await;
        }
        if record.is_terminal() {
            return Ok(Judged::late(&record));
        }
        match interpret(&record, action) {
            Meaning::Answer(said) => self.answer(record, &tap.from, said, None).await,
            Meaning::AskReason => {
                self.ask_reason(record, &tap.from, chat_id, message_id)
                    .await
            }
            Meaning::Extend => self.extend(record, &tap.from).await,
            Meaning::Toggle(key) => {
                let steps = self.store.as_ref();
                toggle(steps, record, &tap.from, chat_id, message_id, key).await
            }
            Meaning::SendSelection => {
                let selection = self.store.selection(&record.id, tap.from.id).await?;
                let said = Said::value(json!(in_option_order(&record, selection)));
                self.answer(record, &tap.from, said, None).await
            }
            Meaning::Invalid(why) => {
                let refused = Refused {
                    text: "This button is not valid.",
                    why,
                };
                refuse_tap(audit, tap, Some(&record.id), refused).await
            }
        }
    }

    /// Does in the chat, in the background, what a judged tap or answer calls for.
    pub(super) fn then(self: &Arc<Self>, after: After) {
        match after {
            After::Nothing => {}
            After::Finish(r) => self.board.finish(r),
            After::Refresh(r) => self.board.refresh(r),
            After::AskReason {
                record,
                chat_id,
                message_id,
                from,
            } => {
                let me = self.clone();
                self.tasks.spawn(async move {
                    let thread = me.timeline.thread_of(&record, chat_id);
                    match me
                        .messenger
                        .send_reason_prompt(&record, chat_id, thread, message_id, &from)
                        .await
                    {
                        Ok(prompt) => {
                            if let Err(e) = me
                                .store
                                .set_reason_prompt(&record.id, from.id, prompt)
                                .await
                            {
                                // A reply to the question itself still counts.
                                tracing::warn!(id = %record.id, error = %e, "could not record the reason prompt");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(id = %record.id, reason = %e.reason, "could not ask for the reason")
                        }
                    }
                });
            }
            After::ShowSelection {
                record,
                chat_id,
                message_id,
                selection,
            } => {
                let me = self.clone();
                self.tasks.spawn(async move {
                    if !matches!(me.store.get(&record.id).await, Ok(Some(r)) if !r.is_terminal()) {
                        return;
                    }
                    let mut view = me.board.view(&record, chat_id);
                    view.selection = selection;
                    if let Err(e) = me
                        .messenger
                        .update_message(&record, chat_id, message_id, &view)
                        .await
                    {
                        tracing::debug!(id = %record.id, reason = %e.reason, "could not show a selection");
                    }
                });
            }
        }
    }

    /// An approver tapped "Deny with reason": the request stays open, and the bot asks
    /// them (and only them) why, in the same chat. Their reply ends it (see
    /// [`Service::judge_reason_reply`]). Until it comes anyone may still decide, and the
    /// question ends at its deadline as it would have: the tap alone decides nothing, so
    /// a "no" is never recorded without the reason it promised.
    async fn ask_reason(
        self: &Arc<Self>,
        record: Question,
        from: &Operator,
        chat_id: i64,
        message_id: i32,
    ) -> Result<Judged, StorageError> {
        let Some(record) = self
            .store
            .request_reason(&record.id, from, chat_id, now())
            .await?
        else {
            let r = self.store.get(&record.id).await?.unwrap_or(record);
            return Ok(Judged::alert(already_decided(&r)));
        };
        self.metrics.question_step(&record, "reason_requested");
        self.changes.changed(&record.id);
        Ok(Judged::toast(
            "✋ Reply to the bot's message with your reason; the request stays open until it is in.",
            After::AskReason {
                record,
                chat_id,
                message_id,
                from: from.clone(),
            },
        ))
    }

    /// An approver tapped "+N min": the deadline moves, within the route's bounds, and
    /// everything that follows it (the message, the record, waiting agents, the
    /// scheduler) follows the new one.
    async fn extend(
        self: &Arc<Self>,
        record: Question,
        from: &Operator,
    ) -> Result<Judged, StorageError> {
        let Some(to) = extension_to(&self.config, &record) else {
            let refused = Refused {
                text: "This request cannot be given more time.",
                why: "no extension left within the route's bounds",
            };
            let (chat_id, message_id) = (Some(record.chat_id), record.message_id);
            return refused
                .audit(
                    self.store.as_ref(),
                    from,
                    chat_id,
                    message_id,
                    Some(&record.id),
                )
                .await;
        };
        let Some(extended) = self
            .store
            .extend(&record.id, record.expires_at, to, from, now())
            .await?
        else {
            // Ended, or someone else extended it first: nothing moved twice.
            let r = self.store.get(&record.id).await?.unwrap_or(record);
            if r.is_terminal() {
                return Ok(Judged::alert(already_decided(&r)));
            }
            return Ok(Judged {
                text: "Someone moved the deadline just now; the message shows it.".to_owned(),
                alert: true,
                after: After::Refresh(r),
            });
        };
        tracing::info!(id = %extended.id, by = from.id, expires_at = %question::rfc3339(extended.expires_at), "deadline extended");
        self.metrics.question_step(&extended, "extended");
        self.arm(&extended);
        self.changes.changed(&extended.id);
        let text = cut_for_toast(&format!(
            "⏳ More time: the deadline is now {}",
            question::operator_time(extended.expires_at)
        ));
        Ok(Judged::toast(text, After::Refresh(extended)))
    }

    /// A reply from someone who tapped "Deny with reason", to the bot's prompt or to the
    /// question itself: their reason, and with it the "no" it explains. `None` when the
    /// reply is not one (then it may still be a free-text answer).
    async fn judge_reason_reply(
        self: &Arc<Self>,
        reply: &Reply,
    ) -> Result<Option<After>, StorageError> {
        let Some(record) = self
            .store
            .reason_request_for(
                reply.chat_id,
                reply.reply_to,
                reply.reason_prompt_of.as_ref(),
                reply.from.id,
            )
            .await?
        else {
            return Ok(None);
        };
        if record.is_terminal() || reply.from_is_bot {
            return Ok(Some(After::Nothing));
        }
        if self.refused_reply(&record, reply).await? {
            return Ok(Some(After::Nothing));
        }
        let Some(reason) = question::reason_text(&reply.text) else {
            // An empty reply (a sticker, blanks) explains nothing: the request stays open
            // and the person can reply again.
            return Ok(Some(After::Nothing));
        };
        let said = Said::no(&record, Some(reason));
        let judged = self.answer(record, &reply.from, said, None).await?;
        Ok(Some(judged.after))
    }

    /// Someone replied to one of the bot's messages: a free-text answer when it is an
    /// open free-text question they may answer; anything else is ignored (groups chat).
    /// An `Err` means nothing was stored: the update is to be handled again.
    pub async fn handle_reply(self: &Arc<Self>, reply: Reply) -> Result<(), StorageError> {
        let after = self.judge_reply(&reply).await.inspect_err(|e| {
            tracing::error!(error = %e, "could not process a reply; it is handled again when Telegram resends it")
        })?;
        self.then(after);
        Ok(())
    }

    pub(super) async fn judge_reply(
        self: &Arc<Self>,
        reply: &Reply,
    ) -> Result<After, StorageError> {
        if let Some(after) = self.judge_reason_reply(reply).await? {
            return Ok(after);
        }
        let Some(record) = self
            .store
            .find_by_message(reply.chat_id, reply.reply_to)
            .await?
        else {
            return Ok(After::Nothing);
        };
        if record.kind() != InteractionType::FreeText || record.is_terminal() {
            return Ok(After::Nothing);
        }
        if self.refused_reply(&record, reply).await? {
            return Ok(After::Nothing);
        }
        let text: String = reply
            .text
            .chars()
            .take(interaction::MAX_FREE_TEXT_CHARS)
            .collect();
        let said = Said::value(json!(text));
        let judged = self.answer(record, &reply.from, said, None).await?;
        Ok(judged.after)
    }

    /// Whether `reply`'s author may not answer `record` there; a refusal is audited.
    async fn refused_reply(&self, record: &Question, reply: &Reply) -> Result<bool, StorageError> {
        let Some(refused) = self
            .agree
            .may_not_answer(
                &self.chats,
                record,
                reply.chat_id,
                &reply.from,
                reply.from_is_bot,
            )
            .await?
        else {
            return Ok(false);
        };
        let (chat_id, message_id) = (Some(reply.chat_id), Some(reply.reply_to));
        refused
            .audit(
                self.store.as_ref(),
                &reply.from,
                chat_id,
                message_id,
                Some(&record.id),
            )
            .await?;
        Ok(true)
    }

    /// Stores one person's answer and settles the question when the answers so far do.
    /// `console`, for an answer from the console: its edit and the event that audits it
    /// in the answer's own write.
    pub(super) async fn answer(
        self: &Arc<Self>,
        record: Question,
        from: &Operator,
        said: Said,
        console: Option<ConsoleAnswer>,
    ) -> Result<Judged, StorageError> {
        let (edit, also) = match console {
            Some(c) => (c.edit, Some(c.audited)),
            None => (None, None),
        };
        let Said {
            value,
            verdict,
            reason,
        } = said;
        let answer = Answer {
            respondent: respondent(&self.config, &record, from.id),
            by: Some(from.clone()),
            value,
            is_default: false,
            once: matches!(verdict, Some(Verdict::Approve { once: true })),
            reason,
            at: now(),
        };
        // An edit goes only with an answer that settles the question (see
        // `Question::editable`): it is part of the decision's one write.
        let decision = settled_by_one(&record, from, &answer, verdict).map(|o| Decision {
            edit,
            ..o.decide(answer.at)
        });
        let record = match self
            .store
            .add_answer(&record.id, &answer, decision.as_ref(), also.as_ref())
            .await?
        {
            Answered::Added(r) => r,
            Answered::AlreadyAnswered(r) | Answered::Closed(r) if r.is_terminal() => {
                return Ok(Judged::late(&r));
            }
            Answered::AlreadyAnswered(_) | Answered::Closed(_) => {
                return Ok(Judged::alert("You already answered."));
            }
            Answered::NotFound => return Ok(Judged::alert("This request is unknown.")),
        };
        if record.is_terminal() {
            self.on_decided(&record);
            return Ok(Judged::toast(tap_ack(&record), After::Finish(record)));
        }
        // Waiters are woken once: here when the question stays open, by the decision
        // when this answer settles it (a long-poll must not wake on a "partial" that
        // is already over).
        let Some(outcome) = settle(&self.config, &record) else {
            self.changes.changed(&record.id);
            let text = format!(
                "Answer recorded ({} of {} answered)",
                record.answers.len(),
                expected_answers(&self.config, &record)
            );
            return Ok(Judged::toast(text, After::Refresh(record)));
        };
        Ok(match self.decide(&record.id, outcome).await? {
            Decided::Applied(r) => Judged::toast(tap_ack(&r), After::Finish(r)),
            Decided::AlreadyTerminal(r) => Judged::late(&r),
            Decided::NotFound => Judged::alert("This request is unknown."),
        })
    }
}

/// The outcome `answer` settles `record` on by itself: a confirmation's, decided by its
/// button alone, or a first-response question's; `None` when the question waits for the
/// answers of several people. It is stored together with the answer, atomically.
fn settled_by_one(
    record: &Question,
    from: &Operator,
    answer: &Answer,
    verdict: Option<Verdict>,
) -> Option<Ending> {
    let reason = &answer.reason;
    match &record.interaction {
        Some(i) if i.consensus != ConsensusMode::FirstResponse => None,
        Some(_) => Some(Ending::Completed {
            value: answer.value.clone(),
            by: Some(from.clone()),
            reason: match reason {
                Some(why) => format!("denied by {from}; {}", text::their_words(why)),
                None => format!("answered by {from}"),
            },
            denial: reason.clone(),
        }),
        // A confirmation is decided by its button alone; anything else (which no
        // button of a confirmation produces) fails closed.
        None => Some(match verdict {
            Some(Verdict::Approve { .. }) => Ending::Approved {
                by: from.clone(),
                once: answer.once,
            },
            Some(Verdict::Deny) | None => match reason.clone() {
                Some(reason) => Ending::Denied {
                    by: from.clone(),
                    reason,
                },
                None => Ending::Cancelled(from.clone()),
            },
        }),
    }
}

/// How many answers the question waits for: its target humans, else the route's
/// approvers, else the people it was sent to privately.
pub(super) fn expected_answers(config: &Config, record: &Question) -> usize {
    if let Some(i) = &record.interaction
        && !i.target_humans.is_empty()
    {
        // One person named twice (`alice` twice, or `alice` and her id) answers once,
        // so targets count by the Telegram user they resolve to, as `is_target`
        // resolves them; a name that resolves to nobody counts by itself.
        let people: HashSet<Result<u64, &str>> = i
            .target_humans
            .iter()
            .map(|t| {
                config
                    .person(t)
                    .or_else(|| t.parse::<u64>().ok().filter(|id| id.to_string() == *t))
                    .ok_or(t.as_str())
            })
            .collect();
        return people.len();
    }
    match config.route(&record.route) {
        Some(route) => route.approvers.len(),
        None => 1 + record.copies.len(),
    }
}

/// `respondent` as AI-Parrot expects it: the person's name when `target_humans` uses
/// names, else the Telegram user id in decimal.
fn respondent(config: &Config, record: &Question, user_id: u64) -> String {
    record
        .interaction
        .as_ref()
        .and_then(|i| {
            i.target_humans
                .iter()
                .find(|t| config.person(t) == Some(user_id))
                .cloned()
        })
        .unwrap_or_else(|| user_id.to_string())
}

/// The deadline one more "+N min" tap would set, if the route offers one: at most
/// `max_extensions` times, and never past `max_timeout_seconds` after the request was
/// made.
pub(super) fn extension_to(config: &Config, r: &Question) -> Option<OffsetDateTime> {
    if r.is_terminal() {
        return None;
    }
    let route = config.route(&r.route)?;
    let step = route.extend_by?;
    if r.progress.extensions >= route.max_extensions {
        return None;
    }
    let cap = r.created_at + Duration::from_secs_f64(config.max_timeout_seconds);
    let to = (r.expires_at + step).min(cap);
    (to > r.expires_at).then_some(to)
}

/// The outcome the answers so far settle a question asked of several people on, if
/// they do.
fn settle(config: &Config, record: &Question) -> Option<Ending> {
    let i = record.interaction.as_ref()?;
    let values: Vec<Value> = record.answers.iter().map(|a| a.value.clone()).collect();
    let quorum = i
        .quorum
        .or_else(|| config.route(&record.route).and_then(|r| r.quorum));
    let expected = expected_answers(config, record);
    // A quorum approval stops on the first no: one approver's veto ends it at once,
    // whatever the others would have said.
    if i.consensus == ConsensusMode::Quorum
        && i.kind == InteractionType::Approval
        && let Some(no) = record.answers.iter().find(|a| a.value == json!(false))
    {
        let who = no
            .by
            .as_ref()
            .map_or_else(|| no.respondent.clone(), |op| op.to_string());
        return Some(Ending::Completed {
            value: json!(false),
            by: no.by.clone(),
            reason: match &no.reason {
                Some(why) => format!("vetoed by {who}; {}", text::their_words(why)),
                None => format!("vetoed by {who}: one no ends a quorum approval"),
            },
            denial: no.reason.clone(),
        });
    }
    match interaction::consensus(i.consensus, &values, expected, quorum) {
        Consensus::Open => None,
        Consensus::Settled(value) => Some(Ending::Completed {
            reason: format!(
                "settled by {} of {} answers ({})",
                values.iter().filter(|v| **v == value).count(),
                values.len(),
                i.consensus.as_str()
            ),
            by: None,
            value,
            denial: None,
        }),
        Consensus::NoAgreement(why) => Some(Ending::Completed {
            // AI-Parrot's own shape for a conflict.
            value: json!({"conflict": true, "responses": values}),
            by: None,
            reason: format!("no agreement: {why}"),
            denial: None,
        }),
    }
}

/// What to do with the chat after a tap was answered.
pub(super) enum After {
    Nothing,
    /// Show the outcome in every message.
    Finish(Question),
    /// Show progress in every message.
    Refresh(Question),
    /// Ask `from` for their reason, replying to the question's message in `chat_id`.
    AskReason {
        record: Question,
        chat_id: i64,
        message_id: i32,
        from: Operator,
    },
    /// Show one person's multi-choice selection on the message they tapped.
    ShowSelection {
        record: Question,
        chat_id: i64,
        message_id: i32,
        selection: Vec<String>,
    },
}

/// The toast after an answer that ended the question.
pub(super) fn tap_ack(r: &Question) -> String {
    match (r.interaction.is_some(), r.status) {
        (false, Status::Confirmed) => "✅ Approved".to_owned(),
        (false, _) => "❌ Cancelled".to_owned(),
        (true, _) => "✅ Answer recorded".to_owned(),
    }
}

/// Telegram shows at most 200 characters in a tap's answer; names and labels in it are
/// shown with their invisible characters as escapes, as everywhere operators read.
pub(super) fn cut_for_toast(text: &str) -> String {
    let text = crate::domain::text::visible(text, crate::domain::text::Layout::Line);
    if text.chars().count() <= 200 {
        text
    } else {
        text.chars().take(199).collect::<String>() + "…"
    }
}

/// The text a late tap gets: the stored outcome, within Telegram's 200-character limit.
pub(super) fn already_decided(r: &Question) -> String {
    cut_for_toast(&format!("Already decided: {}", r.reason))
}
