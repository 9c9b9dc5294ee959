//! The SQLite backend: one file in WAL mode, migrations embedded in the binary.

use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{FromRow, SqlitePool};
use time::OffsetDateTime;

use super::{
    AgentEvent, Answered, Decided, Gauges, IDEMPOTENCY_TTL, Inserted, LiveWindow, OutboxEntry,
    PendingEntry, StorageError, Store, WebhookAttempt,
};
use crate::domain::args_hash::ArgsHash;
use crate::domain::audit::{self, AuditEvent, GENESIS_HASH, NewEvent, StoredRow};
use crate::domain::confirmation::{
    Confirmation, Copy, Decision, Operator, Progress, Status, Step, Stray, Via, Window, WindowKey,
    rfc3339,
};
use crate::domain::ids::{
    CallbackToken, ConfirmationId, DeliveryId, IdempotencyKey, OwnerId, ToolName,
};
use crate::domain::interaction::{self, Answer, TimeoutAction};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

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
    /// [`Store::migrate`] has loaded the table, and lookups go to SQLite meanwhile (the
    /// CLI tools open a store without migrating). Written only after the transaction
    /// that changed the table has committed, under the audit lock like every window
    /// write, so it never shows a window the database does not hold. Only the service
    /// process writes windows, so no other process can make it stale.
    windows: RwLock<Option<HashMap<WindowKey, Window>>>,
    /// Window hits waiting for the group commit, and its writer thread; see
    /// [`SqliteStore::insert_window_hit`].
    hits: Arc<HitQueue>,
    /// The writer thread, started by the first window hit, joined by [`Store::close`].
    hit_thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
    /// `webhooks.max_backlog_per_agent`: an outcome whose agent already has this many
    /// undelivered webhooks gets its delivery dropped (audited) instead of queued. Set by
    /// the service at start ([`SqliteStore::set_webhook_backlog_bound`]); the CLI tools,
    /// which decide nothing, keep the default.
    webhook_backlog_bound: std::sync::atomic::AtomicU32,
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

/// A window hit waiting for the next group commit, and where its caller waits.
struct QueuedHit {
    record: Confirmation,
    now: OffsetDateTime,
    reply: tokio::sync::oneshot::Sender<Result<Inserted, StorageError>>,
}

impl SqliteStore {
    /// Opens (creating it and its folder if needed) the database at `url`
    /// (`sqlite://path/to/file.db`, or `sqlite::memory:`).
    pub async fn connect(url: &str) -> Result<SqliteStore, StorageError> {
        Self::open(url, true).await
    }

    /// Opens an existing database only (for tools such as `backup`, which must never
    /// create an empty one because of a wrong `database.url`).
    pub async fn connect_existing(url: &str) -> Result<SqliteStore, StorageError> {
        Self::open(url, false).await
    }

    async fn open(url: &str, create: bool) -> Result<SqliteStore, StorageError> {
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
            .max_connections(8)
            .connect_with(options)
            .await?;
        Ok(SqliteStore {
            pool,
            audit: Arc::new(tokio::sync::Mutex::new(HitWriter::default())),
            file: (filename != Path::new(":memory:")).then_some(filename),
            windows: RwLock::new(None),
            hits: Arc::new(HitQueue::default()),
            hit_thread: std::sync::Mutex::new(None),
            webhook_backlog_bound: std::sync::atomic::AtomicU32::new(
                crate::config::WebhookSettings::default().max_backlog_per_agent,
            ),
        })
    }

    /// Sets `webhooks.max_backlog_per_agent` (see the field's comment); at least 1.
    pub fn set_webhook_backlog_bound(&self, bound: u32) {
        self.webhook_backlog_bound
            .store(bound.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    fn webhook_backlog_bound(&self) -> u32 {
        self.webhook_backlog_bound
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl Drop for SqliteStore {
    /// A store dropped without [`Store::close`] still stops its writer thread (after
    /// what is queued).
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

/// The `decided_by_*` columns of an operator (all NULL when nobody decided).
fn operator_columns(op: &Option<Operator>) -> (Option<i64>, Option<String>, Option<String>) {
    match op {
        Some(op) => (
            i64::try_from(op.id).ok(),
            op.username.clone(),
            Some(op.name.clone()),
        ),
        None => (None, None, None),
    }
}

fn ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

#[derive(FromRow)]
struct Row {
    id: String,
    agent: String,
    route: String,
    chat_id: i64,
    tool: String,
    owner_id: String,
    args_hash: String,
    params_json: String,
    briefing: String,
    context: Option<String>,
    allow_edit: bool,
    window_seconds: i64,
    window_requested_seconds: Option<i64>,
    approved_once: bool,
    has_call: bool,
    idempotency_key: Option<String>,
    callback_token: String,
    callback_url: Option<String>,
    message_id: Option<i64>,
    status: String,
    via: Option<String>,
    reason: String,
    decided_by_id: Option<i64>,
    decided_by_username: Option<String>,
    decided_by_name: Option<String>,
    created_at: i64,
    expires_at: i64,
    decided_at: Option<i64>,
    interaction_json: Option<String>,
    result_json: Option<String>,
    timeout_action: Option<String>,
    denial_reason: Option<String>,
    extensions: i64,
    reminders_sent: i64,
    escalated_at: Option<i64>,
    reasons_requested: i64,
}

impl Row {
    fn into_domain(self) -> Result<Confirmation, StorageError> {
        let id = self.id.clone();
        let corrupt = |what: &str| StorageError::Corrupt {
            id: id.clone(),
            what: what.to_owned(),
        };
        let time = |v: i64| from_ms(v).ok_or_else(|| corrupt("time out of range"));
        let decided_by = match (self.decided_by_id, self.decided_by_name) {
            (Some(uid), Some(name)) => Some(Operator {
                id: u64::try_from(uid).map_err(|_| corrupt("decided_by_id"))?,
                username: self.decided_by_username,
                name,
            }),
            _ => None,
        };
        Ok(Confirmation {
            id: ConfirmationId::parse(&self.id).map_err(|_| corrupt("id"))?,
            agent: self.agent,
            route: self.route,
            chat_id: self.chat_id,
            tool: ToolName::from_stored(&self.tool).map_err(|_| corrupt("tool"))?,
            owner_id: OwnerId::from_stored(&self.owner_id).map_err(|_| corrupt("owner_id"))?,
            args_hash: ArgsHash::parse(&self.args_hash).map_err(|_| corrupt("args_hash"))?,
            params_json: self.params_json,
            briefing: self.briefing,
            context: self.context,
            allow_edit: self.allow_edit,
            window_seconds: u64::try_from(self.window_seconds)
                .map_err(|_| corrupt("window_seconds"))?,
            window_requested_seconds: self
                .window_requested_seconds
                .map(u64::try_from)
                .transpose()
                .map_err(|_| corrupt("window_requested_seconds"))?,
            approved_once: self.approved_once,
            has_call: self.has_call,
            idempotency_key: self
                .idempotency_key
                .map(|k| IdempotencyKey::parse(&k))
                .transpose()
                .map_err(|_| corrupt("idempotency_key"))?,
            callback_token: CallbackToken::parse(&self.callback_token)
                .map_err(|_| corrupt("callback_token"))?,
            callback_url: self.callback_url,
            message_id: self
                .message_id
                .map(i32::try_from)
                .transpose()
                .map_err(|_| corrupt("message_id"))?,
            status: Status::parse(&self.status).ok_or_else(|| corrupt("status"))?,
            via: self
                .via
                .map(|v| Via::parse(&v).ok_or_else(|| corrupt("via")))
                .transpose()?,
            reason: self.reason,
            decided_by,
            created_at: time(self.created_at)?,
            expires_at: time(self.expires_at)?,
            decided_at: self.decided_at.map(time).transpose()?,
            interaction: self
                .interaction_json
                .map(|j| {
                    // Stored only after it was checked; read back without the timeout cap
                    // (the config may have changed since).
                    serde_json::from_str(&j)
                        .ok()
                        .and_then(|v| interaction::parse(&v, f64::MAX).ok())
                        .map(std::sync::Arc::new)
                        .ok_or_else(|| corrupt("interaction_json"))
                })
                .transpose()?,
            result: self
                .result_json
                .map(|j| serde_json::from_str(&j).map_err(|_| corrupt("result_json")))
                .transpose()?,
            timeout_action: self
                .timeout_action
                .map(|a| TimeoutAction::parse(&a).ok_or_else(|| corrupt("timeout_action")))
                .transpose()?,
            answers: Vec::new(),
            copies: Vec::new(),
            strays: Vec::new(),
            denial_reason: self.denial_reason,
            progress: Progress {
                extensions: u32::try_from(self.extensions).map_err(|_| corrupt("extensions"))?,
                reminders_sent: u32::try_from(self.reminders_sent)
                    .map_err(|_| corrupt("reminders_sent"))?,
                escalated_at: self.escalated_at.map(time).transpose()?,
                reasons_requested: u32::try_from(self.reasons_requested)
                    .map_err(|_| corrupt("reasons_requested"))?,
            },
        })
    }
}

#[derive(FromRow)]
struct AnswerRow {
    respondent: String,
    user_id: Option<i64>,
    username: Option<String>,
    name: Option<String>,
    value_json: String,
    is_default: bool,
    once: bool,
    reason: Option<String>,
    at: i64,
}

/// [`hydrate`] for each of `rows`, in order.
async fn hydrate_all(
    conn: &mut sqlx::SqliteConnection,
    rows: Vec<Row>,
) -> Result<Vec<Confirmation>, StorageError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        out.push(hydrate(&mut *conn, row.into_domain()?).await?);
    }
    Ok(out)
}

/// Reads a question's answers and copies into it.
async fn hydrate(
    conn: &mut sqlx::SqliteConnection,
    mut r: Confirmation,
) -> Result<Confirmation, StorageError> {
    let corrupt = |what: &str| StorageError::Corrupt {
        id: r.id.to_string(),
        what: what.to_owned(),
    };
    let answers: Vec<AnswerRow> = sqlx::query_as(
        "SELECT respondent, user_id, username, name, value_json, is_default, once, reason, at
         FROM answers WHERE question_id = ? ORDER BY seq",
    )
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    let mut out = Vec::with_capacity(answers.len());
    for a in answers {
        out.push(Answer {
            respondent: a.respondent,
            by: match (a.user_id, a.name) {
                (Some(id), Some(name)) => Some(Operator {
                    id: u64::try_from(id).map_err(|_| corrupt("answer user_id"))?,
                    username: a.username,
                    name,
                }),
                _ => None,
            },
            value: serde_json::from_str(&a.value_json).map_err(|_| corrupt("answer value"))?,
            is_default: a.is_default,
            once: a.once,
            reason: a.reason,
            at: from_ms(a.at).ok_or_else(|| corrupt("answer time"))?,
        });
    }
    let copies: Vec<(String, i64, Option<i64>, bool)> = sqlx::query_as(
        "SELECT recipient, chat_id, message_id, outcome_shown FROM copies
         WHERE question_id = ? ORDER BY rowid",
    )
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    r.copies = copies
        .into_iter()
        .map(|(recipient, chat_id, message_id, outcome_shown)| Copy {
            recipient,
            chat_id,
            message_id: message_id.and_then(|m| i32::try_from(m).ok()),
            outcome_shown,
        })
        .collect();
    let strays: Vec<(i64, i64, bool)> = sqlx::query_as(
        "SELECT chat_id, message_id, outcome_shown FROM strays
         WHERE question_id = ? ORDER BY rowid",
    )
    .bind(r.id.as_str())
    .fetch_all(&mut *conn)
    .await?;
    r.strays = strays
        .into_iter()
        .filter_map(|(chat_id, message_id, outcome_shown)| {
            Some(Stray {
                chat_id,
                message_id: i32::try_from(message_id).ok()?,
                outcome_shown,
            })
        })
        .collect();
    r.answers = out;
    Ok(r)
}

/// Appends to the agent's event stream inside the caller's transaction.
async fn push_agent_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    r: &Confirmation,
    kind: &str,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> Result<(), StorageError> {
    sqlx::query(
        "INSERT INTO agent_events (agent, question_id, kind, data, at) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(&r.agent)
    .bind(r.id.as_str())
    .bind(kind)
    .bind(data.to_string())
    .bind(ms(at))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Stores an answer row inside the caller's transaction; false when this person had
/// already answered.
async fn insert_answer(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: &ConfirmationId,
    a: &Answer,
) -> Result<bool, StorageError> {
    let (uid, username, name) = operator_columns(&a.by);
    let done = sqlx::query(
        "INSERT INTO answers (question_id, respondent, user_id, username, name, value_json,
            is_default, once, reason, at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (question_id, user_id) WHERE user_id IS NOT NULL DO NOTHING",
    )
    .bind(id.as_str())
    .bind(&a.respondent)
    .bind(uid)
    .bind(username)
    .bind(name)
    .bind(a.value.to_string())
    .bind(a.is_default)
    .bind(a.once)
    .bind(a.reason.as_deref())
    .bind(ms(a.at))
    .execute(&mut **tx)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// `SELECT * FROM confirmations WHERE <clause>`, as a static string (sqlx only takes
/// SQL it can see is not built from input).
macro_rules! select_where {
    ($clause:literal) => {
        concat!("SELECT * FROM confirmations WHERE ", $clause)
    };
}

impl SqliteStore {
    /// Replaces the in-memory window index with the `windows` table. The one helper to
    /// call after anything deletes or rewrites windows other than a decision (which
    /// writes through itself): call it after that transaction commits, with the audit
    /// lock still held, so no decision's window slips in between the read and the swap.
    pub(crate) async fn reload_windows(&self) -> Result<(), StorageError> {
        let rows: Vec<(String, String, String, String, String, i64, String)> = sqlx::query_as(
            "SELECT agent, route, owner_id, tool, args_hash, expires_at, opened_by FROM windows",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut map = HashMap::with_capacity(rows.len());
        for (agent, route, owner_id, tool, args_hash, expires_at, opened_by) in rows {
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
            };
            let window = Window {
                key: key.clone(),
                expires_at: from_ms(expires_at).ok_or_else(|| corrupt("expiry"))?,
                opened_by: ConfirmationId::parse(&opened_by).map_err(|_| corrupt("opened_by"))?,
            };
            map.insert(key, window);
        }
        *self.windows.write().unwrap_or_else(PoisonError::into_inner) = Some(map);
        Ok(())
    }

    /// Mirrors, after its commit, the window a decision opened (the same rule as the
    /// SQL upsert: a later expiry replaces an earlier one, never the reverse).
    fn remember_window(&self, record: &Confirmation) {
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

    /// Stores one request in a transaction of its own (the caller holds the audit lock).
    async fn insert_alone(
        &self,
        r: &Confirmation,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError> {
        let mut tx = self.write_tx().await?;
        let inserted = insert_in(&mut tx, r, now, self.webhook_backlog_bound()).await?;
        tx.commit().await?;
        Ok(inserted)
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
        r: &Confirmation,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let start = {
            let mut state = self.hits.state();
            if state.closed {
                return Err(StorageError::Batch("the store is closed".into()));
            }
            state.queued.push(QueuedHit {
                record: r.clone(),
                now,
                reply,
            });
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            self.start_hit_writer();
        }
        self.hits.ready.notify_one();
        answer.await.unwrap_or_else(|_| Err(abandoned()))
    }

    /// Starts the group commit's writer thread (the caller has marked it running).
    fn start_hit_writer(&self) {
        let writer = HitWriterThread {
            queue: self.hits.clone(),
            audit: self.audit.clone(),
            pool: self.pool.clone(),
            file: self.file.clone(),
            bound: self.webhook_backlog_bound(),
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
                    let _ = hit
                        .reply
                        .send(Err(StorageError::Batch(format!("no writer thread: {e}"))));
                }
            }
        }
    }

    /// A transaction that takes the write lock at once (`BEGIN IMMEDIATE`). A deferred
    /// one that reads first and writes later fails with SQLITE_BUSY, without waiting,
    /// when another connection wrote in between; an immediate one queues (busy_timeout).
    async fn write_tx(&self) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StorageError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// Streams an interaction's new status (`delivered`) inside `tx`.
    async fn push_status_if_changed(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        id: &ConfirmationId,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let row = sqlx::query_as::<_, Row>(select_where!("id = ?"))
            .bind(id.as_str())
            .fetch_optional(&mut **tx)
            .await?;
        if let Some(row) = row {
            let record = hydrate(&mut *tx, row.into_domain()?).await?;
            if !record.is_terminal() {
                push_agent_event(
                    tx,
                    &record,
                    "status",
                    &record.step_event(Step::Delivered),
                    now,
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Ends the transaction of a step a pending question just took (its conditional
    /// update already made in `tx`): reads the question, streams the step, audits it
    /// (`by`, `detail`) and commits. Returns the question as it now is.
    async fn commit_step(
        &self,
        mut tx: sqlx::Transaction<'_, sqlx::Sqlite>,
        id: &ConfirmationId,
        step: Step,
        by: Option<&Operator>,
        detail: serde_json::Value,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let row = sqlx::query_as::<_, Row>(select_where!("id = ?"))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let record = hydrate(&mut tx, row.into_domain()?).await?;
        push_agent_event(&mut tx, &record, "status", &record.step_event(step), now).await?;
        append_event(&mut tx, &audit::step(id.as_str(), step, by, detail, now)).await?;
        tx.commit().await?;
        Ok(Some(record))
    }

    async fn fetch_one_where(
        &self,
        sql: &'static str,
        binds: &[&str],
    ) -> Result<Option<Confirmation>, StorageError> {
        let mut conn = self.pool.acquire().await?;
        let mut q = sqlx::query_as::<_, Row>(sql);
        for b in binds {
            q = q.bind(*b);
        }
        match q.fetch_optional(&mut *conn).await? {
            Some(row) => Ok(Some(hydrate(&mut conn, row.into_domain()?).await?)),
            None => Ok(None),
        }
    }
}

/// Queues the webhook of a request that just ended, inside the caller's transaction (the
/// caller holds the audit lock): the outcome and its delivery commit together or not at
/// all. When the agent already has `max_backlog` undelivered webhooks, the delivery is
/// stored as `dropped` with a `webhook_dropped` event instead: the oldest are kept (they
/// have waited longest, and a delivery once queued is never withdrawn), and the bound
/// holds exactly, because the count is read under the write lock of this transaction.
async fn enqueue_webhook(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    r: &Confirmation,
    now: OffsetDateTime,
    max_backlog: u32,
) -> Result<(), StorageError> {
    let Some(url) = &r.callback_url else {
        return Ok(());
    };
    // Through the partial index on pending rows: at most `max_backlog` entries to count.
    let (backlog,): (i64,) =
        sqlx::query_as("SELECT COUNT(*) FROM webhook_outbox WHERE agent = ? AND state = 'pending'")
            .bind(&r.agent)
            .fetch_one(&mut **tx)
            .await?;
    let backlog = u64::try_from(backlog).unwrap_or(0);
    let delivery_id = DeliveryId::generate();
    if backlog >= u64::from(max_backlog) {
        sqlx::query(
            "INSERT INTO webhook_outbox (delivery_id, confirmation_id, agent, url, created_at,
                 next_attempt_at, state, last_error, finished_at)
             VALUES (?, ?, ?, ?, ?, ?, 'dropped', ?, ?)",
        )
        .bind(delivery_id.as_str())
        .bind(r.id.as_str())
        .bind(&r.agent)
        .bind(url)
        .bind(ms(now))
        .bind(ms(now))
        .bind(format!(
            "dropped: the agent already had {backlog} undelivered webhooks"
        ))
        .bind(ms(now))
        .execute(&mut **tx)
        .await?;
        let event =
            audit::webhook_dropped(r.id.as_str(), delivery_id.as_str(), &r.agent, backlog, now);
        return append_event(tx, &event).await;
    }
    sqlx::query(
        "INSERT INTO webhook_outbox (delivery_id, confirmation_id, agent, url, created_at, next_attempt_at)
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(delivery_id.as_str())
    .bind(r.id.as_str())
    .bind(&r.agent)
    .bind(url)
    .bind(ms(now))
    .bind(ms(now))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Appends `event` to the audit chain inside `tx`. The caller holds the audit lock.
async fn append_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    event: &NewEvent,
) -> Result<(), StorageError> {
    append_events(tx, std::slice::from_ref(event)).await
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
    let (mut seq, mut prev_hash) = last.unwrap_or_else(|| (0, GENESIS_HASH.to_owned()));
    let mut rows = Vec::with_capacity(events.len());
    for event in events {
        seq += 1;
        let (detail, hash) = chained(&prev_hash, seq, event);
        let prev = std::mem::replace(&mut prev_hash, hash.clone());
        rows.push((seq, event, detail, prev, hash));
    }
    for chunk in insert_runs(&rows) {
        let mut insert = sqlx::QueryBuilder::new(
            "INSERT INTO audit_events (seq, at, confirmation_id, kind, actor, detail, prev_hash,
                hash) ",
        );
        insert.push_values(chunk, |mut row, (seq, event, detail, prev, hash)| {
            row.push_bind(*seq)
                .push_bind(ms(event.at))
                .push_bind(event.confirmation_id.as_deref())
                .push_bind(event.kind)
                .push_bind(event.actor.as_str())
                .push_bind(detail.as_str())
                .push_bind(prev.as_str())
                .push_bind(hash.as_str());
        });
        insert.build().execute(&mut **tx).await?;
    }
    Ok(())
}

/// `event` as the audit row numbered `seq` after the row hashed `prev_hash`: its detail
/// as stored, and its hash.
fn chained(prev_hash: &str, seq: i64, event: &NewEvent) -> (String, String) {
    let detail = event.detail.to_string();
    let hash = audit::chain_hash(
        prev_hash,
        seq,
        event.at,
        event.confirmation_id.as_deref(),
        event.kind,
        &event.actor,
        &detail,
    );
    (detail, hash)
}

/// Splits `rows` for multi-row `INSERT`s into runs of a power of two rows, largest
/// first, up to 256 (the widest table has 30 columns, and SQLite allows 32,766
/// parameters in one statement). A statement's text depends on its row count, and each
/// connection keeps its prepared statements by text: with powers of two, every batch size
/// reuses one of nine statements per table instead of preparing one per size.
fn insert_runs<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let len = if rows.len() >= 256 {
            256
        } else {
            1 << rows.len().ilog2()
        };
        let (run, rest) = rows.split_at(len);
        rows = rest;
        Some(run)
    })
}

#[derive(FromRow)]
struct AuditRow {
    seq: i64,
    at: i64,
    confirmation_id: Option<String>,
    kind: String,
    actor: String,
    detail: String,
    prev_hash: String,
    hash: String,
}

impl AuditRow {
    fn into_stored(self) -> Result<StoredRow, StorageError> {
        Ok(StoredRow {
            at: from_ms(self.at).ok_or_else(|| StorageError::Corrupt {
                id: format!("audit event {}", self.seq),
                what: "time".into(),
            })?,
            seq: self.seq,
            confirmation_id: self.confirmation_id,
            kind: self.kind,
            actor: self.actor,
            detail_text: self.detail,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

/// A window joined with the route and chat of the request that opened it.
#[derive(FromRow)]
struct WindowRow {
    agent: String,
    window_route: String,
    owner_id: String,
    tool: String,
    args_hash: String,
    expires_at: i64,
    opened_by: String,
    route: String,
    chat_id: i64,
}

/// The columns of a [`WindowRow`]; `w` is the window, `c` its opening request.
macro_rules! select_windows_where {
    ($clause:literal) => {
        concat!(
            "SELECT w.agent, w.route AS window_route, w.owner_id, w.tool, w.args_hash,
                    w.expires_at, w.opened_by, c.route, c.chat_id
             FROM windows w JOIN confirmations c ON c.id = w.opened_by
             WHERE ",
            $clause
        )
    };
}

impl WindowRow {
    fn into_domain(self) -> Result<LiveWindow, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt {
            id: self.opened_by.clone(),
            what: what.to_owned(),
        };
        Ok(LiveWindow {
            window: Window {
                key: WindowKey {
                    owner_id: OwnerId::from_stored(&self.owner_id)
                        .map_err(|_| corrupt("window owner_id"))?,
                    tool: ToolName::from_stored(&self.tool).map_err(|_| corrupt("window tool"))?,
                    args_hash: ArgsHash::parse(&self.args_hash)
                        .map_err(|_| corrupt("window args_hash"))?,
                    agent: self.agent.clone(),
                    route: self.window_route.clone(),
                },
                expires_at: from_ms(self.expires_at).ok_or_else(|| corrupt("window expiry"))?,
                opened_by: ConfirmationId::parse(&self.opened_by)
                    .map_err(|_| corrupt("opened_by"))?,
            },
            route: self.route.clone(),
            chat_id: self.chat_id,
        })
    }
}

fn from_ms(v: i64) -> Option<OffsetDateTime> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(v) * 1_000_000).ok()
}

#[derive(FromRow)]
struct OutboxRow {
    delivery_id: String,
    confirmation_id: String,
    agent: String,
    url: String,
    created_at: i64,
    attempts: i64,
}

impl OutboxRow {
    fn into_entry(self) -> Result<OutboxEntry, StorageError> {
        let corrupt = |what: &str| StorageError::Corrupt {
            id: self.delivery_id.clone(),
            what: what.to_owned(),
        };
        Ok(OutboxEntry {
            delivery_id: DeliveryId::parse(&self.delivery_id)
                .map_err(|_| corrupt("delivery_id"))?,
            confirmation_id: ConfirmationId::parse(&self.confirmation_id)
                .map_err(|_| corrupt("confirmation_id"))?,
            created_at: from_ms(self.created_at).ok_or_else(|| corrupt("created_at"))?,
            attempts: u32::try_from(self.attempts).unwrap_or(u32::MAX),
            agent: self.agent,
            url: self.url,
        })
    }
}

/// Moves a pending question to its outcome inside `tx` (the caller holds the audit lock):
/// one conditional update, then, when it applied, the default answer (if any), the stream
/// and audit events, the webhook and the confirmation window, all in the same transaction.
async fn apply_decision(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: &ConfirmationId,
    d: &Decision,
    max_backlog: u32,
) -> Result<Decided, StorageError> {
    let (by_id, by_username, by_name) = operator_columns(&d.decided_by);
    // The `status = 'pending'` guard is the whole exactly-once story: of any number of
    // concurrent decisions, one changes a row and every other changes none.
    let changed = sqlx::query(
        "UPDATE confirmations SET status = ?, via = ?, reason = ?, decided_by_id = ?,
                decided_by_username = ?, decided_by_name = ?, decided_at = ?, result_json = ?,
                timeout_action = ?, approved_once = ?, denial_reason = ?
             WHERE id = ? AND status = 'pending'",
    )
    .bind(d.status.as_str())
    .bind(d.via.as_str())
    .bind(&d.reason)
    .bind(by_id)
    .bind(by_username)
    .bind(by_name)
    .bind(ms(d.decided_at))
    .bind(d.result.as_ref().map(|v| v.to_string()))
    .bind(d.timeout_action.map(TimeoutAction::as_str))
    .bind(d.once)
    .bind(d.denial_reason.as_deref())
    .bind(id.as_str())
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    // A default applied on timeout is stored as an answer, marked as a default, so
    // the agent sees it as a HumanResponse like any other.
    let default_answer = match (&d.result, d.via, d.status) {
        (Some(value), Via::Timeout, Status::Completed) if changed => Some(Answer {
            respondent: "system".into(),
            by: None,
            value: value.clone(),
            is_default: true,
            once: false,
            reason: None,
            at: d.decided_at,
        }),
        _ => None,
    };
    if let Some(a) = &default_answer {
        insert_answer(tx, id, a).await?;
    }
    let row = sqlx::query_as::<_, Row>(select_where!("id = ?"))
        .bind(id.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    let Some(record) = row.map(Row::into_domain).transpose()? else {
        return Ok(Decided::NotFound);
    };
    let record = hydrate(tx, record).await?;
    if !changed {
        return Ok(Decided::AlreadyTerminal(record));
    }
    if let Some(a) = &default_answer {
        append_event(tx, &audit::answered(id.as_str(), a)).await?;
        push_agent_event(
            tx,
            &record,
            "response",
            &record.response_event(a),
            d.decided_at,
        )
        .await?;
    }
    push_agent_event(tx, &record, "status", &record.status_event(), d.decided_at).await?;
    append_event(tx, &audit::decided(&record)).await?;
    enqueue_webhook(tx, &record, d.decided_at, max_backlog).await?;
    if let Some(until) = record.window_until() {
        sqlx::query(
            "INSERT INTO windows (agent, route, owner_id, tool, args_hash, expires_at, opened_by)
                 VALUES (?, ?, ?, ?, ?, ?, ?)
                 ON CONFLICT (agent, route, owner_id, tool, args_hash)
                 DO UPDATE SET expires_at = excluded.expires_at, opened_by = excluded.opened_by
                 WHERE excluded.expires_at > windows.expires_at",
        )
        .bind(&record.agent)
        .bind(&record.route)
        .bind(record.owner_id.as_str())
        .bind(record.tool.as_str())
        .bind(record.args_hash.as_str())
        .bind(ms(until))
        .bind(record.id.as_str())
        .execute(&mut **tx)
        .await?;
    }
    Ok(Decided::Applied(record))
}

/// The error of a window hit whose group commit ended without answering it (its
/// writing task died): whether it was stored is not known, so the agent is told of a
/// storage error, never of an outcome.
fn abandoned() -> StorageError {
    StorageError::Batch("the group commit holding this window hit was abandoned".into())
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

/// The group commit's writer: takes every queued hit, writes them as one batch
/// ([`write_hits`]), and again, until the store closes and nothing is left.
fn hit_writer_loop(w: HitWriterThread) {
    loop {
        let batch = {
            let mut state = w.queue.state();
            while state.queued.is_empty() && !state.closed {
                state = w
                    .queue
                    .ready
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.queued.is_empty() {
                state.running = false;
                return;
            }
            std::mem::take(&mut state.queued)
        };
        // A panic loses this batch (its callers hear `abandoned`), not the writer.
        let written =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_hits(&w, batch)));
        if written.is_err() {
            tracing::error!("the group commit panicked; its batch was not answered");
        }
    }
}

/// Writes a batch of window hits under the audit lock and answers every caller after
/// the commit. A failure fails the whole batch (nothing of it is stored, every caller
/// gets the error): the only errors here are the database's own, which would fail the
/// others too.
///
/// A batch of plain hits (no idempotency key, interaction id or webhook: nothing to
/// look up or queue), the hot path of an agent looping over an approved call, is
/// written by the lock's own connection ([`write_plain_hits`]). A batch with any other
/// hit, or a database in memory, takes [`insert_in`]'s path for those, one by one, in
/// one sqlx transaction.
fn write_hits(w: &HitWriterThread, batch: Vec<QueuedHit>) {
    let mut audit = w.audit.blocking_lock();
    let written = match &w.file {
        Some(file) if batch.iter().all(is_plain) => {
            write_plain_hits(&mut audit, file, &batch).map(|()| batch_of_new(batch.len()))
        }
        _ => {
            audit.tip = None;
            w.runtime
                .block_on(write_mixed_hits(&w.pool, &batch, w.bound))
        }
    };
    match written {
        Ok(results) => {
            for (QueuedHit { record, reply, .. }, inserted) in batch.into_iter().zip(results) {
                // The caller may have hung up; its hit is stored all the same.
                let _ = reply.send(Ok(inserted.unwrap_or(Inserted::New(record))));
            }
        }
        Err(e) => {
            let why = e.to_string();
            for hit in batch {
                let _ = hit.reply.send(Err(StorageError::Batch(why.clone())));
            }
        }
    }
    drop(audit);
}

/// `n` results of hits that were all stored as they came.
fn batch_of_new(n: usize) -> Vec<Option<Inserted>> {
    std::iter::repeat_with(|| None).take(n).collect()
}

/// A hit with nothing to look up or queue besides its rows.
fn is_plain(hit: &QueuedHit) -> bool {
    let r = &hit.record;
    r.idempotency_key.is_none() && r.interaction.is_none() && r.callback_url.is_none()
}

/// A batch with hits that need [`insert_in`]: those one by one, the plain ones by
/// multi-row `INSERT`s, all in one transaction.
async fn write_mixed_hits(
    pool: &SqlitePool,
    batch: &[QueuedHit],
    bound: u32,
) -> Result<Vec<Option<Inserted>>, StorageError> {
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let mut results = Vec::with_capacity(batch.len());
    let mut plain = Vec::with_capacity(batch.len());
    for hit in batch {
        if is_plain(hit) {
            plain.push(hit);
            results.push(None);
        } else {
            results.push(Some(insert_in(&mut tx, &hit.record, hit.now, bound).await?));
        }
    }
    insert_plain_hits(&mut tx, &plain).await?;
    tx.commit().await?;
    Ok(results)
}

/// Opens the group commit's connection with the settings of the pool's (see
/// [`SqliteStore::open`]): every commit durable (`synchronous = FULL`), foreign keys
/// on, and a writer that finds the database locked waits rather than fails.
fn open_hit_writer(file: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open_with_flags(
        file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    Ok(conn)
}

/// Writes a batch of plain window hits ([`is_plain`]) in one `BEGIN IMMEDIATE`
/// transaction on the lock's own connection, from a blocking thread: for each hit its
/// record, its stream event and its audit row, chained from the tip the lock holds (read
/// when it holds none). On success the lock holds the new tip. A cached tip that turned
/// out stale (someone appended without clearing it) fails on the audit table's primary
/// key, and the batch is tried once more from the stored tip. A connection that failed
/// is dropped, so the next batch opens a fresh one.
fn write_plain_hits(
    writer: &mut HitWriter,
    file: &Path,
    batch: &[QueuedHit],
) -> Result<(), StorageError> {
    let batch_error = |e: rusqlite::Error| StorageError::Batch(e.to_string());
    let mut conn = match writer.conn.take() {
        Some(conn) => conn,
        None => open_hit_writer(file).map_err(batch_error)?,
    };
    let mut cached = writer.tip.take();
    loop {
        let from_cache = cached.is_some();
        match write_plain_tx(&mut conn, cached.take(), batch) {
            Ok(tip) => {
                writer.tip = Some(tip);
                writer.conn = Some(conn);
                return Ok(());
            }
            Err(e) if from_cache => {
                tracing::debug!(error = %e, "group commit failed on the cached audit tip; trying again from the stored one");
            }
            Err(e) => return Err(batch_error(e)),
        }
    }
}

/// One try of [`write_plain_hits`]; returns the chain's new tip.
fn write_plain_tx(
    conn: &mut rusqlite::Connection,
    tip: Option<AuditTip>,
    batch: &[QueuedHit],
) -> rusqlite::Result<AuditTip> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (mut seq, mut prev) = match tip {
        Some(tip) => tip,
        None => tx
            .query_row(
                "SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok((0, GENESIS_HASH.to_owned())),
                e => Err(e),
            })?,
    };
    {
        let mut records = tx.prepare_cached(INSERT_CONFIRMATION)?;
        let mut events = tx.prepare_cached(
            "INSERT INTO agent_events (agent, question_id, kind, data, at) VALUES (?, ?, ?, ?, ?)",
        )?;
        let mut audited = tx.prepare_cached(
            "INSERT INTO audit_events (seq, at, confirmation_id, kind, actor, detail, prev_hash,
                hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )?;
        for hit in batch {
            let r = &hit.record;
            let (by_id, by_username, by_name) = operator_columns(&r.decided_by);
            records.execute(rusqlite::params![
                r.id.as_str(),
                r.agent.as_str(),
                r.route.as_str(),
                r.chat_id,
                r.tool.as_str(),
                r.owner_id.as_str(),
                r.args_hash.as_str(),
                r.params_json.as_str(),
                r.briefing.as_str(),
                r.context.as_deref(),
                r.allow_edit,
                i64::try_from(r.window_seconds).unwrap_or(i64::MAX),
                r.idempotency_key.as_ref().map(|k| k.as_str()),
                r.callback_token.as_str(),
                r.callback_url.as_deref(),
                r.message_id.map(i64::from),
                r.status.as_str(),
                r.via.map(Via::as_str),
                r.reason.as_str(),
                by_id,
                by_username,
                by_name,
                ms(r.created_at),
                ms(r.expires_at),
                r.decided_at.map(ms),
                r.interaction.as_ref().map(|i| i.interaction_id.as_str()),
                r.interaction
                    .as_ref()
                    .map(|i| serde_json::Value::Object(i.raw.clone()).to_string()),
                r.window_requested_seconds
                    .map(|w| i64::try_from(w).unwrap_or(i64::MAX)),
                r.approved_once,
                r.has_call,
            ])?;
            events.execute(rusqlite::params![
                r.agent.as_str(),
                r.id.as_str(),
                "status",
                r.status_event().to_string(),
                ms(hit.now),
            ])?;
            let event = audit::window_hit(r);
            seq += 1;
            let (detail, hash) = chained(&prev, seq, &event);
            audited.execute(rusqlite::params![
                seq,
                ms(event.at),
                event.confirmation_id.as_deref(),
                event.kind,
                event.actor.as_str(),
                detail,
                prev.as_str(),
                hash.as_str(),
            ])?;
            prev = hash;
        }
    }
    tx.commit()?;
    Ok((seq, prev))
}

/// Stores plain window hits (see [`SqliteStore::write_hits`]) inside `tx`: what
/// [`insert_in`] does for a terminal record without an idempotency key, interaction id or
/// webhook, by multi-row `INSERT`s. Without `ON CONFLICT`: such a record's only unique
/// columns are its random id and callback token, so a conflict is a fault that fails the
/// batch.
async fn insert_plain_hits(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    hits: &[&QueuedHit],
) -> Result<(), StorageError> {
    if hits.is_empty() {
        return Ok(());
    }
    for chunk in insert_runs(hits) {
        insert_confirmations(chunk.iter().map(|h| &h.record))
            .build()
            .execute(&mut **tx)
            .await?;
        let mut events = sqlx::QueryBuilder::new(
            "INSERT INTO agent_events (agent, question_id, kind, data, at) ",
        );
        events.push_values(chunk, |mut row, h| {
            row.push_bind(h.record.agent.as_str())
                .push_bind(h.record.id.as_str())
                .push_bind("status")
                .push_bind(h.record.status_event().to_string())
                .push_bind(ms(h.now));
        });
        events.build().execute(&mut **tx).await?;
    }
    let audited: Vec<NewEvent> = hits.iter().map(|h| audit::window_hit(&h.record)).collect();
    append_events(tx, &audited).await
}

/// The columns of a stored request, in the order both writers bind them
/// ([`insert_confirmations`], [`write_plain_tx`]).
macro_rules! confirmation_columns {
    () => {
        "id, agent, route, chat_id, tool, owner_id, args_hash, params_json, briefing,
        context, allow_edit, window_seconds, idempotency_key, callback_token, callback_url,
        message_id, status, via, reason, decided_by_id, decided_by_username,
        decided_by_name, created_at, expires_at, decided_at, interaction_id,
        interaction_json, window_requested_seconds, approved_once, has_call"
    };
}

/// One request's row, for the group commit's prepared statement.
const INSERT_CONFIRMATION: &str = concat!(
    "INSERT INTO confirmations (",
    confirmation_columns!(),
    ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
);

/// `INSERT INTO confirmations … VALUES (…), (…)` for `records`, one row each: the one
/// column list for a single request and for a batch of window hits.
fn insert_confirmations<'r>(
    records: impl IntoIterator<Item = &'r Confirmation>,
) -> sqlx::QueryBuilder<sqlx::Sqlite> {
    let mut b = sqlx::QueryBuilder::new(concat!(
        "INSERT INTO confirmations (",
        confirmation_columns!(),
        ") "
    ));
    b.push_values(records, |mut row, r| {
        let (by_id, by_username, by_name) = operator_columns(&r.decided_by);
        row.push_bind(r.id.as_str())
            .push_bind(r.agent.as_str())
            .push_bind(r.route.as_str())
            .push_bind(r.chat_id)
            .push_bind(r.tool.as_str())
            .push_bind(r.owner_id.as_str())
            .push_bind(r.args_hash.as_str())
            .push_bind(r.params_json.as_str())
            .push_bind(r.briefing.as_str())
            .push_bind(r.context.as_deref())
            .push_bind(r.allow_edit)
            .push_bind(i64::try_from(r.window_seconds).unwrap_or(i64::MAX))
            .push_bind(r.idempotency_key.as_ref().map(|k| k.as_str()))
            .push_bind(r.callback_token.as_str())
            .push_bind(r.callback_url.as_deref())
            .push_bind(r.message_id.map(i64::from))
            .push_bind(r.status.as_str())
            .push_bind(r.via.map(Via::as_str))
            .push_bind(r.reason.as_str())
            .push_bind(by_id)
            .push_bind(by_username)
            .push_bind(by_name)
            .push_bind(ms(r.created_at))
            .push_bind(ms(r.expires_at))
            .push_bind(r.decided_at.map(ms))
            .push_bind(r.interaction.as_ref().map(|i| i.interaction_id.as_str()))
            .push_bind(
                r.interaction
                    .as_ref()
                    .map(|i| serde_json::Value::Object(i.raw.clone()).to_string()),
            )
            .push_bind(
                r.window_requested_seconds
                    .map(|w| i64::try_from(w).unwrap_or(i64::MAX)),
            )
            .push_bind(r.approved_once)
            .push_bind(r.has_call);
    });
    b
}

/// Stores a new request inside `tx` (the caller holds the audit lock and commits); see
/// [`Store::insert`].
async fn insert_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    r: &Confirmation,
    now: OffsetDateTime,
    max_backlog: u32,
) -> Result<Inserted, StorageError> {
    if let Some(key) = &r.idempotency_key {
        // Release the key if its request is older than the TTL, so it can be reused.
        sqlx::query(
            "UPDATE confirmations SET idempotency_key = NULL
             WHERE agent = ? AND idempotency_key = ? AND created_at <= ?",
        )
        .bind(&r.agent)
        .bind(key.as_str())
        .bind(ms(now - IDEMPOTENCY_TTL))
        .execute(&mut **tx)
        .await?;
    }
    let mut insert = insert_confirmations([r]);
    insert.push(" ON CONFLICT DO NOTHING");
    let done = insert.build().execute(&mut **tx).await?;
    if done.rows_affected() == 1 {
        if r.is_terminal() {
            append_event(tx, &audit::window_hit(r)).await?;
            enqueue_webhook(tx, r, now, max_backlog).await?;
        } else {
            append_event(tx, &audit::requested(r)).await?;
        }
        push_agent_event(tx, r, "status", &r.status_event(), now).await?;
        return Ok(Inserted::New(r.clone()));
    }
    // Another question holds the idempotency key or the interaction id (the only
    // unique columns an agent chooses).
    let existing = match (&r.idempotency_key, &r.interaction) {
        (Some(key), _) => {
            sqlx::query_as::<_, Row>(select_where!("agent = ? AND idempotency_key = ?"))
                .bind(&r.agent)
                .bind(key.as_str())
                .fetch_one(&mut **tx)
                .await?
        }
        (None, Some(i)) => {
            sqlx::query_as::<_, Row>(select_where!("agent = ? AND interaction_id = ?"))
                .bind(&r.agent)
                .bind(i.interaction_id.as_str())
                .fetch_one(&mut **tx)
                .await?
        }
        (None, None) => return Err(sqlx::Error::RowNotFound.into()),
    };
    let existing = hydrate(&mut *tx, existing.into_domain()?).await?;
    Ok(Inserted::Existing(existing))
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> Result<(), StorageError> {
        MIGRATOR.run(&self.pool).await?;
        let _audit = self.lock_audit().await;
        self.reload_windows().await
    }

    async fn ping(&self) -> Result<(), StorageError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn insert(
        &self,
        r: &Confirmation,
        now: OffsetDateTime,
    ) -> Result<Inserted, StorageError> {
        if r.is_terminal() {
            return self.insert_window_hit(r, now).await;
        }
        let _audit = self.lock_audit().await;
        // Boxed, here and in `insert_window_hit`: requests arriving together wait for the
        // audit lock by the thousand, and each waiting future is as large as its largest
        // state, which is the writing that comes after the lock.
        Box::pin(self.insert_alone(r, now)).await
    }

    async fn get(&self, id: &ConfirmationId) -> Result<Option<Confirmation>, StorageError> {
        self.fetch_one_where(select_where!("id = ?"), &[id.as_str()])
            .await
    }

    async fn find_by_token(
        &self,
        token: &CallbackToken,
    ) -> Result<Option<Confirmation>, StorageError> {
        self.fetch_one_where(select_where!("callback_token = ?"), &[token.as_str()])
            .await
    }

    async fn find_by_idempotency_key(
        &self,
        agent: &str,
        key: &IdempotencyKey,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let since = ms(now - IDEMPOTENCY_TTL).to_string();
        self.fetch_one_where(
            select_where!("agent = ? AND idempotency_key = ? AND created_at > CAST(? AS INTEGER)"),
            &[agent, key.as_str(), &since],
        )
        .await
    }

    async fn set_message_id(
        &self,
        id: &ConfirmationId,
        message_id: i32,
    ) -> Result<(), StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let chat: Option<(i64,)> = sqlx::query_as(
            "UPDATE confirmations SET message_id = ? WHERE id = ? RETURNING chat_id",
        )
        .bind(i64::from(message_id))
        .bind(id.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some((chat_id,)) = chat {
            let now = OffsetDateTime::now_utc();
            let event = audit::delivered(id.as_str(), chat_id, message_id, now);
            append_event(&mut tx, &event).await?;
            self.push_status_if_changed(&mut tx, id, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn decide(&self, id: &ConfirmationId, d: &Decision) -> Result<Decided, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let decided = apply_decision(&mut tx, id, d, self.webhook_backlog_bound()).await?;
        if let Decided::Applied(record) = &decided {
            tx.commit().await?;
            self.remember_window(record);
        }
        Ok(decided)
    }

    async fn live_window(
        &self,
        key: &WindowKey,
        now: OffsetDateTime,
    ) -> Result<Option<Window>, StorageError> {
        if let Some(map) = self
            .windows
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            return Ok(map.get(key).filter(|w| w.is_live(now)).cloned());
        }
        let row: Option<(i64, String)> = sqlx::query_as(
            "SELECT expires_at, opened_by FROM windows
             WHERE agent = ? AND route = ? AND owner_id = ? AND tool = ? AND args_hash = ?
               AND expires_at > ?",
        )
        .bind(&key.agent)
        .bind(&key.route)
        .bind(key.owner_id.as_str())
        .bind(key.tool.as_str())
        .bind(key.args_hash.as_str())
        .bind(ms(now))
        .fetch_optional(&self.pool)
        .await?;
        let Some((expires_at, opened_by)) = row else {
            return Ok(None);
        };
        let corrupt = |what: &str| StorageError::Corrupt {
            id: opened_by.clone(),
            what: what.to_owned(),
        };
        Ok(Some(Window {
            key: key.clone(),
            expires_at: from_ms(expires_at).ok_or_else(|| corrupt("window expiry"))?,
            opened_by: ConfirmationId::parse(&opened_by).map_err(|_| corrupt("opened_by"))?,
        }))
    }

    async fn mark_outcome_shown(&self, id: &ConfirmationId) -> Result<(), StorageError> {
        sqlx::query("UPDATE confirmations SET outcome_shown = 1 WHERE id = ?")
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn unshown_outcomes(&self) -> Result<Vec<Confirmation>, StorageError> {
        let mut conn = self.pool.acquire().await?;
        let rows: Vec<Row> = sqlx::query_as(select_where!(
            "status <> 'pending' AND ((outcome_shown = 0 AND message_id IS NOT NULL)
             OR EXISTS (SELECT 1 FROM copies c WHERE c.question_id = confirmations.id
                        AND c.outcome_shown = 0 AND c.message_id IS NOT NULL)
             OR EXISTS (SELECT 1 FROM strays s WHERE s.question_id = confirmations.id
                        AND s.outcome_shown = 0))
             ORDER BY decided_at"
        ))
        .fetch_all(&mut *conn)
        .await?;
        hydrate_all(&mut conn, rows).await
    }

    async fn count_pending(&self, agent: &str) -> Result<u64, StorageError> {
        let (n,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM confirmations WHERE agent = ? AND status = 'pending'",
        )
        .bind(agent)
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn pending(&self) -> Result<Vec<PendingEntry>, StorageError> {
        let rows: Vec<(String, i64, bool, bool, String)> = sqlx::query_as(
            "SELECT id, expires_at, message_id IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM copies c WHERE c.question_id = confirmations.id
                AND c.message_id IS NULL), attached, route
             FROM confirmations WHERE status = 'pending' ORDER BY expires_at",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(id, at, delivered, attached, route)| {
                let corrupt = |what: &str| StorageError::Corrupt {
                    id: id.clone(),
                    what: what.to_owned(),
                };
                Ok(PendingEntry {
                    id: ConfirmationId::parse(&id).map_err(|_| corrupt("id"))?,
                    expires_at: from_ms(at).ok_or_else(|| corrupt("expires_at"))?,
                    delivered,
                    attached,
                    route,
                })
            })
            .collect()
    }

    async fn purge_expired_windows(&self, now: OffsetDateTime) -> Result<u64, StorageError> {
        let _audit = self.lock_audit().await;
        let purged = sqlx::query("DELETE FROM windows WHERE expires_at <= ?")
            .bind(ms(now))
            .execute(&self.pool)
            .await?
            .rows_affected();
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

    async fn due_webhooks(
        &self,
        now: OffsetDateTime,
        limit: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT delivery_id, confirmation_id, agent, url, created_at, attempts
             FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= ?
             ORDER BY next_attempt_at LIMIT ?",
        )
        .bind(ms(now))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                let corrupt = |what: &str| StorageError::Corrupt {
                    id: r.delivery_id.clone(),
                    what: what.to_owned(),
                };
                Ok(OutboxEntry {
                    delivery_id: DeliveryId::parse(&r.delivery_id)
                        .map_err(|_| corrupt("delivery_id"))?,
                    confirmation_id: ConfirmationId::parse(&r.confirmation_id)
                        .map_err(|_| corrupt("confirmation_id"))?,
                    agent: r.agent.clone(),
                    url: r.url.clone(),
                    created_at: from_ms(r.created_at).ok_or_else(|| corrupt("created_at"))?,
                    attempts: u32::try_from(r.attempts).unwrap_or(u32::MAX),
                })
            })
            .collect()
    }

    async fn next_webhook_due(&self) -> Result<Option<OffsetDateTime>, StorageError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT MIN(next_attempt_at) FROM webhook_outbox WHERE state = 'pending'",
        )
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(v,)| v).and_then(from_ms))
    }

    async fn webhook_attempted(
        &self,
        entry: &OutboxEntry,
        result: WebhookAttempt,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let id = entry.delivery_id.as_str();
        let (q, event) = match &result {
            WebhookAttempt::Delivered => (
                sqlx::query(
                    "UPDATE webhook_outbox SET state = 'delivered', attempts = attempts + 1,
                        last_error = NULL, finished_at = ? WHERE delivery_id = ?",
                )
                .bind(ms(now)),
                Some(audit::webhook(
                    entry.confirmation_id.as_str(),
                    id,
                    true,
                    None,
                    now,
                )),
            ),
            WebhookAttempt::Retry { next_at, error } => (
                sqlx::query(
                    "UPDATE webhook_outbox SET attempts = attempts + 1, next_attempt_at = ?,
                        last_error = ? WHERE delivery_id = ?",
                )
                .bind(ms(*next_at))
                .bind(error.as_str()),
                None,
            ),
            WebhookAttempt::GiveUp { error } => (
                sqlx::query(
                    "UPDATE webhook_outbox SET state = 'given_up', attempts = attempts + 1,
                        last_error = ?, finished_at = ? WHERE delivery_id = ?",
                )
                .bind(error.as_str())
                .bind(ms(now)),
                Some(audit::webhook(
                    entry.confirmation_id.as_str(),
                    id,
                    false,
                    Some(error),
                    now,
                )),
            ),
        };
        let _audit = match event {
            Some(_) => Some(self.lock_audit().await),
            None => None,
        };
        let mut tx = self.write_tx().await?;
        q.bind(id).execute(&mut *tx).await?;
        if let Some(e) = &event {
            append_event(&mut tx, e).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn due_webhooks_by_agent(
        &self,
        now: OffsetDateTime,
        per_agent: u32,
    ) -> Result<Vec<OutboxEntry>, StorageError> {
        // Each agent's rows ranked by when they are due (then by when they were queued),
        // and served rank by rank: one agent's thousand due rows come after every other
        // agent's first.
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT delivery_id, confirmation_id, agent, url, created_at, attempts FROM (
                 SELECT delivery_id, confirmation_id, agent, url, created_at, attempts,
                        next_attempt_at,
                        ROW_NUMBER() OVER (
                            PARTITION BY agent ORDER BY next_attempt_at, created_at, delivery_id
                        ) AS turn
                 FROM webhook_outbox WHERE state = 'pending' AND next_attempt_at <= ?
             ) WHERE turn <= ? ORDER BY turn, next_attempt_at, delivery_id",
        )
        .bind(ms(now))
        .bind(i64::from(per_agent))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(OutboxRow::into_entry).collect()
    }

    async fn next_webhook_due_after(
        &self,
        after: OffsetDateTime,
    ) -> Result<Option<OffsetDateTime>, StorageError> {
        let row: Option<(Option<i64>,)> = sqlx::query_as(
            "SELECT MIN(next_attempt_at) FROM webhook_outbox
             WHERE state = 'pending' AND next_attempt_at > ?",
        )
        .bind(ms(after))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(v,)| v).and_then(from_ms))
    }

    async fn record_event(&self, event: NewEvent) -> Result<(), StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        append_event(&mut tx, &event).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn events_for(&self, id: &ConfirmationId) -> Result<Vec<AuditEvent>, StorageError> {
        let rows: Vec<AuditRow> =
            sqlx::query_as("SELECT * FROM audit_events WHERE confirmation_id = ? ORDER BY seq")
                .bind(id.as_str())
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter()
            .map(|r| {
                let s = r.into_stored()?;
                Ok(AuditEvent {
                    detail: serde_json::from_str(&s.detail_text).unwrap_or(serde_json::Value::Null),
                    seq: s.seq,
                    at: s.at,
                    confirmation_id: s.confirmation_id,
                    kind: s.kind,
                    actor: s.actor,
                    prev_hash: s.prev_hash,
                    hash: s.hash,
                })
            })
            .collect()
    }

    async fn audit_rows(
        &self,
        since: Option<OffsetDateTime>,
    ) -> Result<Vec<StoredRow>, StorageError> {
        let rows: Vec<AuditRow> =
            sqlx::query_as("SELECT * FROM audit_events WHERE at >= ? ORDER BY seq")
                .bind(since.map_or(i64::MIN, ms))
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter().map(AuditRow::into_stored).collect()
    }

    async fn audit_snapshot(
        &self,
    ) -> Result<(Vec<StoredRow>, Vec<audit::StoredStatus>), StorageError> {
        // One read transaction is one WAL snapshot: a decision committed between the two
        // queries is in both or in neither.
        let mut tx = self.pool.begin().await?;
        let rows: Vec<AuditRow> = sqlx::query_as("SELECT * FROM audit_events ORDER BY seq")
            .fetch_all(&mut *tx)
            .await?;
        let statuses: Vec<(String, String)> =
            sqlx::query_as("SELECT id, status FROM confirmations ORDER BY created_at, id")
                .fetch_all(&mut *tx)
                .await?;
        tx.rollback().await?;
        let rows = rows
            .into_iter()
            .map(AuditRow::into_stored)
            .collect::<Result<_, _>>()?;
        let statuses = statuses
            .into_iter()
            .map(|(id, status)| audit::StoredStatus { id, status })
            .collect();
        Ok((rows, statuses))
    }

    async fn audit_head(&self) -> Result<audit::Head, StorageError> {
        let last: Option<(i64, String)> =
            sqlx::query_as("SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1")
                .fetch_optional(&self.pool)
                .await?;
        match last {
            None => Ok(audit::Head::genesis()),
            Some((seq, hash)) => audit::Head::new(seq, &hash).map_err(|e| StorageError::Corrupt {
                id: format!("audit event {seq}"),
                what: format!("hash: {e}"),
            }),
        }
    }

    async fn route_chats(&self) -> Result<Vec<(String, i64)>, StorageError> {
        Ok(sqlx::query_as("SELECT route, chat_id FROM route_chats")
            .fetch_all(&self.pool)
            .await?)
    }

    async fn move_route_chat(
        &self,
        route: &str,
        from_chat: i64,
        to_chat: i64,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        append_event(&mut tx, &audit::route_moved(route, from_chat, to_chat, now)).await?;
        sqlx::query(
            "INSERT INTO route_chats (route, chat_id, updated_at) VALUES (?, ?, ?)
             ON CONFLICT (route) DO UPDATE SET chat_id = excluded.chat_id, updated_at = excluded.updated_at",
        )
        .bind(route)
        .bind(to_chat)
        .bind(ms(now))
        .execute(&mut *tx)
        .await?;
        // Pending requests of the old chat now live in the new one: taps come from there.
        sqlx::query(
            "UPDATE confirmations SET chat_id = ? WHERE route = ? AND chat_id = ? AND status = 'pending'",
        )
        .bind(to_chat)
        .bind(route)
        .bind(from_chat)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn find_interaction(
        &self,
        agent: &str,
        interaction_id: &str,
    ) -> Result<Option<Confirmation>, StorageError> {
        self.fetch_one_where(
            select_where!("agent = ? AND interaction_id = ?"),
            &[agent, interaction_id],
        )
        .await
    }

    async fn find_by_message(
        &self,
        chat_id: i64,
        message_id: i32,
    ) -> Result<Option<Confirmation>, StorageError> {
        let (chat, message) = (chat_id.to_string(), message_id.to_string());
        self.fetch_one_where(
            select_where!(
                "(chat_id = CAST(?1 AS INTEGER) AND message_id = CAST(?2 AS INTEGER))
                 OR id = (SELECT question_id FROM copies
                          WHERE chat_id = CAST(?1 AS INTEGER) AND message_id = CAST(?2 AS INTEGER))
                 OR id = (SELECT question_id FROM strays
                          WHERE chat_id = CAST(?1 AS INTEGER) AND message_id = CAST(?2 AS INTEGER))"
            ),
            &[&chat, &message],
        )
        .await
    }

    async fn add_copy(
        &self,
        id: &ConfirmationId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<bool, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let added = sqlx::query(
            "INSERT INTO copies (question_id, recipient, chat_id)
             SELECT id, ?1, ?2 FROM confirmations
             WHERE id = ?3 AND status = 'pending' AND chat_id <> ?2
             ON CONFLICT DO NOTHING",
        )
        .bind(recipient)
        .bind(chat_id)
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if added {
            append_event(
                &mut tx,
                &audit::copied(id.as_str(), recipient, chat_id, now),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    async fn set_copy_message_id(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<(), StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        sqlx::query("UPDATE copies SET message_id = ? WHERE question_id = ? AND chat_id = ?")
            .bind(i64::from(message_id))
            .bind(id.as_str())
            .bind(chat_id)
            .execute(&mut *tx)
            .await?;
        append_event(
            &mut tx,
            &audit::delivered(id.as_str(), chat_id, message_id, now),
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn mark_copy_shown(&self, id: &ConfirmationId, chat_id: i64) -> Result<(), StorageError> {
        sqlx::query("UPDATE copies SET outcome_shown = 1 WHERE question_id = ? AND chat_id = ?")
            .bind(id.as_str())
            .bind(chat_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn add_stray(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        // Not a stray when it is the question's own message or a copy's (a tap that
        // raced the storing of the id).
        let added = sqlx::query(
            "INSERT INTO strays (question_id, chat_id, message_id)
             SELECT id, ?2, ?3 FROM confirmations
             WHERE id = ?1 AND NOT (chat_id = ?2 AND message_id IS ?3)
               AND NOT EXISTS (SELECT 1 FROM copies c WHERE c.question_id = ?1
                               AND c.chat_id = ?2 AND c.message_id IS ?3)
             ON CONFLICT DO NOTHING",
        )
        .bind(id.as_str())
        .bind(chat_id)
        .bind(i64::from(message_id))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if added {
            append_event(
                &mut tx,
                &audit::copy_found(id.as_str(), chat_id, message_id, now),
            )
            .await?;
        }
        tx.commit().await?;
        drop(_audit);
        self.get(id).await
    }

    async fn mark_attached(&self, id: &ConfirmationId) -> Result<(), StorageError> {
        sqlx::query("UPDATE confirmations SET attached = 1 WHERE id = ?")
            .bind(id.as_str())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn mark_stray_shown(
        &self,
        id: &ConfirmationId,
        chat_id: i64,
        message_id: i32,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE strays SET outcome_shown = 1
             WHERE question_id = ? AND chat_id = ? AND message_id = ?",
        )
        .bind(id.as_str())
        .bind(chat_id)
        .bind(i64::from(message_id))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn add_answer(
        &self,
        id: &ConfirmationId,
        answer: &Answer,
        settles: Option<&Decision>,
    ) -> Result<Answered, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let row = sqlx::query_as::<_, Row>(select_where!("id = ?"))
            .bind(id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            return Ok(Answered::NotFound);
        };
        let record = row.into_domain()?;
        if record.is_terminal() {
            let record = hydrate(&mut tx, record).await?;
            return Ok(Answered::Closed(record));
        }
        let added = insert_answer(&mut tx, id, answer).await?;
        let record = hydrate(&mut tx, record).await?;
        if !added {
            return Ok(Answered::AlreadyAnswered(record));
        }
        append_event(&mut tx, &audit::answered(id.as_str(), answer)).await?;
        push_agent_event(
            &mut tx,
            &record,
            "response",
            &record.response_event(answer),
            answer.at,
        )
        .await?;
        let record = match settles {
            // The answer decides the question: both commit together, so no one ever sees
            // the answer stored and the question still open.
            Some(d) => match apply_decision(&mut tx, id, d, self.webhook_backlog_bound()).await? {
                Decided::Applied(r) => r,
                Decided::AlreadyTerminal(r) => return Ok(Answered::Closed(r)),
                Decided::NotFound => return Ok(Answered::NotFound),
            },
            None => {
                if record.interaction.is_some() && record.answers.len() == 1 {
                    push_agent_event(
                        &mut tx,
                        &record,
                        "status",
                        &record.status_event(),
                        answer.at,
                    )
                    .await?;
                }
                record
            }
        };
        tx.commit().await?;
        if settles.is_some() {
            self.remember_window(&record);
        }
        Ok(Answered::Added(record))
    }

    async fn selection(
        &self,
        id: &ConfirmationId,
        user_id: u64,
    ) -> Result<Vec<String>, StorageError> {
        let row: Option<(String,)> = sqlx::query_as(
            "SELECT keys_json FROM selections WHERE question_id = ? AND user_id = ?",
        )
        .bind(id.as_str())
        .bind(i64::try_from(user_id).unwrap_or(i64::MAX))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row
            .and_then(|(j,)| serde_json::from_str(&j).ok())
            .unwrap_or_default())
    }

    async fn set_selection(
        &self,
        id: &ConfirmationId,
        user_id: u64,
        keys: &[String],
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO selections (question_id, user_id, keys_json) VALUES (?, ?, ?)
             ON CONFLICT (question_id, user_id) DO UPDATE SET keys_json = excluded.keys_json",
        )
        .bind(id.as_str())
        .bind(i64::try_from(user_id).unwrap_or(i64::MAX))
        .bind(serde_json::to_string(keys).unwrap_or_else(|_| "[]".into()))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn agent_events(
        &self,
        agent: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AgentEvent>, StorageError> {
        let rows: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT seq, kind, data FROM agent_events WHERE agent = ? AND seq > ?
             ORDER BY seq LIMIT ?",
        )
        .bind(agent)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, kind, data)| AgentEvent { seq, kind, data })
            .collect())
    }

    async fn purge_agent_events(&self, before: OffsetDateTime) -> Result<u64, StorageError> {
        Ok(sqlx::query("DELETE FROM agent_events WHERE at < ?")
            .bind(ms(before))
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn last_agent_event(&self, agent: &str) -> Result<i64, StorageError> {
        let (n,): (Option<i64>,) =
            sqlx::query_as("SELECT MAX(seq) FROM agent_events WHERE agent = ?")
                .bind(agent)
                .fetch_one(&self.pool)
                .await?;
        Ok(n.unwrap_or(0))
    }

    async fn pending_in_chat(&self, chat_id: i64) -> Result<Vec<Confirmation>, StorageError> {
        let mut conn = self.pool.acquire().await?;
        let rows: Vec<Row> = sqlx::query_as(select_where!(
            "chat_id = ?1 AND status = 'pending' ORDER BY created_at, id"
        ))
        .bind(chat_id)
        .fetch_all(&mut *conn)
        .await?;
        hydrate_all(&mut conn, rows).await
    }

    async fn live_windows(
        &self,
        route: &str,
        now: OffsetDateTime,
    ) -> Result<Vec<LiveWindow>, StorageError> {
        let rows: Vec<WindowRow> = sqlx::query_as(select_windows_where!(
            "c.route = ?1 AND w.expires_at > ?2 ORDER BY w.expires_at, w.opened_by"
        ))
        .bind(route)
        .bind(ms(now))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(WindowRow::into_domain).collect()
    }

    async fn live_window_opened_by(
        &self,
        opened_by: &ConfirmationId,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError> {
        let row: Option<WindowRow> = sqlx::query_as(select_windows_where!(
            "w.opened_by = ?1 AND w.expires_at > ?2"
        ))
        .bind(opened_by.as_str())
        .bind(ms(now))
        .fetch_optional(&self.pool)
        .await?;
        row.map(WindowRow::into_domain).transpose()
    }

    async fn revoke_window(
        &self,
        opened_by: &ConfirmationId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<LiveWindow>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let row: Option<WindowRow> = sqlx::query_as(select_windows_where!(
            "w.opened_by = ?1 AND w.expires_at > ?2"
        ))
        .bind(opened_by.as_str())
        .bind(ms(now))
        .fetch_optional(&mut *tx)
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let live = row.into_domain()?;
        // Keyed by the window itself, not only by its opener: the write lock is held
        // since the read, so this deletes exactly the row just read.
        sqlx::query(
            "DELETE FROM windows
             WHERE agent = ?1 AND route = ?2 AND owner_id = ?3 AND tool = ?4
               AND args_hash = ?5 AND opened_by = ?6",
        )
        .bind(&live.window.key.agent)
        .bind(&live.window.key.route)
        .bind(live.window.key.owner_id.as_str())
        .bind(live.window.key.tool.as_str())
        .bind(live.window.key.args_hash.as_str())
        .bind(opened_by.as_str())
        .execute(&mut *tx)
        .await?;
        let event = audit::window_revoked(&live.window, &live.route, by, chat_id, now);
        append_event(&mut tx, &event).await?;
        tx.commit().await?;
        // The in-memory index follows the commit (the audit lock is still held, so no
        // decision's window slips in between): window hits stop at once.
        if let Some(map) = self
            .windows
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
            && map
                .get(&live.window.key)
                .is_some_and(|w| w.opened_by == *opened_by)
        {
            map.remove(&live.window.key);
        }
        Ok(Some(live))
    }

    async fn backup_to(&self, file: &Path) -> Result<(), StorageError> {
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

    async fn gauges(&self) -> Result<Gauges, StorageError> {
        // All read through partial indexes (pending rows, dropped deliveries), so a
        // scrape stays cheap however much history the database holds.
        let pending: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT agent, COUNT(*), MIN(created_at) FROM confirmations
             WHERE status = 'pending' GROUP BY agent",
        )
        .fetch_all(&self.pool)
        .await?;
        let (backlog,): (i64,) =
            sqlx::query_as("SELECT COUNT(*) FROM webhook_outbox WHERE state = 'pending'")
                .fetch_one(&self.pool)
                .await?;
        let dropped: Vec<(String, i64)> = sqlx::query_as(
            "SELECT agent, COUNT(*) FROM webhook_outbox WHERE state = 'dropped' GROUP BY agent",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(Gauges {
            oldest_pending_since: pending
                .iter()
                .map(|(_, _, since)| *since)
                .min()
                .and_then(from_ms),
            pending_by_agent: pending
                .into_iter()
                .map(|(agent, n, _)| (agent, u64::try_from(n).unwrap_or(0)))
                .collect(),
            webhook_backlog: u64::try_from(backlog).unwrap_or(0),
            webhook_dropped_by_agent: dropped
                .into_iter()
                .map(|(agent, n)| (agent, u64::try_from(n).unwrap_or(0)))
                .collect(),
        })
    }

    async fn request_reason(
        &self,
        id: &ConfirmationId,
        by: &Operator,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        // Asked again (a second tap), the request starts over: a new prompt replaces
        // the old one.
        let added = sqlx::query(
            "INSERT INTO reason_requests (question_id, user_id, chat_id, asked_at)
             SELECT id, ?2, ?3, ?4 FROM confirmations WHERE id = ?1 AND status = 'pending'
             ON CONFLICT (question_id, user_id) DO UPDATE
                 SET chat_id = excluded.chat_id, prompt_message_id = NULL,
                     asked_at = excluded.asked_at",
        )
        .bind(id.as_str())
        .bind(i64::try_from(by.id).unwrap_or(i64::MAX))
        .bind(chat_id)
        .bind(ms(now))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !added {
            return Ok(None);
        }
        sqlx::query(
            "UPDATE confirmations SET reasons_requested = reasons_requested + 1 WHERE id = ?",
        )
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?;
        let detail = json!({"chat_id": chat_id});
        self.commit_step(tx, id, Step::ReasonRequested, Some(by), detail, now)
            .await
    }

    async fn set_reason_prompt(
        &self,
        id: &ConfirmationId,
        user_id: u64,
        prompt_message_id: i32,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE reason_requests SET prompt_message_id = ? WHERE question_id = ? AND user_id = ?",
        )
        .bind(i64::from(prompt_message_id))
        .bind(id.as_str())
        .bind(i64::try_from(user_id).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn reason_request_for(
        &self,
        chat_id: i64,
        reply_to: i32,
        named: Option<&ConfirmationId>,
        user_id: u64,
    ) -> Result<Option<Confirmation>, StorageError> {
        // The reply may answer the prompt, or (if the prompt's id was never stored, or
        // the person replied to the question instead) any message of the question in
        // the chat where they asked.
        let found: Option<(String,)> = sqlx::query_as(
            "SELECT r.question_id FROM reason_requests r
             JOIN confirmations c ON c.id = r.question_id
             WHERE r.user_id = ?3 AND r.chat_id = ?1
               AND (r.prompt_message_id = ?2
                    OR r.question_id = ?4
                    OR (c.chat_id = ?1 AND c.message_id = ?2)
                    OR EXISTS (SELECT 1 FROM copies k WHERE k.question_id = c.id
                               AND k.chat_id = ?1 AND k.message_id = ?2))
             ORDER BY r.asked_at DESC LIMIT 1",
        )
        .bind(chat_id)
        .bind(i64::from(reply_to))
        .bind(i64::try_from(user_id).unwrap_or(i64::MAX))
        .bind(named.map(|id| id.as_str()))
        .fetch_optional(&self.pool)
        .await?;
        match found {
            Some((id,)) => match ConfirmationId::parse(&id) {
                Ok(id) => self.get(&id).await,
                Err(_) => Ok(None),
            },
            None => Ok(None),
        }
    }

    async fn extend(
        &self,
        id: &ConfirmationId,
        from: OffsetDateTime,
        to: OffsetDateTime,
        by: &Operator,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        // Conditional on the deadline the tap saw: two taps at once move it once.
        let moved = sqlx::query(
            "UPDATE confirmations SET expires_at = ?, extensions = extensions + 1
             WHERE id = ? AND status = 'pending' AND expires_at = ?",
        )
        .bind(ms(to))
        .bind(id.as_str())
        .bind(ms(from))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !moved {
            return Ok(None);
        }
        let detail = json!({"from": rfc3339(from), "to": rfc3339(to)});
        self.commit_step(tx, id, Step::Extended, Some(by), detail, now)
            .await
    }

    async fn claim_reminders(
        &self,
        id: &ConfirmationId,
        sent: u32,
        passed: u32,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let claimed = sqlx::query(
            "UPDATE confirmations SET reminders_sent = ?
             WHERE id = ? AND status = 'pending' AND reminders_sent = ?",
        )
        .bind(i64::from(passed))
        .bind(id.as_str())
        .bind(i64::from(sent))
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !claimed {
            return Ok(None);
        }
        let detail = json!({"reminder": passed});
        self.commit_step(tx, id, Step::Reminded, None, detail, now)
            .await
    }

    async fn escalate(
        &self,
        id: &ConfirmationId,
        recipient: &str,
        chat_id: i64,
        now: OffsetDateTime,
    ) -> Result<Option<Confirmation>, StorageError> {
        let _audit = self.lock_audit().await;
        let mut tx = self.write_tx().await?;
        let claimed = sqlx::query(
            "UPDATE confirmations SET escalated_at = ?
             WHERE id = ? AND status = 'pending' AND escalated_at IS NULL",
        )
        .bind(ms(now))
        .bind(id.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !claimed {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO copies (question_id, recipient, chat_id) VALUES (?, ?, ?)
             ON CONFLICT DO NOTHING",
        )
        .bind(id.as_str())
        .bind(recipient)
        .bind(chat_id)
        .execute(&mut *tx)
        .await?;
        let detail = json!({"to": recipient, "chat_id": chat_id});
        self.commit_step(tx, id, Step::Escalated, None, detail, now)
            .await
    }

    async fn close(&self) {
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

#[cfg(test)]
mod tests {
    use super::insert_runs;

    #[test]
    fn insert_runs_are_powers_of_two_largest_first_and_cover_every_row() {
        let rows: Vec<usize> = (0..600).collect();
        for n in [0, 1, 2, 3, 45, 64, 255, 256, 257, 600] {
            let runs: Vec<&[usize]> = insert_runs(&rows[..n]).collect();
            assert!(
                runs.iter()
                    .all(|r| r.len().is_power_of_two() && r.len() <= 256)
            );
            assert!(runs.windows(2).all(|w| w[0].len() >= w[1].len()), "{n}");
            assert_eq!(runs.concat(), rows[..n].to_vec(), "{n}");
        }
    }
}
