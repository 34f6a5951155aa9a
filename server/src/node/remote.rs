//! [`PartitionHandle`] for a partition with no replica on this node: every call goes to a node
//! that holds one, over the internal API (`http::peer`), which serves it from that replica —
//! reads from its state, writes through the partition's group. So every node serves every
//! collection, whichever nodes its replicas are on.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use cairn_api::internal::{
    NewPoint, PartitionCall, PartitionState, PayloadSelection, ScrollPlan, SearchPlan,
};
use cairn_api::{Filter, PointId, QueryResponse, Record, ReplicaInfo};
use cairn_consensus::GroupId;
use serde::de::DeserializeOwned;

use crate::collection::{HandleFuture, PartitionHandle, ReadTrace};
use crate::error::{Result, ServerError};

/// How a node sends a partition call to another (the HTTP client of `http::peer`). It answers
/// the call's JSON result; a refusal of the request itself (a 4xx) comes back as
/// [`ServerError::Relayed`], and anything that is the other node's fault as
/// [`ServerError::Unavailable`], after which the next replica is tried.
pub trait PartitionCalls: Send + Sync {
    /// Sends `call` for `group` to node `node`, to be served from a replica that has applied
    /// the partition's log at least up to `floor` (0: as it is).
    fn call<'a>(
        &'a self,
        node: u64,
        group: GroupId,
        floor: u64,
        call: &'a PartitionCall,
    ) -> Pin<Box<dyn Future<Output = Result<serde_json::Value>> + Send + 'a>>;
}

/// A partition whose replicas are all on other nodes.
pub struct ForwardedPartition {
    group: GroupId,
    /// The nodes holding its replicas.
    nodes: Vec<u64>,
    calls: Arc<dyn PartitionCalls>,
    /// Where the next call starts, so calls spread over the replicas.
    next: AtomicUsize,
    /// The sequence number of the last write through this handle.
    last_seq: std::sync::atomic::AtomicU64,
    /// The log position a replica must have applied to serve this handle's reads (0: any).
    floor: u64,
}

impl ForwardedPartition {
    /// The handle of `group`, whose replicas are on `nodes`.
    pub fn new(group: GroupId, nodes: Vec<u64>, calls: Arc<dyn PartitionCalls>) -> Self {
        Self {
            group,
            nodes,
            calls,
            next: AtomicUsize::new(0),
            last_seq: std::sync::atomic::AtomicU64::new(0),
            floor: 0,
        }
    }

    /// Sends `call` to the replicas in turn until one answers (blocking: the collection calls
    /// on blocking threads).
    fn send<T: DeserializeOwned>(&self, call: PartitionCall) -> Result<T> {
        tokio::runtime::Handle::current().block_on(self.send_async(call))
    }

    /// [`Self::send`] for a caller on the runtime: no thread blocks on the network.
    async fn send_async<T: DeserializeOwned>(&self, call: PartitionCall) -> Result<T> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut last_error = None;
        for i in 0..self.nodes.len() {
            let node = self.nodes[(start + i) % self.nodes.len()];
            let answer = self.calls.call(node, self.group, self.floor, &call).await;
            match answer {
                Ok(value) => {
                    return serde_json::from_value(value)
                        .map_err(|e| ServerError::Internal(format!("node {node} answered {e}")))
                }
                Err(error @ ServerError::Unavailable(_)) => last_error = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ServerError::Unavailable(format!("partition {} has no replica", self.group))
        }))
    }

    fn wrote(&self, seq: u64) -> u64 {
        self.last_seq.fetch_max(seq, Ordering::Relaxed);
        seq
    }
}

impl PartitionHandle for ForwardedPartition {
    fn upsert(&self, points: Vec<NewPoint>) -> Result<u64> {
        self.send(PartitionCall::Upsert { points })
            .map(|seq| self.wrote(seq))
    }

    fn delete(&self, ids: Vec<PointId>) -> Result<u64> {
        self.send(PartitionCall::Delete { ids })
            .map(|seq| self.wrote(seq))
    }

    fn delete_present(&self, ids: &[PointId]) -> Result<Option<u64>> {
        let seq: Option<u64> = self.send(PartitionCall::DeletePresent { ids: ids.to_vec() })?;
        Ok(seq.map(|seq| self.wrote(seq)))
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        self.send(PartitionCall::Holds { ids: ids.to_vec() })
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        self.send(PartitionCall::Stored { ids: ids.to_vec() })
    }

    fn stored_ids(&self) -> Result<Vec<PointId>> {
        self.send(PartitionCall::Ids)
    }

    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        self.send(PartitionCall::Sample { n, seed })
    }

    fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Relaxed)
    }

    /// The serving replica answered a write once it was searchable there.
    fn wait_applied_blocking(&self, _seq: u64) -> Result<()> {
        Ok(())
    }

    fn wait_applied(&self, _seq: u64) -> HandleFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn state(&self) -> Result<PartitionState> {
        self.send(PartitionCall::State)
    }

    /// Any replica's node answers: it asks the group's leader.
    fn read_index(&self) -> Result<u64> {
        self.send(PartitionCall::ReadIndex)
    }

    /// The same replicas, each asked to serve only once it has applied `floor`; one still
    /// behind answers unavailable and the next is asked.
    fn at_least(self: Arc<Self>, floor: u64) -> Result<Arc<dyn PartitionHandle>> {
        if floor == 0 {
            return Ok(self);
        }
        Ok(Arc::new(Self {
            group: self.group,
            nodes: self.nodes.clone(),
            calls: self.calls.clone(),
            next: AtomicUsize::new(self.next.fetch_add(1, Ordering::Relaxed)),
            last_seq: std::sync::atomic::AtomicU64::new(self.last_seq()),
            floor,
        }))
    }

    fn search(
        &self,
        plan: &SearchPlan,
        _hedge: bool,
    ) -> Result<(QueryResponse, Option<ReadTrace>)> {
        let answer = self.send(PartitionCall::Query { plan: plan.clone() })?;
        Ok((answer, None))
    }

    fn searches_remotely(&self) -> bool {
        true
    }

    fn search_async<'a>(&'a self, plan: &'a SearchPlan) -> HandleFuture<'a, QueryResponse> {
        Box::pin(self.send_async(PartitionCall::Query { plan: plan.clone() }))
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        self.send(PartitionCall::Scroll { plan: plan.clone() })
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        self.send(PartitionCall::Count {
            filter: filter.cloned(),
        })
    }

    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        self.send(PartitionCall::Matching {
            filter: filter.cloned(),
        })
    }

    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        self.send(PartitionCall::Get {
            ids: ids.to_vec(),
            with_payload: with_payload.clone(),
            with_vector,
        })
    }

    /// Where the replicas are; how they fare only their own nodes can say.
    fn replica_info(&self) -> Option<Vec<ReplicaInfo>> {
        Some(
            self.nodes
                .iter()
                .map(|node| ReplicaInfo {
                    node: format!("node {node}"),
                    state: "unknown".into(),
                    last_seq: None,
                    points: None,
                    peer_id: Some(*node),
                    replica_id: None,
                    role: None,
                    term: None,
                    applied: None,
                    purged: None,
                })
                .collect(),
        )
    }
}
