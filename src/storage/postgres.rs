//! The PostgreSQL backend (`database.url = "postgres://…"`): the same roles as the
//! SQLite backend, statement for statement (`common`, `sql`), with its own migrations
//! (`migrations/postgres/`, embedded in the binary).
//!
//! It is written for a database that several processes share (the service, the CLI tools
//! beside it, several replicas of the service), so it keeps no state that another process
//! could make stale: no window cache, the audit chain serialised by an advisory lock
//! ([`AUDIT_LOCK`]) rather than a mutex, stream events numbered in commit order under
//! that lock, changes announced on commit (`NOTIFY`), and the work that must be done once
//! left to the leader. The reasons, one by one: docs/architecture.md ("Module notes").

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, QueryBuilder, Transaction};
use time::OffsetDateTime;
use tokio::sync::mpsc;

use super::hits::{self, QueuedHit};
use super::rows::{self, insert_runs};
use super::{Change, Coordination, Inserted, LiveConfig, RunReported, StorageError, WindowCache};
use crate::domain::audit::{self, NewEvent};
use crate::domain::authority::{Authority, Fingerprint};
use crate::domain::ids::QuestionId;
use crate::domain::question::Question;
use crate::domain::run_report::NewRunReport;

/// The schema's migrations ([`Administration::migrate`](super::Administration::migrate)).
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The database type of the statements in `sql` (compiled for this backend).
type Db = Postgres;

/// The store `common` implements the roles for (compiled for this backend).
type This = PgStore;

/// `copies` and `strays` in the order they were added (see `sql`).
macro_rules! insertion_order {
    () => {
        "pos"
    };
}

/// The rows of a correlated subquery as one JSON list of lists in `$order`, read whole
/// by `sql`'s `select_whole_where` (`json_agg` of no rows is NULL, hence `[]`).
macro_rules! json_rows {
    ($columns:literal, $order:expr) => {
        concat!(
            "COALESCE(json_agg(json_build_array(",
            $columns,
            ") ORDER BY ",
            $order,
            ")::text, '[]')"
        )
    };
}

/// An `outcome_shown` flag that is false, as the partial indexes say it (see `sql`).
macro_rules! not_shown {
    ($prefix:literal) => {
        concat!("NOT ", $prefix, "outcome_shown")
    };
}

/// Keeps the window row read by `revoke_window` as read until the commit (a purge in
/// another process waits), so its delete removes exactly that row.
macro_rules! lock_window {
    () => {
        " FOR UPDATE OF w"
    };
}

/// Text compared by bytes in an `ORDER BY`, as SQLite compares it.
macro_rules! bytewise {
    () => {
        " COLLATE \"C\""
    };
}

// Compiled once per backend on purpose: see the header of sql/mod.rs.
#[allow(clippy::duplicate_mod)]
#[path = "sql/mod.rs"]
mod sql;
pub(super) use sql::audit_snapshot_in;
use sql::insert_hits;

// Compiled once per backend on purpose: see the header of common.rs.
#[allow(clippy::duplicate_mod)]
#[path = "common.rs"]
mod common;

/// The advisory lock (`pg_advisory_xact_lock`) that serialises appends to the audit
/// chain and writes to the agents' event streams, in every process sharing the database.
/// One constant key ("hitlaudt" in ASCII): the service has one chain.
pub const AUDIT_LOCK: i64 = 0x6869_746c_6175_6474;

/// Connections per process unless `[database] pool_size` says otherwise. Writes queue on
/// the audit lock anyway; the rest are short reads (long-polls hold no connection while
/// they wait).
pub const POSTGRES_POOL: u32 = 10;

/// What [`Administration::backup_to`](crate::storage::Administration::backup_to) answers:
/// PostgreSQL has its own online backups.
const BACKUP_WITH_PG_DUMP: &str = "`backup` copies SQLite databases only; for PostgreSQL use \
     pg_dump (for example: pg_dump --format=custom --file=hitl.dump \"$DATABASE_URL\"), which \
     takes a consistent snapshot while the service runs";

/// This process's turn among the writers ([`PgStore::writers`]).
type WriterGuard<'s> = tokio::sync::MutexGuard<'s, ()>;

/// Window hits waiting for the group commit ([`PgStore::insert_window_hit`]).
#[derive(Default)]
struct HitQueue {
    queued: Vec<QueuedHit>,
    /// A [`GroupCommit`] task is running and will take what is queued.
    writing: bool,
}

fn queue(hits: &std::sync::Mutex<HitQueue>) -> std::sync::MutexGuard<'_, HitQueue> {
    hits.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub struct PgStore {
    pool: PgPool,
    /// Random, per store: every session of the pool carries it (`hitl.origin`), and
    /// every change notice names it.
    origin: String,
    /// Queues this process's audit transactions before they take a connection. The
    /// advisory lock lets one in at a time anyway, across processes; without this, every
    /// writer waiting for it would hold a pooled connection, and reads (window lookups,
    /// the hot path) would wait for one behind them.
    writers: Arc<tokio::sync::Mutex<()>>,
    /// Window hits for the group commit.
    hits: Arc<std::sync::Mutex<HitQueue>>,
    /// `webhooks.max_backlog_per_agent` (see
    /// [`Outbox::set_outbox_backlog_bound`](crate::storage::Outbox::set_outbox_backlog_bound)).
    outbox_backlog_bound: AtomicU32,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/database`,
    /// with any of libpq's URL parameters, such as `sslmode`). Nothing is created: the
    /// database must exist, and
    /// [`Administration::migrate`](crate::storage::Administration::migrate) creates the
    /// tables.
    pub async fn connect(url: &str) -> Result<PgStore, StorageError> {
        Self::connect_pooled(url, POSTGRES_POOL).await
    }

    /// [`PgStore::connect`] with `pool` connections at most for the store's statements
    /// (`[database] pool_size`), and one more for the change feed.
    pub async fn connect_pooled(url: &str, pool: u32) -> Result<PgStore, StorageError> {
        refuse_unknown_params(url)?;
        let origin = format!("{:016x}", rand::random::<u64>());
        let options = PgConnectOptions::from_str(url)?
            .application_name("hitl-telegram")
            .options([
                // Signs this store's change notices ([`append_events`]), so that its
                // own feed can tell them from other replicas'.
                ("hitl.origin", origin.as_str()),
                // The audit lock's argument (module header) holds under READ COMMITTED
                // only: under REPEATABLE READ a transaction's snapshot would predate the
                // lock it waited for, and it would read a stale head. A database or role
                // may set another default, so every session says so itself.
                ("default_transaction_isolation", "read committed"),
                // A writer waits for the audit lock at most this long, as SQLite's
                // `busy_timeout` does, and then fails (a 503 to the agent) instead of
                // queueing forever behind a holder that hangs.
                ("lock_timeout", "5s"),
                // A holder that hangs (a paused process, a half-open connection) is ended
                // by the server, which releases the audit lock for everyone else.
                ("idle_in_transaction_session_timeout", "30s"),
                // NOTICEs are noise nobody can act on: the migrator's `CREATE TABLE IF
                // NOT EXISTS _sqlx_migrations` says "already exists" on every start and
                // every CLI command, and sqlx logs each at INFO. Warnings still come.
                ("client_min_messages", "warning"),
            ]);
        let pool = PgPoolOptions::new()
            // One more for the change feed's listener, which keeps its connection.
            .max_connections(pool.max(1) + 1)
            .connect_with(options)
            .await?;
        Ok(PgStore {
            pool,
            origin,
            writers: Arc::default(),
            hits: Arc::default(),
            outbox_backlog_bound: AtomicU32::new(super::DEFAULT_OUTBOX_BACKLOG_BOUND),
        })
    }

    /// Connects to an existing hitl-telegram database only (for tools such as `audit`,
    /// which must not report on an empty database as if it were an empty trail): a
    /// database that does not exist, or holds no hitl-telegram tables, is
    /// [`StorageError::NoDatabase`]. Nothing is created either way.
    pub async fn connect_existing(url: &str) -> Result<PgStore, StorageError> {
        let store = match PgStore::connect(url).await {
            Ok(store) => store,
            // SQLSTATE 3D000, invalid_catalog_name: no database of that name.
            Err(StorageError::Database(sqlx::Error::Database(e)))
                if e.code().as_deref() == Some("3D000") =>
            {
                return Err(super::no_database(url, "the database does not exist"));
            }
            Err(e) => return Err(e),
        };
        // `to_regclass` looks the name up on the search path, as every query here does.
        let held: Result<bool, sqlx::Error> =
            sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(super::SCHEMA_TABLE)
                .fetch_one(&store.pool)
                .await;
        match held {
            Ok(true) => Ok(store),
            Ok(false) => {
                store.pool.close().await;
                Err(super::no_database(
                    url,
                    "the database holds no hitl-telegram tables",
                ))
            }
            Err(e) => {
                store.pool.close().await;
                Err(e.into())
            }
        }
    }

    fn outbox_backlog_bound(&self) -> u32 {
        self.outbox_backlog_bound.load(Ordering::Relaxed)
    }

    /// A transaction that holds [`AUDIT_LOCK`] from its first statement to its end: the
    /// one way to begin a transaction that appends audit events or stream events. Keep
    /// the guard as long as the transaction (see [`PgStore::writers`]).
    async fn audit_tx(
        &self,
    ) -> Result<(WriterGuard<'_>, Transaction<'static, Postgres>), StorageError> {
        let writer = self.writers.lock().await;
        Ok((writer, begin_audit(&self.pool).await?))
    }

    /// A transaction that appends nothing to the audit chain (and so needs no lock).
    async fn write_tx(&self) -> Result<Transaction<'static, Postgres>, StorageError> {
        Ok(self.pool.begin().await?)
    }

    /// Stores a window hit by the group commit, and answers once the transaction holding
    /// it has committed. The writing runs in a task of its own ([`GroupCommit`]), so an
    /// agent hanging up cannot cut a batch short; a hit whose caller hung up is stored
    /// all the same, which is harmless for a record that is already final.
    async fn insert_window_hit(
        &self,
        r: &Question,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError> {
        let (hit, waiting) = QueuedHit::new(r, now);
        let start = {
            let mut q = queue(&self.hits);
            q.queued.push(hit);
            !std::mem::replace(&mut q.writing, true)
        };
        if start {
            let commit = GroupCommit {
                pool: self.pool.clone(),
                writers: self.writers.clone(),
                hits: self.hits.clone(),
                bound: self.outbox_backlog_bound(),
            };
            tokio::spawn(commit.run());
        }
        waiting.outcome().await
    }

    /// See [`Runs::report_run`](super::Runs::report_run): one audit transaction each
    /// (SQLite's group commit takes reports too; this one takes window hits only).
    async fn write_run_report(
        &self,
        id: &QuestionId,
        agent: &str,
        report: &NewRunReport,
        now: OffsetDateTime,
    ) -> Result<RunReported, StorageError> {
        let (_writer, tx) = self.audit_tx().await?;
        sql::report_run(tx, id, agent, report, now, self.outbox_backlog_bound()).await
    }
}

/// The query parameters sqlx understands in a PostgreSQL URL (sqlx-postgres's
/// `PgConnectOptions::parse_from_url`, plus `options[NAME]`).
const KNOWN_PARAMS: [&str; 17] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
];

/// Refuses a URL parameter sqlx would ignore: it logs an ignored parameter with its
/// value, which may be a secret (libpq's `sslpassword`), and a setting the operator
/// believes in but that does nothing is better refused at start (`check-config` asks
/// too). Only the key is named.
pub fn refuse_unknown_params(url: &str) -> Result<(), StorageError> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        // sqlx's own parser gives the error.
        return Ok(());
    };
    for (key, _) in parsed.query_pairs() {
        let known = KNOWN_PARAMS.contains(&&*key)
            || key == "options"
            || (key.starts_with("options[") && key.ends_with(']'));
        if !known {
            return Err(StorageError::UnsupportedParam(key.into_owned()));
        }
    }
    Ok(())
}

/// A transaction of `pool` holding [`AUDIT_LOCK`] from its first statement.
async fn begin_audit(pool: &PgPool) -> Result<Transaction<'static, Postgres>, StorageError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(AUDIT_LOCK)
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// The group commit's task: takes every queued window hit, writes them in one
/// transaction, answers, and again, until nothing is queued.
struct GroupCommit {
    pool: PgPool,
    writers: Arc<tokio::sync::Mutex<()>>,
    hits: Arc<std::sync::Mutex<HitQueue>>,
    bound: u32,
}

impl GroupCommit {
    async fn run(self) {
        let mut gone = Gone(Some(self.hits.clone()));
        loop {
            // The writers' turn first, the batch then: hits that come while this task
            // waits for its turn join the batch.
            let turn = self.writers.clone().lock_owned().await;
            let batch = {
                let mut q = queue(&self.hits);
                if q.queued.is_empty() {
                    q.writing = false;
                    gone.0 = None;
                    return;
                }
                std::mem::take(&mut q.queued)
            };
            let written = write_hits(&self.pool, &batch, self.bound).await;
            drop(turn);
            hits::answer(batch, written);
        }
    }
}

/// Ends a [`GroupCommit`] that stops without emptying its queue (a panic, the runtime
/// shutting down): the hits queued for it are failed rather than left waiting for a
/// task that is gone, and the next hit starts another.
struct Gone(Option<Arc<std::sync::Mutex<HitQueue>>>);

impl Drop for Gone {
    fn drop(&mut self) {
        if let Some(hits) = self.0.take() {
            let mut q = queue(&hits);
            q.writing = false;
            // Dropping their reply senders tells their callers.
            q.queued.clear();
        }
    }
}

/// One transaction for a batch of window hits ([`insert_hits`]).
async fn write_hits(
    pool: &PgPool,
    batch: &[QueuedHit],
    bound: u32,
) -> Result<Vec<Option<Inserted>>, StorageError> {
    let mut tx = begin_audit(pool).await?;
    let results = insert_hits(&mut tx, batch, bound).await?;
    tx.commit().await?;
    Ok(results)
}

/// Appends `events`, in order, to the audit chain inside `tx` (an
/// [`PgStore::audit_tx`]): the head is read once, every hash is computed here, the rows
/// go in by multi-row `INSERT`s, and one statement sends every change notice.
async fn append_events(
    tx: &mut Transaction<'_, Postgres>,
    events: &[NewEvent],
) -> Result<(), StorageError> {
    if events.is_empty() {
        return Ok(());
    }
    // The head is read in the transaction, under the audit lock, so no other process
    // appends between this read and the commit.
    let last: Option<(i64, String)> =
        sqlx::query_as("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&mut **tx)
            .await?;
    let chained = rows::chain(last, events);
    for run in insert_runs(&chained) {
        let mut insert: QueryBuilder<Postgres> = rows::insert_audit_rows(run);
        insert.build().execute(&mut **tx).await?;
    }
    // Every change to a question appends an audit event, so this one place tells every
    // replica about every change. PostgreSQL sends the notices when (and only if) the
    // transaction commits, in order, and folds identical notices of one transaction
    // into one. The payload is `<question id>|<event kind>|<origin>` ([`change_of`]).
    let ids: Vec<&str> = events
        .iter()
        .map(|e| e.confirmation_id.as_deref().unwrap_or_default())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind).collect();
    sqlx::query(
        "SELECT pg_notify($1, id || '|' || kind || '|' || \
         coalesce(current_setting('hitl.origin', true), '')) \
         FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS e(id, kind, n) ORDER BY n",
    )
    .bind(CHANGES_CHANNEL)
    .bind(ids)
    .bind(kinds)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The `LISTEN`/`NOTIFY` channel of committed changes: the payload is the question's id
/// (empty for a change that concerns no one question), the audit event's kind and the
/// origin of the store that committed it, separated by `|`.
const CHANGES_CHANNEL: &str = "hitl_changes";

/// How long the change feed waits before listening again after losing its connection.
const RELISTEN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A notice's payload as a [`Change`]. One that names no question of ours (only a role
/// that may write to the database could send it) makes every waiter look again.
fn change_of(payload: &str, origin: &str) -> Change {
    let mut parts = payload.splitn(3, '|');
    let (id, kind, from) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    match id {
        "" => Change::Other,
        id => QuestionId::parse(id).map_or(Change::Missed, |id| Change::Question {
            id,
            ended: audit::edits_messages(kind),
            ours: !from.is_empty() && from == origin,
        }),
    }
}

/// Forwards the committed changes to `feed` until it is dropped or the pool closes. A
/// lost connection is listened to again (every [`RELISTEN_AFTER`] until it works), and
/// then [`Change::Missed`] says that notices may have gone by in between.
async fn forward_changes(
    pool: PgPool,
    origin: String,
    mut listener: PgListener,
    feed: mpsc::Sender<Change>,
) {
    loop {
        let received = tokio::select! {
            _ = feed.closed() => return,
            r = listener.try_recv() => r,
        };
        let change = match received {
            Ok(Some(notice)) => change_of(notice.payload(), &origin),
            // Lost, and sqlx has already connected and listened again.
            Ok(None) => Change::Missed,
            Err(_) if pool.is_closed() => return,
            Err(e) => {
                tracing::warn!(error = %e, "lost the change feed from PostgreSQL; listening again");
                listener = loop {
                    tokio::select! {
                        _ = feed.closed() => return,
                        _ = pool.close_event() => return,
                        _ = tokio::time::sleep(RELISTEN_AFTER) => {}
                    }
                    match listen(&pool).await {
                        Ok(l) => break l,
                        Err(_) if pool.is_closed() => return,
                        Err(e) => tracing::debug!(error = %e, "cannot listen yet"),
                    }
                };
                tracing::info!("listening to PostgreSQL's change feed again");
                Change::Missed
            }
        };
        if feed.send(change).await.is_err() {
            return;
        }
    }
}

/// A connection of `pool` that listens to [`CHANGES_CHANNEL`].
async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANGES_CHANNEL).await?;
    Ok(listener)
}

impl PgStore {
    /// See
    /// [`Windows::purge_expired_windows`](crate::storage::Windows::purge_expired_windows).
    async fn purge_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError> {
        sql::purge_expired_windows(&self.pool, now).await
    }

    /// REPEATABLE READ: every query reads one snapshot
    /// ([`Audit::audit_snapshot`](crate::storage::Audit::audit_snapshot)). Read-only, it
    /// never fails to serialise.
    async fn snapshot_tx(&self) -> Result<Transaction<'static, Postgres>, StorageError> {
        let tx = self
            .pool
            .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .await?;
        Ok(tx)
    }

    /// See [`Administration::backup_to`](crate::storage::Administration::backup_to):
    /// PostgreSQL has its own online backups.
    async fn backup_into(&self, _file: &std::path::Path) -> Result<(), StorageError> {
        Err(StorageError::Unsupported(BACKUP_WITH_PG_DUMP))
    }

    /// See [`Administration::close`](crate::storage::Administration::close).
    async fn shut_down(&self) {
        self.pool.close().await;
    }
}

/// No window cache (see the module's header): the primary key answers.
impl WindowCache for PgStore {}

#[async_trait]
impl Coordination for PgStore {
    async fn follow_changes(&self) -> Result<Option<mpsc::Receiver<Change>>, StorageError> {
        let listener = listen(&self.pool).await?;
        // Bounded: a service that stops reading slows the feed (and no notice is lost
        // while it catches up: PostgreSQL queues them for the listening connection).
        let (feed, changes) = mpsc::channel(1024);
        tokio::spawn(forward_changes(
            self.pool.clone(),
            self.origin.clone(),
            listener,
            feed,
        ));
        Ok(Some(changes))
    }

    async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, StorageError> {
        // One statement: taken when free or expired, renewed when ours, else untouched
        // (the conflicting row is locked, so two replicas cannot both take it).
        let held = sqlx::query(
            "INSERT INTO leases (name, holder, expires_at) \
             VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3)) \
             ON CONFLICT (name) DO UPDATE \
             SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at \
             WHERE leases.holder = EXCLUDED.holder OR leases.expires_at < clock_timestamp() \
             RETURNING holder",
        )
        .bind(name)
        .bind(holder)
        .bind(lease.as_secs_f64())
        .fetch_optional(&self.pool)
        .await?;
        Ok(held.is_some())
    }

    async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn hold_config(
        &self,
        holder: &str,
        view: &Authority,
        lease: Duration,
    ) -> Result<(), StorageError> {
        // Every replica renews, so each clears what expired: a replica restarted is a
        // new holder, and the rows of those gone would otherwise pile up.
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM replica_configs WHERE expires_at < clock_timestamp()")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO replica_configs (holder, fingerprint, view, expires_at) \
             VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4)) \
             ON CONFLICT (holder) DO UPDATE \
             SET fingerprint = EXCLUDED.fingerprint, view = EXCLUDED.view, \
             expires_at = EXCLUDED.expires_at",
        )
        .bind(holder)
        .bind(view.fingerprint().as_str())
        .bind(view.canonical_json())
        .bind(lease.as_secs_f64())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn live_configs(&self) -> Result<Option<Vec<LiveConfig>>, StorageError> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT holder, fingerprint FROM replica_configs \
             WHERE expires_at >= clock_timestamp() ORDER BY holder",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(holder, fingerprint)| {
                let fingerprint =
                    Fingerprint::parse(&fingerprint).ok_or_else(|| StorageError::Corrupt {
                        id: holder.clone(),
                        what: "replica configuration fingerprint".into(),
                    })?;
                Ok(LiveConfig {
                    holder,
                    fingerprint,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    async fn config_view(
        &self,
        fingerprint: &Fingerprint,
    ) -> Result<Option<Authority>, StorageError> {
        let view: Option<String> =
            sqlx::query_scalar("SELECT view FROM replica_configs WHERE fingerprint = $1 LIMIT 1")
                .bind(fingerprint.as_str())
                .fetch_optional(&self.pool)
                .await?;
        view.map(|v| {
            serde_json::from_str(&v).map_err(|e| StorageError::Corrupt {
                id: fingerprint.to_string(),
                what: format!("replica configuration view: {e}"),
            })
        })
        .transpose()
    }

    async fn release_config(&self, holder: &str) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM replica_configs WHERE holder = $1")
            .bind(holder)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
