//! Deterministic rules before the human (issue 35): `[[rules]]` that `allow` the safe
//! calls, `deny` the forbidden ones and `ask` for the rest, evaluated without I/O.
//!
//! What a rule matches on, so far: its tools patterns ([`Glob`], `*` and `?`) and its
//! `where` conditions on the call's `params` ([`Condition`]), each checked once when it
//! is read and then evaluated without I/O.

mod condition;
mod glob;

pub use condition::{Condition, ConditionError, Op, Path};
pub use glob::{Glob, GlobError};
