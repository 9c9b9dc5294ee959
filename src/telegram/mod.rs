//! The Telegram adapter: renders questions, sends and edits messages through teloxide,
//! and turns button taps from long polling into [`crate::service::Tap`]s.

pub mod client;
pub mod commands;
pub mod polling;
pub mod ratelimit;
pub mod render;
pub mod updates;

pub use client::TelegramMessenger;
