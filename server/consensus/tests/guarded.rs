//! Compare-and-set entries (`PartitionCommand::UpsertIf`, `UpsertPointsIf`) in a real group of one replica: an
//! edit from a current read is written, one from a stale read is refused, and of two edits
//! racing from the same read exactly one is written, whether they land in one apply batch or
//! in two. Fenced entries (`PartitionCommand::Fenced`): once an epoch is applied, a write of
//! a lower epoch is refused and writes nothing, in the same batch or a later one.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::{
    Addressee, Group, GroupId, Groups, LogPolicy, PartitionCommand, PointRow, ReplicaAddr, Row,
    Rpc, Timing, Transport, TransportError,
};
use cairn_storage::{PartitionStore, StoreOptions, StoredDense, StoredSparse};

/// A group of one has no one to call.
struct Alone;

impl Transport for Alone {
    async fn call(
        &self,
        to: Addressee,
        _rpc: Rpc,
        _body: Vec<u8>,
        _timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        Err(TransportError::Unreachable {
            node: to.node,
            reason: "a group of one".into(),
        })
    }
}

fn row(key: &str, value: &str) -> Row {
    Row {
        key: key.as_bytes().to_vec(),
        vector: Vec::new(),
        payload: Some(value.to_owned()),
    }
}

fn put_if(key: &str, version: u64, value: &str) -> PartitionCommand {
    PartitionCommand::UpsertIf {
        expect: vec![(key.as_bytes().to_vec(), version)],
        rows: vec![row(key, value)],
    }
}

/// A group of one replica, initialized, over a store in `dir`.
async fn one_replica(dir: &std::path::Path) -> (Arc<PartitionStore>, Groups, Group) {
    let options = StoreOptions {
        replicated: true,
        ..StoreOptions::default()
    };
    let store = Arc::new(PartitionStore::open(&dir.join("db"), options).unwrap());
    let groups = Groups::default();
    let group = Group::open(
        GroupId::Meta,
        1,
        Timing::META,
        LogPolicy::default(),
        dir,
        store.clone(),
        (),
        Arc::new(Alone),
        &groups,
    )
    .await
    .unwrap();
    group
        .initialize([(1, ReplicaAddr { node: 1 })].into_iter().collect())
        .await
        .unwrap();
    (store, groups, group)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_holds_only_against_the_version_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let (store, groups, group) = one_replica(dir.path()).await;
    let within = Duration::from_secs(10);
    let version = |key: &str| store.get(key.as_bytes()).unwrap().map_or(0, |p| p.version);
    let value = |key: &str| store.get(key.as_bytes()).unwrap().unwrap().payload.unwrap();

    let first = group
        .propose(PartitionCommand::Upsert(vec![row("k", "one")]), within)
        .await
        .unwrap();
    assert!(first.held);
    assert_eq!(version("k"), first.index);

    let second = group
        .propose(put_if("k", first.index, "two"), within)
        .await
        .unwrap();
    assert!(second.held);
    assert_eq!((version("k"), value("k")), (second.index, "two".to_owned()));

    // From the stale read: refused, nothing written.
    let stale = group
        .propose(put_if("k", first.index, "three"), within)
        .await
        .unwrap();
    assert!(!stale.held);
    assert_eq!((version("k"), value("k")), (second.index, "two".to_owned()));

    // Absent is version 0.
    let fresh = group.propose(put_if("new", 0, "a"), within).await.unwrap();
    assert!(fresh.held);
    let again = group.propose(put_if("new", 0, "b"), within).await.unwrap();
    assert!(!again.held);

    // Races from one read: exactly one of each pair wins, in one batch or in two.
    for round in 0..20 {
        let read = version("k");
        let (a, b) = tokio::join!(
            group.propose(put_if("k", read, &format!("a{round}")), within),
            group.propose(put_if("k", read, &format!("b{round}")), within),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.held ^ b.held, "round {round}: {a:?} {b:?}");
        let winner = if a.held { a.index } else { b.index };
        assert_eq!(version("k"), winner);
    }
    group.shutdown(&groups).await;
}

/// A point with a sparse and a named dense vector beside its main one.
fn point_row(key: &str, value: &str) -> PointRow {
    PointRow {
        row: row(key, value),
        sparse: vec![StoredSparse {
            name: "text".into(),
            indices: vec![1, 7],
            values: vec![0.5, 2.0],
        }],
        extra: vec![StoredDense {
            name: "image".into(),
            values: vec![1.0, 2.0],
        }],
    }
}

/// The guarded write of whole points (a payload or vector update's read-modify-write):
/// written with every vector when the versions hold, refused when a write came between, and of
/// two edits racing from one read exactly one is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_point_write_keeps_every_vector_and_holds_only_once() {
    let dir = tempfile::tempdir().unwrap();
    let (store, groups, group) = one_replica(dir.path()).await;
    let within = Duration::from_secs(10);
    let version = |key: &str| store.get(key.as_bytes()).unwrap().map_or(0, |p| p.version);
    let put_if = |key: &str, version: u64, value: &str| PartitionCommand::UpsertPointsIf {
        expect: vec![(key.as_bytes().to_vec(), version)],
        points: vec![point_row(key, value)],
    };
    let first = group.propose(put_if("p", 0, "one"), within).await.unwrap();
    assert!(first.held);
    let stored = store.get(b"p").unwrap().unwrap();
    assert_eq!(stored.version, first.index);
    assert_eq!(stored.sparse, point_row("p", "").sparse);
    assert_eq!(stored.extra, point_row("p", "").extra);
    assert!(
        !group
            .propose(put_if("p", 0, "two"), within)
            .await
            .unwrap()
            .held
    );
    // A plain upsert between the read and the guarded write: the guarded one is refused.
    let plain = PartitionCommand::UpsertPoints(vec![point_row("p", "plain")]);
    assert!(group.propose(plain, within).await.unwrap().held);
    let refused = group
        .propose(put_if("p", first.index, "late"), within)
        .await
        .unwrap();
    assert!(!refused.held);
    assert_eq!(
        store.get(b"p").unwrap().unwrap().payload.as_deref(),
        Some("plain")
    );
    for round in 0..10 {
        let read = version("p");
        let (a, b) = tokio::join!(
            group.propose(put_if("p", read, &format!("a{round}")), within),
            group.propose(put_if("p", read, &format!("b{round}")), within),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.held ^ b.held, "round {round}: {a:?} {b:?}");
        assert_eq!(version("p"), if a.held { a.index } else { b.index });
    }
    group.shutdown(&groups).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_below_the_partition_s_epoch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (store, groups, group) = one_replica(dir.path()).await;
    let within = Duration::from_secs(10);
    let held = |key: &str| store.get(key.as_bytes()).unwrap().is_some();
    let upsert =
        |key: &str, epoch: u64| PartitionCommand::Upsert(vec![row(key, "v")]).fenced(epoch);

    // Unfenced and epoch-5 writes hold while no higher epoch was seen.
    assert!(group.propose(upsert("a", 0), within).await.unwrap().held);
    assert!(group.propose(upsert("b", 5), within).await.unwrap().held);
    // A new writer fences at 7: the writer of epoch 5 can no longer write.
    assert!(
        group
            .propose(PartitionCommand::fence(7), within)
            .await
            .unwrap()
            .held
    );
    assert!(!group.propose(upsert("c", 5), within).await.unwrap().held);
    assert!(!held("c"));
    let delete = PartitionCommand::Delete(vec![b"b".to_vec()]).fenced(5);
    assert!(!group.propose(delete, within).await.unwrap().held);
    assert!(held("b"));
    // The current writer and a later one still write.
    assert!(group.propose(upsert("d", 7), within).await.unwrap().held);
    assert!(group.propose(upsert("e", 9), within).await.unwrap().held);
    assert!(held("d") && held("e"));
    // In one apply batch: the fence comes first in the log, so the old writer's entry after
    // it is refused, whichever order the two were sent in.
    let (new, old) = tokio::join!(
        group.propose(PartitionCommand::fence(11), within),
        group.propose(upsert("f", 9), within),
    );
    let (new, old) = (new.unwrap(), old.unwrap());
    assert!(new.held);
    assert_eq!(old.held, old.index < new.index);
    assert_eq!(held("f"), old.held);
    assert!(!group.propose(upsert("g", 9), within).await.unwrap().held);
    group.shutdown(&groups).await;
}
