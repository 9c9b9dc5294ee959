//! `GET /v1/events`: one Server-Sent Events stream of an agent's interaction events
//! (every `HumanResponse` and every status change), as a channel adapter listens to it.
//!
//! The stream is read with reqwest and parsed here by the text/event-stream rules (`id:`,
//! `event:`, `data:` lines, a blank line ends an event, `:` lines are comments), so the
//! tests check the bytes on the wire, not a library's reading of them.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::SentMessage;
use crate::support::interactions::{
    get_interaction_as, post_interaction_as, tap, wait_for_status_as,
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long a test waits for an event it expects.
const EVENT_WAIT: Duration = Duration::from_secs(10);
/// How long a stream must stay silent to count as having nothing to send.
const QUIET: Duration = Duration::from_millis(1200);

/// One dispatched Server-Sent Event.
#[derive(Debug, Clone, PartialEq)]
struct SseEvent {
    id: String,
    event: String,
    data: Value,
}

impl SseEvent {
    fn seq(&self) -> u64 {
        self.id
            .parse()
            .unwrap_or_else(|_| panic!("event id {:?} is not a number", self.id))
    }

    fn interaction_id(&self) -> &str {
        self.data["interaction_id"].as_str().unwrap_or_default()
    }

    /// `status:<status>` or `response:<respondent>`, for readable assertions.
    fn label(&self) -> String {
        match self.event.as_str() {
            "status" => format!("status:{}", self.data["status"].as_str().unwrap_or("?")),
            "response" => format!(
                "response:{}",
                self.data["response"]["respondent"].as_str().unwrap_or("?")
            ),
            other => format!("{other}:?"),
        }
    }
}

/// A text/event-stream reader over a streaming reqwest response.
struct EventStream {
    response: reqwest::Response,
    /// Bytes received but not yet split into lines.
    buf: Vec<u8>,
    ready: VecDeque<SseEvent>,
    // The event being assembled.
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
    /// Comment lines seen (keep-alives).
    comments: usize,
    /// The last `retry:` value.
    retry: Option<String>,
}

impl EventStream {
    fn new(response: reqwest::Response) -> Self {
        EventStream {
            response,
            buf: Vec::new(),
            ready: VecDeque::new(),
            id: None,
            event: None,
            data: None,
            comments: 0,
            retry: None,
        }
    }

    fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.buf.drain(..=end).collect();
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            let line = String::from_utf8(line).expect("the stream is UTF-8");
            self.line(&line);
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            self.dispatch();
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "id" => self.id = Some(value.to_owned()),
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "retry" => self.retry = Some(value.to_owned()),
            other => panic!("unexpected field {other:?} in the event stream: {line:?}"),
        }
    }

    /// A blank line: an event with data is dispatched; one without (the `retry:` greeting)
    /// is not, as an `EventSource` does.
    fn dispatch(&mut self) {
        let id = self.id.take();
        let event = self.event.take();
        let Some(data) = self.data.take() else {
            return;
        };
        let id = id.unwrap_or_else(|| panic!("an event without id: {event:?} {data}"));
        let event = event.unwrap_or_else(|| panic!("an event without a name: id {id} {data}"));
        let data = serde_json::from_str(&data)
            .unwrap_or_else(|e| panic!("event {id} data is not JSON ({e}): {data}"));
        self.ready.push_back(SseEvent { id, event, data });
    }

    /// The next event, or `None` when none arrives within `within`.
    async fn next_within(&mut self, within: Duration) -> Option<SseEvent> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(e);
            }
            let chunk = tokio::time::timeout_at(deadline, self.response.chunk()).await;
            match chunk {
                Err(_) => return None,
                Ok(Ok(Some(bytes))) => self.feed(&bytes),
                Ok(Ok(None)) => panic!("the event stream ended"),
                Ok(Err(e)) => panic!("the event stream broke: {e}"),
            }
        }
    }

    /// The next event; fails the test after [`EVENT_WAIT`].
    async fn next(&mut self) -> SseEvent {
        self.next_within(EVENT_WAIT)
            .await
            .unwrap_or_else(|| panic!("no event within {EVENT_WAIT:?}"))
    }

    /// The next `n` events.
    async fn take(&mut self, n: usize) -> Vec<SseEvent> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let e = self.next_within(EVENT_WAIT).await.unwrap_or_else(|| {
                panic!(
                    "only {} of {n} events within {EVENT_WAIT:?}: {:?}",
                    out.len(),
                    labels(&out)
                )
            });
            out.push(e);
        }
        out
    }

    /// Fails if an event arrives within [`QUIET`].
    async fn assert_quiet(&mut self, why: &str) {
        if let Some(e) = self.next_within(QUIET).await {
            panic!("{why}, but got {e:?}");
        }
    }
}

fn labels(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(SseEvent::label).collect()
}

/// `GET /v1/events` with the given token and `Last-Event-ID`, as sent.
async fn request_events(
    app: &TestApp,
    token: Option<&str>,
    last_event_id: Option<&str>,
) -> reqwest::Response {
    let mut req = app.client.get(app.url("/v1/events"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(id) = last_event_id {
        req = req.header("Last-Event-ID", id);
    }
    req.send().await.expect("request")
}

/// A listener's stream; once this returns, the service has fixed where it starts.
async fn listen(app: &TestApp, token: &str, last_event_id: Option<&str>) -> EventStream {
    let r = request_events(app, Some(token), last_event_id).await;
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap_or_default();
    assert!(
        content_type.starts_with("text/event-stream"),
        "content type {content_type:?}"
    );
    EventStream::new(r)
}

fn approval(interaction_id: &str, target_humans: &[&str], consensus: &str) -> Value {
    json!({
        "interaction_id": interaction_id,
        "question": format!("Proceed with {interaction_id}?"),
        "interaction_type": "approval",
        "target_humans": target_humans,
        "consensus_mode": consensus,
        "timeout": 600.0,
    })
}

/// POST /v1/interactions; asserts 202 and returns the view.
async fn ask(app: &TestApp, token: &str, body: Value) -> Value {
    let (status, view) = post_interaction_as(app, token, body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{view}");
    view
}

/// How long a question may take to reach a status (`wait_for_status_as`).
const WAIT: Duration = Duration::from_secs(10);

/// The question's message in `chat_id` (the newest one there), once the service has
/// stored its message id (status `delivered`).
async fn question_in(
    app: &TestApp,
    token: &str,
    chat_id: i64,
    n: usize,
    interaction_id: &str,
) -> SentMessage {
    let msgs = app.telegram.wait_for_message_in(chat_id, n).await;
    wait_for_status_as(app, token, interaction_id, "delivered", WAIT).await;
    msgs[n - 1].clone()
}

fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Every status event carries exactly these keys, every response event these.
fn assert_event_shape(e: &SseEvent) {
    match e.event.as_str() {
        "status" => {
            let mut expected = BTreeSet::from([
                "id",
                "interaction_id",
                "status",
                "reason",
                "denial_reason",
                "result",
                "timeout_action",
                "expires_at",
            ]);
            // A step of a pending question (delivered, reminded, ...) names it.
            if e.data.get("step").is_some() {
                expected.insert("step");
            }
            assert_eq!(keys(&e.data), expected, "{e:?}")
        }
        "response" => {
            assert_eq!(
                keys(&e.data),
                BTreeSet::from(["id", "interaction_id", "response"]),
                "{e:?}"
            );
            assert_eq!(
                keys(&e.data["response"]),
                BTreeSet::from([
                    "interaction_id",
                    "respondent",
                    "response_type",
                    "value",
                    "timestamp",
                    "metadata"
                ]),
                "a HumanResponse has exactly AI-Parrot's fields: {e:?}"
            );
            assert_eq!(
                e.data["response"]["interaction_id"], e.data["interaction_id"],
                "{e:?}"
            );
        }
        other => panic!("unexpected event kind {other:?}: {e:?}"),
    }
}

fn assert_increasing(events: &[SseEvent]) {
    for pair in events.windows(2) {
        assert!(
            pair[0].seq() < pair[1].seq(),
            "ids must increase: {:?}",
            events.iter().map(|e| &e.id).collect::<Vec<_>>()
        );
    }
}

#[tokio::test]
async fn a_listener_receives_its_interactions_events_as_they_happen() {
    let app = TestApp::spawn().await;
    let mut events = listen(&app, TOKEN_A, None).await;

    let view = ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("ev-live", &["alice", "bob"], "all_required"), "route": "ops"}),
    )
    .await;
    let record_id = view["id"].as_str().expect("id").to_owned();

    let asked = events.take(2).await;
    assert_eq!(labels(&asked), ["status:pending", "status:delivered"]);
    let msg = question_in(&app, TOKEN_A, OPS_CHAT, 1, "ev-live").await;
    assert_eq!(
        msg.button_texts(),
        ["✅ Approve", "❌ Reject", "✋ Deny with reason"]
    );

    // Each answer is on the stream before the next person taps.
    tap(&app, &msg, "✅ Approve", alice()).await;
    let first = events.take(2).await;
    assert_eq!(labels(&first), ["response:alice", "status:partial"]);
    tap(&app, &msg, "✅ Approve", bob()).await;
    let second = events.take(2).await;
    assert_eq!(labels(&second), ["response:bob", "status:completed"]);

    let all: Vec<SseEvent> = [asked, first, second].concat();
    assert_increasing(&all);
    for e in &all {
        assert_event_shape(e);
        assert_eq!(e.interaction_id(), "ev-live", "{e:?}");
        assert_eq!(e.data["id"], record_id.as_str(), "{e:?}");
    }
    let alice_says = &all[2].data["response"];
    assert_eq!(alice_says["response_type"], "approval");
    assert_eq!(alice_says["value"], true);
    let done = &all[5].data;
    assert_eq!(done["result"], true, "{done}");
    assert_eq!(done["timeout_action"], Value::Null, "{done}");
    assert_eq!(all[0].data["result"], Value::Null);

    // The stream carries exactly the HumanResponses the record holds.
    let (status, view) = get_interaction_as(&app, TOKEN_A, "ev-live", Some("0")).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["status"], "completed");
    assert_eq!(
        view["responses"],
        json!([all[2].data["response"], all[4].data["response"]])
    );
    events.assert_quiet("nothing else happened").await;
}

#[tokio::test]
async fn another_agents_listener_sees_none_of_them() {
    let app = TestApp::spawn().await;
    let mut a = listen(&app, TOKEN_A, None).await;
    let mut b = listen(&app, TOKEN_B, None).await;

    // Agent A's interaction runs its whole course.
    let a_view = ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("shared-id", &[], "first_response"), "route": "ops"}),
    )
    .await;
    let msg = question_in(&app, TOKEN_A, OPS_CHAT, 1, "shared-id").await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    // The first answer settles a first_response question: no `partial` in between.
    let a_events = a.take(4).await;
    assert_eq!(
        labels(&a_events),
        [
            "status:pending",
            "status:delivered",
            "response:111111",
            "status:completed"
        ]
    );

    // Agent B asks under the very same interaction_id: its own record, its own events.
    let b_view = ask(
        &app,
        TOKEN_B,
        json!({"interaction": approval("shared-id", &[], "first_response"), "route": "other"}),
    )
    .await;
    assert_ne!(a_view["id"], b_view["id"]);
    // Had B's stream carried any of A's events, they would come first.
    let b_first = b.next().await;
    assert_eq!(b_first.label(), "status:pending");
    assert_eq!(b_first.data["id"], b_view["id"], "{b_first:?}");

    // And A's stream does not carry B's: A's next event is its own next question.
    let a2 = ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("a-second", &[], "first_response"), "route": "ops"}),
    )
    .await;
    let a_next = a.next().await;
    assert_eq!(a_next.label(), "status:pending");
    assert_eq!(a_next.data["id"], a2["id"], "{a_next:?}");

    // B's question is answered in its chat; only B hears of it.
    let b_msg = question_in(&app, TOKEN_B, OTHER_CHAT, 1, "shared-id").await;
    tap(&app, &b_msg, "❌ Reject", bob()).await;
    let b_rest = b.take(3).await;
    assert_eq!(
        labels(&b_rest),
        ["status:delivered", "response:222222", "status:completed"]
    );
    for e in std::iter::once(&b_first).chain(&b_rest) {
        assert_eq!(e.data["id"], b_view["id"], "{e:?}");
    }
    assert_eq!(b_rest[2].data["result"], false);
    let a_rest = a.take(1).await;
    assert_eq!(labels(&a_rest), ["status:delivered"]);
    assert_eq!(a_rest[0].data["id"], a2["id"]);
    a.assert_quiet("agent A heard of nothing of agent B's")
        .await;
}

#[tokio::test]
async fn reconnecting_with_last_event_id_resumes_exactly_after_that_event() {
    let app = TestApp::spawn().await;
    let mut first = listen(&app, TOKEN_A, None).await;
    ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("resume-1", &["alice", "bob"], "all_required"), "route": "ops"}),
    )
    .await;
    let msg = question_in(&app, TOKEN_A, OPS_CHAT, 1, "resume-1").await;
    tap(&app, &msg, "✅ Approve", alice()).await;
    let seen = first.take(4).await;
    assert_eq!(
        labels(&seen),
        [
            "status:pending",
            "status:delivered",
            "response:alice",
            "status:partial"
        ]
    );
    // The listener goes away having processed only the first two events.
    drop(first);
    let cursor = seen[1].id.clone();

    // While nobody listens: bob's answer settles it, and another question is asked.
    tap(&app, &msg, "✅ Approve", bob()).await;
    wait_for_status_as(&app, TOKEN_A, "resume-1", "completed", WAIT).await;
    ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("resume-2", &[], "first_response"), "route": "ops"}),
    )
    .await;
    question_in(&app, TOKEN_A, OPS_CHAT, 2, "resume-2").await;

    let mut again = listen(&app, TOKEN_A, Some(&cursor)).await;
    let replayed = again.take(6).await;
    assert_eq!(
        labels(&replayed),
        [
            "response:alice",
            "status:partial",
            "response:bob",
            "status:completed",
            "status:pending",
            "status:delivered"
        ]
    );
    // Nothing repeated and nothing lost: the events already seen come back identical,
    // right after the cursor.
    assert_eq!(replayed[..2], seen[2..]);
    assert!(replayed[0].seq() > seen[1].seq());
    assert_increasing(&replayed);
    assert!(
        replayed[..4]
            .iter()
            .all(|e| e.interaction_id() == "resume-1")
    );
    assert!(
        replayed[4..]
            .iter()
            .all(|e| e.interaction_id() == "resume-2")
    );
    replayed.iter().for_each(assert_event_shape);
    again
        .assert_quiet("the replay ends at the newest event")
        .await;

    // The resumed stream then goes on live.
    let r = app
        .client
        .delete(app.url("/v1/interactions/resume-2"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::OK);
    let live = again.next().await;
    assert_eq!(live.label(), "status:cancelled");
    assert_eq!(live.interaction_id(), "resume-2");
    assert!(live.seq() > replayed[5].seq());

    // Resuming from the newest event replays nothing.
    let mut caught_up = listen(&app, TOKEN_A, Some(&live.id)).await;
    caught_up
        .assert_quiet("a listener that has seen everything gets nothing again")
        .await;
}

#[tokio::test]
async fn without_last_event_id_no_history_is_replayed() {
    let app = TestApp::spawn().await;
    ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("old", &[], "first_response"), "route": "ops"}),
    )
    .await;
    let msg = question_in(&app, TOKEN_A, OPS_CHAT, 1, "old").await;
    tap(&app, &msg, "❌ Reject", bob()).await;
    wait_for_status_as(&app, TOKEN_A, "old", "completed", WAIT).await;

    let mut fresh = listen(&app, TOKEN_A, None).await;
    fresh
        .assert_quiet("a new listener starts at now, without history")
        .await;
    ask(
        &app,
        TOKEN_A,
        json!({"interaction": approval("new", &[], "first_response"), "route": "ops"}),
    )
    .await;
    let e = fresh.next().await;
    assert_eq!(e.label(), "status:pending");
    assert_eq!(e.interaction_id(), "new");

    // The history is there for whoever asks for it: Last-Event-ID 0 replays from the start.
    let mut everything = listen(&app, TOKEN_A, Some("0")).await;
    let oldest = everything.next().await;
    assert_eq!(oldest.label(), "status:pending");
    assert_eq!(oldest.interaction_id(), "old");
}

#[tokio::test]
async fn a_bad_last_event_id_is_refused() {
    let app = TestApp::spawn().await;
    for bad in ["abc", "-1", "1.5", "", "0x10", "99999999999999999999"] {
        let r = request_events(&app, Some(TOKEN_A), Some(bad)).await;
        let (status, body) = json_of(r).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_field", "{bad:?}: {body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("Last-Event-ID"),
            "{bad:?}: the message names the header: {message}"
        );
    }
}

#[tokio::test]
async fn unauthenticated_listeners_are_refused() {
    let app = TestApp::spawn().await;
    for token in [None, Some("not-a-token"), Some("")] {
        let r = request_events(&app, token, None).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        assert!(
            r.headers().contains_key("www-authenticate"),
            "{token:?}: {:?}",
            r.headers()
        );
        let (_, body) = json_of(r).await;
        assert_eq!(body["error"]["code"], "unauthorized", "{token:?}: {body}");
    }
    // Even with a cursor: authentication comes first.
    let r = request_events(&app, None, Some("0")).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}
