//! The confirmation engine: pure code, no I/O, unit-tested.
//!
//! What each module holds is listed in docs/architecture.md ("Module notes"): the Python
//! port, the args hash and briefing on it, the request's state machine, the audit chain,
//! who may decide, what operators read, the protocol's limits, the outbox's rules, the
//! rules before the human, grants, run reports and edits, and MCP tool pins.

#![forbid(unsafe_code)]

pub mod args_hash;
pub mod audit;
pub mod authority;
pub mod away;
pub mod briefing;
pub mod edit;
pub mod grant;
pub mod ids;
pub mod interaction;
pub mod launch;
pub mod limits;
pub mod mcp_call;
pub mod on_call;
pub mod outage;
pub mod outbox;
pub mod python;
pub mod question;
pub mod rules;
pub mod run_report;
pub mod schema;
pub mod shown;
pub mod sla;
pub mod stats;
pub mod text;
pub mod tool_pin;
