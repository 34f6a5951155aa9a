//! The trainers some indexes need, which live outside this crate: k-means centres for
//! Pyramid's meta-index and codebooks for quantized indexes are trained by FAISS
//! (`cairn-faiss` implements both traits), and this crate never links C++. One value carries
//! both, handed to whatever builds or loads an index, so no index reaches for a process-wide
//! global.

use std::sync::Arc;

use crate::pyramid::CentroidTrainer;
use crate::quant::CodebookTrainer;
use crate::{IndexError, Result};

/// The trainers a process has; either may be absent (a process without FAISS, or a test that
/// builds no quantized index).
#[derive(Clone, Default)]
pub struct Trainers {
    /// Trains k-means centres (Pyramid's meta-index).
    pub centroids: Option<Arc<dyn CentroidTrainer>>,
    /// Trains quantization codebooks (quantized indexes).
    pub codebooks: Option<Arc<dyn CodebookTrainer>>,
}

impl Trainers {
    /// The centroid trainer, or an error saying a meta-index cannot be trained without one.
    pub fn centroids(&self) -> Result<Arc<dyn CentroidTrainer>> {
        self.centroids.clone().ok_or_else(|| {
            IndexError::InvalidParams(
                "this process has no centroid trainer, so it cannot train a meta-index".into(),
            )
        })
    }

    /// The codebook trainer, or an error saying quantized indexes cannot be built without one.
    pub fn codebooks(&self) -> Result<Arc<dyn CodebookTrainer>> {
        self.codebooks.clone().ok_or_else(|| {
            IndexError::InvalidParams(
                "this process has no codebook trainer, so it cannot build quantized indexes".into(),
            )
        })
    }
}

impl std::fmt::Debug for Trainers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainers")
            .field("centroids", &self.centroids.is_some())
            .field("codebooks", &self.codebooks.is_some())
            .finish()
    }
}
