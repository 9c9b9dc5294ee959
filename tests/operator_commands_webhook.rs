//! `tests/operator_commands.rs` again, with the service in Telegram webhook mode: the
//! commands arrive as updates POSTed to the webhook route. The mode follows this
//! binary's name (see `support::app::webhook_mode`).

#[path = "operator_commands.rs"]
mod operator_commands;
