//! The console as part of Telegram: opened inside a Telegram client (Telegram's real
//! `telegram-web-app.js`, the client's bridge recording what the script tells it, the
//! client's taps sent back as its events), it wears the client's light or dark theme, its
//! primary action is the Main Button and "back" the Back Button, a decision is felt as a
//! haptic and closing with something unsent asks first; in any browser, every time is in
//! the viewer's own zone, the deadline counts down, an edit shows what it changes, and
//! the list is grouped by route. The screenshots the operator's guide shows are taken
//! here (`console-light.png`, `console-dark.png` in Cargo's test temp dir).

use std::time::Duration;

use super::console::{PAGE_WAIT, console_url, the_pending_question};
use crate::support::app::*;
use crate::support::browser::{Browser, Page, telegram_script};
use crate::support::console::*;
use hitl_telegram::domain::launch;
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The theme Telegram's iOS client passes in its light mode.
fn light() -> Value {
    json!({
        "bg_color": "#ffffff", "text_color": "#000000", "hint_color": "#707579",
        "link_color": "#3390ec", "button_color": "#3390ec", "button_text_color": "#ffffff",
        "secondary_bg_color": "#efeff4", "header_bg_color": "#f8f8f8",
        "accent_text_color": "#3390ec", "section_bg_color": "#ffffff",
        "section_header_text_color": "#6d6d72", "subtitle_text_color": "#707579",
        "destructive_text_color": "#e53935",
    })
}

/// The theme Telegram's iOS client passes in its dark mode.
fn dark() -> Value {
    json!({
        "bg_color": "#000000", "text_color": "#ffffff", "hint_color": "#98989e",
        "link_color": "#3e88f7", "button_color": "#3e88f7", "button_text_color": "#ffffff",
        "secondary_bg_color": "#1c1c1d", "header_bg_color": "#1a1a1a",
        "accent_text_color": "#3e88f7", "section_bg_color": "#2c2c2e",
        "section_header_text_color": "#8d8e93", "subtitle_text_color": "#98989e",
        "destructive_text_color": "#eb5545",
    })
}

/// `#rrggbb` as the browser computes it: `rgb(r, g, b)`.
fn rgb(hex: &Value) -> Value {
    let n = u32::from_str_radix(hex.as_str().unwrap().trim_start_matches('#'), 16).unwrap();
    json!(format!("rgb({}, {}, {})", n >> 16, (n >> 8) & 255, n & 255))
}

/// The console as Telegram's iOS client opens it for `user`: the launch data, the
/// client's version and platform, and its `theme`, in the URL's fragment.
fn telegram_url(
    app: &TestApp,
    (user_id, name): (u64, &str),
    question: &str,
    theme: &Value,
) -> String {
    let user =
        json!({"id": user_id, "first_name": name, "username": name.to_lowercase()}).to_string();
    let auth = unix_now().to_string();
    let data = launch::signed(
        &[
            ("user", user.as_str()),
            ("auth_date", auth.as_str()),
            ("start_param", question),
        ],
        app.telegram.token(),
    );
    let fragment: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("tgWebAppData", &data)
        .append_pair("tgWebAppVersion", "8.0")
        .append_pair("tgWebAppPlatform", "ios")
        .append_pair("tgWebAppThemeParams", &theme.to_string())
        .finish();
    format!("{}#{fragment}", app.url("/app"))
}

/// A page inside a Telegram client, or `None` (the test skips) without a browser or
/// Telegram's script.
async fn in_telegram() -> Option<(Browser, Page)> {
    let browser = Browser::launch().await?;
    let script = telegram_script()?;
    let page = browser.page().await;
    page.as_telegram_client(&script).await;
    Some((browser, page))
}

/// Opens `url` and waits until the page has taken Telegram's script on (it tells the
/// client it is ready).
async fn open_in_telegram(page: &Page, url: &str) {
    page.goto(url).await;
    page.wait_for_telegram_event("web_app_ready", PAGE_WAIT, |e| !e.is_null())
        .await;
}

fn visible(b: &Value) -> bool {
    b["is_visible"] == true
}

#[tokio::test]
async fn in_telegram_the_main_button_approves_with_progress_and_a_haptic_and_back_returns() {
    let Some((_browser, page)) = in_telegram().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let blocked =
        app.create_blocking(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 5}}));
    app.telegram.wait_for_message_in(OPS_CHAT, 1).await;
    let id = the_pending_question(&app, ALICE, "Alice").await;

    open_in_telegram(&page, &telegram_url(&app, (ALICE, "Alice"), &id, &light())).await;
    let main = page
        .wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, visible)
        .await;
    assert_eq!(main["text"], "✅ Approve", "{main}");
    assert_eq!(main["is_active"], true, "{main}");
    page.wait_for_telegram_event("web_app_setup_back_button", PAGE_WAIT, visible)
        .await;
    // The page's own Approve and back link step aside for Telegram's.
    for twin in ["#approve", ".back"] {
        let hidden = format!("document.querySelector('{twin}').offsetParent === null");
        assert_eq!(page.eval(&hidden).await, true, "{twin} still shows");
    }

    // Back: the list, where there is nothing to approve and nowhere further back.
    page.telegram_sends("back_button_pressed").await;
    let card = format!("[data-id=\"{id}\"] button.open");
    page.wait_for(&card, PAGE_WAIT).await;
    page.wait_for_telegram_event("web_app_setup_back_button", PAGE_WAIT, |b| !visible(b))
        .await;
    page.wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, |b| !visible(b))
        .await;

    // The question again, approved with the Main Button.
    page.click(&card).await;
    page.wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, visible)
        .await;
    page.telegram_sends("main_button_pressed").await;
    page.wait_for("#decided", PAGE_WAIT).await;
    let done = page.text("#decided").await;
    assert!(done.contains("approved by Alice"), "{done}");
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
    assert_eq!(record["decided_by"]["id"], ALICE);

    let events = page.telegram_events().await;
    // While it was sent, the button showed its progress and took no second tap.
    assert!(
        events
            .iter()
            .any(|(kind, b)| kind == "web_app_setup_main_button"
                && b["is_progress_visible"] == true
                && b["is_active"] == false),
        "{events:?}"
    );
    assert!(
        events.contains(&(
            "web_app_trigger_haptic_feedback".to_owned(),
            json!({"type": "notification", "notification_type": "success"})
        )),
        "{events:?}"
    );
    assert!(
        !visible(&page.last_telegram_event("web_app_setup_main_button").await),
        "nothing left to approve"
    );
}

#[tokio::test]
async fn in_telegram_an_edit_shows_each_change_as_the_chat_will_and_the_main_button_approves_it() {
    let Some((_browser, page)) = in_telegram().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let blocked = app.create_blocking(json!({
        "tool": "transfer", "owner_id": "emp-1",
        "params": {"amount": 1200.5, "to": "ACME GmbH"},
        "allow_edit": true,
        "args_schema": {"type": "object", "properties": {
            "amount": {"type": "number", "maximum": 5000}, "to": {"type": "string"}}},
    }));
    let message = app
        .telegram
        .wait_for_message_in(OPS_CHAT, 1)
        .await
        .remove(0);
    let id = the_pending_question(&app, ALICE, "Alice").await;
    open_in_telegram(&page, &telegram_url(&app, (ALICE, "Alice"), &id, &light())).await;
    page.wait_for("#edit", PAGE_WAIT).await;
    assert!(page.text("#changes").await.contains("No change yet"));

    // A reason typed and not sent: closing asks first; cleared, it does not.
    let closing = "web_app_setup_closing_behavior";
    page.type_into("#reason", "not today").await;
    page.wait_for_telegram_event(closing, PAGE_WAIT, |c| c["need_confirmation"] == true)
        .await;
    page.eval("(() => { const r = document.querySelector('#reason'); r.value = ''; r.dispatchEvent(new Event('input')); })()")
        .await;
    page.wait_for_telegram_event(closing, PAGE_WAIT, |c| c["need_confirmation"] == false)
        .await;

    // An edit the schema refuses: the Main Button sends it, the error shows beside its
    // field and is felt; nothing is decided.
    page.type_into("#edit-amount", "9000").await;
    page.wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, |b| {
        b["text"] == "✅ Approve with these values"
    })
    .await;
    page.telegram_sends("main_button_pressed").await;
    page.wait_for("[data-error-for=amount]:not(:empty)", PAGE_WAIT)
        .await;
    page.wait_for_telegram_event("web_app_trigger_haptic_feedback", PAGE_WAIT, |h| {
        h == &json!({"type": "notification", "notification_type": "error"})
    })
    .await;
    assert!(!blocked.is_finished(), "nothing was decided");

    // An edit: its line, the Main Button's new words, and closing asks first.
    page.type_into("#edit-amount", "1000").await;
    page.wait_for("#changes .change", PAGE_WAIT).await;
    assert_eq!(page.text("#changes .change").await, "amount 1200.5 → 1000");
    let main = page
        .wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, |b| {
            b["text"] == "✅ Approve with these values"
        })
        .await;
    assert!(visible(&main), "{main}");
    page.wait_for_telegram_event(closing, PAGE_WAIT, |c| c["need_confirmation"] == true)
        .await;

    page.telegram_sends("main_button_pressed").await;
    page.wait_for("#decided", PAGE_WAIT).await;
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["parameters"]["amount"], 1000);
    page.wait_for_telegram_event(closing, PAGE_WAIT, |c| c["need_confirmation"] == false)
        .await;
    // The chat says the change in the words the page showed before the approve.
    let shown = app
        .telegram
        .wait_for_message(OPS_CHAT, message.message_id, "the edit in the chat", |m| {
            !m.has_buttons()
        })
        .await;
    assert!(
        shown.visible_text.contains("amount 1200.5 → 1000"),
        "{}",
        shown.visible_text
    );
}

/// The page's colours against `theme`: the page, its text, a card, a button, a
/// destructive one and a link are each the theme's own.
async fn wears(page: &Page, name: &str, theme: &Value) {
    let scheme = page.eval("document.documentElement.dataset.scheme").await;
    assert_eq!(scheme, name);
    for (selector, property, key) in [
        ("body", "backgroundColor", "secondary_bg_color"),
        ("body", "color", "text_color"),
        (".card", "backgroundColor", "section_bg_color"),
        ("#approve_window", "backgroundColor", "button_color"),
        ("#approve_window", "color", "button_text_color"),
        ("#deny", "color", "destructive_text_color"),
        ("details summary", "color", "link_color"),
    ] {
        let js = format!("getComputedStyle(document.querySelector('{selector}')).{property}");
        assert_eq!(
            page.eval(&js).await,
            rgb(&theme[key]),
            "{name}: {selector} {property} is the theme's {key}"
        );
    }
}

#[tokio::test]
async fn in_telegram_the_page_wears_the_clients_light_or_dark_theme_on_a_phone() {
    if telegram_script().is_none() {
        return;
    }
    let app = TestApp::spawn_with_settings(with_console).await;
    let (record, _) = app
        .ask_suspended(json!({
            "tool": "transfer", "owner_id": "emp-1",
            "params": {"amount": 1200.5, "to": "ACME GmbH", "memo": "invoice 2026-118"},
            "template": "Send {amount} EUR to {to}?",
            "window_seconds": 600,
            "timeout_seconds": 900,
            "allow_edit": true,
            "args_schema": {"type": "object", "properties": {
                "amount": {"type": "number", "maximum": 5000}, "to": {"type": "string"},
                "memo": {"type": "string"}}},
        }))
        .await;
    let id = record["id"].as_str().unwrap();
    for (name, theme) in [("light", light()), ("dark", dark())] {
        // A client of its own for each: Telegram keeps a session's theme.
        let Some((_browser, page)) = in_telegram().await else {
            return;
        };
        // An operator in Berlin, for the pictures.
        page.set_time_zone("Europe/Berlin").await;
        open_in_telegram(&page, &telegram_url(&app, (ALICE, "Alice"), id, &theme)).await;
        page.wait_for("#approve_window", PAGE_WAIT).await;
        wears(&page, name, &theme).await;
        // The screenshots the operator's guide shows: the question in the light theme,
        // an edit under way in the dark one.
        if name == "dark" {
            page.type_into("#edit-amount", "1000").await;
            page.wait_for("#changes .change", PAGE_WAIT).await;
            page.eval("document.querySelector('#edit').scrollIntoView()")
                .await;
        }
        let shot =
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("console-{name}.png"));
        page.screenshot(&shot).await;
        let png = std::fs::read(&shot).expect("a screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        // A phone's width: nothing runs off the side.
        let wide = "document.documentElement.scrollWidth <= window.innerWidth";
        assert_eq!(page.eval(wide).await, true, "{name}");
        if name == "light" {
            // The user turns on Telegram's night mode with the console open: the client
            // sends the new theme, and the page follows.
            page.telegram_sends_with("theme_changed", &json!({"theme_params": dark()}))
                .await;
            page.wait_for_telegram_event("web_app_setup_main_button", PAGE_WAIT, |b| {
                b["color"] == dark()["button_color"]
            })
            .await;
            wears(&page, "dark", &dark()).await;
        }
    }
}

#[tokio::test]
async fn in_a_plain_browser_where_telegrams_script_loads_the_page_keeps_its_own_buttons() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let Some(script) = telegram_script() else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let blocked =
        app.create_blocking(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 7}}));
    app.telegram.wait_for_message_in(OPS_CHAT, 1).await;
    let id = the_pending_question(&app, ALICE, "Alice").await;
    // A `console-link` opened on a desktop that reaches telegram.org: Telegram's script
    // loads, but no Telegram client is around the page to show a Main Button.
    let page = browser.page().await;
    page.serve_telegram_script(&script).await;
    page.goto(&console_url(&app, ALICE, "Alice", Some(&id)).replace("android", "web"))
        .await;
    page.wait_for("#approve", PAGE_WAIT).await;
    let loaded = "window.Telegram !== undefined && window.Telegram.WebApp !== undefined";
    let deadline = tokio::time::Instant::now() + PAGE_WAIT;
    while page.eval(loaded).await != true {
        assert!(
            tokio::time::Instant::now() < deadline,
            "Telegram's script never loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let native = "document.body.classList.contains('native')";
    assert_eq!(page.eval(native).await, false);
    page.click("#approve").await;
    page.wait_for("#decided", PAGE_WAIT).await;
    let (s, record) = blocked.await.unwrap();
    assert_eq!(s, StatusCode::OK, "{record}");
    assert_eq!(record["status"], "confirmed");
}

#[tokio::test]
async fn in_telegram_the_page_keeps_clear_of_the_notch_and_home_bar_and_fills_the_stable_viewport()
{
    let Some((_browser, page)) = in_telegram().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let (record, _) = app
        .ask_suspended(json!({"tool": "deploy", "owner_id": "emp-1", "params": {"v": 6}}))
        .await;
    let id = record["id"].as_str().unwrap();
    open_in_telegram(&page, &telegram_url(&app, (ALICE, "Alice"), id, &light())).await;
    page.wait_for("#decision", PAGE_WAIT).await;
    let body = |property: &str| format!("getComputedStyle(document.body).{property}");
    assert_eq!(page.eval(&body("paddingTop")).await, "12px");
    // Full screen on an iPhone, as its client reports it: the notch above and the home
    // bar below the page, Telegram's own header over its top, 700 pixels that stay.
    for (event, data) in [
        (
            "safe_area_changed",
            json!({"top": 47, "bottom": 34, "left": 0, "right": 0}),
        ),
        (
            "content_safe_area_changed",
            json!({"top": 46, "bottom": 0, "left": 0, "right": 0}),
        ),
        (
            "viewport_changed",
            json!({"height": 700, "is_state_stable": true, "is_expanded": true}),
        ),
    ] {
        page.telegram_sends_with(event, &data).await;
    }
    assert_eq!(
        page.eval(&body("paddingTop")).await,
        "105px",
        "12 + 47 + 46"
    );
    assert_eq!(page.eval(&body("paddingBottom")).await, "50px", "16 + 34");
    assert_eq!(page.eval(&body("minHeight")).await, "700px");
}

/// Every date and time the page shows, as `[date time, what follows it]`.
const TIMES_SHOWN: &str = r"[...document.body.innerText.matchAll(
    /(\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d)?(?:\.\d+)?)(Z| [A-Za-z]+[+-]?[\d:]*)?/g)]
    .map((m) => [m[1], m[2] || ''])";

#[tokio::test]
async fn every_time_on_the_page_is_in_the_viewers_zone_and_the_deadline_counts_down() {
    let Some(browser) = Browser::launch().await else {
        return;
    };
    let app = TestApp::spawn_with_settings(with_console).await;
    let ask = |tool: &str, route: &str, timeout: u32| {
        json!({"tool": tool, "owner_id": "emp-1", "params": {}, "route": route,
               "timeout_seconds": timeout})
    };
    let bob = as_user(&app, BOB, "Bob");
    // One ended (for the list's "Recently ended"), three waiting on two routes.
    let (ended, _) = app.ask_suspended(ask("restart", "other", 300)).await;
    let ended = ended["id"].as_str().unwrap().to_owned();
    let (_, shown) = console_get(&app, &format!("/app/api/questions/{ended}"), Some(&bob)).await;
    let hash = shown["question"]["args_hash"].clone();
    let (s, r) = decide(
        &app,
        &ended,
        &bob,
        json!({"action": "approve", "args_hash": hash}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{r}");
    let (later, _) = app.ask_suspended(ask("deploy", "ops", 600)).await;
    let (other, _) = app.ask_suspended(ask("migrate", "other", 300)).await;
    let (soonest, _) = app.ask_suspended(ask("rollback", "ops", 50)).await;
    let ids = [&soonest, &later, &other].map(|r| r["id"].as_str().unwrap().to_owned());

    let page = browser.page().await;
    page.set_time_zone("Asia/Kolkata").await;
    page.goto(&console_url(&app, BOB, "Bob", None)).await;
    page.wait_for("[data-route-group=other]", PAGE_WAIT).await;
    // Grouped by route, each with its count; the soonest deadline first.
    let order = page
        .eval("[...document.querySelectorAll('[data-route-group], #main > [data-id]')].map((e) => e.dataset.routeGroup || e.dataset.id)")
        .await;
    assert_eq!(
        order,
        json!(["ops", ids[0], ids[1], "other", ids[2]]),
        "{order}"
    );
    // (Headings are upper case on the page, which innerText reports.)
    let heading = async |route: &str| {
        page.text(&format!("[data-route-group={route}]"))
            .await
            .to_lowercase()
    };
    assert_eq!(heading("ops").await, "route ops · 2 waiting");
    assert_eq!(heading("other").await, "route other · 1 waiting");
    let who = page.text("#who").await;
    // (ICU may name it by its older spelling.)
    assert!(
        who.contains("Asia/Kolkata") || who.contains("Asia/Calcutta"),
        "{who}"
    );

    let in_zone = |shown: Value| {
        let times = shown.as_array().cloned().unwrap_or_default();
        assert!(!times.is_empty(), "times are shown");
        for t in &times {
            assert_eq!(
                t[1], " GMT+5:30",
                "every time in the viewer's zone: {times:?}"
            );
        }
    };
    in_zone(page.eval(TIMES_SHOWN).await);

    // The soonest question, whole: its deadline in the zone, counting down.
    let card = format!("[data-id=\"{}\"] button.open", ids[0]);
    page.click(&card).await;
    page.wait_for("#hash", PAGE_WAIT).await;
    in_zone(page.eval(TIMES_SHOWN).await);
    let (_, detail) =
        console_get(&app, &format!("/app/api/questions/{}", ids[0]), Some(&bob)).await;
    let utc = detail["question"]["expires_at"].as_str().unwrap();
    let local = kolkata(utc);
    let body = page.text("body").await;
    assert!(body.contains(&local), "{utc} is {local} in Kolkata: {body}");
    let left = |text: String| -> u64 {
        let n = text
            .trim_start_matches("expires in ")
            .trim_end_matches(" s");
        n.parse().unwrap_or_else(|_| panic!("seconds left: {text}"))
    };
    let first = left(page.text(".countdown").await);
    assert!(first <= 50, "{first}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let then = left(page.text(".countdown").await);
    assert!(then < first, "it counts down: {first} then {then}");
    // The args hash, folded under the parameters; one tap shows it whole.
    assert_eq!(
        page.eval("document.querySelector('#hash').open").await,
        false
    );
    page.click("#hash summary").await;
    assert_eq!(
        page.text("#args-hash").await,
        detail["question"]["args_hash"].as_str().unwrap()
    );
    // (Labels are upper case on the page, which innerText reports.)
    assert!(body.to_lowercase().contains("status\nwaiting"), "{body}");
}

/// `2026-12-06 03:02:44 UTC` as Asia/Kolkata (UTC+5:30, no daylight saving) writes it.
fn kolkata(utc: &str) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let at = time::PrimitiveDateTime::parse(utc.trim_end_matches(" UTC"), format)
        .unwrap_or_else(|e| panic!("{utc}: {e}"));
    let local = at + time::Duration::minutes(330);
    format!("{} GMT+5:30", local.format(format).unwrap())
}
