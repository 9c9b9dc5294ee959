use serde_json::json;

use super::*;
use crate::api::confirmations::{MAX_LONG_POLL_SECONDS, MAX_TEMPLATE_CHARS, MAX_WINDOW_SECONDS};
use crate::api::interactions::MAX_NOTIFICATION_CHARS;
use crate::domain::ids::ToolName;
use crate::domain::interaction::MAX_INTERACTION_ID_CHARS;

fn doc() -> Value {
    serde_json::from_str(document()).expect("the document is JSON")
}

#[test]
fn the_create_body_is_closed_and_requires_tool_and_params() {
    let doc = doc();
    let body = &doc["components"]["schemas"]["CreateConfirmationBody"];
    assert_eq!(body["additionalProperties"], false);
    assert_eq!(body["required"], serde_json::json!(["tool", "params"]));
}

#[test]
fn links_use_the_openapi_field_names() {
    let doc = doc();
    let created = &doc["paths"]["/v1/confirmations"]["post"]["responses"]["202"];
    let get = &created["links"]["get"];
    assert_eq!(get["operationId"], "get_confirmation");
    assert_eq!(get["parameters"]["id"], "$response.body#/id");
    assert!(get.get("operation_id").is_none());
}

#[test]
fn limits_come_from_the_parser_constants() {
    let doc = doc();
    let props = &doc["components"]["schemas"]["CreateConfirmationBody"]["properties"];
    assert_eq!(props["tool"]["maxLength"], ToolName::MAX_CHARS);
    assert_eq!(props["template"]["maxLength"], MAX_TEMPLATE_CHARS);
    assert_eq!(props["window_seconds"]["maximum"], MAX_WINDOW_SECONDS);
    let wait = &doc["paths"]["/v1/confirmations/{id}"]["get"]["parameters"][1];
    assert_eq!(wait["name"], "wait");
    assert_eq!(wait["schema"]["maximum"], MAX_LONG_POLL_SECONDS);
}

fn documented_fields(body: &Value) -> Vec<&str> {
    let mut fields: Vec<&str> = body["properties"]
        .as_object()
        .expect("properties")
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    fields
}

#[test]
fn the_interaction_and_notification_bodies_document_exactly_what_their_parsers_know() {
    let doc = doc();
    let schemas = &doc["components"]["schemas"];
    for (name, known) in [
        (
            "CreateInteractionBody",
            crate::api::body::fields_of::<CreateInteractionBody>(),
        ),
        (
            "NotificationBody",
            crate::api::body::fields_of::<NotificationBody>(),
        ),
    ] {
        let body = &schemas[name];
        let mut known = known.to_vec();
        known.sort_unstable();
        assert_eq!(documented_fields(body), known, "{name}");
        assert_eq!(body["additionalProperties"], false, "{name}");
    }
    assert_eq!(
        schemas["CreateInteractionBody"]["required"],
        json!(["interaction"])
    );
    assert_eq!(schemas["NotificationBody"]["required"], json!(["message"]));
    assert_eq!(
        schemas["NotificationBody"]["properties"]["message"]["maxLength"],
        MAX_NOTIFICATION_CHARS
    );
    // The interaction itself is open: fields this service does not act on are echoed.
    let interaction = &schemas["HumanInteraction"];
    assert_eq!(interaction["additionalProperties"], true);
    assert_eq!(
        interaction["required"],
        json!(["interaction_id", "question"])
    );
    assert_eq!(
        interaction["properties"]["interaction_id"]["maxLength"],
        MAX_INTERACTION_ID_CHARS
    );
}

#[test]
fn the_interaction_view_documents_every_key_it_serialises() {
    let doc = doc();
    let view = &doc["components"]["schemas"]["Interaction"];
    let mut required: Vec<&str> = view["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    required.sort_unstable();
    assert_eq!(
        documented_fields(view),
        required,
        "every key is always present"
    );
    let post = &doc["paths"]["/v1/interactions"]["post"]["responses"];
    assert_eq!(
        post["202"]["links"]["get"]["operationId"],
        "get_interaction"
    );
    let notify = &doc["paths"]["/v1/notifications"]["post"]["responses"];
    assert!(notify.get("502").is_some(), "Telegram may refuse");
    let events = &doc["paths"]["/v1/events"]["get"]["responses"]["200"]["content"];
    assert!(events.get("text/event-stream").is_some());
}

#[test]
fn a_nullable_field_is_written_as_one_schema() {
    let mut field = json!({"oneOf": [{"type": "null"}, {"type": "string", "enum": ["a"]}],
        "description": "d", "default": "a"});
    merge_nullable(&mut field);
    assert_eq!(
        field,
        json!({"type": ["string", "null"], "enum": ["a", null], "description": "d", "default": "a"})
    );
    let mut wrapped =
        json!({"oneOf": [{"type": "integer", "description": "x"}], "description": "d"});
    merge_nullable(&mut wrapped);
    assert_eq!(wrapped, json!({"type": "integer", "description": "d"}));
    let mut reference = json!({"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/X"}]});
    let before = reference.clone();
    merge_nullable(&mut reference);
    assert_eq!(reference, before, "a oneOf of a reference is left as it is");
}
