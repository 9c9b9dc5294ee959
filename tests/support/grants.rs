//! What the tests of the gate (deny rule, grant, window, allow rule, person) share on
//! every path a grant can come with (HTTP, MCP, the Python client): one configuration
//! and a grant a person approved.

#![allow(dead_code)] // each test executable uses a subset

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::app::{OPS_CHAT, TOKEN_A, TestApp, alice, json_of};
use super::interactions::tap;

/// The test configuration (`settings_toml`) plus: a `deny` rule for drops in production;
/// route `ops` mapping `billing:write` to the transfer and refund tools; agent-a mapping
/// `report:read` to `read_report` on any of its routes.
pub fn gated(toml: String) -> String {
    let toml = toml
        .replacen(
            "forbid_self_approval = true\n",
            "forbid_self_approval = true\n\
             grant_scopes = { \"billing:write\" = [\"transfer\", \"refund_*\"] }\n",
            1,
        )
        .replacen(
            "default_route = \"ops\"\n",
            "default_route = \"ops\"\ngrant_scopes = { \"report:read\" = [\"read_report\"] }\n",
            1,
        );
    assert!(toml.matches("grant_scopes").count() == 2, "{toml}");
    toml + r#"
[[rules]]
name = "no-drops-in-prod"
effect = "deny"
tools = ["drop_*"]
where = [{ path = "env", op = "eq", value = "prod" }]
reason = "production tables are never dropped by agents"
"#
}

/// A grant of `scope` for `owner`, asked by agent-a with `POST /v1/grants` and approved
/// by Alice in the ops chat: the grant as the API returns it.
pub async fn approved_grant(app: &TestApp, scope: &str, owner: &str) -> Value {
    let before = app.telegram.messages_in(OPS_CHAT).len();
    let asking = {
        let request = app
            .client
            .post(app.url("/v1/grants"))
            .bearer_auth(TOKEN_A)
            .json(&json!({"owner_id": owner, "scope": scope, "window_seconds": 3600}));
        tokio::spawn(async move { json_of(request.send().await.expect("POST /v1/grants")).await })
    };
    let question = app
        .telegram
        .wait_for_message_in(OPS_CHAT, before + 1)
        .await
        .remove(before);
    tap(app, &question, "✅ Approve", alice()).await;
    let (s, answer) = asking.await.expect("the grant request");
    assert_eq!(s, StatusCode::CREATED, "{answer}");
    answer["grant"].clone()
}

/// A confirmation of `tool` for emp-1 presenting `scope` (with `require_grant_only`
/// when `only`), as `POST /v1/confirmations` takes it.
pub fn presenting(tool: &str, params: Value, scope: &str, only: bool) -> Value {
    json!({"tool": tool, "params": params, "owner_id": "emp-1", "grant_scope": scope,
           "require_grant_only": only})
}
