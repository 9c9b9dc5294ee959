//! The `/mcp` route: streamable HTTP, stateless, in front of the service's own API
//! router, with the agent's bearer token checked before MCP sees the request.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use axum::response::IntoResponse as _;
use serde_json::json;

use super::v1::Api;
use super::{HitlMcp, MAX_MCP_BODY};

/// The `/mcp` route: streamable HTTP, stateless (each POST stands alone, so nothing is
/// kept per client and any replica can answer), in front of `v1`, the service's own API
/// router. Requests without a known agent token get 401 before MCP sees them.
pub fn router(v1: axum::Router, service: Arc<crate::service::Service>) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    // rmcp's Host allow-list guards unauthenticated local servers against DNS
    // rebinding; every request here needs an agent's bearer token, which a rebinding
    // page does not have, and a deployment behind a proxy has its own host name.
    let config = StreamableHttpServerConfig::default()
        .disable_allowed_hosts()
        .with_legacy_session_mode(false);
    let api = Api::InProcess(v1);
    let mcp = StreamableHttpService::new(
        move || Ok(HitlMcp::new(api.clone())),
        Arc::<NeverSessionManager>::default(),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                let service = service.clone();
                async move {
                    let known = crate::api::extract::bearer_token(request.headers())
                        .is_some_and(|t| service.config().agent_for_token(t).is_some());
                    if !known {
                        return crate::api::error::ApiError::Unauthorized(
                            "missing or unknown bearer token (an agent's token, as for /v1)",
                        )
                        .into_response();
                    }
                    crate::api::serve::mark_authenticated(request.extensions());
                    // rmcp reads a POST's whole body: bound it as /v1 bounds its own
                    // (a tool call's arguments become one /v1 body, plus the envelope).
                    let (parts, body) = request.into_parts();
                    match axum::body::to_bytes(body, MAX_MCP_BODY).await {
                        Ok(bytes) => {
                            if let Some(refusal) = not_a_message(&parts, &bytes) {
                                return refusal;
                            }
                            next.run(axum::extract::Request::from_parts(parts, Body::from(bytes)))
                                .await
                        }
                        Err(_) => (
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!("an MCP message is at most {MAX_MCP_BODY} bytes"),
                        )
                            .into_response(),
                    }
                }
            },
        ))
}

/// A JSON POST to `/mcp` whose body is not an MCP message: 400 with a JSON-RPC error
/// (`-32700` when it is not JSON at all, `-32600` when it is JSON but no message), where
/// rmcp would answer 415 (a wrong media type, which this is not: the Content-Type said
/// JSON). The same parse as rmcp's, so whatever passes here it reads. A POST of another
/// media type is left to rmcp's 415.
fn not_a_message(
    parts: &axum::http::request::Parts,
    body: &[u8],
) -> Option<axum::response::Response> {
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|essence| essence.trim().eq_ignore_ascii_case("application/json"))
        });
    if parts.method != Method::POST || !json {
        return None;
    }
    let e = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body).err()?;
    let (code, message) = if serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err() {
        (-32700, format!("Parse error: the body is not JSON ({e})"))
    } else {
        (
            -32600,
            format!("Invalid Request: the body is not an MCP (JSON-RPC) message ({e})"),
        )
    };
    let error = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    Some((StatusCode::BAD_REQUEST, axum::Json(error)).into_response())
}
