//! How a replica reaches its peers: openraft's network over a [`Transport`] the server
//! provides, many groups over one transport.
//!
//! A node hosts many groups (one per partition replica, and the metadata group), so it does
//! not open a connection per group: every message names its [`GroupId`] and goes through the
//! node's one transport (the server's HTTP client to a peer's internal port); the peer's
//! [`crate::Groups`] hands it to the right group. Bodies are bincode of openraft's own
//! messages, so vectors in entries travel as raw little-endian `f32`s, not JSON text.
//!
//! Snapshots travel as files, not as one message ([`Link::full_snapshot`]): the sender asks
//! what the receiver already holds of this snapshot (it may have received part of it before a
//! broken link or a restart), sends the rest in chunks, then asks it to install. Each file's
//! CRC is checked on install, so a chunk that arrived damaged fails the install, not the state.

use std::fmt;
use std::future::Future;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    Fatal, NetworkError, RPCError, RaftError, RemoteError, ReplicationClosed, StreamingError,
    Timeout, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::{RPCTypes, Snapshot, Vote};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::snapshot::Manifest;
use crate::{PartTypes, ReplicaAddr, ReplicaId};

/// Bytes of snapshot file per chunk: large enough that a chunk's round trip is small beside
/// its transfer, small enough to hold in memory on both sides.
pub const SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;

/// Which Raft group a message is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GroupId {
    /// The cluster's metadata.
    Meta,
    /// One partition of one collection (`collection` is the collection's uid, never reused,
    /// so a re-created collection of the same name never meets an old group).
    Partition {
        /// The collection's uid.
        collection: u64,
        /// The partition's number in the collection.
        partition: u32,
    },
}

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupId::Meta => f.write_str("meta"),
            GroupId::Partition {
                collection,
                partition,
            } => write!(f, "c{collection}p{partition}"),
        }
    }
}

impl FromStr for GroupId {
    type Err = String;

    /// `meta` or `c{collection}p{partition}`, as [`fmt::Display`] writes them (a URL segment).
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "meta" {
            return Ok(GroupId::Meta);
        }
        let bad = || format!("`{s}` is not a group id (`meta` or `c<collection>p<partition>`)");
        let rest = s.strip_prefix('c').ok_or_else(bad)?;
        let (collection, partition) = rest.split_once('p').ok_or_else(bad)?;
        Ok(GroupId::Partition {
            collection: collection.parse().map_err(|_| bad())?,
            partition: partition.parse().map_err(|_| bad())?,
        })
    }
}

/// The kinds of message between replicas (a URL segment on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rpc {
    /// openraft's AppendEntries (also the heartbeat).
    Append,
    /// openraft's RequestVote.
    Vote,
    /// Opens a snapshot transfer: the receiver answers what it already holds.
    SnapshotBegin,
    /// One piece of one snapshot file.
    SnapshotChunk,
    /// Ends a transfer: the receiver installs the snapshot.
    SnapshotFinish,
    /// A write for the group, from a node whose replica is not the leader (see
    /// [`crate::Group::propose`]).
    Propose,
    /// A linearizable read's first step, for the leader (see [`crate::Group::read_index`]).
    ReadIndex,
}

impl Rpc {
    /// Every kind, for routing tables and tests.
    pub const ALL: [Rpc; 7] = [
        Rpc::Append,
        Rpc::Vote,
        Rpc::SnapshotBegin,
        Rpc::SnapshotChunk,
        Rpc::SnapshotFinish,
        Rpc::Propose,
        Rpc::ReadIndex,
    ];

    /// The kind's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Rpc::Append => "append",
            Rpc::Vote => "vote",
            Rpc::SnapshotBegin => "snapshot-begin",
            Rpc::SnapshotChunk => "snapshot-chunk",
            Rpc::SnapshotFinish => "snapshot-finish",
            Rpc::Propose => "propose",
            Rpc::ReadIndex => "read-index",
        }
    }
}

impl FromStr for Rpc {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Rpc::ALL
            .into_iter()
            .find(|rpc| rpc.name() == s)
            .ok_or_else(|| format!("`{s}` is not a Raft message kind"))
    }
}

/// Opens a snapshot transfer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotBegin {
    pub(crate) manifest: Manifest,
}

/// One piece of a snapshot file, at `offset`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotChunk {
    pub(crate) snapshot_id: String,
    pub(crate) file: String,
    pub(crate) offset: u64,
    pub(crate) data: Vec<u8>,
}

/// Ends a transfer: install under the leader's `vote`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotFinish {
    pub(crate) vote: Vote<ReplicaId>,
    pub(crate) manifest: Manifest,
}

/// Why a message did not get an answer from the peer's group.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be reached (refused, reset, no address): the group retries with
    /// back-off.
    #[error("node {node} is unreachable: {reason}")]
    Unreachable {
        /// The peer's node id.
        node: u64,
        /// What failed.
        reason: String,
    },
    /// No answer within the time allowed.
    #[error("node {node} did not answer in time")]
    TimedOut {
        /// The peer's node id.
        node: u64,
    },
    /// The peer answered, but not with the group's answer (it does not host the group, it
    /// refused the request).
    #[error("node {node} refused the message: {reason}")]
    Refused {
        /// The peer's node id.
        node: u64,
        /// What it said.
        reason: String,
    },
}

/// Where a message goes: a group on a peer node and, for Raft's own messages, the replica it
/// is for.
///
/// A node hosts one replica of a group, but not always the one a peer means: a replica whose
/// files were lost comes back on its node under a new id (the server's `host.rs`) while the
/// lost one is still a member. A message for the lost one must not reach the new one, which
/// would answer votes and appends in the name of a member that forgot its vote (Raft's safety
/// rests on a vote never being given twice in a term), and whose snapshot transfers would
/// interleave with those meant for the lost one in the same files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addressee {
    /// The peer's node id.
    pub node: u64,
    /// The group.
    pub group: GroupId,
    /// The replica a Raft message (append, vote, snapshot) is for; `None` for a request that
    /// whichever replica the node hosts answers for itself (a forwarded write or read index:
    /// it checks that it leads).
    pub replica: Option<ReplicaId>,
}

/// Carries one message to a peer node and returns its answer's body: the server's HTTP client
/// to the peer's internal port, or an in-process table in tests.
pub trait Transport: Send + Sync + 'static {
    /// Sends `body` (bincode) to `to`, waiting at most `timeout`.
    fn call(
        &self,
        to: Addressee,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> impl Future<Output = Result<Vec<u8>, TransportError>> + Send;
}

/// openraft's network factory for one group on one node.
pub struct Network<T: Transport> {
    transport: Arc<T>,
    group: GroupId,
}

impl<T: Transport> Network<T> {
    /// The network of `group`, over the node's `transport`.
    pub fn new(transport: Arc<T>, group: GroupId) -> Self {
        Self { transport, group }
    }
}

impl<T: Transport> RaftNetworkFactory<PartTypes> for Network<T> {
    type Network = Link<T>;

    async fn new_client(&mut self, target: ReplicaId, node: &ReplicaAddr) -> Link<T> {
        Link {
            transport: self.transport.clone(),
            group: self.group,
            target,
            node: node.node,
        }
    }
}

/// One replica's link to one peer replica of its group.
pub struct Link<T: Transport> {
    transport: Arc<T>,
    group: GroupId,
    target: ReplicaId,
    node: u64,
}

type RpcResult<R> = Result<R, RPCError<ReplicaId, ReplicaAddr, RaftError<ReplicaId>>>;

impl<T: Transport> Link<T> {
    /// Sends `request` and decodes the group's answer, `Result<R, E>` as the peer's
    /// [`crate::Groups`] encoded it.
    async fn send<Q: Serialize, R: serde::de::DeserializeOwned, E: serde::de::DeserializeOwned>(
        &self,
        rpc: Rpc,
        request: &Q,
        timeout: Duration,
    ) -> Result<Result<R, E>, TransportError> {
        let body = crate::error::encode(request);
        let to = Addressee {
            node: self.node,
            group: self.group,
            replica: Some(self.target),
        };
        let answer = self.transport.call(to, rpc, body, timeout).await?;
        bincode::deserialize(&answer).map_err(|e| TransportError::Refused {
            node: self.node,
            reason: format!("an answer that does not decode: {e}"),
        })
    }

    fn rpc_error<E: std::error::Error>(
        &self,
        error: TransportError,
        action: RPCTypes,
        timeout: Duration,
    ) -> RPCError<ReplicaId, ReplicaAddr, E> {
        match error {
            TransportError::TimedOut { .. } => RPCError::Timeout(Timeout {
                action,
                id: 0,
                target: self.target,
                timeout,
            }),
            TransportError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&error)),
            TransportError::Refused { .. } => RPCError::Network(NetworkError::new(&error)),
        }
    }

    fn refused(&self, reason: impl fmt::Display) -> TransportError {
        TransportError::Refused {
            node: self.node,
            reason: reason.to_string(),
        }
    }

    /// The transfer of [`RaftNetwork::full_snapshot`], without openraft's error wrapping.
    async fn send_snapshot(
        &self,
        vote: Vote<ReplicaId>,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Result<SnapshotResponse<ReplicaId>, Fatal<ReplicaId>>, TransportError> {
        let manifest = Manifest::read(dir)
            .map_err(|e| self.refused(format!("the snapshot to send is unreadable: {e}")))?;
        let begin = SnapshotBegin {
            manifest: manifest.clone(),
        };
        let held: Vec<(String, u64)> = self
            .send::<_, _, String>(Rpc::SnapshotBegin, &begin, timeout)
            .await?
            .map_err(|reason| self.refused(reason))?;
        for file in manifest.state.iter().chain(&manifest.extras) {
            let had = held
                .iter()
                .find(|(name, _)| *name == file.name)
                .map(|h| h.1);
            if had == Some(file.bytes) {
                continue;
            }
            // Resume where the receiver stopped (a longer file than ours is not ours: restart).
            let mut offset = had.filter(|b| *b < file.bytes).unwrap_or(0);
            let mut source = tokio::fs::File::open(dir.join(&file.name))
                .await
                .map_err(|e| self.refused(format!("snapshot file {}: {e}", file.name)))?;
            loop {
                let len = (file.bytes - offset).min(SNAPSHOT_CHUNK_BYTES as u64) as usize;
                let mut data = vec![0u8; len];
                source
                    .seek(std::io::SeekFrom::Start(offset))
                    .await
                    .and(source.read_exact(&mut data).await.map(|_| ()))
                    .map_err(|e| self.refused(format!("snapshot file {}: {e}", file.name)))?;
                let chunk = SnapshotChunk {
                    snapshot_id: manifest.meta.snapshot_id.clone(),
                    file: file.name.clone(),
                    offset,
                    data,
                };
                offset = self
                    .send::<_, u64, String>(Rpc::SnapshotChunk, &chunk, timeout)
                    .await?
                    .map_err(|reason| self.refused(reason))?;
                if offset >= file.bytes {
                    break;
                }
            }
        }
        let finish = SnapshotFinish { vote, manifest };
        // Installing swaps files and reloads the partition (an index rebuild when the snapshot
        // carries no index file): far longer than a chunk. A leader that gave up early would
        // send the whole snapshot again.
        self.send(Rpc::SnapshotFinish, &finish, timeout.max(INSTALL_TIMEOUT))
            .await
    }
}

/// How long a leader waits for a replica to install a snapshot it sent.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

impl<T: Transport> RaftNetwork<PartTypes> for Link<T> {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<PartTypes>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<ReplicaId>> {
        let timeout = option.hard_ttl();
        match self.send(Rpc::Append, &rpc, timeout).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(RPCError::RemoteError(RemoteError::new(self.target, error))),
            Err(error) => Err(self.rpc_error(error, RPCTypes::AppendEntries, timeout)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<ReplicaId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<ReplicaId>> {
        let timeout = option.hard_ttl();
        match self.send(Rpc::Vote, &rpc, timeout).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(error)) => Err(RPCError::RemoteError(RemoteError::new(self.target, error))),
            Err(error) => Err(self.rpc_error(error, RPCTypes::Vote, timeout)),
        }
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote<ReplicaId>,
        snapshot: Snapshot<PartTypes>,
        cancel: impl Future<Output = ReplicationClosed> + Send + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<ReplicaId>, StreamingError<PartTypes, Fatal<ReplicaId>>> {
        let timeout = option.hard_ttl();
        let transfer = self.send_snapshot(vote, &snapshot.snapshot.path, timeout);
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = transfer => match sent {
                Ok(Ok(answer)) => Ok(answer),
                Ok(Err(fatal)) => Err(StreamingError::RemoteError(RemoteError::new(self.target, fatal))),
                Err(TransportError::TimedOut { .. }) => Err(StreamingError::Timeout(Timeout {
                    action: RPCTypes::InstallSnapshot,
                    id: 0,
                    target: self.target,
                    timeout,
                })),
                Err(error @ TransportError::Unreachable { .. }) => {
                    Err(StreamingError::Unreachable(Unreachable::new(&error)))
                }
                Err(error @ TransportError::Refused { .. }) => {
                    Err(StreamingError::Network(NetworkError::new(&error)))
                }
            },
        }
    }
}
