//! Grants end to end with the real AI-Parrot: its `GrantGuard` (FEAT-211, ai-parrot
//! 1.2.4) keeps its grants in the service through the package's `HitlGrantStore`, and
//! asks its own approval question through `HitlTelegramChannel`; the real service
//! binary talks to the fake Bot API, where this test plays the operator.
//!
//! What must hold: the guard's first call asks (its question names the scope and the
//! owner, and the channel sends them as the question's grant terms, which the chat shows
//! under 🔑 on the service's own lines) and, once Alice approves, the grant is stored by
//! the service from that yes, on those terms, and handed to the guard; after the service is killed and restarted, the next call is let through by
//! the stored grant without a new question; once the grant is revoked, the next call
//! asks again. The revoke is the operator's: `/grants` in the route's chat, and its
//! Revoke button.
//!
//! The Python side is `clients/python/e2e/driver_grants.py`; it waits between its calls
//! for files this test creates (`restarted`, `revoked`). Needs a Python with ai-parrot
//! (`HITL_AIPARROT_PYTHON`) and Redis, like `aiparrot_e2e.rs`.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::parrot_driver::{
    Driver, parrot_python, required, wait_delivered, wait_for_question,
};
use crate::support::process::{ServiceProcess, pin_port, write_config};
use serde_json::Value;

const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/clients/python/e2e/driver_grants.py"
);
/// The longest the driver may stay silent: importing ai-parrot takes a few seconds, and
/// it waits for the service's restart.
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// The driver's next event; `None` when it skipped (no Redis) and that is allowed.
async fn next(driver: &mut Driver) -> Option<Value> {
    let event = driver.next().await;
    if event["event"] == "skip" {
        let reason = event["reason"].as_str().unwrap_or_default().to_owned();
        assert!(
            !required("HITL_REQUIRE_AIPARROT"),
            "HITL_REQUIRE_AIPARROT=1 but: {reason}"
        );
        eprintln!("skipped: {reason}");
        return None;
    }
    Some(event)
}

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

#[tokio::test]
async fn ai_parrot_grant_guard_keeps_its_grant_in_the_service_across_a_restart_until_revoked() {
    let Some(python) = parrot_python() else {
        return;
    };
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_wait_timeout(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    // A fixed port: the service is restarted where the store and channel expect it.
    let port = pin_port(&config);
    let mut service = ServiceProcess::start(&config).await;
    let base = service.base.clone();
    assert_eq!(base, format!("http://127.0.0.1:{port}"));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let signals = tempfile::tempdir().unwrap();

    let mut driver = Driver::start(
        &python,
        DRIVER,
        &[
            ("HITL_BASE_URL", base.clone()),
            ("HITL_TOKEN", TOKEN_A.to_owned()),
            ("HITL_SIGNAL_DIR", signals.path().display().to_string()),
        ],
        EVENT_WAIT,
    );
    let Some(ready) = next(&mut driver).await else {
        return;
    };
    assert_eq!(ready["event"], "ready", "{ready}");

    // The first call asks: GrantGuard's own approval, with the scope and the owner.
    let asked = expect(&mut driver, "asked", "first").await;
    assert_eq!(asked["accepted"], true, "{asked}");
    let question = asked["question"].as_str().unwrap();
    assert!(
        question.contains("Scope: tool:deploy\nOwner: alice"),
        "{question}"
    );
    let id = asked["interaction_id"].as_str().unwrap();
    let msg = wait_for_question(&telegram, OPS_CHAT, "Scope: tool:deploy", &[]).await;
    // The terms as data, shown by the service: GrantGuard's "60.0 min" is one hour.
    for line in [
        "🔑 Grant: approving lets agent-a act on these terms only, without asking for each call where a grant is enough (deny rules still apply)",
        "Scope: tool:deploy (every call of this one tool)",
        "Owner: alice",
        "Duration: 1 h from your tap",
    ] {
        assert!(
            msg.visible_text.contains(line),
            "{line}: {}",
            msg.visible_text
        );
    }
    wait_delivered(&client, &base, TOKEN_A, id).await;
    let q = telegram.tap(OPS_CHAT, msg.message_id, "✅ Approve", alice());
    telegram.wait_for_callback_answer(&q).await;
    let first = expect(&mut driver, "result", "first").await;
    let decision = &first["decision"];
    assert_eq!(decision["allowed"], true, "{first}");
    assert_eq!(decision["reason"], "HITL approval granted");
    let grant = &decision["grant"];
    let grant_id = grant["grant_id"].as_str().unwrap().to_owned();
    assert!(grant_id.starts_with("gr_"), "the service's grant: {grant}");
    assert_eq!(grant["owner_id"], "alice");
    assert_eq!(grant["scope"], "tool:deploy");
    assert_eq!(
        grant["granted_by"],
        ALICE.to_string(),
        "Alice's Telegram id"
    );
    assert_eq!(grant["revoked"], false);
    assert_eq!(first["active"].as_array().unwrap().len(), 1, "{first}");
    // The service stored it from the guard's own approval, as the agent's.
    let listed: Value = client
        .get(format!("{base}/v1/grants"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let stored = &listed["grants"][0];
    assert_eq!(stored["grant_id"], grant_id.as_str(), "{listed}");
    assert_eq!(stored["interaction_id"], id);
    assert_eq!(stored["granted_by"]["id"], ALICE);
    assert_eq!(stored["agent"], "agent-a");
    let (from, to) = (
        time_of(&stored["created_at"]),
        time_of(&stored["expires_at"]),
    );
    assert_eq!(to - from, time::Duration::hours(1), "{stored}");

    // The service dies and comes back: the grant is still there, and the next call is
    // let through without a question.
    service.kill9().await;
    service = ServiceProcess::start(&config).await;
    assert_eq!(service.base, base);
    let before = telegram.sent_messages().len();
    std::fs::write(signals.path().join("restarted"), "").unwrap();
    let after = expect(&mut driver, "result", "after_restart").await;
    assert_eq!(after["decision"]["allowed"], true, "{after}");
    assert_eq!(after["decision"]["reason"], "active grant covers scope");
    assert_eq!(
        telegram.sent_messages().len(),
        before,
        "nothing asked after the restart"
    );

    // Revoked from the chat, where the approvers are: /grants lists it with a Revoke
    // button, Alice taps it, and the next call asks again (she says no this time).
    let before = telegram.messages_in(OPS_CHAT).len();
    telegram.send_text_message(OPS_CHAT, alice(), "/grants");
    let mut listing = None;
    for _ in 0..500 {
        listing = telegram
            .messages_in(OPS_CHAT)
            .into_iter()
            .skip(before)
            .find(|m| m.visible_text.contains("Live grants (1)"));
        if listing.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listing = listing.expect("the answer to /grants");
    assert!(
        listing.visible_text.contains(&grant_id),
        "{}",
        listing.visible_text
    );
    let q = telegram.tap(
        OPS_CHAT,
        listing.message_id,
        "🔒 Revoke tool:deploy for alice",
        alice(),
    );
    let answer = telegram.wait_for_callback_answer(&q).await;
    assert_eq!(
        answer.text.as_deref(),
        Some("🔒 Revoked: agent-a can no longer run any deploy call for alice without asking.")
    );
    let listed: Value = client
        .get(format!("{base}/v1/grants"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["grants"], Value::Array(vec![]), "{listed}");
    std::fs::write(signals.path().join("revoked"), "").unwrap();
    let again = expect(&mut driver, "asked", "after_revoke").await;
    assert_ne!(again["interaction_id"], asked["interaction_id"]);
    let again_id = again["interaction_id"].as_str().unwrap();
    let msg2 = wait_for_question(
        &telegram,
        OPS_CHAT,
        "Scope: tool:deploy",
        &[(OPS_CHAT, msg.message_id)],
    )
    .await;
    wait_delivered(&client, &base, TOKEN_A, again_id).await;
    let q = telegram.tap(OPS_CHAT, msg2.message_id, "❌ Reject", alice());
    telegram.wait_for_callback_answer(&q).await;
    let last = expect(&mut driver, "result", "after_revoke").await;
    assert_eq!(last["decision"]["allowed"], false, "{last}");
    assert_eq!(last["decision"]["reason"], "HITL approval rejected");
    assert_eq!(last["active"], Value::Array(vec![]), "{last}");

    let done = driver.next().await;
    assert_eq!(done["event"], "done", "{done}");
    driver.finish(Duration::from_secs(30)).await;
    drop(service);
}
