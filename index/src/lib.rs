//! cairn-index: the algorithms behind Cairn, and nothing else.
//!
//! This crate owns every piece of vector arithmetic and every index structure: distance
//! kernels ([`distance`]), the vector store every index keeps its rows in, with the exact scan
//! ([`store`]), the exact index ([`flat`]), HNSW ([`hnsw`]), the MIPS indexes ([`ipnsw`],
//! [`lsh`], [`quant`], [`norm_scan`]) and the choice between them ([`mips_auto`]), Pyramid's
//! content routing ([`pyramid`]), the on-disk index file format ([`persist`]) and dataset
//! readers plus recall@k ([`dataset`]).
//!
//! It must not depend on tokio, axum or RocksDB: the server composes these pieces, and
//! `cargo test -p cairn-index` must never build C++ (see `ARCHITECTURE.md`).

pub mod dataset;
pub mod distance;
mod error;
pub mod flat;
pub mod hnsw;
pub mod ipnsw;
pub mod lsh;
pub mod mips_auto;
pub mod norm_scan;
pub mod persist;
pub mod pyramid;
pub mod quant;
pub mod store;
mod sync;
mod topk;
mod trainers;

pub use distance::Metric;
pub use error::{IndexError, Result};
pub use store::{Placement, RowCodes, StoreRead, VectorStore, TRAIN_ROWS};
pub use topk::Neighbor;
pub use trainers::Trainers;

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
    /// ip-NSW: the HNSW graph built and searched with the negated inner product (MIPS baseline).
    IpNsw,
    /// ip-NSW+: an angular HNSW seeding a single-layer inner-product graph (MIPS).
    IpNswPlus,
    /// SimpleLSH: sign random projections after scaling by the global maximum norm (MIPS).
    SimpleLsh,
    /// Norm-ranging LSH: SimpleLSH per norm range, buckets ranked across ranges (MIPS).
    RangeLsh,
    /// A scan of plain-VQ or NEQ codes with exact re-ranking (MIPS).
    Quantized,
    /// An exact scan until enough rows, then the norm scan (growing into ip-NSW+) or ip-NSW by
    /// the spread of the norms and the collection's size (MIPS; see [`mips_auto`]).
    MipsAuto,
    /// The largest-norm items scanned by byte codes, the best re-ranked exactly (MIPS; see
    /// [`norm_scan`]).
    NormScan,
}

impl IndexKind {
    /// The kind's name on the wire and in logs (as serde writes it).
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Flat => "flat",
            IndexKind::Hnsw => "hnsw",
            IndexKind::IpNsw => "ip_nsw",
            IndexKind::IpNswPlus => "ip_nsw_plus",
            IndexKind::SimpleLsh => "simple_lsh",
            IndexKind::RangeLsh => "range_lsh",
            IndexKind::Quantized => "quantized",
            IndexKind::MipsAuto => "mips_auto",
            IndexKind::NormScan => "norm_scan",
        }
    }

    /// Stable one-byte tag used in index file headers.
    pub fn tag(self) -> u8 {
        match self {
            IndexKind::Flat => 1,
            IndexKind::Hnsw => 2,
            IndexKind::IpNsw => 3,
            IndexKind::IpNswPlus => 4,
            IndexKind::SimpleLsh => 5,
            IndexKind::RangeLsh => 6,
            IndexKind::Quantized => 7,
            IndexKind::MipsAuto => 8,
            IndexKind::NormScan => 9,
        }
    }

    /// Whether this kind can keep its rows where `placement` says: the graphs and the exact
    /// scan can map them; the LSH and quantized kinds keep theirs in memory (their searches
    /// re-rank from the rows at random, with no row codes to traverse by).
    pub fn check_placement(self, placement: &Placement) -> Result<()> {
        match (self, placement) {
            (_, Placement::Memory)
            | (
                IndexKind::Flat
                | IndexKind::Hnsw
                | IndexKind::IpNsw
                | IndexKind::IpNswPlus
                | IndexKind::MipsAuto
                | IndexKind::NormScan,
                Placement::Mapped(_),
            ) => Ok(()),
            (IndexKind::SimpleLsh | IndexKind::RangeLsh | IndexKind::Quantized, _) => {
                Err(IndexError::InvalidParams(format!(
                    "{} keeps its vectors in memory; vectors on disk need flat, hnsw, ip_nsw, \
                     ip_nsw_plus, mips_auto or norm_scan",
                    self.name()
                )))
            }
        }
    }

    /// Inverse of [`IndexKind::tag`].
    pub fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            1 => Some(IndexKind::Flat),
            2 => Some(IndexKind::Hnsw),
            3 => Some(IndexKind::IpNsw),
            4 => Some(IndexKind::IpNswPlus),
            5 => Some(IndexKind::SimpleLsh),
            6 => Some(IndexKind::RangeLsh),
            7 => Some(IndexKind::Quantized),
            8 => Some(IndexKind::MipsAuto),
            9 => Some(IndexKind::NormScan),
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
    /// ip-NSW: HNSW on the negated inner product (inner-product metric only).
    IpNsw(hnsw::HnswParams),
    /// ip-NSW+ (inner-product metric only).
    IpNswPlus(ipnsw::IpNswPlusParams),
    /// SimpleLSH (inner-product metric only; `ranges` must be 1).
    SimpleLsh(lsh::LshParams),
    /// Norm-ranging LSH (inner-product metric only; `ranges` at least 2).
    RangeLsh(lsh::LshParams),
    /// Quantized scan with re-ranking (inner-product metric only).
    Quantized(quant::QuantizedParams),
    /// The norm scan (growing into ip-NSW+) or ip-NSW, chosen from the data (inner-product
    /// metric only); ip-NSW takes these parameters' `m`, `ef_construction` and `ef_search`.
    MipsAuto(ipnsw::IpNswPlusParams),
    /// The norm-ordered scan (inner-product metric only).
    NormScan(norm_scan::NormScanParams),
}

impl IndexParams {
    /// The kind these parameters build.
    pub fn kind(&self) -> IndexKind {
        match self {
            IndexParams::Flat => IndexKind::Flat,
            IndexParams::Hnsw(_) => IndexKind::Hnsw,
            IndexParams::IpNsw(_) => IndexKind::IpNsw,
            IndexParams::IpNswPlus(_) => IndexKind::IpNswPlus,
            IndexParams::SimpleLsh(_) => IndexKind::SimpleLsh,
            IndexParams::RangeLsh(_) => IndexKind::RangeLsh,
            IndexParams::Quantized(_) => IndexKind::Quantized,
            IndexParams::MipsAuto(_) => IndexKind::MipsAuto,
            IndexParams::NormScan(_) => IndexKind::NormScan,
        }
    }

    /// The `ef` a search uses when a query names none, for an index of `len` items: a
    /// graph's candidate list, the items an LSH index probes or a norm scan reads (a share of
    /// `len`); `None` for the kinds that take no `ef`.
    pub fn default_ef(&self, len: usize) -> Option<usize> {
        match self {
            IndexParams::Flat | IndexParams::Quantized(_) => None,
            IndexParams::NormScan(p) => Some(p.default_depth(len)),
            IndexParams::Hnsw(p) | IndexParams::IpNsw(p) => Some(p.ef_search),
            IndexParams::IpNswPlus(p) | IndexParams::MipsAuto(p) => Some(p.ef_search),
            IndexParams::SimpleLsh(p) | IndexParams::RangeLsh(p) => Some(p.probe_items),
        }
    }

    /// Most links read per expanded node (the layer-0 list capacity), for cost estimates;
    /// `None` without a graph.
    pub fn max_degree(&self) -> Option<usize> {
        match self {
            IndexParams::Flat
            | IndexParams::SimpleLsh(_)
            | IndexParams::RangeLsh(_)
            | IndexParams::Quantized(_)
            | IndexParams::NormScan(_) => None,
            IndexParams::Hnsw(p) | IndexParams::IpNsw(p) => Some(2 * p.m),
            IndexParams::IpNswPlus(p) | IndexParams::MipsAuto(p) => Some(2 * p.m),
        }
    }

    /// SimpleLSH has exactly one range and Range-LSH more than one; anything else would make
    /// a stored kind disagree with the index it builds.
    pub fn check_lsh_ranges(&self) -> Result<()> {
        match self {
            IndexParams::SimpleLsh(p) if p.ranges != 1 => Err(IndexError::InvalidParams(format!(
                "simple_lsh has exactly one norm range, got ranges = {}",
                p.ranges
            ))),
            IndexParams::RangeLsh(p) if p.ranges < 2 => Err(IndexError::InvalidParams(format!(
                "range_lsh needs at least 2 norm ranges (1 is simple_lsh), got {}",
                p.ranges
            ))),
            IndexParams::SimpleLsh(_)
            | IndexParams::RangeLsh(_)
            | IndexParams::Flat
            | IndexParams::Hnsw(_)
            | IndexParams::IpNsw(_)
            | IndexParams::IpNswPlus(_)
            | IndexParams::Quantized(_)
            | IndexParams::MipsAuto(_)
            | IndexParams::NormScan(_) => Ok(()),
        }
    }

    /// Whether the kind can serve `metric`; the error says why not. The MIPS graphs exist
    /// because inner product is not a metric: on L2 or cosine they would only be a slower HNSW.
    pub fn check_metric(&self, metric: Metric) -> Result<()> {
        match self {
            IndexParams::Flat | IndexParams::Hnsw(_) => Ok(()),
            IndexParams::IpNsw(_)
            | IndexParams::IpNswPlus(_)
            | IndexParams::SimpleLsh(_)
            | IndexParams::RangeLsh(_)
            | IndexParams::Quantized(_)
            | IndexParams::MipsAuto(_)
            | IndexParams::NormScan(_) => {
                if metric == Metric::InnerProduct {
                    Ok(())
                } else {
                    Err(IndexError::InvalidParams(format!(
                        "{} is a maximum-inner-product index and needs the inner-product (Dot) \
                         metric; use hnsw for {metric:?}",
                        self.kind().name()
                    )))
                }
            }
        }
    }
}

/// Per-query knobs. Fields an index does not use are ignored by it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SearchParams {
    /// Size of the dynamic candidate list for graph search (for the LSH indexes the items
    /// probed, for the norm scan the items scanned); `None` uses the index default.
    pub ef: Option<usize>,
    /// Scan every vector instead of using the index (the ground-truth path).
    pub exact: bool,
    /// Quantized indexes: re-rank `k × oversampling` candidates (at least `k`); `None` uses
    /// the index default.
    pub oversampling: Option<f32>,
    /// Quantized indexes: re-rank candidates with the full vectors (default true); without it
    /// results are ranked, and scored, by the quantized estimate.
    pub rescore: Option<bool>,
    /// Graphs over a store with row codes: score the full rows instead (Qdrant's
    /// `quantization.ignore`).
    pub ignore_quantization: bool,
}

/// What one search did, for `explain` and for benchmarks that count work instead of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStats {
    /// Number of query-to-vector distance evaluations.
    pub distance_computations: u64,
    /// Whether a graph search scored row codes (see [`RowCodes`]) rather than the rows.
    pub scored_codes: bool,
}

/// Each query's hits and work, in order: what [`VectorIndex::search_batch`] answers.
pub type BatchAnswers = Vec<(Vec<Neighbor>, SearchStats)>;

/// The read path every index implements; object-safe so a collection can hold any index.
///
/// Every index keeps its rows in a [`VectorStore`] and lends it out through
/// [`VectorIndex::store`]; what follows from the rows alone (metric, dimension, length, a
/// stored vector) is written once here, as default methods.
///
/// Writes go through [`VectorIndex::add`], which takes `&self`: indexes synchronise internally
/// so that searches keep running while a batch is linked in (readers never wait on writers).
pub trait VectorIndex: Send + Sync {
    /// Which kind of index this is.
    fn kind(&self) -> IndexKind;
    /// The stored (preprocessed) rows, read-locked until the guard drops: writers wait for
    /// it, so never hold it across [`VectorIndex::add`].
    fn store(&self) -> StoreRead<'_>;
    /// The metric results are ranked by.
    fn metric(&self) -> Metric {
        self.store().metric()
    }
    /// Vector dimension.
    fn dim(&self) -> usize {
        self.store().dim()
    }
    /// Number of slots ever added (deleted slots included: deletion is the caller's business).
    fn len(&self) -> usize {
        self.store().len()
    }
    /// True when nothing was ever added.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The k nearest accepted slots, best first, with their "lower is closer" keys. With
    /// `params.exact` every index answers by its store's scan ([`VectorStore::scan`]).
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)>;
    /// The answers of [`VectorIndex::search`] for each of `queries` (row-major, `dim` floats
    /// each), in order, all under one filter. The same answers as one call per query; an
    /// index overrides it where a batch can share work between its queries (the norm scan
    /// reads each block of codes once for many queries, where one query at a time streams
    /// the whole scan from memory for each).
    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<BatchAnswers> {
        check_batch(queries, self.dim())?;
        queries
            .chunks_exact(self.dim())
            .map(|query| self.search(query, k, params, filter))
            .collect()
    }
    /// Appends `vectors` (row-major, `dim` floats each) and returns the first new slot.
    /// Vectors are preprocessed for the metric (normalised for cosine) on the way in.
    fn add(&self, vectors: &[f32]) -> Result<Slot>;
    /// The stored (preprocessed) vector of `slot`.
    fn vector(&self, slot: Slot) -> Option<Vec<f32>> {
        self.store().get(slot).map(<[f32]>::to_vec)
    }
    /// Keeps row codes beside the stored rows for searches to traverse by, or drops them
    /// (`None`); see [`RowCodes`]. Codes are derived from the rows and never written to index
    /// files, so whoever reads an index sets them again. Graphs keep codes; other kinds refuse.
    fn set_codes(&self, codes: Option<RowCodes>) -> Result<()> {
        match codes {
            None => Ok(()),
            Some(codes) => Err(IndexError::InvalidParams(format!(
                "{} codes speed up graph searches; {} keeps none (use hnsw, ip_nsw or \
                 ip_nsw_plus)",
                codes.name(),
                self.kind().name()
            ))),
        }
    }
    /// How an index that chooses its own structure from the data chose, in one line (for
    /// `explain`); `None` for every index whose kind says it all.
    fn choice(&self) -> Option<String> {
        None
    }
    /// The `ef` a query that names none gets, where the index's own state decides it
    /// (`mips_auto`: the chosen graph's candidate list, or the norm scan's share of its rows);
    /// `None` where the parameters' [`IndexParams::default_ef`] says.
    fn default_ef(&self) -> Option<usize> {
        None
    }
    /// The row codes kept beside the stored rows, if any.
    fn codes(&self) -> Option<RowCodes> {
        self.store().codes()
    }
    /// Serialises the whole index into `out` (see [`persist`] for the file around it).
    fn write_to(&self, out: &mut dyn persist::codec::Sink);
    /// Bytes of RAM the index holds, for metrics and the bytes-per-vector benchmark: rows in a
    /// mapped file ([`Placement::Mapped`]) are left out, as the kernel may page them out.
    fn memory_bytes(&self) -> usize;
}

/// Refuses a batch of queries that is not whole rows of `dim` floats (an empty batch is
/// whole: it has no answers).
pub(crate) fn check_batch(queries: &[f32], dim: usize) -> Result<()> {
    if dim == 0 || queries.len().is_multiple_of(dim) {
        return Ok(());
    }
    Err(IndexError::InvalidParams(format!(
        "a batch of {} floats is not whole queries of {dim}",
        queries.len()
    )))
}

/// Builds an empty index of the given kind (`trainers`: what a quantized index trains with;
/// `placement`: where its rows live, see [`Placement`]).
pub fn new_index(
    params: &IndexParams,
    metric: Metric,
    dim: usize,
    trainers: &Trainers,
    placement: &Placement,
) -> Result<Box<dyn VectorIndex>> {
    if dim == 0 {
        return Err(IndexError::InvalidParams(
            "dimension must be at least 1".into(),
        ));
    }
    params.check_metric(metric)?;
    params.kind().check_placement(placement)?;
    Ok(match params {
        IndexParams::Flat => Box::new(flat::FlatIndex::placed(metric, dim, placement)?),
        IndexParams::Hnsw(p) => Box::new(hnsw::Hnsw::placed(*p, metric, dim, placement)?),
        IndexParams::IpNsw(p) => {
            Box::new(hnsw::Hnsw::placed(*p, Metric::InnerProduct, dim, placement)?.into_ip_nsw())
        }
        IndexParams::IpNswPlus(p) => Box::new(ipnsw::IpNswPlus::placed(*p, dim, placement)?),
        IndexParams::SimpleLsh(p) | IndexParams::RangeLsh(p) => {
            params.check_lsh_ranges()?;
            Box::new(lsh::RangeLsh::new(*p, dim)?)
        }
        IndexParams::Quantized(p) => Box::new(quant::QuantizedIndex::new(*p, dim, trainers)?),
        IndexParams::MipsAuto(p) => Box::new(mips_auto::MipsAuto::placed(*p, dim, placement)?),
        IndexParams::NormScan(p) => Box::new(norm_scan::NormScan::placed(*p, dim, placement)?),
    })
}

/// [`new_index`] in memory with no trainers: what most tests build.
#[cfg(test)]
pub(crate) fn new_in_memory(
    params: &IndexParams,
    metric: Metric,
    dim: usize,
) -> Result<Box<dyn VectorIndex>> {
    new_index(
        params,
        metric,
        dim,
        &Trainers::default(),
        &Placement::Memory,
    )
}

/// Reads an index written by [`VectorIndex::write_to`] for the given kind (`trainers`: what a
/// quantized index retrains with; `placement`: where its rows go).
pub fn read_index(
    kind: IndexKind,
    bytes: &[u8],
    trainers: &Trainers,
    placement: &Placement,
) -> Result<Box<dyn VectorIndex>> {
    kind.check_placement(placement)?;
    Ok(match kind {
        IndexKind::Flat => Box::new(flat::FlatIndex::read_placed(bytes, placement)?),
        IndexKind::Hnsw => Box::new(hnsw::Hnsw::read_placed(bytes, placement)?),
        IndexKind::IpNsw => {
            let graph = hnsw::Hnsw::read_placed(bytes, placement)?;
            if graph.metric() != Metric::InnerProduct {
                return Err(IndexError::corrupt(
                    "ip_nsw file holds a non-inner-product graph",
                ));
            }
            Box::new(graph.into_ip_nsw())
        }
        IndexKind::IpNswPlus => Box::new(ipnsw::IpNswPlus::read_placed(bytes, placement)?),
        IndexKind::SimpleLsh | IndexKind::RangeLsh => {
            let index = lsh::RangeLsh::read_from(bytes)?;
            if index.kind() != kind {
                return Err(IndexError::corrupt("LSH file holds the other LSH kind"));
            }
            Box::new(index)
        }
        IndexKind::Quantized => Box::new(quant::QuantizedIndex::read_from(bytes, trainers)?),
        IndexKind::MipsAuto => Box::new(mips_auto::MipsAuto::read_placed(bytes, placement)?),
        IndexKind::NormScan => Box::new(norm_scan::NormScan::read_placed(bytes, placement)?),
    })
}
