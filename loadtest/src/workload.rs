//! What a measurement runs on: base vectors, queries and their exact ground truth, from a
//! dataset folder or a seeded synthetic generator.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{bail, Context};
use cairn_client::api::Distance;
use cairn_index::dataset::{
    clustered_gaussian, clustered_with_structure, ground_truth, load_dataset, long_tailed_norms,
    ClusterSpec, Vectors,
};
use cairn_index::Metric;

/// Where the vectors come from.
///
/// - a folder with `base.fvecs|bvecs`, `query.fvecs|bvecs` and `groundtruth.ivecs` (the
///   `../shared/data` layout);
/// - `clustered:N:DIM[:SEED]`: Gaussian clusters (one cluster per 1,000 points), queries drawn
///   from the same generator under another seed;
/// - `longtail:N:DIM[:SEED]`: uniform directions with log-normal norms (σ = 0.6), the shape
///   of recommendation embeddings that MIPS indexes must handle;
/// - `hard:N:DIM[:SEED]`: the benchmarks' hard set (the index benches' `synthetic200k` at
///   N = 200,000, DIM = 128, seed 42): 100 overlapping clusters, each confined to a random
///   24-dimensional subspace, so that recall@10 = 0.95 needs ef ≈ 64 (FAISS HNSW, M = 16:
///   ef 49–57).
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// A dataset folder.
    Folder(PathBuf),
    /// Seeded clustered Gaussians.
    Clustered {
        /// Base vectors.
        n: usize,
        /// Dimension.
        dim: usize,
        /// Generator seed.
        seed: u64,
    },
    /// The seeded hard set.
    Hard {
        /// Base vectors.
        n: usize,
        /// Dimension.
        dim: usize,
        /// Generator seed.
        seed: u64,
    },
    /// Seeded long-tailed norms.
    LongTail {
        /// Base vectors.
        n: usize,
        /// Dimension.
        dim: usize,
        /// Generator seed.
        seed: u64,
    },
}

impl FromStr for Source {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let synthetic = |parts: &[&str]| -> Result<(usize, usize, u64), String> {
            let usage = format!("{s:?}: expected {}:N:DIM[:SEED]", parts[0]);
            if !(3..=4).contains(&parts.len()) {
                return Err(usage);
            }
            let n = parts[1].parse().map_err(|_| usage.clone())?;
            let dim = parts[2].parse().map_err(|_| usage.clone())?;
            let seed = match parts.get(3) {
                Some(seed) => seed.parse().map_err(|_| usage.clone())?,
                None => 42,
            };
            Ok((n, dim, seed))
        };
        match parts[0] {
            "clustered" => {
                synthetic(&parts).map(|(n, dim, seed)| Source::Clustered { n, dim, seed })
            }
            "longtail" => synthetic(&parts).map(|(n, dim, seed)| Source::LongTail { n, dim, seed }),
            "hard" => synthetic(&parts).map(|(n, dim, seed)| Source::Hard { n, dim, seed }),
            _ => Ok(Source::Folder(PathBuf::from(s))),
        }
    }
}

/// Base vectors, queries and exact ground truth (top-`k` ids per query, best first).
pub struct Workload {
    /// A short name for reports.
    pub name: String,
    /// Indexed vectors; point id i is row i.
    pub base: Vectors,
    /// Query vectors.
    pub queries: Vectors,
    /// Exact nearest base rows per query.
    pub truth: Vec<Vec<u32>>,
}

/// Queries generated for synthetic sets.
const SYNTHETIC_QUERIES: usize = 500;
/// Depth of computed ground truth.
const TRUTH_DEPTH: usize = 100;

impl Workload {
    /// Loads or generates the workload; synthetic ground truth is computed exactly with
    /// `distance`'s metric.
    pub fn load(
        source: &Source,
        distance: Distance,
        queries: Option<usize>,
    ) -> anyhow::Result<Self> {
        let mut workload = match source {
            Source::Folder(dir) => {
                let d = load_dataset(dir)
                    .with_context(|| format!("cannot read the dataset in {}", dir.display()))?;
                let name = dir.file_name().map_or_else(
                    || dir.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                Workload {
                    name,
                    base: d.base,
                    queries: d.queries,
                    truth: d.ground_truth,
                }
            }
            Source::Clustered { n, dim, seed } => {
                let spec = |n, seed| ClusterSpec {
                    n,
                    dim: *dim,
                    clusters: (n / 1_000).max(1),
                    spread: 0.25,
                    intrinsic_dim: None,
                    seed,
                };
                let base = clustered_with_structure(spec(*n, *seed), *seed);
                let queries =
                    clustered_with_structure(spec(SYNTHETIC_QUERIES, seed.wrapping_add(1)), *seed);
                synthetic(format!("clustered-{n}x{dim}"), base, queries, distance)
            }
            Source::Hard { n, dim, seed } => {
                let spec = ClusterSpec {
                    n: *n,
                    dim: *dim,
                    clusters: 100,
                    spread: 1.0,
                    intrinsic_dim: Some(24),
                    seed: *seed,
                };
                let base = clustered_gaussian(spec);
                // Seed 4242 for the default 42, as the index benches draw their queries.
                let queries = clustered_with_structure(
                    ClusterSpec {
                        n: SYNTHETIC_QUERIES,
                        seed: seed.wrapping_mul(101),
                        ..spec
                    },
                    *seed,
                );
                synthetic(format!("hard-{n}x{dim}"), base, queries, distance)
            }
            Source::LongTail { n, dim, seed } => {
                let base = long_tailed_norms(*n, *dim, 0.6, *seed);
                let queries = long_tailed_norms(SYNTHETIC_QUERIES, *dim, 0.6, seed.wrapping_add(1));
                synthetic(format!("longtail-{n}x{dim}"), base, queries, distance)
            }
        };
        if workload.queries.len() != workload.truth.len() {
            bail!(
                "{}: {} queries but {} ground-truth rows",
                workload.name,
                workload.queries.len(),
                workload.truth.len()
            );
        }
        if let Some(q) = queries {
            let q = q.min(workload.queries.len());
            workload.queries = workload.queries.truncated(q);
            workload.truth.truncate(q);
        }
        Ok(workload)
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.base.dim
    }
}

fn synthetic(name: String, base: Vectors, queries: Vectors, distance: Distance) -> Workload {
    let truth = ground_truth(&base, &queries, metric(distance), TRUTH_DEPTH);
    Workload {
        name,
        base,
        queries,
        truth,
    }
}

/// The index metric of a REST distance (what ground truth is computed with).
pub fn metric(distance: Distance) -> Metric {
    match distance {
        Distance::Euclid | Distance::Manhattan => Metric::L2,
        Distance::Cosine => Metric::Cosine,
        Distance::Dot => Metric::InnerProduct,
    }
}

/// Parses `Euclid`, `Cosine` or `Dot` (any case).
pub fn parse_distance(s: &str) -> Result<Distance, String> {
    match s.to_ascii_lowercase().as_str() {
        "euclid" | "l2" => Ok(Distance::Euclid),
        "cosine" => Ok(Distance::Cosine),
        "dot" | "ip" => Ok(Distance::Dot),
        _ => Err(format!("unknown distance {s:?}: use Euclid, Cosine or Dot")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(
            "clustered:1000:16".parse::<Source>().unwrap(),
            Source::Clustered {
                n: 1000,
                dim: 16,
                seed: 42
            }
        );
        assert_eq!(
            "longtail:10:4:7".parse::<Source>().unwrap(),
            Source::LongTail {
                n: 10,
                dim: 4,
                seed: 7
            }
        );
        assert_eq!(
            "hard:200000:128".parse::<Source>().unwrap(),
            Source::Hard {
                n: 200_000,
                dim: 128,
                seed: 42
            }
        );
        assert!("clustered:x:16".parse::<Source>().is_err());
        assert_eq!(
            "../shared/data/siftsmall".parse::<Source>().unwrap(),
            Source::Folder("../shared/data/siftsmall".into())
        );
    }

    #[test]
    fn synthetic_truth_is_exact_and_the_query_count_can_be_cut() {
        let w = Workload::load(
            &Source::LongTail {
                n: 300,
                dim: 8,
                seed: 1,
            },
            Distance::Dot,
            Some(20),
        )
        .unwrap();
        assert_eq!((w.queries.len(), w.truth.len()), (20, 20));
        // The best inner product of query 0 is the truth's first id.
        let q = w.queries.row(0);
        let dot = |i: usize| -> f32 { w.base.row(i).iter().zip(q).map(|(a, b)| a * b).sum() };
        let best = (0..300).max_by(|&a, &b| dot(a).total_cmp(&dot(b))).unwrap();
        assert_eq!(w.truth[0][0] as usize, best);
    }
}
