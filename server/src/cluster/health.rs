//! The router's health prober: every `probe_interval` it asks each shard node's `/readyz`,
//! marks the replicas of unreachable nodes dead, and brings back the replicas of nodes that
//! answer again by replaying a live peer's op log into them (see `remote.rs` for the states).
//! A dead node is routed around from the first failed call, and at the latest one probe
//! interval after it stops answering.

use std::sync::Arc;
use std::thread::JoinHandle;

use cairn_api::internal::{OplogItem, PartitionCall, PartitionState};

use super::remote::{RemotePartition, ReplicaState};
use super::Cluster;
use crate::error::{Result, ServerError};

/// Op-log entries moved per catch-up call.
const CATCH_UP_BATCH: usize = 512;

/// Starts the prober; it ends once the cluster is dropped (it holds only a weak reference, so
/// it never keeps the cluster, nor its HTTP client, alive past shutdown).
pub fn spawn(cluster: &Arc<Cluster>) -> std::io::Result<JoinHandle<()>> {
    let weak = Arc::downgrade(cluster);
    let interval = cluster.probe_interval;
    std::thread::Builder::new()
        .name("health-prober".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            let Some(cluster) = weak.upgrade() else {
                return;
            };
            cluster.probe();
            for partition in cluster.open_partitions() {
                recover(&partition);
            }
        })
}

/// Marks replicas on dead nodes dead and catches up those whose node is back.
fn recover(partition: &RemotePartition) {
    for (i, replica) in partition.replicas.iter().enumerate() {
        if !replica.node.is_alive() {
            replica.set_state(ReplicaState::Dead, &partition.name);
            continue;
        }
        if replica.state() == ReplicaState::Active {
            continue;
        }
        if let Err(e) = catch_up(partition, i) {
            tracing::warn!(partition = %partition.name, node = %replica.node.url, error = %e,
                "replica catch-up failed; will retry");
            replica.set_state(ReplicaState::Dead, &partition.name);
        }
    }
}

/// Replays a live peer's op log into replica `i` until their sequence numbers agree, the
/// last step under the partition's write lock so no write slips in between.
fn catch_up(partition: &RemotePartition, i: usize) -> Result<()> {
    let name = &partition.name;
    partition.replicas[i].set_state(ReplicaState::Recovering, name);
    loop {
        let peer =
            partition.replicas.iter().enumerate().position(|(j, r)| {
                j != i && r.state() == ReplicaState::Active && r.node.is_alive()
            });
        let mine: PartitionState = partition.call_replica(i, &PartitionCall::State)?;
        partition.observe_seq(mine.last_seq);
        let Some(j) = peer else {
            // No live peer to learn from: this copy is the best there is.
            tracing::warn!(partition = %name, "no live peer; replica serves as it is");
            let _writes = partition.hold_writes();
            partition.replicas[i].set_state(ReplicaState::Active, name);
            return Ok(());
        };
        let theirs: PartitionState = partition.call_replica(j, &PartitionCall::State)?;
        if mine.last_seq > theirs.last_seq {
            return Err(ServerError::Internal(format!(
                "replica is ahead of its live peer ({} > {}); it needs an operator",
                mine.last_seq, theirs.last_seq
            )));
        }
        if mine.last_seq == theirs.last_seq {
            let done = {
                let _writes = partition.hold_writes();
                let mine: PartitionState = partition.call_replica(i, &PartitionCall::State)?;
                let theirs: PartitionState = partition.call_replica(j, &PartitionCall::State)?;
                let equal = mine.last_seq == theirs.last_seq;
                if equal {
                    partition.replicas[i].set_state(ReplicaState::Active, name);
                }
                equal
            };
            if done {
                tracing::info!(partition = %name, seq = mine.last_seq, "replica caught up");
                return Ok(());
            }
            continue;
        }
        let items: Vec<OplogItem> = partition.call_replica(
            j,
            &PartitionCall::OplogAfter {
                after: mine.last_seq,
                limit: CATCH_UP_BATCH,
            },
        )?;
        if items
            .first()
            .is_none_or(|item| item.seq != mine.last_seq + 1)
        {
            return Err(ServerError::Unavailable(format!(
                "the peer's op log no longer reaches back to {}; the replica needs a full copy",
                mine.last_seq + 1
            )));
        }
        let _: u64 = partition.call_replica(i, &PartitionCall::Apply { items })?;
    }
}
