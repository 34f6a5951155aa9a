//! A partition: the durable shard. One RocksDB store (the truth) and one in-memory index
//! (derived), with the thread that keeps the second in step with the first. A collection
//! (`crate::collection`) is one or more partitions behind Pyramid's meta-index; a collection
//! that is not partitioned is exactly one partition. A partition knows nothing of requests
//! beyond the validated plans it is handed (`crate::request`), nor of where its callers are.
//!
//! Write path. A request is validated, then — under the writer lock, on a blocking thread —
//! given the next sequence number, queued to the **applier** (a thread that owns every
//! mutation of the index, so ops reach the index in sequence order) and committed to RocksDB
//! in one synced batch; only then is it acknowledged. The applier links an upsert's vectors
//! while the batch syncs, but publishes them only once the writer reports the batch durable
//! (see `applier`). `wait=true` waits for the applier to pass the op's sequence number
//! (searchable); `wait=false` returns once durable. The applier also writes index snapshots
//! and vacuums dead slots.
//!
//! Read path. Searches take an `Arc` of the current [`live::LiveIndex`] and read it without
//! ever waiting on an index rebuild (a vacuum builds a new one and swaps the `Arc`).
//!
//! ```text
//!  HTTP ──validate──▶ writer lock ──▶ RocksDB batch (WAL fsync) ──▶ ack (wait=false)
//!                         │                    │ durable?
//!                         └──▶ applier queue ──▶ index.add ──▶ table ──▶ applied_seq ──▶ ack (wait=true)
//!                                                      │
//!                                                      └──▶ snapshot file, vacuum
//! ```

mod applier;
pub mod export;
pub mod keys;
pub mod live;
pub mod payload_index;
mod recovery;
mod search;
mod snapshot;
pub mod sparse_index;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;

use cairn_api::internal::{NewPoint, PartitionState};
use cairn_api::{Filter, PayloadIndexInfo, PayloadSchemaType, PointId};
use cairn_index::Trainers;
use cairn_storage::{PartitionStore, StoreOptions, StoredPoint, WriteOp};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use tokio::sync::watch;

use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::request::filter::point_matches;
use crate::request::payload::PointChange;
use crate::request::points::merge_vectors;
use crate::request::settings::{self, CollectionSettings};
use live::LiveIndex;
use payload_index::PayloadSchema;

/// A write as the applier receives it (and as a replica's log hands it over, see
/// [`Partition::apply_committed`]).
#[derive(Debug)]
pub enum ApplyOp {
    /// Insert or replace these points.
    Upsert(Vec<NewPoint>),
    /// Remove these points.
    Delete(Vec<PointId>),
    /// Index payload `key` as `kind` from now on (`None`: drop its index): an entry of a
    /// replica's log, whose store holds the edited schema already. Applied in log order, so
    /// between two such entries the index serves the schema of its position.
    PayloadIndex {
        /// The payload key.
        key: String,
        /// The index type, or none.
        kind: Option<PayloadSchemaType>,
    },
}

pub(crate) struct ApplyJob {
    seq: u64,
    op: ApplyOp,
    /// Whether the op's RocksDB batch became durable.
    durable: Durable,
}

/// The writer's word to the applier on one op's RocksDB batch: durable, or failed.
pub(crate) struct Durable(Receiver<bool>);

impl Durable {
    /// The word for a write that is durable already (a replica's entry, applied from its log).
    fn already() -> Self {
        let (tx, rx) = sync_channel(1);
        let _ = tx.send(true);
        Durable(rx)
    }

    /// Blocks until the writer knows; a writer that vanished (a panic) counts as failed.
    fn wait(&self) -> bool {
        self.0.recv().unwrap_or(false)
    }
}

/// How a partition's index came to be at start-up (reported in collection info and logs).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LoadReport {
    /// `new`, `snapshot` (index file loaded) or `rebuilt` (from RocksDB).
    pub index_source: String,
    /// Sequence number of the loaded snapshot.
    pub snapshot_seq: u64,
    /// Op-log entries replayed after the snapshot.
    pub replayed_ops: u64,
    /// Points whose version disagreed with the snapshot beyond the op log and were repaired.
    pub repaired_points: u64,
    /// Live points after loading.
    pub points: u64,
    /// Wall time of the load.
    pub load_ms: u64,
}

/// Index slot counts, reported in collection info.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SlotStats {
    /// Slots in the index (live and dead).
    pub index_slots: u64,
    /// Dead slots awaiting the vacuum.
    pub dead_slots: u64,
}

/// What the applier and readers share.
pub(crate) struct Shared {
    pub(crate) name: String,
    pub(crate) settings: CollectionSettings,
    pub(crate) store: Arc<PartitionStore>,
    pub(crate) dir: PathBuf,
    pub(crate) live: RwLock<Arc<LiveIndex>>,
    pub(crate) storage: StorageConfig,
    /// What rebuilt indexes train with (a vacuum rebuilds a quantized index too).
    pub(crate) trainers: Trainers,
    pub(crate) applied: watch::Sender<u64>,
    pub(crate) load: LoadReport,
    pub(crate) searches: SearchClock,
    /// Indexed payload keys (stored in the `meta` family). Written before the table is
    /// indexed, so a vacuum that swaps in a fresh table meanwhile indexes it too.
    pub(crate) payload_schema: RwLock<PayloadSchema>,
}

/// Index searches run and the time they took (one per query this partition answered, its
/// exact fallback included): the part of a query that is the index's own work, so that
/// `/metrics` can tell it apart from the REST, JSON and result-building around it on the very
/// same requests.
#[derive(Default)]
pub(crate) struct SearchClock {
    count: AtomicU64,
    nanos: AtomicU64,
}

impl SearchClock {
    /// Runs `search`, counting it and its time.
    pub(crate) fn time<T>(&self, search: impl FnOnce() -> T) -> T {
        let started = std::time::Instant::now();
        let out = search();
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        out
    }

    /// (searches, total seconds).
    pub(crate) fn read(&self) -> (u64, f64) {
        (
            self.count.load(Ordering::Relaxed),
            self.nanos.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

impl Shared {
    pub(crate) fn live(&self) -> Arc<LiveIndex> {
        self.live.read().clone()
    }
}

struct Writer {
    last_seq: u64,
    queue: Option<SyncSender<ApplyJob>>,
}

/// One partition; see the module docs.
pub struct Partition {
    shared: Arc<Shared>,
    writer: Mutex<Writer>,
    applier: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Jobs queued ahead of the applier before writers block (back-pressure on `wait=false`).
const APPLY_QUEUE: usize = 64;

impl Partition {
    /// Opens the partition in `dir`, loading or rebuilding its index; `name` labels it in logs
    /// and errors (the collection's name, with `/p{i}` for partitions after the first).
    pub fn open(
        name: &str,
        dir: &Path,
        storage: StorageConfig,
        trainers: &Trainers,
    ) -> Result<Self> {
        let store = Self::own_store(dir, storage)?;
        let settings: CollectionSettings = match store.get_meta(settings::META_KEY)? {
            Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                ServerError::Internal(format!("settings of `{name}` do not parse: {e}"))
            })?,
            None => {
                return Err(ServerError::Internal(format!(
                    "collection `{name}` has no settings"
                )))
            }
        };
        Self::open_replica(name, dir, storage, trainers, Arc::new(store), settings)
    }

    /// Opens a replica of a partition whose writes arrive through its group's log: `store` is
    /// the replica's store (opened with `replicated`), which the group's state machine writes
    /// and this partition reads; the index follows through [`Self::apply_committed`]. The
    /// settings come from the cluster's metadata, not from the store (a snapshot install
    /// replaces the store's contents). [`Self::open`] ends here too, with a store of its own.
    pub fn open_replica(
        name: &str,
        dir: &Path,
        storage: StorageConfig,
        trainers: &Trainers,
        store: Arc<PartitionStore>,
        settings: CollectionSettings,
    ) -> Result<Self> {
        let loaded = recovery::load(&settings, trainers, &store, dir)?;
        let payload_schema = stored_schema(name, &store)?;
        loaded
            .live
            .table
            .write()
            .sync_payload_schema(&payload_schema);
        let last_seq = store.last_seq()?;
        tracing::info!(collection = name, source = %loaded.report.index_source, points = loaded.report.points,
            replayed = loaded.report.replayed_ops, ms = loaded.report.load_ms, "collection loaded");
        let (applied, _) = watch::channel(last_seq);
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            settings,
            store,
            dir: dir.to_path_buf(),
            live: RwLock::new(Arc::new(loaded.live)),
            storage,
            trainers: trainers.clone(),
            applied,
            load: loaded.report,
            searches: SearchClock::default(),
            payload_schema: RwLock::new(payload_schema),
        });
        let tx = Self::spawn_applier(&shared, last_seq, loaded.snapshot_seq)?;
        Ok(Self {
            shared,
            writer: Mutex::new(Writer {
                last_seq,
                queue: Some(tx.0),
            }),
            applier: Mutex::new(Some(tx.1)),
        })
    }

    fn spawn_applier(
        shared: &Arc<Shared>,
        last_seq: u64,
        snapshot_seq: u64,
    ) -> Result<(SyncSender<ApplyJob>, std::thread::JoinHandle<()>)> {
        let (tx, rx) = sync_channel(APPLY_QUEUE);
        let thread_shared = shared.clone();
        let handle = std::thread::Builder::new()
            .name(format!("apply-{}", shared.name))
            .spawn(move || applier::run(&thread_shared, &rx, last_seq, snapshot_seq))
            .map_err(|e| ServerError::Internal(format!("cannot start applier: {e}")))?;
        Ok((tx, handle))
    }

    /// A replica's write, already in its store at `seq` (its log index): hands it to the
    /// applier, as a local write would be after its batch synced.
    pub fn apply_committed(&self, seq: u64, op: ApplyOp) -> Result<()> {
        let mut writer = self.writer.lock();
        let Some(queue) = writer.queue.clone() else {
            return Err(ServerError::Unavailable(format!(
                "collection `{}` is closing",
                self.name()
            )));
        };
        queue
            .send(ApplyJob {
                seq,
                op,
                durable: Durable::already(),
            })
            .map_err(|_| {
                ServerError::Unavailable(format!(
                    "collection `{}`: index applier stopped",
                    self.name()
                ))
            })?;
        writer.last_seq = writer.last_seq.max(seq);
        Ok(())
    }

    /// Stops the applier (after it drains its queue), before a replica's store is replaced
    /// wholesale by a snapshot from another replica; [`Self::reload`] starts it again.
    pub fn pause(&self) {
        let mut writer = self.writer.lock();
        writer.queue = None;
        if let Some(handle) = self.applier.lock().take() {
            if handle.join().is_err() {
                tracing::error!(collection = self.name(), "applier thread panicked");
            }
        }
    }

    /// Rebuilds the index from the store, after a snapshot from another replica replaced it,
    /// and starts the applier again. The old index file describes the old state, so it goes
    /// first (the replacement state brings none of its own yet).
    pub fn reload(&self) -> Result<()> {
        self.pause();
        let mut writer = self.writer.lock();
        let file = paths::snapshot(&self.shared.dir);
        if file.is_file() {
            fs_err::remove_file(&file).map_err(|e| ServerError::Internal(e.to_string()))?;
        }
        let loaded = recovery::load(
            &self.shared.settings,
            &self.shared.trainers,
            &self.shared.store,
            &self.shared.dir,
        )?;
        let last_seq = self.shared.store.last_seq()?;
        // The replacement state brings its own payload indexes. The schema stays locked until
        // the swap: an index created meanwhile waits.
        let mut schema = self.shared.payload_schema.write();
        *schema = stored_schema(self.name(), &self.shared.store)?;
        loaded.live.table.write().sync_payload_schema(&schema);
        *self.shared.live.write() = Arc::new(loaded.live);
        drop(schema);
        self.shared.applied.send_replace(last_seq);
        let (tx, handle) = Self::spawn_applier(&self.shared, last_seq, loaded.snapshot_seq)?;
        writer.last_seq = last_seq;
        writer.queue = Some(tx);
        *self.applier.lock() = Some(handle);
        tracing::info!(
            collection = self.name(),
            points = loaded.report.points,
            "replica reloaded from a snapshot"
        );
        Ok(())
    }

    /// The store of a partition that is not a replica (it writes its own log), in `dir`.
    fn own_store(dir: &Path, storage: StorageConfig) -> Result<PartitionStore> {
        Ok(PartitionStore::open(
            &paths::db(dir),
            StoreOptions {
                sync_writes: storage.sync_writes,
                ..StoreOptions::default()
            },
        )?)
    }

    /// Writes the settings of a new collection into an empty partition directory.
    pub fn initialise(
        dir: &Path,
        settings: &CollectionSettings,
        storage: StorageConfig,
    ) -> Result<()> {
        let store = Self::own_store(dir, storage)?;
        let bytes =
            serde_json::to_vec(settings).map_err(|e| ServerError::Internal(e.to_string()))?;
        store.put_meta(settings::META_KEY, &bytes)?;
        Ok(())
    }

    /// The partition's label (see [`Partition::open`]).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Its settings.
    pub fn settings(&self) -> &CollectionSettings {
        &self.shared.settings
    }

    /// How it was loaded.
    pub fn load_report(&self) -> &LoadReport {
        &self.shared.load
    }

    /// Live points.
    pub fn points(&self) -> usize {
        self.shared.live().table.read().live()
    }

    /// Slots in the index and how many of them are dead (deleted or overwritten points that
    /// still route searches until the next vacuum).
    pub fn slot_stats(&self) -> SlotStats {
        let live = self.shared.live();
        let table = live.table.read();
        SlotStats {
            index_slots: live.index.len() as u64,
            dead_slots: table.dead as u64,
        }
    }

    /// Bytes the index holds.
    pub fn index_memory_bytes(&self) -> usize {
        let live = self.shared.live();
        let sparse = live.table.read().sparse_index.memory_bytes();
        live.memory_bytes() + sparse
    }

    /// Index searches this partition ran and their total seconds (see [`SearchClock`]).
    pub fn search_time(&self) -> (u64, f64) {
        self.shared.searches.read()
    }

    /// Highest sequence number reflected in the index.
    pub fn applied_seq(&self) -> u64 {
        *self.shared.applied.borrow()
    }

    /// The partition's counters.
    pub fn state(&self) -> PartitionState {
        let slots = self.slot_stats();
        PartitionState {
            last_seq: self.last_seq(),
            applied_seq: self.applied_seq(),
            points: self.points() as u64,
            index_slots: slots.index_slots,
            dead_slots: slots.dead_slots,
            index_memory_bytes: self.index_memory_bytes() as u64,
        }
    }

    /// Commits points durably (blocking: call from a blocking thread); returns the sequence number.
    pub fn upsert_blocking(&self, points: Vec<NewPoint>) -> Result<u64> {
        self.commit(ApplyOp::Upsert(points))
    }

    /// Commits a delete durably (blocking); returns the sequence number.
    pub fn delete_blocking(&self, ids: Vec<PointId>) -> Result<u64> {
        self.commit(ApplyOp::Delete(ids))
    }

    /// Deletes those of `ids` this partition holds, judged by its committed state (RocksDB, not
    /// the index, which may lag); `None`, and no op-log entry, when it holds none of them. A
    /// partitioned collection sends every delete to every partition, and this makes that free
    /// for the partitions without the points.
    pub fn delete_present_blocking(&self, ids: &[PointId]) -> Result<Option<u64>> {
        let mut writer = self.writer.lock();
        let mut present = Vec::new();
        for id in ids {
            if self.shared.store.get_vector(&keys::encode(id))?.is_some() {
                present.push(*id);
            }
        }
        if present.is_empty() {
            return Ok(None);
        }
        self.commit_locked(&mut writer, ApplyOp::Delete(present))
            .map(Some)
    }

    /// Which of `ids` the partition holds (committed state).
    pub fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        ids.iter()
            .map(|id| Ok(self.shared.store.get_vector(&keys::encode(id))?.is_some()))
            .collect()
    }

    /// The committed values of `ids`, as points ready to be written elsewhere (re-homing).
    pub fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        ids.iter().map(|id| self.stored_one(id)).collect()
    }

    /// Committed values of `ids`, each with its version: the sequence number of the write
    /// that stored it, which a compare-and-set ([`Self::upsert_if`]) expects.
    pub fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>> {
        ids.iter().map(|id| self.stored_versioned(id)).collect()
    }

    fn stored_one(&self, id: &PointId) -> Result<Option<NewPoint>> {
        Ok(self.stored_versioned(id)?.map(|(_, point)| point))
    }

    fn stored_versioned(&self, id: &PointId) -> Result<Option<(u64, NewPoint)>> {
        let Some(point) = self.shared.store.get(&keys::encode(id))? else {
            return Ok(None);
        };
        Ok(Some((
            point.version,
            NewPoint {
                id: *id,
                vector: point.vector,
                payload: keys::parse_payload(point.payload)?,
                sparse: keys::sparse_from_stored(point.sparse),
                extra: keys::extra_from_stored(point.extra),
            },
        )))
    }

    /// Upserts `points` only if every id of `expect` is still at its version (0: absent),
    /// judged under the write lock; `None`, nothing written, if another write came between.
    pub fn upsert_if(
        &self,
        points: Vec<NewPoint>,
        expect: &[(PointId, u64)],
    ) -> Result<Option<u64>> {
        let mut writer = self.writer.lock();
        for (id, version) in expect {
            let current = self
                .shared
                .store
                .get(&keys::encode(id))?
                .map_or(0, |p| p.version);
            if current != *version {
                return Ok(None);
            }
        }
        self.commit_locked(&mut writer, ApplyOp::Upsert(points))
            .map(Some)
    }

    /// About `n` committed vectors drawn uniformly (reservoir sampling), row-major.
    pub fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        use rand::{Rng, SeedableRng};
        let dim = self.shared.settings.dim;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut sample: Vec<f32> = Vec::with_capacity(n * dim);
        for (seen, record) in self.shared.store.scan_points()?.enumerate() {
            let (_, point) = record?;
            if seen < n {
                sample.extend_from_slice(&point.vector);
            } else {
                let j = rng.gen_range(0..=seen);
                if j < n {
                    sample[j * dim..(j + 1) * dim].copy_from_slice(&point.vector);
                }
            }
        }
        Ok(sample)
    }

    /// Ids of every committed point, in id order.
    pub fn stored_ids(&self) -> Result<Vec<PointId>> {
        let mut ids = Vec::new();
        for record in self.shared.store.scan_meta()? {
            let key = record?.key;
            ids.push(keys::decode(&key).ok_or_else(|| {
                ServerError::Internal(format!("{}: undecodable point key", self.name()))
            })?);
        }
        Ok(ids)
    }

    /// Sequence number of the last committed write.
    pub fn last_seq(&self) -> u64 {
        self.writer.lock().last_seq
    }

    /// A small named value in the partition's RocksDB (`meta` family).
    pub fn get_meta(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.shared.store.get_meta(name)?)
    }

    /// Changes those of `ids` this partition holds (and, with `filter`, that still match
    /// it); `None`, and no op-log entry, when no point was changed.
    pub fn update_points(
        &self,
        ids: &[PointId],
        filter: Option<&Filter>,
        change: &PointChange,
    ) -> Result<Option<u64>> {
        self.rewrite(ids, |mut point| {
            let passes = filter.is_none_or(|f| self.point_matches(&point, f));
            (passes && change.apply(&mut point)).then_some(point)
        })
    }

    /// Whether a point as stored (or about to be) passes `filter`, with this partition's text
    /// indexes deciding how `match.text` reads a key.
    pub fn point_matches(&self, point: &NewPoint, filter: &Filter) -> bool {
        let live = self.shared.live();
        let table = live.table.read();
        point_matches(filter, point, self.shared.settings.vector_name(), &|key| {
            table.payload_index.is_text(key)
        })
    }

    /// Upserts `points`, except those stored already that do not pass `filter` (Qdrant's
    /// `update_filter`: existing points are replaced only where it holds, new ones are
    /// inserted), read and written under the write lock; `None` when none is written.
    pub fn upsert_where(&self, points: Vec<NewPoint>, filter: &Filter) -> Result<Option<u64>> {
        let mut writer = self.writer.lock();
        let mut kept = Vec::with_capacity(points.len());
        for point in points {
            let replaceable = self
                .stored_one(&point.id)?
                .is_none_or(|stored| self.point_matches(&stored, filter));
            if replaceable {
                kept.push(point);
            }
        }
        if kept.is_empty() {
            return Ok(None);
        }
        self.commit_locked(&mut writer, ApplyOp::Upsert(kept))
            .map(Some)
    }

    /// Gives the points their new vectors (each already checked), keeping their payloads and
    /// the vectors not given (an empty dense vector, or a sparse name left out), under the
    /// write lock; with `only_where`, only to those stored points that pass it. Every one must
    /// be here: otherwise nothing is written and the first missing id is the error.
    pub fn update_vectors(
        &self,
        points: Vec<NewPoint>,
        only_where: Option<&Filter>,
    ) -> Result<Option<u64>> {
        let mut writer = self.writer.lock();
        let mut rewritten = Vec::with_capacity(points.len());
        for point in points {
            let mut stored = self
                .stored_one(&point.id)?
                .ok_or(ServerError::PointNotFound(point.id))?;
            if only_where.is_some_and(|f| !self.point_matches(&stored, f)) {
                continue;
            }
            merge_vectors(&mut stored, point);
            rewritten.push(stored);
        }
        if rewritten.is_empty() {
            return Ok(None);
        }
        self.commit_locked(&mut writer, ApplyOp::Upsert(rewritten))
            .map(Some)
    }

    /// Reads each of `ids` this partition holds from the store, lets `change` rewrite it (or
    /// leave it, `None`) and commits the rewritten points as one write, all under the write
    /// lock, so that no other write of the partition comes between the read and the write.
    fn rewrite(
        &self,
        ids: &[PointId],
        mut change: impl FnMut(NewPoint) -> Option<NewPoint>,
    ) -> Result<Option<u64>> {
        let mut writer = self.writer.lock();
        let mut points = Vec::new();
        for id in ids {
            if let Some(point) = self.stored_one(id)?.and_then(&mut change) {
                points.push(point);
            }
        }
        if points.is_empty() {
            return Ok(None);
        }
        self.commit_locked(&mut writer, ApplyOp::Upsert(points))
            .map(Some)
    }

    /// Indexes payload `key` as `kind` from now on (replacing an index of another type):
    /// stored durably, then built from the live points before this returns.
    pub fn create_payload_index(&self, key: &str, kind: PayloadSchemaType) -> Result<()> {
        self.change_payload_schema(|schema| {
            schema.insert(key.to_owned(), kind);
        })
    }

    /// Drops the payload index of `key`, if there is one.
    pub fn delete_payload_index(&self, key: &str) -> Result<()> {
        self.change_payload_schema(|schema| {
            schema.remove(key);
        })
    }

    fn change_payload_schema(&self, change: impl FnOnce(&mut PayloadSchema)) -> Result<()> {
        let mut schema = self.shared.payload_schema.write();
        let mut changed = schema.clone();
        change(&mut changed);
        let bytes =
            serde_json::to_vec(&changed).map_err(|e| ServerError::Internal(e.to_string()))?;
        self.put_meta(payload_index::SCHEMA_KEY, &bytes)?;
        *schema = changed;
        // Still under the schema's lock: a vacuum swapping tables syncs after it.
        self.shared
            .live()
            .table
            .write()
            .sync_payload_schema(&schema);
        Ok(())
    }

    /// The type of `key`'s payload index, if it has one.
    pub fn payload_index_type(&self, key: &str) -> Option<PayloadSchemaType> {
        self.shared.payload_schema.read().get(key).copied()
    }

    /// The indexed payload keys, their types and the live points each index holds.
    pub fn payload_indexes(&self) -> BTreeMap<String, PayloadIndexInfo> {
        let schema = self.shared.payload_schema.read().clone();
        let live = self.shared.live();
        let table = live.table.read();
        let points = table.payload_index.points(|slot| table.is_live(slot));
        schema
            .into_iter()
            .map(|(key, data_type)| {
                let points = points.get(&key).copied().unwrap_or(0);
                (key, PayloadIndexInfo { data_type, points })
            })
            .collect()
    }

    /// Stores a small named value durably (synced, whatever `storage.sync_writes` says).
    pub fn put_meta(&self, name: &str, value: &[u8]) -> Result<()> {
        Ok(self.shared.store.put_meta(name, value)?)
    }

    fn commit(&self, op: ApplyOp) -> Result<u64> {
        let mut writer = self.writer.lock();
        self.commit_locked(&mut writer, op)
    }

    fn commit_locked(&self, writer: &mut Writer, op: ApplyOp) -> Result<u64> {
        let Some(queue) = writer.queue.clone() else {
            return Err(ServerError::Unavailable(format!(
                "collection `{}` is closing",
                self.name()
            )));
        };
        let seq = writer.last_seq + 1;
        let write = match &op {
            ApplyOp::Upsert(points) => WriteOp::Upsert(
                points
                    .iter()
                    .map(|p| {
                        let payload = p
                            .payload
                            .as_ref()
                            .map(|m| serde_json::Value::Object(m.clone()).to_string());
                        (
                            keys::encode(&p.id),
                            StoredPoint {
                                version: seq,
                                vector: p.vector.clone(),
                                payload,
                                sparse: keys::sparse_to_stored(&p.sparse),
                                extra: keys::extra_to_stored(&p.extra),
                            },
                        )
                    })
                    .collect(),
            ),
            ApplyOp::Delete(ids) => WriteOp::Delete(ids.iter().map(keys::encode).collect()),
            // A partition of its own changes its schema in place (`change_payload_schema`);
            // only a replica's log hands one over.
            ApplyOp::PayloadIndex { .. } => {
                return Err(ServerError::Internal(
                    "a payload schema is not a write of its own".into(),
                ))
            }
        };
        // Queue first, so the applier links the vectors while RocksDB syncs; it publishes
        // them only on `durable_tx`'s word. A failed write reuses `seq` for the next op.
        let (durable_tx, durable) = sync_channel(1);
        queue
            .send(ApplyJob {
                seq,
                op,
                durable: Durable(durable),
            })
            .map_err(|_| {
                ServerError::Unavailable(format!(
                    "collection `{}`: index applier stopped",
                    self.name()
                ))
            })?;
        let written = self.shared.store.write(seq, &write);
        let _ = durable_tx.send(written.is_ok());
        written?;
        writer.last_seq = seq;
        Ok(seq)
    }

    /// Resolves once `seq` is searchable.
    pub async fn wait_applied(&self, seq: u64) -> Result<()> {
        let mut rx = self.shared.applied.subscribe();
        rx.wait_for(|&applied| applied >= seq)
            .await
            .map(|_| ())
            .map_err(|_| {
                ServerError::Unavailable(format!(
                    "collection `{}`: index applier stopped",
                    self.name()
                ))
            })
    }

    /// Blocks until `seq` is searchable (for threads outside the async runtime). Gives up
    /// after a minute: the applier applies a batch in milliseconds, or in the time of one
    /// vacuum, so a minute means it has stopped.
    pub fn wait_applied_blocking(&self, seq: u64) -> Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while *self.shared.applied.borrow() < seq {
            if std::time::Instant::now() > deadline {
                return Err(ServerError::Unavailable(format!(
                    "collection `{}`: index applier did not reach op {seq} in a minute",
                    self.name()
                )));
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        Ok(())
    }

    /// Stops the applier after it drains its queue and writes a final snapshot.
    pub fn close(&self) {
        self.writer.lock().queue = None;
        if let Some(handle) = self.applier.lock().take() {
            if handle.join().is_err() {
                tracing::error!(collection = self.name(), "applier thread panicked");
            }
        }
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.close();
    }
}

/// The payload schema stored in `store` (none stored: no index).
fn stored_schema(name: &str, store: &PartitionStore) -> Result<PayloadSchema> {
    match store.get_meta(payload_index::SCHEMA_KEY)? {
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            ServerError::Internal(format!("payload schema of `{name}` does not parse: {e}"))
        }),
        None => Ok(PayloadSchema::new()),
    }
}

/// Where a partition keeps its files.
pub mod paths {
    use std::path::{Path, PathBuf};

    /// RocksDB directory of a partition.
    pub fn db(partition: &Path) -> PathBuf {
        partition.join("db")
    }

    /// Index snapshot file of a partition.
    pub fn snapshot(partition: &Path) -> PathBuf {
        partition.join("index.cidx")
    }
}
