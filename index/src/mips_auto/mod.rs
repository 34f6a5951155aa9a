//! The automatic choice of index for maximum inner product: the norm-ordered scan, ip-NSW+ or
//! ip-NSW, by the spread of the norms and the size of the collection (issue #26, point 4;
//! `BENCHMARKS.md`, "Maximum inner product, round two").
//!
//! Why choose. Where the answers lean on the norms, the largest-norm items hold them, and an
//! index that reads those first wins: the norm scan ([`crate::norm_scan`]) ran at 2.9–16×
//! ip-NSW+'s QPS and 3.7–20× FAISS HNSW-IP's and ScaNN's at recall@10 0.9, 0.95 and 0.99
//! on every set measured whose norms spread (movielens-mips' real factors, long-tailed sets
//! of norm bias 0.65 to 1.0, up to 200k items). But its cost is a share of the collection
//! where a graph's grows far slower, so past [`scan_rows`] rows the index grows into
//! ip-NSW+ ([`crate::ipnsw`]), whose angular stage and second graph reach the large-norm
//! items that point the query's way. Where the norms hardly spread, the norm order means
//! little: a small collection is still cheapest read whole ([`SMALL_SCAN_ROWS`]), a larger
//! one gets ip-NSW, faster there than ip-NSW+ (0.83× / 0.77× for ip-NSW+ at recall@10 0.9 / 0.95 on
//! GloVe-50 as published, whose answers hardly lean on norms).
//!
//! The rule. The norm bias itself needs the queries and their true answers, which an index
//! being built does not have (items used as stand-in queries read movielens-mips' bias as
//! 0.45 against its users' 0.98). What it has is the norms, so it reads their *spread*: the
//! 95th percentile over the median, which is scale-free and already steady at a thousand
//! rows (GloVe-50 1.18 at 1,024 rows, 1.20 over all; the bias-0.65 set 1.30 and 1.32).
//! At [`SPREAD_THRESHOLD`] or above the norms lean: the norm scan (a quarter of the items a
//! query by default), then ip-NSW+ past [`scan_rows`] rows (or at once when row codes are
//! asked for, which the norm scan does not keep). Below it, the norm scan reading every item
//! up to [`SMALL_SCAN_ROWS`] rows, then ip-NSW. The threshold lies between the
//! one set where ip-NSW measured faster than ip-NSW+ (GloVe-50, spread 1.20) and the narrowest
//! set where the norm scan and ip-NSW+ did (bias 0.65, 1.31); movielens-mips reads 3.4 and the
//! bias-0.85 set 1.47. Vectors of one length (spread 1.0: normalised embeddings, SIFT) get
//! ip-NSW past the small bound, which is then exactly a cosine HNSW, the right index for
//! them. Two sets bracket the threshold: that is the evidence there is, and the choice is
//! reported (`explain`, the index's [`VectorIndex::choice`]) so that a user can see it and
//! name a kind instead.
//!
//! What `ef` means follows the choice: a graph's candidate list, or the norm scan's count of
//! items read, largest norms first.
//!
//! When. Until [`TRAIN_ROWS`] rows the index is an exact scan (at that size a scan costs
//! what a graph search does, and answers exactly); the batch that reaches it decides, from
//! every row held then, and the chosen index is built from those rows. The batch that takes
//! a norm scan past its bound builds the graph from every row while searches go on
//! scanning. The decision is kept in the index file. A rebuild from the store (a vacuum, a
//! lost index file) decides again from the rows it is given first, which may land on the
//! other side of the threshold when the spread is close to it; the answers stay right either
//! way, only the speed differs.

#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::distance::simd::dot;
use crate::hnsw::HnswParams;
use crate::ipnsw::{self, IpNswPlusParams};
use crate::norm_scan::{NormScan, NormScanParams};
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{Placement, RowCodes, StoreRead, VectorStore, TRAIN_ROWS};
use crate::sync::ReadMostly;
use crate::{
    BatchAnswers, IndexError, IndexKind, IndexParams, Metric, Neighbor, Result, SearchParams,
    SearchStats, Slot, SlotFilter, Trainers, VectorIndex,
};

/// Norm spread (95th percentile ÷ median) from which the norms are taken to lean: the norm
/// scan, then ip-NSW+; see the module docs.
pub const SPREAD_THRESHOLD: f32 = 1.25;

/// Bytes of norm-scan codes (a byte per coordinate, rounded up to fours) up to which
/// norm-leaning rows are served by the norm scan: a million 64-dimension rows, 175,000 of
/// 384. The batch that passes it builds ip-NSW+ from every row. Why a bound: the scan's cost
/// is a share of the collection (a quarter by default: 16 MiB of codes here, about 150 µs a
/// query at 64 dimensions), a graph's grows far slower. At 200k rows, the most measured, the
/// scan was still 4.2× ip-NSW+ or more at norm bias 0.65 and 11× at 0.85 (`BENCHMARKS.md`);
/// the bound caps a default query's reading, it is not a measured crossover.
pub const SCAN_BYTES: usize = 64 << 20;

/// Rows a norm scan of `dim`-dimension rows holds before it grows into ip-NSW+
/// ([`SCAN_BYTES`]; never below the [`TRAIN_ROWS`] the choice is made at).
pub fn scan_rows(dim: usize) -> usize {
    (SCAN_BYTES / dim.max(1).div_ceil(4) / 4).max(TRAIN_ROWS)
}

/// Rows up to which rows whose norms do not lean are served by reading every one of them
/// (the norm scan at its full depth) instead of by ip-NSW: a collection this small is cheaper
/// read whole by byte codes than walked at the recall users ask for (Qdrant's
/// `full_scan_threshold` is the same idea). Measured on growing prefixes of three real sets
/// (`bench/ann crossover`, `BENCHMARKS.md`), the scan's QPS fell to ip-NSW's at recall@10
/// 0.95 near 4,300 rows on siftsmall (128-d) and 7,800 on pypi-minilm (384-d); on GloVe-50
/// it was still 1.15× at all 4,550 rows; at 0.9 the crossings come a quarter to a third
/// sooner, at 0.99 near 8,000 rows or later. The bound sits between the two crossings
/// measured. In rows, not bytes: a scanned row and a graph's scored neighbour both cost in
/// proportion to the dimension, and the crossings in rows differ less than in bytes.
pub const SMALL_SCAN_ROWS: usize = 6_000;

/// The 95th percentile of the rows' norms over their median: 1.0 when every row has one
/// length, and scale-free. Rows are given in pieces (what is held, and a new batch).
pub fn norm_spread(pieces: &[&[f32]], dim: usize) -> f32 {
    let mut norms: Vec<f32> = pieces
        .iter()
        .flat_map(|rows| rows.chunks_exact(dim))
        .map(|x| dot(x, x).max(0.0).sqrt())
        .collect();
    if norms.is_empty() {
        return 1.0;
    }
    let mut quantile = |q: f64| {
        let at = ((norms.len() - 1) as f64 * q).round() as usize;
        *norms.select_nth_unstable_by(at, f32::total_cmp).1
    };
    let median = quantile(0.5);
    let p95 = quantile(0.95);
    if median > 0.0 {
        p95 / median
    } else if p95 > 0.0 {
        // Most rows are zero and some are not: the norms are all that tells them apart.
        f32::INFINITY
    } else {
        1.0
    }
}

/// Why the index holds what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The norm spread alone.
    Spread,
    /// Norms that do not lean, in a collection small enough to read whole
    /// ([`SMALL_SCAN_ROWS`]).
    Small,
    /// Row codes asked for, which the norm scan does not keep.
    RowCodes,
    /// A collection that outgrew the norm scan at this many rows.
    Outgrown(usize),
}

/// What the index chose, and from what.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// [`IndexKind::NormScan`], [`IndexKind::IpNswPlus`] or [`IndexKind::IpNsw`].
    pub kind: IndexKind,
    /// The norm spread it was chosen by ([`norm_spread`]).
    pub spread: f32,
    /// Rows the spread was read from.
    pub rows: usize,
    /// Why `kind`.
    pub reason: Reason,
}

impl Choice {
    /// The first choice for `rows` rows of this spread: the norm scan where the norms lean,
    /// or where the rows are few enough to read whole; ip-NSW otherwise.
    pub fn of(spread: f32, rows: usize) -> Self {
        let (kind, reason) = if spread >= SPREAD_THRESHOLD {
            (IndexKind::NormScan, Reason::Spread)
        } else if rows <= SMALL_SCAN_ROWS {
            (IndexKind::NormScan, Reason::Small)
        } else {
            (IndexKind::IpNsw, Reason::Spread)
        };
        Self {
            kind,
            spread,
            rows,
            reason,
        }
    }

    /// Whether the norms lean (the spread is at least [`SPREAD_THRESHOLD`]).
    fn leaning(&self) -> bool {
        self.spread >= SPREAD_THRESHOLD
    }

    /// The graph a norm scan grows into: ip-NSW+ where the norms lean, ip-NSW where not.
    fn graph_kind(&self) -> IndexKind {
        if self.leaning() {
            IndexKind::IpNswPlus
        } else {
            IndexKind::IpNsw
        }
    }

    /// Rows of `dim` dimensions past which a norm scan grows into its graph.
    fn bound(&self, dim: usize) -> usize {
        if self.leaning() {
            scan_rows(dim)
        } else {
            SMALL_SCAN_ROWS
        }
    }

    /// The norm scan's parameters: by default a query reads a quarter of the items where the
    /// norms lean, and all of them where they do not (the norm order then tells little).
    fn scan_params(&self) -> NormScanParams {
        if self.leaning() {
            NormScanParams::default()
        } else {
            NormScanParams {
                share: 1.0,
                ..NormScanParams::default()
            }
        }
    }

    /// The graph the norm scan grows into, and why.
    fn grown(self, reason: Reason) -> Self {
        Self {
            kind: self.graph_kind(),
            reason,
            ..self
        }
    }

    /// One line for `explain` and logs, e.g. `ip_nsw: norm spread (95th percentile ÷ median)
    /// 1.20 < 1.25 over the first 4550 rows`.
    pub fn describe(&self) -> String {
        let side = if self.spread >= SPREAD_THRESHOLD {
            "≥"
        } else {
            "<"
        };
        let read = format!(
            "{}: norm spread (95th percentile ÷ median) {:.2} {side} {SPREAD_THRESHOLD} over \
             the first {} rows",
            self.kind.name(),
            self.spread,
            self.rows
        );
        match self.reason {
            Reason::Spread => read,
            Reason::Small => format!("{read}, few enough rows to read them all"),
            Reason::RowCodes => format!("{read}, with row codes, which norm_scan does not keep"),
            Reason::Outgrown(rows) => {
                format!("{read}; norm_scan until {rows} rows outgrew it")
            }
        }
    }
}

/// The chosen graph.
struct Chosen {
    choice: Choice,
    index: Box<dyn VectorIndex>,
}

/// File stage tags beyond the kinds' own (a kind's tag means it was chosen by the spread).
const STAGE_SCAN: u8 = 0;
const STAGE_ROW_CODES: u8 = 0xf0;
const STAGE_OUTGROWN: u8 = 0xf1;

/// An exact scan until [`TRAIN_ROWS`] rows, then the norm scan, ip-NSW+ or ip-NSW; see the
/// module docs.
pub struct MipsAuto {
    /// ip-NSW+'s parameters; ip-NSW takes its `m`, `ef_construction`, `ef_search` and `seed`.
    params: IpNswPlusParams,
    dim: usize,
    placement: Placement,
    /// Rows past which a norm scan grows into its graph, when tests set fewer than the
    /// choice's own bound ([`Choice::bound`]).
    scan_rows: Option<usize>,
    /// The rows until the choice; emptied (under its write lock) when a chosen index takes
    /// over.
    scan: ReadMostly<VectorStore>,
    /// Set once, by the batch that reaches [`TRAIN_ROWS`] rows of leaning norms, while `scan`
    /// is write-locked; retired (emptied, under its own write lock) once `graph` is set.
    head: OnceLock<(Choice, NormScan)>,
    /// Set once, by the batch that chooses a graph (while `scan` is write-locked) or grows the
    /// norm scan into one (while the norm scan is write-locked): whoever read-locks either and
    /// then finds this unset may search it.
    graph: OnceLock<Chosen>,
    /// Row codes asked for before the graph existed, handed to it when it is built.
    codes: Mutex<Option<RowCodes>>,
    /// Serialises batches (and index files) with the choice.
    add_lock: Mutex<()>,
}

impl MipsAuto {
    /// An empty index whose rows live where `placement` says.
    pub fn placed(params: IpNswPlusParams, dim: usize, placement: &Placement) -> Result<Self> {
        params.validate()?;
        if dim == 0 {
            return Err(IndexError::InvalidParams(
                "dimension must be at least 1".into(),
            ));
        }
        let scan = VectorStore::placed(Metric::InnerProduct, dim, placement)?;
        Ok(Self::from_parts(params, dim, placement, scan, None, None))
    }

    fn from_parts(
        params: IpNswPlusParams,
        dim: usize,
        placement: &Placement,
        scan: VectorStore,
        head: Option<(Choice, NormScan)>,
        graph: Option<Chosen>,
    ) -> Self {
        Self {
            params,
            dim,
            placement: placement.clone(),
            scan_rows: None,
            scan: ReadMostly::new(scan),
            head: head.map_or_else(OnceLock::new, OnceLock::from),
            graph: graph.map_or_else(OnceLock::new, OnceLock::from),
            codes: Mutex::new(None),
            add_lock: Mutex::new(()),
        }
    }

    /// The same index growing its norm scan into ip-NSW+ past `rows` rows (tests).
    #[cfg(test)]
    fn with_scan_rows(mut self, rows: usize) -> Self {
        self.scan_rows = Some(rows);
        self
    }

    /// Rows past which the norm scan of `choice` grows into its graph.
    fn bound(&self, choice: &Choice) -> usize {
        self.scan_rows.unwrap_or_else(|| choice.bound(self.dim))
    }

    /// The choice made, or `None` while the index still scans exactly.
    pub fn chosen(&self) -> Option<Choice> {
        match (self.graph.get(), self.head.get()) {
            (Some(g), _) => Some(g.choice),
            (None, Some((choice, _))) => Some(*choice),
            (None, None) => None,
        }
    }

    /// The parameters of the graph `kind` (ip-NSW shares ip-NSW+'s degree and lists).
    fn graph_params(&self, kind: IndexKind) -> IndexParams {
        let p = self.params;
        if kind == IndexKind::IpNsw {
            IndexParams::IpNsw(HnswParams {
                m: p.m,
                ef_construction: p.ef_construction,
                ef_search: p.ef_search,
                seed: p.seed,
            })
        } else {
            IndexParams::IpNswPlus(p)
        }
    }

    /// The graph `choice` names, built over `pieces` of rows in order (so slots keep their
    /// numbers), with the row codes asked for.
    fn build_graph(&self, choice: Choice, pieces: &[&[f32]]) -> Result<Chosen> {
        let index = crate::new_index(
            &self.graph_params(choice.kind),
            Metric::InnerProduct,
            self.dim,
            &Trainers::default(),
            &self.placement,
        )?;
        for rows in pieces.iter().filter(|rows| !rows.is_empty()) {
            index.add(rows)?;
        }
        index.set_codes(*self.codes.lock())?;
        Ok(Chosen { choice, index })
    }

    /// Chooses from the held rows and `batch`, builds the choice over both, and hands every
    /// search to it. The caller holds the add lock.
    fn choose(&self, held: usize, batch: &[f32]) -> Result<Slot> {
        let rows = held + batch.len() / self.dim;
        let mut choice = {
            let scan = self.scan.read();
            Choice::of(norm_spread(&[scan.as_flat(), batch], self.dim), rows)
        };
        if choice.kind == IndexKind::NormScan && self.codes.lock().is_some() {
            choice = choice.grown(Reason::RowCodes);
        } else if choice.kind == IndexKind::NormScan && rows > self.bound(&choice) {
            choice = choice.grown(Reason::Outgrown(rows));
        }
        // Searches go on scanning while the choice is built (only this thread writes `scan`).
        if choice.kind == IndexKind::NormScan {
            let head = NormScan::placed(choice.scan_params(), self.dim, &self.placement)?;
            head.add(self.scan.read().as_flat())?;
            head.add(batch)?;
            let mut scan = self.scan.write();
            if self.head.set((choice, head)).is_err() {
                unreachable!("only a batch under the add lock chooses, and none had");
            }
            *scan = VectorStore::new(Metric::InnerProduct, self.dim);
        } else {
            let chosen = self.build_graph(choice, &[self.scan.read().as_flat(), batch])?;
            let mut scan = self.scan.write();
            if self.graph.set(chosen).is_err() {
                unreachable!("only a batch under the add lock chooses, and none had");
            }
            *scan = VectorStore::new(Metric::InnerProduct, self.dim);
        }
        Ok(held as Slot)
    }

    /// Builds ip-NSW+ over the norm scan's rows and `batch`, hands every search to it and
    /// empties the scan. The caller holds the add lock.
    fn grow(&self, choice: Choice, head: &NormScan, batch: &[f32], reason: Reason) -> Result<Slot> {
        let (first, chosen) = {
            // Searches go on reading the scan meanwhile; only this thread writes it.
            let rows = head.store();
            (
                rows.len(),
                self.build_graph(choice.grown(reason), &[rows.as_flat(), batch])?,
            )
        };
        head.retire(|| {
            if self.graph.set(chosen).is_err() {
                unreachable!("only a batch under the add lock grows the scan, and none had");
            }
        });
        Ok(first as Slot)
    }

    /// A read of the chosen index: the graph, else the norm scan while it holds its rows
    /// (`on_head` answers `None` once it is retired, and the graph is set by then); `None`
    /// while nothing is chosen.
    fn read_chosen<'a, R>(
        &'a self,
        on_graph: impl Fn(&'a dyn VectorIndex) -> R,
        on_head: impl FnOnce(&'a NormScan) -> Option<R>,
    ) -> Option<R> {
        if let Some(g) = self.graph.get() {
            return Some(on_graph(g.index.as_ref()));
        }
        let (_, head) = self.head.get()?;
        Some(on_head(head).unwrap_or_else(|| {
            let g = self
                .graph
                .get()
                .expect("a retired norm scan has handed over to its graph");
            on_graph(g.index.as_ref())
        }))
    }

    /// A read of the index: the chosen one, or the exact scan before the choice.
    fn read<'a, R>(
        &'a self,
        on_graph: impl Fn(&'a dyn VectorIndex) -> R,
        on_head: impl Fn(&'a NormScan) -> Option<R>,
        on_scan: impl FnOnce(&VectorStore) -> R,
    ) -> R {
        if let Some(answer) = self.read_chosen(&on_graph, &on_head) {
            return answer;
        }
        let scan = self.scan.read();
        // The choice is published while `scan` is write-locked, and `scan` emptied after.
        if self.graph.get().is_none() && self.head.get().is_none() {
            return on_scan(&scan);
        }
        drop(scan);
        self.read_chosen(on_graph, on_head)
            .expect("a choice once made stays made")
    }
}

impl VectorIndex for MipsAuto {
    fn kind(&self) -> IndexKind {
        IndexKind::MipsAuto
    }
    fn store(&self) -> StoreRead<'_> {
        if let Some(store) = self.read_chosen(|g| g.store(), NormScan::store_live) {
            return store;
        }
        let scan = StoreRead::new(&self.scan);
        if self.graph.get().is_none() && self.head.get().is_none() {
            return scan;
        }
        drop(scan);
        self.read_chosen(|g| g.store(), NormScan::store_live)
            .expect("a choice once made stays made")
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        self.read(
            |g| g.search(query, k, params, filter),
            |head| head.search_live(query, k, params, filter),
            |scan| scan.search_exact(query, k, filter),
        )
    }
    fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<BatchAnswers> {
        self.read(
            |g| g.search_batch(queries, k, params, filter),
            |head| head.search_batch_live(queries, k, params, filter),
            |scan| {
                crate::check_batch(queries, self.dim)?;
                queries
                    .chunks_exact(self.dim)
                    .map(|query| scan.search_exact(query, k, filter))
                    .collect()
            },
        )
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let _adds = self.add_lock.lock();
        if let Some(g) = self.graph.get() {
            return g.index.add(vectors);
        }
        if let Some((choice, head)) = self.head.get() {
            let rows = {
                let store = head.store();
                store.len() + store.rows_in(vectors)?
            };
            if rows <= self.bound(choice) {
                return head.add(vectors);
            }
            return self.grow(*choice, head, vectors, Reason::Outgrown(rows));
        }
        let (held, count) = {
            let scan = self.scan.read();
            (scan.len(), scan.rows_in(vectors)?)
        };
        if held + count < TRAIN_ROWS {
            return self.scan.write().append(vectors);
        }
        self.choose(held, vectors)
    }
    fn set_codes(&self, codes: Option<RowCodes>) -> Result<()> {
        let _adds = self.add_lock.lock();
        if let Some(codes) = codes {
            codes.validate()?;
            if matches!(codes, RowCodes::Rabitq) {
                return Err(IndexError::InvalidParams(
                    "rabitq codes are kept beside one HNSW graph's links, and mips_auto may \
                     choose ip_nsw_plus, which searches two graphs (name ip_nsw to use them)"
                        .into(),
                ));
            }
        }
        *self.codes.lock() = codes;
        match (self.graph.get(), self.head.get()) {
            (Some(g), _) => g.index.set_codes(codes),
            // The norm scan keeps codes of its own, and no others: codes take the graph now.
            (None, Some((choice, head))) if codes.is_some() => {
                self.grow(*choice, head, &[], Reason::RowCodes).map(|_| ())
            }
            (None, _) => Ok(()),
        }
    }
    fn choice(&self) -> Option<String> {
        Some(match self.chosen() {
            Some(choice) => choice.describe(),
            None => format!(
                "exact scan until {TRAIN_ROWS} rows, then norm_scan (growing into \
                 ip_nsw_plus) or ip_nsw"
            ),
        })
    }
    fn default_ef(&self) -> Option<usize> {
        match (self.graph.get(), self.head.get()) {
            (Some(_), _) => Some(self.params.ef_search),
            (None, Some((_, head))) => Some(head.params().default_depth(head.len())),
            (None, None) => None,
        }
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let _no_adds = self.add_lock.lock();
        let mut e = Encoder::new(out);
        ipnsw::write_params(&self.params, &mut e);
        e.u64(self.dim as u64);
        let (choice, index): (Choice, &dyn VectorIndex) = match (self.graph.get(), self.head.get())
        {
            (Some(g), _) => (g.choice, g.index.as_ref()),
            (None, Some((choice, head))) => (*choice, head),
            (None, None) => {
                e.u8(STAGE_SCAN);
                self.scan.read().write(&mut e);
                return;
            }
        };
        e.u8(match choice.reason {
            // A norm scan's reason follows from its spread (below the threshold: small).
            Reason::Spread | Reason::Small => choice.kind.tag(),
            Reason::RowCodes => STAGE_ROW_CODES,
            Reason::Outgrown(_) => STAGE_OUTGROWN,
        });
        e.u32(choice.spread.to_bits());
        e.u64(choice.rows as u64);
        if let Reason::Outgrown(rows) = choice.reason {
            e.u64(rows as u64);
        }
        e.nested(|out| index.write_to(out));
    }
    fn memory_bytes(&self) -> usize {
        self.read(
            |g| g.memory_bytes(),
            |head| Some(head.memory_bytes()),
            |scan| scan.memory_bytes(),
        )
    }
}

impl MipsAuto {
    /// Reads what [`VectorIndex::write_to`] wrote, its rows placed by `placement`.
    pub fn read_placed(bytes: &[u8], placement: &Placement) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let params = ipnsw::read_params(&mut d)?;
        let dim = d.usize()?;
        if dim == 0 {
            return Err(IndexError::corrupt("mips_auto file with dimension 0"));
        }
        let stage = d.u8()?;
        if stage == STAGE_SCAN {
            let scan = VectorStore::read(&mut d, Metric::InnerProduct, dim, placement)?;
            d.finish()?;
            return Ok(Self::from_parts(params, dim, placement, scan, None, None));
        }
        let named = match stage {
            STAGE_ROW_CODES | STAGE_OUTGROWN => None,
            tag => Some(
                IndexKind::from_tag(tag)
                    .filter(|k| {
                        matches!(
                            k,
                            IndexKind::IpNsw | IndexKind::IpNswPlus | IndexKind::NormScan
                        )
                    })
                    .ok_or_else(|| IndexError::corrupt("mips_auto file chose an unknown index"))?,
            ),
        };
        let spread = f32::from_bits(d.u32()?);
        let rows = d.usize()?;
        let reason = match (stage, named) {
            (STAGE_ROW_CODES, _) => Reason::RowCodes,
            (STAGE_OUTGROWN, _) => Reason::Outgrown(d.usize()?),
            (_, Some(IndexKind::NormScan)) if spread < SPREAD_THRESHOLD => Reason::Small,
            _ => Reason::Spread,
        };
        let scanned = Choice {
            kind: IndexKind::NormScan,
            spread,
            rows,
            reason,
        };
        // The stages that name no kind hold a graph grown from the norm scan.
        let choice = match named {
            Some(kind) => Choice { kind, ..scanned },
            None => scanned.grown(reason),
        };
        let kind = choice.kind;
        let nested = d.bytes()?;
        let empty = VectorStore::new(Metric::InnerProduct, dim);
        let mismatch = || IndexError::corrupt("mips_auto's index does not match its dimension");
        let auto = if kind == IndexKind::NormScan {
            let head = NormScan::read_placed(nested, placement)?;
            if head.dim() != dim {
                return Err(mismatch());
            }
            Self::from_parts(params, dim, placement, empty, Some((choice, head)), None)
        } else {
            let index = crate::read_index(kind, nested, &Trainers::default(), placement)?;
            if index.dim() != dim || index.metric() != Metric::InnerProduct {
                return Err(mismatch());
            }
            let chosen = Chosen { choice, index };
            Self::from_parts(params, dim, placement, empty, None, Some(chosen))
        };
        d.finish()?;
        Ok(auto)
    }
}
