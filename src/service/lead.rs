//! Work that must happen once, however many replicas share the database.
//!
//! The longer why is in docs/architecture.md, "Module notes".

use std::collections::HashSet;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Service;
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::metrics::Metrics;
use crate::scheduler::Deadlines;
use crate::storage::{Coordination, StorageError};

/// The lease's name in the database.
const LEADER: &str = "leader";

/// Whether this process leads, and what it has taken on since it does.
pub struct Lead {
    /// Who this process is to the lease (random, so a restarted process is someone else),
    /// and to the record of its configuration ([`super::agree`]).
    holder: String,
    leading: watch::Sender<bool>,
    /// The pending questions this leader has taken on (armed, messages posted or on
    /// their way): a change heard for one of them needs nothing more from the leader.
    claimed: Mutex<HashSet<QuestionId>>,
    /// Until when the lease is ours for sure, by this process's clock.
    until: Mutex<Option<Instant>>,
    /// The leader's clock: each question it has taken on, at its next step.
    pub(super) deadlines: Deadlines,
    /// How long the lease lasts unless renewed (`database.lease_seconds`).
    lease: Duration,
    coordination: Arc<dyn Coordination>,
    metrics: Arc<Metrics>,
}

/// A random name for this process, as the lease and the configuration record know it.
pub(super) fn new_holder() -> String {
    format!("{}-{:016x}", std::process::id(), rand::random::<u64>())
}

impl Lead {
    pub(super) fn new(
        holder: String,
        lease: Duration,
        coordination: Arc<dyn Coordination>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Lead {
            holder,
            leading: watch::channel(false).0,
            claimed: Mutex::new(HashSet::new()),
            until: Mutex::new(None),
            deadlines: Deadlines::new(),
            lease,
            coordination,
            metrics,
        }
    }

    /// Whether this process does the work that must happen once (see the module).
    pub fn leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Takes `id` on when this process leads and has not yet: `true` means the caller
    /// now arms it and posts what it has to post.
    pub(super) fn claim(&self, id: &QuestionId) -> bool {
        self.leading() && self.claimed().insert(id.clone())
    }

    /// The questions this leader has taken on.
    fn claimed(&self) -> MutexGuard<'_, HashSet<QuestionId>> {
        self.claimed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this leader has taken `id` on.
    pub(super) fn has_claimed(&self, id: &QuestionId) -> bool {
        self.claimed().contains(id)
    }

    /// Forgets a question that has ended (its deadline found it so).
    pub(super) fn unclaim(&self, id: &QuestionId) {
        self.claimed().remove(id);
    }

    /// Schedules a look at `id` at `at`, if this process keeps the deadlines (it leads).
    pub(super) fn schedule(&self, id: &QuestionId, at: Instant) {
        if self.leading() {
            self.deadlines.schedule(id.clone(), at);
        }
    }

    /// Asks the scheduler to look at `id` again shortly: a storage error must not leave a
    /// request pending forever. Not leading, the leader's deadline for it stands.
    pub(super) fn retry_soon(&self, id: &QuestionId) {
        self.schedule(id, Instant::now() + Duration::from_secs(1));
    }

    /// One attempt to take or renew the lease; steps down when lost (or when it could
    /// not be renewed for so long that it may have expired). `true`: won while not
    /// leading, so the caller steps up ([`Service::try_lead`]).
    pub(super) async fn hold(&self) -> bool {
        let lease = self.lease;
        let renew_every = lease / 3;
        let asked = Instant::now();
        let held = tokio::time::timeout(
            renew_every,
            self.coordination.hold_lease(LEADER, &self.holder, lease),
        )
        .await;
        let why = match held {
            Ok(Ok(true)) => {
                self.set_lease_until(Some(asked + lease));
                return !self.leading();
            }
            Ok(Ok(false)) => {
                self.set_lease_until(None);
                if self.leading() {
                    tracing::warn!("another replica holds the leader lease: stepping down");
                    self.step_down();
                }
                return false;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "the database did not answer in time".to_owned(),
        };
        // Still ours until then; stepping down a renewal early keeps this side of it
        // whatever the next attempt meets.
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        let expiring = until.is_none_or(|u| Instant::now() + renew_every >= u);
        if self.leading() && expiring {
            tracing::warn!(error = %why, "cannot renew the leader lease: stepping down");
            self.step_down();
        } else if self.leading() {
            tracing::warn!(error = %why, "cannot renew the leader lease; retrying");
        } else {
            tracing::debug!(error = %why, "cannot read the leader lease");
        }
        false
    }

    fn set_lease_until(&self, until: Option<Instant>) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    pub(super) fn step_up(&self) {
        self.leading.send_replace(true);
        tracing::info!(holder = %self.holder, "leading: this replica does the work that must happen once");
        self.metrics.set_leading(true);
    }

    pub(super) fn step_down(&self) {
        self.leading.send_replace(false);
        self.metrics.set_leading(false);
        self.deadlines.clear();
        self.claimed().clear();
    }

    /// Gives the lease up at shutdown (after the leader's work has stopped), so another
    /// replica takes over at once instead of after `database.lease_seconds`.
    pub async fn release_lead(&self) {
        if !self.leading() {
            return;
        }
        self.step_down();
        if let Err(e) = self.coordination.release_lease(LEADER, &self.holder).await {
            tracing::warn!(error = %e, "cannot give the leader lease up; it expires by itself");
        }
    }

    /// Follows whether this process leads.
    fn watch(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }
}

impl Service {
    /// Arms a new question and posts it, if this process leads; otherwise the leader
    /// hears of it through the change feed and does ([`Service::adopt`]).
    pub(super) fn take_on(self: &Arc<Self>, stored: &Question) {
        if self.lead.claim(&stored.id) {
            self.arm(stored);
            self.post_first(stored);
        } else {
            tracing::debug!(id = %stored.id, "left to the leader to post");
        }
    }

    /// The leader heard of a change to `id` from another replica: a question it has not
    /// taken on yet (asked there) is armed and posted.
    pub(super) async fn adopt(self: Arc<Self>, id: QuestionId) {
        if !self.lead.leading() || self.lead.has_claimed(&id) {
            return;
        }
        match self.store.get(&id).await {
            Ok(Some(record)) if !record.is_terminal() => {
                // Only its first message: further copies are added (and posted) where
                // the question is asked again, or by the leader's own escalation.
                if self.lead.claim(&record.id) {
                    self.arm(&record);
                    self.post_first(&record);
                }
            }
            Ok(_) => {}
            Err(e) => {
                // The next change, or the next take-over, tries again; its deadline is
                // also kept by every agent that waits on it.
                tracing::warn!(id = %id, error = %e, "cannot read a question asked on another replica")
            }
        }
    }

    /// The leader heard that another replica decided `id`: it shows the outcome on the
    /// question's messages (every edit of a message is the leader's, within the bot's
    /// limits, as every post is).
    pub(super) async fn show_ended(self: Arc<Self>, id: QuestionId) {
        match self.store.get(&id).await {
            Ok(Some(record)) if record.is_terminal() => {
                self.lead.unclaim(&id);
                // A run reported there: every message is edited to show it (below the
                // outcome, which the same edit shows).
                if record.run_report.is_some() {
                    self.board.show_run(record);
                } else {
                    self.board.finish(record);
                }
            }
            Ok(_) => {}
            // Left unshown in the database: the next take-over shows it.
            Err(e) => {
                tracing::warn!(id = %id, error = %e, "cannot read a question decided on another replica")
            }
        }
    }

    /// Renews (or tries to take) the leader lease every third of its length until
    /// `stop`. The first attempt is [`Service::try_lead`], made before serving. Once
    /// `shutdown` has fired, a follower no longer tries (it would take work on just to
    /// drop it), while a leader keeps renewing until its work has drained (`stop`).
    pub async fn keep_lead(self: Arc<Self>, shutdown: CancellationToken, stop: CancellationToken) {
        let renew_every = self.config.lease / 3;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(renew_every) => {}
            }
            if shutdown.is_cancelled() && !self.lead.leading() {
                return;
            }
            if let Err(e) = self.try_lead().await {
                tracing::error!(error = %e, "cannot take over the pending questions; trying again");
            }
        }
    }

    /// One attempt to take or renew the lease; steps up when won, down when lost (or
    /// when it could not be renewed for so long that it may have expired). Returns how
    /// many questions are pending when this attempt stepped up (the take-over's count).
    /// An error: stepping up, the pending questions could not be read (this replica
    /// stays a follower, and the next attempt tries again).
    pub async fn try_lead(self: &Arc<Self>) -> Result<Option<usize>, StorageError> {
        if !self.lead.hold().await {
            return Ok(None);
        }
        self.lead.step_up();
        let taken = self.take_over().await;
        if taken.is_err() {
            self.lead.step_down();
        }
        taken.map(Some)
    }

    /// Runs `work` whenever this process leads, until `stop`: each run gets the service
    /// and a token that is cancelled when leadership is lost (or at `stop`), and should
    /// return then.
    pub async fn while_leading<F, Fut>(self: Arc<Self>, stop: CancellationToken, mut work: F)
    where
        F: FnMut(Arc<Service>, CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut leading = self.lead.watch();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                won = leading.wait_for(|l| *l) => if won.is_err() { return },
            }
            let term = stop.child_token();
            let mut lost = leading.clone();
            let ends = term.clone();
            let watcher = tokio::spawn(async move {
                let _ = lost.wait_for(|l| !*l).await;
                ends.cancel();
            });
            work(self.clone(), term.clone()).await;
            // Work that ended by itself (nothing to do) waits for the next term.
            tokio::select! {
                _ = term.cancelled() => {}
                _ = stop.cancelled() => {}
            }
            watcher.abort();
            if stop.is_cancelled() {
                return;
            }
        }
    }
}
