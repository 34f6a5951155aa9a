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
    /// Room for `floats` without reallocating.
    pub(crate) fn with_capacity(floats: usize) -> Self {
        Self {
            blocks: Vec::with_capacity(floats.div_ceil(BLOCK_FLOATS)),
            len: 0,
        }
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
    fn as_mut_slice(&mut self) -> &mut [f32] {
        debug_assert!(self.len <= self.blocks.len() * BLOCK_FLOATS);
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes the slice the only
        // access to these floats while it lives.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<f32>(), self.len) }
    }

    /// Makes room for `count` more floats (zero) and returns them.
    pub(crate) fn grow(&mut self, count: usize) -> &mut [f32] {
        let start = self.len;
        let end = start + count;
        // `Vec::resize` grows the allocation geometrically, as `Vec<f32>::extend` did.
        self.blocks.resize(end.div_ceil(BLOCK_FLOATS), ZERO);
        self.len = end;
        &mut self.as_mut_slice()[start..]
    }

    /// Bytes allocated.
    pub(crate) fn capacity_bytes(&self) -> usize {
        self.blocks.capacity() * std::mem::size_of::<Block>()
    }
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
    fn with_capacity_reserves_whole_blocks() {
        let floats = AlignedFloats::with_capacity(17);
        assert_eq!(floats.capacity_bytes(), 128);
        assert_eq!(floats.len(), 0);
    }
}
