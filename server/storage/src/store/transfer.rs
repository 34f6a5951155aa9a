//! Moving a partition's whole state between replicas as files.
//!
//! A replica that is new, was wiped, or fell behind the retained log receives the state instead
//! of the entries: the sender writes the state families, as of one point in time, into sorted
//! table files (RocksDB's own format, so the receiver ingests them without re-inserting a key),
//! and the receiver swaps them in for its own state. Files are capped in size so a transfer can
//! resume file by file, and each carries a CRC-32 the receiver checks before touching its state.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use rocksdb::{IngestExternalFileOptions, IteratorMode, Options, SstFileWriter, WriteBatch};
use serde::{Deserialize, Serialize};

use super::{PartitionStore, STATE_FAMILIES};
use crate::{Result, StorageError};

/// One file of an exported state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFile {
    /// The column family it belongs to.
    pub family: String,
    /// File name inside the export directory.
    pub name: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
}

/// What [`PartitionStore::export_state`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateExport {
    /// The files, in the order they were written.
    pub files: Vec<StateFile>,
    /// The `meta` family as exported (small named values), so the caller can read what the
    /// export holds, e.g. which log index it reflects, from the very same point in time.
    pub meta: BTreeMap<String, Vec<u8>>,
}

/// The state families of one store as of one moment: taken in microseconds, exported at
/// leisure. A collection of several partitions takes every partition's view while its writes
/// are held, then exports them one by one, so its snapshot is one moment of the whole.
pub struct StateView<'a> {
    store: &'a PartitionStore,
    view: rocksdb::Snapshot<'a>,
}

impl PartitionStore {
    /// The state as of now (writers go on; they are not part of the view).
    pub fn view(&self) -> StateView<'_> {
        StateView {
            store: self,
            view: self.db.snapshot(),
        }
    }

    /// Writes the state families (points, vectors, op log, meta), as of one point in time, into
    /// table files of at most about `max_file_bytes` each in `dir` (which must exist). Writers
    /// may go on meanwhile; they are not part of the export.
    pub fn export_state(&self, dir: &Path, max_file_bytes: u64) -> Result<StateExport> {
        self.view().export(dir, max_file_bytes)
    }
}

impl StateView<'_> {
    /// Writes the view's state families into table files of at most about `max_file_bytes`
    /// each in `dir` (which must exist), as [`PartitionStore::export_state`] does.
    pub fn export(&self, dir: &Path, max_file_bytes: u64) -> Result<StateExport> {
        let mut files = Vec::new();
        let mut meta = BTreeMap::new();
        let options = Options::default();
        for family in STATE_FAMILIES {
            let cf = self.store.cf(family)?;
            let mut writer: Option<(SstFileWriter<'_>, String)> = None;
            for item in self.view.iterator_cf(cf, IteratorMode::Start) {
                let (key, value) = item.map_err(|e| self.store.rocks(e))?;
                if family == super::CF_META {
                    meta.insert(String::from_utf8_lossy(&key).into_owned(), value.to_vec());
                }
                if writer
                    .as_ref()
                    .is_some_and(|(w, _)| w.file_size() >= max_file_bytes)
                {
                    if let Some((w, name)) = writer.take() {
                        files.push(self.store.finish_file(w, dir, family, name)?);
                    }
                }
                if writer.is_none() {
                    let name = format!("{family}-{:04}.sst", files.len());
                    let w = SstFileWriter::create(&options);
                    w.open(dir.join(&name)).map_err(|e| self.store.rocks(e))?;
                    writer = Some((w, name));
                }
                if let Some((w, _)) = writer.as_mut() {
                    w.put(&key, &value).map_err(|e| self.store.rocks(e))?;
                }
            }
            if let Some((w, name)) = writer {
                files.push(self.store.finish_file(w, dir, family, name)?);
            }
        }
        Ok(StateExport { files, meta })
    }
}

impl PartitionStore {
    fn finish_file(
        &self,
        mut writer: SstFileWriter<'_>,
        dir: &Path,
        family: &str,
        name: String,
    ) -> Result<StateFile> {
        // `finish` syncs the file.
        writer.finish().map_err(|e| self.rocks(e))?;
        let (bytes, crc32) = file_crc(&dir.join(&name))?;
        Ok(StateFile {
            family: family.to_owned(),
            name,
            bytes,
            crc32,
        })
    }

    /// Replaces the state families with the exported `files` found in `dir`. Every file is
    /// checked (size and CRC) before the state is touched; the files themselves stay in `dir`.
    ///
    /// Not atomic across a crash: the old state is cleared, then the files are ingested. A
    /// caller that must survive a crash in between marks the install as begun (in the log's
    /// records) and clears the state on restart if the mark is still there.
    pub fn replace_state(&self, dir: &Path, files: &[StateFile]) -> Result<()> {
        for file in files {
            if !STATE_FAMILIES.contains(&file.family.as_str()) {
                return Err(self.corrupt(format!("`{}` is not a state family", file.family)));
            }
            let got = file_crc(&dir.join(&file.name))?;
            if got != (file.bytes, file.crc32) {
                return Err(self.corrupt(format!(
                    "state file {} has {} bytes, CRC {:08x}; expected {} bytes, CRC {:08x}",
                    file.name, got.0, got.1, file.bytes, file.crc32
                )));
            }
        }
        self.clear_state()?;
        // Ingest hard links, which RocksDB moves into the database, so the export directory
        // stays whole (a snapshot the receiver may serve to others in turn) without a copy.
        let staging = self.path.join("ingest");
        if staging.is_dir() {
            fs_err::remove_dir_all(&staging)?;
        }
        fs_err::create_dir_all(&staging)?;
        let mut options = IngestExternalFileOptions::default();
        options.set_move_files(true);
        for family in STATE_FAMILIES {
            let mut paths = Vec::new();
            for file in files.iter().filter(|f| f.family == family) {
                let staged = staging.join(&file.name);
                if std::fs::hard_link(dir.join(&file.name), &staged).is_err() {
                    fs_err::copy(dir.join(&file.name), &staged)?;
                }
                paths.push(staged);
            }
            if !paths.is_empty() {
                self.db
                    .ingest_external_file_cf_opts(self.cf(family)?, &options, paths)
                    .map_err(|e| self.rocks(e))?;
            }
        }
        fs_err::remove_dir_all(&staging)?;
        Ok(())
    }

    /// Removes every key of the state families, durably: what a replica does before taking a
    /// state from elsewhere, or on restart after an install that did not finish.
    pub fn clear_state(&self) -> Result<()> {
        let mut batch = WriteBatch::default();
        for family in STATE_FAMILIES {
            let cf = self.cf(family)?;
            let last = self.db.iterator_cf(cf, IteratorMode::End).next();
            if let Some(item) = last {
                let (key, _) = item.map_err(|e| self.rocks(e))?;
                batch.delete_range_cf(cf, &[][..], &key[..]);
                batch.delete_cf(cf, &key);
            }
        }
        let mut options = rocksdb::WriteOptions::default();
        options.set_sync(true);
        self.db
            .write_opt(batch, &options)
            .map_err(|e| self.rocks(e))
    }
}

/// Size and CRC-32 of a file.
fn file_crc(path: &Path) -> Result<(u64, u32)> {
    let mut file = fs_err::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(StorageError::Io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok((bytes, hasher.finalize()))
}
