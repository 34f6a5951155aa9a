//! Parameters of SimpleLSH and norm-ranging LSH, and their validation.

use serde::{Deserialize, Serialize};

use crate::{IndexError, Result};

/// Parameters of an [`super::RangeLsh`] index; with `ranges = 1` it is SimpleLSH.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LshParams {
    /// Total code length per item in bits, range id included: hash bits are
    /// `bits − log₂(ranges)`, so SimpleLSH and Range-LSH are compared at equal code size
    /// (the authors' accounting: 32 bits = 27 hash bits + 32 ranges).
    pub bits: u32,
    /// Norm ranges (a power of two); 1 is SimpleLSH with the global maximum norm.
    pub ranges: usize,
    /// `a` in the authors' shifted collision estimate p′ = a + (1 − a)·l/L used to rank
    /// buckets (their code: 0.4; 0 is the plain SRP estimate).
    pub shift: f32,
    /// Items probed (and re-ranked exactly) when a query names no budget.
    pub probe_items: usize,
    /// Seed of the random projections.
    pub seed: u64,
}

impl Default for LshParams {
    /// Range-LSH at the authors' 32-bit setting (m = 32 ranges, 27 hash bits, shift 0.4).
    fn default() -> Self {
        Self {
            bits: 32,
            ranges: 32,
            shift: 0.4,
            probe_items: 1024,
            seed: 0x15b_5eed,
        }
    }
}

impl LshParams {
    /// SimpleLSH at `bits` bits: one range, every bit a hash bit.
    pub fn simple(bits: u32) -> Self {
        Self {
            bits,
            ranges: 1,
            ..Self::default()
        }
    }

    /// Bits that come from hashing (the rest name the range).
    pub fn hash_bits(&self) -> u32 {
        self.bits - self.ranges.trailing_zeros()
    }

    /// Rejects parameters that cannot build an index.
    pub fn validate(&self) -> Result<()> {
        let invalid = |m: String| Err(IndexError::InvalidParams(m));
        if !self.ranges.is_power_of_two() || self.ranges > 1 << 12 {
            return invalid(format!(
                "ranges must be a power of two up to 4096, got {}",
                self.ranges
            ));
        }
        if !(1..=64).contains(&self.bits) || self.bits <= self.ranges.trailing_zeros() {
            return invalid(format!(
                "bits must be in 1..=64 and leave at least one hash bit after log2(ranges) = {}, got {}",
                self.ranges.trailing_zeros(),
                self.bits
            ));
        }
        if !(0.0..1.0).contains(&self.shift) {
            return invalid(format!("shift must be in [0, 1), got {}", self.shift));
        }
        if self.probe_items == 0 {
            return invalid("probe_items must be at least 1".into());
        }
        Ok(())
    }
}
