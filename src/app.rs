//! Wiring: builds the store, the Telegram adapter, the service and the HTTP server, and
//! runs them until a shutdown token fires.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::config::{Config, HttpLimits, TelegramMode};
use crate::metrics::Metrics;
use crate::service::Service;
use crate::storage::{self, Audit, ConnectMode, Coordination, Store};
use crate::telegram::{self, TelegramMessenger};

/// How long in-flight HTTP requests get to finish after shutdown begins.
const HTTP_DRAIN: Duration = Duration::from_secs(10);
/// How often expired confirmation windows are deleted (lookups ignore them anyway).
const WINDOW_PURGE_EVERY: Duration = Duration::from_secs(600);
/// How often the leader marks `unknown` the confirmed calls whose report is overdue
/// (`expect_outcome_seconds`): "No report" shows within a second of its time.
const RUN_REPORT_SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long background work (message edits, deliveries) gets to finish.
const TASK_DRAIN: Duration = Duration::from_secs(10);

pub struct Application {
    listener: TcpListener,
    service: Arc<Service>,
    /// The whole store, held here where everything is wired: the service gets it as
    /// the union its pipeline needs; the tasks around it get the one role each uses.
    store: Arc<dyn Store>,
    bot: teloxide::Bot,
    poll_timeout_seconds: u32,
    telegram_mode: TelegramMode,
    /// `[server]`: the HTTP server's timeouts and connection limit.
    http: HttpLimits,
}

/// Opens the database `database.url` names (SQLite or PostgreSQL) and applies
/// migrations.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    let store =
        storage::connect_pooled(&config.database_url, ConnectMode::Create, config.pool_size)
            .await
            .with_context(|| "cannot open the database (database.url)".to_owned())?;
    store.set_outbox_backlog_bound(config.webhooks.max_backlog_per_agent);
    store
        .migrate()
        .await
        .context("cannot apply database migrations")?;
    Ok(store)
}

impl Application {
    /// Connects, migrates and binds; nothing runs until [`Application::run_until_stopped`].
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        let listener = TcpListener::bind(&config.bind)
            .await
            .with_context(|| format!("cannot listen on {} (server.bind)", config.bind))?;
        Self::build_on(config, listener).await
    }

    /// As [`Application::build`], on a listener the caller bound (instead of
    /// `server.bind`): tests bind port 0 first so the address, part of `public_url` in
    /// webhook mode, is known before the configuration is made.
    pub async fn build_on(config: Config, listener: TcpListener) -> anyhow::Result<Application> {
        let config = Arc::new(config);
        let store = open_store(&config).await?;
        let bot = telegram::client::build_bot(
            config.bot_token(),
            config.telegram_api_url.clone(),
            config.poll_timeout_seconds,
        );
        // One set of metrics per application: tests run several in one process.
        let metrics = Arc::new(Metrics::new());
        let messenger = Arc::new(TelegramMessenger::new(bot.clone()).with_metrics(metrics.clone()));
        let service =
            Arc::new(Service::new(config.clone(), store.clone(), messenger).with_metrics(metrics));
        Ok(Application {
            listener,
            service,
            store,
            bot,
            poll_timeout_seconds: config.poll_timeout_seconds,
            telegram_mode: config.telegram_mode.clone(),
            http: config.http,
        })
    }

    /// The audit trail, for what the caller records before serving (the demo's adopted
    /// approver).
    pub fn audit(&self) -> &dyn Audit {
        self.store.as_ref()
    }

    /// The service, for what runs beside the application (the rules' reload on SIGHUP).
    pub fn service(&self) -> Arc<Service> {
        self.service.clone()
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 0)))
    }

    /// Serves until `shutdown` fires, then stops taking requests, lets in-flight ones
    /// finish (within a bound), stops polling after acknowledging what was handled, and
    /// closes the database.
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let Application {
            listener,
            service,
            store,
            bot,
            poll_timeout_seconds,
            telegram_mode,
            http,
        } = self;
        // The trail as this run found it, before its own start is recorded.
        crate::audit_head::log_head(store.as_ref(), "start").await;
        announce(&service, &listener).await?;
        let background = spawn_background(&service, &store, &bot, &shutdown).await?;
        let front = Front {
            listener,
            bot,
            poll_timeout_seconds,
            telegram_mode,
            http,
        };
        let (server, polling) = spawn_front(&service, front, &shutdown);

        shutdown.cancelled().await;
        tracing::info!("shutting down");
        drain(
            &service,
            &store,
            server,
            polling,
            background,
            poll_timeout_seconds,
        )
        .await;
        Ok(())
    }
}

/// Records this replica's configuration, reads the others' and reloads the pending
/// requests: the steps that must be done before anything is served.
async fn announce(service: &Arc<Service>, listener: &TcpListener) -> anyhow::Result<()> {
    // Several replicas: this one's configuration is recorded before it serves
    // anything, so every other replica counts it from its first action on, and the
    // others' are read (and a difference logged) before its first own
    // (src/service/agree.rs).
    service
        .agreement()
        .hold_config()
        .await
        .context("cannot record this replica's configuration in the database")?;
    service
        .agreement()
        .config_report()
        .await
        .context("cannot read the other replicas' configurations")?;
    service
        .record_start()
        .await
        .context("cannot record the start in the audit trail")?;
    // The chat's rules decide from the first request on, as the file's do.
    service
        .load_chat_rules()
        .await
        .context("cannot read the rules accepted in the chats")?;
    service
        .load_absences()
        .await
        .context("cannot read who is away")?;
    let recovered = service
        .recover()
        .await
        .context("cannot reload pending requests")?;
    tracing::info!(
        addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        pending = recovered,
        "hitl-telegram is serving"
    );
    Ok(())
}

/// The tasks around the service, started before serving and awaited at shutdown in
/// [`drain`]'s order.
struct Background {
    follow: Option<JoinHandle<()>>,
    lead_stop: CancellationToken,
    lead: JoinHandle<()>,
    config_record: JoinHandle<()>,
    deadlines: JoinHandle<()>,
    outbox: JoinHandle<()>,
    purge: JoinHandle<()>,
    bridge: JoinHandle<()>,
    commands: JoinHandle<()>,
}

/// Starts the replica's background work: change following, the leader lease and what
/// the leader does, the sweeps and the bot's command registration.
async fn spawn_background(
    service: &Arc<Service>,
    store: &Arc<dyn Store>,
    bot: &teloxide::Bot,
    shutdown: &CancellationToken,
) -> anyhow::Result<Background> {
    // Several replicas on one PostgreSQL: what another commits wakes our waiters.
    // Listening starts before serving, so no decision taken meanwhile goes unheard.
    let coordination: &dyn Coordination = store.as_ref();
    let changes = coordination
        .follow_changes()
        .await
        .context("cannot listen for the changes other replicas commit")?;
    let follow = changes.map(|c| tokio::spawn(service.clone().follow_changes(c, shutdown.clone())));
    // Several replicas: the one holding the leader lease (with SQLite, this one, from
    // `recover` on) keeps the deadlines and runs the webhook outbox, the Redis bridge
    // and long polling; the lease is renewed here (src/service/lead.rs).
    // Renewed until the leader's work has drained at shutdown, then given up: a lease
    // left to expire meanwhile would let another replica post what this one still
    // is posting.
    let lead_stop = CancellationToken::new();
    let lead = tokio::spawn(
        service
            .clone()
            .keep_lead(shutdown.clone(), lead_stop.clone()),
    );
    // The configuration's record is renewed as long as the lease is.
    let config_record = tokio::spawn(service.agreement().clone().keep_config(lead_stop.clone()));
    let deadlines = tokio::spawn(service.clone().run_deadlines(shutdown.clone()));
    let outbox = tokio::spawn(
        service
            .clone()
            .while_leading(shutdown.clone(), crate::outbox::run),
    );
    let purge = tokio::spawn(crate::service::run_window_purge(
        service.roles().windows.clone(),
        service.roles().agent_events.clone(),
        WINDOW_PURGE_EVERY,
        shutdown.clone(),
    ));
    service.tasks().spawn(
        service
            .clone()
            .run_report_sweep(RUN_REPORT_SWEEP_EVERY, shutdown.clone()),
    );
    // The audit chain's head in the log (hourly; at start and shutdown too), so a
    // truncated trail shows.
    service.tasks().spawn(crate::audit_head::log_audit_head(
        store.clone(),
        crate::audit_head::EVERY,
        shutdown.clone(),
    ));
    // Rules accepted through another replica are read here within seconds; the leader
    // offers each route its proposals when they are due.
    service.tasks().spawn(
        service
            .clone()
            .keep_chat_rules(crate::service::CHAT_RULES_REFRESH, shutdown.clone()),
    );
    service
        .tasks()
        .spawn(service.clone().while_leading(shutdown.clone(), |s, stop| {
            s.offer_on_schedule(crate::service::OFFER_CHECK_EVERY, stop)
        }));
    // Returns at once unless [telegram] outage_webhook_url is set.
    service.tasks().spawn(
        service
            .clone()
            .while_leading(shutdown.clone(), crate::outbox::alerts::run),
    );
    // Returns at once unless [redis_bridge] is enabled.
    let bridge = tokio::spawn(
        service
            .clone()
            .while_leading(shutdown.clone(), crate::redis_bridge::run),
    );
    // getMe (for /cmd@bot) and setMyCommands, retried in the background.
    let commands = tokio::spawn(telegram::commands::register(
        bot.clone(),
        service.clone(),
        shutdown.clone(),
    ));
    Ok(Background {
        follow,
        lead_stop,
        lead,
        config_record,
        deadlines,
        outbox,
        purge,
        bridge,
        commands,
    })
}

/// What the HTTP front and the Telegram updates are built from.
struct Front {
    listener: TcpListener,
    bot: teloxide::Bot,
    poll_timeout_seconds: u32,
    telegram_mode: TelegramMode,
    http: HttpLimits,
}

/// Starts the HTTP server (the API, /mcp and, in webhook mode, Telegram's route) and
/// the updates' task; returns the server's task and the updates' task.
fn spawn_front(
    service: &Arc<Service>,
    front: Front,
    shutdown: &CancellationToken,
) -> (JoinHandle<()>, JoinHandle<()>) {
    let Front {
        listener,
        bot,
        poll_timeout_seconds,
        telegram_mode,
        http,
    } = front;
    // Updates come from long polling or from the webhook route, never both. In
    // webhook mode the task only sets the webhook and ends.
    let v1 = api::router(AppState {
        service: service.clone(),
        stop: shutdown.clone(),
        rate: Arc::new(api::limits::AgentRateLimiter::default()),
        slots: Arc::new(api::limits::AgentSlots::default()),
        admission: Arc::new(api::admission::Queue::new(
            api::admission::ADMITTED,
            service.metrics().clone(),
        )),
    });
    // /mcp: the MCP tools, each call a request into the same router (src/mcp.rs).
    let mut app = v1.clone().merge(crate::mcp::router(v1, service.clone()));
    // /mcp/upstreams/{name}: the gateways the service hosts, asking its own API over
    // loopback as the agent that called (src/gateway/hosted/).
    if !service.config().mcp_upstreams.is_empty()
        && let Ok(address) = listener.local_addr()
    {
        let hosted = crate::gateway::hosted::router(
            service.clone(),
            loopback_base(address),
            shutdown.clone(),
        );
        app = app.merge(hosted);
    }
    let polling = match telegram_mode {
        // One poller per bot token (a second gets 409): the leader's.
        TelegramMode::Polling => tokio::spawn(service.clone().while_leading(
            shutdown.clone(),
            move |service, term| {
                telegram::polling::run(bot.clone(), service, poll_timeout_seconds, term)
            },
        )),
        TelegramMode::Webhook(webhook) => {
            app = app.merge(telegram::webhook::router(service.clone(), &webhook));
            tokio::spawn(telegram::webhook::register(
                bot,
                webhook,
                service.metrics().clone(),
                shutdown.clone(),
            ))
        }
    };
    // Header-read and idle timeouts, a connection limit, idle connections closed
    // first when it is reached (src/api/serve/).
    let server = tokio::spawn(api::serve::serve(listener, app, http, shutdown.clone()));

    (server, polling)
}

/// The base URL at which this process reaches its own HTTP server: the bound address,
/// or loopback when it listens on every address.
fn loopback_base(address: std::net::SocketAddr) -> String {
    let ip = match address.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
        }
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, address.port()))
}

/// After `shutdown`: lets each task finish within its bound, in the order that keeps
/// the leader's work whole, then gives up the lease and closes the store.
async fn drain(
    service: &Arc<Service>,
    store: &Arc<dyn Store>,
    server: JoinHandle<()>,
    polling: JoinHandle<()>,
    background: Background,
    poll_timeout_seconds: u32,
) {
    let Background {
        follow,
        lead_stop,
        lead,
        config_record,
        deadlines,
        outbox,
        purge,
        bridge,
        commands,
    } = background;
    match tokio::time::timeout(HTTP_DRAIN, server).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::error!(error = %e, "HTTP server task failed"),
        Err(_) => tracing::warn!("in-flight HTTP requests did not finish in time"),
    }
    let _ = tokio::time::timeout(poll_drain(poll_timeout_seconds), polling).await;
    let _ = deadlines.await;
    if let Some(follow) = follow {
        let _ = follow.await;
    }
    let _ = purge.await;
    let _ = tokio::time::timeout(TASK_DRAIN, commands).await;
    // The bridge finishes storing the question it took (or leaves it to be re-driven).
    if tokio::time::timeout(TASK_DRAIN, bridge).await.is_err() {
        tracing::warn!("the Redis bridge did not stop in time");
    }
    // The webhook worker finishes the attempts it has started before it returns.
    if tokio::time::timeout(TASK_DRAIN, outbox).await.is_err() {
        tracing::warn!("a webhook attempt did not finish in time");
    }
    service.tasks().close();
    if tokio::time::timeout(TASK_DRAIN, service.tasks().wait())
        .await
        .is_err()
    {
        tracing::warn!("background Telegram work did not finish in time");
    }
    // The leader's work has stopped: another replica may take it over at once.
    lead_stop.cancel();
    let _ = lead.await;
    service.lead().release_lead().await;
    let _ = config_record.await;
    service.agreement().release_config().await;
    // Everything that writes has stopped: this is the trail's final head.
    crate::audit_head::log_head(store.as_ref(), "shutdown").await;
    store.close().await;
    tracing::info!("stopped");
}

fn poll_drain(poll_timeout_seconds: u32) -> Duration {
    Duration::from_secs(u64::from(poll_timeout_seconds) + 5)
}

/// Reloads the rules (`[[rules]]`, `rules_default`, `rules_mode`) from the configuration
/// file `path` on every SIGHUP until `stop` fires. A file that does not read as a
/// configuration, or whose rules are refused, changes nothing: the last good rules stay
/// in force, and the log says why. Only the rules are reloaded; every other change
/// needs a restart.
pub async fn reload_rules_on_hangup(
    service: Arc<Service>,
    path: std::path::PathBuf,
    stop: CancellationToken,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut hangups = match signal(SignalKind::hangup()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGHUP: the rules reload only on restart");
                return;
            }
        };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                got = hangups.recv() => if got.is_none() { return },
            }
            match crate::config::reload_rules(&path) {
                Ok(policy) => match service.rules().replace(policy).await {
                    Ok(true) => {}
                    Ok(false) => tracing::info!("SIGHUP: the rules are unchanged"),
                    Err(e) => tracing::error!(error = %e,
                        "SIGHUP: cannot record the new rules in the audit trail; the last good rules stay in force"),
                },
                Err(e) => tracing::error!(error = %e,
                    "SIGHUP: the configuration's rules were refused; the last good rules stay in force"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (service, path);
        stop.cancelled().await;
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}
