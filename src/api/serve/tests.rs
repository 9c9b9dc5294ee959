use axum::http::Extensions;

use super::pool::{Busy, Eviction, Pool, Registration};
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
