//! Errors of the FAISS wrapper.

/// What can go wrong in a FAISS call.
#[derive(Debug, thiserror::Error)]
pub enum FaissError {
    /// FAISS itself refused (its C++ exception message is kept).
    #[error("faiss: {0}")]
    Faiss(#[from] faiss::error::Error),
    /// A raw C-API call failed; FAISS's message for this thread's last error.
    #[error("faiss: {message} (code {code})")]
    Native {
        /// The C API's return code.
        code: i32,
        /// FAISS's exception message.
        message: String,
    },
    /// Parameters FAISS cannot use, said before calling it.
    #[error("invalid parameters: {0}")]
    InvalidParams(String),
    /// A file FAISS wrote could not be read back.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// A buffer is not a whole number of `dim`-float rows.
    #[error("{len} floats are not whole rows of dimension {dim}")]
    WrongDimension {
        /// Expected row length.
        dim: usize,
        /// Floats given.
        len: usize,
    },
    /// A code buffer is not a whole number of codes.
    #[error("{len} bytes are not whole codes of {code_size} bytes")]
    WrongCodeSize {
        /// Bytes per code.
        code_size: usize,
        /// Bytes given.
        len: usize,
    },
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, FaissError>;
