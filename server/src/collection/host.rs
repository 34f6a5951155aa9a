//! Where a collection's partitions are created, opened and released: in this process
//! ([`super::local::LocalHost`]) or as replicas on other nodes (the cluster's host). The
//! catalog holds one host and never asks which kind it is.

use std::path::Path;
use std::sync::Arc;

use super::handle::PartitionHandle;
use crate::error::Result;
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

    /// Releases what a deleted collection holds outside its folder (best effort: remote
    /// replicas on nodes that are down stay as orphans an operator can drop).
    fn release(&self, name: &str, settings: &CollectionSettings);
}

/// Where a collection keeps its routing and moves records: partition 0's RocksDB when the
/// partitions are local, a small RocksDB of its own when they are remote.
pub enum MetaStore {
    /// Partition 0's `meta` family.
    Partition(Arc<Partition>),
    /// A store of the collection's own.
    Store(cairn_storage::PartitionStore),
}

impl MetaStore {
    /// A value.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self {
            Self::Partition(p) => p.get_meta(key),
            Self::Store(s) => Ok(s.get_meta(key)?),
        }
    }

    /// Stores a value durably.
    pub fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        match self {
            Self::Partition(p) => p.put_meta(key, value),
            Self::Store(s) => Ok(s.put_meta(key, value)?),
        }
    }
}
