use serde::{Deserialize, Serialize};

/// Machine-readable error codes; the HTTP status follows from the code (one exhaustive match
/// in the server's `http/error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Malformed or invalid request (400).
    InvalidRequest,
    /// A vector with the wrong number of components (400).
    WrongDimension,
    /// A vector with NaN, ±Inf or no components (400).
    InvalidVector,
    /// `limit`, `ef`, batch size or dimension above the documented maximum (400).
    LimitExceeded,
    /// No credentials, or wrong ones (401).
    Unauthorized,
    /// Credentials that do not allow this request: a write with a read-only key (403).
    Forbidden,
    /// No such collection or point (404).
    NotFound,
    /// A collection with that name exists already (409).
    AlreadyExists,
    /// Request body above the size limit (413).
    PayloadTooLarge,
    /// Body is not JSON (415).
    UnsupportedMediaType,
    /// Too many requests; retry after the `Retry-After` header (429).
    RateLimited,
    /// The request ran past its `timeout` query parameter (408). For a write, whether it was
    /// applied is not known: retry it (upserts and deletes by id are idempotent).
    Timeout,
    /// The server cannot serve this now (starting, shutting down, no live replica) (503).
    Unavailable,
    /// A bug or an I/O failure on the server (500).
    Internal,
    /// A write committed (a majority of its partition's replicas hold it, so it will not be
    /// lost) but held by fewer replicas than its collection's `write_consistency_factor` asks
    /// when the wait ran out (503). Unlike other 503s, its outcome is known: it is applied.
    UnderReplicated,
}

/// The `status` object of an error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorStatus {
    /// Human-readable message, lowercase, naming the offending field or value.
    pub error: String,
    /// Machine-readable code (a Cairn addition; Qdrant clients ignore it).
    #[serde(default = "internal")]
    pub code: ErrorCode,
}

fn internal() -> ErrorCode {
    ErrorCode::Internal
}

/// Error response body: `{"status": {"error": "…", "code": "…"}, "time": …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub status: ErrorStatus,
    /// Seconds the server spent on the call.
    pub time: f64,
}
