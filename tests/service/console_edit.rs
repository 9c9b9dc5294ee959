//! Edit before execute in the console (issue 37): a call whose agent allows edits and
//! sent the tool's `args_schema` can be changed before it is approved. The edit is
//! checked against the schema by the service (each field at fault named, nothing
//! decided), the agent runs the edited call (`edited`, the new hash and the original),
//! the chat says what changed, and a window covers the edited call only.

use super::console::{PAGE_WAIT, as_user, console_get, console_url, decide, with_console};
use crate::support::browser::Browser;

/// The console on, registered with @BotFather (so a group's question links to it).
fn with_app(toml: String) -> String {
    with_console(toml).replace(
        "max_age_seconds = 600\n",
        "max_age_seconds = 600\nshort_name = \"console\"\n",
    )
}
use crate::support::app::*;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The tool's schema, as pydantic's `model_json_schema()` writes it.
fn transfer_schema() -> Value {
    json!({
        "title": "TransferArgs",
        "type": "object",
        "properties": {
            "amount": {"title": "Amount", "type": "number", "exclusiveMinimum": 0, "maximum": 5000},
            "to": {"title": "To", "type": "string", "minLength": 1},
            "memo": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null, "title": "Memo"},
        },
        "required": ["amount", "to"],
        "additionalProperties": false,
    })
}

fn transfer(amount: Value) -> Value {
    json!({
        "tool": "transfer",
        "owner_id": "emp-1",
        "params": {"amount": amount, "to": "ACME GmbH", "memo": null},
        "allow_edit": true,
        "args_schema": transfer_schema(),
    })
}

#[tokio::test]
async fn an_edit_that_breaks_the_tools_schema_is_refused_field_by_field_and_decides_nothing() {
    let app = TestApp::spawn_with_settings(with_app).await;
    let (record, _) = app.ask_suspended(transfer(json!(1200.5))).await;
    let id = record["id"].as_str().unwrap();
    let alice = as_user(&app, ALICE, "Alice");
    let (s, detail) = console_get(&app, &format!("/app/api/questions/{id}"), Some(&alice)).await;
    assert_eq!(s, StatusCode::OK, "{detail}");
    assert_eq!(detail["question"]["editable"], true);
    assert_eq!(detail["question"]["args_schema"], transfer_schema());

    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": record["args_hash"],
               "parameters": {"amount": 9000, "to": "", "memo": null, "iban": "DE00"}}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert_eq!(r["error"]["code"], "invalid_parameters");
    let fields = r["error"]["fields"].as_array().expect("fields");
    let named = |f: &str| {
        fields
            .iter()
            .find(|e| e["field"] == f)
            .unwrap_or_else(|| panic!("{f} named in {r}"))["message"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(named("amount").contains("5000"), "{r}");
    assert!(!named("to").is_empty());
    assert_eq!(named("iban"), "is not a parameter of this tool");
    let (_, now) = app.get(id).await;
    assert_eq!(now["status"], "pending", "nothing was decided: {now}");

    // A cancel or a deny carries no parameters: a refused call runs with nothing.
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "cancel", "args_hash": record["args_hash"], "parameters": {"amount": 1, "to": "x"}}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parameters"),
        "{r}"
    );
}

#[tokio::test]
async fn an_edited_approval_reaches_the_agent_with_the_new_call_and_the_chat_says_what_changed() {
    let app = TestApp::spawn_with_settings(with_app).await;
    // A group's Review button links to the app by the bot's username, known once the
    // bot has introduced itself (and set its menu button).
    app.telegram.wait_for_requests("setChatMenuButton", 1).await;
    let blocked = app.create_blocking(transfer(json!(1200.5)));
    let message = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    assert!(
        message
            .visible_text
            .contains("can be changed before it is approved in the console"),
        "{}",
        message.visible_text
    );
    assert!(
        message
            .buttons
            .iter()
            .flatten()
            .any(|b| b.text == "✏️ Review and edit"),
        "{:?}",
        message.buttons
    );
    let alice = as_user(&app, ALICE, "Alice");
    let (_, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    let q = list["questions"][0].clone();
    let id = q["id"].as_str().unwrap();
    let asked_hash = q["args_hash"].as_str().unwrap().to_owned();

    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": asked_hash,
               "parameters": {"amount": 1000, "to": "ACME GmbH", "memo": null}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    assert_eq!(r["changes"], "amount 1200.5 → 1000");
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["edited"], true);
    assert_eq!(
        record["parameters"],
        json!({"amount": 1000, "to": "ACME GmbH", "memo": null})
    );
    assert_eq!(record["original_args_hash"], asked_hash.as_str());
    assert_ne!(record["args_hash"], asked_hash.as_str());
    // The new hash is the edited call's, as AI-Parrot's guard computes it.
    let (_, unedited) = app
        .create(json!({"tool": "transfer", "owner_id": "emp-1",
        "params": {"amount": 1000, "to": "ACME GmbH", "memo": null}, "wait": "suspend"}))
        .await;
    assert_eq!(record["args_hash"], unedited["args_hash"]);

    let shown = app
        .telegram
        .wait_for_message(OPS_CHAT, message.message_id, "the edited decision", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        shown
            .visible_text
            .contains("✏️ Approved with changes by Alice (@alice)"),
        "{}",
        shown.visible_text
    );
    assert!(
        shown.visible_text.contains("amount 1200.5 → 1000"),
        "{}",
        shown.visible_text
    );

    let decided: Vec<Value> = app
        .audit_events(id)
        .await
        .into_iter()
        .filter(|e| e["kind"] == "decided")
        .collect();
    assert_eq!(
        decided[0]["detail"]["edited"]["original_args_hash"],
        asked_hash.as_str()
    );
    assert_eq!(decided[0]["detail"]["edited"]["changed"], json!(["amount"]));
    let console = app
        .audit_events(id)
        .await
        .into_iter()
        .find(|e| e["kind"] == "console_decision")
        .expect("console_decision");
    assert_eq!(console["detail"]["edited"], true);
}

#[tokio::test]
async fn a_window_opened_by_an_edited_approval_covers_the_edited_call_only() {
    let app = TestApp::spawn_with_settings(with_app).await;
    let mut body = transfer(json!(1200.5));
    body["window_seconds"] = json!(600);
    body["idempotency_key"] = json!("transfer-1");
    let (record, _) = app.ask_suspended(body.clone()).await;
    let id = record["id"].as_str().unwrap();
    let alice = as_user(&app, ALICE, "Alice");
    let edited = json!({"amount": 1000, "to": "ACME GmbH", "memo": null});
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve_window", "args_hash": record["args_hash"], "parameters": edited}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");

    // The agent's retry of its own request (same idempotency key, the asked call) finds
    // the same, edited decision rather than a mismatch.
    let (s, again) = app.create(body).await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(again["id"], id);
    assert_eq!(again["parameters"], edited);

    // The edited call rides the window; the call as first asked asks again.
    let mut same_as_edited = transfer(edited["amount"].clone());
    same_as_edited["window_seconds"] = json!(600);
    let (s, hit) = app.create(same_as_edited).await;
    assert_eq!(s, StatusCode::OK, "{hit}");
    assert_eq!(hit["via"], "window", "{hit}");
    let mut as_asked = transfer(json!(1200.5));
    as_asked["window_seconds"] = json!(600);
    as_asked["wait"] = json!("suspend");
    let (s, asks) = app.create(as_asked).await;
    assert_eq!(s, StatusCode::ACCEPTED, "{asks}");
    assert_eq!(asks["status"], "pending");
}

#[tokio::test]
async fn edits_are_taken_only_where_the_agent_allowed_them_with_a_valid_schema() {
    let app = TestApp::spawn_with_settings(with_app).await;
    app.telegram.wait_for_requests("setChatMenuButton", 1).await;
    // An invalid schema is refused when the question is asked, not when someone edits.
    for bad in [
        json!({"type": "no-such-type"}),
        json!(["not", "an", "object"]),
        json!({"$ref": "https://example.com/schema.json"}),
    ] {
        let mut body = transfer(json!(10));
        body["args_schema"] = bad.clone();
        let (s, r) = app.create(body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("args_schema"),
            "{r}"
        );
    }

    let alice = as_user(&app, ALICE, "Alice");
    for (what, mut body) in [
        ("without allow_edit", transfer(json!(10))),
        ("without a schema", transfer(json!(10))),
    ] {
        if what == "without allow_edit" {
            body["allow_edit"] = json!(false);
        } else {
            body.as_object_mut().unwrap().remove("args_schema");
        }
        let (record, message_id) = app.ask_suspended(body).await;
        let id = record["id"].as_str().unwrap();
        let (_, detail) =
            console_get(&app, &format!("/app/api/questions/{id}"), Some(&alice)).await;
        assert_eq!(detail["question"]["editable"], false, "{what}");
        let (s, r) = decide(
            &app,
            id,
            &alice,
            json!({"action": "approve", "args_hash": record["args_hash"],
                   "parameters": {"amount": 5, "to": "x", "memo": null}}),
        )
        .await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{what}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("parameters"),
            "{r}"
        );
        let message = app.telegram.message(OPS_CHAT, message_id);
        assert!(
            message
                .buttons
                .iter()
                .flatten()
                .any(|b| b.text == "🔎 Review"),
            "{what}: {:?}",
            message.buttons
        );
        let (_, now) = app.get(id).await;
        assert_eq!(now["status"], "pending", "{what}");
    }
}

#[tokio::test]
async fn an_edit_a_deny_rule_forbids_is_refused_as_the_call_itself_would_be() {
    let app = TestApp::spawn_with_settings(|toml| {
        with_app(toml)
            + "\n[[rules]]\nname = \"no-big-transfers\"\neffect = \"deny\"\ntools = [\"transfer\"]\nwhere = [{ path = \"amount\", op = \"gt\", value = 3000 }]\nreason = \"over the limit\"\n"
    })
    .await;
    let (record, _) = app.ask_suspended(transfer(json!(1200.5))).await;
    let id = record["id"].as_str().unwrap();
    let alice = as_user(&app, ALICE, "Alice");
    let (s, r) = decide(
        &app,
        id,
        &alice,
        json!({"action": "approve", "args_hash": record["args_hash"],
               "parameters": {"amount": 4000, "to": "ACME GmbH", "memo": null}}),
    )
    .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no-big-transfers"),
        "{r}"
    );
    let (_, now) = app.get(id).await;
    assert_eq!(now["status"], "pending");
}

#[tokio::test]
async fn in_a_real_browser_an_invalid_edit_shows_the_schema_error_on_its_field_and_a_valid_one_runs()
 {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_app).await;
    let blocked = app.create_blocking(transfer(json!(1200.5)));
    app.telegram.wait_for_message_in(OPS_CHAT, 1).await;
    let alice = as_user(&app, ALICE, "Alice");
    let (_, list) = console_get(&app, "/app/api/questions", Some(&alice)).await;
    let id = list["questions"][0]["id"].as_str().unwrap().to_owned();

    let page = browser.page().await;
    page.goto(&console_url(&app, ALICE, "Alice", Some(&id)))
        .await;
    page.wait_for("#edit", PAGE_WAIT).await;
    // The form is the tool's schema, filled with the call.
    assert_eq!(
        page.eval("document.querySelector('#edit-amount').value")
            .await,
        "1200.5"
    );
    assert_eq!(
        page.eval("document.querySelector('#edit-to').value").await,
        "ACME GmbH"
    );

    // Over the schema's maximum: the service's error shows beside the field, and the
    // agent still waits.
    page.type_into("#edit-amount", "9000").await;
    page.click("#approve_edited").await;
    page.wait_for("[data-error-for=amount]:not(:empty)", PAGE_WAIT)
        .await;
    let error = page.text("[data-error-for=amount]").await;
    assert!(error.contains("5000"), "{error}");
    assert_eq!(page.text("[data-error-for=to]").await, "");
    assert!(!blocked.is_finished(), "nothing was decided");
    // The operator's guide shows this: the form, the error on its field.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-edit-phone.png");
    page.eval("document.querySelector('#edit').scrollIntoView()")
        .await;
    page.screenshot(&shot).await;

    // Fixed: approved with the change, which the agent runs.
    page.type_into("#edit-amount", "1000").await;
    page.click("#approve_edited").await;
    page.wait_for("#decided", PAGE_WAIT).await;
    let done = page.text("#decided").await;
    assert!(done.contains("amount 1200.5 → 1000"), "{done}");
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["edited"], true);
    assert_eq!(record["parameters"]["amount"], 1000);
}
