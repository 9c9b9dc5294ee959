//! The service under test as a separate process: its own config, database and log, so
//! its memory figures are its own.

use std::io::{self, Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

/// Agent bearer token (loopback only; this is no secret).
pub const AGENT_TOKEN: &str = "bench-agent-token-0123456789abcdef";
const BOT_TOKEN: &str = "123456:bench-bot-token";

/// What the bench's service looks like: one agent, one route per private chat.
pub struct Setup {
    pub dir: PathBuf,
    pub port: u16,
    pub telegram_url: String,
    /// Private chats (the user id is the chat id, and the only approver of its route).
    pub chats: Vec<i64>,
    /// A PostgreSQL database instead of SQLite in `dir`.
    pub database_url: Option<String>,
    /// More configuration, appended (`[[rules]]`, say).
    pub extra: String,
}

impl Setup {
    pub fn route(i: usize) -> String {
        format!("chat{i}")
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn write_config(&self, name: &str) -> io::Result<PathBuf> {
        let mut c = String::new();
        let url = match &self.database_url {
            Some(url) => url.clone(),
            None => format!("sqlite://{}/hitl.db", self.dir.display()),
        };
        c.push_str(&format!(
            "[server]\nbind = \"127.0.0.1:{}\"\n\n[database]\nurl = \"{url}\"\n\n",
            self.port,
        ));
        c.push_str(&format!(
            "[telegram]\napi_url = \"{}\"\npoll_timeout_seconds = 10\n\n",
            self.telegram_url
        ));
        c.push_str(
            "[confirmation]\ndefault_timeout_seconds = 3600\nmax_timeout_seconds = 86400\n\
             default_window_seconds = 0\n\n",
        );
        let mut routes = Vec::new();
        for (i, chat) in self.chats.iter().enumerate() {
            let name = Setup::route(i);
            c.push_str(&format!(
                "[[routes]]\nname = \"{name}\"\nchat_id = {chat}\napprovers = [{chat}]\n\n"
            ));
            routes.push(format!("\"{name}\""));
        }
        // Generous limits: the bench measures the service, not an agent's quota.
        c.push_str(&format!(
            "[[agents]]\nname = \"bench\"\ntoken_env = \"HITL_BENCH_AGENT_TOKEN\"\n\
             routes = [{}]\ndefault_route = \"chat0\"\n\
             requests_per_minute = 100000000\nmax_pending = 1000000\n",
            routes.join(", ")
        ));
        c.push_str(&self.extra);
        let path = self.dir.join(format!("{name}.toml"));
        std::fs::write(&path, c)?;
        Ok(path)
    }

    pub fn spawn(&self, bin: &Path) -> io::Result<Running> {
        self.spawn_named(bin, "service")
    }

    /// As [`Setup::spawn`], with its config and log named `name` (several replicas share
    /// one folder).
    pub fn spawn_named(&self, bin: &Path, name: &str) -> io::Result<Running> {
        let config = self.write_config(name)?;
        let log_path = self.dir.join(format!("{name}.log"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let offset = log.metadata()?.len();
        let started = Instant::now();
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("--log-json")
            .arg("serve")
            .env("TELEGRAM_BOT_TOKEN", BOT_TOKEN)
            .env("HITL_BENCH_AGENT_TOKEN", AGENT_TOKEN)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env(
                "RUST_LOG",
                std::env::var("HITL_BENCH_RUST_LOG").unwrap_or("info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        Ok(Running {
            child,
            log_path,
            offset,
            started,
        })
    }
}

/// A running service process.
pub struct Running {
    child: Child,
    log_path: PathBuf,
    /// Where this process's lines start in the (shared across restarts) log.
    offset: u64,
    pub started: Instant,
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the "serving" log line; returns when it was seen and its `pending`.
    pub async fn wait_serving(&mut self, limit: Duration) -> io::Result<(Instant, u64)> {
        let deadline = Instant::now() + limit;
        loop {
            let mut text = String::new();
            let mut f = std::fs::File::open(&self.log_path)?;
            f.seek(SeekFrom::Start(self.offset))?;
            f.read_to_string(&mut text)?;
            for line in text.lines() {
                if line.contains("hitl-telegram is serving") {
                    let pending = serde_json::from_str::<serde_json::Value>(line)
                        .ok()
                        .and_then(|v| v["pending"].as_u64())
                        .unwrap_or(0);
                    return Ok((Instant::now(), pending));
                }
            }
            if let Some(status) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "the service exited ({status}) before serving; log: {}\n{}",
                    self.log_path.display(),
                    text.lines().rev().take(5).collect::<Vec<_>>().join("\n")
                )));
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(
                    "the service did not start serving in time",
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The process's memory now, from /proc (KiB).
    pub fn memory(&self) -> io::Result<Memory> {
        memory_of(self.pid())
    }

    /// SIGKILL: no shutdown path runs, as in a crash.
    pub fn kill(mut self) -> io::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

/// The memory of process `pid` now, from /proc (KiB).
pub fn memory_of(pid: u32) -> io::Result<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(Memory {
        rss: field("VmRSS:"),
        hwm: field("VmHWM:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    })
}

/// A process's memory, in KiB, as /proc/PID/status has it.
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    /// Resident now (VmRSS): `anon` + `file` (+ shared memory, which the service has none of).
    pub rss: u64,
    /// The most ever resident (VmHWM).
    pub hwm: u64,
    /// Resident private memory (RssAnon): the heap, stacks and the allocator's caches,
    /// what the service itself holds.
    pub anon: u64,
    /// Resident pages of mapped files (RssFile): the binary's code and read-only data, as
    /// far as the kernel has mapped them (it maps up to 64 KiB around each page touched).
    /// Clean and shared with the page cache: the kernel can drop them at any time.
    pub file: u64,
}

/// A free loopback port (bound and released; the service binds it right after).
pub fn free_port() -> io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// A folder of its own under the system's temporary directory, removed when dropped
/// (the load generator is a plain binary, without the tests' `tempfile`).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> io::Result<TempDir> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "hitl-bench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh PostgreSQL database on the server at `server` (a URL whose user may create
/// databases), dropped again with this value.
pub struct PgDatabase {
    pub url: String,
    server: String,
    name: String,
}

impl PgDatabase {
    pub async fn create(server: &str) -> anyhow::Result<PgDatabase> {
        use sqlx::Connection as _;
        let mut admin = sqlx::PgConnection::connect(server).await?;
        let name = format!("hitl_bench_{:016x}", rand::random::<u64>());
        // A name of our own making (hex digits): nothing to quote.
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await?;
        let mut url = reqwest::Url::parse(server)?;
        url.set_path(&format!("/{name}"));
        Ok(PgDatabase {
            url: url.to_string(),
            server: server.to_owned(),
            name,
        })
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let (server, name) = (self.server.clone(), self.name.clone());
        // Dropped from async code: on a thread of its own, with a runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                use sqlx::Connection as _;
                let mut admin = sqlx::PgConnection::connect(&server).await?;
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                )))
                .execute(&mut admin)
                .await?;
                anyhow::Ok(())
            })
        })
        .join();
    }
}
