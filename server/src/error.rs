//! The server's error type. Every variant has an [`ErrorCode`]; `http/error.rs` turns codes
//! into statuses in one exhaustive match, so a new variant cannot be forgotten there.

use cairn_api::{ErrorCode, PointId};
use cairn_index::IndexError;
use cairn_storage::StorageError;

/// Errors of request handling and collection management.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// No collection of that name.
    #[error("collection `{0}` not found")]
    CollectionNotFound(String),
    /// No point with that id.
    #[error("point {0} not found")]
    PointNotFound(PointId),
    /// Creating a collection that exists.
    #[error("collection `{0}` already exists")]
    CollectionExists(String),
    /// No alias of that name.
    #[error("alias `{0}` not found")]
    AliasNotFound(String),
    /// No snapshot of that name.
    #[error("snapshot `{0}` not found")]
    SnapshotNotFound(String),
    /// A name taken by an alias or a collection.
    #[error("{0}")]
    NameTaken(String),
    /// Credentials that do not reach what the request names (a 403).
    #[error("{0}")]
    Forbidden(String),
    /// A request that does not make sense; the message names the field.
    #[error("{0}")]
    InvalidRequest(String),
    /// A vector with the wrong dimension.
    #[error("wrong vector dimension at {field}: expected {expected}, got {got}")]
    WrongDimension {
        /// Where in the request.
        field: String,
        /// The collection's dimension.
        expected: usize,
        /// What was sent.
        got: usize,
    },
    /// NaN, infinity or an empty vector.
    #[error("{0}")]
    InvalidVector(String),
    /// Above a documented maximum.
    #[error("{0}")]
    LimitExceeded(String),
    /// Too much work in flight: the client should back off and retry (429).
    #[error("{0}")]
    Overloaded(String),
    /// The request ran past its `timeout` query parameter.
    #[error("{0}")]
    Timeout(String),
    /// The request body is larger than `http.max_body_bytes`.
    #[error("request body is larger than the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// Not ready, shutting down, or a background task died.
    #[error("{0}")]
    Unavailable(String),
    /// A write committed, but fewer replicas than `write_consistency_factor` held it in time.
    #[error("{0}")]
    UnderReplicated(String),
    /// RocksDB failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// An index operation failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A bug.
    #[error("internal error: {0}")]
    Internal(String),
    /// Another node refused a request this node relayed: its code and message, unchanged, so
    /// a client gets the status it would get from that node directly.
    #[error("{message}")]
    Relayed {
        /// The other node's error code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
}

/// A Qdrant field Cairn refuses rather than ignore is an invalid request naming the field.
impl From<cairn_api::Unsupported> for ServerError {
    fn from(refused: cairn_api::Unsupported) -> Self {
        ServerError::InvalidRequest(refused.to_string())
    }
}

impl ServerError {
    /// The same error about a part of a larger request (`operations[3]` of a batch): a
    /// message naming a field gets the part's path before it; other errors stay as they are.
    pub fn within(self, part: &str) -> Self {
        match self {
            ServerError::InvalidRequest(m) => ServerError::InvalidRequest(format!("{part}.{m}")),
            ServerError::InvalidVector(m) => ServerError::InvalidVector(format!("{part}.{m}")),
            ServerError::LimitExceeded(m) => ServerError::LimitExceeded(format!("{part}.{m}")),
            ServerError::WrongDimension {
                field,
                expected,
                got,
            } => ServerError::WrongDimension {
                field: format!("{part}.{field}"),
                expected,
                got,
            },
            other @ (ServerError::CollectionNotFound(_)
            | ServerError::PointNotFound(_)
            | ServerError::CollectionExists(_)
            | ServerError::AliasNotFound(_)
            | ServerError::SnapshotNotFound(_)
            | ServerError::Forbidden(_)
            | ServerError::NameTaken(_)
            | ServerError::Overloaded(_)
            | ServerError::Timeout(_)
            | ServerError::PayloadTooLarge(_)
            | ServerError::Unavailable(_)
            | ServerError::UnderReplicated(_)
            | ServerError::Storage(_)
            | ServerError::Index(_)
            | ServerError::Internal(_)
            | ServerError::Relayed { .. }) => other,
        }
    }

    /// The machine-readable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ServerError::CollectionNotFound(_) | ServerError::PointNotFound(_) => {
                ErrorCode::NotFound
            }
            ServerError::CollectionExists(_) | ServerError::NameTaken(_) => {
                ErrorCode::AlreadyExists
            }
            ServerError::AliasNotFound(_) | ServerError::SnapshotNotFound(_) => ErrorCode::NotFound,
            ServerError::InvalidRequest(_) => ErrorCode::InvalidRequest,
            ServerError::Forbidden(_) => ErrorCode::Forbidden,
            ServerError::WrongDimension { .. } => ErrorCode::WrongDimension,
            ServerError::InvalidVector(_) => ErrorCode::InvalidVector,
            ServerError::LimitExceeded(_) => ErrorCode::LimitExceeded,
            ServerError::Overloaded(_) => ErrorCode::RateLimited,
            ServerError::Timeout(_) => ErrorCode::Timeout,
            ServerError::PayloadTooLarge(_) => ErrorCode::PayloadTooLarge,
            ServerError::Unavailable(_) => ErrorCode::Unavailable,
            ServerError::UnderReplicated(_) => ErrorCode::UnderReplicated,
            ServerError::Index(e) => match e {
                IndexError::WrongDimension { .. } => ErrorCode::WrongDimension,
                IndexError::InvalidParams(_) => ErrorCode::InvalidRequest,
                IndexError::Full(_) => ErrorCode::LimitExceeded,
                IndexError::Corrupt { .. } | IndexError::Io(_) => ErrorCode::Internal,
            },
            ServerError::Storage(_) | ServerError::Internal(_) => ErrorCode::Internal,
            ServerError::Relayed { code, .. } => *code,
        }
    }
}

/// Result alias of the server.
pub type Result<T, E = ServerError> = std::result::Result<T, E>;
