//! What a `cairn` process runs, by `cluster.role`:
//!
//! - `standalone`: the REST API over local collections, partitions included;
//! - `router`: the same REST API, with each collection's routing here and its partitions'
//!   replicas on the shard nodes of `cluster.shards` (`crate::cluster`);
//! - `shard`: local partitions for a router, behind `/internal/partitions/…`, besides the
//!   REST API (useful for looking at a shard directly).
//!
//! All three share one start-up and shutdown sequence ([`serve`]).

pub mod serve;

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::config::Config;

/// Runs the configured role until SIGINT or SIGTERM.
pub async fn run(config: Config) -> anyhow::Result<()> {
    match config.cluster.role.as_str() {
        "router" => {
            let cluster = tokio::task::spawn_blocking({
                let c = config.cluster.clone();
                move || {
                    Cluster::new(
                        &c.shards,
                        Duration::from_millis(c.request_timeout_ms),
                        Duration::from_millis(c.write_timeout_ms),
                        Duration::from_millis(c.probe_interval_ms),
                    )
                }
            })
            .await??;
            serve::serve(config, Some(Arc::new(cluster)), false).await
        }
        "shard" => serve::serve(config, None, true).await,
        _ => serve::serve(config, None, false).await,
    }
}
