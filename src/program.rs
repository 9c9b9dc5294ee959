//! What each command of the `hitl-telegram` binary does, from its parsed arguments:
//! `main.rs` parses the command line and calls one of these. They wire the library
//! together (configuration, storage, the application), so this module is the top
//! layer, above `app`; the agent-side commands' own logic is in `cli` (`ask`), `hook`
//! and `mcp`.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

mod listing;

pub use listing::{Listing, list};

use crate::app::{self, Application};
use crate::cli;
use crate::config::{Config, Settings};
use crate::domain::audit;
use crate::storage::{self, ConnectMode, Store};
use crate::telegram::adopt::{self, Adopted};

/// The settings `path` holds; for the demo, the built-in defaults when there is no file.
fn load_settings(path: &Path, demo: bool) -> anyhow::Result<Settings> {
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
fn load_config(path: &Path, demo: bool) -> anyhow::Result<Config> {
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
/// (`crate::telegram::adopt`) and returned with it.
async fn serving_config(
    path: &Path,
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

pub async fn serve(path: &Path, demo: bool, adopt_within: u64) -> anyhow::Result<()> {
    // Before binding: the connection limit is fitted to the open-file limit.
    match crate::api::serve::raise_open_file_limit() {
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
        let event = crate::domain::audit::approver_adopted(
            cli::DEMO_ROUTE,
            &a.operator,
            i64::try_from(a.operator.id).unwrap_or_default(),
            adopt_within,
            a.at,
        );
        app.audit()
            .record_event(event)
            .await
            .context("cannot record the demo's adopted approver in the audit trail")?;
    }
    if !demo {
        tokio::spawn(app::reload_rules_on_hangup(
            app.service(),
            path.to_owned(),
            shutdown.clone(),
        ));
    }
    app.run_until_stopped(shutdown).await
}

/// The database `database.url` names, which must exist and hold hitl-telegram's tables:
/// a mistyped path or an empty database is refused, never created and reported as an
/// empty trail or backed up as one.
async fn existing_store(path: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let settings = Settings::load(path)?;
    let store = storage::connect(&settings.database.url, ConnectMode::Existing)
        .await
        .context("cannot open the database (database.url)")?;
    Ok(store)
}

/// `audit export`: every event (from `since`) as JSON lines on stdout.
pub async fn audit_export(path: &Path, since: Option<&str>) -> anyhow::Result<()> {
    use std::io::Write;
    let store = existing_store(path).await?;
    store.migrate().await?;
    let since = since.map(cli::parse_since).transpose()?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for row in store.audit_rows(since).await? {
        let line = serde_json::json!({
            "seq": row.seq,
            "at": crate::domain::question::rfc3339(row.at),
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

/// `audit verify`: the hash chain, and every ended request's status against its
/// decision event; the head printed, and `expect_head` found in the trail if given.
pub async fn audit_verify(path: &Path, expect_head: Option<audit::Head>) -> anyhow::Result<()> {
    let store = existing_store(path).await?;
    store.migrate().await?;
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

/// `migrate`: the database's migrations applied (it is created if need be).
pub async fn migrate(path: &Path) -> anyhow::Result<()> {
    let settings = Settings::load(path)?;
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

/// `backup`: a consistent copy of the database in `file`.
pub async fn backup(path: &Path, file: &Path) -> anyhow::Result<()> {
    let store = existing_store(path).await?;
    let done = store.backup_to(file).await.context("backup failed");
    store.close().await;
    done?;
    println!("backup written to {}", file.display());
    Ok(())
}

/// `migrate-to-postgres`: the source's audit trail verified, the copy, and the copied
/// trail verified before it commits (see `storage::copy`).
pub async fn migrate_to_postgres(path: &Path, to: &str) -> anyhow::Result<()> {
    use crate::storage::Backend;
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

/// The chat rules in force that the database of the configuration at `path` holds;
/// why none were read when the file is no whole configuration (a file of rules only),
/// names no database that exists yet, or the read failed.
async fn stored_chat_rules(
    path: &Path,
) -> Result<Vec<crate::domain::rules::ChatRuleRecord>, String> {
    let settings = Settings::load(path)
        .map_err(|_| "the file is not a whole configuration with a database".to_owned())?;
    // Bounded: an offline check must not wait out a pool's timeout on a database that
    // does not answer.
    let read = async {
        let store = storage::connect(&settings.database.url, ConnectMode::Existing)
            .await
            .map_err(|e| e.to_string())?;
        store.chat_rules().await.map_err(|e| e.to_string())
    };
    tokio::time::timeout(CHAT_RULES_READ_LIMIT, read)
        .await
        .map_err(|_| "the database did not answer within 5 s".to_owned())?
}

/// How long `check-config` and `rules test` wait for the database's chat rules.
const CHAT_RULES_READ_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The records' rules in force, each refused one said on stderr.
fn chat_rules_of(
    records: &[crate::domain::rules::ChatRuleRecord],
) -> crate::domain::rules::ChatRules {
    let (chat, refused) = crate::domain::rules::ChatRules::of(records);
    for why in refused {
        eprintln!("warning: {why}; it decides nothing");
    }
    chat
}

/// `check-config`: refusals fail it, warnings go to stderr, `--online` asks Telegram.
pub async fn check_config(path: &Path, demo: bool, online: bool) -> anyhow::Result<()> {
    let c = load_config(path, demo)?;
    for warning in c.warnings() {
        eprintln!("warning: {warning}");
    }
    println!(
        "configuration OK: {} route(s), {} agent(s)",
        c.routes.len(),
        c.agents.len()
    );
    let rules = &c.rules;
    println!(
        "rules: {} rule(s), default {}, mode {}, hash {}",
        rules.set.rules().len(),
        rules.set.default_effect(),
        rules.mode.as_str(),
        rules.set.fingerprint().as_str()
    );
    match stored_chat_rules(path).await {
        Ok(records) => {
            let chat = chat_rules_of(&records);
            let with = rules.with_chat(chat.clone());
            println!(
                "chat rules: {} in force ({} enforced), hash with them {}",
                chat.rules().len(),
                chat.rules().iter().filter(|c| c.enforced).count(),
                with.fingerprint().as_str()
            );
            for c in chat.rules() {
                println!(
                    "  {} {} on route {} ({})",
                    c.rule.effect(),
                    c.rule.name(),
                    c.route,
                    if c.enforced { "enforced" } else { "dry run" }
                );
            }
        }
        Err(why) => println!("chat rules: not read ({why})"),
    }
    match &c.telegram_mode {
        crate::config::TelegramMode::Polling => {
            println!("Telegram updates: long polling");
        }
        crate::config::TelegramMode::Webhook(w) => {
            println!("Telegram updates: webhook at {}", w.url);
        }
    }
    match &c.outage_alerts {
        // The origin alone: an alerting system's URL often carries its key in the path.
        Some(a) => println!(
            "Telegram outages: announced to {} after {} s of failed probes",
            a.url.origin().ascii_serialization(),
            a.after.as_secs()
        ),
        None => println!("Telegram outages: not announced (no [telegram] outage_webhook_url)"),
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

/// A call for `rules test`, as a file holds it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TestCall {
    tool: String,
    /// The asking agent's name (a rule with `agents` matches only those named).
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    owner_id: Option<String>,
    /// Kept as text: the rules read it as Python decodes it, as the service does.
    #[serde(default)]
    params: Option<Box<serde_json::value::RawValue>>,
    /// The MCP server the call goes to (a rule with `servers` matches only those).
    #[serde(default)]
    server: Option<String>,
    /// The tool's MCP annotations, an object of booleans (a rule with `annotations`
    /// matches only calls carrying them).
    #[serde(default)]
    annotations: Option<serde_json::Value>,
    /// The route the call is asked on: the chat rules read are that route's.
    #[serde(default)]
    route: Option<String>,
}

/// Exit codes of `rules test`, by the rules' decision.
pub const RULES_TEST_ALLOW: u8 = 0;
pub const RULES_TEST_DENY: u8 = 1;
pub const RULES_TEST_ASK: u8 = 4;

/// `rules test --config FILE CALL.json`: the rules of the file (a whole configuration,
/// or one holding only rules) judge the
/// call in `call` (`-`: standard input), with no side effect (no database, no Telegram,
/// no secret read, an `allow`'s rate not counted). Prints the decision and the deciding
/// rule; returns the exit code ([`RULES_TEST_ALLOW`], [`RULES_TEST_DENY`],
/// [`RULES_TEST_ASK`]).
pub async fn rules_test(path: &Path, call: &Path) -> anyhow::Result<u8> {
    use crate::domain::rules::{Effect, RuleCall};
    let policy = crate::config::rules_of_file(path)?;
    let policy = match stored_chat_rules(path).await {
        Ok(records) => policy.with_chat(chat_rules_of(&records)),
        Err(why) => {
            println!("chat rules: not read ({why})");
            policy
        }
    };
    let text = if call == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("cannot read the call from stdin")?
    } else {
        std::fs::read_to_string(call)
            .with_context(|| format!("cannot read the call from {}", call.display()))?
    };
    let c: TestCall = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: not a call (a JSON object with \"tool\", and optionally \"agent\", \"owner_id\", \"params\", \"server\" and \"annotations\")",
            call.display()
        )
    })?;
    let params = match &c.params {
        None => crate::domain::python::value::PyValue::Dict(Default::default()),
        Some(raw) => crate::domain::python::json::parse_object(raw.get())
            .map(crate::domain::python::value::PyValue::Dict)
            .map_err(|e| {
                anyhow::anyhow!("{}: \"params\" must be a JSON object: {e}", call.display())
            })?,
    };
    // Checked as the service checks them, so a call it would refuse is refused here too.
    let server = c
        .server
        .as_deref()
        .map(crate::domain::mcp_call::ServerName::parse)
        .transpose()
        .map_err(|e| anyhow::anyhow!("{}: \"server\" {e}", call.display()))?;
    let annotations = c
        .annotations
        .as_ref()
        .map(crate::domain::mcp_call::Annotations::from_value)
        .transpose()
        .map_err(|e| match e.key {
            Some(key) => anyhow::anyhow!(
                "{}: \"annotations\" member {key:?}: {}",
                call.display(),
                e.why
            ),
            None => anyhow::anyhow!("{}: \"annotations\" {}", call.display(), e.why),
        })?;
    if let Some(look) = policy.set.look_alike(&c.tool) {
        anyhow::bail!(
            "the service refuses this call before any rule is read (422): the tool `{}` {look}",
            c.tool
        );
    }
    let route = c.route.as_deref().unwrap_or("");
    let (verdict, rate) = policy.judge(
        &RuleCall {
            tool: &c.tool,
            agent: c.agent.as_deref().unwrap_or(""),
            owner: c.owner_id.as_deref(),
            params: &params,
            server: server.as_ref().map(|s| s.as_str()),
            annotations: annotations.as_ref(),
        },
        route,
    );
    print_verdict(&policy, &verdict, rate);
    Ok(match verdict.effect {
        Effect::Allow => RULES_TEST_ALLOW,
        Effect::Deny => RULES_TEST_DENY,
        Effect::Ask => RULES_TEST_ASK,
    })
}

/// What `rules test` prints about a verdict: the decision, who made it and why, the
/// rate, the rules in force, and whether a chat rule or a dry run was involved.
fn print_verdict(
    policy: &crate::domain::rules::Policy,
    verdict: &crate::domain::rules::RuleVerdict,
    rate: Option<crate::domain::rules::Rate>,
) {
    println!("decision: {}", verdict.effect);
    println!("by: {}", verdict.by());
    if let Some(reason) = &verdict.reason {
        println!("reason: {reason}");
    }
    if let Some(rate) = rate {
        println!(
            "rate: at most {} call(s) per {} s, then the call asks (not counted by rules test)",
            rate.max, rate.per_seconds
        );
    }
    println!(
        "rules: {} rule(s), {} chat rule(s), mode {}, hash {}",
        policy.set.rules().len(),
        policy.chat().rules().len(),
        policy.mode.as_str(),
        policy.fingerprint().as_str()
    );
    if let Some(c) = policy
        .chat()
        .rules()
        .iter()
        .find(|c| Some(c.rule.name()) == verdict.rule.as_deref())
    {
        println!(
            "chat rule: accepted in route {}'s chat, {}",
            c.route,
            if c.enforced {
                "enforced"
            } else {
                "in a dry run"
            }
        );
    }
    if !verdict.enforced {
        println!("dry run: the service asks for every call and records this decision");
    }
}

/// An agent's token from the variable `--token-env` names.
pub fn token_from_env(var: &str) -> anyhow::Result<String> {
    std::env::var(var).with_context(|| format!("environment variable {var} is not set"))
}

/// `mcp`: the MCP tools on stdin/stdout (logs go to stderr), against the service at
/// `--url`.
pub async fn mcp_stdio(url: &str, token_env: &str) -> anyhow::Result<()> {
    let token = token_from_env(token_env)?;
    let base = cli::service_url(url)?;
    // Every request the tools make returns within a minute (the longest long-poll is
    // get_decision's 60 s): a service that stops answering is an error, not a hang.
    let client = crate::client::V1Client::new(
        &base,
        token.into(),
        Some(std::time::Duration::from_secs(90)),
    )?;
    crate::mcp::serve_stdio(crate::mcp::Api::Http(client)).await
}

/// `gateway`, as its command line gave it.
pub struct GatewayCommand {
    pub url: String,
    pub token_env: String,
    pub name: String,
    pub route: Option<String>,
    pub owner: Option<String>,
    pub trust_annotations: bool,
    pub pin: crate::gateway::PinMode,
    pub timeout_seconds: Option<f64>,
    pub upstream_url: Option<String>,
    pub upstream_headers: Vec<String>,
    pub command: Vec<String>,
}

/// `gateway`: the MCP gateway on stdin/stdout (logs and the upstream's stderr go to
/// stderr) in front of one upstream, asking the service at `--url`.
pub async fn gateway(c: GatewayCommand) -> anyhow::Result<()> {
    use crate::gateway::{GatewayOptions, Upstream};
    let token = token_from_env(&c.token_env)?;
    let url = cli::service_url(&c.url)?;
    if let Some(t) = c.timeout_seconds
        && !(t.is_finite() && t > 0.0)
    {
        anyhow::bail!("--timeout {t}: must be a number of seconds greater than 0");
    }
    let upstream = match (c.upstream_url, c.command.is_empty()) {
        (Some(_), false) => anyhow::bail!(
            "give the upstream either as a command after `--` or as --upstream-url, not both"
        ),
        (None, true) => anyhow::bail!(
            "no upstream: give its command after `--` (e.g. `-- npx -y \
             @modelcontextprotocol/server-filesystem /srv/share`) or --upstream-url"
        ),
        (None, false) if !c.upstream_headers.is_empty() => {
            anyhow::bail!("--upstream-header is for an --upstream-url upstream only")
        }
        (None, false) => Upstream::Command {
            argv: c.command,
            env: None,
        },
        (Some(url), true) => {
            let parsed = url::Url::parse(&url)
                .with_context(|| format!("--upstream-url {url:?} is not a URL"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                anyhow::bail!("--upstream-url {url:?}: only http and https are spoken");
            }
            let mut headers = Vec::new();
            for h in &c.upstream_headers {
                let (name, var) = h.split_once('=').with_context(|| {
                    format!("--upstream-header {h:?}: write NAME=ENV_VAR (the value is read from ENV_VAR)")
                })?;
                let value = std::env::var(var).with_context(|| {
                    format!("--upstream-header {name}: environment variable {var} is not set")
                })?;
                headers.push((name.to_owned(), value.into()));
            }
            Upstream::Url { url, headers }
        }
    };
    crate::gateway::run_stdio(GatewayOptions {
        url,
        token: token.into(),
        name: c.name,
        route: c.route,
        owner: c.owner,
        trust_annotations: c.trust_annotations,
        pin: c.pin,
        timeout_seconds: c.timeout_seconds,
        upstream,
    })
    .await
    .map_err(|e| anyhow::anyhow!(e))
}

/// How long a `console-link` stays valid when `--minutes` does not say.
pub const CONSOLE_LINK_MINUTES: u64 = 5;

/// `console-link --user ID`: a URL that opens the console as Telegram user `user_id`
/// in a browser, without Telegram: the page at `base` (default `mini_app.public_url`)
/// with launch data in its fragment (`#tgWebAppData=...`), signed with the bot's token
/// as Telegram signs it, and dated so that the service's own freshness check
/// (`mini_app.max_age_seconds`) lets it in for `minutes` more minutes only. Refused when
/// the console is off, `minutes` is longer than that freshness, or the user may not open
/// the console ([`Config::may_open_console`]). Returns the URL and when it stops working.
pub fn console_link(
    path: &Path,
    user_id: u64,
    minutes: u64,
    base: Option<&str>,
) -> anyhow::Result<(String, time::OffsetDateTime)> {
    let config = Config::from_settings_and_process_env(Settings::load(path)?)?;
    let Some(app) = &config.mini_app else {
        anyhow::bail!(
            "the console is off in {}: set [mini_app] enabled = true (with its public_url) first",
            path.display()
        );
    };
    if !config.may_open_console(user_id) {
        anyhow::bail!(
            "Telegram user {user_id} approves no route and is no person of [people] in {}: \
             the console would open nothing for them (the service answers 404)",
            path.display()
        );
    }
    let valid = std::time::Duration::from_secs(minutes.saturating_mul(60));
    if minutes == 0 || valid > app.max_age {
        anyhow::bail!(
            "--minutes must be from 1 to {} (mini_app.max_age_seconds = {}): launch data \
             older than that is refused",
            app.max_age.as_secs() / 60,
            app.max_age.as_secs()
        );
    }
    let now = crate::service::now();
    // Dated back so that it turns stale `minutes` from now: the service decides by
    // `auth_date + max_age`, and nothing else in the data says when it ends.
    let auth_date = now - (app.max_age - valid);
    let name = config
        .people
        .iter()
        .filter(|(_, id)| **id == user_id)
        .map(|(name, _)| name.clone())
        .min()
        .unwrap_or_else(|| format!("Operator {user_id}"));
    let user = serde_json::json!({"id": user_id, "first_name": name}).to_string();
    let auth = auth_date.unix_timestamp().to_string();
    let data =
        crate::domain::launch::signed(&[("user", &user), ("auth_date", &auth)], config.bot_token());
    let fragment = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("tgWebAppData", &data)
        .append_pair("tgWebAppVersion", "8.0")
        .append_pair("tgWebAppPlatform", "web")
        .finish();
    let base = base.unwrap_or(&app.public_url).trim_end_matches('/');
    Ok((format!("{base}/app#{fragment}"), now + valid))
}
