//! The one pipeline every question goes through:
//! create -> (window hit | deliver) -> answer -> decide -> notify.
//!
//! The service owns no I/O of its own: storage is a [`Store`], Telegram is a
//! [`Messenger`], deadlines are [`Deadlines`]. It decides *what* happens; every outcome is
//! written by one conditional update ([`Store::decide`]), so a tap racing a timeout or a
//! withdrawal ends in exactly one outcome, and each loser is shown the stored one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use serde_json::{Value, json};

use crate::config::{Agent, Config, Route};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit;
use crate::domain::briefing;
use crate::domain::confirmation::{Confirmation, Operator, Outcome, PENDING_REASON, Status, Via};
use crate::domain::ids::{CallbackToken, ConfirmationId, IdempotencyKey, OwnerId, ToolName};
use crate::domain::interaction::{
    self, Answer, Consensus, ConsensusMode, Interaction, InteractionType, TimeoutAction,
};
use crate::domain::pyvalue::PyDict;
use crate::metrics::Metrics;
use crate::scheduler::Deadlines;
use crate::storage::{Answered, Decided, Inserted, StorageError, Store};

mod commands;
pub use commands::{CommandMessage, CommandReply};

/// Why Telegram could not carry a message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason}")]
pub struct DeliveryError {
    /// A sentence for the agent and the logs; never contains the bot token.
    pub reason: String,
    /// Telegram says the group became a supergroup with this chat id: the message was
    /// not sent, and should be sent again there.
    pub migrated_to: Option<i64>,
}

impl DeliveryError {
    pub fn new(reason: impl Into<String>) -> Self {
        DeliveryError {
            reason: reason.into(),
            migrated_to: None,
        }
    }
}

/// The port to the operators' chat. Implemented by the Telegram adapter; the service
/// never sees a Telegram type.
#[async_trait]
pub trait Messenger: Send + Sync + 'static {
    /// Posts the question with its buttons in `chat_id`; returns the message id.
    async fn send_question(
        &self,
        record: &Confirmation,
        chat_id: i64,
        view: &View,
    ) -> Result<i32, DeliveryError>;
    /// Re-renders a message of the question as it stands: progress and live buttons while
    /// it is pending, the outcome without buttons once it ended.
    async fn update_message(
        &self,
        record: &Confirmation,
        chat_id: i64,
        message_id: i32,
        view: &View,
    ) -> Result<(), DeliveryError>;
    /// Sends a one-way message (a notification) from `agent`, framed as its words;
    /// returns its message id.
    async fn send_notification(
        &self,
        chat_id: i64,
        agent: &str,
        text: &str,
    ) -> Result<i32, DeliveryError>;
    /// When the question's message had to cut something, sends the full parameters as a
    /// file replying to it (`reply_to`); `Ok(false)` when nothing was cut.
    async fn send_attachment(
        &self,
        record: &Confirmation,
        chat_id: i64,
        reply_to: i32,
    ) -> Result<bool, DeliveryError>;
    /// Answers a button tap with a toast (or an alert the operator must dismiss).
    async fn answer_tap(
        &self,
        query_id: &str,
        text: &str,
        alert: bool,
    ) -> Result<(), DeliveryError>;
    /// Answers an operator command in `chat_id`, as a reply to its message.
    async fn send_command_reply(
        &self,
        chat_id: i64,
        reply_to: i32,
        reply: &CommandReply,
    ) -> Result<i32, DeliveryError>;
}

/// What a message shows besides the record itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// How many answers the question waits for (for "2 of 3 answered").
    pub expected: usize,
    /// A multi-choice selection in progress, shown on the toggles.
    pub selection: Vec<String>,
    /// The chat is a group (poll tallies are shown there).
    pub group: bool,
}

/// A validated interaction (AI-Parrot's `HumanInteraction`) to ask.
#[derive(Debug, Clone)]
pub struct NewInteraction {
    pub interaction: Interaction,
    pub route: Option<String>,
    /// The person (a `[people]` name) AI-Parrot addressed this copy to.
    pub recipient: Option<String>,
    /// Already checked against the agent's allow-list.
    pub callback_url: Option<String>,
    /// The tool call an approval is about, when the agent sent it (AI-Parrot's guard
    /// through our Python package): shown like a confirmation's.
    pub call: Option<Call>,
    /// Without a call: the window the asking agent's own guard opens on approval, when
    /// known from the configuration (the Redis bridge's `agent_window_seconds`). Shown
    /// to the operator as it is: the agent enforces it, so no cap here can shorten it.
    pub agent_window_seconds: u64,
}

/// A tool call attached to an interaction.
#[derive(Debug, Clone)]
pub struct Call {
    pub tool: ToolName,
    pub params: PyDict,
    /// The `params` object exactly as the agent sent it.
    pub params_json: String,
    pub owner_id: OwnerId,
    /// The window the agent's guard records on approval (before the route's cap).
    pub window_seconds: u64,
}

/// A message sent in reply to one of the bot's messages (a free-text answer).
#[derive(Debug, Clone)]
pub struct Reply {
    pub chat_id: i64,
    pub reply_to: i32,
    pub from: Operator,
    pub from_is_bot: bool,
    pub text: String,
}

/// The `tool` column of an interaction (which has none).
pub const INTERACTION_TOOL: &str = "human_interaction";

/// Where a question is posted.
enum Destination {
    Route(Arc<Route>),
    Person { name: String, user_id: u64 },
}

/// A validated request to ask a human.
#[derive(Debug, Clone)]
pub struct NewConfirmation {
    pub tool: ToolName,
    pub params: PyDict,
    /// The `params` object exactly as the agent sent it.
    pub params_json: String,
    pub owner_id: OwnerId,
    pub template: Option<String>,
    pub window_seconds: u64,
    pub allow_edit: bool,
    pub timeout: Duration,
    pub route: Option<String>,
    pub idempotency_key: Option<IdempotencyKey>,
    pub context: Option<String>,
    /// Already checked against the agent's allow-list.
    pub callback_url: Option<String>,
}

/// What a button means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TapAction {
    /// Approve (approval, form); "Approve once" when the question offers a window.
    Approve,
    /// "Approve for <window>": approve and open the question's window (confirmations
    /// and calls that ask for one).
    ApproveWindow,
    /// Cancel or Reject.
    Cancel,
    /// Pick option `n` (single choice, poll).
    Choose(u8),
    /// Toggle option `n` (multi choice).
    Toggle(u8),
    /// Send the multi-choice selection.
    Done,
}

/// A button tap as the chat reported it.
#[derive(Debug, Clone)]
pub struct Tap {
    pub query_id: String,
    /// The raw callback data; hostile until parsed.
    pub data: String,
    pub chat_id: Option<i64>,
    pub message_id: Option<i32>,
    pub from: Operator,
    pub from_is_bot: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("route '{0}' is not allowed for this agent")]
    RouteNotAllowed(String),
    #[error("no confirmation with this id")]
    NotFound,
    #[error("the confirmation is already decided")]
    AlreadyDecided(Box<Confirmation>),
    #[error(
        "idempotency_key was already used for a different request (tool, owner_id or params differ)"
    )]
    IdempotencyMismatch,
    #[error("the service is shutting down; retry with the same idempotency_key")]
    ShuttingDown,
    #[error("too many pending requests (max {0})")]
    TooManyPending(u32),
    #[error("recipient '{0}' is not in [people]; add them to the config or pass a route")]
    UnknownRecipient(String),
    #[error("interaction_id '{0}' already names a different interaction (question or type differ)")]
    InteractionMismatch(String),
    #[error("{0}")]
    NobodyMayAnswer(String),
    #[error("Telegram did not take the message: {0}")]
    Undeliverable(String),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Current time, truncated to the millisecond precision that storage keeps, so a record
/// reads back exactly as it was written.
pub fn now() -> OffsetDateTime {
    let t = OffsetDateTime::now_utc();
    t.replace_nanosecond(t.nanosecond() / 1_000_000 * 1_000_000)
        .unwrap_or(t)
}

/// Converts a wall-clock deadline to the monotonic clock the scheduler sleeps on.
fn instant_at(at: OffsetDateTime, now: OffsetDateTime) -> Instant {
    let left = at - now;
    Instant::now() + left.try_into().unwrap_or(Duration::ZERO)
}

/// Parked agents waiting for a request to end. One watch channel per waited-on id; a
/// decision fires it and removes it, so the map only holds requests someone is waiting
/// on that are still pending.
#[derive(Default)]
struct Waiters {
    map: Mutex<HashMap<ConfirmationId, watch::Sender<()>>>,
}

impl Waiters {
    fn subscribe(&self, id: &ConfirmationId) -> watch::Receiver<()> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(id.clone())
            .or_insert_with(|| watch::channel(()).0)
            .subscribe()
    }

    fn notify(&self, id: &ConfirmationId) {
        let sender = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(id);
        if let Some(s) = sender {
            s.send_replace(());
        }
    }
}

/// How long `GET /v1/events` can resume from: a listener away for longer re-reads the
/// interactions it cares about instead.
pub const AGENT_EVENT_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long past its deadline a waiting agent lets a request stay pending before it
/// applies the timeout itself. The scheduler normally wins by far; this only guards
/// against a stalled scheduler leaving an agent blocked forever.
const WAITER_GRACE: Duration = Duration::from_secs(2);

pub struct Service {
    config: Arc<Config>,
    store: Arc<dyn Store>,
    messenger: Arc<dyn Messenger>,
    deadlines: Deadlines,
    waiters: Waiters,
    /// Background work (deliveries, message edits) that shutdown waits for.
    tasks: TaskTracker,
    /// Wakes the webhook worker when a decision queued a delivery.
    webhook_wake: Notify,
    /// Routes whose chat moved (group upgraded to supergroup), over the config's chat.
    moved_chats: Mutex<HashMap<String, i64>>,
    /// Ticks after every change that may have written an agent event.
    events: watch::Sender<u64>,
    /// The bot's Telegram username, once known (operator commands addressed to it).
    bot_username: std::sync::OnceLock<String>,
    /// What `GET /metrics` reports; shared with the Telegram adapter.
    metrics: Arc<Metrics>,
}

impl Service {
    pub fn new(config: Arc<Config>, store: Arc<dyn Store>, messenger: Arc<dyn Messenger>) -> Self {
        Service {
            config,
            store,
            messenger,
            deadlines: Deadlines::new(),
            waiters: Waiters::default(),
            tasks: TaskTracker::new(),
            webhook_wake: Notify::new(),
            moved_chats: Mutex::new(HashMap::new()),
            events: watch::channel(0).0,
            bot_username: std::sync::OnceLock::new(),
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Counts into `metrics` (the application's, shared with the Telegram adapter)
    /// instead of a set of its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    pub fn webhook_wake(&self) -> &Notify {
        &self.webhook_wake
    }

    /// The chat a route posts to now: the config's, unless Telegram moved it.
    fn chat_of(&self, route: &str, configured: i64) -> i64 {
        self.moved_chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(route)
            .copied()
            .unwrap_or(configured)
    }

    /// After a (re)start: re-applies moved route chats, re-arms the deadline of every
    /// pending request (deadlines that passed while the service was down fire at once),
    /// delivers again the questions whose delivery was cut short, shows the outcomes a
    /// crash kept from their messages, and wakes the webhook outbox.
    pub async fn recover(self: &Arc<Self>) -> Result<usize, StorageError> {
        {
            let moved = self.store.route_chats().await?;
            let mut map = self.moved_chats.lock().unwrap_or_else(|e| e.into_inner());
            map.extend(moved);
        }
        let pending = self.store.pending().await?;
        let now = now();
        let n = pending.len();
        let mut undelivered = Vec::new();
        for entry in pending {
            if !entry.delivered && entry.expires_at > now {
                undelivered.push(entry.id.clone());
            }
            self.deadlines
                .schedule(entry.id, instant_at(entry.expires_at, now));
        }
        // Reloaded and handed to delivery in the background, in their order: serving
        // (and every deadline) must not wait for thousands of reads, and Telegram's 30
        // messages a second pace the deliveries anyway.
        if !undelivered.is_empty() {
            let me = self.clone();
            self.tasks
                .spawn(async move { me.redeliver(undelivered).await });
        }
        for record in self.store.unshown_outcomes().await? {
            tracing::info!(id = %record.id, "showing an outcome a restart interrupted");
            self.finish(record);
        }
        if self.store.next_webhook_due().await?.is_some() {
            self.webhook_wake.notify_one();
        }
        Ok(n)
    }

    /// Delivers again the questions whose delivery a restart cut short (see [`recover`]).
    /// One that cannot be read now is left to its deadline, which fails it closed.
    ///
    /// [`recover`]: Service::recover
    async fn redeliver(self: Arc<Self>, ids: Vec<ConfirmationId>) {
        for id in ids {
            let record = match self.store.get(&id).await {
                Ok(Some(record)) if !record.is_terminal() => record,
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(id = %id, error = %e, "cannot reload a question to deliver it again");
                    continue;
                }
            };
            tracing::info!(id = %record.id, "delivering a question cut short by a restart");
            for copy in record.copies.iter().filter(|c| c.message_id.is_none()) {
                let (me, r, chat) = (self.clone(), record.clone(), copy.chat_id);
                self.tasks
                    .spawn(async move { me.deliver_copy(r, chat).await });
            }
            if record.message_id.is_none() {
                let me = self.clone();
                self.tasks.spawn(async move { me.deliver(record).await });
            }
        }
    }

    /// Runs the deadline task until `stop`.
    pub async fn run_deadlines(self: Arc<Self>, stop: CancellationToken) {
        let me = self.clone();
        self.deadlines
            .run(stop, move |id| {
                let me = me.clone();
                async move { me.expire(&id).await }
            })
            .await
    }

    /// Deletes expired confirmation windows now and then every `every`, until `stop`.
    /// Expired windows are already ignored by lookups; this only keeps the table small.
    pub async fn run_window_purge(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        loop {
            match self.store.purge_expired_windows(now()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "expired confirmation windows deleted"),
                Err(e) => tracing::warn!(error = %e, "could not purge expired windows"),
            }
            match self
                .store
                .purge_agent_events(now() - AGENT_EVENT_RETENTION)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::debug!(purged = n, "old stream events deleted"),
                Err(e) => tracing::warn!(error = %e, "could not purge old stream events"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// Creates a request: an idempotent repeat returns the original, a live window
    /// confirms at once, anything else is stored pending and handed to Telegram.
    pub async fn create(
        self: &Arc<Self>,
        agent: &Agent,
        new: NewConfirmation,
    ) -> Result<Confirmation, ServiceError> {
        let route_name = new
            .route
            .clone()
            .unwrap_or_else(|| agent.default_route.clone());
        let route = match self.config.route(&route_name) {
            Some(r) if agent.routes.contains(&route_name) => r.clone(),
            _ => return Err(ServiceError::RouteNotAllowed(route_name)),
        };
        let now = now();
        let args_hash = ArgsHash::of(&new.params);
        // The route caps what one tap may allow; the cut is kept and shown.
        let window_seconds = new.window_seconds.min(route.max_window_seconds);
        let window_requested_seconds =
            (window_seconds < new.window_seconds).then_some(new.window_seconds);

        if let Some(key) = &new.idempotency_key
            && let Some(existing) = self
                .store
                .find_by_idempotency_key(&agent.name, key, now)
                .await?
        {
            return same_request(existing, &new, &args_hash);
        }

        let mut record = Confirmation {
            id: ConfirmationId::generate(),
            agent: agent.name.clone(),
            route: route.name.clone(),
            chat_id: self.chat_of(&route.name, route.chat_id),
            tool: new.tool.clone(),
            owner_id: new.owner_id.clone(),
            args_hash,
            params_json: new.params_json.clone(),
            briefing: briefing::render(new.template.as_deref(), new.tool.as_str(), &new.params)
                .text,
            context: new.context.clone(),
            allow_edit: new.allow_edit,
            window_seconds,
            window_requested_seconds,
            approved_once: false,
            has_call: false,
            idempotency_key: new.idempotency_key.clone(),
            callback_token: CallbackToken::generate(),
            callback_url: new.callback_url.clone(),
            message_id: None,
            status: Status::Pending,
            via: None,
            reason: PENDING_REASON.to_owned(),
            decided_by: None,
            created_at: now,
            expires_at: now + new.timeout,
            decided_at: None,
            interaction: None,
            result: None,
            timeout_action: None,
            answers: Vec::new(),
            copies: Vec::new(),
        };

        if let Some(window) = self.store.live_window(&record.window_key(), now).await? {
            record.status = Status::Confirmed;
            record.via = Some(Via::Window);
            record.reason = window.reason();
            record.decided_at = Some(now);
            let stored = match self.store.insert(&record, now).await? {
                Inserted::New(r) => r,
                Inserted::Existing(e) => return same_request(e, &new, &record.args_hash),
            };
            tracing::info!(id = %stored.id, agent = %stored.agent, tool = %stored.tool,
                "confirmed by a live window");
            self.metrics.request_created(&stored);
            self.metrics.request_decided(&stored);
            if stored.callback_url.is_some() {
                self.webhook_wake.notify_one();
            }
            self.changed(&stored.id);
            return Ok(stored);
        }

        // Checked after the idempotency and window paths: retrying a request that exists,
        // or a call a window confirms, never adds a pending one.
        if self.store.count_pending(&agent.name).await? >= u64::from(agent.max_pending) {
            return Err(ServiceError::TooManyPending(agent.max_pending));
        }
        let stored = match self.store.insert(&record, now).await? {
            Inserted::New(r) => r,
            Inserted::Existing(e) => return same_request(e, &new, &record.args_hash),
        };
        tracing::info!(id = %stored.id, agent = %stored.agent, tool = %stored.tool,
            route = %stored.route, "confirmation requested");
        self.metrics.request_created(&stored);
        self.deadlines
            .schedule(stored.id.clone(), instant_at(stored.expires_at, now));
        // Delivery runs detached from the HTTP request: an agent that hangs up must not
        // cancel the question halfway.
        let me = self.clone();
        let to_deliver = stored.clone();
        self.tasks
            .spawn(async move { me.deliver(to_deliver).await });
        Ok(stored)
    }

    /// Posts the question in its first chat; fails closed when Telegram refuses it.
    async fn deliver(self: Arc<Self>, mut record: Confirmation) {
        // A group can be upgraded to a supergroup (new chat id) at most once; allow one
        // more hop for good measure, then fail closed.
        let mut hops = 0;
        let view = self.view(&record, record.chat_id);
        let result = loop {
            match self
                .messenger
                .send_question(&record, record.chat_id, &view)
                .await
            {
                Err(e) if e.migrated_to.is_some() && hops < 2 => {
                    hops += 1;
                    let to = e.migrated_to.unwrap_or(record.chat_id);
                    if let Err(err) = self.move_route_chat(&record, to).await {
                        break Err(DeliveryError::new(format!(
                            "{} (and the move failed: {err})",
                            e.reason
                        )));
                    }
                    record.chat_id = to;
                }
                other => break other,
            }
        };
        match result {
            Ok(message_id) => {
                if let Err(e) = self.store.set_message_id(&record.id, message_id).await {
                    tracing::error!(id = %record.id, error = %e, "could not record the message id");
                }
                self.changed(&record.id);
                self.attach_or_fail_closed(&record, record.chat_id, message_id)
                    .await;
                self.after_delivery(&record.id).await;
            }
            Err(e) => {
                tracing::warn!(id = %record.id, reason = %e.reason, "delivery failed: failing closed");
                let outcome = Outcome::FailedClosed {
                    reason: format!(
                        "the question could not be delivered to Telegram: {}",
                        e.reason
                    ),
                };
                if let Err(e) = self.decide(&record.id, outcome).await {
                    tracing::error!(id = %record.id, error = %e, "could not store the fail-closed outcome");
                }
            }
        }
    }

    /// Sends the full parameters along when the question's message had to cut them. An
    /// operator told "attached below" who finds nothing cannot judge the call: if the
    /// file cannot be sent, the question fails closed (its buttons then go).
    async fn attach_or_fail_closed(&self, record: &Confirmation, chat_id: i64, message_id: i32) {
        let Err(e) = self
            .messenger
            .send_attachment(record, chat_id, message_id)
            .await
        else {
            return;
        };
        tracing::warn!(id = %record.id, reason = %e.reason, "the full parameters could not be attached: failing closed");
        let outcome = Outcome::FailedClosed {
            reason: format!(
                "the full parameters could not be attached in Telegram: {}",
                e.reason
            ),
        };
        if let Err(e) = self.decide(&record.id, outcome).await {
            tracing::error!(id = %record.id, error = %e, "could not store the fail-closed outcome");
        }
    }

    /// Posts a further copy of a question in a person's private chat. A copy that cannot
    /// be delivered is logged and audited; the question stays open for the others.
    async fn deliver_copy(self: Arc<Self>, record: Confirmation, chat_id: i64) {
        let view = self.view(&record, chat_id);
        match self.messenger.send_question(&record, chat_id, &view).await {
            Ok(message_id) => {
                if let Err(e) = self
                    .store
                    .set_copy_message_id(&record.id, chat_id, message_id, now())
                    .await
                {
                    tracing::error!(id = %record.id, error = %e, "could not record a copy's message id");
                }
                // The others may still decide in full knowledge: a copy's missing file
                // is audited, not a reason to end the question for everyone.
                if let Err(e) = self
                    .messenger
                    .send_attachment(&record, chat_id, message_id)
                    .await
                {
                    tracing::warn!(id = %record.id, chat_id, reason = %e.reason, "a copy's parameters could not be attached");
                    let why = format!("the full parameters could not be attached: {}", e.reason);
                    let event = audit::copy_failed(record.id.as_str(), chat_id, &why, now());
                    if let Err(e) = self.store.record_event(event).await {
                        tracing::error!(id = %record.id, error = %e, "could not audit a failed copy");
                    }
                }
                self.after_delivery(&record.id).await;
            }
            Err(e) => {
                tracing::warn!(id = %record.id, chat_id, reason = %e.reason, "a copy could not be delivered");
                let event = audit::copy_failed(record.id.as_str(), chat_id, &e.reason, now());
                if let Err(e) = self.store.record_event(event).await {
                    tracing::error!(id = %record.id, error = %e, "could not audit a failed copy");
                }
            }
        }
    }

    /// A timeout or withdrawal may have won while a message was on its way: then its
    /// buttons must not stay live.
    async fn after_delivery(self: &Arc<Self>, id: &ConfirmationId) {
        match self.store.get(id).await {
            Ok(Some(now)) if now.is_terminal() => self.finish(now),
            Ok(_) => {}
            Err(e) => tracing::error!(id = %id, error = %e, "could not re-read"),
        }
    }

    /// Telegram moved the route's group to a supergroup: remember the new chat (in the
    /// database, so it survives restarts) and move the route's pending requests there.
    async fn move_route_chat(&self, record: &Confirmation, to: i64) -> Result<(), StorageError> {
        tracing::warn!(route = %record.route, from = record.chat_id, to,
            "the route's group became a supergroup; using the new chat id (update the config)");
        self.store
            .move_route_chat(&record.route, record.chat_id, to, now())
            .await?;
        self.moved_chats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(record.route.clone(), to);
        Ok(())
    }

    /// Wakes whoever waits on the question and the agents' event streams.
    fn changed(&self, id: &ConfirmationId) {
        self.waiters.notify(id);
        self.events.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Ticks whenever an agent event may have been written (`GET /v1/events` listens).
    pub fn subscribe_events(&self) -> watch::Receiver<u64> {
        self.events.subscribe()
    }

    /// Applies an outcome; wakes waiting agents when it is the one that counts.
    async fn decide(&self, id: &ConfirmationId, outcome: Outcome) -> Result<Decided, StorageError> {
        let decided = self.store.decide(id, &outcome.decide(now())).await?;
        if let Decided::Applied(r) = &decided {
            self.on_decided(r);
        }
        Ok(decided)
    }

    /// After a decision was stored: log it, wake waiting agents and the webhook outbox.
    fn on_decided(&self, r: &Confirmation) {
        tracing::info!(id = %r.id, agent = %r.agent, tool = %r.tool,
            status = r.status.as_str(), via = r.via.map(Via::as_str).unwrap_or(""),
            "question decided");
        self.metrics.request_decided(r);
        self.changed(&r.id);
        if r.callback_url.is_some() {
            self.webhook_wake.notify_one();
        }
    }

    /// What a message of `record` in `chat_id` shows besides the record.
    fn view(&self, record: &Confirmation, chat_id: i64) -> View {
        // Progress is only worth showing when more than one answer is awaited.
        let several = record
            .interaction
            .as_ref()
            .is_some_and(|i| i.consensus != ConsensusMode::FirstResponse);
        View {
            expected: if several {
                self.expected_answers(record)
            } else {
                1
            },
            selection: Vec::new(),
            group: chat_id < 0,
        }
    }

    /// Shows a decided request's outcome in every message of it, in the background, and
    /// records that it did, so a restart can finish what a crash interrupted.
    fn finish(self: &Arc<Self>, record: Confirmation) {
        let me = self.clone();
        self.tasks.spawn(async move {
            for (chat_id, message_id) in record.messages().collect::<Vec<_>>() {
                let Some(message_id) = message_id else {
                    continue;
                };
                let view = me.view(&record, chat_id);
                match me
                    .messenger
                    .update_message(&record, chat_id, message_id, &view)
                    .await
                {
                    Ok(()) => {
                        let marked = if chat_id == record.chat_id {
                            me.store.mark_outcome_shown(&record.id).await
                        } else {
                            me.store.mark_copy_shown(&record.id, chat_id).await
                        };
                        if let Err(e) = marked {
                            tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(id = %record.id, reason = %e.reason, "could not update the message")
                    }
                }
            }
        });
    }

    /// Shows a pending question's progress (answers so far, a poll's tally) in every
    /// message of it, in the background.
    fn refresh(self: &Arc<Self>, record: Confirmation) {
        let me = self.clone();
        self.tasks.spawn(async move {
            // Edits run in the background: if the question ended meanwhile, showing
            // progress now could put back the buttons the outcome edit removed.
            let record = match me.store.get(&record.id).await {
                Ok(Some(now)) if !now.is_terminal() => now,
                _ => return,
            };
            for (chat_id, message_id) in record.messages().collect::<Vec<_>>() {
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

    /// The scheduler's callback: times the request out if it is still pending, applying
    /// the interaction's `timeout_action`.
    async fn expire(self: &Arc<Self>, id: &ConfirmationId) {
        let record = match self.store.get(id).await {
            Ok(Some(r)) if !r.is_terminal() => r,
            Ok(_) => return,
            Err(e) => {
                // Try again shortly rather than leave the request pending forever.
                tracing::error!(id = %id, error = %e, "could not read a due request; retrying");
                self.deadlines
                    .schedule(id.clone(), Instant::now() + Duration::from_secs(1));
                return;
            }
        };
        let after = (record.expires_at - record.created_at)
            .try_into()
            .unwrap_or(Duration::ZERO);
        let outcome = match record.interaction.as_deref().map(|i| i.timeout_action) {
            None | Some(TimeoutAction::Cancel) => Outcome::TimedOut { after },
            Some(TimeoutAction::Default) => Outcome::DefaultOnTimeout {
                value: record
                    .interaction
                    .as_ref()
                    .map(|i| i.default_response.clone())
                    .unwrap_or(Value::Null),
                after,
            },
            Some(action) => Outcome::TimedOutWithAction { after, action },
        };
        match self.decide(id, outcome).await {
            Ok(Decided::Applied(r)) => self.finish(r),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(id = %id, error = %e, "could not store a timeout; retrying");
                self.deadlines
                    .schedule(id.clone(), Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// The agent's own confirmation, or `NotFound` (also for another agent's, and for an
    /// interaction, which the agent knows by its `interaction_id`).
    pub async fn get(
        &self,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        match self.owned(agent, id).await? {
            r if r.interaction.is_none() => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's own question of any kind, by record id (its audit trail is read so).
    pub async fn owned(
        &self,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        match self.store.get(id).await? {
            Some(r) if r.agent == agent.name => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
    }

    /// The agent's interaction with its own `interaction_id`.
    pub async fn get_interaction(
        &self,
        agent: &Agent,
        interaction_id: &str,
    ) -> Result<Confirmation, ServiceError> {
        self.store
            .find_interaction(&agent.name, interaction_id)
            .await?
            .ok_or(ServiceError::NotFound)
    }

    /// Waits until the request is terminal or `max_wait` passes, then returns it as it is.
    /// `stop` (shutdown) ends the wait with [`ServiceError::ShuttingDown`], never with a
    /// made-up outcome.
    pub async fn wait(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
    ) -> Result<Confirmation, ServiceError> {
        self.wait_until(agent, id, max_wait, stop, |r| r.is_terminal())
            .await
    }

    /// Waits for the next change of an interaction (delivered, an answer, its end), at
    /// most `max_wait`, and returns it as it is then.
    pub async fn wait_for_change(
        self: &Arc<Self>,
        agent: &Agent,
        interaction_id: &str,
        max_wait: Duration,
        stop: &CancellationToken,
    ) -> Result<Confirmation, ServiceError> {
        let first = self.get_interaction(agent, interaction_id).await?;
        let seen = (first.public_status(), first.answers.len());
        self.wait_until(agent, &first.id, Some(max_wait), stop, move |r| {
            r.is_terminal() || (r.public_status(), r.answers.len()) != seen
        })
        .await
    }

    async fn wait_until(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
        max_wait: Option<Duration>,
        stop: &CancellationToken,
        done: impl Fn(&Confirmation) -> bool,
    ) -> Result<Confirmation, ServiceError> {
        let give_up = max_wait.map(|d| Instant::now() + d);
        loop {
            // Subscribe before reading, so a change landing in between is not missed.
            let mut changed = self.waiters.subscribe(id);
            let record = self.owned(agent, id).await?;
            if done(&record) || give_up.is_some_and(|g| Instant::now() >= g) {
                return Ok(record);
            }
            let overdue = instant_at(record.expires_at, now()) + WAITER_GRACE;
            let wake = give_up.map_or(overdue, |g| g.min(overdue));
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep_until(wake) => {
                    if Instant::now() >= overdue {
                        self.expire(id).await;
                    }
                }
                _ = stop.cancelled() => return Err(ServiceError::ShuttingDown),
            }
        }
    }

    /// The agent takes its confirmation back.
    pub async fn withdraw(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        self.get(agent, id).await?;
        self.withdraw_owned(id).await
    }

    async fn withdraw_owned(
        self: &Arc<Self>,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        match self.decide(id, Outcome::Withdrawn).await? {
            Decided::Applied(r) => {
                self.finish(r.clone());
                Ok(r)
            }
            Decided::AlreadyTerminal(r) => Err(ServiceError::AlreadyDecided(Box::new(r))),
            Decided::NotFound => Err(ServiceError::NotFound),
        }
    }

    /// Where a question or notification goes: the route given, else the person named as
    /// recipient (in their private chat), else the agent's default route.
    fn destination(
        &self,
        agent: &Agent,
        route: Option<&str>,
        recipient: Option<&str>,
    ) -> Result<Destination, ServiceError> {
        let route_name = match (route, recipient) {
            (Some(r), _) => r.to_owned(),
            (None, Some(person)) => {
                return match self.config.person(person) {
                    Some(user_id) => Ok(Destination::Person {
                        name: person.to_owned(),
                        user_id,
                    }),
                    None => Err(ServiceError::UnknownRecipient(person.to_owned())),
                };
            }
            (None, None) => agent.default_route.clone(),
        };
        match self.config.route(&route_name) {
            Some(r) if agent.routes.contains(&route_name) => Ok(Destination::Route(r.clone())),
            _ => Err(ServiceError::RouteNotAllowed(route_name)),
        }
    }

    /// Asks an interaction. The same `interaction_id` again (AI-Parrot sends one per
    /// recipient) lands on the same record, adding a private-chat copy for a new person.
    /// Returns the record and whether it is new.
    pub async fn create_interaction(
        self: &Arc<Self>,
        agent: &Agent,
        new: NewInteraction,
    ) -> Result<(Confirmation, bool), ServiceError> {
        let dest = self.destination(agent, new.route.as_deref(), new.recipient.as_deref())?;
        if let Some(existing) = self
            .store
            .find_interaction(&agent.name, &new.interaction.interaction_id)
            .await?
        {
            return self.add_recipient(existing, &new, dest).await;
        }
        let i = &new.interaction;
        if let Destination::Route(route) = &dest
            && !i.target_humans.is_empty()
            && !route.approvers.iter().any(|uid| self.is_target(i, *uid))
        {
            return Err(ServiceError::NobodyMayAnswer(format!(
                "none of target_humans is an approver of route '{}' (names map to Telegram ids through [people])",
                route.name
            )));
        }
        if self.store.count_pending(&agent.name).await? >= u64::from(agent.max_pending) {
            return Err(ServiceError::TooManyPending(agent.max_pending));
        }
        let (route_name, chat_id) = match &dest {
            Destination::Route(r) => (r.name.clone(), self.chat_of(&r.name, r.chat_id)),
            Destination::Person { name, user_id } => {
                (format!("@{name}"), i64::try_from(*user_id).unwrap_or(0))
            }
        };
        let now = now();
        let max_window = match &dest {
            Destination::Route(r) => r.max_window_seconds,
            Destination::Person { .. } => crate::config::DEFAULT_MAX_WINDOW_SECONDS,
        };
        let (tool, owner_id, params, params_json, asked_window) = match &new.call {
            Some(c) => (
                c.tool.clone(),
                c.owner_id.clone(),
                c.params.clone(),
                c.params_json.clone(),
                c.window_seconds,
            ),
            None => (
                ToolName::parse(INTERACTION_TOOL).map_err(|_| ServiceError::NotFound)?,
                OwnerId::anonymous(),
                PyDict::new(),
                "{}".to_owned(),
                0,
            ),
        };
        let window_seconds = match &new.call {
            Some(_) => asked_window.min(max_window),
            None if i.kind == InteractionType::Approval => new.agent_window_seconds,
            None => 0,
        };
        let record = Confirmation {
            id: ConfirmationId::generate(),
            agent: agent.name.clone(),
            route: route_name,
            chat_id,
            tool,
            owner_id,
            args_hash: ArgsHash::of(&params),
            params_json,
            briefing: i.question.clone(),
            context: i.context.clone(),
            allow_edit: i.kind == InteractionType::Form,
            window_seconds,
            window_requested_seconds: (window_seconds < asked_window).then_some(asked_window),
            approved_once: false,
            has_call: new.call.is_some(),
            idempotency_key: None,
            callback_token: CallbackToken::generate(),
            callback_url: new.callback_url.clone(),
            message_id: None,
            status: Status::Pending,
            via: None,
            reason: "waiting for an answer".to_owned(),
            decided_by: None,
            created_at: now,
            expires_at: now + i.timeout,
            decided_at: None,
            interaction: Some(Arc::new(i.clone())),
            result: None,
            timeout_action: None,
            answers: Vec::new(),
            copies: Vec::new(),
        };
        let stored = match self.store.insert(&record, now).await? {
            Inserted::New(r) => r,
            Inserted::Existing(e) => return self.add_recipient(e, &new, dest).await,
        };
        tracing::info!(id = %stored.id, agent = %stored.agent, kind = i.kind.as_str(),
            route = %stored.route, "interaction requested");
        self.metrics.request_created(&stored);
        self.changed(&stored.id);
        self.deadlines
            .schedule(stored.id.clone(), instant_at(stored.expires_at, now));
        let me = self.clone();
        let to_deliver = stored.clone();
        self.tasks
            .spawn(async move { me.deliver(to_deliver).await });
        Ok((stored, true))
    }

    /// A repeat of an interaction already asked: the same question, perhaps for another
    /// person, who then gets their own copy in a private chat.
    async fn add_recipient(
        self: &Arc<Self>,
        existing: Confirmation,
        new: &NewInteraction,
        dest: Destination,
    ) -> Result<(Confirmation, bool), ServiceError> {
        let same = existing.interaction.as_deref().is_some_and(|i| {
            i.kind == new.interaction.kind && i.question == new.interaction.question
        });
        if !same {
            return Err(ServiceError::InteractionMismatch(
                new.interaction.interaction_id.clone(),
            ));
        }
        if let Destination::Person { name, user_id } = dest
            && !existing.is_terminal()
        {
            let chat_id = i64::try_from(user_id).unwrap_or(0);
            if self
                .store
                .add_copy(&existing.id, &name, chat_id, now())
                .await?
            {
                let me = self.clone();
                let record = existing.clone();
                self.tasks
                    .spawn(async move { me.deliver_copy(record, chat_id).await });
            }
        }
        let record = self.store.get(&existing.id).await?.unwrap_or(existing);
        Ok((record, false))
    }

    /// The agent takes its interaction back.
    pub async fn withdraw_interaction(
        self: &Arc<Self>,
        agent: &Agent,
        interaction_id: &str,
    ) -> Result<Confirmation, ServiceError> {
        let record = self.get_interaction(agent, interaction_id).await?;
        self.withdraw_owned(&record.id).await
    }

    /// Sends a one-way message (AI-Parrot's `send_notification`) to a route or a person.
    pub async fn notify(
        &self,
        agent: &Agent,
        route: Option<&str>,
        recipient: Option<&str>,
        message: &str,
    ) -> Result<(i64, i32), ServiceError> {
        let chat_id = match self.destination(agent, route, recipient)? {
            Destination::Route(r) => self.chat_of(&r.name, r.chat_id),
            Destination::Person { user_id, .. } => i64::try_from(user_id).unwrap_or(0),
        };
        let message_id = self
            .messenger
            .send_notification(chat_id, &agent.name, message)
            .await
            .map_err(|e| ServiceError::Undeliverable(e.reason))?;
        tracing::info!(agent = %agent.name, chat_id, "notification sent");
        Ok((chat_id, message_id))
    }

    /// Whether the Telegram user is one of the interaction's `target_humans` (by name
    /// through `[people]`, or by numeric id); everyone is when it names none.
    fn is_target(&self, i: &Interaction, user_id: u64) -> bool {
        i.target_humans.is_empty()
            || i.target_humans
                .iter()
                .any(|t| self.config.person(t) == Some(user_id) || *t == user_id.to_string())
    }

    /// How many answers the question waits for: its target humans, else the route's
    /// approvers, else the people it was sent to privately.
    fn expected_answers(&self, record: &Confirmation) -> usize {
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
    fn respondent(&self, record: &Confirmation, user_id: u64) -> String {
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

    /// Why `from` may not answer `record` in `chat_id`, if they may not.
    fn may_not_answer(
        &self,
        record: &Confirmation,
        chat_id: i64,
        from: &Operator,
        from_is_bot: bool,
    ) -> Option<(&'static str, &'static str)> {
        const NOT_ALLOWED: &str = "You are not allowed to decide this request";
        if from_is_bot {
            return Some((NOT_ALLOWED, "a bot cannot answer"));
        }
        let allowed = match self.config.route(&record.route) {
            Some(route) if chat_id == record.chat_id => route.may_decide(from.id),
            // A private chat the question was sent to: only its person answers there.
            _ => {
                i64::try_from(from.id).ok() == Some(chat_id)
                    && record.messages().any(|(chat, _)| chat == chat_id)
            }
        };
        if !allowed {
            return Some((NOT_ALLOWED, "not an approver of the route"));
        }
        if let Some(i) = &record.interaction
            && !self.is_target(i, from.id)
        {
            return Some((
                "This question is for other people.",
                "not one of the interaction's target_humans",
            ));
        }
        // Checked on every tap, including Cancel: an owner may not decide their own
        // request either way when the route forbids it.
        if record.interaction.is_none()
            && self
                .config
                .route(&record.route)
                .is_some_and(|r| r.forbid_self_approval)
            && self.config.owner_telegram_id(record.owner_id.as_str()) == Some(from.id)
        {
            return Some((
                "You cannot decide a request made on your own behalf.",
                "self-approval is forbidden on this route",
            ));
        }
        None
    }

    /// An operator tapped a button. Every path answers the tap, so the operator's client
    /// never keeps spinning.
    pub async fn handle_tap(self: &Arc<Self>, tap: Tap) {
        let (text, alert, after) = match self.judge_tap(&tap).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "could not process a tap");
                (
                    "Something went wrong; nothing was decided. Please try again.".to_owned(),
                    true,
                    After::Nothing,
                )
            }
        };
        if let Err(e) = self.messenger.answer_tap(&tap.query_id, &text, alert).await {
            tracing::warn!(reason = %e.reason, "could not answer a tap");
        }
        self.then(after);
    }

    fn then(self: &Arc<Self>, after: After) {
        match after {
            After::Nothing => {}
            After::Finish(r) => self.finish(r),
            After::Refresh(r) => self.refresh(r),
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
    async fn refuse(
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

    async fn judge_tap(self: &Arc<Self>, tap: &Tap) -> Result<(String, bool, After), StorageError> {
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
        let Some((action, token)) = crate::telegram::render::parse_callback_data(&tap.data) else {
            return refuse(None, "This button is not valid.", "malformed callback data").await;
        };
        let Some(record) = self.store.find_by_token(&token).await? else {
            return refuse(None, "This request is unknown.", "unknown callback token").await;
        };
        // The token is bound to the chats and messages it was sent with; a token
        // replayed under another message (or in another chat) is refused. While delivery
        // is in flight the message id is not stored yet; the chat must still match.
        let bound = record.messages().any(|(chat, message)| {
            tap.chat_id == Some(chat) && message.is_none_or(|m| tap.message_id == Some(m))
        });
        if !bound {
            return refuse(
                Some(record.id.clone()),
                "This button does not belong to this message.",
                "callback data from another chat or message",
            )
            .await;
        }
        let chat_id = tap.chat_id.unwrap_or(0);
        if let Some((text, why)) = self.may_not_answer(&record, chat_id, &tap.from, tap.from_is_bot)
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
                        message_id: tap.message_id.unwrap_or(0),
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
        self.answer(record, &tap.from, value, verdict).await
    }

    /// Someone replied to one of the bot's messages: a free-text answer when it is an
    /// open free-text question they may answer; anything else is ignored (groups chat).
    pub async fn handle_reply(self: &Arc<Self>, reply: Reply) {
        match self.judge_reply(&reply).await {
            Ok(after) => self.then(after),
            Err(e) => tracing::error!(error = %e, "could not process a reply"),
        }
    }

    async fn judge_reply(self: &Arc<Self>, reply: &Reply) -> Result<After, StorageError> {
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
        if let Some((text, why)) =
            self.may_not_answer(&record, reply.chat_id, &reply.from, reply.from_is_bot)
        {
            self.refuse(
                &reply.from,
                Some(reply.chat_id),
                Some(reply.reply_to),
                Some(&record.id),
                text,
                why,
            )
            .await?;
            return Ok(After::Nothing);
        }
        let text: String = reply
            .text
            .chars()
            .take(interaction::MAX_FREE_TEXT_CHARS)
            .collect();
        let (_, _, after) = self.answer(record, &reply.from, json!(text), None).await?;
        Ok(after)
    }

    /// Stores one person's answer and settles the question when the answers so far do.
    /// `verdict` is the button an approve/cancel question was answered with.
    async fn answer(
        self: &Arc<Self>,
        record: Confirmation,
        from: &Operator,
        value: Value,
        verdict: Option<Verdict>,
    ) -> Result<(String, bool, After), StorageError> {
        // "Once" only means something where a window was offered.
        let once =
            matches!(verdict, Some(Verdict::Approve { once: true })) && record.window_seconds > 0;
        let answer = Answer {
            respondent: self.respondent(&record, from.id),
            by: Some(from.clone()),
            value,
            is_default: false,
            once,
            at: now(),
        };
        // A confirmation or a first-response question is settled by this very answer:
        // stored together with its outcome, atomically.
        let settles = match &record.interaction {
            Some(i) if i.consensus != ConsensusMode::FirstResponse => None,
            Some(_) => Some(Outcome::Completed {
                value: answer.value.clone(),
                by: Some(from.clone()),
                reason: format!("answered by {from}"),
            }),
            // A confirmation is decided by its button alone; anything else (which no
            // button of a confirmation produces) fails closed.
            None => Some(match verdict {
                Some(Verdict::Approve { .. }) => Outcome::Approved {
                    by: from.clone(),
                    once,
                },
                Some(Verdict::Deny) | None => Outcome::Cancelled(from.clone()),
            }),
        };
        let decision = settles.map(|o| o.decide(answer.at));
        let record = match self
            .store
            .add_answer(&record.id, &answer, decision.as_ref())
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
        self.changed(&record.id);
        let Some(outcome) = self.settle(&record) else {
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
    fn settle(&self, record: &Confirmation) -> Option<Outcome> {
        let i = record.interaction.as_ref()?;
        let values: Vec<Value> = record.answers.iter().map(|a| a.value.clone()).collect();
        let quorum = i
            .quorum
            .or_else(|| self.config.route(&record.route).and_then(|r| r.quorum));
        let expected = self.expected_answers(record);
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
            }),
            Consensus::NoAgreement(why) => Some(Outcome::Completed {
                // AI-Parrot's own shape for a conflict.
                value: json!({"conflict": true, "responses": values}),
                by: None,
                reason: format!("no agreement: {why}"),
            }),
        }
    }
}

/// What to do with the chat after a tap was answered.
enum After {
    Nothing,
    /// Show the outcome in every message.
    Finish(Confirmation),
    /// Show progress in every message.
    Refresh(Confirmation),
    /// Show one person's multi-choice selection on the message they tapped.
    ShowSelection {
        record: Confirmation,
        chat_id: i64,
        message_id: i32,
        selection: Vec<String>,
    },
}

/// Which of an approve/cancel question's buttons was tapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Approve; `once`: without the window the question offered.
    Approve {
        once: bool,
    },
    Deny,
}

fn option_key(record: &Confirmation, n: u8) -> Option<String> {
    record
        .interaction
        .as_ref()?
        .options
        .get(usize::from(n))
        .map(|o| o.key.clone())
}

/// `selection` in the order the options are listed (as AI-Parrot lists them back).
fn in_option_order(record: &Confirmation, selection: Vec<String>) -> Vec<String> {
    let Some(i) = &record.interaction else {
        return selection;
    };
    i.options
        .iter()
        .filter(|o| selection.contains(&o.key))
        .map(|o| o.key.clone())
        .collect()
}

fn labels_of(record: &Confirmation, keys: &[String]) -> String {
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
fn tap_ack(r: &Confirmation) -> String {
    match (r.interaction.is_some(), r.status) {
        (false, Status::Confirmed) => "✅ Approved".to_owned(),
        (false, _) => "❌ Cancelled".to_owned(),
        (true, _) => "✅ Answer recorded".to_owned(),
    }
}

/// Telegram shows at most 200 characters in a tap's answer; names and labels in it are
/// shown with their invisible characters as escapes, as everywhere operators read.
fn cut_for_toast(text: &str) -> String {
    let text = crate::domain::text::visible(text, crate::domain::text::Layout::Line);
    if text.chars().count() <= 200 {
        text
    } else {
        text.chars().take(199).collect::<String>() + "…"
    }
}

/// An idempotent repeat must be the same call; anything else is the agent's mistake.
fn same_request(
    existing: Confirmation,
    new: &NewConfirmation,
    args_hash: &ArgsHash,
) -> Result<Confirmation, ServiceError> {
    if existing.tool == new.tool
        && existing.owner_id == new.owner_id
        && existing.args_hash == *args_hash
    {
        Ok(existing)
    } else {
        Err(ServiceError::IdempotencyMismatch)
    }
}

/// The text a late tap gets: the stored outcome, within Telegram's 200-character limit.
fn already_decided(r: &Confirmation) -> String {
    cut_for_toast(&format!("Already decided: {}", r.reason))
}
