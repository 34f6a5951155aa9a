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
    /// (1.0): larger values make clusters overlap.
    pub spread: f32,
    /// When set, each cluster's points vary only within a random subspace of this many
    /// dimensions (plus 5% isotropic noise), as real embeddings do. `None` gives full-rank
    /// isotropic clusters, whose nearest neighbours are close to random in high dimension.
    pub intrinsic_dim: Option<usize>,
    /// RNG seed.
    pub seed: u64,
}

fn unit() -> Normal<f32> {
    Normal::new(0.0f32, 1.0).unwrap_or_else(|_| unreachable!("σ = 1 is valid"))
}

/// Points drawn around `clusters` centres ~ N(0, I): each point = centre + spread·noise, the
/// noise being N(0, I) or, with `intrinsic_dim = d`, a cluster-specific random projection of
/// N(0, I_d) plus 5% isotropic noise. Cluster sizes are uneven (each point picks a centre
/// uniformly at random).
pub fn clustered_gaussian(spec: ClusterSpec) -> Vectors {
    clustered_with_structure(spec, spec.seed)
}

/// Like [`clustered_gaussian`], but the cluster structure (centres, subspaces) comes from
/// `structure_seed` and the points from `spec.seed`. Queries drawn from the same
/// distribution as a base set pass the base's seed here and a seed of their own in `spec`.
pub fn clustered_with_structure(spec: ClusterSpec, structure_seed: u64) -> Vectors {
    let normal = unit();
    let clusters = spec.clusters.max(1);
    let mut structure = StdRng::seed_from_u64(structure_seed);
    let centres: Vec<f32> = (0..clusters * spec.dim)
        .map(|_| normal.sample(&mut structure))
        .collect();
    let basis: Vec<f32> = match spec.intrinsic_dim {
        Some(d) => {
            let scale = 1.0 / (d as f32).sqrt();
            (0..clusters * spec.dim * d)
                .map(|_| normal.sample(&mut structure) * scale)
                .collect()
        }
        None => Vec::new(),
    };
    let mut rng = StdRng::seed_from_u64(spec.seed ^ 0x9e37_79b9_7f4a_7c15);
    let mut data = Vec::with_capacity(spec.n * spec.dim);
    let mut latent = Vec::new();
    for _ in 0..spec.n {
        let c = rng.gen_range(0..clusters);
        let centre = &centres[c * spec.dim..(c + 1) * spec.dim];
        match spec.intrinsic_dim {
            None => data.extend(
                centre
                    .iter()
                    .map(|&x| x + spec.spread * normal.sample(&mut rng)),
            ),
            Some(d) => {
                latent.clear();
                latent.extend((0..d).map(|_| normal.sample(&mut rng)));
                let projection = &basis[c * spec.dim * d..(c + 1) * spec.dim * d];
                for (i, &x) in centre.iter().enumerate() {
                    let row = &projection[i * d..(i + 1) * d];
                    let along: f32 = row.iter().zip(&latent).map(|(p, z)| p * z).sum();
                    data.push(x + spec.spread * (along + 0.05 * normal.sample(&mut rng)));
                }
            }
        }
    }
    Vectors {
        dim: spec.dim,
        data,
    }
}

/// Directions uniform on the sphere, norms log-normal with shape `sigma`: the long-tailed
/// norm distribution of recommendation embeddings that MIPS indexes must handle.
pub fn long_tailed_norms(n: usize, dim: usize, sigma: f32, seed: u64) -> Vectors {
    let normal = unit();
    let mut rng = StdRng::seed_from_u64(seed);
    let norms = LogNormal::new(0.0f32, sigma.max(1e-6))
        .unwrap_or_else(|_| unreachable!("a positive σ is valid"));
    let mut data = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let start = data.len();
        data.extend((0..dim).map(|_| normal.sample(&mut rng)));
        let row = &mut data[start..];
        crate::distance::normalize(row);
        let norm = norms.sample(&mut rng);
        row.iter_mut().for_each(|x| *x *= norm);
    }
    Vectors { dim, data }
}
