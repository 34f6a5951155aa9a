//! The cluster: a router process holding each collection's routing, and shard nodes holding
//! the partitions' replicas. Everything about remote replicas lives here: the nodes and
//! placement (this file), a partition as its replicas ([`remote::RemotePartition`], which
//! implements the collection's `PartitionHandle` seam), the prober that routes around dead
//! nodes and catches replicas up ([`health`]), creating and dropping partitions on nodes
//! ([`host::ClusterHost`], the catalog's `PartitionHost`), and the shard's side of the
//! internal wire ([`shard`]). Nodes are reached through a [`transport::Transport`].
//!
//! Placement: partition `i`'s `R` replicas live on shard nodes `i, i + 1, …, i + R − 1`
//! (mod the node count), so replicas of one partition are always on distinct nodes and every
//! node holds about `w·R / n` of them.

pub mod health;
pub mod host;
pub mod remote;
pub mod shard;
pub mod transport;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::collection::PartitionId;
use crate::error::{Result, ServerError};
use remote::RemotePartition;
use transport::Transport;

/// A node's place in `cluster.shards` (stable as long as the list is: placement is computed
/// from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// A shard node as the router knows it.
pub struct Node {
    /// Its place in the configuration.
    pub id: NodeId,
    /// Base URL (`http://host:port`).
    pub url: String,
    alive: AtomicBool,
}

impl Node {
    /// Whether its last health probe answered (assumed until the first probe says otherwise).
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    fn set_alive(&self, alive: bool) {
        if self.alive.swap(alive, Ordering::AcqRel) != alive {
            tracing::info!(node = %self.url, alive, "shard node health changed");
        }
    }
}

/// The shard nodes of a router, how it reaches them, and the remote partitions it serves.
pub struct Cluster {
    /// The nodes, in configuration order.
    pub nodes: Vec<Arc<Node>>,
    /// How nodes are reached.
    pub transport: Arc<dyn Transport>,
    /// How often nodes are probed.
    pub probe_interval: Duration,
    /// Deadline of a read a query waits on (every attempt and hedge included).
    pub read_deadline: Duration,
    /// Every remote partition opened, for the prober (dropped collections fall out).
    partitions: Mutex<Vec<Weak<RemotePartition>>>,
}

impl Cluster {
    /// A cluster over `urls`.
    pub fn new(
        urls: &[String],
        transport: Arc<dyn Transport>,
        read_deadline: Duration,
        probe_interval: Duration,
    ) -> Self {
        Self {
            nodes: urls
                .iter()
                .enumerate()
                .map(|(i, u)| {
                    Arc::new(Node {
                        id: NodeId(i),
                        url: u.trim_end_matches('/').to_owned(),
                        alive: AtomicBool::new(true),
                    })
                })
                .collect(),
            transport,
            probe_interval,
            read_deadline,
            partitions: Mutex::new(Vec::new()),
        }
    }

    /// Nodes holding partition `i`'s `replicas` copies (see the module docs).
    pub fn placement(&self, i: PartitionId, replicas: usize) -> Result<Vec<Arc<Node>>> {
        let n = self.nodes.len();
        if replicas == 0 || replicas > n {
            return Err(ServerError::InvalidRequest(format!(
                "replication_factor {replicas} needs between 1 and {n} shard nodes (the cluster has {n})"
            )));
        }
        Ok((0..replicas)
            .map(|r| self.nodes[(i.0 + r) % n].clone())
            .collect())
    }

    /// The shard-side name of partition `i` of `collection`.
    pub fn partition_name(collection: &str, i: PartitionId) -> String {
        format!("{collection}.p{i}")
    }

    /// Opens partition `i` of `collection` as its replicas, and remembers it for the prober.
    pub fn open_partition(
        &self,
        collection: &str,
        i: PartitionId,
        replicas: usize,
    ) -> Result<Arc<RemotePartition>> {
        let partition = Arc::new(RemotePartition::new(
            Self::partition_name(collection, i),
            self.placement(i, replicas)?,
            self.transport.clone(),
            self.read_deadline,
        ));
        let mut all = self.partitions.lock();
        all.retain(|p| p.strong_count() > 0);
        all.push(Arc::downgrade(&partition));
        Ok(partition)
    }

    /// The remote partitions still open.
    pub fn open_partitions(&self) -> Vec<Arc<RemotePartition>> {
        self.partitions
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    /// One probe of every node's readiness.
    pub fn probe(&self) {
        for node in &self.nodes {
            node.set_alive(self.transport.is_ready(&node.url));
        }
    }
}
