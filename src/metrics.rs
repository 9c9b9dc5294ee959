//! Prometheus metrics: what the service counts, and the text `GET /metrics` serves.
//!
//! One [`Metrics`] per application, owning its own [`Registry`] (no global recorder):
//! several applications in one process, as in the tests, must not share counters. The
//! service, the Telegram adapter and the webhook worker hold it as an `Arc` and count
//! where things happen; the gauges that describe stored state (pending requests, the
//! webhook outbox) are read from the database at scrape time instead, so they are right
//! after a restart and cannot drift.
//!
//! Label values come from the configuration (agent, route) or from fixed sets (status,
//! Telegram method), except the tool name, which agents choose: [`ToolLabels`] bounds
//! how many distinct tool labels an agent can create, so a hostile or buggy agent cannot
//! grow the exposition without limit. No label ever carries a parameter value.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use time::OffsetDateTime;

use crate::domain::question::{Question, Via};
use crate::domain::rules::RuleVerdict;
use crate::storage::Gauges;

/// The content type of the exposition: OpenMetrics text, which `prometheus-client`
/// writes and Prometheus scrapes natively.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How many distinct tool labels one agent may create; later tools count as
/// [`OTHER_TOOL`]. Generous for real agents (a few dozen tools), small enough that a
/// flood of made-up names costs a bounded number of series.
pub const MAX_TOOLS_PER_AGENT: usize = 50;
/// The tool label of every tool beyond [`MAX_TOOLS_PER_AGENT`].
pub const OTHER_TOOL: &str = "other";
/// Longest tool label, in characters; longer names are cut (tool names may be 128).
pub const MAX_TOOL_LABEL_CHARS: usize = 64;

/// Decision latency buckets (seconds): a human answers in seconds to hours, and a
/// timeout can be as long as a day.
const DECISION_BUCKETS: [f64; 16] = [
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    21600.0, 86400.0,
];
/// Bot API call buckets (seconds): tens of milliseconds when healthy, up to the HTTP
/// client's timeout when not.
const TELEGRAM_BUCKETS: [f64; 11] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CreatedLabels {
    agent: String,
    route: String,
    tool: String,
    /// `confirmation` or `interaction`.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecidedLabels {
    agent: String,
    route: String,
    tool: String,
    kind: &'static str,
    /// The stored status: confirmed, cancelled, timeout, completed.
    status: &'static str,
    /// What decided it: operator, window, timeout, withdrawn, fail_closed.
    via: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    agent: String,
    /// The route asked: how long each route's people take (`/stats` shows the same).
    route: String,
    /// `operator` (a human decided) or `timeout` (nobody did in time).
    via: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    agent: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabels {
    agent: String,
    route: String,
    /// `reminded`, `escalated`, `extended`, `reason_requested`, `reason_given`.
    step: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentToolLabels {
    agent: String,
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    /// `allow`, `ask` or `deny`: what the rules decided (in a dry run, what they would
    /// have done).
    effect: &'static str,
    /// The deciding rule's name, or `(default)`.
    rule: String,
    /// `enforce` or `dry_run`.
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunReportLabels {
    agent: String,
    tool: String,
    /// `executed`, `failed`, `not_executed`, or `unknown` (no report in time).
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GrantLabels {
    /// `created` or `revoked`.
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabels {
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TelegramErrorLabels {
    method: &'static str,
    /// `rate_limited` (429), `network`, `invalid_response`, `api`.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    result: &'static str,
}

/// Every metric of one application, and the registry that exposes them.
pub struct Metrics {
    registry: Registry,
    requests_created: Family<CreatedLabels, Counter>,
    requests_decided: Family<DecidedLabels, Counter>,
    decision_latency: Family<LatencyLabels, Histogram>,
    window_hits: Family<AgentToolLabels, Counter>,
    rule_decisions: Family<RuleLabels, Counter>,
    run_reports: Family<RunReportLabels, Counter>,
    grants: Family<GrantLabels, Counter>,
    pending: Family<AgentLabels, Gauge>,
    oldest_pending_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    telegram_requests: Family<MethodLabels, Counter>,
    telegram_errors: Family<TelegramErrorLabels, Counter>,
    telegram_duration: Family<MethodLabels, Histogram>,
    webhook_backlog: Gauge,
    webhook_delivered: Family<AgentLabels, Counter>,
    webhook_failures: Family<AgentLabels, Counter>,
    webhook_given_up: Family<AgentLabels, Counter>,
    /// Synced at scrape time to the stored count of dropped deliveries (see
    /// [`Metrics::render`]): a true counter that also survives restarts.
    webhook_dropped: Family<AgentLabels, Counter>,
    questions_missed_deadline: Family<RouteLabels, Counter>,
    sla_breaches: Family<RouteLabels, Counter>,
    question_steps: Family<StepLabels, Counter>,
    leader: Gauge,
    telegram_outage: Gauge,
    creates_waiting: Gauge,
    telegram_outages: Counter,
    outage_alerts: Family<OutcomeLabels, Counter>,
    config_mismatch: Gauge,
    configurations: Gauge,
    tools: ToolLabels,
    /// Held while the scrape-time gauges are set and the registry encoded, so two
    /// concurrent scrapes cannot interleave a reset with an encoding.
    scrape: Mutex<()>,
}

/// One create counted as waiting for admission while it lives.
pub struct WaitingCreate(Gauge);

impl Drop for WaitingCreate {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of metrics in a registry of its own, every name prefixed `hitl_`.
    ///
    /// Registration order is the exposition's order, so the steps below run in a fixed
    /// sequence.
    pub fn new() -> Self {
        let mut metrics = Metrics {
            registry: Registry::with_prefix("hitl"),
            requests_created: Family::default(),
            requests_decided: Family::default(),
            decision_latency: Family::new_with_constructor(decision_histogram as _),
            window_hits: Family::default(),
            rule_decisions: Family::default(),
            run_reports: Family::default(),
            grants: Family::default(),
            pending: Family::default(),
            oldest_pending_age: Gauge::default(),
            telegram_requests: Family::default(),
            telegram_errors: Family::default(),
            telegram_duration: Family::new_with_constructor(telegram_histogram as _),
            webhook_backlog: Gauge::default(),
            webhook_delivered: Family::default(),
            webhook_failures: Family::default(),
            webhook_given_up: Family::default(),
            webhook_dropped: Family::default(),
            questions_missed_deadline: Family::default(),
            sla_breaches: Family::default(),
            question_steps: Family::default(),
            leader: Gauge::default(),
            telegram_outage: Gauge::default(),
            creates_waiting: Gauge::default(),
            telegram_outages: Counter::default(),
            outage_alerts: Family::default(),
            config_mismatch: Gauge::default(),
            configurations: Gauge::default(),
            tools: ToolLabels::default(),
            scrape: Mutex::new(()),
        };
        metrics.configurations.set(1);
        metrics.registry.register(
            "build",
            "The running version (value 1)",
            Info::new(vec![("version", env!("CARGO_PKG_VERSION"))]),
        );
        metrics.register_request_metrics();
        metrics.register_telegram_metrics();
        metrics.register_webhook_metrics();
        metrics.register_question_step_metrics();
        metrics.register_replica_metrics();
        metrics.register_outage_metrics();
        metrics
    }

    /// Registers the requests' life: created, decided, how fast, and what decided them.
    fn register_request_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "requests_created",
            "Requests stored (confirmations and interactions), window hits included",
            self.requests_created.clone(),
        );
        registry.register(
            "requests",
            "Requests that reached their outcome, by status and by what decided them",
            self.requests_decided.clone(),
        );
        registry.register_with_unit(
            "decision_latency",
            "Time from a request's creation to its decision by an operator or its timeout",
            Unit::Seconds,
            self.decision_latency.clone(),
        );
        registry.register(
            "window_hits",
            "Requests confirmed at once by a live confirmation window",
            self.window_hits.clone(),
        );
        registry.register(
            "rule_decisions",
            "Calls the [[rules]] judged, by effect, deciding rule and mode (a rule's name is the operator's own text, so the set of labels is bounded by the configuration)",
            self.rule_decisions.clone(),
        );
        registry.register(
            "outcomes",
            "What happened after the yes: confirmed calls' runs as their agents reported them, or `unknown` when a route's expect_outcome_seconds passed with no report (a late report counts again, under its own status)",
            self.run_reports.clone(),
        );
        registry.register(
            "grants",
            "Grants stored (`created`) and revoked before they expired (`revoked`)",
            self.grants.clone(),
        );
        registry.register(
            "creates_awaiting_admission",
            "Creates waiting for their turn to be read and stored (at most api::admission::ADMITTED are at once); above 0 only while many agents ask together",
            self.creates_waiting.clone(),
        );
        registry.register(
            "pending_requests",
            "Requests waiting for a human now (read from the database at scrape time)",
            self.pending.clone(),
        );
        registry.register_with_unit(
            "oldest_pending_age",
            "Age of the oldest pending request (0 when none is pending)",
            Unit::Seconds,
            self.oldest_pending_age.clone(),
        );
    }

    /// Registers bot API calls.
    fn register_telegram_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "telegram_requests",
            "Bot API calls made, retries included",
            self.telegram_requests.clone(),
        );
        registry.register(
            "telegram_errors",
            "Bot API calls that failed, by kind (rate_limited is a 429)",
            self.telegram_errors.clone(),
        );
        registry.register_with_unit(
            "telegram_request_duration",
            "Duration of Bot API calls (getUpdates, a long poll, is not observed)",
            Unit::Seconds,
            self.telegram_duration.clone(),
        );
    }

    /// Registers the agent webhook outbox.
    fn register_webhook_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "webhook_outbox_backlog",
            "Agent webhooks waiting for delivery (read from the database at scrape time)",
            self.webhook_backlog.clone(),
        );
        registry.register(
            "webhook_deliveries",
            "Agent webhooks delivered (a 2xx answer)",
            self.webhook_delivered.clone(),
        );
        registry.register(
            "webhook_delivery_failures",
            "Agent webhook attempts that failed (each retry counts)",
            self.webhook_failures.clone(),
        );
        registry.register(
            "webhook_given_up",
            "Agent webhooks abandoned after webhooks.give_up_after_seconds",
            self.webhook_given_up.clone(),
        );
        registry.register(
            "webhook_dropped",
            "Agent webhooks never queued because the agent already had \
             webhooks.max_backlog_per_agent undelivered ones (read from the database)",
            self.webhook_dropped.clone(),
        );
    }

    /// Registers what happened to pending questions on the operators' side.
    fn register_question_step_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "questions_missed_deadline",
            "Questions that could not reach their chat before their deadline (the chat's \
             queue under Telegram's limits, a retry_after or an outage past it), ended timeout",
            self.questions_missed_deadline.clone(),
        );
        registry.register(
            "sla_breaches",
            "Questions still pending when their route's sla_seconds passed (each counted once)",
            self.sla_breaches.clone(),
        );
        registry.register(
            "question_steps",
            "Steps pending questions took on the operators' side: reminders sent, \
             escalations, deadline extensions, reasons asked for and reasons given",
            self.question_steps.clone(),
        );
    }

    /// Registers Telegram's outages as the leader's probes see them, and their alerts.
    fn register_outage_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "telegram_outage",
            "1 while the leader takes Telegram as out of reach (every probe failing for \
             longer than [telegram] outage_after_seconds), else 0",
            self.telegram_outage.clone(),
        );
        registry.register(
            "telegram_outages",
            "Telegram outages the leader took as such (each announced once when \
             outage_webhook_url is set)",
            self.telegram_outages.clone(),
        );
        registry.register(
            "outage_alerts",
            "Attempts to deliver an outage alert to [telegram] outage_webhook_url, by \
             result (delivered, failed, given_up)",
            self.outage_alerts.clone(),
        );
    }

    /// A create waits for its turn (see `api::admission`) until the guard is dropped.
    pub fn create_waiting(&self) -> WaitingCreate {
        self.creates_waiting.inc();
        WaitingCreate(self.creates_waiting.clone())
    }

    /// An outage began, as the leader stored it.
    pub fn telegram_outage_began(&self) {
        self.telegram_outages.inc();
        self.telegram_outage.set(1);
    }

    /// Whether an outage is open, as the leader knows (one read back at start, or ended).
    pub fn set_telegram_outage(&self, open: bool) {
        self.telegram_outage.set(i64::from(open));
    }

    /// An outage alert's attempt: `delivered`, `failed` (to be retried) or `given_up`.
    pub fn outage_alert(&self, result: &'static str) {
        self.outage_alerts
            .get_or_create(&OutcomeLabels { result })
            .inc();
    }

    /// Registers leadership and agreement among the replicas.
    fn register_replica_metrics(&mut self) {
        let registry = &mut self.registry;
        registry.register(
            "leader",
            "1 while this replica holds the leader lease and does the work that must happen \
             once (posting questions, deadlines, webhooks, the Redis bridge, polling)",
            self.leader.clone(),
        );
        registry.register(
            "config_mismatch",
            "1 while the live replicas run configurations that differ in who may decide \
             (then an operator's action counts only if every one allows it), else 0",
            self.config_mismatch.clone(),
        );
        registry.register(
            "replica_configurations",
            "Distinct configurations (as far as who may decide goes) among the live replicas",
            self.configurations.clone(),
        );
    }

    /// This replica took (`true`) or lost the leader lease.
    pub fn set_leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The live replicas run `configurations` distinct configurations; `agree` when
    /// that is one.
    pub fn set_config_agreement(&self, configurations: usize, agree: bool) {
        self.config_mismatch.set(i64::from(!agree));
        self.configurations
            .set(i64::try_from(configurations).unwrap_or(i64::MAX));
    }

    /// A request was stored.
    pub fn request_created(&self, r: &Question) {
        self.requests_created
            .get_or_create(&CreatedLabels {
                agent: r.agent.clone(),
                route: r.route.clone(),
                tool: self.tools.label(&r.agent, r.tool.as_str()),
                kind: kind(r),
            })
            .inc();
    }

    /// A request reached its outcome (`r` is the stored, terminal record). Called once
    /// per request: only by the decision that was applied.
    pub fn request_decided(&self, r: &Question) {
        let tool = self.tools.label(&r.agent, r.tool.as_str());
        let via = r.via.map(Via::as_str).unwrap_or("unknown");
        self.requests_decided
            .get_or_create(&DecidedLabels {
                agent: r.agent.clone(),
                route: r.route.clone(),
                tool: tool.clone(),
                kind: kind(r),
                status: r.status.as_str(),
                via,
            })
            .inc();
        if r.denial_reason.is_some() {
            self.question_step(r, "reason_given");
        }
        match r.via {
            Some(Via::Operator | Via::Timeout) => {
                let decided = r.decided_at.unwrap_or(r.created_at);
                let took = (decided - r.created_at).as_seconds_f64().max(0.0);
                self.decision_latency
                    .get_or_create(&LatencyLabels {
                        agent: r.agent.clone(),
                        route: r.route.clone(),
                        via,
                    })
                    .observe(took);
            }
            Some(Via::Window) => {
                self.window_hits
                    .get_or_create(&AgentToolLabels {
                        agent: r.agent.clone(),
                        tool,
                    })
                    .inc();
            }
            _ => {}
        }
    }

    /// A confirmed call's run was reported (or found missing: `unknown`).
    pub fn run_reported(&self, r: &Question) {
        let Some(run) = &r.run_report else {
            return;
        };
        self.run_reports
            .get_or_create(&RunReportLabels {
                agent: r.agent.clone(),
                tool: self.tools.label(&r.agent, r.tool.as_str()),
                status: run.status.as_str(),
            })
            .inc();
    }

    /// The rules judged a call (whatever came of it: an `allow` past its rate counts as
    /// the `ask` it became).
    pub fn rule_decided(&self, v: &RuleVerdict) {
        self.rule_decisions
            .get_or_create(&RuleLabels {
                effect: v.effect.as_str(),
                rule: v.rule.clone().unwrap_or_else(|| "(default)".to_owned()),
                mode: if v.enforced { "enforce" } else { "dry_run" },
            })
            .inc();
    }

    /// A grant was stored (`created`) or revoked (`revoked`).
    pub fn grant_event(&self, event: &'static str) {
        self.grants.get_or_create(&GrantLabels { event }).inc();
    }

    /// One Bot API call ended: `error` is the failure's kind (see
    /// [`crate::telegram::client::error_kind`]), `took` its duration when worth
    /// observing.
    pub fn telegram_call(
        &self,
        method: &'static str,
        took: Option<Duration>,
        error: Option<&'static str>,
    ) {
        let labels = MethodLabels { method };
        self.telegram_requests.get_or_create(&labels).inc();
        if let Some(took) = took {
            self.telegram_duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
        if let Some(kind) = error {
            self.telegram_errors
                .get_or_create(&TelegramErrorLabels { method, kind })
                .inc();
        }
    }

    /// A pending question (`r`) took a step on the operators' side (see [`StepLabels`]).
    pub fn question_step(&self, r: &Question, step: &'static str) {
        self.question_steps
            .get_or_create(&StepLabels {
                agent: r.agent.clone(),
                route: r.route.clone(),
                step,
            })
            .inc();
    }

    /// A question (`r`) ended `timeout` because it could not reach its chat before its
    /// deadline.
    pub fn question_missed_deadline(&self, r: &Question) {
        self.questions_missed_deadline
            .get_or_create(&RouteLabels {
                agent: r.agent.clone(),
                route: r.route.clone(),
            })
            .inc();
    }

    /// A question (`r`) was still pending when its route's SLA passed.
    pub fn sla_breached(&self, r: &Question) {
        self.sla_breaches
            .get_or_create(&RouteLabels {
                agent: r.agent.clone(),
                route: r.route.clone(),
            })
            .inc();
    }

    /// A webhook attempt for `agent` got a 2xx.
    pub fn webhook_delivered(&self, agent: &str) {
        self.webhook_delivered
            .get_or_create(&agent_labels(agent))
            .inc();
    }

    /// A webhook attempt for `agent` failed; `final_attempt` when it was given up.
    pub fn webhook_failed(&self, agent: &str, final_attempt: bool) {
        let labels = agent_labels(agent);
        self.webhook_failures.get_or_create(&labels).inc();
        if final_attempt {
            self.webhook_given_up.get_or_create(&labels).inc();
        }
    }

    /// The exposition, with the stored-state gauges set from `gauges` (read at `now`);
    /// `agents` (the configured ones) show a pending count of 0 when they have none.
    pub fn render<'a>(
        &self,
        gauges: &Gauges,
        agents: impl IntoIterator<Item = &'a str>,
        now: OffsetDateTime,
    ) -> String {
        let _scrape = self.scrape.lock().unwrap_or_else(|e| e.into_inner());
        // Reset first: an agent removed from the config with nothing pending drops out.
        self.pending.clear();
        for agent in agents {
            self.pending.get_or_create(&agent_labels(agent)).set(0);
        }
        for (agent, n) in &gauges.pending_by_agent {
            self.pending
                .get_or_create(&agent_labels(agent))
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        let oldest = gauges
            .oldest_pending_since
            .map(|at| (now - at).as_seconds_f64().max(0.0))
            .unwrap_or(0.0);
        self.oldest_pending_age.set(oldest);
        self.webhook_backlog
            .set(i64::try_from(gauges.webhook_backlog).unwrap_or(i64::MAX));
        // Dropped rows are never deleted, so the stored count only grows: the counter is
        // moved up to it (never down, should the database be swapped underneath).
        for (agent, stored) in &gauges.webhook_dropped_by_agent {
            let counter = self.webhook_dropped.get_or_create(&agent_labels(agent));
            let shown = counter.get();
            if *stored > shown {
                counter.inc_by(stored - shown);
            }
        }
        let mut text = String::new();
        // Writing to a String cannot fail; the encoder's own errors are for other writers.
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            tracing::error!("could not encode the metrics");
        }
        text
    }
}

fn decision_histogram() -> Histogram {
    Histogram::new(DECISION_BUCKETS)
}

fn telegram_histogram() -> Histogram {
    Histogram::new(TELEGRAM_BUCKETS)
}

fn agent_labels(agent: &str) -> AgentLabels {
    AgentLabels {
        agent: agent.to_owned(),
    }
}

fn kind(r: &Question) -> &'static str {
    if r.interaction.is_some() {
        "interaction"
    } else {
        "confirmation"
    }
}

/// The tool labels each agent has used so far, at most [`MAX_TOOLS_PER_AGENT`] each.
#[derive(Default)]
pub struct ToolLabels {
    seen: Mutex<HashMap<String, HashSet<String>>>,
}

impl ToolLabels {
    /// The label for `tool` of `agent`: the name (cut to [`MAX_TOOL_LABEL_CHARS`]) while
    /// the agent has labels left or already used it, else [`OTHER_TOOL`]. Agents come
    /// from the configuration, so the outer map is bounded by it.
    pub fn label(&self, agent: &str, tool: &str) -> String {
        let label: String = tool.chars().take(MAX_TOOL_LABEL_CHARS).collect();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let tools = seen.entry(agent.to_owned()).or_default();
        if tools.contains(&label) {
            return label;
        }
        if tools.len() < MAX_TOOLS_PER_AGENT {
            tools.insert(label.clone());
            return label;
        }
        OTHER_TOOL.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_gets_a_bounded_number_of_tool_labels_then_other() {
        let tools = ToolLabels::default();
        for i in 0..MAX_TOOLS_PER_AGENT {
            assert_eq!(tools.label("a", &format!("t{i}")), format!("t{i}"));
        }
        assert_eq!(tools.label("a", "one-too-many"), OTHER_TOOL);
        // Tools seen before keep their label; other agents have their own allowance.
        assert_eq!(tools.label("a", "t0"), "t0");
        assert_eq!(tools.label("b", "one-too-many"), "one-too-many");
    }

    #[test]
    fn long_tool_names_are_cut_on_a_character_boundary() {
        let tools = ToolLabels::default();
        let label = tools.label("a", &"é".repeat(128));
        assert_eq!(label.chars().count(), MAX_TOOL_LABEL_CHARS);
    }

    #[test]
    fn an_empty_application_still_exposes_its_version_and_ends_with_eof() {
        let m = Metrics::new();
        let text = m.render(&Gauges::default(), ["agent-a"], OffsetDateTime::now_utc());
        assert!(text.contains(&format!(
            "hitl_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )));
        assert!(text.contains("hitl_pending_requests{agent=\"agent-a\"} 0"));
        assert!(text.ends_with("# EOF\n"));
    }
}
