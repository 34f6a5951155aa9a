//! openraft's storage errors from this crate's failures.

use openraft::{AnyError, ErrorSubject, ErrorVerb, StorageError, StorageIOError};

use crate::ReplicaId;

/// Storage errors as openraft takes them.
pub(crate) type RaftResult<T> = Result<T, StorageError<ReplicaId>>;

/// Wraps any error as a storage failure of `subject` while doing `verb`.
pub(crate) fn failed(
    subject: ErrorSubject<ReplicaId>,
    verb: ErrorVerb,
    error: impl std::fmt::Display,
) -> StorageError<ReplicaId> {
    StorageError::IO {
        source: StorageIOError::new(subject, verb, AnyError::error(error.to_string())),
    }
}

/// Runs blocking storage work (RocksDB reads, writes with fsync, file copies) off the async
/// workers, so one partition's fsync never stalls another group's heartbeats.
pub(crate) async fn blocking<T, E>(
    subject: ErrorSubject<ReplicaId>,
    verb: ErrorVerb,
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> RaftResult<T>
where
    T: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let failed_subject = subject.clone();
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(failed(subject, verb, error)),
        Err(join) => Err(failed(failed_subject, verb, join)),
    }
}

/// bincode for the log's records; the types are plain serde structs, so this cannot fail.
pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    bincode::serialize(value).unwrap_or_else(|e| unreachable!("bincode on a plain value: {e}"))
}

/// Decodes a stored record, naming what it was on failure.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    subject: ErrorSubject<ReplicaId>,
    bytes: &[u8],
) -> RaftResult<T> {
    bincode::deserialize(bytes).map_err(|e| failed(subject, ErrorVerb::Read, e))
}
