//! HNSW parameters and their validation.

use serde::{Deserialize, Serialize};

use crate::{IndexError, Result};

/// HNSW parameters (Malkov & Yashunin, TPAMI 2020; names as in hnswlib and Qdrant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HnswParams {
    /// Links per node on upper layers; layer 0 keeps up to `2·m` (the paper's M_max0).
    pub m: usize,
    /// Candidate list size while inserting: larger builds a better graph, slower.
    pub ef_construction: usize,
    /// Default candidate list size while searching, when a query names none.
    pub ef_search: usize,
    /// Seed of the level generator, so a build is reproducible.
    pub seed: u64,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 100,
            ef_search: 100,
            seed: 0x5eed_c41f,
        }
    }
}

/// Hard ceilings that keep a node's lists and levels in their fixed-size encodings.
pub const MAX_M: usize = 256;
const MAX_EF: usize = 1 << 20;

impl HnswParams {
    /// Rejects parameters that cannot build a useful graph.
    pub fn validate(&self) -> Result<()> {
        if !(2..=MAX_M).contains(&self.m) {
            return Err(IndexError::InvalidParams(format!(
                "m must be in 2..={MAX_M}, got {}",
                self.m
            )));
        }
        if self.ef_construction == 0 || self.ef_construction > MAX_EF {
            return Err(IndexError::InvalidParams(format!(
                "ef_construction must be in 1..={MAX_EF}, got {}",
                self.ef_construction
            )));
        }
        if self.ef_search == 0 || self.ef_search > MAX_EF {
            return Err(IndexError::InvalidParams(format!(
                "ef_search must be in 1..={MAX_EF}, got {}",
                self.ef_search
            )));
        }
        Ok(())
    }

    /// 1/ln(M): the level multiplier that makes layer sizes shrink by M per level.
    pub(crate) fn level_mult(&self) -> f64 {
        1.0 / (self.m as f64).ln()
    }
}
