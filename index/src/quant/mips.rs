//! Plain VQ and NEQ codes of whole vectors, scored against a query by lookup tables.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::{AdditiveCodebooks, CodebookTrainer, Lut, ScalarCodebook, VqKind};
use crate::distance::simd::dot;
use crate::persist::codec::{Decoder, Encoder};
use crate::{IndexError, Result};

/// Which quantizer, with its total codebook count `m` (= bytes per item).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Quantizer {
    /// `m` codebooks of `kind` on the raw vectors.
    Plain {
        /// The vector quantizer.
        kind: VqKind,
        /// Codebooks.
        m: usize,
    },
    /// One byte of relative norm plus `m − 1` codebooks of `kind` on the unit directions.
    Neq {
        /// The direction quantizer.
        kind: VqKind,
        /// Codebooks in all, the norm's included.
        m: usize,
    },
    /// NEQ whose direction codebooks are trained for inner product rather than for the
    /// directions' own error: each item weighs ‖x‖² in training (see [`weighted_directions`]),
    /// and the tables are then refitted to the codes the angle encoder picks
    /// ([`AdditiveCodebooks::refine_directions`]).
    NeqIp {
        /// The direction quantizer.
        kind: VqKind,
        /// Codebooks in all, the norm's included.
        m: usize,
    },
}

impl Quantizer {
    /// The vector quantizer.
    pub fn kind(self) -> VqKind {
        match self {
            Quantizer::Plain { kind, .. }
            | Quantizer::Neq { kind, .. }
            | Quantizer::NeqIp { kind, .. } => kind,
        }
    }

    /// Bytes per item.
    pub fn m(self) -> usize {
        match self {
            Quantizer::Plain { m, .. } | Quantizer::Neq { m, .. } | Quantizer::NeqIp { m, .. } => m,
        }
    }

    /// Whether one byte goes to the relative norm (both NEQs).
    pub fn norm_explicit(self) -> bool {
        match self {
            Quantizer::Plain { .. } => false,
            Quantizer::Neq { .. } | Quantizer::NeqIp { .. } => true,
        }
    }

    /// Codebooks of the vector quantizer.
    fn vq_books(self) -> usize {
        if self.norm_explicit() {
            self.m() - 1
        } else {
            self.m()
        }
    }

    /// A short name for reports, e.g. `neq-pq4`.
    pub fn label(self) -> String {
        match self {
            Quantizer::Plain { kind, m } => format!("{}{m}", kind.name()),
            Quantizer::Neq { kind, m } => format!("neq-{}{m}", kind.name()),
            Quantizer::NeqIp { kind, m } => format!("neq-ip-{}{m}", kind.name()),
        }
    }

    /// The quantizer's type and its vector quantizer as the index files' two tag bytes.
    pub(crate) fn tags(self) -> (u8, u8) {
        let tag = match self {
            Quantizer::Plain { .. } => 0,
            Quantizer::Neq { .. } => 1,
            Quantizer::NeqIp { .. } => 2,
        };
        let kind = match self.kind() {
            VqKind::Pq => 0,
            VqKind::Opq => 1,
            VqKind::Rq => 2,
        };
        (tag, kind)
    }

    /// Inverse of [`Quantizer::tags`], with the codebook count.
    pub(crate) fn from_tags(tag: u8, kind: u8, m: usize) -> Result<Self> {
        let kind = match kind {
            0 => VqKind::Pq,
            1 => VqKind::Opq,
            2 => VqKind::Rq,
            _ => return Err(IndexError::corrupt("unknown vector quantizer")),
        };
        let quantizer = match tag {
            0 => Quantizer::Plain { kind, m },
            1 => Quantizer::Neq { kind, m },
            2 => Quantizer::NeqIp { kind, m },
            _ => return Err(IndexError::corrupt("unknown quantizer")),
        };
        quantizer
            .validate()
            .map_err(|e| IndexError::corrupt(e.to_string()))?;
        Ok(quantizer)
    }

    fn validate(self) -> Result<()> {
        let least = if self.norm_explicit() { 2 } else { 1 };
        if !(least..=256).contains(&self.m()) {
            return Err(IndexError::InvalidParams(format!(
                "{} needs between {least} and 256 codebooks, got {}",
                self.label(),
                self.m()
            )));
        }
        Ok(())
    }
}

/// The most rounds of [`AdditiveCodebooks::refine_directions`] in NEQ-IP's training.
const NEQ_IP_REFITS: usize = 2;

/// A trained plain-VQ or NEQ codec over `dim`-float vectors.
#[derive(Debug, Clone, PartialEq)]
pub struct MipsCodec {
    quantizer: Quantizer,
    dim: usize,
    /// The vector quantizer's dimension: `dim` padded with zeros to a multiple of its codebook
    /// count for PQ and OPQ.
    padded: usize,
    books: AdditiveCodebooks,
    /// NEQ's relative-norm codebook.
    norms: Option<ScalarCodebook>,
}

/// A query's tables for one codec.
pub struct QueryTables(Lut);

fn pad(x: &[f32], padded: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(padded);
    out.extend_from_slice(x);
    out.resize(padded, 0.0);
    out
}

/// `x / ‖x‖` padded, and `‖x‖`; a zero vector is its own direction.
fn direction(x: &[f32], padded: usize) -> (Vec<f32>, f32) {
    let norm = dot(x, x).max(0.0).sqrt();
    let mut u = pad(x, padded);
    if norm > 0.0 {
        u.iter_mut().for_each(|v| *v /= norm);
    }
    (u, norm)
}

impl MipsCodec {
    /// Trains the codec on row-major `data` (every row, or a sample of them).
    pub fn train(
        quantizer: Quantizer,
        dim: usize,
        data: &[f32],
        trainer: &dyn CodebookTrainer,
    ) -> Result<Self> {
        quantizer.validate()?;
        if dim == 0 || data.is_empty() || !data.len().is_multiple_of(dim) {
            return Err(IndexError::InvalidParams(format!(
                "training data must be whole rows of {dim} floats"
            )));
        }
        let books_n = quantizer.vq_books();
        let padded = match quantizer.kind() {
            VqKind::Pq | VqKind::Opq => dim.div_ceil(books_n) * books_n,
            VqKind::Rq => dim,
        };
        match quantizer {
            Quantizer::Plain { kind, m } => {
                let padded_data: Vec<f32> = data
                    .chunks_exact(dim)
                    .flat_map(|x| pad(x, padded))
                    .collect();
                let books = trainer.train(kind, padded, m, &padded_data)?;
                Ok(Self {
                    quantizer,
                    dim,
                    padded,
                    books,
                    norms: None,
                })
            }
            Quantizer::Neq { kind, m } | Quantizer::NeqIp { kind, m } => {
                let split: Vec<(Vec<f32>, f32)> = data
                    .par_chunks_exact(dim)
                    .map(|x| direction(x, padded))
                    .collect();
                let directions: Vec<f32> = if matches!(quantizer, Quantizer::NeqIp { .. }) {
                    weighted_directions(&split)
                } else {
                    split.iter().flat_map(|(u, _)| u.iter().copied()).collect()
                };
                let mut books = trainer.train(kind, padded, m - 1, &directions)?;
                if matches!(quantizer, Quantizer::NeqIp { .. }) {
                    // Fit the tables to the codes NEQ uses: FAISS trained them for the
                    // nearest code, NEQ picks the last codebook by angle.
                    books.refine_directions(&directions, NEQ_IP_REFITS);
                }
                let relative: Vec<f32> = split
                    .par_iter()
                    .map(|(u, norm)| {
                        let mut code = vec![0u8; m - 1];
                        books.encode_direction(u, &mut code);
                        relative_norm(&books, &code, *norm)
                    })
                    .collect();
                Ok(Self {
                    quantizer,
                    dim,
                    padded,
                    books,
                    norms: Some(ScalarCodebook::train(&relative, 20)),
                })
            }
        }
    }

    /// The quantizer.
    pub fn quantizer(&self) -> Quantizer {
        self.quantizer
    }

    /// Bytes per item.
    pub fn code_size(&self) -> usize {
        self.quantizer.m()
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Codes row-major `data`, `code_size` bytes per row (in parallel).
    pub fn encode(&self, data: &[f32]) -> Vec<u8> {
        let m = self.code_size();
        let mut codes = vec![0u8; data.len() / self.dim * m];
        codes
            .par_chunks_exact_mut(m)
            .zip(data.par_chunks_exact(self.dim))
            .for_each(|(code, x)| self.encode_one(x, code));
        codes
    }

    fn encode_one(&self, x: &[f32], code: &mut [u8]) {
        match &self.norms {
            None => self.books.encode(&pad(x, self.padded), code),
            Some(norms) => {
                let (u, norm) = direction(x, self.padded);
                self.books.encode_direction(&u, &mut code[1..]);
                code[0] = norms.encode(relative_norm(&self.books, &code[1..], norm));
            }
        }
    }

    /// The reconstruction of `code` (`dim` floats).
    pub fn decode(&self, code: &[u8]) -> Vec<f32> {
        let mut out = vec![0f32; self.padded];
        match &self.norms {
            None => self.books.decode(code, &mut out),
            Some(norms) => {
                self.books.decode(&code[1..], &mut out);
                let r = norms.decode(code[0]);
                out.iter_mut().for_each(|v| *v *= r);
            }
        }
        out.truncate(self.dim);
        out
    }

    /// The lookup tables of query `q`.
    pub fn tables(&self, q: &[f32]) -> QueryTables {
        QueryTables(self.books.lut(&pad(q, self.padded)))
    }

    /// The estimated inner product of the query with the item coded `code`.
    #[inline]
    pub fn score(&self, tables: &QueryTables, code: &[u8]) -> f32 {
        match &self.norms {
            None => tables.0.score(code),
            Some(norms) => norms.decode(code[0]) * tables.0.score(&code[1..]),
        }
    }

    /// Serialises the codec.
    pub fn write(&self, e: &mut Encoder<'_>) {
        let (tag, kind) = self.quantizer.tags();
        e.u8(tag);
        e.u8(kind);
        e.u64(self.quantizer.m() as u64);
        e.u64(self.dim as u64);
        e.u64(self.padded as u64);
        self.books.write(e);
        if let Some(norms) = &self.norms {
            norms.write(e);
        }
    }

    /// Inverse of [`MipsCodec::write`].
    pub fn read(d: &mut Decoder<'_>) -> Result<Self> {
        let (tag, kind) = (d.u8()?, d.u8()?);
        let quantizer = Quantizer::from_tags(tag, kind, d.usize()?)?;
        let dim = d.usize()?;
        let padded = d.usize()?;
        let books = AdditiveCodebooks::read(d)?;
        if dim == 0 || padded < dim || books.dim() != padded || books.m() != quantizer.vq_books() {
            return Err(IndexError::corrupt(
                "codec sizes do not match its quantizer",
            ));
        }
        let norms = if quantizer.norm_explicit() {
            Some(ScalarCodebook::read(d)?)
        } else {
            None
        };
        Ok(Self {
            quantizer,
            dim,
            padded,
            books,
            norms,
        })
    }
}

/// The training directions of [`Quantizer::NeqIp`]: as many as there are items, each item's
/// direction repeated in proportion to ‖x‖² (systematic resampling, so no randomness).
///
/// Why ‖x‖². NEQ scores an item as r̂·⟨q, û⟩ with r̂ ≈ ‖x‖, so a direction error e costs the
/// score ‖x‖·⟨q, e⟩, whose square over random query directions is ∝ ‖x‖²·‖e‖². The direction
/// codebooks that minimise the summed inner-product error are k-means on the directions
/// weighted by ‖x‖²; repeating items stands in for weights, which the trainer does not take.
/// Plain NEQ weighs every direction alike and spends its centroids where most items point,
/// though MIPS answers are the large-norm items (issue #26: on movielens-mips it lost to plain
/// PQ, whose k-means on raw vectors weighs the large norms by itself).
pub(super) fn weighted_directions(split: &[(Vec<f32>, f32)]) -> Vec<f32> {
    let total: f64 = split.iter().map(|(_, n)| f64::from(*n).powi(2)).sum();
    if total.is_nan() || total <= 0.0 {
        return split.iter().flat_map(|(u, _)| u.iter().copied()).collect();
    }
    let step = total / split.len() as f64;
    let mut out = Vec::with_capacity(split.iter().map(|(u, _)| u.len()).sum());
    // The j-th draw lands at (j + ½)·step along the cumulative weights.
    let (mut next, mut cumulative) = (0.5 * step, 0.0);
    for (u, norm) in split {
        cumulative += f64::from(*norm).powi(2);
        while next < cumulative {
            out.extend_from_slice(u);
            next += step;
        }
    }
    out
}

/// ‖x‖ / ‖û‖ for a direction code; 0 when the direction decodes to zero.
fn relative_norm(books: &AdditiveCodebooks, code: &[u8], norm: f32) -> f32 {
    let mut u_hat = vec![0f32; books.dim()];
    books.decode(code, &mut u_hat);
    let len = dot(&u_hat, &u_hat).max(0.0).sqrt();
    if len > 0.0 {
        norm / len
    } else {
        0.0
    }
}
