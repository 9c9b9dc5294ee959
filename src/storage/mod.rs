//! Persistence behind one narrow trait.
//!
//! The service talks to [`Store`] only; SQL lives in the backend modules. SQLite is the
//! backend today (one file, WAL mode). The trait is small and speaks domain types, so a
//! PostgreSQL backend for several replicas can sit beside it: the only database features
//! it relies on are transactions, a conditional `UPDATE` and a unique index.

mod sqlite;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::domain::confirmation::{Confirmation, Decision, Window, WindowKey};
use crate::domain::ids::{CallbackToken, ConfirmationId, IdempotencyKey};

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

#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Applies pending migrations.
    async fn migrate(&self) -> Result<(), StorageError>;

    /// Answers when the database does.
    async fn ping(&self) -> Result<(), StorageError>;

    /// Stores a new request, unless the same agent already used its idempotency key
    /// within [`IDEMPOTENCY_TTL`] of `now`. The record may already be terminal (a window
    /// hit is stored confirmed at once).
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

    /// Records the Telegram message that carries the request's buttons.
    async fn set_message_id(
        &self,
        id: &ConfirmationId,
        message_id: i32,
    ) -> Result<(), StorageError>;

    /// Moves a pending request to its outcome with one conditional update; opens the
    /// confirmation window in the same transaction when an operator confirmed a request
    /// with `window_seconds > 0`.
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

    /// Ids and deadlines of every pending request (restart recovery).
    async fn pending_deadlines(
        &self,
    ) -> Result<Vec<(ConfirmationId, OffsetDateTime)>, StorageError>;

    /// Deletes windows that expired before `now`; returns how many.
    async fn purge_expired_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError>;

    /// Closes the connections cleanly (checkpoints the WAL).
    async fn close(&self);
}
