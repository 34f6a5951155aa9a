//! The router ↔ shard protocol: one JSON call per partition operation, posted to
//! `/internal/partitions/{name}` on a shard node, where `name` is the shard-side partition
//! (`{collection}.p{i}`). The shard runs it against its local partition ([`dispatch`]).

use cairn_api::{Filter, PointId};
use serde::{Deserialize, Serialize};

use crate::error::{Result, ServerError};
use crate::partition::{NewPoint, OplogItem, Partition, PayloadSelection, QueryPlan, ScrollPlan};

/// One operation on a shard's partition.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum PartitionCall {
    /// Upsert points; answers the sequence number once searchable.
    Upsert {
        /// The points.
        points: Vec<NewPoint>,
    },
    /// Delete ids; answers the sequence number once applied.
    Delete {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Delete the ids the partition holds; answers the sequence number or null.
    DeletePresent {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Which ids the partition holds.
    Holds {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Committed values of ids.
    Stored {
        /// The ids.
        ids: Vec<PointId>,
    },
    /// Every id.
    Ids,
    /// A uniform sample of vectors.
    Sample {
        /// How many.
        n: usize,
        /// Sampling seed.
        seed: u64,
    },
    /// Counters.
    State,
    /// A k-NN query.
    Query {
        /// The plan.
        plan: QueryPlan,
    },
    /// A scroll page.
    Scroll {
        /// The plan.
        plan: ScrollPlan,
    },
    /// Points passing a filter.
    Count {
        /// The filter.
        filter: Option<Filter>,
    },
    /// Ids passing a filter.
    Matching {
        /// The filter.
        filter: Option<Filter>,
    },
    /// Points by id.
    Get {
        /// The ids.
        ids: Vec<PointId>,
        /// Payload selection.
        with_payload: PayloadSelection,
        /// Whether to include vectors.
        with_vector: bool,
    },
    /// Op-log entries after a sequence number, with current values.
    OplogAfter {
        /// Exclusive start.
        after: u64,
        /// Most entries.
        limit: usize,
    },
    /// Apply a peer's op-log entries (catch-up).
    Apply {
        /// The entries.
        items: Vec<OplogItem>,
    },
}

impl PartitionCall {
    /// Whether a slow answer means a sick replica (reads a query waits on: failed over after
    /// `cluster.request_timeout_ms`), as opposed to work that is slow by nature (writes wait
    /// for the index, which may be rebuilding; bulk reads of a whole partition), which gets
    /// `cluster.write_timeout_ms`.
    pub fn is_latency_sensitive(&self) -> bool {
        matches!(
            self,
            Self::Query { .. }
                | Self::Scroll { .. }
                | Self::Get { .. }
                | Self::Count { .. }
                | Self::Holds { .. }
                | Self::State
        )
    }
}

/// A partition's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Last committed sequence number.
    pub last_seq: u64,
    /// Last sequence number searchable.
    pub applied_seq: u64,
    /// Live points.
    pub points: u64,
    /// Index slots, live and dead.
    pub index_slots: u64,
    /// Dead index slots.
    pub dead_slots: u64,
    /// Bytes the index holds.
    pub index_memory_bytes: u64,
}

impl PartitionState {
    /// The counters of a local partition.
    pub fn of(p: &Partition) -> Self {
        let slots = p.slot_stats();
        Self {
            last_seq: p.last_seq(),
            applied_seq: p.applied_seq(),
            points: p.points() as u64,
            index_slots: slots.index_slots,
            dead_slots: slots.dead_slots,
            index_memory_bytes: p.index_memory_bytes() as u64,
        }
    }
}

fn json<T: Serialize>(value: T) -> Result<serde_json::Value> {
    serde_json::to_value(value).map_err(|e| ServerError::Internal(e.to_string()))
}

/// Runs `call` against a shard's local partition (blocking); the answer as JSON.
pub fn dispatch(p: &Partition, call: PartitionCall) -> Result<serde_json::Value> {
    match call {
        PartitionCall::Upsert { points } => {
            let seq = p.upsert_blocking(points)?;
            p.wait_applied_blocking(seq)?;
            json(seq)
        }
        PartitionCall::Delete { ids } => {
            let seq = p.delete_blocking(ids)?;
            p.wait_applied_blocking(seq)?;
            json(seq)
        }
        PartitionCall::DeletePresent { ids } => {
            let seq = p.delete_present_blocking(&ids)?;
            if let Some(seq) = seq {
                p.wait_applied_blocking(seq)?;
            }
            json(seq)
        }
        PartitionCall::Holds { ids } => json(p.holds(&ids)?),
        PartitionCall::Stored { ids } => json(p.stored(&ids)?),
        PartitionCall::Ids => json(p.stored_ids()?),
        PartitionCall::Sample { n, seed } => json(p.sample(n, seed)?),
        PartitionCall::State => json(PartitionState::of(p)),
        PartitionCall::Query { plan } => json(p.query_blocking(&plan)?),
        PartitionCall::Scroll { plan } => json(p.scroll_blocking(&plan)),
        PartitionCall::Count { filter } => json(p.count_blocking(filter.as_ref())),
        PartitionCall::Matching { filter } => json(p.matching_ids(filter.as_ref())),
        PartitionCall::Get {
            ids,
            with_payload,
            with_vector,
        } => json(p.get_points(&ids, &with_payload, with_vector)),
        PartitionCall::OplogAfter { after, limit } => json(p.oplog_after(after, limit)?),
        PartitionCall::Apply { items } => json(p.apply_oplog(items)?),
    }
}
