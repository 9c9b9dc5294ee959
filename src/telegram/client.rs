//! Talking to the Bot API: sending questions, showing outcomes, answering taps, naming
//! the people a reminder mentions, and riding out Telegram's faults on the way.
//!
//! Every call goes through `retrying_observed`, which counts it in the metrics and
//! sorts each failure (`classify`):
//! - transient (flood control, network and I/O errors, an unreadable answer, Telegram's
//!   own "Bad Gateway" and friends): tried again, after exactly `retry_after` for flood
//!   control, otherwise after an exponential backoff with jitter (250 ms doubling up to
//!   15 s), for as long as the call's deadline allows;
//! - harmless (the edit is already there, the message to edit is gone, the tap is too old
//!   to answer): done, nothing to report;
//! - a group upgraded to a supergroup: reported with the new chat id, so the service can
//!   send again there;
//! - anything else (bot blocked, chat not found, a bad request): reported at once, so a
//!   question that cannot be delivered fails closed quickly.
//!
//! Deadlines follow what each call is for. A question is worth sending until its request
//! expires: one that cannot reach a human before then times out, and says so as soon as
//! that is known (no slot of the chat's queue before the deadline, a `retry_after` or a
//! backoff past it). An outcome edit is worth ten minutes of trying (an operator may look
//! at the chat later). A tap answer gets twelve seconds, since Telegram refuses answers
//! about fifteen seconds after the tap. Messages and edits take a slot from the
//! [`RateLimiter`] before each attempt, so the bot stays under Telegram's limits instead
//! of collecting 429s: questions and notifications in their agent's [`Share`] of the
//! chat, edits, attached files and command replies in the service's, so one agent's
//! backlog neither holds back another agent's questions nor the outcomes shown. A
//! question waits for its first slot before it is even read back from the store
//! ([`Messenger::question_turn`]), so a queued question holds its keys and nothing else.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use teloxide::prelude::*;
use teloxide::types::{
    CallbackQueryId, ForceReply, InlineKeyboardMarkup, InputFile, LinkPreviewOptions, MessageId,
    ParseMode, ReplyMarkup, ReplyParameters, ThreadId, UserId,
};
use teloxide::{ApiError, RequestError};
use time::OffsetDateTime;
use tokio::time::Instant;

use super::ratelimit::{Limits, NoSlot, RateLimiter, Reservation, Share};
use super::render;
use crate::domain::confirmation::{Confirmation, Operator};
use crate::domain::interaction::InteractionType;
use crate::metrics::Metrics;
use crate::service::{CommandReply, DeliveryError, Mention, Messenger, Turn, View};

/// How long an outcome edit keeps being retried. Long, because a question left with live
/// buttons invites taps that can no longer count; bounded, so a dead chat does not keep
/// a task alive forever.
const EDIT_PATIENCE: Duration = Duration::from_secs(10 * 60);
/// How long a tap answer keeps being retried: Telegram refuses answers roughly 15 s
/// after the tap, and the tap reached us a little after it happened.
const ANSWER_PATIENCE: Duration = Duration::from_secs(12);
/// How long a notification may keep its caller waiting on retries.
const NOTIFY_PATIENCE: Duration = Duration::from_secs(8);
/// How long a reminder waits, in all, for Telegram to name the people the configuration
/// does not (`getChatMember`): whoever is still unnamed then is named by id.
const NAME_PATIENCE: Duration = Duration::from_secs(3);
/// How long a name Telegram gave is reused before it is asked again (people rename
/// themselves rarely; reminders come in bursts).
const NAME_TTL: Duration = Duration::from_secs(3600);
/// The first backoff step after a transient failure; each failure doubles it.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The largest backoff step: long enough to let a Telegram outage pass without hammering
/// it, short enough that a question still goes out soon after Telegram is back.
const MAX_BACKOFF: Duration = Duration::from_secs(15);
/// Telegram's descriptions of its own server faults (it answers 5xx with these), which
/// teloxide reports as `ApiError::Unknown`: worth another try, unlike a refusal.
const SERVER_FAULTS: &[&str] = &[
    "Internal Server Error",
    "Bad Gateway",
    "Service Unavailable",
    "Gateway Timeout",
];

/// Builds the bot for `api_url`. Loopback API servers (a local Bot API server, the test
/// fake) bypass any `HTTP(S)_PROXY` from the environment.
pub fn build_bot(token: &str, api_url: reqwest::Url, poll_timeout_seconds: u32) -> Bot {
    let loopback = matches!(
        api_url.host_str(),
        Some("127.0.0.1" | "localhost" | "[::1]" | "::1")
    );
    let mut builder = teloxide::net::default_reqwest_settings()
        // Long polls hold the connection for `poll_timeout_seconds`; leave headroom.
        .timeout(Duration::from_secs(u64::from(poll_timeout_seconds) + 10));
    if loopback {
        builder = builder.no_proxy();
    }
    let client = builder.build().unwrap_or_else(|_| {
        teloxide::net::default_reqwest_settings()
            .build()
            .unwrap_or_default()
    });
    Bot::with_client(token, client).set_api_url(api_url)
}

/// The [`Messenger`] that speaks to Telegram.
#[derive(Clone)]
pub struct TelegramMessenger {
    bot: Bot,
    limiter: Arc<RateLimiter>,
    /// Where every Bot API attempt is counted and timed.
    metrics: Arc<Metrics>,
    /// Names Telegram gave for people the configuration does not name, by user id, with
    /// when they were asked ([`NAME_TTL`]).
    names: Arc<std::sync::Mutex<std::collections::HashMap<u64, (String, Instant)>>>,
}

impl TelegramMessenger {
    /// A messenger that keeps to Telegram's published limits.
    pub fn new(bot: Bot) -> Self {
        Self::with_limiter(bot, Arc::new(RateLimiter::new(Limits::TELEGRAM)))
    }

    /// A messenger pacing its calls with `limiter`. Telegram counts per bot token, so
    /// everything that sends through one token must share one limiter.
    pub fn with_limiter(bot: Bot, limiter: Arc<RateLimiter>) -> Self {
        TelegramMessenger {
            bot,
            limiter,
            metrics: Arc::new(Metrics::new()),
            names: Arc::default(),
        }
    }

    /// Counts its Bot API calls into `metrics` (the application's) instead of a set of
    /// its own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Sends a message that is not a question as HTML, within the flood limits and in
    /// `share`'s turn, retrying for [`NOTIFY_PATIENCE`]; `reply_to` threads it under
    /// another message.
    async fn send_html(
        &self,
        chat_id: i64,
        share: Share,
        text: String,
        reply_to: Option<ReplyParameters>,
        extra: Extra,
    ) -> Result<i32, DeliveryError> {
        let sent = retrying_observed(
            &self.limiter,
            &self.metrics,
            Method::SendMessage,
            Some((chat_id, share)),
            extra
                .until
                .unwrap_or_else(|| Instant::now() + NOTIFY_PATIENCE),
            || {
                let mut request = self
                    .bot
                    .send_message(ChatId(chat_id), text.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(no_preview());
                if let Some(thread) = extra.thread {
                    request = request.message_thread_id(ThreadId(MessageId(thread)));
                }
                if let Some(markup) = &extra.markup {
                    request = request.reply_markup(markup.clone());
                }
                match &reply_to {
                    Some(r) => request.reply_parameters(r.clone()).send(),
                    None => request.send(),
                }
            },
        )
        .await?;
        sent.map(|m| m.id.0)
            .ok_or_else(|| DeliveryError::new("Telegram did not return the sent message"))
    }
}

impl TelegramMessenger {
    /// The name Telegram knows `user_id` by (first and last name, as decisions are
    /// signed), asked with `getChatMember` in `chat_id`, the chat the reminder goes to;
    /// `None` when Telegram cannot say before `deadline`.
    async fn telegram_name(&self, chat_id: i64, user_id: u64, deadline: Instant) -> Option<String> {
        {
            let names = self.names.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((name, at)) = names.get(&user_id)
                && at.elapsed() < NAME_TTL
            {
                return Some(name.clone());
            }
        }
        // Bounded as a whole: a first attempt is made even past the deadline, and an
        // answer that never comes would hold the reminder back.
        let member = tokio::time::timeout_at(
            deadline,
            retrying_observed(
                &self.limiter,
                &self.metrics,
                Method::GetChatMember,
                None,
                deadline,
                || {
                    self.bot
                        .get_chat_member(ChatId(chat_id), UserId(user_id))
                        .send()
                },
            ),
        )
        .await;
        let user = match member {
            Ok(Ok(Some(member))) => member.user,
            Ok(Ok(None)) | Err(_) => return None,
            Ok(Err(e)) => {
                tracing::debug!(chat_id, user_id, error = ?e.last.as_ref().map(describe),
                    "Telegram did not name a person for a reminder; naming them by id");
                return None;
            }
        };
        let name = match &user.last_name {
            Some(last) => format!("{} {last}", user.first_name),
            None => user.first_name.clone(),
        };
        let name = crate::domain::text::without_nul(&name).into_owned();
        if name.trim().is_empty() {
            return None;
        }
        self.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(user_id, (name.clone(), Instant::now()));
        Some(name)
    }
}

/// How a message that is not a question goes out, besides its text.
#[derive(Default)]
struct Extra {
    /// The forum topic it goes to.
    thread: Option<i32>,
    markup: Option<ReplyMarkup>,
    /// Give up at this instant instead of after [`NOTIFY_PATIENCE`].
    until: Option<Instant>,
}

/// What kind of failure a Bot API error is, as the metrics label it: `rate_limited` (a
/// 429), `network` (no answer), `invalid_response` (an answer that is not the Bot API's
/// JSON, such as a proxy's error page) or `api` (Telegram refused).
pub fn error_kind(e: &RequestError) -> &'static str {
    match e {
        RequestError::RetryAfter(_) => "rate_limited",
        RequestError::Network(_) | RequestError::Io(_) => "network",
        RequestError::InvalidJson { .. } => "invalid_response",
        RequestError::Api(_) | RequestError::MigrateToChatId(_) => "api",
    }
}

fn no_preview() -> LinkPreviewOptions {
    LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
    }
}

/// The Bot API methods we call, for logs and for what their failures mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    SendMessage,
    SendDocument,
    EditMessageText,
    AnswerCallbackQuery,
    GetChatMember,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::SendMessage => "sendMessage",
            Method::SendDocument => "sendDocument",
            Method::EditMessageText => "editMessageText",
            Method::AnswerCallbackQuery => "answerCallbackQuery",
            Method::GetChatMember => "getChatMember",
        }
    }
}

/// What a failed call means for the next step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Try again after the backoff.
    Transient,
    /// Telegram's flood control: try again after exactly this long.
    RetryAfter(Duration),
    /// What the call wanted is already true, or no longer matters.
    Harmless,
    /// Trying again would get the same answer.
    Permanent,
}

fn classify(e: &RequestError, method: Method) -> Class {
    match e {
        // Telegram always says at least 1 s; a zero from anything else must not turn
        // the retry loop into a busy loop.
        RequestError::RetryAfter(s) => Class::RetryAfter(s.duration().max(Duration::from_secs(1))),
        // `InvalidJson` is what teloxide makes of a 5xx page that is not JSON.
        RequestError::Network(_) | RequestError::Io(_) | RequestError::InvalidJson { .. } => {
            Class::Transient
        }
        RequestError::Api(ApiError::Unknown(text))
            if SERVER_FAULTS.iter().any(|fault| text.starts_with(fault)) =>
        {
            Class::Transient
        }
        // The edit is already there (a retry of an edit that did land, or a second
        // outcome shown the same way).
        RequestError::Api(ApiError::MessageNotModified) if method == Method::EditMessageText => {
            Class::Harmless
        }
        // The operator or an admin deleted the question: nothing left to update.
        RequestError::Api(ApiError::MessageToEditNotFound) if method == Method::EditMessageText => {
            Class::Harmless
        }
        // The tap is too old to answer; the decision itself does not depend on it.
        RequestError::Api(ApiError::InvalidQueryId) if method == Method::AnswerCallbackQuery => {
            Class::Harmless
        }
        // Including `MigrateToChatId`: the same chat will keep answering the same.
        _ => Class::Permanent,
    }
}

/// A sentence saying why Telegram refused, without the token (teloxide strips the URL
/// from network errors) and without the raw answer body. A network error names its
/// innermost causes (DNS, refused connection, TLS, proxy), not just "error sending
/// request".
pub(crate) fn describe(e: &RequestError) -> String {
    match e {
        RequestError::Api(api) => format!("Telegram answered \"{api}\""),
        RequestError::MigrateToChatId(id) => format!(
            "the group was upgraded to a supergroup with chat id {id}; update the route's chat_id"
        ),
        RequestError::RetryAfter(s) => format!(
            "Telegram's flood control asked to wait {} s",
            s.duration().as_secs()
        ),
        RequestError::Network(n) => format!(
            "network error talking to Telegram: {}",
            crate::telemetry::causes(n.as_ref())
        ),
        RequestError::InvalidJson { .. } => "Telegram sent an unreadable answer".to_owned(),
        RequestError::Io(e) => format!(
            "I/O error talking to Telegram: {}",
            crate::telemetry::causes(e.as_ref())
        ),
    }
}

/// A call that ended without success.
#[derive(Debug)]
struct GaveUp {
    /// The last error; `None` when the chat's queue left no slot before the deadline
    /// and nothing was sent at all.
    last: Option<RequestError>,
    /// Attempts made, the first included.
    attempts: u32,
    /// The deadline ended it (another try could not start before it), not a refusal.
    out_of_time: bool,
    /// What the chat's queue said when it had no slot before the deadline.
    no_slot: Option<NoSlot>,
}

impl From<GaveUp> for DeliveryError {
    fn from(g: GaveUp) -> Self {
        let mut error = match g.last {
            // Every failed attempt leaves its error, so nothing was sent at all.
            None => DeliveryError {
                paced_until: g.no_slot.map(|n| wall_clock(n.earliest)),
                ..DeliveryError::new(no_slot_reason(g.no_slot))
            },
            Some(RequestError::MigrateToChatId(to)) => DeliveryError {
                migrated_to: Some(to.0),
                ..DeliveryError::new(describe(&RequestError::MigrateToChatId(to)))
            },
            Some(e) if g.attempts > 1 => DeliveryError::new(format!(
                "{} (still failing after {} attempts)",
                describe(&e),
                g.attempts
            )),
            Some(e) => DeliveryError::new(describe(&e)),
        };
        error.missed_deadline = g.out_of_time;
        error
    }
}

/// Why a call never started: the chat's queue had no slot before the deadline, and how
/// far off the first free one was (a backlog in the chat, or a 429's `retry_after`).
fn no_slot_reason(no_slot: Option<NoSlot>) -> String {
    let base = "Telegram's rate limits left this chat no free slot before the deadline";
    match no_slot {
        Some(NoSlot { earliest }) => {
            let away = earliest.saturating_duration_since(Instant::now());
            format!(
                "{base} (the first was {} s away)",
                away.as_secs() + u64::from(away.subsec_nanos() > 0)
            )
        }
        None => base.to_owned(),
    }
}

/// `at` on the wall clock.
fn wall_clock(at: Instant) -> OffsetDateTime {
    let now = Instant::now();
    let wall = OffsetDateTime::now_utc();
    if at >= now {
        wall + (at - now)
    } else {
        wall - (now - at)
    }
}

/// What a notification held back by our own pacing says ([`DeliveryError::paced_until`]):
/// that it was not sent and Telegram was never asked, why, and when to send it again.
fn paced_notification(next_free: OffsetDateTime) -> String {
    let f = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    let at = next_free.format(&f).unwrap_or_default();
    let away = (next_free - OffsetDateTime::now_utc())
        .as_seconds_f64()
        .ceil()
        .max(1.0);
    format!(
        "not sent: the bot's pace for this chat (the limits Telegram sets: one message a \
         second to a chat, 20 a minute to a group) has no free slot within the {} s a \
         notification may wait; the next slot is free at {at}, in {away} s at the \
         earliest. Telegram was not called: send it again then",
        NOTIFY_PATIENCE.as_secs()
    )
}

/// Exponential backoff with "equal jitter": each wait is between half and all of the
/// current step, and the step doubles up to [`MAX_BACKOFF`]. The random half spreads out
/// callers that failed together (a Telegram hiccup hits every pending question at once)
/// so they do not all come back at the same instant.
struct Backoff {
    step: Duration,
}

impl Backoff {
    fn new() -> Self {
        Backoff {
            step: FIRST_BACKOFF,
        }
    }

    fn next_wait(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(MAX_BACKOFF);
        let half = step / 2;
        let jitter_ms = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}

/// [`retrying_observed`] without metrics, for the tests of the retry logic.
#[cfg(test)]
async fn retrying<T, F, Fut>(
    limiter: &RateLimiter,
    method: Method,
    chat: Option<(i64, Share)>,
    deadline: Instant,
    attempt: F,
) -> Result<Option<T>, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    retrying_observed(limiter, &Metrics::new(), method, chat, deadline, attempt).await
}

/// Runs `attempt` until it succeeds (`Some`), turns out harmless (`None`), fails for
/// good, or the next try could not start before `deadline`. With `chat`, every attempt
/// first waits for a slot of that chat in `limiter`, in the given share's turn, and a
/// 429 holds the chat back.
///
/// Every Bot API call but `getUpdates` and the startup calls (`super::startup`) is made
/// here, so this is where `metrics` counts and times each attempt (retries included:
/// each one is a call Telegram sees).
async fn retrying_observed<T, F, Fut>(
    limiter: &RateLimiter,
    metrics: &Metrics,
    method: Method,
    chat: Option<(i64, Share)>,
    deadline: Instant,
    attempt: F,
) -> Result<Option<T>, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    retrying_from(limiter, metrics, method, chat, None, deadline, attempt).await
}

/// [`retrying_observed`] whose first attempt goes in `first`, a slot of `chat` reserved
/// beforehand (a question's turn, [`TelegramMessenger::question_turn`]); any retry
/// queues again.
async fn retrying_from<T, F, Fut>(
    limiter: &RateLimiter,
    metrics: &Metrics,
    method: Method,
    chat: Option<(i64, Share)>,
    mut first: Option<Reservation>,
    deadline: Instant,
    mut attempt: F,
) -> Result<Option<T>, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RequestError>>,
{
    let mut backoff = Backoff::new();
    let mut attempts = 0;
    let mut last = None;
    loop {
        if let Some((chat_id, share)) = &chat {
            // A slot after the deadline is no slot: the limiter says so as soon as it
            // knows, and gives the place back.
            let slot = match first.take() {
                Some(reserved) => reserved.start().await,
                None => limiter.acquire(*chat_id, share, deadline).await,
            };
            if let Err(no_slot) = slot {
                return Err(GaveUp {
                    last,
                    attempts,
                    out_of_time: true,
                    no_slot: Some(no_slot),
                });
            }
        }
        attempts += 1;
        let started = Instant::now();
        // Boxed: an HTTP request's future is large, and held inline it would make every
        // caller's future that large while it waits for its slot.
        let result = Box::pin(attempt()).await;
        let error = result.as_ref().err().map(error_kind);
        metrics.telegram_call(method.name(), Some(started.elapsed()), error);
        let error = match result {
            Ok(v) => return Ok(Some(v)),
            Err(e) => e,
        };
        let class = classify(&error, method);
        let wait = match class {
            Class::Harmless => {
                tracing::debug!(method = method.name(), error = %describe(&error),
                    "Telegram says there is nothing left to do");
                return Ok(None);
            }
            Class::Permanent => {
                return Err(GaveUp {
                    last: Some(error),
                    attempts,
                    out_of_time: false,
                    no_slot: None,
                });
            }
            Class::RetryAfter(wait) => wait,
            Class::Transient => backoff.next_wait(),
        };
        if Instant::now() + wait >= deadline {
            return Err(GaveUp {
                last: Some(error),
                attempts,
                out_of_time: true,
                no_slot: None,
            });
        }
        tracing::debug!(method = method.name(), attempt = attempts,
            retry_in_ms = wait.as_millis() as u64, error = %describe(&error),
            "retrying a Telegram call");
        match (class, &chat) {
            // The limiter holds the whole chat back instead of a sleep here, so the calls
            // already queued for that chat wait too; this one queues again in its share.
            (Class::RetryAfter(wait), Some((chat_id, _))) => limiter.penalize(*chat_id, wait),
            _ => tokio::time::sleep(wait).await,
        }
        last = Some(error);
    }
}

/// `at` on tokio's clock (now, if it has passed).
fn instant_of(at: OffsetDateTime) -> Instant {
    let left = at - OffsetDateTime::now_utc();
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
}

#[async_trait]
impl Messenger for TelegramMessenger {
    async fn question_turn(
        &self,
        chat_id: i64,
        agent: &str,
        deadline: OffsetDateTime,
    ) -> Result<Turn, DeliveryError> {
        // Reserved in the agent's share like any question, and only waited for here:
        // the slot is taken (and the overall gate passed) by `send_question`, once the
        // service has read the question back, so the time that takes is not spent
        // inside the limiter's spacing.
        let missed = |no_slot| DeliveryError {
            missed_deadline: true,
            ..DeliveryError::new(no_slot_reason(Some(no_slot)))
        };
        let reserved = self
            .limiter
            .reserve_owned(chat_id, &Share::agent(agent), instant_of(deadline))
            .map_err(missed)?;
        reserved.due().await.map_err(missed)?;
        Ok(Turn::new(reserved))
    }

    async fn send_question(
        &self,
        r: &Confirmation,
        chat_id: i64,
        view: &View,
        turn: Turn,
    ) -> Result<i32, DeliveryError> {
        // A turn for another chat (the route's group moved meanwhile) is given back by
        // dropping it; the question then queues in `chat_id`.
        let first = turn
            .into_slot::<Reservation>()
            .filter(|reserved| reserved.chat_id() == chat_id);
        // Rendered when the first attempt starts; the caller reads the question only
        // once its turn came, so nothing of it waits in the chat's queue.
        let mut rendered = None;
        let sent = retrying_from(
            &self.limiter,
            &self.metrics,
            Method::SendMessage,
            Some((chat_id, Share::agent(&r.agent))),
            first,
            instant_of(r.expires_at),
            || {
                let (text, markup) = rendered.get_or_insert_with(|| {
                    let (text, markup) = render::render(r, view);
                    let markup = match markup {
                        render::Markup::Keyboard(k) => Some(ReplyMarkup::InlineKeyboard(k)),
                        render::Markup::ForceReply => Some(ReplyMarkup::ForceReply(
                            ForceReply::new()
                                .input_field_placeholder(Some("Your answer".to_owned())),
                        )),
                        render::Markup::None => None,
                    };
                    (text, markup)
                });
                let mut request = self
                    .bot
                    .send_message(ChatId(chat_id), text.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(no_preview());
                if let Some(markup) = &markup {
                    request = request.reply_markup(markup.clone());
                }
                if let Some(thread) = view.thread {
                    request = request.message_thread_id(ThreadId(MessageId(thread)));
                }
                request.send()
            },
        )
        // A refusal fails closed; a question that cannot get through before its deadline
        // reports it (`missed_deadline`) as soon as that is known, to end as a timeout.
        .await
        .map_err(|e| {
            let mut e = DeliveryError::from(e);
            if let Some(thread) = view.thread
                && e.reason.contains("thread not found")
            {
                e.reason = format!(
                    "the route's forum topic (topic_id {thread}) was not found in the chat; it may have been deleted ({})",
                    e.reason
                );
            }
            e
        })?;
        match sent {
            Some(message) => Ok(message.id.0),
            // `classify` calls no sendMessage failure harmless; kept total all the same.
            None => Err(DeliveryError::new(
                "Telegram did not return the sent message",
            )),
        }
    }

    async fn update_message(
        &self,
        r: &Confirmation,
        chat_id: i64,
        message_id: i32,
        view: &View,
    ) -> Result<(), DeliveryError> {
        let (text, markup) = render::render(r, view);
        // An empty keyboard removes the buttons; a free-text question has none to keep
        // (Telegram cannot edit a ForceReply).
        let keyboard = match markup {
            render::Markup::Keyboard(k) => k,
            render::Markup::ForceReply | render::Markup::None => InlineKeyboardMarkup::default(),
        };
        retrying_observed(
            &self.limiter,
            &self.metrics,
            Method::EditMessageText,
            Some((chat_id, Share::Service)),
            Instant::now() + EDIT_PATIENCE,
            || {
                let request = self
                    .bot
                    .edit_message_text(ChatId(chat_id), MessageId(message_id), text.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(no_preview());
                if keyboard.inline_keyboard.is_empty() && r.kind() == InteractionType::FreeText {
                    request.send()
                } else {
                    request.reply_markup(keyboard.clone()).send()
                }
            },
        )
        .await?;
        Ok(())
    }

    async fn send_notification(
        &self,
        chat_id: i64,
        agent: &str,
        text: &str,
    ) -> Result<i32, DeliveryError> {
        let text = render::notification_text(agent, text);
        self.send_html(chat_id, Share::agent(agent), text, None, Extra::default())
            .await
            .map_err(|mut e| {
                if let Some(at) = e.paced_until {
                    e.reason = paced_notification(at);
                }
                e
            })
    }

    async fn send_attachment(
        &self,
        r: &Confirmation,
        chat_id: i64,
        reply_to: i32,
    ) -> Result<bool, DeliveryError> {
        let Some(file) = render::attachment(r) else {
            return Ok(false);
        };
        // Within the question's own deadline: a question whose parameters cannot be
        // shown in full is one the operator cannot judge. In the service's share, not
        // the agent's: the file completes a question already in the chat, and must not
        // wait behind the agent's next questions.
        let sent = retrying_observed(
            &self.limiter,
            &self.metrics,
            Method::SendDocument,
            Some((chat_id, Share::Service)),
            instant_of(r.expires_at),
            || {
                self.bot
                    .send_document(
                        ChatId(chat_id),
                        InputFile::memory(file.content.clone()).file_name(file.file_name.clone()),
                    )
                    .caption(file.caption.clone())
                    .reply_parameters(ReplyParameters::new(MessageId(reply_to)))
                    .send()
            },
        )
        .await?;
        match sent {
            Some(_) => Ok(true),
            None => Err(DeliveryError::new(
                "Telegram did not return the sent document",
            )),
        }
    }

    async fn send_command_reply(
        &self,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        reply: &CommandReply,
    ) -> Result<i32, DeliveryError> {
        let text = super::commands::render(reply, crate::service::now());
        // The command may be deleted meanwhile; the answer is worth sending anyway.
        let reply_to = ReplyParameters::new(MessageId(reply_to)).allow_sending_without_reply();
        let extra = Extra {
            thread,
            ..Extra::default()
        };
        self.send_html(chat_id, Share::Service, text, Some(reply_to), extra)
            .await
    }

    async fn send_reason_prompt(
        &self,
        r: &Confirmation,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        from: &Operator,
    ) -> Result<i32, DeliveryError> {
        let text = render::reason_prompt_text(r, from.id, &from.name);
        // Selective: in a group, only the person mentioned gets the reply field.
        let markup = ReplyMarkup::ForceReply(
            ForceReply::new()
                .selective()
                .input_field_placeholder(Some("Why deny?".to_owned())),
        );
        let reply_to = ReplyParameters::new(MessageId(reply_to)).allow_sending_without_reply();
        let extra = Extra {
            thread,
            markup: Some(markup),
            until: Some(instant_of(r.expires_at)),
        };
        self.send_html(chat_id, Share::Service, text, Some(reply_to), extra)
            .await
    }

    async fn send_reminder(
        &self,
        r: &Confirmation,
        chat_id: i64,
        thread: Option<i32>,
        reply_to: i32,
        waiting: &[Mention],
    ) -> Result<i32, DeliveryError> {
        // Everyone by name: the configuration's `[people]` name, else Telegram's.
        let mut named = Vec::with_capacity(waiting.len());
        let deadline = Instant::now() + NAME_PATIENCE;
        for m in waiting.iter().take(crate::service::MAX_MENTIONS) {
            let name = match &m.name {
                Some(name) => Some(name.clone()),
                None => self.telegram_name(chat_id, m.user_id, deadline).await,
            };
            named.push(Mention { name, ..m.clone() });
        }
        named.extend(waiting.iter().skip(crate::service::MAX_MENTIONS).cloned());
        let text = render::reminder_text(r, &named);
        let reply_to = ReplyParameters::new(MessageId(reply_to)).allow_sending_without_reply();
        let extra = Extra {
            thread,
            markup: None,
            until: Some(instant_of(r.expires_at)),
        };
        self.send_html(chat_id, Share::Service, text, Some(reply_to), extra)
            .await
    }

    async fn answer_tap(
        &self,
        query_id: &str,
        text: &str,
        alert: bool,
    ) -> Result<(), DeliveryError> {
        // Callback answers do not count against Telegram's message limits: no chat slot.
        retrying_observed(
            &self.limiter,
            &self.metrics,
            Method::AnswerCallbackQuery,
            None,
            Instant::now() + ANSWER_PATIENCE,
            || {
                self.bot
                    .answer_callback_query(CallbackQueryId(query_id.to_owned()))
                    .text(text.to_owned())
                    .show_alert(alert)
                    .send()
            },
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use teloxide::types::{ChatId, Seconds};

    use super::*;

    fn retry_after(secs: u32) -> RequestError {
        RequestError::RetryAfter(Seconds::from_seconds(secs))
    }

    fn io_error() -> RequestError {
        RequestError::Io(Arc::new(std::io::Error::other("connection reset")))
    }

    /// A fake Bot API call: answers with `script` in order (then `Ok`) and notes when
    /// each attempt started.
    struct Script {
        answers: Mutex<Vec<Result<u32, RequestError>>>,
        calls: Mutex<Vec<Instant>>,
    }

    impl Script {
        fn new(mut answers: Vec<Result<u32, RequestError>>) -> Self {
            answers.reverse();
            Script {
                answers: Mutex::new(answers),
                calls: Mutex::new(Vec::new()),
            }
        }

        /// Fails with `error` forever.
        fn failing(error: RequestError, times: usize) -> Self {
            Script::new(std::iter::repeat_n(Err(error), times).collect())
        }

        async fn call(&self) -> Result<u32, RequestError> {
            self.calls.lock().unwrap().push(Instant::now());
            self.answers.lock().unwrap().pop().unwrap_or(Ok(42))
        }

        fn calls(&self) -> Vec<Instant> {
            self.calls.lock().unwrap().clone()
        }
    }

    async fn run(
        method: Method,
        chat: Option<i64>,
        patience: Duration,
        script: &Script,
    ) -> Result<Option<u32>, GaveUp> {
        let limiter = RateLimiter::new(Limits::TELEGRAM);
        let chat = chat.map(|c| (c, Share::Service));
        retrying(&limiter, method, chat, Instant::now() + patience, || {
            script.call()
        })
        .await
    }

    #[tokio::test(start_paused = true)]
    async fn an_edit_waits_out_a_retry_after_longer_than_ten_seconds() {
        let script = Script::new(vec![Err(retry_after(11))]);
        let result = run(Method::EditMessageText, Some(-100), EDIT_PATIENCE, &script).await;
        assert_eq!(result.unwrap(), Some(42));
        let calls = script.calls();
        assert_eq!(calls.len(), 2);
        let waited = calls[1] - calls[0];
        assert!(
            waited >= Duration::from_secs(11) && waited < Duration::from_secs(12),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_question_waits_out_a_long_retry_after_within_its_deadline() {
        let script = Script::new(vec![Err(retry_after(40))]);
        let result = run(
            Method::SendMessage,
            Some(12345),
            Duration::from_secs(120),
            &script,
        )
        .await;
        assert_eq!(result.unwrap(), Some(42));
        assert!(script.calls()[1] - script.calls()[0] >= Duration::from_secs(40));
    }

    #[tokio::test(start_paused = true)]
    async fn a_tap_answer_waits_exactly_the_retry_after() {
        let script = Script::new(vec![Err(retry_after(3))]);
        let result = run(Method::AnswerCallbackQuery, None, ANSWER_PATIENCE, &script).await;
        assert_eq!(result.unwrap(), Some(42));
        let waited = script.calls()[1] - script.calls()[0];
        assert!(
            waited >= Duration::from_secs(3) && waited <= Duration::from_millis(3001),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_deadline_gives_up_at_once_and_says_why() {
        let start = Instant::now();
        let script = Script::new(vec![Err(retry_after(13))]);
        let gave_up = run(Method::AnswerCallbackQuery, None, ANSWER_PATIENCE, &script)
            .await
            .unwrap_err();
        assert_eq!(script.calls().len(), 1);
        assert_eq!(Instant::now(), start);
        assert!(gave_up.out_of_time);
        let reason = DeliveryError::from(gave_up).reason;
        assert!(
            reason.contains("flood control asked to wait 13 s"),
            "{reason}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn network_trouble_is_retried_with_growing_jittered_waits_until_the_deadline() {
        let start = Instant::now();
        let patience = Duration::from_secs(60);
        let script = Script::failing(io_error(), 1000);
        let gave_up = run(Method::SendMessage, Some(7), patience, &script)
            .await
            .unwrap_err();
        let calls = script.calls();
        // Steps 0.25, 0.5, 1, 2, 4, 8, 15, 15, ... s; each wait is half to all of a step.
        // (The chat's one-second spacing stretches the shortest waits.)
        let mut step = FIRST_BACKOFF;
        for pair in calls.windows(2) {
            let waited = pair[1] - pair[0];
            let least = (step / 2).max(Duration::from_secs(1));
            let most = step.max(Duration::from_secs(1)) + Duration::from_millis(2);
            assert!(
                waited >= least && waited <= most,
                "{waited:?} for step {step:?}"
            );
            step = (step * 2).min(MAX_BACKOFF);
        }
        assert!(calls.len() >= 7, "{} attempts", calls.len());
        assert!(Instant::now() - start < patience);
        assert!(gave_up.out_of_time);
        let reason = DeliveryError::from(gave_up).reason;
        assert!(reason.contains("I/O error talking to Telegram"), "{reason}");
        assert!(
            reason.contains(&format!("still failing after {} attempts", calls.len())),
            "{reason}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_tap_answer_stops_retrying_after_twelve_seconds() {
        let start = Instant::now();
        let script = Script::failing(io_error(), 1000);
        run(Method::AnswerCallbackQuery, None, ANSWER_PATIENCE, &script)
            .await
            .unwrap_err();
        assert!(Instant::now() - start < ANSWER_PATIENCE);
        assert!(script.calls().len() >= 4);
    }

    #[tokio::test(start_paused = true)]
    async fn refusals_are_not_retried() {
        for error in [
            ApiError::BotBlocked,
            ApiError::ChatNotFound,
            ApiError::Unknown("Forbidden: bot is not a member of the supergroup chat".into()),
        ] {
            let script = Script::new(vec![Err(RequestError::Api(error))]);
            let gave_up = run(
                Method::SendMessage,
                Some(-1),
                Duration::from_secs(60),
                &script,
            )
            .await
            .unwrap_err();
            assert_eq!(gave_up.attempts, 1);
            assert!(!gave_up.out_of_time);
            assert!(
                DeliveryError::from(gave_up)
                    .reason
                    .starts_with("Telegram answered")
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_upgraded_group_reports_its_new_chat_id() {
        let script = Script::new(vec![Err(RequestError::MigrateToChatId(ChatId(
            -1_009_876_543_210,
        )))]);
        let gave_up = run(
            Method::SendMessage,
            Some(-42),
            Duration::from_secs(60),
            &script,
        )
        .await
        .unwrap_err();
        assert_eq!(script.calls().len(), 1);
        let e = DeliveryError::from(gave_up);
        assert_eq!(e.migrated_to, Some(-1_009_876_543_210));
        assert!(
            e.reason.contains("upgraded to a supergroup"),
            "{}",
            e.reason
        );
    }

    #[tokio::test(start_paused = true)]
    async fn edits_that_cannot_matter_and_stale_taps_count_as_done() {
        for (method, error) in [
            (Method::EditMessageText, ApiError::MessageNotModified),
            (Method::EditMessageText, ApiError::MessageToEditNotFound),
            (Method::AnswerCallbackQuery, ApiError::InvalidQueryId),
        ] {
            let script = Script::new(vec![Err(RequestError::Api(error))]);
            let result = run(method, None, Duration::from_secs(60), &script).await;
            assert_eq!(result.unwrap(), None);
            assert_eq!(script.calls().len(), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_question_gives_up_at_once_when_its_chat_has_no_slot_before_the_deadline() {
        let start = Instant::now();
        let limiter = RateLimiter::new(Limits::TELEGRAM);
        limiter.penalize(-5, Duration::from_secs(300));
        let script = Script::new(vec![]);
        let gave_up = retrying(
            &limiter,
            Method::SendMessage,
            Some((-5, Share::agent("a"))),
            start + Duration::from_secs(5),
            || script.call(),
        )
        .await
        .unwrap_err();
        assert!(script.calls().is_empty());
        assert!(gave_up.out_of_time);
        // Known at once: slots only ever move later, so waiting could not help.
        assert_eq!(Instant::now(), start);
        let e = DeliveryError::from(gave_up);
        assert!(e.missed_deadline);
        assert!(
            e.reason.contains("rate limits") && e.reason.contains("300 s away"),
            "{}",
            e.reason
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_question_that_runs_out_of_time_is_told_apart_from_a_refusal() {
        let script = Script::new(vec![Err(retry_after(90))]);
        let late = run(
            Method::SendMessage,
            Some(3),
            Duration::from_secs(60),
            &script,
        )
        .await
        .unwrap_err();
        assert!(DeliveryError::from(late).missed_deadline);
        let script = Script::new(vec![Err(RequestError::Api(ApiError::BotBlocked))]);
        let refused = run(
            Method::SendMessage,
            Some(3),
            Duration::from_secs(60),
            &script,
        )
        .await
        .unwrap_err();
        assert!(!DeliveryError::from(refused).missed_deadline);
    }

    #[tokio::test(start_paused = true)]
    async fn sends_to_one_chat_are_spaced_and_tap_answers_are_not() {
        let limiter = RateLimiter::new(Limits::TELEGRAM);
        let script = Script::new(vec![]);
        let deadline = Instant::now() + Duration::from_secs(60);
        for _ in 0..2 {
            let chat = Some((1, Share::agent("a")));
            retrying(&limiter, Method::SendMessage, chat, deadline, || {
                script.call()
            })
            .await
            .unwrap();
        }
        let calls = script.calls();
        assert!(calls[1] - calls[0] >= Duration::from_secs(1));

        let script = Script::new(vec![]);
        for _ in 0..2 {
            retrying(
                &limiter,
                Method::AnswerCallbackQuery,
                None,
                deadline,
                || script.call(),
            )
            .await
            .unwrap();
        }
        let calls = script.calls();
        assert_eq!(calls[1], calls[0]);
    }

    #[test]
    fn faults_on_telegrams_side_are_transient_and_refusals_are_not() {
        let network = reqwest::Client::new()
            .get("not a url")
            .build()
            .expect_err("an invalid URL");
        let unreadable =
            serde_json::from_str::<serde_json::Value>("<html>502</html>").expect_err("not JSON");
        let transient = [
            RequestError::from(network),
            io_error(),
            RequestError::InvalidJson {
                source: Arc::new(unreadable),
                raw: "<html>502</html>".into(),
            },
            RequestError::Api(ApiError::Unknown("Bad Gateway".into())),
            RequestError::Api(ApiError::Unknown("Internal Server Error: restart".into())),
            RequestError::Api(ApiError::Unknown("Gateway Timeout".into())),
            RequestError::Api(ApiError::Unknown("Service Unavailable".into())),
        ];
        for e in &transient {
            assert_eq!(classify(e, Method::SendMessage), Class::Transient, "{e}");
        }
        assert_eq!(
            classify(&retry_after(0), Method::SendMessage),
            Class::RetryAfter(Duration::from_secs(1)),
            "a zero retry_after must not become a busy loop"
        );
        // A message that is gone is harmless to an edit, but a question still must go.
        assert_eq!(
            classify(
                &RequestError::Api(ApiError::MessageToEditNotFound),
                Method::SendMessage
            ),
            Class::Permanent
        );
    }

    #[test]
    fn backoff_doubles_to_fifteen_seconds_with_jitter() {
        let mut backoff = Backoff::new();
        let mut step = FIRST_BACKOFF;
        for _ in 0..12 {
            let wait = backoff.next_wait();
            assert!(wait >= step / 2 && wait <= step, "{wait:?} for {step:?}");
            step = (step * 2).min(MAX_BACKOFF);
        }
        assert_eq!(step, MAX_BACKOFF);
    }
}
