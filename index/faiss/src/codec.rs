//! Vector codecs trained by FAISS: product quantization (PQ), PQ after an optimised rotation
//! (OPQ) and residual quantization (RQ), each with `m` codebooks of 256 entries, so one
//! vector costs `m` bytes. They are the direction codecs that norm-explicit quantization
//! (NEQ, PAPERS.md §3) wraps, and its plain baselines.

use faiss::index::IndexImpl;
use faiss::{index_factory, Index, MetricType};

use crate::{check, rows, to_u32, FaissError, Result};

pub use cairn_index::quant::VqKind;

/// The FAISS factory string for `m` one-byte codebooks of `kind`.
fn factory(kind: VqKind, m: usize) -> String {
    match kind {
        VqKind::Pq => format!("PQ{m}x8"),
        VqKind::Opq => format!("OPQ{m},PQ{m}x8"),
        VqKind::Rq => format!("RQ{m}x8"),
    }
}

/// A trained codec. Encoding and decoding take `&self` and may run from several threads.
pub struct VqCodec {
    index: IndexImpl,
    kind: VqKind,
    dim: usize,
    code_size: usize,
}

impl VqCodec {
    /// Trains a codec of `m` one-byte codebooks on `data` (row-major, `dim` floats per row).
    /// FAISS wants at least 256 training rows per codebook; fewer train a poorer codec.
    pub fn train(kind: VqKind, dim: usize, m: usize, data: &[f32]) -> Result<Self> {
        let n = rows(data, dim)?;
        if m == 0 || (matches!(kind, VqKind::Pq | VqKind::Opq) && !dim.is_multiple_of(m)) {
            return Err(FaissError::InvalidParams(format!(
                "{kind:?} with {m} codebooks needs m ≥ 1 dividing the dimension {dim}"
            )));
        }
        if n < 256 {
            return Err(FaissError::InvalidParams(format!(
                "a codec of 256-entry codebooks needs at least 256 training vectors, got {n}"
            )));
        }
        let mut index = index_factory(to_u32(dim)?, factory(kind, m), MetricType::L2)?;
        index.train(data)?;
        let mut code_size = 0usize;
        // SAFETY: `index` is a live, trained FAISS index; FAISS writes one `usize`.
        check(unsafe { faiss_sys::faiss_Index_sa_code_size(index.inner_ptr(), &mut code_size) })?;
        Ok(Self {
            index,
            kind,
            dim,
            code_size,
        })
    }

    /// The quantizer.
    pub fn kind(&self) -> VqKind {
        self.kind
    }

    /// Bytes per encoded vector (`m` for `m` one-byte codebooks).
    pub fn code_size(&self) -> usize {
        self.code_size
    }

    /// Encodes row-major vectors into `code_size` bytes each.
    pub fn encode(&self, data: &[f32]) -> Result<Vec<u8>> {
        let n = rows(data, self.dim)?;
        let mut codes = vec![0u8; n * self.code_size];
        // SAFETY: `data` holds `n` rows of `dim` floats and `codes` has room for `n` codes of
        // `code_size` bytes, the sizes `sa_encode` reads and writes. The index is trained and
        // `sa_encode` is const, so concurrent calls through `&self` are allowed.
        check(unsafe {
            faiss_sys::faiss_Index_sa_encode(
                self.index.inner_ptr(),
                n as faiss_sys::idx_t,
                data.as_ptr(),
                codes.as_mut_ptr(),
            )
        })?;
        Ok(codes)
    }

    /// Decodes codes back into row-major vectors (the codec's reconstruction).
    pub fn decode(&self, codes: &[u8]) -> Result<Vec<f32>> {
        if self.code_size == 0 || !codes.len().is_multiple_of(self.code_size) {
            return Err(FaissError::WrongCodeSize {
                code_size: self.code_size,
                len: codes.len(),
            });
        }
        let n = codes.len() / self.code_size;
        let mut out = vec![0f32; n * self.dim];
        // SAFETY: `codes` holds `n` whole codes and `out` has room for `n` rows of `dim`
        // floats, the sizes `sa_decode` reads and writes; `sa_decode` is const.
        check(unsafe {
            faiss_sys::faiss_Index_sa_decode(
                self.index.inner_ptr(),
                n as faiss_sys::idx_t,
                codes.as_ptr(),
                out.as_mut_ptr(),
            )
        })?;
        Ok(out)
    }
}

/// FAISS as `cairn-index`'s trainer. Here: NEQ's and plain VQ's codebooks, handed over in
/// additive form (read off the FAISS decoder, which that form checks to be additive); in
/// [`crate::kmeans`]: Pyramid's routing centres.
#[derive(Debug, Clone, Copy, Default)]
pub struct FaissTrainer;

impl cairn_index::quant::CodebookTrainer for FaissTrainer {
    fn train(
        &self,
        kind: VqKind,
        dim: usize,
        m: usize,
        data: &[f32],
    ) -> cairn_index::Result<cairn_index::quant::AdditiveCodebooks> {
        let codec = VqCodec::train(kind, dim, m, data).map_err(invalid_params)?;
        additive_form(&codec, dim, m)
    }
}

fn invalid_params(e: FaissError) -> cairn_index::IndexError {
    cairn_index::IndexError::InvalidParams(e.to_string())
}

/// The additive codebooks of a trained FAISS codec of `m` bytes per `dim`-float row, read off
/// its decoder (`from_decoder` checks on random codes that the codec is additive).
fn additive_form(
    codec: &VqCodec,
    dim: usize,
    m: usize,
) -> cairn_index::Result<cairn_index::quant::AdditiveCodebooks> {
    cairn_index::quant::AdditiveCodebooks::from_decoder(dim, m, &|codes: &[u8]| {
        codec.decode(codes).map_err(invalid_params)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded data with structure: 16 random centres plus small noise, 32 dims.
    fn data(n: usize, dim: usize) -> Vec<f32> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let centres: Vec<f32> = (0..16 * dim).map(|_| 4.0 * next()).collect();
        (0..n)
            .flat_map(|i| {
                let c = &centres[(i % 16) * dim..(i % 16 + 1) * dim];
                c.iter().map(|x| x + 0.3 * next()).collect::<Vec<_>>()
            })
            .collect()
    }

    fn mse(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() / a.len() as f32
    }

    #[test]
    fn every_codec_codes_m_bytes_and_reconstructs_far_better_than_zero() {
        let (dim, m) = (32, 8);
        let train = data(4000, dim);
        let test = &train[..200 * dim];
        let energy = mse(test, &vec![0.0; test.len()]);
        for kind in [VqKind::Pq, VqKind::Opq, VqKind::Rq] {
            let codec = VqCodec::train(kind, dim, m, &train).unwrap();
            assert_eq!(codec.code_size(), m, "{kind:?}");
            let codes = codec.encode(test).unwrap();
            assert_eq!(codes.len(), 200 * m);
            let back = codec.decode(&codes).unwrap();
            let err = mse(test, &back);
            assert!(
                err < energy / 20.0,
                "{kind:?}: mse {err} vs energy {energy}"
            );
        }
    }

    #[test]
    fn faiss_codebooks_have_an_additive_form_that_encodes_like_faiss() {
        let (dim, m) = (32, 4);
        let train = data(4000, dim);
        let test = &train[..100 * dim];
        for kind in [VqKind::Pq, VqKind::Opq, VqKind::Rq] {
            // The additive form of this very codec, as `FaissTrainer` reads it off. Not a
            // second training: FAISS's seeded k-means trains alike twice on some CPUs and not
            // on others (its RQ differed by 0.2% in coded error on an Intel Xeon with AVX-512).
            let codec = VqCodec::train(kind, dim, m, &train).unwrap();
            let books = additive_form(&codec, dim, m).unwrap();
            let faiss_codes = codec.encode(test).unwrap();
            let mut ours = vec![0u8; m];
            let mut back = vec![0f32; dim];
            let (mut err_ours, mut err_faiss) = (0f32, 0f32);
            let faiss_back = codec.decode(&faiss_codes).unwrap();
            let mut differing = 0;
            let rows = test.chunks_exact(dim).zip(faiss_back.chunks_exact(dim));
            for ((x, theirs), faiss_code) in rows.zip(faiss_codes.chunks_exact(m)) {
                books.encode(x, &mut ours);
                books.decode(&ours, &mut back);
                err_ours += mse(x, &back);
                err_faiss += mse(x, theirs);
                differing += usize::from(ours[..] != faiss_code[..]);
            }
            // PQ and OPQ: the encoding is exact. RQ: the same beam search as FAISS's, so the
            // same codes but where two of the beam's candidates are so near that rounding
            // ranks them apart: one vector of the 100 on an Intel Xeon, where FAISS scores
            // with AVX-512 kernels (0.2% more coded error in all). The greedy encoder over
            // uncentred tables that this replaced was 44% worse here.
            assert!(
                differing <= 3,
                "{kind:?}: {differing} of 100 codes differ from FAISS's"
            );
            assert!(
                err_ours <= err_faiss * 1.005,
                "{kind:?}: ours {err_ours} vs faiss {err_faiss}"
            );
        }
    }

    #[test]
    fn bad_shapes_are_errors_not_crashes() {
        let train = data(512, 30);
        assert!(VqCodec::train(VqKind::Pq, 30, 8, &train).is_err());
        let codec = VqCodec::train(VqKind::Pq, 30, 5, &train).unwrap();
        assert!(codec.encode(&[1.0; 31]).is_err());
        assert!(codec.decode(&[1; 7]).is_err());
    }
}
