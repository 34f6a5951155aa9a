use proptest::prelude::*;

use super::*;
use crate::dataset::long_tailed_norms;
use crate::distance::simd::{dot, l2_squared};
use crate::persist::codec::{Decoder, Encoder};

/// A PQ trainer in plain Rust (a few Lloyd rounds per sub-space) so these tests need no FAISS;
/// `cairn-faiss` tests the FAISS-trained codebooks through the same additive form.
struct TestPq;

impl TestPq {
    fn centroids(dim: usize, m: usize, data: &[f32]) -> Vec<Vec<f32>> {
        let sub = dim / m;
        let rows: Vec<&[f32]> = data.chunks_exact(dim).collect();
        (0..m)
            .map(|i| {
                let part = |r: &[f32]| r[i * sub..(i + 1) * sub].to_vec();
                let mut c: Vec<f32> = (0..KS)
                    .flat_map(|k| part(rows[k * rows.len() / KS]))
                    .collect();
                for _ in 0..6 {
                    let mut sums = vec![0f32; KS * sub];
                    let mut counts = vec![0usize; KS];
                    for r in &rows {
                        let x = part(r);
                        let k = nearest(&c, &x);
                        counts[k] += 1;
                        sums[k * sub..(k + 1) * sub]
                            .iter_mut()
                            .zip(&x)
                            .for_each(|(s, v)| *s += v);
                    }
                    for k in (0..KS).filter(|&k| counts[k] > 0) {
                        for d in 0..sub {
                            c[k * sub + d] = sums[k * sub + d] / counts[k] as f32;
                        }
                    }
                }
                c
            })
            .collect()
    }

    fn decoder(dim: usize, m: usize, books: Vec<Vec<f32>>) -> impl Fn(&[u8]) -> Result<Vec<f32>> {
        let sub = dim / m;
        move |codes: &[u8]| {
            Ok(codes
                .chunks_exact(m)
                .flat_map(|code| {
                    (0..m).flat_map(|i| {
                        let k = usize::from(code[i]);
                        books[i][k * sub..(k + 1) * sub].to_vec()
                    })
                })
                .collect::<Vec<f32>>())
        }
    }
}

fn nearest(centroids: &[f32], x: &[f32]) -> usize {
    centroids
        .chunks_exact(x.len())
        .map(|c| c.iter().zip(x).map(|(a, b)| (a - b) * (a - b)).sum::<f32>())
        .enumerate()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(0, |(k, _)| k)
}

impl CodebookTrainer for TestPq {
    fn train(&self, kind: VqKind, dim: usize, m: usize, data: &[f32]) -> Result<AdditiveCodebooks> {
        assert_eq!(kind, VqKind::Pq, "the test trainer only does PQ");
        let books = Self::centroids(dim, m, data);
        AdditiveCodebooks::from_decoder(dim, m, &Self::decoder(dim, m, books))
    }
}

#[test]
fn additive_tables_reproduce_a_pq_decoder_and_encode_exactly() {
    let (dim, m) = (16, 4);
    let data = long_tailed_norms(2_000, dim, 0.5, 1);
    let books = TestPq::centroids(dim, m, &data.data);
    let decode = TestPq::decoder(dim, m, books.clone());
    let tables = AdditiveCodebooks::from_decoder(dim, m, &decode).unwrap();
    let mut code = vec![0u8; m];
    let mut out = vec![0f32; dim];
    for x in data.rows().take(200) {
        tables.encode(x, &mut code);
        // Greedy over disjoint supports is PQ's own nearest-centroid encoding.
        for i in 0..m {
            let want = nearest(&books[i], &x[i * 4..(i + 1) * 4]);
            assert_eq!(usize::from(code[i]), want);
        }
        tables.decode(&code, &mut out);
        for (a, b) in out.iter().zip(decode(&code).unwrap()) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        let q = data.row(7);
        let lut = tables.lut(q);
        assert!((lut.score(&code) - dot(q, &out)).abs() < 1e-4);
    }
}

/// Residual-style codebooks: `m` tables of `KS` full-dimension random codewords that shrink
/// book by book, so codebooks interact as RQ's do (greedy encoding is not exact on them). Also
/// returns the raw tables, row `i · KS + j` being codebook i's entry j.
fn random_residual_books(dim: usize, m: usize, seed: u64) -> (AdditiveCodebooks, Vec<f32>) {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let raw: Vec<f32> = (0..m)
        .flat_map(|i| {
            let scale = 0.5f32.powi(i as i32) / (dim as f32).sqrt();
            (0..KS * dim).map(|_| scale * next()).collect::<Vec<_>>()
        })
        .collect();
    let tables = raw.clone();
    let decode = move |codes: &[u8]| -> Result<Vec<f32>> {
        Ok(codes
            .chunks_exact(m)
            .flat_map(|code| {
                let mut out = vec![0f32; dim];
                for (i, &c) in code.iter().enumerate() {
                    let row = &tables[(i * KS + usize::from(c)) * dim..][..dim];
                    out.iter_mut().zip(row).for_each(|(o, d)| *o += d);
                }
                out
            })
            .collect())
    };
    (
        AdditiveCodebooks::from_decoder(dim, m, &decode).unwrap(),
        raw,
    )
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt().max(1e-30)
}

/// The direction encoder ranks the same last expansions as the distance encoder by angle, so
/// it never ends at a wider angle; on interacting codebooks it ends at a narrower one for many
/// vectors. And the distance encoder's beam beats a greedy walk (RQ's textbook encoder) overall.
#[test]
fn direction_codes_never_widen_the_angle_and_the_beam_beats_greedy() {
    let (dim, m) = (24, 3);
    let (books, raw) = random_residual_books(dim, m, 11);
    let data = long_tailed_norms(400, dim, 0.0, 12);
    let (mut nearest, mut turned) = (vec![0u8; m], vec![0u8; m]);
    let (mut a, mut b) = (vec![0f32; dim], vec![0f32; dim]);
    let (mut narrower, mut beam_err, mut greedy_err) = (0, 0f64, 0f64);
    for x in data.rows() {
        let u: Vec<f32> = x.iter().map(|v| v / dot(x, x).sqrt()).collect();
        books.encode(&u, &mut nearest);
        books.encode_direction(&u, &mut turned);
        books.decode(&nearest, &mut a);
        books.decode(&turned, &mut b);
        let (cos_near, cos_turned) = (cosine(&u, &a), cosine(&u, &b));
        assert!(cos_turned >= cos_near - 1e-6, "{cos_turned} < {cos_near}");
        narrower += usize::from(cos_turned > cos_near + 1e-6);
        beam_err += f64::from(l2_squared(&u, &a));
        let mut residual = u.clone();
        for book in raw.chunks_exact(KS * dim) {
            let entry = book
                .chunks_exact(dim)
                .min_by(|c, d| l2_squared(&residual, c).total_cmp(&l2_squared(&residual, d)))
                .unwrap_or(&book[..dim]);
            residual.iter_mut().zip(entry).for_each(|(r, e)| *r -= e);
        }
        greedy_err += f64::from(dot(&residual, &residual));
    }
    assert!(
        narrower > 40,
        "the angle objective changed only {narrower} of 400 codes"
    );
    assert!(
        beam_err < greedy_err,
        "beam {beam_err} vs greedy {greedy_err}"
    );
}

/// With the codes fixed, the refit tables reconstruct the data no worse than the tables the
/// codes were chosen with (least squares), and clearly better when the codebooks were not
/// fitted to these data at all; decodings stay additive, so the LUT scores what `decode` builds.
#[test]
fn refit_tables_fit_the_codes_they_are_given() {
    let (dim, m) = (24, 3);
    let (mut books, _) = random_residual_books(dim, m, 13);
    let data = long_tailed_norms(3_000, dim, 0.0, 14);
    let mut codes = vec![0u8; data.len() * m];
    for (x, code) in data.rows().zip(codes.chunks_exact_mut(m)) {
        books.encode(x, code);
    }
    let error = |books: &AdditiveCodebooks| {
        let mut out = vec![0f32; dim];
        data.rows()
            .zip(codes.chunks_exact(m))
            .map(|(x, code)| {
                books.decode(code, &mut out);
                f64::from(l2_squared(x, &out))
            })
            .sum::<f64>()
    };
    let before = error(&books);
    books.refit(&data.data, &codes);
    let after = error(&books);
    assert!(after < 0.9 * before, "refit {after} vs {before}");
    let q: Vec<f32> = (0..dim).map(|i| (i as f32 * 0.37).sin()).collect();
    let lut = books.lut(&q);
    let mut out = vec![0f32; dim];
    for code in codes.chunks_exact(m).take(50) {
        books.decode(code, &mut out);
        assert!((lut.score(code) - dot(&q, &out)).abs() < 1e-3);
    }
}

/// Refining for directions keeps only rounds that narrow the coded angles: on tables never
/// fitted to these directions the first round is kept and the summed 1 − cos falls.
#[test]
fn refining_for_directions_narrows_the_coded_angles() {
    let (dim, m) = (24, 3);
    let (mut books, _) = random_residual_books(dim, m, 17);
    let data = long_tailed_norms(2_000, dim, 1.0, 18);
    let units: Vec<f32> = data
        .rows()
        .flat_map(|x| {
            let n = dot(x, x).sqrt();
            x.iter().map(move |v| v / n)
        })
        .collect();
    let angles = |books: &AdditiveCodebooks| {
        let (mut code, mut out) = (vec![0u8; m], vec![0f32; dim]);
        units
            .chunks_exact(dim)
            .map(|u| {
                books.encode_direction(u, &mut code);
                books.decode(&code, &mut out);
                1.0 - f64::from(cosine(u, &out))
            })
            .sum::<f64>()
    };
    let before = angles(&books);
    let kept = books.refine_directions(&units, 2);
    let after = angles(&books);
    assert!(kept >= 1, "no round kept");
    assert!(after < before, "1 − cos summed {after} vs {before}");
}

/// PQ's codebooks keep their slices through a refit: each slice is solved on its own, and
/// the result is the k-means update, the mean of the items each entry codes.
#[test]
fn refit_keeps_pq_slices_apart() {
    let (dim, m) = (16, 4);
    let data = long_tailed_norms(2_000, dim, 0.0, 15);
    let mut books = TestPq.train(VqKind::Pq, dim, m, &data.data).unwrap();
    let mut codes = vec![0u8; data.len() * m];
    for (x, code) in data.rows().zip(codes.chunks_exact_mut(m)) {
        books.encode(x, code);
    }
    books.refit(&data.data, &codes);
    // Entry j of codebook 0 decodes (with the others at any code) to the mean of its items on
    // slice 0, up to the ridge.
    let sub = dim / m;
    let mut out = vec![0f32; dim];
    for j in 0..8u8 {
        let members: Vec<&[f32]> = data
            .rows()
            .zip(codes.chunks_exact(m))
            .filter(|(_, c)| c[0] == j)
            .map(|(x, _)| x)
            .collect();
        if members.is_empty() {
            continue;
        }
        books.decode(&[j, 0, 0, 0], &mut out);
        for c in 0..sub {
            let mean = members.iter().map(|x| x[c]).sum::<f32>() / members.len() as f32;
            assert!((out[c] - mean).abs() < 1e-3, "entry {j}, coordinate {c}");
        }
        // Slice 0's entry leaves the other slices alone.
        let mut other = vec![0f32; dim];
        books.decode(&[j.wrapping_add(1), 0, 0, 0], &mut other);
        assert_eq!(out[sub..], other[sub..]);
    }
}

#[test]
fn a_decoder_that_is_not_additive_is_refused() {
    let squared = |codes: &[u8]| -> Result<Vec<f32>> {
        Ok(codes
            .chunks_exact(2)
            .flat_map(|c| {
                let (a, b) = (f32::from(c[0]), f32::from(c[1]));
                [a * b, a + b]
            })
            .collect())
    };
    let err = AdditiveCodebooks::from_decoder(2, 2, &squared).unwrap_err();
    assert!(err.to_string().contains("additively"), "{err}");
}

#[test]
fn scalar_codebook_is_exact_on_few_values_and_nearest_otherwise() {
    let few: Vec<f32> = (0..100).map(|i| (i % 10) as f32).collect();
    let book = ScalarCodebook::train(&few, 20);
    for v in 0..10 {
        assert_eq!(book.decode(book.encode(v as f32)), v as f32);
    }
    let many: Vec<f32> = (0..10_000).map(|i| (i as f32 * 0.37).sin().exp()).collect();
    let book = ScalarCodebook::train(&many, 20);
    for &v in many.iter().take(500) {
        let got = book.decode(book.encode(v));
        let best = (0..=255u8)
            .map(|k| (book.decode(k) - v).abs())
            .fold(f32::INFINITY, f32::min);
        assert!(((got - v).abs() - best).abs() < 1e-6);
    }
}

#[test]
fn codecs_round_trip_through_bytes() {
    let dim = 16;
    let data = long_tailed_norms(1_500, dim, 1.0, 3);
    for quantizer in [
        Quantizer::Plain {
            kind: VqKind::Pq,
            m: 4,
        },
        // 16 dims do not split into 3 books: NEQ pads the directions to 18.
        Quantizer::Neq {
            kind: VqKind::Pq,
            m: 4,
        },
        Quantizer::NeqIp {
            kind: VqKind::Pq,
            m: 4,
        },
    ] {
        let codec = MipsCodec::train(quantizer, dim, &data.data, &TestPq).unwrap();
        let codes = codec.encode(&data.data[..100 * dim]);
        assert_eq!(codes.len(), 100 * 4);
        let mut bytes = Vec::new();
        codec.write(&mut Encoder::new(&mut bytes));
        let mut d = Decoder::new(&bytes);
        let back = MipsCodec::read(&mut d).unwrap();
        d.finish().unwrap();
        assert_eq!(back, codec);
        let q = data.row(0);
        let tables = codec.tables(q);
        for code in codes.chunks_exact(4) {
            let est = codec.score(&tables, code);
            let exact_of_decoded = dot(q, &codec.decode(code));
            assert!((est - exact_of_decoded).abs() <= 1e-3 * exact_of_decoded.abs().max(1.0));
        }
    }
}

/// NEQ-IP's training set repeats each direction in proportion to ‖x‖², deterministically, and
/// keeps the item count; all-zero rows fall back to every direction once.
#[test]
fn inner_product_training_weighs_directions_by_squared_norm() {
    let split = vec![
        (vec![1.0, 0.0], 1.0),
        (vec![0.0, 1.0], 1.0),
        (vec![-1.0, 0.0], 2.0),
        (vec![0.0, -1.0], 0.0),
    ];
    // Weights 1, 1, 4, 0 over 4 draws at 0.75, 2.25, 3.75, 5.25 of the cumulative 1, 2, 6, 6.
    let drawn = super::mips::weighted_directions(&split);
    assert_eq!(drawn, [1.0, 0.0, -1.0, 0.0, -1.0, 0.0, -1.0, 0.0]);
    let zeros = vec![(vec![0.0, 0.0], 0.0); 3];
    assert_eq!(super::mips::weighted_directions(&zeros), [0.0; 6]);
    // On long-tailed norms the draws keep the count and repeat the large norms.
    let data = long_tailed_norms(2_000, 8, 1.0, 5);
    let split: Vec<(Vec<f32>, f32)> = data
        .rows()
        .map(|x| {
            let n = dot(x, x).sqrt();
            (x.iter().map(|v| v / n).collect(), n)
        })
        .collect();
    let drawn = super::mips::weighted_directions(&split);
    assert_eq!(drawn.len(), 2_000 * 8);
    let largest = split
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .expect("rows");
    let copies = drawn
        .chunks_exact(8)
        .filter(|u| u == &largest.0.as_slice())
        .count();
    assert!(copies > 1, "the largest norm is drawn {copies} times");
}

fn mean_norm_error(codec: &MipsCodec, data: &crate::dataset::Vectors) -> f64 {
    let codes = codec.encode(&data.data);
    let total: f64 = data
        .rows()
        .zip(codes.chunks_exact(codec.code_size()))
        .map(|(x, code)| {
            let x_hat = codec.decode(code);
            let (n, n_hat) = (dot(x, x).sqrt(), dot(&x_hat, &x_hat).sqrt());
            f64::from((n - n_hat).abs() / n.max(1e-12))
        })
        .sum();
    total / data.len() as f64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4))]
    /// NEQ's point: at the same bytes, its reconstructions carry the item's norm far better
    /// than plain PQ's on long-tailed data.
    #[test]
    fn neq_norm_error_is_below_plain_pq(seed in 0u64..1_000, sigma in 0.6f32..1.5) {
        let dim = 16;
        let data = long_tailed_norms(2_000, dim, sigma, seed);
        let plain = MipsCodec::train(Quantizer::Plain { kind: VqKind::Pq, m: 4 }, dim, &data.data, &TestPq).unwrap();
        let neq = MipsCodec::train(Quantizer::Neq { kind: VqKind::Pq, m: 4 }, dim, &data.data, &TestPq).unwrap();
        let (e_plain, e_neq) = (mean_norm_error(&plain, &data), mean_norm_error(&neq, &data));
        prop_assert!(e_neq < e_plain, "relative norm error NEQ {e_neq} vs PQ {e_plain}");
    }
}

#[test]
fn quantized_index_trains_at_its_threshold_rescores_and_reloads() {
    use crate::dataset::{ground_truth, recall_at_k};
    use crate::{read_index, IndexKind, Placement, SearchParams, Trainers, VectorIndex};
    let trainers = Trainers {
        codebooks: Some(std::sync::Arc::new(TestPq)),
        ..Trainers::default()
    };
    let dim = 16;
    let base = long_tailed_norms(6_000, dim, 1.0, 21);
    let queries = long_tailed_norms(50, dim, 0.0, 22);
    let truth = ground_truth(&base, &queries, crate::Metric::InnerProduct, 10);
    let mut params = QuantizedParams::new(Quantizer::Neq {
        kind: VqKind::Pq,
        m: 4,
    });
    params.train_threshold = 1_000;
    let index = QuantizedIndex::new(params, dim, &trainers).unwrap();
    index.add(&base.data[..500 * dim]).unwrap();
    assert!(
        !index.is_trained(),
        "below the threshold searches are exact"
    );
    let (hits, _) = index
        .search(queries.row(0), 10, &SearchParams::default(), None)
        .unwrap();
    assert_eq!(hits.len(), 10);
    for chunk in base.data[500 * dim..].chunks(1_100 * dim) {
        index.add(chunk).unwrap();
    }
    assert!(index.is_trained());
    assert_eq!(index.len(), 6_000);
    let search = |index: &dyn VectorIndex, params: SearchParams| -> Vec<Vec<u32>> {
        queries
            .rows()
            .map(|q| {
                let (hits, _) = index.search(q, 10, &params, None).unwrap();
                hits.iter().map(|n| n.slot).collect()
            })
            .collect()
    };
    let rescored = search(&index, SearchParams::default());
    let recall = recall_at_k(&rescored, &truth, 10);
    assert!(recall >= 0.9, "NEQ with rescoring: recall@10 {recall}");
    let estimate_only = search(
        &index,
        SearchParams {
            rescore: Some(false),
            ..SearchParams::default()
        },
    );
    assert!(recall_at_k(&estimate_only, &truth, 10) <= recall);

    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    let back = read_index(IndexKind::Quantized, &bytes, &trainers, &Placement::Memory).unwrap();
    assert_eq!(search(back.as_ref(), SearchParams::default()), rescored);
    assert!(QuantizedIndex::read_from(&bytes[..bytes.len() - 1], &trainers).is_err());
    assert!(
        QuantizedIndex::new(params, dim, &Trainers::default()).is_err(),
        "a quantized index needs a codebook trainer"
    );
}
