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

use crate::config::{Agent, Config};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit;
use crate::domain::briefing;
use crate::domain::confirmation::{Confirmation, Operator, Outcome, PENDING_REASON, Status, Via};
use crate::domain::ids::{CallbackToken, ConfirmationId, IdempotencyKey, OwnerId, ToolName};
use crate::domain::pyvalue::PyDict;
use crate::scheduler::Deadlines;
use crate::storage::{Decided, Inserted, StorageError, Store};

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
    /// Posts the question with its buttons; returns the message id.
    async fn send_question(&self, record: &Confirmation) -> Result<i32, DeliveryError>;
    /// Edits the question's message to show the outcome and removes the buttons.
    async fn show_outcome(&self, record: &Confirmation) -> Result<(), DeliveryError>;
    /// Answers a button tap with a toast (or an alert the operator must dismiss).
    async fn answer_tap(
        &self,
        query_id: &str,
        text: &str,
        alert: bool,
    ) -> Result<(), DeliveryError>;
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
    Approve,
    Cancel,
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
        }
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
        for entry in pending {
            if !entry.delivered && entry.expires_at > now {
                match self.store.get(&entry.id).await? {
                    Some(record) => {
                        tracing::info!(id = %record.id, "delivering a question cut short by a restart");
                        let me = self.clone();
                        self.tasks.spawn(async move { me.deliver(record).await });
                    }
                    None => continue,
                }
            }
            self.deadlines
                .schedule(entry.id, instant_at(entry.expires_at, now));
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
            window_seconds: new.window_seconds,
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
            if stored.callback_url.is_some() {
                self.webhook_wake.notify_one();
            }
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

    async fn deliver(self: Arc<Self>, mut record: Confirmation) {
        // A group can be upgraded to a supergroup (new chat id) at most once; allow one
        // more hop for good measure, then fail closed.
        let mut hops = 0;
        let result = loop {
            match self.messenger.send_question(&record).await {
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
                // A timeout or withdrawal may have won while the message was on its way:
                // then its buttons must not stay live.
                match self.store.get(&record.id).await {
                    Ok(Some(now)) if now.is_terminal() => self.finish(now),
                    Ok(_) => {}
                    Err(e) => tracing::error!(id = %record.id, error = %e, "could not re-read"),
                }
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

    /// Applies an outcome; wakes waiting agents when it is the one that counts.
    async fn decide(&self, id: &ConfirmationId, outcome: Outcome) -> Result<Decided, StorageError> {
        let decided = self.store.decide(id, &outcome.decide(now())).await?;
        if let Decided::Applied(r) = &decided {
            tracing::info!(id = %r.id, agent = %r.agent, tool = %r.tool,
                status = r.status.as_str(), via = r.via.map(Via::as_str).unwrap_or(""),
                "confirmation decided");
            self.waiters.notify(id);
            if r.callback_url.is_some() {
                self.webhook_wake.notify_one();
            }
        }
        Ok(decided)
    }

    /// Shows a decided request's outcome in its Telegram message, in the background, and
    /// records that it did, so a restart can finish what a crash interrupted.
    fn finish(self: &Arc<Self>, record: Confirmation) {
        if record.message_id.is_none() {
            return;
        }
        let me = self.clone();
        self.tasks.spawn(async move {
            match me.messenger.show_outcome(&record).await {
                Ok(()) => {
                    if let Err(e) = me.store.mark_outcome_shown(&record.id).await {
                        tracing::warn!(id = %record.id, error = %e, "could not record the shown outcome");
                    }
                }
                Err(e) => {
                    tracing::warn!(id = %record.id, reason = %e.reason, "could not update the message")
                }
            }
        });
    }

    /// The scheduler's callback: times the request out if it is still pending.
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
        match self.decide(id, Outcome::TimedOut { after }).await {
            Ok(Decided::Applied(r)) => self.finish(r),
            Ok(_) => {}
            Err(e) => {
                tracing::error!(id = %id, error = %e, "could not store a timeout; retrying");
                self.deadlines
                    .schedule(id.clone(), Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// The agent's own request, or `NotFound` (also for another agent's).
    pub async fn get(
        &self,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        match self.store.get(id).await? {
            Some(r) if r.agent == agent.name => Ok(r),
            _ => Err(ServiceError::NotFound),
        }
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
        let give_up = max_wait.map(|d| Instant::now() + d);
        loop {
            // Subscribe before reading, so a decision landing in between is not missed.
            let mut changed = self.waiters.subscribe(id);
            let record = self.get(agent, id).await?;
            if record.is_terminal() || give_up.is_some_and(|g| Instant::now() >= g) {
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

    /// The agent takes its question back.
    pub async fn withdraw(
        self: &Arc<Self>,
        agent: &Agent,
        id: &ConfirmationId,
    ) -> Result<Confirmation, ServiceError> {
        self.get(agent, id).await?;
        match self.decide(id, Outcome::Withdrawn).await? {
            Decided::Applied(r) => {
                self.finish(r.clone());
                Ok(r)
            }
            Decided::AlreadyTerminal(r) => Err(ServiceError::AlreadyDecided(Box::new(r))),
            Decided::NotFound => Err(ServiceError::NotFound),
        }
    }

    /// An operator tapped a button. Every path answers the tap, so the operator's client
    /// never keeps spinning.
    pub async fn handle_tap(self: &Arc<Self>, tap: Tap) {
        let (text, alert, decided) = match self.judge_tap(&tap).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "could not process a tap");
                (
                    "Something went wrong; nothing was decided. Please try again.".to_owned(),
                    true,
                    None,
                )
            }
        };
        if let Err(e) = self.messenger.answer_tap(&tap.query_id, &text, alert).await {
            tracing::warn!(reason = %e.reason, "could not answer a tap");
        }
        if let Some(record) = decided {
            self.finish(record);
        }
    }

    /// Logs and audits a refused tap; the operator gets `text` as an alert.
    async fn refuse(
        &self,
        tap: &Tap,
        id: Option<&ConfirmationId>,
        text: &str,
        why: &'static str,
    ) -> Result<(String, bool, Option<Confirmation>), StorageError> {
        tracing::warn!(user_id = tap.from.id, chat_id = ?tap.chat_id, id = ?id.map(|i| i.as_str()), why, "tap refused");
        let event = audit::refused_tap(
            id.map(|i| i.as_str()),
            &tap.from,
            tap.chat_id,
            tap.message_id,
            why,
            now(),
        );
        self.store.record_event(event).await?;
        Ok((text.to_owned(), true, None))
    }

    async fn judge_tap(
        self: &Arc<Self>,
        tap: &Tap,
    ) -> Result<(String, bool, Option<Confirmation>), StorageError> {
        let Some((action, token)) = crate::telegram::render::parse_callback_data(&tap.data) else {
            return self
                .refuse(
                    tap,
                    None,
                    "This button is not valid.",
                    "malformed callback data",
                )
                .await;
        };
        let Some(record) = self.store.find_by_token(&token).await? else {
            return self
                .refuse(
                    tap,
                    None,
                    "This request is unknown.",
                    "unknown callback token",
                )
                .await;
        };
        // The token is bound to the chat and the message it was sent with; a token
        // replayed under another message (or in another chat) is refused. While delivery
        // is in flight the message id is not stored yet; the chat must still match.
        let same_message = match record.message_id {
            Some(m) => tap.message_id == Some(m),
            None => true,
        };
        if tap.chat_id != Some(record.chat_id) || !same_message {
            return self
                .refuse(
                    tap,
                    Some(&record.id),
                    "This button does not belong to this message.",
                    "callback data from another chat or message",
                )
                .await;
        }
        let route = self.config.route(&record.route);
        let allowed = !tap.from_is_bot && route.is_some_and(|r| r.may_decide(tap.from.id));
        if !allowed {
            return self
                .refuse(
                    tap,
                    Some(&record.id),
                    "You are not allowed to decide this request",
                    "not an approver of the route",
                )
                .await;
        }
        // Checked on every tap, including Cancel: an owner may not decide their own
        // request either way when the route forbids it.
        if route.is_some_and(|r| r.forbid_self_approval)
            && self.config.owner_telegram_id(record.owner_id.as_str()) == Some(tap.from.id)
        {
            return self
                .refuse(
                    tap,
                    Some(&record.id),
                    "You cannot decide a request made on your own behalf.",
                    "self-approval is forbidden on this route",
                )
                .await;
        }
        if record.is_terminal() {
            return Ok((already_decided(&record), false, None));
        }
        let outcome = match action {
            TapAction::Approve => Outcome::Approved(tap.from.clone()),
            TapAction::Cancel => Outcome::Cancelled(tap.from.clone()),
        };
        Ok(match self.decide(&record.id, outcome).await? {
            Decided::Applied(r) => {
                let text = match action {
                    TapAction::Approve => "✅ Approved",
                    TapAction::Cancel => "❌ Cancelled",
                };
                (text.to_owned(), false, Some(r))
            }
            Decided::AlreadyTerminal(r) => (already_decided(&r), false, None),
            Decided::NotFound => ("This request is unknown.".to_owned(), true, None),
        })
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
    let text = format!("Already decided: {}", r.reason);
    if text.chars().count() <= 200 {
        text
    } else {
        text.chars().take(199).collect::<String>() + "…"
    }
}
