//! The operator's console as a test reaches it: the configuration that turns it on,
//! launch data signed as Telegram signs it, and its API called as a Telegram user.

#![allow(dead_code)] // each test executable compiles this module; not all use it

use crate::support::app::*;
use hitl_telegram::domain::launch;
use reqwest::StatusCode;
use serde_json::{Value, json};

pub fn with_console(toml: String) -> String {
    toml + "\n[mini_app]\nenabled = true\npublic_url = \"http://127.0.0.1:9\"\nmax_age_seconds = 600\n"
}

pub fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Launch data for `user_id`, signed with `token`, `age` seconds old.
pub fn launch_data(user_id: u64, name: &str, token: &str, age: i64) -> String {
    let user =
        json!({"id": user_id, "first_name": name, "username": name.to_lowercase()}).to_string();
    let auth = (unix_now() - age).to_string();
    launch::signed(
        &[
            ("user", &user),
            ("auth_date", &auth),
            ("chat_type", "private"),
        ],
        token,
    )
}

/// `GET path` with `Authorization: tma <data>` (no header with `None`).
pub async fn console_get(app: &TestApp, path: &str, data: Option<&str>) -> (StatusCode, Value) {
    let mut req = app.client.get(app.url(path));
    if let Some(d) = data {
        req = req.header("Authorization", format!("tma {d}"));
    }
    json_of(req.send().await.expect("console request")).await
}

pub fn as_user(app: &TestApp, user_id: u64, name: &str) -> String {
    launch_data(user_id, name, app.telegram.token(), 5)
}

/// `POST /app/api/questions/{id}/decision` as the user of `data`.
pub async fn decide(app: &TestApp, id: &str, data: &str, body: Value) -> (StatusCode, Value) {
    let r = app
        .client
        .post(app.url(&format!("/app/api/questions/{id}/decision")))
        .header("Authorization", format!("tma {data}"))
        .json(&body)
        .send()
        .await
        .expect("decision");
    json_of(r).await
}
