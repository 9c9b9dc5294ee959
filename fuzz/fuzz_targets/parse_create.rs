//! The request parser (`api::confirmations::parse_create`) on an arbitrary body, for a
//! fixed configuration built the way the service builds its own.
//!
//! Never panics; and a body it accepts, written out again from the accepted fields as an
//! agent would send them, is accepted again as the same request, with the parameters'
//! text kept byte for byte.
#![no_main]

use std::sync::{Arc, LazyLock};

use hitl_telegram::api::confirmations::{WaitMode, parse_create};
use hitl_telegram::config::{Agent, Config, Settings};
use hitl_telegram::domain::python::json::parse_object;
use hitl_telegram::service::NewConfirmation;
use libfuzzer_sys::fuzz_target;

/// Two routes and one agent that may use callback URLs under `https://hooks.example/cb`.
static CONFIG: LazyLock<(Config, Arc<Agent>)> = LazyLock::new(|| {
    let settings = Settings::from_toml(
        r#"
        [server]
        bind = "127.0.0.1:0"
        [database]
        url = "sqlite::memory:"
        [telegram]
        api_url = "http://127.0.0.1:9/"
        poll_timeout_seconds = 1
        [confirmation]
        default_timeout_seconds = 120
        max_timeout_seconds = 86400
        default_window_seconds = 30
        [[routes]]
        name = "ops"
        chat_id = -100
        approvers = [1]
        [[routes]]
        name = "other"
        chat_id = -200
        approvers = [2]
        [[agents]]
        name = "bot"
        token_env = "BOT_TOKEN"
        routes = ["ops", "other"]
        default_route = "ops"
        webhook_secret_env = "BOT_SECRET"
        callback_url_prefixes = ["https://hooks.example/cb"]
        "#,
    )
    .expect("fuzz settings parse");
    let env = |key: &str| match key {
        "TELEGRAM_BOT_TOKEN" => Some("123:telegram".to_owned()),
        "BOT_TOKEN" => Some("agent-token".to_owned()),
        "BOT_SECRET" => Some("webhook-secret".to_owned()),
        _ => None,
    };
    let config = Config::from_settings(settings, &env).expect("fuzz config is valid");
    let agent = config.agents[0].clone();
    (config, agent)
});

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

/// The accepted request written out again as an agent would send it.
fn resend(new: &NewConfirmation, wait: WaitMode) -> String {
    let mut members = vec![
        format!("\"tool\": {}", json_string(new.tool.as_str())),
        format!("\"params\": {}", new.params_json),
        format!("\"owner_id\": {}", json_string(new.owner_id.as_str())),
        format!("\"window_seconds\": {}", new.window_seconds),
        format!("\"allow_edit\": {}", new.allow_edit),
        format!(
            "\"timeout_seconds\": {}.{:03}",
            new.timeout.as_secs(),
            new.timeout.subsec_millis()
        ),
        format!(
            "\"wait\": {}",
            match wait {
                WaitMode::Block => "\"block\"",
                WaitMode::Suspend => "\"suspend\"",
            }
        ),
    ];
    for (name, value) in [
        ("template", &new.template),
        ("route", &new.route),
        ("context", &new.context),
        ("callback_url", &new.callback_url),
    ] {
        if let Some(value) = value {
            members.push(format!("\"{name}\": {}", json_string(value)));
        }
    }
    if let Some(key) = &new.idempotency_key {
        members.push(format!(
            "\"idempotency_key\": {}",
            json_string(key.as_str())
        ));
    }
    format!("{{{}}}", members.join(", "))
}

fuzz_target!(|data: &[u8]| {
    let (config, agent) = &*CONFIG;
    let Ok((new, wait)) = parse_create(data, config, agent) else {
        return;
    };
    assert_eq!(
        parse_object(&new.params_json).as_ref(),
        Ok(&new.params),
        "params_json and params disagree"
    );
    let again = resend(&new, wait);
    let (b, wait_again) = match parse_create(again.as_bytes(), config, agent) {
        Ok(accepted) => accepted,
        Err(e) => panic!("accepted once, refused when sent again: {e:?}\n{again}"),
    };
    assert_eq!(wait_again, wait);
    assert_eq!(b.tool, new.tool);
    assert_eq!(b.params, new.params);
    assert_eq!(b.params_json, new.params_json);
    assert_eq!(b.owner_id, new.owner_id);
    assert_eq!(b.template, new.template);
    assert_eq!(b.window_seconds, new.window_seconds);
    assert_eq!(b.allow_edit, new.allow_edit);
    assert_eq!(b.timeout, new.timeout);
    assert_eq!(b.route, new.route);
    assert_eq!(b.idempotency_key, new.idempotency_key);
    assert_eq!(b.context, new.context);
    assert_eq!(b.callback_url, new.callback_url);
});
