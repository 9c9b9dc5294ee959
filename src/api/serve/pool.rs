//! The open connections: which are idle, which have only unauthenticated requests in
//! flight, and since when, so that a full server closes one of those to make room for a
//! newcomer, never a connection whose request was authenticated and is still running.

use std::collections::{BTreeSet, HashMap};
use std::pin::pin;
use std::sync::{Arc, Mutex};

use axum::http::Extensions;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{EVICTION_GRACE, PRESSURE_LOG_EVERY};

/// A handle on the pool place of the connection a request came on, put in every
/// request's extensions by [`serve`](super::serve): the code that checks the request's
/// credentials marks it authenticated through [`mark_authenticated`].
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
/// a request that did not come through [`serve`](super::serve) (a router called
/// in-process).
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
pub(super) enum Eviction {
    /// It had no request in flight.
    Idle,
    /// Its requests in flight were all unauthenticated.
    Unauthenticated,
}

/// The open connections: which are idle and since when, which have only unauthenticated
/// requests in flight and since when, and the permits they hold.
pub(super) struct Pool {
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
    pub(super) connections: HashMap<u64, Entry>,
    /// Idle connections, the one idle longest first.
    pub(super) idle: BTreeSet<(Instant, u64)>,
    /// Busy connections none of whose requests in flight is authenticated, the one
    /// busy longest first.
    pub(super) unauthenticated: BTreeSet<(Instant, u64)>,
    /// An accept is waiting for a permit: going idle must wake it.
    pub(super) waiting: bool,
    last_pressure_log: Option<Instant>,
    closed_idle_since_log: u64,
    closed_unauthenticated_since_log: u64,
}

struct Entry {
    /// Requests begun and not yet answered in full.
    pub(super) in_flight: u32,
    /// Some request has begun on this connection.
    pub(super) asked: bool,
    /// Counts the times the connection went from idle to busy.
    period: u64,
    /// A request of the current busy period is authenticated.
    pub(super) authenticated: bool,
    /// When it went idle; `None` while busy or once evicted.
    idle_since: Option<Instant>,
    /// When it went busy, while none of its requests is authenticated; `None` otherwise
    /// or once evicted.
    unauthenticated_since: Option<Instant>,
    /// Why the pool closed it, once it has.
    pub(super) evicted: Option<Eviction>,
    pub(super) evict: CancellationToken,
}

impl Pool {
    pub(super) fn new(max: usize) -> Pool {
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
    pub(super) async fn admit(&self, max: usize) -> OwnedSemaphorePermit {
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
    pub(super) fn register(self: &Arc<Self>) -> Registration {
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
    pub(super) fn begin(self: &Arc<Self>, id: u64) -> (Busy, ConnectionSlot) {
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
    pub(super) fn authenticate(&self, id: u64, period: u64) {
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

    pub(super) fn end(&self, id: u64) {
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

    pub(super) fn asked(&self, id: u64) -> bool {
        self.lock().connections.get(&id).is_some_and(|e| e.asked)
    }

    pub(super) fn evicted(&self, id: u64) -> Option<Eviction> {
        self.lock().connections.get(&id).and_then(|e| e.evicted)
    }

    /// Whether connection `id` has requests in flight, and whether none of them is
    /// authenticated.
    pub(super) fn in_flight(&self, id: u64) -> (bool, bool) {
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
pub(super) struct Registration {
    pub(super) pool: Arc<Pool>,
    pub(super) id: u64,
    /// Fired when the pool closes this connection to make room.
    pub(super) evict: CancellationToken,
}

impl Registration {
    pub(super) fn asked(&self) -> bool {
        self.pool.asked(self.id)
    }

    pub(super) fn evicted(&self) -> Option<Eviction> {
        self.pool.evicted(self.id)
    }

    pub(super) fn in_flight(&self) -> bool {
        self.pool.in_flight(self.id).0
    }

    pub(super) fn unauthenticated_in_flight(&self) -> bool {
        self.pool.in_flight(self.id) == (true, true)
    }

    /// Says that this connection, told to close, has an authenticated request to finish
    /// first.
    pub(super) fn defer(&self) {
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
pub(super) struct Busy {
    pub(super) pool: Arc<Pool>,
    pub(super) id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.pool.end(self.id);
    }
}
