//! The real service end to end, against the fake Telegram Bot API: one test executable
//! (`cargo test --test service`).
//!
//! The service reads Telegram's updates in one of two modes, and what an operator does
//! in Telegram must work the same in both: the modules under `polling::` run the service
//! polling `getUpdates`, and those that matter in both modes are mounted a second time
//! under `webhook::`, where the fake Bot API POSTs every update to the service's webhook
//! route instead. The mode is where a test sits, nothing else: `TestApp::spawn` reads it
//! from the test's path (`support::app::webhook_mode`). `cargo test --test service
//! webhook::` runs one mode.

#[path = "../support/mod.rs"]
mod support;

/// Where the mode of the services these tests start comes from (see
/// `support::app::webhook_mode`): the test's module, `polling::` or `webhook::`.
const TELEGRAM_MODE: support::app::ModeRule = support::app::ModeRule::ByModule;

// `#[path = ""]`: the files of both modules are in this folder (not in `polling/` and
// `webhook/`), and the compiler names them `tests/service/FILE.rs` in its messages.

/// The service polls Telegram (`getUpdates`).
#[path = ""]
mod polling {
    // Mounted again under `webhook::`.
    mod audit;
    mod confirmations;
    mod events;
    mod every_tap;
    mod interactions;
    mod mcp_pins;
    mod mode;
    mod operator_commands;
    mod operator_side;
    mod races;
    mod restart;
    mod security;
    mod telegram_outage;
    mod webhooks;
    mod windows;

    // Polling only: what does not depend on the mode, or only polling does (`getUpdates`
    // offsets, chaos on `getUpdates`), and the real binary as a process.
    mod api;
    mod away;
    mod console;
    mod console_access;
    mod console_edit;
    mod console_telegram;
    mod crash;
    mod fair_chat;
    mod grant_terms;
    mod grants;
    mod hostile_clients;
    mod input_refusals;
    mod logs;
    mod mcp_calls;
    mod metrics;
    mod on_call;
    mod outage;
    mod outcomes;
    mod rule_spellings;
    mod rules;
    mod serve;
    mod sla;
    mod stats;
    mod suggested_rules;
    mod telegram_faults;
    mod what_you_see;
}

/// The service in Telegram webhook mode: the fake Bot API POSTs every tap and reply to
/// its webhook route. The same files as under `polling::`, run a second time.
#[path = ""]
#[allow(clippy::duplicate_mod)] // on purpose: each file runs once per mode
mod webhook {
    mod audit;
    mod confirmations;
    mod events;
    mod every_tap;
    mod interactions;
    mod mcp_pins;
    mod mode;
    mod operator_commands;
    mod operator_side;
    mod races;
    mod restart;
    mod security;
    mod telegram_outage;
    mod webhooks;
    mod windows;

    // Webhook mode only (each test there chooses its instances' modes itself).
    mod webhook_mode;
}

/// The mode rule outside `polling::` and `webhook::`: no mode, a panic rather than a
/// guess (`mode.rs` checks it inside them).
mod mode_rule {
    #[test]
    #[should_panic(expected = "the Telegram mode is the first segment of the test's path")]
    fn a_test_outside_polling_and_webhook_has_no_mode() {
        crate::support::app::webhook_mode();
    }
}
