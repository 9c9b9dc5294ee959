//! The Telegram adapter: renders questions, sends and edits messages through teloxide,
//! and turns button taps from long polling or the webhook route into
//! [`crate::service::Tap`]s; and, for `serve --demo` without an operator id, adopts the
//! demo's approver ([`adopt`]).

pub mod adopt;
pub mod client;
pub mod commands;
pub mod inbox;
pub mod polling;
pub mod ratelimit;
pub mod render;
pub mod startup;
mod stats;
pub mod updates;
pub mod webhook;

pub use client::TelegramMessenger;
