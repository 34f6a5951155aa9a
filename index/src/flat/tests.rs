use super::*;
use crate::distance::reference;
use crate::store::tests::brute_force;
use proptest::prelude::*;

proptest! {
    /// Flat search equals a brute-force sort in f64 (up to ties), sorted, unique, min(k, n).
    #[test]
    fn flat_equals_brute_force(
        dim in 1usize..12,
        n in 0usize..60,
        k in 0usize..20,
        seed in any::<u64>(),
    ) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let data: Vec<f32> = (0..n * dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
        let query: Vec<f32> = (0..dim).map(|_| rng.gen_range(-10.0..10.0)).collect();
        let index = FlatIndex::new(Metric::L2, dim);
        if n > 0 {
            index.add(&data).unwrap();
        }
        let (hits, stats) = index.search(&query, k, &SearchParams::default(), None).unwrap();
        prop_assert_eq!(hits.len(), k.min(n));
        prop_assert_eq!(stats.distance_computations, n as u64);
        let exact = brute_force(&data, dim, |v| reference::l2_squared(&query, v), |_| true);
        for (hit, (d, _)) in hits.iter().zip(&exact) {
            prop_assert!((f64::from(hit.key) - d).abs() <= 1e-3 * d.max(1.0));
        }
        let mut slots: Vec<u32> = hits.iter().map(|h| h.slot).collect();
        prop_assert!(hits.windows(2).all(|w| w[0] <= w[1]));
        slots.sort_unstable();
        slots.dedup();
        prop_assert_eq!(slots.len(), hits.len());
    }
}

#[test]
fn filter_excludes_slots() {
    let index = FlatIndex::new(Metric::InnerProduct, 2);
    index.add(&[1.0, 0.0, 2.0, 0.0, 3.0, 0.0]).unwrap();
    let only_even = |s: Slot| s.is_multiple_of(2);
    let (hits, _) = index
        .search(&[1.0, 0.0], 3, &SearchParams::default(), Some(&only_even))
        .unwrap();
    let slots: Vec<u32> = hits.iter().map(|h| h.slot).collect();
    assert_eq!(slots, vec![2, 0]);
}

#[test]
fn wrong_dimension_is_an_error() {
    let index = FlatIndex::new(Metric::L2, 3);
    assert!(matches!(
        index.add(&[1.0, 2.0]),
        Err(IndexError::WrongDimension { .. })
    ));
    let err = index
        .search(&[1.0], 1, &SearchParams::default(), None)
        .unwrap_err();
    assert!(matches!(
        err,
        IndexError::WrongDimension {
            expected: 3,
            got: 1
        }
    ));
}

#[test]
fn round_trips_through_bytes() {
    let index = FlatIndex::new(Metric::Cosine, 2);
    index.add(&[3.0, 4.0, 0.0, 1.0]).unwrap();
    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    let back = FlatIndex::read_from(&bytes).unwrap();
    assert_eq!(back.vector(0), Some(vec![0.6, 0.8]));
    assert_eq!(back.len(), 2);
    assert!(FlatIndex::read_from(&bytes[..bytes.len() - 1]).is_err());
}
