//! Codebooks in additive form: a reconstruction is `base + Σᵢ deltaᵢ[codeᵢ]`.
//!
//! Why this form. PQ, OPQ and RQ all decode linearly: PQ sums sub-vectors that live on
//! disjoint coordinates, OPQ rotates such a sum, RQ sums full-dimension codewords. Writing each
//! as a base plus one delta table per codebook lets one scorer serve all three: a query's lookup
//! table is `⟨q, deltaᵢ[j]⟩` (over the coordinates codebook i touches) and an item's score is
//! `⟨q, base⟩ + Σᵢ LUTᵢ[codeᵢ]`. The tables are read off any decoder: `base` decodes the
//! all-zero code and `deltaᵢ[j]` is what setting code i to j adds — exact for every linear
//! decoder, and checked on random codes when the tables are built.
//!
//! Encoding is greedy residual search over the tables: exact for PQ and OPQ (their deltas are
//! mutually orthogonal, so codebooks do not interact) and the beam-1 encoder for RQ.

use crate::distance::simd::dot;
use crate::{IndexError, Result};

/// Entries per codebook: one byte per code.
pub const KS: usize = 256;

/// Codebooks in additive form (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct AdditiveCodebooks {
    dim: usize,
    m: usize,
    base: Vec<f32>,
    /// `m · KS` rows of `dim` floats.
    deltas: Vec<f32>,
    /// ‖deltaᵢ[j]‖², for the greedy encoder.
    sq_norms: Vec<f32>,
    /// Per codebook, the coordinate range outside which all its deltas are zero.
    support: Vec<(usize, usize)>,
}

/// A query's lookup tables: `⟨q, base⟩` and `⟨q, deltaᵢ[j]⟩` at `i · KS + j`.
pub struct Lut {
    base: f32,
    table: Vec<f32>,
}

impl Lut {
    /// `⟨q, reconstruction of code⟩`.
    #[inline]
    pub fn score(&self, code: &[u8]) -> f32 {
        let mut sum = self.base;
        for (i, &c) in code.iter().enumerate() {
            sum += self.table[i * KS + usize::from(c)];
        }
        sum
    }
}

impl AdditiveCodebooks {
    /// Reads the tables off a decoder of `m`-byte codes into `dim`-float rows, then checks on
    /// random codes that the decoder really is additive.
    pub fn from_decoder(
        dim: usize,
        m: usize,
        decode: &dyn Fn(&[u8]) -> Result<Vec<f32>>,
    ) -> Result<Self> {
        if dim == 0 || m == 0 {
            return Err(IndexError::InvalidParams(
                "codebooks need a dimension and at least one codebook".into(),
            ));
        }
        // Code 0 is all zeros; then code (i, j) sets byte i to j.
        let mut codes = vec![0u8; (1 + m * KS) * m];
        for i in 0..m {
            for j in 0..KS {
                codes[(1 + i * KS + j) * m + i] = j as u8;
            }
        }
        let rows = decode(&codes)?;
        if rows.len() != (1 + m * KS) * dim {
            return Err(IndexError::InvalidParams(format!(
                "decoder returned {} floats for {} codes of dimension {dim}",
                rows.len(),
                1 + m * KS
            )));
        }
        let base = rows[..dim].to_vec();
        let mut deltas = rows[dim..].to_vec();
        for row in deltas.chunks_exact_mut(dim) {
            row.iter_mut().zip(&base).for_each(|(d, b)| *d -= b);
        }
        let books = Self::from_tables(dim, m, base, deltas);
        books.check_additive(decode)?;
        Ok(books)
    }

    /// Derives the supports and squared norms of a base and delta tables.
    fn from_tables(dim: usize, m: usize, base: Vec<f32>, deltas: Vec<f32>) -> Self {
        let support = (0..m)
            .map(|i| {
                let book = &deltas[i * KS * dim..(i + 1) * KS * dim];
                let nonzero = |c: usize| book.chunks_exact(dim).any(|r| r[c] != 0.0);
                let start = (0..dim).find(|&c| nonzero(c)).unwrap_or(0);
                let end = (0..dim).rfind(|&c| nonzero(c)).map_or(start, |c| c + 1);
                (start, end)
            })
            .collect();
        let sq_norms = deltas.chunks_exact(dim).map(|r| dot(r, r)).collect();
        Self {
            dim,
            m,
            base,
            deltas,
            sq_norms,
            support,
        }
    }

    /// Decodes pseudo-random codes both ways and fails if they disagree.
    fn check_additive(&self, decode: &dyn Fn(&[u8]) -> Result<Vec<f32>>) -> Result<()> {
        let samples = 16;
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let codes: Vec<u8> = (0..samples * self.m)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 56) as u8
            })
            .collect();
        let theirs = decode(&codes)?;
        let mut ours = vec![0f32; self.dim];
        for (code, want) in codes
            .chunks_exact(self.m)
            .zip(theirs.chunks_exact(self.dim))
        {
            self.decode(code, &mut ours);
            let scale = dot(want, want).sqrt().max(1e-6);
            let err = ours
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            if err > 1e-3 * scale {
                return Err(IndexError::InvalidParams(format!(
                    "the codec does not decode additively (error {err} on a vector of norm {scale})"
                )));
            }
        }
        Ok(())
    }

    /// Dimension of a reconstruction.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Codebooks, which is also the code size in bytes.
    pub fn m(&self) -> usize {
        self.m
    }

    fn delta(&self, i: usize, j: usize) -> &[f32] {
        let start = (i * KS + j) * self.dim;
        &self.deltas[start..start + self.dim]
    }

    /// Greedy residual encoding of `x` into `out` (`m` bytes).
    pub fn encode(&self, x: &[f32], out: &mut [u8]) {
        let mut residual: Vec<f32> = x.iter().zip(&self.base).map(|(a, b)| a - b).collect();
        for (i, byte) in out.iter_mut().enumerate().take(self.m) {
            let (s, e) = self.support[i];
            // argmin ‖r − d‖² = argmin ‖d‖² − 2⟨r, d⟩
            let mut best = (f32::INFINITY, 0usize);
            for j in 0..KS {
                let cost =
                    self.sq_norms[i * KS + j] - 2.0 * dot(&residual[s..e], &self.delta(i, j)[s..e]);
                if cost < best.0 {
                    best = (cost, j);
                }
            }
            *byte = best.1 as u8;
            let d = self.delta(i, best.1);
            residual[s..e]
                .iter_mut()
                .zip(&d[s..e])
                .for_each(|(r, d)| *r -= d);
        }
    }

    /// Writes the reconstruction of `code` into `out` (`dim` floats).
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        out.copy_from_slice(&self.base);
        for (i, &c) in code.iter().enumerate().take(self.m) {
            let (s, e) = self.support[i];
            let d = self.delta(i, usize::from(c));
            out[s..e]
                .iter_mut()
                .zip(&d[s..e])
                .for_each(|(o, d)| *o += d);
        }
    }

    /// The lookup tables of query `q` (`dim` floats).
    pub fn lut(&self, q: &[f32]) -> Lut {
        let mut table = vec![0f32; self.m * KS];
        for i in 0..self.m {
            let (s, e) = self.support[i];
            for j in 0..KS {
                table[i * KS + j] = dot(&q[s..e], &self.delta(i, j)[s..e]);
            }
        }
        Lut {
            base: dot(q, &self.base),
            table,
        }
    }

    /// Serialises the tables (the supports and norms are recomputed on read).
    pub(crate) fn write(&self, e: &mut crate::persist::codec::Encoder<'_>) {
        e.u64(self.dim as u64);
        e.u64(self.m as u64);
        e.f32s(&self.base);
        e.f32s(&self.deltas);
    }

    /// Inverse of [`AdditiveCodebooks::write`].
    pub(crate) fn read(d: &mut crate::persist::codec::Decoder<'_>) -> Result<Self> {
        let dim = d.usize()?;
        let m = d.usize()?;
        let base = d.f32s()?;
        let deltas = d.f32s()?;
        if dim == 0 || m == 0 || base.len() != dim || deltas.len() != m * KS * dim {
            return Err(IndexError::corrupt("codebook sizes do not match"));
        }
        Ok(Self::from_tables(dim, m, base, deltas))
    }
}
