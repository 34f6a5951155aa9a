//! Vector quantization for maximum inner product: plain VQ (PQ, OPQ, RQ) and norm-explicit
//! quantization (NEQ; Dai et al., AAAI 2020; `PAPERS.md` §3).
//!
//! Why NEQ. A VQ code's error on an inner product splits into a norm error and a direction
//! error, and for MIPS the norm error dominates: a large-norm item whose norm is under-estimated
//! drops out of the top T however good its direction is. NEQ spends one of its M bytes on the
//! norm alone — the *relative* norm r = ‖x‖/‖û‖, so the reconstruction r̂·û has the item's norm
//! up to one scalar quantization step — and codes the unit direction with M − 1 codebooks of an
//! unchanged VQ. Same bytes per item as plain M-codebook VQ; one extra multiply per score.
//!
//! Both NEQs code a direction for the smallest *angle* to the reconstruction
//! ([`AdditiveCodebooks::encode_direction`]), not the smallest distance: r̂ rescales û, so its
//! length costs nothing.
//!
//! NEQ-IP ([`Quantizer::NeqIp`]) trains those direction codebooks for inner product: each
//! item's direction weighs ‖x‖² in training, as its error weighs in its scores, where plain
//! NEQ weighs every direction alike; then the tables are refitted jointly to the codes the
//! angle encoder picks ([`AdditiveCodebooks::refine_directions`]), since FAISS fitted them to
//! nearest codes (issue #26; `BENCHMARKS.md` has both NEQs).
//!
//! Training goes through a [`CodebookTrainer`], which the `cairn-faiss` crate implements with
//! FAISS (this crate never links C++). What comes back is plain data ([`AdditiveCodebooks`]),
//! so encoding, scoring and persistence all live here.

mod additive;
mod index;
mod mips;
mod scalar;

pub use additive::{AdditiveCodebooks, Lut, BEAM, KS};
pub use index::{QuantizedIndex, QuantizedParams};
pub use mips::{MipsCodec, Quantizer, QueryTables};
pub use scalar::ScalarCodebook;

use serde::{Deserialize, Serialize};

use crate::Result;

/// The vector quantizer that codes a vector (plain VQ) or a direction (inside NEQ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VqKind {
    /// Product quantization: each codebook covers its own slice of the coordinates
    /// (Jégou et al., TPAMI 2011). Needs the codebook count to divide the dimension; NEQ pads
    /// directions with zeros to make it so.
    Pq,
    /// PQ after a learned rotation that balances variance across slices (Ge et al., CVPR 2013).
    Opq,
    /// Residual quantization: each codebook codes what the previous ones left.
    Rq,
}

impl VqKind {
    /// The name used in reports and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            VqKind::Pq => "pq",
            VqKind::Opq => "opq",
            VqKind::Rq => "rq",
        }
    }
}

/// Trains codebooks; implemented with FAISS by `cairn-faiss`.
pub trait CodebookTrainer: Send + Sync {
    /// Trains `m` codebooks of [`KS`] entries of `kind` on row-major `data` (`dim` floats per
    /// row) and returns them in additive form.
    fn train(&self, kind: VqKind, dim: usize, m: usize, data: &[f32]) -> Result<AdditiveCodebooks>;
}

#[cfg(test)]
mod tests;
