//! hitl-telegram: AI agents ask a human on Telegram before they run a side-effecting
//! tool call.
//!
//! The crate is a pure domain core ([`domain`]) with adapters around it: the agents'
//! HTTP API ([`api`]), Telegram ([`telegram`]), storage ([`storage`]). [`service`] is the
//! one pipeline every question goes through; [`app`] wires everything together.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit_head;
pub mod claude_hook;
pub mod cli;
pub mod client;
pub mod config;
pub mod domain;
pub mod mcp;
pub mod metrics;
pub mod program;
pub mod redis_bridge;
pub mod scheduler;
pub mod service;
pub mod storage;
pub mod telegram;
pub mod telemetry;
pub mod webhooks;

pub use app::Application;
