//! ip-NSW+: maximum inner product search on two proximity graphs (Liu et al., AAAI 2020;
//! `PAPERS.md` §2).
//!
//! Why two graphs. A graph built on inner product (ip-NSW, here [`Hnsw::new_ip_nsw`]) gives
//! large-norm items huge in-degrees, because they are the top inner-product neighbours of
//! almost everything; that is why it works at all, but a walk from the global entry point
//! then wastes most of its distance computations on big-norm items that point the wrong way.
//! ip-NSW+ first finds items whose *direction* matches the query in an angular HNSW (score
//! −⟨q, x⟩/‖x‖) and only then walks an inner-product graph from their inner-product
//! neighbours, which are the big-norm items in the query's direction: the answers.
//!
//! Structure.
//! - `angular`: an HNSW over the unit directions x/‖x‖ with the diversity heuristic
//!   (`cos_m`, `cos_ef_construction`). Cairn's own [`Hnsw`] with [`Metric::Cosine`], so it
//!   shares the tuned kernels, parallel build and persistence. It keeps its own normalised
//!   copy of the vectors: that costs `4·dim` bytes per vector but keeps the angular kernel a
//!   plain dot product (no per-slot norm lookup in the hot loop).
//! - `ip`: a single-layer graph over the raw vectors whose lists hold the top-`m` items by
//!   inner product (no heuristic: diversity is what the angular graph is for), and reverse
//!   links up to `2·m`, keeping the largest inner products when a list is full. It is an
//!   HNSW [`Graph`] whose nodes all have level 0, so it is searched by the same best-first
//!   loop as every other graph in this crate.
//!
//! Insert x: the angular insert (descent, then candidates on every layer); all of its
//! layer-0 candidates seed a best-first inner-product search with `ef_construction`, whose
//! top `m` become x's inner-product links.
//!
//! Search q: angular descent and a layer-0 search with `cos_ef_search` (the paper: 1) give
//! the seeds; the seeds and *all* their inner-product neighbours enter the candidate pool
//! (the authors' "pre-candidate" phase); then best-first inner-product search with `ef`.

pub mod params;
mod persist;

use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

pub use params::IpNswPlusParams;
pub(crate) use persist::{read_params, write_params};

use crate::distance::Metric;
use crate::hnsw::{best_first, Graph, Hnsw, Seeds};
use crate::persist::codec::Sink;
use crate::store::aligned::reserve_on_huge_pages;
use crate::store::{Opening, Placement, RowCodes, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::{
    IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter, VectorIndex,
};

/// An ip-NSW+ index; see the module docs.
pub struct IpNswPlus {
    params: IpNswPlusParams,
    /// Angular HNSW over the directions; slot numbers match `ip`'s.
    angular: Hnsw,
    /// Single-layer inner-product graph over the raw vectors (the index's store).
    ip: ReadMostly<Graph>,
    /// Serialises batches (and snapshots) across both graphs.
    add_lock: Mutex<()>,
}

impl IpNswPlus {
    /// An empty index.
    pub fn new(params: IpNswPlusParams, dim: usize) -> Result<Self> {
        Self::placed(params, dim, &Placement::Memory)
    }

    /// An empty index whose rows (both graphs') live where `placement` says.
    pub fn placed(params: IpNswPlusParams, dim: usize, placement: &Placement) -> Result<Self> {
        params.validate()?;
        let angular = Hnsw::placed(params.angular(), Metric::Cosine, dim, placement)?;
        let store = VectorStore::placed(Metric::InnerProduct, dim, placement)?;
        let ip = Graph::new(store, params.m);
        Ok(Self::from_parts(params, angular, ip))
    }

    fn from_parts(params: IpNswPlusParams, angular: Hnsw, ip: Graph) -> Self {
        Self {
            params,
            angular,
            ip: ReadMostly::new(ip),
            add_lock: Mutex::new(()),
        }
    }

    /// The parameters the index was built with.
    pub fn params(&self) -> &IpNswPlusParams {
        &self.params
    }

    /// Builds an index over `vectors` in one call (parallel over all rayon threads).
    pub fn build(params: IpNswPlusParams, dim: usize, vectors: &[f32]) -> Result<Self> {
        let index = Self::new(params, dim)?;
        if !vectors.is_empty() {
            index.add(vectors)?;
        }
        Ok(index)
    }

    /// Appends the raw vectors with empty lists to the inner-product graph.
    fn append_ip(&self, vectors: &[f32]) -> Result<Slot> {
        let mut ip = self.ip.write();
        let first = ip.store.append(vectors)?;
        let count = ip.store.len() - first as usize;
        let m0 = ip.m0;
        reserve_on_huge_pages(&mut ip.links0, count * (1 + m0));
        ip.links0
            .extend((0..count * (1 + m0)).map(|_| AtomicU32::new(0)));
        ip.levels.extend(std::iter::repeat_n(0, count));
        ip.locks.extend((0..count).map(|_| Mutex::new(())));
        ip.relinked
            .extend((0..count).map(|_| std::sync::atomic::AtomicBool::new(true)));
        Ok(first)
    }

    /// Links `slot` into the inner-product graph, seeded by its angular candidates.
    fn link_ip(&self, ip: &Graph, slot: Slot, angular: &[Neighbor]) {
        let seeds: Vec<Slot> = angular
            .iter()
            .map(|n| n.slot)
            .filter(|&s| s != slot)
            .collect();
        let mut scorer = ip.store.scorer(ip.store.row(slot), None);
        let seeds = Seeds::Slots(&seeds);
        let found = best_first(ip, &mut scorer, seeds, self.params.ef_construction, 0);
        let out: Vec<Slot> = found
            .iter()
            .map(|n| n.slot)
            .filter(|&s| s != slot)
            .take(self.params.m)
            .collect();
        crate::hnsw::set_list(ip, slot, 0, out.iter().copied());
        for &target in &out {
            self.add_reverse_ip(ip, target, slot);
        }
    }

    /// Adds `new` to `target`'s list; a full list keeps the `2·m` largest inner products with
    /// `target` (the authors' rule: no diversity heuristic on the inner-product graph).
    fn add_reverse_ip(&self, ip: &Graph, target: Slot, new: Slot) {
        let _lock = ip.locks[target as usize].lock();
        let list = ip.list(target, 0);
        let capacity = list.len() - 1;
        let count = (list[0].load(Ordering::Acquire) as usize).min(capacity);
        let words = &list[1..=count];
        if words.iter().any(|w| w.load(Ordering::Relaxed) == new) {
            return;
        }
        if count < capacity {
            list[1 + count].store(new, Ordering::Relaxed);
            list[0].store(count as u32 + 1, Ordering::Release);
            return;
        }
        let mut scorer = ip.store.scorer(ip.store.row(target), None);
        let mut all: Vec<Neighbor> = words
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .chain(std::iter::once(new))
            .map(|s| Neighbor::new(s, scorer.key(s)))
            .collect();
        all.sort_unstable();
        // Readers may see the list mid-rewrite; every word stays a valid slot, and the count
        // never changes (it is full before and after).
        for (word, n) in list[1..].iter().zip(&all[..capacity]) {
            word.store(n.slot, Ordering::Relaxed);
        }
    }
}

impl IpNswPlus {
    /// The query's `cos_ef_search` nearest directions in the angular graph, unfiltered.
    fn angular_seeds(&self, query: &[f32]) -> Result<(Vec<Neighbor>, SearchStats)> {
        let cos_ef = self.params.cos_ef_search;
        let params = SearchParams {
            ef: Some(cos_ef),
            exact: false,
            ..SearchParams::default()
        };
        self.angular.search(query, cos_ef, &params, None)
    }
}

/// The seeds and *all* their inner-product neighbours (the authors' "pre-candidate" phase).
/// The pool may repeat a slot (a seed is often its fellow seed's neighbour); `best_first`
/// drops repeats with its visited set as it scores them.
fn seed_pool(ip: &Graph, seeds: &[Neighbor]) -> Vec<Slot> {
    let mut pool: Vec<Slot> = Vec::with_capacity(seeds.len() * (1 + ip.m0));
    for seed in seeds {
        pool.push(seed.slot);
        ip.for_each_neighbor(seed.slot, 0, |n| pool.push(n));
    }
    pool
}

impl VectorIndex for IpNswPlus {
    fn kind(&self) -> IndexKind {
        IndexKind::IpNswPlus
    }
    fn store(&self) -> StoreRead<'_> {
        StoreRead::new(&self.ip)
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        let query = match self.ip.read().store.open(query, k, params, filter)? {
            Opening::Answered(hits, stats) => return Ok((hits, stats)),
            Opening::Prepared(query) => query,
        };
        if k == 0 {
            return Ok((Vec::new(), SearchStats::default()));
        }
        // Seeds: the query's angular neighbours. The filter applies to results only, so
        // seeds are found unfiltered (a rejected item still routes the search).
        let (seeds, angular_stats) = self.angular_seeds(&query)?;
        let ip = self.ip.read();
        let pool = seed_pool(&ip, &seeds);
        let mut scorer = ip.store.search_scorer(&query, filter, params);
        let ef = scorer.ef(k, params.ef.unwrap_or(self.params.ef_search).max(k));
        let hits = best_first(&ip, &mut scorer, Seeds::Slots(&pool), ef, 0);
        let hits = scorer.finish(hits, k);
        let computed = angular_stats.distance_computations + scorer.computed();
        Ok((
            hits,
            SearchStats {
                distance_computations: computed,
                ..scorer.stats()
            },
        ))
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let _adds = self.add_lock.lock();
        // Both stores get their room first: with rows on disk either append could otherwise
        // fail on I/O after the other succeeded, and the graphs would number slots apart.
        let rows = self.ip.read().store.rows_in(vectors)?;
        self.angular.reserve(rows)?;
        self.ip.write().store.reserve(rows)?;
        let first = self.append_ip(vectors)?;
        let ip = self.ip.read();
        let angular_first = self.angular.add_then(vectors, &|slot, candidates| {
            self.link_ip(&ip, slot, candidates)
        })?;
        debug_assert_eq!(angular_first, first, "the two graphs number slots alike");
        Ok(first)
    }
    fn set_codes(&self, codes: Option<RowCodes>) -> Result<()> {
        // The inner-product graph's rows: its search is where the scoring goes (the angular
        // stage scores a few dozen directions).
        self.ip.write().store.set_codes(codes)
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let _no_adds = self.add_lock.lock();
        persist::write(self, out);
    }
    fn memory_bytes(&self) -> usize {
        self.angular.memory_bytes() + self.ip.read().memory_bytes()
    }
}

#[cfg(test)]
mod tests;
