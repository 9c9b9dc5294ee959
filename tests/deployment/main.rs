//! Deploying and running the service, one test executable (`cargo test --test
//! deployment`): the project's docker-compose.yml run for real (`compose::`, which
//! `scripts/compose-check` runs), the Debian package in a fresh Debian (`package::`,
//! which `scripts/package-check` runs), several replicas on one PostgreSQL database,
//! one version for every part of a release, and the documentation holding together.

#[path = "../support/mod.rs"]
mod support;

/// Every service these tests start polls Telegram unless a test says otherwise (see
/// `support::app::webhook_mode`).
const TELEGRAM_MODE: support::app::ModeRule = support::app::ModeRule::Polling;

mod compose;
mod docs;
mod package;
mod release;
mod replicas;
