//! Admission of new questions: at most [`ADMITTED`] creates (`POST /v1/confirmations`,
//! `POST /v1/interactions`, and so the MCP tools and hosted gateways that call them) are
//! read, judged and stored at once; the others wait here, in arrival order, before their
//! body is read.
//!
//! Why: when thousands of agents arrive together, every create in flight holds its
//! parsed body, its record and its futures until its insert has its turn at the database
//! (SQLite's one writer, PostgreSQL's audit lock), and that burst, not the waiting that
//! follows, was B3's peak memory (BENCHMARKS.md). A create waiting here holds only what
//! its connection holds anyway, its request's head and a place in the queue. Nothing is
//! refused here, and since the database takes creates one at a time anyway, a bounded
//! number in flight keeps it as busy as before: a create is admitted as soon as one
//! ahead of it has its question stored (or fails). Why 64: B2's window hits are creates
//! too, and its 64 clients are group-committed together; fewer in flight would make
//! smaller groups. At shutdown a waiting create gets the 503 any create gets then.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::AppState;
use super::error::ApiError;
use crate::metrics::Metrics;

/// How many creates are read, judged and stored at once (see the module's notes).
pub const ADMITTED: usize = 64;

/// The queue creates wait in; its semaphore is fair, so they are admitted in the order
/// they arrived.
pub struct Queue {
    permits: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

/// A create's turn, held until its question is stored (dropping it admits the next).
pub struct Admitted(#[allow(dead_code)] OwnedSemaphorePermit);

/// The shutdown began while the create waited for its turn.
#[derive(Debug)]
pub struct Stopped;

impl Queue {
    pub fn new(bound: usize, metrics: Arc<Metrics>) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(bound)),
            metrics,
        }
    }

    /// Waits for a turn, behind every create that arrived earlier, or until `stop`.
    pub async fn turn(&self, stop: &CancellationToken) -> Result<Admitted, Stopped> {
        // A free permit exists only while nobody waits (a released permit goes to the
        // first waiter), so taking it here never jumps the queue.
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(Admitted(permit));
        }
        let _waiting = self.metrics.create_waiting();
        tokio::select! {
            permit = self.permits.clone().acquire_owned() => permit.map(Admitted).map_err(|_| Stopped),
            () = stop.cancelled() => Err(Stopped),
        }
    }
}

impl FromRequestParts<AppState> for Admitted {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state.admission.turn(&state.stop).await.map_err(|Stopped| {
            ApiError::Unavailable(
                "the service is shutting down; retry (nothing was stored for this request)"
                    .to_owned(),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    fn queue_of(bound: usize) -> Arc<Queue> {
        Arc::new(Queue::new(bound, Arc::new(Metrics::new())))
    }

    /// Waiters queued one after another, each recording when it was admitted.
    async fn queue(
        gate: &Arc<Queue>,
        stop: &CancellationToken,
        n: usize,
        order: &Arc<Mutex<Vec<usize>>>,
    ) -> Vec<tokio::task::JoinHandle<Result<Admitted, Stopped>>> {
        let mut waiters = Vec::new();
        for i in 0..n {
            let (gate, stop, order) = (gate.clone(), stop.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let admitted = gate.turn(&stop).await?;
                order.lock().unwrap().push(i);
                Ok(admitted)
            }));
            // Each waiter is queued before the next arrives.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        waiters
    }

    #[tokio::test]
    async fn creates_beyond_the_bound_wait_and_are_admitted_in_arrival_order() {
        let (gate, stop) = (queue_of(2), CancellationToken::new());
        let first = gate.turn(&stop).await.unwrap();
        let second = gate.turn(&stop).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters = queue(&gate, &stop, 4, &order).await;
        assert!(order.lock().unwrap().is_empty(), "the bound holds them");
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(*order.lock().unwrap(), [0], "one turn freed, one admitted");
        drop(second);
        for w in waiters {
            // Each admitted create finishes, admitting the next.
            drop(w.await.unwrap().unwrap());
        }
        assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
    }

    #[tokio::test]
    async fn a_create_waiting_at_shutdown_is_told_so_and_takes_no_turn() {
        let (gate, stop) = (queue_of(1), CancellationToken::new());
        let held = gate.turn(&stop).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let waiters = queue(&gate, &stop, 2, &order).await;
        stop.cancel();
        for w in waiters {
            assert!(w.await.unwrap().is_err());
        }
        drop(held);
        assert!(order.lock().unwrap().is_empty());
        // Nothing was lost: the turn is free again.
        assert!(gate.turn(&CancellationToken::new()).await.is_ok());
    }
}
