//! Webhook mode: Telegram POSTs each update to a route on the service's own HTTP server
//! instead of the service long-polling `getUpdates`.
//!
//! Two parts: [`router`], the update route (mounted by `app.rs` only in webhook mode),
//! which checks Telegram's secret header and hands the update to the
//! [`super::inbox::Inbox`], as polling does, answering only once it is handled; and
//! [`register`], which calls `setWebhook` at start until Telegram accepts it.
//!
//! This is the route operators publish to the internet, so the secret is checked from
//! the headers before a byte of the body is read: a request without it is answered 401
//! at once with `Connection: close`, and its body is never read (hyper then closes the
//! connection after the answer). A request with it is marked authenticated for the HTTP
//! server's connection pool (`api::serve`), so floods of strangers cannot take the room
//! Telegram's deliveries need.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
// Not `Request`: teloxide's prelude has a trait of that name.
use axum::extract::{DefaultBodyLimit, FromRequest, Request as HttpRequest, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use teloxide::prelude::*;
use teloxide::types::Update;
use tokio_util::sync::CancellationToken;

use super::inbox::{Handled, Inbox, WEBHOOK_GRACE};
use crate::api::error::ApiError;
use crate::config::WebhookMode;
use crate::domain::limits::MAX_BODY_BYTES;
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
///
/// Takes the whole request, not a body extractor: axum runs extractors before the
/// handler, and a body extractor would read the body before the secret is checked.
async fn receive(State(state): State<RouteState>, request: HttpRequest) -> Response {
    if let Err(refused) = check_secret(&state, request.headers()) {
        // Nothing more from this client is worth reading: the connection closes after
        // this answer, the body unread.
        let mut response = refused.into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    crate::api::serve::mark_authenticated(request.extensions());
    match handle(&state, request).await {
        Ok(status) => status.into_response(),
        Err(e) => e.into_response(),
    }
}

/// Whether the request carries the webhook's secret header.
fn check_secret(state: &RouteState, headers: &HeaderMap) -> Result<(), ApiError> {
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
    Ok(())
}

/// Reads the update of an authenticated request (within the body limit the route's
/// `DefaultBodyLimit` sets) and hands it to the inbox.
async fn handle(state: &RouteState, request: HttpRequest) -> Result<StatusCode, ApiError> {
    let body = Bytes::from_request(request, &()).await.map_err(|r| {
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
///
/// The webhook is never deleted at shutdown: in a rolling deploy the old instance stops
/// after the new one has set the (same) webhook, and deleting it then would leave the new
/// instance deaf. teloxide's own webhook helpers delete it, which is why they are not used.
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
