//! Persistence behind one narrow trait.
//!
//! The service talks to [`Store`] only; SQL lives in the backend modules. Two backends
//! sit behind it, chosen by `database.url` ([`connect`]): SQLite (`sqlite://…`, one file
//! in WAL mode, the default) and PostgreSQL (`postgres://…`). The trait is small and
//! speaks domain types: the only database features it relies on are transactions, a
//! conditional `UPDATE` and a unique index. What the two backends share that is not SQL
//! (rows to domain values, the audit chain's hashing, the insert column lists) lives in
//! `rows`.

pub mod copy;
mod hits;
mod postgres;
mod rows;
mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;
use tokio::sync::mpsc;

use crate::domain::audit::{AuditEvent, Head, NewEvent, StoredRow, StoredStatus};
use crate::domain::authority::{Authority, Fingerprint};
use crate::domain::confirmation::{Confirmation, Decision, Operator, Window, WindowKey};
use crate::domain::ids::{CallbackToken, ConfirmationId, DeliveryId, IdempotencyKey};
use crate::domain::interaction::Answer;

pub use postgres::{PgStore, refuse_unknown_params};
pub use sqlite::SqliteStore;

/// A change committed by some process sharing the database ([`Store::follow_changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Something about this question changed (its status, answers, steps or events).
    Question {
        id: ConfirmationId,
        /// The change gave the question its outcome.
        ended: bool,
        /// This store committed it (this process): it knows already.
        ours: bool,
    },
    /// Something that concerns no one question (a route's chat moved).
    Other,
    /// The feed was cut and is back: changes in between may have been missed, so
    /// whoever waits must look again.
    Missed,
}

/// How long an idempotency key keeps pointing at its request.
pub const IDEMPOTENCY_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The webhook backlog bound a store applies until [`Store::set_webhook_backlog_bound`]
/// sets the configured one; also the default of `webhooks.max_backlog_per_agent`, which
/// the configuration reads from here (storage sits below the configuration and takes
/// plain values from it, never a setting).
pub const DEFAULT_WEBHOOK_BACKLOG_BOUND: u32 = 1000;

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
    /// `migrate-to-postgres` could not copy, or the copy does not match its source.
    #[error("copy to PostgreSQL: {0}")]
    Copy(String),
    /// A group commit (several window hits in one transaction) failed as a whole.
    #[error("database error in a batched write: {0}")]
    Batch(String),
    /// `database.url` names no backend this build has (only its scheme is shown: the
    /// URL may hold a password).
    #[error(
        "database.url: unsupported scheme '{0}' (use sqlite://path/to/file.db or \
         postgres://user:password@host/database)"
    )]
    UnsupportedUrl(String),
    /// A PostgreSQL URL parameter the driver does not know (only its name is shown).
    #[error(
        "database.url: unknown parameter '{0}' (known: sslmode, sslrootcert, sslcert, \
         sslkey, statement-cache-capacity, host, hostaddr, port, dbname, user, password, \
         application_name, options)"
    )]
    UnsupportedParam(String),
    /// The operation has no meaning on this backend; the text says what to do instead.
    #[error("{0}")]
    Unsupported(&'static str),
    /// [`ConnectMode::Existing`] found no database at the URL (shown redacted), or one
    /// without hitl-telegram's tables; the text says which. Nothing was created.
    #[error("no hitl-telegram database at {url}: {why} (check database.url; nothing was created)")]
    NoDatabase { url: String, why: String },
}

impl StorageError {
    /// True when the database is out of reach for now rather than refusing this write: the
    /// connection failed or was cut, every pooled connection is busy, or the server is
    /// shutting down, starting or timed out a lock wait (SQLSTATE classes 08 and 57, and
    /// 55P03), or SQLite stayed busy past its timeout. Trying again later may succeed, so
    /// the API answers 503 instead of 500.
    pub fn is_unavailable(&self) -> bool {
        let StorageError::Database(e) = self else {
            return false;
        };
        match e {
            // A connection closed in the middle of its setup (a proxy or load balancer
            // in front of a server that is down accepts, then hangs up) reads as a
            // protocol error: out of reach too.
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let code = db.code();
                let code = code.as_deref().unwrap_or("");
                // PostgreSQL's SQLSTATEs; SQLite's SQLITE_BUSY (5) and SQLITE_LOCKED (6).
                code.starts_with("08")
                    || code.starts_with("57")
                    || code == "55P03"
                    || code == "5"
                    || code == "6"
            }
            _ => false,
        }
    }
}

/// The backend a `database.url` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sqlite:` (`sqlite://path/to/file.db`, `sqlite::memory:`).
    Sqlite,
    /// `postgres://` or `postgresql://`.
    Postgres,
}

impl Backend {
    /// The backend `url` selects, by its scheme alone (nothing is connected to).
    pub fn of_url(url: &str) -> Result<Backend, StorageError> {
        let scheme = url.split_once(':').map_or("", |(scheme, _)| scheme);
        match scheme.to_ascii_lowercase().as_str() {
            "sqlite" => Ok(Backend::Sqlite),
            "postgres" | "postgresql" if url[scheme.len()..].starts_with("://") => {
                Ok(Backend::Postgres)
            }
            _ => Err(StorageError::UnsupportedUrl(scheme.to_owned())),
        }
    }
}

/// Whether [`connect`] may create what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectMode {
    /// The service and `migrate`: SQLite creates the file (and its folder) when missing.
    /// PostgreSQL never creates the database itself: its tables come with [`Store::migrate`].
    Create,
    /// Tools that read what is there (`backup`, `audit`, the source of
    /// `migrate-to-postgres`), which must never create an empty database because of a
    /// wrong `database.url` and then report on it: the database must exist and hold
    /// hitl-telegram's tables (at any schema version), else [`StorageError::NoDatabase`].
    /// Nothing is written to find out: a SQLite file is first read through a read-only
    /// connection, so a mistyped path to some other SQLite file is not switched to WAL.
    Existing,
}

/// Opens the store `url` selects (see [`Backend::of_url`]); migrations are the caller's
/// ([`Store::migrate`]).
pub async fn connect(url: &str, mode: ConnectMode) -> Result<Arc<dyn Store>, StorageError> {
    let store: Arc<dyn Store> = match (Backend::of_url(url)?, mode) {
        (Backend::Sqlite, ConnectMode::Create) => Arc::new(SqliteStore::connect(url).await?),
        (Backend::Sqlite, ConnectMode::Existing) => {
            Arc::new(SqliteStore::connect_existing(url).await?)
        }
        (Backend::Postgres, ConnectMode::Create) => Arc::new(PgStore::connect(url).await?),
        (Backend::Postgres, ConnectMode::Existing) => {
            Arc::new(PgStore::connect_existing(url).await?)
        }
    };
    Ok(store)
}

/// The table whose presence makes a database hitl-telegram's ([`ConnectMode::Existing`]):
/// the audit trail, which every tool that reads an existing database reads, and which
/// the first migration creates in both backends.
const SCHEMA_TABLE: &str = "audit_events";

/// [`StorageError::NoDatabase`] for `url`.
fn no_database(url: &str, why: impl Into<String>) -> StorageError {
    StorageError::NoDatabase {
        url: redact_url(url),
        why: why.into(),
    }
}

/// The query parameters of a database URL whose values are secrets (libpq's names; sqlx
/// reads `password`).
const SECRET_PARAMS: [&str; 3] = ["password", "sslpassword", "passfile"];

/// `url` fit for a log line or an error: its password (if any) and the values of
/// [`SECRET_PARAMS`] in its query replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                // Only fails for URLs that cannot have a password, which this one has.
                let _ = parsed.set_password(Some("***"));
            }
            let secret = |k: &str| SECRET_PARAMS.iter().any(|s| k.eq_ignore_ascii_case(s));
            if parsed.query_pairs().any(|(k, _)| secret(&k)) {
                let pairs: Vec<(String, String)> = parsed
                    .query_pairs()
                    .map(|(k, v)| {
                        let v = if secret(&k) {
                            "***".into()
                        } else {
                            v.into_owned()
                        };
                        (k.into_owned(), v)
                    })
                    .collect();
                parsed.query_pairs_mut().clear().extend_pairs(pairs);
            }
            parsed.to_string()
        }
        // Unparsable: the userinfo, if there is one, goes whole, and so does the query.
        Err(_) => {
            let url = url.split_once('?').map_or(url, |(head, _)| head);
            match (url.find("://"), url.rfind('@')) {
                (Some(start), Some(at)) if at > start => {
                    format!("{}***{}", &url[..start + 3], &url[at..])
                }
                _ => url.to_owned(),
            }
        }
    }
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

/// What a message of a question now shows ([`Store::mark_shown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The first message was followed by its file with the full parameters (or the file
    /// was found not needed).
    Attachment,
    /// The question's first message shows its outcome.
    Outcome,
    /// The message of the question's copy in `chat_id` shows the outcome.
    CopyOutcome { chat_id: i64 },
    /// A message learned from a tap (a stray) shows the outcome.
    StrayOutcome { chat_id: i64, message_id: i32 },
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

/// A live replica's configuration, as it recorded it ([`Store::hold_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveConfig {
    /// Who the replica is (its lease holder name).
    pub holder: String,
    pub fingerprint: Fingerprint,
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

    /// Sets `webhooks.max_backlog_per_agent` (at least 1): an outcome whose agent already
    /// has this many undelivered webhooks gets its delivery dropped (audited) instead of
    /// queued. The service sets it at start; the CLI tools, which decide nothing, keep the
    /// default.
    fn set_webhook_backlog_bound(&self, bound: u32);

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

    /// Records that a message of the question shows what `what` says (its outcome, or
    /// the file with the full parameters), so a restart does not show it again.
    async fn mark_shown(&self, id: &ConfirmationId, what: Shown) -> Result<(), StorageError>;

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

    /// Records (audited) a message of the question learned from a tap on it, unless it
    /// is known already; returns the record as it is then (`None`: no such question).
    async fn add_stray(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError>;

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
    /// while the service keeps running. SQLite only: PostgreSQL answers
    /// [`StorageError::Unsupported`] (its backups are `pg_dump`'s).
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

    /// Closes the connections cleanly (SQLite checkpoints the WAL).
    async fn close(&self);

    /// What other processes sharing this database commit, as they commit: a replica's
    /// blocked agents, long polls and event streams must hear a decision taken by
    /// another replica at once. `None`: this backend has one writing process (SQLite),
    /// which hears its own changes directly. The feed ends when the receiver is dropped
    /// or the store closes.
    async fn follow_changes(&self) -> Result<Option<mpsc::Receiver<Change>>, StorageError> {
        Ok(None)
    }

    /// Takes the lease `name` for `holder`, or renews it, for `lease` from now on the
    /// database's clock; `true` while `holder` holds it (nobody else held it unexpired).
    /// The default: this backend has one process (SQLite), which always holds it.
    async fn hold_lease(
        &self,
        _name: &str,
        _holder: &str,
        _lease: std::time::Duration,
    ) -> Result<bool, StorageError> {
        Ok(true)
    }

    /// Gives the lease up (if `holder` holds it), so another takes it at once rather
    /// than when it expires.
    async fn release_lease(&self, _name: &str, _holder: &str) -> Result<(), StorageError> {
        Ok(())
    }

    /// Records that `holder` runs a configuration whose authorisation view is `view`
    /// (stored with its fingerprint), for `lease` from now on the database's clock, and
    /// forgets the replicas whose record expired. Renewed like a lease. The default:
    /// this backend has one process (SQLite), whose own configuration is the only one,
    /// so nothing is recorded.
    async fn hold_config(
        &self,
        _holder: &str,
        _view: &Authority,
        _lease: std::time::Duration,
    ) -> Result<(), StorageError> {
        Ok(())
    }

    /// The configurations of the replicas whose record has not expired, by holder.
    /// `None`: this backend has one process (SQLite), whose own configuration is the
    /// only one.
    async fn live_configs(&self) -> Result<Option<Vec<LiveConfig>>, StorageError> {
        Ok(None)
    }

    /// The view recorded under `fingerprint` (by any replica, live or not), if one is.
    /// A view that cannot be read (a newer version's, a damaged row) is
    /// [`StorageError::Corrupt`].
    async fn config_view(
        &self,
        _fingerprint: &Fingerprint,
    ) -> Result<Option<Authority>, StorageError> {
        Ok(None)
    }

    /// Forgets `holder`'s configuration at shutdown, so it stops counting at once
    /// rather than when its record expires.
    async fn release_config(&self, _holder: &str) -> Result<(), StorageError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Backend, redact_url};

    #[test]
    fn the_url_scheme_picks_the_backend_and_anything_else_is_refused() {
        for url in ["sqlite://data/hitl.db", "sqlite::memory:", "SQLITE://x.db"] {
            assert_eq!(Backend::of_url(url).unwrap(), Backend::Sqlite, "{url}");
        }
        for url in ["postgres://u:p@h/db", "postgresql://h/db", "postgres:///db"] {
            assert_eq!(Backend::of_url(url).unwrap(), Backend::Postgres, "{url}");
        }
        for url in ["mysql://u:p@h/db", "data/hitl.db", "postgres:db", ""] {
            let e = Backend::of_url(url).unwrap_err().to_string();
            assert!(
                e.contains("unsupported scheme") && !e.contains("u:p"),
                "{e}"
            );
        }
    }

    #[test]
    fn a_database_out_of_reach_is_unavailable_and_a_refused_write_is_not() {
        use super::StorageError;
        let unavailable = [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
            sqlx::Error::Protocol("unexpected response from SSLRequest: 0x00".into()),
        ];
        for e in unavailable {
            assert!(StorageError::Database(e).is_unavailable());
        }
        let refused = [
            StorageError::Database(sqlx::Error::RowNotFound),
            StorageError::Corrupt {
                id: "cf_x".into(),
                what: "status".into(),
            },
            StorageError::Batch("constraint".into()),
        ];
        for e in refused {
            assert!(!e.is_unavailable(), "{e}");
        }
    }

    #[test]
    fn a_redacted_url_keeps_everything_but_the_password() {
        assert_eq!(
            redact_url("postgres://hitl:s3cret@db:5432/hitl?sslmode=require"),
            "postgres://hitl:***@db:5432/hitl?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://hitl@db/hitl"),
            "postgres://hitl@db/hitl"
        );
        assert_eq!(redact_url("sqlite://data/hitl.db"), "sqlite://data/hitl.db");
        assert!(!redact_url("postgres://u:p%zz@[bad/db").contains("p%zz"));
        let redacted =
            redact_url("postgres://hitl@db/hitl?sslmode=require&password=s3cret&PassFile=/x");
        assert!(
            !redacted.contains("s3cret")
                && !redacted.contains("/x")
                && redacted.contains("sslmode=require"),
            "{redacted}"
        );
        assert!(!redact_url("postgres://[bad/db?password=s3cret").contains("s3cret"));
    }
}
