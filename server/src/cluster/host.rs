//! The catalog's [`PartitionHost`] on a router: a collection's settings and routing records
//! stay in a small RocksDB under the collection's folder here, and its partitions' replicas
//! are created on, opened from and dropped from the shard nodes.

use std::path::Path;
use std::sync::Arc;

use cairn_storage::{PartitionStore, StoreOptions};

use super::Cluster;
use crate::collection::{MetaStore, Opened, PartitionHandle, PartitionHost, PartitionId};
use crate::error::{Result, ServerError};
use crate::request::settings::META_KEY;
use crate::request::CollectionSettings;

/// Partitions on the cluster's shard nodes.
pub struct ClusterHost {
    /// The cluster.
    pub cluster: Arc<Cluster>,
}

fn meta_store(dir: &Path) -> Result<PartitionStore> {
    Ok(PartitionStore::open(
        &dir.join("meta"),
        StoreOptions::default(),
    )?)
}

impl PartitionHost for ClusterHost {
    fn check(&self, settings: &CollectionSettings) -> Result<()> {
        if settings.write_consistency_factor > 1 {
            return Err(ServerError::InvalidRequest(format!(
                "write_consistency_factor {} is not supported by a router: a write is \
                 acknowledged once one live replica has applied it",
                settings.write_consistency_factor
            )));
        }
        self.cluster
            .placement(PartitionId(0), settings.replication_factor)
            .map(drop)
    }

    fn create(&self, name: &str, dir: &Path, settings: &CollectionSettings) -> Result<()> {
        // A shard's partition is a plain collection of one partition and one copy.
        let mut shard_settings = settings.clone();
        shard_settings.routing = None;
        shard_settings.replication_factor = 1;
        for i in (0..settings.partitions()).map(PartitionId) {
            for node in self.cluster.placement(i, settings.replication_factor)? {
                self.cluster.transport.create(
                    &node.url,
                    &Cluster::partition_name(name, i),
                    &shard_settings,
                )?;
            }
        }
        let bytes =
            serde_json::to_vec(settings).map_err(|e| ServerError::Internal(e.to_string()))?;
        meta_store(dir)?.put_meta(META_KEY, &bytes)?;
        Ok(())
    }

    fn open(&self, name: &str, dir: &Path) -> Result<Opened> {
        let store = meta_store(dir)?;
        let bytes = store
            .get_meta(META_KEY)?
            .ok_or_else(|| ServerError::Internal(format!("collection `{name}` has no settings")))?;
        let settings: CollectionSettings = serde_json::from_slice(&bytes).map_err(|e| {
            ServerError::Internal(format!("settings of `{name}` do not parse: {e}"))
        })?;
        let mut partitions: Vec<Arc<dyn PartitionHandle>> =
            Vec::with_capacity(settings.partitions());
        for i in (0..settings.partitions()).map(PartitionId) {
            let remote = self
                .cluster
                .open_partition(name, i, settings.replication_factor)?;
            // Operation ids continue from what the replicas hold.
            if let Ok(state) = PartitionHandle::state(&*remote) {
                remote.observe_seq(state.last_seq);
            }
            partitions.push(remote);
        }
        Ok(Opened {
            settings,
            partitions,
            meta: MetaStore::Store(store),
        })
    }

    fn release(&self, name: &str, settings: &CollectionSettings) {
        for i in (0..settings.partitions()).map(PartitionId) {
            let Ok(nodes) = self.cluster.placement(i, settings.replication_factor) else {
                continue;
            };
            for node in nodes {
                let partition = Cluster::partition_name(name, i);
                if let Err(e) = self.cluster.transport.drop_partition(&node.url, &partition) {
                    tracing::warn!(error = %e, "could not drop a replica");
                }
            }
        }
    }
}
