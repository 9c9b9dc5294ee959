//! How a Bot API call is retried: each failure sorted (transient, flood control,
//! harmless, an upgraded group, a refusal), the backoff between attempts, the deadline
//! and the chat's rate-limit slot before each one, and the metrics of every attempt.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use teloxide::{ApiError, RequestError};
use time::OffsetDateTime;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::service::DeliveryError;
use crate::telegram::ratelimit::{NoSlot, RateLimiter, Reservation, Share};

/// The first backoff step after a transient failure; each failure doubles it.
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The largest backoff step: long enough to let a Telegram outage pass without hammering
/// it, short enough that a question still goes out soon after Telegram is back.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(15);
/// Telegram's descriptions of its own server faults (it answers 5xx with these), which
/// teloxide reports as `ApiError::Unknown`: worth another try, unlike a refusal.
const SERVER_FAULTS: &[&str] = &[
    "Internal Server Error",
    "Bad Gateway",
    "Service Unavailable",
    "Gateway Timeout",
];

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

/// The Bot API methods we call, for logs and for what their failures mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Method {
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
pub(super) enum Class {
    /// Try again after the backoff.
    Transient,
    /// Telegram's flood control: try again after exactly this long.
    RetryAfter(Duration),
    /// What the call wanted is already true, or no longer matters.
    Harmless,
    /// Trying again would get the same answer.
    Permanent,
}

pub(super) fn classify(e: &RequestError, method: Method) -> Class {
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
pub(super) struct GaveUp {
    /// The last error; `None` when the chat's queue left no slot before the deadline
    /// and nothing was sent at all.
    pub(super) last: Option<RequestError>,
    /// Attempts made, the first included.
    pub(super) attempts: u32,
    /// The deadline ended it (another try could not start before it), not a refusal.
    pub(super) out_of_time: bool,
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
pub(super) fn no_slot_reason(no_slot: Option<NoSlot>) -> String {
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

/// Exponential backoff with "equal jitter": each wait is between half and all of the
/// current step, and the step doubles up to [`MAX_BACKOFF`]. The random half spreads out
/// callers that failed together (a Telegram hiccup hits every pending question at once)
/// so they do not all come back at the same instant.
pub(super) struct Backoff {
    step: Duration,
}

impl Backoff {
    pub(super) fn new() -> Self {
        Backoff {
            step: FIRST_BACKOFF,
        }
    }

    pub(super) fn next_wait(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(MAX_BACKOFF);
        let half = step / 2;
        let jitter_ms = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }
}

/// [`retrying_observed`] without metrics, for the tests of the retry logic.
#[cfg(test)]
pub(super) async fn retrying<T, F, Fut>(
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
pub(super) async fn retrying_observed<T, F, Fut>(
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
pub(super) async fn retrying_from<T, F, Fut>(
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
