use super::head::{Head, FLOAT_DEPTH, HOT_ROWS};
use super::*;
use crate::dataset::{
    ground_truth, load_dataset, long_tailed_norms, recall_at_k, shared_data_dir, Vectors,
};
use crate::distance::simd::dot;
use crate::{read_index, Trainers};

fn scan(params: NormScanParams, dim: usize) -> NormScan {
    NormScan::placed(params, dim, &Placement::Memory).expect("empty index")
}

fn answers(index: &dyn VectorIndex, queries: &Vectors, params: &SearchParams) -> Vec<Vec<u32>> {
    queries
        .rows()
        .map(|q| {
            let (hits, _) = index.search(q, 10, params, None).expect("search");
            hits.iter().map(|n| n.slot).collect()
        })
        .collect()
}

fn depth(ef: usize) -> SearchParams {
    SearchParams {
        ef: Some(ef),
        ..SearchParams::default()
    }
}

fn norm(row: &[f32]) -> f32 {
    row.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// The positions a scan of `depth` offers are exactly the `depth` largest norms, however the
/// rows were split between the segments by the batches that brought them.
#[test]
fn a_scan_covers_exactly_the_largest_norms() {
    let dim = 4;
    let rows = long_tailed_norms(9_000, dim, 0.8, 11);
    let mut head = Head::of_rows(&[], dim);
    // Batches of uneven sizes: some stay in the delta, some merge it into main.
    let mut first = 0;
    for size in [700, 3, 4_000, 1, 250, 4_046] {
        let batch = &rows.data[first * dim..(first + size) * dim];
        head = head.with_rows(batch, first as Slot);
        first += size;
    }
    assert_eq!(head.len(), rows.len());
    let mut norms: Vec<f32> = rows.rows().map(norm).collect();
    norms.sort_by(|a, b| b.total_cmp(a));
    let query = head::CodedQuery::new(&[1.0, 0.0, 0.0, 0.0]);
    for d in [0, 1, 2, 17, 600, 4_999, 8_999, 9_000, 20_000] {
        let mut scanned = Vec::new();
        let count = head.scan(&query, d, &mut |first, keys| {
            scanned.extend((first..).take(keys.len()));
        });
        assert_eq!(count as usize, d.min(rows.len()));
        let mut got: Vec<f32> = scanned
            .iter()
            .map(|&p| norm(rows.row(head.slot(p) as usize)))
            .collect();
        got.sort_by(|a, b| b.total_cmp(a));
        assert_eq!(got, norms[..d.min(rows.len())], "depth {d}");

        // Where the scan reads floats (up to `FLOAT_DEPTH` rows, or a whole collection within
        // `HOT_ROWS`), the floats kept at the segments' fronts give the same rows, with their
        // exact keys.
        let q = [0.3, -1.0, 0.5, 2.0];
        let mut exact = Vec::new();
        let hot = head.scan_hot(&q, d, &mut |first, keys| {
            for (p, &key) in (first..).zip(keys) {
                exact.push((head.slot(p), key));
            }
        });
        if d.min(rows.len()) > FLOAT_DEPTH {
            assert_eq!(hot, None);
            continue;
        }
        assert_eq!(hot, Some(d.min(rows.len()) as u64));
        let mut hot_slots: Vec<Slot> = exact.iter().map(|&(slot, _)| slot).collect();
        let mut coded_slots: Vec<Slot> = scanned.iter().map(|&p| head.slot(p)).collect();
        hot_slots.sort_unstable();
        coded_slots.sort_unstable();
        assert_eq!(hot_slots, coded_slots, "depth {d}");
        for (slot, key) in exact {
            let row = rows.row(slot as usize);
            let want = (Metric::InnerProduct.key_fn())(&q, row);
            assert!(
                (key - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{key} against {want}"
            );
        }
    }
}

/// A partial scan reads the floats up to `FLOAT_DEPTH` rows and the codes deeper, but a scan
/// of a whole collection that fits in the float prefix reads the floats, so that a collection
/// of up to `HOT_ROWS` items is scanned exactly however deep its scan is asked to go.
#[test]
fn whole_small_collections_read_floats_and_deep_partial_scans_read_codes() {
    let dim = 4;
    let small_len = HOT_ROWS - 24;
    let rows = long_tailed_norms(HOT_ROWS + 1, dim, 0.8, 5);
    let small = Head::of_rows(&rows.data[..small_len * dim], dim);
    assert!(small.reads_floats(FLOAT_DEPTH));
    assert!(!small.reads_floats(FLOAT_DEPTH + 1));
    assert!(small.reads_floats(small_len));
    assert!(small.reads_floats(10 * HOT_ROWS));
    let large = Head::of_rows(&rows.data, dim);
    assert!(large.reads_floats(FLOAT_DEPTH));
    assert!(!large.reads_floats(HOT_ROWS + 1));
    assert!(!large.reads_floats(10 * HOT_ROWS));

    // Through the index: every item of a small collection with its exact key, and no re-rank.
    let index = scan(NormScanParams::default(), dim);
    index.add(&rows.data[..small_len * dim]).expect("add");
    let q = [0.3, -1.0, 0.5, 2.0];
    let (hits, stats) = index
        .search(&q, small_len, &depth(small_len), None)
        .expect("search");
    assert_eq!(hits.len(), small_len);
    assert_eq!(stats.distance_computations, small_len as u64);
    for hit in &hits {
        let want = (Metric::InnerProduct.key_fn())(&q, rows.row(hit.slot as usize));
        assert!((hit.key - want).abs() <= 1e-5 * want.abs().max(1.0));
    }
}

/// The codes' estimate of ⟨q, x⟩ is within the rounding the module docs state: s/127 per
/// coordinate of the row, and the query's own rounding to bytes, max |qᵢ|/254 per coordinate.
#[test]
fn estimates_are_within_the_rounding_bound() {
    for dim in [1, 3, 37, 64, 130] {
        let rows = long_tailed_norms(500, dim, 0.8, 5);
        let queries = long_tailed_norms(20, dim, 0.5, 6);
        let head = Head::of_rows(&rows.data, dim);
        for q in queries.rows() {
            let coded = head::CodedQuery::new(q);
            let q_l1: f32 = q.iter().map(|x| x.abs()).sum();
            let q_max = q.iter().fold(0f32, |m, x| m.max(x.abs()));
            let mut scored = 0;
            head.scan(&coded, rows.len(), &mut |first, keys| {
                for (p, &key) in (first..).zip(keys) {
                    scored += 1;
                    let x = rows.row(head.slot(p) as usize);
                    let exact: f32 = q.iter().zip(x).map(|(a, b)| a * b).sum();
                    let scale = x.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let rows_rounding = scale / 127.0 * q_l1;
                    let query_rounding = q_max / 254.0 * scale * (1.0 + 1.0 / 127.0) * dim as f32;
                    let bound = 1.001 * (rows_rounding + query_rounding) + 1e-5;
                    assert!(
                        (-key - exact).abs() <= bound,
                        "dim {dim}: estimate {} against {exact}, bound {bound}",
                        -key
                    );
                }
            });
            assert_eq!(scored, rows.len());
        }
    }
}

/// On movielens-mips, whose answers lean on the norms, the scan of a quarter of the items
/// (the default) finds the true top 10, and a scan of every item is exact up to the ties the
/// codes cannot tell apart.
#[test]
fn the_default_finds_movielens_answers() {
    let set = load_dataset(&shared_data_dir().join("movielens-mips")).expect("shared data");
    let index = scan(NormScanParams::default(), set.base.dim);
    index.add(&set.base.data).expect("add");
    let truth = ground_truth(&set.base, &set.queries, Metric::InnerProduct, 10);
    let default = answers(&index, &set.queries, &SearchParams::default());
    let everything = answers(&index, &set.queries, &depth(set.base.len()));
    let (r_default, r_all) = (
        recall_at_k(&default, &truth, 10),
        recall_at_k(&everything, &truth, 10),
    );
    assert!(
        r_default >= 0.99,
        "recall@10 at the default share: {r_default}"
    );
    assert!(r_all >= 0.999, "recall@10 scanning everything: {r_all}");
    // A shallow scan misses answers: the depth is the knob.
    let shallow = recall_at_k(&answers(&index, &set.queries, &depth(20)), &truth, 10);
    assert!(shallow < r_default, "{shallow} against {r_default}");
}

/// Many small batches and one large one hold the same head, so they answer alike; the file
/// reads back to the same answers, its rows in memory or mapped.
#[test]
fn batches_and_files_answer_alike() {
    let dim = 16;
    let rows = long_tailed_norms(12_000, dim, 0.6, 21);
    let queries = long_tailed_norms(50, dim, 0.3, 22);
    let whole = scan(NormScanParams::default(), dim);
    whole.add(&rows.data).expect("add");
    let pieces = scan(NormScanParams::default(), dim);
    for chunk in rows.data.chunks(dim * 257) {
        pieces.add(chunk).expect("add");
    }
    // A scan by the floats kept at the front, and one by the codes.
    for shallow in [1_000, 3_000] {
        let params = depth(shallow);
        assert_eq!(
            answers(&pieces, &queries, &params),
            answers(&whole, &queries, &params)
        );
    }
    let params = depth(3_000);
    let expected = answers(&whole, &queries, &params);

    let mut bytes = Vec::new();
    pieces.write_to(&mut bytes);
    let dir = tempfile::tempdir().expect("temp dir");
    for placement in [
        Placement::Memory,
        Placement::Mapped(dir.path().to_path_buf()),
    ] {
        let back = read_index(
            IndexKind::NormScan,
            &bytes,
            &Trainers::default(),
            &placement,
        )
        .expect("reads back");
        assert_eq!(back.len(), rows.len());
        assert_eq!(answers(back.as_ref(), &queries, &params), expected);
    }
}

/// A filter restricts the results, not the scan: the same `ef` items are scored, and only
/// accepted slots come back, the best of them among the scanned; without rescoring the
/// results are ranked by the estimates.
#[test]
fn filters_and_estimates() {
    let dim = 8;
    let rows = long_tailed_norms(5_000, dim, 0.8, 31);
    let index = scan(NormScanParams::default(), dim);
    index.add(&rows.data[..dim * 3_000]).expect("add");
    index.add(&rows.data[dim * 3_000..]).expect("add");
    let q = rows.row(7);
    let even = |slot: Slot| slot.is_multiple_of(2);
    for ef in [500, 4_000] {
        let params = depth(ef);
        let (all, _) = index.search(q, 200, &params, None).expect("search");
        let (hits, stats) = index.search(q, 10, &params, Some(&even)).expect("search");
        let want: Vec<Slot> = all
            .iter()
            .map(|n| n.slot)
            .filter(|s| s % 2 == 0)
            .take(10)
            .collect();
        let got: Vec<Slot> = hits.iter().map(|n| n.slot).collect();
        assert_eq!(got, want, "ef {ef}");
        // The floats at the front are scored exactly; deeper, the codes and then the 20
        // candidates re-ranked.
        let rerank = if ef > FLOAT_DEPTH { 20 } else { 0 };
        assert_eq!(stats.distance_computations, ef as u64 + rerank, "ef {ef}");
    }

    // A scan whose rows the filter all refuses goes deeper until it has `k` (deleted points
    // at the front of the norm order are such rows): here the 300 largest norms are refused.
    let front: Vec<Slot> = index.head_slots(300);
    let behind = |slot: Slot| !front.contains(&slot);
    for ef in [20, 2_000] {
        let (hits, stats) = index
            .search(q, 10, &depth(ef), Some(&behind))
            .expect("search");
        assert_eq!(hits.len(), 10, "ef {ef}");
        assert!(hits.iter().all(|n| behind(n.slot)));
        assert!(
            stats.distance_computations > ef as u64,
            "ef {ef}: went deeper"
        );
    }

    // `ignore_quantization` scores the same items by their rows: the exact best of them.
    let full = SearchParams {
        ignore_quantization: true,
        ..depth(3_000)
    };
    let (by_rows, stats) = index.search(q, 10, &full, None).expect("search");
    assert_eq!(stats.distance_computations, 3_000);
    let mut truth: Vec<(f32, Slot)> = index
        .head_slots(3_000)
        .into_iter()
        .map(|slot| (-dot(q, rows.row(slot as usize)), slot))
        .collect();
    truth.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let want: Vec<Slot> = truth.iter().take(10).map(|&(_, slot)| slot).collect();
    assert_eq!(by_rows.iter().map(|n| n.slot).collect::<Vec<_>>(), want);

    let estimates = SearchParams {
        rescore: Some(false),
        ..depth(5_000)
    };
    let (rough, _) = index.search(q, 10, &estimates, None).expect("search");
    let (exact, _) = index
        .search(
            q,
            10,
            &SearchParams {
                exact: true,
                ..SearchParams::default()
            },
            None,
        )
        .expect("search");
    let overlap = rough
        .iter()
        .filter(|n| exact.iter().any(|e| e.slot == n.slot))
        .count();
    assert!(overlap >= 8, "{overlap} of 10");
    for n in &rough {
        let exact_key = -rows
            .row(n.slot as usize)
            .iter()
            .zip(q)
            .map(|(a, b)| a * b)
            .sum::<f32>();
        assert!((n.key - exact_key).abs() < 0.05 * exact_key.abs() + 1e-3);
    }
}

#[test]
fn refuses_what_cannot_build() {
    for (share, oversampling) in [(0.0, 4.0), (1.5, 4.0), (f32::NAN, 4.0), (0.5, 0.5)] {
        let params = NormScanParams {
            share,
            oversampling,
        };
        assert!(NormScan::placed(params, 4, &Placement::Memory).is_err());
    }
    assert!(NormScan::placed(NormScanParams::default(), 0, &Placement::Memory).is_err());
    let l2 = crate::new_in_memory(
        &crate::IndexParams::NormScan(NormScanParams::default()),
        Metric::L2,
        4,
    );
    assert!(l2.is_err());
}

impl NormScan {
    /// The slots of the `depth` largest-norm items.
    fn head_slots(&self, depth: usize) -> Vec<Slot> {
        let inner = self.inner.read();
        inner
            .head
            .positions(depth)
            .map(|p| inner.head.slot(p))
            .collect()
    }
}

/// A batch answers as its queries one at a time do, hits, keys and work alike: by the float
/// prefix, by the codes (one pass for every query), by the full rows, without rescoring,
/// exactly, and under a filter that leaves some queries short so that they scan deeper.
#[test]
fn a_batch_answers_as_its_queries_one_by_one() {
    let dim = 24;
    let rows = long_tailed_norms(6_000, dim, 0.5, 31);
    let queries = long_tailed_norms(40, dim, 0.3, 32);
    let index = scan(NormScanParams::default(), dim);
    // Two batches, so that the scan reads both segments.
    index.add(&rows.data[..5_000 * dim]).expect("add");
    index.add(&rows.data[5_000 * dim..]).expect("add");
    // 15 of the 6,000 slots: a scan of 1,500 rows finds fewer than 10 of them.
    let few = |slot: Slot| slot.is_multiple_of(401);
    let cases = [
        (depth(500), None),
        (depth(2_500), None),
        (SearchParams::default(), None),
        (depth(6_000), None),
        (
            SearchParams {
                ignore_quantization: true,
                ..depth(2_500)
            },
            None,
        ),
        (
            SearchParams {
                rescore: Some(false),
                ..depth(2_500)
            },
            None,
        ),
        (
            SearchParams {
                exact: true,
                ..SearchParams::default()
            },
            None,
        ),
        (depth(1_500), Some(&few as SlotFilter<'_>)),
    ];
    for (params, filter) in cases {
        let batch = index
            .search_batch(&queries.data, 10, &params, filter)
            .expect("batch");
        assert_eq!(batch.len(), queries.len());
        for (q, (hits, stats)) in queries.rows().zip(&batch) {
            let (one, one_stats) = index.search(q, 10, &params, filter).expect("search");
            assert_eq!(hits, &one, "{params:?}");
            assert_eq!(stats, &one_stats, "{params:?}");
            assert_eq!(hits.len(), 10, "{params:?}");
        }
        if filter.is_some() {
            let deepest = batch.iter().map(|(_, s)| s.distance_computations).max();
            assert!(
                deepest > Some(3_000),
                "no query scanned deeper: {deepest:?}"
            );
        }
    }
    assert!(index
        .search_batch(&[], 10, &SearchParams::default(), None)
        .expect("an empty batch")
        .is_empty());
    let ragged = index.search_batch(&queries.data[..dim + 3], 10, &SearchParams::default(), None);
    assert!(
        matches!(ragged, Err(IndexError::InvalidParams(_))),
        "{ragged:?}"
    );
}
