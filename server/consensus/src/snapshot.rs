//! A snapshot on disk: a directory of files and the manifest that names them.
//!
//! A snapshot is never held in memory. It is a directory under the partition's `snapshots/`:
//! the state's table files (`cairn-storage` writes them from one point-in-time view), any files
//! the partition adds (its index file, so the receiver does not rebuild the index), and
//! `manifest.json`, written last, which lists every file with its size and CRC-32 along with
//! openraft's snapshot metadata. A directory without a manifest is incomplete and is removed.

use std::path::{Path, PathBuf};

use cairn_storage::StateFile;
use openraft::SnapshotMeta;
use serde::{Deserialize, Serialize};

use crate::{ReplicaAddr, ReplicaId};

/// The manifest's file name inside a snapshot directory.
pub const MANIFEST: &str = "manifest.json";
/// Directories named with this prefix hold a snapshot being received (see `groups.rs`); they
/// are kept across restarts so a transfer resumes.
pub const INCOMING: &str = "incoming-";

/// openraft's handle on a snapshot: the directory that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotDir {
    /// The directory.
    pub path: PathBuf,
}

/// What a snapshot holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The last log entry it reflects, its membership and its id.
    pub meta: SnapshotMeta<ReplicaId, ReplicaAddr>,
    /// The state's table files.
    pub state: Vec<StateFile>,
    /// Files the partition added (its index file); `family` is `extra`.
    pub extras: Vec<StateFile>,
}

impl Manifest {
    /// Reads the manifest of the snapshot in `dir`.
    pub fn read(dir: &Path) -> std::io::Result<Self> {
        let bytes = fs_err::read(dir.join(MANIFEST))?;
        let manifest: Self = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
        manifest.check_names()?;
        Ok(manifest)
    }

    /// Refuses a manifest naming a file outside its directory. Manifests come from peers, and
    /// the names are joined to local paths to read, remove and ingest files.
    pub fn check_names(&self) -> std::io::Result<()> {
        match self
            .state
            .iter()
            .chain(&self.extras)
            .find(|file| !is_file_name(&file.name))
        {
            Some(file) => Err(std::io::Error::other(format!(
                "`{}` is not a snapshot file name",
                file.name
            ))),
            None => Ok(()),
        }
    }

    /// Writes the manifest into `dir`, atomically and durably: a crash leaves either no
    /// manifest (an incomplete snapshot) or this one.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let tmp = dir.join("manifest.json.tmp");
        let mut file = fs_err::File::create(&tmp)?;
        std::io::Write::write_all(&mut file, &bytes)?;
        file.sync_all()?;
        fs_err::rename(&tmp, dir.join(MANIFEST))?;
        sync_dir(dir)
    }

    /// The log index the snapshot reflects (0 for an empty one).
    pub fn index(&self) -> u64 {
        self.meta.last_log_id.map_or(0, |id| id.index)
    }
}

/// Whether `name` is a plain file name: not empty, no directory separator, not hidden (so
/// neither `.` nor `..`).
pub fn is_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['/', '\\']) && !name.starts_with('.')
}

/// Size and CRC-32 of a file the partition adds to a snapshot, as a manifest lists it (read in
/// pieces: table files run to a gigabyte).
pub fn extra_file(dir: &Path, name: &str) -> std::io::Result<StateFile> {
    let mut file = fs_err::File::open(dir.join(name))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = std::io::Read::read(&mut file, &mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    Ok(StateFile {
        family: "extra".to_owned(),
        name: name.to_owned(),
        bytes,
        crc32: hasher.finalize(),
    })
}

/// Checks every file the manifest lists (size and CRC-32) in `dir`; a damaged file is removed,
/// so a resumed transfer sends it again.
pub fn check_files(dir: &Path, manifest: &Manifest) -> std::io::Result<()> {
    for file in manifest.state.iter().chain(&manifest.extras) {
        let found = extra_file(dir, &file.name)?;
        if (found.bytes, found.crc32) != (file.bytes, file.crc32) {
            remove(&dir.join(&file.name))?;
            return Err(std::io::Error::other(format!(
                "snapshot file {} has {} bytes, CRC {:08x}; expected {} bytes, CRC {:08x}",
                file.name, found.bytes, found.crc32, file.bytes, file.crc32
            )));
        }
    }
    Ok(())
}

/// fsyncs a directory, so a rename or a new file in it survives a crash.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs_err::File::open(dir)?.sync_all()
}

/// The newest complete snapshot under `root`; every other directory there (older snapshots,
/// incomplete ones) is removed, except transfers being received. Callers hold the state
/// machine's snapshot lock, so no build is under way in a scratch directory.
pub fn newest(root: &Path) -> std::io::Result<Option<(PathBuf, Manifest)>> {
    if !root.is_dir() {
        return Ok(None);
    }
    let mut best: Option<(PathBuf, Manifest)> = None;
    let mut others = Vec::new();
    for entry in fs_err::read_dir(root)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with(INCOMING)) {
            continue;
        }
        match Manifest::read(&path) {
            Ok(manifest) => {
                let newer = best
                    .as_ref()
                    .is_none_or(|(_, b)| manifest.meta.last_log_id > b.meta.last_log_id);
                if newer {
                    if let Some((old, _)) = best.replace((path, manifest)) {
                        others.push(old);
                    }
                } else {
                    others.push(path);
                }
            }
            Err(_) => others.push(path),
        }
    }
    for path in others {
        remove(&path)?;
    }
    Ok(best)
}

/// Removes a snapshot directory (or a stray file).
pub fn remove(path: &Path) -> std::io::Result<()> {
    if path.is_dir() {
        fs_err::remove_dir_all(path)
    } else {
        fs_err::remove_file(path)
    }
}
