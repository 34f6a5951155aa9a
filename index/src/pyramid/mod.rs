//! Pyramid's content routing (Deng et al., IEEE BigData 2019): split a collection into
//! partitions of similar items and send each query only to the partitions that can hold its
//! answers, instead of broadcasting it to every shard as hash sharding must.
//!
//! Build ([`MetaIndex::train`]): k-means on a sample gives `centres` centres (FAISS trains them,
//! through a [`CentroidTrainer`] the caller hands in); a small HNSW, the *meta-HNSW*, is
//! built over them; its bottom layer is split into `partitions` balanced parts with a small
//! edge cut ([`balance`]), each centre weighted by the sample items nearest to it. Neighbouring
//! centres then share a part, so the few centres near a query tend to fall in few parts.
//!
//! Items ([`MetaIndex::assign`]) go to the part of their nearest centre. Queries
//! ([`MetaIndex::route`]) take the parts of their top-`branching` centres, best first.
//!
//! Two measures keep the partitions a query visits few (issue #22):
//!
//! - **Spilled assignment.** An item near a part boundary has neighbours on both sides, so a
//!   query near it would have to visit both parts. The `spill` share of items closest to a
//!   boundary (smallest ratio of the distance to the nearest centre of another part over the
//!   distance to their own centre, measured on the training sample) is stored in that second
//!   part too ([`Assignment::Two`]), as SOAR does for IVF lists: memory grows by at most
//!   `spill`, and queries find boundary items from either side.
//! - **Branching tuned per collection** ([`MetaIndex::tune_branching`]): the default number of
//!   centres a query looks up is the fewest that keep routed recall@10 — the share of a
//!   query's exact top-10 stored in a visited part — at `route_recall` for queries held apart
//!   from the training sample. A fixed default over-visits on easy data and under-visits on
//!   embeddings whose neighbours are spread.
//!
//! Inner product is not a metric, and routing by it would send most queries to the part
//! holding the largest norms, which then becomes every query's straggler (the paper's §IV-D).
//! `Dot` collections therefore route by *direction*: spherical k-means and a cosine meta-HNSW.
//! Direction alone would lose the large-norm items that win inner products from far away, so
//! the largest norms — the sample's top `replicate_top_norms` share, 5% by default — are placed
//! in every part ([`Assignment::All`]). ip-NSW+'s norm-bias measurement says why that is enough:
//! 98% of movielens-mips' top-10 answers are among its 5% largest norms (BENCHMARKS.md).
//!
//! A meta-index is immutable once built; a retrained meta-index is a new value with a higher
//! `version`, which is how a routing table is versioned.

pub mod balance;

use serde::{Deserialize, Serialize};

use crate::distance::{norm, normalize, Metric};
use crate::hnsw::{Hnsw, HnswParams};
use crate::persist::codec::{Decoder, Encoder, Sink};
use crate::{IndexError, Result, SearchParams, SearchStats, VectorIndex};

/// Trains k-means centres; implemented with FAISS by `cairn-faiss`.
pub trait CentroidTrainer: Send + Sync {
    /// `k` centres of the rows of `data` (`dim` floats each), row-major. `spherical`: unit
    /// centres, items assigned by inner product (k-means on directions).
    fn centroids(&self, dim: usize, data: &[f32], k: usize, spherical: bool) -> Result<Vec<f32>>;
}

/// How a collection is partitioned and routed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PyramidParams {
    /// Partitions (Pyramid's w).
    pub partitions: usize,
    /// k-means centres (Pyramid's m): the routing resolution. More centres route more
    /// precisely and balance better; the meta-HNSW stays tiny either way.
    pub centres: usize,
    /// Centres a query looks up by default (Pyramid's branching factor K).
    pub branching: usize,
    /// Allowed load imbalance of the partitioning (0.03: the heaviest part at most 3% above
    /// the mean, when centre weights allow it).
    pub imbalance: f64,
    /// `Dot` only: the share of largest-norm items placed in every partition.
    pub replicate_top_norms: f64,
    /// Seed of the partitioner and the meta-HNSW.
    pub seed: u64,
    /// Share of items also stored in a second partition, those nearest a partition boundary
    /// (0: none; absent in settings written before spilling existed).
    #[serde(default)]
    pub spill: f64,
    /// Routed recall@10 the default `branching` is tuned for at training (0: `branching` as
    /// given; absent in settings written before tuning existed).
    #[serde(default)]
    pub route_recall: f64,
}

impl PyramidParams {
    /// Defaults for `partitions` parts: 32 centres per part, 3% imbalance, the top 5% of norms
    /// everywhere for `Dot`, [`DEFAULT_SPILL`] of items in a second part, and `branching`
    /// tuned at training for routed recall@10 0.95 (8 centres until then).
    pub fn new(partitions: usize) -> Self {
        Self {
            partitions,
            centres: 32 * partitions,
            branching: 8,
            imbalance: 0.03,
            replicate_top_norms: 0.05,
            seed: 0x5eed,
            spill: DEFAULT_SPILL,
            route_recall: 0.95,
        }
    }

    /// Rejects parameters no meta-index can be built with.
    pub fn validate(&self) -> Result<()> {
        let fail = |m: String| Err(IndexError::InvalidParams(m));
        if !(1..=1024).contains(&self.partitions) {
            return fail(format!(
                "partitions must be between 1 and 1024, got {}",
                self.partitions
            ));
        }
        if self.centres < self.partitions || self.centres > 65_536 {
            return fail(format!(
                "centres must be between partitions ({}) and 65536, got {}",
                self.partitions, self.centres
            ));
        }
        if self.branching == 0 {
            return fail("branching must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.imbalance) {
            return fail(format!(
                "imbalance must be between 0 and 1, got {}",
                self.imbalance
            ));
        }
        if !(0.0..0.5).contains(&self.replicate_top_norms) {
            return fail(format!(
                "replicate_top_norms must be in [0, 0.5), got {}",
                self.replicate_top_norms
            ));
        }
        if !(0.0..=1.0).contains(&self.spill) {
            return fail(format!("spill must be between 0 and 1, got {}", self.spill));
        }
        if !(0.0..1.0).contains(&self.route_recall) {
            return fail(format!(
                "route_recall must be in [0, 1), got {}",
                self.route_recall
            ));
        }
        Ok(())
    }
}

/// Share of items stored in a second partition by default: every item with another part among
/// its nearest centres, so up to twice the memory. Chosen from the routing study
/// (`index/faiss/tests/routing.rs`, BENCHMARKS.md): on 384-d sentence embeddings in 8 parts,
/// only full spilling reached routed recall@10 0.95 touching at most 35% of the parts reliably
/// (0.75 needed 31–38%, 0.5 41%, none 57%); collections that cannot pay the memory set a
/// smaller `spill`.
pub const DEFAULT_SPILL: f64 = 1.0;

/// Where an item is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// In one partition: the one owning its nearest centre.
    One(u32),
    /// In its own partition (first) and, being near a boundary, in the partition of its
    /// nearest centre across it (second).
    Two(u32, u32),
    /// In every partition (a large-norm item of a `Dot` collection).
    All,
}

impl Assignment {
    /// Whether the item is stored in partition `p`.
    pub fn includes(self, p: u32) -> bool {
        match self {
            Self::One(t) => t == p,
            Self::Two(a, b) => a == p || b == p,
            Self::All => true,
        }
    }

    /// The partition holding the item's first copy (every partition for `All`: `None`).
    pub fn home(self) -> Option<u32> {
        match self {
            Self::One(t) | Self::Two(t, _) => Some(t),
            Self::All => None,
        }
    }
}

/// What [`MetaIndex::tune_branching`] measured at one branching.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutePoint {
    /// Centres looked up.
    pub branching: usize,
    /// Share of the held-apart queries' top-10 (within the sample) stored in a visited part.
    pub recall: f64,
    /// Parts visited per query, on average.
    pub touched: f64,
}

/// The meta-HNSW and the centre → partition table; see the module docs.
pub struct MetaIndex {
    params: PyramidParams,
    metric: Metric,
    dim: usize,
    version: u64,
    meta: Hnsw,
    centre_part: Vec<u32>,
    /// Items at least this long go to every partition (`f32::INFINITY`: none do).
    hot_norm: f32,
    /// Sample items per partition when the meta-index was built (its balance).
    loads: Vec<f64>,
    /// Meta-HNSW bottom-layer edges between partitions.
    cut: usize,
    /// Items whose boundary ratio ([`MetaIndex::boundary`]) is at most this are spilled
    /// (0: none are).
    spill_ratio: f32,
}

/// Centres looked at to find an item's nearest centre in another part.
const SPILL_CANDIDATES: usize = 16;
/// Query results a branching is tuned for (recall@10).
const TUNE_K: usize = 10;
/// The branchings [`MetaIndex::tune_branching`] tries, in order.
const BRANCHING_LADDER: &[usize] = &[1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64];

/// The meta-HNSW's shape: tiny, so built generously.
fn meta_params(seed: u64) -> HnswParams {
    HnswParams {
        m: 16,
        ef_construction: 200,
        ef_search: 64,
        seed,
    }
}

/// The metric the meta-index compares directions or positions by.
fn routing_metric(metric: Metric) -> Metric {
    match metric {
        Metric::L2 => Metric::L2,
        Metric::Cosine | Metric::InnerProduct => Metric::Cosine,
    }
}

impl MetaIndex {
    /// Trains centres on `sample` (row-major, `dim` floats per row) with `trainer` and builds
    /// the meta-index; see [`MetaIndex::build`].
    pub fn train(
        params: PyramidParams,
        metric: Metric,
        dim: usize,
        sample: &[f32],
        trainer: &dyn CentroidTrainer,
        version: u64,
    ) -> Result<Self> {
        params.validate()?;
        let spherical = routing_metric(metric) == Metric::Cosine;
        let centres = if spherical {
            let mut unit = sample.to_vec();
            unit.chunks_exact_mut(dim.max(1)).for_each(normalize);
            trainer.centroids(dim, &unit, params.centres, true)?
        } else {
            trainer.centroids(dim, sample, params.centres, false)?
        };
        Self::build(params, metric, dim, sample, &centres, version)
    }

    /// Builds the meta-index from given `centres` (`params.centres` rows): meta-HNSW, centre
    /// weights from `sample`, balanced partition of the meta-HNSW's bottom layer.
    pub fn build(
        params: PyramidParams,
        metric: Metric,
        dim: usize,
        sample: &[f32],
        centres: &[f32],
        version: u64,
    ) -> Result<Self> {
        params.validate()?;
        if dim == 0 || centres.len() != params.centres * dim || !sample.len().is_multiple_of(dim) {
            return Err(IndexError::InvalidParams(format!(
                "meta_index needs {} centres of dimension {dim} and whole sample rows",
                params.centres
            )));
        }
        let rows = sample.len() / dim;
        if rows < params.centres {
            return Err(IndexError::InvalidParams(format!(
                "meta_index training needs at least as many sample items as centres ({}), got {rows}",
                params.centres
            )));
        }
        let route_metric = routing_metric(metric);
        let mut centres = centres.to_vec();
        if route_metric == Metric::Cosine {
            centres.chunks_exact_mut(dim).for_each(normalize);
        }
        let meta = Hnsw::build(meta_params(params.seed), route_metric, dim, &centres)?;
        let adjacency = symmetric(meta.layer0_adjacency());
        let mut weights = vec![0.0; params.centres];
        for item in sample.chunks_exact(dim) {
            weights[nearest(&meta, item)? as usize] += 1.0;
        }
        let split = balance::partition(
            &adjacency,
            &weights,
            params.partitions,
            params.imbalance,
            8,
            params.seed,
        );
        let hot_norm = if metric == Metric::InnerProduct && params.replicate_top_norms > 0.0 {
            let mut norms: Vec<f32> = sample.chunks_exact(dim).map(norm).collect();
            norms.sort_by(|a, b| b.total_cmp(a));
            let hot = ((rows as f64 * params.replicate_top_norms).ceil() as usize).clamp(1, rows);
            norms[hot - 1]
        } else {
            f32::INFINITY
        };
        let mut built = Self {
            params,
            metric,
            dim,
            version,
            meta,
            centre_part: split.part,
            hot_norm,
            loads: split.loads,
            cut: split.cut,
            spill_ratio: 0.0,
        };
        built.spill_ratio = built.spill_threshold(sample)?;
        Ok(built)
    }

    /// The boundary ratio under which the `spill` share of the sample's items fall (0 when
    /// nothing is to spill).
    fn spill_threshold(&self, sample: &[f32]) -> Result<f32> {
        if self.params.spill <= 0.0 || self.params.partitions < 2 {
            return Ok(0.0);
        }
        let mut ratios = Vec::with_capacity(sample.len() / self.dim);
        for item in sample.chunks_exact(self.dim) {
            if norm(item) >= self.hot_norm {
                continue;
            }
            // Items with no other part among their candidate centres never spill: they count
            // in the share, as they are stored once.
            let ratio = self.boundary(item)?.1.map_or(f32::INFINITY, |(_, r)| r);
            ratios.push(ratio);
        }
        if ratios.is_empty() {
            return Ok(0.0);
        }
        ratios.sort_by(f32::total_cmp);
        let take = (ratios.len() as f64 * self.params.spill).floor() as usize;
        Ok(match take {
            0 => 0.0,
            n => ratios[n - 1].min(f32::MAX),
        })
    }

    /// `vector`'s own part, and the nearest other part with the ratio of the distance to its
    /// nearest centre over the distance to the item's own centre (≥ 1; `None` when no
    /// candidate centre lies in another part or the item sits on its centre).
    fn boundary(&self, vector: &[f32]) -> Result<(u32, Option<(u32, f32)>)> {
        let distance = self.distance_of_key();
        let (hits, _) = self.meta.search(
            vector,
            SPILL_CANDIDATES.min(self.params.centres),
            &SearchParams::default(),
            None,
        )?;
        let first = hits
            .first()
            .ok_or_else(|| IndexError::InvalidParams("the meta_index has no centres".into()))?;
        let home = self.centre_part[first.slot as usize];
        let own = distance(first.key);
        let across = hits
            .iter()
            .find(|h| self.centre_part[h.slot as usize] != home)
            .filter(|_| own > 0.0)
            .map(|h| (self.centre_part[h.slot as usize], distance(h.key) / own));
        Ok((home, across))
    }

    /// Where `vector` is stored.
    pub fn assign(&self, vector: &[f32]) -> Result<Assignment> {
        if norm(vector) >= self.hot_norm {
            return Ok(Assignment::All);
        }
        if self.spill_ratio <= 0.0 {
            let centre = nearest(&self.meta, vector)?;
            return Ok(Assignment::One(self.centre_part[centre as usize]));
        }
        Ok(match self.boundary(vector)? {
            (home, Some((other, ratio))) if ratio <= self.spill_ratio => {
                Assignment::Two(home, other)
            }
            (home, _) => Assignment::One(home),
        })
    }

    /// Sets the default `branching` to the fewest centres whose routing keeps recall@10 at
    /// `target` for `queries` (held apart from `sample`): recall counts the share of each
    /// query's exact top-10 *within `sample`* stored in a visited part. The sample's neighbours
    /// are farther apart than the whole collection's, so this errs towards visiting more.
    /// Returns the measured ladder, up to the branching chosen (all of it when none reaches
    /// `target`: the largest is kept).
    pub fn tune_branching(
        &mut self,
        sample: &[f32],
        queries: &[f32],
        target: f64,
    ) -> Result<Vec<RoutePoint>> {
        let dim = self.dim;
        if !sample.len().is_multiple_of(dim)
            || !queries.len().is_multiple_of(dim)
            || sample.len() < TUNE_K * dim
        {
            return Err(IndexError::InvalidParams(format!(
                "tuning needs whole rows of dimension {dim} and at least {TUNE_K} sample items"
            )));
        }
        let exact = crate::flat::FlatIndex::new(self.metric, dim);
        exact.add(sample)?;
        let stored: Vec<Assignment> = sample
            .chunks_exact(dim)
            .map(|item| self.assign(item))
            .collect::<Result<_>>()?;
        let truth: Vec<Vec<Assignment>> = queries
            .chunks_exact(dim)
            .map(|q| {
                let (hits, _) = exact.search(q, TUNE_K, &SearchParams::default(), None)?;
                Ok(hits.iter().map(|h| stored[h.slot as usize]).collect())
            })
            .collect::<Result<_>>()?;
        let mut ladder = Vec::new();
        let centres = self.params.centres;
        for &branching in BRANCHING_LADDER.iter().filter(|&&k| k <= centres) {
            let (mut found, mut asked, mut touched) = (0usize, 0usize, 0usize);
            for (q, answers) in queries.chunks_exact(dim).zip(&truth) {
                let (parts, _) = self.route(q, Some(branching), None)?;
                touched += parts.len();
                asked += answers.len();
                found += answers
                    .iter()
                    .filter(|a| parts.iter().any(|&p| a.includes(p)))
                    .count();
            }
            let point = RoutePoint {
                branching,
                recall: found as f64 / asked.max(1) as f64,
                touched: touched as f64 / truth.len().max(1) as f64,
            };
            ladder.push(point);
            self.params.branching = branching;
            if point.recall >= target {
                break;
            }
        }
        Ok(ladder)
    }

    /// The partitions a query visits, best first: those owning its top `branching` centres
    /// (the default when `None`), at most `max_partitions` of them.
    pub fn route(
        &self,
        query: &[f32],
        branching: Option<usize>,
        max_partitions: Option<usize>,
    ) -> Result<(Vec<u32>, SearchStats)> {
        let k = branching.unwrap_or(self.params.branching).max(1);
        let ef = k.max(self.meta.params().ef_search);
        let (centres, stats) = self.meta.search(
            query,
            k,
            &SearchParams {
                ef: Some(ef),
                ..SearchParams::default()
            },
            None,
        )?;
        let cap = max_partitions.unwrap_or(usize::MAX).max(1);
        let mut parts = Vec::new();
        for c in centres {
            let p = self.centre_part[c.slot as usize];
            if !parts.contains(&p) {
                parts.push(p);
                if parts.len() == cap {
                    break;
                }
            }
        }
        Ok((parts, stats))
    }

    /// Turns a meta-HNSW key into a distance ≥ 0: squared L2, or 1 − cosine.
    fn distance_of_key(&self) -> impl Fn(f32) -> f32 {
        let route_metric = routing_metric(self.metric);
        move |key: f32| match route_metric {
            Metric::Cosine => (1.0 + key).max(0.0),
            Metric::L2 | Metric::InnerProduct => key.max(0.0),
        }
    }

    /// Number of partitions.
    pub fn partitions(&self) -> usize {
        self.params.partitions
    }

    /// The parameters it was built with.
    pub fn params(&self) -> &PyramidParams {
        &self.params
    }

    /// The collection metric it routes for.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Routing-table version: a rebuilt meta-index has a higher one.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Sample items per partition at build time.
    pub fn loads(&self) -> &[f64] {
        &self.loads
    }

    /// Meta-HNSW bottom-layer edges cut by the partitioning.
    pub fn cut(&self) -> usize {
        self.cut
    }

    /// Norm from which `Dot` items are stored in every partition (`None`: no such items).
    pub fn hot_norm(&self) -> Option<f32> {
        self.hot_norm.is_finite().then_some(self.hot_norm)
    }

    /// Boundary ratio up to which items are stored in a second part (`None`: none are).
    pub fn spill_ratio(&self) -> Option<f32> {
        (self.spill_ratio > 0.0).then_some(self.spill_ratio)
    }

    /// Serialises the meta-index (the caller wraps it in a checksummed file, as for indexes).
    pub fn write_to(&self, out: &mut dyn Sink) {
        let mut meta = Vec::new();
        self.meta.write_to(&mut meta);
        let mut e = Encoder::new(out);
        let p = &self.params;
        e.u64(FORMAT);
        e.u64(self.version);
        e.u8(self.metric.tag());
        e.u64(self.dim as u64);
        e.u64(p.partitions as u64);
        e.u64(p.centres as u64);
        e.u64(p.branching as u64);
        e.u64(p.imbalance.to_bits());
        e.u64(p.replicate_top_norms.to_bits());
        e.u64(p.seed);
        e.u64(p.spill.to_bits());
        e.u64(p.route_recall.to_bits());
        e.u32(self.spill_ratio.to_bits());
        e.u32(self.hot_norm.to_bits());
        e.u32s(self.centre_part.iter().copied());
        e.u32s(self.loads.iter().map(|&l| l as u32));
        e.u64(self.cut as u64);
        e.bytes(&meta);
    }

    /// Reads what [`MetaIndex::write_to`] wrote.
    pub fn read_from(bytes: &[u8]) -> Result<Self> {
        let mut d = Decoder::new(bytes);
        let format = d.u64()?;
        if !(1..=FORMAT).contains(&format) {
            return Err(IndexError::corrupt(format!(
                "meta_index format {format}, this build reads 1 to {FORMAT}"
            )));
        }
        let version = d.u64()?;
        let metric =
            Metric::from_tag(d.u8()?).ok_or_else(|| IndexError::corrupt("unknown metric tag"))?;
        let dim = d.usize()?;
        let mut params = PyramidParams {
            partitions: d.usize()?,
            centres: d.usize()?,
            branching: d.usize()?,
            imbalance: f64::from_bits(d.u64()?),
            replicate_top_norms: f64::from_bits(d.u64()?),
            seed: d.u64()?,
            spill: 0.0,
            route_recall: 0.0,
        };
        // Format 1 predates spilling and tuning: nothing spilled, branching as given.
        let mut spill_ratio = 0.0;
        if format >= 2 {
            params.spill = f64::from_bits(d.u64()?);
            params.route_recall = f64::from_bits(d.u64()?);
            spill_ratio = f32::from_bits(d.u32()?);
        }
        let hot_norm = f32::from_bits(d.u32()?);
        let centre_part = d.u32s_map(|p| p)?;
        let loads = d.u32s_map(f64::from)?;
        let cut = d.usize()?;
        let meta = Hnsw::read_from(d.bytes()?)?;
        d.finish()?;
        params
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        let consistent = meta.len() == params.centres
            && meta.dim() == dim
            && centre_part.len() == params.centres
            && loads.len() == params.partitions
            && centre_part
                .iter()
                .all(|&p| (p as usize) < params.partitions);
        if !consistent {
            return Err(IndexError::corrupt("meta_index sizes do not match"));
        }
        Ok(Self {
            params,
            metric,
            dim,
            version,
            meta,
            centre_part,
            hot_norm,
            loads,
            cut,
            spill_ratio,
        })
    }
}

/// Version of [`MetaIndex::write_to`]'s layout: 2 added spilling and the tuning target.
const FORMAT: u64 = 2;

/// The centre nearest to `vector` in the meta-HNSW.
fn nearest(meta: &Hnsw, vector: &[f32]) -> Result<u32> {
    let (hits, _) = meta.search(vector, 1, &SearchParams::default(), None)?;
    hits.first()
        .map(|n| n.slot)
        .ok_or_else(|| IndexError::InvalidParams("the meta_index has no centres".into()))
}

/// The undirected graph of directed HNSW links: `u — v` when either links the other.
fn symmetric(directed: Vec<Vec<u32>>) -> Vec<Vec<u32>> {
    let mut out: Vec<Vec<u32>> = vec![Vec::new(); directed.len()];
    for (v, links) in directed.iter().enumerate() {
        for &u in links {
            if u as usize != v {
                out[v].push(u);
                out[u as usize].push(v as u32);
            }
        }
    }
    for links in &mut out {
        links.sort_unstable();
        links.dedup();
    }
    out
}

#[cfg(test)]
mod tests;
