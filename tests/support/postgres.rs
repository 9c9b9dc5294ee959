//! A fresh PostgreSQL database per test, on the server `HITL_POSTGRES_URL` names
//! (default `postgres://postgres@127.0.0.1:5432/postgres`, whose user may create
//! databases): `CREATE DATABASE hitl_test_<random hex>` at the start, dropped again when
//! the [`PgDatabase`] goes (even when the test panicked).
//!
//! Without a reachable server the caller gets `None` and the test skips itself with a
//! note, unless `HITL_REQUIRE_POSTGRES=1` (set by `.ci/run`, which starts PostgreSQL):
//! then it fails.

#![allow(dead_code)] // each test executable uses a subset

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, ConnectOptions, Connection};

/// How long to wait for the server before calling it unreachable.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// The server the tests create their databases on.
pub fn server_url() -> String {
    std::env::var("HITL_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Whether `.ci/run` demands PostgreSQL (`HITL_REQUIRE_POSTGRES=1`) rather than letting
/// the tests skip without it.
pub fn required() -> bool {
    std::env::var("HITL_REQUIRE_POSTGRES").as_deref() == Ok("1")
}

/// A database of one test's own; dropped with this value.
pub struct PgDatabase {
    /// The database's URL, for the store.
    pub url: String,
    name: String,
    server: String,
}

impl PgDatabase {
    /// Creates a fresh, empty database, or says why the test is skipped (`None`).
    pub async fn create() -> Option<PgDatabase> {
        let server = server_url();
        // Printed without its password (`.ci/run` may set one).
        let shown = hitl_telegram::storage::redact_url(&server);
        let mut admin = match admin_connection(&server).await {
            Ok(conn) => conn,
            Err(e) => {
                assert!(
                    !required(),
                    "HITL_REQUIRE_POSTGRES=1 but PostgreSQL at {shown} cannot be reached: {e}"
                );
                eprintln!(
                    "skipped: no PostgreSQL at {shown} ({e}); set HITL_POSTGRES_URL, or \
                     HITL_REQUIRE_POSTGRES=1 to fail instead"
                );
                return None;
            }
        };
        let name = format!("hitl_test_{:016x}", rand::random::<u64>());
        // A name of our own making (hex digits): nothing to quote or escape.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .expect("CREATE DATABASE");
        let _ = admin.close().await;
        let mut url = reqwest::Url::parse(&server).expect("HITL_POSTGRES_URL is a URL");
        url.set_path(&format!("/{name}"));
        Some(PgDatabase {
            url: url.to_string(),
            name,
            server,
        })
    }
}

async fn admin_connection(server: &str) -> Result<PgConnection, String> {
    let options = PgConnectOptions::from_str(server).map_err(|e| e.to_string())?;
    match tokio::time::timeout(CONNECT_WAIT, options.connect()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {CONNECT_WAIT:?}")),
    }
}

impl Drop for PgDatabase {
    /// Drops the database on a thread of its own (a `Drop` cannot await, and the test's
    /// runtime may be gone or single-threaded). `WITH (FORCE)` ends the connections a
    /// store still holds. A failure only leaves a `hitl_test_*` database behind.
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let mut admin = admin_connection(&server).await?;
                sqlx::query(AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await
                .map_err(|e| e.to_string())?;
                let _ = admin.close().await;
                Ok::<(), String>(())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("note: could not drop test database {}: {e}", self.name);
        }
    }
}
