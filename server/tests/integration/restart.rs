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

/// The one `index.cidx` under a server's data folder (one collection, one partition).
fn snapshot_file(data_dir: &std::path::Path) -> std::path::PathBuf {
    fn walk(dir: &std::path::Path, found: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.file_name().is_some_and(|n| n == "index.cidx") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(data_dir, &mut found);
    assert_eq!(found.len(), 1, "index files: {found:?}");
    found.remove(0)
}

/// A snapshot older than the store and its trimmed op log (an index file restored from a
/// backup) is repaired point by point at the start: changed points re-read, deleted ones
/// dropped, and the answers are the store's.
#[test]
fn a_snapshot_older_than_the_store_is_repaired_from_it() {
    let dir = tempfile::tempdir().unwrap();
    // No op-log entries kept behind a snapshot: only the store knows what came before.
    let mut server = Server::start(dir.path(), &[("CAIRN__STORAGE__OPLOG_RETENTION_OPS", "0")]);
    server.create("c", 4, "Euclid", json!({}));
    let points = |ids: std::ops::Range<u64>, at: f32, generation: u64| {
        let points: Vec<_> = ids
            .map(|id| json!({"id": id, "vector": [at + id as f32, 0.0, 0.0, 0.0], "payload": {"gen": generation}}))
            .collect();
        json!({ "points": points })
    };
    let upsert = "/collections/c/points?wait=true";
    server.ok("PUT", upsert, Some(&points(0..100, 0.0, 1)));
    server.terminate();
    let snapshot = snapshot_file(dir.path());
    let old = std::fs::read(&snapshot).unwrap();

    server.restart();
    // Points 0..10 move far away, 10..20 are deleted, 100..110 are new: three ops, of which
    // the op log keeps only the last past the next snapshot.
    server.ok("PUT", upsert, Some(&points(0..10, 1000.0, 2)));
    let deleted: Vec<u64> = (10..20).collect();
    server.ok(
        "POST",
        "/collections/c/points/delete?wait=true",
        Some(&json!({ "points": deleted })),
    );
    server.ok("PUT", upsert, Some(&points(100..110, 0.0, 3)));
    server.terminate();
    std::fs::write(&snapshot, &old).unwrap();

    server.restart();
    let info = server.ok("GET", "/collections/c", None);
    let load = &info["load"];
    assert_eq!(load["index_source"], "snapshot", "{load}");
    assert_eq!(load["replayed_ops"], 1, "{load}");
    assert_eq!(load["repaired_points"], 20, "{load}");
    assert_eq!(info["points_count"], 100, "{info}");
    let near = |x: f32| {
        server.ok(
            "POST",
            "/collections/c/points/query",
            Some(&json!({"query": [x, 0.0, 0.0, 0.0], "limit": 1, "with_payload": true})),
        )["points"][0]
            .clone()
    };
    assert_eq!(
        near(1005.0)["id"],
        5,
        "a moved point is found where it went"
    );
    assert_eq!(near(1005.0)["payload"]["gen"], 2);
    assert_eq!(
        near(5.0)["id"],
        20,
        "nor where it was: 20 is the nearest left"
    );
    assert_eq!(near(14.0)["id"], 20, "a deleted point is gone");
    assert_eq!(near(105.0)["id"], 105);
    assert_eq!(near(105.0)["payload"]["gen"], 3);
    assert_eq!(near(50.0)["payload"]["gen"], 1);
}
