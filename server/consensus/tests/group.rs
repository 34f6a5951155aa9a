//! A partition's Raft group in one process: three (then four) real replicas, each with its own
//! RocksDB, joined by an in-process network that can cut links. Checks what the cluster is
//! built on: a committed write reaches every replica's state with the same index; an isolated
//! old leader cannot acknowledge (terms fence it) and its unacknowledged entry is dropped when
//! it rejoins; and a replica that is new after the log was purged is seeded by a snapshot.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::{
    Addressee, GroupId, Groups, HandleError, LogStore, Network, PartTypes, PartitionCommand,
    ReplicaAddr, ReplicaId, Row, Rpc, StateMachine, Transport, TransportError,
};
use cairn_storage::{PartitionStore, StoreOptions, StoredPoint};
use openraft::error::RaftError;
use openraft::raft::{VoteRequest, VoteResponse};
use openraft::{Config, Raft, ServerState, SnapshotPolicy, Vote};
use parking_lot::Mutex;
use tempfile::TempDir;

/// The nodes (each hosting its groups) and which links are cut: the in-process stand-in for
/// the server's HTTP transport, so these tests run the crate's own network and dispatch
/// (message encoding, snapshot chunks) without sockets.
#[derive(Default)]
struct Mesh {
    nodes: Mutex<BTreeMap<u64, Arc<Groups>>>,
    cut: Mutex<BTreeSet<(u64, u64)>>,
}

impl Mesh {
    fn open(&self, from: u64, to: u64) -> Result<(), TransportError> {
        if self.cut.lock().contains(&(from, to)) {
            return Err(TransportError::Unreachable {
                node: to,
                reason: format!("{from} -> {to} is cut"),
            });
        }
        Ok(())
    }

    fn isolate(&self, id: u64) {
        let ids: Vec<u64> = self.nodes.lock().keys().copied().collect();
        let mut cut = self.cut.lock();
        for other in ids.into_iter().filter(|o| *o != id) {
            cut.insert((id, other));
            cut.insert((other, id));
        }
    }

    fn heal(&self) {
        self.cut.lock().clear();
    }
}

/// One node's end of the mesh.
struct NodeTransport {
    from: u64,
    mesh: Arc<Mesh>,
}

impl Transport for NodeTransport {
    async fn call(
        &self,
        to: Addressee,
        rpc: Rpc,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let node = to.node;
        self.mesh.open(self.from, node)?;
        let groups = self.mesh.nodes.lock().get(&node).cloned();
        let groups = groups.ok_or(TransportError::Unreachable {
            node,
            reason: "no such node".into(),
        })?;
        let answer = tokio::time::timeout(timeout, groups.handle(to.group, to.replica, rpc, &body))
            .await
            .map_err(|_| TransportError::TimedOut { node })?
            .map_err(|e| TransportError::Refused {
                node,
                reason: e.to_string(),
            })?;
        // The answer crosses the same link back.
        self.mesh.open(node, self.from)?;
        Ok(answer)
    }
}

const GROUP: GroupId = GroupId::Partition {
    collection: 7,
    partition: 0,
};

/// One replica: its directory, store and Raft.
struct Replica {
    _dir: TempDir,
    store: Arc<PartitionStore>,
    raft: Raft<PartTypes>,
}

fn config() -> Arc<Config> {
    let config = Config {
        heartbeat_interval: 50,
        election_timeout_min: 200,
        election_timeout_max: 400,
        // Purge every entry a snapshot covers, so a newcomer must take the snapshot.
        max_in_snapshot_log_to_keep: 0,
        purge_batch_size: 1,
        snapshot_policy: SnapshotPolicy::Never,
        ..Config::default()
    };
    Arc::new(config.validate().unwrap())
}

/// Replica `id` of the group, alone on node `id`.
async fn replica(mesh: &Arc<Mesh>, id: ReplicaId) -> Replica {
    let dir = TempDir::new().unwrap();
    let options = StoreOptions {
        replicated: true,
        sync_writes: true,
    };
    let store = Arc::new(PartitionStore::open(&dir.path().join("db"), options).unwrap());
    let state = StateMachine::open(store.clone(), dir.path(), ()).unwrap();
    let snapshots = state.snapshots_dir().to_path_buf();
    let transport = Arc::new(NodeTransport {
        from: id,
        mesh: mesh.clone(),
    });
    let network = Network::new(transport, GROUP);
    let raft = Raft::new(id, config(), network, LogStore::new(store.clone()), state)
        .await
        .unwrap();
    let groups = Arc::new(Groups::default());
    groups.insert(GROUP, id, raft.clone(), &snapshots);
    mesh.nodes.lock().insert(id, groups);
    Replica {
        _dir: dir,
        store,
        raft,
    }
}

fn upsert(i: u32, value: &str) -> PartitionCommand {
    PartitionCommand::Upsert(vec![Row {
        key: i.to_be_bytes().to_vec(),
        vector: vec![i as f32, 1.0],
        payload: Some(format!("{{\"v\":\"{value}\"}}")),
    }])
}

async fn leader_among(replicas: &BTreeMap<ReplicaId, Replica>, among: &[ReplicaId]) -> ReplicaId {
    for _ in 0..200 {
        for id in among {
            let metrics = replicas[id].raft.metrics().borrow().clone();
            if metrics.state == ServerState::Leader && metrics.current_leader == Some(*id) {
                return *id;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no leader among {among:?}");
}

fn content(store: &PartitionStore) -> Vec<(Vec<u8>, StoredPoint)> {
    store.scan_points().unwrap().map(|p| p.unwrap()).collect()
}

/// Waits until every replica in `ids` has applied `index`.
async fn applied_everywhere(
    replicas: &BTreeMap<ReplicaId, Replica>,
    ids: &[ReplicaId],
    index: u64,
) {
    for id in ids {
        replicas[id]
            .raft
            .wait(Some(Duration::from_secs(10)))
            .applied_index_at_least(Some(index), "caught up")
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_commit_everywhere_a_fenced_leader_cannot_acknowledge_and_a_newcomer_takes_the_snapshot(
) {
    // `RUST_LOG=openraft=debug` shows the group's own account when this fails.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let mesh = Arc::new(Mesh::default());
    let mut replicas = BTreeMap::new();
    for id in 1..=3 {
        replicas.insert(id, replica(&mesh, id).await);
    }
    let members: BTreeMap<ReplicaId, ReplicaAddr> =
        (1..=3).map(|id| (id, ReplicaAddr { node: id })).collect();
    replicas[&1].raft.initialize(members).await.unwrap();
    let leader = leader_among(&replicas, &[1, 2, 3]).await;

    // 1. Writes commit and reach every replica's state at the same index.
    let mut last = 0;
    for i in 0..50 {
        last = replicas[&leader]
            .raft
            .client_write(upsert(i, "first"))
            .await
            .unwrap()
            .data
            .index;
    }
    applied_everywhere(&replicas, &[1, 2, 3], last).await;
    let reference = content(&replicas[&leader].store);
    assert_eq!(reference.len(), 50);
    for r in replicas.values() {
        assert_eq!(content(&r.store), reference);
        assert_eq!(r.store.last_seq().unwrap(), last);
    }

    // 2. The leader is cut off. A write sent to it is never acknowledged; the other two elect
    //    a leader with a higher term that acknowledges writes of its own.
    mesh.isolate(leader);
    let old = replicas[&leader].raft.clone();
    let fenced = tokio::spawn(async move { old.client_write(upsert(0, "lost")).await });
    let others: Vec<ReplicaId> = (1..=3).filter(|id| *id != leader).collect();
    let new_leader = leader_among(&replicas, &others).await;
    for i in 0..10 {
        last = replicas[&new_leader]
            .raft
            .client_write(upsert(i, "second"))
            .await
            .unwrap()
            .data
            .index;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !fenced.is_finished(),
        "an isolated leader acknowledged a write"
    );

    // Healed, the old leader learns the new term; its entry is replaced, never applied.
    mesh.heal();
    let answer = tokio::time::timeout(Duration::from_secs(10), fenced)
        .await
        .unwrap()
        .unwrap();
    assert!(
        answer.is_err(),
        "the fenced write must fail, got {answer:?}"
    );
    applied_everywhere(&replicas, &[1, 2, 3], last).await;
    let reference = content(&replicas[&new_leader].store);
    for r in replicas.values() {
        assert_eq!(content(&r.store), reference);
    }
    assert!(reference
        .iter()
        .all(|(_, p)| !p.payload.as_deref().unwrap_or("").contains("lost")));

    // 3. A snapshot is taken and the log it covers purged; a new replica can only catch up
    //    from the snapshot, and ends with the same content and index.
    let leader_raft = replicas[&new_leader].raft.clone();
    // Read the metrics in a statement of their own: a `borrow()` alive across an await would
    // hold the metrics channel's lock and stall the replica's core.
    let applied = leader_raft.metrics().borrow().last_applied.unwrap();
    leader_raft.trigger().snapshot().await.unwrap();
    leader_raft
        .wait(Some(Duration::from_secs(10)))
        .snapshot(applied, "snapshot built")
        .await
        .unwrap();
    leader_raft.trigger().purge_log(last).await.unwrap();
    leader_raft
        .wait(Some(Duration::from_secs(10)))
        .metrics(|m| m.purged.map(|p| p.index) == Some(last), "purged")
        .await
        .unwrap();

    replicas.insert(4, replica(&mesh, 4).await);
    leader_raft
        .add_learner(4, ReplicaAddr { node: 4 }, true)
        .await
        .unwrap();
    applied_everywhere(&replicas, &[4], last).await;
    assert_eq!(content(&replicas[&4].store), reference);
    let snapshot = replicas[&4].raft.metrics().borrow().snapshot;
    assert!(
        snapshot.is_some(),
        "the newcomer was not seeded by a snapshot"
    );

    for r in replicas.values() {
        r.raft.shutdown().await.unwrap();
    }
}

/// A node answers a Raft message only for the replica it hosts: a replica that lost its files
/// comes back on its node under a new id while the lost one is still a member, and the new one
/// must not grant votes or acknowledge entries in the lost one's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_only_for_the_replica_it_hosts() {
    let mesh = Arc::new(Mesh::default());
    let hosted = replica(&mesh, 1).await;
    let groups = mesh.nodes.lock().get(&1).cloned().unwrap();
    let vote = bincode::serialize(&VoteRequest::<ReplicaId>::new(Vote::new(1, 2), None)).unwrap();

    let other = groups
        .handle(GROUP, Some(3), Rpc::Vote, &vote)
        .await
        .unwrap_err();
    assert!(
        matches!(
            other,
            HandleError::OtherReplica {
                asked: 3,
                hosted: 1,
                ..
            }
        ),
        "{other}"
    );
    let unnamed = groups
        .handle(GROUP, None, Rpc::Vote, &vote)
        .await
        .unwrap_err();
    assert!(
        matches!(unnamed, HandleError::BadMessage { .. }),
        "{unnamed}"
    );
    let answer = groups
        .handle(GROUP, Some(1), Rpc::Vote, &vote)
        .await
        .unwrap();
    let answer: Result<VoteResponse<ReplicaId>, RaftError<ReplicaId>> =
        bincode::deserialize(&answer).unwrap();
    assert!(answer.unwrap().vote_granted, "the replica itself answers");
    hosted.raft.shutdown().await.unwrap();
}
