//! `{"recommend": …}` queries (Qdrant's three strategies): the ranking checked against a
//! brute-force one computed here, examples by id left out, vectors as examples, paging, a
//! partitioned collection, and the refusals.

use serde_json::{json, Value};

use crate::harness::{ids, seeded_vectors, Server};

fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    seeded_vectors(n, dim, seed)
        .chunks(dim)
        .map(<[f32]>::to_vec)
        .collect()
}

/// The ids nearest (Euclidean) to `2·mean(positive) − mean(negative)`, without `skip`.
fn expected(
    points: &[Vec<f32>],
    positive: &[usize],
    negative: &[usize],
    skip: &[usize],
) -> Vec<u64> {
    let dim = points[0].len();
    let mean = |of: &[usize]| -> Vec<f32> {
        (0..dim)
            .map(|d| of.iter().map(|&i| points[i][d]).sum::<f32>() / of.len() as f32)
            .collect()
    };
    let p = mean(positive);
    let query: Vec<f32> = if negative.is_empty() {
        p
    } else {
        let n = mean(negative);
        p.iter().zip(&n).map(|(p, n)| 2.0 * p - n).collect()
    };
    let mut ranked: Vec<(f32, u64)> = points
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(i))
        .map(|(i, v)| {
            let d: f32 = v.iter().zip(&query).map(|(a, b)| (a - b) * (a - b)).sum();
            (d, i as u64)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    ranked.into_iter().map(|(_, id)| id).collect()
}

fn load(server: &Server, name: &str, points: &[Vec<f32>]) {
    for (b, chunk) in points.chunks(500).enumerate() {
        let batch: Vec<Value> = chunk
            .iter()
            .enumerate()
            .map(|(i, v)| json!({"id": b * 500 + i, "vector": v}))
            .collect();
        server.ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            Some(&json!({ "points": batch })),
        );
    }
}

/// The (id, score) pairs a query on `items` answers.
fn scored(server: &Server, body: &Value) -> Vec<(u64, f32)> {
    let answer = server.ok("POST", "/collections/items/points/query", Some(body));
    answer["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().unwrap(),
                p["score"].as_f64().unwrap() as f32,
            )
        })
        .collect()
}

/// The ten best (id, score) pairs of `points` under `score`, higher first, ties by id,
/// `skip` left out.
fn top10(points: &[Vec<f32>], skip: &[u64], score: &dyn Fn(&[f32]) -> f32) -> Vec<(u64, f32)> {
    let mut all: Vec<(u64, f32)> = points
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(&(*i as u64)))
        .map(|(i, v)| (i as u64, score(v)))
        .collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(10);
    all
}

fn recommend(server: &Server, name: &str, body: Value) -> Vec<u64> {
    ids(&server.ok(
        "POST",
        &format!("/collections/{name}/points/query"),
        Some(&body),
    ))
}

#[test]
fn recommend_ranks_near_the_examples_average_and_leaves_the_examples_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let points = vectors(1_000, 8, 21);
    server.create("items", 8, "Euclid", json!({}));
    load(&server, "items", &points);
    let exact = json!({"exact": true});

    let got = recommend(
        &server,
        "items",
        json!({"query": {"recommend": {"positive": [1, 2], "negative": [3]}}, "limit": 10, "params": exact}),
    );
    let want = expected(&points, &[1, 2], &[3], &[1, 2, 3]);
    assert_eq!(got, want[..10]);

    // The next page, and the default strategy named.
    let got = recommend(
        &server,
        "items",
        json!({"query": {"recommend": {"positive": [1, 2], "negative": [3], "strategy": "average_vector"}},
               "limit": 5, "offset": 5, "params": exact}),
    );
    assert_eq!(got, want[5..10]);

    // A vector as an example is not a point to leave out; without negatives the query is the
    // positives' mean.
    let got = recommend(
        &server,
        "items",
        json!({"query": {"recommend": {"positive": [points[7].clone(), 8]}}, "limit": 10, "params": exact}),
    );
    let want = expected(&points, &[7, 8], &[], &[8]);
    assert_eq!(got, want[..10]);

    // The graph search agrees with the exact one on most of the top 10.
    let got = recommend(
        &server,
        "items",
        json!({"query": {"recommend": {"positive": [10, 11]}}, "limit": 10}),
    );
    let want = expected(&points, &[10, 11], &[], &[10, 11]);
    let hits = got.iter().filter(|id| want[..10].contains(id)).count();
    assert!(hits >= 9, "graph search found {hits} of the exact top 10");

    for (query, status, says) in [
        (
            json!({"recommend": {"negative": [], "strategy": "best_score"}}),
            400,
            "at least one positive or negative",
        ),
        (
            json!({"recommend": {"negative": [1]}}),
            400,
            "average_vector needs",
        ),
        (json!({"recommend": {"positive": [424242]}}), 404, "424242"),
        (
            json!({"recommend": {"positive": [[1.0, 2.0]]}}),
            400,
            "positive[0]",
        ),
        (
            json!({"recommend": {"positive": [{"indices": [1], "values": [1.0]}]}}),
            400,
            "sparse",
        ),
        (
            json!({"recommend": {"positive": [1], "typo": 2}}),
            400,
            "typo",
        ),
    ] {
        let (got, body) = server.call(
            "POST",
            "/collections/items/points/query",
            Some(&json!({ "query": query })),
        );
        assert_eq!(got, status, "{query}: {body}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(
            error.contains(says),
            "{query}: {error:?} should say {says:?}"
        );
    }
}

/// `best_score` and `sum_scores` (Euclid: similarity is the negated squared distance), each
/// ranked against every example by brute force here, and Qdrant's sigmoid on the best score.
#[test]
fn best_score_and_sum_scores_rank_by_every_example() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let points = vectors(2_000, 8, 23);
    server.create("items", 8, "Euclid", json!({}));
    load(&server, "items", &points);
    let sq =
        |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum() };
    let sigmoid = |x: f32| 0.5 * (x / (1.0 + x.abs()) + 1.0);
    let (positive, negative) = ([4usize, 9, 17], [5usize, 30]);
    let best = |v: &[f32]| -> f32 {
        let p = positive
            .iter()
            .map(|&i| -sq(v, &points[i]))
            .fold(f32::NEG_INFINITY, f32::max);
        let n = negative
            .iter()
            .map(|&i| -sq(v, &points[i]))
            .fold(f32::NEG_INFINITY, f32::max);
        if p > n {
            sigmoid(p)
        } else {
            -sigmoid(n)
        }
    };
    let sum = |v: &[f32]| -> f32 {
        positive.iter().map(|&i| -sq(v, &points[i])).sum::<f32>()
            - negative.iter().map(|&i| -sq(v, &points[i])).sum::<f32>()
    };
    let skip: Vec<u64> = positive
        .iter()
        .chain(&negative)
        .map(|&i| i as u64)
        .collect();
    let ranked = |score: &dyn Fn(&[f32]) -> f32| top10(&points, &skip, score);
    for (strategy, want) in [("best_score", ranked(&best)), ("sum_scores", ranked(&sum))] {
        let body = json!({"query": {"recommend": {"positive": positive, "negative": negative,
                                                  "strategy": strategy}},
                          "limit": 10, "params": {"exact": true}});
        let got = scored(&server, &body);
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "{strategy}"
        );
        for ((_, g), (_, w)) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "{strategy}: {g} against {w}"
            );
        }
        // Through the graph: most of the exact top 10.
        let body = json!({"query": {"recommend": {"positive": positive, "negative": negative,
                                                  "strategy": strategy}}, "limit": 10});
        let found = recommend(&server, "items", body);
        let hits = found
            .iter()
            .filter(|id| want.iter().any(|w| w.0 == **id))
            .count();
        assert!(
            hits >= 9,
            "{strategy}: the graph found {hits} of the exact top 10"
        );
    }
}

/// Negatives alone, as Qdrant takes them for `best_score` and `sum_scores`: the points least
/// like the negatives. Euclid scores every point (the farthest are no nearest-neighbour
/// search), so its answer is exact; `Cosine` gathers candidates away from the negatives'
/// sum, exact for `sum_scores` (one inner-product search) and nearly so for `best_score`.
#[test]
fn negatives_alone_rank_the_points_least_like_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let points = vectors(2_000, 8, 29);
    let negative = [3usize, 11];
    let skip: Vec<u64> = negative.iter().map(|&i| i as u64).collect();
    let sigmoid = |x: f32| 0.5 * (x / (1.0 + x.abs()) + 1.0);
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    for distance in ["Euclid", "Cosine"] {
        server.create("items", 8, distance, json!({}));
        load(&server, "items", &points);
        let similarity = |a: &[f32], b: &[f32]| -> f32 {
            if distance == "Euclid" {
                -a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>()
            } else {
                a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (norm(a) * norm(b))
            }
        };
        let best = |v: &[f32]| -> f32 {
            let n = negative
                .iter()
                .map(|&i| similarity(v, &points[i]))
                .fold(f32::NEG_INFINITY, f32::max);
            -sigmoid(n)
        };
        let sum = |v: &[f32]| -> f32 {
            -negative
                .iter()
                .map(|&i| similarity(v, &points[i]))
                .sum::<f32>()
        };
        for (strategy, want) in [
            ("best_score", top10(&points, &skip, &best)),
            ("sum_scores", top10(&points, &skip, &sum)),
        ] {
            let body = json!({"query": {"recommend": {"negative": negative, "strategy": strategy}},
                              "limit": 10});
            let got = scored(&server, &body);
            let want_ids: Vec<u64> = want.iter().map(|w| w.0).collect();
            let found = got.iter().filter(|g| want_ids.contains(&g.0)).count();
            let floor = if distance == "Euclid" || strategy == "sum_scores" {
                10
            } else {
                8
            };
            assert!(
                found >= floor,
                "{distance} {strategy}: {found} of the top 10: {got:?} against {want:?}"
            );
            for (id, score) in &got {
                let v = &points[*id as usize];
                let exact = if strategy == "best_score" {
                    best(v)
                } else {
                    sum(v)
                };
                assert!(
                    (score - exact).abs() <= 1e-4 * exact.abs().max(1.0),
                    "{distance} {strategy}: {score} against {exact}"
                );
            }
        }
        server.ok("DELETE", "/collections/items", None);
    }
}

/// `discover` and `context` (Qdrant's scores: the pairs a point is on the positive side of,
/// less the others, plus the sigmoid of its similarity to the target; the sum over pairs of
/// the sigmoid of how far it lies across each), exactly against brute force, and through the
/// graph.
#[test]
fn discover_and_context_rank_by_the_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let points = vectors(2_000, 8, 24);
    server.create("items", 8, "Euclid", json!({}));
    load(&server, "items", &points);
    let sim = |a: &[f32], b: usize| -> f32 {
        -a.iter()
            .zip(&points[b])
            .map(|(x, y)| (x - y) * (x - y))
            .sum::<f32>()
    };
    let fast = |x: f32| x / (1.0 + x.abs());
    let (target, pairs) = (4usize, [(9usize, 5usize), (17, 30)]);
    let examples = [4u64, 9, 5, 17, 30];
    let discover = |v: &[f32]| -> f32 {
        let rank: f32 = pairs
            .iter()
            .map(|&(p, n)| if sim(v, p) > sim(v, n) { 1.0 } else { -1.0 })
            .sum();
        rank + 0.5 * (fast(sim(v, target)) + 1.0)
    };
    let context = |v: &[f32]| -> f32 {
        pairs
            .iter()
            .map(|&(p, n)| fast((sim(v, p) - sim(v, n) - f32::EPSILON).min(0.0)))
            .sum()
    };
    let ranked = |score: &dyn Fn(&[f32]) -> f32| top10(&points, &examples, score);
    let context_pairs: Vec<Value> = pairs
        .iter()
        .map(|&(p, n)| json!({"positive": p, "negative": n}))
        .collect();
    for (query, want) in [
        (
            json!({"discover": {"target": target, "context": context_pairs}}),
            ranked(&discover),
        ),
        (json!({"context": context_pairs}), ranked(&context)),
    ] {
        let body = json!({"query": query, "limit": 10, "params": {"exact": true}});
        let got = scored(&server, &body);
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            "{query}"
        );
        for ((_, g), (_, w)) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-4, "{query}: {g} against {w}");
        }
        // Through the graph: the best scores are found (context's best, 0, by many points).
        let body = json!({"query": query, "limit": 10});
        let answer = server.ok("POST", "/collections/items/points/query", Some(&body));
        let scores: Vec<f32> = answer["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["score"].as_f64().unwrap() as f32)
            .collect();
        for (g, (_, w)) in scores.iter().zip(&want) {
            assert!(
                *g >= w - 0.05,
                "{query}: the graph's {scores:?} against {want:?}"
            );
        }
    }
    let (status, body) = server.call(
        "POST",
        "/collections/items/points/query",
        Some(&json!({"query": {"context": []}})),
    );
    assert_eq!(status, 400, "{body}");
}

#[test]
fn recommend_works_across_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let points = vectors(3_000, 16, 22);
    server.create("parts", 16, "Euclid", json!({"partitions": 3}));
    load(&server, "parts", &points);
    server.wait_routed("parts");
    let got = recommend(
        &server,
        "parts",
        json!({"query": {"recommend": {"positive": [5, 6, 7], "negative": [8]}}, "limit": 10,
               "params": {"exact": true}}),
    );
    let want = expected(&points, &[5, 6, 7], &[8], &[5, 6, 7, 8]);
    assert_eq!(got, want[..10]);
}
