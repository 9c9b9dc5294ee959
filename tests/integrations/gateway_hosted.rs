//! Gateways the service hosts (`[[mcp_upstreams]]`, served at `/mcp/upstreams/{name}`
//! over Streamable HTTP), driven by the official MCP Python SDK as the host: an
//! upstream started as a command and one reached at a URL (its header's value from
//! the service's environment) are gated as the command-line gateway gates them (a
//! card, an approval, a cancel that runs nothing, the run reported, progress while
//! waiting, sampling back to the host); a host that goes away withdraws its waiting
//! question; an agent not listed finds nothing there (404), whatever it sends.
//!
//! Needs `HITL_MCP_PYTHON`; skips without it unless `HITL_REQUIRE_MCP=1`.

use std::path::Path;

use serde_json::{Value, json};

use crate::gateway::{card_shows, text_of};
use crate::gateway_upstream::{http_fixture, reached};
use crate::mcp::{Driver, mcp_python, question_about};
use crate::support::app::*;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/mcp/upstream_server.py"
);

/// A TOML string: JSON's escapes are TOML's for what paths hold.
fn quoted(s: &str) -> String {
    Value::from(s).to_string()
}

/// `[[mcp_upstreams]]` named `fs` for agent-a, from `source` (its `command` or `url`
/// lines), with the fixture's sampling tool allowed by a rule.
fn hosted(source: String) -> impl FnOnce(String) -> String {
    move |toml| {
        toml + &format!(
            "\n[[mcp_upstreams]]\nname = \"fs\"\nagents = [\"agent-a\"]\ntimeout_seconds = 60\n{source}\n\
             \n[[rules]]\nname = \"sampling\"\neffect = \"allow\"\ntools = [\"ask_sampling\"]\nservers = [\"fs\"]\n"
        )
    }
}

/// The fixture as a command, recording the calls that reach it in `record`.
fn command(python: &Path, record: &Path) -> String {
    format!(
        "command = [{}, {}, \"--record\", {}]",
        quoted(&python.display().to_string()),
        quoted(FIXTURE),
        quoted(&record.display().to_string())
    )
}

/// An approval runs the call, a cancel runs nothing, on upstream `fs` of `app`.
async fn approve_then_cancel(app: &TestApp, host: &mut Driver, marker: &str) {
    host.call("echo", json!({"text": format!("{marker} approved")}))
        .await;
    let card = question_about(app, &format!("{marker} approved")).await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "✅ Approve", alice());
    let (result, progress) = host.outcome().await;
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(text_of(&result), format!("{marker} approved"));
    assert!(progress >= 1, "the wait's progress reached the host");
    card_shows(app, card.message_id, "Ran").await;

    host.call("echo", json!({"text": format!("{marker} refused")}))
        .await;
    let card = question_about(app, &format!("{marker} refused")).await;
    app.telegram
        .tap(OPS_CHAT, card.message_id, "❌ Cancel", alice());
    let (result, _) = host.outcome().await;
    assert!(text_of(&result).starts_with("NOT APPROVED"), "{result}");
}

#[tokio::test]
async fn a_hosted_command_upstream_is_gated_for_a_listed_agent_and_its_requests_reach_the_host() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let app = TestApp::spawn_with_settings(hosted(command(&python, &record))).await;
    let mut host = Driver::start_http(
        &python,
        &["--sampling-text", "sampled through the service"],
        &app.url("/mcp/upstreams/fs"),
        TOKEN_A,
    );
    host.ready().await;

    approve_then_cancel(&app, &mut host, "hosted 41").await;
    // The upstream's own request to the host travels back over the host's HTTP session.
    let (error, text, _) = host
        .call_now("ask_sampling", json!({"prompt": "say something"}))
        .await;
    assert!(
        !error && text.contains("sampled through the service"),
        "{text}"
    );
    assert_eq!(reached(&record), ["echo", "ask_sampling"]);

    // A host that goes away while a call waits withdraws its question.
    host.send(
        json!({"op": "start", "id": "w1", "tool": "echo", "args": {"text": "left waiting 3"}}),
    )
    .await;
    let card = question_about(&app, "left waiting 3").await;
    host.finish().await;
    card_shows(&app, card.message_id, "Withdrawn").await;
    assert_eq!(reached(&record), ["echo", "ask_sampling"]);
}

#[tokio::test]
async fn a_hosted_url_upstream_is_gated_with_its_header_from_the_services_environment() {
    let Some(python) = mcp_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("calls.jsonl");
    let (_upstream, url) =
        http_fixture(&python, &record, &format!("X-Upstream-Key={UPSTREAM_KEY}")).await;
    let source = format!(
        "url = {}\nheaders = {{ X-Upstream-Key = \"UPSTREAM_KEY\" }}",
        quoted(&url)
    );
    let app = TestApp::spawn_with_settings(hosted(source)).await;
    let mut host = Driver::start_http(&python, &[], &app.url("/mcp/upstreams/fs"), TOKEN_A);
    host.ready().await;

    approve_then_cancel(&app, &mut host, "hosted over http 8").await;
    assert_eq!(reached(&record), ["echo"]);
    host.finish().await;
}

#[tokio::test]
async fn to_an_agent_not_listed_a_hosted_upstream_does_not_exist() {
    let app = TestApp::spawn_with_settings(hosted(
        "command = [\"/nonexistent/mcp-server\", \"--secret-flag\"]".into(),
    ))
    .await;
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "probe", "version": "1"}}
    });
    let send = |method: reqwest::Method, path: &str, token: Option<&str>| {
        let mut request = app
            .client
            .request(method, app.url(path))
            .header("Accept", "application/json, text/event-stream");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request
    };

    for method in [
        reqwest::Method::POST,
        reqwest::Method::GET,
        reqwest::Method::DELETE,
    ] {
        let r = send(method.clone(), "/mcp/upstreams/fs", Some(TOKEN_B))
            .header("Mcp-Session-Id", "0123456789abcdef0123456789abcdef")
            .json(&initialize)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} as agent-b");
        let body = r.text().await.unwrap();
        assert!(!body.contains("nonexistent"), "{body}");
    }
    let r = send(reqwest::Method::POST, "/mcp/upstreams/fs", Some(TOKEN_B))
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "initialize as agent-b");
    let r = send(reqwest::Method::POST, "/mcp/upstreams/other", Some(TOKEN_A))
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "an upstream nobody configured");
    let r = send(reqwest::Method::POST, "/mcp/upstreams/fs", None)
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no token");

    // agent-a, listed: a session it did not start is unknown, a request before
    // initialize is told to initialize, and an upstream that will not start is named
    // without its command line.
    let r = send(reqwest::Method::POST, "/mcp/upstreams/fs", Some(TOKEN_A))
        .header("Mcp-Session-Id", "0123456789abcdef0123456789abcdef")
        .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404, "a session nobody started");
    let r = send(reqwest::Method::POST, "/mcp/upstreams/fs", Some(TOKEN_A))
        .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("send initialize first"),
        "{body}"
    );
    let r = send(reqwest::Method::POST, "/mcp/upstreams/fs", Some(TOKEN_A))
        .json(&initialize)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 502);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("'fs' could not be started") && !body.contains("secret-flag"),
        "{body}"
    );
}
