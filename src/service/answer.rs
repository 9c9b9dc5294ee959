//! An operator's tap or reply becomes an answer: who may answer, what the button means,
//! and, once the answers settle the question, the decision.

use super::console::ConsoleAnswer;
use super::*;
use crate::domain::authority::Refusal;

impl Service {
    /// Whether the Telegram user is one of the interaction's `target_humans` (by name
    /// through `[people]`, or by numeric id); everyone is when it names none.
    pub(super) fn is_target(&self, i: &Interaction, user_id: u64) -> bool {
        self.agree.authority().is_target(i, user_id)
    }

    /// How many answers the question waits for: its target humans, else the route's
    /// approvers, else the people it was sent to privately.
    pub(super) fn expected_answers(&self, record: &Question) -> usize {
        if let Some(i) = &record.interaction
            && !i.target_humans.is_empty()
        {
            // One person named twice (`alice` twice, or `alice` and her id) answers once,
            // so targets count by the Telegram user they resolve to, as `is_target`
            // resolves them; a name that resolves to nobody counts by itself.
            let people: std::collections::HashSet<Result<u64, &str>> = i
                .target_humans
                .iter()
                .map(|t| {
                    self.config
                        .person(t)
                        .or_else(|| t.parse::<u64>().ok().filter(|id| id.to_string() == *t))
                        .ok_or(t.as_str())
                })
                .collect();
            return people.len();
        }
        match self.config.route(&record.route) {
            Some(route) => route.approvers.len(),
            None => 1 + record.copies.len(),
        }
    }

    /// `respondent` as AI-Parrot expects it: the person's name when `target_humans` uses
    /// names, else the Telegram user id in decimal.
    pub(super) fn respondent(&self, record: &Question, user_id: u64) -> String {
        record
            .interaction
            .as_ref()
            .and_then(|i| {
                i.target_humans
                    .iter()
                    .find(|t| self.config.person(t) == Some(user_id))
                    .cloned()
            })
            .unwrap_or_else(|| user_id.to_string())
    }

    /// Why `from` may not answer `record` in `chat_id`, if they may not: what they are
    /// told and the audit's reason. This replica's configuration is asked first; when it
    /// allows the answer and other live replicas run other configurations, each of those
    /// must allow it too ([`super::agree`]). An `Err`: which configurations are live
    /// could not be read, so nothing may be decided yet.
    pub(super) async fn may_not_answer(
        &self,
        record: &Question,
        chat_id: i64,
        from: &Operator,
        from_is_bot: bool,
    ) -> Result<Option<(&'static str, &'static str)>, StorageError> {
        if from_is_bot {
            return Ok(Some((agree::NOT_ALLOWED, "a bot cannot answer")));
        }
        let moved = |route: &str| self.chats.moved_chat(route);
        if let Some(refusal) = self
            .agree
            .authority()
            .refusal(record, chat_id, from.id, &moved)
        {
            return Ok(Some(agree::refusal_text(refusal, false)));
        }
        let others = self.agree.other_configs().await?;
        if let Some((configuration, refusal)) = others.refusing(
            |view| view.refusal(record, chat_id, from.id, &moved),
            Refusal::NotAnApprover,
        ) {
            tracing::warn!(id = %record.id, user_id = from.id, %configuration,
                "another live replica's configuration does not allow this answer");
            return Ok(Some(agree::refusal_text(refusal, true)));
        }
        Ok(None)
    }

    /// An operator tapped a button. Returns once the tap is decided (its answer or
    /// decision committed, or its refusal audited): only then may Telegram be told the
    /// update was handled. The tap is answered and the messages edited in the
    /// background, so the operator's client never keeps spinning. An `Err` means
    /// nothing was stored: the update is to be handled again (Telegram redelivers it).
    pub async fn handle_tap(self: &Arc<Self>, tap: Tap) -> Result<(), StorageError> {
        let (text, alert, after, result) = match self.judge_tap(&tap).await {
            Ok((text, alert, after)) => (text, alert, after, Ok(())),
            Err(e) => {
                tracing::error!(error = %e, "could not process a tap; it is handled again when Telegram resends it");
                (
                    "This tap could not be recorded yet; it is being retried. The message shows the outcome once there is one.".to_owned(),
                    true,
                    After::Nothing,
                    Err(e),
                )
            }
        };
        let me = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = me.messenger.answer_tap(&tap.query_id, &text, alert).await {
                tracing::debug!(reason = %e.reason, "could not answer a tap");
            }
        });
        self.then(after);
        result
    }

    pub(super) fn then(self: &Arc<Self>, after: After) {
        match after {
            After::Nothing => {}
            After::Finish(r) => self.finish(r),
            After::Refresh(r) => self.refresh(r),
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
                    let mut view = me.view(&record, chat_id);
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

    /// Logs and audits a refused tap or reply; the operator gets `text` as an alert.
    pub(super) async fn refuse(
        &self,
        from: &Operator,
        chat_id: Option<i64>,
        message_id: Option<i32>,
        id: Option<&ConfirmationId>,
        text: &str,
        why: &'static str,
    ) -> Result<(String, bool, After), StorageError> {
        tracing::warn!(user_id = from.id, chat_id = ?chat_id, id = ?id.map(|i| i.as_str()), why, "answer refused");
        let event = audit::refused_tap(
            id.map(|i| i.as_str()),
            from,
            chat_id,
            message_id,
            why,
            now(),
        );
        self.store.record_event(event).await?;
        Ok((text.to_owned(), true, After::Nothing))
    }

    /// A grant's Revoke button (under `/grants`): only on the bot's own message, only by
    /// an approver of the grant's route in that route's chat. The storage revokes it
    /// (and audits who) in one conditional update; a grant already ended says so.
    async fn revoke_grant_by_tap(
        &self,
        tap: &Tap,
        id: &crate::domain::ids::GrantId,
    ) -> Result<(String, bool, After), StorageError> {
        if tap.from_is_bot || !tap.carries_button {
            return self
                .refuse(
                    &tap.from,
                    tap.chat_id,
                    tap.message_id,
                    None,
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
            CommandReply::GrantRevoked { grant, .. } => Ok((
                format!(
                    "🔒 Revoked: {} can no longer run {} for {} without asking.",
                    grant.agent,
                    crate::domain::grant::scope_in_words(&grant.scope),
                    grant.owner_id
                ),
                false,
                After::Nothing,
            )),
            CommandReply::Refused(_) => {
                self.refuse(
                    &tap.from,
                    tap.chat_id,
                    tap.message_id,
                    None,
                    "Only an approver of the grant's route, in its chat, can revoke it.",
                    "not an approver of the grant's route in its chat",
                )
                .await
            }
            CommandReply::Invalid(text) => Ok((text, true, After::Nothing)),
            _ => Ok(("This button is not valid.".to_owned(), true, After::Nothing)),
        }
    }

    pub(super) async fn judge_tap(
        self: &Arc<Self>,
        tap: &Tap,
    ) -> Result<(String, bool, After), StorageError> {
        let refuse = |id: Option<ConfirmationId>, text: &'static str, why: &'static str| {
            let id = id.clone();
            async move {
                self.refuse(
                    &tap.from,
                    tap.chat_id,
                    tap.message_id,
                    id.as_ref(),
                    text,
                    why,
                )
                .await
            }
        };
        if let Some(id) = &tap.revoke_grant {
            return self.revoke_grant_by_tap(tap, id).await;
        }
        let Some(Button { action, token }) = tap.button.clone() else {
            return refuse(None, "This button is not valid.", "malformed callback data").await;
        };
        let Some(mut record) = self.store.find_by_token(&token).await? else {
            return refuse(None, "This request is unknown.", "unknown callback token").await;
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
            return refuse(
                Some(record.id.clone()),
                "This button does not belong to this message.",
                "callback data without a chat message",
            )
            .await;
        };
        if !in_chat || !(known || in_flight || tap.carries_button) {
            return refuse(
                Some(record.id.clone()),
                "This button does not belong to this message.",
                "callback data from another chat or message",
            )
            .await;
        }
        if !known && tap.carries_button {
            tracing::warn!(id = %record.id, chat_id, message_id,
                "a tap on a copy of the question the service had no id for: learning it");
            if let Some(learned) = self
                .store
                .add_stray(&record.id, chat_id, message_id, now())
                .await?
            {
                record = learned;
            }
            if record.is_terminal() {
                // Ended while nobody knew of this copy: it gets the outcome now.
                self.show_outcome_on(record.clone(), chat_id, message_id);
            }
        }
        if let Some((text, why)) = self
            .may_not_answer(&record, chat_id, &tap.from, tap.from_is_bot)
            .await?
        {
            return refuse(Some(record.id.clone()), text, why).await;
        }
        if record.is_terminal() {
            // A late answer never overwrites the stored outcome; an interaction says so
            // with an alert the operator must dismiss.
            return Ok((
                already_decided(&record),
                record.interaction.is_some(),
                After::Nothing,
            ));
        }
        let kind = record.kind();
        match action {
            TapAction::DenyWithReason if offers_reason(kind) => {
                return self
                    .ask_reason(record, &tap.from, chat_id, message_id)
                    .await;
            }
            TapAction::Extend => return self.extend(record, &tap.from).await,
            TapAction::DenyWithReason => {
                return refuse(
                    Some(record.id.clone()),
                    "This button is not valid.",
                    "button does not fit the question",
                )
                .await;
            }
            _ => {}
        }
        // The button decides, never the values: a form approved with `{}` is approved.
        // "Approve for" on a question that offers no window is a plain approval.
        let verdict = match action {
            TapAction::Approve => Some(Verdict::Approve { once: true }),
            TapAction::ApproveWindow => Some(Verdict::Approve { once: false }),
            TapAction::Cancel => Some(Verdict::Deny),
            _ => None,
        };
        let value = match (kind, action) {
            (InteractionType::Approval, TapAction::Approve | TapAction::ApproveWindow) => {
                json!(true)
            }
            (InteractionType::Approval, TapAction::Cancel) => json!(false),
            (InteractionType::Form, TapAction::Approve | TapAction::ApproveWindow) => {
                record.form_values()
            }
            (InteractionType::Form, TapAction::Cancel) => Value::Null,
            (InteractionType::SingleChoice | InteractionType::Poll, TapAction::Choose(n)) => {
                match option_key(&record, n) {
                    Some(key) => json!(key),
                    None => {
                        return refuse(
                            Some(record.id.clone()),
                            "This button is not valid.",
                            "no such option",
                        )
                        .await;
                    }
                }
            }
            (InteractionType::MultiChoice, TapAction::Toggle(n)) => {
                let Some(key) = option_key(&record, n) else {
                    return refuse(
                        Some(record.id.clone()),
                        "This button is not valid.",
                        "no such option",
                    )
                    .await;
                };
                let mut selection = self.store.selection(&record.id, tap.from.id).await?;
                match selection.iter().position(|k| *k == key) {
                    Some(at) => {
                        selection.remove(at);
                    }
                    None => selection.push(key),
                }
                let selection = in_option_order(&record, selection);
                self.store
                    .set_selection(&record.id, tap.from.id, &selection)
                    .await?;
                let text = if selection.is_empty() {
                    "Nothing selected".to_owned()
                } else {
                    cut_for_toast(&format!("Selected: {}", labels_of(&record, &selection)))
                };
                return Ok((
                    text,
                    false,
                    After::ShowSelection {
                        record,
                        chat_id,
                        message_id,
                        selection,
                    },
                ));
            }
            (InteractionType::MultiChoice, TapAction::Done) => {
                let selection = self.store.selection(&record.id, tap.from.id).await?;
                json!(in_option_order(&record, selection))
            }
            _ => {
                return refuse(
                    Some(record.id.clone()),
                    "This button is not valid.",
                    "button does not fit the question",
                )
                .await;
            }
        };
        self.answer(record, &tap.from, value, verdict, None, None)
            .await
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
    ) -> Result<(String, bool, After), StorageError> {
        let Some(record) = self
            .store
            .request_reason(&record.id, from, chat_id, now())
            .await?
        else {
            let r = self.store.get(&record.id).await?.unwrap_or(record);
            return Ok((already_decided(&r), true, After::Nothing));
        };
        self.metrics.question_step(&record, "reason_requested");
        self.changes.changed(&record.id);
        Ok((
            "✋ Reply to the bot's message with your reason; the request stays open until it is in."
                .to_owned(),
            false,
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
    ) -> Result<(String, bool, After), StorageError> {
        let Some(to) = self.extension_to(&record) else {
            return self
                .refuse(
                    from,
                    Some(record.chat_id),
                    record.message_id,
                    Some(&record.id),
                    "This request cannot be given more time.",
                    "no extension left within the route's bounds",
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
                return Ok((already_decided(&r), true, After::Nothing));
            }
            return Ok((
                "Someone moved the deadline just now; the message shows it.".to_owned(),
                true,
                After::Refresh(r),
            ));
        };
        tracing::info!(id = %extended.id, by = from.id, expires_at = %crate::domain::question::rfc3339(extended.expires_at), "deadline extended");
        self.metrics.question_step(&extended, "extended");
        self.arm(&extended);
        self.changes.changed(&extended.id);
        Ok((
            cut_for_toast(&format!(
                "⏳ More time: the deadline is now {}",
                crate::domain::question::operator_time(extended.expires_at)
            )),
            false,
            After::Refresh(extended),
        ))
    }

    /// The deadline one more "+N min" tap would set, if the route offers one: at most
    /// `max_extensions` times, and never past `max_timeout_seconds` after the request
    /// was made.
    pub(super) fn extension_to(&self, r: &Question) -> Option<OffsetDateTime> {
        if r.is_terminal() {
            return None;
        }
        let route = self.config.route(&r.route)?;
        let step = route.extend_by?;
        if r.progress.extensions >= route.max_extensions {
            return None;
        }
        let cap = r.created_at + Duration::from_secs_f64(self.config.max_timeout_seconds);
        let to = (r.expires_at + step).min(cap);
        (to > r.expires_at).then_some(to)
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
        let Some(reason) = crate::domain::question::reason_text(&reply.text) else {
            // An empty reply (a sticker, blanks) explains nothing: the request stays open
            // and the person can reply again.
            return Ok(Some(After::Nothing));
        };
        let value = match record.kind() {
            InteractionType::Form => Value::Null,
            _ => json!(false),
        };
        let (_, _, after) = self
            .answer(
                record,
                &reply.from,
                value,
                Some(Verdict::Deny),
                Some(reason),
                None,
            )
            .await?;
        Ok(Some(after))
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
        let (_, _, after) = self
            .answer(record, &reply.from, json!(text), None, None, None)
            .await?;
        Ok(after)
    }

    /// Whether `reply`'s author may not answer `record` there; a refusal is audited.
    async fn refused_reply(&self, record: &Question, reply: &Reply) -> Result<bool, StorageError> {
        let Some((text, why)) = self
            .may_not_answer(record, reply.chat_id, &reply.from, reply.from_is_bot)
            .await?
        else {
            return Ok(false);
        };
        self.refuse(
            &reply.from,
            Some(reply.chat_id),
            Some(reply.reply_to),
            Some(&record.id),
            text,
            why,
        )
        .await?;
        Ok(true)
    }

    /// Stores one person's answer and settles the question when the answers so far do.
    /// `verdict` is the button an approve/cancel question was answered with; `console`,
    /// for an answer from the console, its edit and the event that audits it in the
    /// answer's own write.
    pub(super) async fn answer(
        self: &Arc<Self>,
        record: Question,
        from: &Operator,
        value: Value,
        verdict: Option<Verdict>,
        reason: Option<String>,
        console: Option<ConsoleAnswer>,
    ) -> Result<(String, bool, After), StorageError> {
        let (edit, also) = match console {
            Some(c) => (c.edit, Some(c.audited)),
            None => (None, None),
        };
        // "Once" only means something where a window was offered.
        let once =
            matches!(verdict, Some(Verdict::Approve { once: true })) && record.window_seconds > 0;
        let answer = Answer {
            respondent: self.respondent(&record, from.id),
            by: Some(from.clone()),
            value,
            is_default: false,
            once,
            reason: reason.clone(),
            at: now(),
        };
        // A confirmation or a first-response question is settled by this very answer:
        // stored together with its outcome, atomically.
        let settles = match &record.interaction {
            Some(i) if i.consensus != ConsensusMode::FirstResponse => None,
            Some(_) => Some(Outcome::Completed {
                value: answer.value.clone(),
                by: Some(from.clone()),
                reason: match &reason {
                    Some(why) => format!("denied by {from}; {}", text::their_words(why)),
                    None => format!("answered by {from}"),
                },
                denial: reason.clone(),
            }),
            // A confirmation is decided by its button alone; anything else (which no
            // button of a confirmation produces) fails closed.
            None => Some(match verdict {
                Some(Verdict::Approve { .. }) => Outcome::Approved {
                    by: from.clone(),
                    once,
                },
                Some(Verdict::Deny) | None => match reason.clone() {
                    Some(reason) => Outcome::Denied {
                        by: from.clone(),
                        reason,
                    },
                    None => Outcome::Cancelled(from.clone()),
                },
            }),
        };
        // An edit goes only with an answer that settles the question (see
        // `Question::editable`): it is part of the decision's one write.
        let decision = settles.map(|o| crate::domain::question::Decision {
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
                let alert = r.interaction.is_some();
                return Ok((already_decided(&r), alert, After::Nothing));
            }
            Answered::AlreadyAnswered(_) | Answered::Closed(_) => {
                return Ok(("You already answered.".to_owned(), true, After::Nothing));
            }
            Answered::NotFound => {
                return Ok(("This request is unknown.".to_owned(), true, After::Nothing));
            }
        };
        if record.is_terminal() {
            self.on_decided(&record);
            return Ok((tap_ack(&record), false, After::Finish(record)));
        }
        // Waiters are woken once: here when the question stays open, by the decision
        // when this answer settles it (a long-poll must not wake on a "partial" that
        // is already over).
        let Some(outcome) = self.settle(&record) else {
            self.changes.changed(&record.id);
            let text = format!(
                "Answer recorded ({} of {} answered)",
                record.answers.len(),
                self.expected_answers(&record)
            );
            return Ok((text, false, After::Refresh(record)));
        };
        Ok(match self.decide(&record.id, outcome).await? {
            Decided::Applied(r) => (tap_ack(&r), false, After::Finish(r)),
            Decided::AlreadyTerminal(r) => {
                let alert = r.interaction.is_some();
                (already_decided(&r), alert, After::Nothing)
            }
            Decided::NotFound => ("This request is unknown.".to_owned(), true, After::Nothing),
        })
    }

    /// The outcome the answers so far settle a question asked of several people on, if
    /// they do.
    pub(super) fn settle(&self, record: &Question) -> Option<Outcome> {
        let i = record.interaction.as_ref()?;
        let values: Vec<Value> = record.answers.iter().map(|a| a.value.clone()).collect();
        let quorum = i
            .quorum
            .or_else(|| self.config.route(&record.route).and_then(|r| r.quorum));
        let expected = self.expected_answers(record);
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
            return Some(Outcome::Completed {
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
            Consensus::Settled(value) => Some(Outcome::Completed {
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
            Consensus::NoAgreement(why) => Some(Outcome::Completed {
                // AI-Parrot's own shape for a conflict.
                value: json!({"conflict": true, "responses": values}),
                by: None,
                reason: format!("no agreement: {why}"),
                denial: None,
            }),
        }
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

/// Which of an approve/cancel question's buttons was tapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Approve; `once`: without the window the question offered.
    Approve {
        once: bool,
    },
    Deny,
}

/// Whether a question of this kind offers "Deny with reason": those answered with
/// approve or cancel.
pub(super) fn offers_reason(kind: InteractionType) -> bool {
    matches!(kind, InteractionType::Approval | InteractionType::Form)
}

pub(super) fn option_key(record: &Question, n: u8) -> Option<String> {
    record
        .interaction
        .as_ref()?
        .options
        .get(usize::from(n))
        .map(|o| o.key.clone())
}

/// `selection` in the order the options are listed (as AI-Parrot lists them back).
pub(super) fn in_option_order(record: &Question, selection: Vec<String>) -> Vec<String> {
    let Some(i) = &record.interaction else {
        return selection;
    };
    i.options
        .iter()
        .filter(|o| selection.contains(&o.key))
        .map(|o| o.key.clone())
        .collect()
}

pub(super) fn labels_of(record: &Question, keys: &[String]) -> String {
    let Some(i) = &record.interaction else {
        return keys.join(", ");
    };
    i.options
        .iter()
        .filter(|o| keys.contains(&o.key))
        .map(|o| o.label.as_str())
        .collect::<Vec<_>>()
        .join(", ")
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
