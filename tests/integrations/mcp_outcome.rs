//! The MCP tool `report_outcome`, driven by the official Python MCP SDK like the other
//! tools (`mcp.rs`'s driver), over both transports: an approval asks for the report,
//! the report is taken and read back through the API, and a report the service refuses
//! (a second, different one; one for a cancelled request; another agent's or an
//! unknown id) is NOT REPORTED, saying why.
//!
//! Needs `HITL_MCP_PYTHON`; skips without it unless `HITL_REQUIRE_MCP=1`.

use std::time::Duration;

use serde_json::json;

use crate::mcp::{Driver, Transport, mcp_python, question_about, split};
use crate::support::app::*;

async fn an_approved_call_is_reported_once_and_read_back(transport: Transport) {
    let Some(python) = mcp_python() else {
        return;
    };
    let app = TestApp::spawn().await;
    let mut mcp = Driver::start(&python, &app, transport, TOKEN_A).await;
    mcp.ready().await;

    // Listed with its arguments, as every tool is.
    mcp.send(json!({"op": "list"})).await;
    let tools = mcp.next().await;
    let tool = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "report_outcome")
        .unwrap_or_else(|| panic!("{transport:?}: no report_outcome in {tools}"));
    for field in ["id", "status", "summary", "error", "duration_ms"] {
        assert!(
            tool["input_schema"]["properties"][field].is_object(),
            "{transport:?}: report_outcome lacks {field}: {tool}"
        );
    }
    let required = tool["input_schema"]["required"].to_string();
    assert!(
        required.contains("\"id\"") && required.contains("\"status\""),
        "{tool}"
    );

    // Approved: the answer asks the model to report, naming the request.
    mcp.call(
        "request_approval",
        json!({"tool": "deploy", "params": {"service": "billing"}}),
    )
    .await;
    let question = question_about(&app, "billing").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "✅ Approve", alice());
    let (result, _) = mcp.outcome().await;
    let (error, verdict, record) = split(&result);
    assert!(!error && verdict.starts_with("APPROVED"), "{verdict}");
    let id = record.unwrap()["id"].as_str().unwrap().to_owned();
    assert!(
        verdict.contains(&format!("call report_outcome with id \"{id}\"")),
        "{transport:?}: {verdict}"
    );

    // Reported: REPORTED, and the record holds it.
    let report = json!({"id": id, "status": "executed", "summary": "billing at v42",
                        "duration_ms": 1200});
    let (error, text, _) = mcp.call_now("report_outcome", report.clone()).await;
    assert!(!error, "{transport:?}: {text}");
    assert_eq!(
        text.split(". The human").next().unwrap(),
        format!("REPORTED: executed. Request {id}"),
        "{transport:?}: {text}"
    );
    let (_, record) = app.get(&id).await;
    assert_eq!(record["outcome"]["status"], "executed", "{record}");
    assert_eq!(record["outcome"]["summary"], "billing at v42", "{record}");
    assert_eq!(record["outcome"]["duration_ms"], 1200, "{record}");

    // The same report again is taken; a different one is refused, saying why.
    let (error, text, _) = mcp.call_now("report_outcome", report).await;
    assert!(!error && text.starts_with("REPORTED: executed"), "{text}");
    let (error, text, _) = mcp
        .call_now(
            "report_outcome",
            json!({"id": id, "status": "failed", "error": "boom"}),
        )
        .await;
    assert!(error, "{transport:?}: {text}");
    assert!(
        text.starts_with("NOT REPORTED: the approval service refused the report (409 "),
        "{transport:?}: {text}"
    );
    assert!(text.contains("do not report this call again"), "{text}");
    let (_, record) = app.get(&id).await;
    assert_eq!(
        record["outcome"]["status"], "executed",
        "unchanged: {record}"
    );

    // A cancelled request takes no outcome: 409.
    mcp.call(
        "request_approval",
        json!({"tool": "drop_table", "params": {"table": "users"}}),
    )
    .await;
    let question = question_about(&app, "users").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    app.telegram
        .tap(OPS_CHAT, question.message_id, "❌ Cancel", alice());
    let (result, _) = mcp.outcome().await;
    let (_, verdict, record) = split(&result);
    assert!(verdict.starts_with("NOT APPROVED"), "{verdict}");
    assert!(!verdict.contains("report_outcome"), "{verdict}");
    let cancelled = record.unwrap()["id"].as_str().unwrap().to_owned();
    let (error, text, _) = mcp
        .call_now(
            "report_outcome",
            json!({"id": cancelled, "status": "executed"}),
        )
        .await;
    assert!(error && text.contains("(409 "), "{transport:?}: {text}");
    let (_, record) = app.get(&cancelled).await;
    assert!(record["outcome"].is_null(), "{record}");

    // An id that is not this agent's: 404, said so.
    let (error, text, _) = mcp
        .call_now(
            "report_outcome",
            json!({"id": "cf_00000000000000000000000000000000", "status": "executed"}),
        )
        .await;
    assert!(error && text.contains("(404 "), "{transport:?}: {text}");
    assert!(text.contains("no request of yours"), "{text}");

    // A status the tool does not take: refused before anything is sent.
    let (error, text, _) = mcp
        .call_now("report_outcome", json!({"id": id, "status": "done"}))
        .await;
    assert!(error, "{text}");
    assert!(
        text.starts_with("NOT REPORTED: the arguments of report_outcome are not valid (status: "),
        "{transport:?}: {text}"
    );
}

#[tokio::test]
async fn over_stdio_an_approved_call_is_reported_once_and_a_refused_report_says_why() {
    an_approved_call_is_reported_once_and_read_back(Transport::Stdio).await;
}

#[tokio::test]
async fn over_streamable_http_an_approved_call_is_reported_once_and_a_refused_report_says_why() {
    an_approved_call_is_reported_once_and_read_back(Transport::Http).await;
}
