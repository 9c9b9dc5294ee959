//! The HTTP server: hyper's HTTP/1 connections, with the limits that keep the service
//! reachable when clients are hostile.
//!
//! `axum::serve` takes no configuration: no header-read timer, no connection limit. So
//! each accepted socket is served by hyper's own HTTP/1 builder, the way `axum::serve`
//! does it, with these settings:
//!
//! - **Header-read timeout.** A new connection that has not finished the headers of its
//!   first request within `header_read_timeout` is closed (slow-loris, sockets that never
//!   ask anything).
//! - **Idle keep-alive timeout.** After a response, a kept-alive connection must finish
//!   its next request's headers within `idle_timeout`: hyper's header-read timer, which
//!   starts as soon as the connection goes idle. (Hyper has one timer for both the idle
//!   wait and the headers that follow it, so on a reused connection the headers may use
//!   whatever is left of `idle_timeout`.)
//! - **Body deadline.** A request's whole body must arrive within `body_read_timeout` of
//!   the end of its headers, on every route. Past it, reading the body fails; the request
//!   is answered 408 `request_timeout` with `Connection: close` whatever the handler made
//!   of the failure, and hyper closes the connection after that answer (a body not read
//!   to its end is never drained on a connection that closes).
//! - **Connection limit.** At most `max_connections` sockets at once, each holding a
//!   semaphore permit from accept to close; lowered at start to what the open-file limit
//!   leaves after [`RESERVED_FDS`].
//! - **Who makes room.** When every permit is taken, a new connection closes, in this
//!   order: the connection idle longest (no request in flight: a fresh socket still
//!   sending its headers, or a kept-alive one between requests), gracefully; else the
//!   connection whose *unauthenticated* request in flight began longest ago, at once
//!   (its request is dropped). Either only once it has been so for [`EVICTION_GRACE`],
//!   so a client's new connection is read before a burst of others can close it. A
//!   connection with an authenticated request in flight is never closed to make room
//!   (one chosen as idle on which such a request began meanwhile finishes it first, and
//!   the newcomer makes room elsewhere); only when every connection has one does a new
//!   connection wait for one to end, and what an agent may hold in flight is bounded by
//!   its `max_pending`, `max_streams` and `max_long_polls` (and a body by the deadline).
//!
//! **Authenticated** means that the code which checks a request's credentials said so
//! through [`mark_authenticated`] (each request carries a [`ConnectionSlot`] in its
//! extensions for this): the agents' bearer token (`/v1` and `/mcp`), the Telegram
//! webhook's secret header, the `/metrics` token when one is configured. `/healthz` marks
//! itself too: it reads no body and holds its connection for one database ping, and it
//! is what load balancers ask. No route reads a byte of a body before it has checked
//! the request's credentials from its headers (those that need none read no body), and a
//! request without them is answered at once: it holds its connection only while its
//! (short) answer is written, and a body it did not read makes hyper close the
//! connection. So an attacker without credentials
//! holds a slot only until a newcomer needs it, and never one that an authenticated
//! request or `/healthz` is using: with `c` connections it costs the service at most `c`
//! sockets (bounded by `max_connections`), each for no longer than the header-read or
//! idle timeout, and for no longer than [`EVICTION_GRACE`] once anyone else needs the
//! room.
//!
//! A request is in flight from the moment hyper hands it over until its response body
//! has been sent (an event stream is in flight as long as it is open). A connection
//! marked authenticated stays so until its requests in flight are done: its next request
//! must authenticate again.
//!
//! Shutdown: the listener stops accepting, idle connections are closed, and each busy
//! one is closed after its response (hyper's graceful shutdown); event streams and
//! long-polls end on the same token, so the wait is bounded.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::Extensions;
use axum::response::IntoResponse;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use super::error::ApiError;
use crate::config::HttpLimits;

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
            let router = router.clone();
            async move {
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
                Ok::<_, Infallible>(response.map(|body| Tracked { body, _busy: busy }))
            }
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
                // Closed at once if its request in flight never showed credentials,
                // the request dropped with it: waiting for its answer would let
                // whoever sends it decide when the room is free. That is the case when
                // the pool chose it for that, and also when it was chosen as idle and
                // a request came in meanwhile (credentials are checked as soon as a
                // request is handed over, before anything else is awaited, so one still
                // unauthenticated here has none). Otherwise as at shutdown: closed at
                // once unless a request has begun, else after that request.
                if registration.evicted() == Some(Eviction::Unauthenticated)
                    || !registration.asked()
                    || registration.unauthenticated_in_flight()
                {
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

/// A handle on the pool place of the connection a request came on, put in every
/// request's extensions by [`serve`]: the code that checks the request's credentials
/// marks it authenticated through [`mark_authenticated`].
#[derive(Clone)]
pub struct ConnectionSlot {
    pool: Arc<Pool>,
    id: u64,
    /// The connection's busy period the request belongs to, so a handle kept past its
    /// request cannot mark a later one.
    period: u64,
}

/// Marks the request whose extensions these are as authenticated: from now until its
/// requests in flight are done, its connection is never closed to make room for
/// another. Call it only once the request's credentials are checked. Does nothing for
/// a request that did not come through [`serve`] (a router called in-process).
pub fn mark_authenticated(extensions: &Extensions) {
    if let Some(slot) = extensions.get::<ConnectionSlot>() {
        slot.pool.authenticate(slot.id, slot.period);
    }
}

/// What [`PoolInner::evict_one`] could do for a newcomer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// A connection was told to close; its permit comes back when it has.
    Made,
    /// None may be closed before this time, when one comes past its grace.
    At(Instant),
    /// None may be closed at all: every connection has an authenticated request.
    None,
}

/// Why the pool closed a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Eviction {
    /// It had no request in flight.
    Idle,
    /// Its requests in flight were all unauthenticated.
    Unauthenticated,
}

/// The open connections: which are idle and since when, which have only unauthenticated
/// requests in flight and since when, and the permits they hold.
struct Pool {
    slots: Arc<Semaphore>,
    inner: Mutex<PoolInner>,
    /// Wakes an accept that waits for a full pool, when a connection goes idle. (Only
    /// that makes a connection closable again: a request can begin, unauthenticated,
    /// only on a connection that was idle, and an authenticated one stays so until its
    /// connection goes idle.)
    became_idle: Notify,
    /// Wakes an accept that waits for the permit of a connection it closed, when that
    /// connection turns out to have an authenticated request to finish first (one that
    /// came in after it was chosen as idle), so another can make room.
    eviction_deferred: Notify,
}

#[derive(Default)]
struct PoolInner {
    next_id: u64,
    connections: HashMap<u64, Entry>,
    /// Idle connections, the one idle longest first.
    idle: BTreeSet<(Instant, u64)>,
    /// Busy connections none of whose requests in flight is authenticated, the one
    /// busy longest first.
    unauthenticated: BTreeSet<(Instant, u64)>,
    /// An accept is waiting for a permit: going idle must wake it.
    waiting: bool,
    last_pressure_log: Option<Instant>,
    closed_idle_since_log: u64,
    closed_unauthenticated_since_log: u64,
}

struct Entry {
    /// Requests begun and not yet answered in full.
    in_flight: u32,
    /// Some request has begun on this connection.
    asked: bool,
    /// Counts the times the connection went from idle to busy.
    period: u64,
    /// A request of the current busy period is authenticated.
    authenticated: bool,
    /// When it went idle; `None` while busy or once evicted.
    idle_since: Option<Instant>,
    /// When it went busy, while none of its requests is authenticated; `None` otherwise
    /// or once evicted.
    unauthenticated_since: Option<Instant>,
    /// Why the pool closed it, once it has.
    evicted: Option<Eviction>,
    evict: CancellationToken,
}

impl Pool {
    fn new(max: usize) -> Pool {
        Pool {
            slots: Arc::new(Semaphore::new(max)),
            inner: Mutex::new(PoolInner::default()),
            became_idle: Notify::new(),
            eviction_deferred: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        // The state stays consistent across a panic elsewhere: each update is one step.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for a connection just accepted: a free one, else the permit of the
    /// connection idle longest, else that of the connection busy longest with only
    /// unauthenticated requests (either closed for it), else the first one a busy
    /// connection gives back.
    async fn admit(&self, max: usize) -> OwnedSemaphorePermit {
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return permit;
            }
            // Registered before looking, so a connection going idle in between wakes it.
            let mut went_idle = pin!(self.became_idle.notified());
            went_idle.as_mut().enable();
            let mut deferred = pin!(self.eviction_deferred.notified());
            deferred.as_mut().enable();
            let room = {
                let mut inner = self.lock();
                inner.waiting = true;
                let room = inner.evict_one(Instant::now());
                if room == Room::Made {
                    inner.log_pressure(max);
                }
                room
            };
            let evicted = room == Room::Made;
            let grace_over = async {
                match room {
                    Room::At(at) => tokio::time::sleep_until(at).await,
                    Room::Made | Room::None => std::future::pending().await,
                }
            };
            let permit = tokio::select! {
                // The semaphore is never closed, so acquiring fails never.
                permit = self.slots.clone().acquire_owned() => permit.ok(),
                () = &mut went_idle, if !evicted => None,
                () = &mut deferred, if evicted => None,
                () = grace_over => None,
            };
            self.lock().waiting = false;
            if let Some(permit) = permit {
                return permit;
            }
        }
    }

    /// Registers a connection just accepted, idle from now.
    fn register(self: &Arc<Self>) -> Registration {
        let now = Instant::now();
        let evict = CancellationToken::new();
        let mut inner = self.lock();
        let id = inner.next_id;
        inner.next_id += 1;
        inner.connections.insert(
            id,
            Entry {
                in_flight: 0,
                asked: false,
                period: 0,
                authenticated: false,
                idle_since: Some(now),
                unauthenticated_since: None,
                evicted: None,
                evict: evict.clone(),
            },
        );
        inner.idle.insert((now, id));
        Registration {
            pool: self.clone(),
            id,
            evict,
        }
    }

    /// A request begins on connection `id`, unauthenticated; it is busy until the guard
    /// drops. The slot lets its credential check mark it authenticated.
    fn begin(self: &Arc<Self>, id: u64) -> (Busy, ConnectionSlot) {
        let now = Instant::now();
        let mut inner = self.lock();
        let PoolInner {
            connections,
            idle,
            unauthenticated,
            ..
        } = &mut *inner;
        let mut period = 0;
        if let Some(entry) = connections.get_mut(&id) {
            entry.asked = true;
            if entry.in_flight == 0 {
                entry.period += 1;
            }
            entry.in_flight += 1;
            period = entry.period;
            if let Some(since) = entry.idle_since.take() {
                idle.remove(&(since, id));
            }
            if entry.evicted.is_none()
                && !entry.authenticated
                && entry.unauthenticated_since.is_none()
            {
                entry.unauthenticated_since = Some(now);
                unauthenticated.insert((now, id));
            }
        }
        let busy = Busy {
            pool: self.clone(),
            id,
        };
        let slot = ConnectionSlot {
            pool: self.clone(),
            id,
            period,
        };
        (busy, slot)
    }

    /// A request of busy period `period` on connection `id` showed valid credentials.
    fn authenticate(&self, id: u64, period: u64) {
        let mut inner = self.lock();
        let PoolInner {
            connections,
            unauthenticated,
            ..
        } = &mut *inner;
        if let Some(entry) = connections.get_mut(&id)
            && entry.in_flight > 0
            && entry.period == period
        {
            entry.authenticated = true;
            if let Some(since) = entry.unauthenticated_since.take() {
                unauthenticated.remove(&(since, id));
            }
        }
    }

    fn end(&self, id: u64) {
        let mut inner = self.lock();
        let PoolInner {
            connections,
            idle,
            unauthenticated,
            waiting,
            ..
        } = &mut *inner;
        let Some(entry) = connections.get_mut(&id) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        if entry.in_flight > 0 {
            return;
        }
        // The next request authenticates again.
        entry.authenticated = false;
        if let Some(since) = entry.unauthenticated_since.take() {
            unauthenticated.remove(&(since, id));
        }
        if entry.evicted.is_none() {
            let now = Instant::now();
            entry.idle_since = Some(now);
            idle.insert((now, id));
            if *waiting {
                self.became_idle.notify_waiters();
            }
        }
    }

    fn asked(&self, id: u64) -> bool {
        self.lock().connections.get(&id).is_some_and(|e| e.asked)
    }

    fn evicted(&self, id: u64) -> Option<Eviction> {
        self.lock().connections.get(&id).and_then(|e| e.evicted)
    }

    /// Whether connection `id` has requests in flight, and whether none of them is
    /// authenticated.
    fn in_flight(&self, id: u64) -> (bool, bool) {
        self.lock()
            .connections
            .get(&id)
            .map_or((false, false), |e| (e.in_flight > 0, !e.authenticated))
    }

    fn unregister(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(entry) = inner.connections.remove(&id) {
            if let Some(since) = entry.idle_since {
                inner.idle.remove(&(since, id));
            }
            if let Some(since) = entry.unauthenticated_since {
                inner.unauthenticated.remove(&(since, id));
            }
        }
    }
}

impl PoolInner {
    /// Tells the connection idle longest to close, else the one busy longest with only
    /// unauthenticated requests, among those past [`EVICTION_GRACE`].
    fn evict_one(&mut self, now: Instant) -> Room {
        let past_grace = |set: &BTreeSet<(Instant, u64)>| {
            set.first()
                .filter(|(since, _)| *since + EVICTION_GRACE <= now)
                .map(|&(_, id)| id)
        };
        let (id, why) = if let Some(id) = past_grace(&self.idle) {
            self.closed_idle_since_log += 1;
            (id, Eviction::Idle)
        } else if let Some(id) = past_grace(&self.unauthenticated) {
            self.closed_unauthenticated_since_log += 1;
            (id, Eviction::Unauthenticated)
        } else {
            // The first of them (each set is oldest first) to come past its grace.
            return [self.idle.first(), self.unauthenticated.first()]
                .into_iter()
                .flatten()
                .map(|(since, _)| *since + EVICTION_GRACE)
                .min()
                .map_or(Room::None, Room::At);
        };
        if let Some(entry) = self.connections.get_mut(&id) {
            if let Some(since) = entry.idle_since.take() {
                self.idle.remove(&(since, id));
            }
            if let Some(since) = entry.unauthenticated_since.take() {
                self.unauthenticated.remove(&(since, id));
            }
            entry.evicted = Some(why);
            entry.evict.cancel();
        }
        Room::Made
    }

    fn log_pressure(&mut self, max: usize) {
        let now = Instant::now();
        if self
            .last_pressure_log
            .is_none_or(|t| now.duration_since(t) >= PRESSURE_LOG_EVERY)
        {
            tracing::warn!(
                max_connections = max,
                closed_idle = self.closed_idle_since_log,
                closed_unauthenticated = self.closed_unauthenticated_since_log,
                "connection limit reached: closing idle connections first (the longest \
                 idle first), then those busy with unauthenticated requests (the oldest first)"
            );
            self.last_pressure_log = Some(now);
            self.closed_idle_since_log = 0;
            self.closed_unauthenticated_since_log = 0;
        }
    }
}

/// A connection's place in the pool; leaves it when dropped.
struct Registration {
    pool: Arc<Pool>,
    id: u64,
    /// Fired when the pool closes this connection to make room.
    evict: CancellationToken,
}

impl Registration {
    fn asked(&self) -> bool {
        self.pool.asked(self.id)
    }

    fn evicted(&self) -> Option<Eviction> {
        self.pool.evicted(self.id)
    }

    fn in_flight(&self) -> bool {
        self.pool.in_flight(self.id).0
    }

    fn unauthenticated_in_flight(&self) -> bool {
        self.pool.in_flight(self.id) == (true, true)
    }

    /// Says that this connection, told to close, has an authenticated request to finish
    /// first.
    fn defer(&self) {
        self.pool.eviction_deferred.notify_waiters();
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.pool.unregister(self.id);
    }
}

/// A request in flight on its connection, until its response body is sent (or the
/// request is abandoned).
struct Busy {
    pool: Arc<Pool>,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.pool.end(self.id);
    }
}

/// A request body with a deadline for all of it: once the deadline passes with the body
/// not all in, reading it fails with [`BodyTooSlow`] and `expired` is set, which makes
/// the request's answer a 408 (see [`connection`]).
struct Deadlined {
    body: Incoming,
    deadline: Instant,
    /// Made on the first read that has to wait, so a body that is all in at once (most
    /// of them) costs no timer.
    sleep: Option<Pin<Box<Sleep>>>,
    expired: Arc<AtomicBool>,
}

/// Why reading a request body failed: it was still arriving at its deadline.
#[derive(Debug)]
struct BodyTooSlow;

impl std::fmt::Display for BodyTooSlow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request body did not arrive in time")
    }
}

impl std::error::Error for BodyTooSlow {}

impl HttpBody for Deadlined {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = self.get_mut();
        if this.expired.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(BodyTooSlow.into())));
        }
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        ready!(sleep.as_mut().poll(cx));
        this.expired.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err(BodyTooSlow.into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A response body that keeps its connection counted busy until hyper drops it, which
/// is after its last frame (or when the client goes away).
struct Tracked {
    body: Body,
    _busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_limit_leaves_room_for_other_files() {
        assert_eq!(connection_limit(16_384, None), 16_384);
        assert_eq!(connection_limit(16_384, Some(1_048_576)), 16_384);
        assert_eq!(connection_limit(16_384, Some(20_000)), 16_384);
        assert_eq!(connection_limit(16_384, Some(1_024)), 1_024 - 256);
        assert_eq!(connection_limit(16_384, Some(256)), 192);
        assert_eq!(connection_limit(8, Some(1_024)), 8);
        assert_eq!(connection_limit(16_384, Some(1)), 1);
    }

    /// A request begun on `conn`, its credentials checked.
    fn authenticated_request(pool: &Arc<Pool>, conn: &Registration) -> Busy {
        let (busy, slot) = pool.begin(conn.id);
        let mut extensions = Extensions::new();
        extensions.insert(slot);
        mark_authenticated(&extensions);
        busy
    }

    /// A permit for a new connection, and the connection, registered.
    async fn connect(pool: &Arc<Pool>, max: usize) -> (OwnedSemaphorePermit, Registration) {
        let permit = pool.admit(max).await;
        (permit, pool.register())
    }

    /// Spawns an admission into the full `pool`.
    fn admit_later(pool: &Arc<Pool>, max: usize) -> tokio::task::JoinHandle<OwnedSemaphorePermit> {
        let pool = pool.clone();
        tokio::spawn(async move { pool.admit(max).await })
    }

    async fn evicted_within(conn: &Registration) -> Option<Eviction> {
        tokio::time::timeout(Duration::from_secs(10), conn.evict.cancelled())
            .await
            .ok()
            .and_then(|()| conn.evicted())
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_pool_closes_the_connection_idle_longest_and_never_an_authenticated_one() {
        let pool = Arc::new(Pool::new(2));
        let (p1, oldest) = connect(&pool, 2).await;
        let (p2, busy) = connect(&pool, 2).await;
        let _request = authenticated_request(&pool, &busy);
        // Full: the third connection waits until the idle one is told to close.
        let third = admit_later(&pool, 2);
        assert_eq!(evicted_within(&oldest).await, Some(Eviction::Idle));
        assert!(
            !busy.evict.is_cancelled(),
            "an authenticated connection is never evicted"
        );
        drop(oldest);
        drop(p1);
        let _p3 = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("the freed permit goes to the waiting connection")
            .expect("task");
        drop(p2);
    }

    #[tokio::test(start_paused = true)]
    async fn with_every_connection_authenticated_a_new_one_takes_the_first_to_go_idle() {
        let pool = Arc::new(Pool::new(1));
        let (p1, only) = connect(&pool, 1).await;
        let request = authenticated_request(&pool, &only);
        let second = admit_later(&pool, 1);
        tokio::task::yield_now().await;
        assert!(!only.evict.is_cancelled());
        // The response is sent: the connection is idle, so it makes room.
        drop(request);
        assert_eq!(evicted_within(&only).await, Some(Eviction::Idle));
        drop(only);
        drop(p1);
        let _p2 = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("admitted")
            .expect("task");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_go_first_then_the_oldest_unauthenticated_request() {
        let pool = Arc::new(Pool::new(4));
        let (_p1, newer) = connect(&pool, 4).await;
        let (_p2, older) = connect(&pool, 4).await;
        let (_p3, agent) = connect(&pool, 4).await;
        let (_p4, idle) = connect(&pool, 4).await;
        // `older` began its request first, though it connected after `newer`.
        let _older_request = pool.begin(older.id);
        tokio::time::advance(Duration::from_millis(5)).await;
        let _newer_request = pool.begin(newer.id);
        let _agent_request = authenticated_request(&pool, &agent);

        let _fifth = admit_later(&pool, 4);
        assert_eq!(evicted_within(&idle).await, Some(Eviction::Idle));
        let _sixth = admit_later(&pool, 4);
        assert_eq!(
            evicted_within(&older).await,
            Some(Eviction::Unauthenticated)
        );
        assert!(!newer.evict.is_cancelled());
        let _seventh = admit_later(&pool, 4);
        assert_eq!(
            evicted_within(&newer).await,
            Some(Eviction::Unauthenticated)
        );
        // Only the authenticated one is left: the next newcomer waits.
        let eighth = admit_later(&pool, 4);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            !agent.evict.is_cancelled(),
            "an authenticated request was cut"
        );
        assert!(!eighth.is_finished());
        eighth.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn authentication_ends_with_the_request_and_an_old_slot_cannot_mark_a_new_one() {
        let pool = Arc::new(Pool::new(1));
        let (_p1, conn) = connect(&pool, 1).await;
        let (first, old_slot) = pool.begin(conn.id);
        let mut extensions = Extensions::new();
        extensions.insert(old_slot);
        mark_authenticated(&extensions);
        drop(first);
        // The next request on the same connection is unauthenticated again, and the
        // first request's slot, were it kept somewhere, does not vouch for it.
        let (_second, _) = pool.begin(conn.id);
        mark_authenticated(&extensions);
        let _newcomer = admit_later(&pool, 1);
        assert_eq!(evicted_within(&conn).await, Some(Eviction::Unauthenticated));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_chosen_as_idle_that_turns_out_busy_lets_the_newcomer_close_another() {
        let pool = Arc::new(Pool::new(2));
        let (_p1, raced) = connect(&pool, 2).await;
        let (_p2, stranger) = connect(&pool, 2).await;
        let _strangers_request = pool.begin(stranger.id);
        let newcomer = admit_later(&pool, 2);
        assert_eq!(evicted_within(&raced).await, Some(Eviction::Idle));
        // A request came in on it just as it was chosen: while unauthenticated, the
        // connection closes at once ...
        let (request, slot) = pool.begin(raced.id);
        assert!(raced.unauthenticated_in_flight());
        // ... but this one is authenticated, so it is finished first, and the newcomer
        // closes the stranger's connection instead.
        let mut extensions = Extensions::new();
        extensions.insert(slot);
        mark_authenticated(&extensions);
        assert!(!raced.unauthenticated_in_flight());
        raced.defer();
        assert_eq!(
            evicted_within(&stranger).await,
            Some(Eviction::Unauthenticated)
        );
        drop(_strangers_request);
        drop(stranger);
        drop(_p2);
        let _p3 = tokio::time::timeout(Duration::from_secs(10), newcomer)
            .await
            .expect("admitted")
            .expect("task");
        drop(request);
    }

    #[tokio::test(start_paused = true)]
    async fn no_connection_is_closed_to_make_room_within_its_grace() {
        let pool = Arc::new(Pool::new(2));
        let (_p1, fresh) = connect(&pool, 2).await;
        let (_p2, stranger) = connect(&pool, 2).await;
        tokio::time::advance(Duration::from_millis(100)).await;
        let _request = pool.begin(stranger.id);
        let newcomer = admit_later(&pool, 2);
        // Both are within their grace: nothing is closed yet.
        tokio::time::sleep(EVICTION_GRACE - Duration::from_millis(150)).await;
        assert!(!fresh.evict.is_cancelled() && !stranger.evict.is_cancelled());
        // The fresh connection's grace ends first; it had not sent anything.
        let started = Instant::now();
        assert_eq!(evicted_within(&fresh).await, Some(Eviction::Idle));
        assert!(started.elapsed() <= Duration::from_millis(150));
        assert!(!stranger.evict.is_cancelled());
        newcomer.abort();
    }
}
