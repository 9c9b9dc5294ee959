//! Persistence by role.
//!
//! What the service keeps is split into role traits, one for each part of it
//! ([`roles`]); [`Store`] is their union, for the places that need everything (`Arc<dyn
//! Store>`), and a part that needs one role takes that role. They speak domain types: the
//! only database features they rely on are transactions, a conditional `UPDATE` and a
//! unique index.
//!
//! Two backends implement every role, chosen by `database.url` ([`connect`]): SQLite
//! (`sqlite://…`, one file in WAL mode, the default) and PostgreSQL (`postgres://…`).
//! What they share is written once: the implementations of the roles (`common`) and the
//! statements (`sql`), each compiled for both backends, and what is not SQL in `rows`. A
//! backend module holds only what is its own: connecting, its locks and group commit,
//! SQLite's window cache, PostgreSQL's change feed, leases and replica configurations.

pub mod copy;
mod hits;
pub mod pins;
mod postgres;
pub mod roles;
mod rows;
mod sqlite;

use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use time::OffsetDateTime;

use crate::domain::authority::Fingerprint;
use crate::domain::grant::Grant;
use crate::domain::ids::{DeliveryId, OutageId, QuestionId};
use crate::domain::outage::AlertKind;
use crate::domain::question::{Question, Window, WindowKey};
use crate::domain::run_report::NewRunReport;

pub use postgres::{POSTGRES_POOL, PgStore, refuse_unknown_params};
pub use roles::{
    Administration, AgentEvents, Audit, AwayStore, ChatRulesStore, Coordination, Grants, Messages,
    Outages, Outbox, Questions, Runs, Steps, ToolPins, Windows,
};
pub use sqlite::{SQLITE_POOL, SqliteStore};

/// A change committed by some process sharing the database ([`Coordination::follow_changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Something about this question changed (its status, answers, steps or events).
    Question {
        id: QuestionId,
        /// The change gave the question its outcome, or (once it ended) the run of its
        /// call: its messages are the leader's to edit.
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

/// The webhook backlog bound a store applies until [`Outbox::set_outbox_backlog_bound`]
/// sets the configured one; also the default of `webhooks.max_backlog_per_agent`, which
/// the configuration reads from here (storage sits below the configuration and takes
/// plain values from it, never a setting).
pub const DEFAULT_OUTBOX_BACKLOG_BOUND: u32 = 1000;

/// The storage layer's one error. A driver's error is a field, not a `source()`: what
/// it says reaches a person only as [`database_text`] words it (an error chain printed
/// cause by cause would repeat the driver's own text, with PostgreSQL's source line).
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("database error: {}", database_text(.0))]
    Database(sqlx::Error),
    #[error("database migration failed: {}", migrate_text(.0))]
    Migrate(sqlx::migrate::MigrateError),
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

impl From<sqlx::Error> for StorageError {
    fn from(e: sqlx::Error) -> StorageError {
        StorageError::Database(e)
    }
}

impl From<sqlx::migrate::MigrateError> for StorageError {
    fn from(e: sqlx::migrate::MigrateError) -> StorageError {
        StorageError::Migrate(e)
    }
}

/// A driver's error in the words a person needs: the database's own message, without
/// the line of PostgreSQL's C source that sqlx appends to it (`… does not exist at line
/// 948`), which reads like a line of a file the person should look at.
fn database_text(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(db) => format!("error returned from database: {}", db.message()),
        other => other.to_string(),
    }
}

/// A migration's error, its database error worded by [`database_text`].
fn migrate_text(e: &sqlx::migrate::MigrateError) -> String {
    match e {
        sqlx::migrate::MigrateError::Execute(db) => {
            format!("while executing migrations: {}", database_text(db))
        }
        sqlx::migrate::MigrateError::ExecuteMigration(db, version) => {
            format!("while executing migration {version}: {}", database_text(db))
        }
        other => other.to_string(),
    }
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
    /// PostgreSQL never creates the database itself: its tables come with [`Administration::migrate`].
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
/// ([`Administration::migrate`]).
pub async fn connect(url: &str, mode: ConnectMode) -> Result<Arc<dyn Store>, StorageError> {
    connect_pooled(url, mode, None).await
}

/// [`connect`] with at most `pool` connections (`None`: the backend's default,
/// [`SQLITE_POOL`] or [`POSTGRES_POOL`]). The tools that only read keep the default.
pub async fn connect_pooled(
    url: &str,
    mode: ConnectMode,
    pool: Option<u32>,
) -> Result<Arc<dyn Store>, StorageError> {
    let store: Arc<dyn Store> = match (Backend::of_url(url)?, mode) {
        (Backend::Sqlite, ConnectMode::Create) => {
            Arc::new(SqliteStore::connect_pooled(url, pool.unwrap_or(SQLITE_POOL)).await?)
        }
        (Backend::Sqlite, ConnectMode::Existing) => {
            Arc::new(SqliteStore::connect_existing(url).await?)
        }
        (Backend::Postgres, ConnectMode::Create) => {
            match PgStore::connect_pooled(url, pool.unwrap_or(POSTGRES_POOL)).await {
                Ok(store) => Arc::new(store),
                // SQLSTATE 3D000, invalid_catalog_name: its message names the database.
                Err(StorageError::Database(sqlx::Error::Database(e)))
                    if e.code().as_deref() == Some("3D000") =>
                {
                    return Err(no_database(
                        url,
                        format!(
                            "{}, and the service creates only its tables: create the database \
                         first",
                            e.message()
                        ),
                    ));
                }
                Err(e) => return Err(e),
            }
        }
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
    New(Question),
    /// The agent already made a request with this idempotency key (within 24 h); nothing
    /// was written and this is that request.
    Existing(Question),
}

/// Result of storing a grant ([`Grants::insert_grant`]).
#[derive(Debug, Clone, PartialEq)]
pub enum GrantInserted {
    /// The grant is new and stored.
    New(Grant),
    /// The agent already turned this interaction into a grant (the database's unique
    /// index refused a second, on whichever replica it was asked); nothing was written.
    InteractionUsed,
    /// This grant question already became a grant (a decision applied twice, as a
    /// restart may); nothing was written and this is that grant.
    Existing(Grant),
}

/// Result of reporting a confirmed call's run ([`Runs::report_run`]).
#[derive(Debug)]
pub enum RunReported {
    /// Taken: this is the record with its run.
    Taken(Question),
    /// The very same report was taken before (a retry); nothing was written.
    Same(Question),
    /// A different report was taken before; nothing was written.
    Conflict(Question),
    /// The question was not confirmed (pending, cancelled, timed out): nothing ran.
    NotConfirmed(Question),
    /// No such question of this agent.
    NotFound,
}

impl RunReported {
    /// What a report of `agent`'s comes to against its question as read (`before`),
    /// where that alone settles it: no such question of this agent, a call that did not
    /// run, the same report again, or another report taken already. `Continue`: the
    /// report is to be written over `before`'s run. Both ways of writing a report judge
    /// by this (`sql::report_run` and SQLite's group commit).
    pub(crate) fn judge(
        before: Option<Question>,
        agent: &str,
        report: &NewRunReport,
    ) -> ControlFlow<RunReported, Question> {
        let Some(before) = before.filter(|q| q.agent == agent) else {
            return ControlFlow::Break(RunReported::NotFound);
        };
        if !before.takes_report() {
            return ControlFlow::Break(RunReported::NotConfirmed(before));
        }
        match &before.run_report {
            Some(run) if run.same_as(report) => ControlFlow::Break(RunReported::Same(before)),
            Some(run) if !run.replaceable() => ControlFlow::Break(RunReported::Conflict(before)),
            _ => ControlFlow::Continue(before),
        }
    }
}

/// What a window let through ([`Runs::window_use`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowUse {
    /// Calls it confirmed without asking.
    pub calls: u64,
    /// Of those, the ones whose run was reported `failed`.
    pub failed: u64,
}

/// Result of applying a decision.
#[derive(Debug)]
pub enum Decided {
    /// This decision is the request's outcome.
    Applied(Question),
    /// Another decision won; this is the stored outcome.
    AlreadyTerminal(Question),
    NotFound,
}

/// Result of recording an answer.
#[derive(Debug)]
pub enum Answered {
    /// Stored; this is the record with every answer so far (terminal when the answer
    /// settled it).
    Added(Question),
    /// This person already answered; nothing was written.
    AlreadyAnswered(Question),
    /// The question already ended; nothing was written.
    Closed(Question),
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

/// What a message of a question now shows ([`Messages::mark_shown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The first message was followed by its file with the full parameters (or the file
    /// was found not needed).
    Attachment,
    /// The question's first message shows its outcome.
    Decision,
    /// The message of the question's copy in `chat_id` shows the outcome.
    CopyDecision { chat_id: i64 },
    /// A message learned from a tap (a stray) shows the outcome.
    StrayDecision { chat_id: i64, message_id: i32 },
}

/// A pending request as restart recovery needs it.
#[derive(Debug, Clone)]
pub struct PendingEntry {
    pub id: QuestionId,
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

/// Where a page of ended questions goes on from ([`Questions::ended_in_chats`]): the
/// last question of the page before, by its decision time and id, which together order
/// every ended question once (two decided in the same millisecond are told apart by id).
/// Its text form, `<decided_at in ms>.<id>`, is what the console hands out as an opaque
/// cursor and reads back with [`EndedCursor::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedCursor {
    /// When it was decided, in Unix milliseconds (as the column keeps it).
    pub decided_at_ms: i64,
    pub id: QuestionId,
}

impl EndedCursor {
    /// The cursor just past `q`; `None` while it is pending.
    pub fn after(q: &Question) -> Option<EndedCursor> {
        let at = q.decided_at?;
        Some(EndedCursor {
            // Milliseconds, as stored: a decision time read back has no finer part.
            decided_at_ms: i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()?,
            id: q.id.clone(),
        })
    }

    /// The cursor whose text form is `s`; `None` for anything else.
    pub fn parse(s: &str) -> Option<EndedCursor> {
        let (at, id) = s.split_once('.')?;
        if at.is_empty() || !at.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(EndedCursor {
            decided_at_ms: at.parse().ok()?,
            id: QuestionId::parse(id).ok()?,
        })
    }
}

impl std::fmt::Display for EndedCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.decided_at_ms, self.id.as_str())
    }
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

/// A live replica's configuration, as it recorded it ([`Coordination::hold_config`]).
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
    pub confirmation_id: QuestionId,
    pub agent: String,
    pub url: String,
    /// When the request ended; the give-up age counts from here.
    pub created_at: OffsetDateTime,
    /// Attempts made so far.
    pub attempts: u32,
}

/// An alert for the fallback URL, as queued with its outage's beginning or end.
#[derive(Debug, Clone)]
pub struct NewAlert {
    pub delivery_id: DeliveryId,
    pub kind: AlertKind,
    pub url: String,
    /// The JSON sent, stored as is so that every attempt signs the same bytes.
    pub body: String,
}

/// An alert waiting for its delivery.
#[derive(Debug, Clone)]
pub struct AlertEntry {
    pub delivery_id: DeliveryId,
    pub outage_id: OutageId,
    pub kind: String,
    pub url: String,
    pub body: String,
    /// When it was queued; the give-up age counts from here.
    pub created_at: OffsetDateTime,
    /// Attempts made so far.
    pub attempts: u32,
}

/// What became of one webhook attempt.
#[derive(Debug, Clone)]
pub enum DeliveryAttempt {
    Delivered,
    Retry {
        next_at: OffsetDateTime,
        error: String,
    },
    GiveUp {
        error: String,
    },
}

/// Everything the service stores, as one trait object (`Arc<dyn Store>`): the union of
/// the role traits ([`Questions`], [`Messages`], [`Steps`], [`Windows`], [`Grants`],
/// [`Runs`], [`ToolPins`], [`ChatRulesStore`], [`Outbox`], [`Audit`], [`AgentEvents`], [`Coordination`], [`Administration`]),
/// implemented for every type that implements them all. A part of the service that
/// needs one role can take that role alone (`&dyn Audit`); a `&dyn Store` coerces to
/// any of them.
pub trait Store:
    Questions
    + Messages
    + Steps
    + Windows
    + Grants
    + Runs
    + ToolPins
    + ChatRulesStore
    + AwayStore
    + Outages
    + Outbox
    + Audit
    + AgentEvents
    + Coordination
    + Administration
{
}

/// The windows a backend keeps in memory, if any (SQLite's, see [`SqliteStore`]): the
/// shared code (`common.rs`) calls these around the reads and writes of windows. The
/// defaults keep none (PostgreSQL's).
#[async_trait]
trait WindowCache: Sync {
    /// Fills the cache from the table (after the migrations).
    async fn load_windows(&self) -> Result<(), StorageError> {
        Ok(())
    }

    /// The window for `key` live at `now`, answered from memory; `None` when the cache
    /// cannot answer (the table does).
    fn cached_window(&self, _key: &WindowKey, _now: OffsetDateTime) -> Option<Option<Window>> {
        None
    }

    /// Mirrors, after its commit, the window a decision opened.
    fn remember_window(&self, _record: &Question) {}

    /// Forgets, after its commit, the window revoked.
    fn forget_window(&self, _revoked: &LiveWindow) {}
}

impl<T> Store for T where
    T: Questions
        + Messages
        + Steps
        + Windows
        + Grants
        + Runs
        + ToolPins
        + ChatRulesStore
        + AwayStore
        + Outages
        + Outbox
        + Audit
        + AgentEvents
        + Coordination
        + Administration
{
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
