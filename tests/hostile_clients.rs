//! The HTTP server against hostile clients: sockets that never ask anything, slow-loris
//! headers, and agents opening more event streams and long-polls than they may. Raw TCP
//! sockets play the attackers; `/healthz`, the agents' API and the Telegram webhook route
//! must keep answering.
//!
//! Bounds are generous: every "answers" is checked against a wait far shorter than the
//! timeout that would otherwise have freed a connection, and every "is closed" against a
//! wait far longer than the timeout that closes it.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use support::app::*;
use support::fake_telegram::FakeTelegram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The connection limit the flood tests configure.
const LIMIT: usize = 8;
/// How long an answer may take while the pool is full: far below the 60 s timeouts
/// those tests configure, so only closing idle connections can explain it.
const PROMPT: Duration = Duration::from_secs(10);
/// How long a test waits for a connection it expects the service to close.
const CLOSE_WAIT: Duration = Duration::from_secs(20);

/// Settings edit: `extra` lines in `[server]`.
fn server(extra: &str) -> impl FnOnce(String) -> String + use<> {
    let extra = extra.to_owned();
    move |toml| {
        toml.replacen(
            "bind = \"127.0.0.1:0\"\n",
            &format!("bind = \"127.0.0.1:0\"\n{extra}"),
            1,
        )
    }
}

/// A small connection limit with timeouts too long to free anything during the test.
fn small_pool() -> impl FnOnce(String) -> String {
    server(&format!(
        "max_connections = {LIMIT}\nheader_read_timeout_seconds = 60\nidle_timeout_seconds = 60\n"
    ))
}

/// `n` TCP connections that send nothing, opened one after the other.
async fn idle_sockets(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::with_capacity(n);
    for _ in 0..n {
        sockets.push(TcpStream::connect(addr).await.expect("connect"));
    }
    sockets
}

/// Whether the service closes `socket` within `bound` (EOF or reset), skipping whatever
/// it sends first.
async fn closed_within(socket: &mut TcpStream, bound: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(bound, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

/// Whether `socket` is still open: nothing to read and no EOF for a moment.
async fn still_open(socket: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(300), socket.read(&mut buf))
        .await
        .is_err()
}

/// `GET /healthz` on a connection of its own (no pooled connection to reuse).
async fn healthz(addr: SocketAddr) -> StatusCode {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let r = tokio::time::timeout(PROMPT, client.get(format!("http://{addr}/healthz")).send())
        .await
        .expect("/healthz answers promptly while the pool is full")
        .expect("request");
    r.status()
}

#[tokio::test]
async fn many_idle_connections_do_not_stop_healthz_and_the_longest_idle_are_closed_first() {
    let mut app = TestApp::spawn_with_settings(small_pool()).await;
    let mut flood = idle_sockets(app.addr, 3 * LIMIT).await;

    for _ in 0..3 {
        assert_eq!(healthz(app.addr).await, StatusCode::OK);
    }
    // The agents' API gets through too.
    let (status, record) = app
        .create(json!({"tool": "deploy", "params": {}, "wait": "suspend"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{record}");

    // Each newcomer closed the connection idle longest: the first two thirds of the flood
    // went (60 s before their timeouts), the newest is still open.
    for (i, socket) in flood.iter_mut().take(2 * LIMIT).enumerate() {
        assert!(
            closed_within(socket, PROMPT).await,
            "idle connection {i} (of the oldest) is still open"
        );
    }
    let newest = flood.last_mut().expect("a socket");
    assert!(
        still_open(newest).await,
        "the newest idle connection was closed too"
    );

    // A stop closes idle connections, also one halfway through its first request's
    // headers, rather than waiting for requests that never come.
    let mut halfway = TcpStream::connect(app.addr).await.expect("connect");
    halfway
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: hitl\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.stop().await;
    assert!(
        closed_within(&mut halfway, PROMPT).await,
        "the connection halfway through its headers outlived the stop"
    );
    for (i, socket) in flood.iter_mut().enumerate().skip(2 * LIMIT + 1) {
        assert!(
            closed_within(socket, PROMPT).await,
            "idle connection {i} outlived the stop"
        );
    }
}

#[tokio::test]
async fn an_open_event_stream_is_never_closed_to_make_room() {
    let app = TestApp::spawn_with_settings(small_pool()).await;
    let mut stream = app
        .client
        .get(app.url("/v1/events"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .expect("request");
    assert_eq!(stream.status(), StatusCode::OK);

    let _flood = idle_sockets(app.addr, 3 * LIMIT).await;
    assert_eq!(healthz(app.addr).await, StatusCode::OK);

    // The stream still delivers: a confirmation's status change arrives on it.
    let (status, record) = app
        .create(json!({"tool": "deploy", "params": {}, "wait": "suspend"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{record}");
    let id = record["id"].as_str().expect("id").to_owned();
    let (status, _) = app.delete(&id).await;
    assert_eq!(status, StatusCode::OK);
    let mut seen = String::new();
    let found = tokio::time::timeout(PROMPT, async {
        while let Some(chunk) = stream.chunk().await.expect("stream chunk") {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("cancelled") {
                return;
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no status event on the stream: {seen:?}");
}

#[tokio::test]
async fn a_tap_through_the_webhook_route_gets_through_a_flood_of_idle_connections() {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    let app = TestApp::spawn_on(telegram, true, DEFAULT_CALLBACK_PREFIX, small_pool()).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().expect("id").to_owned();

    let _flood = idle_sockets(app.addr, 3 * LIMIT).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    // wait_status gives up after about 20 s; the flood's timeouts are 60 s away.
    let decided = app.wait_status(&id, "confirmed").await;
    assert_eq!(decided["decided_by"]["id"], ALICE);
}

#[tokio::test]
async fn idle_connections_are_closed_after_the_header_read_and_idle_timeouts() {
    let app = TestApp::spawn_with_settings(server(
        "header_read_timeout_seconds = 1\nidle_timeout_seconds = 4\n",
    ))
    .await;

    // A connection that never sends a request: closed after the header-read timeout.
    let opened = Instant::now();
    let mut silent = TcpStream::connect(app.addr).await.expect("connect");
    assert!(closed_within(&mut silent, CLOSE_WAIT).await, "still open");
    assert!(
        opened.elapsed() >= Duration::from_millis(950),
        "closed before its header-read timeout: {:?}",
        opened.elapsed()
    );

    // A kept-alive connection after a response: closed after the idle timeout, which is
    // longer than the header-read one.
    let mut kept = TcpStream::connect(app.addr).await.expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: hitl\r\n\r\n")
        .await
        .expect("write");
    let response = read_response(&mut kept).await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let answered = Instant::now();
    assert!(closed_within(&mut kept, CLOSE_WAIT).await, "still open");
    assert!(
        answered.elapsed() >= Duration::from_secs(2),
        "closed after {:?}: sooner than the 4 s idle timeout allows",
        answered.elapsed()
    );
}

#[tokio::test]
async fn a_slow_loris_connection_is_closed_after_the_header_read_timeout() {
    // The idle timeout is long: only the header-read timeout can close it.
    let app = TestApp::spawn_with_settings(server(
        "header_read_timeout_seconds = 1\nidle_timeout_seconds = 60\n",
    ))
    .await;
    let opened = Instant::now();
    let mut loris = TcpStream::connect(app.addr).await.expect("connect");
    loris
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: hitl\r\nX-Slow: ")
        .await
        .expect("write");
    let mut received = Vec::new();
    let closed = tokio::time::timeout(CLOSE_WAIT, async {
        let mut buf = [0u8; 1024];
        loop {
            // One more header byte every 100 ms, never the blank line that ends them.
            if loris.write_all(b"a").await.is_err() {
                return;
            }
            match tokio::time::timeout(Duration::from_millis(100), loris.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the slow-loris connection is still open");
    assert!(
        opened.elapsed() >= Duration::from_millis(950),
        "closed before its header-read timeout: {:?}",
        opened.elapsed()
    );
    let received = String::from_utf8_lossy(&received);
    assert!(
        !received.contains(" 200 "),
        "its request was answered: {received}"
    );
    // The server itself is fine.
    assert_eq!(healthz(app.addr).await, StatusCode::OK);
}

/// Settings edit: agent-a may hold two event streams and two long-polls.
fn capped_agent(toml: String) -> String {
    toml.replacen(
        "default_route = \"ops\"\n",
        "default_route = \"ops\"\nmax_streams = 2\nmax_long_polls = 2\n",
        1,
    )
}

/// `GET /v1/events` as `token`; the response once its headers are in.
async fn open_stream(app: &TestApp, token: &str) -> reqwest::Response {
    app.client
        .get(app.url("/v1/events"))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
}

/// A refusal for holding too much: 429 `too_many_streams` naming the setting, with
/// `Retry-After`.
async fn assert_held_refusal(r: reqwest::Response, setting: &str) {
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    assert!(
        retry_after.is_some_and(|s| s >= 1),
        "Retry-After {retry_after:?}"
    );
    let body: Value = r.json().await.expect("JSON error body");
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(setting), "{message}");
}

#[tokio::test]
async fn event_streams_over_the_agents_cap_get_429_with_retry_after() {
    let app = TestApp::spawn_with_settings(capped_agent).await;
    let first = open_stream(&app, TOKEN_A).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = open_stream(&app, TOKEN_A).await;
    assert_eq!(second.status(), StatusCode::OK);

    assert_held_refusal(open_stream(&app, TOKEN_A).await, "max_streams").await;
    // The cap is the agent's own: agent-b still gets a stream.
    let other = open_stream(&app, TOKEN_B).await;
    assert_eq!(other.status(), StatusCode::OK);
    assert_eq!(healthz(app.addr).await, StatusCode::OK);

    // A client that goes away gives its slot back.
    drop(first);
    let deadline = Instant::now() + PROMPT;
    loop {
        let r = open_stream(&app, TOKEN_A).await;
        if r.status() == StatusCode::OK {
            break;
        }
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            Instant::now() < deadline,
            "the closed stream's slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(second);
}

/// `GET {path}?wait={wait}` as `token`.
async fn long_poll(app: &TestApp, token: &str, path: &str, wait: &str) -> reqwest::Response {
    app.client
        .get(app.url(&format!("{path}?wait={wait}")))
        .bearer_auth(token)
        .send()
        .await
        .expect("request")
}

#[tokio::test]
async fn long_polls_over_the_agents_cap_get_429_with_retry_after() {
    let app = Arc::new(TestApp::spawn_with_settings(capped_agent).await);
    let (status, record) = app
        .create(json!({"tool": "deploy", "params": {}, "wait": "suspend"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{record}");
    let path = format!("/v1/confirmations/{}", record["id"].as_str().expect("id"));

    // Two long-polls that wait until the request ends. A probe below may hold a slot for
    // a moment, so each retries a refusal until it is in.
    let waiting: Vec<_> = (0..2)
        .map(|_| {
            let app = app.clone();
            let path = path.clone();
            tokio::spawn(async move {
                loop {
                    let r = long_poll(&app, TOKEN_A, &path, "30").await;
                    if r.status() != StatusCode::TOO_MANY_REQUESTS {
                        return json_of(r).await;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        })
        .collect();

    // Once both wait, a third is refused. A probe asks for a request that does not exist,
    // so when admitted it holds its slot only for the moment a 404 takes; probes go one
    // at a time, so a refused probe means the two long-polls hold both slots.
    let unknown = "/v1/confirmations/cf_00000000000000000000000000000000";
    let deadline = Instant::now() + PROMPT;
    let refused = loop {
        let r = long_poll(&app, TOKEN_A, unknown, "0.2").await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            break r;
        }
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        assert!(
            Instant::now() < deadline,
            "a third long-poll is never refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_held_refusal(refused, "max_long_polls").await;

    // Interactions' long-polls count against the same cap.
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(TOKEN_A)
        .json(&json!({"interaction": {
            "interaction_id": "capped-1",
            "question": "Deploy billing to prod?",
            "interaction_type": "approval",
        }}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = long_poll(&app, TOKEN_A, "/v1/interactions/capped-1", "0.2").await;
    assert_held_refusal(r, "max_long_polls").await;
    // A read without wait is not a long-poll.
    let (status, _) = app.get(record["id"].as_str().expect("id")).await;
    assert_eq!(status, StatusCode::OK);

    // Another agent is not held back.
    let (status, theirs) = app
        .create_as(
            TOKEN_B,
            json!({"tool": "deploy", "params": {}, "wait": "suspend"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{theirs}");
    let (status, _) = app
        .get_as(TOKEN_B, theirs["id"].as_str().expect("id"), Some("0.2"))
        .await;
    assert_eq!(status, StatusCode::OK);

    // The request ends: both long-polls answer, and their slots are free again.
    let (status, _) = app.delete(record["id"].as_str().expect("id")).await;
    assert_eq!(status, StatusCode::OK);
    for w in waiting {
        let (status, body) = tokio::time::timeout(PROMPT, w)
            .await
            .expect("the long-poll answers when the request ends")
            .expect("task");
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["status"], "cancelled");
    }
    let (status, body) = json_of(long_poll(&app, TOKEN_A, &path, "1").await).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// Reads one HTTP/1.1 response with a `content-length` body.
async fn read_response(socket: &mut TcpStream) -> String {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(PROMPT, async {
        loop {
            let n = socket.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before the response ended");
            data.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&data);
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if data.len() >= end + 4 + length {
                    return;
                }
            }
        }
    })
    .await
    .expect("a response");
    String::from_utf8_lossy(&data).into_owned()
}
