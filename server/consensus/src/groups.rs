//! The receiving end: the groups a node hosts, and the dispatch of peers' messages to them.
//!
//! The server's internal API hands every Raft message it receives to [`Groups::handle`] with
//! the group id, the replica it is for and the message kind from the URL. The answer is the
//! group's own result, encoded, errors included (a stale term is an answer, not a failure of
//! the call); only a message for a group or replica this node does not host, or one that does
//! not decode, is a [`HandleError`].

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::error::Fatal;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use openraft::{ErrorSubject, ErrorVerb, Raft, Snapshot};
use parking_lot::RwLock;

use crate::error::{encode, failed};
use crate::group::Proposal;
use crate::network::{GroupId, Rpc, SnapshotBegin, SnapshotChunk, SnapshotFinish};
use crate::snapshot::{self, SnapshotDir};
use crate::{PartTypes, ReplicaId};

/// Why a message got no answer from a group.
#[derive(Debug, thiserror::Error)]
pub enum HandleError {
    /// This node does not host the group (it was dropped, or never placed here).
    #[error("group {0} is not hosted on this node")]
    UnknownGroup(GroupId),
    /// The node hosts another replica of the group than the one the message is for (that one
    /// lost its files and was replaced here, see [`crate::Addressee`]).
    #[error("replica {asked} of group {group} is not hosted on this node (replica {hosted} is)")]
    OtherReplica {
        /// The group.
        group: GroupId,
        /// The replica the message is for.
        asked: ReplicaId,
        /// The replica hosted here.
        hosted: ReplicaId,
    },
    /// The body is not the message its kind says.
    #[error("a {kind} message that does not decode: {reason}")]
    BadMessage {
        /// The message kind.
        kind: &'static str,
        /// What did not decode.
        reason: String,
    },
}

/// One hosted group: its replica's id and Raft, and where incoming snapshots are put together.
#[derive(Clone)]
struct Hosted {
    replica: ReplicaId,
    raft: Raft<PartTypes>,
    snapshots: PathBuf,
    /// Held by each step of a snapshot transfer (and by a finish until its install is done).
    /// A leader may have two transfers to this replica in flight (a cancelled one whose last
    /// chunk is still being written, one from a new leader): each step reads what is held, then
    /// writes, and two interleaved would append a chunk twice; another transfer's begin would
    /// remove the folder an install is about to move into place.
    transfer: Arc<tokio::sync::Mutex<()>>,
}

/// The groups this node hosts, by id.
#[derive(Default)]
pub struct Groups {
    hosted: RwLock<HashMap<GroupId, Hosted>>,
}

impl Groups {
    /// Starts dispatching `group`'s messages to `raft`; incoming snapshots are assembled under
    /// `snapshots` (the group's state machine's own snapshot directory, see
    /// [`crate::StateMachine::snapshots_dir`], so an install moves them without a copy).
    pub fn insert(
        &self,
        group: GroupId,
        replica: ReplicaId,
        raft: Raft<PartTypes>,
        snapshots: &Path,
    ) {
        self.hosted.write().insert(
            group,
            Hosted {
                replica,
                raft,
                snapshots: snapshots.to_path_buf(),
                transfer: Arc::default(),
            },
        );
    }

    /// Stops dispatching to `group` and returns its Raft (for the caller to shut down).
    pub fn remove(&self, group: GroupId) -> Option<Raft<PartTypes>> {
        self.hosted.write().remove(&group).map(|h| h.raft)
    }

    /// The Raft of `group`, if hosted here.
    pub fn get(&self, group: GroupId) -> Option<Raft<PartTypes>> {
        self.hosted.read().get(&group).map(|h| h.raft.clone())
    }

    /// Every hosted group's id.
    pub fn ids(&self) -> Vec<GroupId> {
        self.hosted.read().keys().copied().collect()
    }

    /// Hands a peer's message for `replica` of `group` (see [`crate::Addressee`]) to the
    /// group and returns the encoded answer.
    pub async fn handle(
        &self,
        group: GroupId,
        replica: Option<ReplicaId>,
        rpc: Rpc,
        body: &[u8],
    ) -> Result<Vec<u8>, HandleError> {
        let hosted = self
            .hosted
            .read()
            .get(&group)
            .cloned()
            .ok_or(HandleError::UnknownGroup(group))?;
        match replica {
            Some(asked) if asked != hosted.replica => {
                return Err(HandleError::OtherReplica {
                    group,
                    asked,
                    hosted: hosted.replica,
                })
            }
            None if !matches!(rpc, Rpc::Propose | Rpc::ReadIndex) => {
                return Err(HandleError::BadMessage {
                    kind: rpc.name(),
                    reason: "it names no replica, and only the replica it is for may answer it"
                        .into(),
                })
            }
            _ => {}
        }
        let bad = |reason: bincode::Error| HandleError::BadMessage {
            kind: rpc.name(),
            reason: reason.to_string(),
        };
        Ok(match rpc {
            Rpc::Append => {
                let request: AppendEntriesRequest<PartTypes> =
                    bincode::deserialize(body).map_err(bad)?;
                encode(&hosted.raft.append_entries(request).await)
            }
            Rpc::Vote => {
                let request: VoteRequest<ReplicaId> = bincode::deserialize(body).map_err(bad)?;
                encode(&hosted.raft.vote(request).await)
            }
            // File work (fsyncs, CRCs over whole files) runs off the async workers, which
            // carry every group's heartbeats.
            Rpc::SnapshotBegin => {
                let begin: SnapshotBegin = bincode::deserialize(body).map_err(bad)?;
                encode(
                    &hosted
                        .transfer_step(move |snapshots| begin_transfer(snapshots, &begin))
                        .await,
                )
            }
            Rpc::SnapshotChunk => {
                let chunk: SnapshotChunk = bincode::deserialize(body).map_err(bad)?;
                encode(
                    &hosted
                        .transfer_step(move |snapshots| write_chunk(snapshots, &chunk))
                        .await,
                )
            }
            Rpc::SnapshotFinish => {
                let finish: SnapshotFinish = bincode::deserialize(body).map_err(bad)?;
                encode(&finish_transfer(&hosted, finish).await)
            }
            Rpc::Propose => {
                let proposal: Proposal = bincode::deserialize(body).map_err(bad)?;
                encode(&crate::group::write_here(&hosted.raft, proposal).await)
            }
            Rpc::ReadIndex => encode(&crate::group::read_index_here(&hosted.raft).await),
        })
    }
}

impl Hosted {
    /// Runs a transfer step's file work on the group's incoming snapshots, off the async
    /// workers, under the transfer lock; the lock goes with the work, so it is held until the
    /// work ends even if the call that asked for it is dropped.
    async fn transfer_step<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Path) -> std::io::Result<T> + Send + 'static,
    ) -> Result<T, String> {
        let step = self.transfer.clone().lock_owned().await;
        let snapshots = self.snapshots.clone();
        off_workers(move || {
            let _step = step;
            work(&snapshots)
        })
        .await
    }
}

/// Runs file work on a blocking thread; answers its error as text, as the wire carries it.
async fn off_workers<T: Send + 'static>(
    work: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Where the snapshot `id` is assembled: `incoming-{id}` beside the group's own snapshots, so
/// a transfer that a broken link or a restart interrupted resumes from what arrived.
fn incoming(snapshots: &Path, id: &str) -> std::io::Result<PathBuf> {
    if id.is_empty() || id.contains(['/', '\\']) || id.starts_with('.') {
        return Err(std::io::Error::other(format!(
            "`{id}` is not a snapshot id"
        )));
    }
    Ok(snapshots.join(format!("{}{id}", snapshot::INCOMING)))
}

/// Opens a transfer: removes other transfers' pieces, answers what is held of this one.
fn begin_transfer(snapshots: &Path, begin: &SnapshotBegin) -> std::io::Result<Vec<(String, u64)>> {
    begin.manifest.check_names()?;
    let dir = incoming(snapshots, &begin.manifest.meta.snapshot_id)?;
    fs_err::create_dir_all(&dir)?;
    for entry in fs_err::read_dir(snapshots)? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with(snapshot::INCOMING)) && path != dir {
            snapshot::remove(&path)?;
        }
    }
    let mut held = Vec::new();
    for file in begin.manifest.state.iter().chain(&begin.manifest.extras) {
        let path = dir.join(&file.name);
        if let Ok(meta) = std::fs::metadata(&path) {
            if meta.len() > file.bytes {
                // Not this file: the sender would start it again at 0, and a chunk there is
                // refused while the receiver holds more.
                fs_err::remove_file(&path)?;
                continue;
            }
            held.push((file.name.clone(), meta.len()));
        }
    }
    Ok(held)
}

/// Writes one chunk at its offset; answers the file's new length.
fn write_chunk(snapshots: &Path, chunk: &SnapshotChunk) -> std::io::Result<u64> {
    let dir = incoming(snapshots, &chunk.snapshot_id)?;
    if !snapshot::is_file_name(&chunk.file) {
        return Err(std::io::Error::other(format!(
            "`{}` is not a snapshot file name",
            chunk.file
        )));
    }
    let path = dir.join(&chunk.file);
    let have = std::fs::metadata(&path).map_or(0, |m| m.len());
    if chunk.offset != have {
        // The sender resumes from what we hold; a chunk elsewhere is a stale retry.
        return Ok(have);
    }
    let mut file = fs_err::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    file.write_all(&chunk.data)?;
    file.sync_data()?;
    Ok(have + chunk.data.len() as u64)
}

/// Writes the manifest beside the files and installs the snapshot through the group.
async fn finish_transfer(
    hosted: &Hosted,
    finish: SnapshotFinish,
) -> Result<openraft::raft::SnapshotResponse<ReplicaId>, Fatal<ReplicaId>> {
    // Held until the install has moved the folder into place.
    let _step = hosted.transfer.lock().await;
    let manifest = finish.manifest.clone();
    let snapshots = hosted.snapshots.clone();
    let dir = off_workers(move || {
        manifest.check_names()?;
        let dir = incoming(&snapshots, &manifest.meta.snapshot_id)?;
        snapshot::check_files(&dir, &manifest)?;
        manifest.write(&dir)?;
        Ok(dir)
    })
    .await;
    let dir = match dir {
        Ok(dir) => dir,
        Err(e) => {
            // Checked here, not in the install: a storage error there would stop the group,
            // while this answer only makes the leader send the missing pieces again.
            tracing::warn!(error = %e, "a received snapshot is incomplete or damaged");
            return Err(Fatal::StorageError(failed(
                ErrorSubject::Snapshot(None),
                ErrorVerb::Write,
                e,
            )));
        }
    };
    let snapshot = Snapshot {
        meta: finish.manifest.meta.clone(),
        snapshot: Box::new(SnapshotDir { path: dir }),
    };
    hosted
        .raft
        .install_full_snapshot(finish.vote, snapshot)
        .await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use cairn_storage::StateFile;
    use openraft::SnapshotMeta;

    use super::*;
    use crate::snapshot::Manifest;

    fn manifest(files: &[(&str, &[u8])]) -> Manifest {
        Manifest {
            meta: SnapshotMeta {
                last_log_id: None,
                last_membership: Default::default(),
                snapshot_id: "1-5-9".into(),
            },
            state: files
                .iter()
                .map(|(name, bytes)| StateFile {
                    family: "points".into(),
                    name: (*name).into(),
                    bytes: bytes.len() as u64,
                    crc32: crc32fast::hash(bytes),
                })
                .collect(),
            extras: Vec::new(),
        }
    }

    fn chunk(file: &str, offset: u64, data: &[u8]) -> SnapshotChunk {
        SnapshotChunk {
            snapshot_id: "1-5-9".into(),
            file: file.into(),
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn a_transfer_resumes_from_what_arrived_and_a_damaged_file_is_sent_again() {
        let root = tempfile::tempdir().unwrap();
        let stale = root.path().join(format!("{}0-1-1", snapshot::INCOMING));
        fs_err::create_dir_all(&stale).unwrap();
        let m = manifest(&[("a.sst", b"hello world"), ("b.sst", b"xyz")]);
        let begin = SnapshotBegin {
            manifest: m.clone(),
        };

        assert_eq!(begin_transfer(root.path(), &begin).unwrap(), vec![]);
        assert!(!stale.is_dir(), "an older transfer's pieces are removed");
        assert_eq!(
            write_chunk(root.path(), &chunk("a.sst", 0, b"hello")).unwrap(),
            5
        );
        // A retried or out-of-place chunk is not written; the answer says where to go on.
        assert_eq!(
            write_chunk(root.path(), &chunk("a.sst", 0, b"hello")).unwrap(),
            5
        );
        assert_eq!(
            write_chunk(root.path(), &chunk("a.sst", 9, b"ld")).unwrap(),
            5
        );

        // The link breaks; the sender begins again and learns what is held.
        assert_eq!(
            begin_transfer(root.path(), &begin).unwrap(),
            vec![("a.sst".to_string(), 5)]
        );
        assert_eq!(
            write_chunk(root.path(), &chunk("a.sst", 5, b" world")).unwrap(),
            11
        );
        assert_eq!(
            write_chunk(root.path(), &chunk("b.sst", 0, b"xyZ")).unwrap(),
            3
        );

        let dir = incoming(root.path(), "1-5-9").unwrap();
        let damaged = snapshot::check_files(&dir, &m).unwrap_err();
        assert!(damaged.to_string().contains("b.sst"), "{damaged}");
        assert_eq!(
            begin_transfer(root.path(), &begin).unwrap(),
            vec![("a.sst".to_string(), 11)],
            "the damaged file is gone, so it is sent again"
        );
        write_chunk(root.path(), &chunk("b.sst", 0, b"xyz")).unwrap();
        snapshot::check_files(&dir, &m).unwrap();
    }

    #[test]
    fn a_held_file_longer_than_the_snapshot_s_is_sent_again_from_the_start() {
        let root = tempfile::tempdir().unwrap();
        let m = manifest(&[("a.sst", b"hello")]);
        let begin = SnapshotBegin {
            manifest: m.clone(),
        };
        begin_transfer(root.path(), &begin).unwrap();
        let dir = incoming(root.path(), "1-5-9").unwrap();
        fs_err::write(dir.join("a.sst"), b"hellohello").unwrap();

        assert_eq!(begin_transfer(root.path(), &begin).unwrap(), vec![]);
        assert_eq!(
            write_chunk(root.path(), &chunk("a.sst", 0, b"hello")).unwrap(),
            5
        );
        snapshot::check_files(&dir, &m).unwrap();
    }

    #[test]
    fn names_from_the_wire_cannot_leave_the_snapshot_directory() {
        let root = tempfile::tempdir().unwrap();
        assert!(incoming(root.path(), "../x").is_err());
        assert!(incoming(root.path(), "").is_err());
        let m = manifest(&[("a.sst", b"a")]);
        begin_transfer(root.path(), &SnapshotBegin { manifest: m }).unwrap();
        assert!(write_chunk(root.path(), &chunk("../../escape", 0, b"x")).is_err());
        assert!(write_chunk(root.path(), &chunk(".hidden", 0, b"x")).is_err());
    }
}
