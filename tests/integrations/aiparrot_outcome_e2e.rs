//! After the yes, end to end with the real AI-Parrot: its `ToolManager` (ai-parrot
//! 1.2.4) runs `@tool(requires_confirmation=True)` tools behind the package's
//! `HitlConfirmationGuard`, with `report_outcomes` around its `execute_tool`; the real
//! service binary talks to the fake Bot API, where this test approves each call.
//!
//! What must hold: once the tool has run, the service's record of the question that
//! confirmed it carries the outcome the wrapper reported, read back through the API:
//! a value → `executed` with the run's duration and a summary of the result; a
//! `ToolResult` that failed → `failed` with its error; an exception → `failed` with its
//! type and message, the exception reaching the agent unchanged.
//!
//! The Python side is `clients/python/e2e/driver_outcome.py`. Needs a Python with
//! ai-parrot (`HITL_AIPARROT_PYTHON`) and Redis, like `aiparrot_e2e.rs`.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::parrot_driver::{
    Driver, parrot_python, required, wait_delivered, wait_for_question,
};
use crate::support::process::{ServiceProcess, write_config};
use serde_json::Value;

const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/clients/python/e2e/driver_outcome.py"
);
/// The longest the driver may stay silent: importing ai-parrot takes a few seconds.
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// The driver's next event, which must be `kind` in `scenario`.
async fn expect(driver: &mut Driver, kind: &str, scenario: &str) -> Value {
    let event = driver.next().await;
    assert_eq!(
        (event["event"].as_str(), event["scenario"].as_str()),
        (Some(kind), Some(scenario)),
        "{event}\n{}",
        driver.log_tail()
    );
    event
}

/// The question (read as its agent reads it, by its `interaction_id`) once it carries an
/// outcome (the report is sent in the background, after the tool's result reached the
/// agent): waits up to 20 s. It must be the record `id` the driver reported on. A
/// failure shows the driver's log, where the reporter says what the service answered.
async fn outcome_of(
    client: &reqwest::Client,
    base: &str,
    (id, iid): &(String, String),
    driver: &Driver,
) -> Value {
    let mut last = Value::Null;
    for _ in 0..400 {
        let response = client
            .get(format!("{base}/v1/interactions/{iid}"))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .expect("GET the record");
        let status = response.status();
        last = response.json().await.expect("JSON");
        assert!(
            status.is_success(),
            "GET {id}: {status} {last}\n{}",
            driver.full_log()
        );
        assert_eq!(last["id"], id.as_str(), "{last}");
        if !last["outcome"].is_null() {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{id} never got its outcome: {last}\n{}", driver.full_log());
}

/// Runs one scenario: the driver's question for `scenario` is approved by Alice in the
/// ops chat; returns its `result` and its `interaction_id`.
async fn approve(
    driver: &mut Driver,
    telegram: &FakeTelegram,
    client: &reqwest::Client,
    base: &str,
    scenario: &str,
    question: &str,
) -> (Value, String) {
    let asked = expect(driver, "asked", scenario).await;
    assert_eq!(asked["accepted"], true, "{asked}");
    let iid = asked["interaction_id"].as_str().unwrap();
    let msg = wait_for_question(telegram, OPS_CHAT, question, &[]).await;
    wait_delivered(client, base, TOKEN_A, iid).await;
    let q = telegram.tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    telegram.wait_for_callback_answer(&q).await;
    (expect(driver, "result", scenario).await, iid.to_owned())
}

/// The record id the driver reported on, as the service's own id of the question.
fn record_id(result: &Value) -> &str {
    let id = result["record_id"].as_str().unwrap_or_else(|| {
        panic!("no record id: {result}");
    });
    assert!(id.starts_with("cf_"), "{result}");
    id
}

#[tokio::test]
async fn ai_parrot_tool_runs_report_their_outcome_on_the_record_that_confirmed_them() {
    let Some(python) = parrot_python() else {
        return;
    };
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_wait_timeout(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let service = ServiceProcess::start(&config).await;
    let base = service.base.clone();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    let mut driver = Driver::start(
        &python,
        DRIVER,
        &[
            ("HITL_BASE_URL", base.clone()),
            ("HITL_TOKEN", TOKEN_A.to_owned()),
        ],
        EVENT_WAIT,
    );
    let ready = driver.next().await;
    if ready["event"] == "skip" {
        let reason = ready["reason"].as_str().unwrap_or_default();
        assert!(
            !required("HITL_REQUIRE_AIPARROT"),
            "HITL_REQUIRE_AIPARROT=1 but: {reason}"
        );
        eprintln!("skipped: {reason}");
        return;
    }
    assert_eq!(ready["event"], "ready", "{ready}");
    // The least each run takes (the tool body sleeps this long), in milliseconds, less
    // one: asyncio fires a timer up to its clock's resolution early, and the package
    // reports whole milliseconds, cut down (a 300 ms sleep was reported as 299).
    let body_ms = ((ready["body_seconds"].as_f64().unwrap() * 1000.0) as u64).saturating_sub(1);

    // A value: executed, with the run's duration and a summary of the result.
    let (result, iid) = approve(
        &mut driver,
        &telegram,
        &client,
        &base,
        "executed",
        "Deploy billing?",
    )
    .await;
    assert_eq!(result["value"], "billing v42 is live", "{result}");
    let executed = (record_id(&result).to_owned(), iid);

    // A ToolResult that failed: failed with its error, the result reaching the agent.
    let (result, iid) = approve(
        &mut driver,
        &telegram,
        &client,
        &base,
        "failed_result",
        "Transfer 1200.5 EUR?",
    )
    .await;
    assert_eq!(result["tool_result"]["success"], false, "{result}");
    assert_eq!(result["tool_result"]["error"], "insufficient funds");
    let failed_result = (record_id(&result).to_owned(), iid);

    // An exception: failed with its type and message, raised to the agent unchanged.
    let (result, iid) = approve(
        &mut driver,
        &telegram,
        &client,
        &base,
        "exception",
        "Wipe sda?",
    )
    .await;
    assert_eq!(result["raised"]["type"], "DiskFull", "{result}");
    assert_eq!(result["raised"]["message"], "sda is full");
    let exception = (record_id(&result).to_owned(), iid);

    let done = driver.next().await;
    assert_eq!(done["event"], "done", "{done}");
    assert_eq!(done["flushed"], true, "every report was sent: {done}");
    driver.finish(Duration::from_secs(30)).await;

    let ids = [&executed.0, &failed_result.0, &exception.0];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );

    let record = outcome_of(&client, &base, &executed, &driver).await;
    let outcome = &record["outcome"];
    assert_eq!(outcome["status"], "executed", "{record}");
    assert_eq!(outcome["summary"], "billing v42 is live");
    assert!(outcome["error"].is_null(), "{record}");
    let ms = outcome["duration_ms"].as_u64().expect("a duration");
    assert!(
        ms >= body_ms && ms < 20_000,
        "{ms} ms: the run, not the wait for Alice"
    );
    assert!(outcome["reported_at"].is_string(), "{record}");

    let record = outcome_of(&client, &base, &failed_result, &driver).await;
    let outcome = &record["outcome"];
    assert_eq!(outcome["status"], "failed", "{record}");
    assert_eq!(outcome["error"], "insufficient funds");
    assert!(outcome["summary"].is_null(), "{record}");
    assert!(outcome["duration_ms"].as_u64().unwrap() >= body_ms);

    let record = outcome_of(&client, &base, &exception, &driver).await;
    let outcome = &record["outcome"];
    assert_eq!(outcome["status"], "failed", "{record}");
    assert_eq!(outcome["error"], "DiskFull: sda is full");
    assert!(outcome["duration_ms"].as_u64().unwrap() >= body_ms);

    drop(service);
}
