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
//! Encoding is beam search over the tables, codebook by codebook, keeping the [`BEAM`] best
//! partial codes: exact for PQ and OPQ (their deltas are mutually orthogonal, so codebooks do not
//! interact and the best partial code always survives) and FAISS's own encoder for RQ, whose
//! codebooks interact through the residual.

use crate::distance::simd::{dot, l2_squared};
use crate::{IndexError, Result};

/// Entries per codebook: one byte per code.
pub const KS: usize = 256;

/// Partial codes an encoding keeps from one codebook to the next. FAISS's `ResidualQuantizer`
/// encodes with the same beam (its `max_beam_size` default), so an RQ coded here is coded as a
/// FAISS user's would be; a greedy encoder (beam 1) left plain RQ, the baseline NEQ is measured
/// against, weaker than FAISS's (issue #26).
pub const BEAM: usize = 5;

/// The ridge of [`AdditiveCodebooks::refit`], in items: an entry used by one item moves
/// 1/(1 + λ) of the way to its least-squares value, an unused one stays.
const REFIT_RIDGE: f64 = 1e-3;

/// The most codebooks [`AdditiveCodebooks::refit`] solves jointly: 16 codebooks are 4,096
/// unknowns, a factorisation of about 2·10¹⁰ operations.
const REFIT_MAX_JOINT: usize = 16;

/// What an encoding minimises over the last codebook's expansions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Objective {
    /// ‖x − x̂‖²: the reconstruction is used as it is.
    Distance,
    /// The angle between x and x̂: something else (NEQ's norm byte) rescales x̂.
    Angle,
}

/// One partial code of the beam.
struct Partial {
    /// x − base − the deltas chosen so far.
    residual: Vec<f32>,
    code: Vec<u8>,
    /// ‖residual‖².
    cost: f32,
}

/// Codebooks in additive form (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct AdditiveCodebooks {
    dim: usize,
    m: usize,
    base: Vec<f32>,
    /// `m · KS` rows of `dim` floats.
    deltas: Vec<f32>,
    /// ‖deltaᵢ[j]‖², for the encoder.
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
        let mut base = rows[..dim].to_vec();
        let mut deltas = rows[dim..].to_vec();
        for row in deltas.chunks_exact_mut(dim) {
            row.iter_mut().zip(&base).for_each(|(d, b)| *d -= b);
        }
        Self::centre(dim, m, &mut base, &mut deltas);
        let books = Self::from_tables(dim, m, base, deltas);
        books.check_additive(decode)?;
        Ok(books)
    }

    /// Centres each codebook's deltas on their mean and moves the means into the base: the
    /// sums, hence every decoding, are unchanged.
    ///
    /// Why. Read off a decoder, book i's deltas are relative to its entry 0, so an encoder
    /// choosing book i would measure its residual as if every later book were to add its entry
    /// 0, an arbitrary codeword. Centred, the later books are taken to add their average entry,
    /// RQ's own assumption (its later codebooks are trained on residuals centred near zero).
    /// With it the beam search codes RQ with FAISS's own error (equal to six digits in
    /// `cairn-faiss`'s codec test); without it, 8% worse at the same beam. PQ and OPQ books do
    /// not interact, so nothing changes for them. Done once, on the tables read off a decoder:
    /// persisted tables are already centred, and centring again would move their last bits.
    fn centre(dim: usize, m: usize, base: &mut [f32], deltas: &mut [f32]) {
        for book in deltas.chunks_exact_mut(KS * dim).take(m) {
            let mut mean = vec![0f64; dim];
            for row in book.chunks_exact(dim) {
                mean.iter_mut()
                    .zip(row)
                    .for_each(|(a, v)| *a += f64::from(*v));
            }
            let mean: Vec<f32> = mean.iter().map(|a| (a / KS as f64) as f32).collect();
            for row in book.chunks_exact_mut(dim) {
                row.iter_mut().zip(&mean).for_each(|(v, a)| *v -= a);
            }
            base.iter_mut().zip(&mean).for_each(|(b, a)| *b += a);
        }
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

    /// Codes `x` into `out` (`m` bytes): the code whose reconstruction is nearest `x` that a
    /// [`BEAM`]-wide search finds.
    pub fn encode(&self, x: &[f32], out: &mut [u8]) {
        self.beam_encode(x, out, Objective::Distance);
    }

    /// Codes the direction `u` into `out` (`m` bytes) for a reconstruction that will be
    /// rescaled: the last codebook is chosen, over every partial code of the beam, for the
    /// smallest angle between `u` and the reconstruction rather than the smallest distance.
    ///
    /// Why. NEQ reconstructs an item as r̂·û with r̂ ≈ ‖x‖/‖û‖, so its error is
    /// ‖x‖²·‖u − û/‖û‖‖² = 2‖x‖²(1 − cos∠(u, û)): only the angle counts, and a nearest code
    /// pays for û's length, which the norm byte corrects anyway. Choosing among the same
    /// expansions that the distance encoder ranks, this never ends at a wider angle than it.
    pub fn encode_direction(&self, u: &[f32], out: &mut [u8]) {
        self.beam_encode(u, out, Objective::Angle);
    }

    fn beam_encode(&self, x: &[f32], out: &mut [u8], objective: Objective) {
        let residual: Vec<f32> = x.iter().zip(&self.base).map(|(a, b)| a - b).collect();
        let cost = dot(&residual, &residual);
        let mut beam = vec![Partial {
            residual,
            code: vec![0u8; self.m],
            cost,
        }];
        let x_sq = if objective == Objective::Angle {
            dot(x, x)
        } else {
            0.0
        };
        // (cost, partial, entry) of every expansion of the current beam.
        let mut expansions: Vec<(f32, usize, usize)> = Vec::with_capacity(BEAM * KS);
        // ⟨x, deltaᵢ[j]⟩ for the last codebook under the angle objective (zeros otherwise).
        let mut along = vec![0f32; KS];
        for i in 0..self.m {
            let (s, e) = self.support[i];
            let last = i + 1 == self.m;
            let angle = last && objective == Objective::Angle;
            if angle {
                for (j, a) in along.iter_mut().enumerate() {
                    *a = dot(&x[s..e], &self.delta(i, j)[s..e]);
                }
            }
            expansions.clear();
            for (b, p) in beam.iter().enumerate() {
                // x̂ = x − residual: ⟨x, x̂⟩ and ‖x̂‖² before this codebook's delta.
                let (fit, len_sq) = if angle {
                    let xr = dot(x, &p.residual);
                    (x_sq - xr, x_sq - 2.0 * xr + p.cost)
                } else {
                    (0.0, 0.0)
                };
                for (j, &xd) in along.iter().enumerate() {
                    let rd = dot(&p.residual[s..e], &self.delta(i, j)[s..e]);
                    let sq = self.sq_norms[i * KS + j];
                    let cost = if angle {
                        // −cos∠(x, x̂ + d) up to the constant ‖x‖.
                        let len = len_sq + 2.0 * (xd - rd) + sq;
                        if len > 0.0 {
                            -(fit + xd) / len.sqrt()
                        } else {
                            f32::INFINITY
                        }
                    } else {
                        // ‖r − d‖² = ‖r‖² + ‖d‖² − 2⟨r, d⟩
                        p.cost + sq - 2.0 * rd
                    };
                    expansions.push((cost, b, j));
                }
            }
            let keep = if last { 1 } else { BEAM.min(expansions.len()) };
            expansions.select_nth_unstable_by(keep - 1, |a, b| a.0.total_cmp(&b.0));
            beam = expansions[..keep]
                .iter()
                .map(|&(cost, b, j)| {
                    let from = &beam[b];
                    let mut residual = from.residual.clone();
                    let d = self.delta(i, j);
                    residual[s..e]
                        .iter_mut()
                        .zip(&d[s..e])
                        .for_each(|(r, d)| *r -= d);
                    let mut code = from.code.clone();
                    code[i] = j as u8;
                    let cost = if angle {
                        dot(&residual, &residual)
                    } else {
                        cost
                    };
                    Partial {
                        residual,
                        code,
                        cost,
                    }
                })
                .collect();
        }
        out[..self.m].copy_from_slice(&beam[0].code);
    }

    /// Improves the tables for [`AdditiveCodebooks::encode`]: up to `rounds` rounds of coding
    /// `data` anew and [`AdditiveCodebooks::refit`], each kept only if the data's summed squared
    /// error with its new codes is lower. Returns the rounds kept.
    pub fn refine(&mut self, data: &[f32], rounds: usize) -> usize {
        self.refine_for(data, rounds, Objective::Distance)
    }

    /// [`AdditiveCodebooks::refine`] for [`AdditiveCodebooks::encode_direction`]: `data` holds
    /// unit directions, and a round is kept only if it lowers their summed 1 − cos to their
    /// reconstructions, the error NEQ pays.
    pub fn refine_directions(&mut self, data: &[f32], rounds: usize) -> usize {
        self.refine_for(data, rounds, Objective::Angle)
    }

    /// Why the check. The refit is optimal for the codes it is given, but the encoder then
    /// codes against tables that no longer shrink codebook by codebook as RQ's do, where a
    /// beam of [`BEAM`] can miss the codes the fit assumed; a round that leaves the coded error
    /// higher is dropped, and refining stops there.
    fn refine_for(&mut self, data: &[f32], rounds: usize, objective: Objective) -> usize {
        let mut codes = self.encode_all(data, objective);
        let mut error = self.error(data, &codes, objective);
        for round in 0..rounds {
            let mut next = self.clone();
            next.refit(data, &codes);
            let next_codes = next.encode_all(data, objective);
            let next_error = next.error(data, &next_codes, objective);
            // NaN (non-finite training data) counts as no better.
            if next_error.is_nan() || next_error >= error {
                return round;
            }
            (*self, codes, error) = (next, next_codes, next_error);
        }
        rounds
    }

    fn encode_all(&self, data: &[f32], objective: Objective) -> Vec<u8> {
        use rayon::prelude::*;
        let mut codes = vec![0u8; data.len() / self.dim * self.m];
        codes
            .par_chunks_exact_mut(self.m)
            .zip(data.par_chunks_exact(self.dim))
            .for_each(|(code, x)| self.beam_encode(x, code, objective));
        codes
    }

    /// The summed error of `codes` on `data` under `objective`.
    fn error(&self, data: &[f32], codes: &[u8], objective: Objective) -> f64 {
        use rayon::prelude::*;
        data.par_chunks_exact(self.dim)
            .zip(codes.par_chunks_exact(self.m))
            .map(|(x, code)| {
                let mut out = vec![0f32; self.dim];
                self.decode(code, &mut out);
                match objective {
                    Objective::Distance => f64::from(l2_squared(x, &out)),
                    Objective::Angle => {
                        let len = (dot(x, x) * dot(&out, &out)).sqrt();
                        if len > 0.0 {
                            1.0 - f64::from(dot(x, &out) / len)
                        } else {
                            1.0
                        }
                    }
                }
            })
            .sum()
    }

    /// Refits the deltas to given codes by least squares: with every item's code fixed, the
    /// tables that minimise Σ‖x − base − Σᵢ deltaᵢ[codeᵢ]‖² over `data` (row-major, `dim`
    /// floats per row; `codes` `m` bytes per row), then centres them again.
    ///
    /// Why. k-means fits each codebook to the codes its own training chose, codebook by
    /// codebook; once an encoder picks codes by another rule (NEQ's angle, see
    /// [`AdditiveCodebooks::encode_direction`]) or the beam changes earlier choices, the tables no
    /// longer fit the codes that are used. The joint fit of all tables to the codes actually used
    /// is LSQ's codebook update (Martinez et al., ECCV 2016), FAISS's `Train_refine_codebook`.
    ///
    /// The fit keeps each codebook's support (PQ's slices stay disjoint) and is pulled gently
    /// toward the current tables (a ridge of `REFIT_RIDGE`), which leaves unused entries where
    /// they were and settles the one freedom additive tables have: moving a constant from one
    /// codebook to another. Codebooks whose supports overlap are solved jointly, so RQ's cost
    /// is one Cholesky factorisation of `m·256` unknowns; with more than `REFIT_MAX_JOINT`
    /// overlapping codebooks the tables are left as they are.
    pub fn refit(&mut self, data: &[f32], codes: &[u8]) {
        let (dim, m) = (self.dim, self.m);
        // Columns grouped by the codebooks whose support covers them.
        let mut groups: std::collections::BTreeMap<Vec<usize>, Vec<usize>> = Default::default();
        for c in 0..dim {
            let books: Vec<usize> = (0..m)
                .filter(|&i| (self.support[i].0..self.support[i].1).contains(&c))
                .collect();
            if !books.is_empty() {
                groups.entry(books).or_default().push(c);
            }
        }
        if groups.keys().any(|books| books.len() > REFIT_MAX_JOINT) {
            return;
        }
        for (books, cols) in groups {
            let (k, w) = (books.len() * KS, cols.len());
            // Normal equations (BᵀB + λI)·D = Bᵀ(X − base) + λ·D_now, B the items' one-hot codes.
            let mut a = vec![0f64; k * k];
            let mut rhs = vec![0f64; k * w];
            let mut rows = vec![0usize; books.len()];
            for (x, code) in data.chunks_exact(dim).zip(codes.chunks_exact(m)) {
                for (p, (r, &i)) in rows.iter_mut().zip(&books).enumerate() {
                    *r = p * KS + usize::from(code[i]);
                }
                for &r in &rows {
                    for &s in &rows {
                        a[r * k + s] += 1.0;
                    }
                    for (v, &c) in rhs[r * w..(r + 1) * w].iter_mut().zip(&cols) {
                        *v += f64::from(x[c] - self.base[c]);
                    }
                }
            }
            for (p, &i) in books.iter().enumerate() {
                for j in 0..KS {
                    let r = p * KS + j;
                    a[r * k + r] += REFIT_RIDGE;
                    let now = self.delta(i, j);
                    for (v, &c) in rhs[r * w..(r + 1) * w].iter_mut().zip(&cols) {
                        *v += REFIT_RIDGE * f64::from(now[c]);
                    }
                }
            }
            cholesky_solve(&mut a, &mut rhs, k, w);
            for (p, &i) in books.iter().enumerate() {
                for j in 0..KS {
                    let r = p * KS + j;
                    let start = (i * KS + j) * dim;
                    for (v, &c) in rhs[r * w..(r + 1) * w].iter().zip(&cols) {
                        self.deltas[start + c] = *v as f32;
                    }
                }
            }
        }
        let (mut base, mut deltas) = (
            std::mem::take(&mut self.base),
            std::mem::take(&mut self.deltas),
        );
        Self::centre(dim, m, &mut base, &mut deltas);
        *self = Self::from_tables(dim, m, base, deltas);
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

/// Solves `a·x = rhs` in place for a symmetric positive-definite `a` (`k × k`, row-major) and
/// `w` right-hand sides (`rhs` is `k × w`, row-major): Cholesky, then two triangular solves.
/// `a` is overwritten by its factor.
fn cholesky_solve(a: &mut [f64], rhs: &mut [f64], k: usize, w: usize) {
    for j in 0..k {
        let (done, rest) = a.split_at_mut(j * k);
        let row_j = &mut rest[..k];
        // Row j of L: L[j][i] for i < j, then the diagonal.
        for i in 0..j {
            let row_i = &done[i * k..i * k + k];
            let s: f64 = (0..i).map(|t| row_i[t] * row_j[t]).sum();
            row_j[i] = (row_j[i] - s) / row_i[i];
        }
        let s: f64 = row_j[..j].iter().map(|v| v * v).sum();
        row_j[j] = (row_j[j] - s).max(f64::MIN_POSITIVE).sqrt();
    }
    // L·y = rhs
    for r in 0..k {
        let (done, rest) = rhs.split_at_mut(r * w);
        let row = &mut rest[..w];
        for t in 0..r {
            let l = a[r * k + t];
            if l != 0.0 {
                row.iter_mut()
                    .zip(&done[t * w..t * w + w])
                    .for_each(|(v, y)| *v -= l * y);
            }
        }
        let d = a[r * k + r];
        row.iter_mut().for_each(|v| *v /= d);
    }
    // Lᵀ·x = y
    for r in (0..k).rev() {
        let (head, tail) = rhs.split_at_mut((r + 1) * w);
        let row = &mut head[r * w..];
        for t in r + 1..k {
            let l = a[t * k + r];
            if l != 0.0 {
                row.iter_mut()
                    .zip(&tail[(t - r - 1) * w..(t - r) * w])
                    .for_each(|(v, x)| *v -= l * x);
            }
        }
        let d = a[r * k + r];
        row.iter_mut().for_each(|v| *v /= d);
    }
}
