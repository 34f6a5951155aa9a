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

/// Rows per block of [`DotI8Blocks`] codes: one 32-bit lane each in a 256-bit register.
pub const I8_BLOCK: usize = 8;

/// Σ qᵢ·cᵢ from one 8-bit query to blocks of rows of 7-bit codes (0 to 127), every row of a
/// block at once. `q` has a multiple of 4 coordinates (pad with zeros: a zero query byte
/// adds nothing whatever the code); `out.len()` is a multiple of [`I8_BLOCK`]; `codes` holds
/// `out.len() / 8` blocks of `8 · q.len()` bytes, in which the 4 codes of row r for
/// coordinates 4g to 4g + 3 are bytes `32·g + 4·r` to `32·g + 4·r + 3` (so one 32-byte load
/// holds a block's 8 rows at 4 coordinates).
///
/// Why 7 bits. x86's byte multiply-add (`pmaddubsw`) takes unsigned bytes against signed
/// ones and adds neighbouring products into 16-bit sums, which saturate unless each pair of
/// products stays below 2¹⁵: codes below 128 against a query within ±127 keep it there
/// (127·127·2 = 32,258). One instruction then multiplies 32 codes, where the 16-bit query of
/// [`DotU8x4`] widens 16 codes and multiplies them in two; AVX-VNNI's `vpdpbusd` multiplies
/// and sums four neighbouring products into 32-bit lanes in one. A coordinate's code rounds
/// by 1/254 of its row's largest, against 1/510 for 8 bits — far below what ranking
/// candidates for an exact re-rank needs.
///
/// Why blocks. With rows laid out one after another, each row's sums end in a horizontal
/// addition across a register, and those (with the calls per four rows) cost as much as the
/// multiplies: 2.4 ns per 64-dimension row, no faster than the float kernel. Interleaved by
/// four coordinates, each lane of the accumulator is one row: the query's 4 bytes are
/// broadcast, one multiply-accumulate serves 8 rows, and the 8 sums are stored as they are
/// (FAISS's and ScaNN's 4-bit scans interleave their codes for the same reason).
pub type DotI8Blocks = fn(q: &[i8], codes: &[u8], out: &mut [i32]);

/// Differing bits between two equal-length bit strings.
pub type Hamming = fn(&[u64], &[u64]) -> u32;

/// Codes a FastScan block holds: one per byte half of a 16-byte group.
pub const FASTSCAN_BLOCK: usize = 32;

/// The code whose FastScan sum lands in lane p of a block, the order the SIMD sums come out
/// in: codes 0, 2, …, 14, then 1, 3, …, 15, then 16, 18, …, 30, then 17, 19, …, 31 (a sum
/// register's 16-bit lanes take a shuffle's even and odd bytes apart).
pub const LANE_CODE: [usize; FASTSCAN_BLOCK] = {
    let mut order = [0; FASTSCAN_BLOCK];
    let mut p = 0;
    while p < FASTSCAN_BLOCK {
        let (quarter, i) = (p / 8, p % 8);
        order[p] = 16 * (quarter / 2) + 2 * i + quarter % 2;
        p += 1;
    }
    order
};

/// What turns a link's FastScan sum into its estimate (see [`LinkEstimates`]).
#[derive(Clone, Copy, Debug)]
pub struct EstimateTerms {
    /// The expanded node's key.
    pub key: f32,
    /// 2S − T = `base` + `scale` · (the table sum).
    pub base: f32,
    /// See `base`.
    pub scale: f32,
    /// The lanes whose estimate is below `cut` are flagged.
    pub cut: f32,
}

/// The estimates of a block of 32 links from their codes, and which of them beat a cut: lane
/// p's sum s is the FastScan sum of code [`LANE_CODE`]`[p]`, its estimate
/// e = (key + aₚ) − fₚ·(base + scale·s) (each product fused with its sum), and bit p of the
/// result is set where e is below `terms.cut`. `keys[p]` receives e's bits mapped to an
/// unsigned integer of the same order (`topk::ordered_bits`, the key of the frontier's packed
/// entries). `a` and `f` hold at least 32 floats, in lane order.
///
/// Why one kernel. The sums leave FastScan in registers, in lane order; turned into
/// estimates, compared and mapped there, a block's 32 estimates take about 30 instructions
/// after the lookups, where putting the sums back in code order and converting and testing
/// them one link at a time took several times that (callgrind, BENCHMARKS.md). The graph lays
/// its links out in lane order (`hnsw/link_codes.rs`), so nothing is put back.
pub type LinkEstimates = fn(
    luts: &[u8],
    codes: &[u8],
    a: &[f32],
    f: &[f32],
    terms: EstimateTerms,
    keys: &mut [u32; FASTSCAN_BLOCK],
) -> u32;

/// Lookup tables for FastScan ([`scalar_fastscan`]) from a float vector y, one table of 16
/// bytes per group of four coordinates: y is rounded to integers ȳ = round(y / step) with step = max|yᵢ| / `h`
/// (so |ȳᵢ| ≤ `h`), and entry j of a group's table is the sum of the ȳᵢ whose bit is set in j,
/// plus 4·`h` so that it is never negative. Returns `(step, Σ yᵢ)`. `y.len()` is a multiple
/// of four and `luts` holds `4 · y.len()` bytes; the caller keeps 8·`h` ≤ 255, and 8·`h` times
/// the group count within `u16::MAX` for the sums.
///
/// Why integers first. The link-code search once built a table set per expanded graph node (it now
/// builds one per query: `hnsw/link_codes.rs`). Rounding y once and adding bytes builds all tables
/// of 128 coordinates in a few dozen byte shuffles, where rounding every entry of every table took
/// the longest part of an expansion. The query's own rounding error stays far below the one-bit
/// codes' (RaBitQ: 4 bits of query lose almost nothing; here about 6).
pub type LinkTables = fn(y: &[f32], h: u8, luts: &mut [u8]) -> (f32, f32);

/// (‖q − u‖², ⟨q, u⟩) for a row u kept as bfloat16 values, two to a word (the even
/// coordinate in the low half; `hnsw/link_codes.rs` packs them). `words` holds `q.len()/2`
/// words as float bits; `q.len()` is even.
///
/// Why one kernel. A link-code search reads each popped node's row for the node's key (‖q −
/// u‖² or −⟨q, u⟩). Widened and summed in one pass, both sums took about a third fewer
/// instructions than the widening loop and two float kernels they replaced (callgrind,
/// BENCHMARKS.md).
pub type WidenKeys = fn(q: &[f32], words: &[f32]) -> (f32, f32);

/// The code kernels this CPU runs, detected on first use.
#[derive(Clone, Copy)]
pub struct CodeKernels {
    /// Σ qᵢ·cᵢ.
    pub dot_u8: DotU8,
    /// Σ qᵢ·cᵢ for four rows.
    pub dot_u8x4: DotU8x4,
    /// Σ qᵢ·cᵢ from an 8-bit query to blocks of rows of 7-bit codes.
    pub dot_i8_blocks: DotI8Blocks,
    /// Differing bits.
    pub hamming: Hamming,
    /// Estimates of a block of 32 links from their 4-bit codes' table sums.
    pub link_estimates: LinkEstimates,
    /// The tables FastScan reads, from a float vector.
    pub link_tables: LinkTables,
    /// ‖q − u‖² and ⟨q, u⟩ for a query and a bfloat16 row (a popped node's keys).
    pub widen_keys: WidenKeys,
}

/// The best code kernels for this CPU.
pub fn code_kernels() -> &'static CodeKernels {
    static CHOSEN: OnceLock<CodeKernels> = OnceLock::new();
    CHOSEN.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2");
            let popcnt = std::arch::is_x86_feature_detected!("popcnt");
            let fma = std::arch::is_x86_feature_detected!("fma");
            let vnni = std::arch::is_x86_feature_detected!("avxvnni");
            // AVX-512's VNNI has the same multiply-accumulate on 256-bit registers (with
            // AVX-512VL), on CPUs that lack the VEX-coded AVX-VNNI (AMD's Zen 4, Intel's
            // server parts before Sapphire Rapids).
            let vnni512 = std::arch::is_x86_feature_detected!("avx512vnni")
                && std::arch::is_x86_feature_detected!("avx512vl");
            CodeKernels {
                dot_u8: if avx2 { x86::dot_u8 } else { scalar_dot_u8 },
                dot_u8x4: if avx2 { x86::dot_u8x4 } else { scalar_dot_u8x4 },
                dot_i8_blocks: match (vnni && avx2, vnni512 && avx2, avx2) {
                    (true, _, _) => x86::dot_i8_blocks_vnni,
                    (false, true, _) => x86::dot_i8_blocks_vnni512,
                    (false, false, true) => x86::dot_i8_blocks,
                    (false, false, false) => scalar_dot_i8_blocks,
                },
                hamming: if popcnt { x86::hamming } else { scalar_hamming },
                link_estimates: if avx2 && fma {
                    x86::link_estimates
                } else {
                    scalar_link_estimates
                },
                link_tables: if avx2 {
                    x86::link_tables
                } else {
                    scalar_link_tables
                },
                widen_keys: if avx2 && fma {
                    x86::widen_keys
                } else {
                    scalar_widen_keys
                },
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CodeKernels {
            dot_u8: scalar_dot_u8,
            dot_u8x4: scalar_dot_u8x4,
            dot_i8_blocks: scalar_dot_i8_blocks,
            hamming: scalar_hamming,
            link_estimates: scalar_link_estimates,
            link_tables: scalar_link_tables,
            widen_keys: scalar_widen_keys,
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

/// Where row `r`'s code of coordinate `d` sits in [`DotI8Blocks`] codes of `width`
/// coordinates a row (a multiple of 4).
pub fn i8_block_offset(r: usize, d: usize, width: usize) -> usize {
    r / I8_BLOCK * I8_BLOCK * width + d / 4 * 4 * I8_BLOCK + r % I8_BLOCK * 4 + d % 4
}

/// [`DotI8Blocks`] one code at a time: the reference the SIMD kernels are tested against.
pub fn scalar_dot_i8_blocks(q: &[i8], codes: &[u8], out: &mut [i32]) {
    let width = q.len();
    for (r, sum) in out.iter_mut().enumerate() {
        *sum = q
            .iter()
            .enumerate()
            .map(|(d, &x)| i32::from(x) * i32::from(codes[i8_block_offset(r, d, width)]))
            .sum();
    }
}

/// Differing bits over the common prefix, without the POPCNT instruction.
pub fn scalar_hamming(a: &[u64], b: &[u64]) -> u32 {
    a.iter().zip(b).map(|(x, y)| (x ^ y).count_ones()).sum()
}

/// FastScan (André et al., VLDB 2015; FAISS's `pq4_fast_scan`) one nibble at a time: the
/// sums of one query's byte lookup tables over a block of [`FASTSCAN_BLOCK`] codes of 4-bit
/// groups, in code order. The reference [`LinkEstimates`]' SIMD sums are tested against.
///
/// `luts` holds 16 bytes per group (entry j is the table's value for nibble j); `codes` holds
/// the block's groups one after another, 16 bytes each, byte k carrying code k's nibble in
/// its low half and code k + 16's in its high half. Sums wrap past `u16::MAX`: the caller
/// sizes its tables so that they cannot get there.
///
/// Why this shape. A table of 16 bytes is one `pshufb` operand, so one instruction looks up
/// the nibbles of 16 codes in two groups; the 32 codes of a graph node's links are scored in
/// about as many instructions as one full-precision distance takes.
pub fn scalar_fastscan(luts: &[u8], codes: &[u8], out: &mut [u16; FASTSCAN_BLOCK]) {
    let groups = (luts.len() / 16).min(codes.len() / 16);
    *out = [0; FASTSCAN_BLOCK];
    for g in 0..groups {
        let (lut, bytes) = (&luts[16 * g..16 * g + 16], &codes[16 * g..16 * g + 16]);
        for (k, &byte) in bytes.iter().enumerate() {
            out[k] = out[k].wrapping_add(u16::from(lut[usize::from(byte & 15)]));
            out[k + 16] = out[k + 16].wrapping_add(u16::from(lut[usize::from(byte >> 4)]));
        }
    }
}

/// [`LinkEstimates`] one lane at a time, from [`scalar_fastscan`]'s sums: the reference the
/// SIMD kernel is tested against (its products fused as the SIMD kernel's are, so the two
/// agree to the bit).
pub fn scalar_link_estimates(
    luts: &[u8],
    codes: &[u8],
    a: &[f32],
    f: &[f32],
    terms: EstimateTerms,
    keys: &mut [u32; FASTSCAN_BLOCK],
) -> u32 {
    let mut sums = [0u16; FASTSCAN_BLOCK];
    scalar_fastscan(luts, codes, &mut sums);
    let mut below = 0u32;
    for (p, key) in keys.iter_mut().enumerate() {
        let t = terms
            .scale
            .mul_add(f32::from(sums[LANE_CODE[p]]), terms.base);
        let estimate = (-f[p]).mul_add(t, terms.key + a[p]);
        *key = crate::topk::ordered_bits(estimate);
        below |= u32::from(estimate < terms.cut) << p;
    }
    below
}

/// [`LinkTables`] one entry at a time: the reference the SIMD kernel is tested against.
pub fn scalar_link_tables(y: &[f32], h: u8, luts: &mut [u8]) -> (f32, f32) {
    let widest = y.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let total = y.iter().sum();
    let step = table_step(widest, h);
    write_tables(y, 1.0 / step, h, luts);
    (step, total)
}

/// The two floats of a word of bfloat16 pairs (see [`WidenKeys`]): a bfloat16 is a float's
/// top half, so each widens by a shift or a mask. The one definition of the pairs' layout
/// besides the AVX2 kernel's.
#[inline]
pub fn widen_bf16_pair(word: f32) -> [f32; 2] {
    let bits = word.to_bits();
    [
        f32::from_bits(bits << 16),
        f32::from_bits(bits & 0xffff_0000),
    ]
}

/// [`WidenKeys`] one coordinate at a time.
pub fn scalar_widen_keys(q: &[f32], words: &[f32]) -> (f32, f32) {
    let (mut sq, mut dot) = (0.0f32, 0.0f32);
    for (q, &word) in q.chunks_exact(2).zip(words) {
        let u = widen_bf16_pair(word);
        for t in 0..2 {
            let y = q[t] - u[t];
            sq += y * y;
            dot += q[t] * u[t];
        }
    }
    (sq, dot)
}

/// max|yᵢ| / h, or 1 for a zero vector (every table is then the bias alone).
fn table_step(widest: f32, h: u8) -> f32 {
    if widest > 0.0 {
        widest / f32::from(h)
    } else {
        1.0
    }
}

/// The tables of the groups of `y` (see [`LinkTables`]), rounding as the SIMD kernel does
/// (to nearest, ties to even).
fn write_tables(y: &[f32], inverse: f32, h: u8, luts: &mut [u8]) {
    let bias = 4 * i32::from(h);
    for (four, table) in y.chunks_exact(4).zip(luts.chunks_exact_mut(16)) {
        let q = [0, 1, 2, 3].map(|i| (four[i] * inverse).round_ties_even() as i32);
        for (j, entry) in table.iter_mut().enumerate() {
            let sum: i32 = (0..4).filter(|b| (j >> b) & 1 == 1).map(|b| q[b]).sum();
            *entry = (sum + bias) as u8;
        }
    }
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

    /// Checks what the block kernels read against what the slices hold.
    fn check_blocks(q: &[i8], codes: &[u8], out: &[i32]) {
        assert!(
            q.len().is_multiple_of(4),
            "a query of {} bytes, not a multiple of 4",
            q.len()
        );
        assert!(
            out.len().is_multiple_of(super::I8_BLOCK),
            "{} sums, not whole blocks",
            out.len()
        );
        assert!(codes.len() >= out.len() * q.len(), "fewer codes than rows");
    }

    pub(super) fn dot_i8_blocks(q: &[i8], codes: &[u8], out: &mut [i32]) {
        check_blocks(q, codes, out);
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2 (and tests
        // that check it themselves); the slices hold what it reads, as checked.
        unsafe { dot_i8_blocks_avx2(q, codes, out) }
    }

    pub(super) fn dot_i8_blocks_vnni(q: &[i8], codes: &[u8], out: &mut [i32]) {
        check_blocks(q, codes, out);
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2 and AVX-VNNI
        // (and tests that check them themselves); the slices hold what it reads, as checked.
        unsafe { dot_i8_blocks_avxvnni(q, codes, out) }
    }

    pub(super) fn dot_i8_blocks_vnni512(q: &[i8], codes: &[u8], out: &mut [i32]) {
        check_blocks(q, codes, out);
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2, AVX-512VNNI
        // and AVX-512VL (and tests that check them themselves); the slices hold what it
        // reads, as checked.
        unsafe { dot_i8_blocks_avx512vnni(q, codes, out) }
    }

    /// `acc +` the 8 lanes' sums of 4 code-by-query products, AVX2: `pmaddubsw` adds
    /// product pairs into 16-bit sums (they cannot saturate, see [`super::DotI8Blocks`]),
    /// `pmaddwd` by ones adds those pairs into 32-bit lanes.
    macro_rules! mac_avx2 {
        ($acc:expr, $c:expr, $q:expr) => {
            _mm256_add_epi32(
                $acc,
                _mm256_madd_epi16(_mm256_maddubs_epi16($c, $q), _mm256_set1_epi16(1)),
            )
        };
    }

    /// The same by AVX-VNNI's `vpdpbusd`, in one instruction.
    macro_rules! mac_vnni {
        ($acc:expr, $c:expr, $q:expr) => {
            _mm256_dpbusd_avx_epi32($acc, $c, $q)
        };
    }

    /// The same by AVX-512VNNI's `vpdpbusd` on 256-bit registers (EVEX-coded, AVX-512VL).
    macro_rules! mac_vnni512 {
        ($acc:expr, $c:expr, $q:expr) => {
            _mm256_dpbusd_epi32($acc, $c, $q)
        };
    }

    /// A [`super::DotI8Blocks`] kernel by one multiply-accumulate step. Four blocks at a
    /// time, two accumulators each (even and odd groups of four coordinates): eight
    /// independent chains, enough to cover the multiply-accumulate's latency; the last one to
    /// three blocks one by one.
    macro_rules! blocks_kernel {
        ($name:ident, $mac:ident, $features:literal) => {
            #[target_feature(enable = $features)]
            unsafe fn $name(q: &[i8], codes: &[u8], out: &mut [i32]) {
                let groups = q.len() / 4;
                let block = super::I8_BLOCK * q.len();
                let blocks = out.len() / super::I8_BLOCK;
                let (pq, pc, po) = (q.as_ptr(), codes.as_ptr(), out.as_mut_ptr());
                macro_rules! query_group {
                    ($g:expr) => {
                        _mm256_set1_epi32(std::ptr::read_unaligned(pq.add(4 * $g).cast::<i32>()))
                    };
                }
                macro_rules! codes_at {
                    ($b:expr, $g:expr) => {
                        _mm256_loadu_si256(pc.add($b * block + 32 * $g).cast())
                    };
                }
                let mut b = 0;
                // SAFETY: the query's group g is 4 bytes at 4·g < q.len(); block b's group g
                // is 32 bytes at b·block + 32·g, inside `codes` for b < blocks (checked by the
                // caller); block b's sums are 8 lanes at 8·b, inside `out`. Unaligned loads
                // and stores need no alignment.
                unsafe {
                    while b + 4 <= blocks {
                        let mut even = [_mm256_setzero_si256(); 4];
                        let mut odd = [_mm256_setzero_si256(); 4];
                        let mut g = 0;
                        while g + 2 <= groups {
                            let (q0, q1) = (query_group!(g), query_group!(g + 1));
                            for j in 0..4 {
                                even[j] = $mac!(even[j], codes_at!(b + j, g), q0);
                                odd[j] = $mac!(odd[j], codes_at!(b + j, g + 1), q1);
                            }
                            g += 2;
                        }
                        if g < groups {
                            let q0 = query_group!(g);
                            for j in 0..4 {
                                even[j] = $mac!(even[j], codes_at!(b + j, g), q0);
                            }
                        }
                        for j in 0..4 {
                            let sums = _mm256_add_epi32(even[j], odd[j]);
                            _mm256_storeu_si256(po.add(8 * (b + j)).cast(), sums);
                        }
                        b += 4;
                    }
                    while b < blocks {
                        let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        let mut g = 0;
                        while g + 2 <= groups {
                            even = $mac!(even, codes_at!(b, g), query_group!(g));
                            odd = $mac!(odd, codes_at!(b, g + 1), query_group!(g + 1));
                            g += 2;
                        }
                        if g < groups {
                            even = $mac!(even, codes_at!(b, g), query_group!(g));
                        }
                        _mm256_storeu_si256(po.add(8 * b).cast(), _mm256_add_epi32(even, odd));
                        b += 1;
                    }
                }
            }
        };
    }
    blocks_kernel!(dot_i8_blocks_avx2, mac_avx2, "avx2");
    blocks_kernel!(dot_i8_blocks_avxvnni, mac_vnni, "avx2,avxvnni");
    blocks_kernel!(
        dot_i8_blocks_avx512vnni,
        mac_vnni512,
        "avx2,avx512vnni,avx512vl"
    );

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

    pub(super) fn link_estimates(
        luts: &[u8],
        codes: &[u8],
        a: &[f32],
        f: &[f32],
        terms: super::EstimateTerms,
        keys: &mut [u32; super::FASTSCAN_BLOCK],
    ) -> u32 {
        assert!(a.len() >= super::FASTSCAN_BLOCK && f.len() >= super::FASTSCAN_BLOCK);
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2 and FMA.
        unsafe { link_estimates_avx2(luts, codes, a, f, terms, keys) }
    }

    /// Each quarter of the block (eight lanes) in one register: its sums widened to floats,
    /// the estimate in two fused steps, the comparison's sign bits as eight bits of the mask,
    /// and the estimate's bits mapped in order (an arithmetic shift spreads each sign).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn link_estimates_avx2(
        luts: &[u8],
        codes: &[u8],
        a: &[f32],
        f: &[f32],
        terms: super::EstimateTerms,
        keys: &mut [u32; super::FASTSCAN_BLOCK],
    ) -> u32 {
        // SAFETY: this function's features include fastscan_quarters' own.
        let quarters = unsafe { fastscan_quarters(luts, codes) };
        let scale = _mm256_set1_ps(terms.scale);
        let base = _mm256_set1_ps(terms.base);
        let key = _mm256_set1_ps(terms.key);
        let cut = _mm256_set1_ps(terms.cut);
        let top_bit = _mm256_set1_epi32(i32::MIN);
        let (pa, pf, pk) = (a.as_ptr(), f.as_ptr(), keys.as_mut_ptr());
        let mut below = 0u32;
        for (q, sums) in quarters.into_iter().enumerate() {
            // SAFETY: 8q + 8 ≤ 32 floats of `a` and `f` (asserted by the wrapper) and words of
            // `keys`.
            unsafe {
                let s = _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(sums));
                let t = _mm256_fmadd_ps(scale, s, base);
                let from = _mm256_add_ps(key, _mm256_loadu_ps(pa.add(8 * q)));
                let e = _mm256_fnmadd_ps(_mm256_loadu_ps(pf.add(8 * q)), t, from);
                let bits = _mm256_castps_si256(e);
                let flip = _mm256_or_si256(_mm256_srai_epi32::<31>(bits), top_bit);
                _mm256_storeu_si256(pk.add(8 * q).cast(), _mm256_xor_si256(bits, flip));
                let bits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(e, cut)) as u32;
                below |= bits << (8 * q);
            }
        }
        below
    }

    /// FastScan's sums of a block, the four quarters of [`super::LANE_CODE`] in four registers
    /// of eight 16-bit sums. Two groups per iteration: their 32 code bytes in one register,
    /// their two tables in the two 128-bit lanes of another, so each `pshufb` looks up 16
    /// codes' nibbles in both groups at once. The bytes it returns are added whole as 16-bit
    /// words (even byte + 256 × odd byte) and, shifted down, as the odd bytes alone; the even
    /// sums are the difference at the end (FAISS's trick: one mask fewer per lookup, and
    /// exact, as the sums wrap alike). A last odd group is looked up on 128 bits and its
    /// bytes added apart, even ones masked and odd ones shifted down.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn fastscan_quarters(luts: &[u8], codes: &[u8]) -> [__m128i; 4] {
        let groups = (luts.len() / 16).min(codes.len() / 16);
        let pairs = groups / 2;
        let (pl, pc) = (
            luts.as_ptr().cast::<__m256i>(),
            codes.as_ptr().cast::<__m256i>(),
        );
        let nibble = _mm256_set1_epi8(0x0f);
        // Sums of codes 0–15 (`lo`) and 16–31 (`hi`): whole words, and odd bytes.
        let (mut lo_words, mut lo_odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let (mut hi_words, mut hi_odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for pair in 0..pairs {
            // SAFETY: pair + 1 ≤ groups / 2, so each 32-byte load lies inside both slices.
            let (v, lut) = unsafe {
                (
                    _mm256_loadu_si256(pc.add(pair)),
                    _mm256_loadu_si256(pl.add(pair)),
                )
            };
            let lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, nibble));
            let hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16::<4>(v), nibble));
            lo_words = _mm256_add_epi16(lo_words, lo);
            lo_odd = _mm256_add_epi16(lo_odd, _mm256_srli_epi16::<8>(lo));
            hi_words = _mm256_add_epi16(hi_words, hi);
            hi_odd = _mm256_add_epi16(hi_odd, _mm256_srli_epi16::<8>(hi));
        }
        let even =
            |words: __m256i, odd: __m256i| _mm256_sub_epi16(words, _mm256_slli_epi16::<8>(odd));
        let (lo_even, hi_even) = (even(lo_words, lo_odd), even(hi_words, hi_odd));
        // The two lanes hold the two groups of each pair: add them.
        let fold =
            |v: __m256i| _mm_add_epi16(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let mut quarters = [fold(lo_even), fold(lo_odd), fold(hi_even), fold(hi_odd)];
        let g = 2 * pairs;
        let (pl, pc) = (luts.as_ptr(), codes.as_ptr());
        if g < groups {
            // SAFETY: 16·g + 16 ≤ 16·groups bytes of both slices.
            let (v, lut) = unsafe {
                (
                    _mm_loadu_si128(pc.add(16 * g).cast()),
                    _mm_loadu_si128(pl.add(16 * g).cast()),
                )
            };
            let nibble = _mm_set1_epi8(0x0f);
            let low_byte = _mm_set1_epi16(0x00ff);
            let lo = _mm_shuffle_epi8(lut, _mm_and_si128(v, nibble));
            let hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16::<4>(v), nibble));
            quarters[0] = _mm_add_epi16(quarters[0], _mm_and_si128(lo, low_byte));
            quarters[1] = _mm_add_epi16(quarters[1], _mm_srli_epi16::<8>(lo));
            quarters[2] = _mm_add_epi16(quarters[2], _mm_and_si128(hi, low_byte));
            quarters[3] = _mm_add_epi16(quarters[3], _mm_srli_epi16::<8>(hi));
        }
        quarters
    }

    /// Row b: 0xff at entry j (of 16, in both lanes) where bit b of j is set, so that entry
    /// j takes coordinate b of its group.
    const ENTRY_BITS: [[u8; 32]; 4] = {
        let mut rows = [[0u8; 32]; 4];
        let mut b = 0;
        while b < 4 {
            let mut j = 0;
            while j < 32 {
                if ((j % 16) >> b) & 1 == 1 {
                    rows[b][j] = 0xff;
                }
                j += 1;
            }
            b += 1;
        }
        rows
    };

    pub(super) fn link_tables(y: &[f32], h: u8, luts: &mut [u8]) -> (f32, f32) {
        assert!(y.len().is_multiple_of(4) && luts.len() >= 4 * y.len());
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2.
        unsafe { link_tables_avx2(y, h, luts) }
    }

    /// 32 coordinates per step: scaled and rounded (`cvtps`, ties to even), packed to bytes by
    /// two signed packs, which leave lane 0 holding coordinates 8t…8t+3 and lane 1 8t+4…8t+7
    /// at bytes 4t…4t+3; so for t = 0…3 one register makes the tables of groups 2t and 2t+1,
    /// in order, from four byte broadcasts (`pshufb`) masked by the entries' index bits.
    #[target_feature(enable = "avx2")]
    unsafe fn link_tables_avx2(y: &[f32], h: u8, luts: &mut [u8]) -> (f32, f32) {
        let whole = y.len() / 8 * 8;
        let sign = _mm256_set1_ps(-0.0);
        let (mut widest, mut total) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let py = y.as_ptr();
        for i in 0..whole / 8 {
            // SAFETY: 8i + 8 ≤ whole ≤ y.len().
            let v = unsafe { _mm256_loadu_ps(py.add(8 * i)) };
            widest = _mm256_max_ps(widest, _mm256_andnot_ps(sign, v));
            total = _mm256_add_ps(total, v);
        }
        let mut lanes = [[0.0f32; 8]; 2];
        // SAFETY: each array is exactly the eight floats an unaligned 256-bit store writes.
        unsafe {
            _mm256_storeu_ps(lanes[0].as_mut_ptr(), widest);
            _mm256_storeu_ps(lanes[1].as_mut_ptr(), total);
        }
        let mut widest = lanes[0].iter().fold(0.0f32, |m, &x| m.max(x));
        let mut total: f32 = lanes[1].iter().sum();
        for &x in &y[whole..] {
            widest = widest.max(x.abs());
            total += x;
        }
        let step = super::table_step(widest, h);
        let inverse = 1.0 / step;
        let scale = _mm256_set1_ps(inverse);
        let bias = _mm256_set1_epi8((4 * h) as i8);
        let mut masks = [_mm256_setzero_si256(); 4];
        for (mask, bytes) in masks.iter_mut().zip(&ENTRY_BITS) {
            // SAFETY: each row of ENTRY_BITS is exactly the 32 bytes an unaligned load reads.
            *mask = unsafe { _mm256_loadu_si256(bytes.as_ptr().cast()) };
        }
        let blocks = y.len() / 32 * 32;
        let out = luts.as_mut_ptr();
        let mut block = 0;
        while block < blocks {
            // SAFETY: block + 32 ≤ blocks ≤ y.len().
            let (r0, r1, r2, r3) = unsafe {
                (
                    _mm256_loadu_ps(py.add(block)),
                    _mm256_loadu_ps(py.add(block + 8)),
                    _mm256_loadu_ps(py.add(block + 16)),
                    _mm256_loadu_ps(py.add(block + 24)),
                )
            };
            let (r0, r1) = (
                _mm256_cvtps_epi32(_mm256_mul_ps(r0, scale)),
                _mm256_cvtps_epi32(_mm256_mul_ps(r1, scale)),
            );
            let (r2, r3) = (
                _mm256_cvtps_epi32(_mm256_mul_ps(r2, scale)),
                _mm256_cvtps_epi32(_mm256_mul_ps(r3, scale)),
            );
            let bytes = _mm256_packs_epi16(_mm256_packs_epi32(r0, r1), _mm256_packs_epi32(r2, r3));
            for t in 0..4 {
                let mut tables = bias;
                for (b, mask) in masks.iter().enumerate() {
                    let spread = _mm256_shuffle_epi8(bytes, _mm256_set1_epi8((4 * t + b) as i8));
                    tables = _mm256_add_epi8(tables, _mm256_and_si256(spread, *mask));
                }
                // SAFETY: 4·block + 32t + 32 ≤ 4·blocks ≤ luts.len(), asserted by the caller.
                unsafe { _mm256_storeu_si256(out.add(4 * block + 32 * t).cast(), tables) };
            }
            block += 32;
        }
        if blocks < y.len() {
            super::write_tables(&y[blocks..], inverse, h, &mut luts[4 * blocks..]);
        }
        (step, total)
    }

    pub(super) fn widen_keys(q: &[f32], words: &[f32]) -> (f32, f32) {
        assert!(words.len() * 2 >= q.len() && q.len().is_multiple_of(2));
        // SAFETY: reachable only through `code_kernels()`, which checked AVX2 and FMA.
        unsafe { widen_keys_avx2(q, words) }
    }

    /// Eight words (sixteen coordinates) per step: shifted and masked into the even and odd
    /// coordinates, put back in order by an unpack within lanes and a swap of lanes.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn widen_keys_avx2(q: &[f32], words: &[f32]) -> (f32, f32) {
        let whole = q.len() / 16 * 16;
        let high = _mm256_set1_epi32(0xffff_0000_u32 as i32);
        let (mut sq, mut dot) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let (pq, pw) = (q.as_ptr(), words.as_ptr());
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 16 ≤ q.len() and i/2 + 8 ≤ words.len(), asserted above.
            unsafe {
                let w = _mm256_loadu_si256(pw.add(i / 2).cast());
                let even = _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w));
                let odd = _mm256_castsi256_ps(_mm256_and_si256(w, high));
                let (a, b) = (_mm256_unpacklo_ps(even, odd), _mm256_unpackhi_ps(even, odd));
                let u0 = _mm256_permute2f128_ps::<0x20>(a, b);
                let u1 = _mm256_permute2f128_ps::<0x31>(a, b);
                let (q0, q1) = (_mm256_loadu_ps(pq.add(i)), _mm256_loadu_ps(pq.add(i + 8)));
                let (y0, y1) = (_mm256_sub_ps(q0, u0), _mm256_sub_ps(q1, u1));
                sq = _mm256_fmadd_ps(y0, y0, _mm256_fmadd_ps(y1, y1, sq));
                dot = _mm256_fmadd_ps(q0, u0, _mm256_fmadd_ps(q1, u1, dot));
            }
            i += 16;
        }
        let mut lanes = [[0.0f32; 8]; 2];
        // SAFETY: each array is exactly the eight floats an unaligned 256-bit store writes.
        unsafe {
            _mm256_storeu_ps(lanes[0].as_mut_ptr(), sq);
            _mm256_storeu_ps(lanes[1].as_mut_ptr(), dot);
        }
        let (tail_sq, tail_dot) = if whole < q.len() {
            super::scalar_widen_keys(&q[whole..], &words[whole / 2..])
        } else {
            (0.0, 0.0)
        };
        (
            lanes[0].iter().sum::<f32>() + tail_sq,
            lanes[1].iter().sum::<f32>() + tail_dot,
        )
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

    /// Every backend this CPU can run, at widths around the kernels' two-group step and at
    /// block counts around their four-block step, at the extremes of both operands (where a
    /// saturating 16-bit sum would show), against sums written out from the layout.
    #[test]
    fn byte_query_kernels_agree_with_the_scalar_one() {
        let mut backends: Vec<(&str, DotI8Blocks)> = vec![
            ("chosen", code_kernels().dot_i8_blocks),
            ("scalar", scalar_dot_i8_blocks),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                backends.push(("avx2", x86::dot_i8_blocks));
                if std::arch::is_x86_feature_detected!("avxvnni") {
                    backends.push(("avx-vnni", x86::dot_i8_blocks_vnni));
                }
                if std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                {
                    backends.push(("avx512-vnni", x86::dot_i8_blocks_vnni512));
                }
            }
        }
        for width in (0..=136usize).step_by(4) {
            let q: Vec<i8> = (0..width)
                .map(|i| match i % 5 {
                    0 => 127,
                    1 => -127,
                    _ => ((i as f32 * 0.37).sin() * 127.0) as i8,
                })
                .collect();
            for blocks in [0usize, 1, 2, 3, 4, 5, 7, 8, 9] {
                let rows = blocks * I8_BLOCK;
                let code = |r: usize, d: usize| -> u8 {
                    if d % 5 < 2 {
                        127
                    } else {
                        ((r * 31 + d * 7) % 128) as u8
                    }
                };
                let mut codes = vec![0u8; rows * width];
                for r in 0..rows {
                    for d in 0..width {
                        codes[i8_block_offset(r, d, width)] = code(r, d);
                    }
                }
                let want: Vec<i32> = (0..rows)
                    .map(|r| {
                        (0..width)
                            .map(|d| i32::from(q[d]) * i32::from(code(r, d)))
                            .sum()
                    })
                    .collect();
                for (name, kernel) in &backends {
                    let mut out = vec![0; rows];
                    kernel(&q, &codes, &mut out);
                    assert_eq!(out, want, "{name}, width {width}, blocks {blocks}");
                }
            }
        }
    }

    #[test]
    fn lane_code_puts_every_code_in_one_lane() {
        let mut seen = [false; FASTSCAN_BLOCK];
        for &c in &LANE_CODE {
            assert!(!seen[c], "code {c} twice");
            seen[c] = true;
        }
        assert_eq!(LANE_CODE[..9], [0, 2, 4, 6, 8, 10, 12, 14, 1]);
        assert_eq!(LANE_CODE[16..25], [16, 18, 20, 22, 24, 26, 28, 30, 17]);
    }

    #[test]
    fn link_estimates_are_the_scalar_kernel_s_from_each_codes_table_entries() {
        let k = code_kernels();
        // Bytes from a 64-bit LCG's high bits: sums that differ from code to code, so that
        // a lane holding the wrong code's sum shows.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut byte = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 56) as u8
        };
        for groups in 0..13usize {
            let luts: Vec<u8> = (0..16 * groups).map(|_| byte()).collect();
            let codes: Vec<u8> = (0..16 * groups).map(|_| byte()).collect();
            // The reference sums, from the layout's definition: code c's nibble of group g.
            let mut sums = [0; FASTSCAN_BLOCK];
            scalar_fastscan(&luts, &codes, &mut sums);
            for (c, &sum) in sums.iter().enumerate() {
                let expected: u32 = (0..groups)
                    .map(|g| {
                        let byte = codes[16 * g + c % 16];
                        let nibble = if c < 16 { byte & 15 } else { byte >> 4 };
                        u32::from(luts[16 * g + usize::from(nibble)])
                    })
                    .sum();
                assert_eq!(u32::from(sum), expected, "groups {groups}, code {c}");
            }
            if groups >= 4 {
                let mut distinct = sums.to_vec();
                distinct.sort_unstable();
                distinct.dedup();
                assert!(
                    distinct.len() >= 28,
                    "groups {groups}: sums too alike to tell lanes"
                );
            }
            // Terms that make each estimate its sum: the lanes hold the sums in lane order.
            let (zero, minus_one) = ([0.0f32; 32], [-1.0f32; 32]);
            let plain = EstimateTerms {
                key: 0.0,
                base: 0.0,
                scale: 1.0,
                cut: f32::INFINITY,
            };
            let mut lanes = [0; FASTSCAN_BLOCK];
            let below = (k.link_estimates)(&luts, &codes, &zero, &minus_one, plain, &mut lanes);
            assert_eq!(below, u32::MAX, "groups {groups}");
            for (p, &lane) in lanes.iter().enumerate() {
                let sum = f32::from(sums[LANE_CODE[p]]);
                assert_eq!(
                    lane,
                    crate::topk::ordered_bits(sum),
                    "groups {groups}, lane {p}"
                );
            }
            // Terms of a search's size, a padded lane (a = ∞, f = 0) and a cut among them:
            // the chosen kernel agrees with the scalar one to the bit.
            let a: Vec<f32> = (0..32)
                .map(|p| {
                    if p == 29 {
                        f32::INFINITY
                    } else {
                        (p as f32 * 0.7).sin() * 9.0
                    }
                })
                .collect();
            let f: Vec<f32> = (0..32)
                .map(|p| {
                    if p == 29 {
                        0.0
                    } else {
                        0.5 + (p as f32 * 0.3).cos().abs()
                    }
                })
                .collect();
            let mut terms = EstimateTerms {
                key: 41.5,
                base: -300.25,
                scale: 0.37,
                cut: f32::INFINITY,
            };
            // The cut at the median estimate, so that the mask is half set whatever the sums.
            let mut estimates = [0; FASTSCAN_BLOCK];
            scalar_link_estimates(&luts, &codes, &a, &f, terms, &mut estimates);
            let mut sorted: Vec<f32> = (0..32)
                .filter(|&p| p != 29)
                .map(|p| {
                    let s = f32::from(sums[LANE_CODE[p]]);
                    (-f[p]).mul_add(terms.scale.mul_add(s, terms.base), terms.key + a[p])
                })
                .collect();
            sorted.sort_by(f32::total_cmp);
            terms.cut = sorted[15];
            let (mut fast, mut scalar) = ([0; FASTSCAN_BLOCK], [0; FASTSCAN_BLOCK]);
            let fast_below = (k.link_estimates)(&luts, &codes, &a, &f, terms, &mut fast);
            let scalar_below = scalar_link_estimates(&luts, &codes, &a, &f, terms, &mut scalar);
            assert_eq!(fast, scalar, "groups {groups}");
            assert_eq!(fast_below, scalar_below, "groups {groups}");
            assert_eq!(fast_below >> 29 & 1, 0, "a padded lane never passes");
            for (p, &key) in scalar.iter().enumerate() {
                let s = f32::from(sums[LANE_CODE[p]]);
                let e = (-f[p]).mul_add(terms.scale.mul_add(s, terms.base), terms.key + a[p]);
                assert_eq!(key, crate::topk::ordered_bits(e), "lane {p}");
                assert_eq!(scalar_below >> p & 1 == 1, e < terms.cut, "lane {p}");
            }
            assert_eq!(
                fast_below.count_ones(),
                15,
                "groups {groups}: the cut splits them"
            );
            // A padded lane stays out with no cut at all, and with a key of −∞ (∞ − ∞ is NaN).
            for key in [41.5, f32::NEG_INFINITY] {
                let open = EstimateTerms {
                    key,
                    cut: f32::INFINITY,
                    ..terms
                };
                let below = (k.link_estimates)(&luts, &codes, &a, &f, open, &mut fast);
                assert_eq!(below >> 29 & 1, 0, "groups {groups}, key {key}");
            }
        }
        // The kernel's keys order as the estimates do, negatives below positives (their bits
        // flipped), whatever the lanes they come from.
        let a: Vec<f32> = [-3.0f32, -0.5, -0.0, 0.0, 0.5, 3.0].repeat(6)[..32].to_vec();
        let mut keys = [0; FASTSCAN_BLOCK];
        // A key of −0 adds nothing to any a, −0 included.
        let plain = EstimateTerms {
            key: -0.0,
            base: 0.0,
            scale: 0.0,
            cut: 0.0,
        };
        (k.link_estimates)(&[], &[], &a, &[0.0; 32], plain, &mut keys);
        for (p, q) in (0..32).flat_map(|p| (0..32).map(move |q| (p, q))) {
            assert_eq!(
                keys[p].cmp(&keys[q]),
                a[p].total_cmp(&a[q]),
                "{} against {}",
                a[p],
                a[q]
            );
        }
    }

    #[test]
    fn link_tables_are_the_scalar_kernel_s_and_sum_the_rounded_coordinates() {
        let k = code_kernels();
        for dim in (0..=200usize).step_by(4) {
            for h in [1u8, 21, 31] {
                // Ties included: halves of the step land exactly between two integers.
                let y: Vec<f32> = (0..dim)
                    .map(|i| match i % 7 {
                        0 => 0.5,
                        1 => -1.5,
                        _ => (i as f32 * 0.61).sin() * 3.0,
                    })
                    .collect();
                let mut fast = vec![0u8; 4 * dim];
                let mut scalar = vec![0u8; 4 * dim];
                let (step, total) = (k.link_tables)(&y, h, &mut fast);
                let (scalar_step, scalar_total) = scalar_link_tables(&y, h, &mut scalar);
                assert_eq!(fast, scalar, "dim {dim}, h {h}");
                assert_eq!(step, scalar_step);
                assert!((total - scalar_total).abs() <= 1e-3 * (1.0 + total.abs()));
                for (g, table) in scalar.chunks_exact(16).enumerate() {
                    let q: Vec<i32> = y[4 * g..4 * g + 4]
                        .iter()
                        .map(|x| (x / step).round() as i32)
                        .collect();
                    assert!(q.iter().all(|x| x.abs() <= i32::from(h)));
                    // Entry 15 takes every coordinate, entry 0 none; ties may round either way.
                    let all = i32::from(table[15]) - 4 * i32::from(h);
                    assert!((all - q.iter().sum::<i32>()).abs() <= 2, "dim {dim} g {g}");
                    assert_eq!(i32::from(table[0]), 4 * i32::from(h));
                }
            }
        }
    }

    #[test]
    fn widen_keys_is_the_scalar_kernel_s_up_to_summation_order() {
        let k = code_kernels();
        for dim in (0..=200usize).step_by(2) {
            let row: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).cos() * 5.0).collect();
            // The row as bfloat16 pairs, even coordinates in the low half (truncated).
            let words: Vec<f32> = row
                .chunks_exact(2)
                .map(|p| f32::from_bits((p[0].to_bits() >> 16) | (p[1].to_bits() & 0xffff_0000)))
                .collect();
            let q: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.11).sin() * 4.0).collect();
            let (sq, dot) = (k.widen_keys)(&q, &words);
            let (scalar_sq, scalar_dot) = scalar_widen_keys(&q, &words);
            let want_sq: f32 = q
                .iter()
                .zip(&row)
                .map(|(q, x)| q - f32::from_bits(x.to_bits() & 0xffff_0000))
                .map(|y| y * y)
                .sum();
            let want_dot: f32 = q
                .iter()
                .zip(&row)
                .map(|(q, x)| q * f32::from_bits(x.to_bits() & 0xffff_0000))
                .sum();
            assert!(
                (scalar_dot - want_dot).abs() <= 1e-4 * (1.0 + want_dot.abs()),
                "dim {dim}"
            );
            assert!(
                (sq - scalar_sq).abs() <= 1e-4 * (1.0 + want_sq),
                "dim {dim}"
            );
            assert!(
                (scalar_sq - want_sq).abs() <= 1e-4 * (1.0 + want_sq),
                "dim {dim}"
            );
            assert!(
                (dot - scalar_dot).abs() <= 1e-4 * (1.0 + dot.abs()),
                "dim {dim}"
            );
        }
    }
}
