//! HNSW: a hierarchical navigable small-world graph (Malkov & Yashunin, TPAMI 2020).
//!
//! Layout. Vectors live in a [`VectorStore`] beside the graph (faiss' split of `IndexHNSW`
//! from `HNSW`); searches score them through the store's `Scorer`. Layer 0 is one flat
//! array of fixed-stride lists `[count, n₀, n₁, …, n_{2M−1}]`; upper layers, which hold ~1/M
//! of the nodes, get a boxed slice per node. Link words are `AtomicU32`: readers load them
//! without locks while an insert rewrites a list under that node's 1-byte mutex — a reader
//! can see a list mid-update, but every word it sees is a valid slot, which is all greedy
//! search needs (hnswlib relies on the same property, with data races; here it is sound).
//!
//! Writes. [`VectorIndex::add`] appends the batch's vectors under the graph's write lock (a
//! memcpy), then links the new nodes in parallel under the read lock, so searches keep running
//! while a batch is linked. Only one batch links at a time (`add_lock`).
//!
//! Deletion is the caller's: slots stay in the graph for navigation and are kept out of
//! results by the search filter, as hnswlib's `markDelete` does; a collection rebuilds its
//! index when too many slots are dead.

mod build;
mod link_codes;
pub mod params;
mod persist;
mod scratch;
mod search;

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;

pub(crate) use build::set_list;
use link_codes::LinkCodes;
pub use params::HnswParams;
pub(crate) use persist::validate_lists;
pub(crate) use search::{best_first, Seeds};

use crate::distance::Metric;
use crate::persist::codec::Sink;
use crate::store::{HoldsStore, Opening, Placement, RowCodes, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::{
    IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter,
    VectorIndex,
};

/// Packed `(level << 32) | slot` of the entry point; `EMPTY` before the first insert.
const EMPTY: u64 = u64::MAX;
/// Levels are capped so that a pathological RNG draw cannot allocate a huge node.
const MAX_LEVEL: usize = 16;

fn pack_entry(slot: Slot, level: usize) -> u64 {
    ((level as u64) << 32) | u64::from(slot)
}

fn unpack_entry(packed: u64) -> (Slot, usize) {
    (packed as u32, (packed >> 32) as usize)
}

/// The graph and the vectors it links.
pub(crate) struct Graph {
    /// The vectors, one row per slot.
    pub(crate) store: VectorStore,
    /// Top layer of each slot.
    pub(crate) levels: Vec<u8>,
    /// Layer-0 lists, stride `1 + m0`.
    pub(crate) links0: Vec<AtomicU32>,
    /// Upper-layer lists per slot: `level` lists of stride `1 + m`; empty on level-0 nodes.
    pub(crate) upper: Vec<Box<[AtomicU32]>>,
    /// One writer lock per slot, held while its lists are rewritten.
    pub(crate) locks: Vec<Mutex<()>>,
    /// Set where a layer-0 list was rewritten since the link codes last read it.
    pub(crate) relinked: Vec<AtomicBool>,
    /// RaBitQ codes of the layer-0 links, when the index keeps them ([`RowCodes::Rabitq`]).
    link_codes: Option<LinkCodes>,
    pub(crate) entry: AtomicU64,
    pub(crate) m: usize,
    pub(crate) m0: usize,
}

impl Graph {
    /// A graph over `store` (empty or not) with no nodes yet, whose layer-0 lists hold `2·m`
    /// links and upper lists `m`.
    pub(crate) fn new(store: VectorStore, m: usize) -> Self {
        Self {
            store,
            levels: Vec::new(),
            links0: Vec::new(),
            upper: Vec::new(),
            locks: Vec::new(),
            relinked: Vec::new(),
            link_codes: None,
            entry: AtomicU64::new(EMPTY),
            m,
            m0: 2 * m,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.levels.len()
    }

    /// The list of `slot` at `level`: word 0 is the count, then the capacity's slots.
    #[inline]
    pub(crate) fn list(&self, slot: Slot, level: usize) -> &[AtomicU32] {
        if level == 0 {
            let stride = 1 + self.m0;
            let start = slot as usize * stride;
            &self.links0[start..start + stride]
        } else {
            let stride = 1 + self.m;
            let start = (level - 1) * stride;
            &self.upper[slot as usize][start..start + stride]
        }
    }

    /// Calls `f` on each neighbour of `slot` at `level`, reading without locks.
    #[inline]
    pub(crate) fn for_each_neighbor(&self, slot: Slot, level: usize, mut f: impl FnMut(Slot)) {
        let list = self.list(slot, level);
        let count = (list[0].load(Ordering::Acquire) as usize).min(list.len() - 1);
        for word in &list[1..=count] {
            f(word.load(Ordering::Relaxed));
        }
    }

    fn entry(&self) -> Option<(Slot, usize)> {
        match self.entry.load(Ordering::Acquire) {
            EMPTY => None,
            packed => Some(unpack_entry(packed)),
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        let upper: usize = self.upper.iter().map(|u| u.len() * 4).sum();
        self.store.memory_bytes()
            + self.levels.capacity()
            + self.links0.capacity() * 4
            + self.upper.capacity() * std::mem::size_of::<Box<[AtomicU32]>>()
            + upper
            + self.locks.capacity() * std::mem::size_of::<Mutex<()>>()
            + self.relinked.capacity()
            + self.link_codes.as_ref().map_or(0, LinkCodes::memory_bytes)
    }
}

impl HoldsStore for Graph {
    fn store(&self) -> &VectorStore {
        &self.store
    }
}

/// An HNSW index; see the module docs for its layout and concurrency.
pub struct Hnsw {
    /// [`IndexKind::Hnsw`], or [`IndexKind::IpNsw`] for the same graph built on inner product.
    kind: IndexKind,
    params: HnswParams,
    graph: ReadMostly<Graph>,
    /// Serialises batches; holds the level generator.
    add_lock: Mutex<StdRng>,
    /// Taken by an insert that raises the top level, so two cannot race on the entry point.
    entry_lock: Mutex<()>,
    /// Whether bulk batches link by a half copy of the rows (`build.rs`); off only in tests
    /// that compare the two.
    half_rows: bool,
}

impl Hnsw {
    /// An empty graph.
    pub fn new(params: HnswParams, metric: Metric, dim: usize) -> Result<Self> {
        Self::placed(params, metric, dim, &Placement::Memory)
    }

    /// An empty graph whose rows live where `placement` says.
    pub fn placed(
        params: HnswParams,
        metric: Metric,
        dim: usize,
        placement: &Placement,
    ) -> Result<Self> {
        params.validate()?;
        if dim == 0 {
            return Err(IndexError::InvalidParams(
                "dimension must be at least 1".into(),
            ));
        }
        let store = VectorStore::placed(metric, dim, placement)?;
        Ok(Self::from_graph(params, Graph::new(store, params.m)))
    }

    fn from_graph(params: HnswParams, graph: Graph) -> Self {
        let rng = StdRng::seed_from_u64(params.seed ^ graph.len() as u64);
        Self {
            kind: IndexKind::Hnsw,
            params,
            graph: ReadMostly::new(graph),
            add_lock: Mutex::new(rng),
            entry_lock: Mutex::new(()),
            half_rows: true,
        }
    }

    /// ip-NSW (Morozov & Babenko, NeurIPS 2018): this graph, heuristic included, built and
    /// searched with −⟨x, y⟩ as its "distance". It is the MIPS baseline that ip-NSW+
    /// ([`crate::ipnsw`]) is measured against, and what every other vector database does for
    /// `Dot`.
    pub fn new_ip_nsw(params: HnswParams, dim: usize) -> Result<Self> {
        Ok(Self::new(params, Metric::InnerProduct, dim)?.into_ip_nsw())
    }

    /// Marks a graph read from a file as ip-NSW; the file itself does not record the kind
    /// (the header around it does, see [`crate::persist`]).
    pub(crate) fn into_ip_nsw(mut self) -> Self {
        self.kind = IndexKind::IpNsw;
        self
    }

    /// Makes sure `rows` more rows fit in the store without I/O (see
    /// [`VectorStore::reserve`]).
    pub(crate) fn reserve(&self, rows: usize) -> Result<()> {
        self.graph.write().store.reserve(rows)
    }

    /// Like [`VectorIndex::add`], then calls `after` for every new slot with the layer-0
    /// candidates it was linked from (ip-NSW+ seeds its inner-product graph with them).
    pub(crate) fn add_then(&self, vectors: &[f32], after: build::AfterLink<'_>) -> Result<Slot> {
        self.add_inner(vectors, Some(after))
    }

    fn add_inner(&self, vectors: &[f32], after: Option<build::AfterLink<'_>>) -> Result<Slot> {
        let count = self.store().rows_in(vectors)?;
        let mut rng = self.add_lock.lock();
        let first = build::append(self, &mut rng, vectors, count)?;
        build::link_range(self, first, count, after);
        // The link codes catch up with the lists this batch rewrote (the add lock keeps
        // `set_codes` out, so the read below stays true until the write).
        if self.graph.read().link_codes.is_some() {
            let mut graph = self.graph.write();
            if let Some(mut codes) = graph.link_codes.take() {
                codes.sync(&graph);
                graph.link_codes = Some(codes);
            }
        }
        Ok(first)
    }

    /// Every node's layer-0 links (directed): the graph Pyramid partitions.
    pub(crate) fn layer0_adjacency(&self) -> Vec<Vec<Slot>> {
        let graph = self.graph.read();
        (0..graph.len() as Slot)
            .map(|slot| {
                let mut links = Vec::new();
                graph.for_each_neighbor(slot, 0, |n| links.push(n));
                links
            })
            .collect()
    }

    /// The parameters the graph was built with.
    pub fn params(&self) -> &HnswParams {
        &self.params
    }

    /// Builds a graph over `vectors` in one call (parallel over all rayon threads).
    pub fn build(params: HnswParams, metric: Metric, dim: usize, vectors: &[f32]) -> Result<Self> {
        let index = Self::new(params, metric, dim)?;
        if !vectors.is_empty() {
            index.add(vectors)?;
        }
        Ok(index)
    }
}

impl VectorIndex for Hnsw {
    fn kind(&self) -> IndexKind {
        self.kind
    }
    fn store(&self) -> StoreRead<'_> {
        StoreRead::new(&self.graph)
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        let graph = self.graph.read();
        let query = match graph.store.open(query, k, params, filter)? {
            Opening::Answered(hits, stats) => return Ok((hits, stats)),
            Opening::Prepared(query) => query,
        };
        let ef = params.ef.unwrap_or(self.params.ef_search).max(k);
        if let Some(codes) = graph
            .link_codes
            .as_ref()
            .filter(|_| !params.ignore_quantization)
        {
            let mut scorer = graph.store.scorer(&query, filter);
            let (hits, estimates) = codes.knn(&graph, &mut scorer, &query, k, ef);
            let stats = SearchStats {
                distance_computations: scorer.computed() + estimates,
                scored_codes: true,
            };
            return Ok((hits, stats));
        }
        let mut scorer = graph.store.search_scorer(&query, filter, params);
        let ef = scorer.ef(k, ef);
        let kept = scorer.kept(k, ef);
        let hits = search::knn(&graph, &mut scorer, kept, ef);
        let hits = scorer.finish(hits, k);
        Ok((hits, scorer.stats()))
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        self.add_inner(vectors, None)
    }
    /// Row codes go to the store; [`RowCodes::Rabitq`] codes the graph's links instead.
    fn set_codes(&self, codes: Option<RowCodes>) -> Result<()> {
        // No batch is half-linked while the codes change.
        let _no_adds = self.add_lock.lock();
        let mut graph = self.graph.write();
        match codes {
            Some(RowCodes::Rabitq) => {
                if graph.store.dim() > link_codes::MAX_DIM {
                    return Err(IndexError::InvalidParams(format!(
                        "rabitq link codes take rows of at most {} dimensions, not {}",
                        link_codes::MAX_DIM,
                        graph.store.dim()
                    )));
                }
                graph.store.set_codes(None)?;
                if graph.link_codes.is_none() {
                    let mut link_codes =
                        LinkCodes::new(graph.store.metric(), graph.store.dim(), graph.m0);
                    graph
                        .relinked
                        .iter()
                        .for_each(|r| r.store(true, Ordering::Relaxed));
                    link_codes.sync(&graph);
                    graph.link_codes = Some(link_codes);
                }
                Ok(())
            }
            other => {
                graph.link_codes = None;
                graph.store.set_codes(other)
            }
        }
    }
    fn codes(&self) -> Option<RowCodes> {
        let graph = self.graph.read();
        match graph.link_codes {
            Some(_) => Some(RowCodes::Rabitq),
            None => graph.store.codes(),
        }
    }
    fn write_to(&self, out: &mut dyn Sink) {
        persist::write(self, out);
    }
    fn memory_bytes(&self) -> usize {
        self.graph.read().memory_bytes()
    }
}

#[cfg(test)]
mod tests;
