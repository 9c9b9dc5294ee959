//! Test support shared by the integration test executables: the fake Telegram Bot API and
//! the real service spawned against it.

pub mod app;
pub mod browser;
pub mod console;
pub mod fake_telegram;
pub mod grants;
pub mod interactions;
pub mod parrot_driver;
pub mod postgres;
pub mod process;
pub mod questions;
pub mod tcp_proxy;
