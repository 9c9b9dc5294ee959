//! The mode rule (`support::app::webhook_mode`) where it applies: a test under
//! `polling::` starts the service polling, one under `webhook::` in webhook mode, and a
//! thread or task that is not the test's own gets a panic rather than a guess.

use crate::support::app::webhook_mode;

/// Whether this copy of the file is mounted under `webhook::`, from the compiler's own
/// module path rather than the thread's name.
fn mounted_under_webhook() -> bool {
    module_path!().split("::").nth(1) == Some("webhook")
}

#[test]
fn a_test_gets_the_mode_of_the_module_it_is_mounted_in() {
    assert_eq!(
        webhook_mode(),
        mounted_under_webhook(),
        "{}",
        module_path!()
    );
}

#[test]
fn a_thread_the_test_spawned_has_no_mode() {
    let asked = std::thread::spawn(webhook_mode).join();
    assert!(
        asked.is_err(),
        "a thread of the test's own was given a mode"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_task_on_a_runtime_worker_thread_has_no_mode() {
    let asked = tokio::spawn(async { webhook_mode() }).await;
    assert!(
        asked.as_ref().is_err_and(|e| e.is_panic()),
        "a task on a worker thread was given a mode: {asked:?}"
    );
}
