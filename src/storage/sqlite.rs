//! The SQLite backend: one file in WAL mode, migrations embedded in the binary.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};
use time::OffsetDateTime;

use super::hits::{self, QueuedHit};
use super::rows::{self, from_ms, insert_runs, ms};
use super::{Coordination, Inserted, LiveWindow, StorageError, WindowCache};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit::NewEvent;
use crate::domain::ids::{OwnerId, QuestionId, ToolName};
use crate::domain::question::{Question, Window, WindowKey};

/// The schema's migrations ([`Administration::migrate`](super::Administration::migrate)).
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The database type of the statements in `sql` (compiled for this backend).
type Db = Sqlite;

/// The store `common` implements the roles for (compiled for this backend).
type This = SqliteStore;

/// `copies` and `strays` in the order they were added (see `sql`).
macro_rules! insertion_order {
    () => {
        "rowid"
    };
}

/// The rows of a correlated subquery as one JSON list of lists in `$order` (`[]` for
/// none: an aggregate always gives a row), read whole by `sql`'s `select_whole_where`.
/// Its booleans come out as `0`/`1`.
macro_rules! json_rows {
    ($columns:literal, $order:expr) => {
        concat!(
            "json_group_array(json_array(",
            $columns,
            ") ORDER BY ",
            $order,
            ")"
        )
    };
}

/// An `outcome_shown` flag that is false, as the partial indexes say it (see `sql`).
macro_rules! not_shown {
    ($prefix:literal) => {
        concat!($prefix, "outcome_shown = 0")
    };
}

/// Nothing: the write transaction of `revoke_window` holds the database (see `sql`).
macro_rules! lock_window {
    () => {
        ""
    };
}

/// Text compared by bytes in an `ORDER BY`: SQLite's default collation does that.
macro_rules! bytewise {
    () => {
        ""
    };
}

// Compiled once per backend on purpose: see the header of sql/mod.rs.
#[allow(clippy::duplicate_mod)]
#[path = "sql/mod.rs"]
mod sql;
use sql::insert_hits;

mod plain;
use plain::{Plain, is_plain, write_plain_hits};

mod reports;
use reports::QueuedReport;

// Compiled once per backend on purpose: see the header of common.rs.
#[allow(clippy::duplicate_mod)]
#[path = "common.rs"]
mod common;

pub struct SqliteStore {
    pool: SqlitePool,
    /// Serialises the transactions that append to the audit trail: each append reads the
    /// last row's hash, so two must not interleave. Held across the whole transaction.
    /// It also holds the group commit's own connection and the audit chain's tip as the
    /// last group commit left it ([`HitWriter`]).
    audit: Arc<tokio::sync::Mutex<HitWriter>>,
    /// The database file, for the group commit's own connection (`None` in memory,
    /// where a second connection would open another database).
    file: Option<std::path::PathBuf>,
    /// Every stored confirmation window, by key: a window hit is decided from memory
    /// without touching SQLite (a lookup is the hot path of a busy agent). `None` until
    /// [`Administration::migrate`](crate::storage::Administration::migrate) has loaded the
    /// table, and lookups go to SQLite meanwhile (the CLI tools open a store without
    /// migrating). Written only after the transaction that changed the table has committed,
    /// under the audit lock like every window write, so it never shows a window the
    /// database does not hold. Only the service process writes windows, so no other process
    /// can make it stale.
    windows: RwLock<Option<HashMap<WindowKey, Window>>>,
    /// Window hits waiting for the group commit, and its writer thread; see
    /// [`SqliteStore::insert_window_hit`].
    hits: Arc<HitQueue>,
    /// The writer thread, started by the first window hit, joined by
    /// [`Administration::close`](crate::storage::Administration::close).
    hit_thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// `webhooks.max_backlog_per_agent`: an outcome whose agent already has this many
    /// undelivered webhooks gets its delivery dropped (audited) instead of queued. Set by
    /// the service at start
    /// ([`Outbox::set_outbox_backlog_bound`](crate::storage::Outbox::set_outbox_backlog_bound));
    /// the CLI tools, which decide nothing, keep the default.
    outbox_backlog_bound: std::sync::atomic::AtomicU32,
}

/// The audit chain's last row: its `seq` and `hash`.
type AuditTip = (i64, String);

/// What the group commit of window hits keeps between batches, under the audit lock.
#[derive(Default)]
struct HitWriter {
    /// A plain `rusqlite` connection of its own, used from a blocking thread: a batch is
    /// then statements run back to back in SQLite's C code, where through sqlx every
    /// statement was a round trip to its worker thread and back to a busy tokio worker
    /// (about 0.2 ms apiece under load: most of a batch's time, BENCHMARKS.md B2).
    /// Opened on first use.
    conn: Option<rusqlite::Connection>,
    /// The chain's tip as the last batch committed it, so the next need not read it.
    /// Every other holder of the lock may append, so [`SqliteStore::lock_audit`] clears
    /// it; a failed batch leaves it cleared, so it is only ever what a commit wrote.
    tip: Option<AuditTip>,
}

/// The audit lock as a writer holds it (see [`SqliteStore::audit`]).
type AuditGuard = tokio::sync::OwnedMutexGuard<HitWriter>;

/// Window hits waiting for the group commit's writer thread ([`hit_writer_loop`]).
#[derive(Default)]
struct HitQueue {
    state: std::sync::Mutex<HitQueueState>,
    /// Wakes the writer when a hit is queued or the store closes.
    ready: std::sync::Condvar,
}

#[derive(Default)]
struct HitQueueState {
    queued: Vec<QueuedHit>,
    /// Run reports for the same commit ([`SqliteStore::write_run_report`]).
    reports: Vec<QueuedReport>,
    /// The writer is running (set when it is started, cleared when it has stopped).
    running: bool,
    /// The store is closing: the writer writes what is queued and stops, and no hit is
    /// queued any more.
    closed: bool,
}

impl HitQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, HitQueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn close(&self) {
        self.state().closed = true;
        self.ready.notify_all();
    }
}

impl HitQueueState {
    fn is_empty(&self) -> bool {
        self.queued.is_empty() && self.reports.is_empty()
    }
}

/// Connections per process unless `[database] pool_size` says otherwise: one writer at a
/// time (SQLite's lock), the rest readers beside it under WAL.
pub const SQLITE_POOL: u32 = 8;

impl SqliteStore {
    /// Opens (creating it and its folder if needed) the database at `url`
    /// (`sqlite://path/to/file.db`, or `sqlite::memory:`).
    pub async fn connect(url: &str) -> Result<SqliteStore, StorageError> {
        Self::connect_pooled(url, SQLITE_POOL).await
    }

    /// [`SqliteStore::connect`] with `pool` connections at most (`[database] pool_size`).
    pub async fn connect_pooled(url: &str, pool: u32) -> Result<SqliteStore, StorageError> {
        Self::open(url, true, pool).await
    }

    /// Opens an existing hitl-telegram database only (for tools such as `backup` and
    /// `audit`, which must never create an empty one because of a wrong `database.url`,
    /// nor report on one): a missing file, a file that is not a SQLite database, or one
    /// without hitl-telegram's tables is [`StorageError::NoDatabase`]. The check reads
    /// through a read-only connection of its own, so such a file is left as it was (the
    /// store's own connections would switch it to WAL).
    pub async fn connect_existing(url: &str) -> Result<SqliteStore, StorageError> {
        let options = SqliteConnectOptions::from_str(url)?;
        let file = options.get_filename();
        if file != Path::new(":memory:") && !file.is_file() {
            let why = if file.exists() {
                "it is not a file"
            } else {
                "the file does not exist"
            };
            return Err(super::no_database(url, why));
        }
        let probe = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options.read_only(true).create_if_missing(false))
            .await;
        let held = match probe {
            Ok(pool) => {
                let held: Result<bool, sqlx::Error> = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?)",
                )
                .bind(super::SCHEMA_TABLE)
                .fetch_one(&pool)
                .await;
                pool.close().await;
                held
            }
            Err(e) => Err(e),
        };
        match held {
            Ok(true) => Self::open(url, false, SQLITE_POOL).await,
            Ok(false) => Err(super::no_database(
                url,
                "the file holds no hitl-telegram tables",
            )),
            // SQLITE_NOTADB: some other file, or a damaged one.
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("26") => Err(
                super::no_database(url, format!("the file is not a SQLite database ({e})")),
            ),
            Err(e) => Err(e.into()),
        }
    }

    async fn open(url: &str, create: bool, pool: u32) -> Result<SqliteStore, StorageError> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(create)
            // WAL lets readers (long-polls, health checks) proceed while a decision is
            // being written.
            .journal_mode(SqliteJournalMode::Wal)
            // FULL: every commit is on disk before it returns. A decision is committed
            // before the operator's tap is answered and before any agent hears of it, so
            // with FULL nobody is ever told an outcome that a power loss could undo (NORMAL
            // only survives process crashes). Approvals are human-paced; the fsync per
            // decision costs nothing that matters here.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            // Writers queue instead of failing when two decisions land at once.
            .busy_timeout(Duration::from_secs(5));
        let filename = options.get_filename().to_owned();
        if create && filename != Path::new(":memory:") {
            create_private(&filename)?;
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(pool.max(1))
            .connect_with(options)
            .await?;
        Ok(SqliteStore {
            pool,
            audit: Arc::new(tokio::sync::Mutex::new(HitWriter::default())),
            file: (filename != Path::new(":memory:")).then_some(filename),
            windows: RwLock::new(None),
            hits: Arc::new(HitQueue::default()),
            hit_thread: std::sync::Mutex::new(None),
            outbox_backlog_bound: std::sync::atomic::AtomicU32::new(
                super::DEFAULT_OUTBOX_BACKLOG_BOUND,
            ),
        })
    }

    fn outbox_backlog_bound(&self) -> u32 {
        self.outbox_backlog_bound
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for SqliteStore {
    /// A store dropped without
    /// [`Administration::close`](crate::storage::Administration::close) still stops its
    /// writer thread (after what is queued).
    fn drop(&mut self) {
        self.hits.close();
    }
}

/// Creates the database's folder (0700) and file (0600) when missing, so only the
/// service's user can read requests and the audit trail. SQLite gives its `-wal` and
/// `-shm` files the main file's permissions. Existing paths are left as they are: the
/// folder may be shared (for example /tmp), and an operator may have chosen otherwise.
fn create_private(file: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = file.parent()
        && !dir.as_os_str().is_empty()
        && !dir.exists()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        builder.mode(0o700);
        builder.create(dir)?;
    }
    if !file.exists() {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options.mode(0o600);
        match options.open(file) {
            Ok(_) => {}
            // Another process created it first; fine.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Replaces the in-memory window index with the `windows` table. The one helper to
    /// call after anything deletes or rewrites windows other than a decision (which
    /// writes through itself): call it after that transaction commits, with the audit
    /// lock still held, so no decision's window slips in between the read and the swap.
    pub(crate) async fn reload_windows(&self) -> Result<(), StorageError> {
        type Stored = (String, String, String, String, String, String, i64, String);
        let rows: Vec<Stored> = sqlx::query_as(
            "SELECT agent, route, owner_id, tool, args_hash, server, expires_at, opened_by
             FROM windows",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut map = HashMap::with_capacity(rows.len());
        for (agent, route, owner_id, tool, args_hash, server, expires_at, opened_by) in rows {
            let corrupt = |what: &str| StorageError::Corrupt {
                id: opened_by.clone(),
                what: format!("window {what}"),
            };
            let key = WindowKey {
                agent,
                route,
                owner_id: OwnerId::from_stored(&owner_id).map_err(|_| corrupt("owner_id"))?,
                tool: ToolName::from_stored(&tool).map_err(|_| corrupt("tool"))?,
                args_hash: ArgsHash::parse(&args_hash).map_err(|_| corrupt("args_hash"))?,
                server: rows::window_server_back(&server, &corrupt)?,
            };
            let window = Window {
                key: key.clone(),
                expires_at: from_ms(expires_at).ok_or_else(|| corrupt("expiry"))?,
                opened_by: QuestionId::parse(&opened_by).map_err(|_| corrupt("opened_by"))?,
            };
            map.insert(key, window);
        }
        *self.windows.write().unwrap_or_else(PoisonError::into_inner) = Some(map);
        Ok(())
    }

    /// Takes the audit lock to write anything but a group commit of window hits: the
    /// writer may append to the chain, so the tip the lock holds is forgotten.
    async fn lock_audit(&self) -> AuditGuard {
        let mut guard = self.audit.clone().lock_owned().await;
        guard.tip = None;
        guard
    }

    /// Stores a window hit by group commit: the hits that arrive while one commit is in
    /// progress share the next commit and its fsync, so concurrent agents are not each
    /// held to one fsync's pace. Every caller is answered only after the commit that
    /// holds its hit, so `synchronous = FULL` still means what it says.
    ///
    /// One thread writes ([`hit_writer_loop`]): it takes everything queued, writes it,
    /// answers, and takes what came meanwhile, so the next batch starts the moment the
    /// last one has committed, and no caller's cancellation (an agent hanging up) can
    /// cut a batch short.
    ///
    /// Only window hits (terminal records) go this way: a caller that hangs up after
    /// queueing leaves its hit to be written all the same, which is harmless for a
    /// record that is already final, but would leave a pending request without its
    /// delivery and deadline.
    async fn insert_window_hit(
        &self,
        r: &Question,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError> {
        let (hit, waiting) = QueuedHit::new(r, now);
        if !self.enqueue(|state| state.queued.push(hit)) {
            return Err(StorageError::Batch("the store is closed".into()));
        }
        waiting.outcome().await
    }

    /// Queues for the group commit (`push` puts the entry in), starting its writer if
    /// none runs, and wakes it. `false`: the store is closing and nothing was queued.
    fn enqueue(&self, push: impl FnOnce(&mut HitQueueState)) -> bool {
        let start = {
            let mut state = self.hits.state();
            if state.closed {
                return false;
            }
            push(&mut state);
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            self.start_hit_writer();
        }
        self.hits.ready.notify_one();
        true
    }

    /// Starts the group commit's writer thread (the caller has marked it running).
    fn start_hit_writer(&self) {
        let writer = HitWriterThread {
            queue: self.hits.clone(),
            audit: self.audit.clone(),
            pool: self.pool.clone(),
            file: self.file.clone(),
            bound: self.outbox_backlog_bound(),
            runtime: tokio::runtime::Handle::current(),
        };
        let started = std::thread::Builder::new()
            .name("hitl-group-commit".into())
            .spawn(move || hit_writer_loop(writer));
        match started {
            Ok(thread) => {
                *self
                    .hit_thread
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some(thread);
            }
            Err(e) => {
                // No thread, no writer: the queued callers hear so, and the next hit
                // tries again.
                tracing::error!(error = %e, "could not start the group commit's thread");
                let mut state = self.hits.state();
                state.running = false;
                for hit in state.queued.drain(..) {
                    hit.fail(StorageError::Batch(format!("no writer thread: {e}")));
                }
                for report in state.reports.drain(..) {
                    report.fail(StorageError::Batch(format!("no writer thread: {e}")));
                }
            }
        }
    }

    /// A transaction that takes the write lock at once (`BEGIN IMMEDIATE`). A deferred
    /// one that reads first and writes later fails with SQLITE_BUSY, without waiting,
    /// when another connection wrote in between; an immediate one queues (busy_timeout).
    /// The audit lock and a write transaction under it: the one way to begin a
    /// transaction that appends audit or stream events (keep the guard as long as the
    /// transaction). Named and shaped as PostgreSQL's, so the statements in `sql` run
    /// under either.
    async fn audit_tx(
        &self,
    ) -> Result<(AuditGuard, sqlx::Transaction<'_, sqlx::Sqlite>), StorageError> {
        let audit = self.lock_audit().await;
        Ok((audit, self.write_tx().await?))
    }

    async fn write_tx(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StorageError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

/// Appends `events`, in order, to the audit chain inside `tx`: the chain's head is read
/// once, every hash is computed here, and the rows go in by multi-row `INSERT`s (a batch
/// of window hits costs two statements, not two per hit). The caller holds the audit
/// lock, so nobody appends in between.
async fn append_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    events: &[NewEvent],
) -> Result<(), StorageError> {
    // Read in the transaction rather than kept in memory: a cached head would have to
    // follow every rollback of every writer, and this read is one indexed row per batch.
    let last: Option<(i64, String)> =
        sqlx::query_as("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
            .fetch_optional(&mut **tx)
            .await?;
    let rows = rows::chain(last, events);
    for chunk in insert_runs(&rows) {
        let mut insert: QueryBuilder<Sqlite> = rows::insert_audit_rows(chunk);
        insert.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// What the group commit's writer thread works with.
struct HitWriterThread {
    queue: Arc<HitQueue>,
    audit: Arc<tokio::sync::Mutex<HitWriter>>,
    pool: SqlitePool,
    file: Option<std::path::PathBuf>,
    bound: u32,
    /// For the batches written through sqlx ([`write_mixed_hits`]).
    runtime: tokio::runtime::Handle,
}

/// The group commit's writer: takes every queued hit and report, writes them as one
/// batch ([`write_hits`]), and again, until the store closes and nothing is left.
fn hit_writer_loop(w: HitWriterThread) {
    loop {
        let (batch, reports) = {
            let mut state = w.queue.state();
            while state.is_empty() && !state.closed {
                state = w
                    .queue
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.is_empty() {
                state.running = false;
                return;
            }
            (
                std::mem::take(&mut state.queued),
                std::mem::take(&mut state.reports),
            )
        };
        // A panic loses this batch (its callers hear it was abandoned), not the writer.
        let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_hits(&w, batch, reports);
        }));
        if written.is_err() {
            tracing::error!("the group commit panicked; its batch was not answered");
        }
    }
}

/// Writes a batch of window hits and run reports under the audit lock and answers
/// every caller after the commit. A failure fails the whole batch (nothing of it is
/// stored, every caller gets the error): the only errors here are the database's own,
/// which would fail the others too.
///
/// A batch of plain hits (no interaction id or webhook: nothing to queue), the hot path
/// of an agent looping over an approved call and of a rule's answer, is written by the
/// lock's own connection ([`write_plain_hits`]), its reports in the same transaction. A
/// batch with any other hit, one whose idempotency key is already held, or a database
/// in memory, takes [`sql::insert_in`]'s path for those, one by one, in one sqlx
/// transaction, and its reports follow in one of their own.
fn write_hits(w: &HitWriterThread, batch: Vec<QueuedHit>, reports: Vec<QueuedReport>) {
    let mut audit = w.audit.blocking_lock();
    let plain = match &w.file {
        Some(file) if batch.iter().all(is_plain) => {
            Some(write_plain_hits(&mut audit, file, &batch, &reports))
        }
        _ => None,
    };
    let (written, reported) = match plain {
        Some(Ok(reported)) => (Ok(batch_of_new(batch.len())), Ok(reported)),
        Some(Err(Plain::Failed(e))) => {
            reports::answer(reports, Err(&e));
            hits::answer(batch, Err(e));
            return;
        }
        // An idempotency key already held (a retried request): the sqlx path finds the
        // request that holds it, and answers with that one. The reports follow in a
        // transaction of their own.
        Some(Err(Plain::Taken)) | None => {
            audit.tip = None;
            let written = w
                .runtime
                .block_on(write_mixed_hits(&w.pool, &batch, w.bound));
            (written, write_reports_alone(&mut audit, w, &reports))
        }
    };
    hits::answer(batch, written);
    reports::answer(reports, reported.as_deref());
    drop(audit);
}

/// Reports of a batch whose hits went the sqlx way: in a transaction of their own on
/// the lock's connection. Reports are queued only where the database is a file.
fn write_reports_alone(
    audit: &mut HitWriter,
    w: &HitWriterThread,
    reports: &[QueuedReport],
) -> Result<Vec<bool>, StorageError> {
    match &w.file {
        _ if reports.is_empty() => Ok(Vec::new()),
        Some(file) => write_plain_hits(audit, file, &[], reports).map_err(|e| match e {
            Plain::Failed(e) => e,
            // No hit, no key to find taken.
            Plain::Taken => StorageError::Batch("a run report met a key conflict".into()),
        }),
        None => Err(StorageError::Batch(
            "a run report was queued for a database in memory".into(),
        )),
    }
}

/// `n` results of hits that were all stored as they came.
fn batch_of_new(n: usize) -> Vec<Option<Inserted>> {
    std::iter::repeat_with(|| None).take(n).collect()
}

/// A batch with hits that need [`sql::insert_in`], in one transaction ([`insert_hits`]).
async fn write_mixed_hits(
    pool: &SqlitePool,
    batch: &[QueuedHit],
    bound: u32,
) -> Result<Vec<Option<Inserted>>, StorageError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let results = insert_hits(&mut tx, batch, bound).await?;
    tx.commit().await?;
    Ok(results)
}

impl SqliteStore {
    /// See
    /// [`Windows::purge_expired_windows`](crate::storage::Windows::purge_expired_windows):
    /// under the audit lock, like every write of windows, and the cache follows.
    async fn purge_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError> {
        let _audit = self.lock_audit().await;
        let purged = sql::purge_expired_windows(&self.pool, now).await?;
        if let Some(map) = self
            .windows
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            map.retain(|_, w| w.is_live(now));
        }
        Ok(purged)
    }

    /// One read transaction is one WAL snapshot
    /// ([`Audit::audit_snapshot`](crate::storage::Audit::audit_snapshot)).
    async fn snapshot_tx(&self) -> Result<sqlx::Transaction<'_, Sqlite>, StorageError> {
        Ok(self.pool.begin().await?)
    }

    /// See [`Administration::backup_to`](crate::storage::Administration::backup_to).
    async fn backup_into(&self, file: &Path) -> Result<(), StorageError> {
        if file.exists() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} already exists; a backup never overwrites",
                    file.display()
                ),
            )
            .into());
        }
        // Created empty first with owner-only permissions: VACUUM INTO writes into an
        // empty file, and the copy holds everything the database does.
        create_private(file)?;
        let path = file.to_str().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is not UTF-8")
        })?;
        if let Err(e) = sqlx::query("VACUUM INTO ?")
            .bind(path)
            .execute(&self.pool)
            .await
        {
            let _ = std::fs::remove_file(file);
            return Err(e.into());
        }
        Ok(())
    }

    /// See [`Administration::close`](crate::storage::Administration::close).
    async fn shut_down(&self) {
        // The group commit writes what is queued, then stops.
        self.hits.close();
        let thread = self
            .hit_thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.pool.close().await;
    }
}

/// One process writes a SQLite database: every [`Coordination`] default holds.
impl Coordination for SqliteStore {}

/// Every stored window, in memory ([`SqliteStore::windows`]).
#[async_trait]
impl WindowCache for SqliteStore {
    async fn load_windows(&self) -> Result<(), StorageError> {
        let _audit = self.lock_audit().await;
        self.reload_windows().await
    }

    fn cached_window(&self, key: &WindowKey, now: OffsetDateTime) -> Option<Option<Window>> {
        let windows = self.windows.read().unwrap_or_else(PoisonError::into_inner);
        let map = windows.as_ref()?;
        Some(map.get(key).filter(|w| w.is_live(now)).cloned())
    }

    /// Mirrors, after its commit, the window a decision opened (the same rule as the
    /// SQL upsert: a later expiry replaces an earlier one, never the reverse).
    fn remember_window(&self, record: &Question) {
        let Some(until) = record.window_until() else {
            return;
        };
        let mut guard = self.windows.write().unwrap_or_else(PoisonError::into_inner);
        let Some(map) = guard.as_mut() else {
            return;
        };
        let key = record.window_key();
        // Stored at millisecond precision, as SQLite holds it.
        let expires_at = from_ms(ms(until)).unwrap_or(until);
        match map.get(&key) {
            Some(w) if w.expires_at >= expires_at => {}
            _ => {
                map.insert(
                    key.clone(),
                    Window {
                        key,
                        expires_at,
                        opened_by: record.id.clone(),
                    },
                );
            }
        }
    }

    fn forget_window(&self, revoked: &LiveWindow) {
        if let Some(map) = self
            .windows
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            && map
                .get(&revoked.window.key)
                .is_some_and(|w| w.opened_by == revoked.window.opened_by)
        {
            map.remove(&revoked.window.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MIGRATOR, sql};
    use sqlx::sqlite::SqlitePoolOptions;

    /// A read that scans a table that grows with every question answered makes every
    /// tap, poll and message edit slower as the database ages (B3's tap-to-response rose
    /// with the table until `answers_question` was added). SQLite's plan says whether a
    /// statement searches an index or scans.
    #[tokio::test]
    async fn reading_a_whole_question_searches_indexes_and_scans_no_table() {
        // One connection: each connection to `:memory:` is a database of its own.
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .unwrap();
        MIGRATOR.run(&pool).await.unwrap();
        let reads = [
            sql::QUESTION_BY_ID,
            sql::QUESTION_BY_TOKEN,
            // A route's history (`/stats`, the rule suggestions): the table only grows.
            sql::ENDED_IN_ROUTE,
            sql::DECIDED_IN_ROUTE,
        ];
        for read in reads {
            let plan: Vec<(i64, i64, i64, String)> =
                // The statements are the store's own constants, not outside input.
                sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {read}")))
                    .bind("cf_x")
                    .fetch_all(&pool)
                    .await
                    .unwrap();
            let steps: Vec<&str> = plan.iter().map(|(.., step)| step.as_str()).collect();
            assert!(
                steps.iter().any(|s| s.starts_with("SEARCH"))
                    && !steps.iter().any(|s| s.starts_with("SCAN")),
                "{read}: {steps:?}"
            );
        }
    }
}
