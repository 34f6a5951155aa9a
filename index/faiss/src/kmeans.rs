//! k-means through FAISS (Lloyd iterations with FAISS's BLAS-backed assignment step).

use faiss::cluster::{Clustering, ClusteringParameters};
use faiss::{FlatIndex, MetricType};

use crate::{rows, to_u32, FaissError, Result};

/// k-means settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KMeansParams {
    /// Number of centroids.
    pub k: usize,
    /// Lloyd iterations.
    pub iterations: u32,
    /// Independent runs from different random starts; the one with the lowest objective is
    /// kept (FAISS's `nredo`). One run can settle with a centroid between two clusters.
    pub restarts: u32,
    /// Seed of the initial centroid draw, so training is reproducible.
    pub seed: u32,
    /// Normalise centroids after each iteration and assign by inner product: clusters of
    /// *directions*, which is what routing `Dot` collections needs (Pyramid §IV-D).
    pub spherical: bool,
    /// FAISS subsamples to at most this many points per centroid.
    pub max_points_per_centroid: u32,
}

impl Default for KMeansParams {
    fn default() -> Self {
        Self {
            k: 256,
            iterations: 25,
            restarts: 3,
            seed: 1234,
            spherical: false,
            max_points_per_centroid: 256,
        }
    }
}

/// Trains `params.k` centroids on `data` (row-major, `dim` floats per row) and returns them
/// row-major. Needs at least `k` rows.
pub fn kmeans(dim: usize, data: &[f32], params: &KMeansParams) -> Result<Vec<f32>> {
    let n = rows(data, dim)?;
    if params.k == 0 || n < params.k {
        return Err(FaissError::InvalidParams(format!(
            "k-means needs 1 ≤ k ≤ points, got k = {} for {n} points",
            params.k
        )));
    }
    let mut cp = ClusteringParameters::new();
    cp.set_niter(params.iterations);
    cp.set_nredo(params.restarts.max(1));
    cp.set_seed(params.seed);
    cp.set_spherical(params.spherical);
    cp.set_max_points_per_centroid(params.max_points_per_centroid);
    cp.set_verbose(false);
    let (d, k) = (to_u32(dim)?, to_u32(params.k)?);
    let mut clustering = Clustering::new_with_params(d, k, &cp)?;
    let metric = if params.spherical {
        MetricType::InnerProduct
    } else {
        MetricType::L2
    };
    let mut assign = FlatIndex::new(d, metric)?;
    clustering.train(data, &mut assign)?;
    Ok(clustering.centroids()?.concat())
}

/// Pyramid's meta-indexes train their centres through this (`cairn-index` knows FAISS only as this
/// trait, so its tests never build C++).
impl cairn_index::pyramid::CentroidTrainer for crate::FaissTrainer {
    fn centroids(
        &self,
        dim: usize,
        data: &[f32],
        k: usize,
        spherical: bool,
    ) -> cairn_index::Result<Vec<f32>> {
        let params = KMeansParams {
            k,
            spherical,
            ..KMeansParams::default()
        };
        kmeans(dim, data, &params)
            .map_err(|e| cairn_index::IndexError::InvalidParams(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The meta-index trained the way the server will train it (FAISS k-means through
    /// `CentroidTrainer`): siftsmall in 8 partitions, routed recall@10 — the share of true top-10
    /// items stored in a visited partition — at K = 8 centres, against visiting all 8 (measured
    /// here: 0.982 recall touching 2.57 partitions). Sizes stay within 5% of the mean 1,250: the
    /// partitioner bounds parts from above and below by 3% of the sample weights, which here are
    /// the items themselves.
    #[test]
    fn faiss_trained_meta_index_finds_siftsmall_neighbours_in_few_partitions() {
        use cairn_index::dataset::{load_dataset, shared_data_dir};
        use cairn_index::pyramid::{Assignment, MetaIndex, PyramidParams};
        use cairn_index::Metric;

        let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
        let dim = data.base.dim;
        // Unspilled, so that partition sizes show the partitioner's balance alone.
        let meta_index = MetaIndex::train(
            PyramidParams {
                spill: 0.0,
                ..PyramidParams::new(8)
            },
            Metric::L2,
            dim,
            &data.base.data,
            &crate::FaissTrainer,
            1,
        )
        .unwrap();
        let home: Vec<u32> = data
            .base
            .rows()
            .map(|v| match meta_index.assign(v).unwrap() {
                Assignment::One(p) => p,
                Assignment::Two(..) | Assignment::All => unreachable!("nothing spilled"),
            })
            .collect();
        let mut sizes = [0usize; 8];
        home.iter().for_each(|&p| sizes[p as usize] += 1);
        assert!(
            sizes.iter().all(|&s| s.abs_diff(1250) <= 63),
            "partition sizes {sizes:?}"
        );
        let (mut found, mut touched) = (0, 0);
        for (q, truth) in data.queries.rows().zip(&data.ground_truth) {
            let (parts, _) = meta_index.route(q, None, None).unwrap();
            touched += parts.len();
            found += truth[..10]
                .iter()
                .filter(|&&i| parts.contains(&home[i as usize]))
                .count();
        }
        let n = data.queries.len();
        let recall = found as f64 / (10 * n) as f64;
        let touched = touched as f64 / n as f64;
        assert!(recall >= 0.95, "routed recall@10 {recall}");
        assert!(touched <= 4.0, "{touched} of 8 partitions per query");
    }

    #[test]
    fn finds_well_separated_centres() {
        // Four tight blobs around (±10, ±10): the centroids must land on them.
        let centres = [[10.0, 10.0], [-10.0, 10.0], [10.0, -10.0], [-10.0, -10.0]];
        let mut data = Vec::new();
        for i in 0..400 {
            let c = centres[i % 4];
            let jitter = ((i * 7919) % 100) as f32 / 100.0 - 0.5;
            data.extend_from_slice(&[c[0] + jitter, c[1] - jitter]);
        }
        let params = KMeansParams {
            k: 4,
            ..KMeansParams::default()
        };
        let found = kmeans(2, &data, &params).unwrap();
        assert_eq!(found.len(), 8);
        for c in centres {
            let nearest = found
                .chunks(2)
                .map(|f| (f[0] - c[0]).hypot(f[1] - c[1]))
                .fold(f32::INFINITY, f32::min);
            assert!(nearest < 0.5, "no centroid near {c:?}: {found:?}");
        }
    }

    #[test]
    fn rejects_more_centroids_than_points() {
        let err = kmeans(2, &[0.0; 6], &KMeansParams::default()).unwrap_err();
        assert!(matches!(err, FaissError::InvalidParams(_)), "{err}");
    }
}
