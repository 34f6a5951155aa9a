//! SimpleLSH and norm-ranging LSH for maximum inner product search (Neyshabur & Srebro 2015;
//! Yan et al., NeurIPS 2018; `PAPERS.md` §4–§5).
//!
//! Why ranges. SimpleLSH scales every item by the *global* maximum norm U so that
//! P(x) = [x/U ; √(1 − ‖x‖²/U²)] lies on the unit sphere, then hashes it with sign random
//! projections (SRP). With long-tailed norms most items shrink to tiny norms, their last
//! coordinate dominates, and their codes say little about direction. Range-LSH sorts items by
//! norm into `m` equal-count ranges and scales each by its own maximum U_j, so every range
//! keeps its codes informative.
//!
//! Structure. One set of SRP hyperplanes shared by all ranges (the query is hashed once), and
//! one table keyed by (code, range). A query Q(q) = [q/‖q‖ ; 0] is hashed; every non-empty
//! bucket is scored by U_j·cos(π(1 − p′)) with p′ = a + (1 − a)·l/L, where l is the number
//! of bits the bucket's code shares with the query's out of L and `a` the authors' shift;
//! buckets are probed best first until `T` items are collected, and those are re-ranked by
//! exact inner product. Because a score depends only on (l, j), the probe order of the
//! (L + 1)·m possible pairs is computed once per partition and a query counting-sorts its
//! buckets into it: O(buckets) per query, no comparison sort.
//!
//! Updates. Ranges are drawn from the norms present when the index is (re)partitioned; later
//! items go to the range whose norm interval holds them. A norm above every range's U, or the
//! item count doubling since the last partition, re-partitions and re-hashes everything
//! (O(n) each time: amortised O(1) per item, and for items arriving in random order a new
//! maximum norm is expected only O(log n) times).
//!
//! With `ranges = 1` the same code is SimpleLSH, the baseline.

pub mod params;

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

pub use params::LshParams;

use crate::distance::simd::dot;
use crate::distance::Metric;
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::store::{HoldsStore, Opening, Placement, StoreRead, VectorStore};
use crate::sync::ReadMostly;
use crate::topk::TopK;
use crate::{
    IndexError, IndexKind, Neighbor, Result, SearchParams, SearchStats, Slot, SlotFilter,
    VectorIndex,
};

/// A SimpleLSH or Range-LSH index; see the module docs.
pub struct RangeLsh {
    kind: IndexKind,
    params: LshParams,
    /// The vectors' dimension, outside the lock: hashing needs it.
    dim: usize,
    /// `hash_bits` hyperplanes of `dim + 1` coordinates, row-major.
    planes: Vec<f32>,
    inner: ReadMostly<Inner>,
}

/// Items sharing a code within one range.
struct Bucket {
    code: u64,
    range: u16,
    items: Vec<Slot>,
}

struct Inner {
    store: VectorStore,
    norms: Vec<f32>,
    /// Upper norm bound of each range, ascending; range j's U_j is `bounds[j]`.
    bounds: Vec<f32>,
    /// Item count at the last partition; doubling it re-partitions.
    partitioned_at: usize,
    buckets: Vec<Bucket>,
    lookup: HashMap<(u64, u16), u32>,
    /// Probe position of each (range, matching bits) pair: `rank[j·(L + 1) + l]`.
    rank: Vec<u32>,
}

impl RangeLsh {
    /// An empty index; `ranges = 1` makes it SimpleLSH ([`IndexKind::SimpleLsh`]).
    pub fn new(params: LshParams, dim: usize) -> Result<Self> {
        params.validate()?;
        if dim == 0 {
            return Err(IndexError::InvalidParams(
                "dimension must be at least 1".into(),
            ));
        }
        let mut rng = StdRng::seed_from_u64(params.seed);
        let planes = (0..params.hash_bits() as usize * (dim + 1))
            .map(|_| StandardNormal.sample(&mut rng))
            .collect();
        Ok(Self::from_parts(
            params,
            dim,
            planes,
            Inner::empty(params.ranges, VectorStore::new(Metric::InnerProduct, dim)),
        ))
    }

    fn from_parts(params: LshParams, dim: usize, planes: Vec<f32>, inner: Inner) -> Self {
        Self {
            kind: if params.ranges == 1 {
                IndexKind::SimpleLsh
            } else {
                IndexKind::RangeLsh
            },
            params,
            dim,
            planes,
            inner: ReadMostly::new(inner),
        }
    }

    /// The parameters the index was built with.
    pub fn params(&self) -> &LshParams {
        &self.params
    }

    /// Builds an index over `vectors` in one call.
    pub fn build(params: LshParams, dim: usize, vectors: &[f32]) -> Result<Self> {
        let index = Self::new(params, dim)?;
        if !vectors.is_empty() {
            index.add(vectors)?;
        }
        Ok(index)
    }

    fn planes(&self) -> std::slice::ChunksExact<'_, f32> {
        self.planes.chunks_exact(self.dim + 1)
    }

    /// SRP code of P(x) = [x/U ; √(1 − ‖x‖²/U²)].
    fn hash_item(&self, x: &[f32], norm: f32, u: f32) -> u64 {
        let u = u.max(f32::MIN_POSITIVE);
        let tail = (1.0 - (norm / u).powi(2)).max(0.0).sqrt();
        self.planes().enumerate().fold(0u64, |code, (b, plane)| {
            let s = dot(&plane[..self.dim], x) / u + plane[self.dim] * tail;
            code | (u64::from(s >= 0.0) << b)
        })
    }

    /// SRP code of Q(q) = [q/‖q‖ ; 0]: the sign does not depend on ‖q‖.
    fn hash_query(&self, q: &[f32]) -> u64 {
        self.planes().enumerate().fold(0u64, |code, (b, plane)| {
            code | (u64::from(dot(&plane[..self.dim], q) >= 0.0) << b)
        })
    }

    /// Draws ranges from the current norms and re-hashes every item.
    fn partition(&self, inner: &mut Inner) {
        let n = inner.norms.len();
        let m = self.params.ranges;
        let mut sorted = inner.norms.clone();
        sorted.sort_unstable_by(f32::total_cmp);
        let mut bound = 0.0f32;
        inner.bounds = (0..m)
            .map(|j| {
                let end = (j + 1) * n / m;
                if end > j * n / m {
                    bound = sorted[end - 1];
                }
                bound
            })
            .collect();
        inner.partitioned_at = n;
        inner.buckets.clear();
        inner.lookup.clear();
        for slot in 0..n as Slot {
            self.insert(inner, slot);
        }
        inner.rank = self.probe_ranks(&inner.bounds);
    }

    /// Hashes `slot` into the bucket of its range. Its norm must not exceed the last bound.
    fn insert(&self, inner: &mut Inner, slot: Slot) {
        let norm = inner.norms[slot as usize];
        let range = inner.bounds.partition_point(|&b| b < norm);
        debug_assert!(range < inner.bounds.len(), "norm above every range");
        let range = range.min(inner.bounds.len() - 1);
        let x = inner.store.row(slot);
        let code = self.hash_item(x, norm, inner.bounds[range]);
        let key = (code, range as u16);
        let at = match inner.lookup.get(&key) {
            Some(&at) => at as usize,
            None => {
                inner.lookup.insert(key, inner.buckets.len() as u32);
                inner.buckets.push(Bucket {
                    code,
                    range: range as u16,
                    items: Vec::new(),
                });
                inner.buckets.len() - 1
            }
        };
        inner.buckets[at].items.push(slot);
    }

    /// Probe order of every (range j, matching bits l) pair by U_j·cos(π(1 − p′)), best first.
    fn probe_ranks(&self, bounds: &[f32]) -> Vec<u32> {
        let bits = self.params.hash_bits() as usize;
        let a = f64::from(self.params.shift);
        let mut pairs: Vec<(f64, usize, usize)> = bounds
            .iter()
            .enumerate()
            .flat_map(|(j, &u)| {
                (0..=bits).map(move |l| {
                    let p = a + (1.0 - a) * l as f64 / bits as f64;
                    (
                        f64::from(u) * (std::f64::consts::PI * (1.0 - p)).cos(),
                        j,
                        l,
                    )
                })
            })
            .collect();
        // Best score first; ties to more matching bits, then to the larger range.
        pairs.sort_by(|x, y| y.0.total_cmp(&x.0).then(y.2.cmp(&x.2)).then(y.1.cmp(&x.1)));
        let mut rank = vec![0u32; bounds.len() * (bits + 1)];
        for (position, &(_, j, l)) in pairs.iter().enumerate() {
            rank[j * (bits + 1) + l] = position as u32;
        }
        rank
    }

    /// Bucket numbers in probe order for `query`: a counting sort by the precomputed rank of
    /// each bucket's (range, matching bits) pair.
    fn probe_order(&self, inner: &Inner, query: &[f32]) -> Vec<u32> {
        let qcode = self.hash_query(query);
        let bits = self.params.hash_bits();
        let stride = bits as usize + 1;
        let mut counts = vec![0u32; inner.rank.len() + 1];
        let ranks: Vec<u32> = inner
            .buckets
            .iter()
            .map(|b| {
                let l = bits - (b.code ^ qcode).count_ones();
                let r = inner.rank[b.range as usize * stride + l as usize];
                counts[r as usize + 1] += 1;
                r
            })
            .collect();
        for i in 1..counts.len() {
            counts[i] += counts[i - 1];
        }
        let mut order = vec![0u32; inner.buckets.len()];
        for (b, &r) in ranks.iter().enumerate() {
            order[counts[r as usize] as usize] = b as u32;
            counts[r as usize] += 1;
        }
        order
    }
}

impl Inner {
    /// No buckets yet over `store`'s rows.
    fn empty(ranges: usize, store: VectorStore) -> Self {
        Self {
            store,
            norms: Vec::new(),
            bounds: vec![0.0; ranges],
            partitioned_at: 0,
            buckets: Vec::new(),
            lookup: HashMap::new(),
            rank: Vec::new(),
        }
    }
}

fn norm(x: &[f32]) -> f32 {
    dot(x, x).max(0.0).sqrt()
}

impl HoldsStore for Inner {
    fn store(&self) -> &VectorStore {
        &self.store
    }
}

impl VectorIndex for RangeLsh {
    fn kind(&self) -> IndexKind {
        self.kind
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
        // `ef` is the probe budget T: items re-ranked exactly (at least k).
        let budget = params.ef.unwrap_or(self.params.probe_items).max(k) as u64;
        let mut top = TopK::new(k);
        let mut scorer = inner.store.scorer(&query, filter);
        'probe: for b in self.probe_order(&inner, &query) {
            for &slot in &inner.buckets[b as usize].items {
                if !scorer.accepts(slot) {
                    continue;
                }
                top.offer(Neighbor::new(slot, scorer.key(slot)));
                if scorer.computed() >= budget {
                    break 'probe;
                }
            }
        }
        Ok((top.into_sorted(), scorer.stats()))
    }
    fn add(&self, vectors: &[f32]) -> Result<Slot> {
        let mut inner = self.inner.write();
        let first = inner.store.append(vectors)? as usize;
        inner.norms.extend(vectors.chunks_exact(self.dim).map(norm));
        let n = inner.store.len();
        let top_bound = inner.bounds.last().copied().unwrap_or(0.0);
        let overflow = inner.norms[first..].iter().any(|&x| x > top_bound);
        if overflow || n >= 2 * inner.partitioned_at.max(1) {
            self.partition(&mut inner);
        } else {
            for slot in first..n {
                self.insert(&mut inner, slot as Slot);
            }
        }
        Ok(first as Slot)
    }
    fn write_to(&self, out: &mut dyn Sink) {
        let inner = self.inner.read();
        let p = self.params;
        let mut e = Encoder::new(out);
        e.u32(p.bits);
        e.u64(p.ranges as u64);
        e.u32(p.shift.to_bits());
        e.u64(p.probe_items as u64);
        e.u64(p.seed);
        e.u64(self.dim as u64);
        e.f32s(&self.planes);
        inner.store.write(&mut e);
        e.f32s(&inner.bounds);
        e.u64(inner.partitioned_at as u64);
    }
    fn memory_bytes(&self) -> usize {
        let inner = self.inner.read();
        let items: usize = inner.buckets.iter().map(|b| b.items.capacity() * 4).sum();
        self.planes.len() * 4
            + inner.store.memory_bytes()
            + inner.norms.capacity() * 4
            + inner.buckets.capacity() * std::mem::size_of::<Bucket>()
            + items
            + inner.lookup.capacity() * (std::mem::size_of::<((u64, u16), u32)>() + 1)
            + inner.rank.capacity() * 4
    }
}

impl RangeLsh {
    /// Reads what [`VectorIndex::write_to`] wrote. Buckets are rebuilt from the stored ranges,
    /// which reproduces the table exactly (items are hashed in slot order either way).
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let params = LshParams {
            bits: d.u32()?,
            ranges: d.usize()?,
            shift: f32::from_bits(d.u32()?),
            probe_items: d.usize()?,
            seed: d.u64()?,
        };
        params
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        let dim = d.usize()?;
        let planes = d.f32s()?;
        let store = VectorStore::read(&mut d, Metric::InnerProduct, dim, &Placement::Memory)?;
        let bounds = d.f32s()?;
        let partitioned_at = d.usize()?;
        d.finish()?;
        if planes.len() != params.hash_bits() as usize * (dim + 1)
            || bounds.len() != params.ranges
            || bounds.windows(2).any(|w| w[0] > w[1])
        {
            return Err(IndexError::corrupt(
                "LSH arrays do not match their parameters",
            ));
        }
        let norms: Vec<f32> = store.rows().map(norm).collect();
        let top = bounds.last().copied().unwrap_or(0.0);
        if norms.iter().any(|&x| x.is_nan() || x > top) || partitioned_at > norms.len() {
            return Err(IndexError::corrupt(
                "LSH ranges do not cover the stored items",
            ));
        }
        let index = Self::from_parts(params, dim, planes, Inner::empty(params.ranges, store));
        {
            let mut inner = index.inner.write();
            inner.rank = index.probe_ranks(&bounds);
            inner.norms = norms;
            inner.bounds = bounds;
            inner.partitioned_at = partitioned_at;
            for slot in 0..inner.norms.len() as Slot {
                index.insert(&mut inner, slot);
            }
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests;
