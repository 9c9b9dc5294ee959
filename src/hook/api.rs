//! The service's `/v1` API as the hook calls it: creating with a few retries, long-polling
//! through a short outage, withdrawing, and every failure said in one sentence.

use std::time::{Duration, Instant};

use serde_json::Value;
use time::OffsetDateTime;

use crate::client::{
    Failure, Kind, OUTAGE_PATIENCE, OUTAGE_RETRY, Outage, Reply, Retry, Retrying, V1Client,
    is_terminal,
};
use crate::domain::limits::MAX_LONG_POLL_SECONDS;

use super::clean;

/// Longest long-poll the service allows.
const LONG_POLL_SECONDS: u32 = MAX_LONG_POLL_SECONDS as u32;

/// A failed call: worth retrying (the service unreachable, 5xx, 429), or not.
enum CallError {
    Retry(String),
    Fatal(String),
}

impl CallError {
    fn message(self) -> String {
        match self {
            CallError::Retry(m) | CallError::Fatal(m) => m,
        }
    }
}

/// The statuses worth another attempt: the service busy or failing.
fn worth_retrying(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Creating a question: four attempts in all, a quarter of a second apart and then
/// twice as long each time, while the service cannot be reached or is busy.
const CREATE_RETRY: Retry = Retry {
    attempts: 4,
    delay: Duration::from_millis(250),
    doubling: true,
    retry_status: worth_retrying,
    busy_waits: false,
    retry_failure: |_| true,
};

/// The service's API, as this agent.
pub(super) struct Api {
    client: V1Client,
}

impl Api {
    pub(super) fn new(url: &str, token: String) -> Result<Api, String> {
        let base = url.trim().trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(format!(
                "--url must start with http:// or https://, got '{}'",
                clean(url, 200)
            ));
        }
        let client = V1Client::new(&base, token.into(), None)
            .map_err(|e| format!("cannot set up HTTP: {e}"))?;
        Ok(Api { client })
    }

    /// POST /v1/confirmations, retried a few times while the service is unreachable or
    /// busy. Returns the record and the service's clock.
    pub(super) async fn create(
        &self,
        body: &str,
    ) -> Result<(Value, Option<OffsetDateTime>), String> {
        let mut attempt = 0;
        let answer = self
            .client
            .create(
                body,
                Some(Duration::from_secs(30)),
                &CREATE_RETRY,
                &mut |retrying| {
                    attempt += 1;
                    let e = match retrying {
                        Retrying::Status(reply) => self.status_error(reply),
                        Retrying::Failed(failure) => self.failure(failure),
                        Retrying::Busy(_) => return,
                    };
                    tracing::warn!(attempt, "{e}; retrying");
                },
            )
            .await;
        self.record(answer).map_err(CallError::message)
    }

    /// Long-polls the record until it is terminal, riding out a short outage.
    pub(super) async fn wait_until_terminal(
        &self,
        id: &str,
        deadline: Instant,
    ) -> Result<Value, String> {
        let mut outage = Outage::new(OUTAGE_PATIENCE);
        loop {
            if Instant::now() >= deadline {
                return Err("the service gave no decision in time".into());
            }
            let answer = self
                .client
                .poll(
                    Kind::Confirmation,
                    id,
                    LONG_POLL_SECONDS.into(),
                    Some(Duration::from_secs(u64::from(LONG_POLL_SECONDS) + 15)),
                    &Retry::ONCE,
                    &mut |_| {},
                )
                .await;
            match self.record(answer) {
                Ok((record, _)) if is_terminal(&record) => return Ok(record),
                Ok(_) => outage.over(),
                Err(CallError::Retry(e)) => {
                    if !outage.bearable() {
                        return Err(e);
                    }
                    tokio::time::sleep(OUTAGE_RETRY).await;
                }
                Err(CallError::Fatal(e)) => return Err(e),
            }
        }
    }

    /// DELETE /v1/confirmations/{id}; true when the question was withdrawn.
    pub(super) async fn withdraw(&self, id: &str) -> bool {
        matches!(
            self.client
                .withdraw(Kind::Confirmation, id, Some(Duration::from_secs(5)))
                .await,
            Ok(r) if r.status.is_success()
        )
    }

    /// The record and the service's clock in an answer, or why there is none.
    fn record(
        &self,
        answer: Result<Reply, Failure>,
    ) -> Result<(Value, Option<OffsetDateTime>), CallError> {
        let reply = answer.map_err(|f| CallError::Retry(self.failure(&f)))?;
        let status = reply.status;
        if status.is_success() {
            return match reply.json() {
                Ok(v) if v.get("status").and_then(Value::as_str).is_some() => Ok((v, reply.date)),
                _ => Err(CallError::Fatal(format!(
                    "the service answered {status} with something that is not a confirmation record"
                ))),
            };
        }
        let message = self.status_error(&reply);
        if worth_retrying(status) {
            Err(CallError::Retry(message))
        } else {
            Err(CallError::Fatal(message))
        }
    }

    fn status_error(&self, reply: &Reply) -> String {
        format!(
            "the service answered {}: {}",
            reply.status,
            clean(&reply.error_detail(), 300)
        )
    }

    fn failure(&self, failure: &Failure) -> String {
        match failure {
            Failure::Unreachable(e) => format!(
                "cannot reach the service at {}: {}",
                self.client.base(),
                crate::telemetry::causes(e)
            ),
            Failure::CutOff(_, e) => format!(
                "the service's answer was cut off: {}",
                crate::telemetry::causes(e)
            ),
        }
    }
}
