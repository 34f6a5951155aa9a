//! #24's acceptance for payload indexes: filtered search on 100,000 points keeps recall@10 ≥
//! 0.95 against exact filtered ground truth at selectivities 50%, 5%, 0.5% and 0.05%.
//!
//! Vectors are clustered Gaussians (100 clusters, 32 dimensions, seed 42); each point gets an
//! integer `bucket` drawn uniformly from 0..10,000 (seed 7), independent of its vector, so
//! `bucket < 5000` passes 50% of the points, `< 5` 0.05%. The filter cuts across the graph's
//! neighbourhoods: the hard case for a filtered graph search. The test prints what the planner
//! did at each selectivity (`explain`).

use cairn_index::dataset::{clustered_gaussian, clustered_with_structure, ClusterSpec};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

const N: usize = 100_000;
const DIM: usize = 32;
const BUCKETS: u64 = 10_000;
const QUERIES: usize = 30;
const K: usize = 10;

fn sq_distance(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

#[test]
fn filtered_recall_at_10_holds_at_every_selectivity_on_100k() {
    let spec = ClusterSpec {
        n: N,
        dim: DIM,
        clusters: 100,
        spread: 0.7,
        intrinsic_dim: None,
        seed: 42,
    };
    let base = clustered_gaussian(spec);
    // Queries from the same clusters as the points (the same centres, other draws).
    let queries = clustered_with_structure(
        ClusterSpec {
            n: QUERIES,
            seed: 43,
            ..spec
        },
        spec.seed,
    );
    let mut rng = StdRng::seed_from_u64(7);
    let buckets: Vec<u64> = (0..N).map(|_| rng.gen_range(0..BUCKETS)).collect();

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("f", DIM, "Euclid", json!({}));
    server.ok(
        "PUT",
        "/collections/f/index?wait=true",
        Some(&json!({"field_name": "bucket", "field_schema": "integer"})),
    );
    for (b, chunk) in base.data.chunks(DIM * 2000).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(DIM)
            .enumerate()
            .map(|(i, v)| {
                let id = b * 2000 + i;
                json!({"id": id, "vector": v, "payload": {"bucket": buckets[id]}})
            })
            .collect();
        server.ok(
            "PUT",
            "/collections/f/points?wait=true",
            Some(&json!({ "points": points })),
        );
    }

    for (selectivity, below) in [(0.5, 5000u64), (0.05, 500), (0.005, 50), (0.0005, 5)] {
        let filter = json!({"must": {"key": "bucket", "range": {"lt": below}}});
        let (mut hits, mut total) = (0usize, 0usize);
        let mut explain = Value::Null;
        for q in queries.rows() {
            let mut exact: Vec<(f32, usize)> = base
                .rows()
                .enumerate()
                .filter(|(i, _)| buckets[*i] < below)
                .map(|(i, v)| (sq_distance(q, v), i))
                .collect();
            exact.sort_by(|a, b| a.0.total_cmp(&b.0));
            let truth: Vec<u64> = exact.iter().take(K).map(|(_, i)| *i as u64).collect();
            let answer = server.ok(
                "POST",
                "/collections/f/points/query",
                Some(&json!({"query": q, "limit": K, "filter": filter, "explain": true})),
            );
            let found = ids(&answer);
            hits += found.iter().filter(|id| truth.contains(id)).count();
            total += truth.len();
            explain = answer["explain"].clone();
        }
        let recall = hits as f64 / total as f64;
        eprintln!(
            "selectivity {:.2}%: recall@{K} {recall:.3}; planner: exact {}, candidates {}, ef {}",
            selectivity * 100.0,
            explain["exact"],
            explain["payload_index_candidates"],
            explain["ef"],
        );
        assert!(
            recall >= 0.95,
            "recall@{K} {recall:.3} at selectivity {selectivity} ({explain})"
        );
    }
}
