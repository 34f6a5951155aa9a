//! Back-pressure on the public port: at most `http.max_requests_in_flight` requests are
//! served at once and at most `http.max_queued_requests` wait for a turn; one more is refused
//! at once with a 429 and `Retry-After`, before any of its work is done. Overload then costs
//! the excess a fast refusal instead of costing everyone a queue that only grows: memory
//! stays bounded by the two limits, and the requests served keep their latency.
//!
//! A query or search that arrives while the search threads' line is full
//! ([`super::searchers`]) is refused here too, before its body is read: under overload most
//! requests are refused, and parsing a vector they will never search would be most of the
//! cost of refusing them.
//!
//! The probes (`/healthz`, `/readyz`) are never held back: an orchestrator must not take a
//! busy node for a dead one.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::{Request, State as AxState};
use axum::middleware::Next;
use axum::response::Response;
use tokio::sync::Semaphore;

use super::State;
use crate::error::ServerError;

/// The limits and the requests under them.
pub struct Admission {
    running: Arc<Semaphore>,
    waiting: AtomicUsize,
    max_running: usize,
    max_waiting: usize,
}

impl Admission {
    /// Room for `max_running` requests at once and `max_waiting` more in line.
    pub fn new(max_running: usize, max_waiting: usize) -> Self {
        Self {
            running: Arc::new(Semaphore::new(max_running)),
            waiting: AtomicUsize::new(0),
            max_running,
            max_waiting,
        }
    }
}

/// One place in the line, given back however the wait ends (a client that hangs up while
/// waiting drops its request's future, and with it this).
struct InLine<'a>(&'a AtomicUsize);

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The middleware (see the module docs).
pub async fn admit(AxState(state): AxState<State>, request: Request, next: Next) -> Response {
    if super::auth::is_probe(request.uri().path()) {
        return next.run(request).await;
    }
    if super::auth::is_search(request.method(), request.uri().path()) && state.searchers.is_full() {
        return axum::response::IntoResponse::into_response(state.searchers.full());
    }
    let admission = &state.admission;
    let _turn = match admission.running.clone().try_acquire_owned() {
        Ok(turn) => turn,
        Err(_) => {
            if admission.waiting.fetch_add(1, Ordering::AcqRel) >= admission.max_waiting {
                admission.waiting.fetch_sub(1, Ordering::AcqRel);
                return axum::response::IntoResponse::into_response(ServerError::Overloaded(
                    format!(
                        "this node is serving {} requests with {} more waiting \
                         (http.max_requests_in_flight, http.max_queued_requests); retry later",
                        admission.max_running, admission.max_waiting
                    ),
                ));
            }
            let _place = InLine(&admission.waiting);
            match admission.running.clone().acquire_owned().await {
                Ok(turn) => turn,
                // The semaphore is never closed.
                Err(_) => return next.run(request).await,
            }
        }
    };
    next.run(request).await
}
