//! `serve --demo` without `HITL_DEMO_OPERATOR_ID`: the demo's approver is the first
//! person who sends `/start` to the bot in a private chat within a minute of the start,
//! so a newcomer needs no user id before anything can tell them theirs.
//!
//! This runs before the service is built (long polling, read with `getUpdates`), and
//! its result is fixed for the life of the process: the configuration the service then
//! runs on is the ordinary demo one, with that person as its only approver. Who can be
//! adopted is narrow on purpose, since adoption hands out the right to approve (see
//! [`adopt_first_starter`]).

use std::time::Duration;

use anyhow::bail;
use teloxide::prelude::*;
use teloxide::types::{ParseMode, Update, UpdateKind};
use teloxide::utils::html::escape;
use time::OffsetDateTime;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::commands::Parsed;
use crate::config::Config;
use crate::domain::question::Operator;
use crate::service::Command;

/// How long before the start a `/start` may be dated and still count: Telegram dates
/// messages in whole seconds, by its own clock.
const CLOCK_GRACE_SECONDS: i64 = 2;

/// The person the demo adopted as its approver.
#[derive(Debug, Clone)]
pub struct Adopted {
    pub operator: Operator,
    /// When their `/start` was taken.
    pub at: OffsetDateTime,
}

/// Why a `/start` is passed over, or `None` when it adopts its sender.
fn passed_over(update: &Update, started_unix: i64, me: &str) -> Option<Result<(), &'static str>> {
    let UpdateKind::Message(m) = &update.kind else {
        return None;
    };
    if !matches!(
        super::updates::command_from(m, Some(me)),
        Some(Parsed::Ours(Ok(Command::Start)))
    ) {
        return None;
    }
    let Some(from) = m.from.as_ref() else {
        return Some(Err("it has no sender"));
    };
    Some(if from.is_bot {
        Err("it comes from a bot")
    } else if !m.chat.is_private() || i64::try_from(from.id.0) != Ok(m.chat.id.0) {
        Err("it was sent in a group: the demo asks in its approver's private chat with the bot")
    } else if m.date.timestamp() < started_unix - CLOCK_GRACE_SECONDS {
        Err("it was sent before the demo started")
    } else {
        Ok(())
    })
}

/// Waits up to `within` for the first person to send `/start` to the bot in a private
/// chat, answers them, and returns them. Fails when nobody did in time (saying how to go
/// on), when `stop` fires, or when Telegram cannot be reached; only long polling can wait
/// like this, so webhook mode is refused.
///
/// Updates read meanwhile that adopt nobody are consumed (the service has no question
/// for them to answer yet); those after the adopting `/start` are left for the service.
///
/// `operator_env` is the variable that would have named the approver
/// (`HITL_DEMO_OPERATOR_ID`), which the caller reads; the messages tell people to set it.
/// It is passed in so that this adapter does not import the command line's.
///
/// Who qualifies:
/// - only with `--demo` and no operator id given (the caller decides that);
/// - only once: the first who qualifies ends the wait, anyone after them is answered by
///   the running service as someone who is not the demo's approver;
/// - only within `within` after the start, and only a `/start` sent after the start (a
///   `/start` queued at Telegram from earlier, by whoever found the bot, is not a claim
///   made now);
/// - only a person (not a bot) in their own private chat with the bot: the demo's route
///   is that chat, so the one adopted is the one who will see the questions.
///
/// Every `/start` passed over is logged with the reason; the adoption is logged and (by
/// the caller, once the database is open) recorded in the audit trail.
pub async fn adopt_first_starter(
    config: &Config,
    operator_env: &str,
    within: Duration,
    stop: &CancellationToken,
) -> anyhow::Result<Adopted> {
    if !matches!(config.telegram_mode, crate::config::TelegramMode::Polling) {
        bail!(
            "--demo without {operator_env} learns its approver by long polling, and \
             telegram.mode is \"webhook\": set {operator_env} to your numeric Telegram user \
             id, or use mode = \"polling\""
        );
    }
    let started = OffsetDateTime::now_utc();
    let deadline = Instant::now() + within;
    let bot = super::client::build_bot(
        config.bot_token(),
        config.telegram_api_url.clone(),
        config.poll_timeout_seconds,
    );
    let username = bot_username(&bot, within, deadline, stop).await?;
    tracing::info!(
        bot = %format!("@{username}"),
        link = %format!("https://t.me/{username}"),
        within_s = within.as_secs(),
        "demo: no {} set; the first person to send /start to the bot in a private chat \
         within the next {} s becomes the demo's only approver",
        operator_env,
        within.as_secs()
    );

    let (adopted, offset) =
        wait_for_starter(&bot, config, &username, started, deadline, stop).await?;
    // What was read is confirmed, so the service's polling starts after it (and after
    // the adopting /start, which is answered here).
    acknowledge(&bot, offset).await;
    let Some((operator, chat)) = adopted else {
        bail!(
            "nobody sent /start to @{username} in a private chat within {} s of the start, so \
             the demo has no approver and does not run. Start it again and, within the \
             minute, open https://t.me/{username} and send /start; or set {} to your \
             numeric Telegram user id (once the demo runs, the bot's answer to /start \
             names it)",
            within.as_secs(),
            operator_env
        );
    };
    tracing::warn!(
        user_id = operator.id,
        name = %operator.name,
        username = ?operator.username,
        "demo: adopted the first person who sent /start in a private chat as the demo's only approver"
    );
    welcome(&bot, &operator, chat, operator_env).await;
    Ok(Adopted {
        operator,
        at: crate::service::now(),
    })
}

/// The bot's username (`getMe`), which `/start@bot` names and the log's link shows.
async fn bot_username(
    bot: &Bot,
    within: Duration,
    deadline: Instant,
    stop: &CancellationToken,
) -> anyhow::Result<String> {
    let me = tokio::select! {
        _ = stop.cancelled() => bail!("stopped before anyone was adopted"),
        r = tokio::time::timeout_at(deadline, bot.get_me().send()) => r,
    };
    let me = match me {
        Ok(Ok(me)) => me,
        Ok(Err(e)) => bail!(
            "cannot ask Telegram for the bot's name (getMe): {}",
            super::client::describe(&e)
        ),
        Err(_) => bail!(
            "Telegram did not answer getMe within {} s",
            within.as_secs()
        ),
    };
    Ok(me.user.username.clone().unwrap_or_default())
}

/// Reads updates until the first `/start` that adopts its sender, or until `deadline`;
/// returns who (with their chat), if anyone, and the offset past every update read.
async fn wait_for_starter(
    bot: &Bot,
    config: &Config,
    username: &str,
    started: OffsetDateTime,
    deadline: Instant,
    stop: &CancellationToken,
) -> anyhow::Result<(Option<(Operator, ChatId)>, i32)> {
    let mut offset: i32 = 0;
    let mut webhook_deleted = false;
    let adopted = 'wait: loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break None;
        }
        let poll = u32::try_from(left.as_secs())
            .unwrap_or(u32::MAX)
            .clamp(1, config.poll_timeout_seconds.max(1));
        let request = bot
            .get_updates()
            .offset(offset)
            .timeout(poll)
            .allowed_updates(super::updates::allowed());
        let updates = tokio::select! {
            _ = stop.cancelled() => bail!("stopped before anyone was adopted"),
            r = tokio::time::timeout_at(deadline, request.send()) => match r {
                Ok(r) => r,
                Err(_) => break None,
            },
        };
        let updates = match updates {
            Ok(u) => u,
            Err(e) if !webhook_deleted && super::polling::is_webhook_conflict(&e) => {
                // As the service's own polling does (src/telegram/polling.rs): a webhook
                // left by webhook mode refuses getUpdates; deleted once, updates kept.
                tracing::warn!("a Telegram webhook is set for this bot; deleting it to poll");
                let _ = bot.delete_webhook().send().await;
                webhook_deleted = true;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %super::client::describe(&e), "getUpdates failed");
                tokio::time::sleep(Duration::from_secs(1).min(left)).await;
                continue;
            }
        };
        for update in updates {
            let id = update.id.0 as i32;
            offset = offset.max(id + 1);
            match passed_over(&update, started.unix_timestamp(), username) {
                None => {}
                Some(Err(why)) => {
                    let (chat_id, user_id) = match &update.kind {
                        UpdateKind::Message(m) => (m.chat.id.0, m.from.as_ref().map(|f| f.id.0)),
                        _ => (0, None),
                    };
                    tracing::info!(
                        chat_id,
                        user_id,
                        why,
                        "demo: a /start passed over for adoption"
                    );
                }
                Some(Ok(())) => {
                    if let UpdateKind::Message(m) = &update.kind
                        && let Some(from) = m.from.as_ref()
                    {
                        break 'wait Some((super::updates::operator(from), m.chat.id));
                    }
                }
            }
        }
    };
    Ok((adopted, offset))
}

/// Confirms the updates read, so the service's polling starts after them.
async fn acknowledge(bot: &Bot, offset: i32) {
    if offset != 0 {
        let ack = bot.get_updates().offset(offset).timeout(0).limit(1);
        let _ = tokio::time::timeout(Duration::from_secs(5), ack.send()).await;
    }
}

/// Tells the adopted approver so, and how to skip the step next time.
async fn welcome(bot: &Bot, operator: &Operator, chat: ChatId, operator_env: &str) {
    let text = format!(
        "✅ You are this demo's approver: the first to send /start after it started. Questions \
         from the agent <b>demo</b> come to this chat, and only you can decide them.\n\
         Your user id is <code>{id}</code>: start the demo with \
         <code>{env}={id}</code> to skip this step next time.",
        id = operator.id,
        env = escape(operator_env),
    );
    let sent = bot
        .send_message(chat, text)
        .parse_mode(ParseMode::Html)
        .send()
        .await;
    if let Err(e) = sent {
        tracing::warn!(user_id = operator.id, error = %super::client::describe(&e),
            "demo: could not tell the adopted approver so");
    }
}
