//! Seeded synthetic data. Same seed, same bytes, on every machine.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal};

use super::Vectors;

/// Shape of a clustered Gaussian set.
#[derive(Debug, Clone, Copy)]
pub struct ClusterSpec {
    /// Number of vectors.
    pub n: usize,
    /// Dimension.
    pub dim: usize,
    /// Number of cluster centres.
    pub clusters: usize,
    /// Standard deviation of points around their centre, relative to the centres' own spread
    /// (1.0). Near 1 the clusters overlap heavily and the set is hard for graph search; near
    /// 0.1 they are well separated and every index looks good.
    pub spread: f32,
    /// RNG seed.
    pub seed: u64,
}

/// Points drawn around `clusters` centres ~ N(0, I); each point = centre + N(0, spread²·I).
/// Cluster sizes are uneven (each point picks a centre uniformly at random).
pub fn clustered_gaussian(spec: ClusterSpec) -> Vectors {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let unit = Normal::new(0.0f32, 1.0).unwrap_or_else(|_| unreachable!("σ = 1 is valid"));
    let centres: Vec<f32> = (0..spec.clusters.max(1) * spec.dim)
        .map(|_| unit.sample(&mut rng))
        .collect();
    let mut data = Vec::with_capacity(spec.n * spec.dim);
    for _ in 0..spec.n {
        let c = rng.gen_range(0..spec.clusters.max(1));
        let centre = &centres[c * spec.dim..(c + 1) * spec.dim];
        data.extend(
            centre
                .iter()
                .map(|&x| x + spec.spread * unit.sample(&mut rng)),
        );
    }
    Vectors {
        dim: spec.dim,
        data,
    }
}

/// Directions uniform on the sphere, norms log-normal with shape `sigma`: the long-tailed
/// norm distribution of recommendation embeddings that MIPS indexes must handle.
pub fn long_tailed_norms(n: usize, dim: usize, sigma: f32, seed: u64) -> Vectors {
    let mut rng = StdRng::seed_from_u64(seed);
    let unit = Normal::new(0.0f32, 1.0).unwrap_or_else(|_| unreachable!("σ = 1 is valid"));
    let norms = LogNormal::new(0.0f32, sigma.max(1e-6))
        .unwrap_or_else(|_| unreachable!("a positive σ is valid"));
    let mut data = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let start = data.len();
        data.extend((0..dim).map(|_| unit.sample(&mut rng)));
        let row = &mut data[start..];
        crate::distance::normalize(row);
        let norm = norms.sample(&mut rng);
        row.iter_mut().for_each(|x| *x *= norm);
    }
    Vectors { dim, data }
}
