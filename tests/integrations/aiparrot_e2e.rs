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
//! the original parameters; the guard's question shows the tool and every parameter,
//! even those its briefing template leaves out, as a confirmation shows them; a call
//! with a window offers "Approve once" (the identical call is asked again) and "Approve
//! for <window>" (the window the route allows is recorded, and a second identical call
//! inside it is `confirmed` by the guard itself without a new Telegram message); a
//! question the service refuses is `cancelled` at once (fail closed); notifications and
//! withdrawals reach Telegram; and an answer given while the service restarts still
//! reaches the agent (the event stream resumes with `Last-Event-ID`).
//!
//! Needs a Python with ai-parrot (`HITL_AIPARROT_PYTHON`, e.g.
//! `.ci/.venv-parrot/bin/python`) and Redis (`HITL_REDIS_URL`, default
//! `redis://127.0.0.1:6379/13`). Without them the test says so and passes, unless
//! `HITL_REQUIRE_AIPARROT=1` (set by `.ci/run`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::{FakeTelegram, SentMessage, TgUser};
use crate::support::parrot_driver::{
    Driver, interaction, parrot_python, required, wait_delivered, wait_for_question,
};
use crate::support::process::{ServiceProcess, pin_port, write_config};
use serde_json::{Value, json};

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/e2e/driver.py");
/// The longest the driver may stay silent (its longest wait is a 3 s timeout, plus
/// importing ai-parrot, which takes a few seconds).
const EVENT_WAIT: Duration = Duration::from_secs(90);
/// The other route's `max_window_seconds` in this test (the call and window scenarios
/// ask there): the driver's window tools ask for 600 s, so the route's cap is what an
/// "Approve for" grants.
const OTHER_MAX_WINDOW: u64 = 120;
/// The button that grants the window, for the capped 120 s.
const APPROVE_FOR: &str = "✅ Approve for 2 min";
const APPROVE_ONCE: &str = "✅ Approve once";

/// Which Telegram chat a question for `target` (the request's route/recipient fields)
/// lands in.
fn chat_of(target: &Value) -> i64 {
    match (target["route"].as_str(), target["recipient"].as_str()) {
        (Some("ops"), _) => OPS_CHAT,
        (Some("other"), _) => OTHER_CHAT,
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
        "approve" | "restart" => Act::Tap("✅ Approve", alice()),
        // In the other route, whose approver is bob.
        "call_shown" => Act::Tap("✅ Approve", bob()),
        "once_first" => Act::Tap(APPROVE_ONCE, bob()),
        "once_second" => Act::Tap("❌ Reject", bob()),
        "window_first" | "window_other_args" => Act::Tap(APPROVE_FOR, bob()),
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

/// Every parameter of `params` (a JSON object), as the message's parameters block shows
/// it (pretty JSON, one key per line): each `"key": value` for a scalar, each key and
/// element for a list.
fn assert_shows_every_parameter(text: &str, params: &Value) {
    let params = params.as_object().expect("parameters are an object");
    assert!(!params.is_empty());
    for (key, value) in params {
        match value {
            Value::Array(items) => {
                let open = format!("\"{key}\": [");
                assert!(text.contains(&open), "{open} is not shown:\n{text}");
                for item in items {
                    let item = item.to_string();
                    assert!(text.contains(&item), "{key}: {item} is not shown:\n{text}");
                }
            }
            scalar => {
                let line = format!("\"{key}\": {scalar}");
                assert!(text.contains(&line), "{line} is not shown:\n{text}");
            }
        }
    }
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
    let port = pin_port(&config);
    let toml = std::fs::read_to_string(&config).unwrap();
    // The other route caps windows, so "Approve for" grants less than the tool asks.
    let other_route = "name = \"other\"\n";
    assert_eq!(
        toml.matches(other_route).count(),
        1,
        "the base settings changed"
    );
    std::fs::write(
        &config,
        toml.replace(
            other_route,
            &format!("{other_route}max_window_seconds = {OTHER_MAX_WINDOW}\n"),
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
    assert_eq!(
        approve.event["call"]["params"],
        result("approve")["sent_parameters"]
    );
    let msg = approve.message.as_ref().unwrap();
    assert_eq!(msg.chat_id, OPS_CHAT);
    assert_eq!(
        msg.button_texts(),
        ["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
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
    // A form offers no choice of scope: its call announces no window.
    assert_eq!(form.event["call"]["window_seconds"], 0);
    let msg = form.message.as_ref().unwrap();
    assert_eq!(
        msg.button_texts(),
        ["✅ Approve", "❌ Cancel", "✋ Deny with reason"]
    );
    assert!(msg.visible_text.contains("ledger"), "{}", msg.visible_text);
    assert_shows_every_parameter(
        &msg.visible_text,
        &result("edit_form_approved")["sent_parameters"],
    );
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

    // The guard's question carries the call: its briefing names only the service, yet
    // the message shows the tool, the owner and every parameter, as a confirmation
    // does; the service's argument hash is the guard's.
    assert_confirmed_with_original("call_shown", result("call_shown"));
    let shown = one_question("call_shown");
    let sent = &result("call_shown")["sent_parameters"];
    assert_eq!(shown.event["target"], json!({"route": "other"}));
    assert_eq!(shown.event["question"], "Deploy ledger-eu?");
    assert_eq!(
        shown.event["call"],
        json!({"tool": "deploy", "params": sent, "owner_id": "anonymous", "window_seconds": 0})
    );
    let msg = shown.message.as_ref().unwrap();
    let text = &msg.visible_text;
    assert!(text.contains("Deploy ledger-eu?"), "{text}");
    assert!(text.contains("Tool: deploy"), "{text}");
    assert!(text.contains("Owner: anonymous"), "{text}");
    assert_shows_every_parameter(text, sent);
    assert!(!text.contains("sent no parameters"), "{text}");
    assert_eq!(
        msg.button_texts(),
        ["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
    let view = stored_view(
        &client,
        &base,
        shown.event["interaction_id"].as_str().unwrap(),
    )
    .await;
    // The record's call, field by field (the service may add more).
    let expected = json!({"tool": "deploy", "owner_id": "anonymous",
                          "args_hash": result("call_shown")["args_hash"], "window_seconds": 0});
    for (field, value) in expected.as_object().unwrap() {
        assert_eq!(&view["call"][field], value, "call.{field}: {view}");
    }
    assert_eq!(result("call_shown")["recorded"], json!([]));

    // A call with a window offers both scopes, the window cut to what the route allows.
    let window_buttons = [
        APPROVE_ONCE,
        APPROVE_FOR,
        "❌ Reject",
        "✋ Deny with reason",
    ];
    // "Approve once": confirmed, no window recorded, so the identical call is asked
    // again (and rejected this time).
    assert_confirmed_with_original("once_first", result("once_first"));
    let once = one_question("once_first");
    assert_eq!(once.event["call"]["window_seconds"], 600);
    let msg = once.message.as_ref().unwrap();
    assert_eq!(msg.button_texts(), window_buttons);
    assert!(
        msg.visible_text.contains("this route allows at most 2 min"),
        "{}",
        msg.visible_text
    );
    assert_shows_every_parameter(&msg.visible_text, &result("once_first")["sent_parameters"]);
    let view = stored_view(
        &client,
        &base,
        once.event["interaction_id"].as_str().unwrap(),
    )
    .await;
    assert_eq!(view["call"]["window_seconds"], OTHER_MAX_WINDOW, "{view}");
    assert_eq!(
        view["call"]["args_hash"],
        result("once_first")["args_hash"],
        "{view}"
    );
    let metadata = &view["responses"][0]["metadata"];
    assert_eq!(metadata["approved_scope"], "once", "{view}");
    assert_eq!(metadata["window_seconds"], 0, "{view}");
    assert_eq!(result("once_first")["recorded"], json!([]));
    telegram
        .wait_for_message(OTHER_CHAT, msg.message_id, "approved once", |m| {
            m.visible_text.contains("Approved once — Bob") && !m.has_buttons()
        })
        .await;
    let d = decision("once_second");
    assert_eq!(d["status"], "cancelled", "{d}");
    let again = one_question("once_second");
    assert_ne!(again.event["interaction_id"], once.event["interaction_id"]);
    assert_ne!(again.message.as_ref().unwrap().message_id, msg.message_id);

    // "Approve for": the first call is asked and approved with the route's window; the
    // guard records that window (not the 600 s the tool asked for), and the identical
    // second call is confirmed by the guard itself, with no question and no Telegram
    // message.
    assert_confirmed_with_original("window_first", result("window_first"));
    let first = one_question("window_first");
    let msg = first.message.as_ref().unwrap();
    assert_eq!(msg.button_texts(), window_buttons);
    let view = stored_view(
        &client,
        &base,
        first.event["interaction_id"].as_str().unwrap(),
    )
    .await;
    let metadata = &view["responses"][0]["metadata"];
    assert_eq!(metadata["approved_scope"], "window", "{view}");
    assert_eq!(metadata["window_seconds"], OTHER_MAX_WINDOW, "{view}");
    assert_eq!(
        result("window_first")["recorded"],
        json!([OTHER_MAX_WINDOW])
    );
    telegram
        .wait_for_message(OTHER_CHAT, msg.message_id, "approved for the window", |m| {
            m.visible_text.contains("Approved for 2 min — Bob") && !m.has_buttons()
        })
        .await;
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
    assert_eq!(result("window_second")["recorded"], json!([]));
    // The same tool with other arguments is asked again.
    assert_confirmed_with_original("window_other_args", result("window_other_args"));
    one_question("window_other_args");
    assert_eq!(
        result("window_other_args")["recorded"],
        json!([OTHER_MAX_WINDOW])
    );

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
