//! Qdrant's `timeout` query parameter as a deadline: a request that names one is given up
//! once it has run that many seconds, its wait for a turn under back-pressure
//! ([`super::admission`]) included, and answers 408 with the JSON error body. A client that
//! has stopped waiting is then no longer served at the expense of those still waiting.
//!
//! Work already handed to the blocking pool (a RocksDB commit) finishes in the background, so
//! a write that times out may or may not be applied: the 408 says so, and a retry is safe
//! (upserts and deletes by id are idempotent). A search running on the worker cannot be
//! interrupted mid-graph; its answer is then discarded at the deadline.

use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ServerError;

/// The `timeout` of a query string, in whole seconds as Qdrant takes it (at least 1).
fn timeout_of(query: Option<&str>) -> Result<Option<Duration>, ServerError> {
    let Some(value) = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("timeout="))
    else {
        return Ok(None);
    };
    match value.parse::<u64>() {
        Ok(secs) if secs >= 1 => Ok(Some(Duration::from_secs(secs))),
        _ => Err(ServerError::InvalidRequest(format!(
            "query parameter timeout must be a whole number of seconds, at least 1, got \
             {value:?}"
        ))),
    }
}

/// The middleware (module docs).
pub async fn deadline(request: Request, next: Next) -> Response {
    let timeout = match timeout_of(request.uri().query()) {
        Ok(Some(timeout)) => timeout,
        Ok(None) => return next.run(request).await,
        Err(e) => return e.into_response(),
    };
    let write = !super::auth::reads_only(request.method(), request.uri().path());
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ServerError::Timeout(format!(
            "the request ran past its timeout of {}s{}",
            timeout.as_secs(),
            if write {
                "; the write may or may not have been applied, and retrying it is safe"
            } else {
                ""
            }
        ))
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_is_whole_seconds_of_at_least_one() {
        assert_eq!(timeout_of(None).unwrap(), None);
        assert_eq!(timeout_of(Some("wait=true")).unwrap(), None);
        assert_eq!(
            timeout_of(Some("wait=true&timeout=3")).unwrap(),
            Some(Duration::from_secs(3))
        );
        for bad in [
            "timeout=0",
            "timeout=",
            "timeout=1.5",
            "timeout=-1",
            "timeout=x",
        ] {
            let e = timeout_of(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("timeout must be"), "{bad}: {e}");
        }
    }
}
