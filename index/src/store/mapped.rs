//! A growable `f32` buffer in a memory-mapped file: rows the kernel may page out.
//!
//! Why. A store's rows are most of an index's memory (512 bytes a row at 128 dimensions,
//! against ~130 bytes of links at M = 16). When a graph traverses by row codes, only the few
//! candidates it re-scores read a row, so the rows need not stay in RAM: mapped from a file,
//! they live in the page cache, which the kernel fills on demand and empties under pressure,
//! as Qdrant's `on_disk` vectors do. Anonymous memory cannot be paged out without swap; a
//! file's pages can.
//!
//! The file is scratch, not a second copy of the truth. It is created nameless in the folder
//! it is given (`O_TMPFILE`, or created and unlinked at once), so a crash leaves nothing
//! behind and no two stores can ever share one. Index files keep holding the rows as before,
//! so snapshots, exports and replicas read and write the same format whether a store is
//! mapped or not; loading a mapped store streams the rows from the index file into a new
//! scratch file.
//!
//! Access is random (`MADV_RANDOM`): a graph search reads scattered rows, and the kernel's
//! default read-ahead would pull 128 KiB of neighbours into the cache for each 512-byte row.
//!
//! Growth adds a quarter (at least 1 MiB) and maps the file again; the store's writer holds
//! its index's write lock, so no reader holds a slice into the old map. The new blocks are
//! allocated first (`posix_fallocate`): a sparse file would meet a full disk at the first
//! write into a hole, as a SIGBUS instead of an error.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use memmap2::{Advice, MmapMut};

use crate::Result;

/// Smallest mapping, in floats (1 MiB): keeps tiny stores from remapping on every batch.
const MIN_CAPACITY: usize = 1 << 18;

/// `len` floats at the start of a scratch file mapped into memory; see the module docs.
pub(crate) struct MappedFloats {
    /// The folder the scratch file was made in (a copy of the store makes its own there).
    dir: PathBuf,
    file: File,
    /// Maps the whole file (`capacity` floats); `None` until the first row arrives, since
    /// an empty mapping is an error.
    map: Option<MmapMut>,
    len: usize,
    capacity: usize,
}

impl MappedFloats {
    /// An empty buffer whose scratch file lives in `dir` (which must exist).
    pub(crate) fn new(dir: &Path) -> Result<Self> {
        let file = tempfile::tempfile_in(dir).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("creating a vector file in {}: {e}", dir.display()),
            )
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            map: None,
            len: 0,
            capacity: 0,
        })
    }

    /// The folder the scratch file lives in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Floats in use.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The floats in use.
    #[inline]
    pub(crate) fn as_slice(&self) -> &[f32] {
        match &self.map {
            // SAFETY: the map is page-aligned (so aligned for f32) and `capacity · 4` bytes
            // long, `len ≤ capacity`, and every byte of it is initialised (a file reads as
            // zeros where unwritten). The file is nameless and private to this buffer, so no
            // other process or mapping writes it, and the borrow of `self` keeps the map alive
            // and unmodified (writes need `&mut self`).
            Some(map) => unsafe { std::slice::from_raw_parts(map.as_ptr().cast(), self.len) },
            None => &[],
        }
    }

    /// Makes sure `count` more floats fit without growing the file again: once this
    /// succeeds, a [`MappedFloats::grow`] of up to `count` cannot fail. On failure (a full
    /// disk) nothing changes.
    pub(crate) fn reserve(&mut self, count: usize) -> Result<()> {
        let end = self.len + count;
        if end <= self.capacity {
            return Ok(());
        }
        let capacity = end.max(self.capacity + self.capacity / 4).max(MIN_CAPACITY);
        let (from, to) = (self.capacity * 4, capacity * 4);
        // SAFETY: `posix_fallocate` only reads its integer arguments; the descriptor is this
        // buffer's own open file.
        let failed = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        };
        if failed != 0 {
            return Err(std::io::Error::new(
                std::io::Error::from_raw_os_error(failed).kind(),
                format!(
                    "growing a vector file in {} to {to} bytes: {}",
                    self.dir.display(),
                    std::io::Error::from_raw_os_error(failed)
                ),
            )
            .into());
        }
        // The old map stays until the new one exists: growing a file under a mapping is safe
        // (only shrinking is not), and a failure here leaves the buffer as it was.
        // SAFETY: the file is private to this buffer (see `as_slice`), so nothing else
        // truncates or writes it while mapped.
        let map = unsafe { MmapMut::map_mut(&self.file)? };
        // A hint: failing to give it changes speed, not results.
        let _ = map.advise(Advice::Random);
        self.map = Some(map);
        self.capacity = capacity;
        Ok(())
    }

    /// Makes room for `count` more floats (zero) and returns them; fails, changing nothing,
    /// when the file cannot grow.
    pub(crate) fn grow(&mut self, count: usize) -> Result<&mut [f32]> {
        if count == 0 {
            return Ok(&mut []);
        }
        self.reserve(count)?;
        let start = self.len;
        let end = start + count;
        self.len = end;
        let map = self.map.as_mut().expect("reserved above: capacity > 0");
        // SAFETY: as in `as_slice`; the exclusive borrow of `self` makes this slice the only
        // access to these floats while it lives.
        let all = unsafe { std::slice::from_raw_parts_mut(map.as_mut_ptr().cast::<f32>(), end) };
        Ok(&mut all[start..])
    }

    /// Bytes of file mapped (resident only where touched and not paged out).
    pub(crate) fn mapped_bytes(&self) -> usize {
        self.capacity * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_across_remaps_and_keeps_every_float() {
        let dir = tempfile::tempdir().unwrap();
        let mut floats = MappedFloats::new(dir.path()).unwrap();
        assert!(floats.as_slice().is_empty());
        let mut expected = Vec::new();
        // Batches that cross the first mapping's end several times.
        for step in 0..6 {
            let batch: Vec<f32> = (0..MIN_CAPACITY / 2 + 7)
                .map(|i| (step * 1_000_003 + i) as f32)
                .collect();
            floats.grow(batch.len()).unwrap().copy_from_slice(&batch);
            expected.extend_from_slice(&batch);
            assert_eq!(floats.as_slice(), &expected[..]);
            assert_eq!(floats.as_slice().as_ptr() as usize % 64, 0);
        }
        assert!(floats.mapped_bytes() >= 4 * floats.len());
        // The scratch file is nameless: the folder stays empty.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_empty_buffer_grows_by_nothing_and_reserves_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let mut floats = MappedFloats::new(dir.path()).unwrap();
        assert!(floats.grow(0).unwrap().is_empty());
        assert_eq!(floats.mapped_bytes(), 0);
        floats.reserve(10).unwrap();
        let mapped = floats.mapped_bytes();
        assert!(mapped >= 40);
        floats.grow(10).unwrap().copy_from_slice(&[1.0; 10]);
        assert_eq!(
            floats.mapped_bytes(),
            mapped,
            "no growth past a reservation"
        );
        assert_eq!(floats.as_slice(), &[1.0; 10]);
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_it() {
        let err = MappedFloats::new(Path::new("/nonexistent/cairn-vectors"))
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("/nonexistent/cairn-vectors"),
            "{err}"
        );
    }
}
