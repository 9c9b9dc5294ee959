//! Replicas agree, or the narrowest view wins.
//!
//! Who may answer a question or use an operator command is read from the configuration,
//! and several replicas sharing one database may run different ones for a while (a
//! rolling deploy, a forgotten restart). So each replica records in the database what
//! its configuration says about who may decide (its [`Authority`], with the
//! [`Fingerprint`] of it;
//! [`Coordination::hold_config`](crate::storage::Coordination::hold_config)), renewed like
//! the leader's lease, so that a dead replica's record expires with it. While the live
//! replicas' fingerprints differ, an operator's action (a tap, a reply, a command) counts
//! only if *every* live replica's configuration allows it: an approver removed in a new
//! configuration stops at once, one added waits until every replica has them. Every replica
//! says so, and how the configurations differ, in its log (when the set of configurations
//! changes, not on every renewal), in `/healthz` and in `hitl_config_mismatch`.
//!
//! The longer why is in docs/architecture.md, "Module notes".

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Chats;
use super::answer::Refused;
use crate::config::Config;
use crate::domain::authority::{
    AgentAuthority, Authority, EscalationAuthority, Fingerprint, Refusal, RouteAuthority,
};
use crate::domain::question::{Operator, Question};
use crate::metrics::Metrics;
use crate::storage::{Coordination, StorageError};

/// What this process knows of the configurations the live replicas run, and its own
/// record of them in the database.
pub struct Agree {
    /// Who this process is to the record of its configuration (as to the leader lease).
    holder: String,
    /// How long a record lasts unless renewed (`database.lease_seconds`).
    lease: Duration,
    coordination: Arc<dyn Coordination>,
    metrics: Arc<Metrics>,
    /// What this process's own configuration says.
    own: Arc<Authority>,
    fingerprint: Fingerprint,
    /// The other configurations' views by fingerprint (only those live when last read).
    /// `None`: a view that could not be read, which allows nothing.
    views: Mutex<HashMap<Fingerprint, Option<Arc<Authority>>>>,
    /// What was reported last: the log speaks when the set of configurations changes.
    reported: Mutex<Reported>,
    /// Numbers the reads of the live configurations, so that a read overtaken by a
    /// later one (a tap's and a renewal's at once) reports nothing: the log never says
    /// "differ" again after "agree again" because of a read made before.
    reads: std::sync::atomic::AtomicU64,
}

struct Reported {
    report: ConfigReport,
    others: BTreeSet<Fingerprint>,
    /// The read this report comes from.
    read: u64,
}

/// The configurations the live replicas run, as `/healthz` shows them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigReport {
    /// This replica's configuration: the first 12 digits of its fingerprint.
    pub fingerprint: String,
    /// Live replicas, this one included.
    pub replicas: usize,
    /// Distinct configurations among them (1 when they agree).
    pub configurations: usize,
    pub agree: bool,
    /// What differs between this replica's configuration and the others', by name
    /// (`route 'ops': approvers`), without ids: `/healthz` needs no token. The log
    /// line says the values.
    pub differences: Vec<String>,
}

/// The live configurations that differ from this replica's, each with its view.
pub(super) struct Others(Vec<(Fingerprint, Option<Arc<Authority>>)>);

impl Others {
    /// The first other configuration that refuses by `check`, with its refusal; one
    /// that could not be read refuses with `unreadable`.
    pub(super) fn refusing<T>(
        &self,
        check: impl Fn(&Authority) -> Option<T>,
        unreadable: T,
    ) -> Option<(&Fingerprint, T)> {
        let mut unreadable = Some(unreadable);
        self.0.iter().find_map(|(fp, view)| match view {
            Some(v) => check(v).map(|t| (fp, t)),
            None => unreadable.take().map(|t| (fp, t)),
        })
    }

    /// Whether every other configuration allows what `allows` asks (an unreadable one
    /// allows nothing).
    pub(super) fn all(&self, allows: impl Fn(&Authority) -> bool) -> bool {
        self.0
            .iter()
            .all(|(_, view)| view.as_deref().is_some_and(&allows))
    }
}

impl Agree {
    pub(super) fn new(
        config: &Config,
        holder: String,
        coordination: Arc<dyn Coordination>,
        metrics: Arc<Metrics>,
    ) -> Agree {
        let own = authority_of(config);
        let fingerprint = own.fingerprint();
        Agree {
            holder,
            lease: config.lease,
            coordination,
            metrics,
            reported: Mutex::new(Reported {
                report: ConfigReport {
                    fingerprint: fingerprint.short().to_owned(),
                    replicas: 1,
                    configurations: 1,
                    agree: true,
                    differences: Vec::new(),
                },
                others: BTreeSet::new(),
                read: 0,
            }),
            reads: std::sync::atomic::AtomicU64::new(0),
            own: Arc::new(own),
            fingerprint,
            views: Mutex::new(HashMap::new()),
        }
    }
}

/// What `config` says about who may decide.
pub(super) fn authority_of(config: &Config) -> Authority {
    Authority {
        routes: config
            .routes
            .values()
            .map(|r| {
                let route = RouteAuthority {
                    chat_id: r.chat_id,
                    topic_id: r.topic_id,
                    approvers: r.approvers.iter().copied().collect(),
                    forbid_self_approval: r.forbid_self_approval,
                    quorum: r.quorum,
                    escalation: r.escalation.as_ref().map(|e| EscalationAuthority {
                        to: e.to.clone(),
                        union: e.union,
                    }),
                };
                (r.name.clone(), route)
            })
            .collect(),
        people: config.people.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        owners: config
            .owner_telegram_ids
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        agents: config
            .agents
            .iter()
            .map(|a| {
                let agent = AgentAuthority {
                    routes: a.routes.iter().cloned().collect(),
                    default_route: a.default_route.clone(),
                };
                (a.name.clone(), agent)
            })
            .collect(),
    }
}

/// What a refused person is told, and the audit's reason. `mismatch`: this replica's
/// configuration allows it, another live replica's does not.
pub(super) fn refusal_text(refusal: Refusal, mismatch: bool) -> (&'static str, &'static str) {
    match (refusal, mismatch) {
        (Refusal::NotAnApprover, false) => (NOT_ALLOWED, "not an approver of the route"),
        (Refusal::NotATarget, false) => (
            "This question is for other people.",
            "not one of the interaction's target_humans",
        ),
        (Refusal::OwnRequest, false) => (
            "You cannot decide a request made on your own behalf.",
            "self-approval is forbidden on this route",
        ),
        (Refusal::NotAnApprover, true) => (
            "You are not allowed to decide this request: the service's configuration is \
             being changed, and not every replica allows it yet.",
            "the replicas' configurations differ: not an approver of the route in every one",
        ),
        (Refusal::NotATarget, true) => (
            "This question is for other people: the service's configuration is being \
             changed, and not every replica allows you to answer it.",
            "the replicas' configurations differ: not one of the interaction's \
             target_humans in every one",
        ),
        (Refusal::OwnRequest, true) => (
            "You cannot decide a request made on your own behalf: the service's \
             configuration is being changed, and another replica forbids it.",
            "the replicas' configurations differ: self-approval is forbidden on this \
             route in one",
        ),
    }
}

/// What anyone who may not decide a request is told.
pub(super) const NOT_ALLOWED: &str = "You are not allowed to decide this request";

impl Agree {
    /// Why `from` may not answer `record` in `chat_id`, if they may not. This replica's
    /// configuration is asked first; when it allows the answer and other live replicas
    /// run other configurations, each of those must allow it too. An
    /// `Err`: which configurations are live could not be read, so nothing may be decided
    /// yet.
    pub(super) async fn may_not_answer(
        &self,
        chats: &Chats,
        record: &Question,
        chat_id: i64,
        from: &Operator,
        from_is_bot: bool,
    ) -> Result<Option<Refused>, StorageError> {
        if from_is_bot {
            return Ok(Some((NOT_ALLOWED, "a bot cannot answer").into()));
        }
        let moved = |route: &str| chats.moved_chat(route);
        if let Some(refusal) = self.authority().refusal(record, chat_id, from.id, &moved) {
            return Ok(Some(refusal_text(refusal, false).into()));
        }
        let others = self.other_configs().await?;
        if let Some((configuration, refusal)) = others.refusing(
            |view| view.refusal(record, chat_id, from.id, &moved),
            Refusal::NotAnApprover,
        ) {
            tracing::warn!(id = %record.id, user_id = from.id, %configuration,
                "another live replica's configuration does not allow this answer");
            return Ok(Some(refusal_text(refusal, true).into()));
        }
        Ok(None)
    }

    /// Why `from` may not act as an approver of `route` (allow its MCP tools), if they
    /// may not: by this replica's configuration, then by every other live one's, as
    /// [`Agree::may_not_answer`] asks for a question, with the same words.
    pub(super) async fn may_not_approve_route(
        &self,
        route: &str,
        from: &Operator,
        from_is_bot: bool,
    ) -> Result<Option<Refused>, StorageError> {
        if from_is_bot {
            return Ok(Some((NOT_ALLOWED, "a bot cannot answer").into()));
        }
        if !self.authority().approves(route, from.id) {
            return Ok(Some(refusal_text(Refusal::NotAnApprover, false).into()));
        }
        let others = self.other_configs().await?;
        if !others.all(|view| view.approves(route, from.id)) {
            tracing::warn!(
                route,
                user_id = from.id,
                "another live replica's configuration does not let this person approve the route"
            );
            return Ok(Some(refusal_text(Refusal::NotAnApprover, true).into()));
        }
        Ok(None)
    }

    /// What this process's own configuration says about who may decide.
    pub(super) fn authority(&self) -> &Authority {
        &self.own
    }

    /// Records this replica's configuration in the database (or renews the record) for
    /// `database.lease_seconds`. Made once before serving, then every third of the lease
    /// ([`Agree::keep_config`]).
    pub async fn hold_config(&self) -> Result<(), StorageError> {
        self.coordination
            .hold_config(&self.holder, &self.own, self.lease)
            .await
    }

    /// Renews this replica's record every third of the lease until `stop`, and reads
    /// the live configurations each time, so the log, the metric and `/healthz` follow
    /// a replica that starts, stops or dies even while nobody acts.
    pub async fn keep_config(self: Arc<Self>, stop: CancellationToken) {
        let every = self.lease / 3;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let renewed = tokio::time::timeout(every, async {
                self.hold_config().await?;
                self.other_configs().await.map(drop)
            })
            .await;
            match renewed {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot renew this replica's configuration record")
                }
                Err(_) => tracing::warn!(
                    "cannot renew this replica's configuration record: the database did not answer in time"
                ),
            }
        }
    }

    /// Forgets this replica's configuration at shutdown, once its work has stopped, so
    /// the others stop counting it at once.
    pub async fn release_config(&self) {
        if let Err(e) = self.coordination.release_config(&self.holder).await {
            tracing::warn!(error = %e, "cannot withdraw this replica's configuration record; it expires by itself");
        }
    }

    /// The configurations live now, as `/healthz` reports them (read afresh).
    pub async fn config_report(&self) -> Result<ConfigReport, StorageError> {
        self.other_configs().await?;
        Ok(self.reported_now().report.clone())
    }

    fn reported_now(&self) -> std::sync::MutexGuard<'_, Reported> {
        self.reported.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live configurations that differ from this replica's, read from the database
    /// now (their views from the cache when known); also reports a change in them.
    pub(super) async fn other_configs(&self) -> Result<Others, StorageError> {
        let read = self
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let Some(live) = self.coordination.live_configs().await? else {
            // One process: its own configuration is the only one.
            return Ok(Others(Vec::new()));
        };
        let listed = live.iter().any(|c| c.holder == self.holder);
        let replicas = live.len() + usize::from(!listed);
        let mut differing: BTreeSet<Fingerprint> = live
            .into_iter()
            .map(|c| c.fingerprint)
            .filter(|fp| *fp != self.fingerprint)
            .collect();
        let unknown: Vec<Fingerprint> = {
            let views = self.views.lock().unwrap_or_else(|e| e.into_inner());
            differing
                .iter()
                .filter(|fp| !views.contains_key(*fp))
                .cloned()
                .collect()
        };
        for fp in unknown {
            let view = match self.coordination.config_view(&fp).await {
                Ok(Some(view)) => Some(Arc::new(view)),
                // Withdrawn (or expired and cleared) since: no longer live.
                Ok(None) => {
                    differing.remove(&fp);
                    continue;
                }
                Err(e @ StorageError::Corrupt { .. }) => {
                    tracing::error!(configuration = %fp, error = %e,
                        "cannot read another replica's configuration: it allows nobody anything until it is gone");
                    None
                }
                Err(e) => return Err(e),
            };
            self.views
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(fp, view);
        }
        let others = {
            let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
            views.retain(|fp, _| differing.contains(fp));
            Others(
                differing
                    .iter()
                    .filter_map(|fp| views.get(fp).map(|v| (fp.clone(), v.clone())))
                    .collect(),
            )
        };
        self.report(read, replicas, &others);
        Ok(others)
    }

    /// Sets the metric and, when the set of live configurations changed, says so in the
    /// log: a warning with every difference when they start to differ (or differ
    /// otherwise), a line when they agree again.
    fn report(&self, read: u64, replicas: usize, others: &Others) {
        let own = &self.own;
        let mut summaries = BTreeSet::new();
        let mut details = Vec::new();
        for (fp, view) in &others.0 {
            match view {
                Some(view) => {
                    for d in own.differences(view) {
                        summaries.insert(d.summary());
                        details.push(format!("{d} (configuration {fp})"));
                    }
                }
                None => {
                    summaries.insert(format!("configuration {fp}: unreadable"));
                    details.push(format!("configuration {fp} cannot be read"));
                }
            }
        }
        let report = ConfigReport {
            fingerprint: self.fingerprint.short().to_owned(),
            replicas,
            configurations: others.0.len() + 1,
            agree: others.0.is_empty(),
            differences: summaries.into_iter().collect(),
        };
        let set: BTreeSet<Fingerprint> = others.0.iter().map(|(fp, _)| fp.clone()).collect();
        let was_agreeing = {
            let mut reported = self.reported_now();
            if read < reported.read {
                return;
            }
            self.metrics
                .set_config_agreement(report.configurations, report.agree);
            let changed = reported.others != set;
            let was = reported.report.agree;
            reported.report = report.clone();
            reported.others = set.clone();
            reported.read = read;
            if !changed {
                return;
            }
            was
        };
        let others: Vec<&str> = set.iter().map(Fingerprint::short).collect();
        if !report.agree {
            tracing::warn!(
                configuration = %self.fingerprint,
                others = ?others,
                replicas,
                differences = %details.join("; "),
                "the replicas' configurations differ: until they agree, an operator's tap, reply \
                 or command counts only if every live replica's configuration allows it"
            );
        } else if !was_agreeing {
            tracing::warn!(
                configuration = %self.fingerprint,
                replicas,
                "the replicas' configurations agree again"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(approvers: &[u64]) -> Authority {
        let route = RouteAuthority {
            chat_id: -1,
            topic_id: None,
            approvers: approvers.iter().copied().collect(),
            forbid_self_approval: false,
            quorum: None,
            escalation: None,
        };
        Authority {
            routes: [("ops".to_owned(), route)].into(),
            ..Authority::default()
        }
    }

    fn fp(a: &Authority) -> Fingerprint {
        a.fingerprint()
    }

    #[test]
    fn every_other_configuration_must_allow_and_an_unreadable_one_allows_nothing() {
        let (wide, narrow) = (view(&[1, 2]), view(&[1]));
        let others = Others(vec![
            (fp(&wide), Some(Arc::new(wide.clone()))),
            (fp(&narrow), Some(Arc::new(narrow.clone()))),
        ]);
        let refuses = |user: u64| {
            others
                .refusing(|v| (!v.approves("ops", user)).then_some(user), 0)
                .map(|(f, _)| f.clone())
        };
        assert_eq!(refuses(1), None);
        assert_eq!(refuses(2), Some(fp(&narrow)), "the narrower one refuses");
        assert!(others.all(|v| v.approves("ops", 1)));
        assert!(!others.all(|v| v.approves("ops", 2)));

        let unreadable = Others(vec![(fp(&wide), None)]);
        assert_eq!(
            unreadable.refusing(|_| None::<u64>, 7).map(|(_, t)| t),
            Some(7)
        );
        assert!(!unreadable.all(|_| true));
        assert!(
            Others(Vec::new()).all(|_| false),
            "alone, nothing more to ask"
        );
    }

    #[test]
    fn a_refusal_fits_a_toast_and_says_when_the_configurations_differ() {
        for refusal in [
            Refusal::NotAnApprover,
            Refusal::NotATarget,
            Refusal::OwnRequest,
        ] {
            let (own, own_why) = refusal_text(refusal, false);
            let (text, why) = refusal_text(refusal, true);
            assert!(!own.contains("configuration"), "{own}");
            assert!(text.starts_with(own.trim_end_matches('.')), "{text}");
            assert!(text.contains("configuration is being changed"), "{text}");
            assert!(text.chars().count() <= 200, "{text}");
            assert!(
                why.starts_with("the replicas' configurations differ")
                    && !own_why.contains("replicas"),
                "{why}"
            );
        }
    }
}
