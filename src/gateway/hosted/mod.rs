//! Gateways the service hosts: each `[[mcp_upstreams]]` entry served at
//! `/mcp/upstreams/{name}` over Streamable HTTP to the agents it lists, for agents that
//! run elsewhere and cannot start `hitl-telegram gateway` beside them.
//!
//! Each host's session is the gateway as `hitl-telegram gateway` runs it (one
//! [`Router`](super::Router), one upstream connection; for a command, a process of its
//! own), asking the service's own `/v1` API over loopback with the bearer token the
//! agent presented: the same pipeline, limits and audit as any other question, and the
//! same identity. To an agent not listed, an upstream does not exist (404).
//!
//! Sessions live in this replica's memory: behind a load balancer, a session's
//! requests must reach the replica that started it (a request it does not know gets
//! 404, and an MCP client then initializes again).

mod session;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rand::Rng as _;
use secrecy::SecretString;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::api::error::ApiError;
use crate::client::V1Client;
use crate::config::{Agent, McpUpstream, UpstreamSource};
use crate::service::Service;

use super::message::{Id, Kind, Message, error_response};
use super::upstream::Upstream;
use super::{Asking, valid_name};
use session::{Refused, Session};

/// The header that names a session (MCP's Streamable HTTP transport).
const SESSION_ID: &str = "mcp-session-id";
/// A session unused this long, with nothing in flight and no stream open, is ended.
const IDLE: Duration = Duration::from_secs(30 * 60);
/// How often idle sessions are looked for.
const SWEEP: Duration = Duration::from_secs(60);
/// Comments on an open event stream, so proxies and clients do not take a long wait
/// for a dead connection.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The largest message accepted: the API's own body limit plus room for the envelope.
const MAX_MESSAGE: usize = crate::domain::limits::MAX_BODY_BYTES + 16 * 1024;

/// The hosted gateways and their sessions.
struct Hosted {
    service: Arc<Service>,
    /// The service's own API, as its loopback address (`http://127.0.0.1:8080`).
    api_base: String,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// The `/mcp/upstreams/{name}` routes, for the service at `api_base` (its own listening
/// address, reached over loopback); sessions end when `shutdown` fires.
pub fn router(
    service: Arc<Service>,
    api_base: String,
    shutdown: CancellationToken,
) -> axum::Router {
    let hosted = Arc::new(Hosted {
        service,
        api_base,
        sessions: Mutex::default(),
    });
    tokio::spawn(sweep(hosted.clone(), shutdown));
    axum::Router::new()
        .route(
            "/mcp/upstreams/{name}",
            post(on_post).get(on_get).delete(on_delete),
        )
        .with_state(hosted)
}

impl Hosted {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The agent and the upstream a request is for: 401 without an agent's token, 404
    /// for an upstream that is not there or not for this agent.
    fn admit(
        &self,
        headers: &HeaderMap,
        request: &Request,
        name: &str,
    ) -> Result<(Arc<Agent>, Arc<McpUpstream>, SecretString), Refusal> {
        let token = crate::api::extract::bearer_token(headers);
        let Some((agent, token)) = token.and_then(|t| {
            let agent = self.service.config().agent_for_token(t)?;
            Some((agent, SecretString::from(t.to_owned())))
        }) else {
            return Err(Refusal::Api(ApiError::Unauthorized(
                "missing or unknown bearer token (an agent's token, as for /v1)",
            )));
        };
        crate::api::serve::mark_authenticated(request.extensions());
        tracing::Span::current().record("agent", agent.name.as_str());
        let upstream = self
            .service
            .config()
            .mcp_upstreams
            .iter()
            .find(|u| u.name == name && u.agents.contains(&agent.name))
            .cloned();
        match upstream {
            Some(upstream) => Ok((agent, upstream, token)),
            None => Err(not_found(name)),
        }
    }

    /// The session the request names, if it is this agent's on this upstream.
    fn session(
        &self,
        headers: &HeaderMap,
        agent: &Agent,
        upstream: &McpUpstream,
    ) -> Result<Option<Arc<Session>>, Refusal> {
        let Some(id) = headers.get(SESSION_ID) else {
            return Ok(None);
        };
        let found = id
            .to_str()
            .ok()
            .and_then(|id| self.sessions().get(id).cloned())
            .filter(|s| s.agent == agent.name && s.upstream.name == upstream.name && !s.finished());
        match found {
            Some(s) => {
                s.touch();
                Ok(Some(s))
            }
            None => Err(rpc_refusal(
                StatusCode::NOT_FOUND,
                None,
                "no such session (it ended, or another replica holds it): initialize again",
            )),
        }
    }

    /// The session a request after `initialize` names: admitted as [`Hosted::admit`]
    /// admits, and 400 without a session id.
    fn named_session(
        &self,
        headers: &HeaderMap,
        request: &Request,
        name: &str,
    ) -> Result<Arc<Session>, Refusal> {
        let (agent, upstream, _) = self.admit(headers, request, name)?;
        self.session(headers, &agent, &upstream)?
            .ok_or_else(missing_session)
    }

    /// A new session for `agent` on `upstream`, its upstream started.
    fn start(
        self: &Arc<Self>,
        agent: &Agent,
        upstream: Arc<McpUpstream>,
        token: SecretString,
    ) -> Result<Arc<Session>, Refusal> {
        let open = self
            .sessions()
            .values()
            .filter(|s| s.agent == agent.name && s.upstream.name == upstream.name && !s.finished())
            .count();
        if open >= upstream.max_sessions as usize {
            return Err(rpc_refusal(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                &format!(
                    "this agent already has {open} sessions open on '{}' (max_sessions): end one with DELETE",
                    upstream.name
                ),
            ));
        }
        let client = V1Client::loopback(&self.api_base, token).map_err(|e| {
            tracing::error!(error = %e, "cannot make the hosted gateway's HTTP client");
            rpc_refusal(StatusCode::INTERNAL_SERVER_ERROR, None, "internal error")
        })?;
        let source = match &upstream.source {
            UpstreamSource::Command { argv, env } => Upstream::Command {
                argv: argv.clone(),
                env: Some(env.clone()),
            },
            UpstreamSource::Url { url, headers } => Upstream::Url {
                url: url.clone(),
                headers: headers.clone(),
            },
        };
        let link = source.connect().map_err(|why| {
            // The command and its error are the operator's to read, not the agent's.
            tracing::error!(upstream = %upstream.name, %why, "a hosted MCP upstream would not start");
            rpc_refusal(
                StatusCode::BAD_GATEWAY,
                None,
                &format!("the upstream MCP server '{}' could not be started", upstream.name),
            )
        })?;
        let asking = Asking {
            client,
            server: upstream.name.clone(),
            route: upstream.route.clone(),
            owner: None,
            trust_annotations: upstream.trust_annotations,
            timeout_seconds: upstream.timeout_seconds,
            reports: tokio_util::task::TaskTracker::new(),
        };
        let id = new_session_id();
        let hosted = self.clone();
        let session = Session::start(
            id.clone(),
            agent.name.clone(),
            upstream,
            asking,
            link,
            move |session, why| {
                hosted.sessions().remove(&session.id);
                if let Some(why) = why {
                    tracing::warn!(
                        upstream = %session.upstream.name,
                        agent = %session.agent,
                        %why,
                        "a hosted MCP session ended: its upstream is gone"
                    );
                }
            },
        );
        self.sessions().insert(id, session.clone());
        Ok(session)
    }
}

/// `POST`: one JSON-RPC message from the host.
async fn on_post(
    State(hosted): State<Arc<Hosted>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, Refusal> {
    let (agent, upstream, token) = hosted.admit(&headers, &request, &name)?;
    let Ok(bytes) = axum::body::to_bytes(request.into_body(), MAX_MESSAGE).await else {
        return Err(rpc_refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            None,
            &format!("a message is at most {MAX_MESSAGE} bytes"),
        ));
    };
    let m = std::str::from_utf8(&bytes)
        .map_err(|_| super::message::Unreadable::NotJson("not UTF-8".into()))
        .and_then(Message::parse)
        .map_err(|e| {
            rpc_refusal(
                StatusCode::BAD_REQUEST,
                None,
                &format!("hitl-telegram gateway: {e}"),
            )
        })?;
    let session = match hosted.session(&headers, &agent, &upstream)? {
        Some(s) => s,
        None if m.method() == Some("initialize") => hosted.start(&agent, upstream, token)?,
        None => {
            // A stateless client (MCP 2026-07-28 probes `server/discover` first) hears
            // that this endpoint keeps sessions, and initializes.
            let id = match &m.kind {
                Kind::Request { id, .. } => Some(id),
                _ => None,
            };
            return Err(rpc_refusal(
                StatusCode::BAD_REQUEST,
                id,
                "this endpoint keeps a session per host: send initialize first, then the Mcp-Session-Id it gives with every request",
            ));
        }
    };
    let Kind::Request { id, .. } = &m.kind else {
        session.send(&m).map_err(|_| ended(&session))?;
        return Ok(StatusCode::ACCEPTED.into_response());
    };
    let stream = accepts(&headers, "text/event-stream");
    let answers = session
        .request(id, &m, stream)
        .map_err(|refused| match refused {
            Refused::IdInUse => rpc_refusal(
                StatusCode::BAD_REQUEST,
                Some(id),
                "a request with this id is still in flight in this session",
            ),
            Refused::Ended => ended(&session),
        })?;
    let mut response = if stream {
        event_stream(answers)
    } else {
        json_answer(answers).await?
    };
    if let Ok(value) = HeaderValue::from_str(&session.id) {
        response.headers_mut().insert(SESSION_ID, value);
    }
    Ok(response)
}

/// `GET`: the session's stream of what the upstream sends on its own.
async fn on_get(
    State(hosted): State<Arc<Hosted>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, Refusal> {
    let session = hosted.named_session(&headers, &request, &name)?;
    if !accepts(&headers, "text/event-stream") {
        return Err(rpc_refusal(
            StatusCode::NOT_ACCEPTABLE,
            None,
            "GET opens an event stream: send Accept: text/event-stream",
        ));
    }
    Ok(event_stream(session.open_stream()))
}

/// `DELETE`: the host ends its session.
async fn on_delete(
    State(hosted): State<Arc<Hosted>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    request: Request,
) -> Result<Response, Refusal> {
    let session = hosted.named_session(&headers, &request, &name)?;
    hosted.sessions().remove(&session.id);
    session.close();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Ends idle sessions (and forgets finished ones) every [`SWEEP`], and ends every
/// session at shutdown (a call still waiting has its question withdrawn).
async fn sweep(hosted: Arc<Hosted>, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(SWEEP);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                for (_, session) in hosted.sessions().drain() {
                    session.close();
                }
                return;
            }
            _ = tick.tick() => {
                let idle: Vec<Arc<Session>> = hosted
                    .sessions()
                    .values()
                    .filter(|s| s.finished() || s.idle_for(IDLE))
                    .cloned()
                    .collect();
                for session in idle {
                    hosted.sessions().remove(&session.id);
                    session.close();
                }
            }
        }
    }
}

/// The answers as server-sent events, one `message` event each, until the last.
fn event_stream(answers: mpsc::UnboundedReceiver<String>) -> Response {
    let events = futures_util::stream::unfold(answers, |mut answers| async move {
        let line = answers.recv().await?;
        Some((
            Ok::<_, Infallible>(Event::default().event("message").data(line)),
            answers,
        ))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The one response, as a JSON body.
async fn json_answer(mut answers: mpsc::UnboundedReceiver<String>) -> Result<Response, Refusal> {
    match answers.recv().await {
        Some(line) => Ok((
            [(header::CONTENT_TYPE, "application/json")],
            Body::from(line),
        )
            .into_response()),
        None => Err(rpc_refusal(
            StatusCode::BAD_GATEWAY,
            None,
            "the session ended before the request was answered",
        )),
    }
}

fn ended(session: &Session) -> Refusal {
    rpc_refusal(
        StatusCode::NOT_FOUND,
        None,
        &format!(
            "the session has ended (the upstream '{}' is gone or the session was closed): initialize again",
            session.upstream.name
        ),
    )
}

fn missing_session() -> Refusal {
    rpc_refusal(
        StatusCode::BAD_REQUEST,
        None,
        "the Mcp-Session-Id header is missing: send initialize first",
    )
}

fn not_found(name: &str) -> Refusal {
    let shown = if valid_name(name) { name } else { "?" };
    Refusal::Api(ApiError::NotFound(format!(
        "no MCP upstream '{shown}' for this agent"
    )))
}

/// Why a request is refused, made a response in one place.
enum Refusal {
    /// In the API's error format: no agent's token (401), no such upstream for this
    /// agent (404).
    Api(ApiError),
    /// A JSON-RPC error in the body, with an HTTP status.
    Rpc {
        status: StatusCode,
        id: Option<Id>,
        message: String,
    },
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Api(e) => e.into_response(),
            Refusal::Rpc {
                status,
                id,
                message,
            } => (
                status,
                [(header::CONTENT_TYPE, "application/json")],
                error_response(id.as_ref(), -32600, &message),
            )
                .into_response(),
        }
    }
}

/// A JSON-RPC error with `status`.
fn rpc_refusal(status: StatusCode, id: Option<&Id>, message: &str) -> Refusal {
    Refusal::Rpc {
        status,
        id: id.cloned(),
        message: message.to_owned(),
    }
}

/// Whether the request's `Accept` lists `kind`.
fn accepts(headers: &HeaderMap, kind: &str) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.split(';').next().is_some_and(|t| t.trim() == kind))
}

/// 32 random hex digits: a session id no other host can guess.
fn new_session_id() -> String {
    let bytes: [u8; 16] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
