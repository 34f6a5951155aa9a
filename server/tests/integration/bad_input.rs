//! Every kind of bad input gets a 4xx with a JSON error naming the problem, and afterwards
//! the server still answers and earlier data is intact.

use serde_json::{json, Value};

use crate::harness::Server;

fn assert_error(response: (u16, Value), status: u16, needle: &str) {
    let (got, body) = response;
    assert_eq!(got, status, "expected {status}, got {got}: {body}");
    let message = body["status"]["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no status.error in {body}"));
    assert!(
        message.contains(needle),
        "error {message:?} does not mention {needle:?}"
    );
    assert!(body["time"].is_number(), "{body}");
}

/// The collection still answers and point 1 is exactly as written.
fn assert_intact(server: &Server) {
    assert_eq!(
        server.ok("POST", "/collections/c/points/count", Some(&json!({})))["count"],
        3
    );
    let point = server.ok("GET", "/collections/c/points/1", None);
    assert_eq!(point["vector"], json!([1.0, 0.0, 0.0]));
    assert_eq!(point["payload"], json!({"tag": "one"}));
    assert_eq!(server.call("GET", "/healthz", None).0, 200);
}

#[test]
fn bad_inputs_get_clear_errors_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            ("CAIRN__HTTP__MAX_BODY_BYTES", "65536"),
            ("CAIRN__LIMITS__MAX_BATCH_QUERIES", "4"),
        ],
    );
    server.create("c", 3, "Euclid", json!({}));
    let points = json!({"points": [
        {"id": 1, "vector": [1.0, 0.0, 0.0], "payload": {"tag": "one"}},
        {"id": 2, "vector": [0.0, 1.0, 0.0]},
        {"id": 3, "vector": [0.0, 0.0, 1.0]}]});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&points));
    assert_intact(&server);

    let cases: Vec<((u16, Value), u16, &str)> = vec![
        // Wrong dimension, in both upsert forms and in queries.
        (
            server.call(
                "PUT",
                "/collections/c/points?wait=true",
                Some(&json!({"points": [{"id": 9, "vector": [1.0, 2.0]}]})),
            ),
            400,
            "expected 3, got 2",
        ),
        (
            server.call(
                "PUT",
                "/collections/c/points",
                Some(&json!({"batch": {"ids": [9], "vectors": [[1.0, 2.0, 3.0, 4.0]]}})),
            ),
            400,
            "batch.vectors[0]",
        ),
        (
            server.call(
                "POST",
                "/collections/c/points/query",
                Some(&json!({"query": [1.0]})),
            ),
            400,
            "expected 3, got 1",
        ),
        // Empty vector.
        (
            server.call(
                "PUT",
                "/collections/c/points",
                Some(&json!({"points": [{"id": 9, "vector": []}]})),
            ),
            400,
            "empty",
        ),
        // NaN and infinity (JSON cannot spell NaN, so send the raw tokens and a huge number).
        (
            server.call_raw(
                "PUT",
                "/collections/c/points",
                br#"{"points":[{"id":9,"vector":[1,NaN,2]}]}"#.to_vec(),
            ),
            400,
            "malformed JSON",
        ),
        (
            server.call_raw(
                "PUT",
                "/collections/c/points",
                br#"{"points":[{"id":9,"vector":[1,1e300,2]}]}"#.to_vec(),
            ),
            400,
            "must be finite",
        ),
        // Unknown collection.
        (
            server.call("PUT", "/collections/nope/points", Some(&points)),
            404,
            "nope",
        ),
        (
            server.call(
                "POST",
                "/collections/nope/points/query",
                Some(&json!({"query": [1.0, 0.0, 0.0]})),
            ),
            404,
            "nope",
        ),
        (server.call("GET", "/collections/nope", None), 404, "nope"),
        // Existing collection.
        (
            server.call(
                "PUT",
                "/collections/c",
                Some(&json!({"vectors": {"size": 3, "distance": "Dot"}})),
            ),
            409,
            "already exists",
        ),
        // Malformed JSON and wrong types, naming the field.
        (
            server.call_raw("PUT", "/collections/c/points", b"{\"points\": [".to_vec()),
            400,
            "malformed JSON",
        ),
        (
            server.call(
                "PUT",
                "/collections/c/points",
                Some(&json!({"points": [{"id": 9, "vector": [1.0, "x", 2.0]}]})),
            ),
            400,
            "points[0].vector",
        ),
        (
            server.call(
                "PUT",
                "/collections/c/points",
                Some(&json!({"points": [{"id": -5, "vector": [1.0, 2.0, 3.0]}]})),
            ),
            400,
            "points[0].id",
        ),
        (
            server.call(
                "POST",
                "/collections/c/points/query",
                Some(&json!({"query": [1.0, 0.0, 0.0], "limit": "ten"})),
            ),
            400,
            "limit",
        ),
        (
            server.call(
                "PUT",
                "/collections/x",
                Some(&json!({"vectors": {"size": 3, "distance": "Hamming"}})),
            ),
            400,
            "vectors.distance",
        ),
        // Body above the configured limit.
        (
            server.call_raw("PUT", "/collections/c/points", vec![b' '; 100_000]),
            413,
            "limit of 65536 bytes",
        ),
        // Documented maxima.
        (
            server.call(
                "POST",
                "/collections/c/points/query",
                Some(&json!({"query": [1.0, 0.0, 0.0], "limit": 20000})),
            ),
            400,
            "maximum of 10000",
        ),
        (
            server.call(
                "POST",
                "/collections/c/points/query",
                Some(&json!({"query": [1.0, 0.0, 0.0], "params": {"hnsw_ef": 100000}})),
            ),
            400,
            "hnsw_ef",
        ),
        (
            server.call(
                "POST",
                "/collections/c/points/query/batch",
                Some(&json!({"searches": vec![json!({"query": [1.0, 0.0, 0.0]}); 5]})),
            ),
            400,
            "maximum of 4",
        ),
        (
            server.call(
                "POST",
                "/collections/c/points/scroll",
                Some(&json!({"limit": 10001})),
            ),
            400,
            "maximum of 10000",
        ),
        // Filters that make no sense.
        (
            server.call(
                "POST",
                "/collections/c/points/query",
                Some(&json!({"query": [1.0, 0.0, 0.0], "filter": {"must": [{"key": "tag"}]}})),
            ),
            400,
            "filter.must[0]",
        ),
        // Bad point ids in paths and unknown points.
        (
            server.call("GET", "/collections/c/points/not-an-id", None),
            400,
            "point id",
        ),
        (
            server.call("GET", "/collections/c/points/77", None),
            404,
            "77",
        ),
        // Unknown route.
        (server.call("GET", "/nowhere", None), 404, "/nowhere"),
    ];
    for (response, status, needle) in cases {
        assert_error(response, status, needle);
        assert_intact(&server);
    }
    // A batch with one bad point commits nothing, not even the good ones.
    let mixed =
        json!({"points": [{"id": 10, "vector": [1.0, 1.0, 1.0]}, {"id": 11, "vector": [1.0]}]});
    assert_error(
        server.call("PUT", "/collections/c/points?wait=true", Some(&mixed)),
        400,
        "points[1].vector",
    );
    assert_eq!(server.call("GET", "/collections/c/points/10", None).0, 404);
    assert_intact(&server);
}
