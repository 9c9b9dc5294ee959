//! End to end with the real AI-Parrot through the Redis bridge: AI-Parrot's own
//! `CLIDaemonHumanChannel` (ai-parrot 1.2.4, unchanged) queues the questions of its
//! `HumanInteractionManager` and `ConfirmationGuard` in Redis, the real service binary
//! with `[redis_bridge]` enabled asks them in Telegram (the fake Bot API), and this test
//! plays alice there. The answers go back through Redis to the channel's stock response
//! listener.
//!
//! The Python side is `clients/python/e2e/driver_redis.py`, with the protocol of
//! `driver.py` (see `tests/integrations/aiparrot_e2e.rs`): `ready`, `asked` per question queued,
//! `result` per scenario, `done`.
//!
//! What must hold: the stock manager's approval for `target_humans=["alice"]` reaches
//! alice's private chat and completes with `true` when she approves; through the guard
//! (its questions name nobody: the driver's manager sends them to alice's queue) an
//! approval tap yields `confirmed` with the parameters exactly as sent; a reject tap and
//! a cancelled form yield `cancelled`; silence yields `timeout` after the guard's 3 s
//! `approval_timeout`; a form (`allow_edit`) approved yields `confirmed` with the
//! original parameters; a second identical call inside the window is `confirmed` by the
//! guard itself with no new Telegram message.
//!
//! Needs a Python with ai-parrot (`HITL_AIPARROT_PYTHON`) and Redis (`HITL_REDIS_URL`,
//! default `redis://127.0.0.1:6379`). Without the first the test says so and passes
//! unless `HITL_REQUIRE_AIPARROT=1`; without Redis, unless `HITL_REQUIRE_REDIS=1`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::{FakeTelegram, SentMessage, TgUser};
use crate::support::parrot_driver::{
    Driver, interaction, parrot_python, required, wait_delivered, wait_for_question,
};
use crate::support::process::{ServiceProcess, write_config};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};

const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/clients/python/e2e/driver_redis.py"
);
/// The longest the driver may stay silent (importing ai-parrot takes a few seconds; its
/// longest wait is a 3 s timeout).
const EVENT_WAIT: Duration = Duration::from_secs(45);

/// The bridge's own agent (as docs/integrations.md asks), and its token: the test environment has
/// no spare variable, and HOOK_A's value is unique among the agents' tokens.
const BRIDGE_AGENT: &str = "parrot-bridge";
const BRIDGE_TOKEN: &str = HOOK_SECRET_A;
const BRIDGE_TOKEN_ENV: &str = "HOOK_A";
const ALICE_CHAT: i64 = ALICE as i64;

fn redis_url() -> String {
    std::env::var("HITL_REDIS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}

/// A connection to Redis, or why the test is skipped (`None`).
async fn redis_connection() -> Option<MultiplexedConnection> {
    let url = redis_url();
    let client = redis::Client::open(url.as_str()).expect("HITL_REDIS_URL");
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    match client
        .get_multiplexed_async_connection_with_config(&config)
        .await
    {
        Ok(con) => Some(con),
        Err(e) => {
            assert!(
                !required("HITL_REQUIRE_REDIS"),
                "HITL_REQUIRE_REDIS=1 but Redis at {url} cannot be reached: {e}"
            );
            eprintln!("skipped: no Redis at {url} ({e})");
            None
        }
    }
}

/// Deletes every key under its prefix when dropped, also when the test fails.
struct CleanUp(String);

impl Drop for CleanUp {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(redis_url().as_str()) else {
            return;
        };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.0))
            .query(&mut con)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(&keys).query(&mut con);
        }
    }
}

/// The standard test settings plus the bridge's agent and `[redis_bridge]` for alice.
fn write_bridge_config(dir: &Path, telegram: &FakeTelegram, prefix: &str) -> PathBuf {
    let db_url = format!("sqlite://{}/hitl.db", dir.display());
    let config = write_config(dir, telegram, &db_url);
    let toml = std::fs::read_to_string(&config).unwrap();
    let url = redis_url();
    std::fs::write(
        &config,
        format!(
            r#"{toml}
[[agents]]
name = "{BRIDGE_AGENT}"
token_env = "{BRIDGE_TOKEN_ENV}"
routes = ["ops"]

[redis_bridge]
enabled = true
url = "{url}"
prefix = "{prefix}"
agent = "{BRIDGE_AGENT}"
recipients = ["alice"]
"#
        ),
    )
    .unwrap();
    config
}

/// What alice does with each scenario's question.
fn act_for(scenario: &str) -> Option<(&'static str, TgUser)> {
    match scenario {
        "stock_approve" | "approve" | "window_first" | "edit_form_approved" => {
            Some(("✅ Approve", alice()))
        }
        "reject" => Some(("❌ Reject", alice())),
        "edit_form_cancelled" => Some(("❌ Cancel", alice())),
        "timeout" => None,
        other => panic!("the driver asked in an unknown scenario {other:?}"),
    }
}

#[derive(Debug, Clone)]
struct Asked {
    event: Value,
    message: SentMessage,
}

#[tokio::test]
async fn ai_parrot_asks_through_its_cli_daemon_channel_and_the_redis_bridge() {
    let Some(python) = parrot_python() else {
        return;
    };
    let Some(mut con) = redis_connection().await else {
        return;
    };
    let prefix = format!(
        "hitl-e2e:aiparrot:{}:{:016x}",
        std::process::id(),
        rand::random::<u64>()
    );
    let _clean_up = CleanUp(prefix.clone());
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_wait_timeout(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let config = write_bridge_config(dir.path(), &telegram, &prefix);
    let mut service = ServiceProcess::start(&config).await;
    let base = service.base.clone();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    let mut driver = Driver::start(
        &python,
        DRIVER,
        &[
            ("HITL_REDIS_URL", redis_url()),
            ("HITL_BRIDGE_PREFIX", prefix.clone()),
            ("HITL_RECIPIENT", "alice".to_owned()),
        ],
        EVENT_WAIT,
    );
    let mut asked: BTreeMap<String, Vec<Asked>> = BTreeMap::new();
    let mut results: HashMap<String, Value> = HashMap::new();
    let mut matched: Vec<(i64, i32)> = Vec::new();
    // How many bot messages there were when each result came.
    let mut sent_at_result: HashMap<String, usize> = HashMap::new();
    let mut ready = false;

    loop {
        let event = driver.next().await;
        match event["event"].as_str().unwrap_or_default() {
            "skip" => {
                let reason = event["reason"].as_str().unwrap_or_default().to_owned();
                assert!(
                    !required("HITL_REQUIRE_REDIS"),
                    "HITL_REQUIRE_REDIS=1 but: {reason}"
                );
                eprintln!("skipped: {reason}");
                return;
            }
            "ready" => ready = true,
            "asked" => {
                assert!(ready, "asked before ready: {event}");
                assert_eq!(event["accepted"], true, "queued: {event}");
                assert_eq!(event["recipient"], "alice", "{event}");
                let scenario = event["scenario"].as_str().expect("scenario").to_owned();
                let id = event["interaction_id"].as_str().expect("id").to_owned();
                let question = event["question"].as_str().expect("question");
                let msg = wait_for_question(&telegram, ALICE_CHAT, question, &matched).await;
                matched.push((ALICE_CHAT, msg.message_id));
                wait_delivered(&client, &base, BRIDGE_TOKEN, &id).await;
                if let Some((button, user)) = act_for(&scenario) {
                    let q = telegram.tap(ALICE_CHAT, msg.message_id, button, user);
                    telegram.wait_for_callback_answer(&q).await;
                }
                asked.entry(scenario).or_default().push(Asked {
                    event,
                    message: msg,
                });
            }
            "result" => {
                let scenario = event["scenario"].as_str().expect("scenario").to_owned();
                sent_at_result.insert(scenario.clone(), telegram.sent_messages().len());
                assert!(
                    results.insert(scenario.clone(), event).is_none(),
                    "two results for {scenario}"
                );
            }
            "done" => break,
            other => panic!("unknown driver event {other:?}: {event}"),
        }
    }
    driver.finish(Duration::from_secs(20)).await;
    // Shown by the test harness only if an assertion below fails.
    eprintln!("the driver's log (tail):\n{}", driver.log_tail());

    let result = |name: &str| -> &Value {
        results
            .get(name)
            .unwrap_or_else(|| panic!("no result for {name}: {results:?}"))
    };
    let decision = |name: &str| -> &Value { &result(name)["decision"] };
    let one_question = |name: &str| -> &Asked {
        let a = asked
            .get(name)
            .unwrap_or_else(|| panic!("{name} asked nothing"));
        assert_eq!(a.len(), 1, "{name}: asked once: {a:?}");
        &a[0]
    };
    fn assert_confirmed_with_original(name: &str, result: &Value) {
        let d = &result["decision"];
        assert_eq!(d["status"], "confirmed", "{name}: {result}");
        assert_eq!(d["allowed"], true, "{name}: {result}");
        assert_eq!(
            d["parameters"].to_string(),
            result["sent_parameters"].to_string(),
            "{name}: the same values and types, in the same order"
        );
    }

    // The stock manager, target_humans=["alice"]: alice's private chat, her approval.
    let stock = result("stock_approve");
    assert_eq!(stock["status"], "completed", "{stock}");
    assert_eq!(stock["consolidated_value"], true, "{stock}");
    assert_eq!(stock["respondents"], json!(["alice"]), "{stock}");
    let q = one_question("stock_approve");
    assert_eq!(q.event["target_humans"], json!(["alice"]));
    assert_eq!(
        q.message.button_texts(),
        ["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
    let id = q.event["interaction_id"].as_str().unwrap();
    let view = interaction(&client, &base, BRIDGE_TOKEN, id).await.unwrap();
    assert_eq!(view["status"], "completed", "{view}");
    // The bridge records the served recipient by their [people] name.
    assert_eq!(view["responses"][0]["respondent"], "alice", "{view}");

    // The guard: an approval tap, confirmed with the parameters as sent.
    assert_confirmed_with_original("approve", result("approve"));
    let approve = one_question("approve");
    assert_eq!(approve.event["interaction_type"], "approval");
    assert_eq!(approve.event["target_humans"], json!([]));
    assert!(
        approve
            .message
            .visible_text
            .contains("Deploy billing with 3 replicas (service='billing', replicas=3"),
        "{}",
        approve.message.visible_text
    );
    telegram
        .wait_for_message(
            ALICE_CHAT,
            approve.message.message_id,
            "approved by alice, buttons gone",
            |m| m.visible_text.contains("Approved — Alice") && !m.has_buttons(),
        )
        .await;

    // A reject tap: cancelled.
    let d = decision("reject");
    assert_eq!(d["status"], "cancelled", "{d}");
    assert_eq!(d["allowed"], false);
    assert_eq!(d["parameters"], Value::Null);
    one_question("reject");

    // Silence: the guard's 3 s approval_timeout; the service ends it too.
    let d = decision("timeout");
    assert_eq!(d["status"], "timeout", "{d}");
    assert_eq!(d["allowed"], false);
    let elapsed = result("timeout")["elapsed"].as_f64().unwrap();
    assert!(
        (2.9..15.0).contains(&elapsed),
        "timed out after {elapsed} s"
    );
    let msg = one_question("timeout").message.clone();
    telegram
        .wait_for_message(ALICE_CHAT, msg.message_id, "timed out, buttons gone", |m| {
            m.visible_text.contains("Timed out") && !m.has_buttons()
        })
        .await;

    // allow_edit: a form; approved, the tool runs with exactly the original parameters.
    assert_confirmed_with_original("edit_form_approved", result("edit_form_approved"));
    let form = one_question("edit_form_approved");
    assert_eq!(form.event["interaction_type"], "form");
    assert_eq!(
        form.message.button_texts(),
        ["✅ Approve", "❌ Cancel", "✋ Deny with reason"]
    );
    assert!(form.message.visible_text.contains("ledger"));
    // Cancel on the form: cancelled at once.
    let d = decision("edit_form_cancelled");
    assert_eq!(d["status"], "cancelled", "{d}");
    assert_eq!(d["reason"], "HITL form cancelled by user", "{d}");
    let elapsed = result("edit_form_cancelled")["elapsed"].as_f64().unwrap();
    assert!(elapsed < 30.0, "cancelled after {elapsed} s");
    assert_eq!(
        one_question("edit_form_cancelled").event["interaction_type"],
        "form"
    );

    // The window: the identical second call is confirmed by the guard itself.
    assert_confirmed_with_original("window_first", result("window_first"));
    one_question("window_first");
    assert_confirmed_with_original("window_second", result("window_second"));
    assert_eq!(
        decision("window_second")["reason"],
        "within confirmation window"
    );
    assert!(
        !asked.contains_key("window_second"),
        "the window hit asked: {:?}",
        asked.get("window_second")
    );
    assert_eq!(
        sent_at_result["window_second"], sent_at_result["window_first"],
        "no Telegram message for the window hit"
    );

    // Every question went to alice's private chat; nothing was dead-lettered.
    assert!(telegram.messages_in(OPS_CHAT).is_empty());
    let dead: i64 = redis::cmd("LLEN")
        .arg(format!("{prefix}:alice:dead"))
        .query_async(&mut con)
        .await
        .expect("LLEN");
    assert_eq!(dead, 0, "dead-lettered items");

    let _ = service.terminate().await;
}
