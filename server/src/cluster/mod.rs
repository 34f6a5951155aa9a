//! The cluster: a router process holding each partitioned collection's routing, and shard
//! processes holding the partitions' replicas (`remote.rs`), spoken to with one JSON call per
//! partition operation (`rpc.rs`). The router probes the shard nodes and brings replicas that
//! missed writes back (`health.rs`).
//!
//! Placement: partition `i`'s `R` replicas live on shard nodes `i, i + 1, …, i + R − 1`
//! (mod the node count), so replicas of one partition are always on distinct nodes and every
//! node holds about `w·R / n` of them.

pub mod health;
pub mod remote;
pub mod rpc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Result, ServerError};

/// A shard node as the router knows it.
pub struct Node {
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

/// The shard nodes of a router and the client it reaches them with.
pub struct Cluster {
    /// The nodes, in configuration order.
    pub nodes: Vec<Arc<Node>>,
    /// Blocking HTTP client for partition calls (used from blocking threads only).
    pub http: reqwest::blocking::Client,
    /// How often nodes are probed.
    pub probe_interval: Duration,
    /// Timeout of writes and bulk reads.
    pub slow_timeout: Duration,
    /// Deadline of a read a query waits on (every attempt and hedge included).
    pub read_deadline: Duration,
}

impl Cluster {
    /// A cluster over `urls`.
    pub fn new(
        urls: &[String],
        request_timeout: Duration,
        slow_timeout: Duration,
        probe_interval: Duration,
    ) -> Result<Self> {
        let http = reqwest::blocking::Client::builder()
            .timeout(request_timeout)
            .connect_timeout(Duration::from_millis(500))
            .build()
            .map_err(|e| ServerError::Internal(format!("http client: {e}")))?;
        Ok(Self {
            nodes: urls
                .iter()
                .map(|u| {
                    Arc::new(Node {
                        url: u.trim_end_matches('/').to_owned(),
                        alive: AtomicBool::new(true),
                    })
                })
                .collect(),
            http,
            probe_interval,
            slow_timeout,
            read_deadline: request_timeout,
        })
    }

    /// Nodes holding partition `i`'s `replicas` copies (see the module docs).
    pub fn placement(&self, i: usize, replicas: usize) -> Result<Vec<Arc<Node>>> {
        let n = self.nodes.len();
        if replicas == 0 || replicas > n {
            return Err(ServerError::InvalidRequest(format!(
                "replication_factor {replicas} needs between 1 and {n} shard nodes (the cluster has {n})"
            )));
        }
        Ok((0..replicas)
            .map(|r| self.nodes[(i + r) % n].clone())
            .collect())
    }

    /// The shard-side name of partition `i` of `collection`.
    pub fn partition_name(collection: &str, i: usize) -> String {
        format!("{collection}.p{i}")
    }

    /// Creates (`PUT`) or drops (`DELETE`) a partition on one node.
    pub fn admin(
        &self,
        node: &Node,
        method: reqwest::Method,
        name: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<()> {
        let url = format!("{}/internal/partitions/{name}", node.url);
        let mut request = self.http.request(method, &url).timeout(self.slow_timeout);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .map_err(|e| ServerError::Unavailable(format!("{url}: {e}")))?;
        let status = response.status();
        if status.is_success() || status == reqwest::StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(ServerError::Unavailable(format!(
                "{url}: {status} {}",
                response.text().unwrap_or_default()
            )))
        }
    }

    /// One probe of every node's `/readyz`.
    pub fn probe(&self) {
        for node in &self.nodes {
            let alive = self
                .http
                .get(format!("{}/readyz", node.url))
                .timeout(Duration::from_millis(500))
                .send()
                .is_ok_and(|r| r.status().is_success());
            node.set_alive(alive);
        }
    }
}
