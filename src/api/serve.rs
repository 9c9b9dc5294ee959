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
//! - **Connection limit.** At most `max_connections` sockets at once, each holding a
//!   semaphore permit from accept to close; lowered at start to what the open-file limit
//!   leaves after [`RESERVED_FDS`].
//! - **Idle connections go first.** When every permit is taken, a new connection closes
//!   the connection that has been idle longest (no request in flight: a fresh socket
//!   still sending its headers, or a kept-alive one between requests) and takes its
//!   permit. So idle and slow sockets, however many, delay `/healthz` and the Telegram
//!   webhook route by no more than one close. Only when every connection has a request
//!   in flight does a new one wait for one to end; what an agent may hold in flight is
//!   bounded by its `max_pending`, `max_streams` and `max_long_polls`.
//!
//! A request is in flight from the moment hyper hands it over until its response body
//! has been sent (an event stream is in flight as long as it is open).
//!
//! Shutdown: the listener stops accepting, idle connections are closed, and each busy
//! one is closed after its response (hyper's graceful shutdown); event streams and
//! long-polls end on the same token, so the wait is bounded.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::config::HttpLimits;

/// File descriptors kept out of the connection limit for everything else the process
/// opens: the database and its WAL, the Telegram client, webhook deliveries, Redis.
pub const RESERVED_FDS: u64 = 256;

/// How often, at most, the log says the connection limit is being hit.
const PRESSURE_LOG_EVERY: Duration = Duration::from_secs(60);

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
/// is evicted while idle, or the service stops.
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
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = pool.begin(id);
            let router = router.clone();
            async move {
                let response = router
                    .oneshot(request)
                    .await
                    .unwrap_or_else(|never| match never {});
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
                // As at shutdown: closed at once unless a request has begun.
                if !registration.asked() {
                    return;
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

/// The open connections: which are idle and since when, and the permits they hold.
struct Pool {
    slots: Arc<Semaphore>,
    inner: Mutex<PoolInner>,
    /// Wakes an accept that waits for a full pool, when a connection goes idle.
    became_idle: Notify,
}

#[derive(Default)]
struct PoolInner {
    next_id: u64,
    connections: HashMap<u64, Entry>,
    /// Idle connections, the one idle longest first.
    idle: BTreeSet<(Instant, u64)>,
    /// An accept is waiting for a permit: going idle must wake it.
    waiting: bool,
    last_pressure_log: Option<Instant>,
    evicted_since_log: u64,
}

struct Entry {
    /// Requests begun and not yet answered in full.
    in_flight: u32,
    /// Some request has begun on this connection.
    asked: bool,
    /// When it went idle; `None` while busy or once evicted.
    idle_since: Option<Instant>,
    evict: CancellationToken,
}

impl Pool {
    fn new(max: usize) -> Pool {
        Pool {
            slots: Arc::new(Semaphore::new(max)),
            inner: Mutex::new(PoolInner::default()),
            became_idle: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        // The state stays consistent across a panic elsewhere: each update is one step.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for a connection just accepted: a free one, else the permit of the
    /// connection idle longest (closed for it), else the first one a busy connection
    /// gives back.
    async fn admit(&self, max: usize) -> OwnedSemaphorePermit {
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return permit;
            }
            // Registered before looking, so a connection going idle in between wakes it.
            let mut went_idle = pin!(self.became_idle.notified());
            went_idle.as_mut().enable();
            let evicted = {
                let mut inner = self.lock();
                inner.waiting = true;
                let evicted = inner.evict_oldest_idle();
                if evicted {
                    inner.log_pressure(max);
                }
                evicted
            };
            let permit = tokio::select! {
                // The semaphore is never closed, so acquiring fails never.
                permit = self.slots.clone().acquire_owned() => permit.ok(),
                () = &mut went_idle, if !evicted => None,
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
                idle_since: Some(now),
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

    /// A request begins on connection `id`; it is busy until the guard drops.
    fn begin(self: &Arc<Self>, id: u64) -> Busy {
        let mut inner = self.lock();
        let PoolInner {
            connections, idle, ..
        } = &mut *inner;
        if let Some(entry) = connections.get_mut(&id) {
            entry.asked = true;
            entry.in_flight += 1;
            if let Some(since) = entry.idle_since.take() {
                idle.remove(&(since, id));
            }
        }
        Busy {
            pool: self.clone(),
            id,
        }
    }

    fn end(&self, id: u64) {
        let mut inner = self.lock();
        let PoolInner {
            connections,
            idle,
            waiting,
            ..
        } = &mut *inner;
        let Some(entry) = connections.get_mut(&id) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        if entry.in_flight == 0 && !entry.evict.is_cancelled() {
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

    fn unregister(&self, id: u64) {
        let mut inner = self.lock();
        if let Some(entry) = inner.connections.remove(&id)
            && let Some(since) = entry.idle_since
        {
            inner.idle.remove(&(since, id));
        }
    }
}

impl PoolInner {
    /// Tells the connection idle longest to close; false when none is idle.
    fn evict_oldest_idle(&mut self) -> bool {
        let Some((_, id)) = self.idle.pop_first() else {
            return false;
        };
        if let Some(entry) = self.connections.get_mut(&id) {
            entry.idle_since = None;
            entry.evict.cancel();
        }
        self.evicted_since_log += 1;
        true
    }

    fn log_pressure(&mut self, max: usize) {
        let now = Instant::now();
        if self
            .last_pressure_log
            .is_none_or(|t| now.duration_since(t) >= PRESSURE_LOG_EVERY)
        {
            tracing::warn!(
                max_connections = max,
                closed_idle = self.evicted_since_log,
                "connection limit reached: closing idle connections, the longest idle first"
            );
            self.last_pressure_log = Some(now);
            self.evicted_since_log = 0;
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

    #[tokio::test]
    async fn a_full_pool_closes_the_connection_idle_longest_and_never_a_busy_one() {
        let pool = Arc::new(Pool::new(2));
        let p1 = pool.admit(2).await;
        let oldest = pool.register();
        let p2 = pool.admit(2).await;
        let busy = pool.register();
        let _request = pool.begin(busy.id);
        // Full: the third connection waits until the idle one is told to close.
        let third = tokio::spawn({
            let pool = pool.clone();
            async move { pool.admit(2).await }
        });
        tokio::time::timeout(Duration::from_secs(10), oldest.evict.cancelled())
            .await
            .expect("the idle connection is evicted");
        assert!(
            !busy.evict.is_cancelled(),
            "a busy connection is never evicted"
        );
        drop(oldest);
        drop(p1);
        let _p3 = tokio::time::timeout(Duration::from_secs(10), third)
            .await
            .expect("the freed permit goes to the waiting connection")
            .expect("task");
        drop(p2);
    }

    #[tokio::test]
    async fn with_every_connection_busy_a_new_one_takes_the_first_to_go_idle() {
        let pool = Arc::new(Pool::new(1));
        let p1 = pool.admit(1).await;
        let only = pool.register();
        let request = pool.begin(only.id);
        let second = tokio::spawn({
            let pool = pool.clone();
            async move { pool.admit(1).await }
        });
        tokio::task::yield_now().await;
        assert!(!only.evict.is_cancelled());
        // The response is sent: the connection is idle, so it makes room.
        drop(request);
        tokio::time::timeout(Duration::from_secs(10), only.evict.cancelled())
            .await
            .expect("evicted once idle");
        drop(only);
        drop(p1);
        let _p2 = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("admitted")
            .expect("task");
    }
}
