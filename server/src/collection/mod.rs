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

use crate::config::StorageConfig;
use crate::error::Result;
use crate::partition::{CollectionSettings, LoadReport, NewPoint, Partition, SlotStats};
use routing::Routing;

/// Folder of partition `i` inside a collection folder.
pub fn partition_dir(collection_dir: &Path, i: usize) -> PathBuf {
    collection_dir.join("partitions").join(i.to_string())
}

/// One collection; see the module docs.
pub struct Collection {
    name: String,
    settings: CollectionSettings,
    partitions: Vec<Arc<Partition>>,
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
        let first = Partition::open(name, &partition_dir(dir, 0), storage)?;
        let settings = first.settings().clone();
        let w = settings.partitions();
        let mut partitions = vec![Arc::new(first)];
        for i in 1..w {
            let label = format!("{name}/p{i}");
            partitions.push(Arc::new(Partition::open(
                &label,
                &partition_dir(dir, i),
                storage,
            )?));
        }
        let routing = Routing::load(&partitions[0], &settings)?;
        let collection = Arc::new(Self {
            name: name.to_owned(),
            settings,
            partitions,
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

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its settings.
    pub fn settings(&self) -> &CollectionSettings {
        &self.settings
    }

    /// Its partitions, in order.
    pub fn partitions(&self) -> &[Arc<Partition>] {
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
        })
    }

    /// How the partitions were loaded, summed (the slowest partition's time).
    pub fn load_report(&self) -> LoadReport {
        let mut total = self.partitions[0].load_report().clone();
        for p in &self.partitions[1..] {
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

    /// Index slots over all partitions.
    pub fn slot_stats(&self) -> SlotStats {
        self.partitions
            .iter()
            .map(|p| p.slot_stats())
            .fold(SlotStats::default(), |a, b| SlotStats {
                index_slots: a.index_slots + b.index_slots,
                dead_slots: a.dead_slots + b.dead_slots,
            })
    }

    /// Bytes the partitions' indexes hold.
    pub fn index_memory_bytes(&self) -> usize {
        self.partitions.iter().map(|p| p.index_memory_bytes()).sum()
    }

    /// Sum of the partitions' applied sequence numbers (comparable with `operation_id`).
    pub fn applied_seq(&self) -> u64 {
        self.partitions.iter().map(|p| p.applied_seq()).sum()
    }

    /// Commits points durably (blocking).
    pub fn upsert_blocking(&self, points: Vec<NewPoint>) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            return only.upsert_blocking(points).map(WriteTicket::single);
        }
        let _writes = self.writes.lock();
        let routing = self.routing();
        self.place_locked(&routing, points)
    }

    /// Commits a delete durably (blocking).
    pub fn delete_blocking(&self, ids: Vec<PointId>) -> Result<WriteTicket> {
        if let [only] = self.partitions.as_slice() {
            return only.delete_blocking(ids).map(WriteTicket::single);
        }
        let _writes = self.writes.lock();
        let mut waits = Vec::new();
        for (q, partition) in self.partitions.iter().enumerate() {
            if let Some(seq) = partition.delete_present_blocking(&ids)? {
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
        let mut per_partition: Vec<Vec<NewPoint>> = vec![Vec::new(); w];
        let mut stale: Vec<Vec<PointId>> = vec![Vec::new(); w];
        let mut moves: Vec<routing::Move> = Vec::new();
        for (i, point) in points.into_iter().enumerate() {
            if last.get(&point.id) != Some(&i) {
                continue;
            }
            let to = routing.assign(&point.vector)?;
            let mut moved = false;
            for (q, partition) in self.partitions.iter().enumerate() {
                if !routing::includes(to, q) && partition.holds(&point.id)? {
                    stale[q].push(point.id);
                    moved = true;
                }
            }
            if moved {
                moves.push(routing::Move::new(point.id, to));
            }
            match to {
                Assignment::One(t) => per_partition[t as usize].push(point),
                Assignment::All => {
                    for list in &mut per_partition {
                        list.push(point.clone());
                    }
                }
            }
        }
        let first = &self.partitions[0];
        if !moves.is_empty() {
            routing::record_moves(first, &moves)?;
        }
        let mut waits = Vec::new();
        for (q, batch) in per_partition.into_iter().enumerate() {
            if !batch.is_empty() {
                waits.push((q, self.partitions[q].upsert_blocking(batch)?));
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
            if let Some(seq) = self.partitions[q].delete_present_blocking(&ids)? {
                waits.push((q, seq));
            }
        }
        if !moves.is_empty() {
            routing::clear_moves(first)?;
        }
        Ok(self.ticket(waits))
    }

    /// Finishes the moves a crash interrupted: where the new copy landed, the old copies go;
    /// where it did not, the write was never acknowledged and the old copy stays.
    fn redo_moves(&self) -> Result<()> {
        let first = &self.partitions[0];
        let Some(moves) = routing::recorded_moves(first)? else {
            return Ok(());
        };
        let mut finished = 0usize;
        for m in &moves {
            let to = m.assignment();
            let landed = match to {
                Assignment::One(t) => self.partitions[t as usize].holds(&m.id)?,
                Assignment::All => true,
            };
            if !landed {
                continue;
            }
            for (q, partition) in self.partitions.iter().enumerate() {
                if !routing::includes(to, q) {
                    partition.delete_present_blocking(&[m.id])?;
                }
            }
            finished += 1;
        }
        routing::clear_moves(first)?;
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
