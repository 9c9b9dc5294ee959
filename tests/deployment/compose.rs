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

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::free_port;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::Command;

const AGENT_TOKEN: &str = "compose-check-agent-token-0123456789";
/// The compose file's `stop_grace_period`.
const GRACE: Duration = Duration::from_secs(30);

/// One compose project at a time: each test runs a whole deployment on the host's
/// network, so they run one after the other even when the tests of this executable run
/// in parallel threads (`scripts/compose-check` also runs them with one thread).
static ONE_PROJECT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// Where the services of the copy listen on the host's loopback.
struct Ports {
    /// `hitl-telegram` (and the first replica of the `ha` profile).
    hitl: u16,
    /// `hitl-telegram-2`, the `ha` profile's second replica.
    hitl_2: u16,
    /// The `ha` profile's PostgreSQL (the machine's own may hold 5432).
    postgres: u16,
    /// The `ha` profile's Caddy.
    caddy: u16,
}

impl Ports {
    fn free() -> Self {
        Ports {
            hitl: free_port(),
            hitl_2: free_port(),
            postgres: free_port(),
            caddy: free_port(),
        }
    }
}

/// The project's compose file made to run on the host's network: no `build:` (the image
/// is built already) and no `ports:`, `network_mode: host` for each service, the image
/// given, each replica bound to `127.0.0.1` on its own port (its healthcheck asks
/// there), PostgreSQL on its port and loopback only.
fn host_network_copy(original: &str, image: &str, ports: &Ports) -> String {
    let mut out = Vec::new();
    let mut skip_deeper_than: Option<usize> = None;
    let mut service = String::new();
    for line in original.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(depth) = skip_deeper_than {
            if line.trim().is_empty() || indent > depth {
                continue;
            }
            skip_deeper_than = None;
        }
        let trimmed = line.trim_start();
        let pad = &line[..indent];
        if trimmed.starts_with('#') {
            out.push(line.to_owned());
            continue;
        }
        if indent == 2 && trimmed.ends_with(':') {
            service = trimmed.trim_end_matches(':').to_owned();
        }
        if trimmed == "ports:" {
            skip_deeper_than = Some(indent);
            continue;
        }
        if trimmed.starts_with("build:") {
            continue;
        }
        if trimmed.starts_with("image:") {
            if trimmed.starts_with("image: hitl-telegram") {
                out.push(format!("{pad}image: {image}"));
            } else {
                out.push(line.to_owned());
            }
            out.push(format!("{pad}network_mode: host"));
            if service == "postgres" {
                out.push(format!(
                    "{pad}command: [\"postgres\", \"-c\", \"listen_addresses=127.0.0.1\"]"
                ));
            }
            continue;
        }
        if service == "postgres" && trimmed.starts_with("POSTGRES_DB:") {
            // PGPORT moves the server and `pg_isready` in the healthcheck alike.
            out.push(line.to_owned());
            out.push(format!("{pad}PGPORT: \"{}\"", ports.postgres));
            continue;
        }
        let port = if service == "hitl-telegram-2" {
            ports.hitl_2
        } else {
            ports.hitl
        };
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

/// config/Caddyfile for the host's network: the replicas by their loopback ports, and
/// Caddy bound to loopback (its site address names the port, not the interface).
fn host_network_caddyfile(original: &str, ports: &Ports) -> String {
    let copy = original
        .replace(
            "reverse_proxy hitl-telegram:8080 hitl-telegram-2:8080",
            &format!(
                "reverse_proxy 127.0.0.1:{} 127.0.0.1:{}",
                ports.hitl, ports.hitl_2
            ),
        )
        .replace("\t@telegram {", "\tbind 127.0.0.1\n\t@telegram {");
    assert!(
        copy.contains(&format!("127.0.0.1:{}", ports.hitl_2)) && copy.contains("bind 127.0.0.1"),
        "config/Caddyfile changed shape; adapt host_network_caddyfile:\n{copy}"
    );
    // The admin API (localhost:2019 by default) is not needed, and another process on
    // this host may hold its port.
    format!("{{\n\tadmin off\n}}\n{copy}")
}

/// A compose project in a temporary folder, as the README's deploy steps make it, taken
/// down with its volumes when dropped.
struct Project {
    dir: tempfile::TempDir,
    compose: Vec<String>,
    name: String,
    /// `--profile ha` when the `ha` profile is on.
    profile: Vec<String>,
    /// The agents' API of `hitl-telegram`.
    base: String,
    /// The agents' API of `hitl-telegram-2` (the `ha` profile's second replica).
    base_2: String,
    /// Caddy's site address (the `ha` profile).
    public: String,
}

impl Project {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.compose[0]);
        c.args(&self.compose[1..])
            .arg("--project-name")
            .arg(&self.name)
            .arg("--file")
            .arg(self.dir.path().join("docker-compose.yml"))
            .args(&self.profile)
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

    async fn container_id(&self, service: &str) -> String {
        let id = self.run(&["ps", "-q", service]).await;
        let id = id.trim().to_owned();
        assert!(!id.is_empty(), "no {service} container");
        id
    }

    /// Waits for the compose healthcheck of `service` (first probe after its interval).
    async fn wait_healthy(&self, service: &str) {
        let id = self.container_id(service).await;
        let deadline = Instant::now() + Duration::from_secs(150);
        loop {
            let status = docker(&["inspect", "-f", "{{.State.Health.Status}}", &id]).await;
            match status.trim() {
                "healthy" => return,
                "unhealthy" => panic!("{service} unhealthy:\n{}", self.all_logs().await),
                _ if Instant::now() > deadline => panic!(
                    "{service} not healthy after 150 s:\n{}",
                    self.all_logs().await
                ),
                _ => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    /// Every container's log (`docker compose logs`, without colours).
    async fn all_logs(&self) -> String {
        let out = self
            .command(&["logs", "--no-color"])
            .output()
            .await
            .expect("run compose logs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.compose[0])
            .args(&self.compose[1..])
            .args(["--project-name", &self.name, "--file"])
            .arg(self.dir.path().join("docker-compose.yml"))
            .args(&self.profile)
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

/// The `ha` profile's secrets, as a user would fill them into `.env`.
const POSTGRES_PASSWORD: &str = "compose-check-pg-password-4b1d";
const WEBHOOK_SECRET: &str = "compose-check-webhook-secret-0123";

/// The project folder: the compose copy, `.env` from `.env.example` with real values,
/// and `config/local.toml` copied from `config/default.toml` with its placeholder ids
/// replaced and Telegram pointed at the fake, as the README tells a user to. With `ha`,
/// `.env`'s block for several replicas is filled in and the `ha` profile is on.
fn make_project(compose: Vec<String>, image: &str, telegram: &FakeTelegram, ha: bool) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let ports = Ports::free();
    let original = std::fs::read_to_string(repo("docker-compose.yml")).unwrap();
    let copy = host_network_copy(&original, image, &ports);
    assert!(
        copy.contains("network_mode: host")
            && copy.contains("/app/config/local.toml")
            && copy.contains(&format!("PGPORT: \"{}\"", ports.postgres))
            && copy.contains(&format!("127.0.0.1:{}", ports.hitl_2))
            && !copy.lines().any(|l| l.trim() == "ports:"),
        "the compose file changed shape; adapt host_network_copy:\n{copy}"
    );
    std::fs::write(dir.path().join("docker-compose.yml"), copy).unwrap();

    let mut env = std::fs::read_to_string(repo(".env.example"))
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
    if ha {
        // Caddy's site address is a plain-http loopback one here (no certificates
        // offline); the service accepts an http public_url on loopback only.
        let public = format!("http://127.0.0.1:{}", ports.caddy);
        let filled = [
            (
                "# TELEGRAM_WEBHOOK_SECRET=replace-with-openssl-rand-hex-32",
                format!("TELEGRAM_WEBHOOK_SECRET={WEBHOOK_SECRET}"),
            ),
            (
                "# HITL_PUBLIC_HOST=hitl.example.com",
                format!("HITL_PUBLIC_HOST={public}"),
            ),
            (
                "# POSTGRES_PASSWORD=replace-with-openssl-rand-hex-24",
                format!("POSTGRES_PASSWORD={POSTGRES_PASSWORD}"),
            ),
            (
                "# HITL_DATABASE_URL=postgres://hitl:replace-with-openssl-rand-hex-24@postgres:5432/hitl",
                format!(
                    "HITL_DATABASE_URL=postgres://hitl:{POSTGRES_PASSWORD}@127.0.0.1:{}/hitl",
                    ports.postgres
                ),
            ),
            (
                "# HITL__TELEGRAM__MODE=webhook",
                "HITL__TELEGRAM__MODE=webhook".to_owned(),
            ),
            (
                "# HITL__TELEGRAM__PUBLIC_URL=https://hitl.example.com",
                format!("HITL__TELEGRAM__PUBLIC_URL={public}"),
            ),
        ];
        for (commented, value) in filled {
            assert!(
                env.contains(commented),
                ".env.example changed shape:\n{env}"
            );
            env = env.replace(commented, &value);
        }
        let caddyfile = std::fs::read_to_string(repo("config/Caddyfile")).unwrap();
        std::fs::create_dir(dir.path().join("config")).unwrap();
        std::fs::write(
            dir.path().join("config/Caddyfile"),
            host_network_caddyfile(&caddyfile, &ports),
        )
        .unwrap();
    }
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
    std::fs::create_dir_all(dir.path().join("config")).unwrap();
    std::fs::write(dir.path().join("config/local.toml"), config).unwrap();

    let suffix = if ha { "-ha" } else { "" };
    Project {
        dir,
        compose,
        name: format!("hitl-compose-check-{}{suffix}", std::process::id()),
        profile: if ha {
            vec!["--profile".to_owned(), "ha".to_owned()]
        } else {
            Vec::new()
        },
        base: format!("http://127.0.0.1:{}", ports.hitl),
        base_2: format!("http://127.0.0.1:{}", ports.hitl_2),
        public: format!("http://127.0.0.1:{}", ports.caddy),
    }
}

/// Asks to deploy `version` of billing, with a window of 600 s.
async fn ask(client: &reqwest::Client, base: &str, version: &str) -> (StatusCode, Value) {
    let r = client
        .post(format!("{base}/v1/confirmations"))
        .bearer_auth(AGENT_TOKEN)
        .json(&json!({
            "tool": "deploy",
            "params": {"service": "billing", "version": version},
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
        .get(format!("{base}/v1/confirmations/{id}?wait=15"))
        .bearer_auth(AGENT_TOKEN)
        .send()
        .await
        .unwrap();
    let (s, v) = json_of(r).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

/// Asks for `version` of billing to be deployed on `ask_on`, waits for the `nth` message
/// of the ops chat, checks that it shows that version, taps Approve as Alice, and reads
/// the request's outcome on `read_on`. Returns the request's id.
async fn approved(
    client: &reqwest::Client,
    telegram: &FakeTelegram,
    (ask_on, read_on): (&str, &str),
    version: &str,
    nth: usize,
) -> String {
    let (s, record) = ask(client, ask_on, version).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{record}");
    let id = record["id"].as_str().unwrap().to_owned();
    let question = telegram
        .wait_for_message_in(OPS_CHAT, nth)
        .await
        .remove(nth - 1);
    for shown in ["billing", version] {
        assert!(
            question.visible_text.contains(shown),
            "{shown} missing: {}",
            question.visible_text
        );
    }
    telegram.tap(
        OPS_CHAT,
        question.message_id,
        approve_label(600).as_str(),
        alice(),
    );
    let decided = get(client, read_on, &id).await;
    assert_eq!(decided["status"], "confirmed", "{decided}");
    assert_eq!(decided["decided_by"]["id"], ALICE);
    id
}

/// Asks for `version` again on `base`: the window an approval opened lets it through at
/// once, and the ops chat still holds the `posted` questions it held.
async fn let_through_by_the_window(
    client: &reqwest::Client,
    telegram: &FakeTelegram,
    base: &str,
    version: &str,
    posted: usize,
) {
    let (s, hit) = ask(client, base, version).await;
    assert_eq!(
        (s, &hit["via"]),
        (StatusCode::OK, &json!("window")),
        "{hit}"
    );
    assert_eq!(
        telegram.messages_in(OPS_CHAT).len(),
        posted,
        "a question was posted twice, or the window asked again"
    );
}

#[tokio::test]
async fn the_compose_deployment_approves_through_the_container_and_keeps_its_decisions_across_down_and_up()
 {
    let Some((compose, image)) = compose_setup() else {
        return;
    };
    let _one_at_a_time = ONE_PROJECT_AT_A_TIME.lock().await;
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let project = make_project(compose, &image, &telegram, false);
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
    project.wait_healthy("hitl-telegram").await;
    let id = project.container_id("hitl-telegram").await;

    let uid = project
        .run(&["exec", "-T", "hitl-telegram", "id", "-u"])
        .await;
    assert_eq!(uid.trim(), "10001", "the service must not run as root");

    // One approval through the container.
    let base = project.base.as_str();
    let request = approved(&client, &telegram, (base, base), "2.4.1", 1).await;

    // The backup copy-out of docs/operations.md ("Backups").
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
    project.wait_healthy("hitl-telegram").await;
    let after = get(&client, &project.base, &request).await;
    assert_eq!(after["status"], "confirmed", "{after}");
    let_through_by_the_window(&client, &telegram, &project.base, "2.4.1", 1).await;

    // The log as `docker logs` keeps it: no secret, no colour codes.
    let id = project.container_id("hitl-telegram").await;
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

#[tokio::test]
async fn the_ha_profile_runs_two_replicas_on_postgresql_behind_caddy_and_carries_on_when_one_is_killed()
 {
    let Some((compose, image)) = compose_setup() else {
        return;
    };
    let _one_at_a_time = ONE_PROJECT_AT_A_TIME.lock().await;
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    // Each replica alone may need the lease of a killed one (5 s) before it posts.
    telegram.set_wait_timeout(Duration::from_secs(30));
    let project = make_project(compose, &image, &telegram, true);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    // The steps for several replicas (docs/operations.md): `.env` filled in, then one command.
    project.run(&["up", "-d"]).await;
    for service in ["postgres", "hitl-telegram", "hitl-telegram-2"] {
        project.wait_healthy(service).await;
    }
    let webhook = telegram
        .wait_for_webhook(&format!("{}/telegram/webhook", project.public))
        .await;
    assert_eq!(webhook.secret_token.as_deref(), Some(WEBHOOK_SECRET));

    // Asked on one replica, tapped through Caddy, heard on the other.
    let (a, b) = (project.base.as_str(), project.base_2.as_str());
    let first = approved(&client, &telegram, (a, b), "2.4.1", 1).await;
    let through_caddy = telegram.webhook_deliveries();
    assert!(
        through_caddy
            .iter()
            .any(|d| d.url.starts_with(&project.public) && d.status == Some(200)),
        "the tap did not reach a replica through Caddy: {through_caddy:?}"
    );

    // Caddy publishes the webhook and the console (the service's own JSON answers: the
    // console is off here) and nothing else (its own empty 404).
    for (path, published) in [
        ("/app/api/questions", true),
        ("/app", true),
        (
            "/v1/confirmations/cf_00000000000000000000000000000000",
            false,
        ),
        ("/openapi.json", false),
    ] {
        let r = client
            .get(format!("{}{path}", project.public))
            .send()
            .await
            .expect("GET through Caddy");
        assert_eq!(r.status(), reqwest::StatusCode::NOT_FOUND, "{path}");
        let body = r.text().await.unwrap();
        assert_eq!(
            body.contains("\"not_found\""),
            published,
            "{path}: {body:?}"
        );
    }

    // The first replica killed outright: the second posts, hears the tap through Caddy
    // (which skips the dead one) and answers its agent.
    let killed = project.container_id("hitl-telegram").await;
    docker(&["kill", "--signal", "KILL", &killed]).await;
    let second = approved(&client, &telegram, (b, b), "2.4.2", 2).await;

    // Down and up: PostgreSQL's volume keeps the decisions and the windows.
    project.run(&["down", "--timeout", "30"]).await;
    project.run(&["up", "-d"]).await;
    for service in ["hitl-telegram", "hitl-telegram-2"] {
        project.wait_healthy(service).await;
    }
    for (base, id) in [(&project.base, &second), (&project.base_2, &first)] {
        let after = get(&client, base, id).await;
        assert_eq!(after["status"], "confirmed", "{after}");
    }
    let_through_by_the_window(&client, &telegram, &project.base_2, "2.4.1", 2).await;

    let logs = project.all_logs().await;
    assert!(logs.contains("hitl-telegram is serving"), "{logs}");
    for secret in [BOT_TOKEN, AGENT_TOKEN, POSTGRES_PASSWORD, WEBHOOK_SECRET] {
        assert!(!logs.contains(secret), "a secret in the log:\n{logs}");
    }
}
