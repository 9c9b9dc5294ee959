//! The tools and clients around the service, one test executable (`cargo test --test
//! integrations`): the command line, the MCP server, the Claude Code hook, the Redis
//! bridge, the Python client, AI-Parrot (its wire format, and end to end with the real
//! package), and the API fuzzed from its OpenAPI document.

#[path = "../support/mod.rs"]
mod support;

/// Every service these tests start polls Telegram (see `support::app::webhook_mode`).
const TELEGRAM_MODE: support::app::ModeRule = support::app::ModeRule::Polling;

mod aiparrot;
mod aiparrot_e2e;
mod aiparrot_edit_e2e;
mod aiparrot_grants_e2e;
mod aiparrot_outcome_e2e;
mod aiparrot_redis_e2e;
mod claude_hook;
mod claude_hook_outcome;
mod cli;
mod cli_rules;
mod console_link;
mod exec;
mod gateway;
mod gateway_hosted;
mod gateway_upstream;
mod hook_install;
mod hooks;
mod listing;
mod mcp;
mod mcp_grants;
mod mcp_outcome;
mod openapi_fuzz;
mod python_client;
mod redis_bridge;
