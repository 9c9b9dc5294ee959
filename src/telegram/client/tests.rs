use std::sync::Mutex;

use teloxide::types::{ChatId, Seconds};
use teloxide::{ApiError, RequestError};

use super::retry::{Backoff, Class, FIRST_BACKOFF, GaveUp, MAX_BACKOFF, classify, retrying};
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
