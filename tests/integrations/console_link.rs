//! `console-link`: a signed link to open the operator's console in a browser, taken by
//! the console as the approver it names, for the minutes asked, and refused to anyone
//! the console would turn away.

use super::cli::BIN;
use crate::support::app::*;
use tokio::process::Command;

/// The console on, as `[mini_app]` in a configuration file.
const CONSOLE: &str =
    "\n[mini_app]\nenabled = true\npublic_url = \"http://127.0.0.1:9\"\nmax_age_seconds = 600\n";

/// `console-link` with `args`, against the test configuration of `app` (plus `extra`)
/// written to a file in `dir`.
async fn console_link(
    app: &TestApp,
    dir: &std::path::Path,
    extra: &str,
    args: &[&str],
) -> std::process::Output {
    let path = dir.join("config.toml");
    let toml = settings_toml(&app.telegram.api_url(), &app.db_url)
        .replace("{CALLBACK_PREFIX}", DEFAULT_CALLBACK_PREFIX)
        + extra;
    std::fs::write(&path, toml).expect("write config");
    Command::new(BIN)
        .args(["--config", path.to_str().unwrap(), "console-link"])
        .args(args)
        .envs(test_env())
        .output()
        .await
        .expect("console-link")
}

#[tokio::test]
async fn console_link_prints_a_link_the_console_takes_as_that_approver_for_the_minutes_asked() {
    use hitl_telegram::domain::launch;
    let app = TestApp::spawn_with_settings(|toml| toml + CONSOLE).await;
    let dir = tempfile::tempdir().unwrap();
    let alice = ALICE.to_string();
    let out = console_link(
        &app,
        dir.path(),
        CONSOLE,
        &["--user", &alice, "--minutes", "2", "--url", &app.base],
    )
    .await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("until") && err.contains(" UTC"), "{err}");
    let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (page, fragment) = link.split_once('#').expect("a fragment");
    assert_eq!(page, app.url("/app"));
    let data = url::form_urlencoded::parse(fragment.as_bytes())
        .find(|(k, _)| k == "tgWebAppData")
        .map(|(_, v)| v.into_owned())
        .expect("tgWebAppData in the fragment");

    // The service takes it, as Alice.
    let r = app
        .client
        .get(app.url("/app/api/questions"))
        .header("Authorization", format!("tma {data}"))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(r).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    let checked = launch::check(
        &data,
        BOT_TOKEN,
        hitl_telegram::service::now(),
        std::time::Duration::from_secs(600),
    )
    .expect("genuine");
    assert_eq!(checked.user.id, ALICE);
    assert_eq!(checked.user.first_name, "alice", "her name in [people]");
    // For two minutes, not the ten the service would allow launch data.
    let later = |s: u64| hitl_telegram::service::now() + std::time::Duration::from_secs(s);
    let max_age = std::time::Duration::from_secs(600);
    assert!(launch::check(&data, BOT_TOKEN, later(100), max_age).is_ok());
    assert!(matches!(
        launch::check(&data, BOT_TOKEN, later(125), max_age),
        Err(launch::LaunchError::Stale { .. })
    ));
}

#[tokio::test]
async fn console_link_refuses_a_stranger_a_console_that_is_off_and_minutes_past_the_freshness() {
    let app = TestApp::spawn().await;
    let dir = tempfile::tempdir().unwrap();
    let mallory = MALLORY.to_string();
    let alice = ALICE.to_string();
    for (extra, args, why) in [
        (CONSOLE, vec!["--user", &mallory], "approves no route"),
        ("", vec!["--user", &alice], "the console is off"),
        (
            CONSOLE,
            vec!["--user", &alice, "--minutes", "11"],
            "--minutes must be from 1 to 10",
        ),
        (
            CONSOLE,
            vec!["--user", &alice, "--minutes", "0"],
            "--minutes",
        ),
    ] {
        let out = console_link(&app, dir.path(), extra, &args).await;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: no link");
        assert!(!err.contains(BOT_TOKEN), "{err}");
    }
}
