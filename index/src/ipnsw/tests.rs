use super::*;
use crate::dataset::{
    ground_truth, load_dataset, long_tailed_norms, recall_at_k, shared_data_dir, Vectors,
};
use crate::{new_in_memory, read_index, IndexParams, Placement, Trainers};

fn search_all(index: &dyn VectorIndex, queries: &Vectors, k: usize, ef: usize) -> Vec<Vec<u32>> {
    let params = SearchParams {
        ef: Some(ef),
        exact: false,
        ..SearchParams::default()
    };
    queries
        .rows()
        .map(|q| {
            let (hits, _) = index.search(q, k, &params, None).unwrap();
            hits.iter().map(|n| n.slot).collect()
        })
        .collect()
}

#[test]
fn movielens_recall_and_identical_after_reload() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    let index = IpNswPlus::build(IpNswPlusParams::default(), 64, &data.base.data).unwrap();
    let results = search_all(&index, &data.queries, 10, 64);
    let recall = recall_at_k(&results, &data.ground_truth, 10);
    assert!(recall >= 0.95, "movielens recall@10 at ef=64 is {recall}");

    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    let reloaded = read_index(
        IndexKind::IpNswPlus,
        &bytes,
        &Trainers::default(),
        &Placement::Memory,
    )
    .unwrap();
    assert_eq!(reloaded.kind(), IndexKind::IpNswPlus);
    assert_eq!(
        search_all(reloaded.as_ref(), &data.queries, 10, 64),
        results
    );
}

#[test]
fn long_tailed_batches_reach_recall_and_count_work() {
    let base = long_tailed_norms(6_000, 32, 0.8, 7);
    let queries = long_tailed_norms(100, 32, 0.0, 8);
    let truth = ground_truth(&base, &queries, Metric::InnerProduct, 10);
    let index = IpNswPlus::new(IpNswPlusParams::default(), 32).unwrap();
    // Uneven batches, some below the parallel threshold, as a collection feeds them.
    let mut start = 0;
    for rows in [1, 3, 500, 7, 2_489, 3_000] {
        let first = index
            .add(&base.data[start * 32..(start + rows) * 32])
            .unwrap();
        assert_eq!(first as usize, start);
        start += rows;
    }
    assert_eq!(index.len(), 6_000);
    let recall = recall_at_k(&search_all(&index, &queries, 10, 128), &truth, 10);
    assert!(
        recall >= 0.95,
        "long-tailed recall@10 at ef=128 is {recall}"
    );

    let (_, stats) = index
        .search(queries.row(0), 10, &SearchParams::default(), None)
        .unwrap();
    assert!(
        stats.distance_computations > 10 && stats.distance_computations < 6_000,
        "a graph search computes more than k and fewer than n distances: {stats:?}"
    );
}

#[test]
fn exact_search_is_the_ground_truth_and_filters_apply() {
    let base = long_tailed_norms(1_000, 16, 1.0, 3);
    let queries = long_tailed_norms(20, 16, 0.0, 4);
    let truth = ground_truth(&base, &queries, Metric::InnerProduct, 5);
    let index = IpNswPlus::build(IpNswPlusParams::default(), 16, &base.data).unwrap();
    let exact = SearchParams {
        ef: None,
        exact: true,
        ..SearchParams::default()
    };
    for (q, want) in queries.rows().zip(&truth) {
        let (hits, _) = index.search(q, 5, &exact, None).unwrap();
        assert_eq!(&hits.iter().map(|n| n.slot).collect::<Vec<_>>(), want);
        let even = |slot: Slot| slot.is_multiple_of(2);
        let (hits, _) = index
            .search(q, 5, &SearchParams::default(), Some(&even))
            .unwrap();
        assert_eq!(hits.len(), 5);
        assert!(hits.iter().all(|n| n.slot % 2 == 0));
    }
}

#[test]
fn needs_the_inner_product_metric() {
    for params in [
        IndexParams::IpNswPlus(IpNswPlusParams::default()),
        IndexParams::IpNsw(crate::hnsw::HnswParams::default()),
    ] {
        let err = new_in_memory(&params, Metric::L2, 8)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("inner-product"), "{err}");
        assert!(new_in_memory(&params, Metric::InnerProduct, 8).is_ok());
    }
}

#[test]
fn empty_index_and_zero_k_return_nothing() {
    let index = IpNswPlus::new(IpNswPlusParams::default(), 4).unwrap();
    let q = [1.0, 0.0, 0.0, 0.0];
    assert!(index
        .search(&q, 3, &SearchParams::default(), None)
        .unwrap()
        .0
        .is_empty());
    index
        .add(&[1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0])
        .unwrap();
    assert!(index
        .search(&q, 0, &SearchParams::default(), None)
        .unwrap()
        .0
        .is_empty());
    let (hits, _) = index.search(&q, 3, &SearchParams::default(), None).unwrap();
    assert_eq!(hits.iter().map(|n| n.slot).collect::<Vec<_>>(), [0, 1]);
    assert!(index
        .search(&q[..3], 3, &SearchParams::default(), None)
        .is_err());
}

#[test]
fn damaged_files_are_refused() {
    let base = long_tailed_norms(300, 8, 1.0, 5);
    let index = IpNswPlus::build(IpNswPlusParams::default(), 8, &base.data).unwrap();
    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    assert!(IpNswPlus::read_from(&bytes[..bytes.len() - 4]).is_err());
    let mut tail = bytes.clone();
    tail.push(0);
    assert!(IpNswPlus::read_from(&tail).is_err());
    // The last node's inner-product list ends the file: `[count, 2·m words]`.
    let count_at = bytes.len() - 4 * (1 + 2 * IpNswPlusParams::default().m);
    let mut overflow = bytes.clone();
    overflow[count_at..count_at + 4].copy_from_slice(&65u32.to_le_bytes());
    assert!(IpNswPlus::read_from(&overflow).is_err());
    let mut outside = bytes;
    outside[count_at..count_at + 4].copy_from_slice(&1u32.to_le_bytes());
    outside[count_at + 4..count_at + 8].copy_from_slice(&300u32.to_le_bytes());
    assert!(IpNswPlus::read_from(&outside).is_err());
}
