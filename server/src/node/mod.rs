//! A peer node of the Raft-replicated cluster (issue #22; `cluster.role = "node"`).
//!
//! Being built in steps (`docs/design/consensus.md` §9). Today a node runs the cluster's
//! metadata group: one Raft group whose voters are the nodes of `cluster.peers`, whose messages
//! travel over every node's internal port (`http::peer`), and whose state is kept like a
//! partition's (`cairn-consensus` over `cairn-storage`, in `<data_dir>/cluster/`): rows keyed
//! by name, written through the group's leader from any node. Each node records its public
//! address there (`node/{id}`). `GET /cluster` reports the group in Qdrant's shape. Collections, placement and the partitions' own
//! groups come next; until then a node refuses to create collections (`host.rs`) rather than
//! keep them where no other node has them.

pub mod host;
pub mod partition;
pub mod remote;
pub mod replica;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use cairn_consensus::{
    Group, GroupId, Groups, PartitionCommand, ReplicaAddr, Row, Timing, Transport,
};
use cairn_storage::{PartitionStore, StoreOptions};
use serde::Serialize;

use crate::config::ClusterConfig;
use crate::error::{Result, ServerError};

/// How long one attempt to write metadata may wait for the group (elections included).
const META_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// This node: its id, the metadata group, and every group it hosts (for the internal API).
pub struct Node {
    id: u64,
    /// The partition replicas on this node, for other nodes' calls (`http::peer`).
    replicas: parking_lot::RwLock<BTreeMap<GroupId, Arc<dyn crate::collection::PartitionHandle>>>,
    meta: Group,
    /// The metadata replica's store: its rows are the cluster's metadata (see [`MetaRow`]).
    meta_store: Arc<PartitionStore>,
    groups: Arc<Groups>,
    peers: BTreeMap<u64, String>,
}

/// What one metadata row says. Rows are keyed `node/{id}`; each is written by its node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeRecord {
    /// The node's public REST address (`http://host:port`), for clients and `GET /cluster`.
    pub api_uri: String,
}

/// A collection as the metadata records it (row `collection/{name}`). Its uid is the row's
/// version: the log index of the entry that created it, never reused, so a collection created
/// again under the same name gets new groups.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CollectionRecord {
    /// Its settings.
    pub settings: crate::request::CollectionSettings,
    /// For each partition, the nodes of its replicas: replica `k` (Raft id `k + 1` in the
    /// partition's group) lives on `placement[p][k]`.
    pub placement: Vec<Vec<u64>>,
}

/// The metadata keys, in one place.
struct MetaRow;

impl MetaRow {
    const NODE: &'static str = "node/";
    const COLLECTION: &'static str = "collection/";

    fn node(id: u64) -> Vec<u8> {
        format!("{}{id}", Self::NODE).into_bytes()
    }

    fn collection(name: &str) -> Vec<u8> {
        format!("{}{name}", Self::COLLECTION).into_bytes()
    }
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
        let meta_store = store.clone();
        let groups = Arc::new(Groups::default());
        // The metadata group's replica id is the node's id.
        let meta = Group::open(
            GroupId::Meta,
            cluster.node_id,
            Timing::META,
            cluster.log_policy(),
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
            replicas: parking_lot::RwLock::new(BTreeMap::new()),
            meta,
            meta_store,
            groups,
            peers,
        }))
    }

    /// Records this node's public address in the metadata, in the background: through the
    /// metadata group's leader, whichever node leads, retried until it is written (the group
    /// may have no leader yet while nodes start).
    pub fn register(self: &Arc<Self>, api_uri: String) {
        let node = self.clone();
        tokio::spawn(async move {
            let record = NodeRecord { api_uri };
            let payload = match serde_json::to_string(&record) {
                Ok(payload) => payload,
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode this node's record");
                    return;
                }
            };
            let command = PartitionCommand::Upsert(vec![Row {
                key: MetaRow::node(node.id),
                vector: Vec::new(),
                payload: Some(payload),
            }]);
            loop {
                match node.meta.propose(command.clone(), META_WRITE_TIMEOUT).await {
                    Ok(applied) => {
                        tracing::info!(
                            index = applied.index,
                            "this node is in the cluster's metadata"
                        );
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot record this node yet; retrying"),
                }
            }
        });
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Serves other nodes' calls for `group` from `replica`.
    pub fn add_replica(
        &self,
        group: GroupId,
        replica: Arc<dyn crate::collection::PartitionHandle>,
    ) {
        self.replicas.write().insert(group, replica);
    }

    /// Stops serving `group`.
    pub fn remove_replica(&self, group: GroupId) {
        self.replicas.write().remove(&group);
    }

    /// The replica of `group` on this node, if any.
    pub fn replica(&self, group: GroupId) -> Option<Arc<dyn crate::collection::PartitionHandle>> {
        self.replicas.read().get(&group).cloned()
    }

    /// Writes metadata rows through the metadata group's leader; returns the entry's index.
    pub async fn propose(&self, command: PartitionCommand) -> Result<u64> {
        self.meta
            .propose(command, META_WRITE_TIMEOUT)
            .await
            .map(|applied| applied.index)
            .map_err(|e| ServerError::Unavailable(e.to_string()))
    }

    /// Waits until this node has applied the metadata up to `index`.
    pub async fn wait_meta(&self, index: u64) -> Result<()> {
        let deadline = tokio::time::Instant::now() + META_WRITE_TIMEOUT;
        while self.meta.status().applied < index {
            if tokio::time::Instant::now() > deadline {
                return Err(ServerError::Unavailable(format!(
                    "this node has not applied the cluster's metadata up to {index}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Every node that recorded itself, by id.
    pub fn nodes(&self) -> Result<BTreeMap<u64, NodeRecord>> {
        let mut nodes = BTreeMap::new();
        for (key, _, payload) in self.rows(MetaRow::NODE)? {
            let id = key.parse().map_err(|_| corrupt(&key))?;
            let record = serde_json::from_str(payload.as_deref().unwrap_or_default())
                .map_err(|_| corrupt(&key))?;
            nodes.insert(id, record);
        }
        Ok(nodes)
    }

    /// Every collection in the metadata: name → (uid, record).
    pub fn collections(&self) -> Result<BTreeMap<String, (u64, CollectionRecord)>> {
        let mut collections = BTreeMap::new();
        for (name, version, payload) in self.rows(MetaRow::COLLECTION)? {
            let record = serde_json::from_str(payload.as_deref().unwrap_or_default())
                .map_err(|_| corrupt(&name))?;
            collections.insert(name, (version, record));
        }
        Ok(collections)
    }

    /// Records a new collection (or replaces one of the same name: the later entry wins, and
    /// its uid is new); returns the entry's index, which is the collection's uid.
    pub async fn put_collection(&self, name: &str, record: &CollectionRecord) -> Result<u64> {
        let payload =
            serde_json::to_string(record).map_err(|e| ServerError::Internal(e.to_string()))?;
        self.propose(PartitionCommand::Upsert(vec![Row {
            key: MetaRow::collection(name),
            vector: Vec::new(),
            payload: Some(payload),
        }]))
        .await
    }

    /// Removes a collection from the metadata.
    pub async fn remove_collection(&self, name: &str) -> Result<u64> {
        self.propose(PartitionCommand::Delete(vec![MetaRow::collection(name)]))
            .await
    }

    /// Rows whose key starts with `prefix`: (the rest of the key, version, payload).
    fn rows(&self, prefix: &str) -> Result<Vec<(String, u64, Option<String>)>> {
        let mut rows = Vec::new();
        for row in self.meta_store.scan_meta()? {
            let (key, version, payload) = row?;
            if let Some(rest) = key.strip_prefix(prefix.as_bytes()) {
                rows.push((String::from_utf8_lossy(rest).into_owned(), version, payload));
            }
        }
        Ok(rows)
    }

    /// A node's record in the metadata as this node has applied it, if any.
    pub fn node_record(&self, id: u64) -> Option<NodeRecord> {
        let point = self.meta_store.get(&MetaRow::node(id)).ok().flatten()?;
        serde_json::from_str(point.payload.as_deref()?).ok()
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
                let api_uri = self.node_record(*id).map(|r| r.api_uri);
                (id.to_string(), Peer { uri, api_uri })
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
    /// Its internal URL (Qdrant's `uri` is its peer-to-peer address too).
    pub uri: String,
    /// Its public REST address, once the node has recorded it in the metadata (a Cairn
    /// addition: what a client fails over to).
    pub api_uri: Option<String>,
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

fn corrupt(key: &str) -> ServerError {
    ServerError::Internal(format!("metadata row `{key}` does not parse"))
}
