//! Talking to the Bot API: sending questions, showing outcomes, answering taps, with a
//! bounded retry policy.
//!
//! Retries are bounded on purpose: a question that cannot reach a human within a few
//! seconds fails closed (the agent hears `cancelled` with the reason) instead of leaving
//! the agent waiting on a message that may never arrive.

use std::time::Duration;

use async_trait::async_trait;
use teloxide::prelude::*;
use teloxide::types::{
    CallbackQueryId, InlineKeyboardMarkup, LinkPreviewOptions, MessageId, ParseMode,
};
use teloxide::{ApiError, RequestError};

use super::render;
use crate::domain::confirmation::Confirmation;
use crate::service::{DeliveryError, Messenger};

/// Attempts per call, the first included.
const MAX_ATTEMPTS: u32 = 3;
/// A `retry_after` longer than this is not waited out for a single call: the request
/// fails (closed, for a question) rather than hold an agent hostage to a flood limit.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

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
}

impl TelegramMessenger {
    pub fn new(bot: Bot) -> Self {
        TelegramMessenger { bot }
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

/// Runs `call` until it succeeds, fails for good, or runs out of attempts.
async fn with_retries<T, F, Fut>(what: &str, call: F) -> Result<T, RequestError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, RequestError>>,
{
    let mut attempt = 1;
    loop {
        let err = match call().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let wait = match &err {
            RequestError::RetryAfter(s) if s.duration() <= MAX_RETRY_AFTER => s.duration(),
            // Network trouble is usually brief; back off 0.5 s, 1 s.
            RequestError::Network(_) | RequestError::Io(_) => {
                Duration::from_millis(500 * 2u64.pow(attempt - 1))
            }
            _ => return Err(err),
        };
        if attempt >= MAX_ATTEMPTS {
            return Err(err);
        }
        tracing::debug!(what, attempt, wait_ms = wait.as_millis() as u64, error = %err, "retrying a Telegram call");
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

/// A sentence saying why Telegram refused, without the token (teloxide strips the URL
/// from network errors).
fn describe(e: &RequestError) -> String {
    match e {
        RequestError::Api(api) => format!("Telegram answered \"{api}\""),
        RequestError::MigrateToChatId(id) => format!(
            "the group was upgraded to a supergroup with chat id {id}; update the route's chat_id"
        ),
        RequestError::RetryAfter(s) => format!(
            "Telegram's flood control asked to wait {} s",
            s.duration().as_secs()
        ),
        RequestError::Network(n) => format!("network error talking to Telegram: {n}"),
        RequestError::InvalidJson { .. } => "Telegram sent an unreadable answer".to_owned(),
        RequestError::Io(e) => format!("I/O error talking to Telegram: {e}"),
    }
}

/// Errors that mean the edit already happened or cannot matter any more.
fn harmless(e: &RequestError) -> bool {
    matches!(
        e,
        RequestError::Api(ApiError::MessageNotModified | ApiError::InvalidQueryId)
    )
}

#[async_trait]
impl Messenger for TelegramMessenger {
    async fn send_question(&self, r: &Confirmation) -> Result<i32, DeliveryError> {
        let text = render::question_text(r);
        let keyboard = render::keyboard(&r.callback_token);
        let message = with_retries("sendMessage", || {
            self.bot
                .send_message(ChatId(r.chat_id), text.clone())
                .parse_mode(ParseMode::Html)
                .link_preview_options(no_preview())
                .reply_markup(keyboard.clone())
                .send()
        })
        .await
        .map_err(|e| DeliveryError::new(describe(&e)))?;
        Ok(message.id.0)
    }

    async fn show_outcome(&self, r: &Confirmation) -> Result<(), DeliveryError> {
        let Some(message_id) = r.message_id else {
            return Ok(());
        };
        let text = render::decided_text(r);
        let result = with_retries("editMessageText", || {
            self.bot
                .edit_message_text(ChatId(r.chat_id), MessageId(message_id), text.clone())
                .parse_mode(ParseMode::Html)
                .link_preview_options(no_preview())
                // An empty keyboard removes the buttons.
                .reply_markup(InlineKeyboardMarkup::default())
                .send()
        })
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if harmless(&e) => Ok(()),
            Err(e) => Err(DeliveryError::new(describe(&e))),
        }
    }

    async fn answer_tap(
        &self,
        query_id: &str,
        text: &str,
        alert: bool,
    ) -> Result<(), DeliveryError> {
        let result = with_retries("answerCallbackQuery", || {
            self.bot
                .answer_callback_query(CallbackQueryId(query_id.to_owned()))
                .text(text.to_owned())
                .show_alert(alert)
                .send()
        })
        .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if harmless(&e) => Ok(()),
            Err(e) => Err(DeliveryError::new(describe(&e))),
        }
    }
}
