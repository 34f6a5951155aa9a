#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn point(version: u64, x: f32, payload: Option<&str>) -> StoredPoint {
    StoredPoint {
        version,
        vector: vec![x, -x],
        payload: payload.map(str::to_owned),
    }
}

#[test]
fn writes_read_back_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(store.last_seq().unwrap(), 0);
        store
            .write(
                1,
                &WriteOp::Upsert(vec![(b"a".to_vec(), point(1, 1.0, Some("{\"k\":1}")))]),
            )
            .unwrap();
        store
            .write(
                2,
                &WriteOp::Upsert(vec![(b"b".to_vec(), point(2, 2.0, None))]),
            )
            .unwrap();
        store
            .write(3, &WriteOp::Delete(vec![b"a".to_vec()]))
            .unwrap();
        store.put_meta("config", b"{}").unwrap();
    }
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.last_seq().unwrap(), 3);
    assert_eq!(store.get(b"a").unwrap(), None);
    assert_eq!(store.get(b"b").unwrap(), Some(point(2, 2.0, None)));
    assert_eq!(
        store.get_meta("config").unwrap().as_deref(),
        Some(&b"{}"[..])
    );
    let log: Vec<(u64, OpKind)> = store
        .oplog_after(1)
        .unwrap()
        .map(|e| e.unwrap())
        .map(|(s, e)| (s, e.kind))
        .collect();
    assert_eq!(log, vec![(2, OpKind::Upsert), (3, OpKind::Delete)]);
}

#[test]
fn sequence_numbers_must_increase() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    store.write(5, &WriteOp::Delete(vec![])).unwrap();
    assert!(matches!(
        store.write(5, &WriteOp::Delete(vec![])),
        Err(StorageError::OutOfOrder { last: 5, got: 5 })
    ));
}

#[test]
fn trimming_keeps_later_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    for seq in 1..=10 {
        store
            .write(seq, &WriteOp::Delete(vec![seq.to_be_bytes().to_vec()]))
            .unwrap();
    }
    store.trim_oplog_below(8).unwrap();
    assert_eq!(store.oplog_first().unwrap(), Some(8));
    assert_eq!(store.oplog_after(0).unwrap().count(), 3);
}

#[derive(Debug, Clone)]
enum ModelOp {
    Upsert(Vec<(u8, i16)>),
    Delete(Vec<u8>),
    Reopen,
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        4 => prop::collection::vec((0u8..20, any::<i16>()), 0..6).prop_map(ModelOp::Upsert),
        2 => prop::collection::vec(0u8..20, 0..4).prop_map(ModelOp::Delete),
        1 => Just(ModelOp::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Model test: random upserts, deletes and reopens against a BTreeMap; after every step
    /// the store's scan equals the model and the op log names every write since the start.
    #[test]
    fn store_matches_a_btreemap(ops in prop::collection::vec(model_op(), 1..30)) {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions { sync_writes: false };
        let mut store = PartitionStore::open(dir.path(), options).unwrap();
        let mut model: BTreeMap<Vec<u8>, StoredPoint> = BTreeMap::new();
        let mut seq = 0;
        for op in ops {
            match op {
                ModelOp::Upsert(items) => {
                    seq += 1;
                    let items: Vec<(Vec<u8>, StoredPoint)> =
                        items.into_iter().map(|(k, x)| (vec![k], point(seq, f32::from(x), Some("{}")))).collect();
                    store.write(seq, &WriteOp::Upsert(items.clone())).unwrap();
                    model.extend(items);
                }
                ModelOp::Delete(keys) => {
                    seq += 1;
                    let keys: Vec<Vec<u8>> = keys.into_iter().map(|k| vec![k]).collect();
                    store.write(seq, &WriteOp::Delete(keys.clone())).unwrap();
                    for k in keys {
                        model.remove(&k);
                    }
                }
                ModelOp::Reopen => {
                    drop(store);
                    store = PartitionStore::open(dir.path(), options).unwrap();
                }
            }
            let stored: BTreeMap<Vec<u8>, StoredPoint> = store.scan_points().unwrap().map(|r| r.unwrap()).collect();
            prop_assert_eq!(&stored, &model);
            prop_assert_eq!(store.last_seq().unwrap(), seq);
            prop_assert_eq!(store.oplog_after(0).unwrap().count() as u64, seq);
        }
    }
}
