//! One request, sent with failover across base URLs and retried with backoff where safe.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use cairn_api::{ErrorBody, ErrorCode, Response};
use reqwest::{header, Method, StatusCode};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Whether a request may be sent again after an answer was lost.
///
/// A request that never reached a server (the connection was refused) is always safe to send
/// elsewhere. Past that point only idempotent requests are resent: reads, and writes whose
/// repetition leaves the same state (upserts and deletes by id or filter). Creating or deleting
/// a collection is not resent: the second attempt would fail with 409/404 and hide the outcome
/// of the first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    /// Safe to resend after any transient failure.
    Idempotent,
    /// Resent only when the request provably never left the client.
    Once,
}

/// Retry settings (see [`crate::ClientBuilder::retries`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RetryPolicy {
    /// Extra attempts after the first.
    pub max_retries: u32,
    /// Backoff before the first retry; doubles each time.
    pub initial_backoff: Duration,
    /// Upper bound of one backoff.
    pub max_backoff: Duration,
}

/// The shared state of a client: connection pool, base URLs and which one is preferred.
#[derive(Debug)]
pub(crate) struct Transport {
    pub http: reqwest::Client,
    pub urls: Vec<String>,
    /// Index into `urls` of the base URL that answered last; failover moves it on.
    preferred: AtomicUsize,
    pub api_key: Option<String>,
    pub retry: RetryPolicy,
    /// State of the jitter generator (splitmix64).
    jitter: AtomicU64,
}

/// What one attempt ended in.
enum Attempt<T> {
    Done(T),
    /// Failed; `move_on` says whether to try the next base URL, `sent` whether the request
    /// may have reached a server.
    Failed {
        error: Error,
        move_on: bool,
        sent: bool,
        wait: Option<Duration>,
    },
}

impl Transport {
    pub fn new(
        http: reqwest::Client,
        urls: Vec<String>,
        api_key: Option<String>,
        retry: RetryPolicy,
    ) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9e37_79b9_7f4a_7c15);
        Self {
            http,
            urls,
            preferred: AtomicUsize::new(0),
            api_key,
            retry,
            jitter: AtomicU64::new(seed),
        }
    }

    /// Sends `body` (already JSON) and decodes the envelope's `result`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
        timeout: Duration,
    ) -> Result<T> {
        self.call_decoding(method, path, body, idempotency, timeout, |bytes| {
            serde_json::from_slice::<Response<T>>(bytes).map(|envelope| envelope.result)
        })
        .await
    }

    /// Sends a request whose answer has no envelope (`GET /`, as in Qdrant) and decodes it.
    pub async fn call_bare<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        idempotency: Idempotency,
        timeout: Duration,
    ) -> Result<T> {
        self.call_decoding(method, path, None, idempotency, timeout, |bytes| {
            serde_json::from_slice::<T>(bytes)
        })
        .await
    }

    async fn call_decoding<T>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        idempotency: Idempotency,
        timeout: Duration,
        decode: fn(&[u8]) -> serde_json::Result<T>,
    ) -> Result<T> {
        let mut attempt = 0u32;
        loop {
            let index = self.preferred.load(Ordering::Relaxed) % self.urls.len();
            let base = &self.urls[index];
            match self
                .attempt(method.clone(), base, path, body.clone(), timeout, decode)
                .await
            {
                Attempt::Done(value) => return Ok(value),
                Attempt::Failed {
                    error,
                    move_on,
                    sent,
                    wait,
                } => {
                    if move_on && self.urls.len() > 1 {
                        // Only the first failing caller moves the preference on.
                        let _ = self.preferred.compare_exchange(
                            index,
                            (index + 1) % self.urls.len(),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                    let resend = !sent || idempotency == Idempotency::Idempotent;
                    if !resend || !error.is_transient() || attempt >= self.retry.max_retries {
                        return Err(error);
                    }
                    let backoff = self.backoff(attempt);
                    let pause = wait.map_or(backoff, |w| w.max(backoff));
                    tracing::debug!(%error, attempt, ?pause, "retrying");
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
            }
        }
    }

    async fn attempt<T>(
        &self,
        method: Method,
        base: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
        decode: fn(&[u8]) -> serde_json::Result<T>,
    ) -> Attempt<T> {
        let mut request = self
            .http
            .request(method, format!("{base}{path}"))
            .timeout(timeout);
        if let Some(key) = &self.api_key {
            request = request.header("api-key", key);
        }
        if let Some(body) = body {
            request = request
                .header(header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return transport_failure(base, e, timeout),
        };
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) => return transport_failure(base, e, timeout),
        };
        if status.is_success() {
            return match decode(&bytes) {
                Ok(value) => Attempt::Done(value),
                Err(e) => Attempt::Failed {
                    error: Error::Decode {
                        url: base.to_owned(),
                        message: format!("{e} in {}", preview(&bytes)),
                    },
                    move_on: false,
                    sent: true,
                    wait: None,
                },
            };
        }
        let error = server_error(status, &bytes, retry_after);
        Attempt::Failed {
            move_on: status == StatusCode::SERVICE_UNAVAILABLE,
            // A 503 or 429 means the server did not act on the request.
            sent: !matches!(
                status,
                StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
            ),
            wait: retry_after,
            error,
        }
    }

    /// Full-jitter exponential backoff: uniform in [0, min(max, initial · 2^attempt)].
    fn backoff(&self, attempt: u32) -> Duration {
        let cap = self
            .retry
            .initial_backoff
            .saturating_mul(1u32.checked_shl(attempt).unwrap_or(u32::MAX))
            .min(self.retry.max_backoff);
        let mut z = self
            .jitter
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        cap.mul_f64((z >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn transport_failure<T>(base: &str, e: reqwest::Error, timeout: Duration) -> Attempt<T> {
    let url = base.to_owned();
    if e.is_connect() {
        // Nothing reached the server: safe to send anywhere, and this base URL is down.
        return Attempt::Failed {
            error: Error::Connection { url, source: e },
            move_on: true,
            sent: false,
            wait: None,
        };
    }
    let error = if e.is_timeout() {
        Error::Timeout { url, timeout }
    } else {
        Error::Transport { url, source: e }
    };
    Attempt::Failed {
        error,
        move_on: true,
        sent: true,
        wait: None,
    }
}

fn server_error(status: StatusCode, bytes: &[u8], retry_after: Option<Duration>) -> Error {
    let (code, message) = match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => (body.status.code, body.status.error),
        // Not Cairn's error body (a proxy in between, say): keep what it said.
        Err(_) => (code_for(status), preview(bytes)),
    };
    match status {
        StatusCode::TOO_MANY_REQUESTS => Error::RateLimited {
            retry_after,
            message,
        },
        StatusCode::SERVICE_UNAVAILABLE => Error::Unavailable { message },
        _ => Error::Api {
            status: status.as_u16(),
            code,
            message,
        },
    }
}

/// The code a status implies, for error bodies that carry none.
fn code_for(status: StatusCode) -> ErrorCode {
    match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        408 => ErrorCode::Timeout,
        409 => ErrorCode::AlreadyExists,
        413 => ErrorCode::PayloadTooLarge,
        415 => ErrorCode::UnsupportedMediaType,
        429 => ErrorCode::RateLimited,
        503 => ErrorCode::Unavailable,
        400..=499 => ErrorCode::InvalidRequest,
        _ => ErrorCode::Internal,
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not used by Cairn and is ignored).
fn retry_after(headers: &header::HeaderMap) -> Option<Duration> {
    headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// The start of a body, for messages.
fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]);
    if bytes.len() > 200 {
        format!("{text}…")
    } else {
        text.into_owned()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn error_bodies_map_to_typed_errors() {
        let body = br#"{"status":{"error":"vector has 3 dimensions, expected 4","code":"wrong_dimension"},"time":0.0}"#;
        let error = server_error(StatusCode::BAD_REQUEST, body, None);
        let Error::Api {
            status,
            code,
            message,
        } = error
        else {
            panic!("{error:?}")
        };
        assert_eq!(status, 400);
        assert_eq!(code, ErrorCode::WrongDimension);
        assert!(message.contains("expected 4"));
        let limited = server_error(
            StatusCode::TOO_MANY_REQUESTS,
            b"slow down",
            Some(Duration::from_secs(2)),
        );
        assert!(matches!(
            limited,
            Error::RateLimited { retry_after: Some(d), .. } if d == Duration::from_secs(2)
        ));
        assert!(matches!(
            server_error(StatusCode::SERVICE_UNAVAILABLE, b"", None),
            Error::Unavailable { .. }
        ));
        assert_eq!(
            server_error(StatusCode::NOT_FOUND, b"<html>", None).code(),
            Some(ErrorCode::NotFound)
        );
    }

    #[test]
    fn backoff_stays_within_its_cap() {
        let t = Transport::new(
            reqwest::Client::new(),
            vec!["http://x".into()],
            None,
            RetryPolicy {
                max_retries: 5,
                initial_backoff: Duration::from_millis(10),
                max_backoff: Duration::from_millis(100),
            },
        );
        for attempt in 0..40 {
            let cap = Duration::from_millis((10u64 << attempt.min(20)).min(100));
            assert!(t.backoff(attempt) <= cap, "attempt {attempt}");
        }
        let draws: std::collections::HashSet<_> = (0..20).map(|_| t.backoff(3)).collect();
        assert!(draws.len() > 10, "jitter must spread retries");
    }
}
