//! A quantized scan for inner product: every item's code is scored by lookup tables, the best
//! `k × oversampling` are re-ranked with their full vectors. What the NEQ paper evaluates, and
//! what a `quantization_config` gives a `Dot` collection.
//!
//! Training. Codebooks need data, and a collection starts empty: below `train_threshold`
//! items searches scan the full vectors exactly; the batch that crosses it trains the codec on
//! (up to `train_size` of) the items so far and codes them all. The codec is retrained each
//! time the item count doubles, until it has seen `train_size` items, so codebooks trained on
//! the first few thousand items do not serve a collection of millions. Retraining runs inside
//! the write that triggers it (seconds for PQ at 50k items); searches keep using the old codes
//! until the new ones are swapped in.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::{CodebookTrainer, MipsCodec, Quantizer};
use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{HoldsStore, Opening, Placement, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::topk::TopK;
use crate::{
    IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter, Trainers,
    VectorIndex,
};

/// Parameters of a [`QuantizedIndex`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuantizedParams {
    /// The codec: plain VQ or NEQ, with its bytes per item.
    pub quantizer: Quantizer,
    /// Default oversampling: `k × oversampling` candidates are re-ranked (at least 1).
    pub oversampling: f32,
    /// Items before the first training; searches below it are exact.
    pub train_threshold: usize,
    /// Most items a training run uses (the first ones), and the count after which the codec is
    /// no longer retrained.
    pub train_size: usize,
}

impl QuantizedParams {
    /// `quantizer` with the defaults: oversampling 32, training from 4,096 items, retraining on
    /// up to 50,000.
    pub fn new(quantizer: Quantizer) -> Self {
        Self {
            quantizer,
            oversampling: 32.0,
            train_threshold: 4096,
            train_size: 50_000,
        }
    }

    /// Rejects parameters that cannot build an index.
    pub fn validate(&self) -> Result<()> {
        if !(self.oversampling.is_finite() && self.oversampling >= 1.0) {
            return Err(IndexError::InvalidParams(format!(
                "oversampling must be a finite number of at least 1, got {}",
                self.oversampling
            )));
        }
        if self.train_threshold < 256 || self.train_size < self.train_threshold {
            return Err(IndexError::InvalidParams(format!(
                "codebooks of 256 entries need train_threshold ≥ 256 and train_size ≥ train_threshold, got {} and {}",
                self.train_threshold, self.train_size
            )));
        }
        let least = if self.quantizer.norm_explicit() { 2 } else { 1 };
        let m = self.quantizer.m();
        if !(least..=64).contains(&m) {
            return Err(IndexError::InvalidParams(format!(
                "{} needs between {least} and 64 codebooks, got {m}",
                self.quantizer.label()
            )));
        }
        Ok(())
    }
}

struct Inner {
    store: VectorStore,
    codec: Option<MipsCodec>,
    codes: Vec<u8>,
    /// Items the codec was trained at (0 before the first training).
    trained_at: usize,
}

/// A quantized scan with exact re-ranking; see the module docs.
pub struct QuantizedIndex {
    params: QuantizedParams,
    /// Trains the codebooks when the index is due (FAISS's, handed in through [`Trainers`]).
    /// A file read without one still searches; it fails only when training falls due.
    trainer: Option<Arc<dyn CodebookTrainer>>,
    /// The vectors' dimension, outside the lock: training and coding need it.
    dim: usize,
    inner: ReadMostly<Inner>,
    add_lock: Mutex<()>,
}

impl QuantizedIndex {
    /// An empty index, trained when due by `trainers`' codebook trainer (which it needs).
    pub fn new(params: QuantizedParams, dim: usize, trainers: &Trainers) -> Result<Self> {
        params.validate()?;
        let trainer = Some(trainers.codebooks()?);
        if dim == 0 {
            return Err(IndexError::InvalidParams(
                "dimension must be at least 1".into(),
            ));
        }
        Ok(Self::from_inner(
            params,
            trainer,
            dim,
            Inner {
                store: VectorStore::new(Metric::InnerProduct, dim),
                codec: None,
                codes: Vec::new(),
                trained_at: 0,
            },
        ))
    }

    /// The codebook trainer, or why there is none.
    fn trainer(&self) -> Result<&dyn CodebookTrainer> {
        self.trainer.as_deref().ok_or_else(|| {
            IndexError::InvalidParams(
                "this process has no codebook trainer, so it cannot train quantized indexes".into(),
            )
        })
    }

    fn from_inner(
        params: QuantizedParams,
        trainer: Option<Arc<dyn CodebookTrainer>>,
        dim: usize,
        inner: Inner,
    ) -> Self {
        Self {
            params,
            trainer,
            dim,
            inner: ReadMostly::new(inner),
            add_lock: Mutex::new(()),
        }
    }

    /// Whether the codec exists yet (searches are exact until then).
    pub fn is_trained(&self) -> bool {
        self.inner.read().codec.is_some()
    }

    fn due_for_training(&self, trained_at: usize, n: usize) -> bool {
        let p = &self.params;
        n >= p.train_threshold
            && trained_at < p.train_size
            && (trained_at == 0 || n >= 2 * trained_at)
    }
}

impl HoldsStore for Inner {
    fn store(&self) -> &VectorStore {
        &self.store
    }
}

impl VectorIndex for QuantizedIndex {
    fn kind(&self) -> IndexKind {
        IndexKind::Quantized
    }
    fn store(&self) -> StoreRead<'_> {
        StoreRead::new(&self.inner)
    }
    fn search(
        &self,
        query: &[f32],
        k: usize,
        params: &SearchParams,
        filter: Option<SlotFilter<'_>>,
    ) -> Result<(Vec<Neighbor>, SearchStats)> {
        let inner = self.inner.read();
        let query = match inner.store.open(query, k, params, filter)? {
            Opening::Answered(hits, stats) => return Ok((hits, stats)),
            Opening::Prepared(query) => query,
        };
        let Some(codec) = &inner.codec else {
            // Untrained: the exact scan, as for `exact` queries.
            return Ok(inner.store.scan(&query, k, filter));
        };
        let oversampling = params
            .oversampling
            .unwrap_or(self.params.oversampling)
            .max(1.0);
        let candidates = ((k as f32 * oversampling).ceil() as usize).max(k);
        let (estimated, coded) = estimate(codec, &inner.codes, &query, candidates, filter);
        if !params.rescore.unwrap_or(true) {
            let mut hits = estimated;
            hits.truncate(k);
            return Ok((
                hits,
                SearchStats {
                    distance_computations: coded,
                    ..SearchStats::default()
                },
            ));
        }
        let mut exact = TopK::new(k);
        let mut scorer = inner.store.scorer(&query, None);
        for n in &estimated {
            exact.offer(Neighbor::new(n.slot, scorer.key(n.slot)));
        }
        Ok((
            exact.into_sorted(),
            SearchStats {
                distance_computations: coded + scorer.computed(),
                ..SearchStats::default()
            },
        ))
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let _adds = self.add_lock.lock();
        let (first, count, trained_at, codec) = {
            let inner = self.inner.read();
            let count = inner.store.rows_in(vectors)?;
            (
                inner.store.len(),
                count,
                inner.trained_at,
                inner.codec.clone(),
            )
        };
        let n = first + count;
        if self.due_for_training(trained_at, n) {
            // Train outside the lock on the first `train_size` items, then code everything.
            let mut all = self.inner.read().store.try_clone()?;
            all.append(vectors)?;
            let sample = &all.as_flat()[..n.min(self.params.train_size) * self.dim];
            let codec = MipsCodec::train(self.params.quantizer, self.dim, sample, self.trainer()?)?;
            let codes = codec.encode(all.as_flat());
            let mut inner = self.inner.write();
            inner.store = all;
            inner.codes = codes;
            inner.codec = Some(codec);
            inner.trained_at = n;
        } else {
            let codes = codec.as_ref().map(|c| c.encode(vectors));
            let mut inner = self.inner.write();
            inner.store.append(vectors)?;
            if let Some(codes) = codes {
                inner.codes.extend_from_slice(&codes);
            }
        }
        Ok(first as Slot)
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let _no_adds = self.add_lock.lock();
        let inner = self.inner.read();
        let mut e = Encoder::new(out);
        let p = self.params;
        e.u32(p.oversampling.to_bits());
        e.u64(p.train_threshold as u64);
        e.u64(p.train_size as u64);
        e.u64(self.dim as u64);
        e.u64(inner.trained_at as u64);
        inner.store.write(&mut e);
        match &inner.codec {
            None => e.u8(0),
            Some(codec) => {
                e.u8(1);
                codec.write(&mut e);
                e.bytes(&inner.codes);
            }
        }
        // The quantizer is recorded even before training, so a reload keeps the choice.
        let (tag, kind) = p.quantizer.tags();
        // Three bytes: `QuantizedParams::validate` keeps the codebooks within 64.
        e.bytes(&[tag, kind, p.quantizer.m() as u8]);
    }
    fn memory_bytes(&self) -> usize {
        let inner = self.inner.read();
        inner.store.memory_bytes() + inner.codes.capacity()
    }
}

/// The `candidates` best accepted slots by the codec's estimate, and how many codes were
/// scored.
fn estimate(
    codec: &MipsCodec,
    codes: &[u8],
    query: &[f32],
    candidates: usize,
    filter: Option<SlotFilter<'_>>,
) -> (Vec<Neighbor>, u64) {
    let tables = codec.tables(query);
    let mut top = TopK::new(candidates);
    let mut computed = 0u64;
    for (slot, code) in codes.chunks_exact(codec.code_size()).enumerate() {
        let slot = slot as Slot;
        if filter.is_some_and(|accept| !accept(slot)) {
            continue;
        }
        computed += 1;
        top.offer(Neighbor::new(slot, -codec.score(&tables, code)));
    }
    (top.into_sorted(), computed)
}

impl QuantizedIndex {
    /// Reads what [`VectorIndex::write_to`] wrote; `trainers` retrain it when due.
    pub fn read_from(bytes: &[u8], trainers: &Trainers) -> Result<Self> {
        let trainer = trainers.codebooks.clone();
        let mut d = Decoder::new(bytes);
        let oversampling = f32::from_bits(d.u32()?);
        let train_threshold = d.usize()?;
        let train_size = d.usize()?;
        let dim = d.usize()?;
        let trained_at = d.usize()?;
        let store = VectorStore::read(&mut d, Metric::InnerProduct, dim, &Placement::Memory)?;
        let (codec, codes) = match d.u8()? {
            0 => (None, Vec::new()),
            1 => {
                let codec = MipsCodec::read(&mut d)?;
                (Some(codec), d.bytes()?.to_vec())
            }
            _ => return Err(IndexError::corrupt("unknown codec marker")),
        };
        let q = d.bytes()?;
        d.finish()?;
        let [tag, kind, m] = q else {
            return Err(IndexError::corrupt("quantizer record is not three bytes"));
        };
        let quantizer = Quantizer::from_tags(*tag, *kind, usize::from(*m))?;
        let params = QuantizedParams {
            quantizer,
            oversampling,
            train_threshold,
            train_size,
        };
        params
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        let n = store.len();
        let consistent = match &codec {
            None => codes.is_empty(),
            Some(c) => {
                c.quantizer() == quantizer && c.dim() == dim && codes.len() == n * c.code_size()
            }
        };
        if !consistent {
            return Err(IndexError::corrupt("quantized index sizes do not match"));
        }
        Ok(Self::from_inner(
            params,
            trainer,
            dim,
            Inner {
                store,
                codec,
                codes,
                trained_at,
            },
        ))
    }
}
