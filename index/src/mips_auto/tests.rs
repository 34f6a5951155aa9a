use super::*;
use crate::dataset::{
    ground_truth, load_dataset, long_tailed_norms, recall_at_k, shared_data_dir, Vectors,
};
use crate::read_index;

fn auto(dim: usize) -> MipsAuto {
    MipsAuto::placed(IpNswPlusParams::default(), dim, &Placement::Memory).expect("empty index")
}

fn answers_with(
    index: &dyn VectorIndex,
    queries: &Vectors,
    params: &SearchParams,
) -> Vec<Vec<u32>> {
    queries
        .rows()
        .map(|q| {
            let (hits, _) = index.search(q, 10, params, None).expect("search");
            hits.iter().map(|n| n.slot).collect()
        })
        .collect()
}

fn answers(index: &dyn VectorIndex, queries: &Vectors, ef: usize) -> Vec<Vec<u32>> {
    let params = SearchParams {
        ef: Some(ef),
        ..SearchParams::default()
    };
    answers_with(index, queries, &params)
}

fn round_trip(index: &MipsAuto) -> Box<dyn VectorIndex> {
    let mut bytes = Vec::new();
    index.write_to(&mut bytes);
    read_index(
        IndexKind::MipsAuto,
        &bytes,
        &Trainers::default(),
        &Placement::Memory,
    )
    .expect("the file reads back")
}

/// The rule on the real sets and on log-normal norms either side of the threshold: the sides
/// measured faster (module docs).
#[test]
fn the_spread_of_the_norms_and_the_size_pick_the_index_measured_faster() {
    let spread_of = |v: &Vectors| norm_spread(&[&v.data], v.dim);
    for (set, kind, reason) in [
        ("movielens-mips", IndexKind::NormScan, Reason::Spread),
        // Norms that do not lean, in few rows: all of them read.
        ("glove50-5k-angular", IndexKind::NormScan, Reason::Small),
        ("siftsmall", IndexKind::IpNsw, Reason::Spread),
    ] {
        let base = load_dataset(&shared_data_dir().join(set))
            .expect("shared data")
            .base;
        let spread = spread_of(&base);
        let choice = Choice::of(spread, base.len());
        assert_eq!(
            (choice.kind, choice.reason),
            (kind, reason),
            "{set}: {spread}"
        );
    }
    // exp(1.645·σ) is the spread of log-normal norms: 1.31 at the bias-0.65 set's σ, 1.18 at 0.1.
    let wide = long_tailed_norms(4_096, 32, 0.166, 3);
    let narrow = long_tailed_norms(4_096, 32, 0.1, 3);
    assert!(
        (spread_of(&wide) - 1.31).abs() < 0.03,
        "{}",
        spread_of(&wide)
    );
    let many = SMALL_SCAN_ROWS + 1;
    assert_eq!(Choice::of(spread_of(&wide), many).kind, IndexKind::NormScan);
    assert_eq!(Choice::of(spread_of(&narrow), many).kind, IndexKind::IpNsw);
    assert_eq!(
        Choice::of(spread_of(&narrow), many - 1).kind,
        IndexKind::NormScan
    );
    // Degenerate rows: all zero, or mostly zero.
    assert_eq!(norm_spread(&[&[0.0; 8]], 2), 1.0);
    assert_eq!(
        norm_spread(&[&[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], &[3.0, 4.0]], 2),
        f32::INFINITY
    );
    assert_eq!(norm_spread(&[], 2), 1.0);
    // The norm scan's bound, in codes: a million rows of 64 dimensions, never below the rows
    // the choice is made at.
    assert_eq!(scan_rows(64), 1 << 20);
    assert_eq!(scan_rows(63), 1 << 20);
    assert_eq!(scan_rows(1 << 20), TRAIN_ROWS);
}

/// Below `TRAIN_ROWS` rows the index scans exactly; the batch that reaches it builds the norm
/// scan from every row (movielens-mips' norms lean), slots keep their numbers, and the
/// default finds the answers.
#[test]
fn scans_exactly_then_builds_the_chosen_index_over_every_row() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).expect("shared data");
    let dim = data.base.dim;
    let index = auto(dim);
    let mut start = 0;
    for rows in [1, 600, 422] {
        let first = index
            .add(&data.base.data[start * dim..(start + rows) * dim])
            .expect("add");
        assert_eq!(first as usize, start);
        start += rows;
    }
    assert_eq!(index.len(), TRAIN_ROWS - 1);
    assert_eq!(index.chosen(), None);
    assert_eq!(index.default_ef(), None);
    assert!(index.choice().is_some_and(|c| c.contains("exact scan")));
    let held = data.base.truncated(start);
    let exact = ground_truth(&held, &data.queries, Metric::InnerProduct, 10);
    assert_eq!(
        recall_at_k(&answers(&index, &data.queries, 10), &exact, 10),
        1.0
    );

    for rows in [1, 5_000, data.base.len() - start - 5_001] {
        let first = index
            .add(&data.base.data[start * dim..(start + rows) * dim])
            .expect("add");
        assert_eq!(first as usize, start);
        start += rows;
    }
    let choice = index.chosen().expect("chosen at TRAIN_ROWS rows");
    assert_eq!(
        (choice.kind, choice.rows, choice.reason),
        (IndexKind::NormScan, TRAIN_ROWS, Reason::Spread)
    );
    assert!(index
        .choice()
        .is_some_and(|c| c.starts_with("norm_scan: norm spread")));
    assert_eq!(index.len(), data.base.len());
    // A query that names no `ef` reads a quarter of the items.
    assert_eq!(index.default_ef(), Some(data.base.len().div_ceil(4)));
    for slot in [0, 1_022, 1_023, 9_000] {
        assert_eq!(
            index.vector(slot).expect("stored"),
            data.base.row(slot as usize),
            "slot {slot}"
        );
    }
    let found = answers_with(&index, &data.queries, &SearchParams::default());
    let recall = recall_at_k(&found, &data.ground_truth, 10);
    assert!(recall >= 0.99, "movielens recall@10 by default: {recall}");
    // A batch answers as the queries one by one do.
    let batch = index
        .search_batch(&data.queries.data, 10, &SearchParams::default(), None)
        .expect("batch");
    let batch: Vec<Vec<u32>> = batch
        .iter()
        .map(|(hits, _)| hits.iter().map(|n| n.slot).collect())
        .collect();
    assert_eq!(batch, found);
}

/// The choice and what it built are kept in the index file, and so is the scan before it.
#[test]
fn the_choice_survives_a_reload_at_every_stage() {
    let data = load_dataset(&shared_data_dir().join("glove50-5k-angular")).expect("shared data");
    let dim = data.base.dim;
    let index = auto(dim);
    index.add(&data.base.data[..500 * dim]).expect("add");
    let scanning = round_trip(&index);
    assert_eq!(scanning.len(), 500);
    assert_eq!(scanning.choice(), index.choice());
    assert_eq!(
        answers(&*scanning, &data.queries, 10),
        answers(&index, &data.queries, 10)
    );
    // The reloaded scan goes on to choose from its rows and the rest.
    scanning.add(&data.base.data[500 * dim..]).expect("add");
    assert!(scanning
        .choice()
        .is_some_and(|c| c.starts_with("norm_scan: ")));

    // GloVe's norms spread little, and its 4,550 rows are few: every one is read.
    index.add(&data.base.data[500 * dim..]).expect("add");
    let chosen = index.chosen().expect("chosen");
    assert_eq!(
        (chosen.kind, chosen.reason),
        (IndexKind::NormScan, Reason::Small)
    );
    assert_eq!(index.default_ef(), Some(data.base.len()));
    let small = round_trip(&index);
    assert_eq!(small.choice(), index.choice());
    let everything = answers_with(&index, &data.queries, &SearchParams::default());
    assert_eq!(
        answers_with(&*small, &data.queries, &SearchParams::default()),
        everything
    );
    // The set's own truth is by cosine; by inner product it is computed here.
    let truth = ground_truth(&data.base, &data.queries, Metric::InnerProduct, 10);
    let recall = recall_at_k(&everything, &truth, 10);
    assert!(recall >= 0.99, "GloVe read whole, recall@10: {recall}");

    // Rows of one length past the small bound get ip-NSW.
    let sift = load_dataset(&shared_data_dir().join("siftsmall")).expect("shared data");
    let index = auto(sift.base.dim);
    index.add(&sift.base.data).expect("add");
    let chosen = index.chosen().expect("chosen");
    assert_eq!(
        (chosen.kind, chosen.reason),
        (IndexKind::IpNsw, Reason::Spread)
    );
    assert!(index.choice().is_some_and(|c| c.starts_with("ip_nsw: ")));
    assert_eq!(
        index.default_ef(),
        Some(IpNswPlusParams::default().ef_search)
    );
    let reloaded = round_trip(&index);
    assert_eq!(reloaded.choice(), index.choice());
    let before = answers(&index, &sift.queries, 64);
    assert_eq!(answers(&*reloaded, &sift.queries, 64), before);
    let truth = ground_truth(&sift.base, &sift.queries, Metric::InnerProduct, 10);
    let recall = recall_at_k(&before, &truth, 10);
    assert!(
        recall >= 0.9,
        "siftsmall by inner product, recall@10 at ef 64: {recall}"
    );

    // A norm scan, and the graph it grows into, read back as they were.
    let base = long_tailed_norms(5_000, 16, 0.8, 4);
    let queries = long_tailed_norms(20, 16, 0.2, 5);
    let leaning = auto(16).with_scan_rows(4_000);
    leaning.add(&base.data[..3_000 * 16]).expect("add");
    let reloaded = round_trip(&leaning);
    assert_eq!(reloaded.choice(), leaning.choice());
    assert_eq!(
        answers(&*reloaded, &queries, 500),
        answers(&leaning, &queries, 500)
    );
    leaning.add(&base.data[3_000 * 16..]).expect("add");
    assert_eq!(
        leaning.chosen().map(|c| (c.kind, c.reason)),
        Some((IndexKind::IpNswPlus, Reason::Outgrown(5_000)))
    );
    let reloaded = round_trip(&leaning);
    assert_eq!(reloaded.choice(), leaning.choice());
    assert_eq!(
        answers(&*reloaded, &queries, 64),
        answers(&leaning, &queries, 64)
    );
}

/// The batch that takes a norm scan past its bound builds ip-NSW+ from every row: slots keep
/// their numbers, `explain` says why, and `ef` becomes the graph's again.
#[test]
fn a_norm_scan_grows_into_ip_nsw_plus_past_its_bound() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).expect("shared data");
    let dim = data.base.dim;
    let index = auto(dim).with_scan_rows(6_000);
    index.add(&data.base.data[..6_000 * dim]).expect("add");
    assert_eq!(index.chosen().map(|c| c.kind), Some(IndexKind::NormScan));
    let first = index.add(&data.base.data[6_000 * dim..]).expect("add");
    assert_eq!(first, 6_000);
    let choice = index.chosen().expect("chosen");
    assert_eq!(
        (choice.kind, choice.rows, choice.reason),
        (
            IndexKind::IpNswPlus,
            6_000,
            Reason::Outgrown(data.base.len())
        )
    );
    let line = index.choice().expect("a choice");
    assert!(
        line.starts_with("ip_nsw_plus: ") && line.contains("outgrew"),
        "{line}"
    );
    assert_eq!(
        index.default_ef(),
        Some(IpNswPlusParams::default().ef_search)
    );
    assert_eq!(index.len(), data.base.len());
    for slot in [0, 5_999, 6_000, 9_000] {
        assert_eq!(
            index.vector(slot).expect("stored"),
            data.base.row(slot as usize),
            "slot {slot}"
        );
    }
    let recall = recall_at_k(&answers(&index, &data.queries, 64), &data.ground_truth, 10);
    assert!(recall >= 0.95, "movielens recall@10 at ef 64: {recall}");
    // A first batch already past the bound goes to the graph at once.
    let at_once = auto(dim).with_scan_rows(6_000);
    at_once.add(&data.base.data).expect("add");
    assert_eq!(
        at_once.chosen().map(|c| (c.kind, c.reason)),
        Some((IndexKind::IpNswPlus, Reason::Outgrown(data.base.len())))
    );
}

/// Rows of one length are read whole while they are few, and the batch that passes the small
/// bound builds ip-NSW from every row.
#[test]
fn a_small_norm_scan_grows_into_ip_nsw() {
    let data = load_dataset(&shared_data_dir().join("pypi-minilm")).expect("shared data");
    let dim = data.base.dim;
    let bound = SMALL_SCAN_ROWS;
    let index = auto(dim);
    index.add(&data.base.data[..bound * dim]).expect("add");
    let choice = index.chosen().expect("chosen");
    assert_eq!(
        (choice.kind, choice.reason),
        (IndexKind::NormScan, Reason::Small)
    );
    assert!(index.choice().is_some_and(|c| c.contains("read them all")));
    assert_eq!(index.default_ef(), Some(bound));
    index
        .add(&data.base.data[bound * dim..(bound + 2_000) * dim])
        .expect("add");
    let choice = index.chosen().expect("chosen");
    assert_eq!(
        (choice.kind, choice.reason),
        (IndexKind::IpNsw, Reason::Outgrown(bound + 2_000))
    );
    let reloaded = round_trip(&index);
    assert_eq!(reloaded.choice(), index.choice());
    let held = data.base.truncated(bound + 2_000);
    let truth = ground_truth(&held, &data.queries, Metric::InnerProduct, 10);
    let recall = recall_at_k(&answers(&index, &data.queries, 64), &truth, 10);
    assert!(
        recall >= 0.95,
        "pypi-minilm by inner product, recall@10: {recall}"
    );
}

/// Row codes reach the graph: asked for before the choice, norm-leaning rows get ip-NSW+ at
/// once; asked for while the norm scan serves, it grows into ip-NSW+ then. rabitq, which
/// ip-NSW+ cannot keep, is refused up front.
#[test]
fn codes_take_the_graph_and_rabitq_is_refused() {
    let base = long_tailed_norms(3_000, 16, 0.8, 5);
    let int8 = Some(RowCodes::Int8 {
        quantile: RowCodes::DEFAULT_QUANTILE,
    });
    let before = auto(16);
    let err = before
        .set_codes(Some(RowCodes::Rabitq))
        .expect_err("rabitq refused");
    assert!(err.to_string().contains("ip_nsw"), "{err}");
    before.set_codes(int8).expect("int8");
    before.add(&base.data).expect("add");
    assert_eq!(before.codes(), int8);
    assert_eq!(
        before.chosen().map(|c| (c.kind, c.reason)),
        Some((IndexKind::IpNswPlus, Reason::RowCodes))
    );
    assert!(before.choice().is_some_and(|c| c.contains("row codes")));

    let after = auto(16);
    after.add(&base.data).expect("add");
    assert_eq!(after.chosen().map(|c| c.kind), Some(IndexKind::NormScan));
    after.set_codes(None).expect("no codes: nothing to do");
    assert_eq!(after.chosen().map(|c| c.kind), Some(IndexKind::NormScan));
    after.set_codes(int8).expect("int8");
    assert_eq!(
        after.chosen().map(|c| (c.kind, c.reason)),
        Some((IndexKind::IpNswPlus, Reason::RowCodes))
    );
    assert_eq!(after.codes(), int8);
    assert_eq!(after.len(), base.len());
    let reloaded = round_trip(&after);
    assert_eq!(reloaded.choice(), after.choice());
}

/// Searches running while a batch switches the index (the exact scan to the norm scan, and
/// the norm scan to the graph) see one or the other with every row, never an empty or
/// half-built index.
#[test]
fn searches_during_the_switches_see_every_row() {
    let base = long_tailed_norms(9_000, 16, 0.8, 9);
    let index = auto(16).with_scan_rows(5_000);
    index.add(&base.data[..1_000 * 16]).expect("add");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut searched = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || searched == 0 {
                let (hits, _) = index
                    .search(base.row(7), 10, &SearchParams::default(), None)
                    .expect("search");
                assert_eq!(hits.len(), 10);
                let batch = index
                    .search_batch(&base.data[..3 * 16], 10, &SearchParams::default(), None)
                    .expect("batch");
                assert!(batch.iter().all(|(hits, _)| hits.len() == 10));
                assert!(index.store().len() >= 1_000);
                searched += 1;
            }
        });
        index.add(&base.data[1_000 * 16..4_000 * 16]).expect("add");
        assert_eq!(index.chosen().map(|c| c.kind), Some(IndexKind::NormScan));
        index.add(&base.data[4_000 * 16..]).expect("add");
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(index.len(), 9_000);
    assert_eq!(index.chosen().map(|c| c.kind), Some(IndexKind::IpNswPlus));
}
