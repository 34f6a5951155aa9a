//! `{"nearest": …, "mmr": …}`: maximal marginal relevance over REST (LangChain's MMR
//! retriever sends it).

use serde_json::{json, Value};

use crate::harness::{ids, Server};

/// Cosine points around the x axis: ids 1-5 near-duplicates of (1, 0.1·i), id 9 apart.
fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("c", 2, "Cosine", json!({}));
    let mut points: Vec<Value> = (1..=5u64)
        .map(|i| json!({"id": i, "vector": [1.0, 0.01 * i as f64]}))
        .collect();
    points.push(json!({"id": 9, "vector": [1.0, 0.8]}));
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&json!({ "points": points })),
    );
    (dir, server)
}

fn query(server: &Server, mmr: Value, limit: usize) -> Value {
    let body = json!({"query": {"nearest": [1.0, 0.0], "mmr": mmr}, "limit": limit});
    server.ok("POST", "/collections/c/points/query", Some(&body))
}

#[test]
fn diversity_brings_a_distinct_point_forward_and_scores_stay_the_querys() {
    let (_dir, server) = server();
    let nearest = server.ok(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0], "limit": 2})),
    );
    assert_eq!(ids(&nearest), [1, 2]);
    let relevance_only = query(&server, json!({"diversity": 0.0, "candidates_limit": 6}), 2);
    assert_eq!(ids(&relevance_only), [1, 2]);
    let diverse = query(&server, json!({"diversity": 0.9, "candidates_limit": 6}), 2);
    assert_eq!(ids(&diverse), [1, 9]);
    // The score of 9 is its similarity to the query, not its MMR value.
    let all = server.ok(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0], "limit": 6})),
    );
    let score_of = |answer: &Value, id: u64| {
        answer["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| p["score"].clone())
            .unwrap()
    };
    assert_eq!(score_of(&diverse, 9), score_of(&all, 9));
    assert!(diverse["points"][0]
        .get("vector")
        .is_none_or(Value::is_null));
    // Only the candidates are picked from: 9 is not among the nearest 3.
    let few = query(&server, json!({"diversity": 0.9, "candidates_limit": 3}), 2);
    assert_eq!(ids(&few), [1, 3]);
}

#[test]
fn bad_mmr_settings_are_400s() {
    let (_dir, server) = server();
    for (mmr, needle) in [
        (
            json!({"diversity": 1.5}),
            "diversity must be between 0 and 1",
        ),
        (json!({"candidates_limit": 1_000_000}), "candidates_limit"),
        (json!({"lambda": 0.5}), "lambda"),
    ] {
        let body = json!({"query": {"nearest": [1.0, 0.0], "mmr": mmr}});
        let (status, answer) = server.call("POST", "/collections/c/points/query", Some(&body));
        assert_eq!(status, 400, "{mmr} -> {answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{mmr}: {message}");
    }
}
