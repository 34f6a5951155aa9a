//! Payload updates (set, overwrite, delete keys, clear) by id and by filter, and vector
//! updates: what is not changed stays, payload indexes follow, and the changes outlive a
//! `kill -9`.

use serde_json::{json, Value};

use crate::harness::{ids, Server};

fn loaded(extra: Value) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("c", 2, "Euclid", extra);
    let points: Vec<Value> = (0..10u64)
        .map(|i| {
            json!({"id": i, "vector": [i as f32, 0.0],
                   "payload": {"group": i % 2, "m": {"x": i}, "tag": "old"}})
        })
        .collect();
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&json!({ "points": points })),
    );
    (dir, server)
}

fn payload(server: &Server, id: u64) -> Value {
    server.ok("GET", &format!("/collections/c/points/{id}"), None)["payload"].clone()
}

/// No payload (reads return `{}` for it, as Qdrant's do).
fn is_empty(payload: &Value) -> bool {
    payload.is_null() || payload.as_object().is_some_and(|m| m.is_empty())
}

fn count(server: &Server, filter: Value) -> u64 {
    let body = json!({ "filter": filter });
    server.ok("POST", "/collections/c/points/count", Some(&body))["count"]
        .as_u64()
        .unwrap()
}

fn change(server: &Server, method: &str, path: &str, body: Value) {
    let answer = server.ok(
        method,
        &format!("/collections/c/points/{path}?wait=true"),
        Some(&body),
    );
    assert_eq!(answer["status"], "completed", "{answer}");
}

fn updates_apply_by_id_and_by_filter(extra: Value) {
    let (_dir, mut server) = loaded(extra);
    server.ok(
        "PUT",
        "/collections/c/index",
        Some(&json!({"field_name": "tag", "field_schema": "keyword"})),
    );

    change(
        &server,
        "POST",
        "payload",
        json!({"payload": {"tag": "new", "n": 1}, "points": [1, 2]}),
    );
    assert_eq!(
        payload(&server, 1),
        json!({"group": 1, "m": {"x": 1}, "tag": "new", "n": 1})
    );
    change(
        &server,
        "POST",
        "payload",
        json!({"payload": {"y": 5}, "key": "m", "points": [1]}),
    );
    assert_eq!(payload(&server, 1)["m"], json!({"x": 1, "y": 5}));

    // By filter, through the payload index that follows every change.
    let group0 = json!({"must": [{"key": "group", "match": {"value": 0}}]});
    change(
        &server,
        "PUT",
        "payload",
        json!({"payload": {"tag": "even"}, "filter": group0}),
    );
    assert_eq!(payload(&server, 4), json!({"tag": "even"}));
    let even = json!({"must": [{"key": "tag", "match": {"value": "even"}}]});
    assert_eq!(count(&server, even.clone()), 5);
    let old = json!({"must": [{"key": "tag", "match": {"value": "old"}}]});
    assert_eq!(
        count(&server, old),
        4,
        "3, 5, 7, 9: 1 is new, the evens are even"
    );

    change(
        &server,
        "POST",
        "payload/delete",
        json!({"keys": ["m.x", "n"], "points": [1]}),
    );
    assert_eq!(
        payload(&server, 1),
        json!({"group": 1, "m": {"y": 5}, "tag": "new"})
    );
    change(&server, "POST", "payload/clear", json!({"filter": even}));
    assert!(is_empty(&payload(&server, 4)));

    // The vectors are untouched: the nearest points to (4, 0) are still 4, then 3 and 5.
    let query = json!({"query": [4.0, 0.0], "limit": 3, "with_payload": true});
    let hits = server.ok("POST", "/collections/c/points/query", Some(&query));
    assert_eq!(ids(&hits)[0], 4);

    server.kill9();
    server.restart();
    assert_eq!(
        payload(&server, 1),
        json!({"group": 1, "m": {"y": 5}, "tag": "new"})
    );
    assert!(is_empty(&payload(&server, 6)));
    assert_eq!(payload(&server, 7)["tag"], "old");
}

#[test]
fn payload_updates_apply_by_id_and_by_filter() {
    updates_apply_by_id_and_by_filter(json!({}));
}

#[test]
fn payload_updates_apply_in_a_partitioned_collection() {
    updates_apply_by_id_and_by_filter(json!({"shard_number": 2}));
}

#[test]
fn payload_updates_that_name_no_single_place_are_400s() {
    let (_dir, server) = loaded(json!({}));
    for (path, body, needle) in [
        (
            "payload",
            json!({"payload": {"a": 1}, "points": [1], "filter": {"must": []}}),
            "not both",
        ),
        (
            "payload",
            json!({"payload": {"a": 1}}),
            "`points` or `filter`",
        ),
        (
            "payload",
            json!({"payload": {"a": 1}, "points": [1], "key": "m[0]"}),
            "dotted path",
        ),
        (
            "payload/delete",
            json!({"keys": ["a..b"], "points": [1]}),
            "keys[0]",
        ),
        (
            "payload",
            json!({"payload": {"a": 1}, "points": [1], "shard_key": "x"}),
            "shard_key",
        ),
    ] {
        let (status, answer) = server.call(
            "POST",
            &format!("/collections/c/points/{path}"),
            Some(&body),
        );
        assert_eq!(status, 400, "{body} -> {answer}");
        let message = answer["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{body}: {message}");
    }
    assert_eq!(payload(&server, 1)["tag"], "old", "nothing changed");
}

fn vectors_change_and_payloads_stay(extra: Value) {
    let (_dir, mut server) = loaded(extra);
    let update = json!({"points": [{"id": 3, "vector": [100.0, 0.0]},
                                    {"id": 4, "vector": [-100.0, 0.0]}]});
    let answer = server.ok(
        "PUT",
        "/collections/c/points/vectors?wait=true",
        Some(&update),
    );
    assert_eq!(answer["status"], "completed");
    let near = |server: &Server, x: f32| {
        let query = json!({"query": [x, 0.0], "limit": 1, "with_payload": true,
                           "with_vector": true});
        server.ok("POST", "/collections/c/points/query", Some(&query))["points"][0].clone()
    };
    assert_eq!(near(&server, 99.0)["id"], 3);
    assert_eq!(near(&server, 99.0)["vector"], json!([100.0, 0.0]));
    assert_eq!(
        near(&server, 99.0)["payload"]["m"],
        json!({"x": 3}),
        "the payload stays"
    );
    assert_eq!(near(&server, -99.0)["id"], 4);

    // An id the collection lacks: a 404 naming it, and nothing written.
    let missing = json!({"points": [{"id": 5, "vector": [50.0, 0.0]},
                                     {"id": 77, "vector": [1.0, 0.0]}]});
    let (status, body) = server.call("PUT", "/collections/c/points/vectors", Some(&missing));
    assert_eq!(status, 404, "{body}");
    assert!(
        body["status"]["error"].as_str().unwrap().contains("77"),
        "{body}"
    );
    assert_ne!(near(&server, 49.0)["id"], 5, "point 5 kept its vector");
    let wrong = json!({"points": [{"id": 5, "vector": [1.0]}]});
    let (status, body) = server.call("PUT", "/collections/c/points/vectors", Some(&wrong));
    assert_eq!(status, 400, "{body}");

    // `update_filter`: of points 6 (group 0) and 7 (group 1) only 7 passes, and only it moves;
    // an upsert with one replaces only the stored points that pass it and inserts new ones.
    let only_odd = json!({"must": [{"key": "group", "match": {"value": 1}}]});
    let filtered = json!({"points": [{"id": 6, "vector": [600.0, 0.0]},
                                     {"id": 7, "vector": [700.0, 0.0]}],
                          "update_filter": only_odd});
    change(&server, "PUT", "vectors", filtered);
    assert_eq!(near(&server, 699.0)["id"], 7);
    assert_ne!(near(&server, 599.0)["id"], 6, "point 6 kept its vector");
    let upsert = json!({"points": [{"id": 8, "vector": [800.0, 0.0], "payload": {"group": 0}},
                                   {"id": 9, "vector": [900.0, 0.0], "payload": {"group": 1}},
                                   {"id": 30, "vector": [3000.0, 0.0], "payload": {"group": 0}}],
                        "update_filter": only_odd});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&upsert));
    assert_eq!(near(&server, 899.0)["id"], 9);
    assert_eq!(near(&server, 2999.0)["id"], 30, "a new point is inserted");
    assert_eq!(payload(&server, 8)["tag"], "old", "point 8 was left alone");

    server.kill9();
    server.restart();
    assert_eq!(near(&server, 99.0)["id"], 3);
    assert_eq!(near(&server, 99.0)["payload"]["m"], json!({"x": 3}));
}

#[test]
fn vector_updates_keep_payloads() {
    vectors_change_and_payloads_stay(json!({}));
}

#[test]
fn vector_updates_keep_payloads_in_a_partitioned_collection() {
    vectors_change_and_payloads_stay(json!({"shard_number": 2}));
}

/// `POST …/points/batch`: writes of every kind applied in order, each answered; a refused
/// field anywhere stops the batch before any write; a failing write names its place and leaves
/// the writes before it applied (Qdrant's semantics: a batch is not a transaction).
#[test]
fn a_batch_applies_its_writes_in_order() {
    let (_dir, server) = loaded(json!({}));
    let batch = json!({"operations": [
        {"upsert": {"points": [{"id": 20, "vector": [20.0, 0.0], "payload": {"tag": "new"}}]}},
        {"set_payload": {"payload": {"seen": true}, "points": [20, 1]}},
        {"overwrite_payload": {"payload": {"only": 1}, "points": [2]}},
        {"delete_payload": {"keys": ["tag"], "filter": {"must": {"key": "group", "match": {"value": 1}}}}},
        {"clear_payload": {"points": [4]}},
        {"update_vectors": {"points": [{"id": 20, "vector": [21.0, 0.0]}]}},
        {"delete": {"points": [0]}},
        // Ordered after the upsert above: it deletes the point the batch created.
        {"delete": {"filter": {"must": {"key": "only", "match": {"value": 1}}}}},
    ]});
    let results = server.ok(
        "POST",
        "/collections/c/points/batch?wait=true",
        Some(&batch),
    );
    let results = results.as_array().unwrap();
    assert_eq!(results.len(), 8);
    assert!(
        results.iter().all(|r| r["status"] == "completed"),
        "{results:?}"
    );
    assert_eq!(payload(&server, 20), json!({"tag": "new", "seen": true}));
    assert_eq!(
        payload(&server, 1),
        json!({"group": 1, "m": {"x": 1}, "seen": true})
    );
    assert_eq!(payload(&server, 3), json!({"group": 1, "m": {"x": 3}}));
    assert!(is_empty(&payload(&server, 4)));
    let moved = server.ok("GET", "/collections/c/points/20", None);
    assert_eq!(moved["vector"], json!([21.0, 0.0]));
    let (status, _) = server.call("GET", "/collections/c/points/0", None);
    assert_eq!(status, 404);
    let (status, _) = server.call("GET", "/collections/c/points/2", None);
    assert_eq!(status, 404);

    // A refused field in the last operation: nothing of the batch is applied.
    let refused = json!({"operations": [
        {"delete": {"points": [5]}},
        {"upsert": {"points": [{"id": 6, "vector": [6.0, 0.0]}], "shard_key": "eu"}},
    ]});
    let (status, answer) = server.call("POST", "/collections/c/points/batch", Some(&refused));
    assert_eq!(status, 400, "{answer}");
    let message = answer["status"]["error"].as_str().unwrap();
    assert!(
        message.contains("operations[1].upsert.shard_key"),
        "{message}"
    );
    assert_eq!(count(&server, json!({"must": {"has_id": [5]}})), 1);

    // A failing write names its place; the one before it stays applied.
    let failing = json!({"operations": [
        {"delete": {"points": [5]}},
        {"upsert": {"points": [{"id": 6, "vector": [1.0, 2.0, 3.0]}]}},
    ]});
    let (status, answer) = server.call(
        "POST",
        "/collections/c/points/batch?wait=true",
        Some(&failing),
    );
    assert_eq!(status, 400, "{answer}");
    let message = answer["status"]["error"].as_str().unwrap();
    assert!(
        message.contains("operations[1].upsert.points[0].vector"),
        "{message}"
    );
    assert_eq!(count(&server, json!({"must": {"has_id": [5]}})), 0);
    let (status, answer) = server.call(
        "POST",
        "/collections/c/points/batch",
        Some(&json!({"operations": [{"delete_vectors": {"points": [1], "vector": ["x"]}}]})),
    );
    assert_eq!(status, 400, "{answer}");
}
