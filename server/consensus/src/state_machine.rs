//! openraft's state machine over the partition's state families (`cairn-storage`).
//!
//! Applying entries is one storage batch: the points of every data entry (each at its own log
//! index), the new `applied` id and, for a membership entry, the membership, all together and
//! without an fsync of its own (the entries are already durable in the log, and the log's next
//! synced append covers this batch, since both share the WAL). After a crash openraft applies
//! again from the stored `applied`, which always matches the state beside it.
//!
//! Snapshots are built from a point-in-time view of the state (no lock on writers) and
//! installed by swapping the state's table files in; see `snapshot.rs` for the layout. An
//! install that a crash interrupts leaves an `installing` record naming the snapshot, whose
//! directory is complete and synced before the record is written; the next open installs it
//! again from there. (openraft purges the log up to the snapshot as soon as it hands the
//! install over, so the state must never fall back behind it: clearing the state instead
//! would leave entries to apply that no log holds.) Building and installing snapshots take one
//! lock, so neither sees the other's directories half made.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairn_storage::{PartitionStore, WriteOp};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, ErrorSubject, ErrorVerb, LogId, RaftSnapshotBuilder, SnapshotMeta,
    StoredMembership,
};
use parking_lot::Mutex;

use crate::error::{blocking, decode, encode, failed, RaftResult};
use crate::snapshot::{self, Manifest, SnapshotDir};
use crate::{Applied, PartTypes, PartitionCommand, ReplicaAddr, ReplicaId};

/// `meta` keys this crate adds to the state (so a snapshot carries them).
const APPLIED: &str = "raft_applied";
const MEMBERSHIP: &str = "raft_membership";
/// The highest writer epoch applied ([`PartitionCommand::Fenced`]), a `u64` little-endian.
const EPOCH: &str = "writer_epoch";
/// The log record that marks an install in progress.
const INSTALLING: &str = "installing";
/// Table files of a snapshot are cut at this size, so a transfer resumes file by file.
const SNAPSHOT_FILE_BYTES: u64 = 1 << 30;

/// What the partition above does as the state machine moves. Every method has a do-nothing
/// default, so a test can pass `()`.
pub trait Observer: Send + Sync + 'static {
    /// The entry at `index` has been applied to the state (the partition queues it for its
    /// index). Called in log order, after the batch holding it is written.
    fn applied(&self, index: u64, command: &PartitionCommand) {
        let _ = (index, command);
    }

    /// A snapshot is being built in `dir`: write the partition's own files there (its index
    /// file) and return their names. They must reflect a log index at or before the state's
    /// at the time of the call (the state's view is taken right after), and the partition's op
    /// log must keep the entries after that index until the snapshot is built.
    fn add_to_snapshot(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        let _ = dir;
        Ok(Vec::new())
    }

    /// The state is about to be replaced by a snapshot: stop everything that reads or follows
    /// it (the partition's applier), so nothing sees it half replaced.
    fn before_replace(&self) {}

    /// The state was replaced by the snapshot in `dir` (which holds the files added by
    /// [`Self::add_to_snapshot`] on the sender): reload from it.
    fn state_replaced(&self, dir: &Path) -> std::io::Result<()> {
        let _ = dir;
        Ok(())
    }
}

impl Observer for () {}

struct Inner<O> {
    store: Arc<PartitionStore>,
    /// `<partition>/snapshots`.
    snapshots: PathBuf,
    observer: O,
    /// The newest complete snapshot, served to replicas that need one.
    current: Mutex<Option<(PathBuf, Manifest)>>,
    /// Makes snapshot ids and scratch directory names unique.
    nonce: AtomicU64,
    /// Held by a snapshot build and an install for their whole length (openraft runs builds
    /// in a task of their own, beside applies and installs).
    snapshot_lock: Mutex<()>,
}

/// A replica's state machine: cheap to clone (clones share everything), which is also how
/// openraft gets a snapshot builder.
pub struct StateMachine<O: Observer> {
    inner: Arc<Inner<O>>,
}

impl<O: Observer> Clone for StateMachine<O> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<O: Observer> StateMachine<O> {
    /// The state machine of the partition whose store is `store` (opened with `replicated`)
    /// and whose directory is `dir` (snapshots go to `dir/snapshots`). Finishes what a crash
    /// interrupted: an install that did not complete is done again from its snapshot (the
    /// observer is told as for any install).
    pub fn open(store: Arc<PartitionStore>, dir: &Path, observer: O) -> std::io::Result<Self> {
        let snapshots = dir.join("snapshots");
        fs_err::create_dir_all(&snapshots)?;
        let interrupted = store
            .log_record(INSTALLING)
            .map_err(std::io::Error::other)?;
        if let Some(id) = interrupted {
            let id = String::from_utf8_lossy(&id).into_owned();
            let path = snapshots.join(&id);
            let manifest = Manifest::read(&path).map_err(|e| {
                std::io::Error::other(format!(
                    "an install of snapshot {id} was interrupted and the snapshot cannot be read \
                     ({e}); this replica's state is incomplete: remove its folder so that it \
                     is replaced"
                ))
            })?;
            tracing::warn!(dir = %dir.display(), snapshot = id, "an interrupted snapshot install: installing it again");
            observer.before_replace();
            store
                .replace_state(&path, &manifest.state)
                .map_err(std::io::Error::other)?;
            observer.state_replaced(&path)?;
            store
                .put_log_record(INSTALLING, None)
                .map_err(std::io::Error::other)?;
        }
        let current = snapshot::newest(&snapshots)?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                snapshots,
                observer,
                current: Mutex::new(current),
                nonce: AtomicU64::new(nonce),
                snapshot_lock: Mutex::new(()),
            }),
        })
    }

    /// Where this replica keeps its snapshots (and assembles ones it receives).
    pub fn snapshots_dir(&self) -> &Path {
        &self.inner.snapshots
    }

    fn next_nonce(&self) -> u64 {
        self.inner.nonce.fetch_add(1, Ordering::Relaxed)
    }

    /// The last applied log index (0 before any entry): the partition's `last_seq`.
    pub fn applied_index(&self) -> std::io::Result<u64> {
        let bytes = self
            .inner
            .store
            .get_meta(APPLIED)
            .map_err(std::io::Error::other)?;
        let applied: Option<LogId<ReplicaId>> = match bytes {
            Some(b) => bincode::deserialize(&b).map_err(std::io::Error::other)?,
            None => None,
        };
        Ok(applied.map_or(0, |id| id.index))
    }

    fn snapshot_of(&self, path: &Path, manifest: &Manifest) -> Snapshot<PartTypes> {
        Snapshot {
            meta: manifest.meta.clone(),
            snapshot: Box::new(SnapshotDir {
                path: path.to_path_buf(),
            }),
        }
    }

    /// Makes `(path, manifest)` the current snapshot unless a newer one is (then `path` goes),
    /// and removes every other one. The caller holds the snapshot lock.
    fn set_current(&self, path: PathBuf, manifest: Manifest) -> std::io::Result<()> {
        {
            let mut current = self.inner.current.lock();
            let newer = current
                .as_ref()
                .is_none_or(|(_, m)| manifest.meta.last_log_id > m.meta.last_log_id);
            if newer {
                *current = Some((path, manifest));
            }
        }
        // `newest` keeps the newest complete snapshot: the current one.
        snapshot::newest(&self.inner.snapshots).map(|_| ())
    }
}

impl<O: Observer> RaftSnapshotBuilder<PartTypes> for StateMachine<O> {
    async fn build_snapshot(&mut self) -> RaftResult<Snapshot<PartTypes>> {
        let this = self.clone();
        let scratch = self
            .inner
            .snapshots
            .join(format!("building-{}", self.next_nonce()));
        let nonce = self.next_nonce();
        let (path, manifest) = blocking(
            ErrorSubject::Snapshot(None),
            ErrorVerb::Write,
            move || -> std::io::Result<(PathBuf, Manifest)> {
                let _building = this.inner.snapshot_lock.lock();
                fs_err::create_dir_all(&scratch)?;
                // The partition's own files first, the state's view second: the index file
                // then reflects an index at or before the view's, and the view's op log holds
                // the entries after it, which the receiver replays (an index file from after
                // the view would hold points the state does not).
                let extras = this
                    .inner
                    .observer
                    .add_to_snapshot(&scratch)?
                    .iter()
                    .map(|name| snapshot::extra_file(&scratch, name))
                    .collect::<std::io::Result<Vec<_>>>()?;
                let export = this
                    .inner
                    .store
                    .export_state(&scratch, SNAPSHOT_FILE_BYTES)
                    .map_err(std::io::Error::other)?;
                let last_log_id: Option<LogId<ReplicaId>> = match export.meta.get(APPLIED) {
                    Some(b) => bincode::deserialize(b).map_err(std::io::Error::other)?,
                    None => None,
                };
                let last_membership: StoredMembership<ReplicaId, ReplicaAddr> =
                    match export.meta.get(MEMBERSHIP) {
                        Some(b) => bincode::deserialize(b).map_err(std::io::Error::other)?,
                        None => StoredMembership::default(),
                    };
                let snapshot_id = match last_log_id {
                    Some(id) => format!("{}-{}-{nonce}", id.leader_id.term, id.index),
                    None => format!("0-0-{nonce}"),
                };
                let manifest = Manifest {
                    meta: SnapshotMeta {
                        last_log_id,
                        last_membership,
                        snapshot_id: snapshot_id.clone(),
                    },
                    state: export.files,
                    extras,
                };
                manifest.write(&scratch)?;
                let path = this.inner.snapshots.join(&snapshot_id);
                fs_err::rename(&scratch, &path)?;
                snapshot::sync_dir(&this.inner.snapshots)?;
                this.set_current(path.clone(), manifest.clone())?;
                Ok((path, manifest))
            },
        )
        .await?;
        tracing::info!(snapshot = %manifest.meta.snapshot_id, files = manifest.state.len() + manifest.extras.len(), "snapshot built");
        Ok(self.snapshot_of(&path, &manifest))
    }
}

impl<O: Observer> RaftStateMachine<PartTypes> for StateMachine<O> {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> RaftResult<(
        Option<LogId<ReplicaId>>,
        StoredMembership<ReplicaId, ReplicaAddr>,
    )> {
        let store = self.inner.store.clone();
        let (applied, membership) = blocking(
            ErrorSubject::StateMachine,
            ErrorVerb::Read,
            move || -> cairn_storage::Result<_> {
                Ok((store.get_meta(APPLIED)?, store.get_meta(MEMBERSHIP)?))
            },
        )
        .await?;
        let applied = match applied {
            Some(b) => decode(ErrorSubject::StateMachine, &b)?,
            None => None,
        };
        let membership = match membership {
            Some(b) => decode(ErrorSubject::StateMachine, &b)?,
            None => StoredMembership::default(),
        };
        Ok((applied, membership))
    }

    async fn apply<I>(&mut self, entries: I) -> RaftResult<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<PartTypes>> + Send,
        I::IntoIter: Send,
    {
        let mut indexes = Vec::new();
        let mut commands: Vec<(u64, PartitionCommand)> = Vec::new();
        let mut last: Option<LogId<ReplicaId>> = None;
        let mut membership = None;
        for entry in entries {
            let index = entry.log_id.index;
            last = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(command) => commands.push((index, command)),
                EntryPayload::Membership(m) => {
                    membership = Some(StoredMembership::new(Some(entry.log_id), m));
                }
            }
            indexes.push(index);
        }
        let Some(last) = last else {
            return Ok(Vec::new());
        };
        let store = self.inner.store.clone();
        let applied = encode(&Some(last));
        let membership = membership.as_ref().map(encode);
        let this = self.clone();
        // The observer runs here too, off the async workers: handing entries to a partition's
        // applier may block while its queue is full (a vacuum rebuilding the index), and a
        // blocked worker would stall every other group's heartbeats.
        let refused = blocking(ErrorSubject::Apply(last), ErrorVerb::Write, move || {
            let Judged { refused, epoch } = judge(&store, &commands)?;
            let ops: Vec<(u64, WriteOp)> = commands
                .iter()
                .filter(|(index, _)| !refused.contains(index))
                .map(|(index, command)| (*index, command.to_write_op(*index)))
                .collect();
            let op_refs: Vec<(u64, &WriteOp)> = ops.iter().map(|(i, op)| (*i, op)).collect();
            let epoch = epoch.map(u64::to_le_bytes);
            let maps = edited_maps(&store, &commands, &refused)?;
            let mut meta: Vec<(&str, &[u8])> = vec![(APPLIED, &applied)];
            for (name, map) in &maps {
                meta.push((*name, map.as_slice()));
            }
            if let Some(m) = &membership {
                meta.push((MEMBERSHIP, m));
            }
            if let Some(e) = &epoch {
                meta.push((EPOCH, e));
            }
            store.write_many(&op_refs, &meta, false)?;
            for (index, command) in &commands {
                if !refused.contains(index) {
                    this.inner.observer.applied(*index, command.unfenced());
                }
            }
            Ok::<_, cairn_storage::StorageError>(refused)
        })
        .await?;
        Ok(indexes
            .into_iter()
            .map(|index| Applied {
                index,
                held: !refused.contains(&index),
            })
            .collect())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> RaftResult<Box<SnapshotDir>> {
        let path =
            self.inner
                .snapshots
                .join(format!("{}local-{}", snapshot::INCOMING, self.next_nonce()));
        fs_err::create_dir_all(&path)
            .map_err(|e| failed(ErrorSubject::Snapshot(None), ErrorVerb::Write, e))?;
        Ok(Box::new(SnapshotDir { path }))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<ReplicaId, ReplicaAddr>,
        snapshot: Box<SnapshotDir>,
    ) -> RaftResult<()> {
        let this = self.clone();
        let meta = meta.clone();
        let subject = ErrorSubject::Snapshot(Some(meta.signature()));
        blocking(subject, ErrorVerb::Write, move || {
            this.install(&meta, &snapshot.path)
        })
        .await?;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> RaftResult<Option<Snapshot<PartTypes>>> {
        Ok(self
            .inner
            .current
            .lock()
            .as_ref()
            .map(|(path, manifest)| self.snapshot_of(path, manifest)))
    }
}

impl<O: Observer> StateMachine<O> {
    /// Installs the snapshot in `from` (see the module docs for the crash story).
    fn install(
        &self,
        meta: &SnapshotMeta<ReplicaId, ReplicaAddr>,
        from: &Path,
    ) -> std::io::Result<()> {
        let _installing = self.inner.snapshot_lock.lock();
        let manifest = Manifest::read(from)?;
        if manifest.meta != *meta {
            return Err(std::io::Error::other(format!(
                "snapshot {} holds {}, not the snapshot announced",
                from.display(),
                manifest.meta.snapshot_id
            )));
        }
        for extra in &manifest.extras {
            if snapshot::extra_file(from, &extra.name)? != *extra {
                return Err(std::io::Error::other(format!(
                    "snapshot file {} is damaged",
                    extra.name
                )));
            }
        }
        // Keep the snapshot as this replica's own (it may serve it to others in turn): a
        // directory received here moves; one from elsewhere is copied.
        let path = self.inner.snapshots.join(&meta.snapshot_id);
        if from != path {
            if from.parent() == Some(self.inner.snapshots.as_path()) {
                fs_err::rename(from, &path)?;
            } else {
                copy_dir(from, &path)?;
            }
            snapshot::sync_dir(&self.inner.snapshots)?;
        }
        let store = &self.inner.store;
        let io = std::io::Error::other;
        store
            .put_log_record(INSTALLING, Some(meta.snapshot_id.as_bytes()))
            .map_err(io)?;
        self.inner.observer.before_replace();
        store.replace_state(&path, &manifest.state).map_err(io)?;
        self.inner.observer.state_replaced(&path)?;
        store.put_log_record(INSTALLING, None).map_err(io)?;
        self.set_current(path, manifest)?;
        tracing::info!(snapshot = %meta.snapshot_id, "snapshot installed");
        Ok(())
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    let scratch = to.with_extension("copying");
    fs_err::create_dir_all(&scratch)?;
    for entry in fs_err::read_dir(from)? {
        let entry = entry?;
        fs_err::copy(entry.path(), scratch.join(entry.file_name()))?;
    }
    fs_err::rename(&scratch, to)
}

/// The string maps the batch's [`PartitionCommand::EditMetaMap`] entries leave, by meta
/// key, encoded as JSON: each starts from the stored map and takes the edits in log order.
/// A stored value that is not such a map fails the batch rather than being overwritten.
fn edited_maps<'a>(
    store: &PartitionStore,
    commands: &'a [(u64, PartitionCommand)],
    refused: &std::collections::BTreeSet<u64>,
) -> Result<Vec<(&'a str, Vec<u8>)>, cairn_storage::StorageError> {
    let mut maps: std::collections::BTreeMap<&str, std::collections::BTreeMap<String, String>> =
        std::collections::BTreeMap::new();
    for (index, command) in commands {
        let PartitionCommand::EditMetaMap { name, key, value } = command.unfenced() else {
            continue;
        };
        if refused.contains(index) {
            continue;
        }
        let map = match maps.entry(name) {
            std::collections::btree_map::Entry::Occupied(map) => map.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let stored = match store.get_meta(name)? {
                    Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                        cairn_storage::StorageError::Corrupt {
                            path: store.path().to_path_buf(),
                            comment: format!("meta `{name}` is not a map of strings: {e}"),
                        }
                    })?,
                    None => std::collections::BTreeMap::new(),
                };
                slot.insert(stored)
            }
        };
        match value {
            Some(value) => map.insert(key.clone(), value.clone()),
            None => map.remove(key),
        };
    }
    Ok(maps
        .into_iter()
        .map(|(name, map)| {
            let json = serde_json::to_vec(&map)
                .unwrap_or_else(|e| unreachable!("a map of strings encodes: {e}"));
            (name, json)
        })
        .collect())
}

/// What [`judge`] decided for a batch of entries.
struct Judged {
    /// The indexes of the entries that write nothing.
    refused: std::collections::BTreeSet<u64>,
    /// The partition's writer epoch after the batch, if the batch raised it.
    epoch: Option<u64>,
}

/// Which guarded entries among `commands` write nothing, judged in log order against the
/// store and against the entries before them in the same batch (not written yet): a
/// [`PartitionCommand::UpsertIf`] or [`PartitionCommand::UpsertPointsIf`] whose condition
/// does not hold, and a [`PartitionCommand::Fenced`] whose epoch is below the partition's.
fn judge(
    store: &PartitionStore,
    commands: &[(u64, PartitionCommand)],
) -> Result<Judged, cairn_storage::StorageError> {
    let mut refused = std::collections::BTreeSet::new();
    let stored_epoch = match store.get_meta(EPOCH)? {
        Some(bytes) => u64::from_le_bytes(bytes.as_slice().try_into().unwrap_or_default()),
        None => 0,
    };
    let mut epoch = stored_epoch;
    // Keys written earlier in this batch, and their versions (0: deleted).
    let mut pending: std::collections::HashMap<&[u8], u64> = std::collections::HashMap::new();
    for (index, command) in commands {
        let mut command = command;
        if let PartitionCommand::Fenced {
            epoch: at,
            command: inner,
        } = command
        {
            if *at < epoch {
                refused.insert(*index);
                continue;
            }
            epoch = *at;
            command = inner;
        }
        // Whether every key of `expect` is at its version, counting this batch's writes.
        let holds = |expect: &[(Vec<u8>, u64)],
                     pending: &std::collections::HashMap<&[u8], u64>|
         -> Result<bool, cairn_storage::StorageError> {
            for (key, version) in expect {
                let current = match pending.get(key.as_slice()) {
                    Some(version) => *version,
                    None => store.get(key)?.map_or(0, |point| point.version),
                };
                if current != *version {
                    return Ok(false);
                }
            }
            Ok(true)
        };
        let rows = match command {
            PartitionCommand::UpsertIf { expect, rows } => {
                if !holds(expect, &pending)? {
                    refused.insert(*index);
                    continue;
                }
                rows
            }
            PartitionCommand::Upsert(rows) => rows,
            PartitionCommand::UpsertPointsIf { expect, points } => {
                if !holds(expect, &pending)? {
                    refused.insert(*index);
                    continue;
                }
                for p in points {
                    pending.insert(&p.row.key, *index);
                }
                continue;
            }
            PartitionCommand::UpsertPoints(points) => {
                for p in points {
                    pending.insert(&p.row.key, *index);
                }
                continue;
            }
            // The log's own state is not a map any entry may edit.
            PartitionCommand::EditMetaMap { name, .. } => {
                if [APPLIED, MEMBERSHIP, EPOCH].contains(&name.as_str()) {
                    refused.insert(*index);
                }
                continue;
            }
            PartitionCommand::Delete(keys) => {
                for key in keys {
                    pending.insert(key, 0);
                }
                continue;
            }
            PartitionCommand::Fenced { .. } => {
                // Never built (`PartitionCommand::fenced` wraps once); refused, not guessed.
                refused.insert(*index);
                continue;
            }
        };
        for row in rows {
            pending.insert(&row.key, *index);
        }
    }
    Ok(Judged {
        refused,
        epoch: (epoch > stored_epoch).then_some(epoch),
    })
}
