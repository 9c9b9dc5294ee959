//! The HTTP server: hyper's HTTP/1 connections, with the limits that keep the service
//! reachable when clients are hostile.
//!
//! `axum::serve` takes no configuration: no header-read timer, no connection limit. So
//! each accepted socket is served by hyper's own HTTP/1 builder, the way `axum::serve`
//! does it, with a header-read timeout, an idle keep-alive timeout, a body deadline and a
//! connection limit. When the limit is reached, an idle connection makes room, else one
//! whose request never showed credentials ([`mark_authenticated`]); never one serving an
//! authenticated request. The settings and their reasons in full: [`serve`].
//!
//! The pool of open connections, with who may be closed to make room and when, is
//! `pool.rs`; the bodies that hold a request to its deadline and keep a connection counted
//! busy until its response is sent are `body.rs`.

mod body;
mod pool;
#[cfg(test)]
mod tests;

pub use pool::{ConnectionSlot, mark_authenticated};

use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::error::ApiError;
use crate::config::HttpLimits;
use body::{Deadlined, Tracked};
use pool::{Busy, Eviction, Pool, Registration};

/// File descriptors kept out of the connection limit for everything else the process
/// opens: the database and its WAL, the Telegram client, webhook deliveries, Redis.
pub const RESERVED_FDS: u64 = 256;

/// How often, at most, the log says the connection limit is being hit.
const PRESSURE_LOG_EVERY: Duration = Duration::from_secs(60);

/// How long a connection is left alone, after it goes idle (a new one included) or after
/// a request begins on it, before it may be closed to make room. Without it, a burst of
/// new connections accepted faster than their tasks run would close one another before
/// any of them was read, a client's among them; and a request caught between beginning
/// and its credential check (the same step, but on another thread than the accepts)
/// could be taken for unauthenticated. It bounds how fast the pool turns over when full
/// (`max_connections` per grace), far beyond what one attacker can open at the default.
const EVICTION_GRACE: Duration = Duration::from_millis(250);

/// Serves `router` on `listener` until `shutdown` fires, then closes every connection
/// (busy ones after their response) and returns.
///
/// - **Header-read timeout.** A new connection that has not finished the headers of its
///   first request within `header_read_timeout` is closed (slow-loris, sockets that never
///   ask anything).
/// - **Idle keep-alive timeout.** After a response, a kept-alive connection must finish
///   its next request's headers within `idle_timeout`: hyper's header-read timer, which
///   starts as soon as the connection goes idle. (Hyper has one timer for both the idle
///   wait and the headers that follow it, so on a reused connection the headers may use
///   whatever is left of `idle_timeout`.)
/// - **Body deadline.** A request's whole body must arrive within `body_read_timeout` of
///   the end of its headers, on every route. Past it, reading the body fails; the request
///   is answered 408 `request_timeout` with `Connection: close` whatever the handler made
///   of the failure, and hyper closes the connection after that answer (a body not read
///   to its end is never drained on a connection that closes).
/// - **Connection limit.** At most `max_connections` sockets at once, each holding a
///   semaphore permit from accept to close; lowered at start to what the open-file limit
///   leaves after [`RESERVED_FDS`].
/// - **Who makes room.** When every permit is taken, a new connection closes, in this
///   order: the connection idle longest (no request in flight: a fresh socket still
///   sending its headers, or a kept-alive one between requests), gracefully; else the
///   connection whose *unauthenticated* request in flight began longest ago, at once
///   (its request is dropped). Either only once it has been so for [`EVICTION_GRACE`],
///   so a client's new connection is read before a burst of others can close it. A
///   connection with an authenticated request in flight is never closed to make room
///   (one chosen as idle on which such a request began meanwhile finishes it first, and
///   the newcomer makes room elsewhere); only when every connection has one does a new
///   connection wait for one to end, and what an agent may hold in flight is bounded by
///   its `max_pending`, `max_streams` and `max_long_polls` (and a body by the deadline).
///
/// **Authenticated** means that the code which checks a request's credentials said so
/// through [`mark_authenticated`] (each request carries a [`ConnectionSlot`] in its
/// extensions for this): the agents' bearer token (`/v1` and `/mcp`), the Telegram
/// webhook's secret header, the `/metrics` token when one is configured, the console's
/// launch data when it names an approver or a configured person (anyone else's, however
/// genuine, is a stranger's: 404 and never marked). `/healthz` marks
/// itself too: it reads no body and holds its connection for one database ping, and it
/// is what load balancers ask. No route reads a byte of a body before it has checked
/// the request's credentials from its headers (those that need none read no body), and a
/// request without them is answered at once: it holds its connection only while its
/// (short) answer is written, and a body it did not read makes hyper close the
/// connection. So an attacker without credentials
/// holds a slot only until a newcomer needs it, and never one that an authenticated
/// request or `/healthz` is using: with `c` connections it costs the service at most `c`
/// sockets (bounded by `max_connections`), each for no longer than the header-read or
/// idle timeout, and for no longer than [`EVICTION_GRACE`] once anyone else needs the
/// room.
///
/// A request is in flight from the moment hyper hands it over until its response body
/// has been sent (an event stream is in flight as long as it is open). A connection
/// marked authenticated stays so until its requests in flight are done: its next request
/// must authenticate again.
///
/// Shutdown: the listener stops accepting, idle connections are closed, and each busy
/// one is closed after its response (hyper's graceful shutdown); event streams and
/// long-polls end on the same token, so the wait is bounded.
pub async fn serve(
    mut listener: TcpListener,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    let max = connection_limit(limits.max_connections, open_file_limit());
    tracing::info!(
        max_connections = max,
        header_read_timeout_seconds = limits.header_read_timeout.as_secs_f64(),
        idle_timeout_seconds = limits.idle_timeout.as_secs_f64(),
        body_read_timeout_seconds = limits.body_read_timeout.as_secs_f64(),
        "HTTP server limits"
    );
    let pool = Arc::new(Pool::new(max));
    let connections = TaskTracker::new();
    loop {
        // `Listener::accept` for TcpListener retries on its own: it skips a client's
        // reset and sleeps a second on errors such as EMFILE.
        let stream = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            (stream, _) = axum::serve::Listener::accept(&mut listener) => stream,
        };
        let permit = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            permit = pool.admit(max) => permit,
        };
        let registration = pool.register();
        connections.spawn(connection(
            stream,
            permit,
            registration,
            router.clone(),
            limits,
            shutdown.clone(),
        ));
    }
    // New connections are refused from here on.
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// Serves one connection until it closes, its first request does not come in time, it
/// is closed to make room, or the service stops.
async fn connection(
    stream: TcpStream,
    permit: OwnedSemaphorePermit,
    registration: Registration,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) {
    // Held until the socket is closed, which is when the task ends.
    let _permit = permit;
    let service = {
        let pool = registration.pool.clone();
        let id = registration.id;
        let body_timeout = limits.body_read_timeout;
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (busy, slot) = pool.begin(id);
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(slot);
            let expired = Arc::new(AtomicBool::new(false));
            let body = Body::new(Deadlined {
                body,
                deadline: Instant::now() + body_timeout,
                sleep: None,
                expired: expired.clone(),
            });
            let request = hyper::Request::from_parts(parts, body);
            respond(router.clone(), request, busy, expired, body_timeout)
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.idle_timeout);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(stream), service));
    let mut first_request = pin!(tokio::time::sleep(limits.header_read_timeout));
    let mut awaiting_first = true;
    let mut closing = false;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
                return;
            }
            () = &mut first_request, if awaiting_first => {
                awaiting_first = false;
                if !registration.asked() {
                    tracing::debug!("closing a connection that sent no request in time");
                    return;
                }
            }
            () = registration.evict.cancelled(), if !closing => {
                closing = true;
                if evicted_at_once(&registration) {
                    return;
                }
                if registration.in_flight() {
                    // An authenticated request finishes first: the newcomer waiting for
                    // this room may take another.
                    registration.defer();
                }
                conn.as_mut().graceful_shutdown();
            }
            () = shutdown.cancelled(), if !closing => {
                closing = true;
                // With no request begun there is nothing to finish. Hyper's graceful
                // shutdown closes a connection that has sent nothing, but keeps one
                // halfway through its first request's headers until its own timer.
                if !registration.asked() {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// One request through the router, its response holding the connection busy until sent;
/// a body that missed its deadline is answered 408 whatever the handler made of it.
async fn respond(
    router: Router,
    request: hyper::Request<Body>,
    busy: Busy,
    expired: Arc<AtomicBool>,
    body_timeout: Duration,
) -> Result<hyper::Response<Tracked>, Infallible> {
    let mut response = router
        .oneshot(request)
        .await
        .unwrap_or_else(|never| match never {});
    if expired.load(Ordering::Relaxed) {
        // Whatever the handler made of the failed read (a 400, a 413), the
        // client is told what happened; `Connection: close` ends the
        // connection after this answer.
        tracing::info!(
            body_read_timeout_seconds = body_timeout.as_secs_f64(),
            "request body too slow: answered 408 and closing the connection"
        );
        response = ApiError::BodyTimeout(body_timeout).into_response();
    }
    Ok(response.map(|body| Tracked { body, _busy: busy }))
}

/// Whether a connection the pool closes to make room is closed at once (its request
/// dropped) rather than gracefully.
///
/// At once if its request in flight never showed credentials: waiting for its answer
/// would let whoever sends it decide when the room is free. That is the case when the
/// pool chose it for that, and also when it was chosen as idle and a request came in
/// meanwhile (credentials are checked as soon as a request is handed over, before
/// anything else is awaited, so one still unauthenticated here has none). Otherwise as
/// at shutdown: closed at once unless a request has begun, else after that request.
fn evicted_at_once(registration: &Registration) -> bool {
    registration.evicted() == Some(Eviction::Unauthenticated)
        || !registration.asked()
        || registration.unauthenticated_in_flight()
}

/// The connection limit to run with: the configured one, lowered so that the
/// connections plus [`RESERVED_FDS`] (a quarter of a small limit) fit in `open_files`.
pub fn connection_limit(configured: usize, open_files: Option<u64>) -> usize {
    let Some(open_files) = open_files else {
        return configured;
    };
    let room = open_files - RESERVED_FDS.min(open_files / 4);
    let room = usize::try_from(room).unwrap_or(usize::MAX).max(1);
    if room < configured {
        tracing::warn!(
            configured,
            open_file_limit = open_files,
            max_connections = room,
            "server.max_connections lowered to fit the open-file limit (raise `ulimit -n`)"
        );
        room
    } else {
        configured
    }
}

/// The soft open-file limit (`RLIMIT_NOFILE`), if the platform has one and it is finite.
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The soft open-file limit before and after [`raise_open_file_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    pub before: Option<u64>,
    pub now: Option<u64>,
}

/// Raises the soft open-file limit to the hard limit, so the connection limit is not
/// cut to a distribution's default of 1,024. Every connection is a file descriptor.
pub fn raise_open_file_limit() -> std::io::Result<OpenFiles> {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let limit = getrlimit(Resource::Nofile);
        let before = limit.current;
        match (limit.current, limit.maximum) {
            (Some(current), Some(hard)) if current < hard => {
                setrlimit(
                    Resource::Nofile,
                    Rlimit {
                        current: Some(hard),
                        maximum: Some(hard),
                    },
                )?;
                Ok(OpenFiles {
                    before,
                    now: getrlimit(Resource::Nofile).current,
                })
            }
            // Already at the hard limit, or no finite hard limit to raise it to (Linux
            // refuses an infinite one for open files).
            _ => Ok(OpenFiles {
                before,
                now: before,
            }),
        }
    }
    #[cfg(not(unix))]
    {
        Ok(OpenFiles {
            before: None,
            now: None,
        })
    }
}
