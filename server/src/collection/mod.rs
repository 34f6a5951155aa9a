//! A collection: `w` partitions (`crate::partition`) behind Pyramid's router. With `w = 1`
//! there is no router and every call goes straight to the one partition.
//!
//! **Placement.** A point lives in the partition the router assigns its vector to
//! ([`cairn_index::partition::Router::assign`]); a large-norm point of a `Dot` collection lives
//! in every partition. Until the collection holds enough points to train the router
//! ([`routing::train_at`]), every point goes to partition 0 and queries search it alone.
//!
//! **Writes** are serialised per collection (one lock: a point that changes partitions must
//! not race another write of the same id) and run in this order:
//!
//! ```text
//!  assign each point ──▶ find copies outside its new partitions ("stale")
//!        │                      │ any?
//!        │                      └──▶ record the moves in partition 0's meta (synced)
//!        ▼
//!  upsert into each target partition ──▶ delete the stale copies ──▶ clear the record ──▶ ack
//! ```
//!
//! The deletes wait until the upserts are searchable, so a query never misses a moving point.
//! A crash between the upsert and the deletes leaves a point in two partitions; the record
//! says which copy is new, and opening the collection finishes the deletes
//! ([`Collection::redo_moves`]). Deletes go to every partition; a partition without the ids
//! writes nothing.
//!
//! **Training and re-homing** happen in the background ([`rebalance`]): when partition 0
//! reaches the training size, and again whenever the collection has grown fourfold since the
//! router was last trained, a new router is trained on a sample, stored with state
//! `migrating`, and every point whose assignment changed is re-written through the write path
//! above, a batch at a time. While migrating, queries search every partition (so nothing is
//! missed whichever side of the move a point is on); new writes already use the new router.
//! A restart during migration resumes it.
//!
//! **Queries** go to the partitions the router picks for the query vector (its top
//! `branching` centres, at most `probe` partitions), each returns its top `offset + limit`,
//! and the lists are merged by score with duplicates (the replicated large-norm points)
//! removed. Exact and filtered queries search every partition: the router knows where similar
//! vectors are, not where a filter's matches are.

pub mod handle;
mod merge;
mod read;
mod rebalance;
pub mod routing;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_api::PointId;
use cairn_index::partition::{Assignment, CentroidTrainer};
use parking_lot::{Mutex, RwLock};

use crate::cluster::remote::RemotePartition;
use crate::cluster::rpc::PartitionCall;
use crate::cluster::Cluster;
use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::partition::{CollectionSettings, LoadReport, NewPoint, Partition, SlotStats};
pub use handle::{MetaStore, PartitionHandle};
use routing::Routing;

/// Folder of partition `i` inside a collection folder.
pub fn partition_dir(collection_dir: &Path, i: usize) -> PathBuf {
    collection_dir.join("partitions").join(i.to_string())
}

/// One collection; see the module docs.
pub struct Collection {
    name: String,
    settings: CollectionSettings,
    partitions: Vec<PartitionHandle>,
    /// Where the routing and moves records live.
    meta: MetaStore,
    routing: RwLock<Arc<Routing>>,
    /// Serialises writes of a partitioned collection (see the module docs).
    writes: Mutex<()>,
    trainer: Arc<dyn CentroidTrainer>,
    rebalancer: Mutex<Option<rebalance::Handle>>,
}

/// What a write produced: an operation id for the client and the partition sequence numbers
/// to wait for before the write is searchable.
#[derive(Debug, Clone, Default)]
pub struct WriteTicket {
    /// Increases with every write to the collection: the sum of its partitions' last
    /// sequence numbers (for one partition, that partition's sequence number).
    pub operation_id: u64,
    waits: Vec<(usize, u64)>,
}

impl WriteTicket {
    /// The ticket of a write to a collection of one partition.
    fn single(seq: u64) -> Self {
        Self {
            operation_id: seq,
            waits: vec![(0, seq)],
        }
    }
}

impl Collection {
    /// Writes the settings of a new collection into each of its (empty) partition folders.
    pub fn initialise(
        dir: &Path,
        settings: &CollectionSettings,
        storage: StorageConfig,
    ) -> Result<()> {
        for i in 0..settings.partitions() {
            Partition::initialise(&partition_dir(dir, i), settings, storage)?;
        }
        Ok(())
    }

    /// Opens a collection (blocking: loads every partition's index), finishes any write
    /// interrupted between its two steps, and starts the background rebalancer.
    pub fn open(
        name: &str,
        dir: &Path,
        storage: StorageConfig,
        trainer: Arc<dyn CentroidTrainer>,
    ) -> Result<Arc<Self>> {
        let first = Arc::new(Partition::open(name, &partition_dir(dir, 0), storage)?);
        let settings = first.settings().clone();
        let mut partitions = vec![PartitionHandle::Local(first.clone())];
        for i in 1..settings.partitions() {
            let label = format!("{name}/p{i}");
            partitions.push(PartitionHandle::Local(Arc::new(Partition::open(
                &label,
                &partition_dir(dir, i),
                storage,
            )?)));
        }
        Self::assemble(
            name,
            settings,
            partitions,
            MetaStore::Partition(first),
            trainer,
        )
    }

    /// Opens a collection of a router: its settings and routing records in `dir/meta`, its
    /// partitions' replicas on the cluster's shard nodes.
    pub fn open_remote(
        name: &str,
        dir: &Path,
        cluster: &Cluster,
        trainer: Arc<dyn CentroidTrainer>,
    ) -> Result<Arc<Self>> {
        let store = cairn_storage::PartitionStore::open(
            &dir.join("meta"),
            cairn_storage::StoreOptions { sync_writes: true },
        )?;
        let bytes = store
            .get_meta(crate::partition::settings::META_KEY)?
            .ok_or_else(|| ServerError::Internal(format!("collection `{name}` has no settings")))?;
        let settings: CollectionSettings = serde_json::from_slice(&bytes).map_err(|e| {
            ServerError::Internal(format!("settings of `{name}` do not parse: {e}"))
        })?;
        let mut partitions = Vec::with_capacity(settings.partitions());
        for i in 0..settings.partitions() {
            let remote = Arc::new(RemotePartition::new(
                Cluster::partition_name(name, i),
                cluster.placement(i, settings.replication_factor)?,
                cluster.http.clone(),
                cluster.read_deadline,
                cluster.slow_timeout,
            ));
            // Operation ids continue from what the replicas hold.
            if let Ok(state) =
                remote.read::<crate::cluster::rpc::PartitionState>(&PartitionCall::State)
            {
                remote.observe_seq(state.last_seq);
            }
            partitions.push(PartitionHandle::Remote(remote));
        }
        Self::assemble(name, settings, partitions, MetaStore::Store(store), trainer)
    }

    /// Creates a router's collection: each partition's replicas on their shard nodes, then
    /// the settings in `dir/meta` (the caller renames `dir` into place afterwards).
    pub fn initialise_remote(
        name: &str,
        dir: &Path,
        settings: &CollectionSettings,
        cluster: &Cluster,
    ) -> Result<()> {
        let mut shard_settings = settings.clone();
        shard_settings.routing = None;
        shard_settings.replication_factor = 1;
        let body = serde_json::to_value(&shard_settings)
            .map_err(|e| ServerError::Internal(e.to_string()))?;
        for i in 0..settings.partitions() {
            for node in cluster.placement(i, settings.replication_factor)? {
                cluster.admin(
                    &node,
                    reqwest::Method::PUT,
                    &Cluster::partition_name(name, i),
                    Some(&body),
                )?;
            }
        }
        let store = cairn_storage::PartitionStore::open(
            &dir.join("meta"),
            cairn_storage::StoreOptions { sync_writes: true },
        )?;
        let bytes =
            serde_json::to_vec(settings).map_err(|e| ServerError::Internal(e.to_string()))?;
        store.put_meta(crate::partition::settings::META_KEY, &bytes)?;
        Ok(())
    }

    /// Drops a router's collection's replicas from their shard nodes (best effort: a node
    /// that is down keeps an orphan the operator can drop).
    pub fn drop_remote(&self, cluster: &Cluster) {
        for (i, handle) in self.partitions.iter().enumerate() {
            let PartitionHandle::Remote(remote) = handle else {
                continue;
            };
            for replica in &remote.replicas {
                if let Err(e) = cluster.admin(
                    &replica.node,
                    reqwest::Method::DELETE,
                    &Cluster::partition_name(&self.name, i),
                    None,
                ) {
                    tracing::warn!(error = %e, "could not drop a replica");
                }
            }
        }
    }

    fn assemble(
        name: &str,
        settings: CollectionSettings,
        partitions: Vec<PartitionHandle>,
        meta: MetaStore,
        trainer: Arc<dyn CentroidTrainer>,
    ) -> Result<Arc<Self>> {
        let w = partitions.len();
        let routing = Routing::load(&meta, &settings)?;
        let collection = Arc::new(Self {
            name: name.to_owned(),
            settings,
            partitions,
            meta,
            routing: RwLock::new(Arc::new(routing)),
            writes: Mutex::new(()),
            trainer,
            rebalancer: Mutex::new(None),
        });
        if w > 1 {
            collection.redo_moves()?;
            *collection.rebalancer.lock() = Some(rebalance::spawn(&collection)?);
        }
        Ok(collection)
    }

    /// Runs `f` with the collection's writes held off (replica catch-up's last step).
    pub(crate) fn with_writes<R>(&self, f: impl FnOnce() -> R) -> R {
        let _writes = self.writes.lock();
        f()
    }

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its settings.
    pub fn settings(&self) -> &CollectionSettings {
        &self.settings
    }

    /// Its partitions, in order.
    pub fn partitions(&self) -> &[PartitionHandle] {
        &self.partitions
    }

    /// The current routing state.
    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing.read().clone()
    }

    /// The routing state for collection info (`None` for a collection of one partition).
    pub fn routing_info(&self) -> Option<cairn_api::RoutingInfo> {
        let params = self.settings.routing?;
        let r = self.routing();
        Some(cairn_api::RoutingInfo {
            phase: r.phase.name().to_owned(),
            version: r.version(),
            partitions: params.partitions,
            centres: params.centres,
            branching: params.branching,
            train_at_points: routing::train_at(&params),
            trained_at_points: r.trained_at_points,
            sample_points: r.sample_points,
            replicate_from_norm: r.router.as_ref().and_then(|r| r.hot_norm()),
            training_due: rebalance::training_due(&r, &params, rebalance::stored_points(self)),
            partition_points: self.partitions.iter().map(|p| p.points() as u64).collect(),
            replicas: self
                .partitions
                .iter()
                .filter_map(|p| match p {
                    PartitionHandle::Remote(r) => Some(r.replica_info()),
                    PartitionHandle::Local(_) => None,
                })
                .collect(),
        })
    }

    /// How the local partitions were loaded, summed (the slowest partition's time); a
    /// router's collection reports an empty load (its partitions load on the shards).
    pub fn load_report(&self) -> LoadReport {
        let mut locals = self.partitions.iter().filter_map(PartitionHandle::local);
        let Some(first) = locals.next() else {
            return LoadReport::default();
        };
        let mut total = first.load_report().clone();
        for p in locals {
            let r = p.load_report();
            if r.index_source != total.index_source {
                total.index_source = "mixed".into();
            }
            total.snapshot_seq = total.snapshot_seq.max(r.snapshot_seq);
            total.replayed_ops += r.replayed_ops;
            total.repaired_points += r.repaired_points;
            total.points += r.points;
            total.load_ms = total.load_ms.max(r.load_ms);
        }
        total
    }

    /// Index slots over all partitions (those that answer).
    pub fn slot_stats(&self) -> SlotStats {
        self.partitions
            .iter()
            .filter_map(|p| p.state().ok())
            .fold(SlotStats::default(), |a, b| SlotStats {
                index_slots: a.index_slots + b.index_slots,
                dead_slots: a.dead_slots + b.dead_slots,
            })
    }

    /// Bytes the partitions' indexes hold (those that answer).
    pub fn index_memory_bytes(&self) -> usize {
        self.partitions
            .iter()
            .filter_map(|p| p.state().ok())
            .map(|s| s.index_memory_bytes as usize)
            .sum()
    }

    /// Index searches its local partitions ran and their total seconds.
    pub fn index_search_time(&self) -> (u64, f64) {
        self.partitions
            .iter()
            .map(PartitionHandle::local_search_time)
            .fold((0, 0.0), |(n, s), (dn, ds)| (n + dn, s + ds))
    }

    /// Sum of the partitions' applied sequence numbers (comparable with `operation_id`).
    pub fn applied_seq(&self) -> u64 {
        self.partitions
            .iter()
            .map(|p| p.state().map_or(p.last_seq(), |s| s.applied_seq))
            .sum()
    }

    /// Commits points durably (blocking).
    pub fn upsert_blocking(&self, points: Vec<NewPoint>) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            return only.upsert(points).map(WriteTicket::single);
        }
        let _writes = self.writes.lock();
        let routing = self.routing();
        self.place_locked(&routing, points)
    }

    /// Commits a delete durably (blocking).
    pub fn delete_blocking(&self, ids: Vec<PointId>) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            return only.delete(ids).map(WriteTicket::single);
        }
        let _writes = self.writes.lock();
        let mut waits = Vec::new();
        for (q, partition) in self.partitions.iter().enumerate() {
            if let Some(seq) = partition.delete_present(&ids)? {
                waits.push((q, seq));
            }
        }
        Ok(self.ticket(waits))
    }

    /// Resolves once the write is searchable in every partition it touched.
    pub async fn wait_applied(&self, ticket: &WriteTicket) -> Result<()> {
        for &(q, seq) in &ticket.waits {
            self.partitions[q].wait_applied(seq).await?;
        }
        Ok(())
    }

    fn ticket(&self, waits: Vec<(usize, u64)>) -> WriteTicket {
        WriteTicket {
            operation_id: self.partitions.iter().map(|p| p.last_seq()).sum(),
            waits,
        }
    }

    /// Writes `points` where `routing` assigns them and removes their copies elsewhere, in
    /// the crash-safe order of the module docs. Callers hold `writes`.
    fn place_locked(&self, routing: &Routing, points: Vec<NewPoint>) -> Result<WriteTicket> {
        let w = self.partitions.len();
        // The last write of an id in a batch wins, as in one partition.
        let mut last: HashMap<PointId, usize> = HashMap::with_capacity(points.len());
        for (i, p) in points.iter().enumerate() {
            last.insert(p.id, i);
        }
        let points: Vec<NewPoint> = points
            .into_iter()
            .enumerate()
            .filter(|(i, p)| last.get(&p.id) == Some(i))
            .map(|(_, p)| p)
            .collect();
        let targets = points
            .iter()
            .map(|p| routing.assign(&p.vector))
            .collect::<Result<Vec<_>>>()?;
        // Copies outside a point's new partitions are stale: one question per partition.
        let mut stale: Vec<Vec<PointId>> = vec![Vec::new(); w];
        let mut moved = vec![false; points.len()];
        for (q, partition) in self.partitions.iter().enumerate() {
            let asked: Vec<usize> = (0..points.len())
                .filter(|&k| !routing::includes(targets[k], q))
                .collect();
            if asked.is_empty() {
                continue;
            }
            let ids: Vec<PointId> = asked.iter().map(|&k| points[k].id).collect();
            for (&k, held) in asked.iter().zip(partition.holds(&ids)?) {
                if held {
                    stale[q].push(points[k].id);
                    moved[k] = true;
                }
            }
        }
        let moves: Vec<routing::Move> = (0..points.len())
            .filter(|&k| moved[k])
            .map(|k| routing::Move::new(points[k].id, targets[k]))
            .collect();
        let mut per_partition: Vec<Vec<NewPoint>> = vec![Vec::new(); w];
        for (point, to) in points.into_iter().zip(targets) {
            match to {
                Assignment::One(t) => per_partition[t as usize].push(point),
                Assignment::All => {
                    for list in &mut per_partition {
                        list.push(point.clone());
                    }
                }
            }
        }
        if !moves.is_empty() {
            routing::record_moves(&self.meta, &moves)?;
        }
        let mut waits = Vec::new();
        for (q, batch) in per_partition.into_iter().enumerate() {
            if !batch.is_empty() {
                waits.push((q, self.partitions[q].upsert(batch)?));
            }
        }
        if !moves.is_empty() {
            // A moved point must be searchable at its new home before it disappears from the
            // old one, or a query in between would miss it (a moment of two copies is
            // harmless: results drop duplicate ids).
            for &(q, seq) in &waits {
                self.partitions[q].wait_applied_blocking(seq)?;
            }
        }
        for (q, ids) in stale.into_iter().enumerate() {
            if ids.is_empty() {
                continue;
            }
            if let Some(seq) = self.partitions[q].delete_present(&ids)? {
                waits.push((q, seq));
            }
        }
        if !moves.is_empty() {
            routing::clear_moves(&self.meta)?;
        }
        Ok(self.ticket(waits))
    }

    /// Finishes the moves a crash interrupted: where the new copy landed, the old copies go;
    /// where it did not, the write was never acknowledged and the old copy stays.
    fn redo_moves(&self) -> Result<()> {
        let Some(moves) = routing::recorded_moves(&self.meta)? else {
            return Ok(());
        };
        let mut finished = 0usize;
        for m in &moves {
            let to = m.assignment();
            let landed = match to {
                Assignment::One(t) => self.partitions[t as usize].holds(&[m.id])?[0],
                Assignment::All => true,
            };
            if !landed {
                continue;
            }
            for (q, partition) in self.partitions.iter().enumerate() {
                if !routing::includes(to, q) {
                    partition.delete_present(&[m.id])?;
                }
            }
            finished += 1;
        }
        routing::clear_moves(&self.meta)?;
        tracing::info!(
            collection = self.name,
            recorded = moves.len(),
            finished,
            "finished moves interrupted by a crash"
        );
        Ok(())
    }

    /// Stops the rebalancer, then every partition's applier after a final snapshot.
    pub fn close(&self) {
        if let Some(handle) = self.rebalancer.lock().take() {
            handle.stop();
        }
        for p in &self.partitions {
            p.close();
        }
    }
}

impl Drop for Collection {
    fn drop(&mut self) {
        self.close();
    }
}
