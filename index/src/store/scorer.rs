//! Scoring stored rows against one query, for the graph searches and re-ranking.
//!
//! Why a type. A graph search needs the query, the rows, the metric's one- and four-row
//! kernels, the filter on what may enter the results, and a count of distance computations
//! for [`crate::SearchStats`]; passed one by one they made a nine-parameter `best_first`.
//! Bundled, they are faiss' `DistanceComputer` (set the query once, then score slots) plus the
//! filter, and every computation is counted in one place.

use super::VectorStore;
use crate::distance::{KeyFn, KeyFn4};
use crate::{SearchStats, Slot, SlotFilter};

/// Scores slots of one [`VectorStore`] against one query; see the module docs.
pub(crate) struct Scorer<'a> {
    store: &'a VectorStore,
    /// Preprocessed for the store's metric.
    query: &'a [f32],
    key_fn: KeyFn,
    key4_fn: KeyFn4,
    /// Restricts what may enter results, never what is traversed or scored.
    filter: Option<SlotFilter<'a>>,
    /// Distance computations so far.
    computed: u64,
}

impl VectorStore {
    /// A scorer for `query` (already preprocessed for the metric), with a result filter.
    pub(crate) fn scorer<'a>(
        &'a self,
        query: &'a [f32],
        filter: Option<SlotFilter<'a>>,
    ) -> Scorer<'a> {
        Scorer {
            store: self,
            query,
            key_fn: self.key_fn,
            key4_fn: self.key4_fn,
            filter,
            computed: 0,
        }
    }
}

impl<'a> Scorer<'a> {
    /// The key of `slot`, which must exist; counts one computation.
    #[inline]
    pub(crate) fn key(&mut self, slot: Slot) -> f32 {
        self.computed += 1;
        (self.key_fn)(self.query, self.store.row(slot))
    }

    /// The keys of four slots in one kernel call; counts four computations.
    #[inline]
    pub(crate) fn key4(&mut self, slots: [Slot; 4]) -> [f32; 4] {
        self.computed += 4;
        (self.key4_fn)(self.query, slots.map(|slot| self.store.row(slot)))
    }

    /// Whether `slot` may enter the results.
    #[inline]
    pub(crate) fn accepts(&self, slot: Slot) -> bool {
        self.filter.is_none_or(|accept| accept(slot))
    }

    /// Distance computations so far.
    pub(crate) fn computed(&self) -> u64 {
        self.computed
    }

    /// What the search did, for [`crate::VectorIndex::search`]'s answer.
    pub(crate) fn stats(&self) -> SearchStats {
        SearchStats {
            distance_computations: self.computed,
        }
    }

    /// The store scored, so a graph search can check it is its own graph's.
    pub(crate) fn store(&self) -> &'a VectorStore {
        self.store
    }
}
