//! The OpenAPI schemas of the domain's types that API bodies carry as fields: each
//! type's bounds, taken from its own constants, so the document cannot drift from the
//! checks. Beside the types (not in the API) because a trait of another crate can only
//! be implemented for them here.

use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Schema, Type};
use utoipa::{PartialSchema, ToSchema};

use super::edit::ArgsSchema;
use super::grant::Scope;
use super::ids::{IdempotencyKey, OwnerId, ToolName};
use super::mcp_call::{
    Annotations, MAX_ANNOTATION_KEY_CHARS, MAX_ANNOTATIONS, MAX_SERVER_CHARS, ServerName,
};

/// The schema of a bounded domain name: `min` to `max` characters.
pub fn name_schema(max: usize, description: Option<&str>) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(max))
        .description(description)
        .into()
}

impl ToSchema for ToolName {}

impl PartialSchema for ToolName {
    fn schema() -> RefOr<Schema> {
        name_schema(
            ToolName::MAX_CHARS,
            Some(
                "The tool's name: not blank, no invisible or layout-changing characters \
                 (Unicode Cc, Cf, Zl, Zp, Co).",
            ),
        )
    }
}

impl ToSchema for OwnerId {}

impl PartialSchema for OwnerId {
    fn schema() -> RefOr<Schema> {
        name_schema(OwnerId::MAX_CHARS, None)
    }
}

impl ToSchema for IdempotencyKey {}

impl PartialSchema for IdempotencyKey {
    fn schema() -> RefOr<Schema> {
        name_schema(IdempotencyKey::MAX_CHARS, None)
    }
}

impl ToSchema for Scope {}

impl PartialSchema for Scope {
    fn schema() -> RefOr<Schema> {
        scope_schema().into()
    }
}

/// A grant's scope: `kind:name`, `kind:*` for every name of the kind.
pub fn scope_schema() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(r"^[a-z0-9_-]+:(\*|[^*\s]([^*]*[^*\s])?)$"))
        .min_length(Some(3))
        .max_length(Some(Scope::MAX_CHARS))
}

impl ToSchema for ServerName {}

impl PartialSchema for ServerName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(MAX_SERVER_CHARS))
            .pattern(Some(format!("^[A-Za-z0-9._-]{{1,{MAX_SERVER_CHARS}}}$")))
            .description(Some(
                "The MCP server (upstream) the call goes to, as an MCP gateway names it: shown \
                 to the approver, matched by the rules' `servers`, and part of what a window \
                 matches (an approval of a call to one server never passes the same call to \
                 another, or to none).",
            ))
            .into()
    }
}

impl ToSchema for Annotations {}

impl PartialSchema for Annotations {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .additional_properties(Some(AdditionalProperties::RefOr(
                ObjectBuilder::new().schema_type(Type::Boolean).into(),
            )))
            .max_properties(Some(MAX_ANNOTATIONS))
            .property_names(Some(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .max_length(Some(MAX_ANNOTATION_KEY_CHARS))
                    .build(),
            ))
            .description(Some(format!(
                "The tool's MCP annotations (`readOnlyHint`, `destructiveHint`, \
                 `idempotentHint`, `openWorldHint`, or others), each a boolean: at most \
                 {MAX_ANNOTATIONS}, names of 1 to {MAX_ANNOTATION_KEY_CHARS} characters \
                 without control characters. Shown to the approver and matched by the rules' \
                 `annotations`."
            )))
            .into()
    }
}

impl ToSchema for ArgsSchema {}

impl PartialSchema for ArgsSchema {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(format!(
                "The tool's argument schema as JSON Schema (pydantic's `model_json_schema()`), at \
                 most {} bytes; no `$ref` outside it (nothing is fetched). With `allow_edit` and \
                 the console (`[mini_app]`) on, an operator may edit the call there before \
                 approving it: the form is built from it and the edit checked against it. An \
                 invalid schema is refused (422).",
                crate::limits::MAX_ARGS_SCHEMA_BYTES
            )))
            .into()
    }
}
