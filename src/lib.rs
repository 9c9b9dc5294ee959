//! hitl-telegram: AI agents ask a human on Telegram before they run a side-effecting
//! tool call.
//!
//! Imports go down only, by layer: a module may use any module of a layer below its own,
//! and no module of its own layer but itself (`a <- b` reads "`a` is imported by `b`"):
//!
//! ```text
//! domain <- storage <- support <- service <- adapters <- app <- program
//!
//! support:  client, config, metrics, release, scheduler, telemetry
//! adapters: api, telegram, mcp, gateway, hook, redis_bridge, cli, outbox, audit_head
//! ```
//!
//! What each layer holds, and the two exceptions between adapters with their reasons:
//! docs/architecture.md ("Layer rules"); a unit test (`src/layers.rs`) holds them.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit_head;
pub mod cli;
pub mod client;
pub mod config;
pub mod gateway;
pub mod hook;
pub use hitl_domain as domain;
#[cfg(test)]
mod layers;
pub mod mcp;
pub mod metrics;
pub mod outbox;
pub mod program;
pub mod redis_bridge;
pub mod release;
pub mod scheduler;
pub mod service;
pub mod storage;
pub mod telegram;
pub mod telemetry;

pub use app::Application;
