//! Where a collection's partitions are created, opened and released: in this process
//! ([`super::local::LocalHost`]) or as replicas on other nodes (the cluster's host). The
//! catalog holds one host and never asks which kind it is.

use std::path::Path;
use std::sync::Arc;

use cairn_api::internal::{CollectionWrite, WriteReceipt};

use super::handle::PartitionHandle;
use crate::error::Result;
use crate::partition::export::PartitionFiles;
use crate::partition::Partition;
use crate::request::CollectionSettings;

/// A collection's partitions, opened, and where its own records live.
pub struct Opened {
    /// The settings it was created with.
    pub settings: CollectionSettings,
    /// Its partitions, in order.
    pub partitions: Vec<Arc<dyn PartitionHandle>>,
    /// Where its routing and moves records live.
    pub meta: MetaStore,
}

/// Creates, opens and releases the partitions of collections.
pub trait PartitionHost: Send + Sync {
    /// Refuses settings this host cannot honour (replicas without a cluster, more replicas
    /// than nodes).
    fn check(&self, settings: &CollectionSettings) -> Result<()>;

    /// Creates a new collection's partitions, and its settings record in `dir`, an empty
    /// staging folder that the catalog renames into place afterwards (blocking).
    fn create(&self, name: &str, dir: &Path, settings: &CollectionSettings) -> Result<()>;

    /// Opens a collection from its folder (blocking: loads local indexes).
    fn open(&self, name: &str, dir: &Path) -> Result<Opened>;

    /// Opens a collection found on disk at start-up, or `None` when this host does not serve
    /// it now and leaves the folder be (a peer node whose cluster no longer lists it).
    fn open_at_start(&self, name: &str, dir: &Path) -> Result<Option<Opened>> {
        self.open(name, dir).map(Some)
    }

    /// Makes a collection folder `dir` (an empty staging folder, as for [`Self::create`]) from
    /// an unpacked snapshot in `from` (blocking). Standalone only: a cluster's replicas take
    /// state from each other through Raft, so a peer node refuses.
    fn restore(&self, dir: &Path, from: &Path, partitions: &[PartitionFiles]) -> Result<()> {
        let _ = (dir, from, partitions);
        Err(crate::error::ServerError::InvalidRequest(
            "snapshots are recovered on standalone servers only for now: a cluster's replicas \
             take state from each other through Raft"
                .into(),
        ))
    }

    /// Releases what a deleted collection holds outside its folder (best effort: remote
    /// replicas on nodes that are down stay as orphans an operator can drop).
    fn release(&self, name: &str, settings: &CollectionSettings);
}

/// Where a collection keeps its routing and moves records: partition 0's RocksDB when the
/// partitions are local, the cluster's metadata on peer nodes.
pub enum MetaStore {
    /// Partition 0's `meta` family.
    Partition(Arc<Partition>),
    /// Records every node of a cluster shares, written by one node at a time.
    Shared(Arc<dyn SharedRecords>),
}

/// A collection's records kept where every node of a cluster reads them, and who writes the
/// collection. A partitioned collection's writes span partitions (a point moving between
/// two, the moves record around it), so one node at a time writes it: the *writer*, which
/// holds an epoch that fences the writes of any writer before it
/// (`PartitionHandle::upsert`'s `fence`). Every other node sends its writes there.
pub trait SharedRecords: Send + Sync {
    /// A record's value as this node has it.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Stores a record, provided this node is still the writer at the epoch it last held
    /// (otherwise an error, and nothing is stored); returns once this node reads it back.
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Something that changes whenever record `key` does (0: absent), so a node that does
    /// not write the collection can tell when to read its routing again.
    fn stamp(&self, key: &str) -> Result<u64>;

    /// This node's epoch as the collection's writer, taken now if `known` is not it (the
    /// previous writer is fenced from then on); `None` while another node writes it.
    fn writer(&self, known: u64) -> Result<Option<u64>>;

    /// Has the collection's writer make `write`, and answers what it made of it, once the
    /// write is searchable on the writer's replicas.
    fn forward(&self, write: &CollectionWrite) -> Result<WriteReceipt>;
}

impl MetaStore {
    /// A value.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Self::Partition(p) => p.get_meta(key),
            Self::Shared(s) => s.get(key),
        }
    }

    /// Stores a value durably.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        match self {
            Self::Partition(p) => p.put_meta(key, value),
            Self::Shared(s) => s.put(key, value),
        }
    }
}
