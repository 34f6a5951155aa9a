//! Where a node keeps collections: in the cluster's metadata, with each partition's replicas
//! on the nodes its placement names, each replica a member of the partition's Raft group.
//!
//! Creating a collection records it in the metadata (through the metadata group's leader,
//! from whichever node took the request); every node's catalog then opens it from the
//! metadata (`roles::sync`), and a node named in a partition's placement opens its replica
//! there. The first replica of each partition creates the partition's group.
//!
//! A node without a replica of a partition serves it through a node that has one
//! (`remote.rs`). For now (#22, step 6 in progress) collections are of one partition: a
//! partitioned one needs its routing table in the metadata.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;

use cairn_consensus::{GroupId, LogPolicy, ReplicaAddr, Transport};
use cairn_index::Trainers;
use cairn_storage::{PartitionStore, StoreOptions};

use super::partition::ReplicatedPartition;
use super::remote::{ForwardedPartition, PartitionCalls};
use super::replica::PartitionReplica;
use super::{CollectionRecord, Node};
use crate::collection::local::partition_dir;
use crate::collection::{MetaStore, Opened, PartitionHandle, PartitionHost};
use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::request::CollectionSettings;

/// The host of a node (see the module docs).
pub struct NodeHost<T: Transport> {
    node: Arc<Node>,
    transport: Arc<T>,
    calls: Arc<dyn PartitionCalls>,
    storage: StorageConfig,
    trainers: Trainers,
    log: LogPolicy,
    /// The uid of each collection opened here, so a release removes from the metadata only
    /// the collection it opened, never one created since under the same name.
    opened: Mutex<HashMap<String, u64>>,
}

impl<T: Transport> NodeHost<T> {
    /// The host of `node`, whose replicas reach their peers over `transport`.
    pub fn new(
        node: Arc<Node>,
        transport: Arc<T>,
        calls: Arc<dyn PartitionCalls>,
        storage: StorageConfig,
        trainers: Trainers,
        log: LogPolicy,
    ) -> Self {
        Self {
            node,
            transport,
            calls,
            storage,
            trainers,
            log,
            opened: Mutex::new(HashMap::new()),
        }
    }
}

fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    // Host methods run on blocking threads of the runtime (the catalog's callers).
    tokio::runtime::Handle::current().block_on(work)
}

impl<T: Transport> NodeHost<T> {
    /// Picks the nodes of each partition's replicas: `replication_factor` distinct nodes,
    /// starting at a place that depends on the name, so collections spread over the nodes.
    fn placement(&self, name: &str, settings: &CollectionSettings) -> Result<Vec<Vec<u64>>> {
        let nodes: Vec<u64> = self.node.nodes()?.into_keys().collect();
        let r = settings.replication_factor;
        if r > nodes.len() {
            return Err(ServerError::InvalidRequest(format!(
                "replication_factor {r} needs {r} nodes; the cluster has {}",
                nodes.len()
            )));
        }
        let start = name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b.into()));
        Ok((0..settings.partitions())
            .map(|p| {
                (0..r)
                    .map(|k| nodes[(start + p + k) % nodes.len()])
                    .collect()
            })
            .collect())
    }
}

impl<T: Transport> PartitionHost for NodeHost<T> {
    fn check(&self, settings: &CollectionSettings) -> Result<()> {
        if settings.routing.is_some() {
            return Err(ServerError::InvalidRequest(
                "partitioned collections are not yet served by `cluster.role = \"node\"` (their \
                 routing tables move into the cluster's metadata next, issue #22)"
                    .into(),
            ));
        }
        let nodes = self.node.nodes()?.len();
        if settings.replication_factor > nodes {
            return Err(ServerError::InvalidRequest(format!(
                "replication_factor {} needs as many nodes; the cluster has {nodes}",
                settings.replication_factor
            )));
        }
        Ok(())
    }

    fn create(&self, name: &str, dir: &Path, settings: &CollectionSettings) -> Result<()> {
        // A node adopting a collection another node created finds it in the metadata already.
        let existing = self.node.collections()?.remove(name);
        if existing
            .as_ref()
            .is_none_or(|(_, r)| r.settings != *settings)
        {
            let record = CollectionRecord {
                settings: settings.clone(),
                placement: self.placement(name, settings)?,
            };
            let index = block_on(self.node.put_collection(name, &record))?;
            block_on(self.node.wait_meta(index))?;
        }
        fs_err::create_dir_all(dir).map_err(|e| ServerError::Internal(e.to_string()))?;
        Ok(())
    }

    fn open(&self, name: &str, dir: &Path) -> Result<Opened> {
        let (uid, record) = self.node.collections()?.remove(name).ok_or_else(|| {
            ServerError::Unavailable(format!(
                "collection `{name}` is not in the cluster's metadata (deleted while this node \
                 was away?)"
            ))
        })?;
        let mut partitions: Vec<Arc<dyn PartitionHandle>> = Vec::new();
        for (p, nodes) in record.placement.iter().enumerate() {
            let group = GroupId::Partition {
                collection: uid,
                partition: u32::try_from(p).unwrap_or(u32::MAX),
            };
            let Some(k) = nodes.iter().position(|n| *n == self.node.id()) else {
                partitions.push(Arc::new(ForwardedPartition::new(
                    group,
                    nodes.clone(),
                    self.calls.clone(),
                )));
                continue;
            };
            let label = if p == 0 {
                name.to_owned()
            } else {
                format!("{name}/p{p}")
            };
            let replica = block_on(PartitionReplica::open(
                group,
                (k + 1) as u64,
                self.log,
                &label,
                &partition_dir(dir, p),
                record.settings.clone(),
                self.storage,
                &self.trainers,
                self.transport.clone(),
                self.node.groups(),
            ))?;
            if k == 0 {
                let voters: BTreeMap<u64, ReplicaAddr> = nodes
                    .iter()
                    .enumerate()
                    .map(|(j, node)| ((j + 1) as u64, ReplicaAddr { node: *node }))
                    .collect();
                block_on(replica.initialize(voters))?;
            }
            let handle = Arc::new(ReplicatedPartition::new(Arc::new(replica)));
            self.node.add_replica(group, handle.clone());
            partitions.push(handle);
        }
        // Routing and moves records: none for a collection of one partition, but the
        // collection keeps them somewhere; a small store of this node's own.
        let meta = PartitionStore::open(&dir.join("meta"), StoreOptions::default())?;
        self.opened.lock().insert(name.to_owned(), uid);
        Ok(Opened {
            settings: record.settings,
            partitions,
            meta: MetaStore::Store(meta),
        })
    }

    fn open_at_start(&self, name: &str, dir: &Path) -> Result<Option<Opened>> {
        if self.node.collections()?.contains_key(name) {
            self.open(name, dir).map(Some)
        } else {
            Ok(None)
        }
    }

    fn release(&self, name: &str, settings: &CollectionSettings) {
        // The catalog has closed the replicas. The record goes if it is still the one opened
        // here: not when another node's delete already removed it and this node follows, nor
        // when the name now belongs to a collection created since.
        let Some(uid) = self.opened.lock().remove(name) else {
            return;
        };
        for p in 0..settings.partitions() {
            self.node.remove_replica(GroupId::Partition {
                collection: uid,
                partition: u32::try_from(p).unwrap_or(u32::MAX),
            });
        }
        if let Ok(collections) = self.node.collections() {
            if collections
                .get(name)
                .is_some_and(|(current, _)| *current == uid)
            {
                if let Err(e) = block_on(self.node.remove_collection(name)) {
                    tracing::warn!(collection = name, error = %e, "could not remove the collection from the metadata");
                }
            }
        }
    }
}
