//! Webhook mode: Telegram POSTs each update to a route on the service's own HTTP server
//! instead of the service long-polling `getUpdates`.
//!
//! Two parts: [`router`], the update route (mounted by `app.rs` only in webhook mode),
//! which checks Telegram's secret header and hands the update to the
//! [`super::inbox::Inbox`], as polling does, answering only once it is handled; and
//! [`register`], which
//! calls `setWebhook` at start until Telegram accepts it.
//!
//! The webhook is never deleted at shutdown: in a rolling deploy the old instance stops
//! after the new one has set the (same) webhook, and deleting it then would leave the new
//! instance deaf. teloxide's own webhook helpers delete it, which is why they are not used.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use teloxide::prelude::*;
use teloxide::types::Update;
use tokio_util::sync::CancellationToken;

use super::inbox::{Handled, Inbox, WEBHOOK_GRACE};
use crate::api::MAX_BODY_BYTES;
use crate::api::error::ApiError;
use crate::config::WebhookMode;
use crate::metrics::Metrics;
use crate::service::Service;

/// The header Telegram puts the `secret_token` of `setWebhook` in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

#[derive(Clone)]
struct RouteState {
    inbox: Arc<Inbox>,
    /// SHA-256 of the secret: comparing digests keeps the comparison constant-time
    /// whatever the length of what a caller sends.
    secret_sha256: [u8; 32],
}

/// The update route at `webhook.path`, to merge into the API router.
pub fn router(service: Arc<Service>, webhook: &WebhookMode) -> Router {
    let state = RouteState {
        inbox: Inbox::new(service, WEBHOOK_GRACE),
        secret_sha256: Sha256::digest(webhook.secret.expose_secret().as_bytes()).into(),
    };
    Router::new()
        .route(&webhook.path, post(receive))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// `POST {webhook_path}`: one update from Telegram. Answers once the update is handled
/// (in order with the others about its question), so a crash before that makes Telegram
/// send it again; a 503 when nothing could be stored asks for the same. A redelivery
/// is harmless, since exactly-once is the database's job.
async fn receive(
    State(state): State<RouteState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let Some(sent) = headers.get(SECRET_HEADER) else {
        tracing::warn!("Telegram webhook: update refused, no secret header");
        return Err(ApiError::Unauthorized(
            "missing header X-Telegram-Bot-Api-Secret-Token",
        ));
    };
    let sent_sha256: [u8; 32] = Sha256::digest(sent.as_bytes()).into();
    if !bool::from(sent_sha256.ct_eq(&state.secret_sha256)) {
        // Telegram holding another secret (a deployment with a different one) looks
        // like this too, so it is worth a warning; what was sent is not logged.
        tracing::warn!("Telegram webhook: update refused, wrong secret");
        return Err(ApiError::Unauthorized(
            "wrong X-Telegram-Bot-Api-Secret-Token",
        ));
    }
    let body = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge
        } else {
            ApiError::NotAnUpdate(r.body_text())
        }
    })?;
    // `from_slice`, not `from_value`: the latter turns every update into
    // `UpdateKind::Error`. A well-formed update of a kind the service does not handle
    // parses as `UpdateKind::Error` too and is ignored with a 200, so Telegram does not
    // retry it forever.
    let update: Update =
        serde_json::from_slice(&body).map_err(|e| ApiError::NotAnUpdate(e.to_string()))?;
    match state.inbox.submit(update).await {
        Handled::Done => Ok(StatusCode::OK),
        Handled::Retry => Err(ApiError::Unavailable(
            "the update could not be stored; send it again".to_owned(),
        )),
    }
}

/// Calls `setWebhook` (url, secret, the update kinds the service handles) until Telegram
/// accepts it or `stop` fires ([`super::startup::until_ok`]).
///
/// Always called at start, even if the webhook is already set: `setWebhook` is idempotent
/// on Telegram's side, and the secret cannot be read back (`getWebhookInfo` does not show
/// it) to tell whether the one set is ours.
pub async fn register(
    bot: Bot,
    webhook: WebhookMode,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) {
    let set = super::startup::until_ok(&stop, &metrics, "setWebhook", || {
        bot.set_webhook(webhook.url.clone())
            .secret_token(webhook.secret.expose_secret().to_owned())
            .allowed_updates(super::updates::allowed())
            .send()
    })
    .await;
    if set.is_some() {
        tracing::info!(url = %webhook.url, "Telegram webhook set");
    }
}
