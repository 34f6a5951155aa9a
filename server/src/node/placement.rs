//! Where a partition's replicas are: the placement the cluster's metadata records for it, and
//! the edits a move makes to it.
//!
//! A placement is the *wanted* replica set of one partition, each replica with its Raft id in
//! the partition's group, its node and its [`ReplicaState`]. It is declarative: whoever edits
//! it (a `POST /collections/{c}/cluster` operation, a wiped replica asking to be replaced)
//! only writes the wish, and two loops make it true — the node of each replica opens or drops
//! it (`host.rs`), and the partition's leader changes the group's membership to match
//! (`moves.rs`). Either loop may stop and restart anywhere; it reads the placement again and
//! goes on. Edits are compare-and-set on the placement row's version, so an edit made from a
//! stale read is refused and retried rather than undoing another.

use serde::{Deserialize, Serialize};

use cairn_consensus::ReplicaId;

/// One replica in a placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaPlace {
    /// Its Raft id in the partition's group: random, so never reused (openraft forbids
    /// reusing a member id: a wiped replica must come back as a new member, not as an old one
    /// that forgot its vote).
    pub id: ReplicaId,
    /// The node it lives on.
    pub node: u64,
    /// Where it is in its life.
    pub state: ReplicaState,
}

/// A replica's life: `New` (placed, never opened) → `Live` (its node opened it: from here on
/// a missing folder means the replica's files were lost) → `Leaving` (to be removed once the
/// group no longer counts it) → gone from the placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplicaState {
    /// Placed; its node has not opened it yet.
    New,
    /// Opened by its node at least once.
    Live,
    /// Being removed: it serves until the group's voters no longer include it.
    Leaving,
}

/// The wanted replicas of one partition (metadata row `placement/{p}/{collection}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The replicas, in the order they were placed.
    pub replicas: Vec<ReplicaPlace>,
    /// The replica that creates the group (once, when the collection is created).
    pub founder: ReplicaId,
    /// The row's version in the metadata (not stored: read with the row), what an edit
    /// expects it still to be.
    #[serde(skip)]
    pub version: u64,
}

/// An edit of a placement, as `POST /collections/{c}/cluster` asks for it (Qdrant's
/// operations, its `shard_id` being Cairn's partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Add a replica on `to`, then remove the one on `from`.
    Move {
        /// The node giving its replica up.
        from: u64,
        /// The node receiving one.
        to: u64,
    },
    /// Add a replica on `to` (`from` is where Qdrant copies from; any replica serves here).
    Replicate {
        /// The node receiving one.
        to: u64,
    },
    /// Remove the replica on `node`.
    Drop {
        /// The node giving its replica up.
        node: u64,
    },
    /// Call off the move under way from `from` to `to`: the incoming replica on `to` goes, a
    /// leaving one on `from` stays. Its group follows the placement back (`moves.rs`): a
    /// learner not yet promoted is removed; if the voters had already changed, the replica on
    /// `from` (its files intact) rejoins and the one on `to` is voted out again.
    Abort {
        /// The node the replica was leaving, or copied from.
        from: u64,
        /// The node it was going to.
        to: u64,
    },
}

/// Why an edit cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The node holds no replica of the partition.
    #[error("node {0} holds no replica of this partition")]
    NotOnNode(u64),
    /// The node already holds one.
    #[error("node {0} already holds a replica of this partition")]
    AlreadyOnNode(u64),
    /// The edit would leave the partition without a replica.
    #[error("the partition's last replica cannot be dropped")]
    LastReplica,
    /// No move from `from` to `to` is under way (a replication counts until its node has
    /// opened the new replica; a move until the group has let the old one go).
    #[error("no transfer of this partition from node {0} to node {1} is under way")]
    NoTransfer(u64, u64),
    /// A move of this partition is still under way.
    #[error(
        "a move of this partition is still under way (replica {0} is {1:?}); wait for it to finish"
    )]
    Busy(ReplicaId, ReplicaState),
}

impl Placement {
    /// The placement of a new partition: a new replica on each of `nodes`, the first of them
    /// founding the group.
    pub fn new(nodes: &[u64]) -> Self {
        let replicas: Vec<ReplicaPlace> = nodes
            .iter()
            .map(|node| ReplicaPlace {
                id: new_replica_id(),
                node: *node,
                state: ReplicaState::New,
            })
            .collect();
        Self {
            founder: replicas.first().map_or(0, |r| r.id),
            replicas,
            version: 0,
        }
    }

    /// The replica on `node` that is meant to stay (not leaving), if any.
    pub fn on(&self, node: u64) -> Option<&ReplicaPlace> {
        self.replicas
            .iter()
            .find(|r| r.node == node && r.state != ReplicaState::Leaving)
    }

    /// Replica `id`, if it is placed.
    pub fn get(&self, id: ReplicaId) -> Option<&ReplicaPlace> {
        self.replicas.iter().find(|r| r.id == id)
    }

    /// The nodes holding a replica (leaving ones too: they serve until they are removed).
    pub fn nodes(&self) -> Vec<u64> {
        let mut nodes: Vec<u64> = Vec::new();
        for r in &self.replicas {
            if !nodes.contains(&r.node) {
                nodes.push(r.node);
            }
        }
        nodes
    }

    /// The replicas meant to vote once every move has finished.
    pub fn voters(&self) -> std::collections::BTreeSet<ReplicaId> {
        self.replicas
            .iter()
            .filter(|r| r.state != ReplicaState::Leaving)
            .map(|r| r.id)
            .collect()
    }

    /// Whether a move is under way: a replica not yet opened or not yet removed.
    pub fn moving(&self) -> Option<&ReplicaPlace> {
        self.replicas.iter().find(|r| r.state != ReplicaState::Live)
    }

    /// This placement with `edit` made. One move at a time per partition: a second is refused
    /// while a replica is new or leaving, so the group's membership changes one step at a
    /// time and the voters keep a majority of live replicas throughout.
    pub fn with(&self, edit: Move) -> Result<Placement, PlacementError> {
        if let Move::Abort { from, to } = edit {
            return self.aborted(from, to);
        }
        if let Some(busy) = self.moving() {
            return Err(PlacementError::Busy(busy.id, busy.state));
        }
        let mut next = self.clone();
        let add = |next: &mut Placement, to: u64| {
            if next.on(to).is_some() {
                return Err(PlacementError::AlreadyOnNode(to));
            }
            next.replicas.push(ReplicaPlace {
                id: new_replica_id(),
                node: to,
                state: ReplicaState::New,
            });
            Ok(())
        };
        let leave = |next: &mut Placement, node: u64| {
            let replica = next
                .replicas
                .iter_mut()
                .find(|r| r.node == node && r.state != ReplicaState::Leaving)
                .ok_or(PlacementError::NotOnNode(node))?;
            replica.state = ReplicaState::Leaving;
            Ok(())
        };
        match edit {
            Move::Move { from, to } => {
                if self.on(from).is_none() {
                    return Err(PlacementError::NotOnNode(from));
                }
                add(&mut next, to)?;
                leave(&mut next, from)?;
            }
            Move::Replicate { to } => add(&mut next, to)?,
            Move::Drop { node } => {
                leave(&mut next, node)?;
                if next.voters().is_empty() {
                    return Err(PlacementError::LastReplica);
                }
            }
            Move::Abort { from, to } => return self.aborted(from, to),
        }
        Ok(next)
    }

    /// This placement with the move from `from` to `to` called off (see [`Move::Abort`]).
    fn aborted(&self, from: u64, to: u64) -> Result<Placement, PlacementError> {
        let no_transfer = PlacementError::NoTransfer(from, to);
        // The incoming replica: the one the move added, which is the last placed (a partition
        // takes one move at a time); a replica on `to` placed before it is no transfer's.
        let incoming = self
            .replicas
            .last()
            .filter(|r| r.node == to && r.state != ReplicaState::Leaving)
            .ok_or(no_transfer.clone())?;
        let leaving = self
            .replicas
            .iter()
            .find(|r| r.node == from && r.state == ReplicaState::Leaving);
        let copied_from = self.on(from).filter(|r| r.id != incoming.id);
        let under_way = match (leaving, copied_from) {
            (Some(_), _) => true,
            (None, Some(_)) => incoming.state == ReplicaState::New,
            (None, None) => false,
        };
        if from == to || !under_way {
            return Err(no_transfer);
        }
        let mut next = self.clone();
        let (incoming, opened) = (incoming.id, incoming.state == ReplicaState::Live);
        if opened {
            // It may vote already (and lead): it leaves the group as any leaving replica does,
            // once the restored one is back in, rather than having its files deleted now.
            for r in &mut next.replicas {
                if r.id == incoming {
                    r.state = ReplicaState::Leaving;
                }
            }
        } else {
            // Never opened, so never in the group.
            next.replicas.retain(|r| r.id != incoming);
        }
        for r in &mut next.replicas {
            if r.node == from && r.state == ReplicaState::Leaving && r.id != incoming {
                r.state = ReplicaState::Live;
            }
        }
        Ok(next)
    }

    /// This placement with replica `id` opened by its node.
    pub fn opened(&self, id: ReplicaId) -> Placement {
        let mut next = self.clone();
        for r in &mut next.replicas {
            if r.id == id && r.state == ReplicaState::New {
                r.state = ReplicaState::Live;
            }
        }
        next
    }

    /// This placement with replica `id`, whose files are gone, replaced by a new replica on
    /// the same node: the lost one leaves the group once the new one has caught up.
    pub fn replaced(&self, id: ReplicaId) -> Placement {
        let mut next = self.clone();
        let Some(lost) = next.replicas.iter_mut().find(|r| r.id == id) else {
            return next;
        };
        lost.state = ReplicaState::Leaving;
        let node = lost.node;
        next.replicas.push(ReplicaPlace {
            id: new_replica_id(),
            node,
            state: ReplicaState::New,
        });
        next
    }

    /// This placement without the replicas on `node` (where else to read).
    pub fn without(&self, node: u64) -> Placement {
        let mut next = self.clone();
        next.replicas.retain(|r| r.node != node);
        next
    }

    /// This placement without its leaving replicas (once the group no longer counts them).
    pub fn without_leaving(&self) -> Placement {
        let mut next = self.clone();
        next.replicas.retain(|r| r.state != ReplicaState::Leaving);
        next
    }
}

/// A new replica id: random and non-zero (openraft's ids are plain `u64`s; zero reads as
/// "none" in status pages).
fn new_replica_id() -> ReplicaId {
    loop {
        let id = rand::random::<u64>() >> 1;
        if id != 0 {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn live(nodes: &[u64]) -> Placement {
        let mut p = Placement::new(nodes);
        for r in &mut p.replicas {
            r.state = ReplicaState::Live;
        }
        p
    }

    #[test]
    fn a_move_adds_before_it_removes_and_one_runs_at_a_time() {
        let p = live(&[1, 2, 3]);
        let moved = p.with(Move::Move { from: 2, to: 4 }).unwrap();
        assert_eq!(moved.on(4).unwrap().state, ReplicaState::New);
        assert!(moved.on(2).is_none());
        assert_eq!(moved.nodes(), vec![1, 2, 3, 4]);
        assert_eq!(moved.voters().len(), 3);
        assert!(matches!(
            moved.with(Move::Replicate { to: 5 }),
            Err(PlacementError::Busy(..))
        ));
        let opened = moved.opened(moved.on(4).unwrap().id);
        let done = opened.without_leaving();
        assert_eq!(done.nodes(), vec![1, 3, 4]);
        assert!(done.moving().is_none());
    }

    #[test]
    fn edits_that_make_no_sense_are_refused() {
        let p = live(&[1, 2]);
        assert_eq!(
            p.with(Move::Replicate { to: 2 }),
            Err(PlacementError::AlreadyOnNode(2))
        );
        assert_eq!(
            p.with(Move::Move { from: 7, to: 3 }),
            Err(PlacementError::NotOnNode(7))
        );
        let one = live(&[1]);
        assert_eq!(
            one.with(Move::Drop { node: 1 }),
            Err(PlacementError::LastReplica)
        );
        assert!(p.with(Move::Drop { node: 1 }).is_ok());
    }

    #[test]
    fn an_abort_restores_the_replica_that_was_leaving() {
        let p = live(&[1, 2, 3]);
        let moving = p.with(Move::Move { from: 2, to: 4 }).unwrap();
        let back = moving.with(Move::Abort { from: 2, to: 4 }).unwrap();
        assert_eq!(back.replicas, p.replicas);
        // Also once the new replica is opened, until the old one is let go: the opened one
        // then leaves as a leaving replica does (it may be a voter already).
        let incoming = moving.on(4).unwrap().id;
        let opened = moving.opened(incoming);
        let undone = opened.with(Move::Abort { from: 2, to: 4 }).unwrap();
        assert_eq!(undone.get(incoming).unwrap().state, ReplicaState::Leaving);
        assert_eq!(undone.voters(), p.voters());
        // A replica on the target that the move did not add is never taken for it.
        let p2 = live(&[1, 2]);
        let moving2 = p2.with(Move::Move { from: 2, to: 3 }).unwrap();
        assert_eq!(
            moving2.with(Move::Abort { from: 2, to: 1 }),
            Err(PlacementError::NoTransfer(2, 1))
        );
        // A replication, until its replica is opened.
        let copying = p.with(Move::Replicate { to: 4 }).unwrap();
        assert_eq!(
            copying
                .with(Move::Abort { from: 1, to: 4 })
                .unwrap()
                .replicas,
            p.replicas
        );
        let copied = copying.opened(copying.on(4).unwrap().id);
        for (from, to) in [(1, 4), (2, 4), (4, 4), (1, 2), (9, 4)] {
            assert_eq!(
                copied.with(Move::Abort { from, to }),
                Err(PlacementError::NoTransfer(from, to)),
                "{from} -> {to}"
            );
        }
        assert_eq!(
            p.with(Move::Abort { from: 2, to: 3 }),
            Err(PlacementError::NoTransfer(2, 3))
        );
    }

    #[test]
    fn a_lost_replica_is_replaced_on_its_node_under_a_new_id() {
        let p = live(&[1, 2, 3]);
        let lost = p.on(2).unwrap().id;
        let next = p.replaced(lost);
        let new = next.on(2).unwrap();
        assert_ne!(new.id, lost);
        assert_eq!(new.state, ReplicaState::New);
        assert_eq!(next.get(lost).unwrap().state, ReplicaState::Leaving);
        assert!(!next.voters().contains(&lost));
    }
}
