//! Calls made once at start (`getMe`, `setMyCommands`, `setWebhook`): Telegram being
//! down then must not stop the service, so each is retried in the background, with a
//! growing pause, until it succeeds or shutdown begins.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// First and longest pause between attempts of a startup call.
const FIRST_PAUSE: Duration = Duration::from_secs(1);
const LONGEST_PAUSE: Duration = Duration::from_secs(60);

/// Runs `call` until it succeeds (`Some`) or `stop` fires (`None`), counting every
/// attempt in `metrics`. Flood control's `retry_after` is honoured; other failures wait
/// the growing pause. teloxide's errors carry no secret: API errors are Telegram's
/// description, and network errors have the bot token cut out of their URL.
pub async fn until_ok<T, F, Fut>(
    stop: &CancellationToken,
    metrics: &Metrics,
    method: &'static str,
    mut call: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, teloxide::RequestError>>,
{
    let mut pause = FIRST_PAUSE;
    loop {
        let started = Instant::now();
        let result = tokio::select! {
            _ = stop.cancelled() => return None,
            r = call() => r,
        };
        let error = result.as_ref().err().map(super::client::error_kind);
        metrics.telegram_call(method, Some(started.elapsed()), error);
        let error = match result {
            Ok(v) => return Some(v),
            Err(e) => e,
        };
        let wait = match &error {
            teloxide::RequestError::RetryAfter(s) => s.duration().max(pause),
            _ => pause,
        };
        tracing::warn!(method, error = %super::client::describe(&error), retry_in_s = wait.as_secs(),
            "a startup call to Telegram failed; retrying");
        tokio::select! {
            _ = stop.cancelled() => return None,
            _ = tokio::time::sleep(wait) => {}
        }
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
