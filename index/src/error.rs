use std::path::PathBuf;

/// Errors of the index crate.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// A vector or query had the wrong number of components.
    #[error("wrong vector dimension: expected {expected}, got {got}")]
    WrongDimension {
        /// The index's dimension.
        expected: usize,
        /// The dimension received.
        got: usize,
    },
    /// Parameters that cannot build an index.
    #[error("invalid index parameters: {0}")]
    InvalidParams(String),
    /// The index would exceed its slot space (u32).
    #[error("index is full: {0} slots")]
    Full(usize),
    /// An index file that does not parse or whose checksum does not match.
    #[error("corrupt index file {}: {comment}", path.display())]
    Corrupt {
        /// The file, or an empty path for in-memory bytes.
        path: PathBuf,
        /// What was wrong.
        comment: String,
    },
    /// An I/O failure; `fs_err` makes the message name the path.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl IndexError {
    /// Corruption in bytes that did not come from a named file.
    pub(crate) fn corrupt(comment: impl Into<String>) -> Self {
        IndexError::Corrupt {
            path: PathBuf::new(),
            comment: comment.into(),
        }
    }
}

/// Result alias of the index crate.
pub type Result<T> = std::result::Result<T, IndexError>;
