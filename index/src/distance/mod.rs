//! Distance kernels: the one place where Cairn does vector arithmetic.
//!
//! Convention. Every index ranks by a **key where lower is closer**: squared L2 for
//! [`Metric::L2`], and the negated inner product for [`Metric::InnerProduct`] and
//! [`Metric::Cosine`] (cosine vectors are normalised on the way in, so the inner product *is*
//! the cosine). Negating the inner product is faiss' `NegativeDistanceComputer` trick: one
//! search routine minimises for every metric. [`Metric::key_to_score`] turns a key into the
//! score users see (the L2 distance itself, or the similarity), as Qdrant scores them.
//!
//! Kernels are resolved once per index ([`Metric::key_fn`]) and called through a plain
//! function pointer, never re-dispatched per pair.

pub mod codes;
pub mod half;
pub mod reference;
pub mod simd;

use serde::{Deserialize, Serialize};

/// Distance function that returns a lower-is-closer key.
pub type KeyFn = fn(&[f32], &[f32]) -> f32;

/// [`KeyFn`] from one query to four rows (see [`simd::Kernel4`]).
pub type KeyFn4 = simd::Kernel4;

/// The similarity a collection is searched by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Euclidean distance; users see the (non-squared) distance, smaller is better.
    L2,
    /// Cosine similarity; vectors are normalised at insert, users see the cosine.
    Cosine,
    /// Raw inner product (MIPS); users see the dot product, larger is better.
    InnerProduct,
}

impl Metric {
    /// The kernel producing this metric's key. Call once, keep the pointer.
    pub fn key_fn(self) -> KeyFn {
        let kernels = simd::kernels();
        match self {
            Metric::L2 => kernels.l2_squared,
            Metric::Cosine | Metric::InnerProduct => kernels.neg_dot,
        }
    }

    /// The four-row form of [`Metric::key_fn`], for scans.
    pub fn key4_fn(self) -> KeyFn4 {
        let kernels = simd::kernels();
        match self {
            Metric::L2 => kernels.l2_squared4,
            Metric::Cosine | Metric::InnerProduct => kernels.neg_dot4,
        }
    }

    /// User-facing score of a key: L2 distance, or the similarity.
    pub fn key_to_score(self, key: f32) -> f32 {
        match self {
            Metric::L2 => key.max(0.0).sqrt(),
            Metric::Cosine | Metric::InnerProduct => -key,
        }
    }

    /// Inverse of [`Metric::key_to_score`], used to turn a score threshold into a key bound.
    pub fn score_to_key(self, score: f32) -> f32 {
        match self {
            Metric::L2 => score * score.abs(),
            Metric::Cosine | Metric::InnerProduct => -score,
        }
    }

    /// Whether a larger user score means a better match (false only for L2).
    pub fn higher_is_better(self) -> bool {
        match self {
            Metric::L2 => false,
            Metric::Cosine | Metric::InnerProduct => true,
        }
    }

    /// Puts a vector in the form the index stores and searches: unit length for cosine.
    /// A zero vector stays zero (its cosine with anything is then 0).
    pub fn preprocess(self, vector: &mut [f32]) {
        match self {
            Metric::Cosine => normalize(vector),
            Metric::L2 | Metric::InnerProduct => {}
        }
    }

    /// A query in the form [`Metric::preprocess`] gives: borrowed when the metric leaves
    /// vectors as they are, so the hot search path allocates only for cosine.
    pub fn prepared(self, query: &[f32]) -> std::borrow::Cow<'_, [f32]> {
        match self {
            Metric::Cosine => {
                let mut q = query.to_vec();
                normalize(&mut q);
                q.into()
            }
            Metric::L2 | Metric::InnerProduct => query.into(),
        }
    }

    /// Stable one-byte tag for file headers.
    pub fn tag(self) -> u8 {
        match self {
            Metric::L2 => 1,
            Metric::Cosine => 2,
            Metric::InnerProduct => 3,
        }
    }

    /// Inverse of [`Metric::tag`].
    pub fn from_tag(tag: u8) -> Option<Self> {
        match tag {
            1 => Some(Metric::L2),
            2 => Some(Metric::Cosine),
            3 => Some(Metric::InnerProduct),
            _ => None,
        }
    }
}

/// Scales `vector` to unit L2 norm in place; leaves a zero vector alone.
pub fn normalize(vector: &mut [f32]) {
    let norm = simd::dot(vector, vector).sqrt();
    if norm > 0.0 && norm.is_finite() {
        let inv = 1.0 / norm;
        vector.iter_mut().for_each(|x| *x *= inv);
    }
}

/// L2 norm of a vector.
pub fn norm(vector: &[f32]) -> f32 {
    simd::dot(vector, vector).sqrt()
}

#[cfg(test)]
mod tests;
