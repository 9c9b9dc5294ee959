//! Command-line pieces that are more than argument parsing: `ask` (gate a shell step on
//! a human's tap), `exec` (ask, run a command if approved, report what became of it:
//! [`exec`]), the `--demo` configuration, `check-config --online`, and how the
//! commands word their errors and read their arguments.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use serde_json::value::RawValue;
use time::OffsetDateTime;

use crate::client::{Failure, Kind, NewConfirmation, Reply, Retry, Retrying, Suspend, V1Client};
use crate::config::{AgentSettings, Config, MAX_TIMEOUT_LIMIT, Route, RouteSettings, Settings};
use crate::domain::python;

pub mod exec;

/// Variables the `--demo` mode reads.
pub const DEMO_OPERATOR_ENV: &str = "HITL_DEMO_OPERATOR_ID";
pub const DEMO_AGENT_TOKEN_ENV: &str = "HITL_DEMO_AGENT_TOKEN";
/// The demo's one route.
pub const DEMO_ROUTE: &str = "demo";
/// How long `serve --demo` without an operator id waits for someone to adopt.
pub const DEMO_ADOPT_SECONDS: u64 = 60;
/// The approver a demo configuration is checked with before anyone is adopted: any id
/// that passes the checks (not 0, not the bot's, a chat id too) will do, since it never
/// runs; this one is no bot's (their ids are far smaller).
const DEMO_STAND_IN_OPERATOR: u64 = i64::MAX as u64;

/// `HITL_DEMO_OPERATOR_ID` as given: a Telegram user id, or `None` when unset or empty
/// (the demo then adopts the first person who sends `/start`).
pub fn demo_operator(raw: Option<String>) -> anyhow::Result<Option<u64>> {
    let Some(raw) = raw.filter(|r| !r.trim().is_empty()) else {
        return Ok(None);
    };
    raw.trim()
        .parse()
        .ok()
        .filter(|id| *id != 0)
        .map(Some)
        .with_context(|| {
            format!(
                "{DEMO_OPERATOR_ENV} must be a numeric Telegram user id (or unset, to adopt the \
                 first person who sends /start to the bot)"
            )
        })
}

/// The demo's configuration: `s` with [`demo_settings`], checked, marked as the demo.
/// Without an operator it is checked with a stand-in approver, for `check-config` and
/// for failing fast before `serve` waits for someone to adopt.
pub fn demo_config(s: Settings, operator: Option<u64>) -> anyhow::Result<Config> {
    let settings = demo_settings(s, operator.unwrap_or(DEMO_STAND_IN_OPERATOR))?;
    let mut config = Config::from_settings_and_process_env(settings)?;
    config.demo = true;
    Ok(config)
}

/// Replaces routes and agents with one route (the operator's private chat with the bot,
/// the operator as its only approver) and one agent `demo`, so a newcomer needs no file
/// edits: only a bot token and a token for their agent (and their Telegram user id, or
/// a `/start` to the bot in the first minute).
pub fn demo_settings(mut s: Settings, operator: u64) -> anyhow::Result<Settings> {
    s.routes = vec![RouteSettings {
        name: DEMO_ROUTE.into(),
        // In a private chat the chat id is the user's id.
        chat_id: i64::try_from(operator).context("Telegram user id out of range")?,
        approvers: vec![operator],
        forbid_self_approval: false,
        quorum: None,
        max_window_seconds: crate::config::DEFAULT_MAX_WINDOW_SECONDS,
        max_grant_seconds: crate::config::DEFAULT_MAX_GRANT_SECONDS,
        expect_outcome_seconds: None,
        console_confirm: false,
        remind_after: Vec::new(),
        escalate_after: None,
        escalate_to: None,
        escalation_approvers: None,
        extend_minutes: None,
        max_extensions: crate::config::DEFAULT_MAX_EXTENSIONS,
        topic_id: None,
        grant_scopes: Default::default(),
        // The demo's one person decides everything, the rules suggested to them too.
        rule_editors: vec![operator],
        never_suggest: Vec::new(),
        suggest_days: crate::config::DEFAULT_SUGGEST_DAYS,
        suggest_every_days: crate::config::DEFAULT_SUGGEST_DAYS,
        suggest_min_decisions: crate::config::DEFAULT_SUGGEST_MIN_DECISIONS,
        sla_seconds: None,
        on_call: Vec::new(),
        on_call_time_zone: None,
        delegates: Vec::new(),
    }];
    s.agents = vec![AgentSettings {
        name: "demo".into(),
        token_env: DEMO_AGENT_TOKEN_ENV.into(),
        routes: vec![DEMO_ROUTE.into()],
        default_route: Some(DEMO_ROUTE.into()),
        webhook_secret_env: None,
        callback_url_prefixes: Vec::new(),
        allow_link_local_callbacks: false,
        requests_per_minute: 120,
        max_pending: 100,
        max_streams: crate::config::DEFAULT_MAX_STREAMS,
        max_long_polls: crate::config::DEFAULT_MAX_LONG_POLLS,
        grant_scopes: Default::default(),
    }];
    Ok(s)
}

/// What `ask` sends.
#[derive(Debug, Clone)]
pub struct AskRequest {
    pub url: String,
    pub token: String,
    pub tool: String,
    /// `key=value` (a string) or `key:=json` (any JSON value), in order.
    pub params: Vec<String>,
    pub template: Option<String>,
    pub timeout_seconds: Option<f64>,
    pub owner_id: Option<String>,
    pub context: Option<String>,
    pub route: Option<String>,
    pub window_seconds: Option<u64>,
}

/// Builds the `params` object text from `key=value` / `key:=json` arguments, keeping
/// their order and every digit of a JSON number.
pub fn params_json(args: &[String]) -> anyhow::Result<String> {
    let mut parts = Vec::with_capacity(args.len());
    for arg in args {
        let (key, value) = if let Some((k, v)) = arg.split_once(":=") {
            if k.contains('=') {
                // `a=b:=c` is the string "b:=c" for key a.
                let (k, v) = arg.split_once('=').unwrap_or((arg, ""));
                (k, serde_json::to_string(v)?)
            } else {
                python::json::parse(v)
                    .with_context(|| format!("--param {k}:= needs a JSON value"))?;
                (k, v.to_owned())
            }
        } else if let Some((k, v)) = arg.split_once('=') {
            (k, serde_json::to_string(v)?)
        } else {
            bail!("--param must be key=value or key:=json, got '{arg}'");
        };
        if key.is_empty() {
            bail!("--param '{arg}' has an empty key");
        }
        parts.push(format!("{}: {value}", serde_json::to_string(key)?));
    }
    Ok(format!("{{{}}}", parts.join(", ")))
}

/// Exit codes of `ask`.
pub const EXIT_CONFIRMED: u8 = 0;
pub const EXIT_CANCELLED: u8 = 1;
pub const EXIT_TIMEOUT: u8 = 2;
pub const EXIT_ERROR: u8 = 3;

/// The service's base URL from what `--url` was given. A loopback address without a
/// scheme (`127.0.0.1:8080`, `localhost:8080`) means plain http, as the service listens
/// there; any other host must say its scheme, since guessing http would send the token
/// in the clear.
pub fn service_url(given: &str) -> anyhow::Result<String> {
    let given = given.trim().trim_end_matches('/');
    if given.contains("://") {
        return Ok(given.to_owned());
    }
    let host = given.split(['/', ':']).next().unwrap_or("");
    let loopback = host == "localhost"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
        || given.starts_with("[::1]");
    if loopback {
        Ok(format!("http://{given}"))
    } else {
        anyhow::bail!(
            "--url {given:?} has no scheme: write https://{given} (or http:// on a trusted network)"
        )
    }
}

/// Asks through a running service and waits for the decision. Returns the exit code
/// and what to print on stdout (the record) or stderr (the error). While it waits it
/// says so on stderr (every [`progress_every`]), so stdout stays the record alone for a
/// script.
pub async fn ask(req: AskRequest) -> (u8, String) {
    match ask_inner(&req, &mut |line| eprintln!("ask: {line}")).await {
        Ok((code, out)) => (code, out),
        Err(e) => (EXIT_ERROR, format!("error: {e:#}")),
    }
}

/// How long past `--timeout` `ask` and `exec` wait for the decision before they give
/// up (exit 3; `exec` never runs its command then), whatever the service does. The
/// service ends a question at its deadline and a long-poll hands the outcome over at
/// once, so the margin is only used up by a slow network or a service that is busy or
/// broken: one that accepts the connection and never answers (or answers at a crawl)
/// would otherwise hold the script forever. Without `--timeout` the service's first
/// answer says the request's deadline, and it is the bound on that answer.
pub const GIVE_UP_MARGIN: Duration = Duration::from_secs(10);

/// Most seconds between two "still waiting" lines, and the longest single long-poll.
const PROGRESS_EVERY_MAX: Duration = Duration::from_secs(30);
/// How many times in a row `ask` tries to reach the service before it gives up.
const ASK_ATTEMPTS: u32 = 3;

/// The request body `ask` sends: `wait: "suspend"`, so the service answers as soon as
/// the question is stored and `ask` can say which request it waits for.
fn ask_body(req: &AskRequest, key: &str) -> anyhow::Result<String> {
    let params = RawValue::from_string(params_json(&req.params)?)?;
    Ok(NewConfirmation {
        tool: &req.tool,
        params: &params,
        owner_id: req.owner_id.as_deref(),
        template: req.template.as_deref(),
        context: req.context.as_deref(),
        timeout_seconds: req.timeout_seconds,
        route: req.route.as_deref(),
        window_seconds: req.window_seconds,
        allow_edit: false,
        args_schema: None,
        server: None,
        annotations: None,
        grant: None,
        wait: Suspend,
        idempotency_key: key,
    }
    .to_json())
}

/// When `ask` gives up: [`GIVE_UP_MARGIN`] past the request's deadline, as `--timeout`
/// sets it from the start. Only the service's word moves it, and only later: the
/// deadline it gave a request asked without `--timeout`, or a later one an approver set
/// ("+N min"). Every step of the wait (connecting, sending, the answer's headers and
/// body, retries and their pauses, long-polls) ends by it.
struct GiveUp {
    at: Instant,
    timeout_seconds: Option<f64>,
    base: String,
}

impl GiveUp {
    fn new(req: &AskRequest, base: &str) -> GiveUp {
        // One the service refuses (negative, not a number) counts as none: its answer
        // comes at once. One past any service's limit counts as that limit.
        let timeout = req
            .timeout_seconds
            .filter(|t| t.is_finite())
            .and_then(|t| Duration::try_from_secs_f64(t.min(MAX_TIMEOUT_LIMIT)).ok())
            .unwrap_or_default();
        GiveUp {
            at: after(timeout),
            timeout_seconds: req.timeout_seconds,
            base: base.to_owned(),
        }
    }

    /// `step`, or the error that says `ask` gave up (waiting on `id`, once known).
    async fn within<T>(
        &self,
        id: Option<&str>,
        step: impl Future<Output = T>,
    ) -> anyhow::Result<T> {
        tokio::time::timeout_at(self.at.into(), step)
            .await
            .map_err(|_| self.gave_up(id))
    }

    fn gave_up(&self, id: Option<&str>) -> anyhow::Error {
        let margin = GIVE_UP_MARGIN.as_secs();
        let bound = match (self.timeout_seconds, id) {
            (Some(t), _) => format!("--timeout {t} s plus {margin} s"),
            (None, Some(_)) => format!("the request's deadline plus {margin} s"),
            (None, None) => format!("{margin} s for a first answer, without --timeout"),
        };
        let what = match id {
            None => format!("the service at {} did not answer", self.base),
            Some(id) => format!(
                "the service at {} gave no decision on request {id}",
                self.base
            ),
        };
        anyhow::anyhow!("gave up waiting ({bound}): {what}")
    }

    /// Follows the deadline the service gave `record` (`answered` by its clock, the
    /// `Date` of its answer), when it counts: a request asked without `--timeout`
    /// (its first record says the deadline), or one an approver gave more time.
    fn follow(&mut self, record: &Value, answered: Option<OffsetDateTime>, first: bool) {
        let extended = record
            .pointer("/progress/extensions")
            .and_then(Value::as_u64)
            .is_some_and(|n| n > 0);
        if !(extended || (first && self.timeout_seconds.is_none())) {
            return;
        }
        let Some(expires_at) = expires_at(record) else {
            return;
        };
        // By the service's clock when it says it: the two machines' clocks may differ.
        let now = answered.unwrap_or_else(OffsetDateTime::now_utc);
        let left = Duration::try_from(expires_at - now).unwrap_or_default();
        self.at = self.at.max(after(left));
    }
}

/// [`GIVE_UP_MARGIN`] after `wait` from now. No service keeps a question longer than
/// [`MAX_TIMEOUT_LIMIT`] (the largest `max_timeout_seconds` it accepts), so no wait is
/// longer: a `--timeout` or a deadline past it cannot overflow the clock.
fn after(wait: Duration) -> Instant {
    let longest = Duration::from_secs_f64(MAX_TIMEOUT_LIMIT);
    Instant::now() + wait.min(longest) + GIVE_UP_MARGIN
}

/// The record's `expires_at`, if it has a readable one.
fn expires_at(record: &Value) -> Option<OffsetDateTime> {
    use time::format_description::well_known::Rfc3339;
    record
        .get("expires_at")
        .and_then(Value::as_str)
        .and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok())
}

/// Seconds from now until the record's `expires_at` (0 once past, or unreadable).
fn seconds_left(record: &Value) -> u64 {
    crate::client::seconds_left(record).map_or(0, |left| left.ceil() as u64)
}

/// The time between "still waiting" lines for a question of `total` seconds: a quarter
/// of it, between 1 and [`PROGRESS_EVERY_MAX`] seconds.
fn progress_every(total: u64) -> Duration {
    Duration::from_secs((total / 4).max(1)).min(PROGRESS_EVERY_MAX)
}

/// How `ask` retries a request: after a second while the service cannot be reached or
/// answers 503, [`ASK_ATTEMPTS`] times in all, and after `Retry-After` for as long as
/// it answers 429 (too many long-polls: a person waits anyway), all of it within the
/// bound [`GiveUp`] sets.
const ASK_RETRY: Retry = Retry {
    attempts: ASK_ATTEMPTS,
    delay: Duration::from_secs(1),
    doubling: false,
    retry_status: |status| status == reqwest::StatusCode::SERVICE_UNAVAILABLE,
    busy_waits: true,
    retry_failure: |failure| matches!(failure, Failure::Unreachable(e) if e.is_connect() || e.is_request()),
};

/// What `ask` says while it retries.
fn say_retrying(progress: &mut (dyn FnMut(String) + Send)) -> impl FnMut(Retrying<'_>) + '_ {
    move |retrying| match retrying {
        Retrying::Busy(secs) => progress(format!("the service is busy; trying again in {secs} s")),
        Retrying::Failed(failure) => progress(format!("{}; retrying", failure.error())),
        Retrying::Status(_) => {}
    }
}

/// [`ask`], telling `progress` what it is doing.
async fn ask_inner(
    req: &AskRequest,
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<(u8, String)> {
    match decide(req, progress).await? {
        Decided::Refused(body) => Ok((EXIT_ERROR, body)),
        Decided::Record { code, record, .. } => Ok((code, serde_json::to_string_pretty(&record)?)),
    }
}

/// How an ask ended.
pub(crate) enum Decided {
    /// The request's last record, with the exit code its status means and its JSON text
    /// as the service sent it (which keeps `parameters` verbatim: key order and every
    /// digit, which a parsed [`Value`] would not).
    Record {
        code: u8,
        record: Value,
        text: String,
    },
    /// The service refused the request: its error body.
    Refused(String),
}

/// Asks and waits for the decision, telling `progress` what it is doing.
pub(crate) async fn decide(
    req: &AskRequest,
    progress: &mut (dyn FnMut(String) + Send),
) -> anyhow::Result<Decided> {
    // One idempotency key for every attempt: a retry after a dropped connection finds
    // the same request instead of asking the operator twice.
    let key = format!(
        "ask-{}",
        crate::domain::ids::CallbackToken::generate().as_str()
    );
    let body = ask_body(req, &key)?;
    let base = service_url(&req.url)?;
    let mut give_up = GiveUp::new(req, &base);
    let client = V1Client::new(&base, req.token.clone().into(), None)?;
    let response = give_up
        .within(
            None,
            client.create(&body, None, &ASK_RETRY, &mut say_retrying(progress)),
        )
        .await?;
    let answered = response.as_ref().ok().and_then(|r| r.date);
    let mut record = read_record(response)?;
    if let Ok((first, _)) = &record {
        give_up.follow(first, answered, true);
    }
    if let Ok((first, _)) = &record
        && first.get("status").and_then(Value::as_str) == Some("pending")
    {
        let id = first
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let total = seconds_left(first);
        let until = expires_at(first)
            .map(crate::domain::question::operator_time)
            .unwrap_or_default();
        progress(format!(
            "asked (request {id}); waiting up to {total} s for an approver on Telegram (until {until})"
        ));
        let every = progress_every(total);
        loop {
            let left = match &record {
                Ok((r, _)) if r.get("status").and_then(Value::as_str) == Some("pending") => {
                    seconds_left(r)
                }
                _ => break,
            };
            let wait = every.as_secs().min(left.max(1));
            let response = give_up
                .within(
                    Some(&id),
                    client.poll(
                        Kind::Confirmation,
                        &id,
                        wait,
                        None,
                        &ASK_RETRY,
                        &mut say_retrying(progress),
                    ),
                )
                .await?;
            let answered = response.as_ref().ok().and_then(|r| r.date);
            record = read_record(response)?;
            if let Ok((r, _)) = &record {
                give_up.follow(r, answered, false);
            }
            if let Ok((r, _)) = &record
                && r.get("status").and_then(Value::as_str) == Some("pending")
            {
                progress(format!(
                    "still waiting for an approver ({} s left)",
                    seconds_left(r)
                ));
            }
        }
    }
    let (record, text) = match record {
        Ok(r) => r,
        Err(body) => return Ok(Decided::Refused(body)),
    };
    let code = match record.get("status").and_then(Value::as_str) {
        Some("confirmed") => EXIT_CONFIRMED,
        Some("cancelled") => EXIT_CANCELLED,
        Some("timeout") => EXIT_TIMEOUT,
        _ => EXIT_ERROR,
    };
    Ok(Decided::Record { code, record, text })
}

/// The record in a 2xx answer (parsed, and as its text), or the error body of any other.
fn read_record(answer: Result<Reply, Failure>) -> anyhow::Result<Result<(Value, String), String>> {
    let reply = match answer {
        Ok(reply) => reply,
        Err(Failure::Unreachable(e)) => return Err(e).context("cannot reach the service"),
        Err(Failure::CutOff(_, e)) => return Err(e).context("cannot read the service's answer"),
    };
    if !reply.status.is_success() {
        return Ok(Err(reply.body));
    }
    let record = reply.json().context("the service's answer is not JSON")?;
    Ok(Ok((record, reply.body)))
}

/// An error and its causes, each said once: `a: b: c`, leaving out a cause whose text
/// the message already holds (thiserror variants such as `"io error: {0}"` both show
/// their source and return it as `source()`, which `{:#}` would print a second time).
pub fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if cause.is_empty() || text.contains(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
}

/// Whether `e` is a write to a closed pipe (`audit export | head`): the reader has
/// all it wanted, so the command ends normally.
pub fn is_broken_pipe(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::BrokenPipe
}

/// `audit export --since`: an RFC 3339 time (`2026-12-01T08:30:00Z`) or a plain date
/// (`2026-12-01`, midnight UTC).
pub fn parse_since(s: &str) -> anyhow::Result<time::OffsetDateTime> {
    use time::format_description::well_known::Rfc3339;
    let s = s.trim();
    if let Ok(t) = time::OffsetDateTime::parse(s, &Rfc3339) {
        return Ok(t);
    }
    let date_format = time::macros::format_description!("[year]-[month]-[day]");
    match time::Date::parse(s, &date_format) {
        Ok(date) => Ok(date.midnight().assume_utc()),
        Err(_) => bail!(
            "--since '{s}' is neither a date (2026-12-01, meaning midnight UTC) nor an RFC 3339 time (2026-12-01T08:30:00Z)"
        ),
    }
}

/// What `check-config --online` found: `notes` are facts (and what could not be
/// checked), `problems` what will fail; any problem makes the command fail.
#[derive(Debug, Default)]
pub struct OnlineReport {
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

/// Why a Bot API call gave no result.
enum BotApiFailure {
    /// No answer from the Bot API (DNS, refused, TLS, timeout), with the cause.
    Unreachable(String),
    /// Telegram answered with an error: its `description`.
    Refused(String),
}

/// A Bot API answer: the `result`, or why there is none.
async fn bot_api(
    client: &reqwest::Client,
    config: &Config,
    method: &str,
    params: Value,
) -> Result<Value, BotApiFailure> {
    let url = format!(
        "{}/bot{}/{method}",
        config.telegram_api_url.as_str().trim_end_matches('/'),
        config.bot_token()
    );
    // `without_url`: the URL holds the bot token, which must not reach the terminal.
    let response = client
        .post(url)
        .json(&params)
        .send()
        .await
        .map_err(|e| BotApiFailure::Unreachable(error_text(&e.without_url().into())))?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|_| {
        BotApiFailure::Unreachable(format!("it answered {status} with a body that is not JSON"))
    })?;
    if body.get("ok") == Some(&Value::Bool(true)) {
        return Ok(body.get("result").cloned().unwrap_or(Value::Null));
    }
    Err(BotApiFailure::Refused(
        body.get("description")
            .and_then(Value::as_str)
            .map_or_else(|| format!("it answered {status}"), str::to_owned),
    ))
}

/// `check-config --online`: asks Telegram (read-only calls only: `getMe`, `getChat`,
/// `getChatMember`) whether what the configuration names exists and fits together.
///
/// What the Bot API can tell: whether the token is a bot's, whether the bot is in a
/// group (`getChat` on a group it is not in says "chat not found"), whether each
/// approver is a member of the route's group, and whether a private chat exists (a
/// user's private chat is found only after they started the bot). What it cannot
/// tell without sending a message: whether a user has blocked the bot since, or
/// whether the bot may post in a group where it is a member.
pub async fn check_online(config: &Config) -> OnlineReport {
    let mut report = OnlineReport::default();
    let client = match reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            report
                .problems
                .push(format!("cannot build an HTTP client: {e}"));
            return report;
        }
    };
    let Some(username) = check_bot(&client, config, &mut report).await else {
        return report;
    };
    let mut routes: Vec<_> = config.routes.values().collect();
    routes.sort_by(|a, b| a.name.cmp(&b.name));
    for route in routes {
        let checked = check_route(&client, config, route, &username, &mut report).await;
        if checked.is_break() {
            return report;
        }
    }
    report
}

/// A Bot API that cannot be reached, in the report's words.
fn unreachable(config: &Config, e: &str) -> String {
    format!(
        "cannot reach the Bot API at {}: {e}",
        config.telegram_api_url
    )
}

/// `getMe`: whether the token is a bot's; the bot's username, or `None` when nothing
/// further can be checked.
async fn check_bot(
    client: &reqwest::Client,
    config: &Config,
    report: &mut OnlineReport,
) -> Option<String> {
    let me = match bot_api(client, config, "getMe", serde_json::json!({})).await {
        Ok(me) => me,
        Err(BotApiFailure::Unreachable(e)) => {
            report.problems.push(unreachable(config, &e));
            return None;
        }
        Err(BotApiFailure::Refused(e)) => {
            report.problems.push(format!(
                "Telegram does not accept {} as a bot token (getMe: {e})",
                crate::config::BOT_TOKEN_ENV
            ));
            return None;
        }
    };
    let username = me.get("username").and_then(Value::as_str).unwrap_or("?");
    let bot_id = me.get("id").and_then(Value::as_u64);
    report.notes.push(format!(
        "bot: @{username} (id {})",
        bot_id.map_or_else(|| "?".to_owned(), |id| id.to_string())
    ));
    Some(username.to_owned())
}

/// `getChat` for one route's chat, then who of its approvers can see it; breaks when the
/// Bot API cannot be reached (nothing further can be checked).
async fn check_route(
    client: &reqwest::Client,
    config: &Config,
    route: &Route,
    username: &str,
    report: &mut OnlineReport,
) -> ControlFlow<()> {
    let name = &route.name;
    let chat_id = route.chat_id;
    let mut approvers: Vec<u64> = route.approvers.iter().copied().collect();
    approvers.sort_unstable();
    let chat = bot_api(
        client,
        config,
        "getChat",
        serde_json::json!({ "chat_id": chat_id }),
    )
    .await;
    let chat = match chat {
        Ok(chat) => chat,
        Err(BotApiFailure::Unreachable(e)) => {
            report.problems.push(unreachable(config, &e));
            return ControlFlow::Break(());
        }
        Err(BotApiFailure::Refused(e)) if e.contains("chat not found") && chat_id < 0 => {
            report.problems.push(format!(
                "route '{name}': the bot is not a member of {chat_id}, or no such chat exists (Telegram: {e}); add @{username} to the group"
            ));
            return ControlFlow::Continue(());
        }
        Err(BotApiFailure::Refused(e)) if e.contains("chat not found") => {
            report.problems.push(format!(
                "route '{name}': user {chat_id} has never started a chat with the bot (Telegram: {e}); they must open @{username} and send /start"
            ));
            return ControlFlow::Continue(());
        }
        Err(BotApiFailure::Refused(e)) => {
            report
                .problems
                .push(format!("route '{name}': getChat {chat_id} failed: {e}"));
            return ControlFlow::Continue(());
        }
    };
    if chat.get("type").and_then(Value::as_str) == Some("private") {
        report.notes.push(format!(
            "route '{name}': the private chat of {chat_id} exists, so they started the bot; whether they have blocked it since cannot be checked without sending a message"
        ));
        for a in approvers
            .iter()
            .filter(|a| i64::try_from(**a) != Ok(chat_id))
        {
            report.problems.push(format!(
                "route '{name}': approver {a} cannot see the questions: {chat_id} is the private chat of user {chat_id}"
            ));
        }
        return ControlFlow::Continue(());
    }
    let title = chat.get("title").and_then(Value::as_str).unwrap_or("?");
    report.notes.push(format!(
        "route '{name}': the bot is a member of {chat_id} ({title})"
    ));
    check_members(client, config, name, chat_id, approvers, report).await
}

/// `getChatMember` for each approver of a group route: whether they would see the
/// questions.
async fn check_members(
    client: &reqwest::Client,
    config: &Config,
    name: &str,
    chat_id: i64,
    approvers: Vec<u64>,
    report: &mut OnlineReport,
) -> ControlFlow<()> {
    for a in approvers {
        let member = bot_api(
            client,
            config,
            "getChatMember",
            serde_json::json!({ "chat_id": chat_id, "user_id": a }),
        )
        .await;
        match member {
            Ok(m) => {
                let status = m.get("status").and_then(Value::as_str).unwrap_or("?");
                let is_member = match status {
                    "creator" | "administrator" | "member" => true,
                    "restricted" => m.get("is_member") == Some(&Value::Bool(true)),
                    _ => false,
                };
                if !is_member {
                    report.problems.push(format!(
                        "route '{name}': approver {a} is not a member of {chat_id} (status: {status}), so they would not see the questions"
                    ));
                }
            }
            Err(BotApiFailure::Unreachable(e)) => {
                report.problems.push(unreachable(config, &e));
                return ControlFlow::Break(());
            }
            Err(BotApiFailure::Refused(e)) if e.contains("not found") => {
                report.problems.push(format!(
                    "route '{name}': approver {a} is not a member of {chat_id} (Telegram: {e})"
                ));
            }
            Err(BotApiFailure::Refused(e)) => report.problems.push(format!(
                "route '{name}': getChatMember {a} in {chat_id} failed: {e}"
            )),
        }
    }
    ControlFlow::Continue(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_url_without_a_scheme_means_http_and_any_other_host_must_say_its_own() {
        assert_eq!(
            service_url("127.0.0.1:8080").unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            service_url("localhost:8080/").unwrap(),
            "http://localhost:8080"
        );
        assert_eq!(service_url("[::1]:8080").unwrap(), "http://[::1]:8080");
        assert_eq!(
            service_url("https://hitl.example.com/").unwrap(),
            "https://hitl.example.com"
        );
        let e = service_url("hitl.example.com:8080")
            .unwrap_err()
            .to_string();
        assert!(e.contains("https://hitl.example.com:8080"), "{e}");
    }

    #[test]
    fn only_the_services_word_on_a_deadline_moves_the_give_up_time_and_only_later() {
        let ask = |timeout_seconds| AskRequest {
            url: String::new(),
            token: String::new(),
            tool: "t".into(),
            params: Vec::new(),
            template: None,
            timeout_seconds,
            owner_id: None,
            context: None,
            route: None,
            window_seconds: None,
        };
        let service_now = OffsetDateTime::now_utc() - time::Duration::hours(1);
        let record = |in_seconds: i64, extensions: u64| {
            let at = service_now + time::Duration::seconds(in_seconds);
            serde_json::json!({
                "expires_at": at.format(&time::format_description::well_known::Rfc3339).unwrap(),
                "progress": {"extensions": extensions},
            })
        };
        let left = |g: &GiveUp| g.at.saturating_duration_since(Instant::now()).as_secs_f64();
        let margin = GIVE_UP_MARGIN.as_secs_f64();

        // --timeout 60: a later deadline the service states does not count, one an
        // approver set does (by the service's clock, an hour behind this one).
        let mut g = GiveUp::new(&ask(Some(60.0)), "b");
        g.follow(&record(3600, 0), Some(service_now), true);
        assert!((left(&g) - (60.0 + margin)).abs() < 1.0, "{}", left(&g));
        g.follow(&record(600, 1), Some(service_now), false);
        assert!((left(&g) - (600.0 + margin)).abs() < 1.0, "{}", left(&g));
        g.follow(&record(30, 1), Some(service_now), false);
        assert!(left(&g) > 590.0, "never earlier: {}", left(&g));

        // Without --timeout: the margin until the first answer, then its deadline.
        let mut g = GiveUp::new(&ask(None), "b");
        assert!((left(&g) - margin).abs() < 1.0, "{}", left(&g));
        g.follow(&record(120, 0), Some(service_now), true);
        assert!((left(&g) - (120.0 + margin)).abs() < 1.0, "{}", left(&g));
        g.follow(&record(9000, 0), Some(service_now), false);
        assert!(left(&g) < 131.0, "{}", left(&g));

        // A deadline past any service's limit cannot overflow the clock.
        let far = serde_json::json!({"expires_at": "9999-12-31T23:59:59Z",
                                     "progress": {"extensions": 1}});
        let mut g = GiveUp::new(&ask(Some(1e300)), "b");
        assert!(left(&g) > 365.0 * 24.0 * 3600.0, "{}", left(&g));
        g.follow(&far, None, false);
    }

    #[test]
    fn since_takes_a_date_at_midnight_utc_or_an_rfc3339_time_and_says_why_not_once() {
        use time::macros::datetime;
        assert_eq!(
            parse_since("2026-12-01").unwrap(),
            datetime!(2026-12-01 0:00 UTC)
        );
        assert_eq!(
            parse_since("2026-12-01T08:30:00+01:00").unwrap(),
            datetime!(2026-12-01 7:30 UTC)
        );
        let e = error_text(&parse_since("yesterday").unwrap_err());
        assert_eq!(e.matches("yesterday").count(), 1, "{e}");
        assert!(parse_since("2026-13-01").is_err());
    }

    #[test]
    fn an_error_text_says_each_cause_once() {
        let io = std::io::Error::other("x already exists");
        let e = anyhow::Error::new(crate::storage::StorageError::Io(io)).context("backup failed");
        assert_eq!(
            error_text(&e),
            "backup failed: cannot prepare the database location: x already exists"
        );
    }

    #[test]
    fn params_keep_order_types_and_digits() {
        let p = params_json(&[
            "name=alice".into(),
            "count:=3".into(),
            "big:=123456789012345678901234567890".into(),
            "flags:=[true, null]".into(),
            "eq=a=b".into(),
        ])
        .unwrap();
        assert_eq!(
            p,
            r#"{"name": "alice", "count": 3, "big": 123456789012345678901234567890, "flags": [true, null], "eq": "a=b"}"#
        );
    }

    #[test]
    fn a_param_without_equals_or_with_bad_json_is_refused() {
        assert!(params_json(&["novalue".into()]).is_err());
        assert!(params_json(&["x:={bad".into()]).is_err());
        assert!(params_json(&["=v".into()]).is_err());
    }
}
