use super::*;
use crate::dataset::{
    clustered_gaussian, clustered_with_structure, ground_truth, load_dataset, recall_at_k,
    shared_data_dir, ClusterSpec,
};
use crate::distance::reference;
use crate::persist;
use crate::store::tests::brute_force;

fn search_all(
    index: &dyn VectorIndex,
    queries: &crate::dataset::Vectors,
    k: usize,
    ef: usize,
) -> Vec<Vec<u32>> {
    let params = SearchParams {
        ef: Some(ef),
        exact: false,
        ..SearchParams::default()
    };
    queries
        .rows()
        .map(|q| {
            index
                .search(q, k, &params, None)
                .unwrap()
                .0
                .iter()
                .map(|n| n.slot)
                .collect()
        })
        .collect()
}

#[test]
fn siftsmall_recall_and_identical_after_reload() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let index = Hnsw::build(HnswParams::default(), Metric::L2, 128, &data.base.data).unwrap();
    let results = search_all(&index, &data.queries, 10, 64);
    let recall = recall_at_k(&results, &data.ground_truth, 10);
    assert!(recall >= 0.97, "siftsmall recall@10 at ef=64 is {recall}");

    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    let reloaded = Hnsw::read_from(&bytes).unwrap();
    assert_eq!(search_all(&reloaded, &data.queries, 10, 64), results);
}

/// A bulk batch links by a half copy of the rows (`store/half.rs`): on the real sets of both
/// metrics that take one, the graph finds what the same build by the float rows finds, to
/// within the noise of parallel insertion.
#[test]
#[allow(clippy::print_stderr)]
fn half_row_builds_find_what_float_row_builds_find() {
    for (set, metric, ef) in [
        ("siftsmall", Metric::L2, 32),
        ("glove50-5k-angular", Metric::Cosine, 40),
    ] {
        let data = load_dataset(&shared_data_dir().join(set)).unwrap();
        let dim = data.base.dim;
        let mut copy = crate::store::VectorStore::new(metric, dim);
        copy.append(&data.base.data).unwrap();
        assert!(
            crate::store::HalfRows::of(&copy).is_some(),
            "{set} takes a half copy"
        );

        let by_halves = Hnsw::new(HnswParams::default(), metric, dim).unwrap();
        let mut by_floats = Hnsw::new(HnswParams::default(), metric, dim).unwrap();
        by_floats.half_rows = false;
        by_halves.add(&data.base.data).unwrap();
        by_floats.add(&data.base.data).unwrap();
        let recall = |index: &Hnsw| {
            recall_at_k(
                &search_all(index, &data.queries, 10, ef),
                &data.ground_truth,
                10,
            )
        };
        let (half, float) = (recall(&by_halves), recall(&by_floats));
        eprintln!(
            "{set} recall@10 at ef {ef}: half-row build {half:.4}, float-row build {float:.4}"
        );
        assert!(half >= float - 0.015, "{set}: {half} against {float}");
    }
}

#[test]
fn glove_cosine_recall() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).unwrap();
    let index = Hnsw::build(HnswParams::default(), Metric::Cosine, 50, &data.base.data).unwrap();
    let recall = recall_at_k(
        &search_all(&index, &data.queries, 10, 100),
        &data.ground_truth,
        10,
    );
    assert!(
        recall >= 0.95,
        "glove cosine recall@10 at ef=100 is {recall}"
    );
}

#[test]
fn incremental_batches_match_one_build() {
    let spec = ClusterSpec {
        n: 4_000,
        dim: 32,
        clusters: 20,
        spread: 0.6,
        intrinsic_dim: None,
        seed: 1,
    };
    let base = clustered_gaussian(spec);
    let queries = clustered_with_structure(
        ClusterSpec {
            n: 100,
            seed: 2,
            ..spec
        },
        spec.seed,
    );
    let truth = ground_truth(&base, &queries, Metric::L2, 10);
    let index = Hnsw::new(HnswParams::default(), Metric::L2, 32).unwrap();
    for chunk in base.data.chunks(32 * 97) {
        index.add(chunk).unwrap();
    }
    assert_eq!(index.len(), 4_000);
    let recall = recall_at_k(&search_all(&index, &queries, 10, 100), &truth, 10);
    assert!(recall >= 0.95, "recall after small batches is {recall}");
}

#[test]
fn searches_run_while_batches_are_linked() {
    let spec = ClusterSpec {
        n: 6_000,
        dim: 16,
        clusters: 10,
        spread: 0.5,
        intrinsic_dim: None,
        seed: 3,
    };
    let base = clustered_gaussian(spec);
    let index = Hnsw::new(HnswParams::default(), Metric::L2, 16).unwrap();
    index.add(&base.data[..16 * 1000]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for chunk in base.data[16 * 1000..].chunks(16 * 500) {
                index.add(chunk).unwrap();
            }
        });
        for i in 0..2_000 {
            let q = base.row(i % 1000);
            let (hits, _) = index.search(q, 5, &SearchParams::default(), None).unwrap();
            assert_eq!(hits.len(), 5);
            assert!(hits.windows(2).all(|w| w[0] <= w[1]));
        }
    });
    // Every vector is findable as its own nearest neighbour once linked.
    let found = (0..6_000)
        .filter(|&i| {
            index
                .search(base.row(i), 1, &SearchParams::default(), None)
                .unwrap()
                .0[0]
                .key
                == 0.0
        })
        .count();
    assert!(found >= 5_950, "{found} of 6000 found themselves");
}

#[test]
fn filter_restricts_results_and_keeps_recall() {
    let spec = ClusterSpec {
        n: 3_000,
        dim: 16,
        clusters: 10,
        spread: 0.5,
        intrinsic_dim: None,
        seed: 4,
    };
    let base = clustered_gaussian(spec);
    let index = Hnsw::build(HnswParams::default(), Metric::L2, 16, &base.data).unwrap();
    let even = |s: Slot| s.is_multiple_of(2);
    let q = base.row(11);
    let params = SearchParams {
        ef: Some(200),
        exact: false,
        ..SearchParams::default()
    };
    // The truth from the input rows, independent of the index's own store.
    let exact = brute_force(&base.data, 16, |v| reference::l2_squared(q, v), even);
    // The plain search, then the one steered by link codes.
    for codes in [None, Some(RowCodes::Rabitq)] {
        index.set_codes(codes).unwrap();
        let (hits, stats) = index.search(q, 10, &params, Some(&even)).unwrap();
        assert_eq!(stats.scored_codes, codes.is_some());
        assert_eq!(hits.len(), 10);
        assert!(hits.iter().all(|h| h.slot % 2 == 0));
        let overlap = hits
            .iter()
            .filter(|h| exact.iter().take(10).any(|&(_, slot)| slot == h.slot))
            .count();
        assert!(overlap >= 9, "{codes:?}: filtered overlap {overlap}/10");
    }
    // Link codes steer the search, the keys are the rows' own (by the store's kernel), and
    // `ignore_quantization` walks the rows.
    let hits = index.search(q, 10, &params, Some(&even)).unwrap().0;
    let key_fn = Metric::L2.key_fn();
    for h in &hits {
        assert_eq!(h.key, key_fn(q, base.row(h.slot as usize)));
    }
    let ignoring = SearchParams {
        ignore_quantization: true,
        ..params
    };
    assert!(!index.search(q, 10, &ignoring, None).unwrap().1.scored_codes);
}

#[test]
fn small_and_degenerate_graphs() {
    let index = Hnsw::new(HnswParams::default(), Metric::InnerProduct, 2).unwrap();
    assert!(index
        .search(&[1.0, 0.0], 3, &SearchParams::default(), None)
        .unwrap()
        .0
        .is_empty());
    index.add(&[1.0, 0.0]).unwrap();
    let (hits, _) = index
        .search(&[1.0, 0.0], 3, &SearchParams::default(), None)
        .unwrap();
    assert_eq!(hits.len(), 1);
    // Many identical points (movielens-mips has groups of up to 100) must not break linking.
    index.add(&[0.5f32, 0.5].repeat(300)).unwrap();
    let (hits, _) = index
        .search(
            &[0.0, 1.0],
            50,
            &SearchParams {
                ef: Some(400),
                exact: false,
                ..SearchParams::default()
            },
            None,
        )
        .unwrap();
    assert_eq!(hits.len(), 50);
    assert!(matches!(
        index.add(&[1.0, 2.0, 3.0]),
        Err(IndexError::WrongDimension { .. })
    ));
}

#[test]
fn corrupt_payloads_are_rejected_not_trusted() {
    let base = clustered_gaussian(ClusterSpec {
        n: 200,
        dim: 4,
        clusters: 3,
        spread: 0.5,
        intrinsic_dim: None,
        seed: 5,
    });
    let index = Hnsw::build(HnswParams::default(), Metric::L2, 4, &base.data).unwrap();
    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
        assert!(Hnsw::read_from(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A link pointing outside the graph is caught by validation even without a checksum.
    let mut bad = bytes.clone();
    let tail = bad.len() - 4;
    bad[tail..].copy_from_slice(&u32::MAX.to_le_bytes());
    let n_upper_words = bad.len(); // the last word is an upper-layer link or layer-0 word
    let _ = n_upper_words;
    if let Ok(index) = Hnsw::read_from(&bad) {
        // The last word may be an unused slot beyond a list's count; then it is harmless.
        assert_eq!(index.len(), 200);
    }
}

/// Regenerates `tests/data/hnsw_v1.cidx`, the checked-in format-1 file that
/// `persist::tests::checked_in_v1_file_still_loads` reads. Run only when the format changes
/// (and bump `FORMAT_VERSION`, keeping the old file for a reader of the old version).
#[test]
#[ignore = "writes a fixture"]
fn write_v1_fixture() {
    let index = Hnsw::build(
        HnswParams::default(),
        Metric::L2,
        4,
        &[
            1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5,
        ],
    )
    .unwrap();
    let mut payload = Vec::new();
    index.write_to(&mut payload);
    let header = persist::FileHeader {
        kind: IndexKind::Hnsw,
        metric: Metric::L2,
        dim: 4,
        count: 4,
        applied_seq: 4,
    };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/hnsw_v1.cidx");
    fs_err::create_dir_all(path.parent().unwrap()).unwrap();
    persist::write_file(&path, &header, &payload).unwrap();
}

/// A search seeded with raw slots (ip-NSW+'s seed pool) drops repeats with its visited set and
/// scores each slot once, and it finds what the same seeds found when scored beforehand.
#[test]
fn slot_seeds_are_deduplicated_and_search_like_scored_seeds() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).unwrap();
    let index = Hnsw::build(HnswParams::default(), Metric::Cosine, 50, &data.base.data).unwrap();
    let graph = index.graph.read();
    let key_fn = graph.store.key_fn();
    let mut same_as_scored = 0;
    let queries = 50;
    for (i, raw) in data.queries.rows().take(queries).enumerate() {
        let q = Metric::Cosine.prepared(raw);
        // A pool like ip-NSW+'s: one node and its layer-0 list, then the list's first node
        // and its list again, so slots repeat.
        let root = (i * 97 % graph.len()) as Slot;
        let mut first_seen = vec![root];
        graph.for_each_neighbor(root, 0, |n| first_seen.push(n));
        let mut pool = first_seen.clone();
        let again = first_seen[1];
        pool.push(again);
        graph.for_each_neighbor(again, 0, |n| pool.push(n));
        for &s in &pool[first_seen.len()..] {
            if !first_seen.contains(&s) {
                first_seen.push(s);
            }
        }
        assert!(pool.len() > first_seen.len(), "the pool repeats slots");
        let run = |seeds: Seeds<'_>| {
            let mut scorer = graph.store.scorer(&q, None);
            let hits = best_first(&graph, &mut scorer, seeds, 32, 0);
            (hits, scorer.computed())
        };
        let (with_repeats, computed_repeats) = run(Seeds::Slots(&pool));
        let (without, computed_without) = run(Seeds::Slots(&first_seen));
        assert_eq!(
            with_repeats, without,
            "query {i}: repeats changed the search"
        );
        assert_eq!(
            computed_repeats, computed_without,
            "query {i}: a repeat was scored"
        );

        let scored: Vec<Neighbor> = first_seen
            .iter()
            .map(|&s| Neighbor::new(s, key_fn(&q, graph.store.row(s))))
            .collect();
        let (from_scored, _) = run(Seeds::Scored(&scored));
        let slots = |hits: &[Neighbor]| hits.iter().map(|h| h.slot).collect::<Vec<_>>();
        if slots(&from_scored) == slots(&with_repeats) {
            same_as_scored += 1;
        }
    }
    // The two paths sum distances in another order (four rows per kernel call or one) and
    // treat a seed tied with the worst result differently, so a rare query may differ.
    assert!(
        same_as_scored >= queries * 95 / 100,
        "slot seeds matched scored seeds on {same_as_scored} of {queries} queries"
    );
}

/// Recall@10 of `index` with RaBitQ link codes against its own plain search at the same ef,
/// on a shared set: the codes steer the search, so they may cost a little recall at one ef,
/// never much.
fn link_codes_recall(set: &str, metric: Metric, ef: usize) -> (f64, f64) {
    let data = load_dataset(&shared_data_dir().join(set)).unwrap();
    let index = Hnsw::build(
        HnswParams::default(),
        metric,
        data.base.dim,
        &data.base.data,
    )
    .unwrap();
    let plain = recall_at_k(
        &search_all(&index, &data.queries, 10, ef),
        &data.ground_truth,
        10,
    );
    index.set_codes(Some(RowCodes::Rabitq)).unwrap();
    let (_, stats) = index
        .search(data.queries.row(0), 10, &SearchParams::default(), None)
        .unwrap();
    assert!(stats.scored_codes);
    let coded = recall_at_k(
        &search_all(&index, &data.queries, 10, ef),
        &data.ground_truth,
        10,
    );
    // Dropping the codes gives the plain search back, exactly.
    index.set_codes(None).unwrap();
    let again = recall_at_k(
        &search_all(&index, &data.queries, 10, ef),
        &data.ground_truth,
        10,
    );
    assert_eq!(again, plain);
    (plain, coded)
}

#[test]
#[allow(clippy::print_stderr)]
fn rabitq_link_codes_keep_recall_on_every_metric() {
    for (set, metric, ef) in [
        ("siftsmall", Metric::L2, 64),
        ("glove50-5k-angular", Metric::Cosine, 100),
        ("movielens-mips", Metric::InnerProduct, 100),
    ] {
        let (plain, coded) = link_codes_recall(set, metric, ef);
        // The figures the module docs and the issue note quote; movielens-mips loses the
        // most (0.026–0.027 in four runs).
        eprintln!("{set}: recall@10 at ef {ef}: plain {plain:.4}, rabitq links {coded:.4}");
        assert!(
            coded >= plain - 0.03,
            "{set}: {coded} with link codes, {plain} without"
        );
    }
}

#[test]
fn link_codes_follow_batches_and_serve_during_them() {
    let spec = ClusterSpec {
        n: 6_000,
        dim: 24,
        clusters: 10,
        spread: 0.5,
        intrinsic_dim: None,
        seed: 3,
    };
    let base = clustered_gaussian(spec);
    // Codes from the first row on, batches of 500, searches running beside them.
    let early = Hnsw::new(HnswParams::default(), Metric::L2, 24).unwrap();
    early.set_codes(Some(RowCodes::Rabitq)).unwrap();
    early.add(&base.data[..24 * 500]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for chunk in base.data[24 * 500..].chunks(24 * 500) {
                early.add(chunk).unwrap();
            }
        });
        for i in 0..2_000 {
            let (hits, stats) = early
                .search(base.row(i % 500), 5, &SearchParams::default(), None)
                .unwrap();
            assert!(stats.scored_codes);
            assert_eq!(hits.len(), 5);
            assert!(hits.windows(2).all(|w| w[0] <= w[1]));
        }
    });
    let found = (0..6_000)
        .filter(|&i| {
            let (hits, _) = early
                .search(base.row(i), 1, &SearchParams::default(), None)
                .unwrap();
            hits[0].key == 0.0
        })
        .count();
    assert!(found >= 5_950, "{found} of 6000 found themselves");

    // Codes encoded afresh from the same graph give the same answers: the ones kept up batch
    // by batch are a function of the rows and links, not of the batches that brought them.
    // (Two graphs built from the same batches differ: linking is parallel.)
    let params = SearchParams::default();
    let queries: Vec<Vec<f32>> = (0..6_000)
        .step_by(7)
        .map(|i| base.row(i).iter().map(|x| x + 0.01).collect())
        .collect();
    let kept: Vec<_> = queries
        .iter()
        .map(|q| early.search(q, 10, &params, None).unwrap().0)
        .collect();
    early.set_codes(None).unwrap();
    early.set_codes(Some(RowCodes::Rabitq)).unwrap();
    for (i, (q, kept)) in queries.iter().zip(&kept).enumerate() {
        assert_eq!(
            &early.search(q, 10, &params, None).unwrap().0,
            kept,
            "query {i}"
        );
    }
}

#[test]
fn link_codes_refuse_rows_too_wide_for_their_sums() {
    let wide = Hnsw::new(HnswParams::default(), Metric::L2, 32_765).unwrap();
    let err = wide.set_codes(Some(RowCodes::Rabitq)).unwrap_err();
    assert!(err.to_string().contains("32764 dimensions"), "{err}");
    assert_eq!(wide.codes(), None);
}

#[test]
fn only_graphs_keep_link_codes() {
    let flat = crate::flat::FlatIndex::new(Metric::L2, 4);
    let err = flat.set_codes(Some(RowCodes::Rabitq)).unwrap_err();
    assert!(err.to_string().contains("graph"), "{err}");
}

/// The link-code search queues a node again when a later link gives it a better estimate,
/// and marks it only when popped: every node is still expanded and reported once, so a
/// search that returns all it scored (k = ef) holds no slot twice.
#[test]
fn link_code_searches_report_each_node_once() {
    let spec = ClusterSpec {
        n: 3_000,
        dim: 24,
        clusters: 6,
        spread: 0.8,
        intrinsic_dim: None,
        seed: 23,
    };
    let base = clustered_gaussian(spec);
    let index = Hnsw::build(HnswParams::default(), Metric::L2, 24, &base.data).unwrap();
    index.set_codes(Some(RowCodes::Rabitq)).unwrap();
    let queries = crate::dataset::Vectors {
        dim: 24,
        data: base.data[..24 * 100].iter().map(|x| x - 0.1).collect(),
    };
    for (q, found) in search_all(&index, &queries, 150, 150).iter().enumerate() {
        assert_eq!(found.len(), 150, "query {q}");
        let mut slots = found.clone();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), found.len(), "query {q}: a slot reported twice");
    }
}

/// Layer-0 capacities of less than one FastScan block, and of more than one (the second
/// partly padded): the links' lanes, codes and padding agree, so the codes' recall stays
/// near the plain search's on the same graph.
#[test]
fn link_codes_keep_recall_at_capacities_other_than_one_block() {
    let spec = ClusterSpec {
        n: 4_000,
        dim: 36,
        clusters: 8,
        spread: 0.6,
        intrinsic_dim: None,
        seed: 11,
    };
    let base = clustered_gaussian(spec);
    let queries = crate::dataset::Vectors {
        dim: 36,
        data: base.data[..36 * 200].iter().map(|x| x + 0.05).collect(),
    };
    let truth = ground_truth(&base, &queries, Metric::L2, 10);
    for m in [6, 12, 24] {
        let params = HnswParams {
            m,
            ..HnswParams::default()
        };
        let index = Hnsw::build(params, Metric::L2, 36, &base.data).unwrap();
        let plain = recall_at_k(&search_all(&index, &queries, 10, 64), &truth, 10);
        index.set_codes(Some(RowCodes::Rabitq)).unwrap();
        let coded = recall_at_k(&search_all(&index, &queries, 10, 64), &truth, 10);
        assert!(
            coded >= plain - 0.03 && coded >= 0.8,
            "m {m}: {coded} with link codes, {plain} without"
        );
    }
}
