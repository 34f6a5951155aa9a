use super::*;
use proptest::prelude::*;

/// Error bound for a length-n f32 dot product against exact arithmetic: γₙ·Σ|aᵢbᵢ| with
/// γₙ = n·u/(1 − n·u), u = 2⁻²⁴ (Higham, *Accuracy and Stability of Numerical Algorithms*,
/// eq. 3.5). SIMD reorders the sum but stays within the same bound; we allow 2× slack for the
/// final f64 → f32 rounding.
fn dot_bound(n: usize, abs_sum: f64) -> f64 {
    let u = f64::from(f32::EPSILON) / 2.0;
    let nu = n as f64 * u;
    2.0 * (nu / (1.0 - nu)) * abs_sum + f64::from(f32::MIN_POSITIVE)
}

fn vectors() -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (1usize..300).prop_flat_map(|n| {
        (
            prop::collection::vec(-100f32..100f32, n),
            prop::collection::vec(-100f32..100f32, n),
        )
    })
}

/// Every kernel set this CPU can run: the chosen one and simsimd, so both stay correct.
fn all_kernels() -> Vec<simd::Kernels> {
    let mut all = vec![simd::SIMSIMD];
    all.extend(simd::avx2::kernels());
    all
}

proptest! {
    #[test]
    fn every_backend_matches_the_f64_reference((a, b) in vectors()) {
        let exact_dot = reference::dot(&a, &b);
        let exact_l2 = reference::l2_squared(&a, &b);
        for k in all_kernels() {
            let dot = f64::from((k.dot)(&a, &b));
            prop_assert!((dot - exact_dot).abs() <= dot_bound(a.len(), reference::abs_dot(&a, &b)),
                "{} dot {dot} vs {exact_dot}", k.name);
            prop_assert_eq!((k.neg_dot)(&a, &b), -(k.dot)(&a, &b));
            let l2 = f64::from((k.l2_squared)(&a, &b));
            prop_assert!((l2 - exact_l2).abs() <= dot_bound(a.len() + 2, exact_l2),
                "{} l2 {l2} vs {exact_l2}", k.name);
        }
    }

    #[test]
    fn four_row_kernels_match_the_f64_reference(
        (q, rows) in (1usize..300).prop_flat_map(|n| (
            prop::collection::vec(-100f32..100f32, n),
            prop::collection::vec(prop::collection::vec(-100f32..100f32, n), 4),
        ))
    ) {
        let four = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
        for k in all_kernels() {
            let neg_dots = (k.neg_dot4)(&q, four);
            let l2s = (k.l2_squared4)(&q, four);
            for (j, row) in four.iter().enumerate() {
                let exact_dot = reference::dot(&q, row);
                let got = -f64::from(neg_dots[j]);
                prop_assert!((got - exact_dot).abs() <= dot_bound(q.len(), reference::abs_dot(&q, row)),
                    "{} row {j} dot {got} vs {exact_dot}", k.name);
                let exact_l2 = reference::l2_squared(&q, row);
                let l2 = f64::from(l2s[j]);
                prop_assert!((l2 - exact_l2).abs() <= dot_bound(q.len() + 2, exact_l2),
                    "{} row {j} l2 {l2} vs {exact_l2}", k.name);
            }
        }
    }

    #[test]
    fn dot_matches_f64_reference((a, b) in vectors()) {
        let exact = reference::dot(&a, &b);
        let got = f64::from(simd::dot(&a, &b));
        prop_assert!((got - exact).abs() <= dot_bound(a.len(), reference::abs_dot(&a, &b)),
            "dot {got} vs {exact}");
    }

    #[test]
    fn l2_matches_f64_reference((a, b) in vectors()) {
        let exact = reference::l2_squared(&a, &b);
        let got = f64::from(simd::l2_squared(&a, &b));
        // Each term (aᵢ − bᵢ)² is a square, so Σ|terms| = the exact value itself; the
        // subtraction adds one more rounding per term.
        prop_assert!((got - exact).abs() <= dot_bound(a.len() + 2, exact), "l2 {got} vs {exact}");
    }

    #[test]
    fn normalised_vectors_have_unit_norm(a in prop::collection::vec(-100f32..100f32, 1..200)) {
        let mut v = a.clone();
        normalize(&mut v);
        let n = reference::dot(&v, &v).sqrt();
        if reference::dot(&a, &a) > 1e-12 {
            prop_assert!((n - 1.0).abs() < 1e-4, "norm {n}");
        }
    }

    #[test]
    fn score_and_key_round_trip(score in -1e3f32..1e3f32) {
        for metric in [Metric::Cosine, Metric::InnerProduct] {
            prop_assert_eq!(metric.key_to_score(metric.score_to_key(score)), score);
        }
        let d = score.abs();
        let back = Metric::L2.key_to_score(Metric::L2.score_to_key(d));
        prop_assert!((back - d).abs() <= d * 1e-6 + 1e-6);
    }
}

#[test]
fn keys_order_closer_first() {
    let q = [1.0, 0.0];
    let near = [0.9, 0.1];
    let far = [-1.0, 0.0];
    for metric in [Metric::L2, Metric::InnerProduct] {
        let key = metric.key_fn();
        assert!(key(&q, &near) < key(&q, &far), "{metric:?}");
    }
}

#[test]
fn zero_vector_stays_zero_under_cosine() {
    let mut v = [0.0f32; 4];
    Metric::Cosine.preprocess(&mut v);
    assert_eq!(v, [0.0; 4]);
}

#[test]
fn tags_round_trip() {
    for m in [Metric::L2, Metric::Cosine, Metric::InnerProduct] {
        assert_eq!(Metric::from_tag(m.tag()), Some(m));
    }
}
