//! hitl-telegram: AI agents ask a human on Telegram before they run a side-effecting
//! tool call.
//!
//! The crate is a pure domain core ([`domain`]) with adapters around it: the agents'
//! HTTP API ([`api`]), Telegram ([`telegram`]), storage ([`storage`]). [`service`] is the
//! one pipeline every question goes through; [`app`] wires everything together.
//!
//! # Layers
//!
//! Imports go down only: a module may use any module of a layer below its own, and no
//! module of its own layer but itself (`a <- b` reads "`a` is imported by `b`"):
//!
//! ```text
//! domain <- storage <- support <- service <- adapters <- app <- program
//!
//! support:  client, config, metrics, scheduler, telemetry
//! adapters: api, telegram, mcp, claude_hook, redis_bridge, cli, outbox, audit_head
//! ```
//!
//! - [`domain`]: the confirmation engine, pure code that imports nothing else of the
//!   crate; with it the protocol's limits ([`domain::limits`]), which every adapter and
//!   the configuration read, so none takes a limit from another's handler code, and the
//!   outbox's rules ([`domain::outbox`]: where a webhook may go, how it is signed), which
//!   the configuration checks prefixes with, the API a request's URL, and the outbox's
//!   worker signs with.
//! - [`storage`]: persistence by role ([`storage::Store`] is the union of the roles),
//!   speaking domain types. It takes plain values (a database URL, a backlog bound),
//!   never the configuration. The service holds the union, since its pipeline uses every
//!   role; each part around it is handed the one role it uses.
//! - Support, what the service and the adapters stand on, each needing at most storage
//!   and the domain: [`config`], the checked settings, above storage because it checks
//!   `database.url` against what the backends accept (and takes the webhook backlog's
//!   default from storage); [`metrics`], whose gauges are read from storage at scrape
//!   time; [`scheduler`], the deadlines; [`telemetry`], logging and how errors read in it;
//!   [`client`], the one client of our own `/v1` API that the agent-side adapters (`ask`,
//!   the Claude Code hook, the stdio MCP server) share.
//! - [`service`]: the one pipeline. It sees no Telegram, HTTP or Redis type: what an
//!   adapter reads from its world (a tap's [`service::Button`], an operator's
//!   [`service::Command`]) is the service's type, which the adapter parses into.
//! - Adapters, each one outside world turned into service calls or fed from them: the
//!   agents' HTTP API ([`api`]), Telegram ([`telegram`]), the MCP server ([`mcp`]), the
//!   Claude Code hook ([`claude_hook`]), the Redis bridge ([`redis_bridge`]), the command
//!   line ([`cli`]), the outbox of signed webhooks to agents ([`outbox`]) and the audit head in the log
//!   ([`audit_head`]). They do not import each other, except:
//!   - the agents' HTTP server hosts two other adapters' routes, `/mcp` ([`mcp`]) and
//!     Telegram's webhook route ([`telegram::webhook`]): they answer in its one error
//!     format (`api::error`) and are counted in its connection pool (`api::serve`), and
//!     `/mcp` checks an agent's bearer token as the API does (`api::extract`);
//!   - [`outbox`] sends the record as the API returns it (`api::record`), one
//!     serialisation for both, so a webhook and a `GET` never differ.
//! - [`app`] wires it all; above it, [`program`] holds what each command of the binary
//!   does, and `main.rs` (a crate of its own) parses arguments and calls it.
//!
//! A unit test (`src/layers.rs`) holds this: it reads every file under `src/` and names,
//! by file and line, each `crate::` path, `use crate::{…}` group member and `super::`
//! chain that runs against these directions.
#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod audit_head;
pub mod claude_hook;
pub mod cli;
pub mod client;
pub mod config;
pub mod domain;
#[cfg(test)]
mod layers;
pub mod mcp;
pub mod metrics;
pub mod outbox;
pub mod program;
pub mod redis_bridge;
pub mod scheduler;
pub mod service;
pub mod storage;
pub mod telegram;
pub mod telemetry;

pub use app::Application;
