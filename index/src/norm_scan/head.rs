//! The items in norm order, largest first, as byte codes: what a [`super::NormScan`] query
//! reads from the front.
//!
//! Codes. Each row becomes one byte per coordinate, 7 bits of it used, on its own scale
//! s = max |xᵢ|: cᵢ = round((xᵢ / s + 1) · 63.5), so x̂ᵢ = s · (cᵢ / 63.5 − 1), within s / 127
//! of xᵢ. A scale per row, not a range per dimension (`store/codes.rs`), because the rows this
//! index exists for differ in length by an order of magnitude: one range clamps the longest
//! rows, which are the answers, and wastes most of its steps on the shortest. The query is
//! rounded to bytes, q̃ = round(σ·q) with σ = 127 / max |qᵢ|, and the estimate is the product
//! of the two rounded vectors, ⟨q̃/σ, x̂⟩ = (s/σ) · (Σ q̃ᵢ·cᵢ / 63.5 − Σ q̃ᵢ). Seven bits and a
//! byte query are what the byte multiply-add kernels take (`distance/codes.rs`,
//! [`DotI8Blocks`]): against an 8-bit code and a 16-bit query they halve the instructions per
//! row, and AVX-VNNI sums them in the multiply. Rows are stored in blocks of eight,
//! interleaved by four coordinates, so each lane of a register accumulates one row's sum and
//! no sum ends in a horizontal addition (rows one after another, with a 16-bit query, scanned
//! 64-dimension codes no faster than the float kernel scanned floats).
//!
//! Two segments. Keeping one array sorted under appends would move every code on each
//! batch (a REST ingest of 1M 64-dimension rows in batches of 256 would copy ~125 GB). New
//! rows are merged into a small sorted `delta` instead, and the delta into `main` once it
//! outgrows an eighth of it: a batch copies the delta (at most an eighth of the rows), so the
//! same ingest copies about 8 GB, a second or two beside minutes of ingest, and `main` is
//! shared by `Arc` between merges. A query's depth is split between the two so that together
//! they cover exactly the items of the largest norms ([`Head::split`]). (Size-tiered runs
//! would copy less; two segments keep the split one binary search.)

use std::sync::Arc;

use crate::distance::codes::{code_kernels, i8_block_offset, DotI8Blocks, I8_BLOCK};
use crate::distance::simd::dot;
use crate::distance::Metric;
use crate::{Neighbor, Slot};

/// Rows the delta may hold beyond an eighth of `main` before it is merged in.
const DELTA_FLOOR: usize = 4096;

/// Rows at the front of each segment kept as floats too: a scan of the whole collection that
/// is no longer than this reads them, and so is exact (a collection of up to 1,024 items is
/// scanned exactly, as `mips_auto`'s small-collection rule promises). Both segments' float
/// prefixes are enough for any scan this deep, whatever the split. The copy costs
/// `HOT_ROWS × dim` floats per segment (256 KiB at 64 dimensions), whatever the collection's
/// size.
pub(super) const HOT_ROWS: usize = 1024;

/// The deepest scan of part of the collection that reads the float prefix rather than the
/// codes. Codes pay a fixed cost per query (the query's own coding, and `k × oversampling`
/// rows fetched at random to re-rank) that a short scan of floats in order does not, but a
/// float is four bytes a coordinate against a code's one, and deeper the bytes win: at 64
/// dimensions the two broke even between 600 and 1,000 rows one query at a time on a Zen 4
/// with AVX-512, and from 200 rows one query at a time and about 400 in batches on a Zen 3
/// with AVX2 only (`BENCHMARKS.md`, "What makes the norm scan fast": codes from 512 rows).
pub(super) const FLOAT_DEPTH: usize = 512;

/// Coordinates a row's codes take: the dimension rounded up to whole groups of four (the
/// block layout's unit, [`I8_BLOCK`]; the query is zero beyond the dimension).
fn width(dim: usize) -> usize {
    dim.div_ceil(4) * 4
}

/// Rows in norm order, largest first, with their codes.
#[derive(Default)]
pub(super) struct Segment {
    /// The rows' slots.
    slots: Vec<Slot>,
    /// Their norms, non-increasing.
    norms: Vec<f32>,
    /// Their code scales (max |xᵢ|; 0 for a zero row).
    scales: Vec<f32>,
    /// The codes in blocks of [`I8_BLOCK`] rows, interleaved by four coordinates
    /// ([`DotI8Blocks`]); the last block is filled out with zeros.
    codes: Vec<u8>,
    /// The floats of the first [`HOT_ROWS`] rows (fewer when the segment is shorter).
    hot: Vec<f32>,
}

impl Segment {
    /// `rows` (row-major, `dim` floats each, slots from `first`) coded and sorted.
    fn of_rows(rows: &[f32], dim: usize, first: Slot) -> Self {
        let mut order: Vec<(f32, Slot, usize)> = rows
            .chunks_exact(dim)
            .enumerate()
            .map(|(i, row)| (dot(row, row).max(0.0).sqrt(), first + i as Slot, i))
            .collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut segment = Self::with_capacity(order.len(), dim);
        let mut codes = vec![0u8; width(dim)];
        for (norm, slot, i) in order {
            let row = &rows[i * dim..(i + 1) * dim];
            let scale = encode(row, &mut codes[..dim]);
            segment.push(slot, norm, scale, &codes, row);
        }
        segment
    }

    fn with_capacity(rows: usize, dim: usize) -> Self {
        Self {
            slots: Vec::with_capacity(rows),
            norms: Vec::with_capacity(rows),
            scales: Vec::with_capacity(rows),
            codes: Vec::with_capacity(rows.div_ceil(I8_BLOCK) * I8_BLOCK * width(dim)),
            hot: Vec::with_capacity(rows.min(HOT_ROWS) * dim),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Appends a row: its slot, norm, code scale, codes (`width` bytes, zero beyond the
    /// dimension) and floats (kept while the segment is within [`HOT_ROWS`]).
    fn push(&mut self, slot: Slot, norm: f32, scale: f32, codes: &[u8], row: &[f32]) {
        let (r, width) = (self.slots.len(), codes.len());
        if r % I8_BLOCK == 0 {
            self.codes.resize(self.codes.len() + I8_BLOCK * width, 0);
        }
        for (g, four) in codes.chunks_exact(4).enumerate() {
            let at = i8_block_offset(r, 4 * g, width);
            self.codes[at..at + 4].copy_from_slice(four);
        }
        self.slots.push(slot);
        self.norms.push(norm);
        self.scales.push(scale);
        if r < HOT_ROWS {
            self.hot.extend_from_slice(row);
        }
    }

    /// Row `r`'s codes into `out` (`width` bytes).
    fn codes_of(&self, r: usize, out: &mut [u8]) {
        let width = out.len();
        for (g, four) in out.chunks_exact_mut(4).enumerate() {
            let at = i8_block_offset(r, 4 * g, width);
            four.copy_from_slice(&self.codes[at..at + 4]);
        }
    }

    /// Both segments' rows in one norm order (ties by slot, so merges are deterministic).
    /// The merged float prefix comes from the two inputs' own: its rows are among their
    /// first [`HOT_ROWS`].
    fn merge(a: &Self, b: &Self, dim: usize) -> Self {
        let mut out = Self::with_capacity(a.len() + b.len(), dim);
        let mut codes = vec![0u8; width(dim)];
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            let take_a = j == b.len()
                || (i < a.len()
                    && b.norms[j]
                        .total_cmp(&a.norms[i])
                        .then(a.slots[i].cmp(&b.slots[j]))
                        .is_le());
            let (from, at) = if take_a { (a, i) } else { (b, j) };
            debug_assert!(
                out.len() >= HOT_ROWS || (at + 1) * dim <= from.hot.len(),
                "a merged float prefix row comes from the inputs' own prefixes"
            );
            from.codes_of(at, &mut codes);
            // Past the merged float prefix, the source's floats are not needed (nor kept).
            let row = from.hot.get(at * dim..(at + 1) * dim).unwrap_or(&[]);
            out.push(from.slots[at], from.norms[at], from.scales[at], &codes, row);
            if take_a {
                i += 1;
            } else {
                j += 1;
            }
        }
        out
    }

    fn memory_bytes(&self) -> usize {
        self.slots.capacity() * 4
            + self.norms.capacity() * 4
            + self.scales.capacity() * 4
            + self.codes.capacity()
            + self.hot.capacity() * 4
    }
}

/// Half the code range: a code c stands for s · (c / `HALF` − 1).
const HALF: f32 = 63.5;

/// Writes `row`'s codes into `out` (as long as the row) and returns its scale; see the
/// module docs.
fn encode(row: &[f32], out: &mut [u8]) -> f32 {
    let scale = row.iter().fold(0f32, |m, x| m.max(x.abs()));
    if !(scale > 0.0 && scale.is_finite()) {
        out.fill(64);
        return 0.0;
    }
    let inverse = HALF / scale;
    for (code, &x) in out.iter_mut().zip(row) {
        *code = (x * inverse + HALF).round().clamp(0.0, 127.0) as u8;
    }
    scale
}

/// A query prepared for the codes.
pub(super) struct CodedQuery {
    /// q̃ = round(σ·q), within ±127, zero beyond the dimension up to the codes' width.
    rounded: Vec<i8>,
    /// 1 / (63.5 · σ).
    unscale: f32,
    /// Σ q̃ᵢ / σ.
    offset: f32,
    dot_i8_blocks: DotI8Blocks,
}

impl CodedQuery {
    pub(super) fn new(query: &[f32]) -> Self {
        let largest = query.iter().fold(0f32, |m, x| m.max(x.abs()));
        let sigma = if largest > 0.0 && largest.is_finite() {
            127.0 / largest
        } else {
            1.0
        };
        let mut rounded = vec![0i8; width(query.len())];
        for (r, &x) in rounded.iter_mut().zip(query) {
            *r = (x * sigma).round().clamp(-127.0, 127.0) as i8;
        }
        let sum: i32 = rounded.iter().map(|&x| i32::from(x)).sum();
        Self {
            rounded,
            unscale: 1.0 / (HALF * sigma),
            offset: sum as f32 / sigma,
            dot_i8_blocks: code_kernels().dot_i8_blocks,
        }
    }

    /// The estimated key (the negated inner product) of a row of this scale and product.
    #[inline]
    fn key(&self, scale: f32, product: i32) -> f32 {
        -(scale * (product as f32 * self.unscale - self.offset))
    }
}

/// Where a scanned row sits: `main`'s rows first, then the delta's.
pub(super) type Position = u32;

/// Both segments; see the module docs.
#[derive(Default)]
pub(super) struct Head {
    dim: usize,
    /// Shared with the head a batch builds, which keeps it unless the delta merges in.
    main: Arc<Segment>,
    delta: Segment,
}

impl Head {
    /// Every row of `flat` (slots from 0), as one sorted segment.
    pub(super) fn of_rows(flat: &[f32], dim: usize) -> Self {
        Self {
            dim,
            main: Arc::new(Segment::of_rows(flat, dim, 0)),
            delta: Segment::default(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.main.len() + self.delta.len()
    }

    /// The head with `rows` (slots from `first`) merged in; `self` is left as it was, so
    /// searches read it until the caller swaps the result in.
    pub(super) fn with_rows(&self, rows: &[f32], first: Slot) -> Self {
        let batch = Segment::of_rows(rows, self.dim, first);
        let delta = Segment::merge(&self.delta, &batch, self.dim);
        if delta.len() > DELTA_FLOOR.max(self.main.len() / 8) {
            Self {
                dim: self.dim,
                main: Arc::new(Segment::merge(&self.main, &delta, self.dim)),
                delta: Segment::default(),
            }
        } else {
            Self {
                dim: self.dim,
                main: Arc::clone(&self.main),
                delta,
            }
        }
    }

    /// How many of `main`'s and the delta's first rows are together the `depth` rows of
    /// largest norm (ties to `main`): the point where the two sorted norm lists cross.
    fn split(&self, depth: usize) -> (usize, usize) {
        let (a, b) = (&self.main.norms, &self.delta.norms);
        let depth = depth.min(a.len() + b.len());
        // The most rows of `main` that can be taken: the rest must fit in the delta.
        let (mut lo, mut hi) = (depth.saturating_sub(b.len()), depth.min(a.len()));
        // The smallest i whose row a[i] is not among the first `depth`: a[i] is, when it is
        // at least the delta's last row taken with i from main, b[depth − i − 1].
        while lo < hi {
            let i = lo + (hi - lo) / 2;
            let j = depth - i;
            if j > 0 && a[i] >= b[j - 1] {
                lo = i + 1;
            } else {
                hi = i;
            }
        }
        (lo, depth - lo)
    }

    /// The positions of the `depth` largest-norm rows.
    pub(super) fn positions(&self, depth: usize) -> impl Iterator<Item = Position> {
        let (a, b) = self.split(depth);
        let main = self.main.len();
        (0..a).chain(main..main + b).map(|p| p as Position)
    }

    /// What a scan kept, by position, as hits by slot, best first.
    pub(super) fn by_slot(&self, found: Vec<Neighbor>) -> Vec<Neighbor> {
        let mut hits: Vec<Neighbor> = found
            .into_iter()
            .map(|n| Neighbor::new(self.slot(n.slot), n.key))
            .collect();
        // Ties were ordered by position; results order them by slot.
        hits.sort();
        hits
    }

    /// The slot of a position.
    pub(super) fn slot(&self, position: Position) -> Slot {
        let p = position as usize;
        match p.checked_sub(self.main.len()) {
            None => self.main.slots[p],
            Some(d) => self.delta.slots[d],
        }
    }

    /// Offers the estimated keys of the `depth` largest-norm rows in runs of consecutive
    /// positions (the first, and the keys); returns how many were scored.
    pub(super) fn scan(
        &self,
        query: &CodedQuery,
        depth: usize,
        offer: &mut impl FnMut(Position, &[f32]),
    ) -> u64 {
        self.scan_many(std::slice::from_ref(query), depth, &mut |_, first, keys| {
            offer(first, keys)
        })
    }

    /// [`Head::scan`] for many queries at once: each tile of codes is scored for every query
    /// while it is in cache, and offered with the query's index. Returns how many rows each
    /// query scored.
    pub(super) fn scan_many(
        &self,
        queries: &[CodedQuery],
        depth: usize,
        offer: &mut impl FnMut(usize, Position, &[f32]),
    ) -> u64 {
        let (a, b) = self.split(depth);
        scan_segment(&self.main, a, 0, self.dim, queries, offer);
        scan_segment(&self.delta, b, self.main.len(), self.dim, queries, offer);
        (a + b) as u64
    }

    /// Whether a scan of `depth` rows reads the float prefixes ([`Head::scan_hot`]) rather
    /// than the codes: up to [`FLOAT_DEPTH`] rows, or the whole collection when it fits in
    /// them ([`HOT_ROWS`]).
    pub(super) fn reads_floats(&self, depth: usize) -> bool {
        let len = self.len();
        depth.min(len) <= FLOAT_DEPTH || (depth >= len && len <= HOT_ROWS)
    }

    /// The exact keys of the `depth` largest-norm rows, from the float prefixes, offered as
    /// [`Head::scan`] offers its estimates; `None` when the scan reads the codes
    /// ([`Head::reads_floats`]). Returns how many were scored.
    pub(super) fn scan_hot(
        &self,
        query: &[f32],
        depth: usize,
        offer: &mut impl FnMut(Position, &[f32]),
    ) -> Option<u64> {
        if !self.reads_floats(depth) {
            return None;
        }
        let depth = depth.min(self.len());
        let (a, b) = self.split(depth);
        scan_floats(&self.main, a, 0, self.dim, query, offer);
        scan_floats(&self.delta, b, self.main.len(), self.dim, query, offer);
        Some(depth as u64)
    }

    pub(super) fn memory_bytes(&self) -> usize {
        self.main.memory_bytes() + self.delta.memory_bytes()
    }
}

/// Rows scored per kernel call at most (a whole number of blocks): their sums fit in a
/// buffer on the stack (1 KiB).
const RUN: usize = 256;

/// Bytes of codes a tile holds: half of a 32 KiB first-level data cache, so that a tile read
/// for one query of a batch is still there for the next.
const TILE_BYTES: usize = 16 * 1024;

/// Rows per tile for codes `width` bytes wide: [`TILE_BYTES`] worth, in whole blocks, from
/// one block to [`RUN`].
fn tile_rows(width: usize) -> usize {
    (TILE_BYTES / (I8_BLOCK * width)).clamp(1, RUN / I8_BLOCK) * I8_BLOCK
}

/// Scores the first `rows` rows of `segment` for every query, a tile at a time (every query
/// reads a tile before the next is loaded), positions from `offset`. The last block of a
/// tile may hold rows past `rows` (or zeros past the segment's end); their sums are computed
/// and not offered.
fn scan_segment(
    segment: &Segment,
    rows: usize,
    offset: usize,
    dim: usize,
    queries: &[CodedQuery],
    offer: &mut impl FnMut(usize, Position, &[f32]),
) {
    let block = I8_BLOCK * width(dim);
    let mut sums = [0i32; RUN];
    let mut keys = [0f32; RUN];
    for start in (0..rows).step_by(tile_rows(width(dim))) {
        let count = tile_rows(width(dim)).min(rows - start);
        let blocks = count.div_ceil(I8_BLOCK);
        let first = start / I8_BLOCK * block;
        let codes = &segment.codes[first..first + blocks * block];
        let scales = &segment.scales[start..start + count];
        for (i, query) in queries.iter().enumerate() {
            (query.dot_i8_blocks)(&query.rounded, codes, &mut sums[..blocks * I8_BLOCK]);
            for ((key, &sum), &scale) in keys.iter_mut().zip(&sums[..count]).zip(scales) {
                *key = query.key(scale, sum);
            }
            offer(i, (offset + start) as Position, &keys[..count]);
        }
    }
}

/// Scores the first `rows` rows of `segment`'s float prefix exactly, four at a time, in runs
/// of [`RUN`], positions from `offset`.
fn scan_floats(
    segment: &Segment,
    rows: usize,
    offset: usize,
    dim: usize,
    query: &[f32],
    offer: &mut impl FnMut(Position, &[f32]),
) {
    let (key_fn, key4_fn) = (
        Metric::InnerProduct.key_fn(),
        Metric::InnerProduct.key4_fn(),
    );
    let mut keys = [0f32; RUN];
    for start in (0..rows).step_by(RUN) {
        let count = RUN.min(rows - start);
        let floats = &segment.hot[start * dim..(start + count) * dim];
        let mut blocks = floats.chunks_exact(4 * dim);
        for (four, block) in keys.chunks_exact_mut(4).zip(blocks.by_ref()) {
            let (r0, rest) = block.split_at(dim);
            let (r1, rest) = rest.split_at(dim);
            let (r2, r3) = rest.split_at(dim);
            four.copy_from_slice(&key4_fn(query, [r0, r1, r2, r3]));
        }
        let done = count / 4 * 4;
        for (key, row) in keys[done..count]
            .iter_mut()
            .zip(blocks.remainder().chunks_exact(dim))
        {
            *key = key_fn(query, row);
        }
        offer((offset + start) as Position, &keys[..count]);
    }
}
