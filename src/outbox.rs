//! Signed webhooks to agents, delivered from the outbox.
//!
//! When a request with a `callback_url` ends, storage queues an outbox row in the same
//! transaction as the decision. This worker POSTs the record (the same JSON the API
//! returns) to the URL until a 2xx or the give-up age, with exponential backoff and
//! jitter. Rows live in SQLite, so deliveries survive restarts; delivery is
//! at-least-once, and `X-Hitl-Delivery` stays the same on every retry so receivers can
//! drop duplicates.
//!
//! Where a delivery may go and how it is signed are the outbox's pure rules, in the
//! domain (`crate::domain::outbox`), where the configuration and the API read them too.
//! How attempts share their slots fairly: [`run`].

pub mod alerts;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use secrecy::ExposeSecret;
use time::OffsetDateTime;
use tokio::task::{Id as TaskId, JoinError, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::api::record::RecordView;
use crate::config::OutboxSettings;
use crate::domain::ids::DeliveryId;
use crate::domain::outbox::{DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign};
use crate::service::{Service, now};
use crate::storage::{DeliveryAttempt, OutboxEntry};

/// How many of one agent's due rows each read considers, per attempt slot the agent
/// has: when its oldest wait for a receiving host that is full, a few more let the
/// worker find one for another host, while a read stays small however long the
/// agent's backlog is.
const LOOKAHEAD_PER_SLOT: u32 = 4;
/// How long to wait before reading the outbox again after it could not be read.
pub(crate) const READ_RETRY: Duration = Duration::from_secs(1);

/// The wait before attempt `attempt` (1-based) is retried: doubling from the initial
/// backoff up to the maximum, then scaled by a random factor in [0.5, 1] so receivers
/// that came back are not hit by every sender at once.
pub fn backoff(settings: &OutboxSettings, attempt: u32) -> Duration {
    let exp =
        settings.initial_backoff_seconds * 2f64.powi(attempt.saturating_sub(1).min(60) as i32);
    let capped = exp.min(settings.max_backoff_seconds);
    let jitter = rand::rng().random_range(0.5..=1.0);
    Duration::from_secs_f64(capped * jitter)
}

fn client(settings: &OutboxSettings) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs_f64(settings.timeout_seconds))
        // A receiver that does not even accept is down: do not hold a slot for the
        // whole attempt timeout finding that out.
        .connect_timeout(Duration::from_secs_f64(settings.connect_timeout_seconds))
        // A redirect could lead outside the agent's allowed prefixes.
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("hitl-telegram/", env!("CARGO_PKG_VERSION")))
        .build()
        .unwrap_or_default()
}

/// Why a delivery's request got no answer, with its causes (DNS, refused, TLS, proxy):
/// what an operator needs to fix it. Without the URL, which may carry the receiver's
/// own secrets in its query.
fn request_failed(e: reqwest::Error) -> String {
    format!(
        "request failed: {}",
        crate::telemetry::causes(&e.without_url())
    )
}

/// The receiving host a delivery counts against: the URL's origin (scheme, host and
/// port), so two ports on one machine are two receivers.
fn receiver_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_owned())
}

/// The attempt slots: which deliveries are in flight (by the key of the task running
/// each, `K`), and how many per agent and per receiving host, against the caps of
/// `[webhooks]`. Pure bookkeeping, so the rules are unit-tested without tasks or a
/// network.
#[derive(Debug)]
struct Slots<K = TaskId> {
    max_total: usize,
    max_per_agent: usize,
    max_per_host: usize,
    running: HashMap<K, Running>,
    /// The deliveries of `running`: a due row that is already in flight is skipped.
    deliveries: HashSet<DeliveryId>,
    per_agent: HashMap<String, usize>,
    per_host: HashMap<String, usize>,
}

#[derive(Debug)]
struct Running {
    delivery: DeliveryId,
    agent: String,
    host: String,
}

impl<K: std::hash::Hash + Eq> Slots<K> {
    fn new(settings: &OutboxSettings) -> Slots<K> {
        let cap = |n: u32| usize::try_from(n.max(1)).unwrap_or(usize::MAX);
        Slots {
            max_total: cap(settings.max_in_flight),
            max_per_agent: cap(settings.max_in_flight_per_agent),
            max_per_host: cap(settings.max_in_flight_per_host),
            running: HashMap::new(),
            deliveries: HashSet::new(),
            per_agent: HashMap::new(),
            per_host: HashMap::new(),
        }
    }

    fn is_full(&self) -> bool {
        self.running.len() >= self.max_total
    }

    /// Whether `entry` (to `host`) may start now: not in flight already, and the
    /// worker, its agent and its host all below their caps.
    fn admits(&self, entry: &OutboxEntry, host: &str) -> bool {
        !self.is_full()
            && !self.deliveries.contains(&entry.delivery_id)
            && self.per_agent.get(&entry.agent).copied().unwrap_or(0) < self.max_per_agent
            && self.per_host.get(host).copied().unwrap_or(0) < self.max_per_host
    }

    fn take(&mut self, task: K, entry: &OutboxEntry, host: String) {
        *self.per_agent.entry(entry.agent.clone()).or_default() += 1;
        *self.per_host.entry(host.clone()).or_default() += 1;
        self.deliveries.insert(entry.delivery_id.clone());
        self.running.insert(
            task,
            Running {
                delivery: entry.delivery_id.clone(),
                agent: entry.agent.clone(),
                host,
            },
        );
    }

    fn release(&mut self, task: K) {
        let Some(r) = self.running.remove(&task) else {
            return;
        };
        self.deliveries.remove(&r.delivery);
        for (map, key) in [(&mut self.per_agent, r.agent), (&mut self.per_host, r.host)] {
            if let Some(n) = map.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

/// Runs until `stop`. Attempts in progress when `stop` fires are finished and recorded.
///
/// One dispatcher runs every attempt as its own task, at most
/// `max_in_flight` at once, `max_in_flight_per_agent` for one agent and
/// `max_in_flight_per_host` to one receiving origin ([`Slots`]). It starts the next due
/// delivery as soon as a slot is free (never waiting for a batch), and reads due rows
/// in turns across agents, so a receiver that hangs holds only its own agent's slots
/// (and its host's) for one attempt's timeout, and one agent's backlog never hides
/// another agent's due delivery. The backlog itself is bounded where outcomes are
/// stored: past `max_backlog_per_agent` undelivered webhooks, an agent's next delivery
/// is dropped (audited as `webhook_dropped`) instead of queued.
pub async fn run(service: Arc<Service>, stop: CancellationToken) {
    let settings = service.config().webhooks.clone();
    let http = client(&settings);
    let mut slots: Slots = Slots::new(&settings);
    let mut attempts: JoinSet<()> = JoinSet::new();
    let lookahead = settings
        .max_in_flight_per_agent
        .saturating_mul(LOOKAHEAD_PER_SLOT)
        .max(1);
    while !stop.is_cancelled() {
        // Every due row left waiting waits for a slot that an attempt in flight holds,
        // so the end of an attempt (below) is what starts it; the sleep is only for
        // rows not due yet.
        let sleep = if slots.is_full() {
            None
        } else {
            start_due(&service, &http, &mut slots, &mut attempts, lookahead).await
        };
        tokio::select! {
            _ = stop.cancelled() => {}
            Some(done) = attempts.join_next_with_id(), if !attempts.is_empty() => {
                slots.release(finished(done));
                while let Some(done) = attempts.try_join_next_with_id() {
                    slots.release(finished(done));
                }
            }
            _ = service.outbox_wake().notified() => {}
            _ = sleep_or_forever(sleep) => {}
        }
    }
    while attempts.join_next().await.is_some() {}
}

/// The task that ended, whether it returned or panicked (its slot is freed either way).
fn finished(done: Result<(TaskId, ()), JoinError>) -> TaskId {
    match done {
        Ok((id, ())) => id,
        Err(e) => {
            tracing::error!(error = %e, "a webhook attempt failed unexpectedly");
            e.id()
        }
    }
}

/// Starts every due delivery the slots admit, each agent's oldest first and agents in
/// turns; returns how long until the next row not due yet is due (`None`: none).
async fn start_due(
    service: &Arc<Service>,
    http: &reqwest::Client,
    slots: &mut Slots,
    attempts: &mut JoinSet<()>,
    lookahead: u32,
) -> Option<Duration> {
    let at = now();
    let due = match service
        .roles()
        .outbox
        .due_deliveries_by_agent(at, lookahead)
        .await
    {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the webhook outbox");
            return Some(READ_RETRY);
        }
    };
    for entry in due {
        if slots.is_full() {
            break;
        }
        let host = receiver_of(&entry.url);
        if slots.admits(&entry, &host) {
            let task = attempts.spawn(attempt(service.clone(), http.clone(), entry.clone()));
            slots.take(task.id(), &entry, host);
        }
    }
    match service.roles().outbox.next_delivery_due_after(at).await {
        Ok(next) => next.map(|due| (due - now()).try_into().unwrap_or(Duration::ZERO)),
        Err(e) => {
            tracing::error!(error = %e, "cannot read the webhook outbox");
            Some(READ_RETRY)
        }
    }
}

async fn sleep_or_forever(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn attempt(service: Arc<Service>, http: reqwest::Client, entry: OutboxEntry) {
    let result = match send(&service, &http, &entry).await {
        Ok(()) => {
            tracing::info!(delivery = entry.delivery_id.as_str(), id = %entry.confirmation_id, "webhook delivered");
            service.metrics().webhook_delivered(&entry.agent);
            DeliveryAttempt::Delivered
        }
        Err(error) => {
            let settings = &service.config().webhooks;
            let step = next_step(settings, entry.created_at, entry.attempts, error, now());
            let given_up = matches!(step, DeliveryAttempt::GiveUp { .. });
            service.metrics().webhook_failed(&entry.agent, given_up);
            step
        }
    };
    if let DeliveryAttempt::GiveUp { error } = &result {
        tracing::warn!(delivery = entry.delivery_id.as_str(), id = %entry.confirmation_id, %error, "webhook given up");
    }
    if let Err(e) = service
        .roles()
        .outbox
        .delivery_attempted(&entry, result, now())
        .await
    {
        tracing::error!(error = %e, "cannot record a webhook attempt");
    }
}

/// After a failed attempt of a delivery queued at `created_at` and attempted `attempts`
/// times before: retry later, or give up once it is older than the give-up age.
fn next_step(
    settings: &OutboxSettings,
    created_at: OffsetDateTime,
    attempts: u32,
    error: String,
    now: OffsetDateTime,
) -> DeliveryAttempt {
    let age: Duration = (now - created_at).try_into().unwrap_or(Duration::ZERO);
    if age.as_secs_f64() >= settings.give_up_after_seconds {
        return DeliveryAttempt::GiveUp {
            error: format!("{error} (giving up after {} attempts)", attempts + 1),
        };
    }
    tracing::debug!(%error, "delivery attempt failed; will retry");
    DeliveryAttempt::Retry {
        next_at: now + backoff(settings, attempts + 1),
        error,
    }
}

async fn send(
    service: &Service,
    http: &reqwest::Client,
    entry: &OutboxEntry,
) -> Result<(), String> {
    let record = service
        .roles()
        .questions
        .get(&entry.confirmation_id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the request no longer exists")?;
    let secret = service
        .config()
        .agents
        .iter()
        .find(|a| a.name == entry.agent)
        .and_then(|a| a.webhook_secret.clone())
        .ok_or("the agent has no webhook secret configured")?;
    let body = serde_json::to_vec(&RecordView::from(&record)).map_err(|e| e.to_string())?;
    let request = http.post(&entry.url);
    post_signed(
        request,
        secret.expose_secret(),
        entry.delivery_id.as_str(),
        body,
    )
    .await
}

/// Sends `request` with the JSON `body`, signed now under `secret` as delivery
/// `delivery_id` (the headers and scheme of `crate::domain::outbox::sign`): `Ok` on a
/// 2xx, else why not.
async fn post_signed(
    request: reqwest::RequestBuilder,
    secret: &str,
    delivery_id: &str,
    body: Vec<u8>,
) -> Result<(), String> {
    let timestamp = now().unix_timestamp();
    let signature = sign(secret.as_bytes(), timestamp, delivery_id, &body);
    let response = request
        .header("content-type", "application/json")
        .header(DELIVERY_HEADER, delivery_id)
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .body(body)
        .send()
        .await
        .map_err(request_failed)?;
    if response.status().is_success() {
        Ok(())
    } else {
        Err(format!(
            "receiver answered HTTP {}",
            response.status().as_u16()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_request_names_its_cause_and_not_the_url() {
        // Port 9 (discard) on loopback: nothing listens, so the connection is refused.
        let e = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post("http://127.0.0.1:9/hook?key=receiver-secret")
            .send()
            .await
            .expect_err("nothing listens on port 9");
        let text = request_failed(e);
        assert!(text.contains("Connection refused"), "{text}");
        assert!(!text.contains("receiver-secret"), "{text}");
    }

    fn entry(agent: &str, url: &str) -> OutboxEntry {
        OutboxEntry {
            delivery_id: DeliveryId::generate(),
            confirmation_id: crate::domain::ids::QuestionId::generate(),
            agent: agent.to_owned(),
            url: url.to_owned(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            attempts: 0,
        }
    }

    fn slots(total: u32, per_agent: u32, per_host: u32) -> Slots<u32> {
        Slots::new(&OutboxSettings {
            max_in_flight: total,
            max_in_flight_per_agent: per_agent,
            max_in_flight_per_host: per_host,
            ..OutboxSettings::default()
        })
    }

    /// Starts `e` under `key` if the slots admit it; whether they did.
    fn start(s: &mut Slots<u32>, key: u32, e: &OutboxEntry) -> bool {
        let host = receiver_of(&e.url);
        let admitted = s.admits(e, &host);
        if admitted {
            s.take(key, e, host);
        }
        admitted
    }

    #[test]
    fn an_agent_with_its_slots_taken_does_not_hold_back_another_agent() {
        let mut s = slots(8, 2, 8);
        let a: Vec<_> = (0..3).map(|_| entry("a", "http://a.example/h")).collect();
        assert!(start(&mut s, 1, &a[0]));
        assert!(start(&mut s, 2, &a[1]));
        assert!(
            !start(&mut s, 3, &a[2]),
            "a's third waits for one of its two slots"
        );
        assert!(start(&mut s, 4, &entry("b", "http://b.example/h")));
        s.release(1);
        assert!(start(&mut s, 3, &a[2]), "a slot freed is a's again");
    }

    #[test]
    fn a_receiving_host_is_capped_across_agents_and_counted_by_origin() {
        let mut s = slots(8, 8, 2);
        assert!(start(&mut s, 1, &entry("a", "http://shared.example/x")));
        assert!(start(&mut s, 2, &entry("b", "http://shared.example:80/y")));
        assert!(
            !start(&mut s, 3, &entry("c", "http://shared.example/z")),
            "the host's two slots are taken, whoever holds them"
        );
        assert!(
            start(&mut s, 4, &entry("c", "http://shared.example:8080/z")),
            "another port is another receiver"
        );
        assert!(start(&mut s, 5, &entry("c", "https://shared.example/z")));
    }

    #[test]
    fn the_worker_cap_holds_and_a_delivery_in_flight_is_not_started_twice() {
        let mut s = slots(2, 2, 2);
        let e = entry("a", "http://a.example/h");
        assert!(start(&mut s, 1, &e));
        assert!(!start(&mut s, 2, &e), "already in flight");
        assert!(start(&mut s, 3, &entry("b", "http://b.example/h")));
        assert!(s.is_full());
        assert!(!start(&mut s, 4, &entry("c", "http://c.example/h")));
        s.release(1);
        s.release(1); // a second release of the same task changes nothing
        assert!(!s.is_full());
        assert!(start(&mut s, 5, &e), "retried once its attempt ended");
        assert!(s.is_full());
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let s = OutboxSettings {
            timeout_seconds: 1.0,
            initial_backoff_seconds: 1.0,
            max_backoff_seconds: 8.0,
            give_up_after_seconds: 100.0,
            ..OutboxSettings::default()
        };
        for (attempt, full) in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (40, 8.0)] {
            let d = backoff(&s, attempt).as_secs_f64();
            assert!(
                d >= full * 0.5 - 1e-9 && d <= full + 1e-9,
                "attempt {attempt}: {d}"
            );
        }
    }
}
