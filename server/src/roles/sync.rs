//! A peer node's catalog follows the cluster's metadata: a collection recorded there is opened
//! here (its replica joins the partition's group), one removed there is closed and its files
//! go. Whichever node took the create or delete request, every node converges on the same
//! collections. Then each open collection's partitions are settled on their placements
//! (replicas opened, replaced or removed as they move: `node::host`), a partitioned
//! collection this node does not write reads the routing its writer stored, and the aliases
//! are read again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::Transport;

use crate::catalog::{AliasBook, Catalog};
use crate::http::peer::PeerClient;
use crate::node::host::NodeHost;
use crate::node::{CollectionRecord, Node};

/// The aliases of a cluster's node: one row of the cluster's metadata, changed by
/// compare-and-set (`Node::store_aliases`) and read again by every node each pass.
pub struct ClusterAliases(pub Arc<Node>);

impl AliasBook for ClusterAliases {
    fn load(&self) -> crate::error::Result<(u64, BTreeMap<String, String>)> {
        self.0.aliases()
    }

    /// Called on blocking threads (the catalog's alias changes and deletes).
    fn store(
        &self,
        version: u64,
        aliases: &BTreeMap<String, String>,
    ) -> crate::error::Result<bool> {
        tokio::runtime::Handle::current().block_on(self.0.store_aliases(version, aliases))
    }
}

/// The collections in the metadata, by name, with their uids.
type Recorded = BTreeMap<String, (u64, CollectionRecord)>;

/// How often the catalog is compared with the metadata.
const EVERY: Duration = Duration::from_millis(200);

/// Keeps `catalog`, `host` and the address book of `peers` in step with `node`'s metadata
/// until the process ends.
pub fn spawn<T: Transport>(
    node: Arc<Node>,
    host: Arc<NodeHost<T>>,
    peers: Arc<PeerClient>,
    catalog: Arc<Catalog>,
) {
    tokio::spawn(async move {
        // The uid each open collection had when this loop saw it open.
        let mut seen: HashMap<String, u64> = HashMap::new();
        loop {
            // The metadata is read once a pass, off the async workers (RocksDB scans).
            let read = {
                let node = node.clone();
                crate::http::blocking(move || Ok((node.addresses(), node.collections()?))).await
            };
            match read {
                Ok((addresses, recorded)) => {
                    peers.learn(&addresses);
                    if let Err(e) = step(&recorded, &catalog, &mut seen).await {
                        tracing::warn!(error = %e, "catalog does not follow the cluster's metadata yet");
                    }
                    let follow = catalog.clone();
                    if let Err(e) = crate::http::blocking(move || follow.follow_aliases()).await {
                        tracing::warn!(error = %e, "aliases do not follow the cluster's metadata yet");
                    }
                    if let Err(e) = host.follow(&recorded).await {
                        tracing::warn!(error = %e, "replicas do not follow their placements yet");
                    }
                    let catalog = catalog.clone();
                    let routed = crate::http::blocking(move || {
                        for name in catalog.names() {
                            if let Ok(collection) = catalog.get(&name) {
                                collection.follow_routing()?;
                            }
                        }
                        Ok(())
                    });
                    if let Err(e) = routed.await {
                        tracing::warn!(error = %e, "a collection's routing could not be read");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "the cluster's metadata cannot be read yet"),
            }
            tokio::time::sleep(EVERY).await;
        }
    });
}

async fn step(
    recorded: &Recorded,
    catalog: &Arc<Catalog>,
    seen: &mut HashMap<String, u64>,
) -> crate::error::Result<()> {
    let open = catalog.names();
    for name in &open {
        match recorded.get(name) {
            // Removed from the metadata (by any node): close it here.
            None => {
                seen.remove(name);
                let (catalog, name) = (catalog.clone(), name.clone());
                crate::http::blocking(move || catalog.delete(&name)).await?;
            }
            Some((uid, _)) => {
                let known = *seen.entry(name.clone()).or_insert(*uid);
                if known != *uid {
                    // Deleted and created again under the same name: a new collection.
                    seen.remove(name);
                    let (catalog, name) = (catalog.clone(), name.clone());
                    crate::http::blocking(move || catalog.delete(&name)).await?;
                }
            }
        }
    }
    for (name, (uid, record)) in recorded {
        if catalog.get(name).is_ok() {
            continue;
        }
        let (catalog, settings, label) = (catalog.clone(), record.settings.clone(), name.clone());
        crate::http::blocking(move || catalog.adopt(&label, &settings)).await?;
        seen.insert(name.clone(), *uid);
    }
    Ok(())
}
