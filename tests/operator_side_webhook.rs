//! `tests/operator_side.rs` again, with the service in Telegram webhook mode: the fake Bot
//! API POSTs every tap and reply to the service's webhook route instead of answering
//! `getUpdates`. The mode follows this binary's name (see `support::app::webhook_mode`).

#[path = "operator_side.rs"]
mod operator_side;
