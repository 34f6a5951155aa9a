//! The rebalancer: replicas leave nodes being removed, and spread over the nodes when one
//! joins.
//!
//! It runs on the metadata group's leader (one at a time, whichever node leads) and acts only
//! through placement edits (`Node::plan`), which are compare-and-set and one move per partition
//! at a time, so two nodes that both believe they lead for a moment cannot undo each other's
//! work. Each pass makes at most one edit, with at most [`MAX_MOVES`] moves under way in the
//! cluster, so a join or a removal moves data gradually under load:
//!
//! 1. a replica on a node being removed moves to the node with the fewest replicas that does
//!    not hold one of that partition;
//! 2. otherwise, while one node holds at least two replicas more than another, a replica moves
//!    from the fullest node to the emptiest (a partition the emptiest does not hold).
//!
//! Load is counted in replicas, all partitions alike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::Role;

use super::placement::{Move, ReplicaState};
use super::Node;
use crate::error::Result;

/// How often the leader looks for work.
const EVERY: Duration = Duration::from_secs(1);

/// Moves under way in the whole cluster at most (each streams a partition's state).
const MAX_MOVES: usize = 2;

/// Runs the loop until the process ends.
pub fn spawn(node: Arc<Node>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(EVERY).await;
            if let Err(e) = step(&node).await {
                tracing::info!(error = %e, "the rebalancer could not plan a move; retrying");
            }
        }
    });
}

/// One pass: at most one placement edit.
async fn step(node: &Node) -> Result<()> {
    let status = node.meta.status();
    if status.role != Role::Leader {
        return Ok(());
    }
    let members: BTreeSet<u64> = status.members.iter().map(|(id, _)| *id).collect();
    let removed = node.removed()?;
    // Nodes that take replicas: recorded, members (so they follow the metadata), not leaving.
    let mut load: BTreeMap<u64, usize> = node
        .nodes()?
        .into_keys()
        .filter(|id| members.contains(id) && !removed.contains(id))
        .map(|id| (id, 0))
        .collect();
    if load.is_empty() {
        return Ok(());
    }
    let collections = node.collections()?;
    let mut moving = 0;
    for (_, record) in collections.values() {
        for placement in &record.placement {
            if placement.moving().is_some() {
                moving += 1;
            }
            for r in placement
                .replicas
                .iter()
                .filter(|r| r.state != ReplicaState::Leaving)
            {
                if let Some(count) = load.get_mut(&r.node) {
                    *count += 1;
                }
            }
        }
    }
    if moving >= MAX_MOVES {
        return Ok(());
    }
    let emptiest_without = |holders: &[u64]| {
        load.iter()
            .filter(|(id, _)| !holders.contains(id))
            .min_by_key(|(id, count)| (**count, **id))
            .map(|(id, _)| *id)
    };
    // 1. Off the nodes being removed.
    for (name, (_, record)) in &collections {
        for (p, placement) in record.placement.iter().enumerate() {
            if placement.moving().is_some() {
                continue;
            }
            let Some(leaving) = placement
                .replicas
                .iter()
                .find(|r| removed.contains(&r.node))
            else {
                continue;
            };
            let Some(to) = emptiest_without(&placement.nodes()) else {
                tracing::warn!(
                    collection = name,
                    partition = p,
                    node = leaving.node,
                    "no node can take this replica of a node being removed"
                );
                continue;
            };
            tracing::info!(
                collection = name,
                partition = p,
                from = leaving.node,
                to,
                "rebalancer: a replica leaves a node being removed"
            );
            return node
                .plan(
                    name,
                    p,
                    Move::Move {
                        from: leaving.node,
                        to,
                    },
                )
                .await;
        }
    }
    // 2. Spread.
    let (Some((&fullest, &most)), Some((&emptiest, &least))) = (
        load.iter()
            .max_by_key(|(id, count)| (**count, std::cmp::Reverse(**id))),
        load.iter().min_by_key(|(id, count)| (**count, **id)),
    ) else {
        return Ok(());
    };
    if most < least + 2 {
        return Ok(());
    }
    for (name, (_, record)) in &collections {
        for (p, placement) in record.placement.iter().enumerate() {
            let nodes = placement.nodes();
            if placement.moving().is_none()
                && nodes.contains(&fullest)
                && !nodes.contains(&emptiest)
            {
                tracing::info!(
                    collection = name,
                    partition = p,
                    from = fullest,
                    to = emptiest,
                    "rebalancer: a replica moves to spread the load"
                );
                return node
                    .plan(
                        name,
                        p,
                        Move::Move {
                            from: fullest,
                            to: emptiest,
                        },
                    )
                    .await;
            }
        }
    }
    Ok(())
}
