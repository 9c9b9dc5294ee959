//! What waits and what is open, seen from outside the chat: an agent's own through
//! `GET /v1/confirmations?status=pending` and `GET /v1/windows`, an operator's of every
//! route through `hitl-telegram pending`, `windows` and `grants` reading the database.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::cli::config_cmd;
use crate::support::app::*;
use crate::support::grants::{approved_grant, gated};
use crate::support::interactions::tap;

/// `path` read as `token`'s agent.
async fn get_as(app: &TestApp, token: &str, path: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .get(app.url(path))
        .bearer_auth(token)
        .send()
        .await
        .expect("GET");
    json_of(r).await
}

/// `hitl-telegram <args>` on the app's database: its stdout.
async fn cli(app: &TestApp, args: &[&str]) -> String {
    let out = config_cmd(args)
        .env("HITL__DATABASE__URL", &app.db_url)
        .output()
        .await
        .expect("run the CLI");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

fn ids(list: &Value, key: &str, id: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|r| r[id].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn an_agent_lists_its_own_pending_confirmations_and_windows_and_the_cli_every_routes() {
    let app = TestApp::spawn_with_settings(gated).await;
    // Agent a: two waiting (the later deadline asked first), one approved with a window.
    let (late, _) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"v": 2}, "timeout_seconds": 600}))
        .await;
    let (soon, _) = app
        .ask_suspended(json!({"tool": "restart_db", "params": {}, "timeout_seconds": 300}))
        .await;
    let (windowed, message) = app
        .ask_suspended(json!({"tool": "rotate_logs", "params": {"keep": 3},
                              "window_seconds": 600}))
        .await;
    let msg = app.telegram.message(OPS_CHAT, message);
    tap(&app, &msg, "✅ Approve for 10 min", alice()).await;
    // Agent b's waiting question (in the `other` route) is not agent a's to see.
    let (status, theirs) = app
        .create_as(
            TOKEN_B,
            json!({"tool": "drop_cache", "params": {}, "wait": "suspend"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{theirs}");
    let grant = approved_grant(&app, "report:read", "emp-1").await;

    let (status, list) = get_as(&app, TOKEN_A, "/v1/confirmations?status=pending").await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(
        ids(&list, "confirmations", "id"),
        [soon["id"].as_str().unwrap(), late["id"].as_str().unwrap()],
        "the soonest deadline first, agent a's only"
    );
    assert_eq!(list["confirmations"][0]["status"], "pending");
    let (_, one) = get_as(&app, TOKEN_A, "/v1/confirmations?status=pending&limit=1").await;
    assert_eq!(ids(&one, "confirmations", "id").len(), 1);

    let (status, windows) = get_as(&app, TOKEN_A, "/v1/windows").await;
    assert_eq!(status, StatusCode::OK, "{windows}");
    assert_eq!(
        ids(&windows, "windows", "opened_by"),
        [windowed["id"].as_str().unwrap()]
    );
    assert_eq!(windows["windows"][0]["tool"], "rotate_logs");
    assert_eq!(windows["windows"][0]["route"], "ops");
    let (_, none) = get_as(&app, TOKEN_B, "/v1/windows").await;
    assert_eq!(none, json!({"windows": []}));

    // The operator's view: every agent's, as the API's own JSON.
    let pending: Value = serde_json::from_str(&cli(&app, &["pending", "--json"]).await).unwrap();
    let mut all = ids(&pending, "pending", "id");
    all.sort();
    let mut expected = vec![
        soon["id"].as_str().unwrap().to_owned(),
        late["id"].as_str().unwrap().to_owned(),
        theirs["id"].as_str().unwrap().to_owned(),
    ];
    expected.sort();
    assert_eq!(all, expected);
    let text = cli(&app, &["pending"]).await;
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains(&format!(
            "{}  route ops  agent agent-a  restart_db  owner",
            soon["id"].as_str().unwrap()
        )),
        "{text}"
    );
    let windows: Value = serde_json::from_str(&cli(&app, &["windows", "--json"]).await).unwrap();
    assert_eq!(
        ids(&windows, "windows", "opened_by"),
        [windowed["id"].as_str().unwrap()]
    );
    assert!(cli(&app, &["windows"]).await.contains("rotate_logs"));
    let grants: Value = serde_json::from_str(&cli(&app, &["grants", "--json"]).await).unwrap();
    assert_eq!(
        ids(&grants, "grants", "grant_id"),
        [grant["grant_id"].as_str().unwrap()]
    );
    assert!(cli(&app, &["grants"]).await.contains("report:read"));

    // The ops chat lists what the CLI lists for route ops.
    let before = app.telegram.messages_in(OPS_CHAT).len();
    app.telegram
        .send_text_message(OPS_CHAT, alice(), "/pending");
    let answer = app
        .telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .remove(before);
    let ops: Vec<(&str, &str)> = text
        .lines()
        .filter(|l| l.contains("  route ops  "))
        .map(|l| {
            let fields: Vec<&str> = l.split("  ").collect();
            (fields[2], fields[3])
        })
        .collect();
    assert_eq!(ops.len(), 2, "{text}");
    assert!(
        answer.visible_text.contains("Open requests (2)"),
        "{}",
        answer.visible_text
    );
    for (agent, tool) in ops {
        assert!(
            answer
                .visible_text
                .contains(&format!("🔧 {tool} for owner anonymous · {agent} ·")),
            "{tool}: {}",
            answer.visible_text
        );
    }
}

#[tokio::test]
async fn a_list_that_is_not_of_pending_confirmations_is_refused_naming_the_field() {
    let app = TestApp::spawn().await;
    for (path, field) in [
        ("/v1/confirmations", "status"),
        ("/v1/confirmations?status=confirmed", "status"),
        ("/v1/confirmations?status=pending&limit=0", "limit"),
        ("/v1/confirmations?status=pending&limit=abc", "limit"),
        ("/v1/confirmations?status=pending&sort=asc", "sort"),
    ] {
        let (status, body) = get_as(&app, TOKEN_A, path).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{path}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .starts_with(field)
                || body.to_string().contains(field),
            "{path}: {body}"
        );
    }
    let (status, _) = get_as(&app, "wrong-token", "/v1/confirmations?status=pending").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(cli(&app, &["pending"]).await.trim(), "none");
}
