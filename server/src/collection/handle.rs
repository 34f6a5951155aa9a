//! The one seam between a collection and where its partitions live. Routing, the move
//! protocol, training and merging are written once, against [`PartitionHandle`]; a
//! partition in this process implements it (`local.rs`), and so do a replicated partition's
//! replicas on this node and on others (`crate::node`, which this module never names).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use cairn_api::internal::{
    NewPoint, PartitionCall, PartitionState, PayloadSelection, ScrollPlan, SearchPlan,
};
use std::collections::BTreeMap;

use serde_json::Value;

use cairn_api::{
    Filter, PayloadIndexInfo, PayloadSchemaType, PointId, QueryResponse, Record, ReplicaInfo,
};

use crate::error::{Result, ServerError};
use crate::partition::{LoadReport, Partition};

/// A future a handle returns (the trait is used as `dyn`, so it cannot have `async fn`s).
pub type HandleFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// How a read was served (reported by `explain`).
#[derive(Debug, Clone, Default)]
pub struct ReadTrace {
    /// Node that answered.
    pub node: String,
    /// Whether a hedge was sent.
    pub hedged: bool,
}

/// Whether a partition can serve, as collection info and `/metrics` report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PartitionHealth {
    /// Every copy serves.
    Healthy,
    /// Some copy is down or catching up; at least one serves.
    UnderReplicated,
    /// No copy serves: reads are partial, writes fail.
    Unavailable,
}

/// A partition of a collection, wherever it lives. Blocking calls run on blocking threads.
pub trait PartitionHandle: Send + Sync {
    /// Commits points; returns their sequence number. Remote writes return once applied.
    ///
    /// `fence` is the writer epoch of a collection whose partitions are replicated and
    /// written by one node at a time (0: none): a replicated partition refuses a write whose
    /// epoch is below one it has applied (`cairn_consensus::PartitionCommand::Fenced`). A
    /// partition in this process has one writer by construction and ignores it.
    fn upsert(&self, points: Vec<NewPoint>, fence: u64) -> Result<u64>;

    /// Commits a delete (`fence` as for [`Self::upsert`]).
    fn delete(&self, ids: Vec<PointId>, fence: u64) -> Result<u64>;

    /// Deletes those of `ids` the partition holds (`None`: it held none, nothing written).
    fn delete_present(&self, ids: &[PointId], fence: u64) -> Result<Option<u64>>;

    /// Which of `ids` it holds (committed state).
    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>>;

    /// Committed values of `ids`.
    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>>;

    /// Committed values of `ids`, each with its version (the sequence number of the write
    /// that stored it), which [`Self::upsert_if`] expects.
    fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>>;

    /// Commits `points` only if every id of `expect` is still at its version (0: absent)
    /// when the write is applied; `None`, nothing written, when another write came between.
    /// The write of a read-modify-write on a partition that more than one node writes (one
    /// replicated partition: any node writes it). Every such change is idempotent (setting a
    /// payload, removing a vector), so a write retried elsewhere after a lost answer that
    /// finds its own first attempt applied is simply read and made again.
    fn upsert_if(&self, points: Vec<NewPoint>, expect: Vec<(PointId, u64)>) -> Result<Option<u64>>;

    /// Ids of every committed point.
    fn stored_ids(&self) -> Result<Vec<PointId>>;

    /// About `n` committed vectors, uniformly drawn.
    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>>;

    /// Last committed sequence number (remote: as of this node's last write or probe).
    fn last_seq(&self) -> u64;

    /// Blocks until `seq` is searchable (remote writes already are when they return).
    fn wait_applied_blocking(&self, seq: u64) -> Result<()>;

    /// Resolves once `seq` is searchable.
    fn wait_applied(&self, seq: u64) -> HandleFuture<'_, ()>;

    /// Counters of the partition.
    fn state(&self) -> Result<PartitionState>;

    /// The position in the partition's log that a linearizable read must see applied: in a
    /// cluster, the leader's commit index once a quorum has confirmed it still leads (Raft's
    /// ReadIndex); for a partition in this process, its last write.
    fn read_index(&self) -> Result<u64>;

    /// What serves reads that must see the partition's log at least up to `floor` (a write's
    /// position, or a read index): this handle once its copy has applied that far, or another
    /// copy that has. `floor` 0 is any copy: the handle itself, at no cost.
    fn at_least(self: Arc<Self>, floor: u64) -> Result<Arc<dyn PartitionHandle>>;

    /// Indexes payload `key` as `kind` from now on (`None`: drops its index) on every copy of
    /// the partition; returns the sequence number to wait for before the index serves (0: it
    /// serves already).
    fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<u64>;

    /// The payload indexes and the live points each holds.
    fn payload_indexes(&self) -> Result<BTreeMap<String, PayloadIndexInfo>>;

    /// The values of `key`'s payload index, each with the live points holding it that pass
    /// `filter` (the parts of a facet).
    fn facet(&self, key: &str, filter: Option<&Filter>) -> Result<Vec<(Value, Vec<PointId>)>>;

    /// The type of `key`'s payload index, if it has one (a partition in this process reads
    /// its schema alone, without counting the indexed points).
    fn payload_index_type(&self, key: &str) -> Result<Option<PayloadSchemaType>> {
        Ok(self.payload_indexes()?.get(key).map(|info| info.data_type))
    }

    /// Live points (0 when a remote partition cannot be asked).
    fn points(&self) -> usize {
        self.state().map_or(0, |s| s.points as usize)
    }

    /// A k-NN search and, for a remote partition, which replica answered and whether a
    /// hedge was sent (`hedge`: straggler mitigation on).
    fn search(&self, plan: &SearchPlan, hedge: bool) -> Result<(QueryResponse, Option<ReadTrace>)>;

    /// Whether a search waits on the network (the partition's replicas are on other nodes):
    /// then [`Self::search_async`] awaits it on the runtime, rather than blocking a thread on
    /// a call whose every step is another thread's wake-up.
    fn searches_remotely(&self) -> bool {
        false
    }

    /// The search as a future, with how it was served (here: the blocking search, for
    /// handles that search in place).
    fn search_async<'a>(
        &'a self,
        plan: &'a SearchPlan,
        hedge: bool,
    ) -> HandleFuture<'a, (QueryResponse, Option<ReadTrace>)> {
        Box::pin(async move { self.search(plan, hedge) })
    }

    /// A scroll page and the next offset.
    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)>;

    /// Points passing `filter`.
    fn count(&self, filter: Option<&Filter>) -> Result<u64>;

    /// Ids passing `filter`, in id order.
    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>>;

    /// The points with these ids that exist, in request order.
    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>>;

    /// The partition in this process, if it is one (not replicated).
    fn local(&self) -> Option<&Partition> {
        None
    }

    /// How a local partition's index came back at start-up (`None`: it loads elsewhere).
    fn load_report(&self) -> Option<LoadReport> {
        self.local().map(|p| p.load_report().clone())
    }

    /// Index searches run in this process and their total seconds (none for a remote
    /// partition: its searches run on its nodes).
    fn local_search_time(&self) -> (u64, f64) {
        self.local().map_or((0, 0.0), Partition::search_time)
    }

    /// Whether `plan` may run on an async worker (never for a remote call).
    fn is_short(&self, plan: &SearchPlan) -> bool {
        self.local().is_some_and(|p| p.is_short(plan))
    }

    /// Whether the partition can serve.
    fn health(&self) -> PartitionHealth {
        PartitionHealth::Healthy
    }

    /// Each copy's state, for collection info (`None`: one local copy).
    fn replica_info(&self) -> Option<Vec<ReplicaInfo>> {
        None
    }

    /// Stops a local partition's applier after a final snapshot.
    fn close(&self) {
        if let Some(p) = self.local() {
            p.close();
        }
    }
}

/// An answer encoded for the internal wire (`cairn_api::internal::encode`).
pub fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>> {
    cairn_api::internal::encode(value).map_err(|e| ServerError::Internal(e.to_string()))
}

/// Serves a call another node sent for a partition this node holds (blocking); the answer
/// encoded for the wire. A write answers once it is searchable on the partition that served
/// it.
pub fn serve_call(p: &dyn PartitionHandle, call: PartitionCall) -> Result<Vec<u8>> {
    match call {
        PartitionCall::Upsert { points, fence } => {
            let seq = p.upsert(points, fence)?;
            p.wait_applied_blocking(seq)?;
            encode(&seq)
        }
        PartitionCall::Delete { ids, fence } => {
            let seq = p.delete(ids, fence)?;
            p.wait_applied_blocking(seq)?;
            encode(&seq)
        }
        PartitionCall::DeletePresent { ids, fence } => {
            let seq = p.delete_present(&ids, fence)?;
            if let Some(seq) = seq {
                p.wait_applied_blocking(seq)?;
            }
            encode(&seq)
        }
        PartitionCall::Holds { ids } => encode(&p.holds(&ids)?),
        PartitionCall::Stored { ids } => encode(&p.stored(&ids)?),
        PartitionCall::StoredVersions { ids } => encode(&p.stored_versions(&ids)?),
        PartitionCall::UpsertIf { points, expect } => {
            let seq = p.upsert_if(points, expect)?;
            if let Some(seq) = seq {
                p.wait_applied_blocking(seq)?;
            }
            encode(&seq)
        }
        PartitionCall::Ids => encode(&p.stored_ids()?),
        PartitionCall::Sample { n, seed } => encode(&p.sample(n, seed)?),
        PartitionCall::State => encode(&p.state()?),
        PartitionCall::Query { plan } => encode(&p.search(&plan, false)?.0),
        PartitionCall::Scroll { plan } => encode(&p.scroll(&plan)?),
        PartitionCall::Count { filter } => encode(&p.count(filter.as_ref())?),
        PartitionCall::Matching { filter } => encode(&p.matching_ids(filter.as_ref())?),
        PartitionCall::Get {
            ids,
            with_payload,
            with_vector,
        } => encode(&p.get_points(&ids, &with_payload, with_vector)?),
        PartitionCall::ReadIndex => encode(&p.read_index()?),
        PartitionCall::PayloadIndex { key, kind } => {
            let seq = p.set_payload_index(&key, kind)?;
            p.wait_applied_blocking(seq)?;
            encode(&seq)
        }
        PartitionCall::PayloadIndexes => encode(&p.payload_indexes()?),
        PartitionCall::Facet { key, filter } => encode(&p.facet(&key, filter.as_ref())?),
    }
}
