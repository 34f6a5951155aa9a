//! [`PartitionHandle`] for a partition with no replica on this node: every call goes to a node
//! that holds one, over the internal API (`http::peer`), which serves it from that replica —
//! reads from its state, writes through the partition's group. So every node serves every
//! collection, whichever nodes its replicas are on.
//!
//! **Replica choice and hedging** (Pyramid's straggler mitigation): a call goes first
//! to the node with the fewest of this handle's calls in flight, then the lowest recent latency;
//! the next on failure. A search still unanswered after the recent p95 latency (at least 2 ms)
//! is also sent to the next node, and the first answer counts. Hedges are budgeted — at most
//! one per read, and at most one for every ten reads over time (a burst of ten) — because when
//! every node is slow a hedge only doubles the load (`docs/scale.md`: past saturation, hedging
//! without a budget doubled the offered load).
//!
//! **Deadlines**: a read a query waits on (search, scroll, get, count) gives up after
//! `cluster.request_timeout_ms`, every attempt and hedge included, and the query answers
//! without the partition as `allow_partial` says; a node that neither answers nor fails
//! cannot hold a query for the 30 s a write may take.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_api::internal::{
    self, CollectionWrite, NewPoint, PartitionCall, PartitionState, PayloadSelection, ScrollPlan,
    SearchPlan, WriteReceipt,
};
use cairn_api::{
    Filter, PayloadIndexInfo, PayloadSchemaType, PointId, QueryResponse, Record, ReplicaInfo,
};
use cairn_consensus::GroupId;
use serde::de::DeserializeOwned;

use crate::collection::{HandleFuture, PartitionHandle, ReadTrace};
use crate::error::{Result, ServerError};

/// How a node sends a partition call to another (the HTTP client of `http::peer`). It answers
/// the call's result, encoded as `cairn_api::internal::encode` encodes it; a refusal of the
/// request itself (a 4xx) comes back as [`ServerError::Relayed`], and anything that is the
/// other node's fault as [`ServerError::Unavailable`], after which the next replica is tried.
pub trait PartitionCalls: Send + Sync {
    /// Sends `call` for `group` to node `node`, to be served from a replica that has applied
    /// the partition's log at least up to `floor` (0: as it is).
    fn call<'a>(
        &'a self,
        node: u64,
        group: GroupId,
        floor: u64,
        call: &'a PartitionCall,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>>> + Send + 'a>>;

    /// Sends a write of partitioned collection `collection` to node `node`, which writes it
    /// (`SharedRecords::forward`); the receipt.
    fn write<'a>(
        &'a self,
        node: u64,
        collection: &'a str,
        write: &'a CollectionWrite,
    ) -> Pin<Box<dyn Future<Output = Result<WriteReceipt>> + Send + 'a>>;

    /// How long a read that a query waits on may take, every attempt and hedge included,
    /// before the query answers without the partition (`cluster.request_timeout_ms`).
    fn read_deadline(&self) -> Duration;
}

/// Recent search latencies remembered for the hedge delay.
const LATENCY_WINDOW: usize = 256;
/// The hedge delay never goes below this (loopback answers in well under a millisecond, and
/// hedging everything would double the load).
const MIN_HEDGE_DELAY: Duration = Duration::from_millis(2);
/// The hedge delay before enough searches have been seen to know their p95.
const FIRST_HEDGE_DELAY: Duration = Duration::from_millis(50);
/// Hedges saved up at most (the budget's burst); each read adds a tenth of one.
const HEDGE_BURST: u64 = 10;

/// What this node's calls have seen of each replica's node: shared by the handle and its
/// floor views ([`PartitionHandle::at_least`]).
struct Seen {
    /// Calls in flight, per node (in `nodes` order).
    in_flight: Vec<AtomicUsize>,
    /// Latency EWMA in µs, per node (weight 1/8: a few slow answers send calls elsewhere).
    latency_us: Vec<AtomicU64>,
    /// Recent search latencies (µs), newest last.
    recent: parking_lot::Mutex<VecDeque<u32>>,
    /// Hedge budget in tenths of a hedge: each search earns one, a hedge spends ten.
    tenths: AtomicU64,
    /// Where ties start, so equal nodes share the calls.
    next: AtomicUsize,
}

impl Seen {
    fn new(nodes: usize) -> Self {
        Self {
            in_flight: (0..nodes).map(|_| AtomicUsize::new(0)).collect(),
            latency_us: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            recent: parking_lot::Mutex::new(VecDeque::with_capacity(LATENCY_WINDOW)),
            tenths: AtomicU64::new(HEDGE_BURST * 10),
            next: AtomicUsize::new(0),
        }
    }

    /// Node indexes, best first: fewest calls in flight, then lowest latency.
    fn order(&self) -> Vec<usize> {
        let n = self.in_flight.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut order: Vec<usize> = (0..n).map(|i| (start + i) % n.max(1)).collect();
        order.sort_by_key(|&i| {
            (
                self.in_flight[i].load(Ordering::Acquire),
                self.latency_us[i].load(Ordering::Relaxed),
            )
        });
        order
    }

    fn answered(&self, i: usize, took: Duration, search: bool) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let old = self.latency_us[i].load(Ordering::Relaxed);
        let new = if old == 0 { us } else { (old * 7 + us) / 8 };
        self.latency_us[i].store(new, Ordering::Relaxed);
        if search {
            let mut recent = self.recent.lock();
            if recent.len() == LATENCY_WINDOW {
                recent.pop_front();
            }
            recent.push_back(u32::try_from(us).unwrap_or(u32::MAX));
        }
    }

    /// The recent p95 search latency, at least [`MIN_HEDGE_DELAY`].
    fn hedge_delay(&self) -> Duration {
        let recent = self.recent.lock();
        if recent.len() < 20 {
            return FIRST_HEDGE_DELAY;
        }
        let mut sorted: Vec<u32> = recent.iter().copied().collect();
        sorted.sort_unstable();
        let p95 = sorted[(sorted.len() * 95 / 100).min(sorted.len() - 1)];
        Duration::from_micros(u64::from(p95)).max(MIN_HEDGE_DELAY)
    }

    /// A search earns a tenth of a hedge.
    fn earn(&self) {
        let _ = self
            .tenths
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some((t + 1).min(HEDGE_BURST * 10))
            });
    }

    /// Spends a hedge if the budget holds one.
    fn spend(&self) -> bool {
        self.tenths
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_sub(10))
            .is_ok()
    }
}

/// A partition whose replicas are all on other nodes.
pub struct ForwardedPartition {
    group: GroupId,
    /// The nodes holding its replicas.
    nodes: Vec<u64>,
    calls: Arc<dyn PartitionCalls>,
    seen: Arc<Seen>,
    /// The sequence number of the last write through this handle.
    last_seq: std::sync::atomic::AtomicU64,
    /// The log position a replica must have applied to serve this handle's reads (0: any).
    floor: u64,
}

/// One call's answer: which node (index) gave it, and what it was.
type Answer = (usize, Result<Vec<u8>>);

impl ForwardedPartition {
    /// The handle of `group`, whose replicas are on `nodes`.
    pub fn new(group: GroupId, nodes: Vec<u64>, calls: Arc<dyn PartitionCalls>) -> Self {
        Self {
            group,
            seen: Arc::new(Seen::new(nodes.len())),
            nodes,
            calls,
            last_seq: std::sync::atomic::AtomicU64::new(0),
            floor: 0,
        }
    }

    /// Sends `call` to the replicas in turn until one answers (blocking: the collection calls
    /// on blocking threads).
    fn send<T: DeserializeOwned>(&self, call: PartitionCall) -> Result<T> {
        tokio::runtime::Handle::current()
            .block_on(self.send_async(call, false))
            .map(|(answer, _)| answer)
    }

    /// One attempt on node index `i`, counted in its load and latency.
    async fn attempt(&self, i: usize, call: &PartitionCall, search: bool) -> Answer {
        let started = Instant::now();
        self.seen.in_flight[i].fetch_add(1, Ordering::AcqRel);
        let answer = self
            .calls
            .call(self.nodes[i], self.group, self.floor, call)
            .await;
        self.seen.in_flight[i].fetch_sub(1, Ordering::AcqRel);
        if answer.is_ok() {
            self.seen.answered(i, started.elapsed(), search);
        }
        (i, answer)
    }

    /// [`Self::send`] for a caller on the runtime (no thread blocks on the network), with
    /// replica choice, failover and, when `hedge`, a hedged second attempt (module docs).
    async fn send_async<T: DeserializeOwned>(
        &self,
        call: PartitionCall,
        hedge: bool,
    ) -> Result<(T, ReadTrace)> {
        let order = self.seen.order();
        if hedge {
            self.seen.earn();
        }
        let (mut next, mut hedged, mut last_error) = (0, false, None);
        while next < order.len() {
            let first = order[next];
            next += 1;
            let primary = self.attempt(first, &call, hedge);
            tokio::pin!(primary);
            let answer = if hedge && !hedged && next < order.len() {
                tokio::select! {
                    answer = &mut primary => answer,
                    () = tokio::time::sleep(self.seen.hedge_delay()) => {
                        if self.seen.spend() {
                            hedged = true;
                            let second = order[next];
                            next += 1;
                            let backup = self.attempt(second, &call, hedge);
                            tokio::pin!(backup);
                            // The first answer counts, unless it is a node's failure: then
                            // the other's.
                            tokio::select! {
                                answer = &mut primary => match answer {
                                    (_, Err(ServerError::Unavailable(_) | ServerError::Overloaded(_))) => backup.await,
                                    answer => answer,
                                },
                                answer = &mut backup => match answer {
                                    (_, Err(ServerError::Unavailable(_) | ServerError::Overloaded(_))) => primary.await,
                                    answer => answer,
                                },
                            }
                        } else {
                            primary.await
                        }
                    }
                }
            } else {
                primary.await
            };
            let (i, answer) = answer;
            let node = self.nodes[i];
            match answer {
                Ok(bytes) => {
                    let value = internal::decode(&bytes)
                        .map_err(|e| ServerError::Internal(format!("node {node}'s answer {e}")))?;
                    let trace = ReadTrace {
                        node: format!("node {node}"),
                        hedged,
                    };
                    return Ok((value, trace));
                }
                Err(error @ (ServerError::Unavailable(_) | ServerError::Overloaded(_))) => {
                    tracing::debug!(group = %self.group, node, %error, "a replica's node failed a call; trying the next");
                    last_error = Some(error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(last_error.unwrap_or_else(|| {
            ServerError::Unavailable(format!("partition {} has no replica", self.group))
        }))
    }

    /// [`Self::send_async`] for a read a query waits on: given up after the read deadline,
    /// so a query answers without the partition (`allow_partial`) rather than waiting out a
    /// node that neither answers nor fails.
    async fn read<T: DeserializeOwned>(
        &self,
        call: PartitionCall,
        hedge: bool,
    ) -> Result<(T, ReadTrace)> {
        let deadline = self.calls.read_deadline();
        tokio::time::timeout(deadline, self.send_async(call, hedge))
            .await
            .unwrap_or_else(|_| {
                Err(ServerError::Unavailable(format!(
                    "no replica of partition {} answered within {} ms (cluster.request_timeout_ms)",
                    self.group,
                    deadline.as_millis()
                )))
            })
    }

    /// [`Self::read`], blocking.
    fn read_blocking<T: DeserializeOwned>(&self, call: PartitionCall) -> Result<T> {
        tokio::runtime::Handle::current()
            .block_on(self.read(call, false))
            .map(|(answer, _)| answer)
    }

    fn wrote(&self, seq: u64) -> u64 {
        self.last_seq.fetch_max(seq, Ordering::Relaxed);
        seq
    }
}

impl PartitionHandle for ForwardedPartition {
    fn set_payload_index(&self, key: &str, kind: Option<PayloadSchemaType>) -> Result<u64> {
        let call = PartitionCall::PayloadIndex {
            key: key.to_owned(),
            kind,
        };
        self.send(call).map(|seq| self.wrote(seq))
    }

    fn payload_indexes(&self) -> Result<BTreeMap<String, PayloadIndexInfo>> {
        self.read_blocking(PartitionCall::PayloadIndexes)
    }

    fn facet(
        &self,
        key: &str,
        filter: Option<&Filter>,
    ) -> Result<Vec<(serde_json::Value, Vec<PointId>)>> {
        self.read_blocking(PartitionCall::Facet {
            key: key.to_owned(),
            filter: filter.cloned(),
        })
    }

    fn upsert(&self, points: Vec<NewPoint>, fence: u64) -> Result<u64> {
        self.send(PartitionCall::Upsert { points, fence })
            .map(|seq| self.wrote(seq))
    }

    fn delete(&self, ids: Vec<PointId>, fence: u64) -> Result<u64> {
        self.send(PartitionCall::Delete { ids, fence })
            .map(|seq| self.wrote(seq))
    }

    fn delete_present(&self, ids: &[PointId], fence: u64) -> Result<Option<u64>> {
        let seq: Option<u64> = self.send(PartitionCall::DeletePresent {
            ids: ids.to_vec(),
            fence,
        })?;
        Ok(seq.map(|seq| self.wrote(seq)))
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        self.send(PartitionCall::Holds { ids: ids.to_vec() })
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        self.send(PartitionCall::Stored { ids: ids.to_vec() })
    }

    fn stored_versions(&self, ids: &[PointId]) -> Result<Vec<Option<(u64, NewPoint)>>> {
        self.send(PartitionCall::StoredVersions { ids: ids.to_vec() })
    }

    fn upsert_if(&self, points: Vec<NewPoint>, expect: Vec<(PointId, u64)>) -> Result<Option<u64>> {
        let seq: Option<u64> = self.send(PartitionCall::UpsertIf { points, expect })?;
        Ok(seq.map(|seq| self.wrote(seq)))
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
            seen: self.seen.clone(),
            last_seq: std::sync::atomic::AtomicU64::new(self.last_seq()),
            floor,
        }))
    }

    fn search(&self, plan: &SearchPlan, hedge: bool) -> Result<(QueryResponse, Option<ReadTrace>)> {
        let call = PartitionCall::Query { plan: plan.clone() };
        let (answer, trace) = tokio::runtime::Handle::current().block_on(self.read(call, hedge))?;
        Ok((answer, Some(trace)))
    }

    fn searches_remotely(&self) -> bool {
        true
    }

    fn search_async<'a>(
        &'a self,
        plan: &'a SearchPlan,
        hedge: bool,
    ) -> HandleFuture<'a, (QueryResponse, Option<ReadTrace>)> {
        Box::pin(async move {
            let call = PartitionCall::Query { plan: plan.clone() };
            self.read(call, hedge)
                .await
                .map(|(answer, trace)| (answer, Some(trace)))
        })
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        self.read_blocking(PartitionCall::Scroll { plan: plan.clone() })
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        self.read_blocking(PartitionCall::Count {
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
        self.read_blocking(PartitionCall::Get {
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
