//! A partition's part of a collection snapshot (`crate::snapshots`): its state families as
//! RocksDB table files — the very files a Raft snapshot moves between replicas
//! ([`cairn_storage::StateFile`], each with its CRC) — and its index file, so that a
//! recovered partition loads its graph instead of building it again.
//!
//! Taking one is two steps, so that a collection of several partitions can take every
//! partition's moment while its writes are held and copy them out afterwards:
//! [`Partition::freeze`] links the index file and takes the store's view (microseconds),
//! [`Frozen::export`] writes the table files (seconds, writes go on meanwhile).

use std::path::{Path, PathBuf};

use cairn_storage::{StateFile, StateView};
use serde::{Deserialize, Serialize};

use super::{paths, Partition};
use crate::config::StorageConfig;
use crate::error::{Result, ServerError};

/// Table files are cut at this size, as a Raft snapshot's are.
const STATE_FILE_BYTES: u64 = 1 << 30;

/// Name of the index file inside a partition's folder of a snapshot.
const INDEX_FILE: &str = "index.cidx";

/// What one partition put into its folder of a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionFiles {
    /// The state families as table files, each with its size and CRC-32.
    pub state: Vec<StateFile>,
    /// The index file, when the partition had written one. It holds the index as of a log
    /// position at or before the state's; the state's op log holds the writes after it, which
    /// opening the partition replays. Without it the index is built from the points.
    pub index: Option<String>,
}

/// A partition's moment, taken and not yet written out.
pub struct Frozen<'a> {
    view: StateView<'a>,
    dir: PathBuf,
    index: Option<String>,
}

impl Partition {
    /// Takes this partition's moment into `dir` (created): links its index file there first,
    /// then takes the store's view, so the index is never ahead of the state (an index file
    /// from after the view would hold points the state does not).
    pub fn freeze(&self, dir: &Path) -> Result<Frozen<'_>> {
        let io = |e: std::io::Error| ServerError::Internal(e.to_string());
        fs_err::create_dir_all(dir).map_err(io)?;
        let source = paths::snapshot(&self.shared.dir);
        let target = dir.join(INDEX_FILE);
        // The applier replaces the index file by renaming a new one over it, so the link holds
        // one whole file, whichever it was.
        let index = match std::fs::hard_link(&source, &target) {
            Ok(()) => Some(INDEX_FILE.to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            // Another file system: copy (a rename mid-copy still leaves the open file whole).
            Err(_) => match fs_err::copy(&source, &target) {
                Ok(_) => Some(INDEX_FILE.to_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io(e)),
            },
        };
        Ok(Frozen {
            view: self.shared.store.view(),
            dir: dir.to_path_buf(),
            index,
        })
    }

    /// Makes a partition folder `dir` (empty) from a snapshot's folder `from`: the table
    /// files are checked against their CRCs and ingested into a new store, and the index file
    /// is moved into place. Opening the partition afterwards loads it as after a restart.
    pub fn restore(
        dir: &Path,
        from: &Path,
        files: &PartitionFiles,
        storage: StorageConfig,
    ) -> Result<()> {
        let store = Self::own_store(dir, storage)?;
        store.replace_state(from, &files.state)?;
        drop(store);
        if let Some(name) = &files.index {
            if !is_plain_name(name) {
                return Err(ServerError::InvalidRequest(format!(
                    "the snapshot names index file {name:?}, which is not a plain file name"
                )));
            }
            fs_err::rename(from.join(name), paths::snapshot(dir))
                .map_err(|e| ServerError::InvalidRequest(format!("the snapshot's index: {e}")))?;
        }
        Ok(())
    }
}

impl Frozen<'_> {
    /// Writes the moment's table files into its folder.
    pub fn export(self) -> Result<PartitionFiles> {
        let export = self.view.export(&self.dir, STATE_FILE_BYTES)?;
        Ok(PartitionFiles {
            state: export.files,
            index: self.index,
        })
    }
}

/// A name that stays inside its folder: no separators, not `.` or `..`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}
