//! Insertion: appending vectors and linking them into the graph (HNSW paper, Alg. 1 and 4).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::Rng;
use rayon::prelude::*;

use super::search::{best_first, greedy_descent, Seeds};
use super::{pack_entry, Graph, Hnsw, MAX_LEVEL};
use crate::store::aligned::reserve_on_huge_pages;
use crate::store::{HalfRows, Scorer, VectorStore};
use crate::{Neighbor, Result, Slot};

/// The fewest rows a batch brings for its build to score a half copy of the rows.
const HALF_MIN_BATCH: usize = 4096;

/// Appends `count` vectors (preprocessed by the store) with fresh levels and empty lists;
/// returns the first new slot. Runs under the graph's write lock, which is only ever held for
/// this copy.
pub(super) fn append(
    index: &Hnsw,
    rng: &mut StdRng,
    vectors: &[f32],
    count: usize,
) -> Result<Slot> {
    let mult = index.params.level_mult();
    let levels: Vec<u8> = (0..count)
        .map(|_| {
            let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            ((-u.ln() * mult) as usize).min(MAX_LEVEL) as u8
        })
        .collect();
    let mut graph = index.graph.write();
    let first = graph.store.append(vectors)?;
    debug_assert_eq!(first as usize, graph.len(), "one row per node");
    let (m, m0) = (graph.m, graph.m0);
    // Lists are read at random all over the array, like the rows: on huge pages (see
    // `AlignedFloats::on_huge_pages`).
    reserve_on_huge_pages(&mut graph.links0, count * (1 + m0));
    graph
        .links0
        .extend((0..count * (1 + m0)).map(|_| AtomicU32::new(0)));
    for &level in &levels {
        let words = level as usize * (1 + m);
        graph
            .upper
            .push((0..words).map(|_| AtomicU32::new(0)).collect());
        graph.locks.push(Mutex::new(()));
        graph.relinked.push(AtomicBool::new(true));
    }
    graph.levels.extend_from_slice(&levels);
    Ok(first)
}

/// Called once per newly linked slot with its layer-0 construction candidates (closest
/// first); ip-NSW+ seeds its inner-product graph with them.
pub(crate) type AfterLink<'a> = &'a (dyn Fn(Slot, &[Neighbor]) + Sync);

/// Links slots `first..first+count` into the graph under the read lock, highest level first:
/// all nodes of the batch's top level, then the next level down, and so on, each level's nodes
/// in parallel (faiss' `hnsw_add_vertices` order).
///
/// Why the order matters: a node of level ℓ is a hub of layers 0‥ℓ. Linked before the
/// level-0 crowd, while its layer-0 neighbourhood is still sparse, its layer-0 list keeps
/// long-range links that later inserts do not push out, and the upper layers are complete
/// before anyone descends through them. Measured on the 200k × 128 benchmark set (M = 16,
/// efConstruction = 200, two builds each): recall@10 at ef = 64 went from 0.944–0.946 to
/// 0.956–0.962 at the same distance computations per query.
///
/// A bulk batch — at least [`HALF_MIN_BATCH`] rows and a quarter of the graph — is linked by
/// a half copy of every row (`store/half.rs`), made here and dropped at the end: the copy
/// costs one pass over the rows and 2 bytes per coordinate of every row, at most twice what
/// the batch's own floats took, and it halves what each scored neighbour fetches. Smaller
/// batches score the rows.
pub(super) fn link_range(index: &Hnsw, first: Slot, count: usize, after: Option<AfterLink<'_>>) {
    let graph = index.graph.read();
    let half = (index.half_rows && count >= HALF_MIN_BATCH && 4 * count >= graph.len())
        .then(|| HalfRows::of(&graph.store))
        .flatten();
    let rows = BuildRows {
        store: &graph.store,
        half: half.as_ref(),
    };
    let one = |slot| {
        let candidates = link(index, &graph, rows, slot);
        if let Some(after) = after {
            after(slot, &candidates);
        }
    };
    let mut order: Vec<Slot> = (first..first + count as Slot).collect();
    // Stable, so each level keeps insertion order within the batch.
    order.sort_by_key(|&slot| std::cmp::Reverse(graph.levels[slot as usize]));
    for same_level in order.chunk_by(|&a, &b| graph.levels[a as usize] == graph.levels[b as usize])
    {
        // Small groups gain little from rayon's split and lose locality.
        if same_level.len() < 8 {
            same_level.iter().for_each(|&slot| one(slot));
        } else {
            same_level.par_iter().for_each(|&slot| one(slot));
        }
    }
}

/// Inserts one appended slot into every layer up to its level; returns the layer-0
/// candidates its links were chosen from (empty for the very first node).
fn link(index: &Hnsw, graph: &Graph, rows: BuildRows<'_>, slot: Slot) -> Vec<Neighbor> {
    let level = graph.levels[slot as usize] as usize;

    // Entry point, under the entry lock when this node might become the new top.
    let mut guard = None;
    let mut entry = graph.entry();
    if entry.is_none_or(|(_, top)| level > top) {
        guard = Some(index.entry_lock.lock());
        entry = graph.entry();
        if entry.is_none() {
            graph
                .entry
                .store(pack_entry(slot, level), Ordering::Release);
            return Vec::new();
        }
    }
    let Some(entry) = entry else {
        return Vec::new();
    };
    if level <= entry.1 {
        guard = None;
    }
    let candidates = link_from(index, graph, rows, slot, level, entry);
    if guard.is_some() {
        graph
            .entry
            .store(pack_entry(slot, level), Ordering::Release);
    }
    candidates
}

/// Links `slot` (of `level`) on every layer it shares with the graph, descending from the
/// entry point `(entry slot, top level)`; returns its layer-0 candidates.
fn link_from(
    index: &Hnsw,
    graph: &Graph,
    rows: BuildRows<'_>,
    slot: Slot,
    level: usize,
    (entry, top): (Slot, usize),
) -> Vec<Neighbor> {
    let query = rows.query(slot);
    let mut scorer = rows.scorer(&query);
    let mut nearest = Neighbor::new(entry, scorer.key(entry));
    for layer in (level + 1..=top).rev() {
        nearest = greedy_descent(graph, &mut scorer, nearest, layer, Slot::MAX);
    }
    // Choose neighbours top-down (each layer's search seeds the next), but write links
    // bottom-up: a concurrent search can only reach this node on a layer after its lists on
    // every lower layer exist, so it never lands on a node with an empty layer-0 list.
    let mut entry_points = vec![nearest];
    let mut chosen_per_layer = Vec::with_capacity(level.min(top) + 1);
    for layer in (0..=level.min(top)).rev() {
        let seeds = Seeds::Scored(&entry_points);
        let found = best_first(
            graph,
            &mut scorer,
            seeds,
            index.params.ef_construction,
            layer,
        );
        let chosen = select_neighbors(rows, slot, found.clone(), index.params.m);
        chosen_per_layer.push((layer, chosen));
        entry_points = found;
    }
    for (layer, chosen) in chosen_per_layer.into_iter().rev() {
        set_list(graph, slot, layer, chosen.iter().map(|n| n.slot));
        let capacity = if layer == 0 { graph.m0 } else { graph.m };
        for n in &chosen {
            add_reverse_link(graph, rows, n.slot, slot, layer, capacity);
        }
    }
    entry_points
}

/// The HNSW neighbour-selection heuristic (paper Alg. 4, without extending candidates):
/// walk candidates closest first and keep one only if it is not closer to a neighbour already
/// kept than to the base. This keeps links pointing in diverse directions, which is what
/// makes greedy search on clustered data work.
///
/// Ties count as diverse (`>=`, where hnswlib uses `>`): with exact duplicates (movielens-mips
/// has groups of up to 100 identical vectors) a strict test keeps a single link per node, and
/// pruning a full list then disconnects the group.
fn select_neighbors(
    rows: BuildRows<'_>,
    base: Slot,
    mut candidates: Vec<Neighbor>,
    max: usize,
) -> Vec<Neighbor> {
    // Closest first; equal keys in an order that differs per base node. Ordering ties by slot
    // would make every full list keep the same oldest duplicates and leave later ones with
    // no in-links; a per-base hash turns a duplicate group into a random, connected graph.
    candidates.sort_unstable_by(|a, b| {
        a.key
            .total_cmp(&b.key)
            .then_with(|| tie_rank(a.slot, base).cmp(&tie_rank(b.slot, base)))
    });
    let mut kept: Vec<Neighbor> = Vec::with_capacity(max);
    let mut widened = Vec::new();
    for candidate in &candidates {
        if kept.len() >= max {
            break;
        }
        let v = rows.stored_query(candidate.slot, &mut widened);
        let diverse = kept.iter().all(|k| rows.key(v, k.slot) >= candidate.key);
        if diverse {
            kept.push(*candidate);
        }
    }
    kept
}

/// Overwrites a list; the count is published last so readers never see unset words.
pub(crate) fn set_list(
    graph: &Graph,
    slot: Slot,
    layer: usize,
    neighbors: impl Iterator<Item = Slot>,
) {
    let _lock = graph.locks[slot as usize].lock();
    let list = graph.list(slot, layer);
    let mut count = 0;
    for (word, n) in list[1..].iter().zip(neighbors) {
        word.store(n, Ordering::Relaxed);
        count += 1;
    }
    list[0].store(count, Ordering::Release);
    if layer == 0 {
        graph.relinked[slot as usize].store(true, Ordering::Release);
    }
}

/// Adds `new` to `target`'s list; when full, re-selects the list with the heuristic
/// (hnswlib's behaviour), so hubs keep diverse links instead of the latest arrivals.
fn add_reverse_link(
    graph: &Graph,
    rows: BuildRows<'_>,
    target: Slot,
    new: Slot,
    layer: usize,
    capacity: usize,
) {
    let _lock = graph.locks[target as usize].lock();
    let list = graph.list(target, layer);
    let count = list[0].load(Ordering::Acquire) as usize;
    if list[1..=count]
        .iter()
        .any(|w| w.load(Ordering::Relaxed) == new)
    {
        return;
    }
    if layer == 0 {
        graph.relinked[target as usize].store(true, Ordering::Release);
    }
    if count < capacity {
        list[1 + count].store(new, Ordering::Relaxed);
        list[0].store(count as u32 + 1, Ordering::Release);
        return;
    }
    let mut widened = Vec::new();
    let base = rows.stored_query(target, &mut widened);
    let candidates: Vec<Neighbor> = list[1..=count]
        .iter()
        .map(|w| w.load(Ordering::Relaxed))
        .chain(std::iter::once(new))
        .map(|s| Neighbor::new(s, rows.key(base, s)))
        .collect();
    let chosen = select_neighbors(rows, target, candidates, capacity);
    for (word, n) in list[1..].iter().zip(&chosen) {
        word.store(n.slot, Ordering::Relaxed);
    }
    list[0].store(chosen.len() as u32, Ordering::Release);
}

/// A cheap, deterministic pseudo-random rank of `slot` as seen from `base` (tie-breaking only).
#[inline]
fn tie_rank(slot: Slot, base: Slot) -> u32 {
    (slot ^ base.rotate_left(16))
        .wrapping_mul(0x9E37_79B1)
        .rotate_left(13)
}

/// The rows a build scores: the store's, or the half copy of a bulk batch
/// ([`link_range`]). Every key of one build comes from the same rows, so the neighbour
/// selection compares like with like.
#[derive(Clone, Copy)]
struct BuildRows<'a> {
    store: &'a VectorStore,
    half: Option<&'a HalfRows>,
}

impl<'a> BuildRows<'a> {
    /// The row of the slot being linked, as the query of its searches.
    fn query(&self, slot: Slot) -> Cow<'a, [f32]> {
        let row = self.store.row(slot);
        match self.half {
            Some(half) => half.query(row),
            None => row.into(),
        }
    }

    /// A scorer for `query` (from [`BuildRows::query`]).
    fn scorer<'q>(&self, query: &'q [f32]) -> Scorer<'q>
    where
        'a: 'q,
    {
        match self.half {
            Some(half) => self.store.half_scorer(half, query),
            None => self.store.scorer(query, None),
        }
    }

    /// Stored row `slot` as a query for [`BuildRows::key`]: the float row, or its half
    /// widened into `buf` (its float row is not in the cache: the searches read the halves).
    fn stored_query<'b>(&self, slot: Slot, buf: &'b mut Vec<f32>) -> &'b [f32]
    where
        'a: 'b,
    {
        match self.half {
            Some(half) => {
                half.widen_into(slot, buf);
                buf
            }
            None => self.store.row(slot),
        }
    }

    /// The key from `query` to stored row `slot`.
    #[inline]
    fn key(&self, query: &[f32], slot: Slot) -> f32 {
        match self.half {
            Some(half) => half.key(query, slot),
            None => self.store.key_fn()(query, self.store.row(slot)),
        }
    }
}
