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

use std::time::Duration;

use criterion::{Criterion, criterion_group};
use hitl_telegram::domain::args_hash::ArgsHash;
use hitl_telegram::domain::ids::{CallbackToken, ConfirmationId, OwnerId, ToolName};
use hitl_telegram::domain::python;
use hitl_telegram::domain::question::{
    Operator, Outcome, PENDING_REASON, Question, Status, WindowKey,
};
use hitl_telegram::storage::{Administration, Decided, Questions, SqliteStore, Store};
use time::OffsetDateTime;

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
    let record = Question {
        id: ConfirmationId::generate(),
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
        approved_once: false,
        has_call: false,
        idempotency_key: None,
        callback_token: CallbackToken::generate(),
        callback_url: None,
        message_id: None,
        status: Status::Pending,
        via: None,
        reason: PENDING_REASON.to_owned(),
        decided_by: None,
        created_at: now,
        expires_at: now + Duration::from_secs(3600),
        decided_at: None,
        interaction: None,
        result: None,
        timeout_action: None,
        answers: Vec::new(),
        copies: Vec::new(),
        strays: Vec::new(),
        denial_reason: None,
        progress: Default::default(),
        rule: None,
        expect_outcome_seconds: None,
        execution: None,
        recalled: None,
        args_schema: None,
        edited: None,
    };
    store.insert(&record, now).await.expect("insert");
    let operator = Operator {
        id: 1,
        username: None,
        name: "Bench".to_owned(),
    };
    let decided = store
        .decide(
            &record.id,
            &Outcome::Approved {
                by: operator,
                once: false,
            }
            .decide(now),
        )
        .await
        .expect("decide");
    assert!(matches!(decided, Decided::Applied(_)), "the window opens");
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
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime");
        let dir = tempfile::tempdir().expect("a temporary folder");
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
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

/// `B1_COUNT=<what>:<n>` runs `n` of one operation and nothing else, for
/// `bench/b1-instructions`, which counts the instructions under callgrind at two `n`
/// and divides the difference (so the setup cancels out).
fn count_mode(spec: &str) {
    let (what, n) = spec
        .split_once(':')
        .and_then(|(what, n)| Some((what, n.parse::<u64>().ok()?)))
        .expect("B1_COUNT is <decision|canonical|tree>:<n>");
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
