//! `hitl-telegram`: argument parsing only; what each command does is
//! `hitl_telegram::program` (and `cli`, `claude_hook` for the agent-side commands).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use hitl_telegram::cli::{self, AskRequest};
use hitl_telegram::gateway::PinMode;
use hitl_telegram::hook::{self, Fallback, HookOptions, Host, OwnerFrom};
use hitl_telegram::{program, telemetry};

/// jemalloc rather than glibc's malloc: see its line in Cargo.toml.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at its start (`_RJEM_MALLOC_CONF` in the environment still
/// overrides them): freed pages go back to the kernel after a second instead of ten. A
/// crowd of agents arriving, or a burst of decisions being shown, frees most of what it
/// allocated within moments; kept for ten seconds, those pages made the service's peak
/// 1.2-1.3 times its steady state (BENCHMARKS.md, B3's peak). A thin pointer to the
/// first byte is what jemalloc's `const char *malloc_conf` is; the name is the prefixed
/// one tikv-jemallocator builds.
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_CONF: &u8 = &b"dirty_decay_ms:1000\0"[0];

#[derive(Parser)]
#[command(
    name = "hitl-telegram",
    version = hitl_telegram::release::VERSION_LINE,
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
    /// Ask through a running service; exit 0 confirmed, 1 cancelled, 2 timeout, 3 error
    /// (also when no decision came within --timeout plus 10 s, whatever the service
    /// does). The record goes to stdout; which request it asked, and that it still
    /// waits, to stderr.
    Ask(Box<AskArgs>),
    /// Ask as `ask` does, then run COMMAND only if confirmed, with the approved
    /// parameters in HITL_PARAMS (JSON) and the request id in HITL_CONFIRMATION_ID, and
    /// report on Telegram whether it ran or failed (its exit status and last stderr
    /// line). Exits with the command's status (127 not found, 126 not runnable, 128+N
    /// killed by signal N); when it did not run, with ask's 1 cancelled, 2 timeout, 3
    /// error (also when no decision came within --timeout plus 10 s: the command never
    /// runs then). Progress goes to stderr; stdout is the command's.
    Exec(Box<ExecArgs>),
    /// A coding agent's tool-call hook (Claude Code, Codex, Cursor, Gemini CLI): reads
    /// the host's event on stdin, asks on Telegram, and answers in the host's own
    /// format (a deny, or exit 2, whenever no approval came). Installed for the host's
    /// after events too, it reports what became of the calls it let through (silently,
    /// exit 0). `hook install` writes it into the host's settings.
    Hook(Box<HookCommand>),
    /// `hook --for claude`, under its earlier name.
    ClaudeHook(Box<HookRunArgs>),
    /// An MCP server on stdio (for MCP clients that start it): its tools ask through a
    /// running service with an agent's token, like `ask`.
    Mcp(McpArgs),
    /// An MCP gateway on stdio: start it instead of an MCP server (the command after
    /// `--`, or --upstream-url). Every tool call is asked about through the running
    /// service first and reaches the server only when confirmed, with the approved
    /// arguments; everything else passes through unchanged.
    Gateway(Box<GatewayArgs>),
    /// The pending questions of every route and agent, soonest deadline first, read from
    /// the database (nothing is written): an operator's view away from the chat.
    Pending {
        /// The API's JSON (`{"pending": [records]}`) instead of a line per question.
        #[arg(long)]
        json: bool,
    },
    /// The live confirmation windows of every route and agent, read from the database.
    Windows {
        /// The API's JSON (`{"windows": [...]}`).
        #[arg(long)]
        json: bool,
    },
    /// The live grants of every route and agent, read from the database.
    Grants {
        /// The API's JSON (`{"grants": [...]}`).
        #[arg(long)]
        json: bool,
    },
    /// Write a consistent copy of the SQLite database to FILE (online: the service may
    /// run). For PostgreSQL use pg_dump. A database.url naming no hitl-telegram database
    /// is refused (nothing is created).
    Backup {
        /// Where to write the copy; must not exist.
        file: std::path::PathBuf,
    },
    /// The rules (`[[rules]]`) of the configuration file.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// The audit trail: export it as JSON lines, or verify its hash chain. A
    /// database.url naming no hitl-telegram database is refused (nothing is created).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Print a link that opens the operator's console ([mini_app]) in a browser as
    /// Telegram user ID, without Telegram: launch data signed with the bot's token, as
    /// Telegram signs it, valid for --minutes. Anyone holding the link acts as that user
    /// until then: open it yourself, never share it.
    ConsoleLink {
        /// The Telegram user id to open it as: an approver of some route, or a person
        /// of [people].
        #[arg(long, value_name = "ID")]
        user: u64,
        /// How many minutes the link works (at most mini_app.max_age_seconds).
        #[arg(long, value_name = "N", default_value_t = program::CONSOLE_LINK_MINUTES)]
        minutes: u64,
        /// The service's base URL to open (default: mini_app.public_url), e.g.
        /// http://127.0.0.1:8080 for the service running on this machine.
        #[arg(long)]
        url: Option<String>,
    },
}

#[derive(Subcommand)]
enum RulesCommand {
    /// Judge the call in CALL (a JSON file, `-` for stdin: {"tool", "agent",
    /// "owner_id", "params"}) by the configuration's rules, without side effects; print
    /// the decision and the deciding rule. Exit 0 allow, 1 deny, 4 ask, 3 on an error.
    Test {
        /// The call's JSON file, or `-`.
        call: PathBuf,
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
    /// default_timeout_seconds, 120 as shipped); no answer by then exits 2. Whatever
    /// the service does, the wait ends 10 s after this deadline (or after a later one
    /// an approver set with "+N min"): no decision by then exits 3.
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

/// `exec`'s arguments: `ask`'s, then the command after `--`.
#[derive(Args)]
struct ExecArgs {
    #[command(flatten)]
    ask: AskArgs,
    /// The command to run if confirmed, and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<std::ffi::OsString>,
}

impl AskArgs {
    /// The request these arguments make, or why there is none (no token).
    fn into_request(self) -> anyhow::Result<AskRequest> {
        let token = match (self.token, self.token_env) {
            (Some(t), _) => t,
            (None, Some(var)) => program::token_from_env(&var)?,
            (None, None) => anyhow::bail!("--token or --token-env is required"),
        };
        Ok(AskRequest {
            url: self.url,
            token,
            tool: self.tool,
            params: self.params,
            template: self.template,
            timeout_seconds: self.timeout,
            owner_id: self.owner,
            context: self.context,
            route: self.route,
            window_seconds: self.window,
        })
    }
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
struct GatewayArgs {
    /// Base URL of the service, e.g. http://127.0.0.1:8080
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Name of the environment variable holding the agent's bearer token.
    #[arg(long)]
    token_env: String,
    /// The upstream's name (1-64 of A-Z a-z 0-9 . _ -): shown on every question as its
    /// MCP server, matched by rules' `servers`, and what its tools are pinned under.
    #[arg(long)]
    name: String,
    /// Named Telegram destination (default: the agent's default route).
    #[arg(long)]
    route: Option<String>,
    /// The questions' owner_id (default: the service's, as for any request without one).
    #[arg(long)]
    owner: Option<String>,
    /// Send the tools' annotations (readOnlyHint, destructiveHint, ...) for rules to
    /// match: only for an upstream you trust, since MCP calls them untrusted hints.
    #[arg(long)]
    trust_annotations: bool,
    /// How the first listing of the upstream's tools is pinned: `first` allows it (and
    /// holds back what changes later), `strict` holds it all back until allowed.
    #[arg(long, value_enum, default_value_t = PinMode::First)]
    pin: PinMode,
    /// Seconds to wait for a human per call (default: the service's).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// A Streamable HTTP upstream instead of a command.
    #[arg(long, value_name = "URL")]
    upstream_url: Option<String>,
    /// A header for the Streamable HTTP upstream, its value taken from an environment
    /// variable (never from the command line): NAME=ENV_VAR. Repeatable.
    #[arg(long = "upstream-header", value_name = "NAME=ENV_VAR")]
    upstream_headers: Vec<String>,
    /// The upstream MCP server's command and arguments (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
struct HookCommand {
    #[command(subcommand)]
    install: Option<HookSubcommand>,
    /// The host whose hook events come on stdin.
    #[arg(long = "for", value_enum, value_name = "HOST", required = true)]
    host: Option<Host>,
    #[command(flatten)]
    run: HookRunArgs,
}

#[derive(Subcommand)]
enum HookSubcommand {
    /// Write the hook into the host's settings file (merged: everything already there
    /// is kept; run again, it changes nothing), and print what changed. A settings file
    /// it cannot parse is left untouched.
    Install(Box<HookInstallArgs>),
}

#[derive(Args)]
struct HookInstallArgs {
    /// The host whose settings to write.
    #[arg(long = "for", value_enum, value_name = "HOST")]
    host: Host,
    /// The project's settings (in the current directory): the default.
    #[arg(long, conflicts_with = "user")]
    project: bool,
    /// The user's settings (in $HOME), for every project.
    #[arg(long)]
    user: bool,
    /// Base URL of the service the hook asks, e.g. http://127.0.0.1:8080
    #[arg(long)]
    url: String,
    /// Name of the environment variable holding the agent's bearer token (written into
    /// the settings as a name; the token itself is never written).
    #[arg(long)]
    token_env: String,
    /// Named Telegram destination (default: the agent's default route).
    #[arg(long)]
    route: Option<String>,
    /// Seconds the approvers get (default 120, whatever the host: the host's own hook
    /// timeout is written 20 s longer, and passed as --host-timeout).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
}

#[derive(Args)]
struct HookRunArgs {
    /// Base URL of the service, e.g. http://127.0.0.1:8080
    #[arg(long, required = true)]
    url: Option<String>,
    /// Name of the environment variable holding the agent's bearer token.
    #[arg(long, required = true)]
    token_env: Option<String>,
    /// Named Telegram destination (default: the agent's default route).
    #[arg(long)]
    route: Option<String>,
    /// Seconds the approvers get (default 120; 50 for Gemini CLI and Cursor, whose hooks stop
    /// after 60 s by default). Never more than the host's timeout allows (--host-timeout).
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<f64>,
    /// How many seconds the host lets this hook run, as its settings say (default: the
    /// host's documented default: 600 for Claude Code and Codex, 60 for Gemini CLI,
    /// Cursor's below). The hook answers a deny ("no answer in time") and withdraws
    /// the question a few seconds before that.
    #[arg(long, value_name = "SECONDS")]
    host_timeout: Option<f64>,
    /// When the service cannot decide: deny (fail closed), or ask (leave it to the
    /// host's own prompt, where the event has one; deny where it has none).
    #[arg(long, value_enum, default_value_t = Fallback::Deny)]
    fallback: Fallback,
    /// The request's owner_id: the login name ($USER), the working directory's last
    /// component, or the host's session id.
    #[arg(long, value_enum, default_value_t = OwnerFrom::User)]
    owner_from: OwnerFrom,
    /// Where the hook notes the calls it let through, so that their after events can
    /// report what became of them (default: $XDG_STATE_HOME/hitl-telegram/<host>-hook,
    /// else ~/.local/state/hitl-telegram/<host>-hook).
    #[arg(long, env = "HITL_HOOK_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Report a successful call with the start of the tool's output (at most 500
    /// characters) as its summary, shown to the approvers in Telegram. Off by default: a
    /// tool's output may hold secrets that must never reach a chat.
    #[arg(long)]
    report_output: bool,
    /// Read a before event with fields its host does not document, instead of denying
    /// it (a newer host may send fields this version does not know).
    #[arg(long)]
    ignore_unknown_fields: bool,
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
        Command::Serve { demo, adopt_within } => {
            program::serve(&cli.config, demo, adopt_within).await
        }
        Command::Migrate => program::migrate(&cli.config).await,
        Command::Audit {
            command: AuditCommand::Export { since },
        } => program::audit_export(&cli.config, since.as_deref()).await,
        Command::Audit {
            command: AuditCommand::Verify { expect_head },
        } => program::audit_verify(&cli.config, expect_head).await,
        Command::Rules {
            command: RulesCommand::Test { call },
        } => return rules_test(&cli.config, &call).await,
        Command::MigrateToPostgres { to } => program::migrate_to_postgres(&cli.config, &to).await,
        Command::ConsoleLink { user, minutes, url } => {
            program::console_link(&cli.config, user, minutes, url.as_deref()).map(
                |(link, until)| {
                    println!("{link}");
                    eprintln!(
                        "opens the console as Telegram user {user} until {}; anyone holding the \
                     link acts as that user until then",
                        hitl_telegram::domain::question::operator_time(until)
                    );
                },
            )
        }
        Command::Backup { file } => program::backup(&cli.config, &file).await,
        Command::Pending { json } => {
            program::list(&cli.config, program::Listing::Pending, json).await
        }
        Command::Windows { json } => {
            program::list(&cli.config, program::Listing::Windows, json).await
        }
        Command::Grants { json } => {
            program::list(&cli.config, program::Listing::Grants, json).await
        }
        Command::CheckConfig { demo, online } => {
            program::check_config(&cli.config, demo, online).await
        }
        Command::ClaudeHook(a) => return hook_command(Host::Claude, *a).await,
        Command::Hook(h) => {
            let h = *h;
            return match (h.install, h.host) {
                (Some(HookSubcommand::Install(i)), _) => hook_install(*i),
                (None, Some(host)) => hook_command(host, h.run).await,
                // Exit 2: what every host reads as a block.
                (None, None) => {
                    let _ = writeln_stderr("error: hook needs --for claude|codex|cursor|gemini");
                    ExitCode::from(2)
                }
            };
        }
        Command::Mcp(a) => program::mcp_stdio(&a.url, &a.token_env).await,
        Command::Gateway(a) => {
            program::gateway(program::GatewayCommand {
                url: a.url,
                token_env: a.token_env,
                name: a.name,
                route: a.route,
                owner: a.owner,
                trust_annotations: a.trust_annotations,
                pin: a.pin,
                timeout_seconds: a.timeout,
                upstream_url: a.upstream_url,
                upstream_headers: a.upstream_headers,
                command: a.command,
            })
            .await
        }
        Command::Ask(a) => return ask_command(*a).await,
        Command::Exec(a) => return exec_command(*a).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", cli::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// `rules test`: the exit code it chooses, or [`cli::EXIT_ERROR`] on an error.
async fn rules_test(config: &Path, call: &Path) -> ExitCode {
    match program::rules_test(config, call).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", cli::error_text(&e));
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

/// `hook` (and `claude-hook`): one hook event from stdin, the hook's answer on stdout.
async fn hook_command(host: Host, a: HookRunArgs) -> ExitCode {
    // Both are required by clap, unless `hook install` negated them.
    let (Some(url), Some(token_env)) = (a.url, a.token_env) else {
        let _ = writeln_stderr("error: the hook needs --url and --token-env");
        return ExitCode::from(2);
    };
    let opts = HookOptions {
        host,
        url,
        token_env,
        route: a.route,
        timeout_seconds: a.timeout,
        host_timeout_seconds: a.host_timeout,
        fallback: a.fallback,
        owner_from: a.owner_from,
        state_dir: a.state_dir,
        report_output: a.report_output,
        ignore_unknown_fields: a.ignore_unknown_fields,
    };
    let input = hook::read_event(std::io::stdin().lock());
    let result = hook::run(&opts, input, &|k| std::env::var(k).ok()).await;
    // Written without println!, which panics when the pipe is gone.
    use std::io::Write;
    if let Some(err) = result.stderr {
        let _ = writeln_stderr(&err);
    }
    if let Some(out) = result.stdout {
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "{out}").and_then(|()| stdout.flush());
    }
    ExitCode::from(result.exit_code)
}

fn writeln_stderr(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(std::io::stderr(), "{line}")
}

/// `hook install`: the settings written, what changed printed; exit 1 when the file
/// could not be read or written (it is then left as it was).
fn hook_install(a: HookInstallArgs) -> ExitCode {
    let request = hook::install::Install {
        host: a.host,
        scope: if a.user {
            hook::install::Scope::User
        } else {
            hook::install::Scope::Project
        },
        url: a.url,
        token_env: a.token_env,
        route: a.route,
        timeout_seconds: a.timeout,
    };
    match hook::install::install(&request, &|k| std::env::var(k).ok()) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `ask`: the exit code `cli::ask` chose; its text on stdout (stderr on an error).
async fn ask_command(a: AskArgs) -> ExitCode {
    let request = match a.into_request() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(cli::EXIT_ERROR);
        }
    };
    let (code, out) = cli::ask(request).await;
    if code == cli::EXIT_ERROR {
        eprintln!("{out}");
    } else {
        println!("{out}");
    }
    ExitCode::from(code)
}

/// `exec`: ask, then run the command if approved; the command's status.
async fn exec_command(a: ExecArgs) -> ExitCode {
    let ask = match a.ask.into_request() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("exec: error: {e:#}; the command was not run");
            return ExitCode::from(cli::EXIT_ERROR);
        }
    };
    let code = cli::exec::exec(cli::exec::ExecRequest {
        ask,
        command: a.command,
    })
    .await;
    ExitCode::from(code)
}
