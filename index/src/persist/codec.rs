//! Little-endian encoding of the plain arrays index files are made of.
//!
//! Every read is bounds-checked and reports corruption instead of panicking, because index
//! files come from disk and a torn or foreign file must never crash a server at start-up.

use crate::{IndexError, Result};

/// Appends little-endian values to a byte buffer.
pub struct Encoder<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> Encoder<'a> {
    /// Writes into `out`, after whatever it already holds.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }
    /// One byte.
    pub fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    /// A u32.
    pub fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    /// A u64.
    pub fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    /// A length-prefixed byte string.
    pub fn bytes(&mut self, v: &[u8]) {
        self.u64(v.len() as u64);
        self.out.extend_from_slice(v);
    }
    /// A length-prefixed byte string that `write` appends in place: what [`Encoder::bytes`]
    /// writes for the same bytes, without a second buffer (an index of gigabytes is not
    /// held twice while a snapshot is written).
    pub fn nested(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let at = self.out.len();
        self.u64(0);
        write(self.out);
        let len = (self.out.len() - at - 8) as u64;
        self.out[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }
    /// A length-prefixed f32 array.
    pub fn f32s(&mut self, v: &[f32]) {
        self.u64(v.len() as u64);
        self.out.reserve(v.len() * 4);
        for x in v {
            self.out.extend_from_slice(&x.to_le_bytes());
        }
    }
    /// A length-prefixed u32 array.
    pub fn u32s(&mut self, v: impl ExactSizeIterator<Item = u32>) {
        self.u64(v.len() as u64);
        self.out.reserve(v.len() * 4);
        for x in v {
            self.out.extend_from_slice(&x.to_le_bytes());
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
        Encoder::new(&mut in_place).nested(|out| out.extend_from_slice(inner));
        assert_eq!(by_copy, in_place);
        let mut d = Decoder::new(&in_place[1..]);
        assert_eq!(d.bytes().unwrap(), inner);
        d.finish().unwrap();
    }
}
