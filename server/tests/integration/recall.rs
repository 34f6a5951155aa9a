//! siftsmall over REST: recall@10 at the default `hnsw_ef`, filtered search against a
//! brute-force filtered search, and the four query endpoints agreeing with each other.

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir};
use cairn_index::distance::reference::l2_squared;
use serde_json::{json, Value};

use crate::harness::{ids, Server};

#[test]
fn siftsmall_recall_and_filtered_search_over_rest() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    // A low full-scan threshold so 10%-selective filters exercise the filtered graph search.
    server.create(
        "sift",
        128,
        "Euclid",
        json!({"hnsw_config": {"full_scan_threshold": 200}}),
    );
    server.upsert_vectors("sift", 128, &data.base.data, 0, 500);
    assert_eq!(
        server.ok("POST", "/collections/sift/points/count", Some(&json!({})))["count"],
        10_000
    );

    // Unfiltered, default ef.
    let results: Vec<Vec<u32>> = data
        .queries
        .rows()
        .map(|q| {
            let r = server.ok(
                "POST",
                "/collections/sift/points/query",
                Some(&json!({"query": q, "limit": 10})),
            );
            ids(&r).into_iter().map(|id| id as u32).collect()
        })
        .collect();
    let recall = recall_at_k(&results, &data.ground_truth, 10);
    eprintln!("siftsmall REST recall@10 at default hnsw_ef: {recall:.4}");
    assert!(recall >= 0.95, "recall@10 {recall}");

    // Filtered: 10% selective (graph path) and 0.1% selective (exact fallback), vs brute force.
    for (filter, name) in [
        (
            json!({"must": [{"key": "bucket", "match": {"value": 3}}]}),
            "10%",
        ),
        (
            json!({"must": [{"key": "bucket", "match": {"any": [3, 4]}}], "must_not": [{"has_id": [3, 13, 23]}]}),
            "20%",
        ),
        (
            json!({"must": [{"has_id": (0..10).map(|i| i * 997).collect::<Vec<_>>()}]}),
            "0.1%",
        ),
    ] {
        let allowed = |id: u64| -> bool {
            match name {
                "10%" => id % 10 == 3,
                "20%" => (id % 10 == 3 || id % 10 == 4) && ![3, 13, 23].contains(&id),
                _ => id.is_multiple_of(997) && id / 997 < 10,
            }
        };
        let (mut hits, mut total) = (0, 0);
        for q in data.queries.rows() {
            let mut exact: Vec<(f64, u64)> = (0..10_000u64)
                .filter(|&id| allowed(id))
                .map(|id| (l2_squared(q, data.base.row(id as usize)), id))
                .collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let want: Vec<u64> = exact.iter().take(10).map(|e| e.1).collect();
            let body = json!({"query": q, "limit": 10, "filter": filter, "with_payload": true});
            let got = server.ok("POST", "/collections/sift/points/query", Some(&body));
            for p in got["points"].as_array().unwrap() {
                assert!(
                    allowed(p["id"].as_u64().unwrap()),
                    "filter {name} let {} through",
                    p["id"]
                );
            }
            hits += ids(&got).iter().filter(|id| want.contains(id)).count();
            total += want.len();
        }
        let recall = hits as f64 / total as f64;
        eprintln!("siftsmall filtered ({name}) recall@10: {recall:.4}");
        assert!(recall >= 0.95, "filtered {name} recall {recall}");
    }

    // query, query/batch, search and search/batch agree; exact matches ground truth.
    let q: Vec<f32> = data.queries.row(0).to_vec();
    let query = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 5, "params": {"hnsw_ef": 200}})),
    );
    let batch = server.ok(
        "POST",
        "/collections/sift/points/query/batch",
        Some(&json!({"searches": [{"query": q, "limit": 5, "params": {"hnsw_ef": 200}}]})),
    );
    let search = server.ok(
        "POST",
        "/collections/sift/points/search",
        Some(&json!({"vector": q, "limit": 5, "params": {"hnsw_ef": 200}})),
    );
    let search_batch = server.ok(
        "POST",
        "/collections/sift/points/search/batch",
        Some(&json!({"searches": [{"vector": q, "limit": 5, "params": {"hnsw_ef": 200}}]})),
    );
    assert_eq!(ids(&query), ids(&batch[0]));
    assert_eq!(ids(&query), ids(&search));
    assert_eq!(ids(&query), ids(&search_batch[0]));
    let exact = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 10, "params": {"exact": true}})),
    );
    let truth: Vec<u64> = data.ground_truth[0]
        .iter()
        .take(10)
        .map(|&i| u64::from(i))
        .collect();
    assert_eq!(ids(&exact), truth);
    // Euclid scores are distances, ascending, and a threshold cuts farther points.
    let scores: Vec<f64> = exact["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] <= w[1]));
    let expected = l2_squared(&q, data.base.row(truth[0] as usize)).sqrt();
    assert!((scores[0] - expected).abs() < 1e-3 * expected.max(1.0));
    let cut = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 10, "score_threshold": scores[4]})),
    );
    assert_eq!(ids(&cut).len(), 5);
    // Offset pages through the same ranking.
    let page2 = server.ok(
        "POST",
        "/collections/sift/points/query",
        Some(&json!({"query": q, "limit": 5, "offset": 5, "params": {"exact": true}})),
    );
    assert_eq!(ids(&page2), truth[5..10].to_vec());

    // Delete by filter, then nothing deleted is ever returned.
    server.ok(
        "POST",
        "/collections/sift/points/delete?wait=true",
        Some(&json!({"filter": {"must": [{"key": "bucket", "match": {"value": 7}}]}})),
    );
    assert_eq!(
        server.ok("POST", "/collections/sift/points/count", Some(&json!({})))["count"],
        9_000
    );
    for q in data.queries.rows().take(20) {
        let r: Value = server.ok(
            "POST",
            "/collections/sift/points/query",
            Some(&json!({"query": q, "limit": 50})),
        );
        assert!(ids(&r).iter().all(|id| id % 10 != 7));
    }
}
