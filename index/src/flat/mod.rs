//! The exact index: a [`VectorStore`] and nothing else, searched by its scan. It is the ground
//! truth for recall (hnswlib's `BruteforceSearch` plays the same role) and the floor in
//! benchmarks (QPS at recall 1.0); the scan itself lives in [`crate::store`], because every
//! other index answers `exact` queries with it too.

use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{Placement, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::{
    IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter,
    VectorIndex,
};

/// Exact index: vectors in one contiguous store, searched by [`VectorStore::scan`].
pub struct FlatIndex {
    store: ReadMostly<VectorStore>,
}

impl FlatIndex {
    /// An empty exact index.
    pub fn new(metric: Metric, dim: usize) -> Self {
        Self::from_store(VectorStore::new(metric, dim))
    }

    /// An empty exact index whose rows live where `placement` says.
    pub fn placed(metric: Metric, dim: usize, placement: &Placement) -> Result<Self> {
        Ok(Self::from_store(VectorStore::placed(
            metric, dim, placement,
        )?))
    }

    fn from_store(store: VectorStore) -> Self {
        Self {
            store: ReadMostly::new(store),
        }
    }

    /// Reads what [`VectorIndex::write_to`] wrote.
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        Self::read_placed(bytes, &Placement::Memory)
    }

    /// Reads what [`VectorIndex::write_to`] wrote, its rows placed by `placement`.
    pub fn read_placed(bytes: &[u8], placement: &Placement) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let metric =
            Metric::from_tag(d.u8()?).ok_or_else(|| IndexError::corrupt("unknown metric"))?;
        let dim = d.usize()?;
        let store = VectorStore::read(&mut d, metric, dim, placement)?;
        d.finish()?;
        Ok(Self::from_store(store))
    }
}

impl VectorIndex for FlatIndex {
    fn kind(&self) -> IndexKind {
        IndexKind::Flat
    }
    fn store(&self) -> StoreRead<'_> {
        StoreRead::new(&self.store)
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        _params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        self.store.read().search_exact(query, k, filter)
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        self.store.write().append(vectors)
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let store = self.store.read();
        let mut e = Encoder::new(out);
        e.u8(store.metric().tag());
        e.u64(store.dim() as u64);
        store.write(&mut e);
    }
    fn memory_bytes(&self) -> usize {
        self.store.read().memory_bytes()
    }
}

#[cfg(test)]
mod tests;
