//! The norm-ordered scan for inner product: the items of largest norm read first, by byte
//! codes, and the best candidates re-ranked by their full rows (issue #26).
//!
//! Why. Where the answers lean on the norms — recommendation factors, whose popular items are
//! long (movielens-mips: 98% of the true top 10 lie in the 5% largest norms) — the simplest
//! index any reader would try is an exact scan of the largest-norm items, and it beat every
//! MIPS graph in the race at every recall target, by 1.3–5.9× (`BENCHMARKS.md`, C31): a scan
//! streams its rows in order, where a graph waits on a row fetched at random for every
//! neighbour it scores. This index is that scan made cheaper per item: the rows in norm order
//! as 7-bit codes (`head.rs`), a quarter of the float rows' bytes, in blocks that the byte
//! multiply-add kernels score eight rows at a time, and the `k × oversampling` best estimates
//! re-ranked exactly (2.3–2.8× the exact scan at the same depth where the scan is deep).

//! The knob. A query scans its `ef` largest-norm items (the LSH indexes read `ef` as the
//! items they probe); without one, [`NormScanParams::share`] of them. How deep a given recall
//! needs depends on how strongly the answers lean on the norms, which only the queries can
//! tell: 2% of movielens-mips' items for recall@10 0.9, 17% of a synthetic set of norm bias
//! 0.65. A filter restricts the results, not the items scanned, as it does for the graphs
//! (the server deepens a filtered query's scan by the filter's selectivity).
//!
//! When not. Its cost grows with the collection (a share of it, not a logarithm), and on
//! vectors of one length the norm order means nothing: it is for norm-leaning MIPS sets of up
//! to a few million items. `mips_auto` chooses it where the norms spread, and grows it into
//! ip-NSW+ past a bound on its codes; named, it stays a scan at any size.

mod head;
mod params;
#[cfg(test)]
mod tests;

pub use params::NormScanParams;

use parking_lot::Mutex;

use self::head::{CodedQuery, Head};
use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{HoldsStore, Opening, Placement, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::topk::{Reservoir, TopK};
use crate::{
    BatchAnswers, IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot,
    SlotFilter, VectorIndex,
};

struct Inner {
    /// The rows by slot: what results are re-ranked from and what the index lends out.
    store: VectorStore,
    /// The same rows in norm order, as codes.
    head: Head,
}

impl HoldsStore for Inner {
    fn store(&self) -> &VectorStore {
        &self.store
    }
}

/// The norm-ordered scan; see the module docs.
pub struct NormScan {
    params: NormScanParams,
    dim: usize,
    inner: ReadMostly<Inner>,
    /// Serialises batches (and index files) so the head is built from the rows it follows.
    add_lock: Mutex<()>,
}

impl NormScan {
    /// An empty index whose rows live where `placement` says (the codes stay in memory).
    pub fn placed(params: NormScanParams, dim: usize, placement: &Placement) -> Result<Self> {
        params.validate()?;
        if dim == 0 {
            return Err(IndexError::InvalidParams(
                "dimension must be at least 1".into(),
            ));
        }
        let store = VectorStore::placed(Metric::InnerProduct, dim, placement)?;
        Ok(Self::from_store(params, store))
    }

    fn from_store(params: NormScanParams, store: VectorStore) -> Self {
        let dim = store.dim();
        let head = Head::of_rows(store.as_flat(), dim);
        Self {
            params,
            dim,
            inner: ReadMostly::new(Inner { store, head }),
            add_lock: Mutex::new(()),
        }
    }

    /// The parameters it was built with.
    pub fn params(&self) -> NormScanParams {
        self.params
    }

    /// Reads what [`VectorIndex::write_to`] wrote, its rows placed by `placement`; the codes
    /// are derived from the rows, as they were when written.
    pub fn read_placed(bytes: &[u8], placement: &Placement) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let params = NormScanParams {
            share: f32::from_bits(d.u32()?),
            oversampling: f32::from_bits(d.u32()?),
        };
        params
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        let dim = d.usize()?;
        if dim == 0 {
            return Err(IndexError::corrupt("norm_scan file with dimension 0"));
        }
        let store = VectorStore::read(&mut d, Metric::InnerProduct, dim, placement)?;
        d.finish()?;
        Ok(Self::from_store(params, store))
    }
}

impl VectorIndex for NormScan {
    fn kind(&self) -> IndexKind {
        IndexKind::NormScan
    }
    fn store(&self) -> StoreRead<'_> {
        StoreRead::new(&self.inner)
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        let inner = self.inner.read();
        self.search_locked(&inner, query, k, params, filter)
    }
    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<BatchAnswers> {
        let inner = self.inner.read();
        self.search_batch_locked(&inner, queries, k, params, filter)
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let _adds = self.add_lock.lock();
        let (first, head) = {
            let inner = self.inner.read();
            let count = inner.store.rows_in(vectors)?;
            let first = inner.store.len();
            if count == 0 {
                return Ok(first as Slot);
            }
            // Refused before the head numbers the rows (the store would refuse them too).
            if first + count > Slot::MAX as usize {
                return Err(IndexError::Full(first));
            }
            (first as Slot, inner.head.with_rows(vectors, first as Slot))
        };
        let mut inner = self.inner.write();
        inner.store.append(vectors)?;
        inner.head = head;
        Ok(first)
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let _no_adds = self.add_lock.lock();
        let inner = self.inner.read();
        let mut e = Encoder::new(out);
        e.u32(self.params.share.to_bits());
        e.u32(self.params.oversampling.to_bits());
        e.u64(self.dim as u64);
        inner.store.write(&mut e);
    }
    fn memory_bytes(&self) -> usize {
        let inner = self.inner.read();
        inner.store.memory_bytes() + inner.head.memory_bytes()
    }
}

/// What `mips_auto` needs of a norm scan it chose: searches that answer only while the scan
/// holds its rows, and a retirement that empties it once the graph it grew into is in place
/// (`then` publishes the graph while the scan is write-locked, so that every search finds
/// one or the other with its rows, never an empty index).
impl NormScan {
    /// [`VectorIndex::search`], or `None` once [`NormScan::retire`] has emptied the scan.
    pub(crate) fn search_live(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Option<Result<(Vec<Neighbor>, SearchStats)>> {
        let inner = self.inner.read();
        if inner.store.is_empty() {
            return None;
        }
        Some(self.search_locked(&inner, query, k, params, filter))
    }

    /// [`VectorIndex::search_batch`], or `None` once the scan is retired.
    pub(crate) fn search_batch_live(
        &self,
        queries: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Option<Result<BatchAnswers>> {
        let inner = self.inner.read();
        if inner.store.is_empty() {
            return None;
        }
        Some(self.search_batch_locked(&inner, queries, k, params, filter))
    }

    /// [`VectorIndex::store`], or `None` once the scan is retired.
    pub(crate) fn store_live(&self) -> Option<StoreRead<'_>> {
        let store = StoreRead::new(&self.inner);
        (!store.is_empty()).then_some(store)
    }

    /// Runs `then` with the scan write-locked (no search is inside it), then empties it.
    pub(crate) fn retire(&self, then: impl FnOnce()) {
        let _adds = self.add_lock.lock();
        let mut inner = self.inner.write();
        then();
        *inner = Inner {
            store: VectorStore::new(Metric::InnerProduct, self.dim),
            head: Head::of_rows(&[], self.dim),
        };
    }
}

impl NormScan {
    /// [`VectorIndex::search`] with the state read-locked.
    fn search_locked(
        &self,
        inner: &Inner,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        let query = match inner.store.open(query, k, params, filter)? {
            Opening::Answered(hits, stats) => return Ok((hits, stats)),
            Opening::Prepared(query) => query,
        };
        let depth = self.depth(inner, k, params);
        Ok(self.deepen(inner, &query, k, depth, params, filter, None))
    }

    /// [`VectorIndex::search_batch`] with the state read-locked: every query's estimates
    /// from one pass over the codes ([`Head::scan_many`]).
    fn search_batch_locked(
        &self,
        inner: &Inner,
        queries: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<BatchAnswers> {
        crate::check_batch(queries, self.dim)?;
        let opened = queries
            .chunks_exact(self.dim)
            .map(|query| inner.store.open(query, k, params, filter))
            .collect::<Result<Vec<_>>>()?;
        let depth = self.depth(inner, k, params);
        let coded = !params.ignore_quantization && !inner.head.reads_floats(depth);
        if !coded {
            // The float prefix and the full rows are read per query: a prefix scan is at most
            // `FLOAT_DEPTH` rows, or a whole collection within `HOT_ROWS`, in cache either way.
            return Ok(opened
                .into_iter()
                .map(|opening| match opening {
                    Opening::Answered(hits, stats) => (hits, stats),
                    Opening::Prepared(query) => {
                        self.deepen(inner, &query, k, depth, params, filter, None)
                    }
                })
                .collect());
        }
        // Every query's estimates from one pass over the codes (`Head::scan_many`), then each
        // re-ranked, and deepened alone if its filter left it short.
        let mut answers = Vec::with_capacity(opened.len());
        let mut prepared = Vec::new();
        for (i, opening) in opened.into_iter().enumerate() {
            match opening {
                Opening::Answered(hits, stats) => answers.push((hits, stats)),
                Opening::Prepared(query) => {
                    answers.push(Default::default());
                    prepared.push((i, query));
                }
            }
        }
        let head = &inner.head;
        let accepts = |position| filter.is_none_or(|accept| accept(head.slot(position)));
        let coded: Vec<CodedQuery> = prepared.iter().map(|(_, q)| CodedQuery::new(q)).collect();
        let candidates = self.candidates(k, depth, params);
        let mut estimated: Vec<Reservoir> =
            coded.iter().map(|_| Reservoir::new(candidates)).collect();
        let scanned = head.scan_many(&coded, depth, &mut |i, first, keys| {
            estimated[i].offer_run(first, keys, accepts);
        });
        for ((i, query), found) in prepared.iter().zip(estimated) {
            let (hits, computed) = self.rerank(inner, query, found, k, params);
            let first = Some((hits, scanned + computed));
            answers[*i] = self.deepen(inner, query, k, depth, params, filter, first);
        }
        Ok(answers)
    }

    /// How many of the largest-norm rows a query scans first: its `ef`, else the share.
    fn depth(&self, inner: &Inner, k: usize, params: &SearchParams) -> usize {
        params
            .ef
            .unwrap_or_else(|| self.params.default_depth(inner.head.len()))
            .max(k)
    }

    /// A query's hits, by scans of `depth` rows and deeper: rows the filter refuses (deleted
    /// points among them, which the server filters out) still count towards the depth, so a
    /// scan that finds fewer than `k` goes twice as deep, as a graph search walks on past
    /// them, until it has `k` or has read every row. `first` is a first scan's result
    /// already at hand (a batch's), with the rows it scored.
    #[allow(clippy::too_many_arguments)]
    fn deepen(
        &self,
        inner: &Inner,
        query: &[f32],
        k: usize,
        mut depth: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
        mut first: Option<(Vec<Neighbor>, u64)>,
    ) -> (Vec<Neighbor>, SearchStats) {
        let len = inner.head.len();
        let mut computed = 0;
        loop {
            let (hits, scored) = first
                .take()
                .unwrap_or_else(|| self.search_at(inner, query, k, depth, params, filter));
            computed += scored;
            if hits.len() >= k || depth >= len {
                return (hits, stats(computed));
            }
            depth = depth.saturating_mul(2).min(len);
        }
    }

    /// One scan of the `depth` largest-norm rows for a query already preprocessed: the hits,
    /// and the rows scored.
    fn search_at(
        &self,
        inner: &Inner,
        query: &[f32],
        k: usize,
        depth: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> (Vec<Neighbor>, u64) {
        // The filter restricts what enters the results, never what is scanned (as for the
        // graphs): a slot is asked about only when its key could enter.
        let head = &inner.head;
        let accepts = |position| filter.is_none_or(|accept| accept(head.slot(position)));
        let mut hot = Reservoir::new(k);
        let scanned = head.scan_hot(query, depth, &mut |first, keys| {
            hot.offer_run(first, keys, accepts);
        });
        if let Some(scanned) = scanned {
            return (head.by_slot(hot.into_sorted()), scanned);
        }
        if params.ignore_quantization {
            // The same items by their full rows (Qdrant's `quantization.ignore`).
            let mut exact = TopK::new(k);
            let mut scorer = inner.store.scorer(query, None);
            for position in head.positions(depth) {
                let slot = head.slot(position);
                let key = scorer.key(slot);
                if exact.admits(key) && accepts(position) {
                    exact.offer(Neighbor::new(position, key));
                }
            }
            return (head.by_slot(exact.into_sorted()), scorer.computed());
        }
        let coded = CodedQuery::new(query);
        let mut estimated = Reservoir::new(self.candidates(k, depth, params));
        let scanned = head.scan(&coded, depth, &mut |first, keys| {
            estimated.offer_run(first, keys, accepts);
        });
        let (hits, computed) = self.rerank(inner, query, estimated, k, params);
        (hits, scanned + computed)
    }

    /// How many estimates a scan keeps for the re-rank: `k × oversampling`, and no more
    /// than the rows scanned whatever the oversampling asked.
    fn candidates(&self, k: usize, depth: usize, params: &SearchParams) -> usize {
        let oversampling = params
            .oversampling
            .unwrap_or(self.params.oversampling)
            .max(1.0);
        ((k as f32 * oversampling).ceil() as usize)
            .min(depth)
            .max(k)
    }

    /// The best `k` of a scan's estimates (kept by position) by their full rows, or the
    /// first `k` estimates when the query asked for no rescoring; with the rows scored.
    fn rerank(
        &self,
        inner: &Inner,
        query: &[f32],
        estimated: Reservoir,
        k: usize,
        params: &SearchParams,
    ) -> (Vec<Neighbor>, u64) {
        let mut estimated = inner.head.by_slot(estimated.into_sorted());
        if !params.rescore.unwrap_or(true) {
            estimated.truncate(k);
            return (estimated, 0);
        }
        // The candidates' rows, asked for all at once so that their cache misses overlap.
        let store = &inner.store;
        for n in &estimated {
            store.prefetch(n.slot);
        }
        let mut exact = TopK::new(k);
        let mut scorer = store.scorer(query, None);
        for n in &estimated {
            exact.offer(Neighbor::new(n.slot, scorer.key(n.slot)));
        }
        (exact.into_sorted(), scorer.computed())
    }
}

fn stats(computed: u64) -> SearchStats {
    SearchStats {
        distance_computations: computed,
        ..SearchStats::default()
    }
}
