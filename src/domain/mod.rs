//! The confirmation engine: pure code, no I/O, unit-tested.
//!
//! `python` is the Python-compatibility port: parameters seen as Python sees them, their
//! canonical text written straight from JSON, and Python's `str.format` over them;
//! `args_hash` is AI-Parrot's `compute_args_hash` and `briefing` its briefing, both on
//! that port; `question` is the request's state machine and its windows; `audit` is
//! the hash chain of the audit trail; `authority` is who may decide, as one
//! configuration says (compared across replicas); `text` makes what operators read show
//! every character that is there; `limits` is what one request may hold, the one place
//! every adapter and the configuration read the protocol's limits from; `outbox` is
//! where a webhook may go and how it is signed, which the configuration, the API and the
//! outbox's worker all follow; `rules` is the deterministic policy before the human
//! (`allow`, `ask`, `deny`), checked at load (not yet read from the configuration);
//! `grant` is what a human lets an agent do for an owner for a while (a scope such as
//! `tool:deploy`), checked before the confirmation; `execution` is what happened after
//! the yes (the agent's report of running the call, or `unknown`); `edit` is edit before
//! execute: a tool's argument schema and an operator's edit checked against it.

pub mod args_hash;
pub mod audit;
pub mod authority;
pub mod briefing;
pub mod edit;
pub mod execution;
pub mod grant;
pub mod ids;
pub mod interaction;
pub mod launch;
pub mod limits;
pub mod outbox;
pub mod python;
pub mod question;
pub mod rules;
pub mod shown;
pub mod text;
