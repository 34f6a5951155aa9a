//! A partition's place in a collection on this node, whose serving handle changes as replicas
//! move: a replica here ([`super::partition::ReplicatedPartition`]) while this node holds
//! one, the nodes that hold one ([`super::remote::ForwardedPartition`]) otherwise.
//!
//! The collection keeps one [`Slot`] per partition for its whole life; a move swaps what is in
//! it (`host.rs`). A call in flight keeps the handle it started with, so a swap never cuts a
//! request short: a replica being removed serves its last calls, then closes.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_api::internal::{NewPoint, PartitionState, PayloadSelection, ScrollPlan, SearchPlan};
use cairn_api::{
    Filter, PayloadIndexInfo, PayloadSchemaType, PointId, QueryResponse, Record, ReplicaInfo,
};
use parking_lot::RwLock;

use crate::collection::{HandleFuture, PartitionHandle, PartitionHealth, ReadTrace};
use crate::error::Result;
use crate::partition::LoadReport;

/// A swappable [`PartitionHandle`] (see the module docs).
pub struct Slot {
    current: RwLock<Arc<dyn PartitionHandle>>,
}

impl Slot {
    /// A slot serving through `handle`.
    pub fn new(handle: Arc<dyn PartitionHandle>) -> Self {
        Self {
            current: RwLock::new(handle),
        }
    }

    /// What serves now.
    pub fn get(&self) -> Arc<dyn PartitionHandle> {
        self.current.read().clone()
    }

    /// Serves through `handle` from now on.
    pub fn set(&self, handle: Arc<dyn PartitionHandle>) {
        *self.current.write() = handle;
    }
}

impl PartitionHandle for Slot {
    fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<u64> {
        self.get().set_payload_index(key, kind)
    }

    fn payload_indexes(&self) -> Result<BTreeMap<String, PayloadIndexInfo>> {
        self.get().payload_indexes()
    }

    fn payload_index_type(&self, key: &str) -> Result<Option<PayloadSchemaType>> {
        self.get().payload_index_type(key)
    }

    fn facet(
        &self,
        key: &str,
        filter: Option<&Filter>,
    ) -> Result<Vec<(serde_json::Value, Vec<PointId>)>> {
        self.get().facet(key, filter)
    }

    fn upsert(&self, points: Vec<NewPoint>, fence: u64) -> Result<u64> {
        self.get().upsert(points, fence)
    }

    fn delete(&self, ids: Vec<PointId>, fence: u64) -> Result<u64> {
        self.get().delete(ids, fence)
    }

    fn delete_present(&self, ids: &[PointId], fence: u64) -> Result<Option<u64>> {
        self.get().delete_present(ids, fence)
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        self.get().holds(ids)
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        self.get().stored(ids)
    }

    fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>> {
        self.get().stored_versions(ids)
    }

    fn upsert_if(&self, points: Vec<NewPoint>, expect: Vec<(PointId, u64)>) -> Result<Option<u64>> {
        self.get().upsert_if(points, expect)
    }

    fn stored_ids(&self) -> Result<Vec<PointId>> {
        self.get().stored_ids()
    }

    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        self.get().sample(n, seed)
    }

    fn last_seq(&self) -> u64 {
        self.get().last_seq()
    }

    fn wait_applied_blocking(&self, seq: u64) -> Result<()> {
        self.get().wait_applied_blocking(seq)
    }

    fn wait_applied(&self, seq: u64) -> HandleFuture<'_, ()> {
        let handle = self.get();
        Box::pin(async move { handle.wait_applied(seq).await })
    }

    fn state(&self) -> Result<PartitionState> {
        self.get().state()
    }

    fn read_index(&self) -> Result<u64> {
        self.get().read_index()
    }

    fn searches_remotely(&self) -> bool {
        self.get().searches_remotely()
    }

    fn search_async<'a>(
        &'a self,
        plan: &'a SearchPlan,
        hedge: bool,
    ) -> HandleFuture<'a, (QueryResponse, Option<ReadTrace>)> {
        let handle = self.get();
        Box::pin(async move { handle.search_async(plan, hedge).await })
    }

    fn at_least(self: Arc<Self>, floor: u64) -> Result<Arc<dyn PartitionHandle>> {
        self.get().at_least(floor)
    }

    fn points(&self) -> usize {
        self.get().points()
    }

    fn search(&self, plan: &SearchPlan, hedge: bool) -> Result<(QueryResponse, Option<ReadTrace>)> {
        self.get().search(plan, hedge)
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        self.get().scroll(plan)
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        self.get().count(filter)
    }

    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        self.get().matching_ids(filter)
    }

    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        self.get().get_points(ids, with_payload, with_vector)
    }

    fn load_report(&self) -> Option<LoadReport> {
        self.get().load_report()
    }

    fn local_search_time(&self) -> (u64, f64) {
        self.get().local_search_time()
    }

    fn is_short(&self, plan: &SearchPlan) -> bool {
        self.get().is_short(plan)
    }

    fn health(&self) -> PartitionHealth {
        self.get().health()
    }

    fn replica_info(&self) -> Option<Vec<ReplicaInfo>> {
        self.get().replica_info()
    }

    fn close(&self) {
        self.get().close();
    }
}
