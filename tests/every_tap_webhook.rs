//! `tests/every_tap.rs` again, with the service in Telegram webhook mode: the fake Bot API
//! POSTs every tap to the service's webhook route (two at once where a test lets it).

#[path = "every_tap.rs"]
mod every_tap;
