//! The vector store under every index: the rows, their metric, and the ways to score them.
//!
//! Why one type. Every index kind keeps the same thing — `dim` floats per slot, preprocessed
//! for the metric (normalised for cosine), appended in slot order — and needs the same things
//! from it: a row by slot, the exact scan that answers `exact` queries and serves as ground
//! truth, dimension checks, and the byte layout of the file. faiss splits `IndexHNSW` from its
//! `storage` index the same way; here a graph, a hash table or a code table sits beside a
//! [`VectorStore`] instead of each owning a `Vec<f32>` and its helpers.
//!
//! Layout. Rows are contiguous and unpadded (`row(s)` starts at float `s · dim`) in an
//! allocation aligned to 64 bytes (`aligned.rs`). When `dim` is a multiple of 16 (a row of
//! `4 · dim` bytes is whole cache lines: 128 or 768 dimensions) every row starts on a cache
//! line, so a 128-d row is eight lines, not the nine a `Vec<f32>` at glibc's page + 16 gives.
//! Other dimensions get no per-row guarantee: a 50-d row (200 bytes) starts at offset
//! `200 · s mod 64`, as before, with only row 0 aligned. Padding the stride to 16 floats would
//! align those too, but it costs memory (glove50: 256 bytes per row instead of 200, +28%),
//! changes `memory_bytes` and the bytes-per-vector figures, and breaks the one-slice view the
//! exact scan streams and the file stores; it was not done.
//!
//! Scoring. [`VectorStore::scan`] is the exact search (`scan.rs`); graph searches score rows
//! through a `Scorer` (query, kernels, filter, count), faiss' `DistanceComputer`.

pub(crate) mod aligned;
mod codes;
mod floats;
mod half;
mod mapped;
mod scan;
mod scorer;

use std::borrow::Cow;
use std::ops::Deref;

use crossbeam_utils::sync::ShardedLockReadGuard;

use crate::distance::{KeyFn, KeyFn4, Metric};
use crate::persist::codec::{Decoder, Encoder};
use crate::sync::ReadMostly;
use crate::{IndexError, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter};
use codes::CodedRows;
pub use codes::{RowCodes, SAMPLE_ROWS, TRAIN_ROWS};
use floats::Floats;
pub use floats::Placement;
pub(crate) use half::HalfRows;
pub(crate) use scorer::Scorer;

/// Rows of `dim` floats, preprocessed for one metric, 64-byte aligned; see the module docs.
pub struct VectorStore {
    metric: Metric,
    dim: usize,
    /// The metric's kernels, resolved once (never per pair).
    key_fn: KeyFn,
    key4_fn: KeyFn4,
    /// `len · dim` floats, row-major, in RAM or in a mapped file ([`Placement`]).
    floats: Floats,
    /// Compressed copies of the rows that graph searches traverse by, when asked for
    /// (`codes.rs`); boxed, as most stores keep none.
    codes: Option<Box<CodedRows>>,
}

impl VectorStore {
    /// An empty store of `dim`-float rows for `metric`.
    pub fn new(metric: Metric, dim: usize) -> Self {
        Self::with_capacity(metric, dim, 0)
    }

    /// An empty store with room for `rows` rows.
    pub fn with_capacity(metric: Metric, dim: usize, rows: usize) -> Self {
        Self::placed_with_capacity(metric, dim, rows, &Placement::Memory)
            .expect("a store in memory needs no file")
    }

    /// An empty store whose rows live where `placement` says; fails only when a mapped
    /// store's scratch file cannot be made.
    pub fn placed(metric: Metric, dim: usize, placement: &Placement) -> Result<Self> {
        Self::placed_with_capacity(metric, dim, 0, placement)
    }

    fn placed_with_capacity(
        metric: Metric,
        dim: usize,
        rows: usize,
        placement: &Placement,
    ) -> Result<Self> {
        Ok(Self {
            metric,
            dim,
            key_fn: metric.key_fn(),
            key4_fn: metric.key4_fn(),
            floats: Floats::new(placement, rows * dim)?,
            codes: None,
        })
    }

    /// Where the rows live.
    pub fn placement(&self) -> Placement {
        self.floats.placement()
    }

    /// A copy of the store under the same placement (a mapped copy gets its own file).
    pub fn try_clone(&self) -> Result<Self> {
        Ok(Self {
            metric: self.metric,
            dim: self.dim,
            key_fn: self.key_fn,
            key4_fn: self.key4_fn,
            floats: self.floats.try_clone()?,
            codes: self.codes.clone(),
        })
    }

    /// Keeps `codes` beside the rows from now on (trained once there are
    /// [`TRAIN_ROWS`] rows), or drops them (`None`).
    pub fn set_codes(&mut self, codes: Option<RowCodes>) -> Result<()> {
        if let Some(kind) = codes {
            kind.validate()?;
        }
        if codes == Some(RowCodes::Rabitq) {
            return Err(IndexError::InvalidParams(
                "rabitq codes are kept beside a graph's links: only the hnsw and ip_nsw indexes \
                 keep them"
                    .into(),
            ));
        }
        if self.codes.as_ref().map(|c| c.kind()) == codes {
            return Ok(());
        }
        self.codes = codes.map(|kind| {
            let mut coded = CodedRows::new(kind, self.metric, self.dim);
            coded.sync(self.floats.as_slice());
            Box::new(coded)
        });
        Ok(())
    }

    /// The codes kept beside the rows, if any.
    pub fn codes(&self) -> Option<RowCodes> {
        self.codes.as_ref().map(|c| c.kind())
    }

    /// The metric rows are preprocessed and scored for.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Floats per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows stored.
    pub fn len(&self) -> usize {
        self.floats.len().checked_div(self.dim).unwrap_or(0)
    }

    /// True when no row is stored.
    pub fn is_empty(&self) -> bool {
        self.floats.len() == 0
    }

    /// Row `slot`; the slot must exist (hot paths that only see slots the index handed out).
    #[inline]
    pub fn row(&self, slot: Slot) -> &[f32] {
        let start = slot as usize * self.dim;
        &self.floats.as_slice()[start..start + self.dim]
    }

    /// Row `slot`, or `None` past the end (for slots that come from callers).
    pub fn get(&self, slot: Slot) -> Option<&[f32]> {
        let start = slot as usize * self.dim;
        self.floats.as_slice().get(start..start + self.dim)
    }

    /// Every row in slot order.
    pub fn rows(&self) -> std::slice::ChunksExact<'_, f32> {
        self.as_flat().chunks_exact(self.dim.max(1))
    }

    /// All rows as one row-major slice: what the exact scan streams and files store.
    pub fn as_flat(&self) -> &[f32] {
        self.floats.as_slice()
    }

    /// Checks a query or vector against the store's dimension.
    pub fn check_dim(&self, vector: &[f32]) -> Result<()> {
        if vector.len() == self.dim {
            Ok(())
        } else {
            Err(IndexError::WrongDimension {
                expected: self.dim,
                got: vector.len(),
            })
        }
    }

    /// Validates a row-major batch and returns how many rows it holds.
    pub fn rows_in(&self, batch: &[f32]) -> Result<usize> {
        if batch.is_empty() {
            return Ok(0);
        }
        match batch.len().checked_rem(self.dim) {
            Some(0) => Ok(batch.len() / self.dim),
            rest => Err(IndexError::WrongDimension {
                expected: self.dim,
                got: rest.unwrap_or(batch.len()),
            }),
        }
    }

    /// Appends a row-major batch, preprocessed for the metric, and returns its first slot.
    /// Fails before storing anything when the batch is ragged or slots would run out.
    pub fn append(&mut self, batch: &[f32]) -> Result<Slot> {
        let count = self.rows_in(batch)?;
        let first = self.len();
        if first + count > Slot::MAX as usize {
            return Err(IndexError::Full(first));
        }
        let metric = self.metric;
        let dim = self.dim.max(1);
        let added = self.floats.grow(batch.len())?;
        added.copy_from_slice(batch);
        for row in added.chunks_exact_mut(dim) {
            metric.preprocess(row);
        }
        if let Some(codes) = &mut self.codes {
            codes.sync(self.floats.as_slice());
        }
        Ok(first as Slot)
    }

    /// Makes sure `rows` more rows fit, so that the next [`VectorStore::append`] of at most
    /// that many fails only on a ragged batch or a full slot space, never on I/O: an index
    /// that appends to two stores reserves both first and cannot leave them out of step.
    pub fn reserve(&mut self, rows: usize) -> Result<()> {
        self.floats.reserve(rows * self.dim)
    }

    /// Bytes of anonymous memory the rows (and their codes) hold: mapped rows count none,
    /// as the kernel may page them out (see [`VectorStore::mapped_bytes`]).
    pub fn memory_bytes(&self) -> usize {
        self.floats.memory_bytes() + self.codes.as_ref().map_or(0, |c| c.memory_bytes())
    }

    /// Bytes of mapped file the rows take ([`Placement::Mapped`]); resident only while the
    /// page cache holds them.
    pub fn mapped_bytes(&self) -> usize {
        self.floats.mapped_bytes()
    }

    /// Exact search for a query as users send it: checks its dimension, preprocesses it for
    /// the metric, scans.
    pub fn search_exact(
        &self,
        query: &[f32],
        k: usize,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        self.check_dim(query)?;
        Ok(self.scan(&self.metric.prepared(query), k, filter))
    }

    /// Exact search among `slots` only (a candidate list) for a query as users send it:
    /// checks its dimension, preprocesses it for the metric, scores each listed row.
    pub fn search_slots(
        &self,
        query: &[f32],
        k: usize,
        slots: impl Iterator<Item = Slot>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        self.check_dim(query)?;
        Ok(self.scan_slots(&self.metric.prepared(query), k, slots))
    }

    /// The opening every index's search shares: the query's dimension checked, the query
    /// preprocessed, and `exact` queries answered by the scan, so no index writes its own.
    pub(crate) fn open<'q>(
        &self,
        query: &'q [f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<Opening<'q>> {
        self.check_dim(query)?;
        let query = self.metric.prepared(query);
        if params.exact {
            let (hits, stats) = self.scan(&query, k, filter);
            return Ok(Opening::Answered(hits, stats));
        }
        Ok(Opening::Prepared(query))
    }

    /// The metric's one-pair kernel.
    pub(crate) fn key_fn(&self) -> KeyFn {
        self.key_fn
    }

    /// Writes the rows as the index files always have: one length-prefixed f32 array,
    /// row-major and unpadded.
    pub(crate) fn write(&self, e: &mut Encoder<'_>) {
        e.f32s(self.as_flat());
    }

    /// Reads what [`VectorStore::write`] wrote, for rows of `dim` floats, into a store
    /// placed by `placement` (streamed: mapped rows never pass through RAM as a whole); the
    /// rows are already preprocessed.
    pub(crate) fn read(
        d: &mut Decoder<'_>,
        metric: Metric,
        dim: usize,
        placement: &Placement,
    ) -> Result<Self> {
        let floats = d.f32_iter()?;
        if dim == 0 || floats.len() % dim != 0 {
            return Err(IndexError::corrupt("vector array does not match dimension"));
        }
        let mut store = Self::placed_with_capacity(metric, dim, floats.len() / dim, placement)?;
        store.floats.extend_exact(floats)?;
        Ok(store)
    }

    /// Asks the CPU to start loading row `slot` (a hint: it never faults or blocks).
    #[inline]
    pub(crate) fn prefetch(&self, slot: Slot) {
        if let Some(row) = self.get(slot) {
            let lines = std::mem::size_of_val(row).div_ceil(64).min(PREFETCH_LINES);
            prefetch_bytes(row.as_ptr().cast(), lines);
        }
    }
}

/// What [`VectorStore::open`] leaves the index to do.
pub(crate) enum Opening<'q> {
    /// An `exact` query, answered by the scan.
    Answered(Vec<Neighbor>, SearchStats),
    /// The checked, preprocessed query, for the index's own search.
    Prepared(Cow<'q, [f32]>),
}

/// Cache lines of a row prefetched ahead of scoring it: all of a 128-d f32 vector, so a CPU
/// whose prefetcher does not follow a one-line touch still has the whole vector on the way;
/// longer vectors leave the rest to the hardware streamer. (On this project's AMD VMs one
/// line and eight measured alike.)
const PREFETCH_LINES: usize = 8;

/// Asks the CPU to start loading `lines` cache lines from `start` into every level of its
/// caches, the first level included.
#[inline]
pub(crate) fn prefetch_bytes(start: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T0 }>(start, lines);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, lines);
}

/// Asks the CPU to start loading `lines` cache lines from `start` into its second-level cache
/// and the levels below, not the first.
///
/// Why. The link-code search (`hnsw/link_codes.rs`) asks for a whole block of 19 lines ahead
/// of the node it will expand next, and the rows of the two after. Asked into the first level,
/// on an Intel Xeon (48 KiB of L1d and 2 MiB of L2 per core) the search ran at 0.87× the QPS
/// of asking for the same lines into the second, on the hard 1M set at recall@10 0.95
/// (BENCHMARKS.md); SymphonyQG asks for its next node's lines into the second level too.
/// The first level is small beside the lines in flight, and a line loaded there ahead of time
/// can push out the lines the expansion under way is reading.
#[inline]
pub(crate) fn prefetch_bytes_to_l2(start: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    prefetch_lines::<{ std::arch::x86_64::_MM_HINT_T1 }>(start, lines);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, lines);
}

/// `_mm_prefetch` with `HINT` over `lines` lines from `start`.
#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_lines<const HINT: i32>(start: *const u8, lines: usize) {
    use std::arch::x86_64::_mm_prefetch;
    // Four lines per step, at constant offsets from one address: a link-code block is 19
    // lines at 128 dimensions, and a prefetch per loop turn spent about three instructions
    // on each line where this spends under two (callgrind).
    let mut at = start.cast::<i8>();
    for _ in 0..lines / 4 {
        // SAFETY: `_mm_prefetch` is a hint that never faults, whatever the address; the
        // callers pass addresses inside one live allocation anyway.
        unsafe {
            _mm_prefetch::<HINT>(at);
            _mm_prefetch::<HINT>(at.wrapping_add(64));
            _mm_prefetch::<HINT>(at.wrapping_add(128));
            _mm_prefetch::<HINT>(at.wrapping_add(192));
        }
        at = at.wrapping_add(256);
    }
    for _ in 0..lines % 4 {
        // SAFETY: as above.
        unsafe { _mm_prefetch::<HINT>(at) };
        at = at.wrapping_add(64);
    }
}

/// Something an index keeps behind its lock that holds the index's rows.
pub(crate) trait HoldsStore: Send + Sync {
    /// The rows.
    fn store(&self) -> &VectorStore;
}

impl HoldsStore for VectorStore {
    fn store(&self) -> &VectorStore {
        self
    }
}

/// An index's [`VectorStore`], read-locked while this guard lives (see
/// [`crate::VectorIndex::store`]). The index's writers wait for it: drop it before adding.
pub struct StoreRead<'a>(ShardedLockReadGuard<'a, dyn HoldsStore>);

impl<'a> StoreRead<'a> {
    /// Read-locks `state` and views its store.
    pub(crate) fn new(state: &'a ReadMostly<impl HoldsStore + 'static>) -> Self {
        let state: &ReadMostly<dyn HoldsStore> = state;
        Self(state.read())
    }
}

impl Deref for StoreRead<'_> {
    type Target = VectorStore;
    fn deref(&self) -> &VectorStore {
        self.0.store()
    }
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod codes_tests;

#[cfg(test)]
mod placement_tests;
