//! What both backends' group commits of window hits share: a hit waiting in a queue with
//! the channel its caller waits on, and how a written batch answers its callers. Each
//! backend keeps its own queue and writer (a thread on SQLite, a task on PostgreSQL).

use time::OffsetDateTime;
use tokio::sync::oneshot;

use super::{Inserted, StorageError};
use crate::domain::question::Question;

/// A window hit waiting for the next group commit, and where its caller waits.
pub(super) struct QueuedHit {
    pub record: Question,
    pub now: OffsetDateTime,
    reply: oneshot::Sender<Result<Inserted, StorageError>>,
}

/// The caller's end of a [`QueuedHit`].
pub(super) struct Waiting(oneshot::Receiver<Result<Inserted, StorageError>>);

impl QueuedHit {
    /// A hit of `r` asked at `now`, for the queue, and its caller's end.
    pub fn new(r: &Question, now: OffsetDateTime) -> (QueuedHit, Waiting) {
        let (reply, answer) = oneshot::channel();
        let hit = QueuedHit {
            record: r.clone(),
            now,
            reply,
        };
        (hit, Waiting(answer))
    }

    /// Fails this hit with `error`, what stopped its batch.
    pub fn fail(self, error: StorageError) {
        // The caller may have hung up; nothing is left to tell.
        let _ = self.reply.send(Err(error));
    }
}

impl Waiting {
    /// The hit's outcome, once its batch is committed or failed. A hit dropped without
    /// an answer (its writer died or panicked) is a storage error: whether it was stored
    /// is not known, so the agent is told of an error, never of an outcome, and never
    /// waits without end.
    pub async fn outcome(self) -> Result<Inserted, StorageError> {
        self.0.await.unwrap_or_else(|_| {
            Err(StorageError::Batch(
                "the group commit holding this window hit was abandoned".into(),
            ))
        })
    }
}

/// Answers every caller of a written batch: `written` holds, in the batch's order, what
/// storing each hit returned (`None`: stored as it came). A failure fails every hit of
/// the batch (nothing of it was stored, and the database's error would fail the others
/// too); a database out of reach or busy stays one for each caller (a 503 to retry,
/// never an outcome).
pub(super) fn answer(batch: Vec<QueuedHit>, written: Result<Vec<Option<Inserted>>, StorageError>) {
    match written {
        Ok(results) => {
            for (hit, inserted) in batch.into_iter().zip(results) {
                // The caller may have hung up; its hit is stored all the same.
                let _ = hit
                    .reply
                    .send(Ok(inserted.unwrap_or(Inserted::New(hit.record))));
            }
        }
        Err(e) => {
            for hit in batch {
                hit.fail(for_each_caller(&e));
            }
        }
    }
}

/// Each caller's copy of what failed a batch: a database out of reach or busy stays one
/// (a 503 to retry, never an outcome); anything else is the batch's failure.
pub(super) fn for_each_caller(e: &StorageError) -> StorageError {
    let why = e.to_string();
    if e.is_unavailable() {
        StorageError::Database(sqlx::Error::Io(std::io::Error::other(why)))
    } else {
        StorageError::Batch(why)
    }
}
