//! Showing a question as it stands in every message of it: progress while it is
//! pending, the outcome once it ended, then the run the agent reported. [`Board`] only
//! shows; the pipeline decides what happened and hands it the record.
//!
//! The edits run in the background (the service's task tracker, so shutdown waits for
//! them) and record what they showed, so a restart edits again only what a crash
//! interrupted.

use std::sync::Arc;

use tokio_util::task::TaskTracker;

use super::answer::{expected_answers, extension_to};
use super::steps::Timeline;
use super::{Chats, EscalationView, Lead, Messenger, View};
use crate::config::Config;
use crate::domain::ids::QuestionId;
use crate::domain::interaction::ConsensusMode;
use crate::domain::question::Question;
use crate::domain::sla::SlaMark;
use crate::storage::{Messages, Questions, Runs, Shown, StorageError};

/// How many stripes [`EditStripes`] has: questions whose edits wait on each other only
/// when they share one.
const EDIT_STRIPES: usize = 256;

/// Serialises the background edits that show how a question ended (its outcome, then
/// its run, which an agent may report a moment after the tap): each takes its question's
/// stripe and reads the record afresh under it, so whichever edit comes last shows the
/// latest state, and a late outcome edit never wipes the run line out.
struct EditStripes(Box<[tokio::sync::Mutex<()>]>);

impl Default for EditStripes {
    fn default() -> Self {
        EditStripes(
            (0..EDIT_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        )
    }
}

impl EditStripes {
    async fn lock(&self, id: &QuestionId) -> tokio::sync::MutexGuard<'_, ()> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        id.as_str().hash(&mut h);
        let i = usize::try_from(h.finish() % EDIT_STRIPES as u64).unwrap_or(0);
        self.0[i].lock().await
    }
}

/// The questions' messages in Telegram, kept showing what is stored.
pub(super) struct Board {
    config: Arc<Config>,
    questions: Arc<dyn Questions>,
    /// Which messages show the outcome.
    messages: Arc<dyn Messages>,
    /// Which runs are shown.
    runs: Arc<dyn Runs>,
    messenger: Arc<dyn Messenger>,
    chats: Arc<Chats>,
    timeline: Arc<Timeline>,
    /// Only the leader edits (another replica's outcome reaches it as a change).
    lead: Arc<Lead>,
    /// The service's background work, which shutdown waits for.
    tasks: TaskTracker,
    /// Held while the messages of a question are edited to show how it ended.
    edits: EditStripes,
}

/// What a [`Board`] stands on.
pub(super) struct BoardParts {
    pub config: Arc<Config>,
    pub questions: Arc<dyn Questions>,
    pub messages: Arc<dyn Messages>,
    pub runs: Arc<dyn Runs>,
    pub messenger: Arc<dyn Messenger>,
    pub chats: Arc<Chats>,
    pub timeline: Arc<Timeline>,
    pub lead: Arc<Lead>,
    pub tasks: TaskTracker,
}

impl Board {
    pub(super) fn new(parts: BoardParts) -> Self {
        let BoardParts {
            config,
            questions,
            messages,
            runs,
            messenger,
            chats,
            timeline,
            lead,
            tasks,
        } = parts;
        Board {
            config,
            questions,
            messages,
            runs,
            messenger,
            chats,
            timeline,
            lead,
            tasks,
            edits: EditStripes::default(),
        }
    }

    /// What a message of `record` in `chat_id` shows besides the record.
    pub(super) fn view(&self, record: &Question, chat_id: i64) -> View {
        // Progress is only worth showing when more than one answer is awaited.
        let several = record
            .interaction
            .as_ref()
            .is_some_and(|i| i.consensus != ConsensusMode::FirstResponse);
        View {
            expected: if several {
                expected_answers(&self.config, record)
            } else {
                1
            },
            selection: Vec::new(),
            group: chat_id < 0,
            thread: self.timeline.thread_of(record, chat_id),
            extend_seconds: extension_to(&self.config, record)
                .map(|to| u64::try_from((to - record.expires_at).whole_seconds()).unwrap_or(0)),
            escalation: self.timeline.escalated_to(record).and_then(|(_, to)| {
                Some(EscalationView {
                    from_route: record.route.clone(),
                    to_route: to.name.clone(),
                    at: record.progress.escalated_at?,
                    here: chat_id != record.chat_id
                        && chat_id == self.chats.chat_of(&to.name, to.chat_id),
                })
            }),
            review: self.chats.review_of(record, chat_id),
            sla: SlaMark::of_count(record.progress.sla_marks).zip(
                self.timeline
                    .sla_of(record)
                    .map(|sla| sla.at(record.created_at, SlaMark::Overdue)),
            ),
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
            // shown by this edit too, and never undone by it (see [`EditStripes`]).
            let _editing = me.edits.lock(&record.id).await;
            let record = afresh(me.questions.as_ref(), record).await;
            let mut shown = Vec::new();
            for (chat_id, message_id) in record.messages().collect::<Vec<_>>() {
                let Some(message_id) = message_id else {
                    continue;
                };
                shown.push((chat_id, message_id));
                if me.show_decision(&record, chat_id, message_id).await {
                    let what = if chat_id == record.chat_id {
                        Shown::Decision
                    } else {
                        Shown::CopyDecision { chat_id }
                    };
                    let marked = me.messages.mark_shown(&record.id, what).await;
                    if let Err(e) = marked {
                        tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                    }
                }
            }
            for stray in record.strays.iter().filter(|s| !s.outcome_shown) {
                // A tap that raced the storing of the id can make a known message a
                // stray too: it is edited once, with the message it is.
                if shown.contains(&(stray.chat_id, stray.message_id)) {
                    let what = Shown::StrayDecision {
                        chat_id: stray.chat_id,
                        message_id: stray.message_id,
                    };
                    let marked = me.messages.mark_shown(&record.id, what).await;
                    if let Err(e) = marked {
                        tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                    }
                } else {
                    me.show_stray_decision(&record, stray.chat_id, stray.message_id)
                        .await;
                }
            }
        });
    }

    /// Shows the outcome on one message learned from a tap after the question ended.
    pub(super) fn show_decision_on(
        self: &Arc<Self>,
        record: Question,
        chat_id: i64,
        message_id: i32,
    ) {
        let me = self.clone();
        self.tasks.spawn(async move {
            me.show_stray_decision(&record, chat_id, message_id).await;
        });
    }

    async fn show_stray_decision(&self, record: &Question, chat_id: i64, message_id: i32) {
        if self.show_decision(record, chat_id, message_id).await
            && let Err(e) = self
                .messages
                .mark_shown(
                    &record.id,
                    Shown::StrayDecision {
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
    async fn show_decision(&self, record: &Question, chat_id: i64, message_id: i32) -> bool {
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
            let record = match me.questions.get(&record.id).await {
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

    /// Edits every message of the question (its first, its copies, the strays learned
    /// from taps) to show the run below the decision, in the background, and records
    /// that they do, so a restart edits again only what a crash interrupted.
    pub(super) fn show_run(self: &Arc<Self>, record: Question) {
        if !self.lead.leading() {
            return; // the leader hears of it and shows it
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            let _editing = me.edits.lock(&record.id).await;
            let record = afresh(me.questions.as_ref(), record).await;
            let Some(reported_at) = record.run_report.as_ref().map(|e| e.reported_at) else {
                return;
            };
            let strays = record.strays.iter().map(|s| (s.chat_id, Some(s.message_id)));
            let mut every: Vec<(i64, i32)> = record
                .messages()
                .chain(strays)
                .filter_map(|(chat, message)| message.map(|m| (chat, m)))
                .collect();
            every.sort_unstable();
            every.dedup();
            let mut all_shown = true;
            for (chat_id, message_id) in every {
                let view = me.view(&record, chat_id);
                if let Err(e) = me
                    .messenger
                    .update_message(&record, chat_id, message_id, &view)
                    .await
                {
                    tracing::warn!(id = %record.id, reason = %e.reason, "could not show the outcome report");
                    all_shown = false;
                }
            }
            if all_shown
                && let Err(e) = me.runs.mark_run_shown(&record.id, reported_at).await
            {
                tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome report");
            }
        });
    }

    /// After a (re)start: shows the runs a crash kept from their messages.
    pub(super) async fn show_unshown_runs(self: &Arc<Self>) -> Result<(), StorageError> {
        for record in self.runs.unshown_runs().await? {
            tracing::info!(id = %record.id, "showing an outcome report a restart interrupted");
            self.show_run(record);
        }
        Ok(())
    }
}

/// `record` as stored now (as given when it cannot be read): an edit in the
/// background shows what is, not what was when it was queued.
async fn afresh(questions: &dyn Questions, record: Question) -> Question {
    match questions.get(&record.id).await {
        Ok(Some(now)) => now,
        Ok(None) => record,
        Err(e) => {
            tracing::debug!(id = %record.id, error = %e, "showing the record as it was");
            record
        }
    }
}
