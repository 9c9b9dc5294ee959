//! The MCP grant tools, `request_grant` and `check_grant`, driven by the official Python
//! MCP SDK like the other tools (`mcp.rs`'s driver), over both transports: asked in the
//! fake Telegram, approved or refused by Alice, then checked; and a grant presented with
//! `request_approval`.
//!
//! Needs `HITL_MCP_PYTHON`; skips without it unless `HITL_REQUIRE_MCP=1`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp::{Driver, Transport, mcp_python, question_about, split};
use crate::support::app::*;
use crate::support::grants::{approved_grant, gated};

async fn a_grant_asked_over_mcp_lets_its_scope_through_and_nothing_else(transport: Transport) {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn().await;
    let mut mcp = Driver::start(&python, &app, transport, TOKEN_A).await;
    mcp.ready().await;

    mcp.send(json!({"op": "list"})).await;
    let tools = mcp.next().await;
    let grant_tool = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "request_grant")
        .unwrap_or_else(|| panic!("{transport:?}: no request_grant in {tools}"));
    for field in ["owner_id", "scope", "window_seconds", "reason", "wait"] {
        assert!(
            grant_tool["input_schema"]["properties"][field].is_object(),
            "{transport:?}: request_grant lacks {field}"
        );
    }
    assert!(
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "check_grant")
    );

    // Asked in Telegram with the scope and the owner; Alice approves; GRANTED, with
    // progress notifications while it waits.
    mcp.call(
        "request_grant",
        json!({"owner_id": "alice", "scope": "tool:deploy", "window_seconds": 3600,
               "reason": "release day"}),
    )
    .await;
    let question = question_about(&app, "Scope: tool:deploy").await;
    assert!(
        question.visible_text.contains("Owner: alice"),
        "{question:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "✅ Approve", alice());
    let (result, progress) = mcp.outcome().await;
    let (error, verdict, grant) = split(&result);
    assert!(!error, "{transport:?}: {verdict}");
    assert!(
        verdict.starts_with("GRANTED by Alice")
            && verdict.contains("calls in scope tool:deploy for owner alice"),
        "{transport:?}: {verdict}"
    );
    assert!(progress >= 1, "{transport:?}: no progress notification");
    let grant = grant.unwrap();
    assert_eq!(grant["live"], true);
    assert!(grant["interaction_id"].is_string(), "{grant}");

    // Checked: this scope and owner are covered; another scope or owner is not.
    let (error, verdict, record) = mcp
        .call_now(
            "check_grant",
            json!({"owner_id": "alice", "scope": "tool:deploy"}),
        )
        .await;
    assert!(!error && verdict.starts_with("GRANTED"), "{verdict}");
    assert_eq!(record.unwrap()["grant_id"], grant["grant_id"]);
    for (owner, scope) in [("alice", "tool:drop_table"), ("bob", "tool:deploy")] {
        let (error, verdict, record) = mcp
            .call_now("check_grant", json!({"owner_id": owner, "scope": scope}))
            .await;
        assert!(!error, "{verdict}");
        assert!(
            verdict.starts_with("NOT GRANTED"),
            "{owner} {scope}: {verdict}"
        );
        assert!(record.is_none());
    }

    // Refused: NOT GRANTED, saying so, and nothing stored.
    mcp.call(
        "request_grant",
        json!({"owner_id": "alice", "scope": "tool:drop_table"}),
    )
    .await;
    let question = question_about(&app, "Scope: tool:drop_table").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "❌ Reject", alice());
    let (result, _) = mcp.outcome().await;
    let (error, verdict, _) = split(&result);
    assert!(error, "{verdict}");
    assert!(
        verdict.starts_with("NOT GRANTED: the operator refused"),
        "{transport:?}: {verdict}"
    );
    let (_, verdict, _) = mcp
        .call_now(
            "check_grant",
            json!({"owner_id": "alice", "scope": "tool:drop_table"}),
        )
        .await;
    assert!(verdict.starts_with("NOT GRANTED"), "{verdict}");

    // Suspended: NOT GRANTED YET with the question's id; once it is answered yes,
    // presenting that id answers the grant the yes stored, on its terms only.
    let (error, verdict, _) = mcp
        .call_now(
            "request_grant",
            json!({"owner_id": "alice", "scope": "tool:*", "wait": "suspend"}),
        )
        .await;
    assert!(
        !error && verdict.starts_with("NOT GRANTED YET"),
        "{verdict}"
    );
    let id = verdict
        .split('"')
        .nth(1)
        .unwrap_or_else(|| panic!("no id in {verdict}"))
        .to_owned();
    let question = question_about(&app, "Scope: tool:*").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "✅ Approve", alice());
    // The tap reaches the service through the fake's update queue: wait for it.
    let (_, verdict, _) = mcp
        .call_now("get_decision", json!({"id": id, "wait_seconds": 10}))
        .await;
    assert!(verdict.starts_with("ANSWERED: true"), "{verdict}");
    let present = json!({"owner_id": "alice", "scope": "tool:*", "interaction_id": id});
    let (error, first, _) = mcp.call_now("request_grant", present.clone()).await;
    assert!(!error && first.starts_with("GRANTED by Alice"), "{first}");
    let (_, verdict, _) = mcp
        .call_now(
            "check_grant",
            json!({"owner_id": "alice", "scope": "tool:drop_table"}),
        )
        .await;
    assert!(
        verdict.starts_with("GRANTED"),
        "tool:* covers it: {verdict}"
    );
    // The yes stored the grant: presented again, the same; presented longer, none.
    let (error, again, _) = mcp.call_now("request_grant", present.clone()).await;
    assert!(!error && again == first, "{again}");
    let mut longer = present;
    longer["window_seconds"] = json!(28_800);
    let (error, verdict, _) = mcp.call_now("request_grant", longer).await;
    assert!(
        error && verdict.starts_with("NOT GRANTED") && verdict.contains("409"),
        "presented longer: {verdict}"
    );

    // Arguments it cannot read: NOT GRANTED, nothing asked.
    let before = app.telegram.messages_in(OPS_CHAT).len();
    let (error, verdict, _) = mcp
        .call_now("request_grant", json!({"scope": "tool:deploy"}))
        .await;
    assert!(error && verdict.starts_with("NOT GRANTED"), "{verdict}");
    assert!(verdict.contains("owner_id"), "{verdict}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.telegram.messages_in(OPS_CHAT).len(), before);
}

#[tokio::test]
async fn over_stdio_a_grant_asked_and_approved_lets_its_scope_through_and_nothing_else() {
    a_grant_asked_over_mcp_lets_its_scope_through_and_nothing_else(Transport::Stdio).await;
}

#[tokio::test]
async fn over_streamable_http_a_grant_asked_and_approved_lets_its_scope_through_and_nothing_else() {
    a_grant_asked_over_mcp_lets_its_scope_through_and_nothing_else(Transport::Http).await;
}

/// `request_approval` for emp-1 presenting `scope` with `require_grant_only`.
async fn present(
    mcp: &mut Driver,
    tool: &str,
    params: Value,
    scope: &str,
) -> (bool, String, Option<Value>) {
    mcp.call_now(
        "request_approval",
        json!({"tool": tool, "params": params, "owner_id": "emp-1",
               "grant_scope": scope, "require_grant_only": true}),
    )
    .await
}

/// `request_approval` presents a grant (`grant_scope`, `require_grant_only`): a scope that
/// does not cover the tool, or that nobody maps, is NOT APPROVED naming both; a deny rule
/// beats a live `tool:*` grant; a mapped scope confirms only its tools.
#[tokio::test]
async fn request_approval_presents_a_grant_that_never_widens_the_call_and_loses_to_a_deny_rule() {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn_with_settings(gated).await;
    approved_grant(&app, "tool:*", "emp-1").await;
    approved_grant(&app, "billing:write", "emp-1").await;
    let mut mcp = Driver::start(&python, &app, Transport::Stdio, TOKEN_A).await;
    mcp.ready().await;
    let (error, verdict, _) = present(
        &mut mcp,
        "drop_table",
        json!({"env": "staging"}),
        "tool:deploy",
    )
    .await;
    assert!(
        error
            && verdict.starts_with("NOT APPROVED: the approval service refused the request (422 grant_scope: 'tool:deploy' does not cover tool 'drop_table'"),
        "{verdict}"
    );
    let (error, verdict, record) =
        present(&mut mcp, "drop_table", json!({"env": "prod"}), "tool:*").await;
    assert!(
        !error && verdict.starts_with("NOT APPROVED: cancelled (denied by rule 'no-drops-in-prod'"),
        "{verdict}"
    );
    assert_eq!(record.unwrap()["via"], "rule");
    let (error, verdict, record) = present(
        &mut mcp,
        "refund_card",
        json!({"amount": 5}),
        "billing:write",
    )
    .await;
    assert!(
        !error && verdict.starts_with("APPROVED (allowed by grant gr_"),
        "{verdict}"
    );
    assert!(
        verdict
            .contains("billing:write covers refund_card (grant_scopes of route 'ops': refund_*)"),
        "{verdict}"
    );
    assert_eq!(record.unwrap()["via"], "grant");
    let (error, verdict, _) = present(
        &mut mcp,
        "drop_table",
        json!({"env": "staging"}),
        "billing:write",
    )
    .await;
    assert!(
        error && verdict.contains("422 grant_scope: 'billing:write' does not cover tool 'drop_table': route 'ops' maps it to transfer, refund_*"),
        "{verdict}"
    );
    let (error, verdict, _) =
        present(&mut mcp, "transfer", json!({"amount": 5}), "billing:read").await;
    assert!(
        error && verdict.contains("422 grant_scope: 'billing:read' does not cover tool 'transfer'"),
        "{verdict}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        app.telegram.messages_in(OPS_CHAT).len(),
        2,
        "only the two grant questions were asked"
    );
}
