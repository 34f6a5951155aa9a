//! A collection's settings: validated from the create request, stored in its RocksDB `meta`.

use cairn_api::{CreateCollection, Distance, IndexConfig};
use cairn_index::hnsw::HnswParams;
use cairn_index::{IndexParams, Metric};
use serde::{Deserialize, Serialize};

use crate::config::Limits;
use crate::error::{Result, ServerError};

/// Meta key the settings are stored under.
pub const META_KEY: &str = "collection_settings";

/// What a collection is, fixed at creation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectionSettings {
    /// Vector dimension.
    pub dim: usize,
    /// Distance as the user named it.
    pub distance: Distance,
    /// The index and its parameters.
    pub index: IndexParams,
    /// Filtered queries expected to match fewer points than this scan exactly.
    pub full_scan_threshold: usize,
}

/// Qdrant's default for the exact-scan threshold of filtered queries.
const DEFAULT_FULL_SCAN_THRESHOLD: usize = 10_000;

impl CollectionSettings {
    /// Validates a create request.
    pub fn from_request(req: &CreateCollection, limits: &Limits) -> Result<Self> {
        let v = &req.vectors;
        if v.size == 0 {
            return Err(ServerError::InvalidRequest(
                "vectors.size must be at least 1".into(),
            ));
        }
        if v.size > limits.max_dim {
            return Err(ServerError::LimitExceeded(format!(
                "vectors.size {} is above the maximum of {}",
                v.size, limits.max_dim
            )));
        }
        if v.distance == Distance::Manhattan {
            return Err(ServerError::InvalidRequest(
                "vectors.distance Manhattan is not supported; use Cosine, Euclid or Dot".into(),
            ));
        }
        let diff = v.hnsw_config.or(req.hnsw_config).unwrap_or_default();
        let defaults = HnswParams::default();
        let ef_construction = diff.ef_construct.unwrap_or(defaults.ef_construction);
        let hnsw = HnswParams {
            m: diff.m.unwrap_or(defaults.m),
            ef_construction,
            // Qdrant searches with ef = ef_construct unless told otherwise; so do we.
            ef_search: diff.ef_search.unwrap_or(ef_construction),
            seed: defaults.seed,
        };
        let index = match req.index.unwrap_or(IndexConfig::Hnsw) {
            IndexConfig::Flat => IndexParams::Flat,
            IndexConfig::Hnsw => {
                hnsw.validate()
                    .map_err(|e| ServerError::InvalidRequest(format!("hnsw_config: {e}")))?;
                IndexParams::Hnsw(hnsw)
            }
        };
        Ok(Self {
            dim: v.size,
            distance: v.distance,
            index,
            full_scan_threshold: diff
                .full_scan_threshold
                .unwrap_or(DEFAULT_FULL_SCAN_THRESHOLD),
        })
    }

    /// The index metric.
    pub fn metric(&self) -> Metric {
        match self.distance {
            Distance::Cosine => Metric::Cosine,
            Distance::Euclid => Metric::L2,
            // Manhattan is refused at creation; a stored one can only come from a foreign file.
            Distance::Dot | Distance::Manhattan => Metric::InnerProduct,
        }
    }
}
