//! B1: the window-hit decision in process, on one thread.
//!
//! A window hit is what a busy agent repeating an approved call costs us: canonicalise
//! the parameters as AI-Parrot does (Python's `json.dumps(sort_keys=True)`, written
//! straight from the JSON text by `domain::python::canon`), hash them,
//! and look the key up among the live windows. This bench runs exactly those public
//! functions against a real SQLite store holding one open window, once through the
//! store's in-memory window index (what the service uses) and once through a store that
//! has not loaded the index and so asks SQLite (what every lookup cost before the index
//! existed), so one run shows both. `bench/run` turns the means into decisions per
//! second and sets them beside AI-Parrot's own `ConfirmationGuard.confirm()`.
//!
//! For the instruction counts CI compares with `bench/instructions.toml`
//! (`bench/check-instructions`), `B1_COUNT` also runs two paths through the real
//! [`Service`]: a window hit as `POST /v1/confirmations` takes it (body parsed, rules,
//! window, durable write, the response's JSON), and an operator's tap deciding a pending
//! confirmation (`Service::handle_tap`, with the background work it starts). Telegram is
//! a [`Messenger`] that sends nothing: what the counts follow is our decision path, not
//! teloxide's HTTP client.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use criterion::{Criterion, criterion_group};
use hitl_telegram::api::admission::{ADMITTED, Queue};
use hitl_telegram::api::confirmations::parse_create;
use hitl_telegram::api::record::RecordView;
use hitl_telegram::api::run_reports::parse_report;
use hitl_telegram::app::open_store;
use hitl_telegram::config::{Agent, Config, Settings};
use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::ids::{OwnerId, QuestionId, ToolName};
use hitl_telegram::domain::python;
use hitl_telegram::domain::question::{Ending, Operator, Question, Seed, Status, WindowKey};
use hitl_telegram::service::{
    Button, CommandReply, DeliveryError, Mention, Messenger, PinNotice, Service, Tap, TapAction,
    Turn, View,
};
use hitl_telegram::storage::{Administration, Decided, Questions, SqliteStore, Store};
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

/// A typical tool call: a handful of keys, nested values, a float.
const PARAMS: &str = r#"{"path": "/srv/app/releases/2026-11-30", "recursive": true,
    "exclude": ["*.log", "cache/"], "retries": 3, "timeout": 2.5, "owner": "deploy"}"#;

const AGENT: &str = "bench-agent";

/// One window-hit decision: canonicalise, hash, look up. Returns whether it hit.
async fn decide(store: &dyn Store, tool: &ToolName, owner: &OwnerId) -> bool {
    // The parameters are valid JSON by construction; a parse error would be a bug here.
    let args_hash = ArgsHash::of_json(std::hint::black_box(PARAMS))
        .expect("the bench parameters are a JSON object");
    let key = WindowKey {
        agent: AGENT.to_owned(),
        route: "ops".to_owned(),
        owner_id: owner.clone(),
        tool: tool.clone(),
        args_hash,
        server: None,
    };
    let now = OffsetDateTime::now_utc();
    matches!(store.live_window(&key, now).await, Ok(Some(_)))
}

/// Stores one request for `PARAMS` and has an operator approve it with a one-hour
/// window, through the store's own write path.
async fn open_window(store: &SqliteStore, tool: &ToolName, owner: &OwnerId) {
    let now = OffsetDateTime::now_utc();
    let params =
        python::json::parse_object(PARAMS).expect("the bench parameters are a JSON object");
    let record = Question::pending(Seed {
        agent: AGENT.to_owned(),
        route: "ops".to_owned(),
        chat_id: 1,
        tool: tool.clone(),
        owner_id: owner.clone(),
        args_hash: ArgsHash::of(&params),
        params_json: PARAMS.to_owned(),
        briefing: "bench".to_owned(),
        context: None,
        allow_edit: false,
        window_seconds: 3600,
        window_requested_seconds: None,
        has_call: false,
        idempotency_key: None,
        callback_url: None,
        created_at: now,
        expires_at: now + Duration::from_secs(3600),
        interaction: None,
        expect_outcome_seconds: None,
        args_schema: None,
        server: None,
        annotations: None,
    });
    store.insert(&record, now).await.expect("insert");
    let operator = Operator {
        id: 1,
        username: None,
        name: "Bench".to_owned(),
    };
    let decided = store
        .decide(
            &record.id,
            &Ending::Approved {
                by: operator,
                once: false,
            }
            .decide(now),
        )
        .await
        .expect("decide");
    assert!(matches!(decided, Decided::Applied(_)), "the window opens");
}

/// A current-thread runtime (the figures are per core) and a SQLite file's URL in a
/// temporary folder, kept as long as the folder is.
fn runtime_and_database() -> (tokio::runtime::Runtime, tempfile::TempDir, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread runtime");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let url = format!("sqlite://{}", dir.path().join("bench.db").display());
    (rt, dir, url)
}

/// The bench's world: a current-thread runtime (the figure is per core) and two stores
/// on one file holding one open window, one with the in-memory index, one without.
struct World {
    rt: tokio::runtime::Runtime,
    indexed: SqliteStore,
    unindexed: SqliteStore,
    tool: ToolName,
    owner: OwnerId,
    _dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        let (rt, dir, url) = runtime_and_database();
        let tool = ToolName::parse("deploy_release").expect("a valid tool name");
        let owner = OwnerId::parse("alice@example.com").expect("a valid owner id");
        let (indexed, unindexed) = rt.block_on(async {
            let store = SqliteStore::connect(&url).await.expect("connect");
            store.migrate().await.expect("migrate");
            open_window(&store, &tool, &owner).await;
            // A second store on the same file that never loads the index: SQLite answers.
            let plain = SqliteStore::connect(&url).await.expect("connect");
            (store, plain)
        });
        let world = World {
            rt,
            indexed,
            unindexed,
            tool,
            owner,
            _dir: dir,
        };
        assert!(world.hit(&world.indexed), "indexed hit");
        assert!(world.hit(&world.unindexed), "SQLite hit");
        world
    }

    fn hit(&self, store: &SqliteStore) -> bool {
        self.rt.block_on(decide(store, &self.tool, &self.owner))
    }
}

/// The chat side of the service's bench: every message "gets through" at once and
/// nothing leaves the process. Message ids count up, so each question has its own.
struct NoTelegram {
    next_message: AtomicI32,
}

impl NoTelegram {
    fn sent(&self) -> Result<i32, DeliveryError> {
        Ok(self.next_message.fetch_add(1, Ordering::Relaxed))
    }
}

#[async_trait]
impl Messenger for NoTelegram {
    async fn question_turn(
        &self,
        _chat_id: i64,
        _agent: &str,
        _deadline: OffsetDateTime,
    ) -> Result<Turn, DeliveryError> {
        Ok(Turn::new(()))
    }
    async fn send_question(
        &self,
        _record: &Question,
        _chat_id: i64,
        _view: &View,
        _turn: Turn,
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }
    async fn update_message(
        &self,
        _record: &Question,
        _chat_id: i64,
        _message_id: i32,
        _view: &View,
    ) -> Result<(), DeliveryError> {
        Ok(())
    }
    async fn send_notification(
        &self,
        _chat_id: i64,
        _agent: &str,
        _text: &str,
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }
    async fn send_attachment(
        &self,
        _record: &Question,
        _chat_id: i64,
        _reply_to: i32,
    ) -> Result<bool, DeliveryError> {
        Ok(false)
    }
    async fn answer_tap(
        &self,
        _query_id: &str,
        _text: &str,
        _alert: bool,
    ) -> Result<(), DeliveryError> {
        Ok(())
    }
    async fn send_command_reply(
        &self,
        _chat_id: i64,
        _thread: Option<i32>,
        _reply_to: Option<i32>,
        _reply: &CommandReply,
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }
    async fn send_reason_prompt(
        &self,
        _record: &Question,
        _chat_id: i64,
        _thread: Option<i32>,
        _reply_to: i32,
        _from: &Operator,
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }
    async fn send_pin_notice(
        &self,
        _chat_id: i64,
        _thread: Option<i32>,
        _notice: &PinNotice,
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }
    async fn show_pin_notice(
        &self,
        _chat_id: i64,
        _message_id: i32,
        _notice: &PinNotice,
    ) -> Result<(), DeliveryError> {
        Ok(())
    }
    async fn send_reminder(
        &self,
        _record: &Question,
        _chat_id: i64,
        _thread: Option<i32>,
        _reply_to: i32,
        _waiting: &[Mention],
    ) -> Result<i32, DeliveryError> {
        self.sent()
    }

    async fn probe(&self, _within: std::time::Duration) -> Result<(), String> {
        // Never asked: the bench configures no outage_webhook_url.
        Err("the benchmark has no Telegram".into())
    }
}

/// The route's chat and its one approver, who taps.
const CHAT: i64 = -100;
const APPROVER: u64 = 1;

/// The service's configuration: one route, one agent allowed enough pending questions
/// for any count the bench prepares, deadlines far past any run under callgrind.
fn service_settings(db_url: &str) -> String {
    format!(
        r#"
        [server]
        bind = "127.0.0.1:0"
        [database]
        url = "{db_url}"
        [telegram]
        api_url = "http://127.0.0.1:9/"
        poll_timeout_seconds = 1
        [confirmation]
        default_timeout_seconds = 86400
        max_timeout_seconds = 86400
        default_window_seconds = 0
        [[routes]]
        name = "ops"
        chat_id = {CHAT}
        approvers = [{APPROVER}]
        max_window_seconds = 86400
        [[agents]]
        name = "{AGENT}"
        token_env = "BENCH_AGENT_TOKEN"
        routes = ["ops"]
        default_route = "ops"
        max_pending = 1000000
        "#
    )
}

/// A run's report as the MCP gateway sends it for a call that ran.
const REPORT_BODY: &str =
    r#"{"status": "executed", "summary": "released 2026-11-30", "duration_ms": 41}"#;

/// The create body a busy agent repeats: the bench's call, asking for a window.
fn create_body() -> String {
    format!(
        r#"{{"tool": "deploy_release", "owner_id": "alice@example.com", "window_seconds": 3600, "params": {PARAMS}}}"#
    )
}

/// The real service on a SQLite file in a temporary folder, started as
/// `Application::run_until_stopped` starts it (configuration held, pending questions
/// recovered, so this process leads and posts), on a current-thread runtime so that the
/// counts do not depend on how work lands on worker threads.
struct ServiceWorld {
    rt: tokio::runtime::Runtime,
    service: Arc<Service>,
    config: Arc<Config>,
    agent: Arc<Agent>,
    /// The queue the HTTP handler takes its turn in before it reads the body.
    admission: Queue,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl ServiceWorld {
    fn new() -> ServiceWorld {
        let (rt, dir, url) = runtime_and_database();
        let settings =
            Settings::from_toml(&service_settings(&url)).expect("the bench settings parse");
        let env = |key: &str| match key {
            "TELEGRAM_BOT_TOKEN" => Some("123:bench".to_owned()),
            "BENCH_AGENT_TOKEN" => Some("bench-agent-token-0123456789".to_owned()),
            _ => None,
        };
        let config = Arc::new(Config::from_settings(settings, &env).expect("a valid config"));
        let agent = config.agents[0].clone();
        let service = rt.block_on(async {
            let store = open_store(&config).await.expect("the store opens");
            let messenger = Arc::new(NoTelegram {
                next_message: AtomicI32::new(1),
            });
            let service = Arc::new(Service::new(config.clone(), store, messenger));
            service
                .agreement()
                .hold_config()
                .await
                .expect("configuration held");
            service
                .agreement()
                .config_report()
                .await
                .expect("configurations read");
            service.recover().await.expect("recovered");
            // Every connection the pool may hold, opened now: one opened by chance in
            // the middle of a run (a query arriving while the others are busy) would
            // make the counts vary from run to run.
            let pings = (0..2 * SQLITE_POOL).map(|_| service.roles().administration.ping());
            for ping in futures_util::future::join_all(pings).await {
                ping.expect("the database answers");
            }
            service
        });
        let admission = Queue::new(ADMITTED, service.metrics().clone());
        ServiceWorld {
            rt,
            service,
            config,
            agent,
            admission,
            stop: CancellationToken::new(),
            _dir: dir,
        }
    }

    /// One `POST /v1/confirmations` without HTTP: its turn, parse the body, create,
    /// write the response. Returns the record.
    async fn create(&self) -> Question {
        let admitted = self
            .admission
            .turn(&self.stop)
            .await
            .expect("never stopped");
        let body = create_body();
        let (new, _wait) = parse_create(
            std::hint::black_box(body.as_bytes()),
            &self.config,
            &self.agent,
        )
        .expect("the bench body is valid");
        let record = self
            .service
            .create(&self.agent, new)
            .await
            .expect("the service creates");
        drop(admitted);
        let response = serde_json::to_vec(&RecordView::from(&record)).expect("a record serialises");
        std::hint::black_box(response);
        record
    }

    /// One `POST /v1/confirmations/{id}/outcome` without HTTP, as the MCP gateway sends
    /// it after every call: parse the body, take the report, write the response.
    async fn report(&self, record: &Question) {
        let report = parse_report(std::hint::black_box(REPORT_BODY.as_bytes()))
            .expect("the bench report is valid");
        let taken = self
            .service
            .report_run(&self.agent, &record.id, report)
            .await
            .expect("the service takes the report");
        let response = serde_json::to_vec(&RecordView::from(&taken)).expect("a record serialises");
        std::hint::black_box(response);
    }

    /// Runs the background work started so far (deliveries, message edits) to its end.
    fn settle(&self) {
        let tasks = self.service.tasks();
        tasks.close();
        self.rt.block_on(tasks.wait());
        tasks.reopen();
    }

    /// `n` pending questions, each posted (its message id stored): what taps answer.
    fn pending(&self, n: u64) -> Vec<Question> {
        let ids: Vec<QuestionId> = (0..n)
            .map(|_| {
                let body = create_body();
                let (new, _) = parse_create(body.as_bytes(), &self.config, &self.agent)
                    .expect("the bench body is valid");
                let id = self
                    .rt
                    .block_on(self.service.create(&self.agent, new))
                    .expect("the service creates")
                    .id;
                // One delivery at a time: deliveries overlapping as threads happen to
                // run would make the pool open connections in one run and not the next.
                self.settle();
                id
            })
            .collect();
        ids.iter()
            .map(|id| {
                let record = self
                    .rt
                    .block_on(self.service.roles().questions.get(id))
                    .expect("the store reads")
                    .expect("the question is stored");
                assert!(record.message_id.is_some(), "the question was posted");
                record
            })
            .collect()
    }

    /// The approver's tap on `record`'s message.
    fn tap(&self, record: &Question, action: TapAction) {
        let tap = Tap {
            query_id: "bench-query".to_owned(),
            button: Some(Button {
                action,
                token: record.callback_token.clone(),
            }),
            chat_id: Some(CHAT),
            message_id: record.message_id,
            carries_button: true,
            from: Operator {
                id: APPROVER,
                username: None,
                name: "Bench".to_owned(),
            },
            from_is_bot: false,
            revoke_grant: None,
            allow_tools: None,
            chat_rule: None,
        };
        self.rt
            .block_on(self.service.handle_tap(tap))
            .expect("the tap is stored");
        // What the tap started in the background (the answer to the tap, the message
        // edits) is counted with it, and never overlaps the next tap: overlapping as
        // threads happen to run, they would make the counts vary from run to run.
        self.settle();
    }

    /// `record`'s status as stored now.
    fn status(&self, record: &Question) -> Status {
        self.rt
            .block_on(self.service.roles().questions.get(&record.id))
            .expect("the store reads")
            .expect("the question is stored")
            .status
    }
}

/// `B1_COUNT=<what>:<n>` runs `n` of one operation and nothing else, for
/// `bench/b1-instructions` and `bench/check-instructions`, which count the instructions
/// under callgrind at two `n` and divide the difference (so the setup cancels out).
///
/// `tap` needs a pending question per tap, prepared before the taps, and `report` a
/// window hit per report: `B1_PREPARE=<m>` (default `n`) prepares `m` of them, so that
/// two runs given the same `B1_PREPARE` prepare the same and differ only by their
/// operations.
fn count_mode(spec: &str) {
    let (what, n) = spec
        .split_once(':')
        .and_then(|(what, n)| Some((what, n.parse::<u64>().ok()?)))
        .expect("B1_COUNT is <decision|canonical|tree|service_hit|report|tap>:<n>");
    if matches!(what, "service_hit" | "report" | "tap") {
        return count_service(what, n);
    }
    let world = World::new();
    let mut hits = 0u64;
    for _ in 0..n {
        hits += u64::from(match what {
            "decision" => world.hit(&world.indexed),
            "canonical" => ArgsHash::of_json(std::hint::black_box(PARAMS)).is_ok(),
            "tree" => python::json::parse_object(std::hint::black_box(PARAMS))
                .map(|params| ArgsHash::of(&params))
                .is_ok(),
            other => panic!("B1_COUNT: unknown operation {other:?}"),
        });
    }
    assert_eq!(hits, n, "every operation succeeds");
}

/// The SQLite store's pool size (`max_connections` in src/storage/sqlite.rs).
const SQLITE_POOL: usize = 8;

/// Operations done in the setup of both runs, before the counted ones, so that every
/// pooled connection (taken in turn) has prepared each statement and the caches are
/// full: a cost that would otherwise land on the counted operations of a run and not
/// on those of a run of none.
const WARM_UP: u64 = 2 * SQLITE_POOL as u64;

/// How many of what an operation needs to prepare: `B1_PREPARE`, `n` by default.
fn prepared(n: u64) -> u64 {
    let prepare = std::env::var("B1_PREPARE")
        .ok()
        .map(|m| m.parse::<u64>().expect("B1_PREPARE is a count"))
        .unwrap_or(n);
    assert!(prepare >= n, "B1_PREPARE prepares at least n");
    prepare
}

/// The operations through the service; see [`count_mode`].
fn count_service(what: &str, n: u64) {
    let world = ServiceWorld::new();
    match what {
        "service_hit" => {
            // The window every hit goes through, opened as an operator opens one.
            let first = world.pending(1);
            world.tap(&first[0], TapAction::ApproveWindow);
            assert_eq!(
                world.status(&first[0]),
                Status::Confirmed,
                "the window opens"
            );
            for _ in 0..WARM_UP + n {
                let status = world.rt.block_on(world.create()).status;
                assert_eq!(status, Status::Confirmed, "a window hit");
            }
        }
        "report" => {
            // Window hits to report on, prepared alike for both runs (`B1_PREPARE`).
            let first = world.pending(1);
            world.tap(&first[0], TapAction::ApproveWindow);
            let hits: Vec<Question> = (0..WARM_UP + prepared(n))
                .map(|_| world.rt.block_on(world.create()))
                .collect();
            for hit in &hits[..(WARM_UP + n) as usize] {
                world.rt.block_on(world.report(hit));
            }
        }
        "tap" => {
            let questions = world.pending(WARM_UP + prepared(n));
            let (warm, counted) = questions.split_at(WARM_UP as usize);
            for record in warm {
                world.tap(record, TapAction::Approve);
            }
            for record in &counted[..n as usize] {
                world.tap(record, TapAction::Approve);
            }
            // The first and the last: checking each would add a read to every tap.
            for record in [questions.first(), counted[..n as usize].last()]
                .into_iter()
                .flatten()
            {
                assert_eq!(world.status(record), Status::Confirmed, "the tap decided");
            }
        }
        _ => unreachable!("count_mode sends only these"),
    }
    // Stops SQLite's group-commit thread, so its work is all in the counts.
    world
        .rt
        .block_on(world.service.roles().administration.close());
}

fn window_hit(c: &mut Criterion) {
    let world = World::new();
    let (rt, indexed, unindexed) = (&world.rt, &world.indexed, &world.unindexed);
    let (tool, owner) = (&world.tool, &world.owner);

    let mut group = c.benchmark_group("b1");
    group.bench_function("window_hit_decision", |b| {
        b.iter(|| rt.block_on(decide(indexed, tool, owner)))
    });
    group.bench_function("window_hit_decision_sqlite", |b| {
        b.iter(|| rt.block_on(decide(unindexed, tool, owner)))
    });
    group.bench_function("canonicalise_and_hash_only", |b| {
        b.iter(|| {
            ArgsHash::of_json(std::hint::black_box(PARAMS))
                .expect("the bench parameters are a JSON object")
        })
    });
    // The value-tree path the decision used before (and that still produces every
    // refusal's error): parse into Python values, then write them sorted.
    group.bench_function("canonicalise_and_hash_tree", |b| {
        b.iter(|| {
            let params = python::json::parse_object(std::hint::black_box(PARAMS))
                .expect("the bench parameters are a JSON object");
            ArgsHash::of(&params)
        })
    });
    group.finish();
}

criterion_group!(benches, window_hit);

fn main() {
    if let Ok(spec) = std::env::var("B1_COUNT") {
        count_mode(&spec);
        return;
    }
    // What `criterion_main!` would write.
    benches();
    Criterion::default().configure_from_args().final_summary();
}
