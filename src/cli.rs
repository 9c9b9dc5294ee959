//! Command-line pieces that are more than argument parsing: `ask` (gate a shell step on
//! a human's tap) and the `--demo` configuration.

use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::config::{AgentSettings, RouteSettings, Settings};
use crate::domain::pyjson;

/// Variables the `--demo` mode reads.
pub const DEMO_OPERATOR_ENV: &str = "HITL_DEMO_OPERATOR_ID";
pub const DEMO_AGENT_TOKEN_ENV: &str = "HITL_DEMO_AGENT_TOKEN";

/// Replaces routes and agents with one route (the operator's private chat with the bot,
/// the operator as its only approver) and one agent `demo`, so a newcomer needs no file
/// edits: only a bot token, their Telegram user id and a token for their agent.
pub fn demo_settings(mut s: Settings, operator_id: Option<String>) -> anyhow::Result<Settings> {
    let raw = operator_id.with_context(|| {
        format!(
            "--demo needs {DEMO_OPERATOR_ENV}: your numeric Telegram user id (ask @userinfobot)"
        )
    })?;
    let operator: u64 = raw
        .trim()
        .parse()
        .with_context(|| format!("{DEMO_OPERATOR_ENV} must be a numeric Telegram user id"))?;
    s.routes = vec![RouteSettings {
        name: "demo".into(),
        // In a private chat the chat id is the user's id.
        chat_id: i64::try_from(operator).context("Telegram user id out of range")?,
        approvers: vec![operator],
        forbid_self_approval: false,
        quorum: None,
        max_window_seconds: crate::config::DEFAULT_MAX_WINDOW_SECONDS,
    }];
    s.agents = vec![AgentSettings {
        name: "demo".into(),
        token_env: DEMO_AGENT_TOKEN_ENV.into(),
        routes: vec!["demo".into()],
        default_route: Some("demo".into()),
        webhook_secret_env: None,
        callback_url_prefixes: Vec::new(),
        requests_per_minute: 120,
        max_pending: 100,
        max_streams: crate::config::DEFAULT_MAX_STREAMS,
        max_long_polls: crate::config::DEFAULT_MAX_LONG_POLLS,
    }];
    Ok(s)
}

/// What `ask` sends.
#[derive(Debug, Clone)]
pub struct AskRequest {
    pub url: String,
    pub token: String,
    pub tool: String,
    /// `key=value` (a string) or `key:=json` (any JSON value), in order.
    pub params: Vec<String>,
    pub template: Option<String>,
    pub timeout_seconds: Option<f64>,
    pub owner_id: Option<String>,
    pub context: Option<String>,
    pub route: Option<String>,
    pub window_seconds: Option<u64>,
}

/// Builds the `params` object text from `key=value` / `key:=json` arguments, keeping
/// their order and every digit of a JSON number.
pub fn params_json(args: &[String]) -> anyhow::Result<String> {
    let mut parts = Vec::with_capacity(args.len());
    for arg in args {
        let (key, value) = if let Some((k, v)) = arg.split_once(":=") {
            if k.contains('=') {
                // `a=b:=c` is the string "b:=c" for key a.
                let (k, v) = arg.split_once('=').unwrap_or((arg, ""));
                (k, serde_json::to_string(v)?)
            } else {
                pyjson::parse(v).with_context(|| format!("--param {k}:= needs a JSON value"))?;
                (k, v.to_owned())
            }
        } else if let Some((k, v)) = arg.split_once('=') {
            (k, serde_json::to_string(v)?)
        } else {
            bail!("--param must be key=value or key:=json, got '{arg}'");
        };
        if key.is_empty() {
            bail!("--param '{arg}' has an empty key");
        }
        parts.push(format!("{}: {value}", serde_json::to_string(key)?));
    }
    Ok(format!("{{{}}}", parts.join(", ")))
}

/// Exit codes of `ask`.
pub const EXIT_CONFIRMED: u8 = 0;
pub const EXIT_CANCELLED: u8 = 1;
pub const EXIT_TIMEOUT: u8 = 2;
pub const EXIT_ERROR: u8 = 3;

/// Asks through a running service and waits for the decision. Returns the exit code
/// and what to print (the record, or the error body).
pub async fn ask(req: AskRequest) -> (u8, String) {
    match ask_inner(&req).await {
        Ok((code, out)) => (code, out),
        Err(e) => (EXIT_ERROR, format!("error: {e:#}")),
    }
}

async fn ask_inner(req: &AskRequest) -> anyhow::Result<(u8, String)> {
    let params = params_json(&req.params)?;
    // One idempotency key for every attempt: a retry after a dropped connection finds
    // the same request instead of asking the operator twice.
    let key = format!(
        "ask-{}",
        crate::domain::ids::CallbackToken::generate().as_str()
    );
    let mut body = format!(
        "{{\"tool\": {}, \"params\": {params}, \"wait\": \"block\", \"idempotency_key\": {}",
        serde_json::to_string(&req.tool)?,
        serde_json::to_string(&key)?
    );
    let mut add = |name: &str, v: Option<String>| {
        if let Some(v) = v {
            body.push_str(&format!(", \"{name}\": {v}"));
        }
    };
    add(
        "template",
        req.template
            .as_ref()
            .map(|t| Value::from(t.as_str()).to_string()),
    );
    add(
        "timeout_seconds",
        req.timeout_seconds.map(|t| t.to_string()),
    );
    add(
        "owner_id",
        req.owner_id
            .as_ref()
            .map(|t| Value::from(t.as_str()).to_string()),
    );
    add(
        "context",
        req.context
            .as_ref()
            .map(|t| Value::from(t.as_str()).to_string()),
    );
    add(
        "route",
        req.route
            .as_ref()
            .map(|t| Value::from(t.as_str()).to_string()),
    );
    add("window_seconds", req.window_seconds.map(|t| t.to_string()));
    body.push('}');

    let endpoint = format!("{}/v1/confirmations", req.url.trim_end_matches('/'));
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()?;
    let mut attempt = 0;
    let response = loop {
        attempt += 1;
        let result = client
            .post(&endpoint)
            .bearer_auth(&req.token)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await;
        match result {
            Ok(r) if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE && attempt < 3 => {}
            Ok(r) => break r,
            Err(e) if attempt < 3 && (e.is_connect() || e.is_request()) => {
                eprintln!("ask: {e}; retrying");
            }
            Err(e) => return Err(e).context("cannot reach the service"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let status = response.status();
    let text = response
        .text()
        .await
        .context("cannot read the service's answer")?;
    if !status.is_success() {
        return Ok((EXIT_ERROR, text));
    }
    let record: Value = serde_json::from_str(&text).context("the service's answer is not JSON")?;
    let code = match record.get("status").and_then(Value::as_str) {
        Some("confirmed") => EXIT_CONFIRMED,
        Some("cancelled") => EXIT_CANCELLED,
        Some("timeout") => EXIT_TIMEOUT,
        _ => EXIT_ERROR,
    };
    Ok((code, serde_json::to_string_pretty(&record)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_keep_order_types_and_digits() {
        let p = params_json(&[
            "name=alice".into(),
            "count:=3".into(),
            "big:=123456789012345678901234567890".into(),
            "flags:=[true, null]".into(),
            "eq=a=b".into(),
        ])
        .unwrap();
        assert_eq!(
            p,
            r#"{"name": "alice", "count": 3, "big": 123456789012345678901234567890, "flags": [true, null], "eq": "a=b"}"#
        );
    }

    #[test]
    fn a_param_without_equals_or_with_bad_json_is_refused() {
        assert!(params_json(&["novalue".into()]).is_err());
        assert!(params_json(&["x:={bad".into()]).is_err());
        assert!(params_json(&["=v".into()]).is_err());
    }
}
