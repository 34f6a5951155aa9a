//! A peer node of the Raft-replicated cluster (issue #22; `cluster.role = "node"`).
//!
//! A node runs the cluster's metadata group: one Raft group whose voters are the nodes of
//! `cluster.peers`, whose messages travel over every node's internal port (`http::peer`), and
//! whose state is kept like a partition's (`cairn-consensus` over `cairn-storage`, in
//! `<data_dir>/cluster/`): rows keyed by name, written through the group's leader from any
//! node. The rows: each node's public address (`node/{id}`), each collection's settings
//! (`collection/{name}`), each partition's placement (`placement/{p}/{name}`, see
//! `placement.rs`), and for a partitioned collection its routing and moves records
//! (`record/{key}/{name}`) and the node that writes it (`writer/{name}`, `records.rs`). Every node applies them, so every node knows every collection and where
//! its replicas are; each replica is a member of its partition's own group (`replica.rs`),
//! and moves change those groups' membership (`moves.rs`). `GET /cluster` reports the
//! metadata group in Qdrant's shape.

pub mod host;
pub mod identity;
pub mod members;
pub mod moves;
pub mod partition;
pub mod placement;
pub mod rebalance;
pub mod records;
pub mod remote;
pub mod replica;
pub mod slot;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use std::time::Duration;

use cairn_consensus::{
    Applied, Group, GroupId, Groups, PartitionCommand, ReplicaAddr, Role, Row, Timing, Transport,
};
use cairn_storage::{PartitionStore, StoreOptions};
use serde::Serialize;

use crate::config::ClusterConfig;
use crate::error::{Result, ServerError};
use placement::{Move, Placement};

/// How long one attempt to write metadata may wait for the group (elections included).
const META_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a placement edit is tried again when another edit keeps coming first.
const PLAN_ATTEMPTS: usize = 20;

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
    /// This node's internal address, as its peers reach it.
    internal_uri: String,
    /// Counts the metadata replica's snapshot installs, so reads can tell a consistent view.
    installs: Installs,
}

/// A seqlock over the metadata store: odd while a snapshot replaces it (cleared, then filled
/// family by family), so a read that overlaps an install is done again rather than taken for
/// the cluster's state (an empty read would look like every collection deleted).
#[derive(Clone, Default)]
struct Installs {
    generation: Arc<std::sync::atomic::AtomicU64>,
}

impl cairn_consensus::Observer for Installs {
    fn before_replace(&self) {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn state_replaced(&self, _dir: &Path) -> std::io::Result<()> {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }
}

/// What one metadata row says. Rows are keyed `node/{id}`; each is written by its node (or,
/// for a node joining, by the node that admits it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct NodeRecord {
    /// The node's public REST address (`http://host:port`), for clients and `GET /cluster`.
    pub api_uri: String,
    /// The node's internal address, where its peers reach it.
    #[serde(default)]
    pub internal_uri: Option<String>,
}

/// A node's request to join the cluster (`POST /internal/join` on any member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// The joining node's id (`cluster.node_id`), which no other node may hold.
    pub node_id: u64,
    /// Where its peers reach it.
    pub internal_uri: String,
    /// Its public REST address.
    pub api_uri: String,
}

/// A collection as the metadata records it: its settings (row `collection/{name}`, written
/// once) and each partition's [`Placement`] (rows `placement/{p}/{name}`, edited by moves).
/// Its uid is the collection row's version: the log index of the entry that created it (with
/// its placements), never reused, so a collection created again under the same name gets new
/// groups.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionRecord {
    /// Its settings.
    pub settings: crate::request::CollectionSettings,
    /// Where each partition's replicas are.
    pub placement: Vec<Placement>,
}

/// The collection row's content.
#[derive(Serialize, serde::Deserialize)]
struct CollectionRow {
    settings: crate::request::CollectionSettings,
}

/// The metadata keys, in one place.
struct MetaRow;

impl MetaRow {
    const NODE: &'static str = "node/";
    /// `removed/{id}`: the node is being removed (its replicas move away, then it leaves the
    /// metadata group). A row of its own, so the node's own record, which it rewrites at every
    /// start, never undoes it.
    const REMOVED: &'static str = "removed/";
    const COLLECTION: &'static str = "collection/";
    const PLACEMENT: &'static str = "placement/";
    /// `record/{key}/{name}`: a partitioned collection's routing or moves record, in base64.
    const RECORD: &'static str = "record/";
    /// `writer/{name}`: the node that writes a partitioned collection; the row's version is
    /// its epoch.
    const WRITER: &'static str = "writer/";

    fn node(id: u64) -> Vec<u8> {
        format!("{}{id}", Self::NODE).into_bytes()
    }

    fn removed(id: u64) -> Vec<u8> {
        format!("{}{id}", Self::REMOVED).into_bytes()
    }

    fn collection(name: &str) -> Vec<u8> {
        format!("{}{name}", Self::COLLECTION).into_bytes()
    }

    fn placement(name: &str, partition: usize) -> Vec<u8> {
        format!("{}{partition}/{name}", Self::PLACEMENT).into_bytes()
    }

    fn record(name: &str, key: &str) -> Vec<u8> {
        format!("{}{key}/{name}", Self::RECORD).into_bytes()
    }

    fn writer(name: &str) -> Vec<u8> {
        format!("{}{name}", Self::WRITER).into_bytes()
    }

    /// `aliases`: every alias and the collection it names, one JSON map, so that a change of
    /// several aliases is one compare-and-set (all or none).
    fn aliases() -> Vec<u8> {
        b"aliases".to_vec()
    }
}

/// The writer row's content.
#[derive(Serialize, serde::Deserialize)]
struct WriterRow {
    node: u64,
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
        identity::claim(&dir, cluster.node_id)?;
        let options = StoreOptions {
            replicated: true,
            ..StoreOptions::default()
        };
        let store = Arc::new(PartitionStore::open(&dir.join("db"), options)?);
        let meta_store = store.clone();
        let groups = Arc::new(Groups::default());
        let installs = Installs::default();
        // The metadata group's replica id is the node's id.
        let meta = Group::open(
            GroupId::Meta,
            cluster.node_id,
            Timing::META,
            cluster.log_policy(),
            &dir,
            store,
            installs.clone(),
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
        let internal_uri = peers.get(&cluster.node_id).cloned().unwrap_or_default();
        Ok(Arc::new(Self {
            id: cluster.node_id,
            replicas: parking_lot::RwLock::new(BTreeMap::new()),
            meta,
            meta_store,
            groups,
            peers,
            internal_uri,
            installs,
        }))
    }

    /// Records this node's public address in the metadata, in the background: through the
    /// metadata group's leader, whichever node leads, retried until it is written (the group
    /// may have no leader yet while nodes start).
    pub fn register(self: &Arc<Self>, api_uri: String) {
        let node = self.clone();
        tokio::spawn(async move {
            let record = NodeRecord {
                api_uri,
                internal_uri: Some(node.internal_uri.clone()),
            };
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
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot record this node yet; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
            }
        });
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This node's internal address.
    pub fn internal_uri(&self) -> &str {
        &self.internal_uri
    }

    /// Whether this node holds the metadata group's membership (it bootstrapped the cluster,
    /// or a leader has reached it since it joined).
    pub fn is_member(&self) -> bool {
        !self.meta.status().members.is_empty()
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

    /// Admits node `id` into the cluster (the internal API's join): records its addresses, so
    /// every node learns where it is and the metadata leader makes it a member
    /// (`members.rs`). Answers every node's internal address, the newcomer's address book.
    /// A node id already recorded with another internal address is refused.
    pub async fn admit(
        &self,
        id: u64,
        internal_uri: String,
        api_uri: String,
    ) -> Result<BTreeMap<u64, String>> {
        if id == 0 {
            return Err(ServerError::InvalidRequest(
                "node id 0 is not a node id".into(),
            ));
        }
        if let Some(existing) = self.nodes()?.get(&id) {
            if existing.internal_uri.as_deref() != Some(internal_uri.as_str()) {
                return Err(ServerError::InvalidRequest(format!(
                    "node id {id} is taken (by {}); give the new node an id of its own",
                    existing
                        .internal_uri
                        .as_deref()
                        .unwrap_or("a node of cluster.peers")
                )));
            }
        }
        if self.removed()?.contains(&id) {
            return Err(ServerError::InvalidRequest(format!(
                "node id {id} was removed from the cluster and cannot come back; give the new \
                 node an id of its own"
            )));
        }
        let record = NodeRecord {
            api_uri,
            internal_uri: Some(internal_uri),
        };
        let index = self
            .propose(PartitionCommand::Upsert(vec![Row {
                key: MetaRow::node(id),
                vector: Vec::new(),
                payload: Some(to_json(&record)?),
            }]))
            .await?;
        self.wait_meta(index).await?;
        tracing::info!(node = id, "node admitted into the cluster");
        Ok(self.addresses())
    }

    /// Starts removing node `id` (`DELETE /cluster/peer/{id}`): the rebalancer moves its
    /// replicas to other nodes, then it leaves the metadata group (`members.rs`).
    pub async fn remove_node(&self, id: u64) -> Result<()> {
        if !self.nodes()?.contains_key(&id) {
            return Err(ServerError::InvalidRequest(format!(
                "node {id} is not in the cluster"
            )));
        }
        let index = self
            .propose(PartitionCommand::Upsert(vec![Row {
                key: MetaRow::removed(id),
                vector: Vec::new(),
                payload: Some("{}".into()),
            }]))
            .await?;
        self.wait_meta(index).await?;
        tracing::info!(node = id, "node removal started");
        Ok(())
    }

    /// The nodes being removed (or removed).
    pub fn removed(&self) -> Result<std::collections::BTreeSet<u64>> {
        self.rows(MetaRow::REMOVED)?
            .into_iter()
            .map(|(key, _, _)| key.parse().map_err(|_| corrupt(&key)))
            .collect()
    }

    /// Every node's internal address: the configured peers', and those recorded in the
    /// metadata (joined nodes).
    pub fn addresses(&self) -> BTreeMap<u64, String> {
        let mut addresses = self.peers.clone();
        if let Ok(nodes) = self.nodes() {
            for (id, record) in nodes {
                if let Some(uri) = record.internal_uri {
                    addresses.insert(id, uri);
                }
            }
        }
        addresses
    }

    /// Every collection in the metadata: name → (uid, record), from one consistent view.
    pub fn collections(&self) -> Result<BTreeMap<String, (u64, CollectionRecord)>> {
        self.consistent(|| self.read_collections())
    }

    fn read_collections(&self) -> Result<BTreeMap<String, (u64, CollectionRecord)>> {
        let mut placements: BTreeMap<(String, usize), Placement> = BTreeMap::new();
        for (key, version, payload) in self.rows(MetaRow::PLACEMENT)? {
            let (partition, name) = key
                .split_once('/')
                .and_then(|(p, name)| Some((p.parse::<usize>().ok()?, name)))
                .ok_or_else(|| corrupt(&key))?;
            let mut placement: Placement =
                serde_json::from_str(payload.as_deref().unwrap_or_default())
                    .map_err(|_| corrupt(&key))?;
            placement.version = version;
            placements.insert((name.to_owned(), partition), placement);
        }
        let mut collections = BTreeMap::new();
        for (name, version, payload) in self.rows(MetaRow::COLLECTION)? {
            let row: CollectionRow = serde_json::from_str(payload.as_deref().unwrap_or_default())
                .map_err(|_| corrupt(&name))?;
            let placement = (0..row.settings.partitions())
                .map(|p| placements.remove(&(name.clone(), p)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| corrupt(&name))?;
            collections.insert(
                name,
                (
                    version,
                    CollectionRecord {
                        settings: row.settings,
                        placement,
                    },
                ),
            );
        }
        Ok(collections)
    }

    /// Records a new collection with its placements, in one entry; returns the entry's index,
    /// which is the collection's uid. A collection of the same name is replaced (the later
    /// entry wins, and its uid is new).
    pub async fn put_collection(&self, name: &str, record: &CollectionRecord) -> Result<u64> {
        let mut rows = vec![Row {
            key: MetaRow::collection(name),
            vector: Vec::new(),
            payload: Some(to_json(&CollectionRow {
                settings: record.settings.clone(),
            })?),
        }];
        for (p, placement) in record.placement.iter().enumerate() {
            rows.push(Row {
                key: MetaRow::placement(name, p),
                vector: Vec::new(),
                payload: Some(to_json(placement)?),
            });
        }
        self.propose(PartitionCommand::Upsert(rows)).await
    }

    /// Removes a collection, its placements, records and writer from the metadata.
    pub async fn remove_collection(&self, name: &str) -> Result<u64> {
        let mut keys = vec![MetaRow::collection(name), MetaRow::writer(name)];
        for prefix in [MetaRow::PLACEMENT, MetaRow::RECORD] {
            for (key, _, _) in self.rows(prefix)? {
                if key.split_once('/').is_some_and(|(_, n)| n == name) {
                    keys.push(format!("{prefix}{key}").into_bytes());
                }
            }
        }
        self.propose(PartitionCommand::Delete(keys)).await
    }

    /// Record `key` of collection `name` as this node has applied it: its version (the log
    /// index that wrote it) and its value.
    pub fn record(&self, name: &str, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        use base64::Engine as _;
        let row = MetaRow::record(name, key);
        let Some(point) = self.consistent(|| Ok(self.meta_store.get(&row)?))? else {
            return Ok(None);
        };
        let value = base64::engine::general_purpose::STANDARD
            .decode(point.payload.as_deref().unwrap_or_default())
            .map_err(|_| corrupt(&String::from_utf8_lossy(&row)))?;
        Ok(Some((point.version, value)))
    }

    /// The cluster's aliases as this node has applied them, and the row's version (0: none
    /// yet), which [`Self::store_aliases`] expects.
    pub fn aliases(&self) -> Result<(u64, BTreeMap<String, String>)> {
        let row = MetaRow::aliases();
        let Some(point) = self.consistent(|| Ok(self.meta_store.get(&row)?))? else {
            return Ok((0, BTreeMap::new()));
        };
        let aliases = serde_json::from_str(point.payload.as_deref().unwrap_or_default())
            .map_err(|_| corrupt("aliases"))?;
        Ok((point.version, aliases))
    }

    /// Writes metadata row `key` with `payload` if it is still at `version` (0: absent),
    /// decided at apply time; [`Applied::held`] says whether it was.
    async fn put_row_if(&self, key: Vec<u8>, version: u64, payload: String) -> Result<Applied> {
        self.meta
            .propose(
                PartitionCommand::UpsertIf {
                    expect: vec![(key.clone(), version)],
                    rows: vec![Row {
                        key,
                        vector: Vec::new(),
                        payload: Some(payload),
                    }],
                },
                META_WRITE_TIMEOUT,
            )
            .await
            .map_err(|e| ServerError::Unavailable(e.to_string()))
    }

    /// Replaces the cluster's aliases with `aliases` if the row is still at `version`;
    /// returns whether it was (false: another change came first, read again). Waits until
    /// this node has applied the change, so its next read sees it.
    pub async fn store_aliases(
        &self,
        version: u64,
        aliases: &BTreeMap<String, String>,
    ) -> Result<bool> {
        let key = MetaRow::aliases();
        let applied = self.put_row_if(key, version, to_json(aliases)?).await?;
        self.wait_meta(applied.index).await?;
        Ok(applied.held)
    }

    /// The version of record `key` of collection `name` (0: absent).
    pub fn record_version(&self, name: &str, key: &str) -> Result<u64> {
        let row = MetaRow::record(name, key);
        Ok(self
            .consistent(|| Ok(self.meta_store.get(&row)?))?
            .map_or(0, |point| point.version))
    }

    /// Stores record `key` of collection `name`, if `epoch` is still the collection's writer
    /// epoch (compare-and-set on the writer row, so a writer that was replaced stores
    /// nothing); returns once this node has applied it.
    pub async fn put_record(&self, name: &str, key: &str, value: &[u8], epoch: u64) -> Result<()> {
        use base64::Engine as _;
        let applied = self
            .meta
            .propose(
                PartitionCommand::UpsertIf {
                    expect: vec![(MetaRow::writer(name), epoch)],
                    rows: vec![Row {
                        key: MetaRow::record(name, key),
                        vector: Vec::new(),
                        payload: Some(base64::engine::general_purpose::STANDARD.encode(value)),
                    }],
                },
                META_WRITE_TIMEOUT,
            )
            .await
            .map_err(|e| ServerError::Unavailable(e.to_string()))?;
        if !applied.held {
            return Err(ServerError::Unavailable(format!(
                "this node no longer writes collection `{name}` (its epoch {epoch} was \
                 replaced); retry"
            )));
        }
        self.wait_meta(applied.index).await
    }

    /// This node's epoch as the writer of partitioned collection `name`, or `None` when
    /// another node writes it. The writer is the metadata group's leader: the group has
    /// already chosen one node, and any node finds it there. A leader that does not hold the
    /// writer row at epoch `known` takes it (compare-and-set), and the entry's index is its
    /// new epoch.
    pub async fn claim_writer(&self, name: &str, known: u64) -> Result<Option<u64>> {
        if self.meta.status().role != Role::Leader {
            return Ok(None);
        }
        let key = MetaRow::writer(name);
        let current = self.consistent(|| Ok(self.meta_store.get(&key)?))?;
        let version = current.as_ref().map_or(0, |point| point.version);
        let holder = current
            .and_then(|point| serde_json::from_str::<WriterRow>(point.payload.as_deref()?).ok())
            .map(|row| row.node);
        if known != 0 && version == known && holder == Some(self.id) {
            return Ok(Some(known));
        }
        let applied = self
            .put_row_if(key, version, to_json(&WriterRow { node: self.id })?)
            .await?;
        if !applied.held {
            return Err(ServerError::Unavailable(format!(
                "another node took the writing of collection `{name}` meanwhile; retry"
            )));
        }
        self.wait_meta(applied.index).await?;
        tracing::info!(
            collection = name,
            epoch = applied.index,
            "this node writes the collection"
        );
        Ok(Some(applied.index))
    }

    /// The metadata group's leader, as this node knows it.
    pub fn meta_leader(&self) -> Option<u64> {
        self.meta.status().leader
    }

    /// Replaces partition `partition`'s placement with `next` if the row is still at
    /// `current.version`; returns whether it was (false: another edit came first, read again).
    /// Waits until this node has applied the edit, so its next read sees it.
    pub async fn edit_placement(
        &self,
        name: &str,
        partition: usize,
        current: &Placement,
        next: &Placement,
    ) -> Result<bool> {
        let key = MetaRow::placement(name, partition);
        let payload = to_json(next)?;
        let applied = self.put_row_if(key, current.version, payload).await?;
        self.wait_meta(applied.index).await?;
        Ok(applied.held)
    }

    /// Makes `edit` to partition `partition` of collection `name` (a cluster operation of
    /// `POST /collections/{c}/cluster`). Returns once the edit is recorded; the replicas'
    /// nodes and the partition's leader carry it out (`moves.rs`).
    pub async fn plan(&self, name: &str, partition: usize, edit: Move) -> Result<()> {
        if let Move::Move { to, .. } | Move::Replicate { to } = edit {
            if !self.nodes()?.contains_key(&to) {
                return Err(ServerError::InvalidRequest(format!(
                    "node {to} is not in the cluster"
                )));
            }
        }
        for _ in 0..PLAN_ATTEMPTS {
            let current = self.placement(name, partition)?.ok_or_else(|| {
                ServerError::InvalidRequest(format!(
                    "collection `{name}` has no partition (shard) {partition}"
                ))
            })?;
            let next = current
                .with(edit)
                .map_err(|e| ServerError::InvalidRequest(e.to_string()))?;
            if self
                .edit_placement(name, partition, &current, &next)
                .await?
            {
                tracing::info!(collection = name, partition, ?edit, "replica move planned");
                return Ok(());
            }
            // Another edit came first: read again.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ServerError::Unavailable(format!(
            "the placement of `{name}` partition {partition} kept changing under this edit; try again"
        )))
    }

    /// The moves under way in collection `name`, in the shape of Qdrant's `shard_transfers`:
    /// for each partition with a replica not yet opened or not yet removed, where it goes
    /// (`to`) and which replica leaves (`from`; for a replication, a replica that stays).
    pub fn transfers(&self, name: &str) -> Result<Vec<serde_json::Value>> {
        let Some((_, record)) = self.collections()?.remove(name) else {
            return Ok(Vec::new());
        };
        let mut transfers = Vec::new();
        for (shard_id, placement) in record.placement.iter().enumerate() {
            if placement.moving().is_none() {
                continue;
            }
            let incoming = placement
                .replicas
                .iter()
                .find(|r| r.state == placement::ReplicaState::New);
            let leaving = placement
                .replicas
                .iter()
                .find(|r| r.state == placement::ReplicaState::Leaving);
            let from = leaving.or_else(|| {
                placement
                    .replicas
                    .iter()
                    .find(|r| r.state == placement::ReplicaState::Live)
            });
            transfers.push(serde_json::json!({
                "shard_id": shard_id,
                "from": from.map(|r| r.node),
                "to": incoming.map(|r| r.node),
                "sync": true,
                "method": "raft",
                "comment": match (incoming, leaving) {
                    (Some(_), Some(_)) => "moving: the new replica joins its group, then the old one leaves",
                    (Some(_), None) => "replicating: the new replica joins its group",
                    _ => "the leaving replica is removed from its group",
                },
            }));
        }
        Ok(transfers)
    }

    /// Partition `partition`'s placement in collection `name` as this node has applied it.
    pub fn placement(&self, name: &str, partition: usize) -> Result<Option<Placement>> {
        let key = MetaRow::placement(name, partition);
        let Some(point) = self.consistent(|| Ok(self.meta_store.get(&key)?))? else {
            return Ok(None);
        };
        let mut placement: Placement =
            serde_json::from_str(point.payload.as_deref().unwrap_or_default())
                .map_err(|_| corrupt(&String::from_utf8_lossy(&key)))?;
        placement.version = point.version;
        Ok(Some(placement))
    }

    /// Rows whose key starts with `prefix`: (the rest of the key, version, payload).
    fn rows(&self, prefix: &str) -> Result<Vec<(String, u64, Option<String>)>> {
        self.consistent(|| {
            let mut rows = Vec::new();
            for row in self.meta_store.scan_meta()? {
                let row = row?;
                if let Some(rest) = row.key.strip_prefix(prefix.as_bytes()) {
                    rows.push((
                        String::from_utf8_lossy(rest).into_owned(),
                        row.version,
                        row.payload,
                    ));
                }
            }
            Ok(rows)
        })
    }

    /// Runs `read` on the metadata store where no snapshot install overlapped it (see
    /// [`Installs`]). Never waits (callers run on async workers): during an install it
    /// answers Unavailable, and the caller's next pass reads again.
    fn consistent<T>(&self, read: impl Fn() -> Result<T>) -> Result<T> {
        use std::sync::atomic::Ordering;
        for _ in 0..3 {
            let before = self.installs.generation.load(Ordering::Acquire);
            if before.is_multiple_of(2) {
                let value = read()?;
                if self.installs.generation.load(Ordering::Acquire) == before {
                    return Ok(value);
                }
            }
        }
        Err(ServerError::Unavailable(
            "this node's copy of the cluster's metadata is being replaced by a snapshot".into(),
        ))
    }

    /// A node's record in the metadata as this node has applied it, if any.
    pub fn node_record(&self, id: u64) -> Option<NodeRecord> {
        let point = self
            .consistent(|| Ok(self.meta_store.get(&MetaRow::node(id))?))
            .ok()
            .flatten()?;
        serde_json::from_str(point.payload.as_deref()?).ok()
    }

    /// The groups this node hosts, for the internal API to dispatch to.
    pub fn groups(&self) -> Arc<Groups> {
        self.groups.clone()
    }

    /// The cluster as `GET /cluster` reports it.
    pub fn status(&self) -> ClusterStatus {
        let group = self.meta.status();
        let removed = self.removed().unwrap_or_default();
        let peers = group
            .members
            .iter()
            .map(|(id, _)| {
                let record = self.node_record(*id);
                let uri = record
                    .as_ref()
                    .and_then(|r| r.internal_uri.clone())
                    .or_else(|| self.peers.get(id).cloned())
                    .unwrap_or_default();
                let api_uri = record.map(|r| r.api_uri);
                let removing = removed.contains(id);
                (
                    id.to_string(),
                    Peer {
                        uri,
                        api_uri,
                        removing,
                    },
                )
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
    /// Whether the node is being removed (its replicas move away, then it leaves).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub removing: bool,
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

fn to_json<T: Serialize>(value: &T) -> Result<String> {
    serde_json::to_string(value).map_err(|e| ServerError::Internal(e.to_string()))
}

fn corrupt(key: &str) -> ServerError {
    ServerError::Internal(format!("metadata row `{key}` does not parse"))
}
