//! How a node reaches another node: the calls of the internal wire, as a trait, so that the
//! cluster's logic (placement, replica choice, hedging, catch-up) names no HTTP type. The
//! implementation over HTTP lives with the rest of HTTP (`crate::http::client`), and is
//! handed in by `roles`.

use cairn_api::internal::PartitionCall;

use crate::error::ServerError;
use crate::request::CollectionSettings;

/// Why one replica's call failed: the replica's fault (fail over) or the request's (do not).
#[derive(Debug)]
pub enum CallError {
    /// The node did not answer, timed out, failed (5xx) or answered nonsense.
    Replica(String),
    /// The node refused the request itself (4xx): every replica would.
    Request(ServerError),
}

/// The internal wire, one blocking call at a time (called from blocking threads only).
pub trait Transport: Send + Sync {
    /// Runs `call` on partition `partition` of the node at `node`; the answer's `result` as
    /// JSON. Calls that are not latency-sensitive
    /// ([`PartitionCall::is_latency_sensitive`]) get the longer write timeout.
    fn call(
        &self,
        node: &str,
        partition: &str,
        call: &PartitionCall,
    ) -> Result<serde_json::Value, CallError>;

    /// Creates a partition on a node (idempotent: the same settings again is not an error).
    fn create(
        &self,
        node: &str,
        partition: &str,
        settings: &CollectionSettings,
    ) -> Result<(), ServerError>;

    /// Drops a partition from a node (a partition that is not there is not an error).
    fn drop_partition(&self, node: &str, partition: &str) -> Result<(), ServerError>;

    /// Whether the node answers its readiness probe.
    fn is_ready(&self, node: &str) -> bool;
}
