//! The protocol's limits: what one request to the service may hold. One module, read by
//! every side that takes or makes such a request (the agents' HTTP API and its OpenAPI
//! document, the Telegram webhook route, the MCP server, the Claude Code hook, the
//! Redis bridge) and by the configuration's checks, so that none of them takes a limit
//! from another's handler code and none can drift from the others.
//!
//! The bounds of an interaction's own fields (AI-Parrot's `HumanInteraction`) live
//! beside their parser, in [`super::interaction`]; an identifier's bound on its type,
//! in [`super::ids`].

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Longest `?wait=` a long-poll may ask for.
pub const MAX_LONG_POLL_SECONDS: f64 = 60.0;

/// Upper bounds on a confirmation's free-text fields, so one request cannot flood an
/// operator's screen or the database.
pub const MAX_TEMPLATE_CHARS: usize = 4096;
pub const MAX_CONTEXT_CHARS: usize = 2048;
pub const MAX_ROUTE_CHARS: usize = 128;
pub const MAX_CALLBACK_URL_CHARS: usize = 2048;
/// Most object keys in `params`, counted at every depth.
pub const MAX_PARAM_KEYS: usize = 1000;
/// The longest confirmation window: a year. Longer standing approvals are a policy
/// decision nobody should take by typo.
pub const MAX_WINDOW_SECONDS: u64 = 366 * 24 * 3600;

/// Largest `args_schema` (a tool's JSON Schema, compact): pydantic's schemas of real
/// tools are a few KiB.
pub const MAX_ARGS_SCHEMA_BYTES: usize = 32 * 1024;

/// Longest `recipient` (a `[people]` name).
pub const MAX_RECIPIENT_CHARS: usize = 200;
/// Longest notification text; Telegram's own limit is 4096 after the bell we prepend.
pub const MAX_NOTIFICATION_CHARS: usize = 4000;

/// Most tools one MCP `tools/list` result sent to `POST /v1/mcp/servers/{server}/tools`
/// may hold.
pub const MAX_LISTED_TOOLS: usize = 1000;
