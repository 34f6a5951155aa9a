//! Link codes: a RaBitQ code of every layer-0 link, kept beside the links, so that a search
//! estimates the distances of a node's whole neighbour list from one block of bytes and reads
//! full rows only for the nodes it expands (SymphonyQG, Gou et al., SIGMOD 2025; RaBitQ, Gao &
//! Long, SIGMOD 2024).
//!
//! Why. A plain graph search scores every unvisited neighbour of every node it expands from
//! the neighbour's full row: one random fetch of 512 bytes at 128 dimensions, about 65 ns on a
//! graph larger than the cache against ~16 ns of arithmetic (issue #25). Here the expanded
//! node's block holds its neighbour ids, a code of `D/8` bytes per link and two floats per
//! link, in one contiguous run; the 32 links' estimates come from one FastScan pass over it,
//! and only neighbours whose estimate could still enter the results are queued. A row is read
//! once per *expanded* node (its rotated copy, which keeps distances) to give it its exact
//! key, and the best `k` are scored again from the store's rows: results carry exact keys.
//!
//! The code of a link u → o. P is a random rotation of `D` coordinates (the dimension rounded
//! up to a multiple of 4, seeded, the same for every index) and r = P(o − u) the link's
//! offset. The code keeps one bit per coordinate, bᵢ = [rᵢ > 0]. RaBitQ's estimate of the
//! offset's product with any vector y is ⟨r, y⟩ ≈ ‖r‖²·(2S − T) / Σ|rᵢ|, with
//! S = Σ_{bᵢ = 1} yᵢ and T = Σ yᵢ (unbiased over the rotation; its error grows with ‖y‖ and
//! shrinks as 1/√D). With y = P(q − u), a query's key at o follows from its key at u:
//! - squared L2: key(o) = ‖y − r‖² = key(u) + ‖r‖² − 2⟨r, y⟩;
//! - negated inner product (and cosine, on normalised rows): key(o) = key(u) − ⟨r, Pu⟩ − ⟨r, y⟩;
//!
//! so each link stores `a` (the exact terms) and `f` (2 or 1 × ‖r‖²/Σ|rᵢ|), and its estimate
//! is key(u) + a − f·(2S − T). S is a sum of lookups: for each group of four coordinates a
//! table holds the sums of y over the group's 16 subsets, rounded to bytes. y is the query's
//! offset from the node being expanded, so the tables are built anew for every expansion
//! (from Pq, rotated once per query, and the node's rotated row): an offset from one fixed
//! centre would build them once per query, but its error grows with the query's distance
//! from that centre rather than from the node: on the hard 200k set (M 16) that version
//! reached recall@10 0.933 at ef 128, where the plain search reaches 0.970 and this one 0.972.
//!
//! Upkeep. The blocks are a snapshot of layer 0: an insert batch links its nodes into the
//! live lists (marking each list it rewrites), then re-encodes the marked lists under the
//! graph's write lock. A search during a batch therefore walks the last snapshot, whose ids
//! and codes agree with each other, and never meets a node the snapshot does not hold. The
//! codes are a function of the rows and links alone, whatever batches brought them; they are
//! derived and not written to index files.
//!
//! Cost. Per node: `D` floats of its rotated row (kept for re-encoding) and per link
//! 4 + 8 + D/8 bytes — at 128 dimensions and M = 16, 512 + 32 × 28 = 1,408 bytes beside the
//! 512-byte row.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

use super::scratch::with_scratch;
use super::search::greedy_descent;
use super::Graph;
use crate::distance::codes::{code_kernels, FASTSCAN_BLOCK};
use crate::distance::{simd, Metric};
use crate::store::{prefetch_bytes, Scorer};
use crate::{Neighbor, Slot};

/// Seed of the rotation: fixed, so that codes depend on the rows and links alone.
const ROTATION_SEED: u64 = 0x7ab1_7c0d;

/// The link codes of one graph; see the module docs.
pub(crate) struct LinkCodes {
    metric: Metric,
    dim: usize,
    /// Rotated coordinates: `dim` rounded up to a multiple of 4.
    rotated_dim: usize,
    /// Layer-0 capacity of the graph's lists.
    m0: usize,
    /// The rotation's first `dim` columns, row-major (`rotated_dim` rows of `dim`).
    rotation: Vec<f32>,
    /// Every encoded node's rotated row, `rotated_dim` floats each.
    rotated: Vec<f32>,
    /// One block of [`Layout::words`] words per encoded node.
    blocks: Vec<u32>,
    layout: Layout,
    /// Nodes the snapshot holds: every one below has a block.
    sealed: usize,
    /// The graph's entry point when the snapshot was taken (packed as in the graph).
    entry: u64,
}

/// Where the parts of a node's block are, in 32-bit words.
#[derive(Clone, Copy)]
struct Layout {
    /// `[count, id₀, …, id_{m0−1}]`.
    ids: usize,
    /// `(a, f)` per link, as float bits.
    factors: usize,
    /// FastScan code blocks of 32 links each: `groups × 16` bytes per block.
    codes: usize,
    /// Code bytes per 32 links.
    block_bytes: usize,
    words: usize,
}

impl Layout {
    fn new(m0: usize, groups: usize) -> Self {
        let block_bytes = groups * 16;
        let code_blocks = m0.div_ceil(FASTSCAN_BLOCK);
        let ids = 0;
        let factors = 1 + m0;
        let codes = factors + 2 * m0;
        Self {
            ids,
            factors,
            codes,
            block_bytes,
            words: codes + code_blocks * block_bytes / 4,
        }
    }
}

/// What estimating one node's links needs: the tables of the query's offset from it and the
/// two constants that turn a table sum into 2S − T.
struct QueryTables {
    luts: Vec<u8>,
    /// 2·Σ(lowest entry per group) − T.
    base: f32,
    /// 2 × the table's step.
    scale: f32,
}

impl LinkCodes {
    /// Codes for a graph of `metric` rows of `dim` floats whose layer-0 lists hold `m0`
    /// links; nothing is encoded until [`LinkCodes::sync`].
    pub(crate) fn new(metric: Metric, dim: usize, m0: usize) -> Self {
        let rotated_dim = dim.div_ceil(4) * 4;
        Self {
            metric,
            dim,
            rotated_dim,
            m0,
            rotation: rotation(rotated_dim, dim),
            rotated: Vec::new(),
            blocks: Vec::new(),
            layout: Layout::new(m0, rotated_dim / 4),
            sealed: 0,
            entry: super::EMPTY,
        }
    }

    /// Brings the snapshot up to `graph`: rotates the new rows and re-encodes the lists
    /// marked since the last call.
    /// Runs under the graph's write lock with no batch linking.
    pub(crate) fn sync(&mut self, graph: &Graph) {
        let n = graph.len();
        let first_new = self.rotated.len() / self.rotated_dim;
        // Out of `self` while written, so the rotation and the rows can be read beside them.
        let mut rotated = std::mem::take(&mut self.rotated);
        rotated.resize(n * self.rotated_dim, 0.0);
        rotated[first_new * self.rotated_dim..]
            .par_chunks_mut(self.rotated_dim)
            .enumerate()
            .for_each(|(i, out)| self.rotate(graph.store.row((first_new + i) as Slot), out));
        self.rotated = rotated;

        let mut blocks = std::mem::take(&mut self.blocks);
        blocks.resize(n * self.layout.words, 0);
        blocks
            .par_chunks_mut(self.layout.words)
            .enumerate()
            // A plain load first: most slots are unmarked, and a swap would write them all.
            .filter(|(slot, _)| {
                let mark = &graph.relinked[*slot];
                mark.load(Ordering::Acquire) && mark.swap(false, Ordering::AcqRel)
            })
            .for_each(|(slot, block)| self.encode(graph, slot as Slot, block));
        self.blocks = blocks;
        self.sealed = n;
        self.entry = graph.entry.load(Ordering::Acquire);
    }

    /// P·x (the rotation's columns past `dim` meet the zero padding and are not stored).
    fn rotate(&self, x: &[f32], out: &mut [f32]) {
        let dot = simd::kernels().dot;
        for (o, row) in out.iter_mut().zip(self.rotation.chunks_exact(self.dim)) {
            *o = dot(row, x);
        }
    }

    fn rotated_row(&self, slot: Slot) -> &[f32] {
        let start = slot as usize * self.rotated_dim;
        &self.rotated[start..start + self.rotated_dim]
    }

    /// Writes `slot`'s block from its live layer-0 list.
    fn encode(&self, graph: &Graph, slot: Slot, block: &mut [u32]) {
        let l = self.layout;
        let mut ids = Vec::with_capacity(self.m0);
        graph.for_each_neighbor(slot, 0, |n| ids.push(n));
        ids.truncate(self.m0);
        block[l.ids] = ids.len() as u32;
        let u = self.rotated_row(slot);
        let mut r = vec![0.0f32; self.rotated_dim];
        let mut codes = vec![0u8; (l.words - l.codes) * 4];
        for (i, &o) in ids.iter().enumerate() {
            block[l.ids + 1 + i] = o;
            for ((r, x), y) in r.iter_mut().zip(self.rotated_row(o)).zip(u) {
                *r = x - y;
            }
            let norm2: f32 = r.iter().map(|x| x * x).sum();
            let abs: f32 = r.iter().map(|x| x.abs()).sum();
            let (a, weight) = match self.metric {
                Metric::L2 => (norm2, 2.0),
                Metric::InnerProduct | Metric::Cosine => {
                    let along: f32 = r.iter().zip(u).map(|(r, u)| r * u).sum();
                    (-along, 1.0)
                }
            };
            // Identical rows: the offset is zero and so is its estimate.
            let f = if abs > 0.0 { weight * norm2 / abs } else { 0.0 };
            block[l.factors + 2 * i] = a.to_bits();
            block[l.factors + 2 * i + 1] = f.to_bits();
            let (code_block, k) = (i / FASTSCAN_BLOCK, i % FASTSCAN_BLOCK);
            let bytes = &mut codes[code_block * l.block_bytes..(code_block + 1) * l.block_bytes];
            for (g, four) in r.chunks_exact(4).enumerate() {
                let nibble = four
                    .iter()
                    .enumerate()
                    .fold(0u8, |acc, (t, &x)| acc | (u8::from(x > 0.0) << t));
                bytes[16 * g + k % 16] |= if k < 16 { nibble } else { nibble << 4 };
            }
        }
        for (word, four) in block[l.codes..].iter_mut().zip(codes.chunks_exact(4)) {
            *word = u32::from_le_bytes([four[0], four[1], four[2], four[3]]);
        }
    }

    /// The tables for y (see the module docs): per group of four coordinates the sums over
    /// its 16 subsets, rounded to bytes on one step for all groups (large enough that a
    /// block's 16-bit sums cannot wrap), and the constants that turn a sum into 2S − T.
    fn tables(&self, y: &[f32], tables: &mut QueryTables) {
        let (mut lowest, mut widest, mut total_width, mut total) = (0.0, 0.0f32, 0.0, 0.0);
        for four in y.chunks_exact(4) {
            let (low, width): (f32, f32) = four
                .iter()
                .fold((0.0, 0.0), |(l, w), x| (l + x.min(0.0), w + x.abs()));
            lowest += low;
            widest = widest.max(width);
            total_width += width;
            total += four.iter().sum::<f32>();
        }
        // Each entry rounds up by at most half a step, so the groups' largest entries sum
        // to at most total_width / step + groups / 2: keep that within a u16 (from 1,029
        // dimensions on, e.g. 1,536-d embeddings, this bound sets the step, not 255).
        let groups = y.len() / 4;
        let room = f32::from(u16::MAX) - (groups / 2 + 1) as f32;
        let step = (widest / 255.0).max(total_width / room);
        let step = if step > 0.0 { step } else { 1.0 };
        let inverse = 1.0 / step;
        for (four, out) in y.chunks_exact(4).zip(tables.luts.chunks_exact_mut(16)) {
            let low: f32 = four.iter().map(|x| x.min(0.0)).sum();
            let [y0, y1, y2, y3] = [four[0], four[1], four[2], four[3]];
            let sums = [
                0.0,
                y0,
                y1,
                y0 + y1,
                y2,
                y0 + y2,
                y1 + y2,
                y0 + y1 + y2,
                y3,
                y0 + y3,
                y1 + y3,
                y0 + y1 + y3,
                y2 + y3,
                y0 + y2 + y3,
                y1 + y2 + y3,
                y0 + y1 + y2 + y3,
            ];
            for (o, s) in out.iter_mut().zip(sums) {
                *o = ((s - low) * inverse + 0.5) as u8;
            }
        }
        tables.base = 2.0 * lowest - total;
        tables.scale = 2.0 * step;
    }

    fn block(&self, slot: Slot) -> &[u32] {
        let start = slot as usize * self.layout.words;
        &self.blocks[start..start + self.layout.words]
    }

    /// Asks for what expanding `slot` reads: its block and its rotated row.
    fn prefetch(&self, slot: Slot) {
        let block = self.block(slot);
        prefetch_bytes(block.as_ptr().cast(), (block.len() * 4).div_ceil(64));
        let row = self.rotated_row(slot);
        prefetch_bytes(row.as_ptr().cast(), (row.len() * 4).div_ceil(64));
    }

    /// k-NN over the snapshot: an exact greedy descent through the upper layers (nodes the
    /// snapshot holds only), then best-first on layer 0 ordered by estimates, every expanded
    /// node scored from its rotated row (the same key up to rounding), the best `k` scored
    /// again from the store's rows. Returns them and the number of link estimates made.
    pub(crate) fn knn(
        &self,
        graph: &Graph,
        scorer: &mut Scorer<'_>,
        query: &[f32],
        k: usize,
        ef: usize,
    ) -> (Vec<Neighbor>, u64) {
        if self.entry == super::EMPTY || k == 0 {
            return (Vec::new(), 0);
        }
        let (entry, top) = super::unpack_entry(self.entry);
        let mut nearest = Neighbor::new(entry, scorer.key(entry));
        for layer in (1..=top).rev() {
            nearest = greedy_descent(graph, scorer, nearest, layer, self.sealed as Slot);
        }
        let mut rotated_query = vec![0.0; self.rotated_dim];
        self.rotate(query, &mut rotated_query);
        let mut y = vec![0.0; self.rotated_dim];
        let mut tables = QueryTables {
            luts: vec![0; self.rotated_dim * 4],
            base: 0.0,
            scale: 0.0,
        };
        let kernels = simd::kernels();
        let fastscan = code_kernels().fastscan;
        let l = self.layout;
        let mut estimates = 0u64;
        let mut hits = with_scratch(self.sealed, |s| {
            let (visited, candidates, results) =
                (&mut s.visited, &mut s.candidates, &mut s.results);
            visited.insert(nearest.slot);
            candidates.push(Reverse(nearest));
            let mut sums = [0u16; FASTSCAN_BLOCK];
            let worst = |results: &std::collections::BinaryHeap<Neighbor>| {
                results.peek().map_or(f32::INFINITY, |w| w.key)
            };
            while let Some(Reverse(current)) = candidates.pop() {
                if results.len() >= ef && current.key > worst(results) {
                    break;
                }
                let u = self.rotated_row(current.slot);
                for ((y, q), u) in y.iter_mut().zip(&rotated_query).zip(u) {
                    *y = q - u;
                }
                let key = match self.metric {
                    Metric::L2 => (kernels.dot)(&y, &y),
                    Metric::InnerProduct | Metric::Cosine => (kernels.neg_dot)(&rotated_query, u),
                };
                scorer.count(1);
                if results.len() >= ef && key >= worst(results) {
                    continue;
                }
                if scorer.accepts(current.slot) {
                    results.push(Neighbor::new(current.slot, key));
                    if results.len() > ef {
                        results.pop();
                    }
                }
                let block = self.block(current.slot);
                let count = block[l.ids] as usize;
                if count == 0 {
                    continue;
                }
                self.tables(&y, &mut tables);
                let code_bytes = bytes(&block[l.codes..]);
                for b in 0..count.div_ceil(FASTSCAN_BLOCK) {
                    let codes = &code_bytes[b * l.block_bytes..(b + 1) * l.block_bytes];
                    fastscan(&tables.luts, codes, &mut sums);
                    let links = b * FASTSCAN_BLOCK..count.min((b + 1) * FASTSCAN_BLOCK);
                    estimates += links.len() as u64;
                    for i in links {
                        let n = block[l.ids + 1 + i];
                        let a = f32::from_bits(block[l.factors + 2 * i]);
                        let f = f32::from_bits(block[l.factors + 2 * i + 1]);
                        let sum = f32::from(sums[i % FASTSCAN_BLOCK]);
                        let estimate = key + a - f * (tables.base + tables.scale * sum);
                        if results.len() >= ef && estimate >= worst(results) {
                            continue;
                        }
                        if visited.insert(n) {
                            // A link that will be the next node expanded: start fetching
                            // what expanding it reads while the rest of the list is scored.
                            if candidates
                                .peek()
                                .is_none_or(|Reverse(top)| estimate < top.key)
                            {
                                self.prefetch(n);
                            }
                            candidates.push(Reverse(Neighbor::new(n, estimate)));
                        }
                    }
                }
            }
            let mut out: Vec<Neighbor> = results.drain().collect();
            out.sort_unstable();
            out.truncate(k);
            out
        });
        // The reported keys are the store's own, as every other search's are.
        for hit in &mut hits {
            hit.key = scorer.key(hit.slot);
        }
        hits.sort_unstable();
        (hits, estimates)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        (self.rotation.capacity() + self.rotated.capacity()) * 4 + self.blocks.capacity() * 4
    }
}

/// A block's code words as bytes (little-endian, as [`LinkCodes::encode`] packed them).
fn bytes(words: &[u32]) -> &[u8] {
    // SAFETY: u8 has no alignment requirement and every bit pattern is a valid u8; the
    // slice covers exactly the words' bytes and borrows them for as long.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast(), std::mem::size_of_val(words)) }
}

/// The first `dim` columns of a seeded random rotation of `rotated_dim` coordinates: Gaussian
/// rows made orthonormal by modified Gram–Schmidt (in f64).
fn rotation(rotated_dim: usize, dim: usize) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(ROTATION_SEED);
    let mut rows: Vec<Vec<f64>> = (0..rotated_dim)
        .map(|_| {
            (0..rotated_dim)
                .map(|_| StandardNormal.sample(&mut rng))
                .collect()
        })
        .collect();
    for i in 0..rotated_dim {
        let (done, rest) = rows.split_at_mut(i);
        let row = &mut rest[0];
        for prev in done.iter() {
            let dot: f64 = row.iter().zip(prev).map(|(a, b)| a * b).sum();
            row.iter_mut().zip(prev).for_each(|(a, b)| *a -= dot * b);
        }
        let norm = row.iter().map(|a| a * a).sum::<f64>().sqrt();
        row.iter_mut().for_each(|a| *a /= norm);
    }
    rows.iter()
        .flat_map(|row| row[..dim].iter().map(|&x| x as f32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sums_fit_sixteen_bits_at_any_dimension() {
        for dim in [4usize, 128, 1028, 1536, 4096] {
            let codes = LinkCodes::new(Metric::L2, 4, 32);
            // Widths alike in every group: the case where the largest sums add up the most.
            let y: Vec<f32> = (0..dim)
                .map(|i| if i % 2 == 0 { 1.0 } else { -0.75 })
                .collect();
            let mut tables = QueryTables {
                luts: vec![0; dim * 4],
                base: 0.0,
                scale: 0.0,
            };
            codes.tables(&y, &mut tables);
            let largest: u32 = tables
                .luts
                .chunks_exact(16)
                .map(|t| u32::from(*t.iter().max().unwrap()))
                .sum();
            assert!(largest <= u32::from(u16::MAX), "dim {dim}: {largest}");
            // And the tables still say what they stand for: the all-ones nibble of each group
            // sums that group's y, up to the rounding.
            let all = f32::from(
                u16::try_from(
                    tables
                        .luts
                        .chunks_exact(16)
                        .map(|t| u32::from(t[15]))
                        .sum::<u32>(),
                )
                .unwrap(),
            );
            let s_all: f32 = y.iter().sum();
            let t: f32 = y.iter().sum();
            let estimate = tables.base + tables.scale * all; // 2S − T with S = T
            assert!(
                (estimate - (2.0 * s_all - t)).abs() <= tables.scale * dim as f32 / 8.0 + 1e-3,
                "dim {dim}: {estimate} vs {}",
                2.0 * s_all - t
            );
        }
    }
}
