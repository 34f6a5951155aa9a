use super::*;
use crate::dataset::{
    ground_truth, load_dataset, long_tailed_norms, recall_at_k, shared_data_dir, Vectors,
};
use crate::{new_in_memory, read_index, IndexParams, Placement, Trainers};

fn search_all(index: &dyn VectorIndex, queries: &Vectors, k: usize, probe: usize) -> Vec<Vec<u32>> {
    let params = SearchParams {
        ef: Some(probe),
        exact: false,
        ..SearchParams::default()
    };
    queries
        .rows()
        .map(|q| {
            let (hits, stats) = index.search(q, k, &params, None).unwrap();
            assert!(stats.distance_computations <= probe.max(k) as u64);
            hits.iter().map(|n| n.slot).collect()
        })
        .collect()
}

#[test]
fn movielens_range_lsh_beats_simple_lsh_and_reloads_identically() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    let range = RangeLsh::build(LshParams::default(), 64, &data.base.data).unwrap();
    let simple = RangeLsh::build(LshParams::simple(32), 64, &data.base.data).unwrap();
    assert_eq!(range.kind(), IndexKind::RangeLsh);
    assert_eq!(simple.kind(), IndexKind::SimpleLsh);
    let budget = 1024;
    let r = recall_at_k(
        &search_all(&range, &data.queries, 10, budget),
        &data.ground_truth,
        10,
    );
    let s = recall_at_k(
        &search_all(&simple, &data.queries, 10, budget),
        &data.ground_truth,
        10,
    );
    assert!(
        r >= 0.9,
        "range-lsh recall@10 probing {budget} items is {r}"
    );
    assert!(r > s, "range-lsh {r} vs simple-lsh {s}");

    let mut bytes = Vec::new();
    range.write_to(&mut bytes);
    let reloaded = read_index(
        IndexKind::RangeLsh,
        &bytes,
        &Trainers::default(),
        &Placement::Memory,
    )
    .unwrap();
    assert_eq!(
        search_all(reloaded.as_ref(), &data.queries, 10, budget),
        search_all(&range, &data.queries, 10, budget)
    );
    assert!(read_index(
        IndexKind::SimpleLsh,
        &bytes,
        &Trainers::default(),
        &Placement::Memory
    )
    .is_err());
}

#[test]
fn incremental_batches_repartition_and_stay_exact_at_full_budget() {
    let base = long_tailed_norms(3_000, 16, 1.0, 9);
    let queries = long_tailed_norms(30, 16, 0.0, 10);
    let truth = ground_truth(&base, &queries, Metric::InnerProduct, 10);
    let index = RangeLsh::new(LshParams::default(), 16).unwrap();
    let mut start = 0;
    for rows in [1, 2, 40, 957, 2_000] {
        index
            .add(&base.data[start * 16..(start + rows) * 16])
            .unwrap();
        start += rows;
    }
    let inner = index.inner.read();
    let top = *inner.bounds.last().unwrap();
    assert!(inner.norms.iter().all(|&x| x <= top));
    let items: usize = inner.buckets.iter().map(|b| b.items.len()).sum();
    assert_eq!(items, 3_000, "every item in exactly one bucket");
    drop(inner);
    // Probing every item is an exact search.
    let all = search_all(&index, &queries, 10, 3_000);
    assert_eq!(recall_at_k(&all, &truth, 10), 1.0);
}

#[test]
fn a_bucket_of_a_larger_range_ranks_first_at_equal_matching_bits() {
    let index = RangeLsh::new(LshParams::default(), 8).unwrap();
    let bounds: Vec<f32> = (1..=32).map(|j| j as f32).collect();
    let rank = index.probe_ranks(&bounds);
    let bits = index.params.hash_bits() as usize;
    let stride = bits + 1;
    let a = f64::from(index.params.shift);
    for l in 0..stride {
        // Where the estimated cosine is positive a larger U_j means a larger estimated inner
        // product; where it is negative (few matching bits, never probed in practice) the
        // same estimate ranks it lower.
        let p = a + (1.0 - a) * l as f64 / bits as f64;
        for j in 1..32 {
            let (larger, smaller) = (rank[j * stride + l], rank[(j - 1) * stride + l]);
            if p >= 0.5 {
                assert!(
                    larger < smaller,
                    "range {j} before range {} at l = {l}",
                    j - 1
                );
            } else {
                assert!(
                    larger > smaller,
                    "range {j} after range {} at l = {l}",
                    j - 1
                );
            }
        }
    }
    // And within a range, more matching bits first.
    for j in 0..32 {
        for l in 1..stride {
            assert!(rank[j * stride + l] < rank[j * stride + l - 1]);
        }
    }
}

#[test]
fn parameters_and_metrics_are_checked() {
    assert!(LshParams {
        ranges: 3,
        ..LshParams::default()
    }
    .validate()
    .is_err());
    assert!(LshParams {
        bits: 5,
        ranges: 32,
        ..LshParams::default()
    }
    .validate()
    .is_err());
    let simple_with_ranges = IndexParams::SimpleLsh(LshParams::default());
    assert!(new_in_memory(&simple_with_ranges, Metric::InnerProduct, 4).is_err());
    let range_with_one = IndexParams::RangeLsh(LshParams::simple(32));
    assert!(new_in_memory(&range_with_one, Metric::InnerProduct, 4).is_err());
    let err = new_in_memory(&IndexParams::RangeLsh(LshParams::default()), Metric::L2, 4)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("range_lsh") && err.contains("Dot"), "{err}");
}

#[test]
fn empty_and_filtered_searches() {
    let index = RangeLsh::new(LshParams::default(), 4).unwrap();
    let q = [1.0, 0.0, 0.0, 0.0];
    assert!(index
        .search(&q, 3, &SearchParams::default(), None)
        .unwrap()
        .0
        .is_empty());
    let base = long_tailed_norms(500, 4, 1.0, 1);
    index.add(&base.data).unwrap();
    let odd = |s: Slot| s % 2 == 1;
    let (hits, _) = index
        .search(&q, 5, &SearchParams::default(), Some(&odd))
        .unwrap();
    assert_eq!(hits.len(), 5);
    assert!(hits.iter().all(|n| n.slot % 2 == 1));
    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    assert!(RangeLsh::read_from(&bytes[..bytes.len() - 1]).is_err());
}
