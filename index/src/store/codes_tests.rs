//! Row codes (`codes.rs`) through the graphs that traverse by them: recall against exact
//! ground truth on the shared real sets, and the rules a collection relies on.
#![allow(clippy::print_stderr)]

use crate::dataset::{load_dataset, recall_at_k, shared_data_dir, Dataset, Vectors};
use crate::hnsw::HnswParams;
use crate::{new_in_memory, IndexParams, Metric, RowCodes, SearchParams, VectorIndex, TRAIN_ROWS};

const INT8: RowCodes = RowCodes::Int8 {
    quantile: RowCodes::DEFAULT_QUANTILE,
};

fn built(
    params: IndexParams,
    metric: Metric,
    data: &Dataset,
    codes: Option<RowCodes>,
) -> Box<dyn VectorIndex> {
    let index = new_in_memory(&params, metric, data.base.dim).unwrap();
    index.set_codes(codes).unwrap();
    index.add(&data.base.data).unwrap();
    index
}

fn search_all(index: &dyn VectorIndex, queries: &Vectors, params: &SearchParams) -> Vec<Vec<u32>> {
    queries
        .rows()
        .map(|q| {
            let (hits, _) = index.search(q, 10, params, None).unwrap();
            hits.iter().map(|n| n.slot).collect()
        })
        .collect()
}

fn at_ef(ef: usize) -> SearchParams {
    SearchParams {
        ef: Some(ef),
        ..SearchParams::default()
    }
}

/// Recall@10 with codes, rescored, on each real set and metric, beside the same graph
/// without codes. Thresholds sit a few points under what this test measured when written
/// (in the messages), so a broken estimate, which drops recall towards zero, fails them.
#[test]
fn codes_keep_recall_on_real_sets_for_every_metric() {
    let hnsw = IndexParams::Hnsw(HnswParams::default());
    let cases = [
        ("siftsmall", Metric::L2, hnsw, 64, Some(INT8), 0.95),
        (
            "siftsmall",
            Metric::L2,
            hnsw,
            64,
            Some(RowCodes::Binary),
            0.65,
        ),
        (
            "glove50-5k-angular",
            Metric::Cosine,
            hnsw,
            100,
            Some(INT8),
            0.97,
        ),
        (
            "glove50-5k-angular",
            Metric::Cosine,
            hnsw,
            100,
            Some(RowCodes::Binary),
            0.80,
        ),
        (
            "movielens-mips",
            Metric::InnerProduct,
            IndexParams::IpNswPlus(Default::default()),
            64,
            Some(INT8),
            0.95,
        ),
        (
            "movielens-mips",
            Metric::InnerProduct,
            IndexParams::IpNsw(HnswParams::default()),
            64,
            Some(RowCodes::Binary),
            0.70,
        ),
    ];
    for (set, metric, params, ef, codes, floor) in cases {
        let data = load_dataset(&shared_data_dir().join(set)).unwrap();
        let index = built(params, metric, &data, codes);
        assert_eq!(index.codes(), codes);
        let with = recall_at_k(
            &search_all(index.as_ref(), &data.queries, &at_ef(ef)),
            &data.ground_truth,
            10,
        );
        let ignored = SearchParams {
            ignore_quantization: true,
            ..at_ef(ef)
        };
        let without = recall_at_k(
            &search_all(index.as_ref(), &data.queries, &ignored),
            &data.ground_truth,
            10,
        );
        let name = codes.map_or("none", |c| c.name());
        eprintln!("{set} {metric:?} {name}: recall@10 {with:.3} with codes, {without:.3} without (ef {ef})");
        assert!(with >= floor, "{set} {name}: recall@10 {with:.3} < {floor}");
        if codes == Some(RowCodes::Binary) {
            // Qdrant's advice for binary codes: oversample, so more candidates are re-ranked
            // (here past the `ef` candidates a search re-ranks anyway).
            let oversampled = SearchParams {
                oversampling: Some(16.0),
                ..at_ef(ef)
            };
            let more = recall_at_k(
                &search_all(index.as_ref(), &data.queries, &oversampled),
                &data.ground_truth,
                10,
            );
            eprintln!("  oversampling 16: {more:.3}");
            assert!(
                more > with,
                "{set}: oversampling {more:.3} against {with:.3}"
            );
        }
    }
}

/// Rescoring reports exact keys; without it, keys are the codes' estimates, close to them.
#[test]
fn rescoring_reports_exact_keys_and_estimates_are_close() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let index = built(
        IndexParams::Hnsw(HnswParams::default()),
        Metric::L2,
        &data,
        Some(INT8),
    );
    let store = index.store();
    let q = data.queries.row(0);
    let (hits, _) = index.search(q, 10, &at_ef(64), None).unwrap();
    for hit in &hits {
        let exact = crate::distance::simd::l2_squared(q, store.row(hit.slot));
        assert_eq!(hit.key, exact);
    }
    let estimated = SearchParams {
        rescore: Some(false),
        ..at_ef(64)
    };
    let (rough, _) = index.search(q, 10, &estimated, None).unwrap();
    let mut differs = false;
    for hit in &rough {
        let exact = crate::distance::simd::l2_squared(q, store.row(hit.slot));
        differs |= hit.key != exact;
        assert!(
            (hit.key - exact).abs() <= 0.02 * exact,
            "{} against {exact}",
            hit.key
        );
    }
    assert!(differs, "unrescored keys should be estimates");
}

/// The codes depend on the rows alone: the same rows in other batches search alike, and
/// below the training size searches score the full rows.
#[test]
fn codes_are_a_function_of_the_rows_whatever_the_batches() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let params = IndexParams::Hnsw(HnswParams::default());
    for codes in [INT8, RowCodes::Binary] {
        let whole = built(params, Metric::L2, &data, Some(codes));
        let trickled = new_in_memory(&params, Metric::L2, 128).unwrap();
        trickled.set_codes(Some(codes)).unwrap();
        for chunk in data.base.data.chunks(128 * 777) {
            trickled.add(chunk).unwrap();
        }
        // Codes set after the rows arrive train on the same rows too.
        let late = new_in_memory(&params, Metric::L2, 128).unwrap();
        late.add(&data.base.data).unwrap();
        late.set_codes(Some(codes)).unwrap();
        let rough = SearchParams {
            rescore: Some(false),
            ..at_ef(64)
        };
        for q in data.queries.rows().take(50) {
            // Graphs built in parallel differ; the estimated keys of the same slot do not.
            let (a, _) = whole.search(q, 10, &rough, None).unwrap();
            for index in [&trickled, &late] {
                let (b, _) = index.search(q, 10, &rough, None).unwrap();
                for hit in &a {
                    if let Some(other) = b.iter().find(|h| h.slot == hit.slot) {
                        assert_eq!(hit.key, other.key);
                    }
                }
            }
        }
    }

    let small = new_in_memory(&params, Metric::L2, 128).unwrap();
    small.set_codes(Some(INT8)).unwrap();
    small
        .add(&data.base.data[..128 * (TRAIN_ROWS - 1)])
        .unwrap();
    let rough = SearchParams {
        rescore: Some(false),
        ..at_ef(64)
    };
    let q = data.queries.row(0);
    let store = small.store();
    for hit in small.search(q, 10, &rough, None).unwrap().0 {
        assert_eq!(
            hit.key,
            crate::distance::simd::l2_squared(q, store.row(hit.slot))
        );
    }
}

#[test]
fn only_graphs_keep_codes_and_quantiles_are_checked() {
    let flat = new_in_memory(&IndexParams::Flat, Metric::L2, 8).unwrap();
    let err = flat
        .set_codes(Some(RowCodes::Binary))
        .unwrap_err()
        .to_string();
    assert!(err.contains("flat"), "{err}");
    assert!(flat.set_codes(None).is_ok());
    let graph = new_in_memory(&IndexParams::Hnsw(HnswParams::default()), Metric::L2, 8).unwrap();
    let err = graph
        .set_codes(Some(RowCodes::Int8 { quantile: 0.2 }))
        .unwrap_err()
        .to_string();
    assert!(err.contains("quantile"), "{err}");
}
