//! A fake Telegram Bot API server for integration tests.
//!
//! The machines that run our tests have no internet, and the real API could not be
//! driven from a test anyway (nobody is there to tap Approve). [`FakeTelegram`]
//! starts a small axum server on `127.0.0.1:0` that speaks the part of the Bot API
//! our bot uses through teloxide 0.17 (long polling, `sendMessage`, edits,
//! callback answers) with the JSON shapes the real service returns, records every
//! request, and lets a test play the operator: tap a button, type a message, or
//! make the next call fail the way Telegram does.
//!
//! `sendMessage` takes an inline keyboard or a ForceReply as `reply_markup` (the
//! latter is recorded as [`SentMessage::force_reply`], since Telegram does not echo
//! it); the operator answers one with [`FakeTelegram::send_reply`]. A private chat
//! (positive id) can be closed to the bot with [`FakeTelegram::forbid_private_chat`],
//! as Telegram does for a user who never started it.
//!
//! ```ignore
//! let telegram = FakeTelegram::start().await;
//! let bot = Bot::with_client(telegram.token(), client).set_api_url(telegram.api_url().parse()?);
//! // ... the app sends its question ...
//! let question = telegram.wait_for_messages(1).await.remove(0);
//! let query = telegram.tap(question.chat_id, question.message_id, "Approve", &alice);
//! telegram.wait_for_callback_answer(&query).await;
//! ```
//!
//! Webhooks work as in Telegram: `setWebhook` (multipart, as teloxide sends it) records
//! the url, `secret_token` and `allowed_updates` ([`FakeTelegram::webhook`]); while one
//! is set `getUpdates` answers 409 `Conflict: can't use getUpdates method while webhook
//! is active; ...`, and every update a test injects (`tap`, `send_reply`, ...) is POSTed
//! to the url with the `X-Telegram-Bot-Api-Secret-Token` header, filtered by
//! `allowed_updates`, in order, and retried while the bot answers non-2xx or cannot be
//! reached. Updates injected before the webhook was set wait in the queue and are pushed
//! once it is. `deleteWebhook` turns this off and `getUpdates` works again, with whatever
//! was not delivered yet. [`FakeTelegram::webhook_deliveries`] lists every attempt.
//!
//! Faults are either queued for the next calls of a method (`fail_next`,
//! `fail_next_with_retry_after`, `fail_next_with_migrate`, `delay_next`, `drop_next`,
//! `drop_after_processing_next`) or drawn at random by a seeded [`FakeTelegram::chaos`].
//! A dropped call gets no HTTP answer at all: the fake closes the connection, which
//! reqwest (and so teloxide) reports as a network error.
//!
//! Every `wait_for_*` gives up after [`DEFAULT_WAIT_TIMEOUT`] (see
//! [`FakeTelegram::set_wait_timeout`]) and panics with a summary of everything the
//! fake received, so a test fails with a reason instead of hanging. The server
//! stops when the `FakeTelegram` is dropped.
//!
//! Where the fake knowingly differs from Telegram:
//! - Message text is returned with HTML markup removed (as Telegram does) but
//!   without `entities`; MarkdownV2 text is not parsed at all.
//! - Unknown methods answer `Not Found: method not found` (Telegram says only
//!   `Not Found`, which teloxide reports as `InvalidToken`, a misleading test failure).
//! - Only one chat per id, typed by sign: negative ids are supergroups, positive
//!   ids private chats. No 409 for a second poller (`overlapping_polls` counts them
//!   instead), no inline messages.
//! - Webhook deliveries go one at a time, in order, unless a test allows more with
//!   `set_webhook_connections` (Telegram may run up to
//!   `max_connections` in parallel), and a failing one is retried every 20 to 500 ms
//!   (Telegram waits longer); `max_connections`, `ip_address` and certificates are
//!   ignored.
//! - `reply_markup` other than an inline keyboard or a ForceReply (reply keyboards,
//!   `remove_keyboard`) is refused with 400, which Telegram would accept: our bot
//!   has no use for them. The bot's own `sendMessage` keeps `reply_parameters.message_id`
//!   ([`SentMessage::reply_to`]; a missing message is refused unless
//!   `allow_sending_without_reply`) and `message_thread_id` ([`SentMessage::thread_id`]);
//!   [`FakeTelegram::delete_topic`] makes a topic answer `message thread not found`.
//!   Topics are not otherwise modelled (no `createForumTopic`, no General topic rules).

// Each integration-test executable compiles this module and uses only part of it.
#![allow(dead_code)]

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt::Write as _,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use axum::{
    Json, Router,
    body::Bytes,
    extract::{ConnectInfo, Path, State as AxumState, connect_info::Connected},
    http::{HeaderMap, StatusCode, header::CONTENT_TYPE},
    response::{IntoResponse, Response},
    routing::any,
    serve::{IncomingStream, Listener},
};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::{Map, Value, json};
pub use teloxide::types::CallbackQueryId;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
    time::Instant,
};

/// Token used by [`FakeTelegram::start`]. Shaped like a real one (`<bot id>:<secret>`)
/// because the bot's user id is read from the part before the colon.
pub const DEFAULT_TOKEN: &str = "7000000001:AAFakeTokenForHitlTelegramTests000000";
/// The bot's `first_name`, as `getMe` and every sent message report it.
pub const BOT_FIRST_NAME: &str = "HITL Test Bot";
/// The bot's `username`; teloxide needs one (`Me::username` panics without it).
pub const BOT_USERNAME: &str = "hitl_test_bot";
/// How long every `wait_for_*` waits before it panics, unless changed per fake.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Telegram rejects answers to a callback query after roughly this long
/// ("query is too old"); the fake does the same so "answer first" stays tested.
const CALLBACK_ANSWER_WINDOW: Duration = Duration::from_secs(15);
/// Telegram's own cap on a long poll's `timeout`.
const MAX_POLL_TIMEOUT_SECS: i64 = 50;
/// Limits Telegram enforces that teloxide does not check client-side.
const MAX_TEXT_UTF16: usize = 4096;
const MAX_CALLBACK_DATA_BYTES: usize = 64;
/// Real update ids are large and sequential; teloxide stores them as `u32`.
const FIRST_UPDATE_ID: i64 = 100_000_001;
/// Bot id used when the token does not start with a number.
const FALLBACK_BOT_ID: i64 = 7_000_000_001;
/// Update kinds Telegram sends when `allowed_updates` is empty or was never given.
const DEFAULT_EXCLUDED_UPDATES: &[&str] =
    &["chat_member", "message_reaction", "message_reaction_count"];

/// A Telegram user, as a test hands it to [`FakeTelegram::tap`] and friends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgUser {
    pub id: u64,
    pub first_name: String,
    pub last_name: Option<String>,
    pub username: Option<String>,
    /// Telegram's `is_bot`: the message or tap comes from another bot.
    pub is_bot: bool,
}

impl TgUser {
    pub fn new(id: u64, first_name: impl Into<String>) -> Self {
        Self {
            id,
            first_name: first_name.into(),
            last_name: None,
            username: None,
            is_bot: false,
        }
    }

    /// The same account flagged as a bot, as Telegram flags bots' messages and taps.
    pub fn bot(mut self) -> Self {
        self.is_bot = true;
        self
    }

    pub fn username(mut self, username: impl Into<String>) -> Self {
        self.username = Some(username.into());
        self
    }

    pub fn last_name(mut self, last_name: impl Into<String>) -> Self {
        self.last_name = Some(last_name.into());
        self
    }

    fn to_json(&self) -> Value {
        let mut user =
            json!({ "id": self.id, "is_bot": self.is_bot, "first_name": self.first_name });
        insert_some(&mut user, "last_name", self.last_name.clone());
        insert_some(&mut user, "username", self.username.clone());
        user
    }
}

/// Lets tests pass either `&alice` or an owned user.
impl From<&TgUser> for TgUser {
    fn from(user: &TgUser) -> Self {
        user.clone()
    }
}

/// One inline keyboard button as the bot last set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Button {
    pub text: String,
    pub callback_data: Option<String>,
    pub url: Option<String>,
    /// A `web_app` button's URL (a Mini App opened in the chat).
    pub web_app: Option<String>,
}

/// Which button [`FakeTelegram::tap`] presses: its exact text, or its position
/// counting left to right, top to bottom from 0.
#[derive(Clone, Debug)]
pub enum ButtonRef {
    Text(String),
    Index(usize),
}

impl std::fmt::Display for ButtonRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text(text) => write!(f, "button {text:?}"),
            Self::Index(index) => write!(f, "button #{index}"),
        }
    }
}

impl From<&str> for ButtonRef {
    fn from(text: &str) -> Self {
        Self::Text(text.to_owned())
    }
}

impl From<String> for ButtonRef {
    fn from(text: String) -> Self {
        Self::Text(text)
    }
}

impl From<usize> for ButtonRef {
    fn from(index: usize) -> Self {
        Self::Index(index)
    }
}

/// A message as it stands now, after any edits.
#[derive(Clone, Debug)]
pub struct SentMessage {
    pub chat_id: i64,
    pub message_id: i32,
    /// The text exactly as the bot sent it, HTML tags and escapes included.
    pub text: String,
    /// What the operator sees: `text` with HTML markup removed and escapes decoded.
    pub visible_text: String,
    pub parse_mode: Option<String>,
    /// The inline keyboard by rows; empty once the keyboard was removed.
    pub buttons: Vec<Vec<Button>>,
    /// How many edits (text or keyboard) Telegram accepted for this message.
    pub edits: u32,
    /// False for messages a test typed with [`FakeTelegram::send_text_message`].
    pub from_bot: bool,
    /// Sent with a ForceReply `reply_markup`. Telegram does not echo a ForceReply in
    /// the `Message` and edits cannot change it, so this stays as sent.
    pub force_reply: bool,
    /// The message of the same chat it replies to (`reply_parameters.message_id` for the
    /// bot's own).
    pub reply_to: Option<i32>,
    /// The forum topic it went to (`message_thread_id`).
    pub thread_id: Option<i32>,
    /// Its ForceReply was `selective`.
    pub selective: bool,
}

impl SentMessage {
    pub fn button_texts(&self) -> Vec<&str> {
        self.buttons
            .iter()
            .flatten()
            .map(|button| button.text.as_str())
            .collect()
    }

    pub fn has_buttons(&self) -> bool {
        self.buttons.iter().any(|row| !row.is_empty())
    }
}

/// A file the bot sent with `sendDocument`, as the operator would download it.
#[derive(Clone, Debug)]
pub struct SentDocument {
    pub chat_id: i64,
    pub message_id: i32,
    /// The message it replies to (`reply_parameters.message_id`).
    pub reply_to: Option<i32>,
    pub file_name: Option<String>,
    /// The file's bytes (as text: the bot sends JSON).
    pub content: String,
    pub caption: Option<String>,
}

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The method name lowercased (`sendmessage`), since clients differ in case.
    pub method: String,
    /// The JSON body, or `{"unparsed_body": "..."}` when it was not JSON (multipart).
    pub body: Value,
    /// On tokio's clock, the one the waits and `tokio::time` in tests use.
    pub at: Instant,
    /// False when the URL carried another token; such requests got a 401.
    pub authorized: bool,
}

/// An `answerCallbackQuery` the fake accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackAnswer {
    pub query_id: CallbackQueryId,
    pub text: Option<String>,
    pub show_alert: bool,
    pub url: Option<String>,
}

/// A fake Telegram Bot API on a loopback port; see the module docs.
pub struct FakeTelegram {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
    /// Pushes updates to the webhook while one is set.
    pusher: JoinHandle<()>,
}

impl FakeTelegram {
    /// Starts a fake that accepts [`DEFAULT_TOKEN`].
    pub async fn start() -> Self {
        Self::start_with_token(DEFAULT_TOKEN).await
    }

    /// Starts a fake that accepts only `token`; others get Telegram's 401.
    pub async fn start_with_token(token: impl Into<String>) -> Self {
        let token = token.into();
        let bot_id = token
            .split(':')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or(FALLBACK_BOT_ID);
        let (changes, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            token,
            state: Mutex::new(State::new(bot_id)),
            changes,
        });

        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("fake Telegram: could not bind a loopback port");
        let addr = listener
            .local_addr()
            .expect("fake Telegram: bound socket has no address");
        let app = Router::new()
            .route("/{bot_token}/{method}", any(handle_method))
            .fallback(|| async { ApiFailure::new(404, "Not Found").into_response() })
            .with_state(Arc::clone(&shared))
            .into_make_service_with_connect_info::<Connection>();
        let listener = CuttableListener(listener);
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                eprintln!("fake Telegram: server stopped: {error}");
            }
        });
        let pusher = tokio::spawn(push_to_webhook(Arc::clone(&shared)));
        Self {
            addr,
            shared,
            server,
            pusher,
        }
    }

    /// Base URL for `Bot::set_api_url`, like `http://127.0.0.1:PORT` (no trailing path).
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The bot's user id (read from the token), as `getMe` reports it.
    pub fn bot_id(&self) -> i64 {
        self.shared.lock().bot_id
    }

    /// Changes how long every later `wait_for_*` on this fake waits.
    pub fn set_wait_timeout(&self, timeout: Duration) {
        self.shared.lock().wait_timeout = timeout;
    }

    // ----- What the bot did -------------------------------------------------------

    /// Authorized requests for `method` (any case), oldest first.
    pub fn requests(&self, method: &str) -> Vec<RecordedRequest> {
        let method = method.to_ascii_lowercase();
        let state = self.shared.lock();
        state
            .requests
            .iter()
            .filter(|r| r.authorized && r.method == method)
            .cloned()
            .collect()
    }

    /// Every request, including unauthorized ones and unknown methods, oldest first.
    pub fn all_requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().requests.clone()
    }

    /// Waits until at least `n` authorized requests for `method` arrived.
    pub async fn wait_for_requests(&self, method: &str, n: usize) -> Vec<RecordedRequest> {
        let lowered = method.to_ascii_lowercase();
        self.wait_until(format!("{n} {method} request(s)"), |state| {
            let found: Vec<_> = state
                .requests
                .iter()
                .filter(|r| r.authorized && r.method == lowered)
                .cloned()
                .collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }

    /// The commands the bot last registered with `setMyCommands`, as (command,
    /// description) pairs; empty if it never did.
    pub fn my_commands(&self) -> Vec<(String, String)> {
        let Some(last) = self.requests("setMyCommands").pop() else {
            return Vec::new();
        };
        let commands = match &last.body["commands"] {
            Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            value => value.clone(),
        };
        commands
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let field = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                (field("command"), field("description"))
            })
            .collect()
    }

    /// Messages the bot sent, in the order it sent them, as they stand now.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        let state = self.shared.lock();
        state
            .messages
            .iter()
            .filter(|m| m.is_from_bot())
            .map(StoredMessage::snapshot)
            .collect()
    }

    /// Waits until the bot has sent at least `n` messages and returns them all.
    pub async fn wait_for_messages(&self, n: usize) -> Vec<SentMessage> {
        self.wait_until(format!("{n} sent message(s)"), |state| {
            let sent: Vec<_> = state
                .messages
                .iter()
                .filter(|m| m.is_from_bot())
                .map(StoredMessage::snapshot)
                .collect();
            (sent.len() >= n).then_some(sent)
        })
        .await
    }

    /// Messages the bot sent in `chat_id`, in the order it sent them, as they stand now.
    pub fn messages_in(&self, chat_id: i64) -> Vec<SentMessage> {
        self.shared.lock().bot_messages_in(chat_id)
    }

    /// Every file the bot sent in `chat_id`, in order.
    pub fn documents_in(&self, chat_id: i64) -> Vec<SentDocument> {
        let state = self.shared.lock();
        state
            .documents
            .iter()
            .filter(|d| d.chat_id == chat_id)
            .cloned()
            .collect()
    }

    /// Waits until the bot has sent a file replying to `message_id` in `chat_id`.
    pub async fn wait_for_document(&self, chat_id: i64, message_id: i32) -> SentDocument {
        self.wait_until(
            format!("a document replying to message {message_id} in chat {chat_id}"),
            |state| {
                state
                    .documents
                    .iter()
                    .find(|d| d.chat_id == chat_id && d.reply_to == Some(message_id))
                    .cloned()
            },
        )
        .await
    }

    /// Waits until the bot has sent at least `n` messages in `chat_id` and returns
    /// them all (in that chat only).
    pub async fn wait_for_message_in(&self, chat_id: i64, n: usize) -> Vec<SentMessage> {
        self.wait_until(format!("{n} sent message(s) in chat {chat_id}"), |state| {
            let sent = state.bot_messages_in(chat_id);
            (sent.len() >= n).then_some(sent)
        })
        .await
    }

    /// The current state of a message; panics if there is none.
    #[track_caller]
    pub fn message(&self, chat_id: i64, message_id: i32) -> SentMessage {
        let state = self.shared.lock();
        match state.find(chat_id, message_id) {
            Some(message) => message.snapshot(),
            None => {
                let summary = state.describe();
                drop(state);
                panic!("fake Telegram: no message {message_id} in chat {chat_id}\n{summary}")
            }
        }
    }

    /// Waits until a message's text contains `needle`, either as sent (markup
    /// included) or as the operator sees it.
    pub async fn wait_for_message_text_containing(
        &self,
        chat_id: i64,
        message_id: i32,
        needle: &str,
    ) -> SentMessage {
        let what = format!("message {message_id} in chat {chat_id} to contain {needle:?}");
        self.wait_for_message(chat_id, message_id, what, |m| {
            m.text.contains(needle) || m.visible_text.contains(needle)
        })
        .await
    }

    /// Waits until a message satisfies `condition`, e.g. `|m| !m.has_buttons()`;
    /// `what` describes the condition in the panic message.
    pub async fn wait_for_message(
        &self,
        chat_id: i64,
        message_id: i32,
        what: impl Into<String>,
        condition: impl Fn(&SentMessage) -> bool,
    ) -> SentMessage {
        self.wait_until(what.into(), |state| {
            let message = state.find(chat_id, message_id)?.snapshot();
            condition(&message).then_some(message)
        })
        .await
    }

    /// Callback answers the fake accepted, oldest first.
    pub fn callback_answers(&self) -> Vec<CallbackAnswer> {
        self.shared.lock().callback_answers.clone()
    }

    /// Waits until the bot answered the callback query `query_id`.
    pub async fn wait_for_callback_answer(&self, query_id: &CallbackQueryId) -> CallbackAnswer {
        self.wait_until(format!("an answer to callback query {query_id}"), |state| {
            state
                .callback_answers
                .iter()
                .find(|a| &a.query_id == query_id)
                .cloned()
        })
        .await
    }

    /// From now on refuses (429, `retry_after` 1) a `sendMessage`, `sendDocument` or
    /// message edit to a chat less than `min` after the previous one to that chat: the
    /// bot's per-chat limit, whoever sends for it.
    pub fn enforce_chat_interval(&self, min: Duration) {
        self.shared.mutate(|state| state.chat_interval = Some(min));
    }

    /// The writes [`Self::enforce_chat_interval`] refused: (method, chat).
    pub fn flood_refusals(&self) -> Vec<(String, i64)> {
        self.shared.lock().flood_refusals.clone()
    }

    /// How many `getUpdates` calls began while another was still being answered: two
    /// pollers of one bot token (Telegram would answer one of them 409). A poll whose
    /// caller died counts as open until its long-poll timeout ends.
    pub fn overlapping_polls(&self) -> usize {
        self.shared.lock().overlapping_polls
    }

    /// Updates queued but not yet confirmed by a `getUpdates` with a higher offset.
    pub fn pending_updates(&self) -> usize {
        self.shared.lock().updates.len()
    }

    /// The webhook set now, if any.
    pub fn webhook(&self) -> Option<Webhook> {
        self.shared.lock().webhook.clone()
    }

    /// Waits until the webhook is set to `url` and returns it.
    pub async fn wait_for_webhook(&self, url: &str) -> Webhook {
        self.wait_until(format!("the webhook to be set to {url}"), |state| {
            state.webhook.clone().filter(|w| w.url == url)
        })
        .await
    }

    /// Sets a webhook as if some earlier deployment had called `setWebhook`.
    pub fn set_webhook(&self, url: &str, secret_token: Option<&str>) {
        self.shared.mutate(|state| {
            state.webhook = Some(Webhook {
                url: url.to_owned(),
                secret_token: secret_token.map(str::to_owned),
                allowed_updates: None,
            });
        });
    }

    /// Every attempt to POST an update to the webhook, oldest first.
    pub fn webhook_deliveries(&self) -> Vec<WebhookDelivery> {
        self.shared.lock().webhook_deliveries.clone()
    }

    // ----- Playing the operator ----------------------------------------------------

    /// Taps a button of a message as `user` and returns the callback query id.
    /// Panics if the message or the button does not exist, since a real user
    /// could not tap it either; use [`Self::tap_with_data`] for forged data.
    #[track_caller]
    pub fn tap(
        &self,
        chat_id: i64,
        message_id: i32,
        button: impl Into<ButtonRef>,
        user: impl Into<TgUser>,
    ) -> CallbackQueryId {
        let button = button.into();
        let user = user.into();
        let queued: Result<_, String> = self.shared.mutate(|state| {
            let message = state
                .find(chat_id, message_id)
                .ok_or_else(|| format!("no message {message_id} in chat {chat_id}"))?;
            let data = message.callback_data_of(&button)?;
            Ok(state.queue_callback_query(chat_id, message_id, data, user))
        });
        match queued {
            Ok(query_id) => query_id,
            Err(reason) => self.fail(&format!("cannot tap {button}: {reason}")),
        }
    }

    /// Queues a callback query with arbitrary `data` on an existing message, as a
    /// modified client could send it.
    #[track_caller]
    pub fn tap_with_data(
        &self,
        chat_id: i64,
        message_id: i32,
        data: &str,
        user: impl Into<TgUser>,
    ) -> CallbackQueryId {
        let user = user.into();
        let queued = self.shared.mutate(|state| {
            state.find(chat_id, message_id)?;
            Some(state.queue_callback_query(chat_id, message_id, data.to_owned(), user))
        });
        match queued {
            Some(query_id) => query_id,
            None => self.fail(&format!(
                "cannot tap: no message {message_id} in chat {chat_id}"
            )),
        }
    }

    /// Queues a text message from `user` in `chat_id` and returns its message id.
    /// Commands (`/start`) carry a `bot_command` entity, as Telegram sends them.
    /// A message in the user's own private chat (`chat_id == user.id`) also lifts
    /// [`Self::forbid_private_chat`], as writing to a bot starts it.
    pub fn send_text_message(&self, chat_id: i64, user: impl Into<TgUser>, text: &str) -> i32 {
        let user = user.into();
        self.shared
            .mutate(|state| state.queue_text_message(chat_id, user, text, None, None))
            .expect("a message that replies to nothing is always queued")
    }

    /// Queues a text message from `user` in forum topic `thread_id` of `chat_id` (a
    /// topic message: `message_thread_id` and `is_topic_message`), and returns its id.
    pub fn send_topic_message(
        &self,
        chat_id: i64,
        thread_id: i32,
        user: impl Into<TgUser>,
        text: &str,
    ) -> i32 {
        let user = user.into();
        self.shared
            .mutate(|state| state.queue_text_message(chat_id, user, text, None, Some(thread_id)))
            .expect("a message that replies to nothing is always queued")
    }

    /// Queues a text message from `user` in `chat_id` that replies to message
    /// `reply_to_message_id` of that chat (bot's or user's), and returns its id. The
    /// update carries the replied-to message in `reply_to_message`, as it stands now,
    /// the way Telegram sends the answer to a ForceReply. Panics if there is no such
    /// message; otherwise as [`Self::send_text_message`].
    #[track_caller]
    pub fn send_reply(
        &self,
        chat_id: i64,
        user: impl Into<TgUser>,
        text: &str,
        reply_to_message_id: i32,
    ) -> i32 {
        let user = user.into();
        let queued = self.shared.mutate(|state| {
            state.queue_text_message(chat_id, user, text, Some(reply_to_message_id), None)
        });
        match queued {
            Some(message_id) => message_id,
            None => self.fail(&format!(
                "cannot reply: no message {reply_to_message_id} in chat {chat_id}"
            )),
        }
    }

    /// Puts the bot in the group `chat_id` with `members` (user ids) for `getChat` and
    /// `getChatMember`; called again, replaces the members. A group never named here is
    /// one the bot is not in: both answer `Bad Request: chat not found`, as Telegram
    /// does. (Sending is not affected: `sendMessage` reaches any chat.) A private chat
    /// is found unless [`Self::forbid_private_chat`] says its user never started the
    /// bot.
    pub fn set_chat_members(&self, chat_id: i64, members: &[u64]) {
        self.shared.mutate(|state| {
            state
                .chat_members
                .insert(chat_id, members.iter().copied().collect())
        });
    }

    /// From now on `sendMessage` to the private chat of `user_id` fails with 403
    /// `Forbidden: bot can't initiate conversation with a user`, Telegram's answer
    /// when the user never started the bot. Lifted when that user sends a message
    /// in their private chat ([`Self::send_text_message`] or [`Self::send_reply`]).
    /// teloxide 0.17 reports this text as `ApiError::Unknown`: its
    /// `CantInitiateConversation` expects an older `Unauthorized: ...` wording.
    pub fn forbid_private_chat(&self, user_id: u64) {
        self.shared
            .mutate(|state| state.forbidden_private_chats.insert(user_id));
    }

    /// Deletes the forum topic `thread_id` of `chat_id`: sending to it fails from now on
    /// with `Bad Request: message thread not found`, as Telegram answers.
    pub fn delete_topic(&self, chat_id: i64, thread_id: i32) {
        self.shared
            .mutate(|state| state.deleted_topics.insert((chat_id, thread_id)));
    }

    // ----- Faults ------------------------------------------------------------------

    /// Makes the next `n` calls of `method` fail with `error_code` and `description`,
    /// e.g. `(403, "Forbidden: bot was blocked by the user")`. The description picks
    /// teloxide's `ApiError` variant. A 5xx makes teloxide sleep 10 s first.
    pub fn fail_next(&self, method: &str, n: usize, error_code: u16, description: &str) {
        let failure = ApiFailure::new(error_code, description);
        self.push_faults(method, n, Fault::Fail(failure));
    }

    /// Makes the next `n` calls of `method` fail with 429 and `retry_after = secs`,
    /// which teloxide turns into `RequestError::RetryAfter`.
    pub fn fail_next_with_retry_after(&self, method: &str, n: usize, secs: u32) {
        let failure = ApiFailure::too_many_requests(secs);
        self.push_faults(method, n, Fault::Fail(failure));
    }

    /// Carries out the next `n` calls of `method` but answers only after `delay`,
    /// for client timeouts where Telegram did act (a sent message that looks lost).
    pub fn delay_next(&self, method: &str, n: usize, delay: Duration) {
        self.push_faults(method, n, Fault::Delay(delay));
    }

    /// Makes the next `n` calls of `method` fail the way Telegram refuses a group that
    /// became a supergroup: 400 with `parameters.migrate_to_chat_id`, which teloxide
    /// turns into `RequestError::MigrateToChatId`. Nothing is carried out.
    pub fn fail_next_with_migrate(&self, method: &str, n: usize, new_chat_id: i64) {
        let mut failure = ApiFailure::bad_request("group chat was upgraded to a supergroup chat");
        failure.migrate_to = Some(new_chat_id);
        self.push_faults(method, n, Fault::Fail(failure));
    }

    /// Takes the next `n` calls of `method` and closes the connection without any HTTP
    /// answer, before doing anything: a network error for the client, nothing happened.
    pub fn drop_next(&self, method: &str, n: usize) {
        self.push_faults(method, n, Fault::Drop { carry_out: false });
    }

    /// Carries out the next `n` calls of `method` (a message is stored, an edit
    /// applied), then closes the connection without an answer: Telegram's "timed out
    /// but delivered", which a client cannot tell from a call that never arrived.
    pub fn drop_after_processing_next(&self, method: &str, n: usize) {
        self.push_faults(method, n, Fault::Drop { carry_out: true });
    }

    /// Holds back every update queued from now on until [`Self::release_updates`], so
    /// that they reach the bot together: in one `getUpdates` batch, or (with
    /// [`Self::set_webhook_connections`]) as concurrent webhook POSTs.
    pub fn hold_updates(&self) {
        self.shared.mutate(|state| state.held = true);
    }

    pub fn release_updates(&self) {
        self.shared.mutate(|state| state.held = false);
    }

    /// Telegram goes out of reach: from now until [`Self::come_back`], every call (of any
    /// method) is taken and its connection closed without an answer, nothing carried out.
    /// Webhook updates are not pushed meanwhile either.
    pub fn go_down(&self) {
        self.shared.mutate(|state| state.down = true);
    }

    /// Telegram answers again after [`Self::go_down`].
    pub fn come_back(&self) {
        self.shared.mutate(|state| state.down = false);
    }

    /// Lets up to `n` webhook POSTs run at once, as Telegram's `max_connections` does.
    pub fn set_webhook_connections(&self, n: usize) {
        self.shared
            .mutate(|state| state.webhook_connections = n.max(1));
    }

    /// Sends the webhook's updates to `urls` in turn (by `update_id`) rather than to the
    /// url set, as a load balancer in front of several replicas would: an update that
    /// failed is retried on the next url. The secret token is the webhook's.
    pub fn balance_webhook(&self, urls: &[String]) {
        let urls = urls.to_vec();
        self.shared.mutate(|state| state.balanced = urls);
    }

    /// Makes a random `share` (0 to 1) of the calls of each of `methods` fail, one of:
    /// a 429 with `retry_after` 1, an answer held back 1 to 2 s (the call is carried
    /// out), or a connection dropped before anything was done. Never a 5xx, on which
    /// teloxide sleeps 10 s. Each method draws from its own generator seeded with `seed`,
    /// so the n-th call of a method meets the same fate in every run, whatever the
    /// interleaving with other methods. Faults queued with the `*_next` methods come
    /// first. Calling again replaces the share for the methods named.
    pub fn chaos(&self, methods: &[&str], share: f64, seed: u64) {
        let share = share.clamp(0.0, 1.0);
        self.shared.mutate(|state| {
            for method in methods {
                let method = method.to_ascii_lowercase();
                let rng = StdRng::seed_from_u64(seed ^ fnv1a(&method));
                state.chaos.insert(method, Chaos { share, rng });
            }
        });
    }

    /// The faults chaos injected so far: (method lowercased, "429" | "delay" | "drop").
    pub fn injected_faults(&self) -> Vec<(String, &'static str)> {
        self.shared.lock().injected.clone()
    }

    fn push_faults(&self, method: &str, n: usize, fault: Fault) {
        let method = method.to_ascii_lowercase();
        self.shared.mutate(|state| {
            let queue = state.faults.entry(method).or_default();
            queue.extend(std::iter::repeat_n(fault, n));
        });
    }

    /// Waits until `check` finds what it looks for, re-checking after every change.
    async fn wait_until<T>(&self, what: String, mut check: impl FnMut(&State) -> Option<T>) -> T {
        // Subscribing before the first check means no change can slip in between.
        let mut changes = self.shared.changes.subscribe();
        let timeout = self.shared.lock().wait_timeout;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = check(&self.shared.lock()) {
                return found;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => continue,
                // Timed out (or, impossibly, the sender is gone): one last look, then fail.
                Ok(Err(_)) | Err(_) => {
                    if let Some(found) = check(&self.shared.lock()) {
                        return found;
                    }
                    self.fail(&format!("timed out after {timeout:?} waiting for {what}"));
                }
            }
        }
    }

    #[track_caller]
    fn fail(&self, reason: &str) -> ! {
        let summary = self.shared.lock().describe();
        panic!("fake Telegram: {reason}\n{summary}")
    }
}

impl Drop for FakeTelegram {
    fn drop(&mut self) {
        // Held long polls live in connection tasks the abort does not reach; the
        // flag lets them return at once instead of running out their timeout.
        self.shared.mutate(|state| state.shut_down = true);
        self.server.abort();
        self.pusher.abort();
    }
}

// ----- Shared state ----------------------------------------------------------------

struct Shared {
    token: String,
    state: Mutex<State>,
    /// Bumped after every change, so long polls and test waits wake up at once
    /// instead of sleeping and re-checking.
    changes: watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked mid-update must not turn every later call into a
        // second, confusing panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mutate<R>(&self, change: impl FnOnce(&mut State) -> R) -> R {
        let result = change(&mut self.lock());
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
        result
    }
}

#[derive(Clone, Debug)]
enum Fault {
    Fail(ApiFailure),
    Delay(Duration),
    /// Close the connection without an answer, after carrying the call out or not.
    Drop {
        carry_out: bool,
    },
}

/// Random faults for one method; see [`FakeTelegram::chaos`].
struct Chaos {
    share: f64,
    rng: StdRng,
}

impl Chaos {
    fn draw(&mut self) -> Option<(Fault, &'static str)> {
        if !self.rng.random_bool(self.share) {
            return None;
        }
        Some(match self.rng.random_range(0..3) {
            0 => (Fault::Fail(ApiFailure::too_many_requests(1)), "429"),
            1 => {
                let delay = Duration::from_millis(self.rng.random_range(1000..=2000));
                (Fault::Delay(delay), "delay")
            }
            _ => (Fault::Drop { carry_out: false }, "drop"),
        })
    }
}

/// A stable hash of a method name, to give each method its own chaos generator.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

struct State {
    bot_id: i64,
    wait_timeout: Duration,
    shut_down: bool,
    requests: Vec<RecordedRequest>,
    /// Messages in creation order; tests hold few, so lookups scan.
    messages: Vec<StoredMessage>,
    /// Telegram numbers messages per chat, shared by the bot and the users.
    last_message_id: HashMap<i64, i32>,
    /// Users whose private chat the bot may not write to; see `forbid_private_chat`.
    forbidden_private_chats: HashSet<u64>,
    /// Forum topics (chat, `message_thread_id`) deleted; see `delete_topic`.
    deleted_topics: HashSet<(i64, i32)>,
    /// Names of users seen in taps and messages, to fill in private chats.
    users: HashMap<u64, TgUser>,
    /// Groups the bot is in, with their (other) members; see `set_chat_members`.
    /// Only `getChat` and `getChatMember` read it.
    chat_members: HashMap<i64, HashSet<u64>>,
    /// Updates not yet confirmed by a `getUpdates` offset.
    updates: VecDeque<QueuedUpdate>,
    next_update_id: i64,
    /// Telegram remembers the last non-empty `allowed_updates` across calls.
    allowed_updates: Option<Vec<String>>,
    queries: HashMap<String, IssuedQuery>,
    next_query_number: u64,
    callback_answers: Vec<CallbackAnswer>,
    faults: HashMap<String, VecDeque<Fault>>,
    chaos: HashMap<String, Chaos>,
    /// What chaos injected, in order: (method, kind).
    injected: Vec<(String, &'static str)>,
    /// With [`FakeTelegram::enforce_chat_interval`]: the least time between two writes
    /// to one chat, each chat's last write, and the writes refused for coming too soon.
    chat_interval: Option<Duration>,
    last_write: HashMap<i64, Instant>,
    flood_refusals: Vec<(String, i64)>,
    /// `getUpdates` calls being answered now, and how many began while another was.
    polls_open: usize,
    overlapping_polls: usize,
    /// The webhook `setWebhook` set, until `deleteWebhook` (or an empty url) removes it.
    webhook: Option<Webhook>,
    /// Every POST of an update to the webhook, in order.
    webhook_deliveries: Vec<WebhookDelivery>,
    /// Files the bot sent (`sendDocument`), in order.
    documents: Vec<SentDocument>,
    /// While set, no update is handed out (`hold_updates`): what is queued meanwhile
    /// goes out as one `getUpdates` batch, or as concurrent webhook POSTs.
    held: bool,
    /// While set (`go_down`), every call is dropped unanswered: Telegram out of reach.
    down: bool,
    /// How many webhook POSTs run at once (Telegram's `max_connections`); 1 by default.
    webhook_connections: usize,
    /// Where webhook updates go instead of the webhook's url, by `update_id` in turn:
    /// a load balancer in front of several replicas ([`FakeTelegram::balance_webhook`]).
    balanced: Vec<String>,
}

/// A webhook as `setWebhook` set it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Webhook {
    pub url: String,
    /// `secret_token`, sent back in `X-Telegram-Bot-Api-Secret-Token`.
    pub secret_token: Option<String>,
    /// `allowed_updates` as given (None when the call did not name any).
    pub allowed_updates: Option<Vec<String>>,
}

/// One attempt to POST an update to the webhook.
#[derive(Clone, Debug)]
pub struct WebhookDelivery {
    pub update_id: i64,
    pub url: String,
    /// The HTTP status the bot answered, or None when it could not be reached.
    pub status: Option<u16>,
}

struct QueuedUpdate {
    id: i64,
    kind: &'static str,
    payload: Value,
}

struct IssuedQuery {
    issued_at: Instant,
    answered: bool,
}

#[derive(Clone, Debug)]
enum Author {
    Bot,
    User(TgUser),
}

#[derive(Clone, Debug)]
struct StoredMessage {
    chat_id: i64,
    message_id: i32,
    author: Author,
    date: i64,
    edit_date: Option<i64>,
    text: String,
    rendered: Rendered,
    parse_mode: Option<String>,
    /// Only inline keyboards: that is all `Message.reply_markup` can carry.
    reply_markup: Option<Value>,
    /// Sent with a ForceReply, which a `Message` does not show.
    force_reply: bool,
    /// The message of the same chat this one replies to.
    reply_to: Option<i32>,
    /// The forum topic (`message_thread_id`) it was sent to.
    thread_id: Option<i32>,
    /// A ForceReply sent `selective`: only the mentioned (or replied-to) user gets it.
    selective: bool,
    edits: u32,
}

impl StoredMessage {
    fn is_from_bot(&self) -> bool {
        matches!(self.author, Author::Bot)
    }

    fn buttons(&self) -> Vec<Vec<Button>> {
        let Some(rows) = self
            .reply_markup
            .as_ref()
            .and_then(|m| m["inline_keyboard"].as_array())
        else {
            return Vec::new();
        };
        let field = |button: &Value, key: &str| button[key].as_str().map(str::to_owned);
        rows.iter()
            .map(|row| {
                row.as_array()
                    .into_iter()
                    .flatten()
                    .map(|button| Button {
                        text: field(button, "text").unwrap_or_default(),
                        callback_data: field(button, "callback_data"),
                        url: field(button, "url"),
                        web_app: button["web_app"]["url"].as_str().map(str::to_owned),
                    })
                    .collect()
            })
            .collect()
    }

    fn snapshot(&self) -> SentMessage {
        SentMessage {
            chat_id: self.chat_id,
            message_id: self.message_id,
            text: self.text.clone(),
            visible_text: self.rendered.visible.clone(),
            parse_mode: self.parse_mode.clone(),
            buttons: self.buttons(),
            edits: self.edits,
            from_bot: self.is_from_bot(),
            force_reply: self.force_reply,
            reply_to: self.reply_to,
            thread_id: self.thread_id,
            selective: self.selective,
        }
    }

    fn callback_data_of(&self, wanted: &ButtonRef) -> Result<String, String> {
        let buttons: Vec<Button> = self.buttons().into_iter().flatten().collect();
        let button = match wanted {
            ButtonRef::Text(text) => buttons.iter().find(|b| &b.text == text),
            ButtonRef::Index(index) => buttons.get(*index),
        };
        let texts: Vec<&str> = buttons.iter().map(|b| b.text.as_str()).collect();
        let button = button.ok_or_else(|| {
            if texts.is_empty() {
                // Telegram clients cannot tap a keyboard that is gone; a stale client
                // can still send its data, which is what `tap_with_data` is for.
                "the message has no buttons left; use tap_with_data for a stale tap".to_owned()
            } else {
                format!("the message's buttons are {texts:?}")
            }
        })?;
        button
            .callback_data
            .clone()
            .ok_or_else(|| format!("{:?} has no callback_data", button.text))
    }
}

impl State {
    fn new(bot_id: i64) -> Self {
        Self {
            bot_id,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            shut_down: false,
            requests: Vec::new(),
            messages: Vec::new(),
            last_message_id: HashMap::new(),
            forbidden_private_chats: HashSet::new(),
            deleted_topics: HashSet::new(),
            users: HashMap::new(),
            chat_members: HashMap::new(),
            updates: VecDeque::new(),
            next_update_id: FIRST_UPDATE_ID,
            allowed_updates: None,
            queries: HashMap::new(),
            next_query_number: 1,
            callback_answers: Vec::new(),
            faults: HashMap::new(),
            chaos: HashMap::new(),
            injected: Vec::new(),
            chat_interval: None,
            last_write: HashMap::new(),
            flood_refusals: Vec::new(),
            polls_open: 0,
            overlapping_polls: 0,
            webhook: None,
            webhook_deliveries: Vec::new(),
            documents: Vec::new(),
            held: false,
            down: false,
            webhook_connections: 1,
            balanced: Vec::new(),
        }
    }

    fn find(&self, chat_id: i64, message_id: i32) -> Option<&StoredMessage> {
        self.messages
            .iter()
            .find(|m| m.chat_id == chat_id && m.message_id == message_id)
    }

    fn find_mut(&mut self, chat_id: i64, message_id: i32) -> Option<&mut StoredMessage> {
        self.messages
            .iter_mut()
            .find(|m| m.chat_id == chat_id && m.message_id == message_id)
    }

    fn bot_messages_in(&self, chat_id: i64) -> Vec<SentMessage> {
        self.messages
            .iter()
            .filter(|m| m.chat_id == chat_id && m.is_from_bot())
            .map(StoredMessage::snapshot)
            .collect()
    }

    fn next_message_id(&mut self, chat_id: i64) -> i32 {
        let last = self.last_message_id.entry(chat_id).or_insert(0);
        *last += 1;
        *last
    }

    fn take_fault(&mut self, method: &str) -> Option<Fault> {
        if let Some(fault) = self.faults.get_mut(method).and_then(VecDeque::pop_front) {
            return Some(fault);
        }
        let (fault, kind) = self.chaos.get_mut(method)?.draw()?;
        self.injected.push((method.to_owned(), kind));
        Some(fault)
    }

    // --- JSON shapes ---

    fn bot_user_json(&self) -> Value {
        json!({
            "id": self.bot_id,
            "is_bot": true,
            "first_name": BOT_FIRST_NAME,
            "username": BOT_USERNAME,
        })
    }

    fn chat_json(&self, chat_id: i64) -> Value {
        if chat_id < 0 {
            return json!({ "id": chat_id, "type": "supergroup", "title": "HITL operators" });
        }
        // A private chat is the user's own: its id is theirs, and so is its name.
        let user = u64::try_from(chat_id)
            .ok()
            .and_then(|id| self.users.get(&id));
        let mut chat = json!({
            "id": chat_id,
            "type": "private",
            "first_name": user.map_or("Operator", |u| u.first_name.as_str()),
        });
        if let Some(user) = user {
            insert_some(&mut chat, "last_name", user.last_name.clone());
            insert_some(&mut chat, "username", user.username.clone());
        }
        chat
    }

    /// A `Message`, with the message it replies to (if still there) as
    /// `reply_to_message`, which like Telegram's carries no `reply_to_message` itself.
    fn message_json(&self, message: &StoredMessage) -> Value {
        let mut json = self.message_json_without_reply(message);
        if let Some(replied) = message
            .reply_to
            .and_then(|id| self.find(message.chat_id, id))
        {
            json["reply_to_message"] = self.message_json_without_reply(replied);
        }
        json
    }

    fn message_json_without_reply(&self, message: &StoredMessage) -> Value {
        let from = match &message.author {
            Author::Bot => self.bot_user_json(),
            Author::User(user) => user.to_json(),
        };
        let mut json = json!({
            "message_id": message.message_id,
            "from": from,
            "chat": self.chat_json(message.chat_id),
            "date": message.date,
            "text": message.rendered.visible,
        });
        insert_some(&mut json, "edit_date", message.edit_date);
        insert_some(&mut json, "reply_markup", message.reply_markup.clone());
        if let Some(thread) = message.thread_id {
            json["message_thread_id"] = json!(thread);
            json["is_topic_message"] = json!(true);
        }
        if let Some(command) = message
            .text
            .strip_prefix('/')
            .filter(|_| !message.is_from_bot())
        {
            let length = 1 + command
                .split_whitespace()
                .next()
                .unwrap_or("")
                .encode_utf16()
                .count();
            json["entities"] = json!([{ "type": "bot_command", "offset": 0, "length": length }]);
        }
        json
    }

    // --- Updates ---

    fn push_update(&mut self, kind: &'static str, payload: Value) {
        let id = self.next_update_id;
        self.next_update_id += 1;
        self.updates.push_back(QueuedUpdate { id, kind, payload });
    }

    fn queue_callback_query(
        &mut self,
        chat_id: i64,
        message_id: i32,
        data: String,
        user: TgUser,
    ) -> CallbackQueryId {
        self.users.insert(user.id, user.clone());
        // Real ids are long numeric strings; any unique string would do.
        let id = format!("{}", 4_200_000_000_000_000_000_u64 + self.next_query_number);
        self.next_query_number += 1;
        self.queries.insert(
            id.clone(),
            IssuedQuery {
                issued_at: Instant::now(),
                answered: false,
            },
        );
        let message = self.find(chat_id, message_id).map(|m| self.message_json(m));
        let payload = json!({
            "id": id,
            "from": user.to_json(),
            "message": message,
            // Telegram derives this from the chat; clients only compare it.
            "chat_instance": chat_id.wrapping_mul(2_654_435_761).to_string(),
            "data": data,
        });
        self.push_update("callback_query", payload);
        CallbackQueryId(id)
    }

    /// Queues a user's message, or returns `None` if `reply_to` names no message of
    /// the chat (then nothing changes).
    fn queue_text_message(
        &mut self,
        chat_id: i64,
        user: TgUser,
        text: &str,
        reply_to: Option<i32>,
        thread: Option<i32>,
    ) -> Option<i32> {
        if let Some(id) = reply_to {
            self.find(chat_id, id)?;
        }
        self.users.insert(user.id, user.clone());
        if i64::try_from(user.id) == Ok(chat_id) {
            self.forbidden_private_chats.remove(&user.id);
        }
        // A reply in a forum topic is in the topic of the message it replies to.
        let thread_id = thread.or_else(|| {
            reply_to
                .and_then(|id| self.find(chat_id, id))
                .and_then(|m| m.thread_id)
        });
        let message_id = self.next_message_id(chat_id);
        let message = StoredMessage {
            chat_id,
            message_id,
            author: Author::User(user),
            date: unix_now(),
            edit_date: None,
            text: text.to_owned(),
            rendered: Rendered::plain(text),
            parse_mode: None,
            reply_markup: None,
            force_reply: false,
            reply_to,
            thread_id,
            selective: false,
            edits: 0,
        };
        let payload = self.message_json(&message);
        self.messages.push(message);
        self.push_update("message", payload);
        Some(message_id)
    }

    /// Applies a `getUpdates` offset: updates below it are confirmed and forgotten;
    /// a negative one keeps only the last `-offset` updates.
    fn confirm_updates(&mut self, offset: i64) {
        if offset > 0 {
            self.updates.retain(|update| update.id >= offset);
        } else if offset < 0 {
            let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
            while self.updates.len() > keep {
                self.updates.pop_front();
            }
        }
    }

    /// A write to a chat sooner than `chat_interval` after the last one is refused with
    /// 429, as Telegram's flood control does (which also counts a burst: the fake keeps
    /// the simplest rule that two senders sharing one bot would break).
    fn flood_check(&mut self, method: &str, body: &Value) -> Option<Fault> {
        let min = self.chat_interval?;
        let writes = [
            "sendmessage",
            "senddocument",
            "editmessagetext",
            "editmessagereplymarkup",
        ];
        if !writes.contains(&method) {
            return None;
        }
        let chat = int_param(body, "chat_id")?;
        let now = Instant::now();
        if let Some(last) = self.last_write.get(&chat)
            && now.duration_since(*last) < min
        {
            self.flood_refusals.push((method.to_owned(), chat));
            return Some(Fault::Fail(ApiFailure::too_many_requests(1)));
        }
        self.last_write.insert(chat, now);
        None
    }

    fn deliverable_updates(&mut self, limit: usize) -> Vec<Value> {
        if self.held {
            return Vec::new();
        }
        // Telegram never stores an update the bot did not ask for; dropping them at
        // delivery is the closest the fake can get.
        let allowed = self.allowed_updates.clone();
        self.updates.retain(|update| match &allowed {
            Some(kinds) if !kinds.is_empty() => kinds.iter().any(|k| k == update.kind),
            _ => !DEFAULT_EXCLUDED_UPDATES.contains(&update.kind),
        });
        self.updates
            .iter()
            .take(limit)
            .map(|update| {
                let mut json = Map::new();
                json.insert("update_id".into(), update.id.into());
                json.insert(update.kind.into(), update.payload.clone());
                Value::Object(json)
            })
            .collect()
    }

    // --- Methods that only touch state ---

    /// `setWebhook`: an empty url removes the webhook, as in Telegram.
    fn set_webhook(&mut self, body: &Value) -> ApiResult {
        let url = str_param(body, "url").unwrap_or_default();
        if bool_param(body, "drop_pending_updates") {
            self.updates.clear();
        }
        if url.is_empty() {
            self.webhook = None;
            return Ok(Value::Bool(true));
        }
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(ApiFailure::bad_request(
                "bad webhook: An HTTPS URL must be provided for webhook",
            ));
        }
        let secret_token = str_param(body, "secret_token").filter(|s| !s.is_empty());
        if let Some(secret) = &secret_token {
            let valid = secret.len() <= 256
                && secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(ApiFailure::bad_request(
                    "bad webhook: secret token contains unallowed characters",
                ));
            }
        }
        let allowed_updates = allowed_updates_param(body);
        // Telegram keeps one allowed_updates setting for both ways of receiving.
        if allowed_updates.as_ref().is_some_and(|k| !k.is_empty()) {
            self.allowed_updates = allowed_updates.clone();
        }
        self.webhook = Some(Webhook {
            url,
            secret_token,
            allowed_updates,
        });
        Ok(Value::Bool(true))
    }

    /// `sendDocument` (multipart, as teloxide sends it): stored apart from text messages,
    /// so tests counting a chat's messages count questions and replies only.
    fn send_document(&mut self, body: &Value) -> ApiResult {
        let chat_id = chat_id_param(body)?;
        // teloxide names the file part at random and points to it: `attach://<name>`.
        let (content, part) = match str_param(body, "document") {
            Some(reference) if reference.starts_with("attach://") => {
                let part = reference.trim_start_matches("attach://").to_owned();
                (str_param(body, &part), part)
            }
            other => (other, "document".to_owned()),
        };
        let content = content
            .ok_or_else(|| ApiFailure::bad_request("there is no document in the request"))?;
        let reply_to = match body.get("reply_parameters") {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
            Some(other) => Some(other.clone()),
            None => None,
        }
        .and_then(|r| r.get("message_id").and_then(Value::as_i64))
        .and_then(|id| i32::try_from(id).ok());
        if let Some(id) = reply_to
            && self.find(chat_id, id).is_none()
        {
            return Err(ApiFailure::bad_request("message to be replied not found"));
        }
        let message_id = self.next_message_id(chat_id);
        let file_name = str_param(body, &format!("{part}_file_name"));
        let caption = str_param(body, "caption");
        let json = json!({
            "message_id": message_id,
            "from": self.bot_user_json(),
            "chat": self.chat_json(chat_id),
            "date": unix_now(),
            "document": {
                "file_id": format!("doc-{chat_id}-{message_id}"),
                "file_unique_id": format!("u-{chat_id}-{message_id}"),
                "file_size": content.len(),
                "file_name": file_name,
            },
            "caption": caption,
        });
        self.documents.push(SentDocument {
            chat_id,
            message_id,
            reply_to,
            file_name,
            content,
            caption,
        });
        Ok(json)
    }

    fn send_message(&mut self, body: &Value) -> ApiResult {
        let chat_id = chat_id_param(body)?;
        if u64::try_from(chat_id).is_ok_and(|user| self.forbidden_private_chats.contains(&user)) {
            return Err(ApiFailure::new(
                403,
                "Forbidden: bot can't initiate conversation with a user",
            ));
        }
        let (text, parse_mode, rendered) = text_params(body, "message is too long")?;
        let markup = reply_markup_param(body, MarkupFor::Send)?;
        let thread_id = match body.get("message_thread_id") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|t| t.parse().ok()))
                    .and_then(|t| i32::try_from(t).ok())
                    .ok_or_else(|| ApiFailure::bad_request("message thread not found"))?,
            ),
        };
        if let Some(t) = thread_id
            && self.deleted_topics.contains(&(chat_id, t))
        {
            return Err(ApiFailure::bad_request("message thread not found"));
        }
        let reply = match body.get("reply_parameters") {
            Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
            Some(other) => Some(other.clone()),
            None => None,
        };
        let reply_to = reply
            .as_ref()
            .and_then(|r| r.get("message_id").and_then(Value::as_i64))
            .and_then(|id| i32::try_from(id).ok());
        let without_reply = reply
            .as_ref()
            .and_then(|r| r.get("allow_sending_without_reply"))
            == Some(&Value::Bool(true));
        let reply_to = match reply_to {
            Some(id) if self.find(chat_id, id).is_some() => Some(id),
            Some(_) if without_reply => None,
            Some(_) => return Err(ApiFailure::bad_request("message to be replied not found")),
            None => None,
        };
        let selective = markup.selective;
        let message_id = self.next_message_id(chat_id);
        let message = StoredMessage {
            chat_id,
            message_id,
            author: Author::Bot,
            date: unix_now(),
            edit_date: None,
            text,
            rendered,
            parse_mode,
            reply_markup: markup.inline_keyboard,
            force_reply: markup.force_reply,
            reply_to,
            thread_id,
            selective,
            edits: 0,
        };
        let json = self.message_json(&message);
        self.messages.push(message);
        Ok(json)
    }

    /// `editMessageText` and `editMessageReplyMarkup`. Both replace the keyboard
    /// with the request's `reply_markup`, and an absent one removes it: Telegram
    /// does the same, and our bot relies on it to clear decided questions.
    fn edit_message(&mut self, body: &Value, with_text: bool) -> ApiResult {
        let chat_id = chat_id_param(body)?;
        let message_id = int_param(body, "message_id")
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| ApiFailure::bad_request("message to edit not found"))?;
        let new_text = if with_text {
            Some(text_params(body, "MESSAGE_TOO_LONG")?)
        } else {
            None
        };
        let reply_markup = reply_markup_param(body, MarkupFor::Edit)?.inline_keyboard;
        let message = self
            .find_mut(chat_id, message_id)
            .ok_or_else(|| ApiFailure::bad_request("message to edit not found"))?;
        if !message.is_from_bot() {
            return Err(ApiFailure::bad_request("message can't be edited"));
        }
        let same_text = new_text
            .as_ref()
            .is_none_or(|(_, _, rendered)| *rendered == message.rendered);
        if same_text && reply_markup == message.reply_markup {
            return Err(ApiFailure::bad_request(
                "message is not modified: specified new message content and reply markup \
                 are exactly the same as a current content and reply markup of the message",
            ));
        }
        if let Some((text, parse_mode, rendered)) = new_text {
            message.text = text;
            message.parse_mode = parse_mode;
            message.rendered = rendered;
        }
        message.reply_markup = reply_markup;
        message.edit_date = Some(unix_now());
        message.edits += 1;
        let message = message.clone();
        Ok(self.message_json(&message))
    }

    /// `getChat`: a group the bot is in (`set_chat_members`), or a private chat whose
    /// user has not been marked as never having started the bot.
    fn get_chat(&self, body: &Value) -> ApiResult {
        let chat_id = chat_id_param(body)?;
        if self.chat_known(chat_id) {
            Ok(self.chat_json(chat_id))
        } else {
            Err(ApiFailure::bad_request("chat not found"))
        }
    }

    fn chat_known(&self, chat_id: i64) -> bool {
        match u64::try_from(chat_id) {
            Ok(user) => !self.forbidden_private_chats.contains(&user),
            Err(_) => self.chat_members.contains_key(&chat_id),
        }
    }

    /// `getChatMember`: the bot is an administrator of its groups; a member listed by
    /// `set_chat_members` is a `member`; a user seen elsewhere has `left`; a user id the
    /// fake has never seen is one Telegram does not know.
    fn get_chat_member(&self, body: &Value) -> ApiResult {
        let chat_id = chat_id_param(body)?;
        let user_id = int_param(body, "user_id")
            .and_then(|id| u64::try_from(id).ok())
            .ok_or_else(|| ApiFailure::bad_request("user not found"))?;
        if !self.chat_known(chat_id) {
            return Err(ApiFailure::bad_request("chat not found"));
        }
        let member = match u64::try_from(chat_id) {
            Ok(owner) => owner == user_id,
            Err(_) => self
                .chat_members
                .get(&chat_id)
                .is_some_and(|m| m.contains(&user_id)),
        };
        let status = if i64::try_from(user_id) == Ok(self.bot_id) {
            "administrator"
        } else if member {
            "member"
        } else if self.users.contains_key(&user_id) {
            "left"
        } else {
            return Err(ApiFailure::bad_request("user not found"));
        };
        let user = if i64::try_from(user_id) == Ok(self.bot_id) {
            self.bot_user_json()
        } else {
            self.users.get(&user_id).map_or_else(
                || json!({ "id": user_id, "is_bot": false, "first_name": "User" }),
                TgUser::to_json,
            )
        };
        Ok(json!({ "status": status, "user": user }))
    }

    fn answer_callback_query(&mut self, body: &Value) -> ApiResult {
        let too_old = || {
            ApiFailure::bad_request(
                "query is too old and response timeout expired or query id is invalid",
            )
        };
        let id = str_param(body, "callback_query_id").ok_or_else(too_old)?;
        let query = self.queries.get_mut(&id).ok_or_else(too_old)?;
        if query.answered || query.issued_at.elapsed() > CALLBACK_ANSWER_WINDOW {
            return Err(too_old());
        }
        query.answered = true;
        self.callback_answers.push(CallbackAnswer {
            query_id: CallbackQueryId(id),
            text: str_param(body, "text"),
            show_alert: bool_param(body, "show_alert"),
            url: str_param(body, "url"),
        });
        Ok(Value::Bool(true))
    }

    /// What the fake received, for panic messages.
    fn describe(&self) -> String {
        let mut out = String::from("--- what the fake Telegram saw ---\n");
        let _ = writeln!(out, "messages ({}):", self.messages.len());
        for message in &self.messages {
            let author = match &message.author {
                Author::Bot => "bot".to_owned(),
                Author::User(user) => format!("user {}", user.id),
            };
            let buttons: Vec<String> = message
                .buttons()
                .iter()
                .flatten()
                .map(|b| b.text.clone())
                .collect();
            let reply_to = message
                .reply_to
                .map(|id| format!(" replying to #{id}"))
                .unwrap_or_default();
            let force_reply = if message.force_reply {
                " force_reply"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "  chat {} #{} by {author}{reply_to}, {} edit(s): {:?} buttons {buttons:?}{force_reply}",
                message.chat_id,
                message.message_id,
                message.edits,
                truncate(&message.text, 300),
            );
        }
        let _ = writeln!(out, "callback answers: {:?}", self.callback_answers);
        let _ = writeln!(out, "unconfirmed updates: {}", self.updates.len());
        if let Some(hook) = &self.webhook {
            let _ = writeln!(
                out,
                "webhook: {hook:?}, {} delivery attempt(s), last: {:?}",
                self.webhook_deliveries.len(),
                self.webhook_deliveries.last()
            );
        }
        let polls = self
            .requests
            .iter()
            .filter(|r| r.method == "getupdates")
            .count();
        let _ = writeln!(
            out,
            "requests ({} total, {polls} getUpdates not shown):",
            self.requests.len()
        );
        for request in self.requests.iter().filter(|r| r.method != "getupdates") {
            let unauthorized = if request.authorized {
                ""
            } else {
                " [wrong token]"
            };
            let _ = writeln!(
                out,
                "  {}{unauthorized} {}",
                request.method,
                truncate(&request.body.to_string(), 300)
            );
        }
        out
    }
}

// ----- HTTP layer ------------------------------------------------------------------

type ApiResult = Result<Value, ApiFailure>;

/// An error answer in Telegram's shape; the HTTP status mirrors `error_code`.
#[derive(Clone, Debug)]
struct ApiFailure {
    code: u16,
    description: String,
    retry_after: Option<u32>,
    migrate_to: Option<i64>,
}

impl ApiFailure {
    fn new(code: u16, description: impl Into<String>) -> Self {
        Self {
            code,
            description: description.into(),
            retry_after: None,
            migrate_to: None,
        }
    }

    fn too_many_requests(secs: u32) -> Self {
        let mut failure = Self::new(429, format!("Too Many Requests: retry after {secs}"));
        failure.retry_after = Some(secs);
        failure
    }

    fn bad_request(reason: &str) -> Self {
        Self::new(400, format!("Bad Request: {reason}"))
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::BAD_REQUEST);
        let mut body =
            json!({ "ok": false, "error_code": self.code, "description": self.description });
        if let Some(secs) = self.retry_after {
            body["parameters"] = json!({ "retry_after": secs });
        }
        if let Some(chat_id) = self.migrate_to {
            body["parameters"] = json!({ "migrate_to_chat_id": chat_id });
        }
        (status, Json(body)).into_response()
    }
}

async fn handle_method(
    AxumState(shared): AxumState<Arc<Shared>>,
    ConnectInfo(connection): ConnectInfo<Connection>,
    Path((bot_token, method)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let method = method.to_ascii_lowercase();
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let body = match multipart_boundary(content_type) {
        Some(boundary) => parse_multipart(&body, &boundary),
        None => parse_body(&body),
    };
    let authorized = bot_token.strip_prefix("bot") == Some(shared.token.as_str());
    let fault = shared.mutate(|state| {
        state.requests.push(RecordedRequest {
            method: method.clone(),
            body: body.clone(),
            at: Instant::now(),
            authorized,
        });
        if state.down {
            Some(Fault::Drop { carry_out: false })
        } else if authorized {
            state
                .take_fault(&method)
                .or_else(|| state.flood_check(&method, &body))
        } else {
            None
        }
    });
    if !authorized {
        return ApiFailure::new(401, "Unauthorized").into_response();
    }
    let result = match fault {
        Some(Fault::Fail(failure)) => Err(failure),
        Some(Fault::Delay(delay)) => {
            let result = call_method(&shared, &method, &body).await;
            tokio::time::sleep(delay).await;
            result
        }
        Some(Fault::Drop { carry_out }) => {
            if carry_out {
                let _ = call_method(&shared, &method, &body).await;
            }
            connection.cut();
            // Never written: the connection refuses it and hyper closes the socket.
            return StatusCode::NO_CONTENT.into_response();
        }
        None => call_method(&shared, &method, &body).await,
    };
    match result {
        Ok(result) => Json(json!({ "ok": true, "result": result })).into_response(),
        Err(failure) => failure.into_response(),
    }
}

async fn call_method(shared: &Shared, method: &str, body: &Value) -> ApiResult {
    match method {
        "getme" => {
            let mut me = shared.lock().bot_user_json();
            for (key, value) in [
                ("can_join_groups", true),
                ("can_read_all_group_messages", false),
                ("supports_inline_queries", false),
                ("can_connect_to_business", false),
                ("has_main_web_app", false),
            ] {
                me[key] = value.into();
            }
            Ok(me)
        }
        "getupdates" => {
            if shared.lock().webhook.is_some() {
                return Err(ApiFailure::new(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; use \
                     deleteWebhook to delete the webhook first",
                ));
            }
            get_updates(shared, body).await
        }
        // teloxide's polling asks for this before it starts, to delete a webhook.
        "getwebhookinfo" => {
            let state = shared.lock();
            let mut info = json!({
                "url": state.webhook.as_ref().map(|w| w.url.clone()).unwrap_or_default(),
                "has_custom_certificate": false,
                "pending_update_count": state.updates.len(),
            });
            if let Some(kinds) = state
                .webhook
                .as_ref()
                .and_then(|w| w.allowed_updates.clone())
            {
                info["allowed_updates"] = json!(kinds);
            }
            Ok(info)
        }
        "setwebhook" => shared.mutate(|state| state.set_webhook(body)),
        "deletewebhook" => {
            shared.mutate(|state| {
                state.webhook = None;
                if bool_param(body, "drop_pending_updates") {
                    state.updates.clear();
                }
            });
            Ok(Value::Bool(true))
        }
        // Recorded like every request; `my_commands` reads the last one back.
        "setmycommands" => Ok(Value::Bool(true)),
        // Recorded like every request (the console's menu button).
        "setchatmenubutton" => Ok(Value::Bool(true)),
        "sendmessage" => shared.mutate(|state| state.send_message(body)),
        "senddocument" => shared.mutate(|state| state.send_document(body)),
        "editmessagetext" => shared.mutate(|state| state.edit_message(body, true)),
        "editmessagereplymarkup" => shared.mutate(|state| state.edit_message(body, false)),
        "answercallbackquery" => shared.mutate(|state| state.answer_callback_query(body)),
        "getchat" => shared.lock().get_chat(body),
        "getchatmember" => shared.lock().get_chat_member(body),
        _ => Err(ApiFailure::new(404, "Not Found: method not found")),
    }
}

/// Long poll: answers as soon as there are updates, else when `timeout` runs out.
async fn get_updates(shared: &Shared, body: &Value) -> ApiResult {
    /// Counts the poll open until its answer (or its caller's hang-up) drops it.
    struct Open<'a>(&'a Shared);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            let mut state = self.0.lock();
            state.polls_open = state.polls_open.saturating_sub(1);
        }
    }
    let _open = {
        let mut state = shared.lock();
        if state.polls_open > 0 {
            state.overlapping_polls += 1;
        }
        state.polls_open += 1;
        Open(shared)
    };
    let offset = int_param(body, "offset").unwrap_or(0);
    let limit = int_param(body, "limit").unwrap_or(100).clamp(1, 100);
    let timeout = int_param(body, "timeout")
        .unwrap_or(0)
        .clamp(0, MAX_POLL_TIMEOUT_SECS);
    let deadline = Instant::now() + Duration::from_secs(timeout.unsigned_abs());
    let allowed = allowed_updates_param(body);

    let mut changes = shared.changes.subscribe();
    shared.mutate(|state| {
        state.confirm_updates(offset);
        if allowed.is_some() {
            state.allowed_updates = allowed;
        }
    });
    loop {
        let (batch, shut_down) = {
            let mut state = shared.lock();
            (
                state.deliverable_updates(limit.unsigned_abs() as usize),
                state.shut_down,
            )
        };
        if !batch.is_empty() || shut_down || Instant::now() >= deadline {
            return Ok(Value::Array(batch));
        }
        // Ok(Err) means the fake is gone; the next round returns what is there.
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }
}

// ----- Connections that a handler can cut ------------------------------------------

/// A TCP listener whose connections a handler can cut, to answer a request with no HTTP
/// response at all. axum hands the handler no access to its connection, but it does pass
/// along whatever connect info the listener produces: here, the connection's switch.
struct CuttableListener(TcpListener);

impl Listener for CuttableListener {
    type Io = CuttableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => {
                    let stream = CuttableStream {
                        inner: stream,
                        cut: Arc::default(),
                    };
                    return (stream, addr);
                }
                // Out of file descriptors and the like: wait a little, as axum does.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// The connect info every request carries: the switch of the connection it came on.
#[derive(Clone)]
struct Connection {
    cut: Arc<AtomicBool>,
}

impl Connection {
    /// From now on the connection fails every read and write, so hyper gives up on it
    /// and closes the socket without writing the response.
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, CuttableListener>> for Connection {
    fn connect_info(stream: IncomingStream<'_, CuttableListener>) -> Self {
        Connection {
            cut: Arc::clone(&stream.io().cut),
        }
    }
}

struct CuttableStream {
    inner: TcpStream,
    cut: Arc<AtomicBool>,
}

impl CuttableStream {
    fn check(&self) -> io::Result<()> {
        if self.cut.load(Ordering::SeqCst) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "fake Telegram dropped the connection",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for CuttableStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CuttableStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check()?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

// ----- Parameters ------------------------------------------------------------------

fn parse_body(body: &[u8]) -> Value {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Value::Object(Map::new());
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| json!({ "unparsed_body": String::from_utf8_lossy(body) }))
}

/// The boundary of a `multipart/form-data` body (teloxide sends `setWebhook` so).
fn multipart_boundary(content_type: &str) -> Option<String> {
    let (kind, params) = content_type.split_once(';')?;
    if !kind.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.trim().split_once('=')?;
        k.eq_ignore_ascii_case("boundary")
            .then(|| v.trim_matches('"').to_owned())
    })
}

/// A multipart body as a JSON object of its text fields (file parts are kept as their
/// lossy text, with their file name beside them). Values stay strings, as a form-encoded client's do:
/// the parameter readers accept both spellings.
fn parse_multipart(body: &[u8], boundary: &str) -> Value {
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut fields = Map::new();
    for part in text.split(delimiter.as_str()) {
        let Some((head, value)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let name = head.split(';').find_map(|p| {
            p.trim()
                .strip_prefix("name=")
                .map(|n| n.split(['\r', '\n']).next().unwrap_or(n).trim_matches('"'))
        });
        if let Some(name) = name {
            let value = value.strip_suffix("\r\n").unwrap_or(value);
            fields.insert(name.to_owned(), Value::String(value.to_owned()));
            // A file part also names the file: kept beside it as `<name>_file_name`.
            let file_name = head.split(';').find_map(|p| {
                p.trim()
                    .strip_prefix("filename=")
                    .map(|n| n.split(['\r', '\n']).next().unwrap_or(n).trim_matches('"'))
            });
            if let Some(file_name) = file_name {
                fields.insert(
                    format!("{name}_file_name"),
                    Value::String(file_name.to_owned()),
                );
            }
        }
    }
    Value::Object(fields)
}

/// Pushes queued updates to the webhook while one is set: one at a time (or
/// `webhook_connections` at once), in order, each
/// retried until the bot answers 2xx, as Telegram does. Runs until the fake is dropped.
async fn push_to_webhook(shared: Arc<Shared>) {
    const FIRST_RETRY: Duration = Duration::from_millis(20);
    const LAST_RETRY: Duration = Duration::from_millis(500);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("fake Telegram: webhook client");
    let mut changes = shared.changes.subscribe();
    let mut backoff = FIRST_RETRY;
    // Failed attempts per update: a balanced update is retried on the next url, as a
    // load balancer takes a dead replica out of its rotation.
    let mut failures: HashMap<i64, usize> = HashMap::new();
    loop {
        // Marking the current version seen before looking means no change is missed.
        changes.borrow_and_update();
        let next = {
            let mut state = shared.lock();
            if state.shut_down {
                return;
            }
            match state.webhook.clone() {
                Some(hook) if !state.down => {
                    let n = state.webhook_connections;
                    let updates = state.deliverable_updates(n);
                    let balanced = state.balanced.clone();
                    (!updates.is_empty()).then_some((hook, balanced, updates))
                }
                _ => None,
            }
        };
        let Some((hook, balanced, updates)) = next else {
            if changes.changed().await.is_err() {
                return;
            }
            continue;
        };
        let posts = updates.into_iter().map(|update| {
            let update_id = update["update_id"].as_i64().unwrap_or_default();
            let url = match balanced.len() {
                0 => hook.url.clone(),
                n => {
                    let turn =
                        update_id.unsigned_abs() as usize + failures.get(&update_id).unwrap_or(&0);
                    balanced[turn % n].clone()
                }
            };
            let mut request = client.post(&url).json(&update);
            if let Some(secret) = &hook.secret_token {
                request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
            }
            async move {
                let status = request.send().await.ok().map(|r| r.status().as_u16());
                (update_id, url, status)
            }
        });
        let results = futures_util::future::join_all(posts).await;
        let mut delivered = true;
        shared.mutate(|state| {
            for (update_id, url, status) in results {
                let ok = status.is_some_and(|s| (200..300).contains(&s));
                delivered &= ok;
                if ok {
                    failures.remove(&update_id);
                } else {
                    *failures.entry(update_id).or_default() += 1;
                }
                state.webhook_deliveries.push(WebhookDelivery {
                    update_id,
                    url,
                    status,
                });
                if ok {
                    state.updates.retain(|u| u.id != update_id);
                }
            }
        });
        if delivered {
            backoff = FIRST_RETRY;
        } else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(LAST_RETRY);
        }
    }
}

/// A parameter that may also arrive as a JSON string (as form-encoded clients send
/// `reply_markup`), so both spellings parse.
fn json_param(body: &Value, key: &str) -> Option<Value> {
    match body.get(key)? {
        Value::Null => None,
        Value::String(text) => serde_json::from_str(text).ok(),
        value => Some(value.clone()),
    }
}

/// `allowed_updates` (a JSON array, or a string holding one) as update kinds.
fn allowed_updates_param(body: &Value) -> Option<Vec<String>> {
    let value = json_param(body, "allowed_updates")?;
    let kinds = value
        .as_array()?
        .iter()
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    Some(kinds)
}

fn int_param(body: &Value, key: &str) -> Option<i64> {
    match body.get(key)? {
        Value::Number(number) => number.as_i64(),
        Value::String(text) => text.trim().parse().ok(),
        _ => None,
    }
}

fn str_param(body: &Value, key: &str) -> Option<String> {
    match body.get(key)? {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn bool_param(body: &Value, key: &str) -> bool {
    match body.get(key) {
        Some(Value::Bool(flag)) => *flag,
        Some(Value::String(text)) => text == "true",
        _ => false,
    }
}

fn chat_id_param(body: &Value) -> Result<i64, ApiFailure> {
    match body.get("chat_id") {
        None | Some(Value::Null) => Err(ApiFailure::bad_request("chat_id is empty")),
        // `@channelname` recipients are not modelled.
        Some(_) => {
            int_param(body, "chat_id").ok_or_else(|| ApiFailure::bad_request("chat not found"))
        }
    }
}

/// `text` and `parse_mode`, checked the way Telegram checks them. Telegram words
/// "too long" differently for new and edited messages, hence `too_long`.
fn text_params(
    body: &Value,
    too_long: &str,
) -> Result<(String, Option<String>, Rendered), ApiFailure> {
    let text = str_param(body, "text").unwrap_or_default();
    let parse_mode = str_param(body, "parse_mode").filter(|mode| !mode.is_empty());
    let rendered = match parse_mode
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None | Some("markdown" | "markdownv2") => Rendered::plain(&text),
        Some("html") => parse_html(&text).map_err(|reason| {
            ApiFailure::bad_request(&format!("can't parse entities: {reason}"))
        })?,
        Some(_) => return Err(ApiFailure::bad_request("unsupported parse_mode")),
    };
    if rendered.visible.trim().is_empty() {
        return Err(ApiFailure::bad_request("message text is empty"));
    }
    if rendered.visible.encode_utf16().count() > MAX_TEXT_UTF16 {
        return Err(ApiFailure::bad_request(too_long));
    }
    Ok((text, parse_mode, rendered))
}

/// Which method a `reply_markup` came with: edits take only inline keyboards.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MarkupFor {
    Send,
    Edit,
}

/// A request's `reply_markup`, as the fake keeps it.
#[derive(Default)]
struct Markup {
    /// The inline keyboard to store, or `None` for none.
    inline_keyboard: Option<Value>,
    /// A ForceReply, which only `sendMessage` takes.
    force_reply: bool,
    /// The ForceReply is `selective`.
    selective: bool,
}

/// Reads `reply_markup`: an inline keyboard (an empty one counts as none, as Telegram
/// drops it) or, for `sendMessage`, a ForceReply. Anything else is refused; edits
/// refuse every other kind with Telegram's "inline keyboard expected".
fn reply_markup_param(body: &Value, purpose: MarkupFor) -> Result<Markup, ApiFailure> {
    let unparsable = || ApiFailure::bad_request("can't parse reply keyboard markup JSON object");
    let markup = match body.get("reply_markup") {
        None | Some(Value::Null) => return Ok(Markup::default()),
        Some(Value::String(text)) if text.trim().is_empty() => return Ok(Markup::default()),
        // Form-encoded clients send the markup as a JSON string.
        Some(Value::String(text)) => serde_json::from_str(text).map_err(|_| unparsable())?,
        Some(value) => value.clone(),
    };
    if !markup.is_object() {
        return Err(unparsable());
    }
    let Some(rows) = markup.get("inline_keyboard").and_then(Value::as_array) else {
        if purpose == MarkupFor::Edit {
            return Err(ApiFailure::bad_request("inline keyboard expected"));
        }
        return force_reply_markup(&markup).ok_or_else(unparsable);
    };
    // Telegram takes `web_app` buttons in private chats only: in a group it refuses the
    // whole message.
    let private = body["chat_id"].as_i64().is_some_and(|id| id > 0);
    for button in rows.iter().filter_map(Value::as_array).flatten() {
        if button.get("web_app").is_some() && !private {
            return Err(ApiFailure::bad_request("BUTTON_TYPE_INVALID"));
        }
        if let Some(data) = button.get("callback_data") {
            let length = data.as_str().map_or(0, str::len);
            if length == 0 || length > MAX_CALLBACK_DATA_BYTES {
                return Err(ApiFailure::bad_request("BUTTON_DATA_INVALID"));
            }
        }
    }
    let has_buttons = rows
        .iter()
        .filter_map(Value::as_array)
        .any(|row| !row.is_empty());
    Ok(Markup {
        inline_keyboard: has_buttons.then_some(markup),
        force_reply: false,
        selective: false,
    })
}

/// A ForceReply (`{"force_reply": true, "input_field_placeholder"?, "selective"?}`),
/// or `None` if `markup` is not a well-formed one.
fn force_reply_markup(markup: &Value) -> Option<Markup> {
    let well_formed = markup.get("force_reply") == Some(&Value::Bool(true))
        && markup
            .get("input_field_placeholder")
            .is_none_or(Value::is_string)
        && markup.get("selective").is_none_or(Value::is_boolean);
    well_formed.then_some(Markup {
        inline_keyboard: None,
        force_reply: true,
        selective: markup.get("selective") == Some(&Value::Bool(true)),
    })
}

// ----- Text ------------------------------------------------------------------------

/// Text as Telegram keeps it: what is shown, plus the formatting spans, which
/// decide together with the keyboard whether an edit changes anything.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rendered {
    visible: String,
    /// (tag, attributes, start, end) with byte offsets into `visible`.
    spans: Vec<(String, String, usize, usize)>,
}

impl Rendered {
    fn plain(text: &str) -> Self {
        Self {
            visible: text.to_owned(),
            spans: Vec::new(),
        }
    }
}

/// Parses Telegram's HTML subset, with the error texts of its parser, so a bot
/// that forgets to escape `<` or `&` fails here as it would in production.
fn parse_html(text: &str) -> Result<Rendered, String> {
    const TAGS: &[&str] = &[
        "a",
        "b",
        "strong",
        "i",
        "em",
        "u",
        "ins",
        "s",
        "strike",
        "del",
        "span",
        "tg-spoiler",
        "tg-emoji",
        "code",
        "pre",
        "blockquote",
    ];
    let mut visible = String::with_capacity(text.len());
    let mut spans = Vec::new();
    let mut open: Vec<(String, String, usize)> = Vec::new();
    let mut at = 0;
    while let Some(ch) = text[at..].chars().next() {
        let rest = &text[at..];
        if ch == '&' {
            match decode_html_entity(rest) {
                Some((decoded, length)) => {
                    visible.push(decoded);
                    at += length;
                }
                // Telegram keeps an `&` that starts no known entity as it is.
                None => {
                    visible.push('&');
                    at += 1;
                }
            }
        } else if let Some(tag) = rest.strip_prefix("</") {
            let close = tag
                .find('>')
                .ok_or(format!("Unclosed end tag at byte offset {at}"))?;
            let name = tag[..close].trim().to_ascii_lowercase();
            let (open_name, attributes, start) = open
                .pop()
                .ok_or(format!("Unexpected end tag at byte offset {at}"))?;
            if !name.is_empty() && name != open_name {
                return Err(format!(
                    "Unmatched end tag at byte offset {at}, expected \"</{open_name}>\", found \"</{name}>\""
                ));
            }
            spans.push((open_name, attributes, start, visible.len()));
            at += 2 + close + 1;
        } else if let Some(tag) = rest.strip_prefix('<') {
            let name_end = tag
                .find(|c: char| c.is_whitespace() || c == '>')
                .ok_or(format!("Unclosed start tag at byte offset {at}"))?;
            let name = tag[..name_end].to_ascii_lowercase();
            if !TAGS.contains(&name.as_str()) {
                return Err(format!(
                    "Unsupported start tag \"{name}\" at byte offset {at}"
                ));
            }
            let close = tag
                .find('>')
                .ok_or(format!("Unclosed start tag at byte offset {at}"))?;
            open.push((name, tag[name_end..close].trim().to_owned(), visible.len()));
            at += 1 + close + 1;
        } else {
            visible.push(ch);
            at += ch.len_utf8();
        }
    }
    if let Some((name, _, _)) = open.last() {
        return Err(format!(
            "Can't find end tag corresponding to start tag \"{name}\""
        ));
    }
    Ok(Rendered { visible, spans })
}

/// Decodes the entity at the start of `text` (`&lt;`, `&#60;`, `&#x3C;`), giving the
/// character and how many bytes it took. Only the four named entities Telegram
/// documents are known.
fn decode_html_entity(text: &str) -> Option<(char, usize)> {
    let end = text.find(';')?;
    let name = &text[1..end];
    let decoded = match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let number = name.strip_prefix('#')?;
            let code = match number.strip_prefix(['x', 'X']) {
                Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                None => number.parse().ok()?,
            };
            char::from_u32(code)?
        }
    };
    Some((decoded, end + 1))
}

// ----- Small helpers -----------------------------------------------------------------

fn unix_now() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // A date of 0 means "inaccessible message" to teloxide, so never send it.
    i64::try_from(since_epoch.as_secs()).unwrap_or(1).max(1)
}

fn insert_some(object: &mut Value, key: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        object[key] = value.into();
    }
}

fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
