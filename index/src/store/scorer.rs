//! Scoring stored rows against one query, for the graph searches and re-ranking.
//!
//! Why a type. A graph search needs the query, the rows, the metric's one- and four-row
//! kernels, the filter on what may enter the results, and a count of distance computations
//! for [`crate::SearchStats`]; passed one by one they made a nine-parameter `best_first`.
//! Bundled, they are faiss' `DistanceComputer` (set the query once, then score slots) plus the
//! filter, and every computation is counted in one place.
//!
//! Codes. A scorer made for a search ([`VectorStore::search_scorer`]) on a store that keeps
//! row codes (`codes.rs`) scores their estimates instead of the rows, and its
//! [`Scorer::finish`] re-ranks what the search kept by the full rows: the graph searches stay
//! unaware of codes, apart from asking how many candidates to keep ([`Scorer::kept`]).

use super::codes::{CodedQuery, CodedRows};
use super::half::HalfRows;
use super::VectorStore;
use crate::distance::{KeyFn, KeyFn4};
use crate::{Neighbor, SearchParams, SearchStats, Slot, SlotFilter};

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
    /// What the keys come from.
    source: Source<'a>,
}

/// What a scorer scores.
enum Source<'a> {
    /// The store's rows.
    Rows,
    /// The store's codes, for a search that wants them.
    Coded(Coded<'a>),
    /// A half copy of the store's rows, for a bulk build (`half.rs`); the scorer's query is
    /// in the copy's form ([`HalfRows::query`]).
    Half(&'a HalfRows),
}

/// What a scorer needs to score codes and then settle the results.
struct Coded<'a> {
    rows: &'a CodedRows,
    query: CodedQuery,
    /// Re-rank the kept candidates by the full rows (Qdrant's `rescore`, default true).
    rescore: bool,
    /// Candidates kept per result wanted, at least 1 (Qdrant's `oversampling`).
    oversampling: f32,
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
            source: Source::Rows,
        }
    }

    /// A scorer of `half`, a half copy of this store's rows, for `query` in the copy's form
    /// ([`HalfRows::query`]); no filter.
    pub(crate) fn half_scorer<'a>(&'a self, half: &'a HalfRows, query: &'a [f32]) -> Scorer<'a> {
        Scorer {
            source: Source::Half(half),
            ..self.scorer(query, None)
        }
    }

    /// A scorer for a search: [`VectorStore::scorer`], scoring the row codes instead when
    /// the store keeps trained codes and `params` does not ask to ignore them.
    pub(crate) fn search_scorer<'a>(
        &'a self,
        query: &'a [f32],
        filter: Option<SlotFilter<'a>>,
        params: &SearchParams,
    ) -> Scorer<'a> {
        let mut scorer = self.scorer(query, filter);
        if !params.ignore_quantization {
            let coded = self.codes.as_deref().and_then(|rows| {
                Some(Coded {
                    query: rows.query(query)?,
                    rows,
                    rescore: params.rescore.unwrap_or(true),
                    oversampling: params.oversampling.unwrap_or(1.0).max(1.0),
                })
            });
            if let Some(coded) = coded {
                scorer.source = Source::Coded(coded);
            }
        }
        scorer
    }
}

impl<'a> Scorer<'a> {
    /// The key of `slot`, which must exist; counts one computation.
    #[inline]
    pub(crate) fn key(&mut self, slot: Slot) -> f32 {
        self.computed += 1;
        match &self.source {
            Source::Rows => (self.key_fn)(self.query, self.store.row(slot)),
            Source::Coded(c) => c.rows.key(&c.query, slot),
            Source::Half(h) => h.key(self.query, slot),
        }
    }

    /// The keys of four slots in one kernel call; counts four computations.
    #[inline]
    pub(crate) fn key4(&mut self, slots: [Slot; 4]) -> [f32; 4] {
        self.computed += 4;
        match &self.source {
            Source::Rows => (self.key4_fn)(self.query, slots.map(|slot| self.store.row(slot))),
            Source::Coded(c) => c.rows.key4(&c.query, slots),
            Source::Half(h) => h.key4(self.query, slots),
        }
    }

    /// Asks the CPU to start loading what [`Scorer::key`] will read for `slot`.
    #[inline]
    pub(crate) fn prefetch(&self, slot: Slot) {
        match &self.source {
            Source::Rows => self.store.prefetch(slot),
            Source::Coded(c) => c.rows.prefetch(slot),
            Source::Half(h) => h.prefetch(slot),
        }
    }

    /// The candidate list size a search for `k` results with `ef` should use: with codes, at
    /// least `k × oversampling`.
    pub(crate) fn ef(&self, k: usize, ef: usize) -> usize {
        match &self.source {
            Source::Coded(c) => ef.max((k as f32 * c.oversampling).ceil() as usize),
            Source::Rows | Source::Half(_) => ef,
        }
    }

    /// How many of its best candidates a search for `k` results should hand to
    /// [`Scorer::finish`]: all `ef` when they are to be re-ranked by the full rows (each
    /// costs one exact score, a few percent of what the traversal scored), else `k`.
    pub(crate) fn kept(&self, k: usize, ef: usize) -> usize {
        match &self.source {
            Source::Coded(c) if c.rescore => ef.max(k),
            Source::Coded(_) | Source::Rows | Source::Half(_) => k,
        }
    }

    /// The best `k` of a search's `hits` (sorted by key): re-ranked by the full rows when
    /// the search scored codes with rescoring on; otherwise as they are (keys that are the
    /// codes' estimates when rescoring is off).
    pub(crate) fn finish(&mut self, mut hits: Vec<Neighbor>, k: usize) -> Vec<Neighbor> {
        if matches!(&self.source, Source::Coded(c) if c.rescore) {
            self.computed += hits.len() as u64;
            for hit in &mut hits {
                hit.key = (self.key_fn)(self.query, self.store.row(hit.slot));
            }
            hits.sort_unstable();
        }
        hits.truncate(k);
        hits
    }

    /// Whether `slot` may enter the results.
    #[inline]
    pub(crate) fn accepts(&self, slot: Slot) -> bool {
        self.filter.is_none_or(|accept| accept(slot))
    }

    /// Counts `n` computations made without it (a link-code search scores rotated rows).
    pub(crate) fn count(&mut self, n: u64) {
        self.computed += n;
    }

    /// Distance computations so far.
    pub(crate) fn computed(&self) -> u64 {
        self.computed
    }

    /// What the search did, for [`crate::VectorIndex::search`]'s answer.
    pub(crate) fn stats(&self) -> SearchStats {
        SearchStats {
            distance_computations: self.computed,
            scored_codes: matches!(self.source, Source::Coded(_)),
        }
    }

    /// The store scored, so a graph search can check it is its own graph's.
    pub(crate) fn store(&self) -> &'a VectorStore {
        self.store
    }
}
