//! A route's on-call rota: a reminder mentions whoever is on call now, not every
//! approver; with nobody on call it falls back to all of them; every approver may still
//! decide either way.

use serde_json::json;

use crate::support::app::*;
use crate::support::interactions::tap;

/// The ops route (approvers Alice and Bob) reminding after 1 s, with `shift` as its rota.
fn with_rota(shift: String) -> impl FnOnce(String) -> String {
    move |toml| {
        toml.replacen(
            "forbid_self_approval = true\n",
            &format!(
                "forbid_self_approval = true\nremind_after = [\"1s\"]\n\
                 on_call_time_zone = \"Europe/Berlin\"\non_call = [{shift}]\n"
            ),
            1,
        )
    }
}

fn mentions(text: &str, user: u64) -> bool {
    text.contains(&format!("tg://user?id={user}"))
}

#[tokio::test]
async fn a_reminder_mentions_the_person_on_call_and_anyone_may_still_decide() {
    let all_week =
        format!("{{ person = {BOB}, days = [\"mon-sun\"], from = \"00:00\", to = \"24:00\" }}");
    let app = TestApp::spawn_with_settings(with_rota(all_week)).await;
    let (record, message_id) = app
        .ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let reminder = app.telegram.wait_for_message_in(OPS_CHAT, 2).await[1].clone();
    assert!(
        reminder.visible_text.contains("Still waiting"),
        "{}",
        reminder.visible_text
    );
    assert!(mentions(&reminder.text, BOB), "{}", reminder.text);
    assert!(
        !mentions(&reminder.text, ALICE),
        "Alice is off call: {}",
        reminder.text
    );

    // Off call is not off duty: Alice still decides.
    let question = app.telegram.message(OPS_CHAT, message_id);
    tap(&app, &question, "✅ Approve", alice()).await;
    app.wait_status(record["id"].as_str().unwrap(), "confirmed")
        .await;
}

#[tokio::test]
async fn with_nobody_on_call_a_reminder_mentions_every_approver() {
    // A shift on a day that is not today in Berlin (nor yesterday, for the night).
    let today = time::OffsetDateTime::now_utc().weekday();
    let other = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        [usize::from(today.next().next().next().number_days_from_monday())];
    let shift =
        format!("{{ person = {BOB}, days = [\"{other}\"], from = \"09:00\", to = \"10:00\" }}");
    let app = TestApp::spawn_with_settings(with_rota(shift)).await;
    app.ask_suspended(json!({"tool": "deploy", "params": {"env": "prod"}}))
        .await;
    let reminder = app.telegram.wait_for_message_in(OPS_CHAT, 2).await[1].clone();
    assert!(mentions(&reminder.text, ALICE), "{}", reminder.text);
    assert!(mentions(&reminder.text, BOB), "{}", reminder.text);
}
