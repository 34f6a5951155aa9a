//! Every kind of bad input gets a 4xx with a JSON error naming the problem, and right after
//! each bad request the server still answers and earlier data is intact. One test per kind of
//! bad input, each on a server of its own, so a failure names the input that caused it.

use serde_json::{json, Value};

use crate::harness::Server;

/// A server with a 64 KB body limit and at most 4 queries per batch, holding collection `c`:
/// three 3-d points, point 1 with a payload.
fn fixture() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path(),
        &[
            ("CAIRN__HTTP__MAX_BODY_BYTES", "65536"),
            ("CAIRN__LIMITS__MAX_BATCH_QUERIES", "4"),
            ("CAIRN__LIMITS__MAX_BATCH_RESULTS", "1000"),
            ("CAIRN__LIMITS__MAX_FILTER_DEPTH", "3"),
        ],
    );
    server.create("c", 3, "Euclid", json!({}));
    let points = json!({"points": [
        {"id": 1, "vector": [1.0, 0.0, 0.0], "payload": {"tag": "one"}},
        {"id": 2, "vector": [0.0, 1.0, 0.0]},
        {"id": 3, "vector": [0.0, 0.0, 1.0]}]});
    server.ok("PUT", "/collections/c/points?wait=true", Some(&points));
    assert_intact(&server);
    (dir, server)
}

/// `response` (already sent) is the expected error, and the server is unharmed by it.
fn rejected(server: &Server, response: (u16, Value), status: u16, needle: &str) {
    assert_error(response, status, needle);
    assert_intact(server);
}

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
fn wrong_dimension_is_a_400_naming_both_sizes() {
    let (_dir, server) = fixture();
    let response = server.call(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&json!({"points": [{"id": 9, "vector": [1.0, 2.0]}]})),
    );
    rejected(&server, response, 400, "expected 3, got 2");
    let response = server.call(
        "PUT",
        "/collections/c/points",
        Some(&json!({"batch": {"ids": [9], "vectors": [[1.0, 2.0, 3.0, 4.0]]}})),
    );
    rejected(&server, response, 400, "batch.vectors[0]");
    let response = server.call(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0]})),
    );
    rejected(&server, response, 400, "expected 3, got 1");
}

#[test]
fn empty_vector_is_a_400() {
    let (_dir, server) = fixture();
    let response = server.call(
        "PUT",
        "/collections/c/points",
        Some(&json!({"points": [{"id": 9, "vector": []}]})),
    );
    rejected(&server, response, 400, "empty");
}

#[test]
fn nan_and_infinity_are_400s() {
    let (_dir, server) = fixture();
    // JSON cannot spell NaN, so send the raw token; infinity arrives as a number too large
    // for f32, refused as the body is read, naming the element.
    let response = server.call_raw(
        "PUT",
        "/collections/c/points",
        br#"{"points":[{"id":9,"vector":[1,NaN,2]}]}"#.to_vec(),
    );
    rejected(&server, response, 400, "malformed JSON");
    let response = server.call_raw(
        "PUT",
        "/collections/c/points",
        br#"{"points":[{"id":9,"vector":[1,1e300,2]}]}"#.to_vec(),
    );
    rejected(
        &server,
        response,
        400,
        "vector element 1 is 1e300, beyond the range of a 32-bit float",
    );
}

#[test]
fn unknown_collection_is_a_404_naming_it() {
    let (_dir, server) = fixture();
    let points = json!({"points": [{"id": 9, "vector": [1.0, 2.0, 3.0]}]});
    let response = server.call("PUT", "/collections/nope/points", Some(&points));
    rejected(&server, response, 404, "nope");
    let response = server.call(
        "POST",
        "/collections/nope/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0]})),
    );
    rejected(&server, response, 404, "nope");
    let response = server.call("GET", "/collections/nope", None);
    rejected(&server, response, 404, "nope");
}

#[test]
fn creating_an_existing_collection_is_a_409() {
    let (_dir, server) = fixture();
    let response = server.call(
        "PUT",
        "/collections/c",
        Some(&json!({"vectors": {"size": 3, "distance": "Dot"}})),
    );
    rejected(&server, response, 409, "already exists");
}

#[test]
fn malformed_json_and_wrong_types_are_400s_naming_the_field() {
    let (_dir, server) = fixture();
    let response = server.call_raw("PUT", "/collections/c/points", b"{\"points\": [".to_vec());
    rejected(&server, response, 400, "malformed JSON");
    let response = server.call(
        "PUT",
        "/collections/c/points",
        Some(&json!({"points": [{"id": 9, "vector": [1.0, "x", 2.0]}]})),
    );
    rejected(&server, response, 400, "points[0].vector");
    let response = server.call(
        "PUT",
        "/collections/c/points",
        Some(&json!({"points": [{"id": -5, "vector": [1.0, 2.0, 3.0]}]})),
    );
    rejected(&server, response, 400, "points[0].id");
    let response = server.call(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0], "limit": "ten"})),
    );
    rejected(&server, response, 400, "limit");
    let response = server.call(
        "PUT",
        "/collections/x",
        Some(&json!({"vectors": {"size": 3, "distance": "Hamming"}})),
    );
    rejected(
        &server,
        response,
        400,
        "at `vectors`: `distance`: unknown variant `Hamming`",
    );
}

#[test]
fn body_above_the_size_limit_is_a_413() {
    let (_dir, server) = fixture();
    let response = server.call_raw("PUT", "/collections/c/points", vec![b' '; 100_000]);
    rejected(&server, response, 413, "limit of 65536 bytes");
}

#[test]
fn limit_ef_and_batch_above_their_maxima_are_400s() {
    let (_dir, server) = fixture();
    let response = server.call(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0], "limit": 20000})),
    );
    rejected(&server, response, 400, "maximum of 10000");
    let response = server.call(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0], "params": {"hnsw_ef": 100000}})),
    );
    rejected(&server, response, 400, "hnsw_ef");
    let response = server.call(
        "POST",
        "/collections/c/points/query/batch",
        Some(&json!({"searches": vec![json!({"query": [1.0, 0.0, 0.0]}); 5]})),
    );
    rejected(&server, response, 400, "maximum of 4");
    // Each query within its own limit, the batch above its total.
    let search = json!({"vector": [1.0, 0.0, 0.0], "limit": 400});
    let response = server.call(
        "POST",
        "/collections/c/points/search/batch",
        Some(&json!({"searches": vec![search; 3]})),
    );
    rejected(&server, response, 400, "1200 results in all");
    let query = json!({"query": [1.0, 0.0, 0.0], "limit": 500, "offset": 1});
    let response = server.call(
        "POST",
        "/collections/c/points/query/batch",
        Some(&json!({"searches": vec![query; 2]})),
    );
    rejected(&server, response, 400, "maximum of 1000 per batch");
    // Three levels of filter pass, four are refused, wherever the filter is.
    let mut filter = json!({"must": [{"has_id": [1]}]});
    for _ in 1..3 {
        filter = json!({"must": [filter]});
    }
    let response = server.call(
        "POST",
        "/collections/c/points/count",
        Some(&json!({ "filter": filter })),
    );
    assert_eq!(response.0, 200, "{}", response.1);
    let deeper = json!({"should": [filter]});
    for (path, body) in [
        ("count", json!({ "filter": deeper })),
        ("scroll", json!({ "filter": deeper })),
        ("query", json!({"query": [1.0, 0.0, 0.0], "filter": deeper})),
        ("delete", json!({ "filter": deeper })),
    ] {
        let response = server.call(
            "POST",
            &format!("/collections/c/points/{path}"),
            Some(&body),
        );
        assert_eq!(response.1["status"]["code"], "limit_exceeded", "{path}");
        rejected(&server, response, 400, "limits.max_filter_depth");
    }
    let response = server.call(
        "POST",
        "/collections/c/points/scroll",
        Some(&json!({"limit": 10001})),
    );
    rejected(&server, response, 400, "maximum of 10000");
}

#[test]
fn bad_filters_ids_and_routes_are_4xx() {
    let (_dir, server) = fixture();
    let response = server.call(
        "POST",
        "/collections/c/points/query",
        Some(&json!({"query": [1.0, 0.0, 0.0], "filter": {"must": [{"key": "tag"}]}})),
    );
    rejected(&server, response, 400, "filter.must[0]");
    let response = server.call("GET", "/collections/c/points/not-an-id", None);
    rejected(&server, response, 400, "point id");
    let response = server.call("GET", "/collections/c/points/77", None);
    rejected(&server, response, 404, "77");
    let response = server.call("GET", "/nowhere", None);
    rejected(&server, response, 404, "/nowhere");
}

#[test]
fn a_batch_with_one_bad_point_commits_nothing() {
    let (_dir, server) = fixture();
    let mixed =
        json!({"points": [{"id": 10, "vector": [1.0, 1.0, 1.0]}, {"id": 11, "vector": [1.0]}]});
    let response = server.call("PUT", "/collections/c/points?wait=true", Some(&mixed));
    rejected(&server, response, 400, "points[1].vector");
    assert_eq!(server.call("GET", "/collections/c/points/10", None).0, 404);
}

/// A delete by filter that matches more points than one write may hold
/// (`collection::DELETE_BATCH`, 10,000) deletes them in several writes, all of them before it
/// answers with `wait=true`: nothing matching is left, and the rest is untouched.
#[test]
fn a_delete_by_filter_of_many_points_goes_in_bounded_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("many", 2, "Euclid", json!({}));
    let mut last_write = 0;
    for batch in 0..5u64 {
        let points: Vec<Value> = (batch * 5_000..(batch + 1) * 5_000)
            .map(|i| json!({"id": i, "vector": [i as f32, 1.0], "payload": {"odd": i % 2 == 1}}))
            .collect();
        last_write = server.ok(
            "PUT",
            "/collections/many/points?wait=true",
            Some(&json!({ "points": points })),
        )["operation_id"]
            .as_u64()
            .unwrap();
    }
    let everything_but =
        |keep: u64| json!({"filter": {"must_not": [{"has_id": (0..keep).collect::<Vec<_>>()}]}});
    // 24,990 matches: three writes.
    let answer = server.ok(
        "POST",
        "/collections/many/points/delete?wait=true",
        Some(&everything_but(10)),
    );
    assert_eq!(answer["status"], "completed", "{answer}");
    // One partition: the operation id is its log position, three writes on.
    assert_eq!(answer["operation_id"], last_write + 3, "{answer}");
    let count = server.ok(
        "POST",
        "/collections/many/points/count",
        Some(&json!({"exact": true})),
    );
    assert_eq!(count["count"], 10);
    let hits = server.ok(
        "POST",
        "/collections/many/points/query",
        Some(&json!({"query": [30000.0, 1.0], "limit": 3})),
    );
    assert_eq!(super::harness::ids(&hits), vec![9, 8, 7]);
}
