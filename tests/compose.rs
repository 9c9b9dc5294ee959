//! The project's own docker-compose.yml, run for real: the image the Dockerfile builds,
//! the README's deploy steps, one approval through the container against the fake Bot
//! API, and what must survive `down`/`up`.
//!
//! Needs a Docker engine, the built image and Compose; `scripts/compose-check` provides
//! all three and runs this with `HITL_REQUIRE_COMPOSE=1` (then a missing piece fails the
//! test). Without that variable the test says why it skips.
//!
//! Every packet stays on loopback: the container runs on the host's network (a copy of
//! the compose file with `network_mode: host` and without `ports:`, which Compose v1
//! refuses together), bound to 127.0.0.1 on a free port.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::app::*;
use support::fake_telegram::FakeTelegram;
use tokio::process::Command;

const AGENT_TOKEN: &str = "compose-check-agent-token-0123456789";
/// The compose file's `stop_grace_period`.
const GRACE: Duration = Duration::from_secs(30);

/// The compose command (`docker compose` or `docker-compose`), the image, or None to
/// skip. Panics when `HITL_REQUIRE_COMPOSE=1` and something is missing.
fn compose_setup() -> Option<(Vec<String>, String)> {
    let required = std::env::var("HITL_REQUIRE_COMPOSE").is_ok_and(|v| v == "1");
    let compose = std::env::var("HITL_COMPOSE").ok();
    let image = std::env::var("HITL_COMPOSE_IMAGE").ok();
    match (compose, image) {
        (Some(c), Some(i)) => Some((c.split_whitespace().map(str::to_owned).collect(), i)),
        _ if required => {
            panic!("HITL_REQUIRE_COMPOSE=1 but HITL_COMPOSE or HITL_COMPOSE_IMAGE is unset")
        }
        _ => {
            eprintln!("skipping: run scripts/compose-check for the compose test");
            None
        }
    }
}

/// The project's compose file made to run on the host's network: no `build:` (the image
/// is built already) and no `ports:`, `network_mode: host` for each service, the image
/// given, and the service bound to `127.0.0.1:port` (its healthcheck asks there).
fn host_network_copy(original: &str, image: &str, port: u16) -> String {
    let mut out = Vec::new();
    let mut skip_deeper_than: Option<usize> = None;
    for line in original.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skip_deeper_than {
            if line.trim().is_empty() || indent > depth {
                continue;
            }
            skip_deeper_than = None;
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('#') {
            out.push(line.to_owned());
            continue;
        }
        if trimmed == "ports:" {
            skip_deeper_than = Some(indent);
            continue;
        }
        if trimmed.starts_with("build:") {
            continue;
        }
        if trimmed.starts_with("image: hitl-telegram") {
            out.push(format!("{}image: {image}", &line[..indent]));
            out.push(format!("{}network_mode: host", &line[..indent]));
            continue;
        }
        if trimmed.starts_with("image:") {
            out.push(line.to_owned());
            out.push(format!("{}network_mode: host", &line[..indent]));
            continue;
        }
        out.push(
            line.replace("\"0.0.0.0:8080\"", &format!("\"127.0.0.1:{port}\""))
                .replace(
                    "/dev/tcp/127.0.0.1/8080",
                    &format!("/dev/tcp/127.0.0.1/{port}"),
                ),
        );
    }
    out.join("\n") + "\n"
}

/// A compose project in a temporary folder, as the README's deploy steps make it, taken
/// down with its volume when dropped.
struct Project {
    dir: tempfile::TempDir,
    compose: Vec<String>,
    name: String,
    base: String,
}

impl Project {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.compose[0]);
        c.args(&self.compose[1..])
            .arg("--project-name")
            .arg(&self.name)
            .arg("--file")
            .arg(self.dir.path().join("docker-compose.yml"))
            .args(args)
            .current_dir(self.dir.path())
            .kill_on_drop(true);
        c
    }

    /// Runs a compose subcommand; panics with its output unless it succeeds.
    async fn run(&self, args: &[&str]) -> String {
        let out = self.command(args).output().await.expect("run compose");
        succeeded(out, &format!("compose {args:?}"))
    }

    async fn container_id(&self) -> String {
        let id = self.run(&["ps", "-q", "hitl-telegram"]).await;
        let id = id.trim().to_owned();
        assert!(!id.is_empty(), "no hitl-telegram container");
        id
    }

    /// Waits for the compose healthcheck (first probe after its 30 s interval).
    async fn wait_healthy(&self) {
        let id = self.container_id().await;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = docker(&["inspect", "-f", "{{.State.Health.Status}}", &id]).await;
            match status.trim() {
                "healthy" => return,
                "unhealthy" => panic!("unhealthy:\n{}", docker(&["logs", &id]).await),
                _ if Instant::now() > deadline => {
                    panic!("not healthy after 120 s:\n{}", docker(&["logs", &id]).await)
                }
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.compose[0])
            .args(&self.compose[1..])
            .args(["--project-name", &self.name, "--file"])
            .arg(self.dir.path().join("docker-compose.yml"))
            .args(["down", "--volumes", "--timeout", "5"])
            .current_dir(self.dir.path())
            .output();
    }
}

/// `docker ARGS` (stdout and stderr together); panics unless it succeeds.
async fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .await
        .expect("run docker");
    succeeded(out, &format!("docker {args:?}"))
}

/// A command's stdout and stderr together; panics with them unless it succeeded.
fn succeeded(out: std::process::Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The project folder: the compose copy, `.env` from `.env.example` with real values,
/// and `config/local.toml` copied from `config/default.toml` with its placeholder ids
/// replaced and Telegram pointed at the fake, as the README tells a user to.
fn make_project(compose: Vec<String>, image: &str, telegram: &FakeTelegram) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let original = std::fs::read_to_string(repo("docker-compose.yml")).unwrap();
    let copy = host_network_copy(&original, image, port);
    assert!(
        copy.contains("network_mode: host")
            && copy.contains("/app/config/local.toml")
            && !copy.lines().any(|l| l.trim() == "ports:"),
        "the compose file changed shape; adapt host_network_copy:\n{copy}"
    );
    std::fs::write(dir.path().join("docker-compose.yml"), copy).unwrap();

    let env = std::fs::read_to_string(repo(".env.example"))
        .unwrap()
        .replace(
            "TELEGRAM_BOT_TOKEN=123456789:replace-me",
            &format!("TELEGRAM_BOT_TOKEN={BOT_TOKEN}"),
        )
        .replace(
            "HITL_AGENT_WORKDAY_TOKEN=replace-with-a-long-random-string",
            &format!("HITL_AGENT_WORKDAY_TOKEN={AGENT_TOKEN}"),
        );
    assert!(
        env.contains(AGENT_TOKEN) && env.contains(BOT_TOKEN),
        ".env.example changed shape:\n{env}"
    );
    std::fs::write(dir.path().join(".env"), env).unwrap();

    let config = std::fs::read_to_string(repo("config/default.toml"))
        .unwrap()
        .replace(
            "api_url = \"https://api.telegram.org\"",
            &format!("api_url = \"{}\"", telegram.api_url()),
        )
        .replace("-1001234567890", &OPS_CHAT.to_string())
        .replace("11111111", &ALICE.to_string())
        .replace("22222222", &BOB.to_string());
    assert!(
        config.contains(&telegram.api_url()),
        "config/default.toml changed shape"
    );
    std::fs::create_dir(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/local.toml"), config).unwrap();

    Project {
        dir,
        compose,
        name: format!("hitl-compose-check-{}", std::process::id()),
        base: format!("http://127.0.0.1:{port}"),
    }
}

async fn ask(client: &reqwest::Client, base: &str) -> (StatusCode, Value) {
    let r = client
        .post(format!("{base}/v1/confirmations"))
        .bearer_auth(AGENT_TOKEN)
        .json(&json!({
            "tool": "deploy",
            "params": {"service": "billing", "version": "2.4.1"},
            "owner_id": "ops-team",
            "window_seconds": 600,
            "wait": "suspend",
        }))
        .send()
        .await
        .unwrap();
    json_of(r).await
}

async fn get(client: &reqwest::Client, base: &str, id: &str) -> Value {
    let r = client
        .get(format!("{base}/v1/confirmations/{id}?wait=5"))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

#[tokio::test]
async fn the_compose_deployment_approves_through_the_container_and_keeps_its_decisions_across_down_and_up()
 {
    let Some((compose, image)) = compose_setup() else {
        return;
    };
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let project = make_project(compose, &image, &telegram);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    // The README's deploy steps: check the config in a one-off container (online: the
    // bot is in the group, both approvers are members), then start.
    telegram.set_chat_members(OPS_CHAT, &[ALICE, BOB]);
    let checked = project
        .run(&[
            "run",
            "--rm",
            "-T",
            "hitl-telegram",
            "check-config",
            "--online",
        ])
        .await;
    assert!(checked.contains("online checks OK"), "{checked}");
    assert!(
        checked.contains("configuration OK: 1 route(s), 1 agent(s)"),
        "{checked}"
    );
    assert!(!checked.contains("warning"), "{checked}");
    project.run(&["up", "-d"]).await;
    project.wait_healthy().await;
    let id = project.container_id().await;

    let uid = project
        .run(&["exec", "-T", "hitl-telegram", "id", "-u"])
        .await;
    assert_eq!(uid.trim(), "10001", "the service must not run as root");

    // One approval through the container.
    let (s, record) = ask(&client, &project.base).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{record}");
    let request = record["id"].as_str().unwrap().to_owned();
    let question = telegram.wait_for_message_in(OPS_CHAT, 1).await.remove(0);
    assert!(
        question.visible_text.contains("billing"),
        "{}",
        question.visible_text
    );
    telegram.tap(
        OPS_CHAT,
        question.message_id,
        approve_label(600).as_str(),
        alice(),
    );
    let decided = get(&client, &project.base, &request).await;
    assert_eq!(decided["status"], "confirmed", "{decided}");
    assert_eq!(decided["decided_by"]["id"], ALICE);

    // The README's backup copy-out.
    project
        .run(&[
            "exec",
            "-T",
            "hitl-telegram",
            "hitl-telegram",
            "backup",
            "/app/data/backup.db",
        ])
        .await;
    let copy = project.dir.path().join("hitl-backup.db");
    docker(&[
        "cp",
        &format!("{id}:/app/data/backup.db"),
        copy.to_str().unwrap(),
    ])
    .await;
    project
        .run(&["exec", "-T", "hitl-telegram", "rm", "/app/data/backup.db"])
        .await;
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", copy.display()))
        .await
        .unwrap();
    let (status,): (String,) = sqlx::query_as("SELECT status FROM confirmations WHERE id = ?")
        .bind(&request)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    assert_eq!(status, "confirmed");

    // down/up on the named volume: the decision and its window are still there.
    project.run(&["down", "--timeout", "30"]).await;
    project.run(&["up", "-d"]).await;
    project.wait_healthy().await;
    let after = get(&client, &project.base, &request).await;
    assert_eq!(after["status"], "confirmed", "{after}");
    let (s, hit) = ask(&client, &project.base).await;
    assert_eq!(
        (s, &hit["via"]),
        (StatusCode::OK, &json!("window")),
        "{hit}"
    );
    assert_eq!(
        telegram.messages_in(OPS_CHAT).len(),
        1,
        "the window asked again"
    );

    // The log as `docker logs` keeps it: no secret, no colour codes.
    let id = project.container_id().await;
    let logs = docker(&["logs", &id]).await;
    assert!(logs.contains("hitl-telegram is serving"), "{logs}");
    for secret in [BOT_TOKEN, AGENT_TOKEN] {
        assert!(!logs.contains(secret), "a secret in the log:\n{logs}");
    }
    assert!(!logs.contains('\u{1b}'), "colour codes in the log:\n{logs}");

    // SIGTERM ends it cleanly, well within the grace period (not killed at its end).
    let started = Instant::now();
    project.run(&["stop", "--timeout", "30"]).await;
    let took = started.elapsed();
    let exit = docker(&["inspect", "-f", "{{.State.ExitCode}}", &id]).await;
    assert_eq!(
        exit.trim(),
        "0",
        "not a clean exit:\n{}",
        docker(&["logs", &id]).await
    );
    assert!(took < GRACE, "stop took {took:?}");
    eprintln!("compose check: stop took {took:?}");
}
