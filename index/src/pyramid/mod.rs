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
use crate::persist::codec::{Decoder, Encoder};
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
}

impl PyramidParams {
    /// Defaults for `partitions` parts: 32 centres per part, queries looking up 8 centres, 3%
    /// imbalance, the top 5% of norms everywhere for `Dot`.
    pub fn new(partitions: usize) -> Self {
        Self {
            partitions,
            centres: 32 * partitions,
            branching: 8,
            imbalance: 0.03,
            replicate_top_norms: 0.05,
            seed: 0x5eed,
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
        Ok(())
    }
}

/// Where an item is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// In one partition: the one owning its nearest centre.
    One(u32),
    /// In every partition (a large-norm item of a `Dot` collection).
    All,
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
}

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
        if dim == 0 || centres.len() != params.centres * dim || sample.len() % dim != 0 {
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
        Ok(Self {
            params,
            metric,
            dim,
            version,
            meta,
            centre_part: split.part,
            hot_norm,
            loads: split.loads,
            cut: split.cut,
        })
    }

    /// Where `vector` is stored.
    pub fn assign(&self, vector: &[f32]) -> Result<Assignment> {
        if norm(vector) >= self.hot_norm {
            return Ok(Assignment::All);
        }
        let centre = nearest(&self.meta, vector)?;
        Ok(Assignment::One(self.centre_part[centre as usize]))
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

    /// Serialises the meta-index (the caller wraps it in a checksummed file, as for indexes).
    pub fn write_to(&self, out: &mut Vec<u8>) {
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
        if format != FORMAT {
            return Err(IndexError::corrupt(format!(
                "meta_index format {format}, this build reads {FORMAT}"
            )));
        }
        let version = d.u64()?;
        let metric =
            Metric::from_tag(d.u8()?).ok_or_else(|| IndexError::corrupt("unknown metric tag"))?;
        let dim = d.usize()?;
        let params = PyramidParams {
            partitions: d.usize()?,
            centres: d.usize()?,
            branching: d.usize()?,
            imbalance: f64::from_bits(d.u64()?),
            replicate_top_norms: f64::from_bits(d.u64()?),
            seed: d.u64()?,
        };
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
        })
    }
}

/// Version of [`MetaIndex::write_to`]'s layout.
const FORMAT: u64 = 1;

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
