//! Crash recovery with the real binary and SIGKILL: nothing pending is lost, taps still
//! decide, deadlines that passed while the process was dead become timeouts.

use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::{ServiceProcess, write_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

struct Agent {
    client: reqwest::Client,
}

impl Agent {
    async fn create(&self, base: &str, body: Value) -> Value {
        let r = self
            .client
            .post(format!("{base}/v1/confirmations"))
            .bearer_auth(TOKEN_A)
            .json(&body)
            .send()
            .await
            .unwrap();
        let (s, v) = json_of(r).await;
        assert_eq!(s, StatusCode::ACCEPTED, "{v}");
        v
    }

    async fn get(&self, base: &str, id: &str, wait: &str) -> Value {
        let r = self
            .client
            .get(format!("{base}/v1/confirmations/{id}?wait={wait}"))
            .bearer_auth(TOKEN_A)
            .send()
            .await
            .unwrap();
        json_of(r).await.1
    }

    async fn wait_status(&self, base: &str, id: &str, status: &str) -> Value {
        for _ in 0..20 {
            let r = self.get(base, id, "1").await;
            if r["status"] == status {
                return r;
            }
        }
        panic!("{id} never became {status}");
    }
}

async fn message_recorded(db_url: &str, id: &str) -> bool {
    let pool = sqlx::SqlitePool::connect(db_url).await.unwrap();
    let row: Option<(Option<i64>,)> =
        sqlx::query_as("SELECT message_id FROM confirmations WHERE id = ?")
            .bind(id)
            .fetch_optional(&pool)
            .await
            .unwrap();
    pool.close().await;
    matches!(row, Some((Some(_),)))
}

/// A fake Telegram, a database folder and the config of a service process against them.
struct Setup {
    telegram: FakeTelegram,
    dir: tempfile::TempDir,
    db_url: String,
    config: std::path::PathBuf,
    agent: Agent,
}

impl Setup {
    async fn new() -> Setup {
        let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
        let dir = tempfile::tempdir().unwrap();
        let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
        let config = write_config(dir.path(), &telegram, &db_url);
        let agent = Agent {
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        Setup {
            telegram,
            dir,
            db_url,
            config,
            agent,
        }
    }
}

/// Waits (up to 2 s) until the service stored the message id of `id`.
async fn wait_until_recorded(db_url: &str, id: &str) {
    for _ in 0..200 {
        if message_recorded(db_url, id).await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn after_sigkill_every_request_is_still_there_taps_decide_and_missed_deadlines_time_out() {
    let Setup {
        telegram,
        dir: _dir,
        db_url,
        config,
        agent,
    } = Setup::new().await;

    let mut service = ServiceProcess::start(&config).await;
    let approve_me = agent
        .create(
            &service.base,
            json!({"tool": "a", "params": {}, "wait": "suspend", "timeout_seconds": 120}),
        )
        .await;
    let cancel_me = agent
        .create(&service.base, json!({"tool": "b", "params": {}, "wait": "suspend", "route": "other", "timeout_seconds": 120}))
        .await;
    let expire_me = agent
        .create(
            &service.base,
            json!({"tool": "c", "params": {}, "wait": "suspend", "timeout_seconds": 4}),
        )
        .await;
    let messages = telegram.wait_for_messages(3).await;
    for r in [&approve_me, &cancel_me, &expire_me] {
        let id = r["id"].as_str().unwrap();
        wait_until_recorded(&db_url, id).await;
    }
    // A decision whose message edit is held back by flood control when the crash comes.
    let decided_unshown = agent
        .create(
            &service.base,
            json!({"tool": "e", "params": {}, "wait": "suspend", "route": "other", "timeout_seconds": 120}),
        )
        .await;
    let e_id = decided_unshown["id"].as_str().unwrap();
    let e_msg = telegram.wait_for_messages(4).await.remove(3);
    wait_until_recorded(&db_url, e_id).await;
    telegram.fail_next_with_retry_after("editMessageText", 1, 60);
    telegram.tap(OTHER_CHAT, e_msg.message_id, "✅ Approve", bob());
    agent.wait_status(&service.base, e_id, "confirmed").await;
    telegram.wait_for_requests("editMessageText", 1).await;

    // A question whose delivery is cut short by the crash: Telegram is slow to answer.
    telegram.delay_next("sendMessage", 1, Duration::from_secs(3));
    let cut_short = agent
        .create(
            &service.base,
            json!({"tool": "d", "params": {}, "wait": "suspend", "timeout_seconds": 120}),
        )
        .await;
    telegram.wait_for_requests("sendMessage", 5).await;

    service.kill9().await;
    // `expire_me`'s deadline passes while the service is dead. Its question went out
    // a second after `approve_me`'s (one message per second per chat), so it needs a
    // deadline well past that to still be pending at the kill.
    let deadline = time::OffsetDateTime::parse(
        expire_me["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = deadline - time::OffsetDateTime::now_utc();
    tokio::time::sleep(Duration::try_from(left).unwrap_or_default() + Duration::from_millis(200))
        .await;

    let service = ServiceProcess::start(&config).await;
    let base = &service.base;
    for r in [&approve_me, &cancel_me, &cut_short] {
        let now = agent.get(base, r["id"].as_str().unwrap(), "0").await;
        assert_eq!(now["status"], "pending", "{now}");
    }
    let expired = agent
        .wait_status(base, expire_me["id"].as_str().unwrap(), "timeout")
        .await;
    assert_eq!(expired["via"], "timeout");
    let expired_msg = messages
        .iter()
        .find(|m| m.chat_id == OPS_CHAT && m.visible_text.contains("Tool: c"))
        .unwrap();
    let edited = telegram
        .wait_for_message(OPS_CHAT, expired_msg.message_id, "timeout shown", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(edited.visible_text.contains("Timed out"));

    let approve_msg = messages
        .iter()
        .find(|m| m.visible_text.contains("Tool: a"))
        .unwrap();
    telegram.tap(OPS_CHAT, approve_msg.message_id, "✅ Approve", alice());
    let cancel_msg = messages.iter().find(|m| m.chat_id == OTHER_CHAT).unwrap();
    telegram.tap(OTHER_CHAT, cancel_msg.message_id, "❌ Cancel", bob());
    assert_eq!(
        agent
            .wait_status(base, approve_me["id"].as_str().unwrap(), "confirmed")
            .await["decided_by"]["id"],
        ALICE
    );
    assert_eq!(
        agent
            .wait_status(base, cancel_me["id"].as_str().unwrap(), "cancelled")
            .await["via"],
        "operator"
    );

    // The outcome the crash kept from being shown is shown after the restart.
    let e_shown = telegram
        .wait_for_message(
            OTHER_CHAT,
            e_msg.message_id,
            "outcome shown after restart",
            |m| !m.has_buttons(),
        )
        .await;
    assert!(
        e_shown.visible_text.contains("Approved by Bob"),
        "{}",
        e_shown.visible_text
    );

    // The cut-short question is delivered again after the restart; its newest message
    // carries live buttons that decide it.
    let cut_id = cut_short["id"].as_str().unwrap();
    for _ in 0..300 {
        if message_recorded(&db_url, cut_id).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let latest_d = telegram
        .sent_messages()
        .into_iter()
        .rfind(|m| m.visible_text.contains("Tool: d"))
        .expect("question d delivered after the restart");
    telegram.tap(OPS_CHAT, latest_d.message_id, "✅ Approve", alice());
    agent.wait_status(base, cut_id, "confirmed").await;
}

#[tokio::test]
async fn a_tap_handed_to_the_service_just_before_a_sigkill_is_decided_after_the_restart() {
    use sqlx::Connection;
    let Setup {
        telegram,
        dir: _dir,
        db_url,
        config,
        agent,
    } = Setup::new().await;
    let mut service = ServiceProcess::start(&config).await;
    let asked = agent
        .create(
            &service.base,
            json!({"tool": "a", "params": {}, "wait": "suspend", "timeout_seconds": 120}),
        )
        .await;
    let id = asked["id"].as_str().unwrap();
    let message = telegram.wait_for_messages(1).await.remove(0);
    wait_until_recorded(&db_url, id).await;

    // The database is slow to take the decision (another writer holds it), so the tap
    // is in the service's hands, not yet stored, when the process dies.
    let mut writer = sqlx::SqliteConnection::connect(&db_url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    let polls_before = telegram.requests("getUpdates").len();
    telegram.tap(OPS_CHAT, message.message_id, "✅ Approve", alice());
    // Fetched by the next poll (they last 1 s); then the service waits on the lock.
    for _ in 0..100 {
        if telegram.requests("getUpdates").len() > polls_before + 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    service.kill9().await;
    sqlx::query("ROLLBACK").execute(&mut writer).await.unwrap();
    writer.close().await.unwrap();
    assert_eq!(
        telegram.pending_updates(),
        1,
        "Telegram was told the tap was handled before it was stored"
    );

    let service = ServiceProcess::start(&config).await;
    let decided = agent.wait_status(&service.base, id, "confirmed").await;
    assert_eq!(decided["decided_by"]["id"], ALICE, "{decided}");
}

#[tokio::test]
async fn a_question_posted_just_before_a_sigkill_and_again_after_it_is_decided_from_either_copy() {
    let Setup {
        telegram,
        dir: _dir,
        db_url,
        config,
        agent,
    } = Setup::new().await;
    let mut service = ServiceProcess::start(&config).await;
    // Telegram posts the message but its answer is slow: the process dies in between,
    // so the message id is never stored and the restart posts the question again.
    telegram.delay_next("sendMessage", 1, Duration::from_secs(5));
    let asked = agent
        .create(
            &service.base,
            json!({"tool": "a", "params": {}, "wait": "suspend", "timeout_seconds": 120}),
        )
        .await;
    let id = asked["id"].as_str().unwrap();
    let first = telegram.wait_for_message_in(OPS_CHAT, 1).await.remove(0);
    assert!(!message_recorded(&db_url, id).await);
    service.kill9().await;

    // getMe answers late after the restart: the tap comes while the bot's username is
    // unknown, and the copy must still be told the bot's own (by its id, from the token).
    telegram.delay_next("getMe", 1, Duration::from_secs(8));
    let service = ServiceProcess::start(&config).await;
    let copies = telegram.wait_for_message_in(OPS_CHAT, 2).await;
    assert_ne!(copies[1].message_id, first.message_id);
    telegram.tap(OPS_CHAT, first.message_id, "❌ Cancel", bob());
    let decided = agent.wait_status(&service.base, id, "cancelled").await;
    assert_eq!(decided["decided_by"]["id"], BOB, "{decided}");
    for copy in [&copies[0], &copies[1]] {
        let shown = telegram
            .wait_for_message(OPS_CHAT, copy.message_id, "outcome on every copy", |m| {
                !m.has_buttons()
            })
            .await;
        assert!(
            shown.visible_text.contains("Cancelled by Bob"),
            "{}",
            shown.visible_text
        );
    }
}

#[tokio::test]
async fn a_question_whose_file_a_sigkill_kept_from_being_sent_gets_it_after_the_restart() {
    let Setup {
        telegram,
        dir: _dir,
        db_url: _,
        config,
        agent,
    } = Setup::new().await;
    let mut service = ServiceProcess::start(&config).await;
    // The file waits out a long flood-control pause; the process dies meanwhile.
    telegram.fail_next_with_retry_after("sendDocument", 1, 60);
    let memo = "x".repeat(3000);
    let asked = agent
        .create(
            &service.base,
            json!({"tool": "pay", "params": {"memo": memo}, "wait": "suspend", "timeout_seconds": 120}),
        )
        .await;
    let id = asked["id"].as_str().unwrap();
    let message = telegram.wait_for_message_in(OPS_CHAT, 1).await.remove(0);
    assert!(
        message.visible_text.contains("attached"),
        "{}",
        message.visible_text
    );
    telegram.wait_for_requests("sendDocument", 1).await;
    service.kill9().await;
    assert!(telegram.documents_in(OPS_CHAT).is_empty());

    let service = ServiceProcess::start(&config).await;
    let file = telegram
        .wait_for_document(OPS_CHAT, message.message_id)
        .await;
    assert!(file.content.contains(&memo));
    assert_eq!(agent.get(&service.base, id, "0").await["status"], "pending");
}
