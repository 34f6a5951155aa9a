//! Kernels over compressed rows: a query in 16-bit integers against one byte per
//! coordinate, and the Hamming distance between two bit strings. The store's row codes
//! (`store/codes.rs`) score through these; like the float kernels, they are chosen once per
//! process.
//!
//! Why 16 bits for the query. Qdrant quantizes the query to bytes like the rows, which
//! doubles a score's rounding error. A query scaled to 16-bit integers rounds by one part in
//! 16,383 at most, far below the rows' one part in 255, and keeps the arithmetic in integers:
//! `madd` multiplies 16 pairs and adds them into 8 sums per instruction, where widening the
//! bytes to floats took twice the instructions (with floats int8 ran 0.79–1.66× the full-row
//! search on the codes bench, with this kernel and its four-row form 0.99–2.01×; BENCHMARKS.md).

use std::sync::OnceLock;

/// Σ qᵢ·cᵢ for a 16-bit query and byte codes. The caller bounds |qᵢ| so that the sum fits
/// an `i32` ([`max_query_magnitude`]).
pub type DotU8 = fn(&[i16], &[u8]) -> i32;

/// The largest |qᵢ| a query of `dim` coordinates may have for [`DotU8`]'s sum to fit an
/// `i32` whatever the codes: 16,383 up to 514 dimensions, less beyond.
pub fn max_query_magnitude(dim: usize) -> i32 {
    let bound = i32::MAX as usize / (255 * dim.max(1));
    bound.min(16_383) as i32
}

/// [`DotU8`] from one query to four rows at once: the query is loaded once per four rows
/// and the four sums are independent chains (the float kernels' four-row form).
pub type DotU8x4 = fn(&[i16], [&[u8]; 4]) -> [i32; 4];

/// Differing bits between two equal-length bit strings.
pub type Hamming = fn(&[u64], &[u64]) -> u32;

/// The code kernels this CPU runs, detected on first use.
#[derive(Clone, Copy)]
pub struct CodeKernels {
    /// Σ qᵢ·cᵢ.
    pub dot_u8: DotU8,
    /// Σ qᵢ·cᵢ for four rows.
    pub dot_u8x4: DotU8x4,
    /// Differing bits.
    pub hamming: Hamming,
}

/// The best code kernels for this CPU.
pub fn code_kernels() -> &'static CodeKernels {
    static CHOSEN: OnceLock<CodeKernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2");
            let popcnt = std::arch::is_x86_feature_detected!("popcnt");
            CodeKernels {
                dot_u8: if avx2 { x86::dot_u8 } else { scalar_dot_u8 },
                dot_u8x4: if avx2 { x86::dot_u8x4 } else { scalar_dot_u8x4 },
                hamming: if popcnt { x86::hamming } else { scalar_hamming },
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CodeKernels {
            dot_u8: scalar_dot_u8,
            dot_u8x4: scalar_dot_u8x4,
            hamming: scalar_hamming,
        }
    })
}

/// Σ qᵢ·cᵢ over the common prefix, one coordinate at a time: the reference the SIMD kernel
/// is tested against.
pub fn scalar_dot_u8(q: &[i16], codes: &[u8]) -> i32 {
    q.iter()
        .zip(codes)
        .map(|(&x, &c)| i32::from(x) * i32::from(c))
        .sum()
}

/// [`scalar_dot_u8`] for four rows.
pub fn scalar_dot_u8x4(q: &[i16], rows: [&[u8]; 4]) -> [i32; 4] {
    rows.map(|codes| scalar_dot_u8(q, codes))
}

/// Differing bits over the common prefix, without the POPCNT instruction.
pub fn scalar_hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    // The safe wrappers are only handed out by `code_kernels()` after the CPU reported the
    // features their `target_feature` functions use, which is what makes the calls sound.

    pub(super) fn dot_u8(q: &[i16], codes: &[u8]) -> i32 {
        debug_assert_eq!(q.len(), codes.len());
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2.
        unsafe { dot_u8_avx2(q, codes) }
    }

    pub(super) fn dot_u8x4(q: &[i16], rows: [&[u8]; 4]) -> [i32; 4] {
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2.
        unsafe { dot_u8x4_avx2(q, rows) }
    }

    pub(super) fn hamming(a: &[u64], b: &[u64]) -> u32 {
        debug_assert_eq!(a.len(), b.len());
        // SAFETY: reachable only through `code_kernels()`, which checked POPCNT.
        unsafe { hamming_popcnt(a, b) }
    }

    /// [`dot_u8_avx2`] for four rows: each 16 query values are loaded once and feed four
    /// `madd` chains, one per row.
    #[target_feature(enable = "avx2")]
    unsafe fn dot_u8x4_avx2(q: &[i16], rows: [&[u8]; 4]) -> [i32; 4] {
        let n = rows.iter().fold(q.len(), |n, r| n.min(r.len()));
        let pq = q.as_ptr();
        let pr = rows.map(<[u8]>::as_ptr);
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut i = 0;
        // SAFETY: each load reads 16 query values or 16 codes of a row starting at i with
        // i + 16 ≤ n, inside the query and all four rows; unaligned loads need no alignment.
        unsafe {
            while i + 16 <= n {
                let qv = _mm256_loadu_si256(pq.add(i).cast());
                for j in 0..4 {
                    let c = _mm256_cvtepu8_epi16(_mm_loadu_si128(pr[j].add(i).cast()));
                    acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(c, qv));
                }
                i += 16;
            }
        }
        // Horizontal sums of the four rows at once: after the two `hadd`s lane j holds half
        // of row j's sum and lane 4 + j the other half.
        let h01 = _mm256_hadd_epi32(acc[0], acc[1]);
        let h23 = _mm256_hadd_epi32(acc[2], acc[3]);
        let h = _mm256_hadd_epi32(h01, h23);
        let sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h));
        let mut out = [0i32; 4];
        // SAFETY: `out` holds exactly the four i32s an unaligned 128-bit store writes.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), sums) };
        for (j, row) in rows.iter().enumerate() {
            for k in i..n {
                out[j] += i32::from(q[k]) * i32::from(row[k]);
            }
        }
        out
    }

    /// 32 codes per iteration: each 16 widened to 16-bit lanes and multiplied with the
    /// query's by `madd`, which adds neighbouring products into 8 32-bit sums; two chains.
    #[target_feature(enable = "avx2")]
    unsafe fn dot_u8_avx2(q: &[i16], codes: &[u8]) -> i32 {
        let n = q.len().min(codes.len());
        let (pq, pc) = (q.as_ptr(), codes.as_ptr());
        let mut acc0 = _mm256_setzero_si256();
        let mut acc1 = _mm256_setzero_si256();
        let mut i = 0;
        // SAFETY: each load reads 16 codes or 16 query values starting at i with i + 16 ≤ n
        // (i + 32 ≤ n in the first loop), inside both slices; unaligned loads need no
        // alignment.
        unsafe {
            while i + 32 <= n {
                let c0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(pc.add(i).cast()));
                let c1 = _mm256_cvtepu8_epi16(_mm_loadu_si128(pc.add(i + 16).cast()));
                let q0 = _mm256_loadu_si256(pq.add(i).cast());
                let q1 = _mm256_loadu_si256(pq.add(i + 16).cast());
                acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(c0, q0));
                acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(c1, q1));
                i += 32;
            }
            if i + 16 <= n {
                let c0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(pc.add(i).cast()));
                let q0 = _mm256_loadu_si256(pq.add(i).cast());
                acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(c0, q0));
                i += 16;
            }
        }
        let s = _mm256_add_epi32(acc0, acc1);
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        let mut sum = _mm_cvtsi128_si32(s);
        for j in i..n {
            sum += i32::from(q[j]) * i32::from(codes[j]);
        }
        sum
    }

    #[target_feature(enable = "popcnt")]
    unsafe fn hamming_popcnt(a: &[u64], b: &[u64]) -> u32 {
        a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_kernels_agree_with_the_scalar_ones_at_every_length() {
        let k = code_kernels();
        for n in 0..70usize {
            let top = max_query_magnitude(n) as f32;
            let q: Vec<i16> = (0..n)
                .map(|i| ((i as f32 * 0.37).sin() * top) as i16)
                .collect();
            let c: Vec<u8> = (0..n).map(|i| (i * 97 % 256) as u8).collect();
            assert_eq!((k.dot_u8)(&q, &c), scalar_dot_u8(&q, &c), "n {n}");
            let rows: Vec<Vec<u8>> = (0..4u8)
                .map(|r| c.iter().map(|x| x.wrapping_mul(r + 3)).collect())
                .collect();
            let four = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
            assert_eq!((k.dot_u8x4)(&q, four), scalar_dot_u8x4(&q, four), "n {n}");
            let words = n.div_ceil(8);
            let a: Vec<u64> = (0..words as u64)
                .map(|i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect();
            let b: Vec<u64> = (0..words as u64).map(|i: u64| !i << 3).collect();
            assert_eq!((k.hamming)(&a, &b), scalar_hamming(&a, &b));
        }
    }
}
