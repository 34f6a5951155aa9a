//! Index files: a fixed header, an opaque payload, a checksum, written atomically.
//!
//! ```text
//! offset size field
//!      0    8 magic "CAIRNIDX"
//!      8    4 format_version (u32 LE) — bumped whenever any payload layout changes
//!     12    1 kind tag      (IndexKind::tag)
//!     13    1 metric tag    (Metric::tag)
//!     14    2 reserved, zero
//!     16    8 dim
//!     24    8 count         (slots in the index)
//!     32    8 applied_seq   (last op-log sequence number reflected in the payload)
//!     40    8 payload_len
//!     48    4 crc32 of bytes 0..48 and of the payload
//!     52    … payload
//! ```
//!
//! Files are derived data: a missing, torn or corrupt file is rebuilt from RocksDB, so the
//! reader's only duty is to *detect* damage (checksum, sizes) and never trust a bad file.
//! Writes go to `<name>.tmp`, are fsynced, renamed over the old file, and the directory is
//! fsynced, so a crash leaves either the old file or the new one.

pub mod codec;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use codec::Sink;

use crate::distance::Metric;
use crate::{IndexError, IndexKind, Result};

const MAGIC: &[u8; 8] = b"CAIRNIDX";
/// Current on-disk format version.
pub const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 52;

/// What the fixed header says about the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Which index the payload holds.
    pub kind: IndexKind,
    /// Its metric.
    pub metric: Metric,
    /// Its dimension.
    pub dim: u64,
    /// Its slot count.
    pub count: u64,
    /// The op-log sequence number the payload reflects; replay starts after it.
    pub applied_seq: u64,
}

/// Header plus payload as one byte string.
pub fn encode(header: &FileHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_header(header, payload));
    out.extend_from_slice(payload);
    out
}

/// The header of `payload`, checksum included.
fn encode_header(header: &FileHeader, payload: &[u8]) -> [u8; HEADER_LEN] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(payload);
    header_with(header, payload.len() as u64, &crc)
}

/// The header of a payload of `payload_len` bytes whose checksum state is `payload_crc`:
/// the file's checksum covers bytes 0..48 and then the payload, and CRC-32 states combine,
/// so a streamed payload needs no second pass.
fn header_with(
    header: &FileHeader,
    payload_len: u64,
    payload_crc: &crc32fast::Hasher,
) -> [u8; HEADER_LEN] {
    let mut out = Vec::with_capacity(HEADER_LEN);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.push(header.kind.tag());
    out.push(header.metric.tag());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&header.dim.to_le_bytes());
    out.extend_from_slice(&header.count.to_le_bytes());
    out.extend_from_slice(&header.applied_seq.to_le_bytes());
    out.extend_from_slice(&payload_len.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out);
    crc.combine(payload_crc);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.try_into().expect("the header is 52 bytes")
}

/// Splits and verifies a byte string written by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<(FileHeader, &[u8])> {
    if bytes.len() < HEADER_LEN {
        return Err(IndexError::corrupt("shorter than the header"));
    }
    if &bytes[..8] != MAGIC {
        return Err(IndexError::corrupt("not a Cairn index file (bad magic)"));
    }
    let u64_at = |at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(a)
    };
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != FORMAT_VERSION {
        return Err(IndexError::corrupt(format!(
            "format version {version}, this build reads {FORMAT_VERSION}"
        )));
    }
    let payload_len = u64_at(40);
    let payload = &bytes[HEADER_LEN..];
    if payload.len() as u64 != payload_len {
        return Err(IndexError::corrupt(format!(
            "payload is {} bytes, header says {payload_len}",
            payload.len()
        )));
    }
    let stored = u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&bytes[..48]);
    crc.update(payload);
    if crc.finalize() != stored {
        return Err(IndexError::corrupt("checksum mismatch"));
    }
    let header = FileHeader {
        kind: IndexKind::from_tag(bytes[12])
            .ok_or_else(|| IndexError::corrupt("unknown index kind"))?,
        metric: Metric::from_tag(bytes[13]).ok_or_else(|| IndexError::corrupt("unknown metric"))?,
        dim: u64_at(16),
        count: u64_at(24),
        applied_seq: u64_at(32),
    };
    Ok((header, payload))
}

/// Writes `header` + `payload` to `path` atomically (see [`write_file_with`]).
pub fn write_file(path: &Path, header: &FileHeader, payload: &[u8]) -> Result<()> {
    write_file_with(path, header, |out| out.put(payload))
}

/// Writes the file whose payload `write` encodes, atomically: `<name>.tmp`, fsync, rename,
/// directory fsync.
///
/// The payload goes to disk as it is encoded, through a small buffer: a snapshot of a
/// collection near a node's memory must not need that memory twice. Its length and checksum
/// are only known at the end, so the header is written last, over a placeholder.
pub fn write_file_with(
    path: &Path,
    header: &FileHeader,
    write: impl FnOnce(&mut dyn Sink),
) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let written = (|| {
        let mut sink = FileSink::create(&tmp)?;
        write(&mut sink);
        sink.finish(header)
    })();
    if let Err(e) = written {
        // A half-written file is useless; the next attempt starts over.
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    fs_err::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        fs_err::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// A [`Sink`] into an index file: the payload is written and checksummed as it comes, and a
/// nested string's length is patched in place once its end is reached.
struct FileSink {
    file: std::io::BufWriter<fs_err::File>,
    /// Payload bytes so far (the file offset is `HEADER_LEN` more).
    len: u64,
    /// The checksum of the innermost open string's bytes (of the payload, at the top).
    crc: crc32fast::Hasher,
    /// The checksums of the strings the innermost one is nested in, outermost first.
    outer: Vec<crc32fast::Hasher>,
    /// The first write error; later writes are skipped.
    error: Option<std::io::Error>,
}

impl FileSink {
    fn create(path: &Path) -> Result<Self> {
        let mut file = std::io::BufWriter::with_capacity(1 << 20, fs_err::File::create(path)?);
        file.write_all(&[0; HEADER_LEN])?;
        Ok(Self {
            file,
            len: 0,
            crc: crc32fast::Hasher::new(),
            outer: Vec::new(),
            error: None,
        })
    }

    /// Writes `bytes` at the end of the file, unless an earlier write failed.
    fn raw(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(bytes) {
                self.error = Some(e);
            }
        }
        self.len += bytes.len() as u64;
    }

    /// Writes `bytes` at payload offset `at`, then returns to the end.
    fn patch(&mut self, at: u64, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        let end = HEADER_LEN as u64 + self.len;
        let patched = (|| {
            self.file.seek(SeekFrom::Start(HEADER_LEN as u64 + at))?;
            self.file.write_all(bytes)?;
            self.file.seek(SeekFrom::Start(end)).map(|_| ())
        })();
        if let Err(e) = patched {
            self.error = Some(e);
        }
    }

    fn finish(mut self, header: &FileHeader) -> Result<()> {
        debug_assert!(self.outer.is_empty(), "a nested string was left open");
        if let Some(e) = self.error.take() {
            return Err(e.into());
        }
        let head = header_with(header, self.len, &self.crc);
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&head)?;
        let file = self.file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        Ok(())
    }
}

impl Sink for FileSink {
    fn put(&mut self, bytes: &[u8]) {
        self.crc.update(bytes);
        self.raw(bytes);
    }

    fn begin_nested(&mut self) -> u64 {
        let mark = self.len;
        // The placeholder is not checksummed: the length it becomes is, in `end_nested`.
        self.raw(&0u64.to_le_bytes());
        self.outer
            .push(std::mem::replace(&mut self.crc, crc32fast::Hasher::new()));
        mark
    }

    fn end_nested(&mut self, mark: u64) {
        let len = self.len - mark - 8;
        self.patch(mark, &len.to_le_bytes());
        let inner = std::mem::replace(
            &mut self.crc,
            self.outer.pop().expect("end_nested without begin_nested"),
        );
        self.crc.update(&len.to_le_bytes());
        self.crc.combine(&inner);
    }
}

/// A file's payload, mapped read-only: a multi-gigabyte index is decoded from the page
/// cache, never copied whole into the heap.
pub struct Payload {
    map: Option<memmap2::Mmap>,
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.map
            .as_deref()
            .map_or(&[], |bytes| &bytes[HEADER_LEN..])
    }
}

/// Reads and verifies a file written by [`write_file`]; errors name the path.
///
/// The file is mapped, not read: Cairn only ever replaces its files by a rename (see
/// [`write_file`]), never rewrites one in place, so the mapped inode cannot change under it.
/// A file that something else truncates while it is read faults the process (SIGBUS), as
/// any mapped file would.
pub fn read_file(path: &Path) -> Result<(FileHeader, Payload)> {
    let file = fs_err::File::open(path)?;
    let map = if file.metadata()?.len() == 0 {
        None
    } else {
        // SAFETY: Cairn writes index files whole under another name and renames them into
        // place (see `write_file`), so nothing truncates or writes the mapped file.
        Some(unsafe { memmap2::Mmap::map(file.file())? })
    };
    let bytes = map.as_deref().unwrap_or(&[]);
    let (header, _) = decode(bytes).map_err(|e| match e {
        IndexError::Corrupt { comment, .. } => IndexError::Corrupt {
            path: path.to_path_buf(),
            comment,
        },
        other @ (IndexError::WrongDimension { .. }
        | IndexError::InvalidParams(_)
        | IndexError::Full(_)
        | IndexError::Io(_)) => other,
    })?;
    Ok((header, Payload { map }))
}

#[cfg(test)]
mod tests {
    use super::codec::Encoder;
    use super::*;

    fn header() -> FileHeader {
        FileHeader {
            kind: IndexKind::Hnsw,
            metric: Metric::L2,
            dim: 4,
            count: 2,
            applied_seq: 77,
        }
    }

    #[test]
    fn round_trip() {
        let bytes = encode(&header(), b"payload");
        let (h, p) = decode(&bytes).unwrap();
        assert_eq!(h, header());
        assert_eq!(p, b"payload");
    }

    #[test]
    fn every_single_byte_flip_is_detected() {
        let bytes = encode(&header(), b"some payload bytes");
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(decode(&bad).is_err(), "flip at byte {i} went unnoticed");
        }
    }

    #[test]
    fn truncation_is_detected() {
        let bytes = encode(&header(), b"payload");
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes[..len]).is_err(),
                "truncation to {len} went unnoticed"
            );
        }
    }

    #[test]
    fn atomic_write_replaces_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.bin");
        write_file(&path, &header(), b"one").unwrap();
        write_file(&path, &header(), b"two").unwrap();
        let (_, payload) = read_file(&path).unwrap();
        assert_eq!(&*payload, b"two");
        assert!(!path.with_extension("tmp").is_file());
    }

    /// A streamed file with nested strings, three deep, reads back as the same bytes encoded
    /// in memory, checksum included: the patched lengths and the combined CRC agree.
    #[test]
    fn streamed_file_equals_the_file_encoded_in_memory() {
        fn payload(out: &mut dyn Sink) {
            let mut e = Encoder::new(out);
            e.u64(5);
            e.nested(|out| {
                let mut e = Encoder::new(out);
                e.f32s(&(0..10_000).map(|i| i as f32).collect::<Vec<_>>());
                e.nested(|out| {
                    let mut e = Encoder::new(out);
                    e.bytes(b"deepest");
                    e.nested(|_| {});
                });
                e.u32(9);
            });
            e.bytes(b"after");
        }
        let mut in_memory = Vec::new();
        payload(&mut in_memory);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.bin");
        write_file_with(&path, &header(), payload).unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk, encode(&header(), &in_memory));
        let (_, read) = read_file(&path).unwrap();
        assert_eq!(&*read, &in_memory[..]);
    }

    /// A file checked in at format version 1 must keep loading (tantivy's compat tests).
    #[test]
    fn checked_in_v1_file_still_loads() {
        let bytes = include_bytes!("../../tests/data/hnsw_v1.cidx");
        let (h, payload) = decode(bytes).unwrap();
        assert_eq!(h.kind, IndexKind::Hnsw);
        let index = crate::read_index(
            h.kind,
            payload,
            &crate::Trainers::default(),
            &crate::Placement::Memory,
        )
        .unwrap();
        assert_eq!(index.len() as u64, h.count);
        let (hits, _) = index
            .search(&[1.0, 0.0, 0.0, 0.0], 1, &Default::default(), None)
            .unwrap();
        assert_eq!(hits[0].slot, 0);
    }
}
