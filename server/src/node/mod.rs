//! A peer node of the Raft-replicated cluster (issue #22; `cluster.role = "node"`).
//!
//! Being built in steps (`docs/design/consensus.md` §9). Today a node runs the cluster's
//! metadata group: one Raft group whose voters are the nodes of `cluster.peers`, whose messages
//! travel over every node's internal port (`http::peer`), and whose state is kept like a
//! partition's (`cairn-consensus` over `cairn-storage`, in `<data_dir>/cluster/`). `GET
//! /cluster` reports it in Qdrant's shape. Collections, placement and the partitions' own
//! groups come next; until then a node refuses to create collections (`host.rs`) rather than
//! keep them where no other node has them.

pub mod host;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn_consensus::{Group, GroupId, Groups, ReplicaAddr, Timing, Transport};
use cairn_storage::{PartitionStore, StoreOptions};
use serde::Serialize;

use crate::config::ClusterConfig;
use crate::error::{Result, ServerError};

/// This node: its id, the metadata group, and every group it hosts (for the internal API).
pub struct Node {
    id: u64,
    meta: Group,
    groups: Arc<Groups>,
    peers: BTreeMap<u64, String>,
}

impl Node {
    /// Opens (or creates) this node's metadata replica in `data_dir/cluster/`, joins the group
    /// over `transport`, and, with `cluster.bootstrap` on a node whose group was never
    /// initialized, creates the group with `cluster.peers` as voters.
    pub async fn start<T: Transport>(
        cluster: &ClusterConfig,
        data_dir: &Path,
        transport: Arc<T>,
    ) -> Result<Arc<Self>> {
        let peers: BTreeMap<u64, String> = cluster
            .peer_list()
            .map_err(ServerError::InvalidRequest)?
            .into_iter()
            .collect();
        let dir = data_dir.join("cluster");
        let options = StoreOptions {
            replicated: true,
            ..StoreOptions::default()
        };
        let store = Arc::new(PartitionStore::open(&dir.join("db"), options)?);
        let groups = Arc::new(Groups::default());
        // The metadata group's replica id is the node's id.
        let meta = Group::open(
            GroupId::Meta,
            cluster.node_id,
            Timing::META,
            &dir,
            store,
            (),
            transport,
            &groups,
        )
        .await
        .map_err(|e| ServerError::Internal(e.to_string()))?;
        let initialized = meta
            .is_initialized()
            .await
            .map_err(|e| ServerError::Internal(e.to_string()))?;
        if cluster.bootstrap && !initialized {
            let voters: BTreeMap<u64, ReplicaAddr> = peers
                .keys()
                .map(|id| (*id, ReplicaAddr { node: *id }))
                .collect();
            meta.initialize(voters)
                .await
                .map_err(|e| ServerError::Internal(format!("cannot bootstrap the cluster: {e}")))?;
            tracing::info!(voters = ?peers.keys().collect::<Vec<_>>(), "cluster bootstrapped");
        }
        tracing::info!(node = cluster.node_id, initialized, "node started");
        Ok(Arc::new(Self {
            id: cluster.node_id,
            meta,
            groups,
            peers,
        }))
    }

    /// The groups this node hosts, for the internal API to dispatch to.
    pub fn groups(&self) -> Arc<Groups> {
        self.groups.clone()
    }

    /// The cluster as `GET /cluster` reports it.
    pub fn status(&self) -> ClusterStatus {
        let group = self.meta.status();
        let peers = group
            .members
            .iter()
            .map(|(id, _)| {
                let uri = self.peers.get(id).cloned().unwrap_or_default();
                (id.to_string(), Peer { uri })
            })
            .collect();
        ClusterStatus {
            status: "enabled",
            peer_id: self.id,
            peers,
            raft_info: RaftInfo {
                term: group.term,
                commit: group.applied,
                pending_operations: group.last_log.saturating_sub(group.applied),
                leader: group.leader,
                role: group.role.name(),
                is_voter: group.voters.contains(&self.id),
                voters: group.voters,
            },
        }
    }

    /// Stops the metadata group (and with it every message this node sends).
    pub async fn shutdown(&self) {
        self.meta.shutdown(&self.groups).await;
    }
}

/// `GET /cluster`, in Qdrant's shape (`status`, `peer_id`, `peers`, `raft_info`).
#[derive(Debug, Clone, Serialize)]
pub struct ClusterStatus {
    /// `enabled` on a node.
    pub status: &'static str,
    /// This node's id.
    pub peer_id: u64,
    /// Every member of the metadata group, by id.
    pub peers: BTreeMap<String, Peer>,
    /// The metadata group as this node sees it.
    pub raft_info: RaftInfo,
}

/// One member node.
#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    /// Its internal URL.
    pub uri: String,
}

/// The metadata group as one node sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RaftInfo {
    /// The current term.
    pub term: u64,
    /// The last log index applied here.
    pub commit: u64,
    /// Entries in this node's log not yet applied.
    pub pending_operations: u64,
    /// The leader's node id, if known.
    pub leader: Option<u64>,
    /// This node's role: Leader, Follower, Candidate, Learner.
    pub role: &'static str,
    /// Whether this node votes.
    pub is_voter: bool,
    /// The voters' ids.
    pub voters: Vec<u64>,
}
