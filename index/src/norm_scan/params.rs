//! Parameters of a [`super::NormScan`] index, and their validation.

use serde::{Deserialize, Serialize};

use crate::{IndexError, Result};

/// Parameters of a [`super::NormScan`] index.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NormScanParams {
    /// Share of the items, largest norms first, that a query scans when it names no `ef`
    /// (a query's `ef` is the number of items it scans, as an LSH index's is the number it
    /// probes).
    pub share: f32,
    /// Candidates re-ranked by their full rows per result wanted (at least 1).
    pub oversampling: f32,
}

impl Default for NormScanParams {
    /// A quarter of the items, and 2 candidates re-ranked per result: the codes rank well
    /// enough that 4 found nothing more on the sets measured (`BENCHMARKS.md`), and each
    /// candidate is a row read at random. A quarter covers recall@10 0.99 on movielens-mips
    /// (whose answers sit in its largest 7% of norms) and 0.95 on the synthetic set of norm
    /// bias 0.65; sets whose answers lean on norms less need more (`ef`), and sets whose
    /// norms are alike need a graph.
    fn default() -> Self {
        Self {
            share: 0.25,
            oversampling: 2.0,
        }
    }
}

impl NormScanParams {
    /// Rejects parameters that cannot build an index.
    pub fn validate(&self) -> Result<()> {
        if !(self.share > 0.0 && self.share <= 1.0) {
            return Err(IndexError::InvalidParams(format!(
                "share must be above 0 and at most 1, got {}",
                self.share
            )));
        }
        if !(self.oversampling.is_finite() && self.oversampling >= 1.0) {
            return Err(IndexError::InvalidParams(format!(
                "oversampling must be a finite number of at least 1, got {}",
                self.oversampling
            )));
        }
        Ok(())
    }

    /// Items a query scans among `len` when it names no `ef`: the share, rounded up.
    pub fn default_depth(&self, len: usize) -> usize {
        (f64::from(self.share) * len as f64).ceil() as usize
    }
}
