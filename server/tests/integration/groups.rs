//! `POST /collections/{c}/points/query/groups`: hits grouped by a payload value (integers,
//! strings, arrays), checked against groups made here from an exact ranking; `with_lookup`;
//! the refusals.

use serde_json::{json, Value};

use crate::harness::{seeded_vectors, Server};

/// Point `i`'s `doc`: 0..20 by `i % 20`, none for every 13th, two for every 11th.
fn doc_of(i: usize) -> Value {
    match i {
        _ if i.is_multiple_of(13) => Value::Null,
        _ if i.is_multiple_of(11) => json!([i % 20, (i + 1) % 20]),
        _ => json!(i % 20),
    }
}

/// Groups made here: ids ranked by distance to `query`, the first `limit` keys met open
/// groups of at most `size` hits.
fn expected(points: &[Vec<f32>], query: &[f32], limit: usize, size: usize) -> Vec<(u64, Vec<u64>)> {
    let mut ranked: Vec<(f32, usize)> = points
        .iter()
        .enumerate()
        .map(|(i, v)| (v.iter().zip(query).map(|(a, b)| (a - b) * (a - b)).sum(), i))
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut groups: Vec<(u64, Vec<u64>)> = Vec::new();
    for (_, i) in ranked {
        let keys: Vec<u64> = match doc_of(i) {
            Value::Array(a) => a.iter().map(|v| v.as_u64().unwrap()).collect(),
            Value::Number(n) => vec![n.as_u64().unwrap()],
            Value::Null | Value::Bool(_) | Value::String(_) | Value::Object(_) => vec![],
        };
        for key in keys {
            let open = groups.len() < limit;
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, hits)) if hits.len() < size => hits.push(i as u64),
                Some(_) => {}
                None if open => groups.push((key, vec![i as u64])),
                None => {}
            }
        }
    }
    groups
}

#[test]
fn groups_hold_the_best_hits_of_the_best_groups_with_their_lookup() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let dim = 4;
    let points: Vec<Vec<f32>> = seeded_vectors(600, dim, 31)
        .chunks(dim)
        .map(<[f32]>::to_vec)
        .collect();
    server.create("chunks", dim, "Euclid", json!({}));
    let batch: Vec<Value> = points
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"id": i, "vector": v, "payload": {"doc": doc_of(i), "n": i}}))
        .collect();
    server.ok(
        "PUT",
        "/collections/chunks/points?wait=true",
        Some(&json!({ "points": batch })),
    );
    server.create("docs", 2, "Euclid", json!({}));
    let docs: Vec<Value> = (0..20)
        .map(|d| json!({"id": d, "vector": [1.0, d as f32], "payload": {"title": format!("doc {d}")}}))
        .collect();
    server.ok(
        "PUT",
        "/collections/docs/points?wait=true",
        Some(&json!({ "points": docs })),
    );

    let query = vec![0.1f32, -0.2, 0.3, 0.0];
    let result = server.ok(
        "POST",
        "/collections/chunks/points/query/groups",
        Some(
            &json!({"query": query, "group_by": "doc", "group_size": 3, "limit": 6,
                     "params": {"exact": true}, "with_payload": ["n"], "with_lookup": "docs"}),
        ),
    );
    let groups = result["groups"].as_array().unwrap();
    let want = expected(&points, &query, 6, 3);
    let got: Vec<(u64, Vec<u64>)> = groups
        .iter()
        .map(|g| {
            let hits = g["hits"].as_array().unwrap();
            (
                g["id"].as_u64().unwrap(),
                hits.iter().map(|h| h["id"].as_u64().unwrap()).collect(),
            )
        })
        .collect();
    assert_eq!(got, want);
    for g in groups {
        let hit = &g["hits"][0];
        assert_eq!(
            hit["payload"],
            json!({"n": hit["id"]}),
            "only the asked payload"
        );
        assert_eq!(
            g["lookup"]["payload"]["title"],
            format!("doc {}", g["id"]),
            "{g}"
        );
    }

    // String keys: the same groups, named by the string.
    server.ok(
        "POST",
        "/collections/chunks/points/payload?wait=true",
        Some(&json!({"payload": {"label": "x"}, "points": [1, 2, 3]})),
    );
    let result = server.ok(
        "POST",
        "/collections/chunks/points/query/groups",
        Some(
            &json!({"query": query, "group_by": "label", "group_size": 5, "limit": 3,
                     "params": {"exact": true}}),
        ),
    );
    let groups = result["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{result}");
    assert_eq!(groups[0]["id"], "x");
    assert_eq!(groups[0]["hits"].as_array().unwrap().len(), 3);

    for (body, says) in [
        (
            json!({"query": query, "group_by": "doc", "group_size": 0}),
            "group_size",
        ),
        (
            json!({"query": query, "group_by": "doc", "offset": 3}),
            "offset",
        ),
        (json!({"query": query, "group_by": ""}), "group_by"),
        (
            json!({"query": query, "group_by": "doc", "limit": 1000, "group_size": 1000}),
            "maximum",
        ),
        (json!({"query": query}), "group_by"),
        (
            json!({"query": query, "group_by": "doc", "with_lookup": "nowhere"}),
            "nowhere",
        ),
    ] {
        let (status, answer) = server.call(
            "POST",
            "/collections/chunks/points/query/groups",
            Some(&body),
        );
        assert!(status == 400 || status == 404, "{body}: {status} {answer}");
        let error = answer["status"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{error:?} should say {says:?}");
    }
}
