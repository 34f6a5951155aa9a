//! SIMD kernels: thin wrappers over simsimd, which picks the widest instruction set the CPU
//! has (AVX-512, AVX2, NEON, SVE) once per process.
//!
//! simsimd returns `None` only when the slices differ in length. Indexes check dimensions at
//! their boundary, so a mismatch here is a bug; release builds then fall back to the scalar
//! loop over the common prefix rather than panicking in a search thread.

use simsimd::SpatialSimilarity;

/// Inner product ⟨a, b⟩.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    match f32::dot(a, b) {
        Some(value) => value as f32,
        None => scalar_dot(a, b),
    }
}

/// Squared Euclidean distance ‖a − b‖².
#[inline]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    match f32::l2sq(a, b) {
        Some(value) => value as f32,
        None => scalar_l2_squared(a, b),
    }
}

/// −⟨a, b⟩: the lower-is-closer key for inner product and (normalised) cosine.
#[inline]
pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
    -dot(a, b)
}

/// Plain scalar inner product: the baseline the kernel benchmark compares simsimd against.
#[inline]
pub fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Plain scalar squared L2: the benchmark baseline.
#[inline]
pub fn scalar_l2_squared(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}
