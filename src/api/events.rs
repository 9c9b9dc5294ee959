//! `GET /v1/events`: the agent's interaction events (answers, status changes) as
//! Server-Sent Events, resumable with `Last-Event-ID`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::error::ApiError;
use super::extract::AuthAgent;
use super::limits::{Held, Slot};
use crate::service::Service;
use crate::storage::AgentEvent;

/// The resume header every `EventSource` sends on reconnecting.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";
/// Events read from the database at a time.
pub const PAGE: u32 = 100;
/// A comment line is sent after this long without an event, so proxies and clients
/// see the connection is alive.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long a client waits before reconnecting after the stream ends (sent as `retry:`).
pub const RECONNECT: Duration = Duration::from_secs(3);

/// Where the stream starts: after the event `Last-Event-ID` names, else after
/// `?after=N`, else (`None`) after the newest event, so a new listener does not replay
/// history. The header wins: a reconnecting `EventSource` sends it along with the URL it
/// first used.
fn resume_after(
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<Option<i64>, ApiError> {
    if let Some(v) = headers.get(LAST_EVENT_ID) {
        let text = v.to_str().unwrap_or_default();
        return seq(text).map(Some).ok_or_else(|| {
            ApiError::field(
                LAST_EVENT_ID,
                "must be a non-negative integer (the id of an event received)",
            )
        });
    }
    match query.get("after") {
        None => Ok(None),
        Some(text) => seq(text).map(Some).ok_or_else(|| {
            ApiError::field(
                "after",
                "must be a non-negative integer (the id of an event received)",
            )
        }),
    }
}

/// A non-negative event number, in plain decimal digits.
fn seq(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `GET /v1/events`
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "agent_events",
    tag = "interactions",
    params(
        ("Last-Event-ID" = Option<String>, Header, pattern = "^[0-9]+$", description = "Resume: only events after this one (a non-negative integer, the `id:` of an event received). Sent by `EventSource` when it reconnects; wins over `after`."),
        ("after" = Option<i64>, Query, minimum = 0, description = "Resume: only events after this one. Without it (and without `Last-Event-ID`) the stream starts with the next new event."),
    ),
    responses(
        (status = 200, description = "A Server-Sent Events stream of this agent's interaction events, oldest first, until the service shuts down: \
            `id: <seq>`, `event: response` (data: `{\"id\", \"interaction_id\", \"response\": <HumanResponse>}`) or `event: status` \
            (data: `{\"id\", \"interaction_id\", \"status\", \"reason\", \"result\", \"timeout_action\"}`), `data: <JSON>`. \
            A comment line keeps the connection alive every 15 s.",
            content_type = "text/event-stream", body = String),
        crate::api::error::Unauthenticated,
        (status = 422, description = "`invalid_field`: `Last-Event-ID` or `after` is not a non-negative integer.", body = crate::api::error::ErrorBody),
        (status = 429, description = "`too_many_streams`: this agent already has `max_streams` event streams open.", body = crate::api::error::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
    ),
    security(("bearer" = [])),
)]
pub async fn stream(
    State(state): State<AppState>,
    AuthAgent(agent): AuthAgent,
    headers: HeaderMap,
    query: Result<Query<HashMap<String, String>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let query = query.map(|Query(q)| q).unwrap_or_default();
    let requested = resume_after(&headers, &query)?;
    // Held by the stream until its client goes away or the service stops.
    let slot = state
        .slots
        .take(&agent.name, Held::Stream, agent.max_streams)?;
    // Subscribed before the first read, so nothing written in between is missed.
    let ticks = state.service.changes().subscribe_events();
    let newest = state
        .service
        .roles()
        .agent_events
        .last_agent_event(&agent.name)
        .await?;
    // A cursor past the newest event (the database was replaced, say) would wait for
    // events that never come; it starts from the newest instead.
    let after = requested.map_or(newest, |n| n.min(newest));
    let cursor = Cursor {
        service: state.service.clone(),
        agent: agent.name.clone(),
        after,
        queue: VecDeque::new(),
        ticks,
        stop: state.stop.clone(),
        greeted: false,
        _slot: slot,
    };
    let events = futures_util::stream::unfold(cursor, Cursor::next);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// The state of one listener's stream.
struct Cursor {
    service: Arc<Service>,
    agent: String,
    /// The newest event sent (or skipped as history).
    after: i64,
    /// Read but not yet sent.
    queue: VecDeque<AgentEvent>,
    ticks: watch::Receiver<u64>,
    stop: CancellationToken,
    /// The `retry:` line went out.
    greeted: bool,
    /// Counts this stream against the agent's `max_streams` while it lives.
    _slot: Slot,
}

impl Cursor {
    /// The next event; `None` ends the stream (shutdown, or the database failing, after
    /// which the client reconnects with `Last-Event-ID` and misses nothing).
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Cursor)> {
        if !self.greeted {
            // Tells the client how soon to reconnect, and gets the headers out at once.
            self.greeted = true;
            return Some((Ok(Event::default().retry(RECONNECT)), self));
        }
        loop {
            if self.stop.is_cancelled() {
                return None;
            }
            if let Some(e) = self.queue.pop_front() {
                return Some((Ok(to_sse(e)), self));
            }
            // Marks the current tick seen before reading, so a write after the read
            // wakes the wait below.
            self.ticks.borrow_and_update();
            match self
                .service
                .roles()
                .agent_events
                .agent_events(&self.agent, self.after, PAGE)
                .await
            {
                Ok(page) if !page.is_empty() => {
                    self.after = page.iter().map(|e| e.seq).max().unwrap_or(self.after);
                    self.queue.extend(page);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(agent = %self.agent, error = %e,
                        "event stream: cannot read events; closing it for the client to resume");
                    return None;
                }
            }
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return None,
                changed = self.ticks.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }
}

/// `id: <seq>`, `event: <kind>`, `data: <JSON>`.
fn to_sse(e: AgentEvent) -> Event {
    // The event name must be one line; what storage holds always is.
    let kind = if e.kind.contains(['\r', '\n']) {
        "message"
    } else {
        e.kind.as_str()
    };
    Event::default()
        .id(e.seq.to_string())
        .event(kind)
        .data(e.data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn after(header: Option<&str>, query: Option<&str>) -> Result<Option<i64>, String> {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            headers.insert(LAST_EVENT_ID, HeaderValue::from_str(h).expect("header"));
        }
        let query: HashMap<String, String> = query
            .map(|q| HashMap::from([("after".to_owned(), q.to_owned())]))
            .unwrap_or_default();
        resume_after(&headers, &query).map_err(|e| match e {
            ApiError::InvalidField { field, .. } => field,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn the_header_wins_over_the_query_and_neither_means_from_now() {
        assert_eq!(after(None, None), Ok(None));
        assert_eq!(after(None, Some("7")), Ok(Some(7)));
        assert_eq!(after(Some("12"), Some("7")), Ok(Some(12)));
        assert_eq!(after(Some("0"), None), Ok(Some(0)));
    }

    #[test]
    fn bad_cursors_are_refused_naming_where_they_came_from() {
        for bad in ["", "-1", "+1", "1.0", "abc", " 1", "99999999999999999999"] {
            assert_eq!(
                after(Some(bad), None),
                Err(LAST_EVENT_ID.to_owned()),
                "{bad:?}"
            );
            assert_eq!(after(None, Some(bad)), Err("after".to_owned()), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn an_event_carries_its_seq_kind_and_data() {
        let e = AgentEvent {
            seq: 42,
            kind: "status".into(),
            data: r#"{"status":"completed"}"#.into(),
        };
        let events = futures_util::stream::iter([Ok::<_, Infallible>(to_sse(e))]);
        let response = Sse::new(events).into_response();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("body");
        assert_eq!(
            std::str::from_utf8(&body).expect("utf-8"),
            "id: 42\nevent: status\ndata: {\"status\":\"completed\"}\n\n"
        );
    }
}
