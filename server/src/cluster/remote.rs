//! A partition as the router sees it: `R` replicas on distinct shard nodes.
//!
//! ```text
//!            call fails / node probe fails
//!   Active ─────────────────────────────────▶ Dead
//!     ▲                                        │ node answers its probe again
//!     │   op log replayed from a live peer,    ▼
//!     └──────── equal sequence numbers ◀── Recovering
//!               (under the partition's write lock)
//! ```
//!
//! Reads go to the `Active` replica with the fewest requests in flight, then the lowest recent
//! latency (a slow replica accumulates requests and a high latency, and so gets less work, as
//! Pyramid's pull-based queues gave it), and fail over to the next on a transport error or a
//! 5xx. A read still unanswered after the partition's recent p95 latency is **hedged**: sent
//! to a second replica too, and the first answer wins. Whatever happens, a read a query waits
//! on gives up after `cluster.request_timeout_ms` (the fan-out's deadline), and the query
//! answers without that partition (partial, `coverage` < 1). Writes go to every `Active` replica and
//! succeed when at least one applied them; a replica that failed, or answered a different
//! sequence number than the first one, is marked `Dead` and recovered by the health prober.
//! Writes to one partition are serialised by its write lock, so every replica sees them in
//! the same order, and catch-up's last step holds the same lock.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_api::internal::{
    NewPoint, PartitionCall, PartitionState, PayloadSelection, ScrollPlan, SearchPlan,
};
use cairn_api::{Filter, PointId, QueryResponse, Record, ReplicaInfo};
use parking_lot::{Mutex, MutexGuard};
use serde::de::DeserializeOwned;

use super::transport::{CallError, Transport};
use super::Node;
use crate::collection::{HandleFuture, PartitionHandle, PartitionHealth, ReadTrace};
use crate::error::{Result, ServerError};

/// Life-cycle state of a replica (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaState {
    /// Serves reads and takes writes.
    Active,
    /// Missed writes or is unreachable.
    Dead,
    /// Replaying a peer's op log.
    Recovering,
}

impl ReplicaState {
    /// Name shown in collection info.
    pub fn name(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Dead => "dead",
            Self::Recovering => "recovering",
        }
    }
}

/// One copy of a partition on one shard node.
pub struct Replica {
    /// The node holding it.
    pub node: Arc<Node>,
    state: Mutex<ReplicaState>,
    outstanding: AtomicUsize,
    /// Exponentially weighted recent latency, µs.
    latency_us: AtomicU64,
}

impl Replica {
    /// Its state.
    pub fn state(&self) -> ReplicaState {
        *self.state.lock()
    }

    /// Sets its state (logged when it changes).
    pub fn set_state(&self, to: ReplicaState, partition: &str) {
        let mut state = self.state.lock();
        if *state != to {
            tracing::info!(partition, node = %self.node.url, from = state.name(), to = to.name(), "replica state");
            *state = to;
        }
    }

    fn usable(&self) -> bool {
        self.state() == ReplicaState::Active && self.node.is_alive()
    }

    fn record_latency(&self, took: Duration) {
        let us = took.as_micros().min(u128::from(u32::MAX)) as u64;
        let old = self.latency_us.load(Ordering::Relaxed);
        // EWMA with weight 1/8: a few slow answers are enough to send reads elsewhere.
        let new = if old == 0 { us } else { (old * 7 + us) / 8 };
        self.latency_us.store(new, Ordering::Relaxed);
    }
}

/// Read latencies remembered per partition for the hedge delay.
const LATENCY_WINDOW: usize = 256;
/// The hedge delay never goes below this (loopback answers in well under a millisecond, and
/// hedging everything would double the load).
const MIN_HEDGE_DELAY: Duration = Duration::from_millis(2);

/// A partition replicated on shard nodes.
pub struct RemotePartition {
    /// Shard-side name, `{collection}.p{i}`.
    pub name: String,
    /// Its replicas, on distinct nodes.
    pub replicas: Vec<Arc<Replica>>,
    transport: Arc<dyn Transport>,
    /// Longest a latency-sensitive read waits for any replica, hedges and failovers included.
    read_deadline: Duration,
    last_seq: AtomicU64,
    /// Recent read latencies (µs), newest last.
    latencies: Mutex<VecDeque<u32>>,
    /// Serialises writes (see the module docs).
    writes: Mutex<()>,
}

/// Runs `call` on one replica, counting it in the replica's load and latency.
fn call_on<T: DeserializeOwned>(
    transport: &dyn Transport,
    partition: &str,
    replica: &Replica,
    call: &PartitionCall,
) -> std::result::Result<T, CallError> {
    replica.outstanding.fetch_add(1, Ordering::AcqRel);
    let started = Instant::now();
    let answer = transport.call(&replica.node.url, partition, call);
    replica.record_latency(started.elapsed());
    replica.outstanding.fetch_sub(1, Ordering::AcqRel);
    serde_json::from_value(answer?).map_err(|e| {
        CallError::Replica(format!(
            "{}: {partition}: unexpected answer: {e}",
            replica.node.url
        ))
    })
}

impl RemotePartition {
    /// A partition with replicas on `nodes`, all assumed `Active` until a call or a probe
    /// says otherwise.
    pub fn new(
        name: String,
        nodes: Vec<Arc<Node>>,
        transport: Arc<dyn Transport>,
        read_deadline: Duration,
    ) -> Self {
        Self {
            name,
            replicas: nodes
                .into_iter()
                .map(|node| {
                    Arc::new(Replica {
                        node,
                        state: Mutex::new(ReplicaState::Active),
                        outstanding: AtomicUsize::new(0),
                        latency_us: AtomicU64::new(0),
                    })
                })
                .collect(),
            transport,
            read_deadline,
            last_seq: AtomicU64::new(0),
            latencies: Mutex::new(VecDeque::with_capacity(LATENCY_WINDOW)),
            writes: Mutex::new(()),
        }
    }

    /// Holds this partition's writes off (catch-up's last step).
    pub fn hold_writes(&self) -> MutexGuard<'_, ()> {
        self.writes.lock()
    }

    /// The last sequence number a write returned (or the probe read).
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Acquire)
    }

    /// Records a sequence number read from a replica.
    pub fn observe_seq(&self, seq: u64) {
        self.last_seq.fetch_max(seq, Ordering::AcqRel);
    }

    /// Runs `call` on one replica, whatever its state (the prober's catch-up uses this).
    pub fn call_replica<T: DeserializeOwned>(&self, i: usize, call: &PartitionCall) -> Result<T> {
        match call_on(&*self.transport, &self.name, &self.replicas[i], call) {
            Ok(value) => Ok(value),
            Err(CallError::Replica(m)) => Err(ServerError::Unavailable(m)),
            Err(CallError::Request(e)) => Err(e),
        }
    }

    /// Each replica's state and, when it answers, its sequence number and points.
    pub fn replica_info(&self) -> Vec<ReplicaInfo> {
        (0..self.replicas.len())
            .map(|i| {
                let replica = &self.replicas[i];
                let state = replica
                    .node
                    .is_alive()
                    .then(|| {
                        self.call_replica::<PartitionState>(i, &PartitionCall::State)
                            .ok()
                    })
                    .flatten();
                ReplicaInfo {
                    node: replica.node.url.clone(),
                    state: replica.state().name().to_owned(),
                    last_seq: state.map(|s| s.last_seq),
                    points: state.map(|s| s.points),
                    peer_id: None,
                    replica_id: None,
                    role: None,
                    term: None,
                    applied: None,
                    purged: None,
                }
            })
            .collect()
    }

    /// A read: the live replica with the fewest requests in flight, then the others.
    pub fn read<T: DeserializeOwned + Send + 'static>(&self, call: &PartitionCall) -> Result<T> {
        self.read_traced(call, true).map(|(value, _)| value)
    }

    /// The hedge delay: the recent p95 read latency, at least [`MIN_HEDGE_DELAY`].
    fn hedge_delay(&self) -> Duration {
        let latencies = self.latencies.lock();
        if latencies.len() < 20 {
            return Duration::from_millis(50);
        }
        let mut sorted: Vec<u32> = latencies.iter().copied().collect();
        sorted.sort_unstable();
        let p95 = sorted[(sorted.len() * 95 / 100).min(sorted.len() - 1)];
        Duration::from_micros(u64::from(p95)).max(MIN_HEDGE_DELAY)
    }

    fn remember(&self, took: Duration) {
        let mut latencies = self.latencies.lock();
        if latencies.len() == LATENCY_WINDOW {
            latencies.pop_front();
        }
        latencies.push_back(took.as_micros().min(u128::from(u32::MAX)) as u32);
    }

    /// A read and how it was served. `mitigate`: choose replicas by load and latency and hedge
    /// (the default); `false` takes live replicas in placement order, one at a time, which is
    /// what a system without straggler mitigation does (kept to measure what it buys).
    pub fn read_traced<T: DeserializeOwned + Send + 'static>(
        &self,
        call: &PartitionCall,
        mitigate: bool,
    ) -> Result<(T, ReadTrace)> {
        let mut order: Vec<usize> = (0..self.replicas.len())
            .filter(|&i| self.replicas[i].usable())
            .collect();
        if mitigate {
            order.sort_by_key(|&i| {
                let r = &self.replicas[i];
                (
                    r.outstanding.load(Ordering::Acquire),
                    r.latency_us.load(Ordering::Relaxed),
                )
            });
        }
        let started = Instant::now();
        let (tx, rx) = channel::<(usize, std::result::Result<T, CallError>)>();
        let launch = |i: usize| {
            let (transport, replica) = (self.transport.clone(), self.replicas[i].clone());
            let (name, call, tx) = (self.name.clone(), call.clone(), tx.clone());
            std::thread::spawn(move || {
                let answer = call_on::<T>(&*transport, &name, &replica, &call);
                let _ = tx.send((i, answer));
            });
        };
        let mut next = 0;
        let mut in_flight = 0;
        let mut hedged = false;
        let mut last_error = None;
        if let Some(&first) = order.first() {
            launch(first);
            next = 1;
            in_flight = 1;
        }
        // The deadline of this partition's part of a fan-out: whatever the attempts and
        // hedges, a query waits at most this long before answering without the partition.
        let deadline = call
            .is_latency_sensitive()
            .then(|| started + self.read_deadline);
        while in_flight > 0 {
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if remaining == Some(Duration::ZERO) {
                last_error = Some(format!(
                    "no replica answered within {} ms",
                    self.read_deadline.as_millis()
                ));
                break;
            }
            let hedge_possible = mitigate && !hedged && next < order.len();
            let received = if hedge_possible {
                let delay = self.hedge_delay();
                match rx.recv_timeout(remaining.map_or(delay, |r| r.min(delay))) {
                    Ok(answer) => Some(answer),
                    Err(RecvTimeoutError::Timeout) => {
                        if remaining.is_none_or(|r| r > delay) {
                            launch(order[next]);
                            next += 1;
                            in_flight += 1;
                            hedged = true;
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => None,
                }
            } else {
                match remaining {
                    Some(r) => match rx.recv_timeout(r) {
                        Ok(answer) => Some(answer),
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => None,
                    },
                    None => rx.recv().ok(),
                }
            };
            let Some((i, answer)) = received else { break };
            in_flight -= 1;
            match answer {
                Ok(value) => {
                    self.remember(started.elapsed());
                    return Ok((
                        value,
                        ReadTrace {
                            node: self.replicas[i].node.url.clone(),
                            hedged,
                        },
                    ));
                }
                Err(CallError::Request(e)) => return Err(e),
                Err(CallError::Replica(m)) => {
                    tracing::warn!(partition = %self.name, error = %m, "replica failed a read; trying the next");
                    self.replicas[i].set_state(ReplicaState::Dead, &self.name);
                    last_error = Some(m);
                    if in_flight == 0 && next < order.len() {
                        launch(order[next]);
                        next += 1;
                        in_flight += 1;
                    }
                }
            }
        }
        Err(ServerError::Unavailable(format!(
            "partition {} has no live replica{}",
            self.name,
            last_error.map_or(String::new(), |m| format!(" (last error: {m})"))
        )))
    }

    /// A write that answers a sequence number (or `None` for a delete that found nothing):
    /// sent to every live replica; replicas that fail or disagree are marked dead.
    pub fn write<T: DeserializeOwned + Clone + Into<Option<u64>> + PartialEq>(
        &self,
        call: &PartitionCall,
    ) -> Result<T> {
        let _writes = self.writes.lock();
        let mut first: Option<T> = None;
        let mut last_error = None;
        for replica in self.replicas.iter().filter(|r| r.usable()) {
            match call_on::<T>(&*self.transport, &self.name, replica, call) {
                Ok(answer) => match &first {
                    None => {
                        if let Some(seq) = answer.clone().into() {
                            self.observe_seq(seq);
                        }
                        first = Some(answer);
                    }
                    Some(expected) if *expected == answer => {}
                    Some(_) => {
                        tracing::warn!(partition = %self.name, node = %replica.node.url,
                            "replica answered a different sequence number; recovering it");
                        replica.set_state(ReplicaState::Dead, &self.name);
                    }
                },
                // Nothing applied yet: the request is at fault, and every replica would refuse.
                Err(CallError::Request(e)) if first.is_none() => return Err(e),
                // Another replica applied it: this one diverged, and catch-up brings it back.
                Err(CallError::Request(e)) => {
                    tracing::warn!(partition = %self.name, node = %replica.node.url, error = %e,
                        "replica refused a write another applied; recovering it");
                    replica.set_state(ReplicaState::Dead, &self.name);
                }
                Err(CallError::Replica(m)) => {
                    tracing::warn!(partition = %self.name, error = %m, "replica failed a write; marking it dead");
                    replica.set_state(ReplicaState::Dead, &self.name);
                    last_error = Some(m);
                }
            }
        }
        first.ok_or_else(|| {
            ServerError::Unavailable(format!(
                "partition {} has no live replica to write to{}",
                self.name,
                last_error.map_or(String::new(), |m| format!(" (last error: {m})"))
            ))
        })
    }
}

impl PartitionHandle for RemotePartition {
    fn upsert(&self, points: Vec<NewPoint>, _fence: u64) -> Result<u64> {
        self.write(&PartitionCall::Upsert { points, fence: 0 })
    }

    fn delete(&self, ids: Vec<PointId>, _fence: u64) -> Result<u64> {
        self.write(&PartitionCall::Delete { ids, fence: 0 })
    }

    fn delete_present(&self, ids: &[PointId], _fence: u64) -> Result<Option<u64>> {
        self.write(&PartitionCall::DeletePresent {
            ids: ids.to_vec(),
            fence: 0,
        })
    }

    fn holds(&self, ids: &[PointId]) -> Result<Vec<bool>> {
        self.read(&PartitionCall::Holds { ids: ids.to_vec() })
    }

    fn stored(&self, ids: &[PointId]) -> Result<Vec<Option<NewPoint>>> {
        self.read(&PartitionCall::Stored { ids: ids.to_vec() })
    }

    fn stored_ids(&self) -> Result<Vec<PointId>> {
        self.read(&PartitionCall::Ids)
    }

    fn sample(&self, n: usize, seed: u64) -> Result<Vec<f32>> {
        self.read(&PartitionCall::Sample { n, seed })
    }

    fn last_seq(&self) -> u64 {
        RemotePartition::last_seq(self)
    }

    fn wait_applied_blocking(&self, _seq: u64) -> Result<()> {
        Ok(())
    }

    fn wait_applied(&self, _seq: u64) -> HandleFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn state(&self) -> Result<PartitionState> {
        self.read(&PartitionCall::State)
    }

    /// No floor: the router acknowledges a write once every active replica applied it, and
    /// reads only active replicas, so each read already sees every write it acknowledged (as
    /// far as its replica states are right: the faults of issue #22, which peer nodes fix).
    fn read_index(&self) -> Result<u64> {
        Ok(0)
    }

    /// Itself, whatever `floor`: see [`Self::read_index`].
    fn at_least(self: Arc<Self>, _floor: u64) -> Result<Arc<dyn PartitionHandle>> {
        Ok(self)
    }

    fn search(&self, plan: &SearchPlan, hedge: bool) -> Result<(QueryResponse, Option<ReadTrace>)> {
        self.read_traced(&PartitionCall::Query { plan: plan.clone() }, hedge)
            .map(|(answer, trace)| (answer, Some(trace)))
    }

    fn scroll(&self, plan: &ScrollPlan) -> Result<(Vec<Record>, Option<PointId>)> {
        self.read(&PartitionCall::Scroll { plan: plan.clone() })
    }

    fn count(&self, filter: Option<&Filter>) -> Result<u64> {
        self.read(&PartitionCall::Count {
            filter: filter.cloned(),
        })
    }

    fn matching_ids(&self, filter: Option<&Filter>) -> Result<Vec<PointId>> {
        self.read(&PartitionCall::Matching {
            filter: filter.cloned(),
        })
    }

    fn get_points(
        &self,
        ids: &[PointId],
        with_payload: &PayloadSelection,
        with_vector: bool,
    ) -> Result<Vec<Record>> {
        self.read(&PartitionCall::Get {
            ids: ids.to_vec(),
            with_payload: with_payload.clone(),
            with_vector,
        })
    }

    fn health(&self) -> PartitionHealth {
        let serving = self.replicas.iter().filter(|r| r.usable()).count();
        if serving == 0 {
            PartitionHealth::Unavailable
        } else if serving < self.replicas.len() {
            PartitionHealth::UnderReplicated
        } else {
            PartitionHealth::Healthy
        }
    }

    fn replica_info(&self) -> Option<Vec<ReplicaInfo>> {
        Some(RemotePartition::replica_info(self))
    }
}
