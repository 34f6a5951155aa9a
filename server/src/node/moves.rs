//! The partition leader's half of a move: it makes the group's membership match the placement
//! the metadata records (`placement.rs`).
//!
//! Every replica runs this loop; only the one leading its group acts, so the work moves with
//! leadership and a new leader carries on where an old one stopped. Each step is read from
//! the group's state and the placement, never remembered:
//!
//! 1. a placed replica that its node has opened and that is not a member joins as a learner;
//!    the leader streams it the log, or a snapshot when the log no longer reaches back;
//! 2. once every incoming replica holds nearly all of the log, the voters become the placed
//!    ones, through a joint configuration (a majority of the old voters and of the new agree
//!    at every step, so no acknowledged write depends on a replica that is leaving); a leader
//!    that removes itself steps down once the change commits;
//! 3. learners that are no longer placed are removed;
//! 4. the placement forgets its leaving replicas, and their nodes close them and delete their
//!    files (`host.rs`).

use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::{ReplicaAddr, ReplicaId, Role};
use tokio::task::JoinHandle;

use super::placement::ReplicaState;
use super::replica::PartitionReplica;
use super::Node;
use crate::error::Result;

/// How often a replica looks for work.
const EVERY: Duration = Duration::from_millis(300);

/// An incoming replica counts as caught up when it holds all but this many of the leader's
/// entries: under a steady write load it is always a few behind, and the joint configuration
/// waits for it to hold each entry it must acknowledge anyway.
const CATCH_UP_SLACK: u64 = 64;

/// Runs the loop for `replica`, partition `partition` of collection `collection`, until the
/// task is aborted (when the replica closes).
pub fn spawn(
    node: Arc<Node>,
    replica: Arc<PartitionReplica>,
    collection: String,
    partition: usize,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            if let Err(e) = step(&node, &replica, &collection, partition).await {
                tracing::info!(collection, partition, error = %e, "a membership change did not finish; retrying");
            }
        }
    })
}

/// One pass: at most one change to the group or the placement.
async fn step(
    node: &Node,
    replica: &PartitionReplica,
    collection: &str,
    partition: usize,
) -> Result<()> {
    let status = replica.status();
    if status.role != Role::Leader {
        return Ok(());
    }
    let Some(placement) = node.placement(collection, partition)? else {
        return Ok(());
    };
    let wanted = placement.voters();
    if wanted.is_empty() {
        return Ok(());
    }
    let is_member = |id: &ReplicaId| status.members.iter().any(|(m, _)| m == id);
    // 1. New replicas join as learners, once their node has opened them (before that, every
    //    message to them would be refused).
    for r in &placement.replicas {
        if r.state == ReplicaState::Live && !is_member(&r.id) {
            tracing::info!(
                collection,
                partition,
                replica = r.id,
                node = r.node,
                "a replica joins its group as a learner"
            );
            return replica
                .add_learner(r.id, ReplicaAddr { node: r.node })
                .await;
        }
    }
    // 2. Promote once the incoming replicas have caught up (and demote the leaving ones).
    let voters: std::collections::BTreeSet<ReplicaId> = status.voters.iter().copied().collect();
    if voters != wanted {
        let caught_up = wanted.difference(&voters).all(|id| {
            status
                .matched
                .get(id)
                .copied()
                .flatten()
                .is_some_and(|held| held + CATCH_UP_SLACK >= status.last_log)
        });
        if caught_up {
            tracing::info!(
                collection,
                partition,
                ?voters,
                ?wanted,
                "the group's voters change"
            );
            replica.change_voters(wanted).await?;
        }
        return Ok(());
    }
    // 3. Learners no longer placed (a replica lost before it was promoted) go.
    let stale: std::collections::BTreeSet<ReplicaId> = status
        .members
        .iter()
        .map(|(id, _)| *id)
        .filter(|id| !wanted.contains(id))
        .collect();
    if !stale.is_empty() {
        tracing::info!(collection, partition, ?stale, "learners leave the group");
        return replica.remove_learners(stale).await;
    }
    // 4. The group no longer counts the leaving replicas: the placement lets them go.
    if placement
        .replicas
        .iter()
        .any(|r| r.state == ReplicaState::Leaving)
    {
        node.edit_placement(
            collection,
            partition,
            &placement,
            &placement.without_leaving(),
        )
        .await?;
    }
    Ok(())
}
