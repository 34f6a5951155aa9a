//! Kernels over compressed rows: a float query against one byte per coordinate, and the
//! Hamming distance between two bit strings. The store's row codes (`store/codes.rs`) score
//! through these; like the float kernels, they are chosen once per process.
//!
//! Why the query stays in floats against byte codes. Only the stored side is quantized, so a
//! score's error is the row's rounding alone (Qdrant also quantizes the query, which doubles
//! it). The cost is a widening conversion per coordinate, which a graph search hides: it waits
//! on memory, and a 128-d row of bytes is two cache lines instead of eight.

use std::sync::OnceLock;

/// Σ qᵢ·cᵢ for a float query and byte codes.
pub type DotU8 = fn(&[f32], &[u8]) -> f32;

/// Differing bits between two equal-length bit strings.
pub type Hamming = fn(&[u64], &[u64]) -> u32;

/// The code kernels this CPU runs, detected on first use.
#[derive(Clone, Copy)]
pub struct CodeKernels {
    /// Σ qᵢ·cᵢ.
    pub dot_u8: DotU8,
    /// Differing bits.
    pub hamming: Hamming,
}

/// The best code kernels for this CPU.
pub fn code_kernels() -> &'static CodeKernels {
    static CHOSEN: OnceLock<CodeKernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma");
            let popcnt = std::arch::is_x86_feature_detected!("popcnt");
            CodeKernels {
                dot_u8: if avx2 { x86::dot_u8 } else { scalar_dot_u8 },
                hamming: if popcnt { x86::hamming } else { scalar_hamming },
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CodeKernels {
            dot_u8: scalar_dot_u8,
            hamming: scalar_hamming,
        }
    })
}

/// Σ qᵢ·cᵢ over the common prefix, one coordinate at a time: the reference the SIMD kernel
/// is tested against.
pub fn scalar_dot_u8(q: &[f32], codes: &[u8]) -> f32 {
    q.iter().zip(codes).map(|(x, &c)| x * f32::from(c)).sum()
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

    pub(super) fn dot_u8(q: &[f32], codes: &[u8]) -> f32 {
        debug_assert_eq!(q.len(), codes.len());
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2 and FMA.
        unsafe { dot_u8_avx2(q, codes) }
    }

    pub(super) fn hamming(a: &[u64], b: &[u64]) -> u32 {
        debug_assert_eq!(a.len(), b.len());
        // SAFETY: reachable only through `code_kernels()`, which checked POPCNT.
        unsafe { hamming_popcnt(a, b) }
    }

    /// 16 codes per iteration: widened to two 8-lane float vectors, each feeding its own FMA
    /// chain; the tail goes one coordinate at a time.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_u8_avx2(q: &[f32], codes: &[u8]) -> f32 {
        let n = q.len().min(codes.len());
        let (pq, pc) = (q.as_ptr(), codes.as_ptr());
        let mut lo = _mm256_setzero_ps();
        let mut hi = _mm256_setzero_ps();
        let mut i = 0;
        // SAFETY: each iteration reads 16 bytes of codes and 16 floats of the query starting
        // at i with i + 16 ≤ n, inside both slices; unaligned loads need no alignment.
        unsafe {
            while i + 16 <= n {
                let bytes = _mm_loadu_si128(pc.add(i).cast());
                let c0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
                let c1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(bytes)));
                lo = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i)), c0, lo);
                hi = _mm256_fmadd_ps(_mm256_loadu_ps(pq.add(i + 8)), c1, hi);
                i += 16;
            }
        }
        let s = _mm256_add_ps(lo, hi);
        let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
        let mut sum = _mm_cvtss_f32(s);
        for j in i..n {
            sum += q[j] * f32::from(codes[j]);
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
            let q: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
            let c: Vec<u8> = (0..n).map(|i| (i * 97 % 256) as u8).collect();
            let want = scalar_dot_u8(&q, &c);
            let got = (k.dot_u8)(&q, &c);
            assert!((want - got).abs() <= 1e-3 * want.abs().max(1.0), "n {n}");
            let words = n.div_ceil(8);
            let a: Vec<u64> = (0..words as u64)
                .map(|i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect();
            let b: Vec<u64> = (0..words as u64).map(|i: u64| !i << 3).collect();
            assert_eq!((k.hamming)(&a, &b), scalar_hamming(&a, &b));
        }
    }
}
