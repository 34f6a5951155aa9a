//! Maximum inner product over REST on movielens-mips (issue #5): the default `Dot` index is
//! ip-NSW+ and reaches recall@10 ≥ 0.95 against exact inner-product ground truth; Range-LSH
//! reaches ≥ 0.9 at its default budget of 1024 probed items; a NEQ-quantized collection with
//! rescoring reaches ≥ 0.95; all three again, with the same answers, after a restart that loads
//! their snapshots; the norm-ordered scan (issue #26) likewise. MIPS index kinds and
//! quantization refuse metrics and parameters they were not built for.

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir, Dataset};
use serde_json::json;

use crate::harness::{ids, Server};

fn recall(server: &Server, collection: &str, data: &Dataset) -> (f64, Vec<Vec<u64>>) {
    let results: Vec<Vec<u64>> = data
        .queries
        .rows()
        .map(|q| {
            ids(&server.ok(
                "POST",
                &format!("/collections/{collection}/points/query"),
                Some(&json!({"query": q, "limit": 10})),
            ))
        })
        .collect();
    let as_slots: Vec<Vec<u32>> = results
        .iter()
        .map(|r| r.iter().map(|&id| id as u32).collect())
        .collect();
    (recall_at_k(&as_slots, &data.ground_truth, 10), results)
}

/// What `explain` says the automatic MIPS index chose.
fn explained_choice(server: &Server, collection: &str) -> String {
    let explained = server.ok(
        "POST",
        &format!("/collections/{collection}/points/query"),
        Some(&json!({"query": vec![0.1; 64], "limit": 1, "explain": true})),
    );
    assert_eq!(explained["explain"]["index"], "mips_auto", "{explained}");
    explained["explain"]["index_choice"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn movielens_mips_auto_over_rest_survives_a_restart() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("ml", 64, "Dot", json!({}));
    let info = server.ok("GET", "/collections/ml", None);
    let index = &info["config"]["index"];
    assert_eq!(
        index["kind"], "mips_auto",
        "Dot defaults to the choice between the norm scan, ip-NSW+ and ip-NSW: {index}"
    );
    assert_eq!(index["m"], 32, "parameters are reported filled in: {index}");
    assert_eq!(index["cos_ef_search"], 1);
    server.upsert_vectors("ml", 64, &data.base.data, 0, 1000);
    server.create("lsh", 64, "Dot", json!({"index": {"kind": "range_lsh"}}));
    let index = server.ok("GET", "/collections/lsh", None)["config"]["index"].clone();
    assert_eq!(index["ranges"], 32, "{index}");
    assert_eq!(index["probe_items"], 1024, "{index}");
    server.upsert_vectors("lsh", 64, &data.base.data, 0, 1000);
    server.create(
        "neq",
        64,
        "Dot",
        json!({"quantization_config": {"neq": {"codec": "pq"}}}),
    );
    let quantization =
        server.ok("GET", "/collections/neq", None)["config"]["cairn_quantization_config"].clone();
    assert_eq!(quantization["neq"]["m"], 8, "{quantization}");
    assert_eq!(quantization["neq"]["codec"], "pq", "{quantization}");
    server.upsert_vectors("neq", 64, &data.base.data, 0, 1000);

    // movielens-mips' norms spread (95th percentile ≈ 3.4 × the median): the norm scan
    // serves it, and a query that names no `ef` reads a quarter of the items.
    let choice = explained_choice(&server, "ml");
    assert!(choice.starts_with("norm_scan: norm spread"), "{choice}");
    let explained = server.ok(
        "POST",
        "/collections/ml/points/query",
        Some(&json!({"query": data.queries.row(0), "limit": 10, "explain": true})),
    );
    assert_eq!(
        explained["explain"]["ef"],
        data.base.len().div_ceil(4),
        "{explained}"
    );
    let (before, answers) = recall(&server, "ml", &data);
    eprintln!("movielens-mips mips_auto ({choice}) REST recall@10 at default ef: {before:.4}");
    assert!(before >= 0.95, "recall@10 {before}");
    let (lsh_before, lsh_answers) = recall(&server, "lsh", &data);
    eprintln!("movielens-mips range_lsh REST recall@10 probing 1024 items: {lsh_before:.4}");
    assert!(lsh_before >= 0.9, "range_lsh recall@10 {lsh_before}");
    let (neq_before, neq_answers) = recall(&server, "neq", &data);
    eprintln!("movielens-mips NEQ-PQ8 REST recall@10 with rescoring: {neq_before:.4}");
    assert!(neq_before >= 0.95, "neq recall@10 {neq_before}");
    // Without rescoring, results are ranked and scored by the codes alone: the scores are
    // estimates, not the exact inner products a rescored answer reports.
    let q = data.queries.row(1);
    let unrescored = server.ok(
        "POST",
        "/collections/neq/points/query",
        Some(&json!({"query": q, "limit": 10, "with_vector": true,
                     "params": {"quantization": {"rescore": false}}})),
    );
    let estimate_errors: Vec<f64> = unrescored["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let dot: f64 = p["vector"]
                .as_array()
                .unwrap()
                .iter()
                .zip(q)
                .map(|(a, b)| a.as_f64().unwrap() * f64::from(*b))
                .sum();
            (p["score"].as_f64().unwrap() - dot).abs()
        })
        .collect();
    assert_eq!(estimate_errors.len(), 10);
    assert!(
        estimate_errors.iter().any(|&e| e > 1e-3),
        "rescore:false must report the quantized estimates: {estimate_errors:?}"
    );
    let ignored = server.ok(
        "POST",
        "/collections/neq/points/query",
        Some(&json!({"query": q, "limit": 10, "params": {"quantization": {"ignore": true}}})),
    );
    let truth: Vec<u64> = data.ground_truth[1][..10]
        .iter()
        .map(|&i| u64::from(i))
        .collect();
    assert_eq!(
        ids(&ignored),
        truth,
        "ignore searches the full vectors exactly"
    );
    // Scores are inner products, best first.
    let q = data.queries.row(0);
    let top = server.ok(
        "POST",
        "/collections/ml/points/query",
        Some(&json!({"query": q, "limit": 10, "with_vector": true})),
    );
    let points = top["points"].as_array().unwrap();
    let scores: Vec<f64> = points
        .iter()
        .map(|p| p["score"].as_f64().unwrap())
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    let v: Vec<f64> = points[0]["vector"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    let dot: f64 = v.iter().zip(q).map(|(a, b)| a * f64::from(*b)).sum();
    assert!((dot - scores[0]).abs() <= 1e-4 * dot.abs().max(1.0));

    server.terminate();
    server.restart();
    let info = server.ok("GET", "/collections/ml", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    assert_eq!(info["config"]["index"]["kind"], "mips_auto");
    assert_eq!(
        explained_choice(&server, "ml"),
        choice,
        "the choice is kept"
    );
    let (after, answers_after) = recall(&server, "ml", &data);
    assert!(after >= 0.95, "recall@10 after restart {after}");
    assert_eq!(answers_after, answers, "answers changed across restart");
    let info = server.ok("GET", "/collections/lsh", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    let (lsh_after, lsh_answers_after) = recall(&server, "lsh", &data);
    assert!(
        lsh_after >= 0.9,
        "range_lsh recall@10 after restart {lsh_after}"
    );
    assert_eq!(
        lsh_answers_after, lsh_answers,
        "range_lsh answers changed across restart"
    );
    let info = server.ok("GET", "/collections/neq", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    let (neq_after, neq_answers_after) = recall(&server, "neq", &data);
    assert!(neq_after >= 0.95, "neq recall@10 after restart {neq_after}");
    assert_eq!(
        neq_answers_after, neq_answers,
        "neq answers changed across restart"
    );
}

/// The norm-ordered scan over REST: its default share finds movielens-mips' answers, a
/// query's `hnsw_ef` sets how many items it scans, a deleted point is never returned, the
/// index survives a restart with the same answers, and what it cannot do is refused.
#[test]
fn movielens_norm_scan_over_rest() {
    let data = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("ns", 64, "Dot", json!({"index": {"kind": "norm_scan"}}));
    let index = server.ok("GET", "/collections/ns", None)["config"]["index"].clone();
    assert_eq!(
        index,
        json!({"kind": "norm_scan", "share": 0.25, "oversampling": 2.0})
    );
    server.upsert_vectors("ns", 64, &data.base.data, 0, 1000);
    let (recall_default, _) = recall(&server, "ns", &data);
    eprintln!("movielens-mips norm_scan REST recall@10 at the default share: {recall_default:.4}");
    assert!(recall_default >= 0.99, "recall@10 {recall_default}");

    let q = data.queries.row(0);
    let shallow = server.ok(
        "POST",
        "/collections/ns/points/query",
        Some(&json!({"query": q, "limit": 10, "explain": true, "params": {"hnsw_ef": 12}})),
    );
    assert_eq!(shallow["explain"]["index"], "norm_scan", "{shallow}");
    assert_eq!(shallow["explain"]["ef"], 12, "{shallow}");
    assert_eq!(
        shallow["explain"]["distance_computations"], 12,
        "12 items scanned, by the floats kept at the front: {shallow}"
    );

    // `hnsw_ef` counts items here, so the graphs' maximum (10,000) does not bound it.
    let deep = server.ok(
        "POST",
        "/collections/ns/points/query",
        Some(&json!({"query": q, "limit": 10, "params": {"hnsw_ef": 50_000}})),
    );
    assert_eq!(ids(&deep).len(), 10, "{deep}");

    // The best answer of query 0, deleted, is not returned; the next ten are, also from a
    // scan of only ten items (it goes deeper past the deleted one).
    let best = u64::from(data.ground_truth[0][0]);
    server.ok(
        "POST",
        "/collections/ns/points/delete?wait=true",
        Some(&json!({"points": [best]})),
    );
    let after_delete = ids(&server.ok(
        "POST",
        "/collections/ns/points/query",
        Some(&json!({"query": q, "limit": 10})),
    ));
    let rest: Vec<u64> = data.ground_truth[0][1..11]
        .iter()
        .map(|&i| u64::from(i))
        .collect();
    assert_eq!(after_delete, rest);
    let shallow_after = ids(&server.ok(
        "POST",
        "/collections/ns/points/query",
        Some(&json!({"query": q, "limit": 10, "params": {"hnsw_ef": 10}})),
    ));
    assert_eq!(shallow_after.len(), 10, "{shallow_after:?}");
    assert!(!shallow_after.contains(&best));

    let (_, answers) = recall(&server, "ns", &data);
    server.terminate();
    server.restart();
    let info = server.ok("GET", "/collections/ns", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    let (_, answers_after) = recall(&server, "ns", &data);
    assert_eq!(answers_after, answers, "answers changed across restart");

    for (index, needle) in [
        (json!({"kind": "norm_scan", "share": 0.0}), "share"),
        (
            json!({"kind": "norm_scan", "oversampling": 0.5}),
            "oversampling",
        ),
        (json!({"kind": "norm_scan", "depth": 3}), "depth"),
    ] {
        let (status, body) = server.call(
            "PUT",
            "/collections/bad",
            Some(&json!({"vectors": {"size": 4, "distance": "Dot"}, "index": index})),
        );
        assert_eq!(status, 400, "{body}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(error.contains(needle), "{error}");
    }
    let (status, body) = server.call(
        "PUT",
        "/collections/bad",
        Some(&json!({"vectors": {"size": 4, "distance": "Dot"},
                     "index": {"kind": "norm_scan"},
                     "quantization_config": {"scalar": {"type": "int8"}}})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap()
            .contains("norm_scan index keeps no codes"),
        "{body}"
    );
}

#[test]
fn quantization_configs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let refused = [
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"product": {"compression": "x16"}}}),
            "product",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Euclid"},
                   "quantization_config": {"neq": {}}}),
            "Dot",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"neq": {"codec": "lvq"}}}),
            "lvq",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"neq": {"m": 1}}}),
            "codebooks",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"pq": {"oversampling": 0.5}}}),
            "oversampling",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"pq": {"m": 4}},
                   "index": {"kind": "ip_nsw_plus"}}),
            "index",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"pq": {"training": "inner_product"}}}),
            "training",
        ),
        (
            json!({"vectors": {"size": 8, "distance": "Dot"},
                   "quantization_config": {"neq": {"training": "norms"}}}),
            "norms",
        ),
    ];
    for (body, needle) in refused {
        let (status, answer) = server.call("PUT", "/collections/q", Some(&body));
        assert_eq!(status, 400, "{body} → {answer}");
        let error = answer["status"]["error"].as_str().unwrap();
        assert!(error.contains(needle), "{body}: {error}");
    }
    // Below the training threshold a quantized collection answers exactly.
    server.create(
        "q",
        4,
        "Dot",
        json!({"quantization_config": {"pq": {"m": 2, "oversampling": 4}}}),
    );
    let info = server.ok("GET", "/collections/q", None);
    assert_eq!(
        info["config"]["cairn_quantization_config"],
        json!({"pq": {"m": 2, "oversampling": 4.0}})
    );
    assert!(info["config"]["quantization_config"].is_null(), "{info}");
    server.create(
        "ip",
        8,
        "Dot",
        json!({"quantization_config": {"neq": {"training": "inner_product"}}}),
    );
    let info = server.ok("GET", "/collections/ip", None);
    assert_eq!(
        info["config"]["cairn_quantization_config"]["neq"]["training"], "inner_product",
        "{info}"
    );
    server.upsert_vectors("q", 4, &[1.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0], 0, 10);
    let hits = server.ok(
        "POST",
        "/collections/q/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0, 0.0], "limit": 2})),
    );
    assert_eq!(ids(&hits), [1, 0], "the larger inner product first");
}

#[test]
fn mips_index_kinds_need_dot_and_known_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for kind in [
        "ip_nsw",
        "ip_nsw_plus",
        "mips_auto",
        "simple_lsh",
        "range_lsh",
        "norm_scan",
    ] {
        let (status, body) = server.call(
            "PUT",
            "/collections/e",
            Some(&json!({"vectors": {"size": 4, "distance": "Euclid"}, "index": {"kind": kind}})),
        );
        assert_eq!(status, 400, "{body}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(error.contains(kind) && error.contains("Dot"), "{error}");
    }
    let (status, body) = server.call(
        "PUT",
        "/collections/e",
        Some(&json!({"vectors": {"size": 4, "distance": "Dot"},
                     "index": {"kind": "ip_nsw_plus", "cos_n": 3}})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["status"]["error"].as_str().unwrap().contains("cos_n"),
        "{body}"
    );
    let (status, body) = server.call(
        "PUT",
        "/collections/e",
        Some(&json!({"vectors": {"size": 4, "distance": "Dot"},
                     "index": {"kind": "ip_nsw_plus", "m": 1}})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap()
            .contains("m must be"),
        "{body}"
    );
    let (status, body) = server.call(
        "PUT",
        "/collections/e",
        Some(&json!({"vectors": {"size": 4, "distance": "Dot"},
                     "index": {"kind": "range_lsh", "ranges": 12}})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap()
            .contains("power of two"),
        "{body}"
    );

    // An explicit ip_nsw collection and an hnsw one on Dot both work and agree on exact search.
    for (name, kind) in [("a", "ip_nsw"), ("b", "hnsw")] {
        server.create(name, 4, "Dot", json!({"index": {"kind": kind}}));
        let info = server.ok("GET", &format!("/collections/{name}"), None);
        assert_eq!(info["config"]["index"]["kind"], kind);
        server.upsert_vectors(name, 4, &[1.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0], 0, 10);
        let hits = server.ok(
            "POST",
            &format!("/collections/{name}/points/query"),
            Some(&json!({"query": [1.0, 0.0, 0.0, 0.0], "limit": 2})),
        );
        assert_eq!(ids(&hits), [1, 0], "the larger inner product first");
    }
}
