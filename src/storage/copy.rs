//! `migrate-to-postgres`: every row of a SQLite database copied into an empty PostgreSQL
//! one, in one transaction, and checked.
//!
//! The PostgreSQL schema is the SQLite schema as its migrations leave it (same tables,
//! same column names), plus an identity column `pos` where SQLite's `rowid` kept
//! insertion order: so the copy reads each table's columns from PostgreSQL's catalogue,
//! selects the same columns from SQLite in `rowid` order (which gives `pos` the same
//! order) and converts by the PostgreSQL type (`BIGINT`, `BOOLEAN`, `TEXT`, the only
//! ones the schema uses). Sequence numbers that outside readers keep (the audit trail's
//! `seq`, the event stream's `seq` an agent resumes from, answers' `seq`) are copied as
//! they are, and the identity sequences then continue after them. The audit chain is
//! copied row for row, so its hashes, and the head an operator wrote down, still hold.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, Postgres, QueryBuilder, Row};

use super::{ConnectMode, StorageError, connect, redact_url};
use crate::domain::audit::{self, Head, Report};

/// Every table, parents before the rows that reference them.
const TABLES: &[&str] = &[
    "confirmations",
    "answers",
    "copies",
    "strays",
    "selections",
    "reason_requests",
    "windows",
    "grants",
    "webhook_outbox",
    "agent_events",
    "audit_events",
    "route_chats",
    "mcp_servers",
    "mcp_tool_pins",
    "chat_rules",
    "away",
    "telegram_outages",
    "outage_alerts",
];

/// Tables of the PostgreSQL schema that hold no data to carry over: the migrations'
/// own, and what live replicas hold (the leader's lease, each replica's configuration),
/// which a single SQLite process never records.
const NOT_COPIED: &[&str] = &["_sqlx_migrations", "leases", "replica_configs"];

/// Rows written per `INSERT` (PostgreSQL takes at most 65,535 parameters a statement).
const BATCH: usize = 500;

/// What was copied, and the trail it carried.
#[derive(Debug)]
pub struct Copied {
    /// Rows per table, in [`TABLES`] order.
    pub tables: Vec<(&'static str, u64)>,
    /// Audit events in the trail, on both sides.
    pub events: u64,
    /// The trail's head, on both sides (`None` for an empty trail).
    pub head: Option<Head>,
}

/// Copies the SQLite database at `from` (migrated to the current schema first) into the
/// PostgreSQL database at `to` (migrated; it must hold no question and no audit event),
/// and checks that every table has as many rows on both sides and that the copied audit
/// trail verifies to the same events and head as the source's, before it commits. A
/// source whose trail fails verification is refused before `to` is connected to. The
/// SQLite file is only read (besides its migrations); stop the service first, or what it
/// writes meanwhile is not copied.
///
/// A copy must not carry a trail that fails verification, nor leave half of one behind:
/// the source's trail is verified before PostgreSQL is even connected to (a tampered
/// source leaves the target untouched, without even the schema), and the copied trail is
/// verified inside the copy's transaction, before its commit (a copy that does not match
/// its source leaves the target's tables empty, as migrated).
pub async fn sqlite_to_postgres(from: &str, to: &str) -> Result<Copied, StorageError> {
    let store = connect(from, ConnectMode::Existing).await?;
    let checked = async {
        store.migrate().await?;
        let (rows, statuses) = store.audit_snapshot().await?;
        Ok::<_, StorageError>(audit::check(&rows, &statuses, None))
    }
    .await;
    store.close().await;
    let source = checked?;
    refuse_broken(from, &source, "nothing was copied")?;
    let store = connect(to, ConnectMode::Create).await?;
    let migrated = store.migrate().await;
    store.close().await;
    migrated?;
    let source_pool = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(SqliteConnectOptions::from_str(from)?.read_only(true))
        .await?;
    // As the store's sessions (see `PgStore::connect`): no NOTICE noise in the log.
    let quiet = PgConnectOptions::from_str(to)?.options([("client_min_messages", "warning")]);
    let target = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(quiet)
        .await?;
    let copied = copy_all(&source_pool, &target, to, &source).await;
    source_pool.close().await;
    target.close().await;
    Ok(Copied {
        tables: copied?,
        events: source.events,
        head: source.head,
    })
}

/// Refuses a trail `audit verify` would refuse, naming every problem; `outcome` says what
/// became of the copy.
fn refuse_broken(url: &str, report: &Report, outcome: &str) -> Result<(), StorageError> {
    if report.problems.is_empty() {
        return Ok(());
    }
    let mut text = format!(
        "the audit trail at {} fails verification, so {outcome} ({} problem(s)):",
        redact_url(url),
        report.problems.len()
    );
    for p in &report.problems {
        text.push_str(&format!("\n  {p}"));
    }
    Err(StorageError::Copy(text))
}

/// The copy itself, in one transaction on `target` that commits only once the copied
/// trail verifies to what `source_trail` found in the source.
async fn copy_all(
    source: &SqlitePool,
    target: &PgPool,
    target_url: &str,
    source_trail: &Report,
) -> Result<Vec<(&'static str, u64)>, StorageError> {
    let mut tx = target.begin().await?;
    // A table this copy does not know would be left behind without a word.
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
    )
    .fetch_all(&mut *tx)
    .await?;
    if let Some(unknown) = tables
        .iter()
        .find(|t| !TABLES.contains(&t.as_str()) && !NOT_COPIED.contains(&t.as_str()))
    {
        return Err(StorageError::Copy(format!(
            "the PostgreSQL schema has a table this version does not copy: {unknown}"
        )));
    }
    let held: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM confirmations) + (SELECT count(*) FROM audit_events)",
    )
    .fetch_one(&mut *tx)
    .await?;
    if held > 0 {
        return Err(StorageError::Copy(
            "the PostgreSQL database already holds questions or audit events: copy into an \
             empty one"
                .into(),
        ));
    }
    let mut copied = Vec::new();
    for &table in TABLES {
        let n = copy_table(source, &mut tx, table).await?;
        let expected: i64 =
            sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(source)
                .await?;
        if i64::try_from(n).ok() != Some(expected) {
            return Err(StorageError::Copy(format!(
                "{table}: {n} rows copied of {expected}"
            )));
        }
        copied.push((table, n));
    }
    // What this transaction wrote, read back before it commits: on any doubt it rolls
    // back, and the target keeps no row of it.
    let (rows, statuses) = super::postgres::audit_snapshot_in(&mut tx).await?;
    let copy = audit::check(&rows, &statuses, None);
    refuse_broken(target_url, &copy, "the copy was rolled back")?;
    if (copy.events, &copy.head, copy.ended)
        != (source_trail.events, &source_trail.head, source_trail.ended)
    {
        return Err(StorageError::Copy(format!(
            "the copied audit trail differs from the original ({} events, head {}; the \
             original has {} events, head {}), so the copy was rolled back",
            copy.events,
            show_head(copy.head.as_ref()),
            source_trail.events,
            show_head(source_trail.head.as_ref()),
        )));
    }
    tx.commit().await?;
    Ok(copied)
}

fn show_head(head: Option<&Head>) -> String {
    head.map_or_else(|| "none".to_owned(), Head::to_string)
}

/// A column of a table as PostgreSQL has it.
struct Column {
    name: String,
    kind: String,
    identity: bool,
}

async fn copy_table(
    source: &SqlitePool,
    tx: &mut sqlx::Transaction<'_, Postgres>,
    table: &'static str,
) -> Result<u64, StorageError> {
    let columns: Vec<Column> = sqlx::query(
        "SELECT column_name::text, data_type::text, is_identity::text FROM \
         information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 \
         ORDER BY ordinal_position",
    )
    .bind(table)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .map(|r| Column {
        name: r.get(0),
        kind: r.get(1),
        identity: r.get::<String, _>(2) == "YES",
    })
    // `pos` is PostgreSQL's own insertion order: given by the inserts, in rowid order.
    .filter(|c| c.name != "pos")
    .collect();
    // Names from the catalogue of our own schema: nothing to quote.
    let names = columns
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT {names} FROM {table} ORDER BY rowid"
    )))
    .fetch_all(source)
    .await?;
    let overriding = if columns.iter().any(|c| c.identity) {
        " OVERRIDING SYSTEM VALUE"
    } else {
        ""
    };
    for chunk in rows.chunks(BATCH) {
        let mut insert: QueryBuilder<Postgres> =
            QueryBuilder::new(format!("INSERT INTO {table} ({names}){overriding} "));
        let mut failed = None;
        insert.push_values(chunk, |mut values, row| {
            for (i, column) in columns.iter().enumerate() {
                let bound = match column.kind.as_str() {
                    "bigint" => row.try_get::<Option<i64>, _>(i).map(|v| {
                        values.push_bind(v);
                    }),
                    "boolean" => row.try_get::<Option<bool>, _>(i).map(|v| {
                        values.push_bind(v);
                    }),
                    "text" => row.try_get::<Option<String>, _>(i).map(|v| {
                        values.push_bind(v);
                    }),
                    other => {
                        failed.get_or_insert(StorageError::Copy(format!(
                            "{table}.{}: type {other} is not copied",
                            column.name
                        )));
                        values.push_bind(None::<String>);
                        Ok(())
                    }
                };
                if let Err(e) = bound {
                    failed
                        .get_or_insert(StorageError::Copy(format!("{table}.{}: {e}", column.name)));
                    values.push_bind(None::<String>);
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        insert.build().execute(&mut **tx).await?;
    }
    // The identity sequences go on after the numbers copied.
    for column in columns.iter().filter(|c| c.identity) {
        let name = &column.name;
        sqlx::query(AssertSqlSafe(format!(
            "SELECT setval(pg_get_serial_sequence('{table}', '{name}'), \
             coalesce((SELECT max({name}) FROM {table}), 0) + 1, false)"
        )))
        .execute(&mut **tx)
        .await?;
    }
    Ok(rows.len() as u64)
}
