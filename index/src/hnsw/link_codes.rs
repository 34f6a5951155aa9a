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
//! once per *expanded* node (its rotated copy, which keeps distances, in bfloat16) to give it
//! its key, and the best `2k` are scored again from the store's rows: results carry exact
//! keys.
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
//! is key(u) + a − f·(2S − T). S is a sum of lookups: y is rounded to small integers on one
//! step and, for each group of four coordinates, a table holds the sums over the group's 16
//! subsets (`LinkTables` in `distance/codes.rs`).
//!
//! One set of tables per query. y changes with the node expanded, but 2S − T = Σ ±yᵢ (signs from
//! the code's bits) is linear in y, and y = z − (Pu − c) with z = Pq − c the query's offset from
//! one fixed centre c (the rotated mean of the first 1,024 rows). So the tables are built once per
//! query, of z, and each link's `a` carries f times its own code's signed sum of Pu − c (SymphonyQG
//! folds the parent's terms into each link's factors the same way). The estimate is the one from
//! the node's own offset, exactly but for the tables' rounding, which is now of z: a step of
//! max|zᵢ|/31 rather than max|yᵢ|/31, a spread of step·√(D/6) in 2S − T, against an estimator error
//! of about 0.6·‖y‖ (below). Building the tables at every expansion, and writing out the offset
//! they came from, had cost 12% of the search's instructions on the hard 200k set (callgrind,
//! BENCHMARKS.md). (Two earlier tries built the tables once per query and lost recall per `ef`:
//! from the offset to a fixed centre, 0.933 at ef 128 on the hard 200k set against 0.972, and from
//! the rotated query itself with the node's terms folded into each link, 0.952 at ef 192 against
//! 0.954 at ef 96. Each then estimated part of the offset's product exactly rather than through the
//! code's signs, by all we can tell from their records, and so estimated a longer vector; here the
//! recall per `ef` is that of the tables per expansion, to within 0.003 at every `ef` measured:
//! BENCHMARKS.md.)
//!
//! Search. One block per node holds everything its expansion reads, in one run of cache lines
//! (on huge pages: a random block read otherwise costs a page walk): the node's rotated row
//! (for its key), its link count and ids, the links' `a` and `f`, and their codes. The frontier
//! is hnswlib's: candidates by estimate, the best `ef` scored keys as results; a popped node
//! whose scored key misses the results is not expanded, and a link is queued only if its
//! estimate beats the worst result. The next candidate's block is fetched while the current one
//! is expanded, and the rows of the two candidates behind it: on the hard 1M set (M 16, ef 192,
//! recall@10 0.953) a query popped 445 nodes and expanded 305 of them, and a run of pops that
//! are not expanded would otherwise wait on one row fetch after another (1.09–1.11× the QPS
//! there; unchanged at 200k, where the blocks mostly sit in the L3). Both are asked into the
//! second-level cache, not the first: on an Intel Xeon with 48 KiB of L1d, 1.15× the QPS at
//! recall@10 0.95 on the hard 1M set, the same recall per `ef` (`store::prefetch_bytes_to_l2`;
//! BENCHMARKS.md).
//!
//! A node is marked visited when it is popped, not when it is queued (as SymphonyQG marks
//! it), so a link whose estimate is better than the one that queued the node queues it
//! again, and the older entry is dropped when it comes up. A link's estimate errs by about
//! 0.6·‖y‖ in units of 2S − T (the offset's part across the link, through the code's signs),
//! so the same node's estimates from different in-links differ; marked at the queue, a node
//! first reached through a pessimistic estimate kept it, and often ended the search unpopped.
//! On one hard 1M graph (M 16, Intel Xeon) recall@10 at ef 192 rose from 0.954 to 0.963,
//! with 1.09×, 1.07× and 0.93× the QPS at recall@10 0.9, 0.95 and 0.99 (medians of two,
//! twelve and two alternating rounds on a noisy machine: at 0.95 they ranged 0.98–1.16×),
//! and on the hard 200k set 1.11×, 1.18× and 1.09× (two, eight and two rounds). The loss at
//! 0.99 is in the pops: at ef 384 a query popped 1,371 entries rather than 854, 296 of them
//! stale and 472 (rather than 260) nodes whose row was read and whose key then missed the
//! results, for the same 600 expansions. Pushing a node again only when its estimate
//! improved on the last one (a direct-mapped table of queued keys) found the same nodes and
//! cost more than the stale entries it saved.
//!
//! What an expansion costs, and why it is built this way. On a hard 200k×128 set (M 16, ef
//! 96: 129 expansions per query, recall@10 0.954) the first version took about 3.9 µs of
//! query time per expansion: it rounded every table entry from floats one at a time, tested
//! the 32 estimates one branch each, and read the rotated row and the block from two places
//! on 4 KiB pages. Rounding y once and building the tables by byte shuffles, testing the
//! estimates as one bit mask, one block per node and huge pages brought it to about 0.9 µs
//! (4.2× the QPS at the same recall, in one probe run); about 0.7 µs on an AMD EPYC with
//! 32 MiB of L3, where full rows cost so much less that the plain graph keeps pace. A sorted
//! pool of `ef` estimates as the frontier (SymphonyQG's) was tried and dropped: it reached
//! less recall per estimate, and its binary search and moves cost more than the heaps' pushes.
//!
//! Instructions, counted (callgrind, the same set at ef 96, recall@10 0.951, 216 pops per
//! query): about 743,000 per query, 3,400 per pop, against SymphonyQG's 340,000 at recall
//! 0.955; on the AMD EPYC that ran at about two per cycle, so at 200k the search is bound by
//! its instructions rather than by memory. The frontier now holds packed integers (a heap step
//! compares two, where the pairs' total order took a dozen instructions: `topk::Packed`) and
//! one kernel widens the node's row, subtracts it from the query and sums both keys
//! (`WidenKeys`; it then also wrote the offset out for the tables): 22% fewer instructions
//! (577,000), with the same recall at every setting measured (the keys' sums only change
//! order). At 1M, where the walk waits on memory more,
//! they gained about 5% (and at 200k about 8%: medians of seven rounds on a noisy machine).
//! Interleaving the walks of two or four queries of a batch on one thread, so that one's
//! block fetches overlap another's work, gained nothing at either size (BENCHMARKS.md).
//! Then the estimates: FastScan's sums leave the kernel in registers, split by even and odd
//! code, and are turned into estimates, compared with the cut and mapped to the frontier's
//! packed keys there (`LinkEstimates`); the links are laid out in that lane order, so nothing
//! is put back in code order, and the lanes past a list's end are padded so that they never
//! pass. With the results' heap of packed keys (the worst replaced in one sift) and the block
//! prefetched at constant offsets, 506,000 instructions per query (−12%), recall unchanged;
//! about 1.05× the QPS at 1M and 1.09× at 200k (medians of five and seven rounds).
//!
//! Lists are the graph's own. SymphonyQG fills every list to its degree, since one FastScan
//! pass scores 32 links at the price of 21 (the mean layer-0 degree of Cairn's graph on the
//! hard 200k set at M 16, where 91% of the nodes have fewer than 32). Filling the code lists
//! to 32 with the nearest two-hop neighbours, or with SymphonyQG's relaxed-angle choice
//! among them, was tried in a probe and dropped: recall per `ef` rose (0.951 → 0.958 at ef
//! 96), QPS per `ef` fell by as much, and at recall 0.951 both ran at the unfilled lists'
//! QPS (11.0k and 11.1k q/s against 11.1k), for 5–6× the encoding time. A fill would also
//! make the codes depend on when each list was last encoded.
//!
//! Upkeep. The blocks are a snapshot of layer 0: an insert batch links its nodes into the
//! live lists (marking each list it rewrites), then re-encodes the marked lists under the
//! graph's write lock. A search during a batch therefore walks the last snapshot, whose ids
//! and codes agree with each other, and never meets a node the snapshot does not hold. The
//! codes are a function of the rows and links alone, whatever batches brought them: the
//! centre is the mean of the first 1,024 rows by slot, and while an index has fewer, each
//! batch moves it and re-encodes every list. They are derived and not written to index
//! files.
//!
//! The rotated row in bfloat16. It is a third of the block's bytes in floats, and it is read
//! for two things that do not need 24 bits of mantissa: the popped node's key, which only
//! decides whether the node is expanded and where it sits among the results, and, when the
//! lists are encoded, the offsets whose signs make the codes. Eight significant bits
//! keep each coordinate within 2⁻⁸ of its value, and the final `2k` are scored from the
//! store's rows. On one hard 1M graph (M 16, AMD EPYC, two interleaved rounds) it read
//! 0.98–1.08× the float rows' QPS at ef 128–256 with the same recall (0.9531 against 0.9534
//! at ef 192); on the 200k set 1.03×; on siftsmall and pypi-minilm, in cache, 0.93–1.10×.
//! What it buys is memory: a sixth of the block at 128 dimensions, a fifth at 384. (bfloat16
//! rather than the build's half floats: it has the floats' range, so no row needs a shift or
//! a fallback.)
//!
//! Cost. Per node one block: `D` bfloat16 values of its rotated row and, per lane of its code
//! blocks (the layer-0 capacity rounded up to 32), 4 + 8 + D/8 bytes, rounded up to a cache
//! line — at 128 dimensions and M = 16, 256 + 4 + 32 × 28 → 1,216 bytes beside the 512-byte
//! row.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

use super::scratch::with_scratch;
use super::search::greedy_descent;
use super::Graph;
use crate::distance::codes::{
    code_kernels, widen_bf16_pair, EstimateTerms, FASTSCAN_BLOCK, LANE_CODE,
};
use crate::distance::{simd, Metric};
use crate::store::aligned::AlignedFloats;
use crate::store::{prefetch_bytes_to_l2, Scorer};
use crate::topk::Packed;
use crate::{Neighbor, Slot};

/// Seed of the rotation: fixed, so that codes depend on the rows and links alone.
const ROTATION_SEED: u64 = 0x7ab1_7c0d;

/// Rows the centre is the mean of: the first ones by slot, so that an index gets the same
/// centre whatever batches brought its rows, and after a load (as the row codes train on
/// the first rows: `store/codes.rs`).
const CENTRE_ROWS: usize = 1024;

/// Lists re-encoded per parallel pass of [`LinkCodes::sync`]: bounds the encoded copies held
/// before they are written into the blocks.
const ENCODE_CHUNK: usize = 1 << 14;

/// The widest rows link codes take: a FastScan sum adds one table entry (up to 8·h, h ≥ 1)
/// per group of four coordinates in 16 bits, so at most 8,191 groups.
pub(crate) const MAX_DIM: usize = 4 * (u16::MAX as usize / 8);

/// The largest rounded table coordinate for `groups` groups of four: 31 (a table entry, at
/// most 8·h, fits a byte), or less where the groups are so many that the 16-bit sums could
/// wrap.
fn table_h(groups: usize) -> u8 {
    (usize::from(u16::MAX) / (8 * groups.max(1))).clamp(1, 31) as u8
}

/// The link codes of one graph; see the module docs.
pub(crate) struct LinkCodes {
    metric: Metric,
    dim: usize,
    /// Rotated coordinates: `dim` rounded up to a multiple of 4.
    rotated_dim: usize,
    /// Layer-0 capacity of the graph's lists.
    m0: usize,
    /// The largest rounded table coordinate (see `LinkTables` and [`table_h`]).
    h: u8,
    /// The rotation's first `dim` columns, row-major (`rotated_dim` rows of `dim`).
    rotation: Vec<f32>,
    /// The rotated mean of the first `centre_rows` rows (empty before any): the point the
    /// query's tables are built from (see [`LinkCodes::knn`]).
    centre: Vec<f32>,
    /// Rows the centre is the mean of: up to [`CENTRE_ROWS`].
    centre_rows: usize,
    /// One block of [`Layout::words`] words per node (floats, ids and codes as float bits).
    blocks: AlignedFloats,
    layout: Layout,
    /// Nodes the snapshot holds: every one below has a block.
    sealed: usize,
    /// The graph's entry point when the snapshot was taken (packed as in the graph).
    entry: u64,
}

/// Where the parts of a node's block are, in 32-bit words.
#[derive(Clone, Copy)]
///
/// The node's rotated row comes first, `rotated_dim` bfloat16 values from word 0, two per
/// word (see [`pack_row`]).
struct Layout {
    /// The number of links.
    count: usize,
    /// Link ids, then `a` and `f` per link: one per lane of the code blocks, link i of a
    /// block in lane i, whose code is the block's code [`LANE_CODE`]`[i]`; the lanes past the
    /// last link are padded with a = ∞ and f = 0, so that their estimates never pass.
    ids: usize,
    a: usize,
    f: usize,
    /// FastScan code blocks of 32 links each: `groups × 16` bytes per block.
    codes: usize,
    /// Code bytes per 32 links.
    block_bytes: usize,
    /// Words per block, whole cache lines.
    words: usize,
}

impl Layout {
    fn new(rotated_dim: usize, m0: usize) -> Self {
        let block_bytes = rotated_dim / 4 * 16;
        let code_blocks = m0.div_ceil(FASTSCAN_BLOCK);
        let lanes = code_blocks * FASTSCAN_BLOCK;
        let count = row_words(rotated_dim);
        let ids = count + 1;
        let a = ids + lanes;
        let f = a + lanes;
        let codes = f + lanes;
        Self {
            count,
            ids,
            a,
            f,
            codes,
            block_bytes,
            words: (codes + code_blocks * block_bytes / 4).div_ceil(16) * 16,
        }
    }
}

impl LinkCodes {
    /// Codes for a graph of `metric` rows of `dim` floats (at most [`MAX_DIM`]) whose
    /// layer-0 lists hold `m0` links; nothing is encoded until [`LinkCodes::sync`].
    pub(crate) fn new(metric: Metric, dim: usize, m0: usize) -> Self {
        debug_assert!(dim <= MAX_DIM);
        let rotated_dim = dim.div_ceil(4) * 4;
        let groups = rotated_dim / 4;
        Self {
            metric,
            dim,
            rotated_dim,
            m0,
            h: table_h(groups),
            rotation: rotation(rotated_dim, dim),
            centre: Vec::new(),
            centre_rows: 0,
            blocks: AlignedFloats::on_huge_pages(0),
            layout: Layout::new(rotated_dim, m0),
            sealed: 0,
            entry: super::EMPTY,
        }
    }

    /// Brings the snapshot up to `graph`: rotates the new rows into new blocks and re-encodes
    /// the lists marked since the last call.
    /// Runs under the graph's write lock with no batch linking.
    pub(crate) fn sync(&mut self, graph: &Graph) {
        let (n, words, rd) = (graph.len(), self.layout.words, self.rotated_dim);
        let row_words = row_words(rd);
        let first_new = self.blocks.len() / words;
        // Out of `self` while written, so the rotation can be read beside them.
        let mut blocks = std::mem::replace(&mut self.blocks, AlignedFloats::on_huge_pages(0));
        blocks
            .grow((n - first_new) * words)
            .par_chunks_mut(words)
            .enumerate()
            .for_each_init(
                || vec![0.0f32; rd],
                |rotated, (i, block)| {
                    self.rotate(graph.store.row((first_new + i) as Slot), rotated);
                    pack_row(rotated, &mut block[..row_words]);
                },
            );
        // Until the centre has its rows, every sync moves it, and every list's `a` with it.
        let sample = n.min(CENTRE_ROWS);
        let recentred = sample > self.centre_rows;
        if recentred {
            self.centre = mean_row(&blocks.as_slice()[..sample * words], words, rd);
            self.centre_rows = sample;
        }
        // A plain load first: most slots are unmarked, and a swap would write them all.
        let marked: Vec<Slot> = (0..n as Slot)
            .into_par_iter()
            .filter(|&slot| {
                let mark = &graph.relinked[slot as usize];
                let relinked = mark.load(Ordering::Acquire) && mark.swap(false, Ordering::AcqRel);
                relinked || recentred
            })
            .collect();
        // An encoding reads the neighbours' rotated rows from other blocks, so the lists of a
        // chunk are encoded first and written after.
        for chunk in marked.chunks(ENCODE_CHUNK) {
            let rows = blocks.as_slice();
            let lists: Vec<Vec<f32>> = chunk
                .par_iter()
                .map(|&slot| self.encode(graph, rows, slot))
                .collect();
            let all = blocks.as_mut_slice();
            for (&slot, list) in chunk.iter().zip(lists) {
                let start = slot as usize * words;
                all[start + row_words..start + words].copy_from_slice(&list);
            }
        }
        self.blocks = blocks;
        self.sealed = n;
        self.entry = graph.entry.load(Ordering::Acquire);
    }

    /// P·x (the rotation's columns past `dim` meet the zero padding and are not stored), four
    /// rows per kernel call (`rotated_dim` is a multiple of four): x is read once for the four,
    /// about half the instructions of a product per row.
    fn rotate(&self, x: &[f32], out: &mut [f32]) {
        let neg_dot4 = simd::kernels().neg_dot4;
        let d = self.dim;
        for (four, rows) in out
            .chunks_exact_mut(4)
            .zip(self.rotation.chunks_exact(4 * d))
        {
            let products = neg_dot4(x, [0, 1, 2, 3].map(|i| &rows[i * d..(i + 1) * d]));
            for (o, p) in four.iter_mut().zip(products) {
                *o = -p;
            }
        }
    }

    /// The words of `slot`'s block after its rotated row, from its live layer-0 list; `rows`
    /// are the blocks, read for the neighbours' rotated rows.
    fn encode(&self, graph: &Graph, rows: &[f32], slot: Slot) -> Vec<f32> {
        let l = self.layout;
        let rd = self.rotated_dim;
        let row_words = row_words(rd);
        let rotated = |s: Slot, out: &mut [f32]| {
            unpack_row(
                &rows[s as usize * l.words..s as usize * l.words + row_words],
                out,
            );
        };
        let mut ids = Vec::with_capacity(self.m0);
        graph.for_each_neighbor(slot, 0, |n| ids.push(n));
        ids.truncate(self.m0);
        let mut list = vec![0.0f32; l.words - row_words];
        let at = |word: usize| word - row_words;
        list[at(l.count)] = f32::from_bits(ids.len() as u32);
        let (mut u, mut other) = (vec![0.0f32; rd], vec![0.0f32; rd]);
        rotated(slot, &mut u);
        let u = &u[..];
        let mut r = vec![0.0f32; rd];
        let mut codes = vec![0u8; (l.words - l.codes) * 4];
        for (i, &o) in ids.iter().enumerate() {
            list[at(l.ids) + i] = f32::from_bits(o);
            rotated(o, &mut other);
            for ((r, x), y) in r.iter_mut().zip(&other).zip(u) {
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
            // The search's tables are of Pq − c, not of Pq − u: 2S − T is linear in the
            // offset, so its part from u − c, over this code's signs, is added here.
            let from_centre: f32 = r
                .iter()
                .zip(u)
                .zip(&self.centre)
                .map(|((r, u), c)| if *r > 0.0 { u - c } else { c - u })
                .sum();
            list[at(l.a) + i] = a + f * from_centre;
            list[at(l.f) + i] = f;
            // The link's lane is its place in the list; its code goes where FastScan sums
            // that lane.
            let (code_block, c) = (i / FASTSCAN_BLOCK, LANE_CODE[i % FASTSCAN_BLOCK]);
            let bytes = &mut codes[code_block * l.block_bytes..(code_block + 1) * l.block_bytes];
            for (g, four) in r.chunks_exact(4).enumerate() {
                let nibble = four
                    .iter()
                    .enumerate()
                    .fold(0u8, |acc, (t, &x)| acc | (u8::from(x > 0.0) << t));
                bytes[16 * g + c % 16] |= if c < 16 { nibble } else { nibble << 4 };
            }
        }
        for lane in ids.len()..l.f - l.a {
            list[at(l.a) + lane] = f32::INFINITY;
        }
        for (word, four) in list[at(l.codes)..].iter_mut().zip(codes.chunks_exact(4)) {
            *word = f32::from_bits(u32::from_le_bytes([four[0], four[1], four[2], four[3]]));
        }
        list
    }

    fn block(&self, slot: Slot) -> &[f32] {
        let start = slot as usize * self.layout.words;
        &self.blocks.as_slice()[start..start + self.layout.words]
    }

    /// Asks for what expanding `slot` reads: its block (into the second-level cache, as
    /// [`LinkCodes::prefetch_row`]: see [`prefetch_bytes_to_l2`]).
    fn prefetch(&self, slot: Slot) {
        let block = self.block(slot);
        prefetch_bytes_to_l2(block.as_ptr().cast(), block.len() / 16);
    }

    /// Asks for what deciding whether to expand `slot` reads: its rotated row, the block's
    /// first lines.
    fn prefetch_row(&self, slot: Slot) {
        let block = self.block(slot);
        prefetch_bytes_to_l2(
            block.as_ptr().cast(),
            row_words(self.rotated_dim).div_ceil(16),
        );
    }

    /// k-NN over the snapshot: an exact greedy descent through the upper layers (nodes the
    /// snapshot holds only), then a best-first search of layer 0 with candidates by estimate
    /// and the best `ef` scored keys as results (every popped node scored from its rotated
    /// row: the same key up to bfloat16 rounding); the best `2k` are scored again from the
    /// store's rows and the best `k` of those kept. Returns them and the number of link
    /// estimates made.
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
        let l = self.layout;
        let rd = self.rotated_dim;
        let mut rotated_query = vec![0.0; rd];
        self.rotate(query, &mut rotated_query);
        let row_words = row_words(rd);
        let code_kernels = code_kernels();
        debug_assert_eq!(self.centre.len(), rd);
        // One set of tables for the whole query, of its offset from the centre.
        let z: Vec<f32> = rotated_query
            .iter()
            .zip(&self.centre)
            .map(|(q, c)| q - c)
            .collect();
        let mut luts = vec![0u8; 4 * rd];
        let (step, total) = (code_kernels.link_tables)(&z, self.h, &mut luts);
        // 2S − T = base + scale·(table sum): see `LinkTables`.
        let bias_total = 8.0 * f32::from(self.h) * (rd / 4) as f32;
        let (base, scale) = (-bias_total * step - total, 2.0 * step);
        let mut estimates = 0u64;
        let mut hits = with_scratch(self.sealed, |s| {
            let (visited, candidates, results) =
                (&mut s.visited_bits, &mut s.frontier, &mut s.best);
            // Marked when popped, not when queued (see the module docs: a node's later,
            // better estimate queues it again).
            candidates.push(Reverse(Packed::new(nearest)));
            // The links' estimates, as packed keys (`topk::ordered_bits`).
            let mut keys = [0u32; FASTSCAN_BLOCK];
            // The key a node must beat to matter: the worst of `ef` results once there are.
            let mut worst = f32::INFINITY;
            while let Some(Reverse(current)) = candidates.pop() {
                let current = current.neighbor();
                if current.key > worst {
                    break;
                }
                // A node popped before, from an entry with a better estimate.
                if !visited.insert(current.slot) {
                    continue;
                }
                // Fetched while this node is expanded: the next one, unless a link beats it
                // (and unless it is a stale entry, whose block was read when it was popped).
                if let Some(Reverse(next)) = candidates.peek() {
                    if !visited.contains(next.slot()) {
                        self.prefetch(next.slot());
                    }
                }
                // And the rows of the two that follow it in the heap, one of which is next but
                // one unless a link beats it: about a third of the nodes popped are not
                // expanded (their scored key misses the results), and such a run of pops would
                // otherwise wait on one row fetch after another.
                for Reverse(after) in candidates.as_slice().iter().skip(1).take(2) {
                    self.prefetch_row(after.slot());
                }
                let block = self.block(current.slot);
                let (sq, dot) = (code_kernels.widen_keys)(&rotated_query, &block[..row_words]);
                let key = match self.metric {
                    Metric::L2 => sq,
                    Metric::InnerProduct | Metric::Cosine => -dot,
                };
                scorer.count(1);
                // A node whose scored key is out of the results leads nowhere better.
                if key >= worst {
                    continue;
                }
                if scorer.accepts(current.slot) {
                    let hit = Packed::new(Neighbor::new(current.slot, key));
                    // Full, the worst result gives way to a better one: one sift down, where a
                    // push and a pop of the worst took two (a NaN key, which orders above
                    // every other, never displaces one, as with the push and the pop).
                    if results.len() < ef {
                        results.push(hit);
                    } else if let Some(mut top) = results.peek_mut() {
                        if hit < *top {
                            *top = hit;
                        }
                    }
                    if results.len() >= ef {
                        worst = results.peek().map_or(f32::INFINITY, |w| w.key());
                    }
                }
                let count = block[l.count].to_bits() as usize;
                if count == 0 {
                    continue;
                }
                let code_bytes = bytes(&block[l.codes..]);
                for b in 0..count.div_ceil(FASTSCAN_BLOCK) {
                    let codes = &code_bytes[b * l.block_bytes..(b + 1) * l.block_bytes];
                    let first = b * FASTSCAN_BLOCK;
                    let a = &block[l.a + first..l.a + first + FASTSCAN_BLOCK];
                    let f = &block[l.f + first..l.f + first + FASTSCAN_BLOCK];
                    let terms = EstimateTerms {
                        key,
                        base,
                        scale,
                        cut: worst,
                    };
                    // The links whose estimate could enter the results, as one bit mask (the
                    // padded lanes never in it).
                    let mut below =
                        (code_kernels.link_estimates)(&luts, codes, a, f, terms, &mut keys);
                    estimates += (count.min(first + FASTSCAN_BLOCK) - first) as u64;
                    while below != 0 {
                        let i = below.trailing_zeros() as usize;
                        below &= below - 1;
                        let n = block[l.ids + first + i].to_bits();
                        if !visited.contains(n) {
                            let link = Packed::from_ordered(keys[i], n);
                            // A link that will be the next node expanded: start fetching its
                            // block while the rest of the list is scored.
                            if candidates.peek().is_none_or(|Reverse(top)| link < *top) {
                                self.prefetch(n);
                            }
                            candidates.push(Reverse(link));
                        }
                    }
                }
            }
            let mut out: Vec<Neighbor> = results.drain().map(Packed::neighbor).collect();
            out.sort_unstable();
            out.truncate(RESCORE_PER_RESULT * k);
            out
        });
        // The block rows are rounded, so the best of them are scored again from the store's
        // rows and the best `k` of those kept: the reported keys are the store's own, as
        // every other search's are. The rows are all asked for first, so their fetches overlap.
        for hit in &hits {
            scorer.prefetch(hit.slot);
        }
        for hit in &mut hits {
            hit.key = scorer.key(hit.slot);
        }
        hits.sort_unstable();
        hits.truncate(k);
        (hits, estimates)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        (self.rotation.capacity() + self.centre.capacity()) * 4 + self.blocks.capacity_bytes()
    }
}

/// The mean of the rotated rows in `blocks` (`words` words each), in f64 sums; a coordinate
/// that a row without a finite value there makes infinite or NaN is 0 (any centre is
/// correct, and one such row must not spoil every estimate).
fn mean_row(blocks: &[f32], words: usize, rotated_dim: usize) -> Vec<f32> {
    // At most `CENTRE_ROWS` rows: one pass on one thread.
    let (mut sums, mut row) = (vec![0.0f64; rotated_dim], vec![0.0f32; rotated_dim]);
    for block in blocks.chunks_exact(words) {
        unpack_row(&block[..row_words(rotated_dim)], &mut row);
        sums.iter_mut()
            .zip(&row)
            .for_each(|(s, &x)| *s += f64::from(x));
    }
    let n = (blocks.len() / words) as f64;
    sums.iter()
        .map(|&s| (s / n) as f32)
        .map(|c| if c.is_finite() { c } else { 0.0 })
        .collect()
}

/// Results scored again from the store's rows, per result asked for (see [`LinkCodes::knn`]).
const RESCORE_PER_RESULT: usize = 2;

/// Words of a block's rotated row: two bfloat16 values per word (`rotated_dim` is a multiple
/// of 4).
fn row_words(rotated_dim: usize) -> usize {
    rotated_dim / 2
}

/// `row` as bfloat16 (the float's top 16 bits, rounded to nearest even) into `words`, two per
/// word: an even coordinate in a word's low half, the next in its high half, so that
/// [`unpack_row`] (and the search's `widen_keys` kernel) widen both with a shift and a mask.
fn pack_row(row: &[f32], words: &mut [f32]) {
    fn bf16(x: f32) -> u32 {
        let bits = x.to_bits();
        if !x.is_finite() {
            // Infinities keep their bits; a NaN keeps a mantissa bit, so stays a NaN.
            return (bits >> 16) | u32::from(x.is_nan()) << 6;
        }
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
        // A finite float past bfloat16's largest saturates to it rather than to infinity.
        if rounded & 0x7f80 == 0x7f80 {
            rounded - 1
        } else {
            rounded
        }
    }
    debug_assert!(row.len().is_multiple_of(2) && words.len() == row.len() / 2);
    for (word, pair) in words.iter_mut().zip(row.chunks_exact(2)) {
        *word = f32::from_bits(bf16(pair[0]) | (bf16(pair[1]) << 16));
    }
}

/// The floats [`pack_row`] packed into `words`, widened into `out`.
#[inline]
fn unpack_row(words: &[f32], out: &mut [f32]) {
    for (pair, &word) in out.chunks_exact_mut(2).zip(words) {
        pair.copy_from_slice(&widen_bf16_pair(word));
    }
}

/// A block's code words as bytes (little-endian, as [`LinkCodes::encode`] packed them).
fn bytes(words: &[f32]) -> &[u8] {
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
    fn packed_rows_widen_to_within_bfloat16_rounding() {
        let row: Vec<f32> = (0..128)
            .map(|i| (i as f32 - 60.3) * 1.7e3_f32.powf((i % 7) as f32 / 7.0 - 0.5))
            .chain([0.0, -0.0, f32::MIN_POSITIVE, 1.0])
            .collect();
        let mut words = vec![0.0f32; row_words(row.len())];
        pack_row(&row, &mut words);
        let mut back = vec![1.0f32; row.len()];
        unpack_row(&words, &mut back);
        for (x, y) in row.iter().zip(&back) {
            // Eight significant bits: within half a unit of the last place, at most 2^-8 of
            // the value (a unit is 2^-7 of the power of two at or below it).
            assert!((x - y).abs() <= x.abs() / 256.0, "{x} came back as {y}");
        }
        assert_eq!(back[128].to_bits(), 0.0f32.to_bits());
        assert_eq!(back[129].to_bits(), (-0.0f32).to_bits());
        // The largest floats saturate rather than round up to infinity.
        let mut word = [0.0f32];
        pack_row(&[f32::MAX, f32::MIN], &mut word);
        unpack_row(&word, &mut back[..2]);
        assert!(back[0].is_finite() && back[0] > 3.3e38 && back[1] == -back[0]);
    }

    /// Lists shorter than their block (M 6 and 12: 12 and 24 links at most in 32 lanes): every
    /// lane past a list's end is padded so that its estimate is never below any cut.
    #[test]
    fn every_block_pads_the_lanes_past_its_links() {
        use crate::dataset::{clustered_gaussian, ClusterSpec};
        use crate::hnsw::{Hnsw, HnswParams};
        use crate::{RowCodes, VectorIndex};
        let base = clustered_gaussian(ClusterSpec {
            n: 1_500,
            dim: 20,
            clusters: 4,
            spread: 0.5,
            intrinsic_dim: None,
            seed: 5,
        });
        for m in [6, 12] {
            let params = HnswParams {
                m,
                ..HnswParams::default()
            };
            let index = Hnsw::build(params, Metric::L2, 20, &base.data).unwrap();
            index.set_codes(Some(RowCodes::Rabitq)).unwrap();
            let graph = index.graph.read();
            let codes = graph.link_codes.as_ref().unwrap();
            let l = codes.layout;
            assert_eq!(l.f - l.a, FASTSCAN_BLOCK, "one block of lanes");
            let mut padded = 0;
            for slot in 0..codes.sealed as Slot {
                let block = codes.block(slot);
                let count = block[l.count].to_bits() as usize;
                assert!(count <= 2 * m, "slot {slot}: {count} links");
                for lane in 0..FASTSCAN_BLOCK {
                    let (a, f) = (block[l.a + lane], block[l.f + lane]);
                    if lane < count {
                        assert!(a.is_finite() && f.is_finite() && f >= 0.0, "slot {slot}");
                    } else {
                        assert_eq!((a, f), (f32::INFINITY, 0.0), "slot {slot}, lane {lane}");
                        padded += 1;
                    }
                }
            }
            assert!(padded >= (FASTSCAN_BLOCK - 2 * m) * 1_500, "m {m}");
        }
    }

    /// The search scores every link from one set of tables, of the query's offset from the
    /// centre; each link's `a` carries the rest. Their estimate must be RaBitQ's estimate of
    /// the offset from the expanded node, y = Pq − u, up to the tables' rounding: on average
    /// within a few times the rounding's spread, step·√(D/6), where leaving out u − c's part
    /// is off by about ‖u − c‖ (about 90 spreads here).
    #[test]
    fn one_set_of_tables_estimates_each_link_as_from_its_node() {
        use crate::dataset::{clustered_gaussian, ClusterSpec};
        use crate::distance::codes::{scalar_fastscan, scalar_link_tables, scalar_widen_keys};
        use crate::hnsw::{Hnsw, HnswParams};
        use crate::{RowCodes, VectorIndex};
        let dim = 64;
        let set = clustered_gaussian(ClusterSpec {
            n: 2_000,
            dim,
            clusters: 4,
            spread: 0.5,
            intrinsic_dim: None,
            seed: 9,
        });
        // Off the origin, so that the centre matters.
        let base: Vec<f32> = set.data.iter().map(|x| x + 3.0).collect();
        for metric in [Metric::L2, Metric::InnerProduct] {
            let index = Hnsw::build(HnswParams::default(), metric, dim, &base).unwrap();
            index.set_codes(Some(RowCodes::Rabitq)).unwrap();
            let graph = index.graph.read();
            let codes = graph.link_codes.as_ref().unwrap();
            let (l, rd) = (codes.layout, codes.rotated_dim);
            let bias_total = 8.0 * f32::from(codes.h) * (rd / 4) as f32;
            // In units of each query's rounding spread, over every link of every node.
            let (mut errors, mut links) = (0.0f64, 0usize);
            for row in (5..2_000).step_by(250) {
                let query: Vec<f32> = base[row * dim..(row + 1) * dim]
                    .iter()
                    .map(|x| x + 0.3)
                    .collect();
                let mut pq = vec![0.0f32; rd];
                codes.rotate(&query, &mut pq);
                let z: Vec<f32> = pq.iter().zip(&codes.centre).map(|(q, c)| q - c).collect();
                let mut luts = vec![0u8; 4 * rd];
                let (step, total) = scalar_link_tables(&z, codes.h, &mut luts);
                let spread = step * (rd as f32 / 6.0).sqrt();
                for slot in 0..codes.sealed as Slot {
                    let block = codes.block(slot);
                    let (sq, dot) = scalar_widen_keys(&pq, &block[..row_words(rd)]);
                    let key = if metric == Metric::L2 { sq } else { -dot };
                    let (mut u, mut o) = (vec![0.0f32; rd], vec![0.0f32; rd]);
                    unpack_row(&block[..row_words(rd)], &mut u);
                    let y: Vec<f32> = pq.iter().zip(&u).map(|(q, u)| q - u).collect();
                    let count = block[l.count].to_bits() as usize;
                    let code_bytes = bytes(&block[l.codes..]);
                    let mut sums = [0u16; FASTSCAN_BLOCK];
                    for i in 0..count {
                        let (b, lane) = (i / FASTSCAN_BLOCK, i % FASTSCAN_BLOCK);
                        if lane == 0 {
                            let block_codes =
                                &code_bytes[b * l.block_bytes..(b + 1) * l.block_bytes];
                            scalar_fastscan(&luts, block_codes, &mut sums);
                        }
                        let sum = f32::from(sums[LANE_CODE[lane]]);
                        let (a, f) = (block[l.a + i], block[l.f + i]);
                        let estimate =
                            key + a - f * (-bias_total * step - total + 2.0 * step * sum);
                        unpack_row(
                            &codes.block(block[l.ids + i].to_bits())[..row_words(rd)],
                            &mut o,
                        );
                        let r: Vec<f32> = o.iter().zip(&u).map(|(o, u)| o - u).collect();
                        let exact_terms = if metric == Metric::L2 {
                            r.iter().map(|x| x * x).sum::<f32>()
                        } else {
                            -r.iter().zip(&u).map(|(r, u)| r * u).sum::<f32>()
                        };
                        let signed: f32 = r
                            .iter()
                            .zip(&y)
                            .map(|(r, y)| if *r > 0.0 { *y } else { -y })
                            .sum();
                        let reference = key + exact_terms - f * signed;
                        if f > 0.0 {
                            errors += f64::from((estimate - reference).abs() / (f * spread));
                            links += 1;
                        }
                    }
                }
            }
            assert!(links > 8_000, "{metric:?}: {links} links");
            let mean = errors / links as f64;
            assert!(
                mean < 2.0,
                "{metric:?}: mean error {mean} rounding spreads of 2S − T"
            );
        }
    }

    /// The centre is the mean of the first rows by slot, so an index whose rows came batch by
    /// batch gets the centre of one built at once (its codes then differ only where its links
    /// do), and a loaded index, whose codes are encoded anew, gets its centre back.
    #[test]
    fn the_centre_does_not_depend_on_the_batches() {
        use crate::dataset::{clustered_gaussian, ClusterSpec};
        use crate::hnsw::{Hnsw, HnswParams};
        use crate::{RowCodes, VectorIndex};
        let dim = 24;
        let set = clustered_gaussian(ClusterSpec {
            n: 3_000,
            dim,
            clusters: 3,
            spread: 0.5,
            intrinsic_dim: None,
            seed: 4,
        });
        let params = HnswParams {
            seed: 3,
            ..HnswParams::default()
        };
        let batched = Hnsw::new(params, Metric::L2, dim).unwrap();
        batched.set_codes(Some(RowCodes::Rabitq)).unwrap();
        for batch in set.data.chunks(300 * dim) {
            batched.add(batch).unwrap();
        }
        let at_once = Hnsw::build(params, Metric::L2, dim, &set.data).unwrap();
        at_once.set_codes(Some(RowCodes::Rabitq)).unwrap();
        let (one, other) = (batched.graph.read(), at_once.graph.read());
        let (one, other) = (
            one.link_codes.as_ref().unwrap(),
            other.link_codes.as_ref().unwrap(),
        );
        assert_eq!(one.centre_rows, CENTRE_ROWS);
        assert_eq!(one.centre, other.centre);
    }

    #[test]
    fn table_sums_fit_sixteen_bits_at_any_dimension() {
        for dim in [1usize, 4, 50, 128, 384, 1028, 1536, 4096, MAX_DIM] {
            let groups = dim.div_ceil(4);
            let h = usize::from(table_h(groups));
            // A table entry is at most 8·h; a block sums one entry per group.
            assert!(8 * h * groups <= usize::from(u16::MAX), "dim {dim}");
            assert!(8 * h <= 255 && h >= 1, "dim {dim}");
        }
        assert!(8 * usize::from(table_h(MAX_DIM / 4 + 1)) * (MAX_DIM / 4 + 1) > 65_535);
        for dim in [4usize, 50, 128] {
            let codes = LinkCodes::new(Metric::L2, dim, 32);
            assert_eq!(codes.h, table_h(dim.div_ceil(4)));
            assert_eq!(codes.layout.words % 16, 0, "blocks start cache lines");
        }
    }
}
