//! The client's one error type.

use std::time::Duration;

use cairn_api::ErrorCode;

/// Everything a call can fail with. Server-side refusals keep the HTTP status, Cairn's
/// machine-readable code and the server's message, so a caller can match on the code and
/// show the message as is.
///
/// ```no_run
/// use cairn_client::api::{Distance, ErrorCode};
/// use cairn_client::{Client, CreateCollectionBuilder, Error};
///
/// # async fn run() -> Result<(), Error> {
/// let client = Client::new("http://127.0.0.1:6333")?;
/// match client
///     .create_collection(CreateCollectionBuilder::new("docs", 384, Distance::Cosine))
///     .await
/// {
///     Ok(()) => {}
///     // Created earlier: carry on with the existing collection.
///     Err(e) if e.code() == Some(ErrorCode::AlreadyExists) => {}
///     Err(e) => return Err(e),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server refused the request (4xx, or a 5xx other than 503).
    #[error("cairn answered {status} ({code:?}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// Cairn's error code.
        code: ErrorCode,
        /// The server's message, naming the offending field or value.
        message: String,
    },
    /// Too many requests (429); `retry_after` is the server's `Retry-After`, when it sent one.
    #[error("rate limited (retry after {retry_after:?}): {message}")]
    RateLimited {
        /// How long the server asked the client to wait.
        retry_after: Option<Duration>,
        /// The server's message.
        message: String,
    },
    /// The server cannot serve now (503: starting, shutting down, no live replica).
    #[error("cairn is unavailable: {message}")]
    Unavailable {
        /// The server's message.
        message: String,
    },
    /// No answer within the request's timeout.
    #[error("no answer from {url} within {timeout:?}")]
    Timeout {
        /// The base URL that did not answer.
        url: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// No connection could be made to any base URL.
    #[error("cannot connect to {url}: {source}")]
    Connection {
        /// The last base URL tried.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The connection broke mid-request, or another transport failure.
    #[error("request to {url} failed: {source}")]
    Transport {
        /// The base URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The server answered with a body this client cannot read.
    #[error("unreadable answer from {url}: {message}")]
    Decode {
        /// The base URL.
        url: String,
        /// What was wrong with it.
        message: String,
    },
    /// The caller passed something the client cannot send (caught before any request).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    /// Cairn's error code, when the server sent one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(*code),
            Error::RateLimited { .. } => Some(ErrorCode::RateLimited),
            Error::Unavailable { .. } => Some(ErrorCode::Unavailable),
            Error::Timeout { .. }
            | Error::Connection { .. }
            | Error::Transport { .. }
            | Error::Decode { .. }
            | Error::InvalidArgument(_) => None,
        }
    }

    /// HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api { status, .. } => Some(*status),
            Error::RateLimited { .. } => Some(429),
            Error::Unavailable { .. } => Some(503),
            Error::Timeout { .. }
            | Error::Connection { .. }
            | Error::Transport { .. }
            | Error::Decode { .. }
            | Error::InvalidArgument(_) => None,
        }
    }

    /// Whether the same request may succeed later (rate limits, unavailability, timeouts,
    /// broken connections) — not whether it is *safe* to resend; the client decides that per
    /// operation.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::RateLimited { .. }
            | Error::Unavailable { .. }
            | Error::Timeout { .. }
            | Error::Connection { .. }
            | Error::Transport { .. } => true,
            Error::Api { status, .. } => matches!(status, 502 | 504),
            Error::Decode { .. } | Error::InvalidArgument(_) => false,
        }
    }

    /// A short, stable name of the error's kind (for counting errors by kind in reports).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Api { status, .. } if *status < 500 => "client_error",
            Error::Api { .. } => "server_error",
            Error::RateLimited { .. } => "rate_limited",
            Error::Unavailable { .. } => "unavailable",
            Error::Timeout { .. } => "timeout",
            Error::Connection { .. } => "connection",
            Error::Transport { .. } => "transport",
            Error::Decode { .. } => "decode",
            Error::InvalidArgument(_) => "invalid_argument",
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, Error>;
