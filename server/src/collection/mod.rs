//! A collection: `w` partitions behind Pyramid's meta-index. With `w = 1` there is no
//! meta-index and every call goes straight to the one partition. The partitions are
//! [`PartitionHandle`]s: in this process, or replicated on other nodes — the collection's
//! code is the same either way.
//!
//! **Placement.** A point lives in the partition the meta-index assigns its vector to
//! ([`cairn_index::pyramid::MetaIndex::assign`]), and a point near a partition boundary also in
//! the partition across it (spilled); a large-norm point of a `Dot` collection lives in every
//! partition. Until the collection holds enough points to train the meta-index
//! ([`routing::train_at`]), every point goes to partition 0 and queries search it alone.
//!
//! **Writes** are serialised per collection (one lock: a point that changes partitions must
//! not race another write of the same id) and run in this order:
//!
//! ```text
//!  assign each point ──▶ ask every partition which ids it holds
//!        │                      │ a stored point moving, or rewritten in two partitions or more?
//!        │                      └──▶ record the rewrite in partition 0's meta (synced)
//!        ▼
//!  upsert (recorded points' home copies first) ──▶ delete the stale copies ──▶ clear the record
//! ```
//!
//! The deletes wait until the upserts are searchable, so a query never misses a moving point.
//! A crash part-way can leave a point's copies at two versions; the record says where the
//! point was and where it goes, and opening the collection makes it one version again
//! ([`Collection::redo_moves`]). A new point is not recorded: a crash can only leave it
//! missing from some of its partitions, at one version, until the write is retried. Deletes go
//! to every partition; a partition without the ids writes nothing.
//!
//! **Training and re-homing** happen in the background ([`rebalance`]): when partition 0
//! reaches the training size, and again whenever the collection has grown fourfold since the
//! meta-index was last trained, a new meta-index is trained on a sample, stored with state
//! `migrating`, and every point whose assignment changed is re-written through the write path
//! above, a batch at a time. While migrating, queries search every partition (so nothing is
//! missed whichever side of the move a point is on); new writes already use the new meta-index.
//! A restart during migration resumes it.
//!
//! **One writer.** In a cluster of peer nodes ([`MetaStore::Shared`]), the records above live
//! in the cluster's metadata and one node at a time writes the collection (its *writer*);
//! the other nodes send it their writes ([`SharedRecords::forward`]) and follow its routing.
//! A node that becomes the writer takes a new epoch, writes an empty fenced entry to every
//! partition (after which no write of an older writer lands in any partition's log), reads
//! the routing and finishes the recorded moves before its first write. Its own reads in the
//! write path (which partitions hold a point, its stored value) are served by replicas that
//! have applied at least what it last wrote there, so a lagging replica never hides a copy.
//!
//! **Queries** go to the partitions the meta-index picks for the query vector (its top
//! `branching` centres, at most `probe` partitions), each returns its top `offset + limit`,
//! and the lists are merged by score with duplicates (the replicated large-norm points)
//! removed. Exact and filtered queries search every partition: the meta-index knows where similar
//! vectors are, not where a filter's matches are.

pub mod handle;
pub mod host;
pub mod local;
mod merge;
mod read;
mod rebalance;
mod rewrite;
pub mod routing;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use cairn_api::internal::NewPoint;
use cairn_api::{PayloadIndexInfo, PayloadSchemaType, PointId, ReadToken};
use cairn_index::pyramid::Assignment;
use cairn_index::Trainers;
use parking_lot::{Mutex, MutexGuard, RwLock};

use crate::error::{Result, ServerError};
use crate::partition::export::PartitionFiles;
use crate::partition::{LoadReport, Partition, SlotStats};
use crate::request::CollectionSettings;
use cairn_api::internal::{CollectionWrite, WriteReceipt};
pub use handle::{HandleFuture, PartitionHandle, PartitionHealth, ReadTrace};
pub use host::{MetaStore, Opened, PartitionHost, SharedRecords};
use routing::Routing;

/// A partition's number within its collection, `0..w`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionId(pub usize);

impl std::fmt::Display for PartitionId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One collection; see the module docs.
pub struct Collection {
    name: String,
    settings: CollectionSettings,
    partitions: Vec<Arc<dyn PartitionHandle>>,
    /// Where the routing and moves records live.
    meta: MetaStore,
    routing: RwLock<Arc<Routing>>,
    /// The routing record's stamp when it was last read (a node that does not write the
    /// collection reads it again when the stamp moves: [`Collection::follow_routing`]).
    routing_stamp: std::sync::atomic::AtomicU64,
    /// Serialises writes of a partitioned collection (see the module docs), and holds what
    /// this node wrote as its writer.
    writes: Mutex<Writer>,
    /// Trains the meta-index's k-means centres (FAISS in the binary).
    trainers: Trainers,
    rebalancer: Mutex<Option<rebalance::Handle>>,
}

/// Facet values of equal counts in Qdrant's order: numbers by value, strings and booleans
/// as they compare, values of different kinds by their JSON text.
fn value_order(a: &serde_json::Value, b: &serde_json::Value) -> std::cmp::Ordering {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap_or(0.0)
            .total_cmp(&y.as_f64().unwrap_or(0.0)),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (x, y) => x.to_string().cmp(&y.to_string()),
    }
}

/// Most ids in one write of a delete by filter: the matches are deleted in writes of at most
/// this many, so no single write (a Raft entry, a RocksDB batch) grows with the collection.
/// Each write is atomic; the delete as a whole is not (a crash part-way leaves the matches
/// not yet reached, and the request was not acknowledged). The same as the default
/// `limits.max_points_per_request`: a write of this size is one the API takes anyway.
const DELETE_BATCH: usize = 10_000;

/// What a write produced: an operation id for the client and the partition sequence numbers
/// to wait for before the write is searchable.
#[derive(Debug, Clone, Default)]
pub struct WriteTicket {
    /// Increases with every write to the collection: the sum of its partitions' last
    /// sequence numbers (for one partition, that partition's sequence number).
    pub operation_id: u64,
    waits: Vec<(PartitionId, u64)>,
}

/// What this node has written as a partitioned collection's writer: its epoch (0: the
/// collection has one writer by construction, no fence) and, per partition, the last log
/// position it wrote or fenced, which its own reads in the write path must see.
#[derive(Debug, Default)]
struct Writer {
    epoch: u64,
    floors: Vec<u64>,
    /// A moves record may be stored that no one is finishing: a write failed (an error, not
    /// a crash) between recording its moves and clearing them. The next write finishes it
    /// first ([`Collection::redo_moves`]), as a restart would.
    unfinished: bool,
}

impl Writer {
    /// Notes that partition `q` has been written up to `seq`.
    fn wrote(&mut self, q: usize, seq: u64) -> u64 {
        if let Some(floor) = self.floors.get_mut(q) {
            *floor = (*floor).max(seq);
        }
        seq
    }
}

impl WriteTicket {
    /// Where the write left each partition it touched, for a read that must see it.
    pub fn read_token(&self) -> ReadToken {
        let mut token = ReadToken::default();
        for &(PartitionId(p), seq) in &self.waits {
            token = token.merge(&ReadToken(vec![(p as u32, seq)]));
        }
        token
    }

    /// The ticket of a write to a collection of one partition.
    fn single(seq: u64) -> Self {
        Self {
            operation_id: seq,
            waits: vec![(PartitionId(0), seq)],
        }
    }
}

impl Collection {
    /// Assembles an opened collection, finishes any write interrupted between its two steps,
    /// and starts the background rebalancer (blocking).
    pub fn open(name: &str, opened: Opened, trainers: Trainers) -> Result<Arc<Self>> {
        let Opened {
            settings,
            partitions,
            meta,
        } = opened;
        let w = partitions.len();
        // Read before the record, so a record stored in between is read again.
        let stamp = match &meta {
            MetaStore::Shared(shared) if w > 1 => shared.stamp(routing::ROUTING_KEY)?,
            MetaStore::Shared(_) | MetaStore::Partition(_) => 0,
        };
        let routing = Routing::load(&meta, &settings)?;
        let collection = Arc::new(Self {
            name: name.to_owned(),
            settings,
            partitions,
            meta,
            routing: RwLock::new(Arc::new(routing)),
            routing_stamp: std::sync::atomic::AtomicU64::new(stamp),
            writes: Mutex::new(Writer::default()),
            trainers,
            rebalancer: Mutex::new(None),
        });
        if w > 1 {
            // A shared collection's writer finishes them when it takes over.
            if !matches!(collection.meta, MetaStore::Shared(_)) {
                let mut writer = collection.writes.lock();
                collection.redo_moves(&mut writer)?;
            }
            *collection.rebalancer.lock() = Some(rebalance::spawn(&collection)?);
        }
        Ok(collection)
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
    pub fn partitions(&self) -> &[Arc<dyn PartitionHandle>] {
        &self.partitions
    }

    /// The worst health of its partitions.
    pub fn health(&self) -> PartitionHealth {
        self.partitions
            .iter()
            .map(|p| p.health())
            .max()
            .unwrap_or(PartitionHealth::Healthy)
    }

    /// The current routing state.
    pub(crate) fn routing(&self) -> Arc<Routing> {
        self.routing.read().clone()
    }

    /// The routing state for collection info (`None` for a collection of one partition).
    pub fn routing_info(&self) -> Option<cairn_api::RoutingInfo> {
        let params = self.settings.routing?;
        let r = self.routing();
        // Once trained, the meta-index's own figures: its centres grow with the collection and
        // its branching is tuned at training.
        let trained = r.meta_index.as_ref().map_or(params, |m| *m.params());
        Some(cairn_api::RoutingInfo {
            phase: r.phase.name().to_owned(),
            version: r.version(),
            partitions: params.partitions,
            centres: trained.centres,
            branching: trained.branching,
            spill: params.spill,
            train_at_points: routing::train_at(&params),
            trained_at_points: r.trained_at_points,
            sample_points: r.sample_points,
            replicate_from_norm: r.meta_index.as_ref().and_then(|r| r.hot_norm()),
            training_due: rebalance::training_due(&r, &params, rebalance::stored_points(self)),
            partition_points: self.partitions.iter().map(|p| p.points() as u64).collect(),
            replicas: self
                .partitions
                .iter()
                .filter_map(|p| p.replica_info())
                .collect(),
        })
    }

    /// How the local partitions were loaded, summed (the slowest partition's time);
    /// partitions with no replica on this node load elsewhere and are not counted.
    pub fn load_report(&self) -> LoadReport {
        let mut locals = self.partitions.iter().filter_map(|p| p.load_report());
        let Some(first) = locals.next() else {
            return LoadReport::default();
        };
        let mut total = first;
        for r in locals {
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

    /// Every partition, when they are all in this process and the collection is not a
    /// cluster's; otherwise a 400 saying that `what` happens on standalone collections only.
    fn local_partitions(&self, what: &str) -> Result<Vec<&Partition>> {
        let clustered = matches!(self.meta, MetaStore::Shared(_));
        let locals: Option<Vec<&Partition>> = self.partitions.iter().map(|p| p.local()).collect();
        match (clustered, locals) {
            (false, Some(locals)) => Ok(locals),
            _ => Err(ServerError::InvalidRequest(format!(
                "collection `{}` is replicated across a cluster; {what} on standalone \
                 collections only for now",
                self.name
            ))),
        }
    }

    /// The `limit` most frequent values of `key`'s payload index among the points matching
    /// `filter`, with their counts (blocking). A point stored in several partitions (spilled)
    /// counts once: their ids are merged.
    pub fn facet(
        &self,
        key: &str,
        filter: Option<&cairn_api::Filter>,
        limit: usize,
    ) -> Result<Vec<cairn_api::FacetHit>> {
        let mut counts: Vec<(serde_json::Value, u64)> = match self.partitions.as_slice() {
            [only] => only
                .facet(key, filter)?
                .into_iter()
                .map(|(value, ids)| (value, ids.len() as u64))
                .collect(),
            many => {
                let mut merged: HashMap<
                    String,
                    (serde_json::Value, std::collections::HashSet<PointId>),
                > = HashMap::new();
                for partition in many {
                    for (value, ids) in partition.facet(key, filter)? {
                        merged
                            .entry(value.to_string())
                            .or_insert_with(|| (value, Default::default()))
                            .1
                            .extend(ids);
                    }
                }
                merged
                    .into_values()
                    .map(|(value, ids)| (value, ids.len() as u64))
                    .collect()
            }
        };
        counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| value_order(&a.0, &b.0)));
        counts.truncate(limit);
        Ok(counts
            .into_iter()
            .map(|(value, count)| cairn_api::FacetHit { value, count })
            .collect())
    }

    /// Writes one moment of every partition into `dir/p{i}/` (blocking): the partitions'
    /// moments are taken while the collection's writes are held, so a point moving between
    /// partitions is in exactly one of them, then written out while writes go on.
    pub fn export(&self, dir: &std::path::Path) -> Result<Vec<PartitionFiles>> {
        let partitions = self.local_partitions("snapshots are taken")?;
        let frozen = {
            let _writes = match partitions.len() {
                1 => None,
                _ => self.lead()?,
            };
            partitions
                .iter()
                .enumerate()
                .map(|(i, p)| p.freeze(&dir.join(format!("p{i}"))))
                .collect::<Result<Vec<_>>>()?
        };
        frozen.into_iter().map(|f| f.export()).collect()
    }

    /// Indexes payload `key` as `kind` (`None`: drops its index) in every partition, on
    /// every replica of a clustered one, and waits until each serves with it (blocking: the
    /// index is built from the points there). A replicated partition changes at one place in
    /// its log, so its replicas never disagree on what a text condition matches; one that was
    /// away catches up from the log or a snapshot. The change is idempotent: after a failure
    /// part-way, the same request finishes it.
    pub fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<()> {
        for partition in &self.partitions {
            let seq = partition.set_payload_index(key, kind)?;
            partition.wait_applied_blocking(seq)?;
        }
        Ok(())
    }

    /// The payload indexes and the live points each holds over all partitions; a partition
    /// that cannot be asked (no replica reachable) counts no points.
    pub fn payload_schema(&self) -> BTreeMap<String, PayloadIndexInfo> {
        let mut schema = BTreeMap::new();
        for partition in &self.partitions {
            for (key, info) in partition.payload_indexes().unwrap_or_default() {
                schema
                    .entry(key)
                    .and_modify(|sum: &mut PayloadIndexInfo| sum.points += info.points)
                    .or_insert(info);
            }
        }
        schema
    }

    /// The type of `key`'s payload index, if it has one (every partition has the same
    /// schema: the first one's answers). Blocking: a partition may be asked on another node.
    pub fn payload_index_type(&self, key: &str) -> Result<Option<PayloadSchemaType>> {
        match self.partitions.first() {
            Some(first) => first.payload_index_type(key),
            None => Ok(None),
        }
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
            .map(|p| p.local_search_time())
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
            return only.upsert(points, 0).map(WriteTicket::single);
        }
        let Some(mut writer) = self.lead()? else {
            return self.forward(&CollectionWrite::Upsert { points });
        };
        let routing = self.routing();
        self.place_locked(&mut writer, &routing, points)
    }

    /// The committed values of those of `ids` the collection holds, read under the write lock
    /// from copies that hold every acknowledged write (a spilled point from either copy).
    fn stored_locked(
        &self,
        writer: &Writer,
        ids: &[PointId],
    ) -> Result<HashMap<PointId, NewPoint>> {
        let mut stored = HashMap::new();
        for q in 0..self.partitions.len() {
            for point in self
                .committed(writer, q)?
                .stored(ids)?
                .into_iter()
                .flatten()
            {
                stored.entry(point.id).or_insert(point);
            }
        }
        Ok(stored)
    }

    /// Commits a delete durably (blocking).
    pub fn delete_blocking(&self, ids: Vec<PointId>) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            return only.delete(ids, 0).map(WriteTicket::single);
        }
        let Some(mut writer) = self.lead()? else {
            return self.forward(&CollectionWrite::Delete { ids });
        };
        self.delete_locked(&mut writer, &ids)
    }

    /// Deletes every point passing `filter` (blocking). The matches are read and deleted
    /// under the write lock, from copies that hold every acknowledged write: a point that a
    /// re-home moves between two partitions in between would otherwise be missed in both.
    pub fn delete_matching(&self, filter: &cairn_api::Filter) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            // One partition: nothing moves, and a linearizable read sees every write.
            let ids = self.matching_ids(Some(filter), &cairn_api::ReadConsistency::Linearizable)?;
            let mut last = None;
            for chunk in ids.chunks(DELETE_BATCH) {
                last = Some(only.delete(chunk.to_vec(), 0)?);
            }
            return Ok(last
                .map(WriteTicket::single)
                .unwrap_or_else(|| self.ticket(Vec::new())));
        }
        let Some(mut writer) = self.lead()? else {
            return self.forward(&CollectionWrite::DeleteMatching {
                filter: filter.clone(),
            });
        };
        let mut ids = std::collections::BTreeSet::new();
        for q in 0..self.partitions.len() {
            ids.extend(self.committed(&writer, q)?.matching_ids(Some(filter))?);
        }
        let ids: Vec<PointId> = ids.into_iter().collect();
        let mut waits = std::collections::BTreeMap::new();
        for chunk in ids.chunks(DELETE_BATCH) {
            // A later write of a partition covers its earlier ones: keep the last position.
            waits.extend(self.delete_locked(&mut writer, chunk)?.waits);
        }
        Ok(self.ticket(waits.into_iter().collect()))
    }

    /// Deletes `ids` from every partition that holds them. Callers hold `writes`.
    fn delete_locked(&self, writer: &mut Writer, ids: &[PointId]) -> Result<WriteTicket> {
        let mut waits = Vec::new();
        if ids.is_empty() {
            return Ok(self.ticket(waits));
        }
        for q in 0..self.partitions.len() {
            if let Some(seq) = self
                .committed(writer, q)?
                .delete_present(ids, writer.epoch)?
            {
                waits.push((PartitionId(q), writer.wrote(q, seq)));
            }
        }
        Ok(self.ticket(waits))
    }

    /// Makes a write another node sent this one as the collection's writer (blocking).
    /// Refused when this node does not write the collection (any more): the sender tries
    /// again, and finds the writer anew.
    pub fn write_here(&self, write: CollectionWrite) -> Result<WriteTicket> {
        let Some(mut writer) = self.lead()? else {
            return Err(ServerError::Unavailable(format!(
                "this node no longer writes collection `{}`; retry",
                self.name
            )));
        };
        match write {
            CollectionWrite::Upsert { points } => {
                let routing = self.routing();
                self.place_locked(&mut writer, &routing, points)
            }
            CollectionWrite::Delete { ids } => self.delete_locked(&mut writer, &ids),
            CollectionWrite::DeleteMatching { filter } => {
                drop(writer);
                self.delete_matching(&filter)
            }
            CollectionWrite::Update { selection, change } => {
                self.update_locked(&mut writer, &selection, &change)
            }
            CollectionWrite::UpdateVectors { points, only_where } => {
                self.update_vectors_locked(&mut writer, points, only_where.as_ref())
            }
            CollectionWrite::UpsertWhere { points, filter } => {
                self.upsert_where_locked(&mut writer, points, &filter)
            }
        }
    }

    /// This node's writer state once it may write the collection, or `None` while another
    /// node writes it. A node that becomes the writer first fences every partition at its new
    /// epoch, reads the routing again and finishes the recorded moves (module docs); so does
    /// any writer after a write that failed part-way.
    fn lead(&self) -> Result<Option<MutexGuard<'_, Writer>>> {
        let mut writer = self.writes.lock();
        if let MetaStore::Shared(shared) = &self.meta {
            match shared.writer(writer.epoch)? {
                None => return Ok(None),
                Some(epoch) if epoch == writer.epoch => {}
                Some(epoch) => self.take_over(&mut writer, epoch)?,
            }
        }
        if writer.unfinished {
            self.redo_moves(&mut writer)?;
        }
        Ok(Some(writer))
    }

    /// Makes this node the writer at `epoch`: fences every partition, reads the routing and
    /// finishes the recorded moves. `writer` changes only once all of it is done, so a
    /// take-over cut short is done again by the next write.
    fn take_over(&self, writer: &mut Writer, epoch: u64) -> Result<()> {
        let mut next = Writer {
            epoch,
            floors: vec![0; self.partitions.len()],
            unfinished: true,
        };
        for (q, partition) in self.partitions.iter().enumerate() {
            let seq = partition.upsert(Vec::new(), epoch)?;
            next.wrote(q, seq);
        }
        *self.routing.write() = Arc::new(Routing::load(&self.meta, &self.settings)?);
        self.redo_moves(&mut next)?;
        tracing::info!(
            collection = self.name,
            epoch,
            "this node now writes the collection"
        );
        *writer = next;
        Ok(())
    }

    /// Partition `q` as the writer must read it: from a copy that has applied everything the
    /// writer wrote there.
    fn committed(&self, writer: &Writer, q: usize) -> Result<Arc<dyn PartitionHandle>> {
        let floor = writer.floors.get(q).copied().unwrap_or(0);
        self.partitions[q].clone().at_least(floor)
    }

    /// Sends a write to the node that writes the collection.
    fn forward(&self, write: &CollectionWrite) -> Result<WriteTicket> {
        let MetaStore::Shared(shared) = &self.meta else {
            return Err(ServerError::Internal(
                "a collection of one writer has no writer elsewhere".into(),
            ));
        };
        let WriteReceipt {
            operation_id,
            waits,
        } = shared.forward(write)?;
        Ok(WriteTicket {
            operation_id,
            waits: waits
                .into_iter()
                .filter(|&(q, _)| (q as usize) < self.partitions.len())
                .map(|(q, seq)| (PartitionId(q as usize), seq))
                .collect(),
        })
    }

    /// What another node is told of a write made here.
    pub fn receipt(ticket: &WriteTicket) -> WriteReceipt {
        WriteReceipt {
            operation_id: ticket.operation_id,
            waits: ticket
                .waits
                .iter()
                .map(|&(PartitionId(q), seq)| (q as u32, seq))
                .collect(),
        }
    }

    /// On a node that does not write the collection: reads the routing again if the writer
    /// stored a new one (blocking). The follower of the cluster's metadata calls it each pass.
    pub fn follow_routing(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        let MetaStore::Shared(shared) = &self.meta else {
            return Ok(());
        };
        if self.partitions.len() < 2 {
            return Ok(());
        }
        // Under the write lock, where the writer stores its routing and notes the stamp
        // ([`Self::routing_stored`]); a busy writer is asked again next pass.
        let Some(_writes) = self.writes.try_lock() else {
            return Ok(());
        };
        let stamp = shared.stamp(routing::ROUTING_KEY)?;
        if stamp == self.routing_stamp.load(Ordering::Acquire) {
            return Ok(());
        }
        let routing = Routing::load(&self.meta, &self.settings)?;
        tracing::info!(
            collection = self.name,
            version = routing.version(),
            phase = routing.phase.name(),
            "routing read from the cluster's metadata"
        );
        *self.routing.write() = Arc::new(routing);
        self.routing_stamp.store(stamp, Ordering::Release);
        Ok(())
    }

    /// Notes the stamp of the routing record this node has just stored (callers hold
    /// `writes`), so that [`Self::follow_routing`] does not read it back before this node
    /// adopts it: the writer keeps writing by the old routing until the other nodes have read
    /// the new one (`rebalance.rs`).
    fn routing_stored(&self) -> Result<()> {
        if let MetaStore::Shared(shared) = &self.meta {
            let stamp = shared.stamp(routing::ROUTING_KEY)?;
            self.routing_stamp
                .store(stamp, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }

    /// Resolves once the write is searchable in every partition it touched.
    pub async fn wait_applied(&self, ticket: &WriteTicket) -> Result<()> {
        for &(q, seq) in &ticket.waits {
            self.partitions[q.0].wait_applied(seq).await?;
        }
        Ok(())
    }

    fn ticket(&self, waits: Vec<(PartitionId, u64)>) -> WriteTicket {
        WriteTicket {
            operation_id: self.partitions.iter().map(|p| p.last_seq()).sum(),
            waits,
        }
    }

    /// Writes `points` where `routing` assigns them and removes their copies elsewhere, in
    /// the crash-safe order of the module docs. Callers hold `writes`, passed as `writer`.
    fn place_locked(
        &self,
        writer: &mut Writer,
        routing: &Routing,
        points: Vec<NewPoint>,
    ) -> Result<WriteTicket> {
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
        // Where each point is held now: one question per partition.
        let ids: Vec<PointId> = points.iter().map(|p| p.id).collect();
        let mut held: Vec<Vec<u32>> = vec![Vec::new(); points.len()];
        for q in 0..w {
            for (k, is_held) in self
                .committed(writer, q)?
                .holds(&ids)?
                .into_iter()
                .enumerate()
            {
                if is_held {
                    held[k].push(q as u32);
                }
            }
        }
        // Copies outside a point's new partitions are stale. A rewrite of a stored point that
        // touches two partitions or more is recorded before its first step.
        let mut stale: Vec<Vec<PointId>> = vec![Vec::new(); w];
        let mut recorded = vec![false; points.len()];
        let mut moves = Vec::new();
        for (k, (point, &to)) in points.iter().zip(&targets).enumerate() {
            let mut moving = false;
            for &q in &held[k] {
                if !to.includes(q) {
                    stale[q as usize].push(point.id);
                    moving = true;
                }
            }
            let copies = match to {
                Assignment::One(_) => 1,
                Assignment::Two(..) => 2,
                Assignment::All => w,
            };
            if moving || (!held[k].is_empty() && copies > 1) {
                recorded[k] = true;
                moves.push(routing::Move::new(
                    point.id,
                    to,
                    std::mem::take(&mut held[k]),
                ));
            }
        }
        // A recorded point's home copy is written before any other (see `redo_moves`), so
        // those go in a first round; everything else in the second.
        let mut first: Vec<Vec<NewPoint>> = vec![Vec::new(); w];
        let mut second: Vec<Vec<NewPoint>> = vec![Vec::new(); w];
        for ((point, to), recorded) in points.into_iter().zip(targets).zip(recorded) {
            let home = to.home().unwrap_or(0) as usize;
            for q in (0..w).filter(|&q| q != home && to.includes(q as u32)) {
                second[q].push(point.clone());
            }
            if recorded {
                first[home].push(point);
            } else {
                second[home].push(point);
            }
        }
        if !moves.is_empty() {
            // Set first: a failed store may still have stored the record.
            writer.unfinished = true;
            routing::record_moves(&self.meta, &moves)?;
        }
        let mut waits = Vec::new();
        for round in [first, second] {
            for (q, batch) in round.into_iter().enumerate() {
                if !batch.is_empty() {
                    let seq = self.partitions[q].upsert(batch, writer.epoch)?;
                    waits.push((PartitionId(q), writer.wrote(q, seq)));
                }
            }
        }
        if stale.iter().any(|ids| !ids.is_empty()) {
            // A moved point must be searchable at its new home before it disappears from the
            // old one, or a query in between would miss it (a moment of two copies is
            // harmless: results drop duplicate ids).
            for &(q, seq) in &waits {
                self.partitions[q.0].wait_applied_blocking(seq)?;
            }
        }
        for (q, ids) in stale.into_iter().enumerate() {
            if ids.is_empty() {
                continue;
            }
            if let Some(seq) = self
                .committed(writer, q)?
                .delete_present(&ids, writer.epoch)?
            {
                waits.push((PartitionId(q), writer.wrote(q, seq)));
            }
        }
        if !moves.is_empty() {
            routing::clear_moves(&self.meta)?;
            writer.unfinished = false;
        }
        Ok(self.ticket(waits))
    }

    /// Finishes the rewrites a crash interrupted, leaving one version of each point (the write
    /// was not acknowledged, so either is right, but never both). The home copy is written
    /// first: if the home holds the point, that copy is placed again through the write path;
    /// if it does not, the rewrite wrote nothing, and copies outside the partitions that held
    /// the point before are removed.
    fn redo_moves(&self, writer: &mut Writer) -> Result<()> {
        let Some(moves) = routing::recorded_moves(&self.meta)? else {
            writer.unfinished = false;
            return Ok(());
        };
        let mut again = Vec::new();
        for m in &moves {
            let to = m.assignment();
            let home = to.home().unwrap_or(0) as usize;
            let Some(from) = m.from() else {
                // A record from before spilling: a point of one home or of every partition,
                // finished once its new copy landed.
                let landed = match to {
                    Assignment::All => true,
                    Assignment::One(_) | Assignment::Two(..) => {
                        self.committed(writer, home)?.holds(&[m.id])?[0]
                    }
                };
                if landed {
                    for q in (0..self.partitions.len()).filter(|&q| !to.includes(q as u32)) {
                        self.delete_stale(writer, q, m.id)?;
                    }
                }
                continue;
            };
            match self
                .committed(writer, home)?
                .stored(&[m.id])?
                .pop()
                .flatten()
            {
                Some(copy) => again.push(copy),
                None => {
                    for q in (0..self.partitions.len()).filter(|&q| !from.contains(&(q as u32))) {
                        self.delete_stale(writer, q, m.id)?;
                    }
                }
            }
        }
        let placed = again.len();
        if !again.is_empty() {
            let routing = self.routing();
            self.place_locked(writer, &routing, again)?;
        }
        routing::clear_moves(&self.meta)?;
        writer.unfinished = false;
        tracing::info!(
            collection = self.name,
            recorded = moves.len(),
            placed,
            "finished rewrites interrupted by a crash"
        );
        Ok(())
    }

    /// Removes `id` from partition `q` if it holds it (a stale copy).
    fn delete_stale(&self, writer: &mut Writer, q: usize, id: PointId) -> Result<()> {
        if let Some(seq) = self
            .committed(writer, q)?
            .delete_present(&[id], writer.epoch)?
        {
            writer.wrote(q, seq);
        }
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
