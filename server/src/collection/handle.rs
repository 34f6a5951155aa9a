//! The one seam between a collection and where its partitions live: in this process
//! (`Local`), or as replicas on shard nodes (`Remote`, see `crate::cluster`). Routing, the
//! move protocol, training and merging are written once, against these calls.

use std::sync::Arc;

use cairn_api::{Filter, PointId, QueryResponse, Record};

use crate::cluster::remote::{ReadTrace, RemotePartition};
use crate::cluster::rpc::{PartitionCall, PartitionState};
use crate::error::Result;
use crate::partition::{NewPoint, Partition, PayloadSelection, QueryPlan, ScrollPlan};

/// A partition of a collection, wherever it lives.
#[derive(Clone)]
pub enum PartitionHandle {
    /// In this process.
    Local(Arc<Partition>),
    /// Replicated on shard nodes.
    Remote(Arc<RemotePartition>),
}

impl PartitionHandle {
    /// The local partition, if it is one.
    pub fn local(&self) -> Option<&Arc<Partition>> {
        match self {
            Self::Local(p) => Some(p),
            Self::Remote(_) => None,
        }
    }

    /// Commits points; returns their sequence number. Remote writes return once applied.
    pub fn upsert(&self, points: Vec<NewPoint>) -> Result<u64> {
        match self {
            Self::Local(p) => p.upsert_blocking(points),
            Self::Remote(r) => r.write(&PartitionCall::Upsert { points }),
        }
    }

    /// Commits a delete.
    pub fn delete(&self, ids: Vec<PointId>) -> Result<u64> {
        match self {
            Self::Local(p) => p.delete_blocking(ids),
            Self::Remote(r) => r.write(&PartitionCall::Delete { ids }),
        }
    }

    /// Deletes those of `ids` the partition holds (`None`: it held none, nothing written).
    pub fn delete_present(&self, ids: &[PointId]) -> Result<Option<u64>> {
        match self {
            Self::Local(p) => p.delete_present_blocking(ids),
            Self::Remote(r) => r.write(&PartitionCall::DeletePresent { ids: ids.to_vec() }),
        }
    }

    /// Which of `ids` it holds (committed state).
    pub fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        match self {
            Self::Local(p) => p.holds(ids),
            Self::Remote(r) => r.read(&PartitionCall::Holds { ids: ids.to_vec() }),
        }
    }

    /// Committed values of `ids`.
    pub fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        match self {
            Self::Local(p) => p.stored(ids),
            Self::Remote(r) => r.read(&PartitionCall::Stored { ids: ids.to_vec() }),
        }
    }

    /// Ids of every committed point.
    pub fn stored_ids(&self) -> Result<Vec<PointId>> {
        match self {
            Self::Local(p) => p.stored_ids(),
            Self::Remote(r) => r.read(&PartitionCall::Ids),
        }
    }

    /// About `n` committed vectors, uniformly drawn.
    pub fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        match self {
            Self::Local(p) => p.sample(n, seed),
            Self::Remote(r) => r.read(&PartitionCall::Sample { n, seed }),
        }
    }

    /// Last committed sequence number (remote: as of this router's last write or probe).
    pub fn last_seq(&self) -> u64 {
        match self {
            Self::Local(p) => p.last_seq(),
            Self::Remote(r) => r.last_seq(),
        }
    }

    /// Blocks until `seq` is searchable (remote writes already are when they return).
    pub fn wait_applied_blocking(&self, seq: u64) -> Result<()> {
        match self {
            Self::Local(p) => p.wait_applied_blocking(seq),
            Self::Remote(_) => Ok(()),
        }
    }

    /// Resolves once `seq` is searchable.
    pub async fn wait_applied(&self, seq: u64) -> Result<()> {
        match self {
            Self::Local(p) => p.wait_applied(seq).await,
            Self::Remote(_) => Ok(()),
        }
    }

    /// Counters of the partition.
    pub fn state(&self) -> Result<PartitionState> {
        match self {
            Self::Local(p) => Ok(PartitionState::of(p)),
            Self::Remote(r) => r.read(&PartitionCall::State),
        }
    }

    /// Live points (0 when a remote partition cannot be asked).
    pub fn points(&self) -> usize {
        match self {
            Self::Local(p) => p.points(),
            Self::Remote(_) => self.state().map_or(0, |s| s.points as usize),
        }
    }

    /// Index searches run in this process and their total seconds (none for a remote
    /// partition: its searches run on its shard).
    pub fn local_search_time(&self) -> (u64, f64) {
        match self {
            Self::Local(p) => p.search_time(),
            Self::Remote(_) => (0, 0.0),
        }
    }

    /// Whether `plan` may run on an async worker (never for a remote call).
    pub fn is_short(&self, plan: &QueryPlan) -> bool {
        match self {
            Self::Local(p) => p.is_short(plan),
            Self::Remote(_) => false,
        }
    }

    /// A k-NN query.
    pub fn query(&self, plan: &QueryPlan) -> Result<QueryResponse> {
        self.query_traced(plan).map(|(answer, _)| answer)
    }

    /// A k-NN query and, for a remote partition, which replica answered and whether a hedge
    /// was sent.
    pub fn query_traced(&self, plan: &QueryPlan) -> Result<(QueryResponse, Option<ReadTrace>)> {
        match self {
            Self::Local(p) => Ok((p.query_blocking(plan)?, None)),
            Self::Remote(r) => r
                .read_traced(&PartitionCall::Query { plan: plan.clone() }, plan.hedge)
                .map(|(answer, trace)| (answer, Some(trace))),
        }
    }

    /// A scroll page and the next offset.
    pub fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        match self {
            Self::Local(p) => Ok(p.scroll_blocking(plan)),
            Self::Remote(r) => r.read(&PartitionCall::Scroll { plan: plan.clone() }),
        }
    }

    /// Points passing `filter`.
    pub fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        match self {
            Self::Local(p) => Ok(p.count_blocking(filter)),
            Self::Remote(r) => r.read(&PartitionCall::Count {
                filter: filter.cloned(),
            }),
        }
    }

    /// Ids passing `filter`, in id order.
    pub fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        match self {
            Self::Local(p) => Ok(p.matching_ids(filter)),
            Self::Remote(r) => r.read(&PartitionCall::Matching {
                filter: filter.cloned(),
            }),
        }
    }

    /// The points with these ids that exist, in request order.
    pub fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        match self {
            Self::Local(p) => Ok(p.get_points(ids, with_payload, with_vector)),
            Self::Remote(r) => r.read(&PartitionCall::Get {
                ids: ids.to_vec(),
                with_payload: with_payload.clone(),
                with_vector,
            }),
        }
    }

    /// Stops a local partition's applier after a final snapshot.
    pub fn close(&self) {
        if let Self::Local(p) = self {
            p.close();
        }
    }
}

/// Where a collection keeps its routing and moves records: partition 0's RocksDB when the
/// partitions are local, the router's own small RocksDB when they are remote.
pub enum MetaStore {
    /// Partition 0's `meta` family.
    Partition(Arc<Partition>),
    /// A store of the router's.
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
