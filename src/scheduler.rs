//! Deadlines: one task that sleeps until the nearest deadline, not a timer per request
//! and not a poll of the table.
//!
//! The shape is mini-redis's expiry task: a sorted set of `(deadline, id)` behind a
//! mutex and a [`Notify`] that wakes the task early when a nearer deadline is inserted.
//! The task only reports due ids; what a deadline *means* (a timeout decision) is the
//! service's business, and a due id whose request was already decided is a no-op there.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::domain::ids::QuestionId;

#[derive(Default)]
pub struct Deadlines {
    entries: Mutex<BTreeSet<(Instant, QuestionId)>>,
    wake: Notify,
}

impl Deadlines {
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms a deadline. Wakes the task only when this one is now the nearest.
    pub fn schedule(&self, id: QuestionId, at: Instant) {
        let nearest = {
            // A poisoned lock means a panic while holding it; the set itself is still
            // consistent (every operation on it is a single insert/remove).
            let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            let earlier = entries.first().is_none_or(|(first, _)| at < *first);
            entries.insert((at, id));
            earlier
        };
        if nearest {
            self.wake.notify_one();
        }
    }

    /// Forgets every deadline (this process no longer keeps them: see `service::lead`).
    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes and returns every id due at `now`, and the next deadline after them.
    fn take_due(&self, now: Instant) -> (Vec<QuestionId>, Option<Instant>) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut due = Vec::new();
        while let Some((at, _)) = entries.first() {
            if *at > now {
                break;
            }
            if let Some((_, id)) = entries.pop_first() {
                due.push(id);
            }
        }
        (due, entries.first().map(|(at, _)| *at))
    }

    /// Runs until `stop`: calls `on_due` for every deadline as it passes.
    pub async fn run<F, Fut>(&self, stop: CancellationToken, on_due: F)
    where
        F: Fn(QuestionId) -> Fut,
        Fut: Future<Output = ()>,
    {
        loop {
            let (due, next) = self.take_due(Instant::now());
            for id in due {
                on_due(id).await;
            }
            // `notified()` is created before sleeping, and `notify_one` stores a permit
            // when nobody waits, so a deadline inserted right now is never missed.
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = sleep_until_or_forever(next) => {}
            }
        }
    }
}

async fn sleep_until_or_forever(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::mpsc;

    fn spawn(d: Arc<Deadlines>) -> (mpsc::UnboundedReceiver<QuestionId>, CancellationToken) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move {
            d.run(s, |id| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(id);
                }
            })
            .await
        });
        (rx, stop)
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_fire_in_order_at_their_time_and_not_before() {
        let d = Arc::new(Deadlines::new());
        let (mut rx, stop) = spawn(d.clone());
        let start = Instant::now();
        let (a, b) = (QuestionId::generate(), QuestionId::generate());
        d.schedule(b.clone(), start + Duration::from_secs(20));
        d.schedule(a.clone(), start + Duration::from_secs(10));
        assert_eq!(rx.recv().await.unwrap(), a);
        assert_eq!(Instant::now() - start, Duration::from_secs(10));
        assert_eq!(rx.recv().await.unwrap(), b);
        assert_eq!(Instant::now() - start, Duration::from_secs(20));
        assert!(d.is_empty());
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_nearer_deadline_wakes_the_sleeping_task_early() {
        let d = Arc::new(Deadlines::new());
        let (mut rx, stop) = spawn(d.clone());
        let start = Instant::now();
        let far = QuestionId::generate();
        d.schedule(far.clone(), start + Duration::from_secs(3600));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let near = QuestionId::generate();
        d.schedule(near.clone(), start + Duration::from_secs(5));
        assert_eq!(rx.recv().await.unwrap(), near);
        assert_eq!(Instant::now() - start, Duration::from_secs(5));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_past_fires_at_once() {
        let d = Arc::new(Deadlines::new());
        let (mut rx, stop) = spawn(d.clone());
        let id = QuestionId::generate();
        d.schedule(id.clone(), Instant::now());
        assert_eq!(rx.recv().await.unwrap(), id);
        stop.cancel();
    }
}
