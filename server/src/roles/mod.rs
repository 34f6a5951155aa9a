//! What a `cairn` process runs, by `cluster.role` ([`Role`]):
//!
//! - `standalone`: the REST API over local collections, partitions included;
//! - `node`: a peer of the Raft-replicated cluster (`crate::node`): the metadata group over an
//!   internal port of its own, collections from the metadata with each partition's replicas
//!   in a Raft group (`sync.rs` keeps the catalog in step).
//!
//! This is where the layers are wired: a role picks where partitions live (a
//! [`PartitionHost`]) and how nodes are reached, and both share one start-up and shutdown
//! sequence ([`serve`]).

pub mod serve;
mod sync;

use std::sync::Arc;

use cairn_index::Trainers;

use crate::collection::local::LocalHost;
use crate::collection::PartitionHost;
use crate::config::{Config, Role};
use crate::http::peer::{Faults, PeerClient};
use crate::node::host::NodeHost;
use crate::node::Node;

/// How a role wires the server.
pub struct Wiring {
    /// Where partitions live.
    pub host: Arc<dyn PartitionHost>,
    /// What meta-indexes and quantized indexes train with (FAISS).
    pub trainers: Trainers,
    /// A peer node, whose internal API gets a listener of its own.
    pub node: Option<Arc<Node>>,
    /// A peer node's host, which the catalog's follower settles on the placements.
    pub node_host: Option<Arc<NodeHost<PeerClient>>>,
    /// A peer node's client of the other nodes, whose address book follows the metadata.
    pub peer_client: Option<Arc<PeerClient>>,
    /// A peer node's links cut on purpose (tests only).
    pub faults: Arc<Faults>,
}

/// Runs the configured role until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    let trainers = cairn_faiss::trainers();
    let local = LocalHost {
        storage: config.storage,
        trainers: trainers.clone(),
    };
    let mut node = None;
    let mut node_host = None;
    let mut peer_client = None;
    let mut faults = Faults::new(false);
    let host: Arc<dyn PartitionHost> = match config.cluster.role {
        Role::Standalone => Arc::new(local),
        Role::Node => {
            faults = Faults::new(config.cluster.fault_injection);
            let peers = Arc::new(PeerClient::new(&config.cluster, faults.clone())?);
            let started =
                Node::start(&config.cluster, &config.node.data_dir, peers.clone()).await?;
            node = Some(started.clone());
            peer_client = Some(peers.clone());
            let host = Arc::new(NodeHost::new(
                started,
                peers.clone(),
                peers,
                config.storage,
                trainers.clone(),
                config.cluster.log_policy(),
            ));
            node_host = Some(host.clone());
            host
        }
    };
    let wiring = Wiring {
        host,
        trainers,
        node,
        node_host,
        peer_client,
        faults,
    };
    serve::serve(config, wiring).await
}

/// `cairn restore`: recovers every collection and alias of a full-storage snapshot into the
/// configured data folder of a standalone server that is not running (blocking), then stops.
/// Each collection replaces the one of its name; others stay.
pub fn restore_storage(config: &Config, snapshot: &std::path::Path) -> anyhow::Result<()> {
    use anyhow::Context;
    if config.cluster.role != Role::Standalone {
        anyhow::bail!(
            "a full-storage snapshot is restored into a standalone server's data folder; a \
             cluster's nodes take their replicas from each other"
        );
    }
    let trainers = cairn_faiss::trainers();
    let host = Arc::new(LocalHost {
        storage: config.storage,
        trainers: trainers.clone(),
    });
    let catalog = crate::catalog::Catalog::open(
        &config.node.data_dir,
        &config.node.snapshots(),
        config.limits,
        trainers,
        host,
        None,
    )
    .context("cannot open the data folder")?;
    catalog
        .recover_full(snapshot)
        .with_context(|| format!("cannot restore {}", snapshot.display()))?;
    tracing::info!(collections = catalog.names().len(), "restored");
    catalog.close_all();
    Ok(())
}
