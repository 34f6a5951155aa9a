//! Compare-and-set entries (`PartitionCommand::UpsertIf`) in a real group of one replica: an
//! edit from a current read is written, one from a stale read is refused, and of two edits
//! racing from the same read exactly one is written, whether they land in one apply batch or
//! in two.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use cairn_consensus::{
    Group, GroupId, Groups, LogPolicy, PartitionCommand, ReplicaAddr, Row, Rpc, Timing, Transport,
    TransportError,
};
use cairn_storage::{PartitionStore, StoreOptions};

/// A group of one has no one to call.
struct Alone;

impl Transport for Alone {
    async fn call(
        &self,
        node: u64,
        _group: GroupId,
        _rpc: Rpc,
        _body: Vec<u8>,
        _timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        Err(TransportError::Unreachable {
            node,
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_write_holds_only_against_the_version_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let options = StoreOptions {
        replicated: true,
        ..StoreOptions::default()
    };
    let store = Arc::new(PartitionStore::open(&dir.path().join("db"), options).unwrap());
    let groups = Groups::default();
    let group = Group::open(
        GroupId::Meta,
        1,
        Timing::META,
        LogPolicy::default(),
        dir.path(),
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
