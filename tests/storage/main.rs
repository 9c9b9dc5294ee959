//! Storage on its own, one test executable (`cargo test --test storage`): the stores
//! on both backends (SQLite and PostgreSQL), their grants among them, schema migrations
//! and `migrate-to`, and properties of the parsers and renderers over generated cases.

#[path = "../support/mod.rs"]
mod support;

/// Every service these tests start polls Telegram (see `support::app::webhook_mode`).
const TELEGRAM_MODE: support::app::ModeRule = support::app::ModeRule::Polling;

mod away;
mod chat_rules;
mod ended;
mod grants;
mod mcp_calls;
mod migrate_to_postgres;
mod migration;
mod outages;
mod properties;
mod runs;
mod stores;
mod tool_pins;
