//! Row codes: a compressed copy of every row that graph searches traverse by, re-ranking the
//! candidates they keep with the full rows (Qdrant's scalar and binary quantization).
//!
//! Why. A graph search on a set larger than the cache waits on memory: each scored neighbour
//! is a row fetched from RAM (512 bytes at 128 dimensions). Traversing by codes of one byte
//! (`int8`) or one bit (`binary`) per coordinate fetches 4× or 32× less, and the few
//! candidates left at the end are scored exactly.
//!
//! The two kinds.
//! - `int8`: each coordinate of a row becomes a byte on its own dimension's range, which is
//!   the central `quantile` share of that dimension's values (Qdrant takes one range over all
//!   dimensions; a range per dimension costs nothing at query time here and fits data whose
//!   dimensions differ in scale, as SIFT's do). The query is not rounded to bytes: its
//!   products with the steps, qᵢ·stepᵢ, go to 16-bit integers (one part in 16,383), so a
//!   score's error is nearly the row's rounding alone: ⟨q, x̂⟩ = ⟨q, lo⟩ + Σ (qᵢ·stepᵢ)·cᵢ.
//! - `binary`: one bit per coordinate, set where the row lies above the dimension's mean.
//!   Qdrant compares with zero; centring first keeps the bits informative on data that is not
//!   centred (SIFT's coordinates are all positive, so zero would set every bit). The Hamming
//!   distance h between the query's bits and a row's estimates their centred angle as π·h/d
//!   (SimHash's estimate), and the centred lengths and each side's product with the mean,
//!   stored per row, turn that into an estimate of the metric's own key.
//!
//! Training. Codes need ranges or a mean, so a store trains them once it holds
//! [`TRAIN_ROWS`] rows and again each time it doubles, always on its first `TRAIN_ROWS · 2ᵏ`
//! rows (a sample of at most [`SAMPLE_ROWS`]) and re-encodes every row. The codes are then a
//! function of the rows alone, whatever batches brought them: two replicas that hold the same
//! rows hold the same codes, and a store read from a file trains them anew to the same
//! values. Below `TRAIN_ROWS` rows searches score the full rows. Codes are not written to
//! index files: they are derived, and training is fast (milliseconds) beside encoding (one
//! pass over the rows).

use serde::{Deserialize, Serialize};

use crate::distance::codes::{code_kernels, max_query_magnitude, DotU8, DotU8x4, Hamming};
use crate::distance::Metric;
use crate::{IndexError, Result, Slot};

/// Which codes a store keeps beside its rows; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RowCodes {
    /// One byte per coordinate, on the central `quantile` share of each dimension's values
    /// (0.5 to 1; 1 takes the whole range).
    Int8 {
        /// The share of each dimension's values inside its range; the rest are clamped.
        quantile: f64,
    },
    /// One bit per coordinate: above the dimension's mean or not.
    Binary,
    /// Not row codes: RaBitQ codes of a graph's layer-0 links, one bit per rotated coordinate
    /// of each link's offset, kept beside the links (`hnsw/link_codes.rs`). Only graphs keep
    /// them; a store asked for them refuses.
    Rabitq,
}

/// Rows a store holds before it trains its codes.
pub const TRAIN_ROWS: usize = 1024;

/// Most rows a training reads (evenly spaced over the rows it trains on).
pub const SAMPLE_ROWS: usize = 16_384;

/// Most cache lines of a row's codes prefetched ahead of scoring it (a 384-d int8 row's
/// seven; longer rows leave the rest to the hardware streamer).
const PREFETCH_LINES: usize = 8;

impl RowCodes {
    /// Qdrant's default scalar quantile.
    pub const DEFAULT_QUANTILE: f64 = 0.99;

    /// Rejects a quantile outside 0.5 to 1.
    pub fn validate(&self) -> Result<()> {
        match *self {
            RowCodes::Int8 { quantile } if !(0.5..=1.0).contains(&quantile) => {
                Err(IndexError::InvalidParams(format!(
                    "int8 codes need a quantile from 0.5 to 1, got {quantile}"
                )))
            }
            RowCodes::Int8 { .. } | RowCodes::Binary | RowCodes::Rabitq => Ok(()),
        }
    }

    /// The name used in reports and on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            RowCodes::Int8 { .. } => "int8",
            RowCodes::Binary => "binary",
            RowCodes::Rabitq => "rabitq",
        }
    }
}

/// The rows' codes, trained or not yet; see the module docs.
#[derive(Clone)]
pub(crate) struct CodedRows {
    kind: RowCodes,
    metric: Metric,
    dim: usize,
    trained: Option<Trained>,
}

#[derive(Clone)]
enum Trained {
    Int8(Int8Rows),
    Binary(BinaryRows),
}

#[derive(Clone)]
struct Int8Rows {
    /// Rows the ranges were trained on.
    trained_on: usize,
    /// Each dimension's range start and step (range / 255; 0 for a constant dimension).
    lo: Vec<f32>,
    step: Vec<f32>,
    /// `dim` bytes per row.
    codes: Vec<u8>,
    /// ‖x̂‖² of each decoded row, for L2.
    sq_norms: Vec<f32>,
}

#[derive(Clone)]
struct BinaryRows {
    trained_on: usize,
    /// Each dimension's mean over the training rows, and ‖μ‖².
    mean: Vec<f32>,
    mean_sq: f32,
    /// cos(π·h/dim) for h = 0..=dim.
    cos: Vec<f32>,
    /// Words of bits per row.
    words: usize,
    bits: Vec<u64>,
    /// ‖x − μ‖ of each row.
    radii: Vec<f32>,
    /// ⟨μ, x⟩ of each row.
    mean_dots: Vec<f32>,
}

impl Trained {
    /// Room for `rows` rows of codes, exactly: a store re-encodes every row when it trains,
    /// and growing by doubling from there would leave up to half the codes' memory unused.
    fn reserve(&mut self, rows: usize, dim: usize) {
        match self {
            Trained::Int8(t) => {
                t.codes.reserve_exact(rows * dim);
                t.sq_norms.reserve_exact(rows);
            }
            Trained::Binary(t) => {
                t.bits.reserve_exact(rows * t.words);
                t.radii.reserve_exact(rows);
                t.mean_dots.reserve_exact(rows);
            }
        }
    }
}

/// A query prepared against one store's codes.
pub(crate) enum CodedQuery {
    Int8(Int8Query),
    Binary {
        bits: Vec<u64>,
        /// ‖q − μ‖.
        radius: f32,
        /// ⟨q, μ⟩.
        mean_dot: f32,
        hamming: Hamming,
    },
}

/// A query prepared against int8 codes.
pub(crate) struct Int8Query {
    /// qᵢ·stepᵢ in 16-bit integers, times `scale`.
    scaled: Vec<i16>,
    /// What `scaled` was multiplied by.
    scale: f32,
    /// ⟨q, lo⟩.
    offset: f32,
    /// ‖q‖².
    sq_norm: f32,
    /// Whether keys are squared distances (else negated inner products).
    l2: bool,
    dot_u8: DotU8,
    dot_u8x4: DotU8x4,
}

impl Int8Query {
    /// The key of a row whose codes' product with `scaled` is `product` and whose decoded
    /// squared norm is `row_sq_norm`.
    #[inline]
    fn key(&self, product: i32, row_sq_norm: f32) -> f32 {
        let dot = self.offset + product as f32 / self.scale;
        if self.l2 {
            self.sq_norm - 2.0 * dot + row_sq_norm
        } else {
            -dot
        }
    }
}

/// The training size due at `len` rows: the largest `TRAIN_ROWS · 2ᵏ` not above it.
fn due(len: usize) -> Option<usize> {
    (len >= TRAIN_ROWS).then(|| TRAIN_ROWS << (len / TRAIN_ROWS).ilog2())
}

/// Up to [`SAMPLE_ROWS`] rows evenly spaced over the first `rows` of `flat`.
fn sample(flat: &[f32], dim: usize, rows: usize) -> impl Iterator<Item = &[f32]> {
    let taken = rows.min(SAMPLE_ROWS);
    (0..taken).map(move |i| {
        let row = i * rows / taken;
        &flat[row * dim..(row + 1) * dim]
    })
}

impl CodedRows {
    /// No codes yet for a store of `dim`-float rows scored by `metric`.
    pub(crate) fn new(kind: RowCodes, metric: Metric, dim: usize) -> Self {
        Self {
            kind,
            metric,
            dim,
            trained: None,
        }
    }

    /// Which codes these are.
    pub(crate) fn kind(&self) -> RowCodes {
        self.kind
    }

    /// Brings the codes up to the rows in `flat` (all of the store's rows, row-major):
    /// trains when a training size is due, then encodes every row not yet encoded.
    pub(crate) fn sync(&mut self, flat: &[f32]) {
        let dim = self.dim.max(1);
        let len = flat.len() / dim;
        let Some(due) = due(len) else {
            self.trained = None;
            return;
        };
        let current = match &self.trained {
            Some(Trained::Int8(t)) => Some((t.trained_on, t.sq_norms.len())),
            Some(Trained::Binary(t)) => Some((t.trained_on, t.radii.len())),
            None => None,
        };
        let from = match current {
            Some((trained_on, encoded)) if trained_on == due && encoded <= len => encoded,
            Some(_) | None => {
                let mut trained = self.train(flat, due);
                trained.reserve(len, dim);
                self.trained = Some(trained);
                0
            }
        };
        for row in flat[from * dim..].chunks_exact(dim) {
            self.encode(row);
        }
    }

    fn train(&self, flat: &[f32], rows: usize) -> Trained {
        let dim = self.dim;
        match self.kind {
            RowCodes::Int8 { quantile } => {
                let mut column = Vec::with_capacity(rows.min(SAMPLE_ROWS));
                let mut lo = Vec::with_capacity(dim);
                let mut step = Vec::with_capacity(dim);
                for d in 0..dim {
                    column.clear();
                    column.extend(
                        sample(flat, dim, rows)
                            .map(|r| r[d])
                            .filter(|v| v.is_finite()),
                    );
                    let (low, high) = central_range(&mut column, quantile);
                    lo.push(low);
                    step.push((high - low) / 255.0);
                }
                Trained::Int8(Int8Rows {
                    trained_on: rows,
                    lo,
                    step,
                    codes: Vec::new(),
                    sq_norms: Vec::new(),
                })
            }
            // `VectorStore::set_codes` refuses them before any `CodedRows` exists.
            RowCodes::Rabitq => unreachable!("a store keeps no link codes"),
            RowCodes::Binary => {
                let mut sums = vec![0f64; dim];
                let mut count = 0usize;
                for row in sample(flat, dim, rows) {
                    for (s, &v) in sums.iter_mut().zip(row) {
                        *s += f64::from(v);
                    }
                    count += 1;
                }
                let mean: Vec<f32> = sums.iter().map(|s| (s / count as f64) as f32).collect();
                let mean_sq = mean.iter().map(|m| m * m).sum();
                let cos = (0..=dim)
                    .map(|h| (std::f32::consts::PI * h as f32 / dim as f32).cos())
                    .collect();
                Trained::Binary(BinaryRows {
                    trained_on: rows,
                    mean,
                    mean_sq,
                    cos,
                    words: dim.div_ceil(64),
                    bits: Vec::new(),
                    radii: Vec::new(),
                    mean_dots: Vec::new(),
                })
            }
        }
    }

    fn encode(&mut self, row: &[f32]) {
        match &mut self.trained {
            Some(Trained::Int8(t)) => {
                let mut sq = 0f32;
                for ((&x, &lo), &step) in row.iter().zip(&t.lo).zip(&t.step) {
                    let code = if step > 0.0 {
                        ((x - lo) / step).round().clamp(0.0, 255.0) as u8
                    } else {
                        0
                    };
                    let decoded = lo + step * f32::from(code);
                    sq += decoded * decoded;
                    t.codes.push(code);
                }
                t.sq_norms.push(sq);
            }
            Some(Trained::Binary(t)) => {
                let (bits, radius, mean_dot) = binary_code(row, &t.mean, t.words);
                t.bits.extend(bits);
                t.radii.push(radius);
                t.mean_dots.push(mean_dot);
            }
            None => {}
        }
    }

    /// `query` (preprocessed for the metric) prepared for scoring codes; `None` while the
    /// codes are untrained.
    pub(crate) fn query(&self, query: &[f32]) -> Option<CodedQuery> {
        let kernels = code_kernels();
        Some(match self.trained.as_ref()? {
            Trained::Int8(t) => {
                // One allocation per query: the products are formed twice (for their
                // largest magnitude, then scaled), not kept in a float vector between.
                let products = || query.iter().zip(&t.step).map(|(q, s)| q * s);
                let largest = products().fold(0f32, |m, x| m.max(x.abs()));
                let top = max_query_magnitude(self.dim) as f32;
                let scale = if largest > 0.0 && largest.is_finite() {
                    top / largest
                } else {
                    1.0
                };
                CodedQuery::Int8(Int8Query {
                    scaled: products().map(|x| (x * scale).round() as i16).collect(),
                    scale,
                    offset: query.iter().zip(&t.lo).map(|(q, l)| q * l).sum(),
                    sq_norm: query.iter().map(|q| q * q).sum(),
                    l2: self.metric == Metric::L2,
                    dot_u8: kernels.dot_u8,
                    dot_u8x4: kernels.dot_u8x4,
                })
            }
            Trained::Binary(t) => {
                let (bits, radius, mean_dot) = binary_code(query, &t.mean, t.words);
                CodedQuery::Binary {
                    bits,
                    radius,
                    mean_dot,
                    hamming: kernels.hamming,
                }
            }
        })
    }

    /// The estimated key of `slot` for a query prepared by [`CodedRows::query`] on these
    /// codes (lower is closer, on the metric's own scale).
    #[inline]
    pub(crate) fn key(&self, query: &CodedQuery, slot: Slot) -> f32 {
        let s = slot as usize;
        let l2 = self.metric == Metric::L2;
        match (query, &self.trained) {
            (CodedQuery::Int8(q), Some(Trained::Int8(t))) => {
                let codes = &t.codes[s * self.dim..(s + 1) * self.dim];
                q.key((q.dot_u8)(&q.scaled, codes), t.sq_norms[s])
            }
            (
                CodedQuery::Binary {
                    bits,
                    radius,
                    mean_dot,
                    hamming,
                },
                Some(Trained::Binary(t)),
            ) => {
                let row = &t.bits[s * t.words..(s + 1) * t.words];
                let cos = t.cos[hamming(bits, row) as usize];
                let (rq, rx) = (*radius, t.radii[s]);
                if l2 {
                    rq * rq + rx * rx - 2.0 * rq * rx * cos
                } else {
                    -(rq * rx * cos + mean_dot + t.mean_dots[s] - t.mean_sq)
                }
            }
            (CodedQuery::Int8(_) | CodedQuery::Binary { .. }, _) => {
                unreachable!("a coded query is prepared on the codes it scores")
            }
        }
    }

    /// [`CodedRows::key`] of four slots: int8 codes in one four-row kernel call.
    #[inline]
    pub(crate) fn key4(&self, query: &CodedQuery, slots: [Slot; 4]) -> [f32; 4] {
        match (query, &self.trained) {
            (CodedQuery::Int8(q), Some(Trained::Int8(t))) => {
                let dim = self.dim;
                let rows = slots.map(|s| &t.codes[s as usize * dim..(s as usize + 1) * dim]);
                let products = (q.dot_u8x4)(&q.scaled, rows);
                let mut keys = [0f32; 4];
                for j in 0..4 {
                    keys[j] = q.key(products[j], t.sq_norms[slots[j] as usize]);
                }
                keys
            }
            (CodedQuery::Int8(_) | CodedQuery::Binary { .. }, _) => {
                slots.map(|slot| self.key(query, slot))
            }
        }
    }

    /// Asks the CPU to start loading the codes of `slot`.
    #[inline]
    pub(crate) fn prefetch(&self, slot: Slot) {
        let s = slot as usize;
        match &self.trained {
            Some(Trained::Int8(t)) => {
                if let Some(codes) = t.codes.get(s * self.dim..(s + 1) * self.dim) {
                    // Rows of bytes are not line-aligned: count the lines this one touches.
                    let lines = (codes.as_ptr() as usize % 64 + codes.len()).div_ceil(64);
                    super::prefetch_bytes(codes.as_ptr(), lines.min(PREFETCH_LINES));
                }
            }
            Some(Trained::Binary(t)) => {
                if let Some(bits) = t.bits.get(s * t.words) {
                    super::prefetch_bytes(std::ptr::from_ref(bits).cast(), 1);
                }
            }
            None => {}
        }
    }

    /// Bytes of memory the codes hold.
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.trained {
            Some(Trained::Int8(t)) => t.codes.capacity() + t.sq_norms.capacity() * 4,
            Some(Trained::Binary(t)) => {
                t.bits.capacity() * 8 + (t.radii.capacity() + t.mean_dots.capacity()) * 4
            }
            None => 0,
        }
    }
}

/// The `quantile` central share of `values` as a range (low, high); (0, 0) for no values.
fn central_range(values: &mut [f32], quantile: f64) -> (f32, f32) {
    let n = values.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let tail = (1.0 - quantile) / 2.0;
    let low_rank = ((tail * (n - 1) as f64).floor() as usize).min(n - 1);
    let high_rank = (((1.0 - tail) * (n - 1) as f64).ceil() as usize).min(n - 1);
    let low = *values.select_nth_unstable_by(low_rank, f32::total_cmp).1;
    let high = *values.select_nth_unstable_by(high_rank, f32::total_cmp).1;
    (low, high.max(low))
}

/// A vector's bits above `mean`, its distance from the mean, and its product with it.
fn binary_code(v: &[f32], mean: &[f32], words: usize) -> (Vec<u64>, f32, f32) {
    let mut bits = vec![0u64; words];
    let (mut sq, mut dot) = (0f32, 0f32);
    for (i, (&x, &m)) in v.iter().zip(mean).enumerate() {
        if x > m {
            bits[i / 64] |= 1 << (i % 64);
        }
        sq += (x - m) * (x - m);
        dot += x * m;
    }
    (bits, sq.sqrt(), dot)
}
