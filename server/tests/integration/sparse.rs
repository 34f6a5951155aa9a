//! Sparse vectors beside the dense one, and hybrid queries (`prefetch` with a fusion or a
//! re-scoring), over REST, each ranking checked against one computed here by brute force.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

const DIM: usize = 8;
const VOCABULARY: u32 = 300;
const POINTS: u64 = 800;

/// One point: its dense vector, its sparse vector (sorted dimensions) and a payload bucket.
struct Point {
    id: u64,
    dense: Vec<f32>,
    sparse: BTreeMap<u32, f32>,
}

/// Dense Gaussian vectors and bag-of-words-like sparse ones: 4 to 20 dimensions each, drawn
/// with a skew (low dimensions common, as frequent words are), values in (0, 2).
fn points(seed: u64) -> Vec<Point> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..POINTS)
        .map(|id| Point {
            id,
            dense: (0..DIM).map(|_| rng.gen_range(-1.0f32..1.0)).collect(),
            sparse: sparse(&mut rng, 4..21),
        })
        .collect()
}

fn sparse(rng: &mut StdRng, terms: std::ops::Range<usize>) -> BTreeMap<u32, f32> {
    let n = rng.gen_range(terms);
    (0..n)
        .map(|_| {
            let u: f64 = rng.gen_range(0.0..1.0);
            (
                (u * u * f64::from(VOCABULARY)) as u32,
                rng.gen_range(0.01f32..2.0),
            )
        })
        .collect()
}

fn sparse_json(v: &BTreeMap<u32, f32>) -> Value {
    json!({"indices": v.keys().collect::<Vec<_>>(), "values": v.values().collect::<Vec<_>>()})
}

/// A returned sparse vector, read back as `f32`s (JSON prints them as the shortest decimal).
fn sparse_of(value: &Value) -> BTreeMap<u32, f32> {
    let indices = value["indices"].as_array().unwrap();
    let values = value["values"].as_array().unwrap();
    indices
        .iter()
        .zip(values)
        .map(|(i, v)| (i.as_u64().unwrap() as u32, v.as_f64().unwrap() as f32))
        .collect()
}

fn server(extra: Value) -> (tempfile::TempDir, Server, Vec<Point>) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut body = json!({
        "vectors": {"dense": {"size": DIM, "distance": "Cosine"}},
        "sparse_vectors": {"words": {}, "idf-words": {"modifier": "idf"}},
    });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    server.ok("PUT", "/collections/h", Some(&body));
    let points = points(7);
    for chunk in points.chunks(200) {
        let body: Vec<Value> = chunk
            .iter()
            .map(|p| {
                json!({"id": p.id, "payload": {"even": p.id % 2 == 0},
                       "vector": {"dense": p.dense, "words": sparse_json(&p.sparse),
                                  "idf-words": sparse_json(&p.sparse)}})
            })
            .collect();
        server.ok(
            "PUT",
            "/collections/h/points?wait=true",
            Some(&json!({ "points": body })),
        );
    }
    (dir, server, points)
}

/// Exact sparse ranking: dot products over shared dimensions (weighted by Qdrant's idf when
/// asked), points sharing none left out, ties by id.
fn brute_sparse(
    points: &[Point],
    query: &BTreeMap<u32, f32>,
    idf: bool,
    keep: impl Fn(&Point) -> bool,
    k: usize,
) -> Vec<(u64, f32)> {
    let n = points.len() as f32;
    let mut df: HashMap<u32, f32> = HashMap::new();
    for p in points {
        for d in p.sparse.keys() {
            *df.entry(*d).or_default() += 1.0;
        }
    }
    let mut scored: Vec<(u64, f32)> = points
        .iter()
        .filter(|p| keep(p))
        .filter(|p| query.keys().any(|d| p.sparse.contains_key(d)))
        .map(|p| {
            let score = query
                .iter()
                .filter_map(|(d, q)| {
                    let weight = if idf {
                        let n_d = df[d];
                        q * ((n - n_d + 0.5) / (n_d + 0.5) + 1.0).ln()
                    } else {
                        *q
                    };
                    p.sparse.get(d).map(|v| weight * v)
                })
                .sum();
            (p.id, score)
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(k);
    scored
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

fn query(server: &Server, body: Value) -> Value {
    server.ok("POST", "/collections/h/points/query", Some(&body))
}

fn scores(answer: &Value) -> Vec<f32> {
    answer["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["score"].as_f64().unwrap() as f32)
        .collect()
}

/// The ranking must match exactly; scores to float rounding (the server sums in another
/// order).
fn assert_ranking(answer: &Value, expected: &[(u64, f32)], what: &str) {
    let want: Vec<u64> = expected.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids(answer), want, "{what}");
    for (got, (_, want)) in scores(answer).iter().zip(expected) {
        assert!(
            (got - want).abs() <= 1e-4 * want.abs().max(1.0),
            "{what}: {got} vs {want}"
        );
    }
}

#[test]
fn sparse_queries_rank_exactly_with_and_without_idf_and_filters() {
    let (_dir, server, points) = server(json!({}));
    let mut rng = StdRng::seed_from_u64(99);
    for i in 0..15 {
        let q = sparse(&mut rng, 2..7);
        let body = json!({"query": sparse_json(&q), "using": "words", "limit": 10});
        let expected = brute_sparse(&points, &q, false, |_| true, 10);
        assert_ranking(&query(&server, body), &expected, &format!("query {i}"));
        // The same through `nearest`, with idf, and with a filter.
        let body =
            json!({"query": {"nearest": sparse_json(&q)}, "using": "idf-words", "limit": 10});
        let expected = brute_sparse(&points, &q, true, |_| true, 10);
        assert_ranking(&query(&server, body), &expected, &format!("idf query {i}"));
        let body = json!({"query": sparse_json(&q), "using": "words", "limit": 5,
                          "filter": {"must": {"key": "even", "match": {"value": true}}}});
        let expected = brute_sparse(&points, &q, false, |p| p.id % 2 == 0, 5);
        assert_ranking(
            &query(&server, body),
            &expected,
            &format!("filtered query {i}"),
        );
    }
    // A query sharing no dimension with any point finds nothing, as in Qdrant.
    let body = json!({"query": {"indices": [VOCABULARY + 5], "values": [1.0]}, "using": "words"});
    assert!(ids(&query(&server, body)).is_empty());
    let explain = query(
        &server,
        json!({"query": {"indices": [1, 2], "values": [1.0, 1.0]}, "using": "words",
               "explain": true}),
    );
    assert_eq!(explain["explain"]["index"], "sparse");
    assert_eq!(explain["explain"]["exact"], true);
}

/// Answers to five one-word idf queries, compared before and after restarts.
fn probes(server: &Server, points: &[Point]) -> Vec<Value> {
    (0..5)
        .map(|i| {
            let (&d, _) = points[i * 7].sparse.iter().next().unwrap();
            let body = json!({"query": {"indices": [d], "values": [1.0]}, "using": "idf-words",
                              "limit": 20});
            query(server, body)["points"].clone()
        })
        .collect()
}

#[test]
fn sparse_vectors_come_back_by_name_update_and_survive_restarts() {
    let (_dir, mut server, points) = server(json!({}));
    let p = &points[3];
    let record = server.ok("GET", "/collections/h/points/3", None);
    assert_eq!(sparse_of(&record["vector"]["words"]), p.sparse);
    assert_eq!(record["vector"]["dense"].as_array().unwrap().len(), DIM);
    // `with_vector` by name keeps only those.
    let got = server.ok(
        "POST",
        "/collections/h/points",
        Some(&json!({"ids": [3], "with_vector": ["words"]})),
    );
    let vector = got[0]["vector"].as_object().unwrap();
    assert_eq!(vector.keys().collect::<Vec<_>>(), ["words"]);
    let scrolled = server.ok(
        "POST",
        "/collections/h/points/scroll",
        Some(&json!({"limit": 1, "offset": 3, "with_vector": ["dense"]})),
    );
    let vector = scrolled["points"][0]["vector"].as_object().unwrap();
    assert_eq!(vector.keys().collect::<Vec<_>>(), ["dense"]);

    // A sparse-only vector update keeps the dense vector and the other sparse one.
    server.ok(
        "PUT",
        "/collections/h/points/vectors?wait=true",
        Some(&json!({"points": [{"id": 3, "vector": {"words": {"indices": [VOCABULARY + 1], "values": [3.0]}}}]})),
    );
    let record = server.ok("GET", "/collections/h/points/3", None);
    assert_eq!(
        record["vector"]["words"]["indices"],
        json!([VOCABULARY + 1])
    );
    assert_eq!(sparse_of(&record["vector"]["idf-words"]), p.sparse);
    let only = json!({"query": {"indices": [VOCABULARY + 1], "values": [1.0]}, "using": "words"});
    assert_eq!(ids(&query(&server, only.clone())), [3]);
    // The old words no longer find it under "words".
    let (&dim, _) = p.sparse.iter().next().unwrap();
    let old =
        json!({"query": {"indices": [dim], "values": [1.0]}, "using": "words", "limit": 1000});
    assert!(!ids(&query(&server, old.clone())).contains(&3));
    // A deleted point leaves the sparse index too.
    server.ok(
        "POST",
        "/collections/h/points/delete?wait=true",
        Some(&json!({"points": [5]})),
    );
    let before = probes(&server, &points);
    assert!(before
        .iter()
        .all(|answer| !ids(&json!({"points": answer})).contains(&5)));
    // Restarts: after a graceful stop, and after a kill -9 that follows one more write (which
    // start-up then replays from the op log over the index snapshot).
    for (how, graceful) in [("graceful stop", true), ("kill -9", false)] {
        if !graceful {
            server.ok(
                "POST",
                "/collections/h/points/delete?wait=true",
                Some(&json!({"points": [6]})),
            );
        }
        if graceful {
            server.terminate();
        } else {
            server.kill9();
        }
        server.restart();
        assert_eq!(
            ids(&query(&server, only.clone())),
            [3],
            "after restart ({how})"
        );
        assert!(!ids(&query(&server, old.clone())).contains(&3));
        let after = probes(&server, &points);
        if !graceful {
            // One-word queries: deleting 6 scales every score by the new idf but keeps the
            // order, and the list may reach one point further.
            for (a, b) in after.iter().zip(&before) {
                let without_6 = |answer: &Value| -> Vec<u64> {
                    let mut ids = ids(&json!({ "points": answer }));
                    ids.retain(|&id| id != 6);
                    ids
                };
                let (got, want) = (without_6(a), without_6(b));
                let n = got.len().min(want.len());
                assert_eq!(got[..n], want[..n], "after restart ({how})");
            }
            continue;
        }
        assert_eq!(before, after, "after restart ({how})");
    }
}

/// RRF and DBSF over a dense and a sparse prefetch give the fusion of the two single
/// queries' answers, computed here from those answers.
#[test]
fn fusions_merge_the_prefetch_answers() {
    let (_dir, server, points) = server(json!({}));
    let mut rng = StdRng::seed_from_u64(5);
    for i in 0..8 {
        let dense: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let words = sparse(&mut rng, 2..6);
        let dense_leg = json!({"query": dense, "using": "dense", "limit": 15});
        let sparse_leg = json!({"query": sparse_json(&words), "using": "words", "limit": 15});
        let legs = [
            query(&server, dense_leg.clone()),
            query(&server, sparse_leg.clone()),
        ];
        // RRF, k = 2 (Qdrant's): 1 / (rank + 2) from each list.
        let mut rrf: HashMap<u64, f32> = HashMap::new();
        for leg in &legs {
            for (rank, id) in ids(leg).into_iter().enumerate() {
                *rrf.entry(id).or_default() += 1.0 / (rank as f32 + 2.0);
            }
        }
        let mut expected: Vec<(u64, f32)> = rrf.into_iter().collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        expected.truncate(10);
        let hybrid = query(
            &server,
            json!({"prefetch": [dense_leg, sparse_leg], "query": {"fusion": "rrf"}, "limit": 10,
                   "with_payload": true}),
        );
        assert_ranking(&hybrid, &expected, &format!("rrf {i}"));
        assert!(hybrid["points"][0]["payload"]["even"].is_boolean());
        // DBSF: each list's scores to [0, 1] by mean ± 3 sd, summed.
        let mut dbsf: HashMap<u64, f32> = HashMap::new();
        for leg in &legs {
            let s: Vec<f64> = scores(leg).iter().map(|&x| f64::from(x)).collect();
            let mean = s.iter().sum::<f64>() / s.len() as f64;
            let sd = (s.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / s.len() as f64).sqrt();
            for (id, x) in ids(leg).into_iter().zip(s) {
                let norm = ((x - (mean - 3.0 * sd)) / (6.0 * sd)).clamp(0.0, 1.0);
                *dbsf.entry(id).or_default() += norm as f32;
            }
        }
        let mut expected: Vec<(u64, f32)> = dbsf.into_iter().collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        expected.truncate(10);
        let hybrid = query(
            &server,
            json!({"prefetch": [{"query": dense, "using": "dense", "limit": 15},
                                {"query": sparse_json(&words), "using": "words", "limit": 15}],
                   "query": {"fusion": "dbsf"}, "limit": 10}),
        );
        // DBSF sums floats: compare the ranking where scores are apart.
        let got = ids(&hybrid);
        for (g, w) in got.iter().zip(&expected) {
            if *g != w.0 {
                let theirs = expected.iter().find(|e| e.0 == *g).map_or(0.0, |e| e.1);
                assert!(
                    (theirs - w.1).abs() < 1e-5,
                    "dbsf {i}: {got:?} vs {expected:?}"
                );
            }
        }
        let _ = &points;
    }
}

/// A vector query over prefetches scores only their candidates: the dense ranking of the
/// sparse query's top 30, here by brute force; the top-level filter applies below too.
#[test]
fn a_query_over_prefetches_rescores_their_candidates() {
    let (_dir, server, points) = server(json!({}));
    let mut rng = StdRng::seed_from_u64(11);
    for i in 0..8 {
        let dense: Vec<f32> = (0..DIM).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let words = sparse(&mut rng, 2..6);
        let candidates: BTreeSet<u64> = brute_sparse(&points, &words, false, |p| p.id % 2 == 0, 30)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut expected: Vec<(u64, f32)> = points
            .iter()
            .filter(|p| candidates.contains(&p.id))
            .map(|p| (p.id, cosine(&p.dense, &dense)))
            .collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        expected.truncate(10);
        let answer = query(
            &server,
            json!({"prefetch": {"query": sparse_json(&words), "using": "words", "limit": 30},
                   "query": dense, "using": "dense", "limit": 10,
                   "filter": {"must": {"key": "even", "match": {"value": true}}}}),
        );
        assert_ranking(&answer, &expected, &format!("rescore {i}"));
    }
    // Nested: RRF of two prefetches inside, re-scored by a dense query outside.
    let words = sparse(&mut rng, 3..5);
    let nested = json!({
        "prefetch": {"prefetch": [{"query": sparse_json(&words), "using": "words", "limit": 20},
                                  {"query": sparse_json(&words), "using": "idf-words", "limit": 20}],
                     "query": {"rrf": {"k": 60}}, "limit": 25},
        "query": points[0].dense, "using": "dense", "limit": 5});
    let answer = query(&server, nested);
    // Expected: the RRF (k = 60) of the two legs' own answers, its top 25 re-ranked by
    // cosine to the outer query.
    let legs = [
        json!({"query": sparse_json(&words), "using": "words", "limit": 20}),
        json!({"query": sparse_json(&words), "using": "idf-words", "limit": 20}),
    ];
    let mut rrf: HashMap<u64, f32> = HashMap::new();
    for leg in legs {
        for (rank, id) in ids(&query(&server, leg)).into_iter().enumerate() {
            *rrf.entry(id).or_default() += 1.0 / (rank as f32 + 60.0);
        }
    }
    let mut fused: Vec<(u64, f32)> = rrf.into_iter().collect();
    fused.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut expected: Vec<(u64, f32)> = fused
        .iter()
        .take(25)
        .map(|&(id, _)| (id, cosine(&points[id as usize].dense, &points[0].dense)))
        .collect();
    expected.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    expected.truncate(5);
    assert_ranking(&answer, &expected, "nested rrf, re-scored");
}

/// A partitioned collection asks every partition a sparse query: the same exact answer.
/// (Two partitions: 800 points are enough to train their router.)
#[test]
fn partitioned_collections_broadcast_sparse_queries() {
    let (_dir, server, points) = server(json!({"shard_number": 2}));
    server.wait_routed("h");
    let mut rng = StdRng::seed_from_u64(3);
    for i in 0..10 {
        let q = sparse(&mut rng, 2..7);
        let expected = brute_sparse(&points, &q, false, |_| true, 10);
        let answer = query(
            &server,
            json!({"query": sparse_json(&q), "using": "words", "limit": 10, "explain": true}),
        );
        assert_ranking(&answer, &expected, &format!("partitioned query {i}"));
        assert_eq!(answer["explain"]["partitions"]["routing"], "broadcast");
    }
}

#[test]
fn bad_sparse_and_hybrid_requests_are_400s_naming_the_problem() {
    let (_dir, server, _) = server(json!({}));
    let words = json!({"indices": [1, 2], "values": [1.0, 0.5]});
    let (zeros, halves) = (vec![0.0f32; DIM], vec![0.5f32; DIM]);
    for (body, needle) in [
        (
            json!({"query": words, "using": "dense"}),
            "is a sparse vector, and `using` names `dense`",
        ),
        (json!({"query": words}), "is a sparse vector"),
        (
            json!({"query": zeros, "using": "words"}),
            "is a dense vector, but `using` names the sparse vector `words`",
        ),
        (
            json!({"query": {"indices": [1, 1], "values": [1.0, 2.0]}, "using": "words"}),
            "index 1 appears twice",
        ),
        (
            json!({"query": {"indices": [1], "values": [1.0, 2.0]}, "using": "words"}),
            "1 indices but 2 values",
        ),
        (
            json!({"query": 4, "using": "words"}),
            "a query by point id on the sparse vector",
        ),
        (
            json!({"query": {"fusion": "rrf"}}),
            "a fusion merges the results of `prefetch`",
        ),
        (
            json!({"prefetch": [{"query": words, "using": "words"}]}),
            "query is required with `prefetch`",
        ),
        (
            json!({"prefetch": [{"query": words, "using": "words"}], "query": {"rrf": {"weights": [1.0, 2.0]}}}),
            "2 weights for 1 prefetches",
        ),
        (
            json!({"prefetch": [{"query": words, "using": "nope"}], "query": {"fusion": "rrf"}}),
            "prefetch[0].query is a sparse vector, and `using` names `nope`",
        ),
        (
            json!({"query": {"nearest": words, "mmr": {"diversity": 0.5}}, "using": "words"}),
            "a sparse query cannot use it",
        ),
    ] {
        let (status, answer) = server.call("POST", "/collections/h/points/query", Some(&body));
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    for (points, needle) in [
        (
            json!([{"id": 1, "vector": {"words": {"indices": [1], "values": [1.0]}}}]),
            "the dense vector `dense` is missing",
        ),
        (
            json!([{"id": 1, "vector": {"dense": halves, "tags": {"indices": [1], "values": [1.0]}}}]),
            "no sparse vector `tags`",
        ),
        (
            json!([{"id": 1, "vector": {"dense": halves, "words": {"indices": [1], "values": [1e39]}}}]),
            "words",
        ),
    ] {
        let body = json!({ "points": points });
        let (status, answer) = server.call("PUT", "/collections/h/points", Some(&body));
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    // Prefetches nested too deep are refused before anything runs.
    let mut deep = json!({"query": words, "using": "words"});
    for _ in 0..5 {
        deep = json!({"prefetch": deep, "query": {"fusion": "rrf"}});
    }
    let (status, answer) = server.call("POST", "/collections/h/points/query", Some(&deep));
    assert_eq!(status, 400, "{answer}");
    assert!(answer["status"]["error"]
        .as_str()
        .unwrap()
        .contains("nested deeper"));
}
