//! A 100k×128 collection restarts from its index snapshot: no rebuild, same answers.

use std::time::Instant;

use cairn_index::dataset::{clustered_gaussian, clustered_with_structure, ClusterSpec};
use serde_json::json;

use crate::harness::{ids, Server};

#[test]
fn restart_of_100k_collection_loads_the_index_file() {
    let spec = ClusterSpec {
        n: 100_000,
        dim: 128,
        clusters: 100,
        spread: 0.7,
        intrinsic_dim: None,
        seed: 42,
    };
    let base = clustered_gaussian(spec);
    let queries = clustered_with_structure(
        ClusterSpec {
            n: 20,
            seed: 43,
            ..spec
        },
        spec.seed,
    );
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("big", 128, "Euclid", json!({}));
    let t = Instant::now();
    server.upsert_vectors("big", 128, &base.data, 0, 1000);
    eprintln!(
        "ingested 100k×128 over REST in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let before: Vec<Vec<u64>> = queries
        .rows()
        .map(|q| {
            ids(&server.ok(
                "POST",
                "/collections/big/points/query",
                Some(&json!({"query": q, "limit": 10})),
            ))
        })
        .collect();

    server.terminate();
    let t = Instant::now();
    server.restart();
    let first = server.ok(
        "POST",
        "/collections/big/points/query",
        Some(&json!({"query": queries.row(0), "limit": 10})),
    );
    let first_query_after = t.elapsed();
    let info = server.ok("GET", "/collections/big", None);
    eprintln!(
        "restart to first answer: {:.2}s; load report {}",
        first_query_after.as_secs_f64(),
        info["load"]
    );
    assert_eq!(
        info["load"]["index_source"], "snapshot",
        "index was rebuilt, not loaded: {}",
        info["load"]
    );
    assert_eq!(info["load"]["replayed_ops"], 0);
    assert_eq!(info["points_count"], 100_000);
    assert_eq!(ids(&first), before[0]);
    for (q, want) in queries.rows().zip(&before) {
        let got = ids(&server.ok(
            "POST",
            "/collections/big/points/query",
            Some(&json!({"query": q, "limit": 10})),
        ));
        assert_eq!(&got, want, "answers changed across restart");
    }
}
