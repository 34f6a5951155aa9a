//! Exact search: a scan over every row. It is the ground truth for every recall test
//! (hnswlib's `BruteforceSearch` plays the same role), the `exact` query path of every index,
//! and the floor in benchmarks (QPS at recall 1.0).

use super::VectorStore;
use crate::topk::TopK;
use crate::{Neighbor, SearchStats, Slot, SlotFilter};

/// Above this size an unfiltered scan reads rows one after another. Such a scan streams from
/// memory, and one long stream is what the hardware prefetcher follows best: four rows read
/// side by side ran the 200k × 128 (100 MB) scan at 0.73–0.93× the one-row loop's speed in an
/// alternating probe, and a software prefetch two blocks ahead only brought it back to even.
/// Below it the rows come from cache and the four-row kernel wins (same probe: 1.14–1.16× on
/// siftsmall, 5 MB; 1.23–1.30× on glove50). 16 MB is half this project's VMs' L3: a cache-size
/// guess, not a measured optimum.
const STREAMED_BYTES: usize = 16 << 20;

impl VectorStore {
    /// The `k` lowest metric keys among accepted slots for a query already preprocessed for
    /// the metric. Rows are scored four at a time ([`crate::Metric::key4_fn`]) unless the
    /// store is larger than `STREAMED_BYTES` (16 MB), and a key enters the heap only if it
    /// can beat the current `k`-th.
    pub fn scan(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<SlotFilter<'_>>,
    ) -> (Vec<Neighbor>, SearchStats) {
        if self.dim == 0 {
            return (Vec::new(), SearchStats::default());
        }
        let mut top = TopK::new(k);
        let computed = match filter {
            None if std::mem::size_of_val(self.as_flat()) > STREAMED_BYTES => {
                self.scan_streamed(query, &mut top)
            }
            None => self.scan_by_four(query, &mut top),
            Some(accept) => self.scan_filtered(query, accept, &mut top),
        };
        (
            top.into_sorted(),
            SearchStats {
                distance_computations: computed,
                ..SearchStats::default()
            },
        )
    }

    /// One row after another, for stores that stream from memory.
    fn scan_streamed(&self, query: &[f32], top: &mut TopK) -> u64 {
        let key_fn = self.key_fn;
        for (slot, v) in self.rows().enumerate() {
            top.offer_key(slot as Slot, key_fn(query, v));
        }
        self.len() as u64
    }

    /// Four consecutive rows per kernel call, then the remainder one by one.
    fn scan_by_four(&self, query: &[f32], top: &mut TopK) -> u64 {
        let (dim, key_fn, key4_fn) = (self.dim, self.key_fn, self.key4_fn);
        let vectors = self.as_flat();
        let mut blocks = vectors.chunks_exact(4 * dim);
        for (b, block) in blocks.by_ref().enumerate() {
            let (r0, rest) = block.split_at(dim);
            let (r1, rest) = rest.split_at(dim);
            let (r2, r3) = rest.split_at(dim);
            let keys = key4_fn(query, [r0, r1, r2, r3]);
            for (j, key) in keys.into_iter().enumerate() {
                top.offer_key((4 * b + j) as Slot, key);
            }
        }
        let first = vectors.len() / dim / 4 * 4;
        for (j, v) in blocks.remainder().chunks_exact(dim).enumerate() {
            top.offer_key((first + j) as Slot, key_fn(query, v));
        }
        (vectors.len() / dim) as u64
    }

    /// Accepted rows gathered four at a time; only the rows scored are counted.
    fn scan_filtered(&self, query: &[f32], accept: SlotFilter<'_>, top: &mut TopK) -> u64 {
        self.scan_listed(
            query,
            (0..self.len() as Slot).filter(|&slot| accept(slot)),
            top,
        )
    }

    /// The `k` lowest metric keys among `slots` (a candidate list, such as a payload index
    /// finds), for a query already preprocessed for the metric. Slots beyond the store are
    /// skipped.
    pub fn scan_slots(
        &self,
        query: &[f32],
        k: usize,
        slots: impl Iterator<Item = Slot>,
    ) -> (Vec<Neighbor>, SearchStats) {
        let mut top = TopK::new(k);
        let len = self.len() as Slot;
        let computed = self.scan_listed(query, slots.filter(|&s| s < len), &mut top);
        (
            top.into_sorted(),
            SearchStats {
                distance_computations: computed,
                ..SearchStats::default()
            },
        )
    }

    /// Scores the listed rows, four at a time; returns how many were scored.
    fn scan_listed(&self, query: &[f32], slots: impl Iterator<Item = Slot>, top: &mut TopK) -> u64 {
        let mut computed = 0;
        let mut pending: [Slot; 4] = [0; 4];
        let mut held = 0;
        for slot in slots {
            pending[held] = slot;
            held += 1;
            if held == pending.len() {
                let rows = pending.map(|s| self.row(s));
                for (slot, key) in pending.into_iter().zip((self.key4_fn)(query, rows)) {
                    top.offer_key(slot, key);
                }
                computed += 4;
                held = 0;
            }
        }
        for &slot in &pending[..held] {
            top.offer_key(slot, (self.key_fn)(query, self.row(slot)));
            computed += 1;
        }
        computed
    }
}
