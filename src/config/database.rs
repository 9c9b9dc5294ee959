//! `[database]`: where the state is kept (SQLite or PostgreSQL), and the lease of the
//! replica that does the work that must happen once.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, invalid};

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://…` or `postgres://user:password@host/database`: may hold a password, so
    /// `Debug` shows it redacted.
    pub url: String,
    /// Several replicas on one PostgreSQL: how long the replica doing the work that must
    /// happen once (deadlines, posting questions, webhooks, the Redis bridge, polling)
    /// holds it without renewing; a replica that dies hands it over within this.
    #[serde(default = "default_lease_seconds")]
    pub lease_seconds: u64,
    /// Connections the service opens at most (unset: SQLite 8, PostgreSQL 10, plus the
    /// change feed's own there). Fewer costs less memory idle; more lets more reads run
    /// beside the one writer.
    #[serde(default)]
    pub pool_size: Option<u32>,
}

/// A few seconds: a dead replica's work waits this long for another; renewing a third
/// of it costs one statement every couple of seconds.
fn default_lease_seconds() -> u64 {
    5
}

/// The bounds of `database.lease_seconds`: renewed every third, a lease under 2 s renews
/// more often than a slow database answers; past 5 minutes a dead replica's questions
/// would miss their deadlines by that much.
const LEASE_SECONDS: std::ops::RangeInclusive<u64> = 2..=300;

/// The bounds of `database.pool_size`. Below 2 a write waiting for SQLite's lock or the
/// audit lock would hold the only connection that the reads it waits on need (the
/// suite's floor, measured in BENCHMARKS.md); past 100, PostgreSQL's default
/// `max_connections` would refuse a second replica.
pub const POOL_SIZE: std::ops::RangeInclusive<u32> = 2..=100;

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &crate::storage::redact_url(&self.url))
            .field("lease_seconds", &self.lease_seconds)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl DatabaseSettings {
    /// Checks `[database]`: the URL the storage opens, the lease's length and the pool's
    /// size.
    pub(super) fn checked(self) -> Result<(DatabaseUrl, Duration, Option<u32>), ConfigError> {
        match crate::storage::Backend::of_url(&self.url) {
            Err(_) => {
                return Err(invalid(
                    "database.url",
                    "must be a sqlite: URL (for example sqlite://data/hitl.db) or a postgres:// \
                     (or postgresql://) URL (for example postgres://hitl:PASSWORD@db.internal/hitl)",
                ));
            }
            Ok(crate::storage::Backend::Postgres) => {
                if let Err(e) = crate::storage::refuse_unknown_params(&self.url) {
                    let why = e.to_string();
                    let why = why.trim_start_matches("database.url: ");
                    return Err(invalid("database.url", why));
                }
            }
            Ok(crate::storage::Backend::Sqlite) => {}
        }
        if !LEASE_SECONDS.contains(&self.lease_seconds) {
            return Err(invalid(
                "database.lease_seconds",
                format!(
                    "{} is out of range: use {} to {} seconds",
                    self.lease_seconds,
                    LEASE_SECONDS.start(),
                    LEASE_SECONDS.end()
                ),
            ));
        }
        if let Some(n) = self.pool_size.filter(|n| !POOL_SIZE.contains(n)) {
            return Err(invalid(
                "database.pool_size",
                format!(
                    "{n} is out of range: use {} to {} connections",
                    POOL_SIZE.start(),
                    POOL_SIZE.end()
                ),
            ));
        }
        Ok((
            DatabaseUrl(self.url),
            Duration::from_secs(self.lease_seconds),
            self.pool_size,
        ))
    }
}

/// `database.url`, checked: a `sqlite:` or `postgres://` URL. It may hold a password,
/// so `Debug` shows it redacted; [`DatabaseUrl::as_str`] is the URL itself.
#[derive(Clone, PartialEq, Eq)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::ops::Deref for DatabaseUrl {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({:?})", crate::storage::redact_url(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{BASE, env, err_of};
    use crate::config::{Config, Settings};

    #[test]
    fn a_pool_size_is_taken_within_its_bounds_and_unset_means_the_backends_default() {
        let with =
            |extra: &str| BASE.replacen("[database]\n", &format!("[database]\n{extra}\n"), 1);
        let c = Config::from_settings(Settings::from_toml(BASE).unwrap(), &env).unwrap();
        assert_eq!(c.pool_size, None);
        let c = Config::from_settings(Settings::from_toml(&with("pool_size = 2")).unwrap(), &env)
            .unwrap();
        assert_eq!(c.pool_size, Some(2));
        for n in [0, 1, 101] {
            let e = err_of(&with(&format!("pool_size = {n}")));
            assert!(
                e.contains("database.pool_size") && e.contains("2 to 100"),
                "{n}: {e}"
            );
        }
    }

    #[test]
    fn a_postgres_url_is_accepted_other_schemes_are_refused_and_no_password_prints() {
        let with_url = |url: &str| BASE.replace("sqlite://data/hitl.db", url);
        for url in [
            "postgres://hitl:pg-secret@db.internal:5432/hitl",
            "postgresql://hitl:pg-secret@db.internal/hitl?sslmode=require",
        ] {
            let settings = Settings::from_toml(&with_url(url)).unwrap();
            assert!(!format!("{settings:?}").contains("pg-secret"));
            let c = Config::from_settings(settings, &env).unwrap();
            assert_eq!(c.database_url.as_str(), url);
            let dbg = format!("{c:?}");
            assert!(
                !dbg.contains("pg-secret") && dbg.contains("db.internal"),
                "{dbg}"
            );
        }
        for url in ["mysql://u:p@h/db", "data/hitl.db", "postgres:hitl"] {
            let e = err_of(&with_url(url));
            assert!(e.contains("database.url"), "{e}");
            assert!(!e.contains("u:p"), "{e}");
        }
        // A parameter the driver would ignore (and log with its value) is refused by name.
        let e = err_of(&with_url("postgres://hitl@db/hitl?sslpassword=pg-secret"));
        assert!(
            e.contains("database.url") && e.contains("'sslpassword'"),
            "{e}"
        );
        assert!(!e.contains("pg-secret"), "{e}");
    }
}
