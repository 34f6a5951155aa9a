//! Graph search: greedy descent through the upper layers, then best-first search on a layer
//! (HNSW paper, Alg. 2 and 5).

use std::cmp::Reverse;

use super::scratch::with_scratch;
use super::Graph;
use crate::distance::KeyFn;
use crate::{Neighbor, SearchStats, SlotFilter};

/// Moves to ever closer neighbours on one layer until none is closer (ef = 1).
pub(super) fn greedy_descent(
    graph: &Graph,
    key_fn: KeyFn,
    query: &[f32],
    mut nearest: Neighbor,
    layer: usize,
    computed: &mut u64,
) -> Neighbor {
    loop {
        let mut moved = false;
        let current = nearest.slot;
        graph.for_each_neighbor(current, layer, |n| {
            *computed += 1;
            let key = key_fn(query, graph.vector(n));
            if key < nearest.key {
                nearest = Neighbor::new(n, key);
                moved = true;
            }
        });
        if !moved {
            return nearest;
        }
    }
}

/// Best-first search of one layer from `entry_points`; returns up to `ef` hits, best first.
/// Used by insertion (no filter).
pub(super) fn search_layer(
    graph: &Graph,
    key_fn: KeyFn,
    query: &[f32],
    entry_points: &[Neighbor],
    ef: usize,
    layer: usize,
) -> Vec<Neighbor> {
    let mut computed = 0;
    best_first(
        graph,
        key_fn,
        query,
        entry_points,
        ef,
        layer,
        None,
        &mut computed,
    )
}

/// k-NN query: descend to layer 0, search it with `ef`, keep the best `k` accepted slots.
pub(super) fn knn(
    graph: &Graph,
    key_fn: KeyFn,
    query: &[f32],
    k: usize,
    ef: usize,
    filter: Option<SlotFilter<'_>>,
) -> (Vec<Neighbor>, SearchStats) {
    let Some((entry, top)) = graph.entry() else {
        return (Vec::new(), SearchStats::default());
    };
    if k == 0 {
        return (Vec::new(), SearchStats::default());
    }
    let mut computed = 1u64;
    let mut nearest = Neighbor::new(entry, key_fn(query, graph.vector(entry)));
    for layer in (1..=top).rev() {
        nearest = greedy_descent(graph, key_fn, query, nearest, layer, &mut computed);
    }
    let mut hits = best_first(
        graph,
        key_fn,
        query,
        &[nearest],
        ef,
        0,
        filter,
        &mut computed,
    );
    hits.truncate(k);
    (
        hits,
        SearchStats {
            distance_computations: computed,
        },
    )
}

/// The core loop shared by insertion and queries. `filter` restricts what enters the result
/// set, never what is traversed, so rejected nodes still route the search.
#[allow(clippy::too_many_arguments)]
pub(crate) fn best_first(
    graph: &Graph,
    key_fn: KeyFn,
    query: &[f32],
    entry_points: &[Neighbor],
    ef: usize,
    layer: usize,
    filter: Option<SlotFilter<'_>>,
    computed: &mut u64,
) -> Vec<Neighbor> {
    let accept = |slot: u32| filter.is_none_or(|f| f(slot));
    with_scratch(graph.len(), |s| {
        for &ep in entry_points {
            if !s.visited.insert(ep.slot) {
                continue;
            }
            s.candidates.push(Reverse(ep));
            if accept(ep.slot) {
                s.results.push(ep);
            }
        }
        while s.results.len() > ef {
            s.results.pop();
        }
        while let Some(Reverse(current)) = s.candidates.pop() {
            let worst = s.results.peek().map_or(f32::INFINITY, |w| w.key);
            if current.key > worst && s.results.len() >= ef {
                break;
            }
            let list = graph.list(current.slot, layer);
            let count =
                (list[0].load(std::sync::atomic::Ordering::Acquire) as usize).min(list.len() - 1);
            let words = &list[1..=count];
            for (i, word) in words.iter().enumerate() {
                if let Some(next) = words.get(i + 1) {
                    prefetch(graph, next.load(std::sync::atomic::Ordering::Relaxed));
                }
                let n = word.load(std::sync::atomic::Ordering::Relaxed);
                if !s.visited.insert(n) {
                    continue;
                }
                *computed += 1;
                let key = key_fn(query, graph.vector(n));
                let worst = s.results.peek().map_or(f32::INFINITY, |w| w.key);
                if s.results.len() < ef || key < worst {
                    s.candidates.push(Reverse(Neighbor::new(n, key)));
                    if accept(n) {
                        s.results.push(Neighbor::new(n, key));
                        if s.results.len() > ef {
                            s.results.pop();
                        }
                    }
                }
            }
        }
        let mut out: Vec<Neighbor> = s.results.drain().collect();
        out.sort_unstable();
        out
    })
}

/// Hints the CPU to fetch the next neighbour's vector while this one is scored.
#[inline]
fn prefetch(graph: &Graph, slot: u32) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = slot as usize * graph.dim;
        if let Some(v) = graph.vectors.get(start) {
            // SAFETY: `_mm_prefetch` is a hint that never faults; the pointer is in bounds.
            unsafe {
                std::arch::x86_64::_mm_prefetch(
                    (v as *const f32).cast::<i8>(),
                    std::arch::x86_64::_MM_HINT_T0,
                );
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (graph, slot);
    }
}
