//! Persistence behind one narrow trait.
//!
//! The service talks to [`Store`] only; SQL lives in the backend modules. SQLite is the
//! backend today (one file, WAL mode). The trait is small and speaks domain types, so a
//! PostgreSQL backend for several replicas can sit beside it: the only database features
//! it relies on are transactions, a conditional `UPDATE` and a unique index.

mod sqlite;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::domain::audit::{AuditEvent, Head, NewEvent, StoredRow, StoredStatus};
use crate::domain::confirmation::{Confirmation, Decision, Operator, Window, WindowKey};
use crate::domain::ids::{CallbackToken, ConfirmationId, DeliveryId, IdempotencyKey};
use crate::domain::interaction::Answer;

pub use sqlite::SqliteStore;

/// How long an idempotency key keeps pointing at its request.
pub const IDEMPOTENCY_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("stored row {id} is corrupt: {what}")]
    Corrupt { id: String, what: String },
    #[error("cannot prepare the database location: {0}")]
    Io(#[from] std::io::Error),
    /// A group commit (several window hits in one transaction) failed as a whole.
    #[error("database error in a batched write: {0}")]
    Batch(String),
}

/// Result of inserting a new request.
#[derive(Debug)]
pub enum Inserted {
    /// The request is new and stored.
    New(Confirmation),
    /// The agent already made a request with this idempotency key (within 24 h); nothing
    /// was written and this is that request.
    Existing(Confirmation),
}

/// Result of applying a decision.
#[derive(Debug)]
pub enum Decided {
    /// This decision is the request's outcome.
    Applied(Confirmation),
    /// Another decision won; this is the stored outcome.
    AlreadyTerminal(Confirmation),
    NotFound,
}

/// Result of recording an answer.
#[derive(Debug)]
pub enum Answered {
    /// Stored; this is the record with every answer so far (terminal when the answer
    /// settled it).
    Added(Confirmation),
    /// This person already answered; nothing was written.
    AlreadyAnswered(Confirmation),
    /// The question already ended; nothing was written.
    Closed(Confirmation),
    NotFound,
}

/// One entry of an agent's event stream (`GET /v1/events`).
#[derive(Debug, Clone)]
pub struct AgentEvent {
    pub seq: i64,
    /// `response` or `status`.
    pub kind: String,
    pub data: String,
}

/// A pending request as restart recovery needs it.
#[derive(Debug, Clone)]
pub struct PendingEntry {
    pub id: ConfirmationId,
    pub expires_at: OffsetDateTime,
    /// False when the process stopped between storing the request and recording its
    /// Telegram message: the question may never have reached the chat.
    pub delivered: bool,
    /// False until the first message's file with the full parameters was sent (or was
    /// found not needed): a crash may have come in between.
    pub attached: bool,
    /// Its route (whose reminders and escalation decide when it is next looked at).
    pub route: String,
}

/// A live confirmation window with where the request that opened it was asked: windows
/// belong to the route of their opening request (operator commands list and revoke them
/// per route).
#[derive(Debug, Clone, PartialEq)]
pub struct LiveWindow {
    pub window: Window,
    pub route: String,
    /// The chat of the opening request.
    pub chat_id: i64,
}

/// Stored state the metrics report, read at scrape time.
#[derive(Debug, Clone, Default)]
pub struct Gauges {
    /// Pending requests per agent (agents with none are absent).
    pub pending_by_agent: Vec<(String, u64)>,
    /// When the oldest pending request was created, if any is pending.
    pub oldest_pending_since: Option<OffsetDateTime>,
    /// Webhooks not yet delivered nor given up.
    pub webhook_backlog: u64,
    /// Deliveries dropped because their agent's backlog was full, per agent (agents with
    /// none are absent). Dropped rows are kept, so this only grows.
    pub webhook_dropped_by_agent: Vec<(String, u64)>,
}

/// A webhook waiting in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxEntry {
    pub delivery_id: DeliveryId,
    pub confirmation_id: ConfirmationId,
    pub agent: String,
    pub url: String,
    /// When the request ended; the give-up age counts from here.
    pub created_at: OffsetDateTime,
    /// Attempts made so far.
    pub attempts: u32,
}

/// What became of one webhook attempt.
#[derive(Debug, Clone)]
pub enum WebhookAttempt {
    Delivered,
    Retry {
        next_at: OffsetDateTime,
        error: String,
    },
    GiveUp {
        error: String,
    },
}

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies pending migrations.
    async fn migrate(&self) -> Result<(), StorageError>;

    /// Answers when the database does.
    async fn ping(&self) -> Result<(), StorageError>;

    /// Stores a new request, unless the same agent already used its idempotency key
    /// within [`IDEMPOTENCY_TTL`] of `now`. The record may already be terminal (a window
    /// hit is stored confirmed at once); then its webhook is queued in the same transaction.
    async fn insert(
        &self,
        record: &Confirmation,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError>;

    async fn get(&self, id: &ConfirmationId) -> Result<Option<Confirmation>, StorageError>;

    async fn find_by_token(
        &self,
        token: &CallbackToken,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// The agent's live request under `key`, if any.
    async fn find_by_idempotency_key(
        &self,
        agent: &str,
        key: &IdempotencyKey,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Records the Telegram message that carries the request's buttons (audited).
    async fn set_message_id(
        &self,
        id: &ConfirmationId,
        message_id: i32,
    ) -> Result<(), StorageError>;

    /// Records that the first message's file was sent or was not needed.
    async fn mark_attached(&self, id: &ConfirmationId) -> Result<(), StorageError>;

    /// Moves a pending request to its outcome with one conditional update. In the same
    /// transaction it opens the confirmation window (when an operator confirmed a request
    /// with `window_seconds > 0`) and queues the webhook (when it has a `callback_url`).
    async fn decide(
        &self,
        id: &ConfirmationId,
        decision: &Decision,
    ) -> Result<Decided, StorageError>;

    /// The live window for `key` at `now`, if any.
    async fn live_window(
        &self,
        key: &WindowKey,
        now: OffsetDateTime,
    ) -> Result<Option<Window>, StorageError>;

    /// Records that the request's (first) message shows its outcome.
    async fn mark_outcome_shown(&self, id: &ConfirmationId) -> Result<(), StorageError>;

    /// Decided requests whose message does not show the outcome yet (restart recovery).
    async fn unshown_outcomes(&self) -> Result<Vec<Confirmation>, StorageError>;

    /// How many requests of `agent` are pending.
    async fn count_pending(&self, agent: &str) -> Result<u64, StorageError>;

    /// Every pending request's id, deadline and whether its message was recorded
    /// (restart recovery).
    async fn pending(&self) -> Result<Vec<PendingEntry>, StorageError>;

    /// Deletes windows that expired before `now`; returns how many.
    async fn purge_expired_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError>;

    /// Outbox entries due at `now`, oldest first.
    async fn due_webhooks(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError>;

    /// When the next pending webhook is due, if any.
    async fn next_webhook_due(&self) -> Result<Option<OffsetDateTime>, StorageError>;

    /// Records the result of an attempt (and, when it is final, its audit event).
    async fn webhook_attempted(
        &self,
        entry: &OutboxEntry,
        result: WebhookAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// Outbox entries due at `now`, at most `per_agent` of each agent (its oldest due),
    /// in turns: every agent's first, then every agent's second, and so on. An agent with
    /// a long backlog thus never hides another agent's due delivery from the worker.
    async fn due_webhooks_by_agent(
        &self,
        now: OffsetDateTime,
        per_agent: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError>;

    /// When the next pending webhook not yet due at `after` is due, if any. (Rows due
    /// already are the worker's to start, or in flight.)
    async fn next_webhook_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError>;

    /// Appends an event to the audit trail. State changes append theirs inside their own
    /// transaction; this is for events that change nothing else (a refused tap).
    async fn record_event(&self, event: NewEvent) -> Result<(), StorageError>;

    /// One request's events, oldest first.
    async fn events_for(&self, id: &ConfirmationId) -> Result<Vec<AuditEvent>, StorageError>;

    /// The whole trail (from `since`, if given), in sequence order, as stored.
    async fn audit_rows(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<StoredRow>, StorageError>;

    /// The whole trail (in sequence order) and every request's stored status (pending
    /// ones too, so a decided request set back to pending shows), read in one
    /// transaction: while the service keeps deciding, the two still agree, so
    /// `audit verify` reports no drift that is only a race.
    async fn audit_snapshot(&self) -> Result<(Vec<StoredRow>, Vec<StoredStatus>), StorageError>;

    /// The newest event's sequence number and hash (the genesis head for an empty
    /// trail), for the log.
    async fn audit_head(&self) -> Result<Head, StorageError>;

    /// Routes whose chat moved (a group upgraded to a supergroup), with the new chat.
    async fn route_chats(&self) -> Result<Vec<(String, i64)>, StorageError>;

    /// Records that `route` now lives in `to_chat`, and moves its pending requests there.
    async fn move_route_chat(
        &self,
        route: &str,
        from_chat: i64,
        to_chat: i64,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// The agent's interaction with its own `interaction_id`.
    async fn find_interaction(
        &self,
        agent: &str,
        interaction_id: &str,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// The question posted as `message_id` in `chat_id` (its first message or a copy).
    async fn find_by_message(
        &self,
        chat_id: i64,
        message_id: i32,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Adds a further destination for a pending question; false when it already had
    /// that chat (or is no longer pending).
    async fn add_copy(
        &self,
        id: &ConfirmationId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError>;

    /// Records the message of a copy (audited).
    async fn set_copy_message_id(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<(), StorageError>;

    /// Records that a copy's message shows the outcome.
    async fn mark_copy_shown(&self, id: &ConfirmationId, chat_id: i64) -> Result<(), StorageError>;

    /// Records (audited) a message of the question learned from a tap on it, unless it
    /// is known already; returns the record as it is then (`None`: no such question).
    async fn add_stray(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Records that a learned message shows the outcome.
    async fn mark_stray_shown(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
    ) -> Result<(), StorageError>;

    /// Stores one person's answer to a pending question, with its audit and stream
    /// events, unless they already answered or the question ended. With `settles`, the
    /// answer decides the question in the same transaction (as [`Store::decide`]).
    async fn add_answer(
        &self,
        id: &ConfirmationId,
        answer: &Answer,
        settles: Option<&Decision>,
    ) -> Result<Answered, StorageError>;

    /// A person's multi-choice selection in progress.
    async fn selection(
        &self,
        id: &ConfirmationId,
        user_id: u64,
    ) -> Result<Vec<String>, StorageError>;

    async fn set_selection(
        &self,
        id: &ConfirmationId,
        user_id: u64,
        keys: &[String],
    ) -> Result<(), StorageError>;

    /// The agent's stream events after `after`, oldest first.
    async fn agent_events(
        &self,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AgentEvent>, StorageError>;

    /// Deletes stream events written before `before`; returns how many.
    async fn purge_agent_events(&self, before: OffsetDateTime) -> Result<u64, StorageError>;

    /// The newest event number of the agent's stream (0 when it has none).
    async fn last_agent_event(&self, agent: &str) -> Result<i64, StorageError>;

    /// The pending questions posted in `chat_id` (as their first message), oldest first.
    async fn pending_in_chat(&self, chat_id: i64) -> Result<Vec<Confirmation>, StorageError>;

    /// The windows live at `now` that a request of `route` opened, soonest expiry first.
    async fn live_windows(
        &self,
        route: &str,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError>;

    /// The window live at `now` that `opened_by` opened, if any. A request opens at most
    /// one window, so its id names the window.
    async fn live_window_opened_by(
        &self,
        opened_by: &ConfirmationId,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError>;

    /// Closes the window `opened_by` opened, if it is still live at `now`, and records in
    /// the same transaction that `by` revoked it (in `chat_id`). Returns the window
    /// closed; `None` when there was none live (nothing is written then). The one way a
    /// window ends early, so a cache of windows is invalidated here.
    async fn revoke_window(
        &self,
        opened_by: &ConfirmationId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError>;

    /// Writes a consistent copy of the whole database to `file` (which must not exist)
    /// while the service keeps running.
    async fn backup_to(&self, file: &std::path::Path) -> Result<(), StorageError>;

    /// Pending requests and the webhook backlog, for the metrics.
    async fn gauges(&self) -> Result<Gauges, StorageError>;

    /// Records (audited, streamed) that `by` tapped "Deny with reason" in `chat_id`;
    /// returns the record, or `None` when the question is no longer pending.
    async fn request_reason(
        &self,
        id: &ConfirmationId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Records the message that asks `user_id` for their reason.
    async fn set_reason_prompt(
        &self,
        id: &ConfirmationId,
        user_id: u64,
        prompt_message_id: i32,
    ) -> Result<(), StorageError>;

    /// The question whose reason `user_id` was asked for in `chat_id`, when
    /// `reply_to` is the prompt or a message of that question there, or when the
    /// replied-to message (the bot's own) names it (`named`).
    async fn reason_request_for(
        &self,
        chat_id: i64,
        reply_to: i32,
        named: Option<&ConfirmationId>,
        user_id: u64,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Moves a pending question's deadline from `from` to `to` (conditional on `from`,
    /// so concurrent taps move it once), audited and streamed; `None` when nothing moved.
    async fn extend(
        &self,
        id: &ConfirmationId,
        from: OffsetDateTime,
        to: OffsetDateTime,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Claims the reminders up to `passed` of a pending question that has sent `sent`
    /// (audited, streamed); `None` when another claim came first or it ended.
    async fn claim_reminders(
        &self,
        id: &ConfirmationId,
        sent: u32,
        passed: u32,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Claims a pending question's escalation and adds its copy for `chat_id` (audited,
    /// streamed); `None` when it was escalated already or ended.
    async fn escalate(
        &self,
        id: &ConfirmationId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

    /// Closes the connections cleanly (checkpoints the WAL).
    async fn close(&self);
}
