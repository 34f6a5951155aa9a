//! Exact search: a scan over every vector. It is the ground truth for every recall test
//! (hnswlib's `BruteforceSearch` plays the same role), the `exact` query path of every other
//! index, and the floor in benchmarks (QPS at recall 1.0).

use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder};
use crate::sync::ReadMostly;
use crate::topk::TopK;
use crate::{
    IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter,
    VectorIndex,
};

/// Above this size an unfiltered scan reads rows one after another. Such a scan streams from
/// memory, and one long stream is what the hardware prefetcher follows best: four rows read
/// side by side ran the 200k × 128 (100 MB) scan at 0.73–0.93× the one-row loop's speed in an
/// alternating probe, and a software prefetch two blocks ahead only brought it back to even.
/// Below it the rows come from cache and the four-row kernel wins (same probe: 1.14–1.16× on
/// siftsmall, 5 MB; 1.23–1.30× on glove50). 16 MB is half this project's VMs' L3: a cache-size
/// guess, not a measured optimum.
const STREAMED_BYTES: usize = 16 << 20;

/// Scans `vectors` (row-major, `dim` each) for the `k` lowest `metric` keys among accepted
/// slots. Rows are scored four at a time ([`Metric::key4_fn`]) unless the array is larger than
/// [`STREAMED_BYTES`], and a key enters the heap only if it can beat the current `k`-th.
pub fn scan(
    vectors: &[f32],
    dim: usize,
    metric: Metric,
    query: &[f32],
    k: usize,
    filter: Option<SlotFilter<'_>>,
) -> (Vec<Neighbor>, SearchStats) {
    let (key_fn, key4_fn) = (metric.key_fn(), metric.key4_fn());
    let mut top = TopK::new(k);
    let mut computed = 0u64;
    if dim == 0 {
        return (Vec::new(), SearchStats::default());
    }
    match filter {
        None if std::mem::size_of_val(vectors) > STREAMED_BYTES => {
            for (slot, v) in vectors.chunks_exact(dim).enumerate() {
                top.offer_key(slot as Slot, key_fn(query, v));
            }
            computed = (vectors.len() / dim) as u64;
        }
        None => {
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
            computed = (vectors.len() / dim) as u64;
        }
        Some(accept) => {
            let rows = vectors.len() / dim;
            let mut pending: [Slot; 4] = [0; 4];
            let mut held = 0;
            for slot in (0..rows as Slot).filter(|&slot| accept(slot)) {
                pending[held] = slot;
                held += 1;
                if held == pending.len() {
                    let rows = pending.map(|s| row(vectors, dim, s));
                    for (slot, key) in pending.into_iter().zip(key4_fn(query, rows)) {
                        top.offer_key(slot, key);
                    }
                    computed += 4;
                    held = 0;
                }
            }
            for &slot in &pending[..held] {
                top.offer_key(slot, key_fn(query, row(vectors, dim, slot)));
                computed += 1;
            }
        }
    }
    (
        top.into_sorted(),
        SearchStats {
            distance_computations: computed,
        },
    )
}

/// Checks a vector's length against the index dimension.
pub(crate) fn check_dim(expected: usize, got: usize) -> Result<()> {
    if expected == got {
        Ok(())
    } else {
        Err(IndexError::WrongDimension { expected, got })
    }
}

/// Row `slot` of a row-major array of `dim`-float vectors; the slot must exist (hot paths
/// that only see slots the index handed out).
#[inline]
pub(crate) fn row(vectors: &[f32], dim: usize, slot: Slot) -> &[f32] {
    let start = slot as usize * dim;
    &vectors[start..start + dim]
}

/// Row `slot`, or `None` past the end (for slots that come from callers).
pub(crate) fn get_row(vectors: &[f32], dim: usize, slot: Slot) -> Option<&[f32]> {
    let start = slot as usize * dim;
    vectors.get(start..start + dim)
}

/// Validates a row-major batch and returns how many vectors it holds.
pub(crate) fn batch_len(dim: usize, vectors: &[f32]) -> Result<usize> {
    if vectors.len() % dim != 0 {
        return Err(IndexError::WrongDimension {
            expected: dim,
            got: vectors.len() % dim,
        });
    }
    Ok(vectors.len() / dim)
}

/// Exact index: vectors in one contiguous array, searched by [`scan`].
pub struct FlatIndex {
    metric: Metric,
    dim: usize,
    vectors: ReadMostly<Vec<f32>>,
}

impl FlatIndex {
    /// An empty exact index.
    pub fn new(metric: Metric, dim: usize) -> Self {
        Self {
            metric,
            dim,
            vectors: ReadMostly::new(Vec::new()),
        }
    }

    /// Reads what [`VectorIndex::write_to`] wrote.
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let metric =
            Metric::from_tag(d.u8()?).ok_or_else(|| IndexError::corrupt("unknown metric"))?;
        let dim = d.usize()?;
        let vectors = d.f32s()?;
        d.finish()?;
        if dim == 0 || vectors.len() % dim != 0 {
            return Err(IndexError::corrupt("vector array does not match dimension"));
        }
        let index = Self::new(metric, dim);
        *index.vectors.write() = vectors;
        Ok(index)
    }
}

impl VectorIndex for FlatIndex {
    fn kind(&self) -> IndexKind {
        IndexKind::Flat
    }
    fn metric(&self) -> Metric {
        self.metric
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn len(&self) -> usize {
        self.vectors.read().len() / self.dim
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        _params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        check_dim(self.dim, query.len())?;
        let q = self.metric.prepared(query);
        Ok(scan(
            &self.vectors.read(),
            self.dim,
            self.metric,
            &q,
            k,
            filter,
        ))
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let count = batch_len(self.dim, vectors)?;
        let mut store = self.vectors.write();
        let first = store.len() / self.dim;
        if first + count > Slot::MAX as usize {
            return Err(IndexError::Full(first));
        }
        let start = store.len();
        store.extend_from_slice(vectors);
        for v in store[start..].chunks_exact_mut(self.dim) {
            self.metric.preprocess(v);
        }
        Ok(first as Slot)
    }
    fn vector(&self, slot: Slot) -> Option<Vec<f32>> {
        get_row(&self.vectors.read(), self.dim, slot).map(<[f32]>::to_vec)
    }
    fn write_to(&self, out: &mut Vec<u8>) {
        let mut e = Encoder::new(out);
        e.u8(self.metric.tag());
        e.u64(self.dim as u64);
        e.f32s(&self.vectors.read());
    }
    fn memory_bytes(&self) -> usize {
        self.vectors.read().capacity() * 4
    }
}

#[cfg(test)]
mod tests;
