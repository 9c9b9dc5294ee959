//! Edit before execute, end to end with the real AI-Parrot (ai-parrot 1.2.4): its
//! `ConfirmationGuard`, through the package's `HitlConfirmationGuard`, asks a `form`
//! about a tool that allows edits; the package sends the tool's pydantic schema with the
//! call, so the question is editable in the console. This test plays the operator there
//! (launch data signed with the bot's token, as Telegram signs it): an edit the schema
//! refuses is a 422 naming the field and decides nothing; a valid one confirms the
//! guard's call with the edited values, which the guard re-validates with the same model
//! and runs with, and the chat says what changed.
//!
//! The Python side is `clients/python/e2e/driver_edit.py`. Needs a Python with ai-parrot
//! (`HITL_AIPARROT_PYTHON`) and Redis, like `aiparrot_e2e.rs`.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::parrot_driver::{
    Driver, parrot_python, required, wait_delivered, wait_for_question,
};
use crate::support::process::{ServiceProcess, write_config};
use hitl_telegram::domain::launch;
use serde_json::{Value, json};

const DRIVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/clients/python/e2e/driver_edit.py"
);
/// The longest the driver may stay silent: importing ai-parrot takes a few seconds.
const EVENT_WAIT: Duration = Duration::from_secs(90);

/// Alice's launch data, as Telegram signs it when she opens the console.
fn alice_in_the_console() -> String {
    let user = json!({"id": ALICE, "first_name": "Alice", "username": "alice"}).to_string();
    let auth = time::OffsetDateTime::now_utc().unix_timestamp().to_string();
    launch::signed(&[("user", &user), ("auth_date", &auth)], BOT_TOKEN)
}

#[tokio::test]
async fn ai_parrots_form_edit_reaches_the_console_and_the_guard_runs_the_edited_call() {
    let Some(python) = parrot_python() else {
        return;
    };
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    telegram.set_wait_timeout(Duration::from_secs(20));
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let toml = std::fs::read_to_string(&config).unwrap()
        + "\n[mini_app]\nenabled = true\npublic_url = \"http://127.0.0.1:9\"\n";
    std::fs::write(&config, toml).unwrap();
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
    let asked = driver.next().await;
    assert_eq!(asked["event"], "asked", "{asked}\n{}", driver.log_tail());
    assert_eq!(asked["interaction_type"], "form");
    assert_eq!(asked["call"]["args_schema"], ready["schema"], "{asked}");
    let iid = asked["interaction_id"].as_str().unwrap();
    let view = wait_delivered(&client, &base, TOKEN_A, iid).await;
    let id = view["id"].as_str().unwrap();
    let message = wait_for_question(&telegram, OPS_CHAT, "Deploy ledger", &[]).await;

    // The console shows the call with the tool's schema, ready to edit.
    let alice = alice_in_the_console();
    let console = |path: String| {
        client
            .get(format!("{base}{path}"))
            .header("Authorization", format!("tma {alice}"))
    };
    let detail: Value = console(format!("/app/api/questions/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let q = &detail["question"];
    assert_eq!(q["editable"], true, "{detail}");
    assert_eq!(q["args_schema"], ready["schema"]);
    assert_eq!(q["parameters_json"]["replicas"], 3);
    let decide = |body: Value| {
        client
            .post(format!("{base}/app/api/questions/{id}/decision"))
            .header("Authorization", format!("tma {alice}"))
            .json(&body)
            .send()
    };
    let mut edited = q["parameters_json"].clone();

    // An edit the tool's model refuses: 422 naming the field, and the guard still waits.
    edited["replicas"] = json!("many");
    let refused =
        decide(json!({"action": "approve", "args_hash": q["args_hash"], "parameters": edited}))
            .await
            .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNPROCESSABLE_ENTITY);
    let refused: Value = refused.json().await.unwrap();
    assert_eq!(
        refused["error"]["fields"][0]["field"], "replicas",
        "{refused}"
    );

    // A valid edit: the guard's call is confirmed with it.
    edited["replicas"] = json!(5);
    let done =
        decide(json!({"action": "approve", "args_hash": q["args_hash"], "parameters": edited}))
            .await
            .unwrap();
    assert!(done.status().is_success(), "{:?}", done.text().await);
    let result = driver.next().await;
    assert_eq!(result["event"], "result", "{result}\n{}", driver.log_tail());
    let decision = &result["decision"];
    assert_eq!(decision["status"], "confirmed", "{result}");
    assert_eq!(
        decision["parameters"], edited,
        "the guard runs the edited call"
    );
    assert_ne!(result["sent_parameters"], edited);

    let view = wait_delivered(&client, &base, TOKEN_A, iid).await;
    assert_eq!(view["call"]["edited"], true, "{view}");
    assert_eq!(view["call"]["original_args_hash"], result["args_hash"]);
    assert_eq!(view["result"], edited);
    let shown = telegram
        .wait_for_message(OPS_CHAT, message.message_id, "the edited decision", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        shown
            .visible_text
            .contains("✏️ Approved with changes by Alice")
            && shown.visible_text.contains("replicas 3 → 5"),
        "{}",
        shown.visible_text
    );
    let done = driver.next().await;
    assert_eq!(done["event"], "done", "{done}");
    driver.finish(Duration::from_secs(30)).await;
}
