//! cairn-consensus: a partition's replicas as one Raft group, and the one crate that names
//! openraft.
//!
//! In a cluster every partition is replicated by its own Raft group (TiKV's choice, not
//! Qdrant's: see `docs/design/consensus.md`). An entry of the group's log is one write
//! ([`PartitionCommand`]); applying it is the partition's commit. Both the log and the state it
//! produces live in the partition's one RocksDB (`cairn-storage`), so they share one WAL: the
//! synced append that makes an entry durable also covers the unsynced batches that applied the
//! entries before it. The sequence number of a write is its log index, the same on every
//! replica, which is what lets replicas be compared by number and by content.
//!
//! - [`LogStore`] is openraft's `RaftLogStorage` over the partition's `log` families.
//! - [`StateMachine`] is openraft's `RaftStateMachine` over its state families, with snapshots
//!   that are the state's table files plus whatever the partition adds (its index file), so a
//!   new or far-behind replica takes them in without rebuilding anything.
//! - [`Network`] carries a group's messages over the node's one [`Transport`] (the server's
//!   HTTP client), each naming its [`GroupId`]; [`Groups`] hands a peer's messages to the
//!   group they name. Snapshots travel file by file and resume after a broken link.
//! - The partition above hears of each applied entry, and adds to or takes files from a
//!   snapshot, through the [`Observer`] it passes in; it never sees an openraft type.
//!
//! openraft is pinned to `=0.9.25` (§0 of the design note); keeping its names in this crate
//! means the move to 0.10 touches one crate.

// openraft's traits fix the error type (`openraft::StorageError`, over 200 bytes); boxing it
// here would only mean unboxing it at every trait method.
#![allow(clippy::result_large_err)]

mod command;
mod error;
mod group;
mod groups;
mod log_store;
mod network;
mod snapshot;
mod state_machine;

pub use command::{Applied, PartitionCommand, PointRow, Row};
pub use group::{Group, GroupError, GroupStatus, LogPolicy, ReadError, Role, Timing, WriteError};
pub use groups::{Groups, HandleError};
pub use log_store::LogStore;
pub use network::{
    Addressee, GroupId, Network, Rpc, Transport, TransportError, SNAPSHOT_CHUNK_BYTES,
};
pub use snapshot::{Manifest, SnapshotDir};
pub use state_machine::{Observer, StateMachine};

/// A replica's id in its partition's group. Ids are never reused: a wiped replica comes back
/// under a new one (openraft forbids a member returning with an empty log under its old id).
pub type ReplicaId = u64;

/// Where a replica lives: the node that hosts it (its address comes from cluster metadata).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ReplicaAddr {
    /// The hosting node's id.
    pub node: u64,
}

openraft::declare_raft_types!(
    /// The type configuration of a partition's Raft group.
    pub PartTypes:
        D = PartitionCommand,
        R = Applied,
        NodeId = ReplicaId,
        Node = ReplicaAddr,
        SnapshotData = SnapshotDir,
);
