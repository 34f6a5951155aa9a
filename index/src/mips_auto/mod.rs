//! The automatic choice of maximum-inner-product graph: ip-NSW+ or ip-NSW, by the spread of
//! the norms (issue #26, point 4; `BENCHMARKS.md`, "Maximum inner product, round two").
//!
//! Why choose. ip-NSW+ ([`crate::ipnsw`]) pays for an angular stage and a second graph so a
//! walk reaches the large-norm items that point the query's way; that pays wherever the
//! answers lean on the norms, and it is wasted where they do not. Measured (C31, one search
//! thread, QPS ratio ip-NSW+ ÷ ip-NSW at recall@10 0.9 / 0.95): 1.16–2.75× on movielens-mips
//! and on long-tailed sets down to a norm bias of 0.65, but 0.83× / 0.77× on GloVe-50 as
//! published, whose answers hardly lean on norms (bias 0.22).
//!
//! The rule. The norm bias itself needs the queries and their true answers, which an index
//! being built does not have (items used as stand-in queries read movielens-mips' bias as
//! 0.45 against its users' 0.98). What it has is the norms, so it reads their *spread*: the
//! 95th percentile over the median, which is scale-free and already steady at a thousand
//! rows (GloVe-50 1.18 at 1,024 rows, 1.20 over all; the bias-0.65 set 1.30 and 1.32).
//! At [`SPREAD_THRESHOLD`] or above it builds ip-NSW+, below it ip-NSW. The threshold lies
//! between the one set where ip-NSW measured faster (GloVe-50, spread 1.20) and the
//! narrowest set where ip-NSW+ did (bias 0.65, 1.31); movielens-mips reads 3.4 and the
//! bias-0.85 set 1.47. Vectors of one length (spread 1.0: normalised embeddings, SIFT) get
//! ip-NSW, which is then exactly a cosine HNSW, the right index for them. Two sets bracket
//! the threshold: that is the evidence there is, and the choice is reported (`explain`, the
//! index's [`VectorIndex::choice`]) so that a user can see it and name a kind instead.
//!
//! When. Until [`TRAIN_ROWS`] rows the index is an exact scan (at that size a scan costs
//! what a graph search does, and answers exactly); the batch that reaches it decides, from
//! every row held then, and the chosen graph is built from those rows. The decision is kept
//! in the index file. A rebuild from the store (a vacuum, a lost index file) decides again
//! from the rows it is given first, which may land on the other side of the threshold when
//! the spread is close to it; the answers stay right either way, only the speed differs.

#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::distance::simd::dot;
use crate::hnsw::HnswParams;
use crate::ipnsw::{self, IpNswPlusParams};
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{Placement, RowCodes, StoreRead, VectorStore, TRAIN_ROWS};
use crate::sync::ReadMostly;
use crate::{
    IndexError, IndexKind, IndexParams, Metric, Neighbor, Result, SearchParams, SearchStats, Slot,
    SlotFilter, Trainers, VectorIndex,
};

/// Norm spread (95th percentile ÷ median) from which ip-NSW+ is built; see the module docs.
pub const SPREAD_THRESHOLD: f32 = 1.25;

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

/// What the index chose, and from what.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// [`IndexKind::IpNswPlus`] or [`IndexKind::IpNsw`].
    pub kind: IndexKind,
    /// The norm spread it was chosen by ([`norm_spread`]).
    pub spread: f32,
    /// Rows the spread was read from.
    pub rows: usize,
}

impl Choice {
    /// The choice for rows of this spread.
    pub fn of(spread: f32, rows: usize) -> Self {
        let kind = if spread >= SPREAD_THRESHOLD {
            IndexKind::IpNswPlus
        } else {
            IndexKind::IpNsw
        };
        Self { kind, spread, rows }
    }

    /// One line for `explain` and logs, e.g. `ip_nsw: norm spread 1.20 < 1.25 over 4550 rows`.
    pub fn describe(&self) -> String {
        let side = if self.kind == IndexKind::IpNswPlus {
            "≥"
        } else {
            "<"
        };
        format!(
            "{}: norm spread (95th percentile ÷ median) {:.2} {side} {SPREAD_THRESHOLD} over \
             the first {} rows",
            self.kind.name(),
            self.spread,
            self.rows
        )
    }
}

/// The chosen graph.
struct Chosen {
    choice: Choice,
    index: Box<dyn VectorIndex>,
}

/// An exact scan until [`TRAIN_ROWS`] rows, then ip-NSW+ or ip-NSW; see the module docs.
pub struct MipsAuto {
    /// ip-NSW+'s parameters; ip-NSW takes its `m`, `ef_construction`, `ef_search` and `seed`.
    params: IpNswPlusParams,
    dim: usize,
    placement: Placement,
    /// The rows until the choice; emptied (under its write lock) when the graph takes over.
    scan: ReadMostly<VectorStore>,
    /// Set once, by the batch that reaches [`TRAIN_ROWS`] rows, while `scan` is write-locked:
    /// whoever read-locks `scan` and then finds this unset may scan.
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
        Ok(Self::from_parts(
            params,
            dim,
            placement,
            scan,
            OnceLock::new(),
        ))
    }

    fn from_parts(
        params: IpNswPlusParams,
        dim: usize,
        placement: &Placement,
        scan: VectorStore,
        graph: OnceLock<Chosen>,
    ) -> Self {
        Self {
            params,
            dim,
            placement: placement.clone(),
            scan: ReadMostly::new(scan),
            graph,
            codes: Mutex::new(None),
            add_lock: Mutex::new(()),
        }
    }

    /// The choice made, or `None` while the index still scans.
    pub fn chosen(&self) -> Option<Choice> {
        self.graph.get().map(|g| g.choice)
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

    /// Chooses from the held rows and `batch`, and builds that graph over both (in order, so
    /// slots keep their numbers). The caller holds the add lock.
    fn choose(&self, held: &VectorStore, batch: &[f32]) -> Result<Chosen> {
        let rows = held.len() + batch.len() / self.dim;
        let choice = Choice::of(norm_spread(&[held.as_flat(), batch], self.dim), rows);
        let index = crate::new_index(
            &self.graph_params(choice.kind),
            Metric::InnerProduct,
            self.dim,
            &Trainers::default(),
            &self.placement,
        )?;
        if !held.is_empty() {
            index.add(held.as_flat())?;
        }
        index.add(batch)?;
        index.set_codes(*self.codes.lock())?;
        Ok(Chosen { choice, index })
    }
}

impl VectorIndex for MipsAuto {
    fn kind(&self) -> IndexKind {
        IndexKind::MipsAuto
    }
    fn store(&self) -> StoreRead<'_> {
        if let Some(g) = self.graph.get() {
            return g.index.store();
        }
        let scan = StoreRead::new(&self.scan);
        match self.graph.get() {
            Some(g) => {
                drop(scan);
                g.index.store()
            }
            None => scan,
        }
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        if let Some(g) = self.graph.get() {
            return g.index.search(query, k, params, filter);
        }
        let scan = self.scan.read();
        match self.graph.get() {
            Some(g) => {
                drop(scan);
                g.index.search(query, k, params, filter)
            }
            None => scan.search_exact(query, k, filter),
        }
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let _adds = self.add_lock.lock();
        if let Some(g) = self.graph.get() {
            return g.index.add(vectors);
        }
        let (held, count) = {
            let scan = self.scan.read();
            (scan.len(), scan.rows_in(vectors)?)
        };
        if held + count < TRAIN_ROWS {
            return self.scan.write().append(vectors);
        }
        // Searches go on scanning while the graph is built (only this thread writes `scan`).
        let chosen = self.choose(&self.scan.read(), vectors)?;
        let mut scan = self.scan.write();
        if self.graph.set(chosen).is_err() {
            unreachable!("only a batch under the add lock sets the graph, and it was unset");
        }
        *scan = VectorStore::new(Metric::InnerProduct, self.dim);
        Ok(held as Slot)
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
        match self.graph.get() {
            Some(g) => g.index.set_codes(codes),
            None => Ok(()),
        }
    }
    fn choice(&self) -> Option<String> {
        Some(match self.chosen() {
            Some(choice) => choice.describe(),
            None => format!("exact scan until {TRAIN_ROWS} rows, then ip_nsw_plus or ip_nsw"),
        })
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let _no_adds = self.add_lock.lock();
        let mut e = Encoder::new(out);
        ipnsw::write_params(&self.params, &mut e);
        e.u64(self.dim as u64);
        match self.graph.get() {
            None => {
                e.u8(0);
                self.scan.read().write(&mut e);
            }
            Some(g) => {
                e.u8(g.choice.kind.tag());
                e.u32(g.choice.spread.to_bits());
                e.u64(g.choice.rows as u64);
                e.nested(|out| g.index.write_to(out));
            }
        }
    }
    fn memory_bytes(&self) -> usize {
        match self.graph.get() {
            Some(g) => g.index.memory_bytes(),
            None => self.scan.read().memory_bytes(),
        }
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
        let (scan, graph) = if stage == 0 {
            let scan = VectorStore::read(&mut d, Metric::InnerProduct, dim, placement)?;
            (scan, OnceLock::new())
        } else {
            let kind = IndexKind::from_tag(stage)
                .filter(|k| matches!(k, IndexKind::IpNsw | IndexKind::IpNswPlus))
                .ok_or_else(|| IndexError::corrupt("mips_auto file chose an unknown graph"))?;
            let spread = f32::from_bits(d.u32()?);
            let rows = d.usize()?;
            let index = crate::read_index(kind, d.bytes()?, &Trainers::default(), placement)?;
            if index.dim() != dim || index.metric() != Metric::InnerProduct {
                return Err(IndexError::corrupt(
                    "mips_auto's graph does not match its dimension or metric",
                ));
            }
            let chosen = Chosen {
                choice: Choice { kind, spread, rows },
                index,
            };
            (
                VectorStore::new(Metric::InnerProduct, dim),
                OnceLock::from(chosen),
            )
        };
        d.finish()?;
        Ok(Self::from_parts(params, dim, placement, scan, graph))
    }
}
