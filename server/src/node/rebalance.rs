//! The rebalancer: replicas leave nodes being removed or dead, and spread over the nodes when
//! one joins.
//!
//! It runs on the metadata group's leader (one at a time, whichever node leads) and acts only
//! through placement edits (`Node::plan`), which are compare-and-set and one move per partition
//! at a time, so two nodes that both believe they lead for a moment cannot undo each other's
//! work. Each pass makes at most one edit, with at most [`MAX_MOVES`] moves under way in the
//! cluster, so a join or a removal moves data gradually under load:
//!
//! 1. a replica on a node being removed, or on a node silent for `cluster.dead_after_secs`,
//!    moves to the node with the fewest replicas that does not hold one of that partition
//!    (the partition's live replicas carry the move: its group needs a majority alive);
//! 2. otherwise, while one node holds at least two replicas more than another, a replica moves
//!    from the fullest node to the emptiest (a partition the emptiest does not hold).
//!
//! Load is counted in replicas, all partitions alike; a dead node takes none. A dead node is
//! not removed: if it comes back, it drops the replicas it no longer holds, and spreading
//! gives it others. Silence is what the leader's own transport saw (every metadata member
//! answers its heartbeats several times a second); a new leader counts from when it started
//! leading, so a change of leader never declares anyone dead early.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_consensus::Role;

use super::placement::{Move, ReplicaState};
use super::Node;
use crate::error::Result;

/// How often the leader looks for work.
const EVERY: Duration = Duration::from_secs(1);

/// Moves under way in the whole cluster at most (each streams a partition's state).
const MAX_MOVES: usize = 2;

/// When this node last heard from another (the transport that carries its messages).
pub trait Liveness: Send + Sync {
    /// How long since `node` last answered this one (`None`: never, since this process
    /// started).
    fn silent_for(&self, node: u64) -> Option<Duration>;
}

/// Runs the loop until the process ends; nodes silent for `dead_after` count as dead.
pub fn spawn(node: Arc<Node>, liveness: Arc<dyn Liveness>, dead_after: Duration) {
    tokio::spawn(async move {
        // Since when this node has led the metadata group without a break.
        let mut leading_since: Option<Instant> = None;
        loop {
            tokio::time::sleep(EVERY).await;
            if node.meta.status().role != Role::Leader {
                leading_since = None;
                continue;
            }
            let since = *leading_since.get_or_insert_with(Instant::now);
            let dead = |id: u64| {
                id != node.id()
                    && liveness
                        .silent_for(id)
                        .unwrap_or_else(|| since.elapsed())
                        .min(since.elapsed())
                        >= dead_after
            };
            if let Err(e) = step(&node, &dead).await {
                tracing::info!(error = %e, "the rebalancer could not plan a move; retrying");
            }
        }
    });
}

/// One pass: at most one placement edit. `dead` says whether a node counts as dead.
async fn step(node: &Node, dead: &(dyn Fn(u64) -> bool + Sync)) -> Result<()> {
    let status = node.meta.status();
    if status.role != Role::Leader {
        return Ok(());
    }
    let members: BTreeSet<u64> = status.members.iter().map(|(id, _)| *id).collect();
    let removed = node.removed()?;
    let dead: BTreeSet<u64> = members.iter().copied().filter(|id| dead(*id)).collect();
    // Nodes that take replicas: recorded, members (so they follow the metadata), not leaving,
    // alive.
    let mut load: BTreeMap<u64, usize> = node
        .nodes()?
        .into_keys()
        .filter(|id| members.contains(id) && !removed.contains(id) && !dead.contains(id))
        .map(|id| (id, 0))
        .collect();
    if load.is_empty() {
        return Ok(());
    }
    let collections = node.collections()?;
    // A partition whose wanted replicas are not mostly alive has no leader to carry a move:
    // none is planned there, and one under way there does not hold up the others.
    let can_move = |placement: &super::placement::Placement| {
        let wanted: Vec<u64> = placement
            .replicas
            .iter()
            .filter(|r| r.state != ReplicaState::Leaving)
            .map(|r| r.node)
            .collect();
        let alive = wanted.iter().filter(|n| !dead.contains(n)).count();
        2 * alive > wanted.len()
    };
    let mut moving = 0;
    for (_, record) in collections.values() {
        for placement in &record.placement {
            if placement.moving().is_some() && can_move(placement) {
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
    // 1. Off the nodes being removed, and the dead.
    for (name, (_, record)) in &collections {
        for (p, placement) in record.placement.iter().enumerate() {
            if placement.moving().is_some() {
                continue;
            }
            let Some(leaving) = placement
                .replicas
                .iter()
                .find(|r| removed.contains(&r.node) || dead.contains(&r.node))
            else {
                continue;
            };
            if !can_move(placement) {
                // Every pass: at debug (collection status is red meanwhile).
                tracing::debug!(
                    collection = name,
                    partition = p,
                    "most of this partition's replicas are on dead nodes: no move until they are back"
                );
                continue;
            }
            let Some(to) = emptiest_without(&placement.nodes()) else {
                tracing::warn!(
                    collection = name,
                    partition = p,
                    node = leaving.node,
                    "no node can take this replica of a node being removed or dead"
                );
                continue;
            };
            tracing::info!(
                collection = name,
                partition = p,
                from = leaving.node,
                to,
                dead = dead.contains(&leaving.node),
                "rebalancer: a replica leaves a node being removed or dead"
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
