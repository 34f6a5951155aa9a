//! One replica of one group, opened and run: what the server holds, without naming openraft.
//!
//! [`Group::open`] puts together a replica's pieces (the log and state machine over the
//! replica's store, the network over the node's transport), starts openraft, and registers the
//! group with the node's [`Groups`] so peers' messages reach it. [`Group::status`] reads the
//! replica's view of its group (term, role, leader, applied index, members) for status pages
//! and metrics.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use cairn_storage::PartitionStore;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{Config, Raft, ServerState, SnapshotPolicy};
use serde::{Deserialize, Serialize};

use crate::error::encode;
use crate::{
    Addressee, Applied, GroupId, Groups, LogStore, Network, Observer, PartTypes, PartitionCommand,
    ReplicaAddr, ReplicaId, Rpc, StateMachine, Transport, TransportError,
};

/// How long a write waits between attempts while the group has no leader it can reach.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How often a group's leader sends heartbeats and how long followers wait before an election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Milliseconds between heartbeats.
    pub heartbeat_ms: u64,
    /// Shortest wait without a heartbeat before an election, in milliseconds.
    pub election_min_ms: u64,
    /// Longest such wait (each follower picks at random in between, so one usually wins).
    pub election_max_ms: u64,
}

impl Timing {
    /// The metadata group: heartbeats every 200 ms, elections after 0.75–1.5 s of silence.
    /// openraft's defaults (50 ms heartbeats) cost too much once a node hosts hundreds of
    /// groups; a 1.5 s pause of a leader (a stopped process) is still noticed.
    pub const META: Timing = Timing {
        heartbeat_ms: 200,
        election_min_ms: 750,
        election_max_ms: 1500,
    };

    /// A partition's group: heartbeats every 250 ms, elections after 1–2 s of silence. A node
    /// leads about a third of the groups it hosts (with three replicas each), so its heartbeat
    /// traffic grows with its partitions; this keeps it at 8 small messages a second per led
    /// group at R = 3 (`docs/design/consensus.md` §1).
    pub const PARTITION: Timing = Timing {
        heartbeat_ms: 250,
        election_min_ms: 1000,
        election_max_ms: 2000,
    };
}

/// Why a group could not be opened or asked something.
#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    /// The replica's files could not be opened.
    #[error("group {group}: {reason}")]
    Open {
        /// The group.
        group: GroupId,
        /// What failed.
        reason: String,
    },
    /// The group stopped (a storage failure, or shut down) or refused the request.
    #[error("group {group}: {reason}")]
    Failed {
        /// The group.
        group: GroupId,
        /// What it said.
        reason: String,
    },
}

/// When a group compacts its log: a snapshot every `snapshot_every` entries, keeping the
/// last `keep` entries behind it so a briefly absent replica catches up from the log; one
/// further behind gets the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPolicy {
    /// Entries between snapshots.
    pub snapshot_every: u64,
    /// Entries kept behind the latest snapshot.
    pub keep: u64,
}

impl Default for LogPolicy {
    fn default() -> Self {
        Self {
            snapshot_every: 5_000,
            keep: 1_000,
        }
    }
}

/// Why a write was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No leader acknowledged the write in time. It may still be applied (its entry may sit in
    /// a leader's log and commit later): the outcome is unknown, and a caller must say so.
    #[error("group {group}: no leader acknowledged the write within {waited_ms} ms; it may still be applied")]
    Indeterminate {
        /// The group.
        group: GroupId,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The group stopped (after a storage failure, or shut down).
    #[error("group {group}: {reason}")]
    Failed {
        /// The group.
        group: GroupId,
        /// What it said.
        reason: String,
    },
    /// The write is committed (a majority holds it; it will not be lost), but fewer voting
    /// replicas than asked for held it when the wait for them ran out.
    #[error(
        "group {group}: the write is committed at log position {index} and will not be lost, \
         but only {held} of the {wanted} replicas asked for (write_consistency_factor) held it \
         within {waited_ms} ms"
    )]
    UnderReplicated {
        /// The group.
        group: GroupId,
        /// The write's log index.
        index: u64,
        /// Voting replicas known to hold it.
        held: usize,
        /// Voting replicas asked for.
        wanted: usize,
        /// How long the leader waited for them.
        waited_ms: u64,
    },
}

/// Why a linearizable read could not be started.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No leader confirmed its leadership in time (an election, or no quorum).
    #[error("group {group}: no leader confirmed a read index within {waited_ms} ms")]
    NoLeader {
        /// The group.
        group: GroupId,
        /// How long it waited.
        waited_ms: u64,
    },
    /// This replica did not apply the log up to the index asked for in time.
    #[error("group {group}: this replica applied {applied}, not {wanted}, within {waited_ms} ms")]
    Behind {
        /// The group.
        group: GroupId,
        /// The index asked for.
        wanted: u64,
        /// How far this replica had applied.
        applied: u64,
        /// How long it waited.
        waited_ms: u64,
    },
    /// The group stopped.
    #[error("group {group}: {reason}")]
    Failed {
        /// The group.
        group: GroupId,
        /// What it said.
        reason: String,
    },
}

/// Why a request for the leader got no answer.
enum AtLeader {
    /// No leader answered before the deadline.
    TimedOut,
    /// The group failed (here, the replica asked first).
    Failed(String),
    /// The leader committed the write but too few replicas held it in time.
    UnderReplicated {
        /// The write's log index.
        index: u64,
        /// Voting replicas known to hold it.
        held: usize,
        /// How long the leader waited for more.
        waited_ms: u64,
    },
}

/// A replica's answer to a request it was asked to serve as leader (between nodes, so serializable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Refusal {
    /// This replica does not lead the group; the leader's node, if known.
    NotLeader {
        /// The node of the replica this one believes leads.
        leader_node: Option<u64>,
    },
    /// The group failed.
    Failed(String),
    /// The write committed, but only `held` voting replicas held it when the wait for more
    /// ran out (appended last: the variants' order is their wire form).
    UnderReplicated {
        /// The write's log index.
        index: u64,
        /// Voting replicas known to hold it.
        held: usize,
        /// How long the leader waited for more.
        waited_ms: u64,
    },
}

/// A write as the leader receives it (`Rpc::Propose`): the command, and how many voting
/// replicas must hold it before the leader answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Proposal {
    /// The command.
    pub command: PartitionCommand,
    /// Voting replicas that must hold the entry (the leader included). Up to a majority this
    /// is what Raft's commit means already, and nothing more is waited for.
    pub acks: usize,
    /// How long the leader waits for replicas beyond the majority.
    pub acks_wait_ms: u64,
}

/// Appends a proposal's command through this replica, which must lead its group: returns once
/// a majority holds it and it is applied here, and, when the proposal asks for more replicas
/// than a majority, once that many voters hold it (or [`Refusal::UnderReplicated`] when they
/// do not in time).
pub(crate) async fn write_here(
    raft: &Raft<PartTypes>,
    proposal: Proposal,
) -> Result<Applied, Refusal> {
    let applied = match raft.client_write(proposal.command).await {
        Ok(response) => response.data,
        Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => {
            return Err(Refusal::NotLeader {
                leader_node: forward.leader_node.map(|addr| addr.node),
            })
        }
        Err(error) => return Err(Refusal::Failed(error.to_string())),
    };
    // The default (one replica asked for) is what the commit already gave: no metrics read,
    // no allocation on the write path.
    if proposal.acks <= 1 {
        return Ok(applied);
    }
    let voters: Vec<ReplicaId> = raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    if proposal.acks <= voters.len() / 2 + 1 {
        return Ok(applied);
    }
    let index = applied.index;
    // The leader's replication progress (its own entry included) is in its metrics; the
    // wait ends as soon as enough voters have matched the entry.
    let holding = move |m: &openraft::RaftMetrics<ReplicaId, ReplicaAddr>| {
        m.replication.as_ref().map_or(0, |progress| {
            voters
                .iter()
                .filter(|v| {
                    progress
                        .get(v)
                        .copied()
                        .flatten()
                        .is_some_and(|log| log.index >= index)
                })
                .count()
        })
    };
    let wait = Duration::from_millis(proposal.acks_wait_ms);
    let acks = proposal.acks;
    match raft
        .wait(Some(wait))
        .metrics(|m| holding(m) >= acks, "write_consistency_factor")
        .await
    {
        Ok(_) => Ok(applied),
        Err(_) => Err(Refusal::UnderReplicated {
            index,
            held: holding(&raft.metrics().borrow()),
            waited_ms: proposal.acks_wait_ms,
        }),
    }
}

/// Confirms through a quorum that this replica leads its group and answers the index a
/// linearizable read must see applied (Raft's ReadIndex: every write acknowledged before the
/// call has an index at or below it).
pub(crate) async fn read_index_here(raft: &Raft<PartTypes>) -> Result<u64, Refusal> {
    match raft.get_read_log_id().await {
        Ok((read, _applied)) => Ok(read.map_or(0, |id| id.index)),
        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(forward))) => {
            Err(Refusal::NotLeader {
                leader_node: forward.leader_node.map(|addr| addr.node),
            })
        }
        // Not confirmed by a quorum (cut off, or deposed meanwhile): ask whoever leads now.
        Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
            Err(Refusal::NotLeader { leader_node: None })
        }
        Err(error) => Err(Refusal::Failed(error.to_string())),
    }
}

/// The one thing a group asks of the node's transport itself: carry a request for the leader
/// (a write, a read index) to the leader's node. Type-erased, so a [`Group`] is one type
/// whatever the transport.
trait Forward: Send + Sync {
    fn to_leader(
        &self,
        node: u64,
        group: GroupId,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, TransportError>> + Send + '_>>;
}

impl<T: Transport> Forward for T {
    fn to_leader(
        &self,
        node: u64,
        group: GroupId,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, TransportError>> + Send + '_>> {
        let to = Addressee {
            node,
            group,
            replica: None,
        };
        Box::pin(self.call(to, rpc, body, timeout))
    }
}

/// A replica's role in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Takes writes and replicates them.
    Leader,
    /// Follows a leader (or waits for one).
    Follower,
    /// Asking for votes.
    Candidate,
    /// Receives the log without voting.
    Learner,
    /// Stopped.
    Shutdown,
}

impl Role {
    /// The role's name, as status pages show it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Leader => "Leader",
            Role::Follower => "Follower",
            Role::Candidate => "Candidate",
            Role::Learner => "Learner",
            Role::Shutdown => "Shutdown",
        }
    }
}

/// A replica's view of its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupStatus {
    /// The current term.
    pub term: u64,
    /// The last log index applied here.
    pub applied: u64,
    /// The last log index held here.
    pub last_log: u64,
    /// The last log index discarded here behind a snapshot (0: none).
    pub purged: u64,
    /// The leader, if known.
    pub leader: Option<ReplicaId>,
    /// This replica's role.
    pub role: Role,
    /// The voting members.
    pub voters: Vec<ReplicaId>,
    /// Every member (voters and learners) and where it lives.
    pub members: Vec<(ReplicaId, ReplicaAddr)>,
    /// On the leader: the last log index each member is known to hold (`None` until it
    /// answers). Empty elsewhere: only the leader knows.
    pub matched: BTreeMap<ReplicaId, Option<u64>>,
    /// On the leader: milliseconds since a majority last acknowledged it. A leader cut off
    /// from its majority keeps believing it leads; this says how long it has been alone.
    pub quorum_ack_ms: Option<u64>,
}

/// One running replica of one group.
pub struct Group {
    id: GroupId,
    raft: Raft<PartTypes>,
    forward: Arc<dyn Forward>,
}

impl Group {
    /// Opens replica `replica` of group `id` over `store` (opened with `replicated`) in `dir`,
    /// joins the group over `transport`, and registers it with `groups`.
    #[allow(clippy::too_many_arguments)]
    pub async fn open<T: Transport, O: Observer>(
        id: GroupId,
        replica: ReplicaId,
        timing: Timing,
        log: LogPolicy,
        dir: &Path,
        store: Arc<PartitionStore>,
        observer: O,
        transport: Arc<T>,
        groups: &Groups,
    ) -> Result<Self, GroupError> {
        let open = |reason: String| GroupError::Open { group: id, reason };
        let state = StateMachine::open(store.clone(), dir, observer)
            .map_err(|e| open(format!("state: {e}")))?;
        let snapshots = state.snapshots_dir().to_path_buf();
        let config = Config {
            cluster_name: format!("cairn-{id}"),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_min_ms,
            election_timeout_max: timing.election_max_ms,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(log.snapshot_every),
            max_in_snapshot_log_to_keep: log.keep,
            // A replica further behind than a snapshot's distance takes the snapshot.
            replication_lag_threshold: log.snapshot_every,
            // Per snapshot chunk (4 MiB, fsynced by the receiver): openraft's 200 ms default
            // would time out chunks on a busy disk and restart the transfer.
            install_snapshot_timeout: 30_000,
            ..Config::default()
        }
        .validate()
        .map_err(|e| open(format!("timing: {e}")))?;
        let raft = Raft::new(
            replica,
            Arc::new(config),
            Network::new(transport.clone(), id),
            LogStore::new(store),
            state,
        )
        .await
        .map_err(|e| open(e.to_string()))?;
        groups.insert(id, replica, raft.clone(), &snapshots);
        Ok(Self {
            id,
            raft,
            forward: transport,
        })
    }

    /// Writes `command` through the group's leader, wherever it is: here, or forwarded to the
    /// leader's node (following the group's word on who leads, and waiting out elections).
    /// Returns once a majority holds the entry and the leader applied it. Commands are
    /// idempotent (upserts and deletes by key), so an attempt whose answer was lost may be
    /// repeated; after `within`, the outcome is [`WriteError::Indeterminate`].
    pub async fn propose(
        &self,
        command: PartitionCommand,
        within: Duration,
    ) -> Result<Applied, WriteError> {
        self.propose_held_by(command, within, 1).await
    }

    /// [`Self::propose`], answering only once `acks` voting replicas hold the entry (the
    /// collection's `write_consistency_factor`). A majority is what a commit means already;
    /// beyond it the leader waits for the rest up to three quarters of the time left, so
    /// that a write that committed is answered [`WriteError::UnderReplicated`] (applied, not
    /// lost, not held as widely as asked) rather than timing out as indeterminate.
    pub async fn propose_held_by(
        &self,
        command: PartitionCommand,
        within: Duration,
        acks: usize,
    ) -> Result<Applied, WriteError> {
        let started = tokio::time::Instant::now();
        let deadline = started + within;
        let proposal = || {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            Proposal {
                command: command.clone(),
                acks,
                acks_wait_ms: u64::try_from((left * 3 / 4).as_millis()).unwrap_or(u64::MAX),
            }
        };
        let body = || encode(&proposal());
        let here = || write_here(&self.raft, proposal());
        match self.at_leader(deadline, Rpc::Propose, body, here).await {
            Ok(applied) => Ok(applied),
            Err(AtLeader::UnderReplicated {
                index,
                held,
                waited_ms,
            }) => Err(WriteError::UnderReplicated {
                group: self.id,
                index,
                held,
                wanted: acks,
                waited_ms,
            }),
            Err(AtLeader::TimedOut) => Err(WriteError::Indeterminate {
                group: self.id,
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            Err(AtLeader::Failed(reason)) => Err(WriteError::Failed {
                group: self.id,
                reason,
            }),
        }
    }

    /// Runs a request that only the leader may answer: here while this replica leads (`here`),
    /// otherwise as `rpc` with `body` on the leader's node, following the group's word on who
    /// leads and waiting out elections until `deadline`.
    async fn at_leader<T, F, Fut>(
        &self,
        deadline: tokio::time::Instant,
        rpc: Rpc,
        body: impl Fn() -> Vec<u8>,
        here: F,
    ) -> Result<T, AtLeader>
    where
        T: serde::de::DeserializeOwned,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, Refusal>>,
    {
        loop {
            let local = tokio::time::timeout_at(deadline, here())
                .await
                .map_err(|_| AtLeader::TimedOut)?;
            let leader_node = match local {
                Ok(answer) => return Ok(answer),
                Err(Refusal::Failed(reason)) => return Err(AtLeader::Failed(reason)),
                Err(Refusal::UnderReplicated {
                    index,
                    held,
                    waited_ms,
                }) => {
                    return Err(AtLeader::UnderReplicated {
                        index,
                        held,
                        waited_ms,
                    })
                }
                Err(Refusal::NotLeader { leader_node }) => leader_node,
            };
            if let Some(node) = leader_node {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                let answer = self
                    .forward
                    .to_leader(node, self.id, rpc, body(), remaining)
                    .await
                    .ok()
                    .and_then(|bytes| bincode::deserialize::<Result<T, Refusal>>(&bytes).ok());
                match answer {
                    Some(Ok(answer)) => return Ok(answer),
                    Some(Err(Refusal::UnderReplicated {
                        index,
                        held,
                        waited_ms,
                    })) => {
                        return Err(AtLeader::UnderReplicated {
                            index,
                            held,
                            waited_ms,
                        })
                    }
                    Some(Err(Refusal::Failed(reason))) => {
                        tracing::debug!(group = %self.id, node, rpc = rpc.name(), %reason, "the leader's node refused a request");
                    }
                    // Leadership moved, the node is unreachable, or the answer was lost: ask
                    // again, following the group's latest word.
                    Some(Err(Refusal::NotLeader { .. })) | None => {}
                }
            }
            if tokio::time::Instant::now() + RETRY_PAUSE >= deadline {
                return Err(AtLeader::TimedOut);
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// The index a linearizable read must see applied (Raft's ReadIndex), from the group's
    /// leader, here or on its node: once a replica has applied it, that replica's state holds
    /// every write acknowledged before this call. Costs the leader one heartbeat round to a
    /// quorum, no log entry. Waits out elections up to `within`.
    pub async fn read_index(&self, within: Duration) -> Result<u64, ReadError> {
        let started = tokio::time::Instant::now();
        let here = || read_index_here(&self.raft);
        match self
            .at_leader(started + within, Rpc::ReadIndex, Vec::new, here)
            .await
        {
            Ok(index) => Ok(index),
            Err(AtLeader::TimedOut) => Err(ReadError::NoLeader {
                group: self.id,
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            Err(AtLeader::Failed(reason)) => Err(ReadError::Failed {
                group: self.id,
                reason,
            }),
            // Only a write is held by replicas.
            Err(AtLeader::UnderReplicated { .. }) => Err(ReadError::Failed {
                group: self.id,
                reason: "a read index was answered as a write".into(),
            }),
        }
    }

    /// Waits until this replica has applied the log up to `index` (blank and membership
    /// entries included), at most `within`.
    pub async fn wait_applied(&self, index: u64, within: Duration) -> Result<(), ReadError> {
        match self
            .raft
            .wait(Some(within))
            .applied_index_at_least(Some(index), "a read's floor")
            .await
        {
            Ok(_) => Ok(()),
            Err(openraft::metrics::WaitError::Timeout(..)) => Err(ReadError::Behind {
                group: self.id,
                wanted: index,
                applied: self.status().applied,
                waited_ms: u64::try_from(within.as_millis()).unwrap_or(u64::MAX),
            }),
            Err(openraft::metrics::WaitError::ShuttingDown) => Err(ReadError::Failed {
                group: self.id,
                reason: "the replica is shutting down".into(),
            }),
        }
    }

    fn failed(&self, error: impl std::fmt::Display) -> GroupError {
        GroupError::Failed {
            group: self.id,
            reason: error.to_string(),
        }
    }

    /// Whether the group was ever initialized here (this replica holds any of its state).
    pub async fn is_initialized(&self) -> Result<bool, GroupError> {
        self.raft.is_initialized().await.map_err(|e| self.failed(e))
    }

    /// Creates the group with `voters` as its first members. Only ever on one replica, once:
    /// a second initialization elsewhere would make a second group of the same name.
    pub async fn initialize(
        &self,
        voters: BTreeMap<ReplicaId, ReplicaAddr>,
    ) -> Result<(), GroupError> {
        self.raft
            .initialize(voters)
            .await
            .map_err(|e| self.failed(e))
    }

    /// On the leader: starts replicating to `replica` on `addr` as a learner (it does not vote)
    /// and returns at once; [`GroupStatus::matched`] shows it catching up, from the log or
    /// by a snapshot. Adding a member twice is harmless.
    pub async fn add_learner(
        &self,
        replica: ReplicaId,
        addr: ReplicaAddr,
    ) -> Result<(), GroupError> {
        self.raft
            .add_learner(replica, addr, false)
            .await
            .map(|_| ())
            .map_err(|e| self.failed(e))
    }

    /// On the leader: makes `voters` the group's voting members (each already a member),
    /// through a joint configuration, so a majority of both the old and the new voters agree
    /// at every step; members left out are removed, learners not named stay learners. Returns
    /// once the new configuration is committed: a removed replica may then be stopped.
    pub async fn change_voters(
        &self,
        voters: std::collections::BTreeSet<ReplicaId>,
    ) -> Result<(), GroupError> {
        self.change(openraft::ChangeMembers::ReplaceAllVoters(voters))
            .await
    }

    /// On the leader: removes learners that are no longer wanted (a replica whose move was
    /// abandoned before it was promoted).
    pub async fn remove_learners(
        &self,
        learners: std::collections::BTreeSet<ReplicaId>,
    ) -> Result<(), GroupError> {
        self.change(openraft::ChangeMembers::RemoveNodes(learners))
            .await
    }

    /// A membership change; members it leaves out are removed, not kept as learners.
    async fn change(
        &self,
        change: openraft::ChangeMembers<ReplicaId, ReplicaAddr>,
    ) -> Result<(), GroupError> {
        self.raft
            .change_membership(change, false)
            .await
            .map(|_| ())
            .map_err(|e| self.failed(e))
    }

    /// This replica's view of its group.
    pub fn status(&self) -> GroupStatus {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        GroupStatus {
            term: metrics.current_term,
            applied: metrics.last_applied.map_or(0, |id| id.index),
            last_log: metrics.last_log_index.unwrap_or(0),
            purged: metrics.purged.map_or(0, |id| id.index),
            leader: metrics.current_leader,
            role: match metrics.state {
                ServerState::Leader => Role::Leader,
                ServerState::Follower => Role::Follower,
                ServerState::Candidate => Role::Candidate,
                ServerState::Learner => Role::Learner,
                ServerState::Shutdown => Role::Shutdown,
            },
            voters: membership.voter_ids().collect(),
            members: membership.nodes().map(|(id, addr)| (*id, *addr)).collect(),
            matched: metrics
                .replication
                .iter()
                .flatten()
                .map(|(id, log)| (*id, log.map(|l| l.index)))
                .collect(),
            quorum_ack_ms: metrics.millis_since_quorum_ack,
        }
    }

    /// Stops the replica (its messages to peers stop with it).
    pub async fn shutdown(&self, groups: &Groups) {
        groups.remove(self.id);
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(group = %self.id, error = %e, "group did not stop cleanly");
        }
    }
}
