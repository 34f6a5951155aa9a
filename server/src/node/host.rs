//! Where a node keeps collections: in the cluster's metadata, with each partition's replicas
//! on the nodes its placement names, each replica a member of the partition's Raft group.
//!
//! Creating a collection records it in the metadata (through the metadata group's leader,
//! from whichever node took the request); every node's catalog then opens it from the
//! metadata (`roles::sync`), and a node named in a partition's placement opens its replica
//! there. The founding replica of each partition creates the partition's group.
//!
//! A node without a replica of a partition serves it through a node that has one
//! (`remote.rs`). Replicas move (`placement.rs`, `moves.rs`): each pass of the catalog's
//! follower settles every partition here on its placement, opening, replacing or removing
//! this node's replica and swapping what serves the partition (`slot.rs`). A partitioned
//! collection keeps its routing and moves records in the metadata too, and one node writes it
//! (`records.rs`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use cairn_consensus::{GroupId, LogPolicy, ReplicaAddr, ReplicaId, Transport};
use cairn_index::Trainers;

use super::moves;
use super::partition::ReplicatedPartition;
use super::placement::{Placement, ReplicaState};
use super::records::NodeRecords;
use super::remote::{ForwardedPartition, PartitionCalls};
use super::replica::PartitionReplica;
use super::slot::Slot;
use super::{CollectionRecord, Node};
use crate::collection::local::partition_dir;
use crate::collection::{MetaStore, Opened, PartitionHandle, PartitionHost};
use crate::config::StorageConfig;
use crate::error::{Result, ServerError};
use crate::partition::paths;
use crate::request::CollectionSettings;

/// The host of a node (see the module docs).
pub struct NodeHost<T: Transport> {
    node: Arc<Node>,
    transport: Arc<T>,
    calls: Arc<dyn PartitionCalls>,
    storage: StorageConfig,
    trainers: Trainers,
    log: LogPolicy,
    /// The collections open here (with the uid each had when opened, so a release removes
    /// from the metadata only the collection it opened, never one created since under the
    /// same name).
    opened: Mutex<HashMap<String, Arc<OpenCollection>>>,
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
    fn placement(&self, name: &str, settings: &CollectionSettings) -> Result<Vec<Placement>> {
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
                let chosen: Vec<u64> = (0..r)
                    .map(|k| nodes[(start + p + k) % nodes.len()])
                    .collect();
                Placement::new(&chosen)
            })
            .collect())
    }

    /// Makes partition `p` of `collection` on this node match `placement`: opens the replica
    /// placed here (recording first that it was opened, or asking for a new one when its files
    /// are gone), closes and deletes one no longer placed, and otherwise serves through the
    /// nodes that hold the partition. Returns at the first metadata edit; the next pass goes
    /// on from the new placement.
    async fn settle(
        &self,
        collection: &OpenCollection,
        p: usize,
        placement: &Placement,
    ) -> Result<()> {
        let slot = &collection.slots[p];
        let group = collection.group(p);
        let mut serving = slot.serving.lock().await;
        if let Serving::Here(here) = &*serving {
            if placement.get(here.replica.id()).is_some() {
                return Ok(());
            }
        }
        if let Serving::Here(here) = std::mem::replace(&mut *serving, Serving::Away(Vec::new())) {
            // Removed from the placement: the group no longer counts it. Calls go elsewhere
            // first; those in flight finish on the old handle.
            here.mover.abort();
            self.node.remove_replica(group);
            slot.handle.set(self.forwarded(group, placement));
            *serving = Serving::Away(placement.nodes());
            here.replica.close().await;
            tracing::info!(
                collection = collection.name,
                partition = p,
                replica = here.replica.id(),
                "replica removed from this node"
            );
            let dir = replica_dir(&collection.dir, p, here.replica.id());
            off_workers(move || remove_dir(&dir)).await?;
        }
        // The replica placed here; or one leaving whose files are here (after a restart): it
        // still votes until the group lets it go.
        let me = self.node.id();
        let mine = placement.on(me).or_else(|| {
            placement.replicas.iter().find(|r| {
                r.node == me
                    && r.state == ReplicaState::Leaving
                    && paths::db(&replica_dir(&collection.dir, p, r.id)).is_dir()
            })
        });
        let Some(mine) = mine.cloned() else {
            let nodes = placement.nodes();
            if !matches!(&*serving, Serving::Away(away) if *away == nodes) {
                slot.handle.set(self.forwarded(group, placement));
                *serving = Serving::Away(nodes);
                // Once per change, not every pass: folders a removal left behind.
                let partition = partition_dir(&collection.dir, p);
                off_workers(move || sweep(&partition, None)).await?;
            }
            return Ok(());
        };
        let dir = replica_dir(&collection.dir, p, mine.id);
        match mine.state {
            ReplicaState::New => {
                // Recorded before any file exists, so that from now on a missing folder
                // means lost files.
                let opened = placement.opened(mine.id);
                if !self
                    .node
                    .edit_placement(&collection.name, p, placement, &opened)
                    .await?
                {
                    return Ok(());
                }
            }
            ReplicaState::Live if !paths::db(&dir).is_dir() => {
                tracing::warn!(
                    collection = collection.name,
                    partition = p,
                    replica = mine.id,
                    "this node's replica lost its files; asking for a new one"
                );
                let replaced = placement.replaced(mine.id);
                self.node
                    .edit_placement(&collection.name, p, placement, &replaced)
                    .await?;
                return Ok(());
            }
            ReplicaState::Live | ReplicaState::Leaving => {}
        }
        let (partition, keep) = (partition_dir(&collection.dir, p), mine.id);
        off_workers(move || sweep(&partition, Some(keep))).await?;
        let label = if p == 0 {
            collection.name.clone()
        } else {
            format!("{}/p{p}", collection.name)
        };
        let replica = PartitionReplica::open(
            group,
            mine.id,
            self.log,
            &label,
            &dir,
            collection.settings.clone(),
            self.storage,
            &self.trainers,
            self.transport.clone(),
            self.node.groups(),
        )
        .await?;
        if mine.id == placement.founder {
            let voters: BTreeMap<ReplicaId, ReplicaAddr> = placement
                .replicas
                .iter()
                .filter(|r| r.state != ReplicaState::Leaving)
                .map(|r| (r.id, ReplicaAddr { node: r.node }))
                .collect();
            replica.initialize(voters).await?;
        }
        let replica = Arc::new(replica);
        self.node.add_replica(
            group,
            Arc::new(ReplicatedPartition::new(replica.clone(), None)),
        );
        let elsewhere = self.forwarded(group, &placement.without(self.node.id()));
        slot.handle.set(Arc::new(ReplicatedPartition::new(
            replica.clone(),
            Some(elsewhere),
        )));
        let mover = moves::spawn(
            self.node.clone(),
            replica.clone(),
            collection.name.clone(),
            p,
        );
        *serving = Serving::Here(Here { replica, mover });
        Ok(())
    }

    /// A handle that serves `group` through the nodes of `placement`.
    fn forwarded(&self, group: GroupId, placement: &Placement) -> Arc<dyn PartitionHandle> {
        Arc::new(ForwardedPartition::new(
            group,
            placement.nodes(),
            self.calls.clone(),
        ))
    }

    /// Makes every collection open here match its placements in `recorded`, the metadata's
    /// collections (the catalog's follower calls this after opening and closing collections,
    /// with the metadata it read for that pass).
    pub async fn follow(&self, recorded: &BTreeMap<String, (u64, CollectionRecord)>) -> Result<()> {
        let open: Vec<Arc<OpenCollection>> = self.opened.lock().values().cloned().collect();
        for collection in open {
            let Some((uid, record)) = recorded.get(&collection.name) else {
                continue;
            };
            if *uid != collection.uid {
                continue;
            }
            for (p, placement) in record.placement.iter().enumerate() {
                if let Err(e) = self.settle(&collection, p, placement).await {
                    tracing::warn!(collection = collection.name, partition = p, error = %e, "a replica is not where it is placed yet");
                }
            }
        }
        Ok(())
    }
}

impl<T: Transport> PartitionHost for NodeHost<T> {
    fn check(&self, settings: &CollectionSettings) -> Result<()> {
        // Raft commits a write once a majority of the replicas hold it; a larger factor makes
        // the leader wait for that many (`Group::propose_held_by`). More than there are
        // replicas could never be met.
        if settings.write_consistency_factor > settings.replication_factor {
            return Err(ServerError::InvalidRequest(format!(
                "write_consistency_factor {} is above replication_factor {}: a write can be \
                 held by at most every replica",
                settings.write_consistency_factor, settings.replication_factor
            )));
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
            if existing.is_some() {
                block_on(self.node.remove_collection(name))?;
            }
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
        let collection = Arc::new(OpenCollection {
            uid,
            name: name.to_owned(),
            dir: dir.to_path_buf(),
            settings: record.settings.clone(),
            slots: (0..record.placement.len())
                .map(|p| PartitionSlot {
                    handle: Arc::new(Slot::new(self.forwarded(
                        GroupId::Partition {
                            collection: uid,
                            partition: u32::try_from(p).unwrap_or(u32::MAX),
                        },
                        &record.placement[p],
                    ))),
                    // Nothing yet: the first pass settles it (and sweeps leftover folders).
                    serving: tokio::sync::Mutex::new(Serving::Away(Vec::new())),
                })
                .collect(),
        });
        for (p, placement) in record.placement.iter().enumerate() {
            // A replica that cannot be placed yet (the metadata edit timed out) is served
            // through the other nodes meanwhile; the follower tries again.
            if let Err(e) = block_on(self.settle(&collection, p, placement)) {
                tracing::warn!(collection = name, partition = p, error = %e, "a replica is not where it is placed yet");
            }
        }
        let partitions = collection
            .slots
            .iter()
            .map(|slot| slot.handle.clone() as Arc<dyn PartitionHandle>)
            .collect();
        // Routing and moves records (a collection of one partition has none) in the metadata.
        let records = NodeRecords::new(self.node.clone(), name, self.calls.clone());
        self.opened.lock().insert(name.to_owned(), collection);
        Ok(Opened {
            settings: record.settings,
            partitions,
            meta: MetaStore::Shared(Arc::new(records)),
        })
    }

    fn open_at_start(&self, name: &str, dir: &Path) -> Result<Option<Opened>> {
        if self.node.collections()?.contains_key(name) {
            self.open(name, dir).map(Some)
        } else {
            Ok(None)
        }
    }

    fn release(&self, name: &str, _settings: &CollectionSettings) {
        // The catalog has closed the replicas. The record goes if it is still the one opened
        // here: not when another node's delete already removed it and this node follows, nor
        // when the name now belongs to a collection created since.
        let Some(collection) = self.opened.lock().remove(name) else {
            return;
        };
        for (p, slot) in collection.slots.iter().enumerate() {
            if let Serving::Here(here) = &*block_on(slot.serving.lock()) {
                here.mover.abort();
            }
            self.node.remove_replica(collection.group(p));
        }
        if let Ok(collections) = self.node.collections() {
            if collections
                .get(name)
                .is_some_and(|(current, _)| *current == collection.uid)
            {
                if let Err(e) = block_on(self.node.remove_collection(name)) {
                    tracing::warn!(collection = name, error = %e, "could not remove the collection from the metadata");
                }
            }
        }
    }
}

/// A collection open on this node.
struct OpenCollection {
    uid: u64,
    name: String,
    dir: PathBuf,
    settings: CollectionSettings,
    slots: Vec<PartitionSlot>,
}

impl OpenCollection {
    fn group(&self, p: usize) -> GroupId {
        GroupId::Partition {
            collection: self.uid,
            partition: u32::try_from(p).unwrap_or(u32::MAX),
        }
    }
}

/// One partition of an open collection: the handle the collection calls, and what serves it
/// (locked while a pass settles it).
struct PartitionSlot {
    handle: Arc<Slot>,
    serving: tokio::sync::Mutex<Serving>,
}

/// What serves a partition on this node.
enum Serving {
    /// A replica here.
    Here(Here),
    /// The replicas on these nodes.
    Away(Vec<u64>),
}

/// The replica of a partition on this node, and its membership loop.
struct Here {
    replica: Arc<PartitionReplica>,
    mover: tokio::task::JoinHandle<()>,
}

/// Where replica `id` of partition `p` keeps its files: a folder per replica id, so a replica
/// placed here again later never opens the files of an earlier one.
fn replica_dir(collection: &Path, p: usize, id: ReplicaId) -> PathBuf {
    partition_dir(collection, p).join(format!("r{id}"))
}

/// Deletes the replica folders under `partition` other than `keep`'s: left by a replica whose
/// removal was interrupted.
fn sweep(partition: &Path, keep: Option<ReplicaId>) -> Result<()> {
    let Ok(entries) = fs_err::read_dir(partition) else {
        return Ok(());
    };
    let keep = keep.map(|id| format!("r{id}"));
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('r') && Some(&name) != keep.as_ref() {
            remove_dir(&entry.path())?;
        }
    }
    Ok(())
}

/// Runs file work (removing a replica's folder, gigabytes perhaps) on a blocking thread: the
/// passes that settle replicas run on the async workers, beside every group's heartbeats.
async fn off_workers(work: impl FnOnce() -> Result<()> + Send + 'static) -> Result<()> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ServerError::Internal(format!("file work: {e}")))?
}

fn remove_dir(dir: &Path) -> Result<()> {
    match fs_err::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ServerError::Internal(e.to_string())),
    }
}
