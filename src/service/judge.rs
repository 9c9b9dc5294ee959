//! Before the human: the rules in force judge a call (`[[rules]]`, see
//! [`crate::domain::rules`]) before any window or person is asked. A `deny` or an `allow`
//! the rules enforce ends the request the moment it is stored, as a window hit does; an
//! `ask` (and every call in a dry run) goes on to the window and the human, carrying the
//! verdict so that the message, the record and the audit say which rule asked.
//!
//! The rule set can be replaced while the service runs (SIGHUP): each request reads the
//! set in force once, so one request is judged by one set throughout.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use time::OffsetDateTime;
use tokio::sync::{Mutex, MutexGuard};

use super::{ServiceError, now};
use crate::domain::audit;
use crate::domain::ids::{OwnerId, ToolName};
use crate::domain::mcp_call::{Annotations, ServerName};
use crate::domain::python;
use crate::domain::python::value::PyValue;
use crate::domain::question::Question;
use crate::domain::rules::{ChatRules, Effect, Policy, RuleCall, RuleVerdict};
use crate::metrics::Metrics;
use crate::storage::{Audit, Questions};

/// A call judged by the rules, and, while an `allow` with a `rate` is being stored, the
/// gate that keeps two such calls from both counting the last free slot in this process.
pub(super) struct Judgement<'a> {
    pub verdict: Option<RuleVerdict>,
    _rate_gate: Option<MutexGuard<'a, ()>>,
}

impl Judgement<'_> {
    /// What happens to the call: `ask` when no rule is in force.
    pub fn applied(&self) -> Effect {
        self.verdict
            .as_ref()
            .map_or(Effect::Ask, RuleVerdict::applied)
    }
}

/// The rules in force and the gate of their rates: what judges a call before a person.
pub struct Rules {
    /// The rules in force; replaced whole on a reload.
    policy: RwLock<Arc<Policy>>,
    /// Held from counting an `allow` rule's rate to storing the call it let through.
    rate_gate: Mutex<()>,
    questions: Arc<dyn Questions>,
    audit: Arc<dyn Audit>,
    metrics: Arc<Metrics>,
}

impl Rules {
    pub(super) fn new(
        policy: Arc<Policy>,
        questions: Arc<dyn Questions>,
        audit: Arc<dyn Audit>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Rules {
            policy: RwLock::new(policy),
            rate_gate: Mutex::new(()),
            questions,
            audit,
            metrics,
        }
    }

    /// The rules in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Puts `policy` in force (a SIGHUP reload), and records in the audit trail that the
    /// rules changed, with the new set's fingerprint. The same set again changes nothing
    /// and records nothing.
    pub async fn replace(&self, policy: Policy) -> Result<bool, ServiceError> {
        let previous = self.policy();
        // The chat's rules are the database's, not the file's: they stay.
        let policy = policy.with_chat(previous.chat().clone());
        if previous.set.fingerprint() == policy.set.fingerprint() && previous.mode == policy.mode {
            return Ok(false);
        }
        let event = audit::rules_loaded(
            now(),
            policy.set.fingerprint().as_str(),
            previous.set.fingerprint().as_str(),
            policy.set.rules().len(),
            policy.mode.as_str(),
        );
        // Recorded first: a set in force that the trail does not name would leave the
        // decisions it makes unexplained.
        self.audit.record_event(event).await?;
        tracing::info!(rules = policy.set.rules().len(), fingerprint = %policy.set.fingerprint(),
            mode = policy.mode.as_str(), "rules reloaded");
        *self
            .policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(policy);
        Ok(true)
    }

    /// Puts `chat` in force as the chat rules, beside the configuration's; whether they
    /// changed. (Each change was audited when a person made it: `chat_rule_moved`.)
    pub fn set_chat(&self, chat: ChatRules) -> bool {
        let mut held = self
            .policy
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let next = held.with_chat(chat);
        if next.fingerprint() == held.fingerprint() {
            return false;
        }
        tracing::info!(chat_rules = next.chat().rules().len(), fingerprint = %next.fingerprint(),
            "chat rules in force changed");
        *held = Arc::new(next);
        true
    }

    /// The rules' verdict on a call of `agent`. An `allow` whose rule has a `rate` is
    /// counted against the calls that rule let through in its period (in the database),
    /// and asks once the rate is used up; the judgement then holds this process's rate
    /// gate until the caller has stored the record.
    ///
    /// A tool name that only looks like one a rule names (`trаnsfer`, Cyrillic `а`,
    /// against a rule on `transfer`) is refused ([`ServiceError::LookAlikeTool`]), in a
    /// dry run too: no rule could be trusted with it.
    #[allow(clippy::too_many_arguments)] // one call's terms, as its record holds them
    pub(super) async fn judge(
        &self,
        agent: &str,
        route: &str,
        tool: &ToolName,
        owner_id: &OwnerId,
        params_json: &str,
        origin: Origin<'_>,
        now: OffsetDateTime,
    ) -> Result<Judgement<'_>, ServiceError> {
        let policy = self.policy();
        if policy.is_inert() {
            return Ok(Judgement {
                verdict: None,
                _rate_gate: None,
            });
        }
        if let Some(look) = policy.set.look_alike(tool.as_str()) {
            tracing::warn!(agent, rule = %look.rule, "a look-alike tool name refused");
            return Err(ServiceError::LookAlikeTool(format!("`{tool}` {look}")));
        }
        // Read as the tool's Python runtime will read it (`1e400` is `inf`), with the
        // parser that checked the text as a JSON object when it came in.
        let params = python::json::parse(params_json).unwrap_or(PyValue::None);
        let call = RuleCall {
            tool: tool.as_str(),
            agent,
            owner: Some(owner_id.as_str()),
            params: &params,
            server: origin.server.map(ServerName::as_str),
            annotations: origin.annotations,
        };
        let (mut verdict, rate) = policy.judge(&call, route);
        let mut gate = None;
        if let (Some(rate), Some(rule), true) = (rate, verdict.rule.clone(), verdict.enforced) {
            let held = self.rate_gate.lock().await;
            let period = Duration::from_secs(rate.per_seconds.get());
            let since = now - period;
            let used = self.questions.count_allowed_by_rule(&rule, since).await?;
            if used >= rate.max.get() {
                verdict = verdict.past_rate();
            } else {
                gate = Some(held);
            }
        }
        self.metrics.rule_decided(&verdict);
        Ok(Judgement {
            verdict: Some(verdict),
            _rate_gate: gate,
        })
    }
}

/// Where a call came from, as the rules' `servers` and `annotations` read it: the MCP
/// server and the tool's annotations a gateway sent (both `None` otherwise).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Origin<'a> {
    pub server: Option<&'a ServerName>,
    pub annotations: Option<&'a Annotations>,
}

impl<'a> Origin<'a> {
    pub(super) fn of(record: &'a Question) -> Self {
        Origin {
            server: record.server.as_ref(),
            annotations: record.annotations.as_ref(),
        }
    }
}

/// The reason an agent reads on a request a rule ended: `denied by rule 'x': why`.
pub(super) fn rule_reason(verdict: &RuleVerdict) -> String {
    let done = match verdict.effect {
        Effect::Allow => "allowed",
        Effect::Deny => "denied",
        Effect::Ask => "asked",
    };
    match &verdict.reason {
        Some(why) => format!("{done} by {}: {why}", verdict.by()),
        None => format!("{done} by {}", verdict.by()),
    }
}
