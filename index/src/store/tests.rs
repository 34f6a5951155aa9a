use super::*;
use crate::distance::reference;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

fn random_rows(seed: u64, n: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let data = (0..n * dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
    let query = (0..dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
    (data, query)
}

/// The f64 key of `metric` (lower is closer) for rows already preprocessed.
fn reference_key(metric: Metric, query: &[f32], row: &[f32]) -> f64 {
    match metric {
        Metric::L2 => reference::l2_squared(query, row),
        Metric::Cosine | Metric::InnerProduct => -reference::dot(query, row),
    }
}

/// `(reference key, slot)` of every accepted row, best first (ties by slot): the brute force
/// the scans are checked against.
pub(crate) fn brute_force(
    data: &[f32],
    dim: usize,
    key: impl Fn(&[f32]) -> f64,
    accept: impl Fn(Slot) -> bool,
) -> Vec<(f64, u32)> {
    let mut exact: Vec<(f64, u32)> = data
        .chunks_exact(dim)
        .enumerate()
        .filter(|(i, _)| accept(*i as Slot))
        .map(|(i, v)| (key(v), i as u32))
        .collect();
    exact.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    exact
}

fn store_of(metric: Metric, dim: usize, data: &[f32]) -> VectorStore {
    let mut store = VectorStore::new(metric, dim);
    store.append(data).unwrap();
    store
}

fn metric_strategy() -> impl Strategy<Value = Metric> {
    prop_oneof![
        Just(Metric::L2),
        Just(Metric::Cosine),
        Just(Metric::InnerProduct)
    ]
}

proptest! {
    /// The store's scan returns the `k` nearest rows of a brute-force f64 sort (up to ties),
    /// best first, and counts every row; for every metric and for dimensions and counts that
    /// leave remainders in the four-row blocks and in the 16-float blocks of the buffer.
    #[test]
    fn scan_equals_brute_force(
        metric in metric_strategy(),
        dim in 1usize..40,
        n in 0usize..70,
        k in 0usize..20,
        seed in any::<u64>(),
    ) {
        let (data, query) = random_rows(seed, n, dim);
        let store = store_of(metric, dim, &data);
        let (hits, stats) = store.search_exact(&query, k, None).unwrap();
        prop_assert_eq!(stats.distance_computations, n as u64);
        prop_assert_eq!(hits.len(), k.min(n));
        let q = metric.prepared(&query);
        let exact = brute_force(store.as_flat(), dim, |row| reference_key(metric, &q, row), |_| true);
        for (hit, (d, _)) in hits.iter().zip(&exact) {
            let own = reference_key(metric, &q, store.row(hit.slot));
            prop_assert!((f64::from(hit.key) - own).abs() <= 1e-3 * own.abs().max(1.0));
            prop_assert!((own - d).abs() <= 1e-3 * d.abs().max(1.0));
        }
        prop_assert!(hits.windows(2).all(|w| w[0] <= w[1]));
    }

    /// A filtered scan (rows gathered four at a time) returns exactly the `k` nearest accepted
    /// rows, and counts only the rows it scored.
    #[test]
    fn filtered_scan_equals_filtered_brute_force(
        dim in 1usize..12,
        n in 0usize..60,
        k in 0usize..20,
        modulus in 1u32..5,
        seed in any::<u64>(),
    ) {
        let (data, query) = random_rows(seed, n, dim);
        let store = store_of(Metric::InnerProduct, dim, &data);
        let accept = |slot: Slot| slot.is_multiple_of(modulus);
        let (hits, stats) = store.scan(&query, k, Some(&accept));
        let exact = brute_force(&data, dim, |v| -reference::dot(&query, v), accept);
        prop_assert_eq!(stats.distance_computations, exact.len() as u64);
        prop_assert_eq!(hits.len(), k.min(exact.len()));
        for (hit, (d, _)) in hits.iter().zip(&exact) {
            prop_assert!(accept(hit.slot));
            prop_assert!((f64::from(hit.key) - d).abs() <= 1e-3 * d.abs().max(1.0));
        }
    }

    /// A scan of listed slots (a payload index's candidates) finds what a filtered scan over
    /// the same slots finds, and skips slots beyond the store.
    #[test]
    fn listed_scan_equals_filtered_scan(
        dim in 1usize..12,
        n in 0usize..60,
        k in 0usize..20,
        modulus in 1u32..5,
        seed in any::<u64>(),
    ) {
        let (data, query) = random_rows(seed, n, dim);
        let store = store_of(Metric::L2, dim, &data);
        let accept = |slot: Slot| slot.is_multiple_of(modulus);
        let listed = (0..n as Slot + 3).filter(|&s| accept(s));
        let (hits, stats) = store.search_slots(&query, k, listed).unwrap();
        let (want, want_stats) = store.scan(&store.metric.prepared(&query), k, Some(&accept));
        prop_assert_eq!(stats, want_stats);
        prop_assert_eq!(hits, want);
    }

    /// With `dim` a multiple of 16 every row starts on a cache line, however the store grew;
    /// with any dim the rows read back as appended (the alignment changes no value).
    #[test]
    fn rows_are_aligned_and_read_back(
        lines in 1usize..5,
        odd in 1usize..40,
        batches in proptest::collection::vec(0usize..20, 1..6),
        seed in any::<u64>(),
    ) {
        for dim in [16 * lines, odd] {
            let mut store = VectorStore::new(Metric::L2, dim);
            let mut all = Vec::new();
            for (b, &n) in batches.iter().enumerate() {
                let (data, _) = random_rows(seed ^ b as u64, n, dim);
                let first = store.append(&data).unwrap();
                prop_assert_eq!(first as usize, all.len() / dim);
                all.extend_from_slice(&data);
            }
            prop_assert_eq!(store.as_flat(), &all[..]);
            prop_assert_eq!(store.len(), all.len() / dim);
            for (slot, row) in store.rows().enumerate() {
                prop_assert_eq!(row, store.row(slot as Slot));
                if dim % 16 == 0 {
                    prop_assert_eq!(row.as_ptr() as usize % 64, 0);
                }
            }
            prop_assert_eq!(store.as_flat().as_ptr() as usize % 64, 0);
        }
    }
}

#[test]
fn streamed_scan_equals_brute_force() {
    // Just over `STREAMED_BYTES`, so the unfiltered scan takes the one-row path.
    let dim = 16;
    let n = (16 << 20) / (4 * dim) + 37;
    let (data, query) = random_rows(7, n, dim);
    let store = store_of(Metric::L2, dim, &data);
    assert!(std::mem::size_of_val(store.as_flat()) > 16 << 20);
    let (hits, stats) = store.scan(&query, 10, None);
    assert_eq!(stats.distance_computations, n as u64);
    let exact = brute_force(&data, dim, |v| reference::l2_squared(&query, v), |_| true);
    for (hit, (d, _)) in hits.iter().zip(&exact) {
        assert!((f64::from(hit.key) - d).abs() <= 1e-3 * d.max(1.0));
    }
}

#[test]
fn append_preprocesses_and_validates() {
    let mut store = VectorStore::new(Metric::Cosine, 2);
    assert!(store.is_empty());
    assert_eq!(store.append(&[3.0, 4.0, 0.0, 2.0]).unwrap(), 0);
    assert_eq!(store.row(0), &[0.6, 0.8]);
    assert_eq!(store.get(1), Some(&[0.0, 1.0][..]));
    assert_eq!(store.get(2), None);
    assert!(matches!(
        store.append(&[1.0, 2.0, 3.0]),
        Err(IndexError::WrongDimension {
            expected: 2,
            got: 1
        })
    ));
    assert_eq!(store.len(), 2);
    assert!(matches!(
        store.check_dim(&[1.0]),
        Err(IndexError::WrongDimension {
            expected: 2,
            got: 1
        })
    ));
    assert_eq!(store.rows_in(&[0.0; 6]).unwrap(), 3);
}

#[test]
fn round_trips_through_the_unpadded_file_layout() {
    let mut store = VectorStore::new(Metric::InnerProduct, 3);
    store.append(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
    let mut bytes = Vec::new();
    store.write(&mut Encoder::new(&mut bytes));
    // The layout a plain `Vec<f32>` has always had: the float count, then the floats.
    let mut expected = Vec::new();
    Encoder::new(&mut expected).f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(bytes, expected);
    let back = VectorStore::read(
        &mut Decoder::new(&bytes),
        Metric::InnerProduct,
        3,
        &Placement::Memory,
    )
    .unwrap();
    assert_eq!(back.as_flat(), store.as_flat());
    assert_eq!(back.memory_bytes(), 64);
    assert!(VectorStore::read(
        &mut Decoder::new(&bytes),
        Metric::InnerProduct,
        4,
        &Placement::Memory
    )
    .is_err());
    assert!(VectorStore::read(
        &mut Decoder::new(&bytes),
        Metric::InnerProduct,
        0,
        &Placement::Memory
    )
    .is_err());
}

#[test]
fn open_answers_exact_queries_and_prepares_the_rest() {
    let store = store_of(Metric::Cosine, 2, &[1.0, 0.0, 0.0, 1.0]);
    let exact = SearchParams {
        exact: true,
        ..SearchParams::default()
    };
    match store.open(&[0.0, 2.0], 1, &exact, None).unwrap() {
        Opening::Answered(hits, stats) => {
            assert_eq!(hits[0].slot, 1);
            assert_eq!(stats.distance_computations, 2);
        }
        Opening::Prepared(_) => panic!("an exact query is answered by the scan"),
    }
    match store
        .open(&[0.0, 2.0], 1, &SearchParams::default(), None)
        .unwrap()
    {
        Opening::Prepared(q) => assert_eq!(&q[..], &[0.0, 1.0]),
        Opening::Answered(..) => panic!("only exact queries are answered"),
    }
    assert!(store.open(&[1.0], 1, &exact, None).is_err());
}

#[test]
fn scorer_counts_every_key_and_applies_the_filter() {
    let store = store_of(Metric::L2, 1, &[0.0, 1.0, 2.0, 3.0, 4.0]);
    let odd = |slot: Slot| slot % 2 == 1;
    let mut scorer = store.scorer(&[1.0], Some(&odd));
    assert_eq!(scorer.key(3), 4.0);
    assert_eq!(scorer.key4([0, 1, 2, 4]), [1.0, 0.0, 1.0, 9.0]);
    assert_eq!(scorer.computed(), 5);
    assert!(scorer.accepts(1) && !scorer.accepts(2));
    assert!(std::ptr::eq(scorer.store(), &store));
}

#[test]
fn a_locked_store_reads_through_the_guard() {
    let lock = ReadMostly::new(store_of(Metric::L2, 2, &[1.0, 2.0]));
    let read = StoreRead::new(&lock);
    assert_eq!(read.len(), 1);
    assert_eq!(read.row(0), &[1.0, 2.0]);
}
