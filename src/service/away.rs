//! Approvers away (issue 50): `/away until <time> [delegate]` and `/back`. While away, a
//! person is not mentioned in reminders (their delegate is), and a question of a route
//! whose approvers are all away goes, as a copy, to a delegate's private chat, where
//! the delegate may decide it; the agent's event stream says who has it now.
//!
//! The absences live in the database (every replica reads the same ones, and rereads
//! them with the chat rules); this process keeps the last read in [`Absentees`].

use std::sync::{Arc, RwLock};

use time::OffsetDateTime;

use super::commands::{CommandMessage, CommandReply, Commands};
use super::{Service, deliver, now};
use crate::config::Route;
use crate::domain::away::{self, Absence, Delegate};
use crate::domain::question::Question;
use crate::storage::StorageError;

/// The absences running, as last read from the database.
#[derive(Debug, Default)]
pub struct Absentees(RwLock<Vec<Absence>>);

impl Absentees {
    pub fn get(&self) -> Vec<Absence> {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether nobody is away (as last read): then nothing is delegated, and a new
    /// question needs no look.
    pub fn is_empty(&self) -> bool {
        self.0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .is_empty()
    }

    /// Replaces the absences held; whether they changed.
    fn set(&self, absences: Vec<Absence>) -> bool {
        let mut held = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let changed = *held != absences;
        *held = absences;
        changed
    }
}

/// What `/away` set, for its answer.
#[derive(Debug, Clone)]
pub struct AwaySet {
    pub until: OffsetDateTime,
    pub delegate: Option<Delegate>,
    /// The chat's routes of the person that nobody else approves: their questions go to
    /// the delegate (or, without one, wait for the person).
    pub alone_on: Vec<String>,
}

impl Commands {
    /// `/away until <time> [delegate]` from an approver of `mine`: the delegate, named
    /// as in `[people]` (a leading `@` is allowed), must be allowed to decide each of
    /// `mine` (an approver there, or one of its `delegates`).
    pub(super) async fn away(
        &self,
        m: &CommandMessage,
        words: &[String],
        mine: &[Arc<Route>],
        at: OffsetDateTime,
    ) -> Result<CommandReply, StorageError> {
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let (until, used) = match away::parse_until(&words, at) {
            Ok(found) => found,
            Err(why) => return Ok(CommandReply::Invalid(format!("/away until <time>: {why}"))),
        };
        let delegate = match &words[used..] {
            [] => None,
            [name] => {
                let name = name.trim_start_matches('@');
                let Some(&id) = self.config.people.get(name) else {
                    return Ok(CommandReply::Invalid(format!(
                        "'{name}' is no name of [people]: name the delegate as the configuration does"
                    )));
                };
                if id == m.from.id {
                    return Ok(CommandReply::Invalid(
                        "you cannot stand in for yourself: name someone else, or no one".into(),
                    ));
                }
                if let Some(route) = mine.iter().find(|r| !r.may_stand_in(id)) {
                    return Ok(CommandReply::Invalid(format!(
                        "{name} may not decide route {}: a delegate must be one of its approvers or listed in its delegates",
                        route.name
                    )));
                }
                Some(Delegate {
                    id,
                    name: name.to_owned(),
                })
            }
            _ => {
                return Ok(CommandReply::Invalid(
                    "/away until <time> [delegate]: one delegate at most, after the time".into(),
                ));
            }
        };
        let absence = Absence {
            person: m.from.id,
            until,
            delegate: delegate.clone(),
        };
        self.away.set_away(&absence, &m.from, at).await?;
        let alone_on = mine
            .iter()
            .filter(|r| r.approvers.iter().all(|a| *a == m.from.id))
            .map(|r| r.name.clone())
            .collect();
        Ok(CommandReply::Away(AwaySet {
            until,
            delegate,
            alone_on,
        }))
    }

    /// `/back`: ends the sender's absence now.
    pub(super) async fn back(
        &self,
        m: &CommandMessage,
        at: OffsetDateTime,
    ) -> Result<CommandReply, StorageError> {
        let ended = self.away.end_away(m.from.id, &m.from, at).await?;
        Ok(CommandReply::Back { was_away: ended })
    }
}

impl Service {
    /// Reads the running absences from the database into this process; whether they
    /// changed.
    pub async fn load_absences(&self) -> Result<bool, StorageError> {
        let absences = self.store.absences(now()).await?;
        Ok(self.absentees.set(absences))
    }

    /// After `/away` or `/back`: the absences reread, and every pending question whose
    /// route now has nobody but away approvers sent to a delegate.
    pub(super) async fn absences_changed(self: &Arc<Self>) {
        if let Err(e) = self.load_absences().await {
            tracing::warn!(error = %e, "could not reread the absences");
            return;
        }
        self.delegate_pending().await;
    }

    /// Sends to a delegate every pending question whose route has nobody but away
    /// approvers now (each once).
    pub(super) async fn delegate_pending(self: &Arc<Self>) {
        match self.store.pending_of(None, 10_000).await {
            Ok(pending) => {
                for q in pending {
                    self.delegate_if_all_away(&q).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the pending questions to delegate")
            }
        }
    }

    /// Sends `q` to a delegate's private chat when every approver of its route is away
    /// and one of them named a delegate (once: the copy is keyed by its chat). Not for an
    /// interaction that names its `target_humans`: only they may answer it.
    pub(super) async fn delegate_if_all_away(self: &Arc<Self>, q: &Question) {
        if q.is_terminal()
            || q.interaction
                .as_ref()
                .is_some_and(|i| !i.target_humans.is_empty())
        {
            return;
        }
        let Some(route) = self.config.route(&q.route) else {
            return;
        };
        let absences = self.absentees.get();
        let at = now();
        // Only to someone this route lets stand in: an absence set in one route's chat
        // names a delegate checked against that chat's routes, not every route.
        let Some(d) = away::delegate_for(&route.approvers, &absences, at)
            .filter(|d| route.may_stand_in(d.id))
        else {
            return;
        };
        let Ok(chat_id) = i64::try_from(d.id) else {
            return;
        };
        match self
            .store
            .delegate_question(&q.id, &d.name, chat_id, at)
            .await
        {
            Ok(Some(record)) => {
                tracing::info!(id = %q.id, route = %q.route, delegate = %d.name,
                    "every approver away: the question went to their delegate");
                self.metrics.question_step(&record, "delegated");
                self.changes.changed(&q.id);
                let (me, queued) = (self.clone(), deliver::Queued::copy(&record, chat_id));
                self.tasks.spawn(async move { me.deliver(queued).await });
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(id = %q.id, error = %e, "could not delegate a question"),
        }
    }
}
