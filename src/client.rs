//! One client of the service's own `/v1` API, for the commands that act as an agent:
//! `ask`, `claude-hook` and the stdio MCP server (`mcp`), which also report through it
//! what became of a call after it ran ([`RunReportRequest`], [`V1Client::report`]).
//!
//! What is the same for all three lives here once: the bearer token (never in a log or
//! `Debug`), the paths (an id is always one percent-encoded path segment), the body of
//! a new confirmation, the service's clock from its `Date` header, `Retry-After`,
//! retrying a request while the service is out of reach or busy ([`Retry`]), long-polls
//! ([`V1Client::poll`]) and riding out a short outage between them ([`Outage`]). What
//! differs is each command's to decide and to say: how many attempts a request is worth
//! (a person typing `ask` waits; a hook that Claude Code runs must answer), and the
//! words its user reads. So the client hands back what happened ([`Reply`],
//! [`Failure`]) and each caller words it.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use secrecy::{ExposeSecret, SecretString};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use time::OffsetDateTime;

use crate::domain::ids::path_segment;
use crate::domain::question::Status;
use crate::domain::run_report::MAX_REPORT_CHARS;

/// How long a long-poll waits ride out the service answering 503 or being out of reach
/// (a replica restarting behind a load balancer) before they give up.
pub const OUTAGE_PATIENCE: Duration = Duration::from_secs(30);
/// The pause between two asks during such an outage.
pub const OUTAGE_RETRY: Duration = Duration::from_secs(1);

/// Which kind of request an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Confirmation,
    Interaction,
}

impl Kind {
    /// The path of the request `id` of this kind.
    pub fn path(self, id: &str) -> String {
        match self {
            Kind::Confirmation => format!("/v1/confirmations/{}", path_segment(id)),
            Kind::Interaction => format!("/v1/interactions/{}", path_segment(id)),
        }
    }
}

/// Whether a record (a confirmation's or an interaction's) has its outcome: a status
/// the service defines that is not `pending`. A record without one, or with one this
/// build does not know, has none yet: the caller keeps waiting, within its own bound,
/// and a wait that ends that way fails closed.
pub fn is_terminal(record: &Value) -> bool {
    record
        .get("status")
        .and_then(Value::as_str)
        .and_then(Status::parse)
        .is_some_and(Status::is_terminal)
}

/// Seconds from now until a record's `expires_at` (0 once past), when it has one.
pub fn seconds_left(record: &Value) -> Option<f64> {
    let t = time::OffsetDateTime::parse(
        record["expires_at"].as_str()?,
        &time::format_description::well_known::Rfc3339,
    )
    .ok()?;
    Some((t - OffsetDateTime::now_utc()).as_seconds_f64().max(0.0))
}

/// The body of `POST /v1/confirmations` as the commands send it: `params` verbatim (its
/// keys in their order and every digit of its numbers), the rest only when given.
#[derive(Serialize)]
pub struct NewConfirmation<'a> {
    pub tool: &'a str,
    pub params: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub route: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_seconds: Option<u64>,
    /// Whether an approver may edit the call (in the console, against `args_schema`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub allow_edit: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub args_schema: Option<&'a Value>,
    /// The MCP server the call goes to (the gateway's upstream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<&'a str>,
    /// The tool's MCP annotations, sent only for an upstream trusted with them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<&'a Value>,
    /// A grant presented as optional: enough by itself when a live one covers the
    /// call, and asked about as usual when none does (the MCP gateway).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub grant: Option<OptionalGrant>,
    pub wait: Suspend,
    pub idempotency_key: &'a str,
}

/// `grant_scope` with `require_grant_only` and `grant_optional`, as
/// [`NewConfirmation::grant`] sends them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionalGrant(pub String);

impl Serialize for OptionalGrant {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("grant_scope", &self.0)?;
        map.serialize_entry("require_grant_only", &true)?;
        map.serialize_entry("grant_optional", &true)?;
        map.end()
    }
}

/// `wait: "suspend"`, the only wait the commands ask for: the record comes back as soon
/// as the question is stored, and the wait is a series of long-polls, none longer than a
/// minute, so no proxy or client timeout cuts it and the caller can say what it waits
/// for.
#[derive(Debug, Clone, Copy)]
pub struct Suspend;

impl Serialize for Suspend {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("suspend")
    }
}

impl NewConfirmation<'_> {
    /// The JSON text sent.
    pub fn to_json(&self) -> String {
        // Strings, finite numbers and valid raw JSON: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What became of a confirmed call, as `POST /v1/confirmations/{id}/outcome` takes it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[schemars(rename = "OutcomeStatus")]
#[serde(rename_all = "snake_case")]
pub enum RunReportStatus {
    /// The call ran and did what it was asked.
    Executed,
    /// The call ran, or was started, and failed.
    Failed,
    /// The call was approved but never run.
    NotExecuted,
    /// Nobody can tell whether it ran: the reporter lost track of it (an MCP gateway
    /// whose upstream went away mid-call).
    Unknown,
}

impl RunReportStatus {
    /// The word the API uses.
    pub fn as_str(self) -> &'static str {
        match self {
            RunReportStatus::Executed => "executed",
            RunReportStatus::Failed => "failed",
            RunReportStatus::NotExecuted => "not_executed",
            RunReportStatus::Unknown => "unknown",
        }
    }
}

/// The body of an outcome report. Built through [`RunReportRequest::executed`],
/// [`RunReportRequest::failed`], [`RunReportRequest::not_executed`] or
/// [`RunReportRequest::unknown`], which cut `summary` and `error` to
/// [`MAX_REPORT_CHARS`], so a report is never refused for its length: a command's
/// stderr line or a tool's output can be any size, and the service would answer 422
/// to the whole report for one character too many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReportRequest {
    pub status: RunReportStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl RunReportRequest {
    pub fn executed(summary: Option<&str>, duration: Option<Duration>) -> RunReportRequest {
        RunReportRequest {
            status: RunReportStatus::Executed,
            summary: summary.map(|s| cut(s, MAX_REPORT_CHARS)),
            error: None,
            duration_ms: duration.map(millis),
        }
    }

    pub fn failed(error: &str, duration: Option<Duration>) -> RunReportRequest {
        RunReportRequest {
            status: RunReportStatus::Failed,
            summary: None,
            error: Some(cut(error, MAX_REPORT_CHARS)),
            duration_ms: duration.map(millis),
        }
    }

    pub fn not_executed(summary: Option<&str>) -> RunReportRequest {
        RunReportRequest {
            status: RunReportStatus::NotExecuted,
            summary: summary.map(|s| cut(s, MAX_REPORT_CHARS)),
            error: None,
            duration_ms: None,
        }
    }

    /// Nobody can tell whether the call ran, and `reason` says why ("the upstream MCP
    /// server exited mid-call"). A later `executed` or `failed` report may replace it.
    pub fn unknown(reason: &str) -> RunReportRequest {
        RunReportRequest {
            status: RunReportStatus::Unknown,
            summary: None,
            error: Some(cut(reason, MAX_REPORT_CHARS)),
            duration_ms: None,
        }
    }

    /// The JSON text sent.
    pub fn to_json(&self) -> String {
        // Strings and integers: serializing cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `s` trimmed, at most `max` characters, the last one `…` when it was cut; cut on a
/// character boundary, never inside one.
pub fn cut(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// What the service answered.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: String,
    /// The service's clock when it answered (its `Date` header).
    pub date: Option<OffsetDateTime>,
    /// What its `Retry-After` header asks for, in seconds.
    pub retry_after: Option<u64>,
}

impl Reply {
    /// The body as JSON, if it is.
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.body)
    }

    /// `code: message` of an error body, else the body as it is.
    pub fn error_detail(&self) -> String {
        self.json()
            .ok()
            .and_then(|v| {
                let e = v.get("error")?;
                Some(format!(
                    "{}: {}",
                    e.get("code")?.as_str()?,
                    e.get("message")?.as_str()?
                ))
            })
            .unwrap_or_else(|| self.body.clone())
    }
}

/// Why there is no [`Reply`].
#[derive(Debug)]
pub enum Failure {
    /// The request got no answer (refused, DNS, TLS, timeout).
    Unreachable(reqwest::Error),
    /// The service answered this status, but its body was cut off.
    CutOff(StatusCode, reqwest::Error),
}

impl Failure {
    /// The underlying error.
    pub fn error(&self) -> &reqwest::Error {
        match self {
            Failure::Unreachable(e) | Failure::CutOff(_, e) => e,
        }
    }
}

/// One step of a retried request, for the caller to say or log.
pub enum Retrying<'a> {
    /// 429: trying again after this many seconds (the service's `Retry-After`).
    Busy(u64),
    /// The service answered a status worth another attempt.
    Status(&'a Reply),
    /// No answer, or a cut-off one.
    Failed(&'a Failure),
}

/// How many attempts a request is worth, and when.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts in all, the first included, while the service is out of reach, cuts its
    /// answer off or answers a status `retry_status` accepts.
    pub attempts: u32,
    /// The pause before the second attempt.
    pub delay: Duration,
    /// Whether each further pause is twice the one before.
    pub doubling: bool,
    /// The statuses worth another attempt.
    pub retry_status: fn(StatusCode) -> bool,
    /// Whether a 429 waits for its `Retry-After` (1 to 60 s) without counting as an
    /// attempt: the service is up and a long-poll slot will free up.
    pub busy_waits: bool,
    /// Which failures are worth another attempt.
    pub retry_failure: fn(&Failure) -> bool,
}

impl Retry {
    /// One attempt, whatever happens.
    pub const ONCE: Retry = Retry {
        attempts: 1,
        delay: Duration::ZERO,
        doubling: false,
        retry_status: |_| false,
        busy_waits: false,
        retry_failure: |_| false,
    };
}

/// How long the service has been out of reach, for waits that ride out a short outage.
#[derive(Debug)]
pub struct Outage {
    patience: Duration,
    since: Option<Instant>,
}

impl Outage {
    pub fn new(patience: Duration) -> Outage {
        Outage {
            patience,
            since: None,
        }
    }

    /// The service answered: any outage is over.
    pub fn over(&mut self) {
        self.since = None;
    }

    /// The service failed once more: whether the outage is still short enough to wait
    /// on (it starts now if it had not yet).
    pub fn bearable(&mut self) -> bool {
        self.since.get_or_insert_with(Instant::now).elapsed() < self.patience
    }
}

/// The service's `/v1` API, as one agent.
#[derive(Clone)]
pub struct V1Client {
    http: reqwest::Client,
    base: String,
    token: SecretString,
}

impl std::fmt::Debug for V1Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("V1Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl V1Client {
    /// A client of the service at `base` (`http(s)://host[:port]`, no trailing slash)
    /// with an agent's `token`. `timeout` bounds every request as a whole when given;
    /// connecting is always bounded (10 s).
    pub fn new(
        base: &str,
        token: SecretString,
        timeout: Option<Duration>,
    ) -> reqwest::Result<V1Client> {
        let mut http = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        if let Some(timeout) = timeout {
            http = http.timeout(timeout);
        }
        Ok(V1Client {
            http: http.build()?,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// A client of the service's own API at its loopback address `base`, as the agent
    /// whose `token` it is (the gateways the service hosts). Never through a proxy
    /// from the environment: the request is the service's to itself.
    pub fn loopback(base: &str, token: SecretString) -> reqwest::Result<V1Client> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .no_proxy()
            .build()?;
        Ok(V1Client {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// The service's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// One request: `path` (with its query) under the base, a JSON `body` if any, and
    /// a `timeout` for this request if given.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
        timeout: Option<Duration>,
    ) -> Result<Reply, Failure> {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(self.token.expose_secret());
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_owned());
        }
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        let response = request.send().await.map_err(Failure::Unreachable)?;
        let status = response.status();
        let headers = response.headers();
        let date = headers
            .get(reqwest::header::DATE)
            .and_then(|d| d.to_str().ok())
            .and_then(http_date);
        let retry_after = headers
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let body = response
            .text()
            .await
            .map_err(|e| Failure::CutOff(status, e))?;
        Ok(Reply {
            status,
            body,
            date,
            retry_after,
        })
    }

    /// [`Self::send`], tried again as `retry` says; `retrying` hears of every further
    /// attempt before its pause. Gives the last answer (a retried status included) or
    /// the last failure once the attempts are spent.
    pub async fn send_retrying(
        &self,
        method: Method,
        path: &str,
        body: Option<&str>,
        timeout: Option<Duration>,
        retry: &Retry,
        retrying: &mut (dyn FnMut(Retrying<'_>) + Send),
    ) -> Result<Reply, Failure> {
        let mut attempts = 0;
        let mut delay = retry.delay;
        loop {
            let answer = self.send(method.clone(), path, body, timeout).await;
            let pause = match &answer {
                Ok(reply) if reply.status == StatusCode::TOO_MANY_REQUESTS && retry.busy_waits => {
                    let secs = reply.retry_after.unwrap_or(1).clamp(1, 60);
                    retrying(Retrying::Busy(secs));
                    tokio::time::sleep(Duration::from_secs(secs)).await;
                    continue;
                }
                Ok(reply) if (retry.retry_status)(reply.status) => {
                    attempts += 1;
                    if attempts >= retry.attempts {
                        return answer;
                    }
                    retrying(Retrying::Status(reply));
                    delay
                }
                Ok(_) => return answer,
                Err(failure) => {
                    attempts += 1;
                    if attempts >= retry.attempts || !(retry.retry_failure)(failure) {
                        return answer;
                    }
                    retrying(Retrying::Failed(failure));
                    delay
                }
            };
            tokio::time::sleep(pause).await;
            if retry.doubling {
                delay *= 2;
            }
        }
    }

    /// `POST /v1/confirmations` with `body`.
    pub async fn create(
        &self,
        body: &str,
        timeout: Option<Duration>,
        retry: &Retry,
        retrying: &mut (dyn FnMut(Retrying<'_>) + Send),
    ) -> Result<Reply, Failure> {
        self.send_retrying(
            Method::POST,
            "/v1/confirmations",
            Some(body),
            timeout,
            retry,
            retrying,
        )
        .await
    }

    /// One long-poll of the request `id`: `GET …/{id}?wait=N`.
    pub async fn poll(
        &self,
        kind: Kind,
        id: &str,
        wait_seconds: u64,
        timeout: Option<Duration>,
        retry: &Retry,
        retrying: &mut (dyn FnMut(Retrying<'_>) + Send),
    ) -> Result<Reply, Failure> {
        let path = format!("{}?wait={wait_seconds}", kind.path(id));
        self.send_retrying(Method::GET, &path, None, timeout, retry, retrying)
            .await
    }

    /// `POST /v1/confirmations/{id}/outcome`: what became of the confirmed call `id`.
    pub async fn report(
        &self,
        id: &str,
        outcome: &RunReportRequest,
        timeout: Option<Duration>,
        retry: &Retry,
        retrying: &mut (dyn FnMut(Retrying<'_>) + Send),
    ) -> Result<Reply, Failure> {
        let path = format!("{}/outcome", Kind::Confirmation.path(id));
        let body = outcome.to_json();
        self.send_retrying(Method::POST, &path, Some(&body), timeout, retry, retrying)
            .await
    }

    /// `DELETE …/{id}`: withdraws the question.
    pub async fn withdraw(
        &self,
        kind: Kind,
        id: &str,
        timeout: Option<Duration>,
    ) -> Result<Reply, Failure> {
        self.send(Method::DELETE, &kind.path(id), None, timeout)
            .await
    }
}

/// An HTTP `Date` header (IMF-fixdate, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(s: &str) -> Option<OffsetDateTime> {
    let f = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::PrimitiveDateTime::parse(s.trim(), &f)
        .ok()
        .map(|t| t.assume_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_services_clock_is_read_from_an_imf_fixdate() {
        let t = http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(t.unix_timestamp(), 784_111_777);
        assert!(http_date("yesterday").is_none());
    }

    #[test]
    fn a_new_confirmation_keeps_its_params_verbatim_and_leaves_out_what_was_not_given() {
        let params = RawValue::from_string(r#"{"b": 1.50, "a": "x"}"#.into()).unwrap();
        let body = NewConfirmation {
            tool: "t",
            params: &params,
            owner_id: None,
            template: Some("{b}"),
            context: None,
            timeout_seconds: Some(30.0),
            route: None,
            window_seconds: None,
            allow_edit: false,
            args_schema: None,
            server: None,
            annotations: None,
            grant: None,
            wait: Suspend,
            idempotency_key: "k",
        }
        .to_json();
        assert_eq!(
            body,
            r#"{"tool":"t","params":{"b": 1.50, "a": "x"},"template":"{b}","timeout_seconds":30.0,"wait":"suspend","idempotency_key":"k"}"#
        );
    }

    #[test]
    fn an_outcome_is_cut_to_the_services_limit_on_a_character_boundary() {
        let long = "é".repeat(600);
        let o = RunReportRequest::failed(&long, Some(Duration::from_millis(1500)));
        let error = o.error.as_deref().unwrap();
        assert_eq!(error.chars().count(), MAX_REPORT_CHARS);
        assert!(error.ends_with('…'));
        assert_eq!(
            RunReportRequest::executed(None, Some(Duration::from_millis(1234))).to_json(),
            r#"{"status":"executed","duration_ms":1234}"#
        );
        assert_eq!(
            RunReportRequest::not_executed(Some("  skipped  ")).to_json(),
            r#"{"status":"not_executed","summary":"skipped"}"#
        );
        assert_eq!(
            RunReportRequest::unknown("the upstream exited").to_json(),
            r#"{"status":"unknown","error":"the upstream exited"}"#
        );
        let exact = "x".repeat(MAX_REPORT_CHARS);
        assert_eq!(cut(&exact, MAX_REPORT_CHARS), exact);
    }

    #[test]
    fn the_token_never_shows_in_debug() {
        let client =
            V1Client::new("http://127.0.0.1:1", "s3cret-token".to_owned().into(), None).unwrap();
        assert!(!format!("{client:?}").contains("s3cret"));
    }
}
