//! The `/v1` API as the tools call it: over HTTP with one agent's token (`hitl-telegram
//! mcp`), or through the service's own router with the MCP request's bearer (`/mcp`).

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde_json::Value;
use tower::ServiceExt;

use crate::client::{Failure, V1Client};

use super::MAX_BODY;

/// Where the tools' API requests go.
#[derive(Clone)]
pub enum Api {
    /// A running service, over HTTP, with one agent's token (`hitl-telegram mcp`).
    Http(V1Client),
    /// The service's own router (`/mcp`): the token is the MCP request's own bearer.
    InProcess(axum::Router),
}

/// What the API answered, or why it could not be asked.
pub(super) enum Answer {
    Ok(StatusCode, Value),
    Unreachable(String),
}

impl Api {
    pub(super) async fn call(
        &self,
        bearer: Option<&str>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Answer {
        match self {
            Api::Http(client) => {
                let body = body.map(Value::to_string);
                match client.send(method, path, body.as_deref(), None).await {
                    Ok(reply) => match reply.json() {
                        Ok(v) => Answer::Ok(reply.status, v),
                        Err(e) => Answer::Unreachable(format!(
                            "the service's answer ({}) is not JSON: {e}",
                            reply.status
                        )),
                    },
                    Err(Failure::CutOff(status, e)) => Answer::Unreachable(format!(
                        "the service's answer ({status}) is not JSON: {}",
                        crate::telemetry::causes(&e)
                    )),
                    Err(Failure::Unreachable(e)) => Answer::Unreachable(format!(
                        "cannot reach the service: {}",
                        crate::telemetry::causes(&e)
                    )),
                }
            }
            Api::InProcess(router) => {
                let mut request = Request::builder().method(method).uri(path);
                if let Some(bearer) = bearer {
                    request = request.header(header::AUTHORIZATION, format!("Bearer {bearer}"));
                }
                let request = match body {
                    Some(body) => request
                        .header(header::CONTENT_TYPE, "application/json")
                        .body(Body::from(body.to_string())),
                    None => request.body(Body::empty()),
                };
                let Ok(request) = request else {
                    return Answer::Unreachable("cannot build the request".into());
                };
                let Ok(response) = router.clone().oneshot(request).await;
                let status = response.status();
                match axum::body::to_bytes(response.into_body(), MAX_BODY).await {
                    Ok(bytes) => match serde_json::from_slice(&bytes) {
                        Ok(v) => Answer::Ok(status, v),
                        Err(_) => Answer::Unreachable(format!("the API answered {status}")),
                    },
                    Err(e) => Answer::Unreachable(format!("cannot read the API's answer: {e}")),
                }
            }
        }
    }
}

/// The bearer of the MCP request when it came over HTTP (`/mcp`).
pub(super) fn bearer_of(ctx: &RequestContext<RoleServer>) -> Option<String> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| crate::api::extract::bearer_token(&parts.headers))
        .map(str::to_owned)
}
