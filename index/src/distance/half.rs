//! Kernels from a float query to rows of IEEE half-precision floats (f16, stored as `u16`),
//! and the conversions both ways: what a graph build scores by when it keeps a half copy of
//! the rows (`store/half.rs`).
//!
//! Why half floats. A bulk HNSW build spends most of its time in its layer searches, and at
//! a million rows those wait on memory: each scored neighbour is a 512-byte row at 128
//! dimensions, eight cache lines fetched at random, more than the core's miss buffers hold
//! for a whole neighbour list. A half row is four lines. Its 11 significant bits put a
//! coordinate within one part in 2,048 of the float, which changes which links a node keeps
//! by at most a near-tie, and F16C widens eight halves to floats in one instruction, so the
//! arithmetic stays the float kernels' (`simd.rs`).
//!
//! Only x86-64 with AVX2, FMA and F16C gets these kernels ([`half_kernels`] is `None`
//! elsewhere, and builds then score the float rows).

use std::sync::OnceLock;

/// A key from a float query to one half row.
pub type HalfKernel = fn(&[f32], &[u16]) -> f32;

/// The same from one query to four half rows at once (see [`super::simd::Kernel4`]).
pub type HalfKernel4 = fn(&[f32], [&[u16]; 4]) -> [f32; 4];

/// The half-row kernels of this CPU.
#[derive(Clone, Copy)]
pub struct HalfKernels {
    /// −⟨q, r⟩.
    pub neg_dot: HalfKernel,
    /// ‖q − r‖².
    pub l2_squared: HalfKernel,
    /// −⟨q, rᵢ⟩ for four rows.
    pub neg_dot4: HalfKernel4,
    /// ‖q − rᵢ‖² for four rows.
    pub l2_squared4: HalfKernel4,
    /// Rounds floats to the nearest half (saturating nothing: the caller keeps them in range).
    pub to_half: fn(&[f32], &mut [u16]),
    /// Widens halves to floats (exact).
    pub to_f32: fn(&[u16], &mut [f32]),
}

/// The largest finite half float.
pub const HALF_MAX: f32 = 65_504.0;

/// The half-row kernels, if this CPU has AVX2, FMA and F16C; detected on first use.
pub fn half_kernels() -> Option<&'static HalfKernels> {
    static CHOSEN: OnceLock<Option<HalfKernels>> = OnceLock::new();
    CHOSEN.get_or_init(detect).as_ref()
}

fn detect() -> Option<HalfKernels> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            return Some(HalfKernels {
                neg_dot: x86::neg_dot,
                l2_squared: x86::l2_squared,
                neg_dot4: x86::neg_dot4,
                l2_squared4: x86::l2_squared4,
                to_half: x86::to_half,
                to_f32: x86::to_f32,
            });
        }
    }
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::distance::simd::avx2::{horizontal_sum, step};

    // The safe wrappers below are only handed out by `detect()` after the CPU reported AVX2,
    // FMA and F16C, which is what makes calling the `target_feature` functions sound.

    pub(super) fn neg_dot(q: &[f32], r: &[u16]) -> f32 {
        // SAFETY: reachable only through `detect()`, which checked AVX2, FMA and F16C.
        -unsafe { sum::<false>(q, r) }
    }

    pub(super) fn l2_squared(q: &[f32], r: &[u16]) -> f32 {
        // SAFETY: as in `neg_dot`.
        unsafe { sum::<true>(q, r) }
    }

    pub(super) fn neg_dot4(q: &[f32], rows: [&[u16]; 4]) -> [f32; 4] {
        // SAFETY: as in `neg_dot`.
        unsafe { sum4::<false>(q, rows) }.map(|s| -s)
    }

    pub(super) fn l2_squared4(q: &[f32], rows: [&[u16]; 4]) -> [f32; 4] {
        // SAFETY: as in `neg_dot`.
        unsafe { sum4::<true>(q, rows) }
    }

    pub(super) fn to_half(x: &[f32], out: &mut [u16]) {
        // SAFETY: as in `neg_dot`.
        unsafe { convert_to_half(x, out) }
    }

    pub(super) fn to_f32(h: &[u16], out: &mut [f32]) {
        // SAFETY: as in `neg_dot`.
        unsafe { convert_to_f32(h, out) }
    }

    /// Eight halves from `p`, widened to floats.
    ///
    /// # Safety
    /// `p` must point at eight readable `u16`s; the CPU must have F16C.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8(p: *const u16) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`; the load is unaligned.
        _mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) })
    }

    /// The last `rest` < 8 lanes of a query and a half row, zero-padded to eight (zero lanes
    /// add nothing to either sum).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn tail(q: &[f32], r: &[u16]) -> (__m256, __m256) {
        let (mut qs, mut rs) = ([0f32; 8], [0u16; 8]);
        qs[..q.len()].copy_from_slice(q);
        rs[..r.len()].copy_from_slice(r);
        // SAFETY: both arrays hold eight elements.
        unsafe { (_mm256_loadu_ps(qs.as_ptr()), load8(rs.as_ptr())) }
    }

    /// Σ qᵢrᵢ, or Σ (qᵢ − rᵢ)² when `L2`, with four accumulators (the float kernel's shape).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn sum<const L2: bool>(q: &[f32], r: &[u16]) -> f32 {
        debug_assert_eq!(q.len(), r.len());
        let n = q.len().min(r.len());
        let (pq, pr) = (q.as_ptr(), r.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 8 elements starting at an index + 8 ≤ n, inside both
        // slices; the tail goes through padded copies.
        unsafe {
            while i + 32 <= n {
                for (j, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_ps(pq.add(i + 8 * j));
                    *acc = step::<L2>(*acc, x, load8(pr.add(i + 8 * j)));
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = step::<L2>(acc[0], _mm256_loadu_ps(pq.add(i)), load8(pr.add(i)));
                i += 8;
            }
        }
        if i < n {
            let (x, y) = tail(&q[i..n], &r[i..n]);
            acc[1] = step::<L2>(acc[1], x, y);
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        horizontal_sum(s)
    }

    /// [`sum`] from `q` to four rows: each 8-float slice of the query feeds four
    /// independent chains.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn sum4<const L2: bool>(q: &[f32], rows: [&[u16]; 4]) -> [f32; 4] {
        let n = rows.iter().fold(q.len(), |n, r| n.min(r.len()));
        let pq = q.as_ptr();
        let pr = rows.map(<[u16]>::as_ptr);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        // SAFETY: every load reads 8 elements starting at an index + 8 ≤ n, inside the query
        // and all four rows; the tail goes through padded copies.
        unsafe {
            while i + 8 <= n {
                let x = _mm256_loadu_ps(pq.add(i));
                for j in 0..4 {
                    acc[j] = step::<L2>(acc[j], x, load8(pr[j].add(i)));
                }
                i += 8;
            }
        }
        if i < n {
            for j in 0..4 {
                let (x, y) = tail(&q[i..n], &rows[j][i..n]);
                acc[j] = step::<L2>(acc[j], x, y);
            }
        }
        let mut out = [0f32; 4];
        for j in 0..4 {
            out[j] = horizontal_sum(acc[j]);
        }
        out
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn convert_to_half(x: &[f32], out: &mut [u16]) {
        let n = x.len().min(out.len());
        let mut i = 0;
        // SAFETY: every load and store touches 8 elements starting at an index + 8 ≤ n.
        unsafe {
            while i + 8 <= n {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(
                    x.as_ptr().add(i),
                ));
                _mm_storeu_si128(out.as_mut_ptr().add(i).cast(), h);
                i += 8;
            }
        }
        if i < n {
            let (mut xs, mut hs) = ([0f32; 8], [0u16; 8]);
            xs[..n - i].copy_from_slice(&x[i..n]);
            // SAFETY: both arrays hold eight elements.
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(xs.as_ptr()));
                _mm_storeu_si128(hs.as_mut_ptr().cast(), h);
            }
            out[i..n].copy_from_slice(&hs[..n - i]);
        }
    }

    #[target_feature(enable = "avx2,f16c")]
    unsafe fn convert_to_f32(h: &[u16], out: &mut [f32]) {
        let n = h.len().min(out.len());
        let mut i = 0;
        // SAFETY: every load and store touches 8 elements starting at an index + 8 ≤ n.
        unsafe {
            while i + 8 <= n {
                _mm256_storeu_ps(out.as_mut_ptr().add(i), load8(h.as_ptr().add(i)));
                i += 8;
            }
        }
        if i < n {
            let (mut hs, mut xs) = ([0u16; 8], [0f32; 8]);
            hs[..n - i].copy_from_slice(&h[i..n]);
            // SAFETY: both arrays hold eight elements.
            unsafe { _mm256_storeu_ps(xs.as_mut_ptr(), load8(hs.as_ptr())) };
            out[i..n].copy_from_slice(&xs[..n - i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distance::simd::{scalar_dot, scalar_l2_squared};

    #[test]
    fn half_kernels_match_the_float_kernels_on_the_rounded_rows() {
        let Some(k) = half_kernels() else {
            return;
        };
        for dim in [1, 7, 8, 9, 31, 32, 33, 50, 128, 130] {
            let q: Vec<f32> = (0..dim)
                .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.37)
                .collect();
            let rows: Vec<Vec<f32>> = (0..4)
                .map(|r| {
                    (0..dim)
                        .map(|i| ((i * 13 + r * 7) % 17) as f32 * 0.21 - 1.5)
                        .collect()
                })
                .collect();
            let halves: Vec<Vec<u16>> = rows
                .iter()
                .map(|x| {
                    let mut h = vec![0u16; dim];
                    (k.to_half)(x, &mut h);
                    h
                })
                .collect();
            let rounded: Vec<Vec<f32>> = halves
                .iter()
                .map(|h| {
                    let mut x = vec![0f32; dim];
                    (k.to_f32)(h, &mut x);
                    x
                })
                .collect();
            for (x, r) in rows.iter().zip(&rounded) {
                for (a, b) in x.iter().zip(r) {
                    assert!((a - b).abs() <= a.abs() / 2048.0 + 1e-7, "{a} → {b}");
                }
            }
            let four = [&*halves[0], &*halves[1], &*halves[2], &*halves[3]];
            let (l2s, dots) = ((k.l2_squared4)(&q, four), (k.neg_dot4)(&q, four));
            for j in 0..4 {
                let (l2, dot) = (
                    scalar_l2_squared(&q, &rounded[j]),
                    -scalar_dot(&q, &rounded[j]),
                );
                let tol = |v: f32| 1e-4 * v.abs().max(1.0);
                assert!(
                    ((k.l2_squared)(&q, &halves[j]) - l2).abs() < tol(l2),
                    "dim {dim}"
                );
                assert!(
                    ((k.neg_dot)(&q, &halves[j]) - dot).abs() < tol(dot),
                    "dim {dim}"
                );
                assert!((l2s[j] - l2).abs() < tol(l2), "dim {dim}");
                assert!((dots[j] - dot).abs() < tol(dot), "dim {dim}");
            }
        }
    }
}
