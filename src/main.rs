//! `hitl-telegram`: argument parsing only; everything else lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use hitl_telegram::claude_hook::{self, Fallback, HookOptions, OwnerFrom};
use hitl_telegram::cli::{self, AskRequest};
use hitl_telegram::config::{Config, Settings};
use hitl_telegram::storage::{self, ConnectMode};
use hitl_telegram::telegram::adopt::{self, Adopted};
use hitl_telegram::{Application, app, telemetry};
use tokio_util::sync::CancellationToken;

/// jemalloc rather than glibc's malloc: see its line in Cargo.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "hitl-telegram",
    version,
    about = "Ask a human on Telegram before an AI agent runs a tool call"
)]
struct Cli {
    /// Configuration file (environment variables HITL__SECTION__KEY override single keys).
    #[arg(
        long,
        global = true,
        env = "HITL_CONFIG",
        default_value = "config/default.toml"
    )]
    config: PathBuf,
    /// Log JSON lines instead of human-readable text (colour only on a terminal, never
    /// with NO_COLOR set).
    #[arg(long, global = true, env = "HITL_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (the default).
    Serve {
        /// One route (your private chat with the bot) and one agent `demo` whose token
        /// is HITL_DEMO_AGENT_TOKEN: no file to edit. The approver is
        /// HITL_DEMO_OPERATOR_ID, or when that is unset the first person who sends
        /// /start to the bot in a private chat within --adopt-within seconds.
        #[arg(long)]
        demo: bool,
        /// With --demo and no HITL_DEMO_OPERATOR_ID: how long to wait for the /start
        /// that makes its sender the demo's approver.
        #[arg(long, value_name = "SECONDS", default_value_t = cli::DEMO_ADOPT_SECONDS,
              value_parser = clap::value_parser!(u64).range(1..=600))]
        adopt_within: u64,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Copy the SQLite database `database.url` names into an empty PostgreSQL database
    /// (stop the service first). The source's audit trail is verified first, the copied
    /// one (the same chain and head) before the copy commits: a refused copy leaves no
    /// row in PostgreSQL. Then point `database.url` at PostgreSQL.
    MigrateToPostgres {
        /// The PostgreSQL database (`postgres://user:password@host/db`); from the
        /// environment rather than the command line when it holds a password.
        #[arg(long, env = "HITL_MIGRATE_TO", hide_env_values = true)]
        to: String,
    },
    /// Check the configuration (and that the token variables are set) and exit; print a
    /// warning for what is accepted but likely wrong.
    CheckConfig {
        /// Check the configuration `serve --demo` would run on.
        #[arg(long)]
        demo: bool,
        /// Also ask Telegram (getMe, getChat, getChatMember; nothing is sent) whether the
        /// bot, its groups and the approvers are there.
        #[arg(long)]
        online: bool,
    },
    /// Ask through a running service; exit 0 confirmed, 1 cancelled, 2 timeout, 3 error.
    /// The record goes to stdout; which request it asked, and that it still waits, to
    /// stderr.
    Ask(Box<AskArgs>),
    /// Claude Code's PermissionRequest hook: reads the event on stdin, asks on Telegram,
    /// prints Claude Code's decision JSON on stdout and exits 0.
    ClaudeHook(Box<ClaudeHookArgs>),
    /// An MCP server on stdio (for MCP clients that start it): its tools ask through a
    /// running service with an agent's token, like `ask`.
    Mcp(McpArgs),
    /// Write a consistent copy of the SQLite database to FILE (online: the service may
    /// run). For PostgreSQL use pg_dump. A database.url naming no hitl-telegram database
    /// is refused (nothing is created).
    Backup {
        /// Where to write the copy; must not exist.
        file: std::path::PathBuf,
    },
    /// The audit trail: export it as JSON lines, or verify its hash chain. A
    /// database.url naming no hitl-telegram database is refused (nothing is created).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Write every event (from --since: an RFC 3339 time, or a date meaning midnight
    /// UTC) as JSON lines to stdout.
    Export {
        #[arg(long)]
        since: Option<String>,
    },
    /// Check the hash chain, and every ended request's status against its decision
    /// event; print the chain's head (`head: SEQ:HASH`). Exit 0 when all holds, 1
    /// naming every problem found.
    Verify {
        /// A head printed (or logged) earlier: fail unless the trail still holds that
        /// event with that hash, i.e. was neither truncated nor rewritten since.
        #[arg(long, value_name = "SEQ:HASH")]
        expect_head: Option<hitl_telegram::domain::audit::Head>,
    },
}

/// `ask`'s arguments: every one says what it is for in `ask --help`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("auth").required(true).args(["token", "token_env"])))]
struct AskArgs {
    /// Base URL of the service, e.g. http://127.0.0.1:8080 (a loopback address without
    /// a scheme means http; any other host needs its https://).
    #[arg(long)]
    url: String,
    /// The agent's bearer token (visible in the process list: prefer --token-env).
    #[arg(long)]
    token: Option<String>,
    /// Name of the environment variable holding the agent's bearer token.
    #[arg(long)]
    token_env: Option<String>,
    /// The tool call to approve, as the operator sees it, e.g. deploy.
    #[arg(long)]
    tool: String,
    /// A parameter of the call: key=value (a string) or key:=json (any JSON value, e.g.
    /// replicas:=3); repeatable, order kept.
    #[arg(long = "param")]
    params: Vec<String>,
    /// Python str.format briefing template shown above the parameters, e.g.
    /// "Deploy {service} to {env}?"
    #[arg(long)]
    template: Option<String>,
    /// Seconds to wait for a human (default: the service's confirmation
    /// default_timeout_seconds, 120 as shipped); no answer by then exits 2.
    #[arg(long)]
    timeout: Option<f64>,
    /// On whose behalf the call is made (owner_id, default "anonymous"): windows are per
    /// owner, and a route with forbid_self_approval refuses the owner's own approval
    /// ([owner_telegram_ids]).
    #[arg(long)]
    owner: Option<String>,
    /// A line of context shown with the question, e.g. why the call is made.
    #[arg(long)]
    context: Option<String>,
    /// The route (named Telegram destination) to ask in; default: the agent's
    /// default_route.
    #[arg(long)]
    route: Option<String>,
    /// Confirmation window in seconds: after an approval, identical calls (same agent,
    /// owner, tool and parameters) pass without asking until it ends (cut to the route's
    /// max_window_seconds).
    #[arg(long)]
    window: Option<u64>,
}

#[derive(Args)]
struct McpArgs {
    /// Base URL of the service, e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Name of the environment variable holding the agent's bearer token.
    #[arg(long)]
    token_env: String,
}

#[derive(Args)]
struct ClaudeHookArgs {
    /// Base URL of the service, e.g. http://127.0.0.1:8080
    #[arg(long)]
    url: String,
    /// Name of the environment variable holding the agent's bearer token.
    #[arg(long)]
    token_env: String,
    /// Named Telegram destination (default: the agent's default route).
    #[arg(long)]
    route: Option<String>,
    /// Seconds to wait for a human; keep the hook's "timeout" in settings.json longer.
    #[arg(long, default_value_t = claude_hook::DEFAULT_TIMEOUT_SECONDS)]
    timeout: f64,
    /// When the service cannot decide: deny (fail closed), or ask (print nothing, so
    /// Claude Code shows its own prompt).
    #[arg(long, value_enum, default_value_t = Fallback::Deny)]
    fallback: Fallback,
    /// The request's owner_id: the login name ($USER), the working directory's last
    /// component, or the Claude Code session id.
    #[arg(long, value_enum, default_value_t = OwnerFrom::User)]
    owner_from: OwnerFrom,
}

/// The settings `path` holds; for the demo, the built-in defaults when there is no file.
fn load_settings(path: &std::path::Path, demo: bool) -> anyhow::Result<Settings> {
    if demo && !path.exists() {
        // The demo needs no file of its own: it replaces the routes and agents anyway.
        eprintln!(
            "note: {} not found; the demo runs on the built-in defaults",
            path.display()
        );
        return Ok(Settings::builtin()?);
    }
    Ok(Settings::load(path)?)
}

/// The configuration to check (`check-config`): the demo's is checked with a stand-in
/// approver when nobody is named yet.
fn load_config(path: &std::path::Path, demo: bool) -> anyhow::Result<Config> {
    let settings = load_settings(path, demo)?;
    if demo {
        let operator = cli::demo_operator(std::env::var(cli::DEMO_OPERATOR_ENV).ok())?;
        if operator.is_none() {
            eprintln!(
                "note: {} is not set: `serve --demo` makes the first person who sends /start \
                 to the bot in a private chat within {} s its approver",
                cli::DEMO_OPERATOR_ENV,
                cli::DEMO_ADOPT_SECONDS
            );
        }
        return cli::demo_config(settings, operator);
    }
    Ok(Config::from_settings_and_process_env(settings)?)
}

/// The configuration `serve` runs on. For the demo without an operator id, everything
/// else is checked first, then the first person to send /start is adopted
/// (`hitl_telegram::telegram::adopt`) and returned with it.
async fn serving_config(
    path: &std::path::Path,
    demo: bool,
    adopt_within: u64,
    stop: &CancellationToken,
) -> anyhow::Result<(Config, Option<Adopted>)> {
    let settings = load_settings(path, demo)?;
    if !demo {
        return Ok((Config::from_settings_and_process_env(settings)?, None));
    }
    if let Some(id) = cli::demo_operator(std::env::var(cli::DEMO_OPERATOR_ENV).ok())? {
        return Ok((cli::demo_config(settings, Some(id))?, None));
    }
    let unadopted = cli::demo_config(settings.clone(), None)?;
    let within = std::time::Duration::from_secs(adopt_within);
    let adopted =
        adopt::adopt_first_starter(&unadopted, cli::DEMO_OPERATOR_ENV, within, stop).await?;
    let config = cli::demo_config(settings, Some(adopted.operator.id))?;
    Ok((config, Some(adopted)))
}

async fn serve(path: &std::path::Path, demo: bool, adopt_within: u64) -> anyhow::Result<()> {
    // Before binding: the connection limit is fitted to the open-file limit.
    match hitl_telegram::api::serve::raise_open_file_limit() {
        Ok(files) if files.before != files.now => {
            tracing::info!(
                from = ?files.before,
                to = ?files.now,
                "open-file limit raised to the hard limit"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let shutdown = CancellationToken::new();
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        app::shutdown_signal().await;
        trigger.cancel();
    });
    let (config, adopted) = serving_config(path, demo, adopt_within, &shutdown).await?;
    for warning in config.warnings() {
        tracing::warn!("configuration: {warning}");
    }
    let app = Application::build(config).await?;
    if let Some(a) = adopted {
        let event = hitl_telegram::domain::audit::approver_adopted(
            cli::DEMO_ROUTE,
            &a.operator,
            i64::try_from(a.operator.id).unwrap_or_default(),
            adopt_within,
            a.at,
        );
        app.store()
            .record_event(event)
            .await
            .context("cannot record the demo's adopted approver in the audit trail")?;
    }
    app.run_until_stopped(shutdown).await
}

async fn audit(path: &std::path::Path, command: AuditCommand) -> anyhow::Result<()> {
    use hitl_telegram::domain::audit;
    use std::io::Write;
    let settings = Settings::load(path)?;
    // Existing: a mistyped path or an empty database is refused, never created and
    // reported as an empty trail.
    let store = storage::connect(&settings.database.url, ConnectMode::Existing)
        .await
        .context("cannot open the database (database.url)")?;
    store.migrate().await?;
    match command {
        AuditCommand::Export { since } => {
            let since = since.as_deref().map(cli::parse_since).transpose()?;
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            for row in store.audit_rows(since).await? {
                let line = serde_json::json!({
                    "seq": row.seq,
                    "at": hitl_telegram::domain::confirmation::rfc3339(row.at),
                    "confirmation_id": row.confirmation_id,
                    "kind": row.kind,
                    "actor": row.actor,
                    "detail": serde_json::from_str::<serde_json::Value>(&row.detail_text)
                        .unwrap_or(serde_json::Value::String(row.detail_text.clone())),
                    "prev_hash": row.prev_hash,
                    "hash": row.hash,
                });
                match writeln!(out, "{line}") {
                    // The reader (`| head`) has all it wanted: a normal end.
                    Err(e) if cli::is_broken_pipe(&e) => return Ok(()),
                    other => other?,
                }
            }
            match out.flush() {
                Err(e) if cli::is_broken_pipe(&e) => Ok(()),
                other => Ok(other?),
            }
        }
        AuditCommand::Verify { expect_head } => {
            let (rows, statuses) = store.audit_snapshot().await?;
            store.close().await;
            let report = audit::check(&rows, &statuses, expect_head.as_ref());
            if !report.problems.is_empty() {
                let mut text = format!(
                    "audit trail failed verification ({} problem(s)):",
                    report.problems.len()
                );
                for p in &report.problems {
                    text.push_str(&format!("\n  {p}"));
                }
                anyhow::bail!(text);
            }
            println!("audit chain OK: {} events", report.events);
            println!(
                "statuses OK: {} ended request(s), each as its decision event records",
                report.ended
            );
            if let (Some(expected), Some(head)) = (&expect_head, &report.head) {
                println!(
                    "expected head {expected} is in the trail ({} event(s) since)",
                    head.seq() - expected.seq()
                );
            }
            if let Some(head) = &report.head {
                println!("head: {head}");
            }
            Ok(())
        }
    }
}

/// `migrate-to-postgres`: the source's audit trail verified, the copy, and the copied
/// trail verified before it commits (see `storage::copy`).
async fn migrate_to_postgres(path: &std::path::Path, to: &str) -> anyhow::Result<()> {
    use hitl_telegram::storage::Backend;
    let settings = Settings::load(path)?;
    let from = settings.database.url.as_str();
    anyhow::ensure!(
        Backend::of_url(from)? == Backend::Sqlite,
        "database.url must name the SQLite database to copy"
    );
    anyhow::ensure!(
        Backend::of_url(to)? == Backend::Postgres,
        "--to must be a postgres:// URL"
    );
    let copied = storage::copy::sqlite_to_postgres(from, to).await?;
    for (table, rows) in &copied.tables {
        println!("{table}: {rows} row(s)");
    }
    println!(
        "audit chain OK on PostgreSQL: {} events, the same as in SQLite",
        copied.events
    );
    if let Some(head) = &copied.head {
        println!("head: {head}");
    }
    println!(
        "copied to {}: set database.url to it and start the service",
        storage::redact_url(to)
    );
    Ok(())
}

/// `check-config`: refusals fail it, warnings go to stderr, `--online` asks Telegram.
async fn check_config(path: &std::path::Path, demo: bool, online: bool) -> anyhow::Result<()> {
    let c = load_config(path, demo)?;
    for warning in c.warnings() {
        eprintln!("warning: {warning}");
    }
    println!(
        "configuration OK: {} route(s), {} agent(s)",
        c.routes.len(),
        c.agents.len()
    );
    match &c.telegram_mode {
        hitl_telegram::config::TelegramMode::Polling => {
            println!("Telegram updates: long polling");
        }
        hitl_telegram::config::TelegramMode::Webhook(w) => {
            println!("Telegram updates: webhook at {}", w.url);
        }
    }
    if !online {
        return Ok(());
    }
    let report = cli::check_online(&c).await;
    for note in &report.notes {
        println!("{note}");
    }
    if report.problems.is_empty() {
        println!("online checks OK");
        return Ok(());
    }
    let mut text = format!("online checks found {} problem(s):", report.problems.len());
    for p in &report.problems {
        text.push_str(&format!("\n  {p}"));
    }
    anyhow::bail!(text)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_json);
    let default = Command::Serve {
        demo: false,
        adopt_within: cli::DEMO_ADOPT_SECONDS,
    };
    let result = match cli.command.unwrap_or(default) {
        Command::Serve { demo, adopt_within } => serve(&cli.config, demo, adopt_within).await,
        Command::Migrate => {
            async {
                let settings = Settings::load(&cli.config)?;
                let store = storage::connect(&settings.database.url, ConnectMode::Create)
                    .await
                    .context("cannot open the database (database.url)")?;
                store.migrate().await?;
                store.close().await;
                // Without the password, if the URL has one.
                let url = storage::redact_url(&settings.database.url);
                println!("migrations applied to {url}");
                Ok(())
            }
            .await
        }
        Command::Audit { command } => audit(&cli.config, command).await,
        Command::MigrateToPostgres { to } => migrate_to_postgres(&cli.config, &to).await,
        Command::Backup { file } => {
            async {
                let settings = Settings::load(&cli.config)?;
                let store = storage::connect(&settings.database.url, ConnectMode::Existing)
                    .await
                    .context("cannot open the database (database.url)")?;
                let done = store.backup_to(&file).await.context("backup failed");
                store.close().await;
                done?;
                println!("backup written to {}", file.display());
                Ok(())
            }
            .await
        }
        Command::CheckConfig { demo, online } => check_config(&cli.config, demo, online).await,
        Command::ClaudeHook(a) => {
            let opts = HookOptions {
                url: a.url,
                token_env: a.token_env,
                route: a.route,
                timeout_seconds: a.timeout,
                fallback: a.fallback,
                owner_from: a.owner_from,
            };
            let input = claude_hook::read_event(std::io::stdin().lock());
            let result = claude_hook::run(&opts, input, &|k| std::env::var(k).ok()).await;
            // Written without println!, which panics when the pipe is gone.
            use std::io::Write;
            if let Some(err) = result.stderr {
                let _ = writeln!(std::io::stderr(), "{err}");
            }
            if let Some(out) = result.stdout {
                let mut stdout = std::io::stdout();
                let _ = writeln!(stdout, "{out}").and_then(|()| stdout.flush());
            }
            return ExitCode::from(result.exit_code);
        }
        Command::Mcp(a) => mcp_stdio(a).await,
        Command::Ask(a) => {
            let a = *a;
            let token = match (a.token, a.token_env) {
                (Some(t), _) => Ok(t),
                (None, Some(var)) => token_from_env(&var),
                (None, None) => Err(anyhow::anyhow!("--token or --token-env is required")),
            };
            let token = match token {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    return ExitCode::from(cli::EXIT_ERROR);
                }
            };
            let (code, out) = cli::ask(AskRequest {
                url: a.url,
                token,
                tool: a.tool,
                params: a.params,
                template: a.template,
                timeout_seconds: a.timeout,
                owner_id: a.owner,
                context: a.context,
                route: a.route,
                window_seconds: a.window,
            })
            .await;
            if code == cli::EXIT_ERROR {
                eprintln!("{out}");
            } else {
                println!("{out}");
            }
            return ExitCode::from(code);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cli::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// An agent's token from the variable `--token-env` names.
fn token_from_env(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("environment variable {var} is not set"))
}

/// `mcp`: the MCP tools on stdin/stdout (logs go to stderr), against the service at
/// `--url`.
async fn mcp_stdio(a: McpArgs) -> anyhow::Result<()> {
    let token = token_from_env(&a.token_env)?;
    let base = cli::service_url(&a.url)?;
    // Every request the tools make returns within a minute (the longest long-poll is
    // get_decision's 60 s): a service that stops answering is an error, not a hang.
    let client = hitl_telegram::client::V1Client::new(
        &base,
        token.into(),
        Some(std::time::Duration::from_secs(90)),
    )?;
    hitl_telegram::mcp::serve_stdio(hitl_telegram::mcp::Api::Http(client)).await
}
