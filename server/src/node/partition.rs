//! [`PartitionHandle`] for a partition whose replica lives on this node: reads from the local
//! replica, writes through the partition's group.
//!
//! Reads see what this replica has applied: a committed prefix of the partition's log, never a
//! write that could still be lost, though possibly not the latest acknowledged ones if this
//! replica trails the leader. `wait=true` waits until the write is applied *here*, so a client
//! reads its own writes through the node it wrote to. A read that must see more (a read
//! index, a write's token: `cairn_api::ReadConsistency`) waits for this replica to apply that
//! far, or goes to the partition's other replicas ([`PartitionHandle::at_least`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_api::internal::{NewPoint, PartitionState, PayloadSelection, ScrollPlan, SearchPlan};
use cairn_api::{
    Filter, PayloadIndexInfo, PayloadSchemaType, PointId, QueryResponse, Record, ReplicaInfo,
};
use cairn_consensus::Role;

use super::replica::PartitionReplica;
use crate::collection::{HandleFuture, PartitionHandle, PartitionHealth, ReadTrace};
use crate::error::{Result, ServerError};
use crate::partition::Partition;

/// A leader that no majority has acknowledged for this long has lost its quorum (twice the
/// partition groups' longest election timeout).
const NO_QUORUM_MS: u64 = 4_000;

/// How long a write may wait for its group (an election included) before its outcome is
/// reported unknown.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait for a write to become searchable here (the applier applies a batch in
/// milliseconds, or in the time of one vacuum).
const APPLY_WAIT: Duration = Duration::from_secs(60);

/// How long a linearizable read waits for the partition's leader to confirm a read index (an
/// election included) before it fails.
const READ_INDEX_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a read with a floor waits for this replica to apply that far before another
/// replica is asked. A follower learns of a commit with the leader's next message (at most a
/// heartbeat, 250 ms, later; a read index's own heartbeat round carries it at once).
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// How often a wait for the index looks whether the replica has closed meanwhile.
const CLOSED_CHECK: Duration = Duration::from_millis(50);

/// A partition replicated by its group, with a replica here.
pub struct ReplicatedPartition {
    replica: Arc<PartitionReplica>,
    /// Where reads go while the replica installs a snapshot (the partition's other replicas);
    /// `None` for the handle that serves other nodes' calls, which must not pass them on.
    elsewhere: Option<Arc<dyn PartitionHandle>>,
}

impl ReplicatedPartition {
    /// The handle of `replica`; reads go to `elsewhere` while it installs a snapshot.
    pub fn new(
        replica: Arc<PartitionReplica>,
        elsewhere: Option<Arc<dyn PartitionHandle>>,
    ) -> Self {
        Self { replica, elsewhere }
    }

    /// Where writes go once this replica has closed, if anywhere.
    fn closed_instead(&self) -> Option<&dyn PartitionHandle> {
        if self.replica.is_closed() {
            self.elsewhere.as_deref()
        } else {
            None
        }
    }

    /// The handle to read from instead of this replica, while it installs a snapshot or once
    /// it has closed (a call that started just before the replica was moved away).
    fn instead(&self) -> Result<Option<&dyn PartitionHandle>> {
        if !self.replica.installing() && !self.replica.is_closed() {
            return Ok(None);
        }
        match &self.elsewhere {
            Some(other) => Ok(Some(other.as_ref())),
            None => Err(ServerError::Unavailable(format!(
                "replica {} of {} is installing a snapshot or closed",
                self.replica.id(),
                self.partition().name()
            ))),
        }
    }

    fn partition(&self) -> &Partition {
        self.replica.partition()
    }

    /// Runs an async write from the blocking thread the collection calls on.
    fn block_on<T>(&self, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        tokio::runtime::Handle::current().block_on(work)
    }
}

impl PartitionHandle for ReplicatedPartition {
    fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<u64> {
        if let Some(other) = self.closed_instead() {
            return other.set_payload_index(key, kind);
        }
        let attempt = self.block_on(self.replica.set_payload_index(key, kind, WRITE_TIMEOUT));
        match self.closed_instead() {
            // Closed under the change (moved away): the edit is idempotent, so the
            // partition's other replicas take it.
            Some(other) if attempt.is_err() => other.set_payload_index(key, kind),
            _ => attempt,
        }
    }

    fn payload_indexes(&self) -> Result<BTreeMap<String, PayloadIndexInfo>> {
        if let Some(other) = self.instead()? {
            return other.payload_indexes();
        }
        Ok(self.partition().payload_indexes())
    }

    fn payload_index_type(&self, key: &str) -> Result<Option<PayloadSchemaType>> {
        if let Some(other) = self.instead()? {
            return other.payload_index_type(key);
        }
        Ok(self.partition().payload_index_type(key))
    }

    fn facet(
        &self,
        key: &str,
        filter: Option<&Filter>,
    ) -> Result<Vec<(serde_json::Value, Vec<PointId>)>> {
        if let Some(other) = self.instead()? {
            return other.facet(key, filter);
        }
        self.partition().facet_blocking(key, filter)
    }

    fn upsert(&self, points: Vec<NewPoint>, fence: u64) -> Result<u64> {
        if let Some(other) = self.closed_instead() {
            return other.upsert(points, fence);
        }
        let attempt = self.block_on(self.replica.upsert(&points, fence, WRITE_TIMEOUT));
        match self.closed_instead() {
            // The replica closed under the write (moved away): upserts are idempotent, so the
            // partition's other replicas take it.
            Some(other) if attempt.is_err() => other.upsert(points, fence),
            _ => attempt,
        }
    }

    fn delete(&self, ids: Vec<PointId>, fence: u64) -> Result<u64> {
        if let Some(other) = self.closed_instead() {
            return other.delete(ids, fence);
        }
        let attempt = self.block_on(self.replica.delete(&ids, fence, WRITE_TIMEOUT));
        match self.closed_instead() {
            Some(other) if attempt.is_err() => other.delete(ids, fence),
            _ => attempt,
        }
    }

    fn delete_present(&self, ids: &[PointId], fence: u64) -> Result<Option<u64>> {
        // Judged on this replica's state; the delete itself is decided by the log, and a
        // delete of an absent point is harmless.
        let held = self.partition().holds(ids)?;
        let present: Vec<PointId> = ids
            .iter()
            .zip(held)
            .filter_map(|(id, held)| held.then_some(*id))
            .collect();
        if present.is_empty() {
            return Ok(None);
        }
        self.delete(present, fence).map(Some)
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        if let Some(other) = self.instead()? {
            return other.holds(ids);
        }
        self.partition().holds(ids)
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        if let Some(other) = self.instead()? {
            return other.stored(ids);
        }
        self.partition().stored(ids)
    }

    fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>> {
        if let Some(other) = self.instead()? {
            return other.stored_versions(ids);
        }
        self.partition().stored_versions(ids)
    }

    fn upsert_if(&self, points: Vec<NewPoint>, expect: Vec<(PointId, u64)>) -> Result<Option<u64>> {
        if let Some(other) = self.closed_instead() {
            return other.upsert_if(points, expect);
        }
        let attempt = self.block_on(self.replica.upsert_if(&points, &expect, WRITE_TIMEOUT));
        match self.closed_instead() {
            // Closed under the write (moved away): the change is idempotent (see the trait),
            // so the partition's other replicas take it.
            Some(other) if attempt.is_err() => other.upsert_if(points, expect),
            _ => attempt,
        }
    }

    fn stored_ids(&self) -> Result<Vec<PointId>> {
        if let Some(other) = self.instead()? {
            return other.stored_ids();
        }
        self.partition().stored_ids()
    }

    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        if let Some(other) = self.instead()? {
            return other.sample(n, seed);
        }
        self.partition().sample(n, seed)
    }

    fn last_seq(&self) -> u64 {
        self.partition().last_seq()
    }

    /// Waits until `seq` is searchable here, or until the replica closes (moved away: a
    /// group that stopped applies nothing more, and the write is the other replicas' now).
    fn wait_applied_blocking(&self, seq: u64) -> Result<()> {
        let deadline = std::time::Instant::now() + APPLY_WAIT;
        while self.partition().applied_seq() < seq && !self.replica.is_closed() {
            if std::time::Instant::now() > deadline {
                return Err(ServerError::Unavailable(format!(
                    "{}: the index did not reach op {seq} in a minute",
                    self.partition().name()
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Ok(())
    }

    fn wait_applied(&self, seq: u64) -> HandleFuture<'_, ()> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + APPLY_WAIT;
            loop {
                if self.replica.is_closed() {
                    return Ok(());
                }
                let step = tokio::time::timeout(CLOSED_CHECK, self.partition().wait_applied(seq));
                if let Ok(done) = step.await {
                    return done;
                }
                if tokio::time::Instant::now() > deadline {
                    return Err(ServerError::Unavailable(format!(
                        "{}: the index did not reach op {seq} in a minute",
                        self.partition().name()
                    )));
                }
            }
        })
    }

    fn state(&self) -> Result<PartitionState> {
        if let Some(other) = self.instead()? {
            return other.state();
        }
        Ok(self.partition().state())
    }

    fn points(&self) -> usize {
        self.partition().points()
    }

    /// From the group's leader through this replica's group; if that fails within a second
    /// (this node cut off from the leader, say), through the partition's other replicas'
    /// nodes, which ask the leader themselves.
    fn read_index(&self) -> Result<u64> {
        let Some(other) = &self.elsewhere else {
            return self.block_on(self.replica.read_index(READ_INDEX_TIMEOUT));
        };
        match self.block_on(self.replica.read_index(CATCH_UP_WAIT)) {
            Ok(index) => Ok(index),
            Err(error) => {
                tracing::debug!(partition = self.partition().name(), %error, "read index through another replica");
                other.read_index()
            }
        }
    }

    /// This replica once it has applied `floor`; the partition's other replicas if it is
    /// installing a snapshot, closed, or still behind after [`CATCH_UP_WAIT`].
    fn at_least(self: Arc<Self>, floor: u64) -> Result<Arc<dyn PartitionHandle>> {
        if floor == 0 {
            return Ok(self);
        }
        let behind = if self.replica.installing() || self.replica.is_closed() {
            Err(ServerError::Unavailable(format!(
                "replica {} of {} is installing a snapshot or closed",
                self.replica.id(),
                self.partition().name()
            )))
        } else {
            self.block_on(self.replica.catch_up(floor, CATCH_UP_WAIT))
        };
        match (behind, &self.elsewhere) {
            // Reads that this replica hands on after all (it closes, or starts installing a
            // snapshot) keep the floor.
            (Ok(()), Some(other)) => Ok(Arc::new(ReplicatedPartition::new(
                self.replica.clone(),
                Some(other.clone().at_least(floor)?),
            ))),
            (Ok(()), None) => Ok(self),
            (Err(_), Some(other)) => other.clone().at_least(floor),
            (Err(error), None) => Err(error),
        }
    }

    fn search(&self, plan: &SearchPlan, hedge: bool) -> Result<(QueryResponse, Option<ReadTrace>)> {
        if let Some(other) = self.instead()? {
            return other.search(plan, hedge);
        }
        Ok((self.partition().query_blocking(plan)?, None))
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        if let Some(other) = self.instead()? {
            return other.scroll(plan);
        }
        self.partition().scroll_blocking(plan)
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        if let Some(other) = self.instead()? {
            return other.count(filter);
        }
        Ok(self.partition().count_blocking(filter))
    }

    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        if let Some(other) = self.instead()? {
            return other.matching_ids(filter);
        }
        Ok(self.partition().matching_ids(filter))
    }

    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        if let Some(other) = self.instead()? {
            return other.get_points(ids, with_payload, with_vector);
        }
        Ok(self.partition().get_points(ids, with_payload, with_vector))
    }

    fn local(&self) -> Option<&Partition> {
        Some(self.partition())
    }

    fn is_short(&self, plan: &SearchPlan) -> bool {
        !self.replica.installing() && self.partition().is_short(plan)
    }

    /// As this node sees the group: no leader (or a leader cut off from its majority) is
    /// red; a leader with a voter that does not hold every committed entry is yellow (for a
    /// moment after each write, and for as long as a voter is away while writes go on). A
    /// follower sees only whether there is a leader; a leader does not see a voter that is
    /// away while no write is made (openraft 0.9 reports no per-replica heartbeat times).
    fn health(&self) -> PartitionHealth {
        let status = self.replica.status();
        if status.leader.is_none() || status.role == Role::Shutdown {
            return PartitionHealth::Unavailable;
        }
        if status.role != Role::Leader {
            return PartitionHealth::Healthy;
        }
        if status.quorum_ack_ms.is_none_or(|ms| ms > NO_QUORUM_MS) {
            return PartitionHealth::Unavailable;
        }
        let behind = status.voters.iter().any(|voter| {
            status
                .matched
                .get(voter)
                .copied()
                .flatten()
                .is_none_or(|held| held < status.applied)
        });
        if behind {
            PartitionHealth::UnderReplicated
        } else {
            PartitionHealth::Healthy
        }
    }

    fn replica_info(&self) -> Option<Vec<ReplicaInfo>> {
        let status = self.replica.status();
        let here = self.replica.id();
        let counters = self.partition().state();
        Some(
            status
                .members
                .iter()
                .map(|(id, addr)| {
                    let role = if status.leader == Some(*id) {
                        "Leader"
                    } else if *id == here {
                        status.role.name()
                    } else if status.voters.contains(id) {
                        "Follower"
                    } else {
                        "Learner"
                    };
                    let mine = *id == here;
                    let held = status.matched.get(id).copied().flatten();
                    // Only the leader knows how far the others are.
                    let state = if mine {
                        "active"
                    } else if status.role != Role::Leader {
                        "unknown"
                    } else if held.is_some_and(|h| h >= status.applied) {
                        "active"
                    } else {
                        "lagging"
                    };
                    ReplicaInfo {
                        node: format!("node {}", addr.node),
                        state: state.to_owned(),
                        peer_id: Some(addr.node),
                        last_seq: mine.then_some(counters.last_seq),
                        points: mine.then_some(counters.points),
                        replica_id: Some(*id),
                        role: Some(role.to_owned()),
                        term: Some(status.term),
                        applied: if mine { Some(status.applied) } else { held },
                        purged: mine.then_some(status.purged),
                    }
                })
                .collect(),
        )
    }

    fn close(&self) {
        let replica = self.replica.clone();
        // Called from blocking threads (catalog shutdown and delete).
        tokio::runtime::Handle::current().block_on(replica.close());
    }
}
