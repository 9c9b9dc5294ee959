//! End to end with the real AI-Parrot: its `HumanInteractionManager` and
//! `ConfirmationGuard` (ai-parrot 1.2.4) ask through our Python channel
//! (`clients/python`, `HitlTelegramChannel`) against the real service binary, which
//! talks to the fake Bot API; this test plays the operators in Telegram.
//!
//! The Python side is `clients/python/e2e/driver.py`. It runs its scenarios one after
//! another and reports on stdout, one JSON object per line: `ready`, then for each
//! question the channel posted `asked` (the test answers it in Telegram, or not), and
//! for each scenario its `result` (the guard's decision), then `done`.
//!
//! What must hold: an approval tap yields `confirmed` with the parameters exactly as
//! sent; a reject or cancel tap yields `cancelled`; silence yields `timeout` after the
//! guard's `approval_timeout`; a guard with `allow_edit` asks a `form` and proceeds with
//! the original parameters; a second identical call inside the window is `confirmed`
//! by the guard itself without a new Telegram message; a question the service refuses
//! is `cancelled` at once (fail closed); notifications and withdrawals reach Telegram;
//! and an answer given while the service restarts still reaches the agent (the event
//! stream resumes with `Last-Event-ID`).
//!
//! Needs a Python with ai-parrot (`HITL_AIPARROT_PYTHON`, e.g.
//! `.ci/.venv-parrot/bin/python`) and Redis (`HITL_REDIS_URL`, default
//! `redis://127.0.0.1:6379/13`). Without them the test says so and passes, unless
//! `HITL_REQUIRE_AIPARROT=1` (set by `.ci/run`).

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};
use support::app::*;
use support::fake_telegram::{FakeTelegram, SentMessage, TgUser};
use support::parrot_driver::{
    Driver, interaction, parrot_python, required, wait_delivered, wait_for_question,
};
use support::process::{ServiceProcess, write_config};

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/e2e/driver.py");
/// The longest the driver may stay silent (its longest wait is a 3 s timeout, plus
/// importing ai-parrot, which takes a few seconds).
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// Which Telegram chat a question for `target` (the request's route/recipient fields)
/// lands in.
fn chat_of(target: &Value) -> i64 {
    match (target["route"].as_str(), target["recipient"].as_str()) {
        (Some("ops"), _) => OPS_CHAT,
        (None, Some("alice")) => ALICE as i64,
        _ => panic!("no chat for target {target}"),
    }
}

/// What the operator does with each scenario's question.
enum Act {
    Tap(&'static str, TgUser),
    Nothing,
}

fn act_for(scenario: &str) -> Act {
    match scenario {
        "approve" | "window_first" | "window_other_args" | "restart" => {
            Act::Tap("✅ Approve", alice())
        }
        "reject" => Act::Tap("❌ Reject", alice()),
        "edit_form_approved" => Act::Tap("✅ Approve", bob()),
        "edit_form_cancelled" => Act::Tap("❌ Cancel", alice()),
        "timeout" | "withdraw" => Act::Nothing,
        other => panic!("the driver asked in an unknown scenario {other:?}"),
    }
}

/// The agent's view of a stored interaction, through the API.
async fn stored_view(client: &reqwest::Client, base: &str, id: &str) -> Value {
    interaction(client, base, TOKEN_A, id)
        .await
        .unwrap_or_else(|| panic!("{id} is not stored"))
}

/// A free loopback port, so the service can be restarted where the channel expects it.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// What happened to one question the driver posted.
#[derive(Debug, Clone)]
struct Asked {
    event: Value,
    message: Option<SentMessage>,
}

#[tokio::test]
async fn ai_parrot_confirmation_guard_asks_through_the_python_channel() {
    let Some(python) = parrot_python() else {
        return;
    };
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_wait_timeout(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    // A fixed port: the service is restarted where the channel expects it.
    let port = free_port();
    let toml = std::fs::read_to_string(&config).unwrap();
    assert!(
        toml.contains("bind = \"127.0.0.1:0\""),
        "the base settings changed"
    );
    std::fs::write(
        &config,
        toml.replace(
            "bind = \"127.0.0.1:0\"",
            &format!("bind = \"127.0.0.1:{port}\""),
        ),
    )
    .unwrap();
    let mut service = ServiceProcess::start(&config).await;
    let base = service.base.clone();
    assert_eq!(base, format!("http://127.0.0.1:{port}"));
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
    let mut asked: BTreeMap<String, Vec<Asked>> = BTreeMap::new();
    let mut results: HashMap<String, Value> = HashMap::new();
    // Messages already matched to a question.
    let mut matched: Vec<(i64, i32)> = Vec::new();
    // Every bot message when each result came, to show what a scenario sent.
    let mut sent_at_result: HashMap<String, usize> = HashMap::new();
    let mut ready = false;

    loop {
        let event = driver.next().await;
        match event["event"].as_str().unwrap_or_default() {
            "skip" => {
                let reason = event["reason"].as_str().unwrap_or_default().to_owned();
                assert!(
                    !required("HITL_REQUIRE_AIPARROT"),
                    "HITL_REQUIRE_AIPARROT=1 but: {reason}"
                );
                eprintln!("skipped: {reason}");
                return;
            }
            "ready" => ready = true,
            "asked" => {
                assert!(ready, "asked before ready: {event}");
                let scenario = event["scenario"].as_str().expect("scenario").to_owned();
                let id = event["interaction_id"].as_str().expect("id").to_owned();
                if event["accepted"] != true {
                    asked.entry(scenario).or_default().push(Asked {
                        event,
                        message: None,
                    });
                    continue;
                }
                let chat = chat_of(&event["target"]);
                let question = event["question"].as_str().expect("question");
                // The guard's briefing is the message's question.
                let msg = wait_for_question(&telegram, chat, question, &matched).await;
                matched.push((chat, msg.message_id));
                wait_delivered(&client, &base, TOKEN_A, &id).await;
                if scenario == "restart" {
                    // The service dies with the question open and comes back; the
                    // channel's event stream reconnects with Last-Event-ID.
                    service.kill9().await;
                    service = ServiceProcess::start(&config).await;
                    assert_eq!(service.base, base);
                }
                match act_for(&scenario) {
                    Act::Tap(button, user) => {
                        let q = telegram.tap(chat, msg.message_id, button, user);
                        telegram.wait_for_callback_answer(&q).await;
                    }
                    Act::Nothing => {}
                }
                asked.entry(scenario).or_default().push(Asked {
                    event,
                    message: Some(msg),
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
    driver.finish(Duration::from_secs(30)).await;

    let log = driver.full_log();
    // Shown by the test harness only if an assertion below fails.
    eprintln!("the driver's log (tail):\n{}", driver.log_tail());
    let result = |name: &str| -> &Value {
        results
            .get(name)
            .unwrap_or_else(|| panic!("no result for {name}: {results:?}\n{log}"))
    };
    let decision = |name: &str| -> &Value { &result(name)["decision"] };
    let one_question = |name: &str| -> &Asked {
        let a = asked
            .get(name)
            .unwrap_or_else(|| panic!("{name} asked nothing"));
        assert_eq!(a.len(), 1, "{name}: asked once: {a:?}");
        &a[0]
    };
    /// The guard's decision and the parameters it hands to the tool, exactly as sent.
    fn assert_confirmed_with_original(name: &str, result: &Value) {
        let d = &result["decision"];
        assert_eq!(d["status"], "confirmed", "{name}: {result}");
        assert_eq!(d["allowed"], true, "{name}: {result}");
        assert_eq!(
            d["parameters"], result["sent_parameters"],
            "{name}: {result}"
        );
        assert_eq!(
            d["parameters"].to_string(),
            result["sent_parameters"].to_string(),
            "{name}: the same values and types, in the same order"
        );
    }

    // An approval tap: confirmed, with the parameters as sent.
    assert_confirmed_with_original("approve", result("approve"));
    let approve = one_question("approve");
    assert_eq!(approve.event["interaction_type"], "approval");
    assert_eq!(approve.event["target_humans"], json!([]));
    let msg = approve.message.as_ref().unwrap();
    assert_eq!(msg.chat_id, OPS_CHAT);
    assert_eq!(msg.button_texts(), ["✅ Approve", "❌ Reject"]);
    assert!(
        msg.visible_text
            .contains("Deploy billing with 3 replicas (service='billing', replicas=3"),
        "{}",
        msg.visible_text
    );
    let id = approve.event["interaction_id"].as_str().unwrap();
    let view = stored_view(&client, &base, id).await;
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["responses"][0]["respondent"], ALICE.to_string());
    assert_eq!(view["responses"][0]["value"], true);
    telegram
        .wait_for_message(
            OPS_CHAT,
            msg.message_id,
            "approved by alice, buttons gone",
            |m| m.visible_text.contains("Approved — Alice") && !m.has_buttons(),
        )
        .await;

    // A reject tap in alice's private chat (the private guard's default recipient).
    let d = decision("reject");
    assert_eq!(d["status"], "cancelled", "{d}");
    assert_eq!(d["allowed"], false);
    assert_eq!(d["parameters"], Value::Null);
    let reject = one_question("reject");
    assert_eq!(reject.event["target"], json!({"recipient": "alice"}));
    assert_eq!(reject.message.as_ref().unwrap().chat_id, ALICE as i64);

    // Silence: the guard's 3 s approval_timeout, and the message says it timed out.
    let d = decision("timeout");
    assert_eq!(d["status"], "timeout", "{d}");
    assert_eq!(d["allowed"], false);
    let elapsed = result("timeout")["elapsed"].as_f64().unwrap();
    assert!(
        (2.9..15.0).contains(&elapsed),
        "timed out after {elapsed} s"
    );
    let msg = one_question("timeout").message.clone().unwrap();
    telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "timed out, buttons gone", |m| {
            m.visible_text.contains("Timed out") && !m.has_buttons()
        })
        .await;

    // allow_edit: a form, shown with its values; approved, the tool runs with exactly
    // the original parameters.
    assert_confirmed_with_original("edit_form_approved", result("edit_form_approved"));
    let form = one_question("edit_form_approved");
    assert_eq!(form.event["interaction_type"], "form");
    let msg = form.message.as_ref().unwrap();
    assert_eq!(msg.button_texts(), ["✅ Approve", "❌ Cancel"]);
    assert!(msg.visible_text.contains("ledger"), "{}", msg.visible_text);
    let view = stored_view(
        &client,
        &base,
        form.event["interaction_id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(view["responses"][0]["response_type"], "form", "{view}");
    assert_eq!(view["responses"][0]["respondent"], BOB.to_string());
    // Cancel on the form: cancelled at once (not a timeout).
    let d = decision("edit_form_cancelled");
    assert_eq!(d["status"], "cancelled", "{d}");
    assert_eq!(d["reason"], "HITL form cancelled by user", "{d}");
    assert_eq!(
        one_question("edit_form_cancelled").event["interaction_type"],
        "form"
    );

    // The window: the first call is asked and approved; the identical second one is
    // confirmed by the guard itself, with no question and no Telegram message.
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
    // The same tool with other arguments is asked again.
    assert_confirmed_with_original("window_other_args", result("window_other_args"));
    one_question("window_other_args");

    // A question the service refuses (a route agent-a may not use): the channel says
    // it was not delivered and the guard is cancelled at once, not after its 30 s.
    let d = decision("fail_closed");
    assert_eq!(d["status"], "cancelled", "{d}");
    assert_eq!(d["allowed"], false);
    let elapsed = result("fail_closed")["elapsed"].as_f64().unwrap();
    assert!(elapsed < 10.0, "fail closed after {elapsed} s");
    let refused = one_question("fail_closed");
    assert_eq!(refused.event["accepted"], false);
    assert_eq!(refused.event["target"], json!({"route": "not-a-route"}));
    assert_eq!(
        sent_at_result["fail_closed"], sent_at_result["window_other_args"],
        "nothing reached Telegram"
    );
    assert!(
        log.contains("refused by the service") && log.contains("forbidden"),
        "the reason is logged:\n{log}"
    );

    // send_notification: a message in alice's private chat.
    assert_eq!(result("notify")["sent"], true);
    let note = wait_for_question(&telegram, ALICE as i64, "Deploy of billing finished", &[]).await;
    assert!(!note.has_buttons());

    // cancel_interaction: withdrawn once (its message says so, buttons gone), then
    // nothing left to withdraw.
    let w = result("withdraw");
    assert_eq!(w["first"], true, "{w}");
    assert_eq!(w["second"], false, "{w}");
    let withdrawn = one_question("withdraw");
    assert_eq!(withdrawn.event["interaction_id"], w["interaction_id"]);
    let msg = withdrawn.message.as_ref().unwrap();
    telegram
        .wait_for_message(OPS_CHAT, msg.message_id, "withdrawn, buttons gone", |m| {
            m.visible_text.contains("Withdrawn by the agent") && !m.has_buttons()
        })
        .await;
    let view = stored_view(&client, &base, w["interaction_id"].as_str().unwrap()).await;
    assert_eq!(view["status"], "cancelled", "{view}");

    // Across a restart of the service (SIGKILL), the answer still reaches the agent.
    assert_confirmed_with_original("restart", result("restart"));
    one_question("restart");
    assert!(
        log.contains("reconnecting") && log.contains("resumed: True"),
        "the event stream reconnected with its cursor:\n{log}"
    );

    let _ = service.terminate().await;
}
