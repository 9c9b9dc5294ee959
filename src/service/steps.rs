//! What happens to a question between its delivery and its outcome, on the clock:
//! reminders, escalation to another route, and the deadline itself (which "+N min"
//! moves). Each is a stored point in the question's life, claimed with a conditional
//! update before it is acted on, so a restart neither repeats nor skips one; the
//! scheduler holds one entry per question, at its next point.

use std::collections::HashSet;
use std::sync::Arc;

use time::OffsetDateTime;

use super::agree::Agree;
use super::away::Absentees;
use super::chats::Chats;
use super::{Messenger, Service, deliver, instant_at, now};
use crate::config::{Config, Escalation, Route};
use crate::domain::away;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::domain::sla::{Sla, SlaMark};

/// Someone a reminder names, so Telegram notifies them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    pub user_id: u64,
    /// Their `[people]` name, if the configuration gives one; otherwise the messenger
    /// shows the name Telegram knows them by (a bare id helps nobody in a chat).
    pub name: Option<String>,
}

/// Most people one reminder mentions; the rest are counted. Telegram notifies only a
/// few mentions per message, and a wall of names on a phone helps nobody.
pub const MAX_MENTIONS: usize = 10;

/// The points in a question's life the clock brings, as its route's configuration sets
/// them: reminders, escalation, the deadline; and where its messages go meanwhile.
pub struct Timeline {
    config: Arc<Config>,
    chats: Arc<Chats>,
    /// Who a reminder may name (an interaction's target humans).
    agree: Arc<Agree>,
    messenger: Arc<dyn Messenger>,
    /// Who is away: a reminder mentions their delegate instead.
    absentees: Arc<Absentees>,
}

impl Timeline {
    pub(super) fn new(
        config: Arc<Config>,
        chats: Arc<Chats>,
        agree: Arc<Agree>,
        messenger: Arc<dyn Messenger>,
        absentees: Arc<Absentees>,
    ) -> Self {
        Timeline {
            config,
            chats,
            agree,
            messenger,
            absentees,
        }
    }

    /// The reminder points of `r`'s route that fall before its deadline, in time order.
    pub(super) fn reminder_times(&self, r: &Question) -> Vec<OffsetDateTime> {
        let Some(route) = self.config.route(&r.route) else {
            return Vec::new();
        };
        let mut at: Vec<OffsetDateTime> = route
            .remind_after
            .iter()
            .map(|w| w.at(r.created_at, r.expires_at))
            .filter(|t| *t < r.expires_at)
            .collect();
        at.sort();
        at
    }

    /// How many of `r`'s reminder points have passed at `now`.
    pub(super) fn reminders_passed(&self, r: &Question, now: OffsetDateTime) -> u32 {
        let passed = self.reminder_times(r).iter().filter(|t| **t <= now).count();
        u32::try_from(passed).unwrap_or(u32::MAX)
    }

    /// Whether a reminder of `r` is due at `now` and not yet sent.
    pub(super) fn reminder_due(&self, r: &Question, now: OffsetDateTime) -> bool {
        self.reminders_passed(r, now) > r.progress.reminders_sent
    }

    /// The route's escalation, when `r` was asked on a route that has one.
    pub(super) fn escalation_of(&self, r: &Question) -> Option<(&Escalation, Arc<Route>)> {
        let e = self.config.route(&r.route)?.escalation.as_ref()?;
        Some((e, self.config.route(&e.to)?.clone()))
    }

    /// The route `r` was escalated to, once it was.
    pub(super) fn escalated_to(&self, r: &Question) -> Option<(&Escalation, Arc<Route>)> {
        r.progress.escalated_at?;
        self.escalation_of(r)
    }

    /// When `r` next needs the scheduler: its next reminder, its escalation, or its
    /// deadline, whichever comes first.
    pub(super) fn next_step_at(&self, r: &Question) -> OffsetDateTime {
        let mut next = r.expires_at;
        if let Some(t) = self
            .reminder_times(r)
            .get(r.progress.reminders_sent as usize)
        {
            next = next.min(*t);
        }
        if r.progress.escalated_at.is_none()
            && let Some((e, _)) = self.escalation_of(r)
        {
            next = next.min(e.after.at(r.created_at, r.expires_at));
        }
        if let Some(t) = self
            .sla_of(r)
            .and_then(|sla| sla.next_at(r.created_at, r.progress.sla_marks))
        {
            next = next.min(t);
        }
        next
    }

    /// The SLA of `r`'s route, if it has one.
    pub(super) fn sla_of(&self, r: &Question) -> Option<Sla> {
        self.config.route(&r.route)?.sla
    }

    /// The forum topic a message of `r` in `chat_id` goes to: its route's (or the
    /// escalation route's, in that route's chat), if the route names one.
    pub(super) fn thread_of(&self, r: &Question, chat_id: i64) -> Option<i32> {
        if chat_id == r.chat_id {
            return self.config.route(&r.route).and_then(|route| route.topic_id);
        }
        let (_, to) = self.escalation_of(r)?;
        (self.chats.chat_of(&to.name, to.chat_id) == chat_id)
            .then_some(to.topic_id)
            .flatten()
    }

    /// Replies to every route message of the question (its first, and the escalation
    /// route's copy) naming the approvers there who have not answered.
    pub(super) async fn send_reminders(&self, r: Question) {
        let mut targets: Vec<(i64, Option<i32>, Vec<u64>)> = Vec::new();
        let at = now();
        let absences = self.absentees.get();
        let to_remind = |route: &Route| away::mentioned(&to_remind(route, at), &absences, at);
        if let Some(route) = self.config.route(&r.route) {
            targets.push((r.chat_id, r.message_id, to_remind(route)));
        }
        if let Some((_, to)) = self.escalated_to(&r)
            && let Some(copy) = r
                .copies
                .iter()
                .find(|c| c.recipient == route_copy_name(&to.name))
        {
            targets.push((copy.chat_id, copy.message_id, to_remind(&to)));
        }
        for (chat_id, message_id, approvers) in targets {
            let Some(message_id) = message_id else {
                continue;
            };
            let answered: Vec<u64> = r
                .answers
                .iter()
                .filter_map(|a| a.by.as_ref().map(|b| b.id))
                .collect();
            let waiting: Vec<Mention> = approvers
                .into_iter()
                .filter(|id| !answered.contains(id))
                .filter(|id| {
                    r.interaction
                        .as_deref()
                        .is_none_or(|i| self.agree.authority().is_target(i, *id))
                })
                .map(|user_id| Mention {
                    user_id,
                    name: self.config.name_of(user_id),
                })
                .collect();
            let thread = self.thread_of(&r, chat_id);
            match self
                .messenger
                .send_reminder(&r, chat_id, thread, message_id, &waiting)
                .await
            {
                Ok(_) => tracing::info!(id = %r.id, chat_id, "reminder sent"),
                Err(e) => {
                    tracing::warn!(id = %r.id, chat_id, reason = %e.reason, "could not send a reminder")
                }
            }
        }
    }
}

impl Service {
    /// Arms the scheduler for `r`'s next step, if this replica keeps the deadlines (it
    /// leads: see [`super::lead`]).
    pub(super) fn arm(&self, r: &Question) {
        if !r.is_terminal() && self.lead.leading() {
            let at = instant_at(self.timeline.next_step_at(r), now());
            self.lead.schedule(&r.id, at);
        }
    }

    /// The scheduler's callback: takes whatever steps of the question are due (its
    /// timeout, a reminder, its escalation) and arms the next one.
    pub(super) async fn step(self: &Arc<Self>, id: &QuestionId) {
        let record = match self.store.get(id).await {
            Ok(Some(r)) if !r.is_terminal() => r,
            Ok(_) => return self.lead.unclaim(id),
            Err(e) => {
                tracing::error!(id = %id, error = %e, "could not read a due request; retrying");
                self.lead.retry_soon(id);
                return;
            }
        };
        let now = now();
        if record.expires_at <= now {
            self.time_out(record).await;
            return self.lead.unclaim(id);
        }
        let mut record = record;
        if let Some(r) = self.escalate_if_due(&record, now).await {
            record = r;
        }
        // A reminder replies to the question's message. Due before that message is out
        // (paced behind others in a busy group, or Telegram slow to take it), it waits
        // for it, looked at again each second, rather than being spent on nothing.
        let reminder_waits =
            record.message_id.is_none() && self.timeline.reminder_due(&record, now);
        if !reminder_waits && let Some(r) = self.remind_if_due(&record, now).await {
            record = r;
        }
        if let Some(r) = self.mark_sla_if_due(&record, now).await {
            record = r;
        }
        if reminder_waits {
            let again = (now + std::time::Duration::from_secs(1)).min(record.expires_at);
            self.lead.schedule(id, instant_at(again, now));
        } else {
            self.arm(&record);
        }
    }

    /// Marks the card "at risk" or "overdue" when the route's SLA says so (once: claimed
    /// first, as a reminder is; marks that both passed while the service was down make
    /// one step, to "overdue"), and counts a breach once.
    async fn mark_sla_if_due(
        self: &Arc<Self>,
        r: &Question,
        now: OffsetDateTime,
    ) -> Option<Question> {
        let mark = self.timeline.sla_of(r)?.mark_at(r.created_at, now)?;
        if mark.count() <= r.progress.sla_marks {
            return None;
        }
        let marked = match self
            .store
            .claim_sla_mark(&r.id, r.progress.sla_marks, mark, now)
            .await
        {
            Ok(Some(marked)) => marked,
            Ok(None) => return None,
            Err(e) => {
                tracing::error!(id = %r.id, error = %e, "could not store an SLA mark; retrying");
                self.lead.retry_soon(&r.id);
                return None;
            }
        };
        let step = match mark {
            SlaMark::AtRisk => "sla_at_risk",
            SlaMark::Overdue => "sla_overdue",
        };
        tracing::info!(id = %r.id, route = %r.route, step, "SLA mark");
        self.metrics.question_step(&marked, step);
        if mark == SlaMark::Overdue {
            self.metrics.sla_breached(&marked);
        }
        self.changes.changed(&r.id);
        self.board.refresh(marked.clone());
        Some(marked)
    }

    /// Posts the question to the escalation route when its point has passed (once: the
    /// claim is a conditional update). Returns the record as it then is.
    async fn escalate_if_due(
        self: &Arc<Self>,
        r: &Question,
        now: OffsetDateTime,
    ) -> Option<Question> {
        if r.progress.escalated_at.is_some() {
            return None;
        }
        let (e, to) = self.timeline.escalation_of(r)?;
        if e.after.at(r.created_at, r.expires_at) > now {
            return None;
        }
        let chat_id = self.chats.chat_of(&to.name, to.chat_id);
        let escalated = match self
            .store
            .escalate(&r.id, &route_copy_name(&to.name), chat_id, now)
            .await
        {
            Ok(Some(escalated)) => escalated,
            Ok(None) => return None,
            Err(e) => {
                tracing::error!(id = %r.id, error = %e, "could not store an escalation; retrying");
                self.lead.retry_soon(&r.id);
                return None;
            }
        };
        tracing::info!(id = %r.id, from = %r.route, to = %to.name, "question escalated");
        self.metrics.question_step(&escalated, "escalated");
        self.changes.changed(&r.id);
        let me = self.clone();
        let queued = deliver::Queued::copy(&escalated, chat_id);
        self.tasks.spawn(async move { me.deliver(queued).await });
        // The first route's message now says where the question went.
        self.board.refresh(escalated.clone());
        Some(escalated)
    }

    /// Sends the reminder whose point has passed, once (claimed first: a crash right
    /// after the claim loses that one reminder rather than sending it twice; a restart
    /// later sends the next). Points that all passed while the service was down make one
    /// reminder, not a burst.
    async fn remind_if_due(
        self: &Arc<Self>,
        r: &Question,
        now: OffsetDateTime,
    ) -> Option<Question> {
        let passed = self.timeline.reminders_passed(r, now);
        if passed <= r.progress.reminders_sent {
            return None;
        }
        let reminded = match self
            .store
            .claim_reminders(&r.id, r.progress.reminders_sent, passed, now)
            .await
        {
            Ok(Some(reminded)) => reminded,
            Ok(None) => return None,
            Err(e) => {
                tracing::error!(id = %r.id, error = %e, "could not store a reminder; retrying");
                self.lead.retry_soon(&r.id);
                return None;
            }
        };
        self.metrics.question_step(&reminded, "reminded");
        self.changes.changed(&r.id);
        let timeline = self.timeline.clone();
        let record = reminded.clone();
        self.tasks
            .spawn(async move { timeline.send_reminders(record).await });
        Some(reminded)
    }
}

/// The `recipient` of the copy an escalation posts to a route (copies to people carry
/// their `[people]` name; a route's name cannot be one, as it starts with `route:`).
pub(super) fn route_copy_name(route: &str) -> String {
    format!("route:{route}")
}

/// Who a reminder on `route` names at `at`: whoever its rota has on call then; every
/// approver when it has no rota, or nobody's hours cover the moment (better too many
/// people than none).
fn to_remind(route: &Route, at: OffsetDateTime) -> Vec<u64> {
    let on_call = route.on_call.as_ref().map(|o| o.at(at)).unwrap_or_default();
    if on_call.is_empty() {
        sorted(&route.approvers)
    } else {
        on_call
    }
}

fn sorted(ids: &HashSet<u64>) -> Vec<u64> {
    let mut v: Vec<u64> = ids.iter().copied().collect();
    v.sort_unstable();
    v
}
