//! The command line: `ask` gates a shell step on a tap (exit 0/1/2/3), `check-config`
//! refuses bad configurations naming the key, `migrate` prepares the database.

use std::process::Stdio;
use std::time::Duration;

use crate::support::app::*;
use hitl_telegram::cli::GIVE_UP_MARGIN;
use serde_json::Value;
use tokio::process::Command;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_hitl-telegram");

fn ask(app: &TestApp, token: &str, extra: &[&str]) -> tokio::process::Child {
    Command::new(BIN)
        .args([
            "ask", "--url", &app.base, "--token", token, "--tool", "deploy",
        ])
        .args(["--param", "service=billing", "--param", "replicas:=3"])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn")
}

async fn finish(child: tokio::process::Child) -> (i32, String, String) {
    let out = child.wait_with_output().await.expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn ask_exits_0_when_approved_and_prints_the_record() {
    let app = TestApp::spawn().await;
    let child = ask(
        &app,
        TOKEN_A,
        &["--template", "Deploy {service} x{replicas}?"],
    );
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    assert!(
        msg.visible_text.contains("\"replicas\": 3"),
        "{}",
        msg.visible_text
    );
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    let (code, out, err) = finish(child).await;
    assert_eq!(code, 0, "{out}{err}");
    let record: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["parameters"]["replicas"], 3);
    // What it did meanwhile went to stderr, naming the request.
    assert!(
        err.contains(&format!(
            "ask: asked (request {}); waiting up to 30 s for an approver on Telegram (until ",
            record["id"].as_str().unwrap()
        )),
        "{err}"
    );
}

#[tokio::test]
async fn ask_help_describes_every_flag() {
    let out = Command::new(BIN)
        .args(["ask", "--help"])
        .output()
        .await
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{help}");
    let flags: Vec<&str> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .collect();
    assert!(flags.len() >= 14, "{help}");
    for line in flags {
        let described = line
            .split_once("  ")
            .is_some_and(|(_, text)| !text.trim().is_empty());
        assert!(described, "a flag without a description: {line}\n{help}");
    }
    assert!(
        help.contains("stderr"),
        "says where the progress goes: {help}"
    );
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!(
            "the wait ends {} s after this deadline",
            GIVE_UP_MARGIN.as_secs()
        )),
        "says when it gives up whatever the service does: {help}"
    );
}

#[tokio::test]
async fn ask_says_on_stderr_that_it_is_still_waiting_and_keeps_stdout_for_the_record() {
    let app = TestApp::spawn().await;
    let (code, out, err) = finish(ask(&app, TOKEN_A, &["--timeout", "3"])).await;
    assert_eq!(code, 2, "{out}\n{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["status"],
        "timeout",
        "stdout is the record alone"
    );
    assert!(err.contains("ask: asked (request cf_"), "{err}");
    assert!(
        err.contains("ask: still waiting for an approver ("),
        "a line while it waits: {err}"
    );
    assert!(
        err.lines().all(|l| l.starts_with("ask: ")),
        "only its own lines: {err}"
    );
}

#[tokio::test]
async fn ask_exits_1_when_cancelled() {
    let app = TestApp::spawn().await;
    let child = ask(&app, TOKEN_A, &[]);
    let msg = app.telegram.wait_for_messages(1).await.remove(0);
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "❌ Cancel", alice());
    let (code, out, _) = finish(child).await;
    assert_eq!(code, 1, "{out}");
}

/// A service on 127.0.0.1 that accepts every connection and never answers: each one
/// is held open, unread, for as long as the test runs.
async fn silent_service() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            open.push(socket);
        }
    });
    (base, held)
}

/// Runs `command` (`ask` or `exec`, then `rest`) with `--timeout 2` against a silent
/// service and checks that it gave up in time, with exit 3 and saying why: its stderr.
async fn gives_up_on_a_silent_service(command: &str, rest: &[&str]) -> String {
    const TIMEOUT: Duration = Duration::from_secs(2);
    let (base, _held) = silent_service().await;
    let started = std::time::Instant::now();
    let child = Command::new(BIN)
        .args([
            command, "--url", &base, "--token", TOKEN_A, "--tool", "deploy",
        ])
        .args(["--timeout", &TIMEOUT.as_secs().to_string()])
        .args(rest)
        .env("NO_PROXY", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let bound = TIMEOUT + GIVE_UP_MARGIN + Duration::from_secs(5);
    let (code, out, err) = tokio::time::timeout(bound, finish(child))
        .await
        .unwrap_or_else(|_| panic!("{command} still waits after {bound:?}"));
    let took = started.elapsed();
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(took >= TIMEOUT, "gave up early, after {took:?}: {err}");
    assert!(
        err.contains(&format!(
            "gave up waiting (--timeout 2 s plus {} s): the service at {base} did not answer",
            GIVE_UP_MARGIN.as_secs()
        )),
        "{err}"
    );
    assert_eq!(out, "", "nothing on stdout");
    err
}

#[tokio::test]
async fn ask_against_a_service_that_never_answers_gives_up_at_its_timeout_plus_the_margin() {
    gives_up_on_a_silent_service("ask", &[]).await;
}

#[tokio::test]
async fn exec_against_a_service_that_never_answers_gives_up_without_running_its_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ran");
    let err = gives_up_on_a_silent_service("exec", &["--", "touch", file.to_str().unwrap()]).await;
    assert!(err.contains("the command was not run"), "{err}");
    assert!(!file.exists(), "the command ran");
}

#[tokio::test]
async fn ask_exits_2_on_timeout() {
    let app = TestApp::spawn().await;
    let (code, out, _) = finish(ask(&app, TOKEN_A, &["--timeout", "0.3"])).await;
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("\"timeout\""));
}

#[tokio::test]
async fn ask_exits_3_on_an_error_and_says_why() {
    let app = TestApp::spawn().await;
    let (code, _, err) = finish(ask(&app, "wrong-token", &[])).await;
    assert_eq!(code, 3);
    assert!(err.contains("unknown token"), "{err}");
    let (code, _, err) = finish(ask(&app, TOKEN_A, &["--param", "novalue"])).await;
    assert_eq!(code, 3);
    assert!(err.contains("key=value"), "{err}");
}

/// An agent token long enough for `check-config` (16 characters or more).
pub(crate) const WORKDAY_TOKEN: &str = "workday-token-0123456789";

pub(crate) fn config_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("TELEGRAM_BOT_TOKEN")
        .env_remove("HITL_AGENT_WORKDAY_TOKEN")
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

#[tokio::test]
async fn check_config_accepts_the_shipped_config_when_the_tokens_are_set() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configuration OK"));
}

#[tokio::test]
async fn check_config_names_where_a_telegram_outage_is_announced_and_never_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = shipped_config();
    // The shipped example, uncommented, with a key in its path as alerting systems do.
    let edited = shipped.replacen(
        "# outage_webhook_url = \"https://alerts.example.com/hooks/hitl\"",
        "outage_webhook_url = \"https://alerts.example.com/hooks/KEY-0123456789\"",
        1,
    );
    assert_ne!(
        edited, shipped,
        "the shipped config shows outage_webhook_url"
    );
    let path = dir.path().join("edited.toml");
    std::fs::write(&path, edited).unwrap();
    let run = |secret: Option<&str>| {
        let mut c = config_cmd(&["--config", path.to_str().unwrap(), "check-config"]);
        c.env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
            .env_remove("HITL_OUTAGE_WEBHOOK_SECRET");
        if let Some(s) = secret {
            c.env("HITL_OUTAGE_WEBHOOK_SECRET", s);
        }
        c.output()
    };
    let err = refusal(&run(None).await.unwrap());
    assert!(err.contains("HITL_OUTAGE_WEBHOOK_SECRET"), "{err}");
    let out = run(Some("outage-secret-0123456789")).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "Telegram outages: announced to https://alerts.example.com after 300 s of failed probes"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("KEY-0123456789"), "{stdout}");
}

/// `check-config` of the shipped config with `edit` applied to it.
pub(crate) async fn check_edited(
    edit: impl FnOnce(String) -> String,
    bot_token: &str,
    agent_token: &str,
) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let shipped = shipped_config();
    let path = dir.path().join("edited.toml");
    std::fs::write(&path, edit(shipped)).unwrap();
    config_cmd(&["--config", path.to_str().unwrap(), "check-config"])
        .env("TELEGRAM_BOT_TOKEN", bot_token)
        .env("HITL_AGENT_WORKDAY_TOKEN", agent_token)
        .output()
        .await
        .unwrap()
}

pub(crate) fn refusal(out: &std::process::Output) -> String {
    assert!(
        !out.status.success(),
        "accepted: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether `err` (what a command printed) shows a place in our source: a file of ours
/// (`src/…`, `….rs:`) or a line number a library appends (PostgreSQL's own, `at line
/// 948`), which reads like a line of something the person should look at.
pub(crate) fn shows_a_source_line(err: &str) -> bool {
    err.contains("src/") || err.contains(".rs:") || err.contains(" at line ")
}

#[tokio::test]
async fn a_toml_syntax_error_is_said_once_with_its_file_line_column_and_what_was_expected() {
    let broken =
        |toml: String| toml.replacen("bind = \"127.0.0.1:8080\"", "bind = \"127.0.0.1:8080", 1);
    let shipped = shipped_config();
    let line = broken(shipped)
        .lines()
        .position(|l| l == "bind = \"127.0.0.1:8080")
        .expect("the shipped config sets server.bind")
        + 1;
    let err = refusal(&check_edited(broken, "1:x", WORKDAY_TOKEN).await);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("error: cannot read configuration: ")
            && err.contains(&format!(
                "edited.toml, line {line}, column 23: invalid basic string"
            )),
        "{err}"
    );
    assert_eq!(
        err.matches("invalid basic string").count(),
        1,
        "said once: {err}"
    );
    assert!(!shows_a_source_line(&err), "{err}");
}

#[tokio::test]
async fn serve_against_a_postgresql_database_that_does_not_exist_says_so_in_plain_words() {
    let Some(db) = crate::support::postgres::PgDatabase::create().await else {
        return;
    };
    let mut absent = reqwest::Url::parse(&db.url).unwrap();
    absent.set_path(&format!("{}_absent", absent.path()));
    let name = absent.path().trim_start_matches('/').to_owned();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        config_cmd(&["serve"])
            .env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
            .env("HITL__SERVER__BIND", "127.0.0.1:0")
            .env("HITL__DATABASE__URL", absent.as_str())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("serve ends")
    .unwrap();
    let err = refusal(&out);
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: cannot open the database (database.url): ")
            && last.contains(&format!("database \"{name}\" does not exist"))
            && last.contains("create the database first"),
        "{err}"
    );
    assert!(!shows_a_source_line(last), "{err}");
}

#[tokio::test]
async fn check_config_refuses_an_agent_token_shorter_than_16_characters() {
    let out = check_edited(|t| t, "1:x", "fifteen-chars-x").await;
    let err = refusal(&out);
    assert!(
        err.contains("agents[0].token_env")
            && err.contains("HITL_AGENT_WORKDAY_TOKEN")
            && err.contains("15 characters long; use at least 16 characters"),
        "{err}"
    );
    assert!(
        !err.contains("fifteen-chars-x"),
        "the token is not shown: {err}"
    );
    let out = check_edited(|t| t, "1:x", "sixteen-chars-xx").await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn check_config_refuses_the_bot_token_as_an_agent_token() {
    let bot = "123456789:AAbotsecret_0123456789";
    let err = refusal(&check_edited(|t| t, bot, bot).await);
    assert!(
        err.contains("agents[0].token_env")
            && err.contains("is the bot token (TELEGRAM_BOT_TOKEN)"),
        "{err}"
    );
    assert!(!err.contains("AAbotsecret"), "{err}");
}

#[tokio::test]
async fn check_config_refuses_approver_0_and_the_bot_itself_as_an_approver() {
    let err = refusal(
        &check_edited(
            |t| {
                t.replace(
                    "approvers = [11111111, 22222222]",
                    "approvers = [0, 424242]",
                )
            },
            "1:x",
            WORKDAY_TOKEN,
        )
        .await,
    );
    assert!(
        err.contains("routes[0].approvers: 0 is not a Telegram user id"),
        "{err}"
    );
    let err = refusal(
        &check_edited(
            |t| {
                t.replace(
                    "approvers = [11111111, 22222222]",
                    "approvers = [424242, 7000]",
                )
            },
            "7000:AAsecret",
            WORKDAY_TOKEN,
        )
        .await,
    );
    assert!(
        err.contains("routes[0].approvers: 7000 is the bot itself"),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_refuses_a_callback_prefix_to_a_metadata_address_unless_the_agent_opts_in() {
    // Any variable that is set serves as the webhook secret here: the bot token's.
    let prefix = |opt_in: &'static str| {
        move |t: String| {
            t.replace(
                "callback_url_prefixes = []",
                &format!(
                    "callback_url_prefixes = [\"http://169.254.169.254/latest\"]\n\
                     webhook_secret_env = \"TELEGRAM_BOT_TOKEN\"\n{opt_in}"
                ),
            )
        }
    };
    let err = refusal(&check_edited(prefix(""), "1:x", WORKDAY_TOKEN).await);
    assert!(
        err.contains(
            "agents[0].callback_url_prefixes: 'http://169.254.169.254/latest' reaches a cloud \
             metadata address"
        ) && err.contains("set agents[0].allow_link_local_callbacks = true"),
        "{err}"
    );
    let out = check_edited(
        prefix("allow_link_local_callbacks = true"),
        "1:x",
        WORKDAY_TOKEN,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn serve_refuses_what_check_config_refuses() {
    let out = config_cmd(&["serve"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", "short")
        .env("HITL__SERVER__BIND", "127.0.0.1:0")
        .output()
        .await
        .unwrap();
    let err = refusal(&out);
    assert!(
        err.contains("agents[0].token_env") && err.contains("use at least 16"),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_warns_about_the_examples_placeholders_but_accepts_them() {
    let out = check_edited(|t| t, "123456789:AAsecret", WORKDAY_TOKEN).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: route 'ops': chat_id -1001234567890 is the example's placeholder"),
        "{err}"
    );
    // It says how to learn the group's id the way the bot really tells it (an answer to
    // /start in the group, see tests/service/operator_commands.rs), not a log line that never comes.
    assert!(
        err.contains("send /start@<bot username> there: the bot answers with the group's chat_id"),
        "{err}"
    );
    assert!(!err.contains("logs it"), "{err}");
    assert!(
        err.contains(
            "warning: route 'ops': approvers [11111111, 22222222] are the example's placeholder ids"
        ),
        "{err}"
    );
    assert!(!err.contains("bot token"), "a well-formed token: {err}");

    let out = check_edited(
        |t| {
            t.replace("chat_id = -1001234567890", "chat_id = -1009876")
                .replace("[11111111, 22222222]", "[424242]")
        },
        "123456789:AAsecret",
        WORKDAY_TOKEN,
    )
    .await;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "nothing to warn about"
    );
}

#[tokio::test]
async fn check_config_warns_about_an_odd_bot_token_and_open_metrics_off_loopback() {
    let out = check_edited(
        |t| t.replace("bind = \"127.0.0.1:8080\"", "bind = \"0.0.0.0:8080\""),
        "not-a-bot-token",
        WORKDAY_TOKEN,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: TELEGRAM_BOT_TOKEN does not look like a bot token (digits:secret"),
        "{err}"
    );
    assert!(!err.contains("not-a-bot-token"), "{err}");
    assert!(
        err.contains("warning: server.bind 0.0.0.0:8080 is not a loopback address and [metrics] token_env is unset"),
        "{err}"
    );

    // With a metrics token (read from its own variable) GET /metrics is closed.
    let out = {
        let dir = tempfile::tempdir().unwrap();
        let shipped = shipped_config()
            .replace("bind = \"127.0.0.1:8080\"", "bind = \"0.0.0.0:8080\"")
            .replace(
                "# token_env = \"HITL_METRICS_TOKEN\"",
                "token_env = \"HITL_METRICS_TOKEN\"",
            );
        let path = dir.path().join("metrics.toml");
        std::fs::write(&path, shipped).unwrap();
        config_cmd(&["--config", path.to_str().unwrap(), "check-config"])
            .env("TELEGRAM_BOT_TOKEN", "123456789:AAsecret")
            .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
            .env("HITL_METRICS_TOKEN", "metrics-token-0123456789")
            .output()
            .await
            .unwrap()
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("server.bind"),
        "a metrics token closes GET /metrics"
    );
}

#[tokio::test]
async fn serve_logs_the_warnings_and_runs_anyway() {
    use crate::support::fake_telegram::FakeTelegram;
    use crate::support::process::{ServiceProcess, write_config};

    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        toml.replace(&format!("chat_id = {OPS_CHAT}"), "chat_id = -1001234567890"),
    )
    .unwrap();
    let mut service = ServiceProcess::start(&config).await;
    assert!(service.terminate().await.success());
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let log = service.log_text();
    assert!(
        log.lines().any(|l| l.contains("WARN")
            && l.contains(
                "configuration: route 'ops': chat_id -1001234567890 is the example's placeholder"
            )),
        "{log}"
    );
}

/// `check-config --online` of the test config against `telegram`.
async fn check_online(
    telegram: &crate::support::fake_telegram::FakeTelegram,
    edit: impl FnOnce(String) -> String,
) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let path = crate::support::process::write_config(dir.path(), telegram, &db_url);
    let toml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(toml)).unwrap();
    let out = Command::new(BIN)
        .args([
            "--config",
            path.to_str().unwrap(),
            "check-config",
            "--online",
        ])
        .env("TELEGRAM_BOT_TOKEN", telegram.token())
        .env("TOKEN_A", TOKEN_A)
        .env("TOKEN_B", TOKEN_B)
        .env("HOOK_A", HOOK_SECRET_A)
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn check_config_online_passes_when_the_bot_and_every_approver_are_in_their_groups() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_chat_members(OPS_CHAT, &[ALICE, BOB]);
    telegram.set_chat_members(OTHER_CHAT, &[BOB]);
    telegram.set_chat_members(COUNCIL_CHAT, &[ALICE, BOB, CAROL]);
    let (ok, out, err) = check_online(&telegram, |t| t).await;
    assert!(ok, "{out}{err}");
    assert!(out.contains("bot: @"), "{out}");
    assert!(
        out.contains(&format!("route 'ops': the bot is a member of {OPS_CHAT}")),
        "{out}"
    );
    assert!(out.contains("online checks OK"), "{out}");
    assert_eq!(telegram.requests("getchat").len(), 3);
    assert_eq!(telegram.requests("getchatmember").len(), 6);
    assert!(
        telegram.requests("sendmessage").is_empty(),
        "read-only calls only"
    );
}

#[tokio::test]
async fn check_config_online_says_in_plain_words_what_is_wrong() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    // ops: bob is not in the group; other: the bot is not in it; council: a private
    // chat whose user never started the bot.
    telegram.set_chat_members(OPS_CHAT, &[ALICE]);
    telegram.forbid_private_chat(CAROL);
    let (ok, out, err) = check_online(&telegram, |t| {
        t.replace(
            &format!("chat_id = {COUNCIL_CHAT}"),
            &format!("chat_id = {CAROL}"),
        )
        .replace(
            &format!("approvers = [{ALICE}, {BOB}, {CAROL}]"),
            &format!("approvers = [{CAROL}]"),
        )
    })
    .await;
    assert!(!ok, "{out}");
    assert!(err.contains("online checks found 3 problem(s)"), "{err}");
    assert!(
        err.contains(&format!(
            "route 'ops': approver {BOB} is not a member of {OPS_CHAT} (Telegram: Bad Request: user not found)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "route 'other': the bot is not a member of {OTHER_CHAT}, or no such chat exists (Telegram: Bad Request: chat not found)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "route 'council': user {CAROL} has never started a chat with the bot"
        )) && err.contains("send /start"),
        "{err}"
    );
    assert!(
        !err.contains(BOT_TOKEN) && !out.contains(BOT_TOKEN),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_online_says_which_private_chats_it_can_vouch_for_and_which_not() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_chat_members(OPS_CHAT, &[ALICE, BOB]);
    telegram.set_chat_members(COUNCIL_CHAT, &[ALICE, BOB, CAROL]);
    let (ok, out, err) = check_online(&telegram, |t| {
        t.replace(
            &format!("chat_id = {OTHER_CHAT}"),
            &format!("chat_id = {BOB}"),
        )
    })
    .await;
    assert!(ok, "{out}{err}");
    assert!(
        out.contains(&format!(
            "route 'other': the private chat of {BOB} exists, so they started the bot; whether they have blocked it since cannot be checked without sending a message"
        )),
        "{out}"
    );
}

#[tokio::test]
async fn check_config_online_refuses_a_token_telegram_does_not_accept() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let path = crate::support::process::write_config(dir.path(), &telegram, &db_url);
    let out = Command::new(BIN)
        .args([
            "--config",
            path.to_str().unwrap(),
            "check-config",
            "--online",
        ])
        .env("TELEGRAM_BOT_TOKEN", "999:wrong-token")
        .env("TOKEN_A", TOKEN_A)
        .env("TOKEN_B", TOKEN_B)
        .env("HOOK_A", HOOK_SECRET_A)
        .env("NO_PROXY", "127.0.0.1")
        .output()
        .await
        .unwrap();
    let err = refusal(&out);
    assert!(
        err.contains(
            "Telegram does not accept TELEGRAM_BOT_TOKEN as a bot token (getMe: Unauthorized)"
        ),
        "{err}"
    );
    assert!(!err.contains("wrong-token"), "{err}");
}

#[tokio::test]
async fn check_config_online_names_why_the_bot_api_cannot_be_reached() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    let (ok, out, err) = check_online(&telegram, |t| {
        t.replace(&telegram.api_url(), "http://127.0.0.1:9")
    })
    .await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("cannot reach the Bot API at http://127.0.0.1:9/: ")
            && err.contains("Connection refused"),
        "{err}"
    );
    assert!(!err.contains(BOT_TOKEN), "{err}");
}

/// A running service whose audit trail holds one ended request.
async fn audited_app() -> TestApp {
    let app = TestApp::spawn().await;
    ask_one_that_times_out(&app.client, &app.base).await;
    app
}

/// Asks a question that times out at once (0.2 s): one ended request in the trail.
async fn ask_one_that_times_out(client: &reqwest::Client, base: &str) {
    let record: Value = client
        .post(format!("{base}/v1/confirmations"))
        .bearer_auth(TOKEN_A)
        .json(&serde_json::json!({"tool": "t", "params": {}, "timeout_seconds": 0.2}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(record["status"], "timeout", "{record}");
}

fn db_cmd(app: &TestApp, args: &[&str]) -> Command {
    let mut c = config_cmd(args);
    c.env("HITL__DATABASE__URL", &app.db_url);
    c
}

#[tokio::test]
async fn audit_export_into_a_closed_pipe_ends_quietly() {
    let app = audited_app().await;
    let mut child = db_cmd(&app, &["audit", "export"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader is gone before the first line is written, as `| head` is after its
    // lines: every write fails with EPIPE.
    drop(child.stdout.take());
    let out = child.wait_with_output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(err, "", "no 'Broken pipe'");
}

#[tokio::test]
async fn audit_export_since_takes_a_plain_date_meaning_midnight_utc() {
    let app = audited_app().await;
    let today = time::OffsetDateTime::now_utc().date();
    let export = |since: String| {
        let mut c = db_cmd(&app, &["audit", "export", "--since", &since]);
        async move { c.output().await.unwrap() }
    };
    let out = export(today.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert!(
        lines >= 2,
        "today's events are after today's midnight: {lines}"
    );
    let tomorrow = today.next_day().unwrap().to_string();
    let out = export(tomorrow).await;
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "",
        "none after tomorrow's midnight"
    );
    let out = export(format!("{today}T00:00:00Z")).await;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        lines,
        "an RFC 3339 time still works"
    );

    let out = export("2026-12-01 08:00".into()).await;
    let err = refusal(&out);
    assert_eq!(
        err.trim_end(),
        "error: --since '2026-12-01 08:00' is neither a date (2026-12-01, meaning midnight UTC) nor an RFC 3339 time (2026-12-01T08:30:00Z)",
        "the cause, once"
    );
}

#[tokio::test]
async fn backup_onto_an_existing_file_is_refused_saying_why_once() {
    let app = audited_app().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("copy.db");
    std::fs::write(&file, "keep me").unwrap();
    let out = db_cmd(&app, &["backup", file.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    let err = refusal(&out);
    assert_eq!(err.matches("already exists").count(), 1, "{err}");
    assert!(err.contains("a backup never overwrites"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[tokio::test]
async fn check_config_refuses_a_missing_token_variable_naming_it() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("HITL_AGENT_WORKDAY_TOKEN") && err.contains("agents[0].token_env"),
        "{err}"
    );
}

#[tokio::test]
async fn check_config_refuses_an_unknown_route_in_an_agent() {
    let dir = tempfile::tempdir().unwrap();
    let shipped = shipped_config();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        shipped.replace(r#"routes = ["ops"]"#, r#"routes = ["ops", "finance"]"#),
    )
    .unwrap();
    let out = config_cmd(&["--config", path.to_str().unwrap(), "check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown route 'finance'"), "{err}");
}

#[tokio::test]
async fn demo_mode_needs_two_tokens_and_an_operator_id_or_says_it_will_adopt_one() {
    let out = config_cmd(&["check-config", "--demo"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", WORKDAY_TOKEN)
        .env("HITL_DEMO_OPERATOR_ID", "424242")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = config_cmd(&["check-config", "--demo"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", WORKDAY_TOKEN)
        .env_remove("HITL_DEMO_OPERATOR_ID")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("HITL_DEMO_OPERATOR_ID is not set")
            && err.contains("first person who sends /start"),
        "{err}"
    );
    let out = config_cmd(&["check-config", "--demo"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", WORKDAY_TOKEN)
        .env("HITL_DEMO_OPERATOR_ID", "me")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("HITL_DEMO_OPERATOR_ID must be a numeric Telegram user id")
    );
}

/// `serve --demo` against `telegram`, with no operator id: it waits for a /start.
fn demo_without_operator(
    dir: &std::path::Path,
    telegram: &crate::support::fake_telegram::FakeTelegram,
    extra: &[&str],
) -> crate::support::process::ServiceProcess {
    let db_url = format!("sqlite://{}/hitl.db", dir.display());
    let config = crate::support::process::write_config(dir, telegram, &db_url);
    let mut args = vec!["--demo"];
    args.extend_from_slice(extra);
    crate::support::process::ServiceProcess::spawn(
        &config,
        &args,
        &[
            ("HITL_DEMO_AGENT_TOKEN", Some(WORKDAY_TOKEN)),
            ("HITL_DEMO_OPERATOR_ID", None),
        ],
    )
}

#[tokio::test]
async fn the_demo_without_an_operator_id_adopts_the_first_person_to_send_start_and_nobody_else() {
    use crate::support::fake_telegram::{FakeTelegram, TgUser};

    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    // A /start from before the demo started is no claim made now.
    telegram.send_text_message(MALLORY as i64, mallory(), "/start");
    tokio::time::sleep(std::time::Duration::from_millis(3100)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = demo_without_operator(dir.path(), &telegram, &[]);
    assert!(
        service
            .logs_within(
                "the first person to send /start to the bot in a private chat",
                std::time::Duration::from_secs(20)
            )
            .await,
        "{}",
        service.log_text()
    );
    // Neither a bot nor a group counts; the first person in a private chat does, and
    // only they: Carol, after Alice, is answered by the running demo.
    let robot = TgUser::new(555_555, "Robot").bot();
    telegram.send_text_message(555_555, robot, "/start");
    telegram.send_text_message(OPS_CHAT, bob(), "/start");
    telegram.send_text_message(ALICE as i64, alice(), "/start");
    telegram.send_text_message(CAROL as i64, carol(), "/start");
    service.serving().await;

    let welcome = telegram
        .wait_for_message_in(ALICE as i64, 1)
        .await
        .remove(0);
    assert!(
        welcome
            .visible_text
            .contains("You are this demo's approver")
            && welcome
                .visible_text
                .contains(&format!("HITL_DEMO_OPERATOR_ID={ALICE}")),
        "{}",
        welcome.visible_text
    );
    let refused = telegram
        .wait_for_message_in(CAROL as i64, 1)
        .await
        .remove(0);
    assert!(
        refused
            .visible_text
            .contains("its approver is someone else")
            && refused
                .visible_text
                .contains(&format!("HITL_DEMO_OPERATOR_ID={CAROL}"))
            && !refused.visible_text.contains("[[routes]]"),
        "{}",
        refused.visible_text
    );
    let log = service.log_text();
    let adopted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("demo: adopted the first person"))
        .collect();
    assert_eq!(adopted.len(), 1, "{log}");
    assert!(
        adopted[0].contains(&format!("\"user_id\":{ALICE}")),
        "{log}"
    );
    for why in [
        "it was sent before the demo started",
        "it comes from a bot",
        "it was sent in a group",
    ] {
        assert!(log.contains(why), "{why}: {log}");
    }
    assert!(
        telegram.messages_in(MALLORY as i64).is_empty()
            && telegram.messages_in(OPS_CHAT).is_empty()
    );

    // The demo asks Alice, in her private chat, and her tap decides.
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = service.base.clone();
    let asked = tokio::spawn(async move {
        client
            .post(format!("{base}/v1/confirmations"))
            .bearer_auth(WORKDAY_TOKEN)
            .json(&serde_json::json!({"tool": "deploy", "params": {"service": "billing"}}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    });
    let question = telegram
        .wait_for_message_in(ALICE as i64, 2)
        .await
        .remove(1);
    telegram.tap(ALICE as i64, question.message_id, "✅ Approve", alice());
    let decided = asked.await.unwrap();
    assert_eq!(decided["status"], "confirmed", "{decided}");
    assert_eq!(decided["decided_by"]["id"], ALICE);

    // The audit trail says who was adopted, and why.
    let config = dir.path().join("config.toml");
    let out = Command::new(BIN)
        .args(["--config", config.to_str().unwrap(), "audit", "export"])
        .output()
        .await
        .unwrap();
    let export = String::from_utf8_lossy(&out.stdout);
    let event: Value = export
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["kind"] == "approver_adopted")
        .unwrap_or_else(|| panic!("no approver_adopted event: {export}"));
    assert_eq!(event["actor"], format!("telegram:{ALICE}"));
    assert_eq!(event["detail"]["route"], "demo");
    assert_eq!(event["detail"]["chat_id"], ALICE);
    assert!(service.terminate().await.success());
}

#[tokio::test]
async fn the_demo_without_an_operator_id_exits_saying_how_to_go_on_when_nobody_sends_start() {
    let telegram = crate::support::fake_telegram::FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let mut service = demo_without_operator(dir.path(), &telegram, &["--adopt-within", "1"]);
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), service.child.wait())
        .await
        .expect("it gives up after its minute (here: a second)")
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let log = service.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("nobody sent /start to @")
            && log.contains("send /start")
            && log.contains("or set HITL_DEMO_OPERATOR_ID to your numeric Telegram user id"),
        "{log}"
    );
    assert!(!log.contains("hitl-telegram is serving"), "{log}");
}

#[tokio::test]
async fn routes_are_set_from_the_environment_by_index_or_whole_and_a_wrong_form_says_which_works() {
    let check = |vars: &[(&str, &str)]| {
        let mut c = config_cmd(&["check-config"]);
        c.env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN);
        for (k, v) in vars {
            c.env(k, v);
        }
        c.output()
    };
    // One key of the file's first route, the rest kept: no placeholder left to warn of.
    let out = check(&[
        ("HITL__ROUTES__0__APPROVERS", "[424242, 434343]"),
        ("HITL__ROUTES__0__CHAT_ID", "-1009876"),
    ])
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("placeholder"), "{err}");
    // The index after the last adds a route.
    let out = check(&[
        ("HITL__ROUTES__1__NAME", "billing"),
        ("HITL__ROUTES__1__CHAT_ID", "-1005555"),
        ("HITL__ROUTES__1__APPROVERS", "[424242]"),
    ])
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 route(s)"));
    // The whole list in one variable.
    let out = check(&[(
        "HITL__ROUTES",
        r#"[{name="ops", chat_id=-1009876, approvers=[424242]}]"#,
    )])
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("placeholder"), "{err}");

    // A list without brackets, and an index that leaves a gap, say what works.
    let out = check(&[("HITL__ROUTES__0__APPROVERS", "424242")])
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("HITL__ROUTES__0__APPROVERS='[11111111, 22222222]'"),
        "{err}"
    );
    assert!(!err.contains("found map"), "{err}");
    let out = check(&[("HITL__ROUTES__3__NAME", "x")]).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("HITL__ROUTES__3__") && err.contains("the next new entry is index 1"),
        "{err}"
    );
    assert!(!err.contains("found map"), "{err}");
}

#[tokio::test]
async fn an_environment_variable_overrides_a_single_key() {
    let out = config_cmd(&["check-config"])
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
        .env("HITL__TELEGRAM__POLL_TIMEOUT_SECONDS", "99")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("telegram.poll_timeout_seconds"));
}

#[tokio::test]
async fn migrate_creates_the_database_and_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sub/dir/hitl.db");
    let out = config_cmd(&["migrate"])
        .env("HITL__DATABASE__URL", format!("sqlite://{}", db.display()))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists());
}

#[tokio::test]
async fn check_config_shows_webhook_mode_and_refuses_it_without_the_secret() {
    let webhook = |secret: Option<&str>| {
        let mut c = config_cmd(&["check-config"]);
        c.env("TELEGRAM_BOT_TOKEN", "1:x")
            .env("HITL_AGENT_WORKDAY_TOKEN", WORKDAY_TOKEN)
            .env("HITL__TELEGRAM__MODE", "webhook")
            .env("HITL__TELEGRAM__PUBLIC_URL", "https://hitl.example.com")
            .env_remove("TELEGRAM_WEBHOOK_SECRET");
        if let Some(s) = secret {
            c.env("TELEGRAM_WEBHOOK_SECRET", s);
        }
        c
    };
    let out = webhook(Some("s3cret_value-1")).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("webhook at https://hitl.example.com/telegram/webhook")
            && !stdout.contains("s3cret_value-1"),
        "{stdout}"
    );

    let out = webhook(None).output().await.unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("telegram.webhook_secret_env") && err.contains("TELEGRAM_WEBHOOK_SECRET"),
        "{err}"
    );
}

/// The `head` field of the service's `audit chain head` log lines logged `when`.
fn logged_heads(log: &str, when: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["message"] == "audit chain head" && v["when"] == when)
        .map(|v| v["head"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn serve_logs_the_audit_head_at_shutdown_and_verify_accepts_it() {
    use crate::support::fake_telegram::FakeTelegram;
    use crate::support::process::{ServiceProcess, write_config};

    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/data/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let mut service = ServiceProcess::start(&config).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    ask_one_that_times_out(&client, &service.base).await;
    assert!(service.terminate().await.success());
    // Let the log reader drain the last lines.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let log = service.log_text();

    assert_eq!(
        logged_heads(&log, "start"),
        vec![format!("0:{}", "0".repeat(64))],
        "a fresh database starts empty:\n{log}"
    );
    let shutdown = logged_heads(&log, "shutdown");
    assert_eq!(shutdown.len(), 1, "{log}");
    let out = Command::new(BIN)
        .args(["--config", config.to_str().unwrap()])
        .args(["audit", "verify", "--expect-head", &shutdown[0]])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("head: {}", shutdown[0])),
        "the logged head is the trail's final head: {stdout}"
    );
}

#[tokio::test]
async fn demo_mode_runs_from_a_folder_without_any_config_file() {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["check-config", "--demo"])
        .current_dir(empty.path())
        .env("TELEGRAM_BOT_TOKEN", "1:x")
        .env("HITL_DEMO_AGENT_TOKEN", WORKDAY_TOKEN)
        .env("HITL_DEMO_OPERATOR_ID", "424242")
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("built-in defaults"), "{err}");
    // Without --demo a missing file is still an error that names it.
    let out = Command::new(BIN)
        .args(["check-config"])
        .current_dir(empty.path())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("config/default.toml does not exist"));
}

/// What a compose user meets when `config/local.toml` was never created: Docker mounts an
/// empty directory in its place.
#[tokio::test]
async fn a_config_path_that_is_a_directory_is_refused_with_the_docker_cause_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.toml");
    std::fs::create_dir(&local).unwrap();
    let out = Command::new(BIN)
        .args(["check-config", "--config", local.to_str().unwrap()])
        .output()
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("local.toml is a directory"), "{err}");
    assert!(
        err.contains("cp config/default.toml config/local.toml"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test]
async fn ask_takes_a_loopback_address_without_a_scheme() {
    let app = TestApp::spawn().await;
    let child = Command::new(BIN)
        .args(["ask", "--url", &app.addr.to_string(), "--token", TOKEN_A])
        .args(["--tool", "deploy", "--timeout", "0.5"])
        .env("NO_PROXY", "127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");
    let (code, out, err) = finish(child).await;
    // It reached the service: the question timed out (exit 2), nobody tapped.
    assert_eq!(code, 2, "{out}\n{err}");
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["status"],
        "timeout"
    );
}

/// The configuration the repository ships (`config/default.toml`), as text.
fn shipped_config() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/default.toml"))
        .expect("config/default.toml")
}
