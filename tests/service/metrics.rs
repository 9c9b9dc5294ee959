//! `GET /metrics` and the request spans: what an operator's Prometheus and log search
//! see after real requests, taps and Telegram faults.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::support::app::*;
use crate::support::fake_telegram::FakeTelegram;
use crate::support::process::{ServiceProcess, write_config};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// One sample of the exposition: `name{labels} value`.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of an OpenMetrics / Prometheus text exposition (comments skipped).
fn parse_exposition(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("not a sample line: {line}")))
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices().peekable();
        let end;
        loop {
            // key="value" pairs, separated by commas, until the closing brace.
            let (start, c) = chars.next()?;
            if c == '}' {
                end = Some(start + 1);
                break;
            }
            if c == ',' {
                continue;
            }
            let eq = inner[start..].find('=')? + start;
            let key = inner[start..eq].to_owned();
            while let Some((i, _)) = chars.peek() {
                if *i > eq {
                    break;
                }
                chars.next();
            }
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    other => value.push(other),
                }
            }
            labels.insert(key, value);
        }
        rest = &inner[end?..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// What one scrape showed.
struct Scrape(Vec<Sample>);

impl Scrape {
    /// The samples of `name` whose labels include all of `labels`.
    fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.0
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample of `name` with exactly these labels; 0 when absent
    /// (a counter or gauge that was never touched).
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let found: Vec<_> = self
            .0
            .iter()
            .filter(|s| s.name == name && s.labels == wanted)
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?} appears twice");
        found.first().map_or(0.0, |s| s.value)
    }
}

async fn scrape_with(app: &TestApp, token: Option<&str>) -> reqwest::Response {
    let mut request = app.client.get(app.url("/metrics"));
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    request.send().await.expect("request")
}

async fn scrape(app: &TestApp) -> Scrape {
    let r = scrape_with(app, None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text; version=1.0.0"),
        "{content_type}"
    );
    let text = r.text().await.expect("body");
    assert!(
        text.ends_with("# EOF\n"),
        "an OpenMetrics exposition ends with # EOF"
    );
    Scrape(parse_exposition(&text))
}

/// Scrapes until `check` holds (the webhook worker and Telegram tasks run in the
/// background), failing after 10 s with the last scrape's samples.
async fn scrape_until(app: &TestApp, check: impl Fn(&Scrape) -> bool) -> Scrape {
    let mut last = scrape(app).await;
    for _ in 0..200 {
        if check(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = scrape(app).await;
    }
    panic!("the metrics never matched:\n{:#?}", last.0);
}

fn deploy(params: Value) -> Value {
    json!({"tool": "deploy", "params": params, "owner_id": "emp-1"})
}

const AGENT_A: (&str, &str) = ("agent", "agent-a");

/// `hitl_requests_created_total` of agent-a's confirmations of `tool` on route ops.
fn created(s: &Scrape, tool: &str) -> f64 {
    s.value(
        "hitl_requests_created_total",
        &[
            AGENT_A,
            ("route", "ops"),
            ("tool", tool),
            ("kind", "confirmation"),
        ],
    )
}

/// `hitl_requests_total` of agent-a's confirmations of `tool` on route ops that ended
/// with `status` via `via`.
fn decided(s: &Scrape, tool: &str, status: &str, via: &str) -> f64 {
    s.value(
        "hitl_requests_total",
        &[
            AGENT_A,
            ("route", "ops"),
            ("tool", tool),
            ("kind", "confirmation"),
            ("status", status),
            ("via", via),
        ],
    )
}

#[tokio::test]
async fn a_tapped_confirmation_is_counted_with_its_outcome_latency_and_telegram_calls() {
    let app = TestApp::spawn().await;
    let (record, message_id) = app
        .ask_suspended(deploy(json!({"service": "billing"})))
        .await;

    let before = scrape(&app).await;
    assert_eq!(before.value("hitl_pending_requests", &[AGENT_A]), 1.0);
    // A configured agent with nothing pending shows 0, not nothing.
    let agent_b = before.matching("hitl_pending_requests", &[("agent", "agent-b")]);
    assert_eq!(agent_b.len(), 1);
    assert_eq!(agent_b[0].value, 0.0);
    assert!(before.value("hitl_oldest_pending_age_seconds", &[]) > 0.0);
    assert_eq!(created(&before, "deploy"), 1.0);
    assert!(
        before
            .matching("hitl_requests_total", &[AGENT_A])
            .is_empty()
    );
    assert_eq!(
        before.value("hitl_telegram_requests_total", &[("method", "sendMessage")]),
        1.0
    );

    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;

    let after = scrape_until(&app, |s| {
        s.value(
            "hitl_telegram_requests_total",
            &[("method", "answerCallbackQuery")],
        ) >= 1.0
    })
    .await;
    assert_eq!(decided(&after, "deploy", "confirmed", "operator"), 1.0);
    assert_eq!(
        after.value(
            "hitl_decision_latency_seconds_count",
            &[AGENT_A, ("route", "ops"), ("via", "operator")]
        ),
        1.0
    );
    // The observation sits in the +Inf bucket and in every bucket above it.
    let buckets = after.matching(
        "hitl_decision_latency_seconds_bucket",
        &[
            AGENT_A,
            ("route", "ops"),
            ("via", "operator"),
            ("le", "+Inf"),
        ],
    );
    assert_eq!(buckets.len(), 1);
    assert_eq!(buckets[0].value, 1.0);
    assert_eq!(after.value("hitl_pending_requests", &[AGENT_A]), 0.0);
    assert_eq!(
        after
            .matching("hitl_oldest_pending_age_seconds", &[])
            .iter()
            .map(|s| s.value)
            .collect::<Vec<_>>(),
        [0.0]
    );
    assert_eq!(
        after.value(
            "hitl_telegram_request_duration_seconds_count",
            &[("method", "sendMessage")]
        ),
        1.0
    );
    assert!(after.matching("hitl_telegram_errors_total", &[]).is_empty());
    assert!(after.value("hitl_telegram_requests_total", &[("method", "getUpdates")]) >= 1.0);
    assert_eq!(
        after.value("hitl_build_info", &[("version", env!("CARGO_PKG_VERSION"))]),
        1.0
    );
}

#[tokio::test]
async fn the_pending_gauge_is_read_from_the_database_so_it_survives_a_restart() {
    let app = TestApp::spawn().await;
    app.ask_suspended(deploy(json!({"n": 1}))).await;
    app.ask_suspended(deploy(json!({"n": 2}))).await;
    assert_eq!(
        scrape(&app)
            .await
            .value("hitl_pending_requests", &[AGENT_A]),
        2.0
    );

    let app = app.restart().await;
    let after = scrape(&app).await;
    assert_eq!(after.value("hitl_pending_requests", &[AGENT_A]), 2.0);
    // Counters start again from zero; the stored state does not.
    assert_eq!(created(&after, "deploy"), 0.0);
}

#[tokio::test]
async fn a_flood_limit_from_telegram_shows_as_a_rate_limited_error() {
    let app = TestApp::spawn().await;
    app.telegram.fail_next_with_retry_after("sendMessage", 1, 1);
    app.ask_suspended(deploy(json!({}))).await;

    let s = scrape(&app).await;
    assert_eq!(
        s.value(
            "hitl_telegram_errors_total",
            &[("method", "sendMessage"), ("kind", "rate_limited")]
        ),
        1.0
    );
    // The 429 and the retry that went through are both calls Telegram saw.
    assert_eq!(
        s.value("hitl_telegram_requests_total", &[("method", "sendMessage")]),
        2.0
    );
}

#[tokio::test]
async fn a_window_hit_is_counted_as_a_hit_and_as_an_outcome() {
    let app = TestApp::spawn().await;
    let call = json!({"tool": "check_in", "params": {"employee": 7}, "owner_id": "emp-1",
        "window_seconds": 60});
    let (record, message_id) = app.ask_suspended(call.clone()).await;
    app.telegram
        .tap(OPS_CHAT, message_id, "✅ Approve for 1 min", alice());
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;

    let (status, hit) = app.create(call).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hit["via"], "window");

    let s = scrape(&app).await;
    assert_eq!(
        s.value("hitl_window_hits_total", &[AGENT_A, ("tool", "check_in")]),
        1.0
    );
    let outcome = |via| decided(&s, "check_in", "confirmed", via);
    assert_eq!((outcome("operator"), outcome("window")), (1.0, 1.0));
    // A window hit is no human decision: only the tapped request has a latency.
    assert_eq!(
        s.value(
            "hitl_decision_latency_seconds_count",
            &[AGENT_A, ("route", "ops"), ("via", "operator")]
        ),
        1.0
    );
}

#[tokio::test]
async fn an_undeliverable_webhook_stays_in_the_outbox_backlog_and_its_failures_count() {
    // Port 9 (discard) refuses connections: every attempt fails.
    let app = TestApp::spawn().await;
    let mut body = deploy(json!({}));
    body["callback_url"] = json!(format!("{DEFAULT_CALLBACK_PREFIX}/done"));
    let (record, _) = app.ask_suspended(body).await;
    let (status, _) = app.delete(record["id"].as_str().unwrap()).await;
    assert_eq!(status, StatusCode::OK);

    let s = scrape_until(&app, |s| {
        s.value("hitl_webhook_delivery_failures_total", &[AGENT_A]) >= 2.0
    })
    .await;
    assert_eq!(s.value("hitl_webhook_outbox_backlog", &[]), 1.0);
    assert_eq!(s.value("hitl_webhook_deliveries_total", &[AGENT_A]), 0.0);
    assert_eq!(decided(&s, "deploy", "cancelled", "withdrawn"), 1.0);
}

fn with_metrics_token(toml: String) -> String {
    format!("{toml}\n[metrics]\ntoken_env = \"METRICS_TOKEN\"\n")
}

#[tokio::test]
async fn with_a_metrics_token_configured_only_that_token_reads_the_metrics() {
    let app = TestApp::spawn_with_settings(with_metrics_token).await;

    for token in [None, Some("wrong-token"), Some(TOKEN_A)] {
        let r = scrape_with(&app, token).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{token:?}");
        let (_, body) = json_of(r).await;
        assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    }

    let r = scrape_with(&app, Some(METRICS_TOKEN)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.expect("body");
    assert!(
        parse_exposition(&text)
            .iter()
            .any(|s| s.name == "hitl_build_info")
    );
}

#[tokio::test]
async fn without_a_metrics_token_the_metrics_are_open() {
    let app = TestApp::spawn().await;
    assert_eq!(scrape_with(&app, None).await.status(), StatusCode::OK);
    // A token is not needed, and one that would be wrong is not refused.
    assert_eq!(
        scrape_with(&app, Some("anything")).await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_flood_of_made_up_tool_names_creates_a_bounded_number_of_series() {
    let app = TestApp::spawn_unthrottled().await;
    let flood = 80;
    for i in 0..flood {
        let (status, r) = app
            .create(
                json!({"tool": format!("tool-{i}-{}", "x".repeat(100)), "params": {},
                "wait": "suspend"}),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{r}");
    }

    let s = scrape(&app).await;
    let created = s.matching("hitl_requests_created_total", &[AGENT_A]);
    let tools: BTreeSet<&str> = created.iter().map(|s| s.labels["tool"].as_str()).collect();
    assert_eq!(tools.len(), 51, "50 tool labels and other");
    assert!(tools.contains("other"));
    assert!(tools.iter().all(|t| t.chars().count() <= 64), "{tools:?}");
    let total: f64 = created.iter().map(|s| s.value).sum();
    assert_eq!(total, flood as f64, "every request is still counted");
    let other = created
        .iter()
        .find(|s| s.labels["tool"] == "other")
        .expect("other");
    assert_eq!(other.value, 30.0);
}

#[tokio::test]
async fn a_request_s_log_lines_carry_its_request_id_agent_and_tool_but_no_parameter_value() {
    let telegram = FakeTelegram::start_with_token(BOT_TOKEN).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let db_url = format!("sqlite://{}/hitl.db", dir.path().display());
    let config = write_config(dir.path(), &telegram, &db_url);
    let mut service = ServiceProcess::start(&config).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();

    let secret_value = "parameter-value-that-must-not-be-logged";
    let r = client
        .post(format!("{}/v1/confirmations", service.base))
        .bearer_auth(TOKEN_A)
        .header("x-request-id", "req-test-0042")
        .json(&json!({"tool": "deploy", "params": {"note": secret_value}, "wait": "suspend"}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    assert_eq!(r.headers()["x-request-id"], "req-test-0042");

    // A request without an id gets a fresh one back; a hostile one is replaced.
    let generated = client
        .get(format!("{}/healthz", service.base))
        .header("x-request-id", "bad id\"}")
        .send()
        .await
        .expect("request");
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(id.chars().all(|c| c.is_ascii_hexdigit()), "{id}");

    telegram.wait_for_messages(1).await;
    // The request's own lines are written before its response; give the log a moment.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = service.log_text();
    let lines: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["span"]["request_id"] == "req-test-0042")
        .collect();
    let requested = lines
        .iter()
        .find(|v| v["message"] == "confirmation requested")
        .unwrap_or_else(|| panic!("no request line in the log:\n{log}"));
    assert_eq!(requested["span"]["agent"], "agent-a", "{requested}");
    assert_eq!(requested["span"]["tool"], "deploy", "{requested}");
    assert_eq!(
        requested["span"]["path"], "/v1/confirmations",
        "{requested}"
    );
    assert!(
        lines
            .iter()
            .any(|v| v["message"] == "request served" && v["status"] == 202),
        "{log}"
    );
    // The route's template is logged, not the path with its id.
    let (_, record) = json_of(
        client
            .get(format!("{}/v1/confirmations/{}", service.base, "c_unknown"))
            .bearer_auth(TOKEN_A)
            .header("x-request-id", "req-test-0043")
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(record["error"]["code"], "not_found", "{record}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = service.log_text();
    let read = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["span"]["request_id"] == "req-test-0043")
        .unwrap_or_else(|| panic!("no line for the read:\n{log}"));
    assert_eq!(read["span"]["path"], "/v1/confirmations/{id}", "{read}");
    assert_eq!(read["span"]["agent"], "agent-a", "{read}");

    assert!(!log.contains(secret_value), "a parameter value was logged");
    assert!(!log.contains(TOKEN_A), "a token was logged");
    service.terminate().await;
}

#[tokio::test]
async fn a_timeout_and_a_fail_closed_are_counted_as_such() {
    let app = TestApp::spawn().await;
    let mut body = deploy(json!({"n": 1}));
    body["timeout_seconds"] = json!(1);
    let (record, _) = app.ask_suspended(body).await;
    app.wait_status(record["id"].as_str().unwrap(), "timeout")
        .await;

    app.telegram
        .fail_next("sendMessage", 1, 400, "Bad Request: chat not found");
    let mut body = deploy(json!({"n": 2}));
    body["wait"] = json!("suspend");
    let (status, refused) = app.create(body).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{refused}");
    app.wait_status(refused["id"].as_str().unwrap(), "cancelled")
        .await;

    let s = scrape(&app).await;
    let outcome = |status, via| decided(&s, "deploy", status, via);
    assert_eq!(outcome("timeout", "timeout"), 1.0);
    assert_eq!(outcome("cancelled", "fail_closed"), 1.0);
    assert_eq!(
        s.value(
            "hitl_decision_latency_seconds_count",
            &[AGENT_A, ("route", "ops"), ("via", "timeout")]
        ),
        1.0
    );
    // About a second: below the 2.5 s bucket, above the 0.5 s one.
    let bucket = |le| {
        s.value(
            "hitl_decision_latency_seconds_bucket",
            &[AGENT_A, ("route", "ops"), ("via", "timeout"), ("le", le)],
        )
    };
    assert_eq!((bucket("0.5"), bucket("2.5")), (0.0, 1.0));
    assert_eq!(
        s.value(
            "hitl_telegram_errors_total",
            &[("method", "sendMessage"), ("kind", "api")]
        ),
        1.0
    );
    assert_eq!(s.value("hitl_pending_requests", &[AGENT_A]), 0.0);
}
