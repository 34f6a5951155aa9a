//! SIMD kernels, chosen once per process for the CPU at hand.
//!
//! On x86-64 with AVX2 and FMA, Cairn uses its own kernels ([`avx2`]): four independent
//! 8-lane accumulators, so consecutive fused multiply-adds do not wait on each other.
//! simsimd's Haswell f32 kernels keep a single accumulator, so a 128-d L2 is a chain of 16
//! dependent FMAs (~64 cycles of latency). Measured in `benches/kernels.rs`, and it made
//! FAISS's exact scan 2× Cairn's. Elsewhere (other CPUs, ARM) the kernels are simsimd's,
//! which dispatches to NEON, SVE or AVX-512 itself.
//!
//! Kernels never panic on slices of different lengths: they use the common prefix.
//! Indexes check dimensions at their boundary, so a mismatch here is a bug, caught by
//! `debug_assert!` in debug builds.

use std::sync::OnceLock;

use simsimd::SpatialSimilarity;

/// A distance kernel over two equal-length vectors.
pub type Kernel = fn(&[f32], &[f32]) -> f32;

/// The same kernel from one query to four rows at once. Exact scans use it: the query is
/// loaded once per four rows, and the four rows' sums are independent chains of FMAs that
/// the CPU overlaps, where one row at a time waits on its own chain (FAISS's
/// `fvec_inner_product_batch_4` is the same idea).
pub type Kernel4 = fn(&[f32], [&[f32]; 4]) -> [f32; 4];

/// The kernels in use, one set per process.
#[derive(Clone, Copy)]
pub struct Kernels {
    /// Which implementation: `"avx2"` or `"simsimd"`.
    pub name: &'static str,
    /// ⟨a, b⟩.
    pub dot: Kernel,
    /// −⟨a, b⟩.
    pub neg_dot: Kernel,
    /// ‖a − b‖².
    pub l2_squared: Kernel,
    /// −⟨q, rᵢ⟩ for four rows.
    pub neg_dot4: Kernel4,
    /// ‖q − rᵢ‖² for four rows.
    pub l2_squared4: Kernel4,
}

/// simsimd's kernels: the portable choice, and the baseline in benchmarks.
pub const SIMSIMD: Kernels = Kernels {
    name: "simsimd",
    dot: simsimd_dot,
    neg_dot: simsimd_neg_dot,
    l2_squared: simsimd_l2_squared,
    neg_dot4: |q, rows| rows.map(|r| simsimd_neg_dot(q, r)),
    l2_squared4: |q, rows| rows.map(|r| simsimd_l2_squared(q, r)),
};

/// The best kernels this CPU runs, detected on first use.
pub fn kernels() -> &'static Kernels {
    static CHOSEN: OnceLock<Kernels> = OnceLock::new();
    CHOSEN.get_or_init(|| avx2::kernels().unwrap_or(SIMSIMD))
}

/// Inner product ⟨a, b⟩. Hot loops should hold [`kernels`]`().dot` instead.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (kernels().dot)(a, b)
}

/// Squared Euclidean distance ‖a − b‖². Hot loops should hold [`kernels`]`().l2_squared`.
#[inline]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    (kernels().l2_squared)(a, b)
}

/// −⟨a, b⟩: the lower-is-closer key for inner product and (normalised) cosine.
#[inline]
pub fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
    (kernels().neg_dot)(a, b)
}

/// simsimd's inner product.
pub fn simsimd_dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    f32::dot(&a[..n], &b[..n]).map_or_else(|| scalar_dot(a, b), |v| v as f32)
}

fn simsimd_neg_dot(a: &[f32], b: &[f32]) -> f32 {
    -simsimd_dot(a, b)
}

/// simsimd's squared L2.
pub fn simsimd_l2_squared(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    f32::l2sq(&a[..n], &b[..n]).map_or_else(|| scalar_l2_squared(a, b), |v| v as f32)
}

/// Plain scalar inner product: the floor the kernel benchmark compares against.
#[inline]
pub fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Plain scalar squared L2: the benchmark floor.
#[inline]
pub fn scalar_l2_squared(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// AVX2 + FMA kernels with four independent accumulators (32 floats per iteration).
pub mod avx2 {
    use super::Kernels;

    /// These kernels, if this CPU has AVX2 and FMA.
    pub fn kernels() -> Option<Kernels> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Some(Kernels {
                    name: "avx2",
                    dot: x86::dot,
                    neg_dot: x86::neg_dot,
                    l2_squared: x86::l2_squared,
                    neg_dot4: x86::neg_dot4,
                    l2_squared4: x86::l2_squared4,
                });
            }
        }
        None
    }

    #[cfg(target_arch = "x86_64")]
    pub(crate) use x86::{horizontal_sum, step};

    #[cfg(target_arch = "x86_64")]
    mod x86 {
        use std::arch::x86_64::*;

        // The safe wrappers below are only handed out by `kernels()` after the CPU reported
        // AVX2 and FMA, which is what makes calling the `target_feature` functions sound.

        pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
            debug_assert_eq!(a.len(), b.len());
            // SAFETY: reachable only through `kernels()`, which checked AVX2 and FMA.
            unsafe { sum_avx2::<false>(a, b) }
        }

        pub(super) fn neg_dot(a: &[f32], b: &[f32]) -> f32 {
            -dot(a, b)
        }

        pub(super) fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
            debug_assert_eq!(a.len(), b.len());
            // SAFETY: reachable only through `kernels()`, which checked AVX2 and FMA.
            unsafe { sum_avx2::<true>(a, b) }
        }

        pub(super) fn neg_dot4(q: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
            // SAFETY: reachable only through `kernels()`, which checked AVX2 and FMA.
            unsafe { sum4_avx2::<false>(q, rows) }.map(|s| -s)
        }

        pub(super) fn l2_squared4(q: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
            // SAFETY: reachable only through `kernels()`, which checked AVX2 and FMA.
            unsafe { sum4_avx2::<true>(q, rows) }
        }

        /// [`sum_avx2`] from `q` to four rows: each 8-float slice of the query is loaded once
        /// and feeds two accumulators per row, so eight FMA chains are in flight.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn sum4_avx2<const L2: bool>(q: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
            for r in rows {
                debug_assert_eq!(q.len(), r.len());
            }
            let n = rows.iter().fold(q.len(), |n, r| n.min(r.len()));
            let pq = q.as_ptr();
            let pr = rows.map(<[f32]>::as_ptr);
            let mut lo = [_mm256_setzero_ps(); 4];
            let mut hi = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            // SAFETY: every full load reads 8 floats starting at an index + 8 ≤ n, inside the
            // query and all four rows, and the masked loads of the tail read only lanes below
            // n (masked-out lanes are not accessed and cannot fault); unaligned loads have no
            // alignment requirement.
            unsafe {
                while i + 16 <= n {
                    let x0 = _mm256_loadu_ps(pq.add(i));
                    let x1 = _mm256_loadu_ps(pq.add(i + 8));
                    for j in 0..4 {
                        lo[j] = step::<L2>(lo[j], x0, _mm256_loadu_ps(pr[j].add(i)));
                        hi[j] = step::<L2>(hi[j], x1, _mm256_loadu_ps(pr[j].add(i + 8)));
                    }
                    i += 16;
                }
                if i + 8 <= n {
                    let x = _mm256_loadu_ps(pq.add(i));
                    for j in 0..4 {
                        lo[j] = step::<L2>(lo[j], x, _mm256_loadu_ps(pr[j].add(i)));
                    }
                    i += 8;
                }
                if i < n {
                    // The last n − i < 8 floats: masked-out lanes read as zero on both sides,
                    // so they add nothing to either sum.
                    let mask = tail_mask(n - i);
                    let x = _mm256_maskload_ps(pq.add(i), mask);
                    for j in 0..4 {
                        hi[j] = step::<L2>(hi[j], x, _mm256_maskload_ps(pr[j].add(i), mask));
                    }
                }
            }
            // Horizontal sums of the four rows at once: after the three `hadd`s lane j holds
            // half of row j's sum and lane 4 + j the other half.
            let h01 = _mm256_hadd_ps(_mm256_add_ps(lo[0], hi[0]), _mm256_add_ps(lo[1], hi[1]));
            let h23 = _mm256_hadd_ps(_mm256_add_ps(lo[2], hi[2]), _mm256_add_ps(lo[3], hi[3]));
            let h = _mm256_hadd_ps(h01, h23);
            let sums = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
            let mut out = [0.0f32; 4];
            // SAFETY: `out` holds exactly the four floats an unaligned 128-bit store writes.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), sums) };
            out
        }

        /// One 8-lane step of either sum: `acc + x·y`, or `acc + (x − y)²` when `L2`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        pub(crate) fn step<const L2: bool>(acc: __m256, x: __m256, y: __m256) -> __m256 {
            if L2 {
                let d = _mm256_sub_ps(x, y);
                _mm256_fmadd_ps(d, d, acc)
            } else {
                _mm256_fmadd_ps(x, y, acc)
            }
        }

        /// Lanes `0..rest` set (`rest` < 8): the mask of a vector's last, partial 8 floats.
        #[target_feature(enable = "avx2")]
        fn tail_mask(rest: usize) -> __m256i {
            let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            _mm256_cmpgt_epi32(_mm256_set1_epi32(rest as i32), lanes)
        }

        /// Σ aᵢbᵢ, or Σ (aᵢ − bᵢ)² when `L2`: one loop for both, the branch resolved at
        /// compile time. Four accumulators of 8 lanes take 32 floats per iteration, so four
        /// FMAs are in flight instead of one waiting on the last.
        #[target_feature(enable = "avx2,fma")]
        unsafe fn sum_avx2<const L2: bool>(a: &[f32], b: &[f32]) -> f32 {
            let n = a.len().min(b.len());
            let (pa, pb) = (a.as_ptr(), b.as_ptr());
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            // SAFETY: every full load reads 8 floats starting at an index + 8 ≤ n, inside both
            // slices, and the masked load of the tail reads only lanes below n (masked-out
            // lanes are not accessed and cannot fault); unaligned loads have no alignment
            // requirement.
            unsafe {
                while i + 32 <= n {
                    for (j, acc) in acc.iter_mut().enumerate() {
                        let x = _mm256_loadu_ps(pa.add(i + 8 * j));
                        let y = _mm256_loadu_ps(pb.add(i + 8 * j));
                        *acc = step::<L2>(*acc, x, y);
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    acc[0] = step::<L2>(
                        acc[0],
                        _mm256_loadu_ps(pa.add(i)),
                        _mm256_loadu_ps(pb.add(i)),
                    );
                    i += 8;
                }
                if i < n {
                    // The last n − i < 8 floats: masked-out lanes read as zero on both sides.
                    let mask = tail_mask(n - i);
                    acc[1] = step::<L2>(
                        acc[1],
                        _mm256_maskload_ps(pa.add(i), mask),
                        _mm256_maskload_ps(pb.add(i), mask),
                    );
                }
            }
            // Σ of the 8 lanes of the four accumulators.
            horizontal_sum(_mm256_add_ps(
                _mm256_add_ps(acc[0], acc[1]),
                _mm256_add_ps(acc[2], acc[3]),
            ))
        }

        /// Σ of the eight lanes of `s`.
        #[inline]
        #[target_feature(enable = "avx2")]
        pub(crate) fn horizontal_sum(s: __m256) -> f32 {
            let q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
            let q = _mm_add_ps(q, _mm_movehl_ps(q, q));
            let q = _mm_add_ss(q, _mm_shuffle_ps::<1>(q, q));
            _mm_cvtss_f32(q)
        }
    }
}
