//! Datasets for tests and benchmarks: TEXMEX fvecs/ivecs/bvecs readers, seeded synthetic
//! generators, exact ground truth and recall@k.

mod norm_bias;
mod synthetic;

pub use norm_bias::{long_tailed_with_bias, norm_bias, BiasedSet};
pub use synthetic::{clustered_gaussian, clustered_with_structure, long_tailed_norms, ClusterSpec};

use std::path::Path;

use rayon::prelude::*;

use crate::distance::Metric;
use crate::store::VectorStore;
use crate::{IndexError, Result};

/// Row-major vectors of one dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Vectors {
    /// Components per vector.
    pub dim: usize,
    /// `len() * dim` floats.
    pub data: Vec<f32>,
}

impl Vectors {
    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// The `i`-th vector.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    /// Iterates rows.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.data.chunks_exact(self.dim.max(1))
    }
    /// The first `n` vectors.
    pub fn truncated(&self, n: usize) -> Vectors {
        Vectors {
            dim: self.dim,
            data: self.data[..n.min(self.len()) * self.dim].to_vec(),
        }
    }
}

/// Reads records `[i32 dim][dim × 4-byte values]`, checking every record has the same dim.
fn read_vecs<T>(path: &Path, decode: impl Fn([u8; 4]) -> T) -> Result<(usize, Vec<T>)> {
    read_records(path, 4, |c| decode([c[0], c[1], c[2], c[3]]))
}

fn read_records<T>(
    path: &Path,
    width: usize,
    decode: impl Fn(&[u8]) -> T,
) -> Result<(usize, Vec<T>)> {
    let bytes = fs_err::read(path)?;
    let corrupt = |comment: String| IndexError::Corrupt {
        path: path.to_path_buf(),
        comment,
    };
    let mut out = Vec::new();
    let mut dim = None;
    let mut pos = 0;
    while pos < bytes.len() {
        let head = bytes
            .get(pos..pos + 4)
            .ok_or_else(|| corrupt(format!("truncated header at {pos}")))?;
        let d = i32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let d = usize::try_from(d).map_err(|_| corrupt(format!("negative dimension at {pos}")))?;
        if *dim.get_or_insert(d) != d {
            return Err(corrupt(format!(
                "record at {pos} has dimension {d}, expected {dim:?}"
            )));
        }
        let body = bytes
            .get(pos + 4..pos + 4 + d * width)
            .ok_or_else(|| corrupt(format!("truncated record at {pos}")))?;
        out.extend(body.chunks_exact(width).map(&decode));
        pos += 4 + d * width;
    }
    Ok((dim.unwrap_or(0), out))
}

/// Reads an `.fvecs` file.
pub fn read_fvecs(path: &Path) -> Result<Vectors> {
    let (dim, data) = read_vecs(path, f32::from_le_bytes)?;
    Ok(Vectors { dim, data })
}

/// Reads a `.bvecs` file (u8 components) as f32.
pub fn read_bvecs(path: &Path) -> Result<Vectors> {
    let (dim, data) = read_records(path, 1, |c| f32::from(c[0]))?;
    Ok(Vectors { dim, data })
}

/// Reads an `.ivecs` file as one id list per record.
pub fn read_ivecs(path: &Path) -> Result<Vec<Vec<u32>>> {
    let (dim, data) = read_vecs(path, i32::from_le_bytes)?;
    if dim == 0 {
        return Ok(Vec::new());
    }
    Ok(data
        .chunks_exact(dim)
        .map(|r| r.iter().map(|&x| x.max(0) as u32).collect())
        .collect())
}

/// Where the shared datasets live: `$CAIRN_SHARED_DATA`, or `../shared/data` beside the
/// repository checkout (where CI and every developer machine have them).
pub fn shared_data_dir() -> std::path::PathBuf {
    match std::env::var_os("CAIRN_SHARED_DATA") {
        Some(dir) => dir.into(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
    }
}

/// A benchmark dataset as shipped in `../shared/data/<name>/`.
pub struct Dataset {
    /// Indexed vectors.
    pub base: Vectors,
    /// Query vectors.
    pub queries: Vectors,
    /// Exact top-100 base ids per query, best first.
    pub ground_truth: Vec<Vec<u32>>,
}

/// Loads `base`, `query` (each `.fvecs`, or `.bvecs` as the SIFT1B sets ship them) and
/// `groundtruth.ivecs` from a folder.
pub fn load_dataset(dir: &Path) -> Result<Dataset> {
    let vectors = |stem: &str| {
        let bvecs = dir.join(format!("{stem}.bvecs"));
        if bvecs.is_file() {
            read_bvecs(&bvecs)
        } else {
            read_fvecs(&dir.join(format!("{stem}.fvecs")))
        }
    };
    Ok(Dataset {
        base: vectors("base")?,
        queries: vectors("query")?,
        ground_truth: read_ivecs(&dir.join("groundtruth.ivecs"))?,
    })
}

/// Exact top-`k` slots per query by brute force (parallel over queries): the store's scan,
/// the same one every index answers `exact` queries with.
pub fn ground_truth(base: &Vectors, queries: &Vectors, metric: Metric, k: usize) -> Vec<Vec<u32>> {
    let mut store = VectorStore::with_capacity(metric, base.dim, base.len());
    // Whole rows only, so the batch is never ragged; the one error left is more than u32::MAX
    // rows, which no index could hold either.
    store
        .append(&base.data[..base.len() * base.dim])
        .expect("a data set fits in u32 slots");
    queries
        .rows()
        .collect::<Vec<_>>()
        .par_iter()
        .map(|q| {
            let (hits, _) = store.scan(&metric.prepared(q), k, None);
            hits.iter().map(|h| h.slot).collect()
        })
        .collect()
}

/// Mean recall@k: the share of each truth list's first `k` ids found in the result's first `k`.
pub fn recall_at_k(results: &[Vec<u32>], truth: &[Vec<u32>], k: usize) -> f64 {
    if results.is_empty() || k == 0 {
        return 0.0;
    }
    let hits: usize = results
        .iter()
        .zip(truth)
        .map(|(got, want)| {
            let want = &want[..k.min(want.len())];
            got.iter().take(k).filter(|id| want.contains(id)).count()
        })
        .sum();
    hits as f64 / (results.len() * k) as f64
}

#[cfg(test)]
mod tests;
