//! The request and response bodies of a served connection: a request body read against
//! one deadline for all of it, and a response body that keeps its connection counted
//! busy until it is sent.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::pool::Busy;

/// A request body with a deadline for all of it: once the deadline passes with the body
/// not all in, reading it fails with [`BodyTooSlow`] and `expired` is set, which makes
/// the request's answer a 408 (see [`connection`]).
pub(super) struct Deadlined {
    pub(super) body: Incoming,
    pub(super) deadline: Instant,
    /// Made on the first read that has to wait, so a body that is all in at once (most
    /// of them) costs no timer.
    pub(super) sleep: Option<Pin<Box<Sleep>>>,
    pub(super) expired: Arc<AtomicBool>,
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
pub(super) struct Tracked {
    pub(super) body: Body,
    pub(super) _busy: Busy,
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
