//! The HTTP server against hostile clients: sockets that never ask anything, slow-loris
//! headers, slow bodies (strangers' on the public Telegram webhook route, and agents'),
//! and agents opening more event streams and long-polls than they may. Raw TCP sockets
//! play the attackers; `/healthz`, the agents' API and the Telegram webhook route must
//! keep answering.
//!
//! Bounds are generous: every "answers" is checked against a wait far shorter than the
//! timeout that would otherwise have freed a connection, and every "is closed" against a
//! wait far longer than the timeout that closes it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use reqwest::StatusCode;
use serde_json::{Value, json};
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

/// Settings edit: `max_connections` 64 (hundreds of attackers exceed it), and every
/// timeout a minute, so that only what the tests are about can let anyone in.
fn pool_of_64() -> impl FnOnce(String) -> String {
    server(
        "max_connections = 64\nheader_read_timeout_seconds = 60\nidle_timeout_seconds = 60\n\
         body_read_timeout_seconds = 60\n",
    )
}

/// How long a refusal and a close may take (the webhook route without its secret).
const WITHIN_A_SECOND: Duration = Duration::from_secs(1);

/// How long each of `/healthz`, an agent's create and a tap may take under the flood of
/// 300 slow bodies. Starved, they would wait for a slot that attackers hold for the 60 s
/// body timeout; served, they take milliseconds, but on 2 busy cores one /healthz once
/// took over a second while 300 attacker tasks ran beside it in the test process. 3 s
/// tells the two apart without failing a slow machine.
const UNDER_FLOOD: Duration = Duration::from_secs(3);

/// A client that opens a connection of its own for each request: a pooled one may have
/// been closed, while idle, to make room for the attackers.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// The head of a `POST` to the webhook route announcing a body of `content_length`
/// bytes, with `secret` (if any) as the Telegram secret header.
fn webhook_head(secret: Option<&str>, content_length: usize) -> String {
    let mut head = format!(
        "POST {WEBHOOK_PATH} HTTP/1.1\r\nHost: hitl\r\nContent-Type: application/json\r\n\
         Content-Length: {content_length}\r\n"
    );
    if let Some(secret) = secret {
        head.push_str(&format!("X-Telegram-Bot-Api-Secret-Token: {secret}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// One attacker without the webhook's secret (`secret` is none or a wrong one): sends
/// the headers of a 64 KiB update, then its body one byte every `every`, for as long as
/// the service lets it; when the connection is closed it opens another a second later.
/// Counts in `sent` the requests it got out (headers and a first byte).
async fn slow_webhook_body(
    addr: SocketAddr,
    secret: Option<&'static str>,
    every: Duration,
    sent: Arc<AtomicUsize>,
) {
    let mut request = webhook_head(secret, 64 * 1024);
    request.push('{');
    loop {
        if let Ok(mut socket) = TcpStream::connect(addr).await
            && socket.write_all(request.as_bytes()).await.is_ok()
        {
            sent.fetch_add(1, Ordering::Relaxed);
            let mut buf = [0u8; 1024];
            loop {
                match tokio::time::timeout(every, socket.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => break,
                    Ok(Ok(_)) => {}
                    Err(_) => {
                        if socket.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_slow_bodies_without_the_webhook_secret_keep_out_neither_healthz_nor_agents_nor_telegram()
 {
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    let app = TestApp::spawn_on(telegram, true, DEFAULT_CALLBACK_PREFIX, pool_of_64()).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let id = record["id"].as_str().expect("id").to_owned();

    // 300 attackers (over four times the 64 connections), half without the secret
    // header, half with a wrong one, each sending a byte every 3 s and coming back a
    // second after each refusal.
    const ATTACKERS: usize = 300;
    let sent = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..ATTACKERS)
        .map(|i| {
            let secret = (i % 2 == 0).then_some("not-the-webhook-secret");
            tokio::spawn(slow_webhook_body(
                app.addr,
                secret,
                Duration::from_secs(3),
                sent.clone(),
            ))
        })
        .collect();
    // Every attacker's request is in, and the next ones are on their way.
    let deadline = Instant::now() + PROMPT;
    while sent.load(Ordering::Relaxed) < ATTACKERS {
        assert!(
            Instant::now() < deadline,
            "only {} of {ATTACKERS} attackers got their request out",
            sent.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let client = fresh_client();
    for _ in 0..3 {
        let r = tokio::time::timeout(UNDER_FLOOD, client.get(app.url("/healthz")).send())
            .await
            .expect("/healthz answers within 3 s under the flood")
            .expect("request");
        assert_eq!(r.status(), StatusCode::OK);

        let r = tokio::time::timeout(
            UNDER_FLOOD,
            client
                .post(app.url("/v1/confirmations"))
                .bearer_auth(TOKEN_A)
                .json(&json!({"tool": "deploy", "params": {}, "wait": "suspend"}))
                .send(),
        )
        .await
        .expect("an agent's create answers within 3 s under the flood")
        .expect("request");
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }

    // A real tap, which the fake Telegram POSTs to the webhook route with the secret.
    let tapped = Instant::now();
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    let decided = tokio::time::timeout(UNDER_FLOOD, async {
        loop {
            let r = client
                .get(app.url(&format!("/v1/confirmations/{id}?wait=1")))
                .bearer_auth(TOKEN_A)
                .send()
                .await
                .expect("request");
            let (status, body) = json_of(r).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            if body["status"] == "confirmed" {
                return body;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "the tap was not decided within 3 s ({:?}); webhook deliveries: {:?}",
            tapped.elapsed(),
            app.telegram.webhook_deliveries()
        )
    });
    assert_eq!(decided["decided_by"]["id"], ALICE);
    // The attack went on all along: the attackers were turned away and came back.
    assert!(sent.load(Ordering::Relaxed) > ATTACKERS);
    for attacker in attackers {
        attacker.abort();
    }
}

/// The status line and headers of a response read from `socket`, in lowercase.
async fn response_head(socket: &mut TcpStream) -> String {
    let response = read_response(socket).await;
    let end = response.find("\r\n\r\n").unwrap_or(response.len());
    response[..end].to_ascii_lowercase()
}

#[tokio::test]
async fn a_webhook_request_without_the_secret_is_refused_before_its_body_and_its_connection_closed()
{
    let telegram = Arc::new(FakeTelegram::start_with_token(BOT_TOKEN).await);
    let app = TestApp::spawn_on(telegram, true, DEFAULT_CALLBACK_PREFIX, |toml| toml).await;
    for secret in [None, Some("not-the-webhook-secret")] {
        let mut socket = TcpStream::connect(app.addr).await.expect("connect");
        // The headers of a 64 KiB body, and not one byte of it.
        socket
            .write_all(webhook_head(secret, 64 * 1024).as_bytes())
            .await
            .expect("write");
        let started = Instant::now();
        let response = read_response(&mut socket).await.to_ascii_lowercase();
        assert!(
            started.elapsed() < WITHIN_A_SECOND,
            "answered after {:?}",
            started.elapsed()
        );
        assert!(
            response.starts_with("http/1.1 401"),
            "{secret:?}: {response}"
        );
        assert!(response.contains("\r\nconnection: close\r\n"), "{response}");
        assert!(response.contains(r#""code":"unauthorized""#), "{response}");
        assert!(
            closed_within(&mut socket, WITHIN_A_SECOND).await,
            "{secret:?}: the connection is still open"
        );
    }

    // With the secret, the same headers are followed by a wait for the body, which is
    // then taken.
    let update = r#"{"update_id": 900001}"#;
    let mut socket = TcpStream::connect(app.addr).await.expect("connect");
    socket
        .write_all(webhook_head(Some(TELEGRAM_WEBHOOK_SECRET), update.len()).as_bytes())
        .await
        .expect("write");
    assert!(
        still_open(&mut socket).await,
        "answered before the body came"
    );
    socket.write_all(update.as_bytes()).await.expect("write");
    let head = response_head(&mut socket).await;
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

/// The head of `POST /v1/confirmations` as agent-a, for a body of `length` bytes.
fn agent_post_head(length: usize) -> String {
    format!(
        "POST /v1/confirmations HTTP/1.1\r\nHost: hitl\r\nAuthorization: Bearer {TOKEN_A}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// Sends `POST /v1/confirmations` as agent-a with `body` in `parts` pieces, `gap` apart.
async fn agent_post_in_pieces(
    addr: SocketAddr,
    body: &[u8],
    parts: usize,
    gap: Duration,
) -> TcpStream {
    let mut socket = TcpStream::connect(addr).await.expect("connect");
    socket
        .write_all(agent_post_head(body.len()).as_bytes())
        .await
        .expect("write");
    for (i, piece) in body.chunks(body.len().div_ceil(parts)).enumerate() {
        if i > 0 {
            tokio::time::sleep(gap).await;
        }
        socket.write_all(piece).await.expect("write a piece");
    }
    socket
}

#[tokio::test]
async fn an_agents_body_slower_than_the_deadline_is_answered_408_and_its_connection_closed() {
    let app = TestApp::spawn_with_settings(server(
        "header_read_timeout_seconds = 60\nidle_timeout_seconds = 60\nbody_read_timeout_seconds = 1\n",
    ))
    .await;
    let body = br#"{"tool": "deploy", "params": {}, "wait": "suspend"}"#;

    // One byte every 100 ms: the whole body would take about 5 s.
    let mut socket = TcpStream::connect(app.addr).await.expect("connect");
    socket
        .write_all(agent_post_head(body.len()).as_bytes())
        .await
        .expect("write");
    let started = Instant::now();
    let mut received = Vec::new();
    let closed = tokio::time::timeout(CLOSE_WAIT, async {
        let mut buf = [0u8; 1024];
        for byte in body {
            if socket.write_all(&[*byte]).await.is_err() {
                break;
            }
            match tokio::time::timeout(Duration::from_millis(100), socket.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return,
                Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        // Whatever happens next, read until the connection closes, so the assertions
        // below say what happened.
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    let elapsed = started.elapsed();
    let received = String::from_utf8_lossy(&received).to_ascii_lowercase();
    assert!(closed.is_ok(), "still open: {received}");
    assert!(
        elapsed >= Duration::from_millis(950) && elapsed < Duration::from_secs(3),
        "closed after {elapsed:?}, not at the 1 s deadline: {received}"
    );
    assert!(received.starts_with("http/1.1 408"), "{received}");
    assert!(received.contains("\r\nconnection: close\r\n"), "{received}");
    assert!(
        received.contains(r#""code":"request_timeout""#),
        "{received}"
    );
    assert!(received.contains("body_read_timeout_seconds"), "{received}");
    assert!(
        app.telegram.sent_messages().is_empty(),
        "the cut request was asked anyway"
    );

    // A body that arrives within the deadline, in pieces, is unaffected, and its
    // connection is kept alive...
    let mut socket = agent_post_in_pieces(app.addr, body, 3, Duration::from_millis(250)).await;
    let head = response_head(&mut socket).await;
    assert!(head.starts_with("http/1.1 202"), "{head}");
    assert!(
        still_open(&mut socket).await,
        "a kept-alive connection was closed"
    );

    // ... and so is the largest one allowed (64 KiB: the JSON padded with spaces).
    let mut largest = body.to_vec();
    largest.resize(64 * 1024, b' ');
    let mut socket = agent_post_in_pieces(app.addr, &largest, 4, Duration::from_millis(200)).await;
    let head = response_head(&mut socket).await;
    assert!(head.starts_with("http/1.1 202"), "{head}");
}
