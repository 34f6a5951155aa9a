//! The metadata group's membership follows the nodes the metadata records.
//!
//! A node joins by being recorded (`Node::admit`, through any member's internal API); the
//! metadata group's leader then adds it as a learner, so it receives every metadata entry and
//! serves the whole API. The voters stay the nodes the cluster started with (`cluster.peers`):
//! a learner votes only when it takes the place of a voter that is removed. A node being
//! removed leaves the group once the rebalancer has moved every replica off it
//! (`rebalance.rs`). Like a partition's moves, each pass reads the group and the metadata and
//! makes one change, on whichever node leads, so a new leader carries on.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::{ReplicaAddr, Role};

use super::Node;
use crate::error::Result;

/// How often the leader compares the group with the metadata.
const EVERY: Duration = Duration::from_millis(500);

/// A learner counts as caught up (to replace a voter) within this many entries of the leader.
const CATCH_UP_SLACK: u64 = 64;

/// Runs the loop until the process ends.
pub fn spawn(node: Arc<Node>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            if let Err(e) = step(&node).await {
                tracing::info!(error = %e, "a metadata membership change did not finish; retrying");
            }
        }
    });
}

/// One pass: at most one change to the metadata group.
async fn step(node: &Node) -> Result<()> {
    let status = node.meta.status();
    if status.role != Role::Leader {
        return Ok(());
    }
    let recorded = node.nodes()?;
    let removed = node.removed()?;
    let members: BTreeSet<u64> = status.members.iter().map(|(id, _)| *id).collect();
    let voters: BTreeSet<u64> = status.voters.iter().copied().collect();
    // 1. Recorded nodes join as learners.
    for (id, record) in &recorded {
        if !members.contains(id) && !removed.contains(id) && record.internal_uri.is_some() {
            tracing::info!(node = id, "a node joins the metadata group as a learner");
            return node
                .meta
                .add_learner(*id, ReplicaAddr { node: *id })
                .await
                .map_err(unavailable);
        }
    }
    // 2. Removed nodes that hold no replica any more leave.
    let mut placed = BTreeSet::new();
    for (_, record) in node.collections()?.values() {
        for placement in &record.placement {
            placed.extend(placement.nodes());
        }
    }
    for id in removed
        .iter()
        .filter(|id| members.contains(id) && !placed.contains(id))
    {
        if !voters.contains(id) {
            tracing::info!(node = id, "a removed node leaves the metadata group");
            return node
                .meta
                .remove_learners([*id].into_iter().collect())
                .await
                .map_err(unavailable);
        }
        // A voter: a caught-up learner takes its place, so the group keeps its size.
        let mut next = voters.clone();
        next.remove(id);
        let substitute = members.iter().find(|m| {
            !voters.contains(m)
                && !removed.contains(m)
                && status
                    .matched
                    .get(m)
                    .copied()
                    .flatten()
                    .is_some_and(|held| held + CATCH_UP_SLACK >= status.last_log)
        });
        if let Some(learner) = substitute {
            next.insert(*learner);
        }
        if next.is_empty() {
            continue;
        }
        tracing::info!(
            node = id,
            ?next,
            "a removed voter leaves the metadata group"
        );
        return node.meta.change_voters(next).await.map_err(unavailable);
    }
    Ok(())
}

fn unavailable(error: cairn_consensus::GroupError) -> crate::error::ServerError {
    crate::error::ServerError::Unavailable(error.to_string())
}
