//! A minimal fake Bot API for the benchmarks, enforcing Telegram's flood limits.
//!
//! Not `tests/support/fake_telegram.rs`: that one records every request for assertions
//! and injects faults, which a run of 10,000 questions does not need, and it does not
//! enforce the flood limits, which B5 is about. This fake speaks just what the service
//! uses (long polling, `sendMessage`, `editMessageText`, callback answers) and:
//! - answers 429 with `retry_after` when a chat gets a second message within a second or
//!   the bot a 31st within a second overall (with 50 ms of slack for loopback scheduling
//!   jitter: gaps of 950 ms per chat, 30 messages per 950 ms overall), and counts them;
//! - plays the operator: [`Fake::tap`] queues a callback query for `getUpdates` and
//!   notes when `getUpdates` hands it to the service, so a bench can time a tap from
//!   the moment the service receives it.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::Json;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Gap below which a second message to one chat is refused.
const PER_CHAT_GAP: Duration = Duration::from_millis(950);
/// Window in which more than [`OVERALL_MAX`] messages are refused.
const OVERALL_WINDOW: Duration = Duration::from_millis(950);
const OVERALL_MAX: usize = 30;

/// A message the fake accepted.
#[derive(Clone, Debug)]
pub struct Sent {
    pub chat_id: i64,
    pub message_id: i32,
    pub text: String,
    /// The approve button's callback data (with the window, when one is offered).
    pub approve: Option<String>,
    pub at: Instant,
}

struct QueuedUpdate {
    id: i64,
    json: Value,
    tag: Option<usize>,
}

#[derive(Default)]
struct St {
    next_message_id: i32,
    next_update_id: i64,
    updates: VecDeque<QueuedUpdate>,
    /// When `getUpdates` handed the tap tagged `n` to the service.
    handed: HashMap<usize, Instant>,
    sent: Vec<Sent>,
    edits: u64,
    last_per_chat: HashMap<i64, Instant>,
    overall: VecDeque<Instant>,
    too_many: u64,
}

struct Inner {
    state: Mutex<St>,
    updates_ready: Notify,
    sent_ready: Notify,
}

#[derive(Clone)]
pub struct Fake {
    inner: Arc<Inner>,
    pub addr: SocketAddr,
}

impl Fake {
    pub async fn start() -> std::io::Result<Fake> {
        let inner = Arc::new(Inner {
            state: Mutex::new(St {
                next_message_id: 1,
                next_update_id: 1,
                ..St::default()
            }),
            updates_ready: Notify::new(),
            sent_ready: Notify::new(),
        });
        let app = Router::new()
            .route("/{bot}/{method}", axum::routing::post(method))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            // The fake lives as long as the load generator.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Fake { inner, addr })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn state(&self) -> MutexGuard<'_, St> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.state().sent.clone()
    }

    pub fn sent_count(&self) -> usize {
        self.state().sent.len()
    }

    pub fn too_many_requests(&self) -> u64 {
        self.state().too_many
    }

    pub fn handed_at(&self, tag: usize) -> Option<Instant> {
        self.state().handed.get(&tag).copied()
    }

    /// Waits until at least `n` messages were accepted, or `limit` passes.
    pub async fn wait_for_sent(&self, n: usize, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let notified = self.inner.sent_ready.notified();
            let have = self.sent_count();
            if have >= n {
                return have;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return self.sent_count();
            }
        }
    }

    /// The operator `user_id` taps the approve button of `message`.
    pub fn tap(&self, message: &Sent, user_id: i64, tag: usize) {
        let Some(data) = &message.approve else {
            return;
        };
        let mut st = self.state();
        let id = st.next_update_id;
        st.next_update_id += 1;
        let json = json!({
            "update_id": id,
            "callback_query": {
                "id": format!("q{id}"),
                "from": {"id": user_id, "is_bot": false, "first_name": "Operator"},
                "chat_instance": "bench",
                "message": message_json(message.chat_id, message.message_id, &message.text),
                "data": data,
            }
        });
        st.updates.push_back(QueuedUpdate {
            id,
            json,
            tag: Some(tag),
        });
        drop(st);
        self.inner.updates_ready.notify_waiters();
    }
}

fn chat_json(chat_id: i64) -> Value {
    if chat_id > 0 {
        json!({"id": chat_id, "type": "private", "first_name": "Operator"})
    } else {
        json!({"id": chat_id, "type": "supergroup", "title": "Bench"})
    }
}

fn message_json(chat_id: i64, message_id: i32, text: &str) -> Value {
    json!({
        "message_id": message_id,
        "date": 1_764_460_800,
        "chat": chat_json(chat_id),
        "from": {"id": 1, "is_bot": true, "first_name": "Bench", "username": "bench_bot"},
        "text": text,
    })
}

fn ok(result: Value) -> Json<Value> {
    Json(json!({"ok": true, "result": result}))
}

fn too_many(st: &mut St) -> Json<Value> {
    st.too_many += 1;
    Json(json!({
        "ok": false,
        "error_code": 429,
        "description": "Too Many Requests: retry after 1",
        "parameters": {"retry_after": 1},
    }))
}

/// Takes a flood-limit slot for a message to `chat_id`, or says it must wait.
fn take_slot(st: &mut St, chat_id: i64, now: Instant) -> bool {
    if let Some(last) = st.last_per_chat.get(&chat_id)
        && now.duration_since(*last) < PER_CHAT_GAP
    {
        return false;
    }
    while let Some(first) = st.overall.front() {
        if now.duration_since(*first) >= OVERALL_WINDOW {
            st.overall.pop_front();
        } else {
            break;
        }
    }
    if st.overall.len() >= OVERALL_MAX {
        return false;
    }
    st.last_per_chat.insert(chat_id, now);
    st.overall.push_back(now);
    true
}

async fn method(
    State(inner): State<Arc<Inner>>,
    Path((_bot, method)): Path<(String, String)>,
    body: Bytes,
) -> Json<Value> {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let lock = || inner.state.lock().unwrap_or_else(PoisonError::into_inner);
    match method.to_ascii_lowercase().as_str() {
        "getme" => ok(json!({
            "id": 1, "is_bot": true, "first_name": "Bench", "username": "bench_bot",
            "can_join_groups": true, "can_read_all_group_messages": false,
            "supports_inline_queries": false, "can_connect_to_business": false,
            "has_main_web_app": false,
        })),
        "getupdates" => {
            let offset = body["offset"].as_i64().unwrap_or(0);
            let limit = body["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
            let wait = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
            let deadline = Instant::now() + wait;
            loop {
                let notified = inner.updates_ready.notified();
                {
                    let mut st = lock();
                    while st.updates.front().is_some_and(|u| u.id < offset) {
                        st.updates.pop_front();
                    }
                    if !st.updates.is_empty() {
                        let now = Instant::now();
                        let picked: Vec<(Value, Option<usize>)> = st
                            .updates
                            .iter()
                            .take(limit)
                            .map(|u| (u.json.clone(), u.tag))
                            .collect();
                        let mut out = Vec::with_capacity(picked.len());
                        for (json, tag) in picked {
                            if let Some(tag) = tag {
                                st.handed.entry(tag).or_insert(now);
                            }
                            out.push(json);
                        }
                        return ok(Value::Array(out));
                    }
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return ok(json!([]));
                }
            }
        }
        "sendmessage" => {
            let chat_id = body["chat_id"].as_i64().unwrap_or(0);
            let text = body["text"].as_str().unwrap_or_default().to_owned();
            // The approve button: "Approve for <window>" (`w:`) when the question offers
            // a window (the benchmarks want it opened), else the first button.
            let buttons: Vec<String> = body["reply_markup"]["inline_keyboard"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_array)
                .flatten()
                .filter_map(|b| b["callback_data"].as_str().map(str::to_owned))
                .collect();
            let approve = buttons
                .iter()
                .find(|d| d.starts_with("w:"))
                .or(buttons.first())
                .cloned();
            let mut st = lock();
            let now = Instant::now();
            if !take_slot(&mut st, chat_id, now) {
                return too_many(&mut st);
            }
            let message_id = st.next_message_id;
            st.next_message_id += 1;
            st.sent.push(Sent {
                chat_id,
                message_id,
                text: text.clone(),
                approve,
                at: now,
            });
            drop(st);
            inner.sent_ready.notify_waiters();
            ok(message_json(chat_id, message_id, &text))
        }
        "editmessagetext" => {
            let chat_id = body["chat_id"].as_i64().unwrap_or(0);
            let message_id = body["message_id"].as_i64().unwrap_or(0) as i32;
            let text = body["text"].as_str().unwrap_or_default();
            let mut st = lock();
            if !take_slot(&mut st, chat_id, Instant::now()) {
                return too_many(&mut st);
            }
            st.edits += 1;
            ok(message_json(chat_id, message_id, text))
        }
        // answerCallbackQuery, editMessageReplyMarkup, deleteWebhook, setMyCommands...
        _ => ok(json!(true)),
    }
}
