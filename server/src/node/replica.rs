//! One replica of a partition on this node: the partition (store, index, applier) and the
//! Raft group that feeds it.
//!
//! The group's state machine writes the replica's store; the partition reads that store and
//! keeps its index in step through [`Feed`], which hands every applied entry to the
//! partition's applier, as a local write's batch would be once synced. Writes go through the
//! group's leader (`Group::propose`), so a write is acknowledged once a majority of the
//! replicas hold it, and its sequence number is its log index, the same on every replica.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cairn_api::internal::NewPoint;
use cairn_api::{PayloadSchemaType, PointId};
use cairn_consensus::{
    Group, GroupId, GroupStatus, Groups, LogPolicy, Observer, PartitionCommand, PointRow,
    ReadError, ReplicaAddr, ReplicaId, Row, Timing, Transport, WriteError,
};
use cairn_index::Trainers;
use cairn_storage::{PartitionStore, StoreOptions};

use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::partition::{keys, paths, payload_index, ApplyOp, Partition};
use crate::request::CollectionSettings;

/// Hands the group's applied entries to the partition (see the module docs).
struct Feed {
    partition: Arc<Partition>,
    /// Set while a snapshot replaces the replica's state (see [`PartitionReplica::installing`]).
    installing: Arc<AtomicBool>,
}

impl Observer for Feed {
    fn applied(&self, index: u64, command: &PartitionCommand) {
        let op = match command.unfenced() {
            PartitionCommand::Upsert(rows) | PartitionCommand::UpsertIf { rows, .. } => {
                ApplyOp::Upsert(rows.iter().filter_map(|row| self.point(row)).collect())
            }
            PartitionCommand::UpsertPoints(points)
            | PartitionCommand::UpsertPointsIf { points, .. } => ApplyOp::Upsert(
                points
                    .iter()
                    .filter_map(|p| {
                        let mut point = self.point(&p.row)?;
                        point.sparse = keys::sparse_from_stored(p.sparse.clone());
                        point.extra = keys::extra_from_stored(p.extra.clone());
                        Some(point)
                    })
                    .collect(),
            ),
            PartitionCommand::Delete(keys) => {
                ApplyOp::Delete(keys.iter().filter_map(|key| keys::decode(key)).collect())
            }
            // The state machine stored the edited schema with the entry; the index follows.
            PartitionCommand::EditMetaMap { name, key, value }
                if name == payload_index::SCHEMA_KEY =>
            {
                let kind = value
                    .as_ref()
                    .map(|v| serde_json::from_value(serde_json::Value::String(v.clone())));
                match kind.transpose() {
                    Ok(kind) => ApplyOp::PayloadIndex {
                        key: key.clone(),
                        kind,
                    },
                    Err(e) => {
                        // Still a position the index must pass, as an empty write.
                        tracing::error!(partition = self.partition.name(), index, error = %e, "a payload index entry names no index type");
                        ApplyOp::Upsert(Vec::new())
                    }
                }
            }
            // No other map is kept; `unfenced` unwraps every fence.
            PartitionCommand::EditMetaMap { .. } | PartitionCommand::Fenced { .. } => return,
        };
        if let Err(e) = self.partition.apply_committed(index, op) {
            // The entry is in the store; the index catches up from it on the next load.
            tracing::error!(partition = self.partition.name(), index, error = %e, "an applied entry did not reach the index");
        }
    }

    fn before_replace(&self) {
        self.installing.store(true, Ordering::Release);
        self.partition.pause();
    }

    fn state_replaced(&self, _dir: &Path) -> std::io::Result<()> {
        self.partition.reload().map_err(std::io::Error::other)?;
        // Only once the index matches the new state (a failed reload leaves reads refused).
        self.installing.store(false, Ordering::Release);
        Ok(())
    }
}

impl Feed {
    fn point(&self, row: &Row) -> Option<NewPoint> {
        let parsed = keys::decode(&row.key).zip(keys::parse_payload(row.payload.clone()).ok());
        if parsed.is_none() {
            tracing::error!(
                partition = self.partition.name(),
                "an entry holds a point that does not decode"
            );
        }
        let (id, payload) = parsed?;
        Some(NewPoint {
            id,
            vector: row.vector.clone(),
            payload,
            // An `Upsert` entry carries the main vector only; `UpsertPoints` adds the rest.
            sparse: Default::default(),
            extra: Default::default(),
        })
    }
}

fn unavailable(error: ReadError) -> ServerError {
    ServerError::Unavailable(error.to_string())
}

/// A write the group did not make, or may have made without saying so.
fn write_error(error: WriteError) -> ServerError {
    match error {
        error @ WriteError::UnderReplicated { .. } => {
            ServerError::UnderReplicated(error.to_string())
        }
        error @ (WriteError::Indeterminate { .. } | WriteError::Failed { .. }) => {
            ServerError::Unavailable(error.to_string())
        }
    }
}

/// Points as a log entry holds them: every vector, the payload as JSON text. Copied (the
/// caller keeps the points, to send them to another replica if this one closes under the
/// write).
fn point_rows(points: &[NewPoint]) -> Vec<PointRow> {
    points
        .iter()
        .map(|p| PointRow {
            row: Row {
                key: keys::encode(&p.id),
                vector: p.vector.clone(),
                payload: p
                    .payload
                    .as_ref()
                    .map(|m| serde_json::Value::Object(m.clone()).to_string()),
            },
            sparse: keys::sparse_to_stored(&p.sparse),
            extra: keys::extra_to_stored(&p.extra),
        })
        .collect()
}

/// A partition replica on this node and its group.
pub struct PartitionReplica {
    id: ReplicaId,
    partition: Arc<Partition>,
    installing: Arc<AtomicBool>,
    /// Set when the replica closes (removed from this node, or the collection deleted).
    closed: AtomicBool,
    group: Group,
    groups: Arc<Groups>,
    /// Voting replicas that must hold a write before it is acknowledged (the collection's
    /// `write_consistency_factor`; up to a majority, Raft's commit).
    acks: usize,
}

impl PartitionReplica {
    /// Opens (or creates) replica `replica` of partition group `id` in `dir`, labelled `name`,
    /// and joins its group over `transport`; peers' messages reach it through `groups`.
    #[allow(clippy::too_many_arguments)]
    pub async fn open<T: Transport>(
        id: GroupId,
        replica: ReplicaId,
        log: LogPolicy,
        name: &str,
        dir: &Path,
        settings: CollectionSettings,
        storage: StorageConfig,
        trainers: &Trainers,
        transport: Arc<T>,
        groups: Arc<Groups>,
    ) -> Result<Self> {
        let acks = settings.write_consistency_factor;
        let options = StoreOptions {
            sync_writes: storage.sync_writes,
            replicated: true,
        };
        let store = Arc::new(PartitionStore::open(&paths::db(dir), options)?);
        let (name_owned, dir_owned, trainers_owned, store_for_partition) = (
            name.to_owned(),
            dir.to_path_buf(),
            trainers.clone(),
            store.clone(),
        );
        // Loading the index is blocking work.
        let partition = tokio::task::spawn_blocking(move || {
            Partition::open_replica(
                &name_owned,
                &dir_owned,
                storage,
                &trainers_owned,
                store_for_partition,
                settings,
            )
        })
        .await
        .map_err(|e| ServerError::Internal(format!("opening a replica: {e}")))??;
        let partition = Arc::new(partition);
        let installing = Arc::new(AtomicBool::new(false));
        let feed = Feed {
            partition: partition.clone(),
            installing: installing.clone(),
        };
        let group = Group::open(
            id,
            replica,
            Timing::PARTITION,
            log,
            dir,
            store,
            feed,
            transport,
            &groups,
        )
        .await
        .map_err(|e| ServerError::Internal(e.to_string()))?;
        Ok(Self {
            id: replica,
            partition,
            installing,
            closed: AtomicBool::new(false),
            group,
            groups,
            acks,
        })
    }

    /// Creates the group with `voters` as its replicas (on one replica only, once).
    pub async fn initialize(&self, voters: BTreeMap<ReplicaId, ReplicaAddr>) -> Result<()> {
        if self
            .group
            .is_initialized()
            .await
            .map_err(|e| ServerError::Internal(e.to_string()))?
        {
            return Ok(());
        }
        self.group
            .initialize(voters)
            .await
            .map_err(|e| ServerError::Internal(e.to_string()))
    }

    /// On the leader: starts replicating to a new member, which does not vote yet.
    pub async fn add_learner(&self, replica: ReplicaId, addr: ReplicaAddr) -> Result<()> {
        self.group
            .add_learner(replica, addr)
            .await
            .map_err(|e| ServerError::Unavailable(e.to_string()))
    }

    /// On the leader: makes `voters` the voting members; members left out are removed.
    pub async fn change_voters(&self, voters: BTreeSet<ReplicaId>) -> Result<()> {
        self.group
            .change_voters(voters)
            .await
            .map_err(|e| ServerError::Unavailable(e.to_string()))
    }

    /// On the leader: removes learners no longer wanted.
    pub async fn remove_learners(&self, learners: BTreeSet<ReplicaId>) -> Result<()> {
        self.group
            .remove_learners(learners)
            .await
            .map_err(|e| ServerError::Unavailable(e.to_string()))
    }

    /// This replica's id in its group.
    pub fn id(&self) -> ReplicaId {
        self.id
    }

    /// Whether a snapshot is replacing this replica's state: its store is cleared and filled
    /// again, then its index rebuilt, and reads in between would miss acknowledged points.
    pub fn installing(&self) -> bool {
        self.installing.load(Ordering::Acquire)
    }

    /// The partition this replica serves reads from.
    pub fn partition(&self) -> &Arc<Partition> {
        &self.partition
    }

    /// This replica's view of its group.
    pub fn status(&self) -> GroupStatus {
        self.group.status()
    }

    /// Writes points through the group's leader, under writer epoch `fence` (0: none; see
    /// [`PartitionCommand::Fenced`]); returns the write's log index once a majority holds it.
    pub async fn upsert(&self, points: &[NewPoint], fence: u64, within: Duration) -> Result<u64> {
        self.write(
            PartitionCommand::UpsertPoints(point_rows(points)).fenced(fence),
            within,
        )
        .await
    }

    /// Writes points through the group's leader only if every id of `expect` is at its
    /// version when the entry is applied ([`PartitionCommand::UpsertPointsIf`]); `None` when
    /// another write came between. Unfenced: the partitions written this way are those
    /// without a collection writer.
    pub async fn upsert_if(
        &self,
        points: &[NewPoint],
        expect: &[(PointId, u64)],
        within: Duration,
    ) -> Result<Option<u64>> {
        let command = PartitionCommand::UpsertPointsIf {
            expect: expect
                .iter()
                .map(|(id, version)| (keys::encode(id), *version))
                .collect(),
            points: point_rows(points),
        };
        match self.group.propose_held_by(command, within, self.acks).await {
            Ok(applied) => Ok(applied.held.then_some(applied.index)),
            Err(error) => Err(write_error(error)),
        }
    }

    /// Deletes points through the group's leader, under writer epoch `fence`; returns the
    /// write's log index.
    pub async fn delete(&self, ids: &[PointId], fence: u64, within: Duration) -> Result<u64> {
        let keys = ids.iter().map(keys::encode).collect();
        self.write(PartitionCommand::Delete(keys).fenced(fence), within)
            .await
    }

    /// Indexes payload `key` as `kind` (`None`: drops its index) on every replica, at one
    /// place in the group's log; returns the entry's log index. Not fenced: a schema edit
    /// changes no point, so a writer's turn does not order it.
    pub async fn set_payload_index(
        &self,
        key: &str,
        kind: Option<PayloadSchemaType>,
        within: Duration,
    ) -> Result<u64> {
        let edit = PartitionCommand::EditMetaMap {
            name: payload_index::SCHEMA_KEY.to_owned(),
            key: key.to_owned(),
            value: kind.map(|k| k.name().to_owned()),
        };
        self.write(edit, within).await
    }

    async fn write(&self, command: PartitionCommand, within: Duration) -> Result<u64> {
        match self.group.propose_held_by(command, within, self.acks).await {
            Ok(applied) if applied.held => Ok(applied.index),
            Ok(applied) => Err(ServerError::Unavailable(format!(
                "{}: the write was fenced at log position {} (a newer writer of the collection \
                 took over; retry)",
                self.partition.name(),
                applied.index
            ))),
            Err(error) => Err(write_error(error)),
        }
    }

    /// The position a linearizable read must see applied, confirmed by the group's leader
    /// (here or on its node) with a quorum heartbeat.
    pub async fn read_index(&self, within: Duration) -> Result<u64> {
        self.group.read_index(within).await.map_err(unavailable)
    }

    /// Waits until this replica's index holds every write up to log position `floor`: the
    /// group has applied that far (blank and membership entries count), and the index has
    /// applied every write the store then held. Gives up after `within`.
    pub async fn catch_up(&self, floor: u64, within: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + within;
        self.group
            .wait_applied(floor, within)
            .await
            .map_err(unavailable)?;
        let written = self.partition.last_seq();
        tokio::time::timeout_at(deadline, self.partition.wait_applied(written))
            .await
            .map_err(|_| {
                ServerError::Unavailable(format!(
                    "{}: the index did not reach position {written} within {} ms",
                    self.partition.name(),
                    within.as_millis()
                ))
            })?
    }

    /// Whether the replica has closed (its group stopped): work that reaches it now belongs
    /// with the partition's other replicas.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Stops the group, then the partition's applier.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.group.shutdown(&self.groups).await;
        let partition = self.partition.clone();
        let _ = tokio::task::spawn_blocking(move || partition.close()).await;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use cairn_consensus::{Addressee, Rpc, TransportError};

    use super::*;
    use crate::config::Limits;

    /// A transport for a group of one: there is no one to call.
    struct Alone;

    impl Transport for Alone {
        async fn call(
            &self,
            to: Addressee,
            _rpc: Rpc,
            _body: Vec<u8>,
            _timeout: Duration,
        ) -> std::result::Result<Vec<u8>, TransportError> {
            Err(TransportError::Unreachable {
                node: to.node,
                reason: "a group of one".into(),
            })
        }
    }

    const GROUP: GroupId = GroupId::Partition {
        collection: 1,
        partition: 0,
    };

    fn settings() -> CollectionSettings {
        let request = serde_json::from_value(serde_json::json!({
            "vectors": {"size": 4, "distance": "Euclid"}
        }))
        .unwrap();
        let limits = Limits {
            max_limit: 10_000,
            max_ef: 10_000,
            max_points_per_request: 10_000,
            max_batch_queries: 1_000,
            max_batch_results: 100_000,
            max_filter_depth: 16,
            max_dim: 65_536,
        };
        CollectionSettings::from_request(&request, &limits).unwrap()
    }

    fn storage() -> StorageConfig {
        StorageConfig {
            sync_writes: true,
            snapshot_every_ops: 2_000,
            snapshot_every_secs: 30,
            oplog_retention_ops: 100_000,
            vacuum_dead_ratio: 0.2,
            vacuum_min_dead: 1_000,
        }
    }

    async fn open(dir: &Path) -> PartitionReplica {
        let replica = PartitionReplica::open(
            GROUP,
            1,
            LogPolicy::default(),
            "c",
            dir,
            settings(),
            storage(),
            &cairn_faiss::trainers(),
            Arc::new(Alone),
            Arc::new(Groups::default()),
        )
        .await
        .unwrap();
        replica
            .initialize([(1, ReplicaAddr { node: 1 })].into_iter().collect())
            .await
            .unwrap();
        replica
    }

    fn point(i: u64) -> NewPoint {
        NewPoint {
            id: PointId::Num(i),
            vector: vec![i as f32, 1.0, 2.0, 3.0],
            payload: None,
            sparse: Default::default(),
            extra: Default::default(),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_through_the_group_reach_the_index_and_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let replica = open(dir.path()).await;
        let within = Duration::from_secs(10);
        let mut last = 0;
        for i in 0..20 {
            last = replica.upsert(&[point(i)], 0, within).await.unwrap();
        }
        last = last.max(
            replica
                .delete(&[PointId::Num(3), PointId::Num(4)], 0, within)
                .await
                .unwrap(),
        );
        replica.partition().wait_applied(last).await.unwrap();
        assert_eq!(replica.partition().points(), 18);
        assert_eq!(replica.partition().last_seq(), last);
        // The group publishes its metrics a moment after the write returns.
        let started = std::time::Instant::now();
        while replica.status().applied != last {
            assert!(
                started.elapsed() < Duration::from_secs(5),
                "{:?}",
                replica.status()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        replica.close().await;
        drop(replica);

        let replica = open(dir.path()).await;
        replica.partition().wait_applied(last).await.unwrap();
        assert_eq!(replica.partition().points(), 18);
        let stored = replica
            .partition()
            .stored(&[PointId::Num(3), PointId::Num(7)])
            .unwrap();
        assert!(stored[0].is_none());
        assert_eq!(stored[1].as_ref().unwrap().vector, point(7).vector);
        replica.close().await;
    }
}
