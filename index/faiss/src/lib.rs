//! cairn-faiss: the one Cairn crate that links FAISS.
//!
//! FAISS is a large C++ build (about 15 CPU-minutes from source), so it sits in this leaf
//! crate and nowhere else: `cargo test -p cairn-index` never compiles it. It gives Cairn
//!
//! - [`kmeans`]: k-means training (Pyramid's meta-index samples and clusters with it);
//! - [`FaissTrainer`]: both of the above behind `cairn-index`'s training traits
//!   (`CentroidTrainer` for meta-indexes, `CodebookTrainer` for quantized indexes);
//!   [`trainers`] hands both over as one `cairn_index::Trainers`;
//! - [`codec`]: PQ, OPQ and RQ vector codecs, trained, encoding and decoding (the direction
//!   codecs of norm-explicit quantization);
//! - [`baseline`]: FAISS's own Flat and HNSW indexes, for benchmarks that put Cairn's indexes
//!   side by side with FAISS in the same run.
//!
//! FAISS is built from source by the `faiss` crate's `static` feature, with AVX2 enabled
//! through the workspace's `.cargo/config.toml` (x86-64-v3), as FAISS's own AVX2 build does.
//!
//! # Threads
//!
//! FAISS parallelises *within* a call with OpenMP: training, adding and multi-query searches
//! use up to [`set_threads`] threads of the calling thread. Searches of a built index take
//! `&self` and may run from many threads at once (FAISS CPU indexes allow concurrent const
//! searches); everything that mutates (training, adding, parameters) takes `&mut self`.
//! Every call here is synchronous and CPU-bound: async callers must run it on a blocking
//! thread (`spawn_blocking`), never on an executor worker.

pub mod baseline;
pub mod codec;
mod error;
pub mod kmeans;

pub use codec::FaissTrainer;
pub use error::{FaissError, Result};

/// FAISS as both of `cairn-index`'s trainers (k-means centres and codebooks): what a process
/// that links this crate hands to whatever builds or loads indexes.
pub fn trainers() -> cairn_index::Trainers {
    cairn_index::Trainers {
        centroids: Some(std::sync::Arc::new(FaissTrainer)),
        codebooks: Some(std::sync::Arc::new(FaissTrainer)),
    }
}

extern "C" {
    /// libgomp, linked by `faiss-sys`: sets how many threads the calling thread's next
    /// OpenMP parallel regions use.
    fn omp_set_num_threads(n: std::os::raw::c_int);
}

/// Sets how many OpenMP threads FAISS calls made *from the calling thread* use. Benchmarks
/// that time one query on one thread set 1, so FAISS does not fan a single query out.
pub fn set_threads(n: usize) {
    let n = n.clamp(1, i32::MAX as usize) as std::os::raw::c_int;
    // SAFETY: `omp_set_num_threads` only stores an integer in the calling thread's OpenMP
    // control variables; it has no pointer arguments and no preconditions.
    unsafe { omp_set_num_threads(n) }
}

/// Checks that `data` holds whole rows of `dim` floats and returns how many.
fn rows(data: &[f32], dim: usize) -> Result<usize> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(FaissError::WrongDimension {
            dim,
            len: data.len(),
        });
    }
    Ok(data.len() / dim)
}

/// A size as FAISS's 32-bit integer.
fn to_u32(n: usize) -> Result<u32> {
    u32::try_from(n)
        .ok()
        .filter(|&v| v <= i32::MAX as u32)
        .ok_or_else(|| FaissError::InvalidParams(format!("{n} is too large for FAISS")))
}

/// Turns a raw C-API return code into a result, with FAISS's message on failure.
fn check(code: std::os::raw::c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    // SAFETY: `faiss_get_last_error` returns the calling thread's last error message, a
    // NUL-terminated string FAISS owns until the next failing call on this thread, or null.
    let message = unsafe {
        let ptr = faiss_sys::faiss_get_last_error();
        if ptr.is_null() {
            String::from("unknown error")
        } else {
            std::ffi::CStr::from_ptr(ptr).to_string_lossy().into_owned()
        }
    };
    Err(FaissError::Native { code, message })
}
