//! The span every HTTP request runs in: a request id (the caller's `x-request-id` when
//! it is a sane one, else a fresh one, returned in the response either way), the method
//! and route, and, once known, the agent and the tool. Log lines written while the
//! request is handled carry these fields; parameter values and tokens never go in.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use rand::Rng;
use tracing::Instrument;
use tracing::field::Empty;

/// The header that carries the request id, both ways.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Longest request id taken from a caller; longer ones are replaced.
const MAX_REQUEST_ID_CHARS: usize = 128;

/// Middleware: runs the request inside its span and returns the request id.
pub async fn request_span(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| acceptable(v))
        .map(str::to_owned)
        .unwrap_or_else(generate);
    // The route's template (`/v1/confirmations/{id}`) rather than the path: a route
    // may one day carry a secret in its path (a Telegram webhook's), and the query is
    // left out for the same reason. Only a request no route matched logs its raw path.
    let path = match request.extensions().get::<MatchedPath>() {
        Some(matched) => matched.as_str().to_owned(),
        None => request.uri().path().to_owned(),
    };
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %path,
        agent = Empty,
        tool = Empty,
    );
    let started = Instant::now();
    let mut response = next.run(request).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::debug!(
            status = response.status().as_u16(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "request served"
        )
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID_HEADER, value);
    }
    response
}

/// A caller's id is kept only when it cannot mangle a log line or a header: short, and
/// letters, digits and `-_.:` only.
fn acceptable(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_REQUEST_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'))
}

/// 128 random bits in hex.
fn generate() -> String {
    hex::encode(rand::rng().random::<[u8; 16]>())
}

/// Names the tool of the request being handled in its span.
pub fn record_tool(tool: &str) {
    tracing::Span::current().record("tool", tool);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_plain_request_ids_are_taken_from_the_caller() {
        assert!(acceptable("3f2a-41_b.c:d"));
        assert!(!acceptable(""));
        assert!(!acceptable("a b"));
        assert!(!acceptable("a\"}{"));
        assert!(!acceptable(&"a".repeat(129)));
        assert_eq!(generate().len(), 32);
        assert_ne!(generate(), generate());
    }
}
