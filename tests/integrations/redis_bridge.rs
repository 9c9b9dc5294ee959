//! The Redis bridge end to end: this test plays AI-Parrot's `CLIDaemonHumanChannel` on a
//! real Redis (the exact commands it sends: `LPUSH {prefix}:{recipient}:pending
//! <HumanInteraction JSON>`, `PUBLISH {prefix}:{recipient}:notify ...`, `BRPOP
//! {prefix}:{recipient}:responses`), the service runs with `[redis_bridge]` enabled, and
//! the operators tap buttons in the fake Telegram.
//!
//! Needs Redis on 127.0.0.1:6379 (or `HITL_TEST_REDIS_URL`). Without one each test says so
//! and passes, unless `HITL_REQUIRE_REDIS=1` (set by `.ci/run`, which starts Redis). Every
//! test uses a prefix of its own, so tests run in parallel on one Redis. When
//! `HITL_AIPARROT_PYTHON` names a python with ai-parrot, the answers read back from Redis
//! are also checked with AI-Parrot's own models.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::SentMessage;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// The agent the bridge asks as (its own, as docs/integrations.md asks).
const BRIDGE_AGENT: &str = "parrot-bridge";
/// Its bearer token: TestApp's environment has no spare variable, and HOOK_A's value is
/// unique among the agents' tokens.
const BRIDGE_TOKEN: &str = HOOK_SECRET_A;
const BRIDGE_TOKEN_ENV: &str = "HOOK_A";

const ALICE_CHAT: i64 = ALICE as i64;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/aiparrot");
const VALIDATOR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scripts/validate_human_responses.py"
);
/// `HumanResponse`'s fields: its model forbids any other.
const HUMAN_RESPONSE_FIELDS: [&str; 6] = [
    "interaction_id",
    "metadata",
    "respondent",
    "response_type",
    "timestamp",
    "value",
];

fn redis_url() -> String {
    std::env::var("HITL_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// AI-Parrot's side of the queues, under a prefix of this test's own.
struct Parrot {
    con: MultiplexedConnection,
    prefix: String,
}

impl Parrot {
    /// Connects, or says why the test is skipped (`None`).
    async fn connect(test: &str) -> Option<Parrot> {
        let client = redis::Client::open(redis_url()).expect("HITL_TEST_REDIS_URL");
        // No response timeout: BRPOP blocks for as long as the test asks.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(None);
        match client
            .get_multiplexed_async_connection_with_config(&config)
            .await
        {
            Ok(con) => Some(Parrot {
                con,
                prefix: format!(
                    "hitl-test:{test}:{}:{:016x}",
                    std::process::id(),
                    rand::random::<u64>()
                ),
            }),
            Err(e) => {
                assert!(
                    std::env::var("HITL_REQUIRE_REDIS").as_deref() != Ok("1"),
                    "HITL_REQUIRE_REDIS=1 but Redis at {} cannot be reached: {e}",
                    redis_url()
                );
                eprintln!(
                    "skipped {test}: no Redis at {} ({e}); start one (redis-server) or set \
                     HITL_REQUIRE_REDIS=1 to fail instead",
                    redis_url()
                );
                None
            }
        }
    }

    fn key(&self, recipient: &str, list: &str) -> String {
        format!("{}:{recipient}:{list}", self.prefix)
    }

    /// `CLIDaemonHumanChannel.send_interaction`.
    async fn send_interaction(&mut self, recipient: &str, interaction: &Value) {
        self.lpush(
            &self.key(recipient, "pending"),
            interaction.to_string().as_bytes(),
        )
        .await;
        let notice = json!({
            "interaction_id": interaction["interaction_id"],
            "question": interaction["question"],
            "type": interaction["interaction_type"],
            "source": interaction["source_agent"].as_str().unwrap_or("agent"),
        });
        self.publish(recipient, &notice).await;
    }

    /// `CLIDaemonHumanChannel.cancel_interaction`.
    async fn cancel_interaction(&mut self, recipient: &str, id: &str) {
        let notice = json!({
            "cancelled": id,
            "message": format!("Interaction {}... cancelled", &id[..8]),
        });
        self.publish(recipient, &notice).await;
    }

    async fn publish(&mut self, recipient: &str, notice: &Value) {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(self.key(recipient, "notify"))
            .arg(notice.to_string())
            .query_async(&mut self.con)
            .await
            .expect("PUBLISH");
    }

    async fn lpush(&mut self, key: &str, item: &[u8]) {
        let _: i64 = redis::cmd("LPUSH")
            .arg(key)
            .arg(item)
            .query_async(&mut self.con)
            .await
            .expect("LPUSH");
    }

    async fn lrange(&mut self, key: &str) -> Vec<Vec<u8>> {
        redis::cmd("LRANGE")
            .arg(key)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.con)
            .await
            .expect("LRANGE")
    }

    async fn llen(&mut self, key: &str) -> i64 {
        redis::cmd("LLEN")
            .arg(key)
            .query_async(&mut self.con)
            .await
            .expect("LLEN")
    }

    /// The listener's `BRPOP {prefix}:{recipient}:responses`, for at most 10 s.
    async fn next_response(&mut self, recipient: &str) -> Value {
        let key = self.key(recipient, "responses");
        let got: Option<(String, String)> = redis::cmd("BRPOP")
            .arg(&key)
            .arg(10)
            .query_async(&mut self.con)
            .await
            .expect("BRPOP");
        let (_, payload) = got.unwrap_or_else(|| panic!("no HumanResponse on {key} within 10 s"));
        serde_json::from_str(&payload).expect("a HumanResponse is JSON")
    }

    /// Waits until `key` holds `n` items.
    async fn wait_for_len(&mut self, key: &str, n: i64) {
        let give_up = Instant::now() + Duration::from_secs(10);
        loop {
            let len = self.llen(key).await;
            if len == n {
                return;
            }
            assert!(
                Instant::now() < give_up,
                "{key} holds {len} items, not {n}, after 10 s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn exists(&mut self, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut self.con)
            .await
            .expect("EXISTS")
    }

    /// Deletes every key of this test.
    async fn clean(&mut self) {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:*", self.prefix))
            .query_async(&mut self.con)
            .await
            .expect("KEYS");
        if !keys.is_empty() {
            let _: i64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut self.con)
                .await
                .expect("DEL");
        }
    }
}

/// The test settings plus a bridge agent and `[redis_bridge]` for alice and bob.
fn with_bridge(prefix: &str, route: Option<&str>) -> impl FnOnce(String) -> String {
    let url = redis_url();
    let prefix = prefix.to_owned();
    let route = route.map_or(String::new(), |r| format!("route = \"{r}\""));
    move |toml| {
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
recipients = ["alice", "bob"]
{route}
"#
        )
    }
}

/// The approval AI-Parrot's own `ConfirmationGuard` builds (its exact
/// `model_dump_json()`, from the fixtures), with a fresh `interaction_id`.
fn guard_approval(question: &str) -> Value {
    let path = format!("{FIXTURES}/interactions.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture"))
        .expect("fixture JSON");
    let mut i = doc["cases"]["confirmation_guard_approval"].clone();
    assert_eq!(i["interaction_type"], "approval");
    i["interaction_id"] = json!(format!(
        "{:08x}-0000-4000-8000-{:012x}",
        rand::random::<u32>(),
        rand::random::<u64>() & 0xffff_ffff_ffff
    ));
    i["question"] = json!(question);
    i
}

/// `interaction` addressed to `people` (AI-Parrot's manager sends one copy per target
/// human, to that human's queue).
fn for_people(mut interaction: Value, people: &[&str]) -> Value {
    interaction["target_humans"] = json!(people);
    interaction
}

fn id_of(interaction: &Value) -> String {
    interaction["interaction_id"]
        .as_str()
        .expect("interaction_id")
        .to_owned()
}

/// GET /v1/interactions/{id} as the bridge's agent.
async fn record(app: &TestApp, id: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .get(app.url(&format!("/v1/interactions/{id}")))
        .bearer_auth(BRIDGE_TOKEN)
        .send()
        .await
        .expect("request");
    json_of(r).await
}

/// Waits until the bridge has stored the interaction and its message is in Telegram
/// (so taps are bound to it); returns the record.
async fn wait_delivered(app: &TestApp, id: &str) -> Value {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, r) = record(app, id).await;
        if status == StatusCode::OK && r["status"] != "pending" {
            return r;
        }
        assert!(
            Instant::now() < give_up,
            "interaction {id} was not delivered within 10 s: {status} {r}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The message in `chat` whose text shows `question`.
fn message_with(app: &TestApp, chat: i64, question: &str) -> SentMessage {
    app.telegram
        .messages_in(chat)
        .into_iter()
        .find(|m| m.visible_text.contains(question))
        .unwrap_or_else(|| panic!("no message in chat {chat} shows {question:?}"))
}

fn assert_is_human_response(r: &Value, interaction: &Value) {
    let fields: Vec<&str> = r
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields, HUMAN_RESPONSE_FIELDS,
        "exactly AI-Parrot's fields: {r}"
    );
    assert_eq!(r["interaction_id"], interaction["interaction_id"], "{r}");
    assert_eq!(r["response_type"], interaction["interaction_type"], "{r}");
}

/// Checks `items` (`{"interaction", "response"}`) with the real ai-parrot, when
/// `HITL_AIPARROT_PYTHON` names a python that has it.
async fn ai_parrot_accepts(items: Value) {
    let Some(python) = std::env::var_os("HITL_AIPARROT_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
    else {
        eprintln!("not checked with ai-parrot itself: HITL_AIPARROT_PYTHON is not set");
        return;
    };
    let mut child = tokio::process::Command::new(python)
        .arg(VALIDATOR)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the validator starts");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(items.to_string().as_bytes())
        .await
        .expect("write stdin");
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("the validator finishes within 2 minutes")
        .expect("the validator runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "ai-parrot refused the HumanResponse read from Redis:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_queued_interaction_is_asked_in_the_private_chat_and_the_approval_comes_back() {
    let Some(mut parrot) = Parrot::connect("approve").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    let a = for_people(guard_approval("Delete /tmp/x (force=False)?"), &["alice"]);
    parrot.send_interaction("alice", &a).await;

    let r = wait_delivered(&app, &id_of(&a)).await;
    assert_eq!(r["route"], "@alice", "{r}");
    let msg = message_with(&app, ALICE_CHAT, "Delete /tmp/x");
    assert!(
        msg.button_texts().contains(&"✅ Approve"),
        "{:?}",
        msg.buttons
    );
    app.telegram
        .tap(ALICE_CHAT, msg.message_id, "✅ Approve", alice());

    let response = parrot.next_response("alice").await;
    assert_is_human_response(&response, &a);
    assert_eq!(response["value"], true, "{response}");
    assert_eq!(response["respondent"], "alice", "{response}");
    assert_eq!(response["metadata"]["channel"], "telegram", "{response}");
    app.telegram
        .wait_for_message(ALICE_CHAT, msg.message_id, "the buttons gone", |m| {
            !m.has_buttons()
        })
        .await;
    assert_eq!(parrot.llen(&parrot.key("alice", "pending")).await, 0);
    assert_eq!(parrot.llen(&parrot.key("alice", "processing")).await, 0);
    assert_eq!(parrot.llen(&parrot.key("alice", "dead")).await, 0);
    ai_parrot_accepts(json!([{"interaction": a, "response": response}])).await;
    parrot.clean().await;
}

#[tokio::test]
async fn a_question_for_two_people_reaches_both_and_the_answer_goes_to_whoever_answered() {
    let Some(mut parrot) = Parrot::connect("two").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    let a = for_people(guard_approval("Promote bob's build?"), &["alice", "bob"]);
    parrot.send_interaction("alice", &a).await;
    parrot.send_interaction("bob", &a).await;
    wait_delivered(&app, &id_of(&a)).await;
    // The two queues are served side by side: either may carry it first.
    app.telegram.wait_for_message_in(ALICE_CHAT, 1).await;
    app.telegram.wait_for_message_in(BOB as i64, 1).await;
    let (_, r) = record(&app, &id_of(&a)).await;
    assert!(r["route"] == "@alice" || r["route"] == "@bob", "{r}");
    parrot
        .wait_for_len(&parrot.key("alice", "processing"), 0)
        .await;
    parrot
        .wait_for_len(&parrot.key("bob", "processing"), 0)
        .await;
    let in_bobs_chat = message_with(&app, BOB as i64, "Promote bob's build?");
    app.telegram
        .tap(BOB as i64, in_bobs_chat.message_id, "✅ Approve", bob());
    let response = parrot.next_response("bob").await;
    assert_is_human_response(&response, &a);
    assert_eq!(response["respondent"], "bob", "{response}");
    assert_eq!(parrot.llen(&parrot.key("alice", "responses")).await, 0);
    // The question ended for alice too.
    let in_alices_chat = message_with(&app, ALICE_CHAT, "Promote bob's build?");
    app.telegram
        .wait_for_message(
            ALICE_CHAT,
            in_alices_chat.message_id,
            "the buttons gone",
            |m| !m.has_buttons(),
        )
        .await;
    ai_parrot_accepts(json!([{"interaction": a, "response": response}])).await;
    parrot.clean().await;
}

#[tokio::test]
async fn a_cancel_notice_withdraws_the_question_and_an_early_one_keeps_it_from_being_asked() {
    let Some(mut parrot) = Parrot::connect("cancel").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    let a = guard_approval("Restart the billing workers?");
    parrot.send_interaction("alice", &a).await;
    wait_delivered(&app, &id_of(&a)).await;
    let msg = message_with(&app, ALICE_CHAT, "Restart the billing workers?");

    parrot.cancel_interaction("alice", &id_of(&a)).await;
    let edited = app
        .telegram
        .wait_for_message(ALICE_CHAT, msg.message_id, "withdrawn, buttons gone", |m| {
            !m.has_buttons() && m.visible_text.contains("Withdrawn")
        })
        .await;
    assert!(edited.visible_text.contains("Restart the billing workers?"));
    let (_, r) = record(&app, &id_of(&a)).await;
    assert_eq!(r["status"], "cancelled", "{r}");
    // A cancel for a question that already ended changes nothing.
    parrot.cancel_interaction("alice", &id_of(&a)).await;

    // Withdrawn before the bridge took it: never asked.
    let b = guard_approval("Rotate the API keys?");
    parrot.cancel_interaction("alice", &id_of(&b)).await;
    let marker = format!("{}:_hitl:cancelled:{}", parrot.prefix, id_of(&b));
    let give_up = Instant::now() + Duration::from_secs(10);
    while !parrot.exists(&marker).await {
        assert!(Instant::now() < give_up, "the early cancel was never seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    parrot.send_interaction("alice", &b).await;
    let c = guard_approval("Scale the cache to 3 nodes?");
    parrot.send_interaction("alice", &c).await;
    wait_delivered(&app, &id_of(&c)).await;
    let (status, _) = record(&app, &id_of(&b)).await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the withdrawn question was asked"
    );
    let texts: Vec<String> = app
        .telegram
        .messages_in(ALICE_CHAT)
        .iter()
        .map(|m| m.visible_text.clone())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:#?}");
    assert_eq!(parrot.llen(&parrot.key("alice", "processing")).await, 0);
    assert_eq!(parrot.llen(&parrot.key("alice", "dead")).await, 0);
    parrot.clean().await;
}

#[tokio::test]
async fn a_malformed_item_goes_to_the_dead_letter_list_and_the_next_one_is_still_asked() {
    // (An item that names an interaction_id nobody asked is also answered as refused:
    // see the repeated-key test. A reused id is not: it names a question still open.)
    let Some(mut parrot) = Parrot::connect("dead").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    let pending = parrot.key("alice", "pending");
    let not_json: &[u8] = b"{not json";
    let not_utf8: &[u8] = b"\xff\xfe{}";
    let no_question = json!({"interaction_id": "x-1", "interaction_type": "approval"}).to_string();
    parrot.lpush(&pending, not_json).await;
    parrot.lpush(&pending, not_utf8).await;
    parrot.lpush(&pending, no_question.as_bytes()).await;
    let a = guard_approval("Purge the CDN cache?");
    parrot.send_interaction("alice", &a).await;
    wait_delivered(&app, &id_of(&a)).await;

    // The same interaction_id for another question cannot be asked either.
    let mut clash = a.clone();
    clash["question"] = json!("Something else entirely?");
    parrot.lpush(&pending, clash.to_string().as_bytes()).await;
    let b = guard_approval("Renew the TLS certificate?");
    parrot.send_interaction("alice", &b).await;
    wait_delivered(&app, &id_of(&b)).await;

    // Kept as they were, newest on the left (taken oldest first).
    let dead = parrot.lrange(&parrot.key("alice", "dead")).await;
    assert_eq!(
        dead,
        vec![
            clash.to_string().into_bytes(),
            no_question.into_bytes(),
            not_utf8.to_vec(),
            not_json.to_vec(),
        ]
    );
    assert_eq!(parrot.llen(&pending).await, 0);
    assert_eq!(parrot.llen(&parrot.key("alice", "processing")).await, 0);
    assert_eq!(app.telegram.messages_in(ALICE_CHAT).len(), 2);
    // Answered as refused: only the one whose interaction_id names nothing asked. Not
    // the unreadable ones (no id), and not the clash, whose id is the open question a's.
    let answered: Vec<Value> = parrot
        .lrange(&parrot.key("alice", "responses"))
        .await
        .iter()
        .map(|r| serde_json::from_slice(r).unwrap())
        .collect();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0]["interaction_id"], "x-1");
    assert_eq!(answered[0]["metadata"]["refused"], true);
    parrot.clean().await;
}

#[tokio::test]
async fn a_question_left_in_processing_by_a_crash_is_asked_on_start_and_only_once() {
    let Some(mut parrot) = Parrot::connect("crash").await else {
        return;
    };
    // Taken from pending, then the process died before storing it.
    let a = guard_approval("Fail over the primary database?");
    let processing = parrot.key("alice", "processing");
    parrot.lpush(&processing, a.to_string().as_bytes()).await;
    let b = guard_approval("Drain node 7?");
    parrot.send_interaction("alice", &b).await;

    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    wait_delivered(&app, &id_of(&a)).await;
    wait_delivered(&app, &id_of(&b)).await;
    let texts: Vec<String> = app
        .telegram
        .messages_in(ALICE_CHAT)
        .iter()
        .map(|m| m.visible_text.clone())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:#?}");
    assert!(
        texts[0].contains("Fail over"),
        "the re-driven one first: {texts:#?}"
    );
    parrot.wait_for_len(&processing, 0).await;

    // Stored, then the process died before removing it from processing: asked once.
    let mut app = app;
    app.stop().await;
    parrot.lpush(&processing, a.to_string().as_bytes()).await;
    let app = app.restart().await;
    parrot.wait_for_len(&processing, 0).await;
    let c = guard_approval("Flush the job queue?");
    parrot.send_interaction("alice", &c).await;
    wait_delivered(&app, &id_of(&c)).await;
    assert_eq!(app.telegram.messages_in(ALICE_CHAT).len(), 3);
    let msg = message_with(&app, ALICE_CHAT, "Fail over the primary database?");
    app.telegram
        .tap(ALICE_CHAT, msg.message_id, "✅ Approve", alice());
    let response = parrot.next_response("alice").await;
    assert_eq!(response["interaction_id"], a["interaction_id"]);
    parrot.clean().await;
}

#[tokio::test]
async fn restarts_neither_repeat_nor_lose_answers() {
    let Some(mut parrot) = Parrot::connect("cursor").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    let questions = [
        guard_approval("Ship release 1?"),
        guard_approval("Ship release 2?"),
        guard_approval("Ship release 3?"),
    ];
    for q in &questions {
        parrot.send_interaction("alice", q).await;
        wait_delivered(&app, &id_of(q)).await;
    }
    let tap = |app: &TestApp, question: &str| {
        let msg = message_with(app, ALICE_CHAT, question);
        app.telegram
            .tap(ALICE_CHAT, msg.message_id, "✅ Approve", alice());
        msg.message_id
    };

    tap(&app, "Ship release 1?");
    let first = parrot.next_response("alice").await;
    assert_eq!(first["interaction_id"], questions[0]["interaction_id"]);

    // The push of the second answer fails (the list is in the way), then the service
    // stops: the answer is stored, not pushed, and the cursor has not moved past it.
    let responses = parrot.key("alice", "responses");
    let _: () = redis::cmd("SET")
        .arg(&responses)
        .arg("in the way")
        .query_async(&mut parrot.con)
        .await
        .expect("SET");
    let mid = tap(&app, "Ship release 2?");
    app.telegram
        .wait_for_message(ALICE_CHAT, mid, "the outcome shown", |m| !m.has_buttons())
        .await;
    let mut app = app;
    app.stop().await;
    let _: i64 = redis::cmd("DEL")
        .arg(&responses)
        .query_async(&mut parrot.con)
        .await
        .expect("DEL");

    // After the restart: the second answer (not lost), and not the first again.
    let app = app.restart().await;
    let second = parrot.next_response("alice").await;
    assert_eq!(second["interaction_id"], questions[1]["interaction_id"]);
    tap(&app, "Ship release 3?");
    let third = parrot.next_response("alice").await;
    assert_eq!(third["interaction_id"], questions[2]["interaction_id"]);
    assert_eq!(parrot.llen(&responses).await, 0, "an answer came twice");

    // And once more across a plain restart: nothing is pushed again.
    let mut app = app.restart().await;
    let late = guard_approval("Ship release 4?");
    parrot.send_interaction("alice", &late).await;
    wait_delivered(&app, &id_of(&late)).await;
    tap(&app, "Ship release 4?");
    let fourth = parrot.next_response("alice").await;
    assert_eq!(fourth["interaction_id"], late["interaction_id"]);
    assert_eq!(parrot.llen(&responses).await, 0, "an answer came twice");
    for (r, q) in [&first, &second, &third, &fourth]
        .into_iter()
        .zip(questions.iter().chain([&late]))
    {
        assert_is_human_response(r, q);
    }
    app.stop().await;
    parrot.clean().await;
}

#[tokio::test]
async fn in_a_group_route_the_answer_goes_back_to_the_recipient_that_asked() {
    let Some(mut parrot) = Parrot::connect("group").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, Some("ops"))).await;
    let a = guard_approval("Open the maintenance window?");
    parrot.send_interaction("alice", &a).await;
    let r = wait_delivered(&app, &id_of(&a)).await;
    assert_eq!(r["route"], "ops", "{r}");
    let msg = message_with(&app, OPS_CHAT, "Open the maintenance window?");
    // Sent to alice's queue for no one in particular (no target_humans): bob, an
    // approver of ops, answers as his Telegram id, and the answer goes to alice's queue.
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", bob());
    let response = parrot.next_response("alice").await;
    assert_is_human_response(&response, &a);
    assert_eq!(response["respondent"], BOB.to_string(), "{response}");
    assert_eq!(parrot.llen(&parrot.key("bob", "responses")).await, 0);

    // For alice and bob (both queues carry it): one message in the group, and bob's
    // answer goes to bob's queue.
    let b = for_people(
        guard_approval("Close the maintenance window?"),
        &["alice", "bob"],
    );
    parrot.send_interaction("alice", &b).await;
    parrot.send_interaction("bob", &b).await;
    wait_delivered(&app, &id_of(&b)).await;
    parrot
        .wait_for_len(&parrot.key("bob", "processing"), 0)
        .await;
    parrot.wait_for_len(&parrot.key("bob", "pending"), 0).await;
    let msg = message_with(&app, OPS_CHAT, "Close the maintenance window?");
    app.telegram
        .tap(OPS_CHAT, msg.message_id, "✅ Approve", bob());
    let second = parrot.next_response("bob").await;
    assert_is_human_response(&second, &b);
    assert_eq!(second["respondent"], "bob", "{second}");
    assert_eq!(app.telegram.messages_in(OPS_CHAT).len(), 2);
    assert_eq!(parrot.llen(&parrot.key("alice", "responses")).await, 0);
    ai_parrot_accepts(json!([
        {"interaction": a, "response": response},
        {"interaction": b, "response": second},
    ]))
    .await;
    parrot.clean().await;
}

/// A Redis server of the test's own on a free port, so that it can be stopped.
async fn own_redis(port: u16) -> Option<tokio::process::Child> {
    let child = tokio::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var("HITL_REQUIRE_REDIS").as_deref() != Ok("1"),
                "HITL_REQUIRE_REDIS=1 but redis-server cannot be started: {e}"
            );
            eprintln!("skipped: redis-server cannot be started ({e})");
            return None;
        }
    };
    let give_up = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < give_up, "redis-server did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Some(child)
}

#[tokio::test]
async fn the_bridge_reconnects_when_redis_comes_back() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let Some(mut server) = own_redis(port).await else {
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let mut parrot = Parrot {
        con: connect_to(&url).await,
        prefix: "hitl:cli_queue".to_owned(),
    };
    let app = TestApp::spawn_with_settings(|toml| {
        with_bridge(&parrot.prefix, None)(toml).replace(&redis_url(), &url)
    })
    .await;
    let a = guard_approval("Before the outage?");
    parrot.send_interaction("alice", &a).await;
    wait_delivered(&app, &id_of(&a)).await;

    // Redis goes away (and, without persistence, comes back empty).
    server.kill().await.expect("kill redis-server");
    let _ = server.wait().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let msg = message_with(&app, ALICE_CHAT, "Before the outage?");
    app.telegram
        .tap(ALICE_CHAT, msg.message_id, "✅ Approve", alice());
    app.telegram
        .wait_for_message(ALICE_CHAT, msg.message_id, "the outcome shown", |m| {
            !m.has_buttons()
        })
        .await;
    let _server = own_redis(port).await.expect("redis-server starts again");
    parrot.con = connect_to(&url).await;

    // The answer given while Redis was down arrives, and new questions are taken again.
    let response = parrot.next_response("alice").await;
    assert_eq!(response["interaction_id"], a["interaction_id"]);
    let b = guard_approval("After the outage?");
    parrot.send_interaction("alice", &b).await;
    wait_delivered(&app, &id_of(&b)).await;
}

async fn connect_to(url: &str) -> MultiplexedConnection {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(None);
    redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect to the test's own redis-server")
}

#[tokio::test]
async fn a_bridge_approval_says_the_agent_sent_no_parameters_and_discloses_the_agents_window() {
    let Some(mut parrot) = Parrot::connect("nocall").await else {
        return;
    };
    let settings = with_bridge(&parrot.prefix, None);
    let app = TestApp::spawn_with_settings(move |toml| {
        settings(toml).replace(
            "recipients = [\"alice\", \"bob\"]",
            "recipients = [\"alice\", \"bob\"]\nagent_window_seconds = 600",
        )
    })
    .await;
    let a = guard_approval("Wire the payment?");
    parrot.send_interaction("alice", &a).await;
    wait_delivered(&app, &id_of(&a)).await;
    let msg = message_with(&app, ALICE_CHAT, "Wire the payment?");
    let v = &msg.visible_text;
    assert!(v.contains("The agent sent no parameters"), "{v}");
    assert!(
        v.contains("Approving also lets identical calls through for 10 min"),
        "{v}"
    );
    // The agent's own window cannot be narrowed from here: no "Approve once" is offered.
    assert_eq!(
        msg.button_texts(),
        ["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );
    parrot.clean().await;
}

#[tokio::test]
async fn the_redis_bridge_never_asks_an_interaction_that_repeats_a_key() {
    let Some(mut parrot) = Parrot::connect("repeat").await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_bridge(&parrot.prefix, None)).await;
    // As AI-Parrot's `CLIDaemonHumanChannel` queues a question, twice: one that repeats a
    // key (a first-wins reader and a last-wins reader see different questions), then a
    // sound one, taken after it.
    let repeated = r#"{"interaction_id": "rep-1", "interaction_type": "approval",
        "question": "Restart the staging cache?", "question": "Drop the production database?"}"#;
    let sound = guard_approval("Renew the TLS certificate?");
    let pending = parrot.key("alice", "pending");
    parrot.lpush(&pending, repeated.as_bytes()).await;
    parrot.send_interaction("alice", &sound).await;
    wait_delivered(&app, &id_of(&sound)).await;

    let dead = parrot.lrange(&parrot.key("alice", "dead")).await;
    assert_eq!(dead, vec![repeated.as_bytes().to_vec()], "kept as it was");
    let (status, _) = record(&app, "rep-1").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "never stored");

    // The agent is told at once, on its responses list: refused, with the reason, as
    // the "no" of an approval, which AI-Parrot itself accepts for that question (as its
    // reader reads the item: the last of a repeated key).
    let refusal = parrot.next_response("alice").await;
    let as_read: Value = serde_json::from_str(repeated).unwrap();
    assert_is_human_response(&refusal, &as_read);
    assert_eq!(refusal["value"], false, "{refusal}");
    assert_eq!(refusal["respondent"], "alice", "{refusal}");
    assert_eq!(refusal["metadata"]["refused"], true, "{refusal}");
    let reason = refusal["metadata"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("refused by hitl-telegram and never asked")
            && reason.contains("question")
            && reason.contains("repeat"),
        "{reason}"
    );
    assert!(
        !reason.contains("Drop the production") && !reason.contains("Restart"),
        "the reason never quotes the item: {reason}"
    );
    ai_parrot_accepts(json!([{"interaction": as_read, "response": refusal}])).await;
    assert_eq!(
        parrot.llen(&parrot.key("alice", "responses")).await,
        0,
        "answered once"
    );
    let shown: Vec<String> = app
        .telegram
        .sent_messages()
        .into_iter()
        .map(|m| m.visible_text)
        .collect();
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert!(shown[0].contains("Renew the TLS certificate?"), "{shown:?}");
    parrot.clean().await;
}
