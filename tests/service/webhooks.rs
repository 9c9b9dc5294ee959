//! Signed webhooks: every ending is POSTed to the agent's callback URL, retried until
//! the receiver takes it, across restarts, with a signature the receiver can check
//! (the recipe in docs/http-api.md, run as written); one agent's hanging receiver or
//! backlog does not hold back another agent's deliveries.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::app::*;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

/// A local receiver that answers 500 to the first `fail_first` deliveries, then 200.
#[derive(Clone)]
struct Receiver {
    url: String,
    seen: Arc<Mutex<Vec<Received>>>,
    fail_remaining: Arc<Mutex<usize>>,
}

impl Receiver {
    async fn start(fail_first: usize) -> Receiver {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let fail_remaining = Arc::new(Mutex::new(fail_first));
        let state = (seen.clone(), fail_remaining.clone());
        let app = Router::new()
            .route("/hooks/{*rest}", post(receive))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url,
            seen,
            fail_remaining,
        }
    }

    fn set_failing(&self, n: usize) {
        *self.fail_remaining.lock().unwrap() = n;
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until a delivery was accepted (answered 200); returns every attempt so far.
    async fn wait_accepted(&self, n: usize) -> Vec<Received> {
        for _ in 0..400 {
            let seen = self.seen();
            let accepted = seen.len().saturating_sub(self.failed_count(&seen));
            if accepted >= n {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("only {:?} deliveries arrived", self.seen().len());
    }

    fn failed_count(&self, seen: &[Received]) -> usize {
        seen.iter()
            .filter(|r| r.headers.contains_key("x-test-failed"))
            .count()
    }
}

type ReceiverState = (Arc<Mutex<Vec<Received>>>, Arc<Mutex<usize>>);

async fn receive(
    State((seen, fail)): State<ReceiverState>,
    mut headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let failing = {
        let mut f = fail.lock().unwrap();
        if *f > 0 {
            *f -= 1;
            true
        } else {
            false
        }
    };
    if failing {
        headers.insert("x-test-failed", "1".parse().unwrap());
    }
    seen.lock().unwrap().push(Received { headers, body });
    if failing {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    }
}

/// The documented check, exactly as the docs' recipe does it: HMAC-SHA256 over
/// "<X-Hitl-Timestamp>.<X-Hitl-Delivery>.<raw body>", compared with X-Hitl-Signature.
/// (The age check is left to the tests that run the recipe itself.)
fn signature_is_valid(r: &Received, secret: &str) -> bool {
    let header = |name: &str| r.headers[name].to_str().unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(header("x-hitl-timestamp").as_bytes());
    mac.update(b".");
    mac.update(header("x-hitl-delivery").as_bytes());
    mac.update(b".");
    mac.update(&r.body);
    header("x-hitl-signature") == format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// `r` as a replay would present it: the same signature and timestamp, other headers
/// or body.
fn tampered(r: &Received, header: &str, value: &str, body: Option<&[u8]>) -> Received {
    let mut headers = r.headers.clone();
    headers.insert(
        axum::http::HeaderName::from_bytes(header.as_bytes()).unwrap(),
        value.parse().unwrap(),
    );
    Received {
        headers,
        body: body.map_or_else(|| r.body.clone(), Bytes::copy_from_slice),
    }
}

/// The receiver recipe from the "Webhooks" section of docs/http-api.md: its first
/// `python` block.
fn readme_recipe() -> String {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http-api.md"))
        .expect("docs/http-api.md");
    let section = &readme[readme.find("\n## Webhooks\n").expect("a Webhooks section")..];
    let code = &section[section.find("```python\n").expect("a python recipe") + 10..];
    code[..code.find("```").expect("the recipe's end")].to_owned()
}

/// The headers of `r` the recipe reads, under the names the docs write them.
fn recipe_headers(r: &Received) -> Value {
    let header = |name: &str| r.headers[name].to_str().unwrap().to_owned();
    json!({
        "X-Hitl-Timestamp": header("x-hitl-timestamp"),
        "X-Hitl-Delivery": header("x-hitl-delivery"),
        "X-Hitl-Signature": header("x-hitl-signature"),
    })
}

/// Runs the docs' `valid(secret, headers, raw_body)` with python3 on each delivery;
/// `None` when python3 is not installed.
fn readme_recipe_says(secret: &str, deliveries: &[&Received]) -> Option<Vec<bool>> {
    let cases = deliveries
        .iter()
        .map(|r| (recipe_headers(r), r.body.to_vec()))
        .collect();
    readme_recipe_on(secret, cases)
}

/// Runs the docs' `valid` with python3 on each (headers as a dict, raw body) case;
/// `None` when python3 is not installed. Fails if the recipe raises for any of them.
fn readme_recipe_on(secret: &str, cases: Vec<(Value, Vec<u8>)>) -> Option<Vec<bool>> {
    let cases: Vec<Value> = cases
        .into_iter()
        .map(|(headers, body)| json!({"headers": headers, "body": hex::encode(body)}))
        .collect();
    let script = format!(
        "{}\nimport json, sys\nsecret = sys.argv[1].encode()\n\
         for c in json.load(sys.stdin):\n    \
         print(valid(secret, c['headers'], bytes.fromhex(c['body'])))\n",
        readme_recipe()
    );
    let mut child = match Command::new("python3")
        .args(["-c", &script, secret])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("skipping the docs' recipe run: python3 is not on PATH");
            return None;
        }
        Err(e) => panic!("could not run python3: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(cases).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the docs' recipe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| match l {
                "True" => true,
                "False" => false,
                other => panic!("the recipe printed {other:?}"),
            })
            .collect(),
    )
}

/// A receiver that accepts connections and never answers (a tarpit): every attempt to
/// it lasts the whole attempt timeout.
struct Tarpit {
    url: String,
    accepted: Arc<Mutex<Vec<Instant>>>,
}

impl Tarpit {
    async fn start() -> Tarpit {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let log = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                log.lock().unwrap().push(Instant::now());
                held.push(socket); // open, unread, unanswered
            }
        });
        Tarpit { url, accepted }
    }

    /// Waits until `n` connections are held; returns when the first was accepted.
    async fn wait_accepted(&self, n: usize) -> Instant {
        for _ in 0..400 {
            let accepted = self.accepted.lock().unwrap().clone();
            if accepted.len() >= n {
                return accepted[0];
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!(
            "the tarpit held only {} connections",
            self.accepted.lock().unwrap().len()
        );
    }
}

/// The value of one sample of `GET /metrics` (0 when absent).
async fn metric(app: &TestApp, sample: &str) -> f64 {
    let text = app.metrics_text().await;
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Waits until `sample` reads `value`.
async fn wait_metric(app: &TestApp, sample: &str, value: f64) {
    for _ in 0..400 {
        if metric(app, sample).await == value {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!(
        "{sample} never reached {value}: {}",
        metric(app, sample).await
    );
}

/// The settings with `[webhooks]` keys added (or replaced: `timeout_seconds`).
fn with_webhook_keys(toml: String, keys: &str) -> String {
    let section = "[webhooks]\ntimeout_seconds = 2\n";
    assert!(toml.contains(section), "the test settings changed: {toml}");
    toml.replace(section, &format!("[webhooks]\n{keys}\n"))
}

/// The service with agent-a's callbacks going to `receiver`, and a webhook backlog bound
/// of `bound` per agent.
async fn spawn_with_backlog_bound(receiver: &Receiver, bound: u32) -> TestApp {
    TestApp::spawn_with_settings(|toml| {
        with_webhook_keys(
            toml.replace(DEFAULT_CALLBACK_PREFIX, &receiver.url),
            &format!("timeout_seconds = 2\nmax_backlog_per_agent = {bound}"),
        )
    })
    .await
}

/// The settings with agent-b allowed to send webhooks under `prefix` (signed with the
/// same secret as agent-a's, which the tests know).
fn agent_b_with_callbacks(toml: String, prefix: &str) -> String {
    let agent_b = "name = \"agent-b\"\ntoken_env = \"TOKEN_B\"\n";
    assert!(toml.contains(agent_b), "the test settings changed: {toml}");
    toml.replace(
        agent_b,
        &format!(
            "name = \"agent-b\"\ntoken_env = \"TOKEN_B\"\nwebhook_secret_env = \"HOOK_A\"\n\
             callback_url_prefixes = [\"{prefix}\"]\n"
        ),
    )
}

fn body(r: &Received) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test]
async fn a_decision_is_posted_signed_and_retried_until_the_receiver_takes_it() {
    let receiver = Receiver::start(2).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 1}, "callback_url": format!("{}/agent-a?k=1", receiver.url)}))
        .await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());

    let seen = receiver.wait_accepted(1).await;
    assert_eq!(seen.len(), 3, "two failures, then success");
    let delivery = seen[0].headers["x-hitl-delivery"].clone();
    for r in &seen {
        assert_eq!(
            r.headers["x-hitl-delivery"], delivery,
            "the delivery id is stable"
        );
        assert!(signature_is_valid(r, HOOK_SECRET_A), "signature of {r:?}");
        assert!(!signature_is_valid(r, "another-secret"));
        let b = body(r);
        assert_eq!(b["id"], record["id"]);
        assert_eq!(b["status"], "confirmed");
        assert_eq!(b["parameters"], json!({"v": 1}));
    }
    let ts: i64 = seen[2].headers["x-hitl-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((time::OffsetDateTime::now_utc().unix_timestamp() - ts).abs() < 60);
    // Delivered means delivered: no more attempts.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(receiver.seen().len(), 3);
}

#[tokio::test]
async fn every_kind_of_ending_is_posted() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let hook = format!("{}/x", receiver.url);

    // timeout
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.2, "callback_url": hook}))
        .await;
    // withdrawn
    let (r, _) = app
        .ask_suspended(json!({"tool": "w", "params": {}, "callback_url": hook}))
        .await;
    app.delete(r["id"].as_str().unwrap()).await;
    // cancelled by an operator
    let (_, m) = app
        .ask_suspended(json!({"tool": "c", "params": {}, "callback_url": hook}))
        .await;
    app.telegram.tap(OPS_CHAT, m, "❌ Cancel", bob());
    // fail-closed
    app.telegram
        .fail_next("sendMessage", 1, 400, "Bad Request: chat not found");
    app.create(json!({"tool": "f", "params": {}, "callback_url": hook}))
        .await;
    // confirmed by a window, after an operator opened it
    let (_, m) = app
        .ask_suspended(
            json!({"tool": "win", "params": {}, "window_seconds": 60, "callback_url": hook}),
        )
        .await;
    app.telegram
        .tap(OPS_CHAT, m, "✅ Approve for 1 min", alice());
    receiver.wait_accepted(5).await;
    let (s, hit) = app
        .create(json!({"tool": "win", "params": {}, "window_seconds": 60, "callback_url": hook}))
        .await;
    assert_eq!(
        (s, hit["via"].as_str()),
        (reqwest::StatusCode::OK, Some("window"))
    );

    let seen = receiver.wait_accepted(6).await;
    let mut endings: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let b = body(r);
            (
                b["tool"].as_str().unwrap().to_owned(),
                format!(
                    "{}/{}",
                    b["status"].as_str().unwrap(),
                    b["via"].as_str().unwrap()
                ),
            )
        })
        .collect();
    endings.sort();
    assert_eq!(
        endings,
        vec![
            ("c".to_owned(), "cancelled/operator".to_owned()),
            ("f".to_owned(), "cancelled/fail_closed".to_owned()),
            ("t".to_owned(), "timeout/timeout".to_owned()),
            ("w".to_owned(), "cancelled/withdrawn".to_owned()),
            ("win".to_owned(), "confirmed/operator".to_owned()),
            ("win".to_owned(), "confirmed/window".to_owned()),
        ]
    );
}

#[tokio::test]
async fn a_pending_delivery_survives_a_restart() {
    let receiver = Receiver::start(usize::MAX).await;
    let mut app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let (_, m) = app
        .ask_suspended(
            json!({"tool": "deploy", "params": {}, "callback_url": format!("{}/r", receiver.url)}),
        )
        .await;
    app.telegram.tap(OPS_CHAT, m, "✅ Approve", alice());
    // Let it fail a few times, then stop the service while the receiver is still down.
    while receiver.seen().len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    app.stop().await;
    let failures = receiver.seen().len();
    receiver.set_failing(0);
    let _app = app.restart().await;
    let seen = receiver.wait_accepted(1).await;
    assert!(seen.len() > failures);
    let last = seen.last().unwrap();
    assert_eq!(
        last.headers["x-hitl-delivery"],
        seen[0].headers["x-hitl-delivery"]
    );
    assert_eq!(body(last)["status"], "confirmed");
}

#[tokio::test]
async fn a_delivery_is_given_up_after_the_configured_age() {
    let receiver = Receiver::start(usize::MAX).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.1, "callback_url": format!("{}/g", receiver.url)}))
        .await;
    // Rewind the delivery's birth so it is already past the 30 s give-up age.
    let pool = sqlx::SqlitePool::connect(&app.db_url).await.unwrap();
    while receiver.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::query("UPDATE webhook_outbox SET created_at = created_at - 60000")
        .execute(&pool)
        .await
        .unwrap();
    for _ in 0..200 {
        let (state,): (String,) = sqlx::query_as("SELECT state FROM webhook_outbox")
            .fetch_one(&pool)
            .await
            .unwrap();
        if state == "given_up" {
            let n = receiver.seen().len();
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert_eq!(receiver.seen().len(), n, "no attempts after giving up");
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the delivery was never given up");
}

#[tokio::test]
async fn a_callback_url_outside_the_agents_prefixes_is_refused() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    let host_trick = receiver.url.replace("/hooks", ".evil.example/hooks");
    for url in [
        "https://elsewhere.example/hooks/x".to_owned(),
        format!("{}-evil/x", receiver.url),
        host_trick,
        "not a url".to_owned(),
        "file:///etc/passwd".to_owned(),
    ] {
        let (s, b) = app
            .create(json!({"tool": "t", "params": {}, "callback_url": url}))
            .await;
        assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{url}: {b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("callback_url"),
            "{b}"
        );
    }
    // agent-b has no prefixes at all.
    let (s, _) = app
        .create_as(TOKEN_B, json!({"tool": "t", "params": {}, "route": "other", "callback_url": format!("{}/b", receiver.url)}))
        .await;
    assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn a_hanging_webhook_receiver_for_one_agent_does_not_delay_another_agents_delivery() {
    const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(8);
    let tarpit = Tarpit::start().await;
    let receiver_b = Receiver::start(0).await;
    let app = TestApp::spawn_with_settings(|toml| {
        let toml = toml.replace(DEFAULT_CALLBACK_PREFIX, &tarpit.url);
        let toml = agent_b_with_callbacks(toml, &receiver_b.url);
        with_webhook_keys(
            toml,
            &format!(
                "timeout_seconds = {}\nmax_in_flight_per_agent = 2",
                ATTEMPT_TIMEOUT.as_secs()
            ),
        )
    })
    .await;

    // Twenty of agent-a's requests end at once; their deliveries go to the tarpit,
    // which holds both of agent-a's slots. The other eighteen are due and waiting: more
    // than one read of the outbox takes of one agent, so agent-b's delivery is found
    // only if reads take agents in turns.
    let ends: Vec<_> = (0..20)
        .map(|i| {
            app.create_blocking(
                json!({"tool": format!("a{i}"), "params": {}, "timeout_seconds": 0.05,
                    "callback_url": format!("{}/a", tarpit.url)}),
            )
        })
        .collect();
    for end in ends {
        let (s, r) = end.await.unwrap();
        assert_eq!(r["status"], "timeout", "{s}: {r}");
    }
    let first_hang = tarpit.wait_accepted(2).await;

    let (s, r) = app
        .create_as(
            TOKEN_B,
            json!({"tool": "b", "params": {}, "route": "other", "timeout_seconds": 0.05,
                "callback_url": format!("{}/b", receiver_b.url)}),
        )
        .await;
    assert_eq!(r["status"], "timeout", "{s}: {r}");
    let seen = receiver_b.wait_accepted(1).await;
    let arrived = first_hang.elapsed();
    assert_eq!(body(&seen[0])["id"], r["id"]);
    assert!(signature_is_valid(&seen[0], HOOK_SECRET_A));
    assert!(
        arrived < ATTEMPT_TIMEOUT,
        "agent-b's delivery came {arrived:?} after agent-a's receiver started hanging, \
         not within one attempt's timeout ({ATTEMPT_TIMEOUT:?})"
    );
    assert_eq!(
        tarpit.accepted.lock().unwrap().len(),
        2,
        "agent-a never has more than its two attempts in flight"
    );
}

#[tokio::test]
async fn a_replayed_delivery_with_a_changed_delivery_id_fails_verification_with_the_documented_recipe()
 {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.05,
        "callback_url": format!("{}/r", receiver.url)}))
        .await;
    let genuine = receiver.wait_accepted(1).await.remove(0);
    let other_id = "wh_0123456789abcdef0123456789abcdef";
    assert_ne!(genuine.headers["x-hitl-delivery"], other_id);
    let new_id = tampered(&genuine, "x-hitl-delivery", other_id, None);
    let new_body = tampered(&genuine, "x-hitl-delivery", other_id, Some(b"{}"));
    let ts: i64 = genuine.headers["x-hitl-timestamp"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let new_ts = tampered(&genuine, "x-hitl-timestamp", &(ts + 1).to_string(), None);

    // The recipe as implemented here, and the docs' own Python, agree on all four.
    let cases = [&genuine, &new_id, &new_body, &new_ts];
    let expected = vec![true, false, false, false];
    let here: Vec<bool> = cases
        .iter()
        .map(|r| signature_is_valid(r, HOOK_SECRET_A))
        .collect();
    assert_eq!(here, expected);
    if let Some(readme) = readme_recipe_says(HOOK_SECRET_A, &cases) {
        assert_eq!(readme, expected, "the docs' recipe");
        assert_eq!(
            readme_recipe_says("another-secret", &[&genuine]),
            Some(vec![false])
        );
    }
}

#[tokio::test]
async fn the_documented_recipe_answers_false_to_missing_and_hostile_headers_and_never_raises() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    app.create(json!({"tool": "t", "params": {}, "timeout_seconds": 0.05,
        "callback_url": format!("{}/r", receiver.url)}))
        .await;
    let genuine = receiver.wait_accepted(1).await.remove(0);
    let headers = recipe_headers(&genuine);
    let with = |name: &str, value: Value| {
        let mut h = headers.clone();
        h[name] = value;
        h
    };
    let without = |name: &str| {
        let mut h = headers.clone();
        h.as_object_mut().unwrap().remove(name);
        h
    };
    let signature = headers["X-Hitl-Signature"].as_str().unwrap().to_owned();
    let hostile = vec![
        without("X-Hitl-Signature"),
        without("X-Hitl-Timestamp"),
        without("X-Hitl-Delivery"),
        json!({}),
        with("X-Hitl-Signature", json!(null)),
        with("X-Hitl-Signature", json!(42)),
        with("X-Hitl-Signature", json!("")),
        // Non-ASCII where hex is expected (hmac.compare_digest raises on such a str).
        with(
            "X-Hitl-Signature",
            json!(format!("sha256={}", "é".repeat(64))),
        ),
        with("X-Hitl-Signature", json!(format!("{signature}\n"))),
        with("X-Hitl-Signature", json!(signature.to_uppercase())),
        // Digits of another script, which int() would read.
        with("X-Hitl-Timestamp", json!("١٧٠٠٠٠٠٠٠٠")),
        // More digits than int() reads from a str (4300).
        with("X-Hitl-Timestamp", json!("9".repeat(5000))),
        with("X-Hitl-Timestamp", json!("-1")),
        with("X-Hitl-Delivery", json!("wh_é")),
    ];
    let mut cases = vec![(headers.clone(), genuine.body.to_vec())];
    cases.extend(hostile.iter().map(|h| (h.clone(), genuine.body.to_vec())));
    let Some(says) = readme_recipe_on(HOOK_SECRET_A, cases) else {
        return;
    };
    assert!(says[0], "the genuine delivery passes");
    for (h, ok) in hostile.iter().zip(&says[1..]) {
        assert!(!ok, "accepted: {h}");
    }
}

#[tokio::test]
async fn an_agent_at_its_webhook_backlog_bound_has_the_next_delivery_dropped_and_audited() {
    let receiver = Receiver::start(usize::MAX).await;
    let app = spawn_with_backlog_bound(&receiver, 2).await;
    let hook = format!("{}/x", receiver.url);
    let mut ids = Vec::new();
    for i in 0..3 {
        let (_, r) = app
            .create(
                json!({"tool": format!("t{i}"), "params": {}, "timeout_seconds": 0.05,
                "callback_url": hook}),
            )
            .await;
        assert_eq!(r["status"], "timeout", "{r}");
        ids.push(r["id"].as_str().unwrap().to_owned());
    }

    // The two oldest stay queued (the receiver keeps failing); the third is dropped,
    // and says so in its own audit trail, which its agent can read.
    let kinds = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    for id in &ids[..2] {
        assert!(!kinds(&app.audit_events(id).await).contains(&"webhook_dropped".to_owned()));
    }
    let events = app.audit_events(&ids[2]).await;
    let dropped = events
        .iter()
        .find(|e| e["kind"] == "webhook_dropped")
        .unwrap_or_else(|| panic!("no webhook_dropped in {events:?}"));
    assert_eq!(dropped["actor"], "system");
    assert_eq!(dropped["detail"]["agent"], "agent-a");
    assert_eq!(dropped["detail"]["backlog"], 2);
    assert!(
        dropped["detail"]["delivery_id"]
            .as_str()
            .unwrap()
            .starts_with("wh_")
    );
    assert_eq!(
        app.get(&ids[2]).await.1["status"],
        "timeout",
        "only the delivery is dropped, not the outcome"
    );
    assert_eq!(
        metric(&app, r#"hitl_webhook_dropped_total{agent="agent-a"}"#).await,
        1.0
    );
    assert_eq!(metric(&app, "hitl_webhook_outbox_backlog").await, 2.0);

    // The receiver recovers: the two queued deliveries arrive, the dropped one never.
    receiver.set_failing(0);
    receiver.wait_accepted(2).await;
    wait_metric(&app, "hitl_webhook_outbox_backlog", 0.0).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let delivered: Vec<Value> = receiver
        .seen()
        .iter()
        .filter(|r| !r.headers.contains_key("x-test-failed"))
        .map(|r| body(r)["id"].clone())
        .collect();
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    assert!(!delivered.contains(&json!(ids[2])), "{delivered:?}");

    // The bound counts undelivered deliveries only: with the backlog drained, the next
    // outcome is queued and delivered again.
    let (_, r) = app
        .create(json!({"tool": "t3", "params": {}, "timeout_seconds": 0.05, "callback_url": hook}))
        .await;
    let seen = receiver.wait_accepted(3).await;
    assert_eq!(body(seen.last().unwrap())["id"], r["id"]);
    assert_eq!(
        metric(&app, r#"hitl_webhook_dropped_total{agent="agent-a"}"#).await,
        1.0
    );
}

#[tokio::test]
async fn a_callback_url_with_an_encoded_slash_backslash_or_dot_in_its_path_is_refused() {
    let receiver = Receiver::start(0).await;
    let app = TestApp::spawn_with_callback_prefix(&receiver.url).await;
    for encoded in ["%2f", "%2F", "%5c", "%5C", "%2e", "%2E"] {
        for url in [
            format!("{}/a{encoded}b", receiver.url),
            format!("{}/..{encoded}..{encoded}admin", receiver.url),
        ] {
            let (s, b) = app
                .create(json!({"tool": "t", "params": {}, "callback_url": url}))
                .await;
            assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{url}: {b}");
            let message = b["error"]["message"].as_str().unwrap();
            assert!(
                message.starts_with("callback_url: must not hold %"),
                "{url}: {message}"
            );
            assert!(message.contains(encoded), "as written: {message}");
        }
    }
    // An encoded dot segment that parsing would resolve is refused for what was written.
    let (s, b) = app
        .create(json!({"tool": "t", "params": {},
            "callback_url": format!("{}/%2E%2E/hooks/x", receiver.url)}))
        .await;
    assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .contains("must not hold %2E"),
        "{b}"
    );
    // Interactions take their callback_url through the same check.
    let r = app
        .client
        .post(app.url("/v1/interactions"))
        .bearer_auth(TOKEN_A)
        .json(&json!({
            "interaction": {"interaction_id": "enc-1", "question": "ok?", "interaction_type": "approval"},
            "callback_url": format!("{}/a%2Fb", receiver.url),
        }))
        .send()
        .await
        .unwrap();
    let (s, b) = json_of(r).await;
    assert_eq!(s, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{b}");
    assert!(
        b["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("callback_url: must not hold %2F"),
        "{b}"
    );
    // Encoded characters elsewhere in the URL are the receiver's business.
    let (s, b) = app
        .create(json!({"tool": "t", "params": {}, "wait": "suspend",
            "callback_url": format!("{}/ok%20path?next=%2Fadmin", receiver.url)}))
        .await;
    assert_eq!(s, reqwest::StatusCode::ACCEPTED, "{b}");
}

#[tokio::test]
async fn the_webhook_backlog_bound_holds_exactly_when_many_requests_end_at_once() {
    let receiver = Receiver::start(usize::MAX).await;
    let app = spawn_with_backlog_bound(&receiver, 3).await;
    let ends: Vec<_> = (0..12)
        .map(|i| {
            app.create_blocking(json!({"tool": format!("t{i}"), "params": {},
                "timeout_seconds": 0.3, "callback_url": format!("{}/x", receiver.url)}))
        })
        .collect();
    let mut ids = Vec::new();
    for end in ends {
        let (_, r) = end.await.unwrap();
        assert_eq!(r["status"], "timeout", "{r}");
        ids.push(r["id"].as_str().unwrap().to_owned());
    }
    let mut dropped = 0;
    for id in &ids {
        let events = app.audit_events(id).await;
        dropped += events
            .iter()
            .filter(|e| e["kind"] == "webhook_dropped")
            .count();
    }
    assert_eq!(dropped, 9, "12 outcomes, 3 queued, 9 dropped");
    assert_eq!(metric(&app, "hitl_webhook_outbox_backlog").await, 3.0);
    assert_eq!(
        metric(&app, r#"hitl_webhook_dropped_total{agent="agent-a"}"#).await,
        9.0
    );
}
