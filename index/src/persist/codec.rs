//! Little-endian encoding of the plain arrays index files are made of.
//!
//! Every read is bounds-checked and reports corruption instead of panicking, because index
//! files come from disk and a torn or foreign file must never crash a server at start-up.

use crate::{IndexError, Result};

/// Where encoded bytes go: a `Vec` in memory, or an index file written as it is encoded
/// ([`crate::persist::write_file_with`]), so a snapshot of gigabytes never exists whole in
/// the heap.
///
/// Writes are infallible here; a sink that can fail (a full disk) keeps its first error and
/// reports it when it is finished, so encoders stay plain sequences of writes.
pub trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// A hint that about `additional` more bytes follow.
    fn reserve(&mut self, _additional: usize) {}
    /// Starts a length-prefixed byte string whose length is not known yet: writes a
    /// placeholder and returns the mark [`Sink::end_nested`] patches it at.
    fn begin_nested(&mut self) -> u64;
    /// Ends the string begun at `mark`, writing its length into the placeholder.
    fn end_nested(&mut self, mark: u64);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
    fn reserve(&mut self, additional: usize) {
        Vec::reserve(self, additional);
    }
    fn begin_nested(&mut self) -> u64 {
        let mark = self.len() as u64;
        self.extend_from_slice(&0u64.to_le_bytes());
        mark
    }
    fn end_nested(&mut self, mark: u64) {
        let at = mark as usize;
        let len = (self.len() - at - 8) as u64;
        self[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }
}

/// Arrays are converted to little-endian bytes through a buffer of this many, so a sink
/// sees a few large writes, not one call per element.
const CHUNK_BYTES: usize = 16 * 1024;

/// Appends little-endian values to a [`Sink`].
pub struct Encoder<'a> {
    out: &'a mut dyn Sink,
}

impl<'a> Encoder<'a> {
    /// Writes into `out`, after whatever it already holds.
    pub fn new(out: &'a mut dyn Sink) -> Self {
        Self { out }
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.out.put(&[v]);
    }
    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.out.put(&v.to_le_bytes());
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.out.put(&v.to_le_bytes());
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.out.put(v);
    }
    /// A length-prefixed byte string that `write` appends in place: what [`Encoder::bytes`]
    /// writes for the same bytes, without a second buffer (an index of gigabytes is not
    /// held twice while a snapshot is written).
    pub fn nested(&mut self, write: impl FnOnce(&mut dyn Sink)) {
        let mark = self.out.begin_nested();
        write(&mut *self.out);
        self.out.end_nested(mark);
    }
    /// A length-prefixed f32 array.
    pub fn f32s(&mut self, v: &[f32]) {
        self.words(v.len(), v.iter().map(|x| x.to_bits()));
    }
    /// A length-prefixed u32 array.
    pub fn u32s(&mut self, v: impl ExactSizeIterator<Item = u32>) {
        self.words(v.len(), v);
    }
    /// `len` 4-byte words, converted a buffer at a time.
    fn words(&mut self, len: usize, mut v: impl Iterator<Item = u32>) {
        self.u64(len as u64);
        self.out.reserve(len * 4);
        let mut buf = [0u8; CHUNK_BYTES];
        loop {
            let mut filled = 0;
            for (slot, w) in buf.chunks_exact_mut(4).zip(v.by_ref()) {
                slot.copy_from_slice(&w.to_le_bytes());
                filled += 4;
            }
            if filled == 0 {
                return;
            }
            self.out.put(&buf[..filled]);
        }
    }
}

/// Reads what [`Encoder`] wrote, failing cleanly on truncation.
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Reads from the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                IndexError::corrupt(format!(
                    "truncated: wanted {n} bytes at offset {}",
                    self.pos
                ))
            })?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    /// A u32.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    /// A u64.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    /// A u64 that must fit in memory as a length or count.
    pub fn usize(&mut self) -> Result<usize> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| IndexError::corrupt(format!("length {v} out of range")))
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.usize()?;
        self.take(n)
    }
    /// The 4-byte words of a length-prefixed array.
    fn words(&mut self) -> Result<std::slice::ChunksExact<'a, u8>> {
        let n = self.usize()?;
        let len = n
            .checked_mul(4)
            .ok_or_else(|| IndexError::corrupt("array too long"))?;
        Ok(self.take(len)?.chunks_exact(4))
    }
    /// A length-prefixed f32 array.
    pub fn f32s(&mut self) -> Result<Vec<f32>> {
        Ok(self.f32_iter()?.collect())
    }
    /// The floats of a length-prefixed f32 array, for a caller that stores them itself.
    pub fn f32_iter(&mut self) -> Result<impl ExactSizeIterator<Item = f32> + 'a> {
        Ok(self
            .words()?
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
    }
    /// A length-prefixed u32 array, mapped element-wise (e.g. into atomics) without a copy.
    pub fn u32s_map<T>(&mut self, f: impl Fn(u32) -> T) -> Result<Vec<T>> {
        Ok(self
            .words()?
            .map(|c| f(u32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect())
    }
    /// Fails unless every byte was consumed: trailing garbage means a format mismatch.
    pub fn finish(self) -> Result<()> {
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(IndexError::corrupt(format!(
                "{} trailing bytes",
                self.bytes.len() - self.pos
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_writes_what_bytes_writes() {
        let inner = b"an index's own bytes";
        let (mut by_copy, mut in_place) = (vec![7u8], vec![7u8]);
        Encoder::new(&mut by_copy).bytes(inner);
        Encoder::new(&mut in_place).nested(|out| out.put(inner));
        assert_eq!(by_copy, in_place);
        let mut d = Decoder::new(&in_place[1..]);
        assert_eq!(d.bytes().unwrap(), inner);
        d.finish().unwrap();
    }

    #[test]
    fn arrays_cross_the_conversion_buffer_whole() {
        // Lengths around the buffer's word count, where a chunking slip would drop or
        // repeat a word.
        let words = CHUNK_BYTES / 4;
        for len in [0, 1, words - 1, words, words + 1, 3 * words + 7] {
            let floats: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 3.0).collect();
            let mut bytes = Vec::new();
            Encoder::new(&mut bytes).f32s(&floats);
            assert_eq!(bytes.len(), 8 + 4 * len);
            let mut d = Decoder::new(&bytes);
            assert_eq!(d.f32s().unwrap(), floats);
            d.finish().unwrap();
        }
    }
}
