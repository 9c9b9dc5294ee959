//! hitl-telegram: AI agents ask a human on Telegram before they run a side-effecting
//! tool call.
#![forbid(unsafe_code)]

pub mod domain;
