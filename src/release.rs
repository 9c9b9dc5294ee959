//! What this binary is: its version (the crate's, shared with the Python package and the
//! image, CHANGELOG.md) and the commit it was built from (`build.rs`). `--version`,
//! `/healthz` and the audit trail's `service_started` event report both, so a deployed
//! service can be matched to its changelog entry and its source.

/// The release, as semantic versioning numbers it (Cargo.toml's `version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the binary was built from, in hex (git's 12 digits; `HITL_BUILD_COMMIT`
/// may give 7 to 40), or `unknown` when it was built outside a git checkout without it.
pub const COMMIT: &str = env!("HITL_COMMIT");

/// `--version`'s line after the program's name: `1.0.0 (commit 0123456789ab)`.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HITL_COMMIT"),
    ")"
);
