//! Who the console is for, at the door: launch data is genuine for anyone who opens the
//! bot's Mini App, so a stranger (a user no route knows) is answered 404 from the headers
//! and never holds a connection that `/healthz` needs, however slowly they send; a known
//! user has at most a few requests in flight at once (429 beyond), given back as each
//! request ends. Raw TCP sockets play the slow clients, as in `hostile_clients.rs`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::app::*;
use reqwest::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::console::{as_user, console_get, with_console};

/// The console on, 64 connections, and every timeout a minute: only what the tests are
/// about can free a connection while they run.
fn console_and_pool_of_64(toml: String) -> String {
    with_console(toml).replacen(
        "bind = \"127.0.0.1:0\"\n",
        "bind = \"127.0.0.1:0\"\nmax_connections = 64\nheader_read_timeout_seconds = 60\n\
         idle_timeout_seconds = 60\nbody_read_timeout_seconds = 60\n",
        1,
    )
}

/// The head of a console decision `POST` as the user of `data`, announcing a 64 KiB
/// body, and the body's first byte.
fn slow_decision(data: &str) -> String {
    format!(
        "POST /app/api/questions/cf_0123456789abcdef/decision HTTP/1.1\r\nHost: hitl\r\n\
         Authorization: tma {data}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{{",
        64 * 1024
    )
}

/// One slow client: sends `request` (headers and the body's first byte), then a byte
/// every `every` for as long as the service keeps the connection; when it is closed,
/// opens another a second later. Counts in `sent` the requests it got out, and in
/// `refused` the 404s it was answered.
async fn trickle(
    addr: SocketAddr,
    request: String,
    every: Duration,
    sent: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
) {
    loop {
        if let Ok(mut socket) = TcpStream::connect(addr).await
            && socket.write_all(request.as_bytes()).await.is_ok()
        {
            sent.fetch_add(1, Ordering::Relaxed);
            let mut buf = [0u8; 1024];
            loop {
                match tokio::time::timeout(every, socket.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => break,
                    Ok(Ok(n)) => {
                        if buf[..n].starts_with(b"HTTP/1.1 404") {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
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

/// A client that opens a connection of its own for each request.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_slow_console_bodies_leave_healthz_answering_within_a_second() {
    let app = TestApp::spawn_with_settings(console_and_pool_of_64).await;
    // Genuinely signed by Telegram for this bot, for a user no route or person names.
    let stranger = as_user(&app, MALLORY, "Mallory");
    const STRANGERS: usize = 84;
    let sent = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let slow: Vec<_> = (0..STRANGERS)
        .map(|_| {
            tokio::spawn(trickle(
                app.addr,
                slow_decision(&stranger),
                Duration::from_secs(3),
                sent.clone(),
                refused.clone(),
            ))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sent.load(Ordering::Relaxed) < STRANGERS {
        assert!(
            Instant::now() < deadline,
            "only {} of {STRANGERS} slow requests got out",
            sent.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let client = fresh_client();
    for _ in 0..5 {
        let asked = Instant::now();
        let r = tokio::time::timeout(
            Duration::from_secs(1),
            client.get(app.url("/healthz")).send(),
        )
        .await
        .expect("/healthz answers within a second beside the stranger's slow bodies")
        .expect("request");
        assert_eq!(r.status(), StatusCode::OK);
        assert!(asked.elapsed() < Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // An approver's console answers meanwhile too.
    let alice = as_user(&app, ALICE, "Alice");
    let (s, r) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{r}");
    // The stranger was answered 404, at once, without the body it never finished.
    assert!(
        refused.load(Ordering::Relaxed) >= STRANGERS,
        "{} of {} slow requests were answered 404",
        refused.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed)
    );
    for task in slow {
        task.abort();
    }
}

/// `GET /app/api/questions` as the user of `data`: its status and the response.
async fn list(app: &TestApp, data: &str) -> reqwest::Response {
    app.client
        .get(app.url("/app/api/questions"))
        .header("Authorization", format!("tma {data}"))
        .send()
        .await
        .expect("console request")
}

#[tokio::test]
async fn an_approver_over_the_console_cap_gets_429_until_one_of_their_requests_ends() {
    // The minute-long body deadline keeps the slow requests in flight for the test.
    let app = TestApp::spawn_with_settings(console_and_pool_of_64).await;
    let alice = as_user(&app, ALICE, "Alice");
    // Eight decisions whose bodies never come: each is in flight until its socket goes.
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut socket = TcpStream::connect(app.addr).await.expect("connect");
        socket
            .write_all(slow_decision(&alice).as_bytes())
            .await
            .expect("write");
        held.push(socket);
    }
    // Once all eight are in, a ninth request of hers is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let r = list(&app, &alice).await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            break r;
        }
        assert_eq!(r.status(), StatusCode::OK);
        assert!(Instant::now() < deadline, "never refused over the cap");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(refused.headers().contains_key("retry-after"));
    let (_, body) = json_of(refused).await;
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("8 console requests in flight"),
        "{message}"
    );
    // The cap is hers alone: Bob's console answers.
    let bob = as_user(&app, BOB, "Bob");
    assert_eq!(list(&app, &bob).await.status(), StatusCode::OK);

    // Her slow requests end when their sockets go, and give their places back.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = list(&app, &alice).await.status();
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(
            Instant::now() < deadline,
            "the ended requests never gave their places back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
