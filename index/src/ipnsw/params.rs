//! ip-NSW+ parameters (names and defaults from the authors' `GraphMIPS` code, see
//! `PAPERS.md` §2.3) and their validation.

use serde::{Deserialize, Serialize};

use crate::hnsw::HnswParams;
use crate::{IndexError, Result};

/// Parameters of the two graphs of an ip-NSW+ index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IpNswPlusParams {
    /// Out-degree of the inner-product graph; reverse links fill each list up to `2·m`.
    pub m: usize,
    /// Candidate list size of the inner-product search that picks a new node's links.
    pub ef_construction: usize,
    /// Default `ef` of the inner-product search at query time.
    pub ef_search: usize,
    /// Links per node of the angular HNSW on upper layers (`2·cos_m` on layer 0).
    pub cos_m: usize,
    /// Candidate list size of the angular insert; all its layer-0 candidates seed the
    /// inner-product insert.
    pub cos_ef_construction: usize,
    /// How many angular neighbours of the query seed the inner-product search (the paper: 1).
    pub cos_ef_search: usize,
    /// Seed of the angular graph's level generator.
    pub seed: u64,
}

impl Default for IpNswPlusParams {
    /// The authors' values (M = 32, cos_M = 10, cos_efC = 100, cos_ef = 1), except
    /// `ef_construction`: their code defaults to 1024, which costs ~4× the build time of 200
    /// for no recall we could measure on movielens-mips (see BENCHMARKS.md).
    fn default() -> Self {
        Self {
            m: 32,
            ef_construction: 200,
            ef_search: 64,
            cos_m: 10,
            cos_ef_construction: 100,
            cos_ef_search: 1,
            seed: 0x1b5e_ed00,
        }
    }
}

impl IpNswPlusParams {
    /// Rejects parameters that cannot build a useful pair of graphs.
    pub fn validate(&self) -> Result<()> {
        self.angular().validate().map_err(|e| {
            IndexError::InvalidParams(format!("angular graph: {e} (cos_m, cos_ef_construction)"))
        })?;
        HnswParams {
            m: self.m,
            ef_construction: self.ef_construction,
            ef_search: self.ef_search,
            seed: self.seed,
        }
        .validate()?;
        if self.cos_ef_search == 0 || self.cos_ef_search > self.cos_ef_construction.max(1024) {
            return Err(IndexError::InvalidParams(format!(
                "cos_ef_search must be in 1..=max(cos_ef_construction, 1024), got {}",
                self.cos_ef_search
            )));
        }
        Ok(())
    }

    /// The angular HNSW's own parameters.
    pub(crate) fn angular(&self) -> HnswParams {
        HnswParams {
            m: self.cos_m,
            ef_construction: self.cos_ef_construction,
            ef_search: self.cos_ef_search,
            seed: self.seed,
        }
    }
}
