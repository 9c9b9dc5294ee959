//! Talking to the Bot API: sending questions, showing outcomes, answering taps, naming
//! the people a reminder mentions, and riding out Telegram's faults on the way.
//!
//! Every call goes through `retrying_observed`, which counts it in the metrics, retries
//! what is transient within the call's deadline, and reports what is not (unless it is
//! harmless) at once, so a question that cannot be delivered fails closed quickly.
//! Deadlines follow what each call is for, and messages take a slot from the
//! [`RateLimiter`] before each attempt, in their agent's [`Share`] of the chat or the
//! service's (docs/architecture.md, "Module notes").
//!
//! This file is the [`Messenger`] itself, each of its calls with its deadline; how a
//! call is retried, and what each failure means, is `retry.rs`.

mod retry;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use teloxide::prelude::*;
use teloxide::types::{
    CallbackQueryId, ForceReply, InlineKeyboardMarkup, InputFile, LinkPreviewOptions, MessageId,
    ParseMode, ReplyMarkup, ReplyParameters, ThreadId, UserId,
};
use time::OffsetDateTime;
use tokio::time::Instant;

use super::ratelimit::{Limits, RateLimiter, Reservation, Share};
use super::render;
use crate::domain::interaction::InteractionType;
use crate::domain::question::{Operator, Question};
use crate::metrics::Metrics;
use crate::service::{CommandReply, DeliveryError, Mention, Messenger, PinNotice, Turn, View};

use retry::{Method, no_slot_reason, retrying_from, retrying_observed};

pub(crate) use retry::describe;
pub use retry::error_kind;

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

fn no_preview() -> LinkPreviewOptions {
    LinkPreviewOptions {
        is_disabled: true,
        url: None,
        prefer_small_media: false,
        prefer_large_media: false,
        show_above_text: false,
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
        r: &Question,
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
        r: &Question,
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
        r: &Question,
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
        reply_to: Option<i32>,
        reply: &CommandReply,
    ) -> Result<i32, DeliveryError> {
        let text = super::commands::render(reply, crate::service::now());
        // The command may be deleted meanwhile; the answer is worth sending anyway.
        let reply_to =
            reply_to.map(|m| ReplyParameters::new(MessageId(m)).allow_sending_without_reply());
        let extra = Extra {
            thread,
            markup: super::commands::keyboard(reply).map(ReplyMarkup::InlineKeyboard),
            ..Extra::default()
        };
        self.send_html(chat_id, Share::Service, text, reply_to, extra)
            .await
    }

    async fn send_pin_notice(
        &self,
        chat_id: i64,
        thread: Option<i32>,
        notice: &PinNotice,
    ) -> Result<i32, DeliveryError> {
        // In the service's share: it tells the approvers about the agent's server, like
        // a command's answer, and must not wait behind the agent's questions.
        let extra = Extra {
            thread,
            markup: render::pin_notice_keyboard(notice).map(ReplyMarkup::InlineKeyboard),
            ..Extra::default()
        };
        let text = render::pin_notice_text(notice);
        self.send_html(chat_id, Share::Service, text, None, extra)
            .await
    }

    async fn show_pin_notice(
        &self,
        chat_id: i64,
        message_id: i32,
        notice: &PinNotice,
    ) -> Result<(), DeliveryError> {
        let text = render::pin_notice_text(notice);
        // An empty keyboard removes the Allow button.
        let keyboard = render::pin_notice_keyboard(notice).unwrap_or_default();
        retrying_observed(
            &self.limiter,
            &self.metrics,
            Method::EditMessageText,
            Some((chat_id, Share::Service)),
            Instant::now() + EDIT_PATIENCE,
            || {
                self.bot
                    .edit_message_text(ChatId(chat_id), MessageId(message_id), text.clone())
                    .parse_mode(ParseMode::Html)
                    .link_preview_options(no_preview())
                    .reply_markup(keyboard.clone())
                    .send()
            },
        )
        .await?;
        Ok(())
    }

    async fn send_reason_prompt(
        &self,
        r: &Question,
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

    async fn probe(&self, within: Duration) -> Result<(), String> {
        // Once, not retried: the outage watch probes again in a few seconds, and what it
        // wants to know is whether Telegram answers now.
        match tokio::time::timeout(within, self.bot.get_me().into_future()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(describe(&e)),
            Err(_) => Err(format!(
                "Telegram did not answer getMe within {} s",
                within.as_secs_f64()
            )),
        }
    }

    async fn send_reminder(
        &self,
        r: &Question,
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
