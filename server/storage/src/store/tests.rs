#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn point(version: u64, x: f32, payload: Option<&str>) -> StoredPoint {
    StoredPoint {
        version,
        vector: vec![x, -x],
        payload: payload.map(str::to_owned),
        sparse: Vec::new(),
        extra: Vec::new(),
    }
}

/// A point with sparse vectors is stored in the longer record and reads back whole, beside
/// dense points in the old record, through `get`, `scan_meta` and `scan_points` alike.
#[test]
fn sparse_vectors_read_back_beside_points_in_the_old_format() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    let mut with_sparse = point(1, 1.0, Some("{\"k\":1}"));
    with_sparse.sparse = vec![StoredSparse {
        name: "words".into(),
        indices: vec![2, 9],
        values: vec![0.5, 1.5],
    }];
    let plain = point(1, 2.0, None);
    store
        .write(
            1,
            &WriteOp::Upsert(vec![
                (b"a".to_vec(), with_sparse.clone()),
                (b"b".to_vec(), plain.clone()),
            ]),
        )
        .unwrap();
    assert_eq!(store.get(b"a").unwrap(), Some(with_sparse.clone()));
    assert_eq!(store.get(b"b").unwrap(), Some(plain.clone()));
    let metas: Vec<MetaRecord> = store.scan_meta().unwrap().map(Result::unwrap).collect();
    assert_eq!(metas[0].sparse, with_sparse.sparse);
    assert!(metas[1].sparse.is_empty());
    let points: Vec<StoredPoint> = store.scan_points().unwrap().map(|p| p.unwrap().1).collect();
    assert_eq!(points, vec![with_sparse, plain]);
    // A dense point's record is exactly the format stores had before sparse vectors.
    let old = bincode::serialize(&(1u64, Option::<String>::None)).unwrap();
    assert_eq!(encode_meta(&point(1, 2.0, None)), old);
}

/// Points with dense vectors beside the main one, with and without sparse vectors, take the
/// longest record and read back whole beside the two shorter formats.
#[test]
fn extra_dense_vectors_read_back_beside_the_shorter_formats() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    let image = StoredDense {
        name: "image".into(),
        values: vec![0.25, -1.0, 3.0],
    };
    let mut extra_only = point(1, 1.0, None);
    extra_only.extra = vec![image.clone()];
    let mut both = point(1, 2.0, Some("{\"k\":2}"));
    both.sparse = vec![StoredSparse {
        name: "words".into(),
        indices: vec![4],
        values: vec![2.0],
    }];
    both.extra = vec![image];
    let mut sparse_only = point(1, 3.0, None);
    sparse_only.sparse = both.sparse.clone();
    let plain = point(1, 4.0, Some("{}"));
    let all = vec![
        (b"a".to_vec(), extra_only),
        (b"b".to_vec(), both),
        (b"c".to_vec(), sparse_only),
        (b"d".to_vec(), plain),
    ];
    store.write(1, &WriteOp::Upsert(all.clone())).unwrap();
    for (key, point) in &all {
        assert_eq!(store.get(key).unwrap().as_ref(), Some(point));
    }
    let points: Vec<(Vec<u8>, StoredPoint)> =
        store.scan_points().unwrap().map(Result::unwrap).collect();
    assert_eq!(points, all);
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
        let options = StoreOptions { sync_writes: false, ..StoreOptions::default() };
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

fn replica(dir: &std::path::Path) -> PartitionStore {
    let options = StoreOptions {
        replicated: true,
        ..StoreOptions::default()
    };
    PartitionStore::open(dir, options).unwrap()
}

#[test]
fn the_log_appends_reads_truncates_and_purges() {
    let dir = tempfile::tempdir().unwrap();
    let store = replica(dir.path());
    assert_eq!(store.log_last().unwrap(), None);
    let entries: Vec<(u64, Vec<u8>)> = (1..=10).map(|i| (i, vec![i as u8; 3])).collect();
    store.log_append(&entries).unwrap();
    assert_eq!(store.log_range(3, 6).unwrap(), entries[2..5].to_vec());
    assert_eq!(store.log_last().unwrap(), Some((10, vec![10; 3])));

    store.log_truncate_from(8).unwrap();
    assert_eq!(store.log_last().unwrap(), Some((7, vec![7; 3])));
    // A new leader's entry replaces what was at its index.
    store.log_append(&[(8, b"new".to_vec())]).unwrap();
    assert_eq!(store.log_range(8, 9).unwrap(), vec![(8, b"new".to_vec())]);

    store.log_purge_through(4, ("purged", b"4")).unwrap();
    assert_eq!(
        store.log_range(0, 100).unwrap().first().map(|e| e.0),
        Some(5)
    );
    assert_eq!(
        store.log_record("purged").unwrap().as_deref(),
        Some(&b"4"[..])
    );
    store.put_log_record("vote", Some(b"v")).unwrap();
    drop(store);

    // Everything above was synced; a standalone open still opens the log's families.
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert_eq!(store.log_last().unwrap(), Some((8, b"new".to_vec())));
    assert_eq!(
        store.log_record("vote").unwrap().as_deref(),
        Some(&b"v"[..])
    );
    store.put_log_record("vote", None).unwrap();
    assert_eq!(store.log_record("vote").unwrap(), None);
}

#[test]
fn a_standalone_partition_has_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = PartitionStore::open(dir.path(), StoreOptions::default()).unwrap();
    assert!(matches!(
        store.log_last(),
        Err(StorageError::Corrupt { .. })
    ));
}

#[test]
fn write_many_skips_indexes_and_stores_meta_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = replica(dir.path());
    let up = WriteOp::Upsert(vec![(b"a".to_vec(), point(3, 1.0, None))]);
    let del = WriteOp::Delete(vec![b"a".to_vec()]);
    let up2 = WriteOp::Upsert(vec![(b"b".to_vec(), point(9, 2.0, Some("{}")))]);
    store
        .write_many(
            &[(3, &up), (5, &del), (9, &up2)],
            &[("applied", b"9")],
            false,
        )
        .unwrap();
    assert_eq!(store.last_seq().unwrap(), 9);
    assert_eq!(store.get(b"a").unwrap(), None);
    assert_eq!(store.get(b"b").unwrap(), Some(point(9, 2.0, Some("{}"))));
    assert_eq!(
        store.get_meta("applied").unwrap().as_deref(),
        Some(&b"9"[..])
    );
    let seqs: Vec<u64> = store
        .oplog_after(0)
        .unwrap()
        .map(|e| e.unwrap().0)
        .collect();
    assert_eq!(seqs, vec![3, 5, 9]);
    // Only meta: an entry with no data (a leader's blank entry) still moves `applied`.
    store.write_many(&[], &[("applied", b"10")], false).unwrap();
    assert_eq!(
        store.get_meta("applied").unwrap().as_deref(),
        Some(&b"10"[..])
    );
    assert!(matches!(
        store.write_many(&[(9, &del)], &[], false),
        Err(StorageError::OutOfOrder { last: 9, got: 9 })
    ));
}

#[test]
fn an_exported_state_replaces_another_replicas_state() {
    let from_dir = tempfile::tempdir().unwrap();
    let to_dir = tempfile::tempdir().unwrap();
    let export_dir = tempfile::tempdir().unwrap();
    let from = replica(from_dir.path());
    let to = replica(to_dir.path());
    for seq in 1..=300u64 {
        let key = (seq % 97).to_be_bytes().to_vec();
        let op = if seq % 5 == 0 {
            WriteOp::Delete(vec![key])
        } else {
            // Vectors of 64 floats, so the state spans several small files.
            let p = StoredPoint {
                version: seq,
                vector: vec![seq as f32; 64],
                payload: Some("{\"x\":1}".into()),
                sparse: Vec::new(),
                extra: Vec::new(),
            };
            WriteOp::Upsert(vec![(key, p)])
        };
        from.write(seq, &op).unwrap();
    }
    from.put_meta("applied", b"300").unwrap();
    // The receiver holds stale points of its own, and one key the sender never had.
    to.write(
        1,
        &WriteOp::Upsert(vec![(b"stale".to_vec(), point(1, 9.0, None))]),
    )
    .unwrap();
    to.log_append(&[(1, b"entry".to_vec())]).unwrap();

    // Small files, so the state spans several per family.
    let export = from.export_state(export_dir.path(), 4 << 10).unwrap();
    assert!(
        export
            .files
            .iter()
            .filter(|f| f.family == "vectors")
            .count()
            > 1
    );
    assert_eq!(
        export.meta.get("applied").map(Vec::as_slice),
        Some(&b"300"[..])
    );
    // Later writes are not in the export.
    from.write(301, &WriteOp::Delete(vec![1u64.to_be_bytes().to_vec()]))
        .unwrap();

    to.replace_state(export_dir.path(), &export.files).unwrap();
    let expected: Vec<(Vec<u8>, StoredPoint)> = {
        let reopened = tempfile::tempdir().unwrap();
        let copy = replica(reopened.path());
        copy.replace_state(export_dir.path(), &export.files)
            .unwrap();
        copy.scan_points().unwrap().map(|r| r.unwrap()).collect()
    };
    let got: Vec<(Vec<u8>, StoredPoint)> = to.scan_points().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, expected);
    assert!(got.iter().any(|(k, _)| *k == 1u64.to_be_bytes().to_vec()));
    assert!(to.get(b"stale").unwrap().is_none());
    assert_eq!(to.last_seq().unwrap(), 300);
    assert_eq!(to.oplog_after(0).unwrap().count(), 300);
    // The receiver's own log is not part of the state.
    assert_eq!(to.log_last().unwrap(), Some((1, b"entry".to_vec())));
    // The export directory is left whole, and the state survives a reopen.
    assert!(export
        .files
        .iter()
        .all(|f| export_dir.path().join(&f.name).is_file()));
    drop(to);
    let to = replica(to_dir.path());
    assert_eq!(to.scan_points().unwrap().count(), expected.len());
}

#[test]
fn a_damaged_state_file_is_refused_before_the_state_is_touched() {
    let from_dir = tempfile::tempdir().unwrap();
    let to_dir = tempfile::tempdir().unwrap();
    let export_dir = tempfile::tempdir().unwrap();
    let from = replica(from_dir.path());
    from.write(
        1,
        &WriteOp::Upsert(vec![(b"a".to_vec(), point(1, 1.0, None))]),
    )
    .unwrap();
    let export = from.export_state(export_dir.path(), 1 << 20).unwrap();
    let to = replica(to_dir.path());
    to.write(
        1,
        &WriteOp::Upsert(vec![(b"mine".to_vec(), point(1, 2.0, None))]),
    )
    .unwrap();
    let victim = export_dir.path().join(&export.files[0].name);
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    assert!(matches!(
        to.replace_state(export_dir.path(), &export.files),
        Err(StorageError::Corrupt { .. })
    ));
    assert!(to.get(b"mine").unwrap().is_some());
}
