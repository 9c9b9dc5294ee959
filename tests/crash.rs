//! Crash recovery with the real binary and SIGKILL: nothing pending is lost, taps still
//! decide, deadlines that passed while the process was dead become timeouts.

mod support;

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::app::*;
use support::fake_telegram::FakeTelegram;
use support::process::{ServiceProcess, write_config};

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

#[tokio::test]
async fn after_sigkill_every_request_is_still_there_taps_decide_and_missed_deadlines_time_out() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let agent = Agent {
        client: reqwest::Client::builder().no_proxy().build().unwrap(),
    };

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
        for _ in 0..200 {
            if message_recorded(&db_url, id).await {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
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
    for _ in 0..200 {
        if message_recorded(&db_url, e_id).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
