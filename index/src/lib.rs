//! cairn-index: the algorithms behind Cairn, and nothing else.
//!
//! This crate owns every piece of vector arithmetic and every index structure: distance
//! kernels ([`distance`]), exact search ([`flat`]), HNSW ([`hnsw`]), the on-disk index file
//! format ([`persist`]) and dataset readers plus recall@k ([`dataset`]).
//!
//! It must not depend on tokio, axum or RocksDB: the server composes these pieces, and
//! `cargo test -p cairn-index` must never build C++ (see `ARCHITECTURE.md`).

pub mod dataset;
pub mod distance;
mod error;
pub mod flat;
pub mod hnsw;
pub mod persist;
mod topk;

pub use distance::Metric;
pub use error::{IndexError, Result};
pub use topk::Neighbor;

use serde::{Deserialize, Serialize};

/// Internal, dense slot number of a vector inside one index. Slots are assigned in insertion
/// order and never reused, so a slot names exactly one inserted vector for the index's life.
pub type Slot = u32;

/// A predicate over slots: `true` means the slot may appear in results.
///
/// Filters never prune graph traversal, only the result set (as hnswlib's filtered search
/// does), so a restrictive filter keeps the graph connected but costs more visits; callers
/// route very selective filters to exact search instead.
pub type SlotFilter<'a> = &'a (dyn Fn(Slot) -> bool + Sync);

/// Every index kind Cairn knows. The only list of them: matched exhaustively everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Exact brute-force scan.
    Flat,
    /// Hierarchical navigable small world graph.
    Hnsw,
}

impl IndexKind {
    /// The kind's name on the wire and in logs (as serde writes it).
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Flat => "flat",
            IndexKind::Hnsw => "hnsw",
        }
    }

    /// Stable one-byte tag used in index file headers.
    pub fn tag(self) -> u8 {
        match self {
            IndexKind::Flat => 1,
            IndexKind::Hnsw => 2,
        }
    }

    /// Inverse of [`IndexKind::tag`].
    pub fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            1 => Some(IndexKind::Flat),
            2 => Some(IndexKind::Hnsw),
            _ => None,
        }
    }
}

/// Parameters of one index, tagged by kind: what a collection stores and what builds an index.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IndexParams {
    /// Exact search; no parameters.
    Flat,
    /// HNSW graph.
    Hnsw(hnsw::HnswParams),
}

impl IndexParams {
    /// The kind these parameters build.
    pub fn kind(&self) -> IndexKind {
        match self {
            IndexParams::Flat => IndexKind::Flat,
            IndexParams::Hnsw(_) => IndexKind::Hnsw,
        }
    }
}

/// Per-query knobs. Fields an index does not use are ignored by it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SearchParams {
    /// Size of the dynamic candidate list for graph search; `None` uses the index default.
    pub ef: Option<usize>,
    /// Scan every vector instead of using the index (the ground-truth path).
    pub exact: bool,
}

/// What one search did, for `explain` and for benchmarks that count work instead of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Number of query-to-vector distance evaluations.
    pub distance_computations: u64,
}

/// The read path every index implements; object-safe so a collection can hold any index.
///
/// Writes go through [`VectorIndex::add`], which takes `&self`: indexes synchronise internally
/// so that searches keep running while a batch is linked in (readers never wait on writers).
pub trait VectorIndex: Send + Sync {
    /// Which kind of index this is.
    fn kind(&self) -> IndexKind;
    /// The metric results are ranked by.
    fn metric(&self) -> Metric;
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Number of slots ever added (deleted slots included: deletion is the caller's business).
    fn len(&self) -> usize;
    /// True when nothing was ever added.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The k nearest accepted slots, best first, with their "lower is closer" keys.
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)>;
    /// Appends `vectors` (row-major, `dim` floats each) and returns the first new slot.
    /// Vectors are preprocessed for the metric (normalised for cosine) on the way in.
    fn add(&self, vectors: &[f32]) -> Result<Slot>;
    /// The stored (preprocessed) vector of `slot`.
    fn vector(&self, slot: Slot) -> Option<Vec<f32>>;
    /// Serialises the whole index into `out` (see [`persist`] for the file around it).
    fn write_to(&self, out: &mut Vec<u8>);
    /// Bytes of memory the index holds, for metrics and the bytes-per-vector benchmark.
    fn memory_bytes(&self) -> usize;
}

/// Builds an empty index of the given kind.
pub fn new_index(params: &IndexParams, metric: Metric, dim: usize) -> Result<Box<dyn VectorIndex>> {
    if dim == 0 {
        return Err(IndexError::InvalidParams(
            "dimension must be at least 1".into(),
        ));
    }
    Ok(match params {
        IndexParams::Flat => Box::new(flat::FlatIndex::new(metric, dim)),
        IndexParams::Hnsw(p) => Box::new(hnsw::Hnsw::new(*p, metric, dim)?),
    })
}

/// Reads an index written by [`VectorIndex::write_to`] for the given kind.
pub fn read_index(kind: IndexKind, bytes: &[u8]) -> Result<Box<dyn VectorIndex>> {
    Ok(match kind {
        IndexKind::Flat => Box::new(flat::FlatIndex::read_from(bytes)?),
        IndexKind::Hnsw => Box::new(hnsw::Hnsw::read_from(bytes)?),
    })
}
