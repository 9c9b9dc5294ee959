//! The Redis bridge: AI-Parrot's `CLIDaemonHumanChannel` queues, served as its companion.
//!
//! An unmodified AI-Parrot agent whose manager uses `CLIDaemonHumanChannel(redis,
//! queue_prefix)` pushes questions on `{prefix}:R:pending`, publishes notices on
//! `{prefix}:R:notify` and pops answers from `{prefix}:R:responses`, for each recipient
//! `R`. With `[redis_bridge]` enabled the service plays the other side for the configured
//! recipients, as the configured agent: questions are moved atomically to
//! `{prefix}:R:processing` and removed only once created (creating is idempotent), so an
//! item is never lost and never asked twice; answers are pushed with the stream's cursor
//! in one Lua script, so a restart neither repeats nor loses one (at-least-once on a lost
//! reply). The protocol, dead items, withdrawals and outages in full: [`run`].

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use rand::Rng;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, Client};
use secrecy::ExposeSecret;
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{Agent, RedisBridge};
use crate::domain::ids::QuestionId;
use crate::domain::interaction::{self, Interaction};
use crate::domain::limits::MAX_BODY_BYTES;
use crate::domain::python;
use crate::service::{NewInteraction, Service, ServiceError};
use crate::storage::AgentEvent;

/// How long one `BLMOVE` blocks; shutdown does not wait for it.
const BLOCK_SECONDS: f64 = 1.0;
/// How long a command may take before the connection counts as broken.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Reconnection backoff: from this, doubling (with jitter) up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A session that lasted this long was healthy: the next failure starts the backoff over.
const HEALTHY_SESSION: Duration = Duration::from_secs(30);
/// How long to wait before asking again when the service could not take a question yet
/// (database error, too many pending).
const CREATE_RETRY: Duration = Duration::from_secs(2);
/// Events read from the stream at once.
const EVENT_BATCH: u32 = 100;
/// The stream is re-read at least this often, even without a wake-up.
const EVENT_POLL: Duration = Duration::from_secs(5);
/// The subscription connection is pinged this often, so a dead one is noticed.
const PUBSUB_PING: Duration = Duration::from_secs(30);
/// How long the bridge's markers outlive the longest question: the event stream keeps
/// answers 7 days, plus a day.
const MARKER_MARGIN: Duration = Duration::from_secs(8 * 24 * 3600);

/// Pushes an answer and moves the cursor together: if the push fails (a key of the
/// wrong type, out of memory), the cursor does not move.
const PUSH_AND_ADVANCE: &str = "redis.call('LPUSH', KEYS[1], ARGV[1]) \
     redis.call('SET', KEYS[2], ARGV[2]) return 1";

/// The Redis keys of the protocol (AI-Parrot's) and of the bridge (under `_hitl`).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Keys {
        Keys {
            prefix: prefix.into(),
        }
    }

    /// Where AI-Parrot `LPUSH`es questions for `recipient`.
    pub fn pending(&self, recipient: &str) -> String {
        format!("{}:{recipient}:pending", self.prefix)
    }

    /// Questions taken but not yet stored (re-driven on start).
    pub fn processing(&self, recipient: &str) -> String {
        format!("{}:{recipient}:processing", self.prefix)
    }

    /// Questions that could not be asked, as they were.
    pub fn dead(&self, recipient: &str) -> String {
        format!("{}:{recipient}:dead", self.prefix)
    }

    /// AI-Parrot's notices (new question, notification, withdrawal).
    pub fn notify(&self, recipient: &str) -> String {
        format!("{}:{recipient}:notify", self.prefix)
    }

    /// Where AI-Parrot `BRPOP`s answers.
    pub fn responses(&self, recipient: &str) -> String {
        format!("{}:{recipient}:responses", self.prefix)
    }

    /// The last event of the agent's stream handled.
    pub fn cursor(&self) -> String {
        format!("{}:_hitl:cursor", self.prefix)
    }

    /// The recipient whose queue first carried `interaction_id`.
    pub fn asked(&self, interaction_id: &str) -> String {
        format!("{}:_hitl:asked:{interaction_id}", self.prefix)
    }

    /// AI-Parrot withdrew `interaction_id` before the bridge took it.
    pub fn cancelled(&self, interaction_id: &str) -> String {
        format!("{}:_hitl:cancelled:{interaction_id}", self.prefix)
    }
}

struct Bridge {
    service: Arc<Service>,
    agent: Arc<Agent>,
    client: Client,
    keys: Keys,
    recipients: Vec<String>,
    route: Option<String>,
    /// The agents' own confirmation window, disclosed on their approvals.
    agent_window_seconds: u64,
    /// Lifetime of the `asked` and `cancelled` markers, in seconds.
    marker_ttl: u64,
}

/// Runs the bridge until `stop` fires; returns at once when `[redis_bridge]` is off.
///
/// An unmodified AI-Parrot agent whose manager uses `CLIDaemonHumanChannel(redis,
/// queue_prefix)` writes, for each recipient `R`:
///
/// - `LPUSH {prefix}:R:pending <HumanInteraction.model_dump_json()>` to ask,
/// - `PUBLISH {prefix}:R:notify {...}` after each question, for a notification
///   (`{"notification": ...}`) and to withdraw one (`{"cancelled": "<interaction_id>", ...}`),
/// - and reads answers with `BRPOP {prefix}:R:responses` (`HumanResponse` JSON).
///
/// With `[redis_bridge]` enabled the service plays the other side for the configured
/// recipients, as the configured agent:
///
/// - **Questions.** Each recipient's `pending` list is consumed oldest first (items are
///   `LPUSH`ed, so the oldest is on the right) with `BLMOVE pending processing RIGHT LEFT`:
///   the item moves atomically to `{prefix}:R:processing`, the interaction is created
///   (in R's private chat, or in `route` when one is configured), and only then is the item
///   removed from `processing`. After a crash anywhere in between, the next start re-drives
///   whatever `processing` holds; creating is idempotent on the agent and the
///   `interaction_id`, so an item is never lost and never asked twice. An item that cannot
///   be asked (not JSON, not a valid `HumanInteraction`, a key repeated, an
///   `interaction_id` reused for another question, ...) is moved to `{prefix}:R:dead` with
///   a warning naming the reason (never the content), and, when it names an
///   `interaction_id` the service has not asked, answered on `{prefix}:R:responses` as
///   refused (the "no" of its type, `metadata.refused` and the reason; see
///   [`interaction::refusal_response`]) in the same step, so the agent stops waiting
///   instead of timing out. Then the next one is taken.
/// - **Withdrawals.** `{"cancelled": id}` on a served `notify` channel withdraws the
///   interaction (its message is edited, its buttons removed). A withdrawal that arrives
///   before its question was taken leaves a marker (`{prefix}:_hitl:cancelled:<id>`), so the
///   question is then not asked. Redis pub/sub keeps nothing for a subscriber that is not
///   connected: a withdrawal published while the bridge is down is lost (the question then
///   ends by its own timeout). Other notices (new questions, notifications) are ignored.
/// - **Answers.** The bridge follows its agent's event stream (the one `GET /v1/events`
///   serves) and, for each `response` event, `LPUSH`es the `HumanResponse` on
///   `{prefix}:R:responses`, where R is the respondent when they are a served recipient,
///   else the recipient whose queue first carried the question. The position in the
///   stream is kept in `{prefix}:_hitl:cursor`, written by the same Lua script as the push,
///   so a restart neither repeats nor loses an answer; a reply to that script lost with the
///   connection makes it run again: delivery is at-least-once. The bridge treats every
///   interaction of its agent as its own, so the agent must be dedicated to the bridge (its
///   HTTP token unused).
///
/// Redis down: every connection is dropped and made again with exponential backoff and
/// jitter; nothing is lost meanwhile (questions wait in `pending`, answers in the event
/// stream, which keeps 7 days). Shutdown stops taking items at once and finishes the one
/// being stored.
pub async fn run(service: Arc<Service>, stop: CancellationToken) {
    let Some(settings) = service.config().redis_bridge.clone() else {
        return;
    };
    let bridge = match Bridge::new(service, &settings) {
        Ok(b) => Arc::new(b),
        Err(e) => {
            tracing::error!(error = %e, "redis bridge: cannot start");
            return;
        }
    };
    tracing::info!(prefix = %bridge.keys.prefix, recipients = ?bridge.recipients,
        agent = %bridge.agent.name, "redis bridge: starting");
    let mut backoff = INITIAL_BACKOFF;
    loop {
        let started = Instant::now();
        let result = bridge.clone().session(&stop).await;
        if stop.is_cancelled() {
            break;
        }
        if started.elapsed() >= HEALTHY_SESSION {
            backoff = INITIAL_BACKOFF;
        }
        let wait = backoff.mul_f64(rand::rng().random_range(0.5..=1.0));
        match result {
            Err(e) => tracing::warn!(
                error = %format!("{e:#}"),
                retry_in_ms = wait.as_millis() as u64,
                "redis bridge: Redis is unreachable or refused a command; reconnecting"
            ),
            Ok(()) => tracing::warn!(
                retry_in_ms = wait.as_millis() as u64,
                "redis bridge: session ended; reconnecting"
            ),
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    tracing::info!("redis bridge: stopped");
}

/// One session's connections.
struct Connections {
    pubsub: PubSub,
    listener: MultiplexedConnection,
    forwarder: MultiplexedConnection,
    consumers: Vec<MultiplexedConnection>,
}

/// A question taken from a queue, or why it cannot be asked.
enum Taken {
    Ask(Box<Interaction>),
    Refuse(String),
}

impl Bridge {
    fn new(service: Arc<Service>, settings: &RedisBridge) -> anyhow::Result<Bridge> {
        let agent = service
            .config()
            .agents
            .iter()
            .find(|a| a.name == settings.agent)
            .cloned()
            .with_context(|| format!("agent '{}' is not configured", settings.agent))?;
        let client = Client::open(settings.url.expose_secret())
            .map_err(|e| anyhow::anyhow!("redis_bridge.url is not a Redis URL ({e})"))?;
        let marker_ttl = (Duration::from_secs_f64(service.config().max_timeout_seconds)
            + MARKER_MARGIN)
            .as_secs();
        Ok(Bridge {
            agent,
            client,
            keys: Keys::new(settings.prefix.clone()),
            recipients: settings.recipients.clone(),
            route: settings.route.clone(),
            agent_window_seconds: settings.agent_window_seconds,
            marker_ttl,
            service,
        })
    }

    fn serves(&self, name: &str) -> bool {
        self.recipients.iter().any(|r| r == name)
    }

    async fn connect(&self, response_timeout: Duration) -> anyhow::Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        self.client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .context("cannot connect to Redis")
    }

    /// Opens the session's connections: the subscription (subscribed first, so a
    /// withdrawal published while the queues are re-driven is seen), one for the
    /// withdrawals' writes, one for the answers, one per served queue (each blocks).
    async fn open(&self) -> anyhow::Result<Connections> {
        let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .context("connecting to Redis timed out")?
            .context("cannot connect to Redis")?;
        for r in &self.recipients {
            tokio::time::timeout(COMMAND_TIMEOUT, pubsub.subscribe(self.keys.notify(r)))
                .await
                .context("SUBSCRIBE timed out")?
                .context("SUBSCRIBE failed")?;
        }
        let listener_con = self.connect(COMMAND_TIMEOUT).await?;
        let forward_con = self.connect(COMMAND_TIMEOUT).await?;
        let blocking_timeout = COMMAND_TIMEOUT + Duration::from_secs_f64(BLOCK_SECONDS);
        let mut consumer_cons = Vec::new();
        for _ in &self.recipients {
            consumer_cons.push(self.connect(blocking_timeout).await?);
        }
        Ok(Connections {
            pubsub,
            listener: listener_con,
            forwarder: forward_con,
            consumers: consumer_cons,
        })
    }

    /// One connected run: every worker on its own connection, all stopped together when
    /// one fails (the caller reconnects) or `stop` fires.
    async fn session(self: Arc<Self>, stop: &CancellationToken) -> anyhow::Result<()> {
        let Connections {
            pubsub,
            listener: listener_con,
            forwarder: forward_con,
            consumers: consumer_cons,
        } = tokio::select! {
            opened = self.open() => opened?,
            _ = stop.cancelled() => return Ok(()),
        };
        tracing::info!(
            prefix = %self.keys.prefix,
            "redis bridge: connected"
        );

        let session = stop.child_token();
        let mut workers = JoinSet::new();
        workers.spawn(self.clone().listen(pubsub, listener_con, session.clone()));
        workers.spawn(self.clone().forward(forward_con, session.clone()));
        for (r, con) in self.recipients.iter().zip(consumer_cons) {
            workers.spawn(self.clone().consume(r.clone(), con, session.clone()));
        }
        let mut failure = None;
        while let Some(done) = workers.join_next().await {
            let result = done.map_err(anyhow::Error::from).and_then(|r| r);
            if let Err(e) = result {
                session.cancel();
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    // ----- Questions -----------------------------------------------------------------

    /// Consumes `recipient`'s queue: first what a previous run left in `processing`,
    /// then `pending`, oldest first.
    async fn consume(
        self: Arc<Self>,
        recipient: String,
        mut con: MultiplexedConnection,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let pending = self.keys.pending(&recipient);
        let processing = self.keys.processing(&recipient);
        let left: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(&processing)
            .arg(0)
            .arg(-1)
            .query_async(&mut con)
            .await
            .context("LRANGE processing")?;
        if !left.is_empty() {
            tracing::info!(recipient = %recipient, count = left.len(),
                "redis bridge: re-driving questions taken before the last stop");
        }
        // Taken items are pushed on the left: the oldest is on the right.
        for item in left.iter().rev() {
            if stop.is_cancelled() {
                return Ok(());
            }
            self.take(&recipient, item, &mut con, &stop).await?;
        }
        let mut blmove = redis::cmd("BLMOVE");
        blmove
            .arg(&pending)
            .arg(&processing)
            .arg("RIGHT")
            .arg("LEFT")
            .arg(BLOCK_SECONDS);
        loop {
            let item: Option<Vec<u8>> = tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                got = blmove.query_async(&mut con) => got.context("BLMOVE pending processing")?,
            };
            if let Some(item) = item {
                self.take(&recipient, &item, &mut con, &stop).await?;
            }
        }
    }

    /// Asks one item that sits in `recipient`'s `processing` list, then removes it.
    async fn take(
        &self,
        recipient: &str,
        item: &[u8],
        con: &mut MultiplexedConnection,
        stop: &CancellationToken,
    ) -> anyhow::Result<()> {
        let processing = self.keys.processing(recipient);
        let interaction = match self.parse(item) {
            Taken::Ask(i) => *i,
            Taken::Refuse(reason) => return self.refuse(recipient, item, &reason, con).await,
        };
        let id = interaction.interaction_id.clone();
        let cancelled = self.keys.cancelled(&id);
        let withdrawn_early: bool = redis::cmd("EXISTS")
            .arg(&cancelled)
            .query_async(con)
            .await
            .context("EXISTS")?;
        if withdrawn_early {
            let _: i64 = redis::cmd("LREM")
                .arg(&processing)
                .arg(1)
                .arg(item)
                .query_async(con)
                .await
                .context("LREM processing")?;
            tracing::info!(recipient, interaction_id = %id,
                "redis bridge: the agent withdrew the question before it was taken; not asked");
            return Ok(());
        }
        // Marked before it is stored, so no answer can be read before its marker exists.
        let _: Option<String> = redis::cmd("SET")
            .arg(self.keys.asked(&id))
            .arg(recipient)
            .arg("NX")
            .arg("EX")
            .arg(self.marker_ttl)
            .query_async(con)
            .await
            .context("SET asked")?;
        let mut retry = CREATE_RETRY;
        loop {
            let new = NewInteraction {
                interaction: interaction.clone(),
                route: self.route.clone(),
                recipient: Some(recipient.to_owned()),
                callback_url: None,
                // AI-Parrot's CLIDaemonHumanChannel carries only the rendered question:
                // the message says the agent sent no parameters.
                call: None,
                agent_window_seconds: self.agent_window_seconds,
            };
            match self.service.create_interaction(&self.agent, new).await {
                Ok((record, is_new)) => {
                    tracing::info!(recipient, interaction_id = %id, id = %record.id, new = is_new,
                        "redis bridge: question taken");
                    break;
                }
                Err(e @ (ServiceError::Storage(_) | ServiceError::TooManyPending(_))) => {
                    tracing::warn!(recipient, interaction_id = %id, error = %e,
                        retry_in_ms = retry.as_millis() as u64,
                        "redis bridge: the service cannot take the question yet; it stays queued");
                    tokio::select! {
                        _ = tokio::time::sleep(retry) => {}
                        // Left in `processing`: the next start asks it.
                        _ = stop.cancelled() => return Ok(()),
                    }
                    retry = (retry * 2).min(MAX_BACKOFF);
                }
                Err(ServiceError::ShuttingDown) => return Ok(()),
                Err(e) => return self.refuse(recipient, item, &e.to_string(), con).await,
            }
        }
        let _: i64 = redis::cmd("LREM")
            .arg(&processing)
            .arg(1)
            .arg(item)
            .query_async(con)
            .await
            .context("LREM processing")?;
        // A withdrawal that raced the creation found nothing to withdraw: apply it now.
        let withdrawn_meanwhile: bool = redis::cmd("EXISTS")
            .arg(&cancelled)
            .query_async(con)
            .await
            .context("EXISTS")?;
        if withdrawn_meanwhile {
            self.withdraw(recipient, &id, con).await?;
        }
        Ok(())
    }

    /// A queued item as a question, or why it is not one (never quoting it).
    fn parse(&self, item: &[u8]) -> Taken {
        if item.len() > MAX_BODY_BYTES {
            return Taken::Refuse(format!("larger than {MAX_BODY_BYTES} bytes"));
        }
        let value: Value = match serde_json::from_slice(item) {
            Ok(v) => v,
            Err(e) => {
                return Taken::Refuse(format!(
                    "not JSON ({:?} error at line {} column {})",
                    e.classify(),
                    e.line(),
                    e.column()
                ));
            }
        };
        // Refused as `POST /v1/interactions` refuses it: a repeated key has whichever
        // value a reader keeps (serde_json the last), so the humans could be asked
        // something other than what the agent meant. Nesting deeper than the strict
        // reader goes is refused too, rather than asked unchecked.
        match std::str::from_utf8(item).map(python::json::repeated_key) {
            Ok(Ok(None)) => {}
            Ok(Ok(Some(r))) => {
                return Taken::Refuse(format!(
                    "not a valid HumanInteraction: {}: {}",
                    r.path_below("interaction"),
                    r.reason()
                ));
            }
            Ok(Err(e)) => return Taken::Refuse(format!("not a valid HumanInteraction: {e}")),
            Err(e) => return Taken::Refuse(format!("not UTF-8 ({e})")),
        }
        match interaction::parse(&value, self.service.config().max_timeout_seconds) {
            Ok(i) => Taken::Ask(Box::new(i)),
            Err(e) => Taken::Refuse(format!(
                "not a valid HumanInteraction: {}: {}",
                e.field, e.reason
            )),
        }
    }

    /// Refuses an item that cannot be asked, in one step: moves it from `processing` to
    /// `dead` and, when it names its `interaction_id`, answers it on `recipient`'s
    /// `responses` as refused (so a crash in between neither loses the answer nor
    /// pushes it twice: the item is refused again from `processing`, whole).
    async fn refuse(
        &self,
        recipient: &str,
        item: &[u8],
        reason: &str,
        con: &mut MultiplexedConnection,
    ) -> anyhow::Result<()> {
        let dead = self.keys.dead(recipient);
        // Read as serde_json reads it (the last of a repeated key, as pydantic does):
        // the id AI-Parrot's manager waits on is the one its own model holds.
        // An item far over the API's limit is not parsed again just to answer it.
        let mut answer = (item.len() <= 16 * MAX_BODY_BYTES)
            .then(|| serde_json::from_slice::<Value>(item).ok())
            .flatten()
            .and_then(|v| {
                interaction::refusal_response(
                    &v,
                    recipient,
                    reason,
                    time::OffsetDateTime::now_utc(),
                )
            });
        // An id the service already holds (an `interaction_id` reused for another
        // question) names a question that was asked: AI-Parrot's manager knows both by
        // that one id, so a refusal would answer the question still open in Telegram.
        // Its own answers come through the event stream; this item is only recorded.
        if let Some(id) = answer.as_ref().and_then(|a| a["interaction_id"].as_str()) {
            match self.service.asked().get_interaction(&self.agent, id).await {
                Err(ServiceError::NotFound) => {}
                Ok(_) => answer = None,
                Err(e) => {
                    return Err(anyhow::Error::from(e)
                        .context("reading whether a refused question's interaction_id was asked"));
                }
            }
        }
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("LPUSH")
            .arg(&dead)
            .arg(item)
            .ignore()
            .cmd("LREM")
            .arg(self.keys.processing(recipient))
            .arg(1)
            .arg(item)
            .ignore();
        if let Some(answer) = &answer {
            pipe.cmd("LPUSH")
                .arg(self.keys.responses(recipient))
                .arg(answer.to_string())
                .ignore();
        }
        pipe.exec_async(con)
            .await
            .context("moving an item to the dead-letter list")?;
        tracing::warn!(recipient, reason, dead_letter = %dead, answered = answer.is_some(),
            "redis bridge: a queued question cannot be asked; moved it to the dead-letter list \
             (and answered it as refused when it names its interaction_id)");
        Ok(())
    }

    // ----- Withdrawals ---------------------------------------------------------------

    /// Follows the served `notify` channels for withdrawals.
    async fn listen(
        self: Arc<Self>,
        pubsub: PubSub,
        mut con: MultiplexedConnection,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let (mut sink, mut messages) = pubsub.split();
        let mut ping = tokio::time::interval(PUBSUB_PING);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return Ok(()),
                msg = messages.next() => {
                    let Some(msg) = msg else {
                        anyhow::bail!("the subscription connection closed");
                    };
                    let channel = msg.get_channel_name().to_owned();
                    let Some(recipient) = self
                        .recipients
                        .iter()
                        .find(|r| self.keys.notify(r) == channel)
                        .cloned()
                    else {
                        continue;
                    };
                    if let Some(id) = cancelled_id(msg.get_payload_bytes()) {
                        self.withdraw(&recipient, &id, &mut con).await?;
                    }
                }
                _ = ping.tick() => {
                    let _: redis::Value = tokio::time::timeout(COMMAND_TIMEOUT, sink.ping())
                        .await
                        .context("PING on the subscription connection timed out")?
                        .context("PING on the subscription connection")?;
                }
            }
        }
    }

    /// Withdraws the bridge's interaction `id`; if it is not stored yet, leaves a marker
    /// so it is not asked when it is taken.
    async fn withdraw(
        &self,
        recipient: &str,
        id: &str,
        con: &mut MultiplexedConnection,
    ) -> anyhow::Result<()> {
        match self.service.withdraw_interaction(&self.agent, id).await {
            Ok(r) => {
                tracing::info!(recipient, interaction_id = %id, id = %r.id,
                    "redis bridge: question withdrawn by the agent");
            }
            Err(ServiceError::NotFound) => {
                let _: () = redis::cmd("SET")
                    .arg(self.keys.cancelled(id))
                    .arg(1)
                    .arg("EX")
                    .arg(self.marker_ttl)
                    .query_async(con)
                    .await
                    .context("SET cancelled")?;
                tracing::info!(recipient, interaction_id = %id,
                    "redis bridge: withdrawal of a question not taken yet; it will not be asked");
            }
            Err(ServiceError::AlreadyDecided(_)) => {
                tracing::debug!(recipient, interaction_id = %id,
                    "redis bridge: withdrawal of a question that already ended");
            }
            Err(e) => {
                tracing::warn!(recipient, interaction_id = %id, error = %e,
                    "redis bridge: cannot withdraw the question");
            }
        }
        Ok(())
    }

    // ----- Answers -------------------------------------------------------------------

    /// Pushes the answers of the agent's event stream, from the stored cursor on.
    async fn forward(
        self: Arc<Self>,
        mut con: MultiplexedConnection,
        stop: CancellationToken,
    ) -> anyhow::Result<()> {
        let mut ticks = self.service.changes().subscribe_events();
        let mut cursor = self.load_cursor(&mut con).await?;
        let mut saved = cursor;
        loop {
            ticks.borrow_and_update();
            let events = match self
                .service
                .roles()
                .agent_events
                .agent_events(&self.agent.name, cursor, EVENT_BATCH)
                .await
            {
                Ok(events) => events,
                Err(e) => {
                    tracing::warn!(error = %e, "redis bridge: cannot read the event stream");
                    tokio::select! {
                        _ = tokio::time::sleep(CREATE_RETRY) => continue,
                        _ = stop.cancelled() => return Ok(()),
                    }
                }
            };
            for event in &events {
                if event.kind == "response"
                    && let Some((recipient, payload)) = self.destination(event, &mut con).await?
                {
                    let _: i64 = redis::cmd("EVAL")
                        .arg(PUSH_AND_ADVANCE)
                        .arg(2)
                        .arg(self.keys.responses(&recipient))
                        .arg(self.keys.cursor())
                        .arg(&payload)
                        .arg(event.seq)
                        .query_async(&mut con)
                        .await
                        .context("pushing an answer")?;
                    saved = event.seq;
                    tracing::info!(recipient = %recipient, seq = event.seq,
                        "redis bridge: answer pushed");
                }
                cursor = event.seq;
            }
            if cursor != saved {
                let _: () = redis::cmd("SET")
                    .arg(self.keys.cursor())
                    .arg(cursor)
                    .query_async(&mut con)
                    .await
                    .context("SET cursor")?;
                saved = cursor;
            }
            if events.len() == EVENT_BATCH as usize {
                continue;
            }
            tokio::select! {
                changed = ticks.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                _ = tokio::time::sleep(EVENT_POLL) => {}
                _ = stop.cancelled() => return Ok(()),
            }
        }
    }

    /// The stored cursor; 0 when there is none, or when it is past the newest event of
    /// the agent (the database was replaced, or every event was purged), so new events
    /// are not skipped.
    async fn load_cursor(&self, con: &mut MultiplexedConnection) -> anyhow::Result<i64> {
        let stored: Option<String> = redis::cmd("GET")
            .arg(self.keys.cursor())
            .query_async(con)
            .await
            .context("GET cursor")?;
        let cursor = match stored.as_deref().map(str::parse::<i64>) {
            None => 0,
            Some(Ok(c)) if c >= 0 => c,
            Some(_) => {
                tracing::warn!(key = %self.keys.cursor(),
                    "redis bridge: the stored cursor is not a number; starting from the first event");
                0
            }
        };
        let newest = self
            .service
            .roles()
            .agent_events
            .last_agent_event(&self.agent.name)
            .await
            .context("reading the event stream")?;
        if cursor > newest {
            tracing::info!(
                cursor,
                newest,
                "redis bridge: the cursor is past the newest event (a new database, or old events purged); starting from the first event"
            );
            return Ok(0);
        }
        Ok(cursor)
    }

    /// The recipient whose `responses` list gets this answer, and the `HumanResponse`
    /// JSON; `None` (logged) when the event cannot be placed.
    async fn destination(
        &self,
        event: &AgentEvent,
        con: &mut MultiplexedConnection,
    ) -> anyhow::Result<Option<(String, String)>> {
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(seq = event.seq, error = %e,
                    "redis bridge: an unreadable stream event; skipped");
                return Ok(None);
            }
        };
        let (Some(interaction_id), Some(response)) = (
            data.get("interaction_id").and_then(Value::as_str),
            data.get("response").filter(|r| r.is_object()),
        ) else {
            tracing::warn!(
                seq = event.seq,
                "redis bridge: a response event without its interaction; skipped"
            );
            return Ok(None);
        };
        let payload = response.to_string();
        if let Some(respondent) = response.get("respondent").and_then(Value::as_str)
            && self.serves(respondent)
        {
            return Ok(Some((respondent.to_owned(), payload)));
        }
        let asked: Option<String> = redis::cmd("GET")
            .arg(self.keys.asked(interaction_id))
            .query_async(con)
            .await
            .context("GET asked")?;
        if let Some(r) = asked.filter(|r| self.serves(r)) {
            return Ok(Some((r, payload)));
        }
        // No marker (Redis lost it): the first private chat the question went to.
        let first = match data
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| QuestionId::parse(id).ok())
        {
            Some(id) => self
                .service
                .roles()
                .questions
                .get(&id)
                .await
                .context("reading the question")?
                .and_then(|r| {
                    r.route
                        .strip_prefix('@')
                        .map(str::to_owned)
                        .or_else(|| r.copies.first().map(|c| c.recipient.clone()))
                }),
            None => None,
        };
        match first.filter(|r| self.serves(r)) {
            Some(r) => Ok(Some((r, payload))),
            None => {
                tracing::warn!(
                    seq = event.seq,
                    interaction_id,
                    "redis bridge: an answer to a question that did not come through the bridge; not pushed"
                );
                Ok(None)
            }
        }
    }
}

/// The `interaction_id` of a withdrawal notice (`{"cancelled": id, ...}`).
fn cancelled_id(payload: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(payload).ok()?;
    v.get("cancelled")?
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_ai_parrots_layout() {
        let k = Keys::new("hitl:cli_queue");
        assert_eq!(k.pending("alice"), "hitl:cli_queue:alice:pending");
        assert_eq!(k.processing("alice"), "hitl:cli_queue:alice:processing");
        assert_eq!(k.dead("alice"), "hitl:cli_queue:alice:dead");
        assert_eq!(k.notify("alice"), "hitl:cli_queue:alice:notify");
        assert_eq!(k.responses("alice"), "hitl:cli_queue:alice:responses");
        assert_eq!(k.cursor(), "hitl:cli_queue:_hitl:cursor");
    }

    #[test]
    fn only_cancel_notices_name_an_interaction() {
        assert_eq!(
            cancelled_id(br#"{"cancelled": "abc", "message": "Interaction abc... cancelled"}"#),
            Some("abc".to_owned())
        );
        assert_eq!(cancelled_id(br#"{"notification": "hi"}"#), None);
        assert_eq!(
            cancelled_id(br#"{"interaction_id": "abc", "question": "q", "type": "approval", "source": "agent"}"#),
            None
        );
        assert_eq!(cancelled_id(br#"{"cancelled": 3}"#), None);
        assert_eq!(cancelled_id(b"not json"), None);
    }
}
