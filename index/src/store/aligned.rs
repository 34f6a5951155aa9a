//! A growable `f32` buffer whose allocation starts on a 64-byte boundary.
//!
//! Why not `Vec<f32>`: its allocation is only 4-byte aligned, and glibc places large blocks at
//! a page boundary plus 16 bytes, so a 512-byte row (128 dimensions) straddles nine cache lines
//! instead of eight and a four-row kernel's loads split across lines. Here the floats live in
//! 64-byte blocks, so the allocation (and every 16th float) starts a cache line.
//!
//! Its one `unsafe` (the mapped buffer of `mapped.rs` has its own): a block is exactly
//! sixteen floats with no padding, so the first `len` floats of the block array can be viewed
//! as one `&[f32]`.

/// Floats per block: one cache line.
pub(crate) const BLOCK_FLOATS: usize = 16;

/// One cache line of floats. `repr(C)` with a single `[f32; 16]` field has no padding, and
/// `align(64)` equals its size, so an array of blocks is a gap-free array of floats.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([f32; BLOCK_FLOATS]);

const _: () = assert!(std::mem::size_of::<Block>() == 4 * BLOCK_FLOATS);
const _: () = assert!(std::mem::align_of::<Block>() == 64);

const ZERO: Block = Block([0.0; BLOCK_FLOATS]);

/// `len` floats at the start of a cache-line-aligned allocation; the tail of the last block
/// is zero and never read through [`AlignedFloats::as_slice`].
#[derive(Clone, Default)]
pub(crate) struct AlignedFloats {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedFloats {
    /// An empty buffer with room for `floats`. Every allocation of an `AlignedFloats` (this
    /// one, and each as it grows) is advised onto transparent huge pages where the kernel
    /// allows them (`madvise`, the default of most distributions, or `always`).
    ///
    /// Why. A buffer read at random, one small run per access, takes a TLB miss and a page
    /// walk on almost every access once it spans more than the TLB covers with 4 KiB pages
    /// (~6 MiB); with 2 MiB pages it spans a few hundred entries. The link-code search reads
    /// one ~1.5 KiB block per expanded node: on a hard 200k×128 set, huge pages made it
    /// 1.37× faster at recall@10 0.95. The rows of a store in RAM get them too: a graph build
    /// reads rows at random all over the store (BENCHMARKS.md, issue #25's build).
    pub(crate) fn on_huge_pages(floats: usize) -> Self {
        let blocks = Vec::with_capacity(floats.div_ceil(BLOCK_FLOATS));
        advise_huge_pages(&blocks);
        Self { blocks, len: 0 }
    }

    /// Floats in use.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The floats in use.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[f32] {
        debug_assert!(self.len <= self.blocks.len() * BLOCK_FLOATS);
        // SAFETY: `Block` is `repr(C)` around `[f32; 16]` with size 64 and no padding (checked
        // at compile time above), so `blocks` is `blocks.len() * 16` initialised, contiguous
        // f32s starting at its pointer, which is aligned for f32. `len` never exceeds that
        // count (every write path grows `blocks` first), and the borrow of `self` keeps the
        // allocation alive and unmodified for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.blocks.as_ptr().cast::<f32>(), self.len) }
    }

    /// The floats in use, writable.
    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        debug_assert!(self.len <= self.blocks.len() * BLOCK_FLOATS);
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes the slice the only
        // access to these floats while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<f32>(), self.len) }
    }

    /// Makes room for `count` more floats (zero) and returns them.
    pub(crate) fn grow(&mut self, count: usize) -> &mut [f32] {
        let start = self.len;
        let end = start + count;
        let blocks = end.div_ceil(BLOCK_FLOATS);
        // Reserved (geometrically, as `Vec<f32>::extend` did) and advised before the new
        // blocks are written.
        let additional = blocks - self.blocks.len();
        reserve_on_huge_pages(&mut self.blocks, additional);
        self.blocks.resize(blocks, ZERO);
        self.len = end;
        &mut self.as_mut_slice()[start..]
    }

    /// Bytes allocated.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
    }
}

/// Makes room for `additional` more elements in `vec`; when that moves it to a new
/// allocation, advises huge pages over it before anything is written there, so that the new
/// elements fault in as huge pages rather than waiting for the kernel to merge small ones.
pub(crate) fn reserve_on_huge_pages<T>(vec: &mut Vec<T>, additional: usize) {
    let capacity = vec.capacity();
    vec.reserve(additional);
    if vec.capacity() != capacity {
        advise_huge_pages(vec);
    }
}

/// `MADV_HUGEPAGE` over the whole 2 MiB pages inside `vec`'s allocation; a hint, so a
/// kernel that refuses it changes nothing but speed.
fn advise_huge_pages<T>(vec: &Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = vec.as_ptr() as usize;
        let end = start + vec.capacity() * std::mem::size_of::<T>();
        let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if first < last {
            // SAFETY: madvise with MADV_HUGEPAGE only changes how the kernel backs the pages
            // of [first, last), a range inside this live allocation; it does not change their
            // contents or validity, and it fails harmlessly on any error.
            unsafe {
                libc::madvise(
                    first as *mut libc::c_void,
                    last - first,
                    libc::MADV_HUGEPAGE,
                );
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = vec;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocation_is_cache_line_aligned_and_grows_in_place_of_a_vec() {
        let mut floats = AlignedFloats::default();
        assert!(floats.as_slice().is_empty());
        let mut expected = Vec::new();
        for step in 1..40 {
            let batch: Vec<f32> = (0..step).map(|i| (step * 100 + i) as f32).collect();
            floats.grow(batch.len()).copy_from_slice(&batch);
            expected.extend_from_slice(&batch);
            assert_eq!(floats.as_slice(), &expected[..]);
            assert_eq!(floats.as_slice().as_ptr() as usize % 64, 0);
            assert!(floats.capacity_bytes() >= 4 * floats.len());
        }
        floats.grow(2).copy_from_slice(&[1.5, 2.5]);
        expected.extend_from_slice(&[1.5, 2.5]);
        assert_eq!(floats.as_slice(), &expected[..]);
        let copy = floats.clone();
        assert_eq!(copy.as_slice(), floats.as_slice());
        assert_eq!(copy.as_slice().as_ptr() as usize % 64, 0);
    }

    #[test]
    fn capacity_is_whole_blocks() {
        let floats = AlignedFloats::on_huge_pages(17);
        assert_eq!(floats.capacity_bytes(), 128);
        assert_eq!(floats.len(), 0);
    }
}
