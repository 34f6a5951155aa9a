use std::path::PathBuf;

/// Errors of the storage crate.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// RocksDB failed; `path` is the database it failed in.
    #[error("rocksdb error in {}: {source}", path.display())]
    Rocks {
        /// The database directory.
        path: PathBuf,
        /// RocksDB's error.
        source: rocksdb::Error,
    },
    /// A stored value that does not decode: disk corruption or a foreign database.
    #[error("corrupt record in {}: {comment}", path.display())]
    Corrupt {
        /// The database directory.
        path: PathBuf,
        /// What did not decode.
        comment: String,
    },
    /// A sequence number that does not follow the last one written.
    #[error("sequence number {got} does not follow {last}")]
    OutOfOrder {
        /// The last sequence number stored.
        last: u64,
        /// The one offered.
        got: u64,
    },
    /// Filesystem failure outside RocksDB (creating or removing directories).
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Result alias of the storage crate.
pub type Result<T> = std::result::Result<T, StorageError>;
