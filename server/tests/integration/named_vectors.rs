//! Qdrant's map form of `vectors`: LangChain's `{"": …}` and a collection whose one vector has
//! a name, as frameworks create them; several named vectors are refused with a message.

use serde_json::{json, Value};

use crate::harness::Server;

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    (dir, server)
}

fn points(name: Option<&str>) -> Value {
    let points: Vec<Value> = (0..20u64)
        .map(|i| {
            let v = vec![i as f32, 1.0, (i % 3) as f32];
            let vector = match name {
                Some(name) => json!({ name: v }),
                None => json!(v),
            };
            json!({"id": i, "vector": vector, "payload": {"i": i}})
        })
        .collect();
    json!({ "points": points })
}

fn error(server: &Server, method: &str, path: &str, body: &Value) -> String {
    let (status, json) = server.call(method, path, Some(body));
    assert_eq!(status, 400, "{method} {path} {body} -> {status}: {json}");
    json["status"]["error"].as_str().unwrap().to_owned()
}

#[test]
fn a_named_vector_is_written_queried_and_returned_by_its_name() {
    let (_dir, server) = server();
    let create = json!({"vectors": {"dense": {"size": 3, "distance": "Euclid"}}});
    server.ok("PUT", "/collections/c", Some(&create));
    let info = server.ok("GET", "/collections/c", None);
    assert_eq!(
        info["config"]["params"]["vectors"],
        json!({"dense": {"size": 3, "distance": "Euclid"}})
    );

    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(Some("dense"))),
    );
    let plain = error(&server, "PUT", "/collections/c/points", &points(None));
    assert!(plain.contains("named `dense`"), "{plain}");
    let other = error(&server, "PUT", "/collections/c/points", &points(Some("x")));
    assert!(other.contains("not `x`"), "{other}");

    let query = json!({"query": [4.0, 1.0, 1.0], "using": "dense", "limit": 1,
                       "with_vector": true});
    let hits = server.ok("POST", "/collections/c/points/query", Some(&query));
    assert_eq!(hits["points"][0]["id"], 4);
    assert_eq!(
        hits["points"][0]["vector"],
        json!({"dense": [4.0, 1.0, 1.0]})
    );
    let unnamed = json!({"query": [4.0, 1.0, 1.0]});
    let missing = error(&server, "POST", "/collections/c/points/query", &unnamed);
    assert!(missing.contains("using"), "{missing}");
    let by_name = json!({"ids": [4], "with_vector": ["dense"]});
    let got = server.ok("POST", "/collections/c/points", Some(&by_name));
    assert_eq!(got[0]["vector"], json!({"dense": [4.0, 1.0, 1.0]}));
    let wrong = json!({"ids": [4], "with_vector": ["sparse"]});
    let refused = error(&server, "POST", "/collections/c/points", &wrong);
    assert!(refused.contains("with_vector"), "{refused}");
    // The legacy search names its vector inside `vector`.
    let search = json!({"vector": {"name": "dense", "vector": [4.0, 1.0, 1.0]}, "limit": 1});
    let hits = server.ok("POST", "/collections/c/points/search", Some(&search));
    assert_eq!(hits[0]["id"], 4);
}

/// LangChain's dense store: `{"": …}` and an empty `sparse_vectors`; lists come back plain.
#[test]
fn the_unnamed_vector_in_map_form_reads_and_writes_both_ways() {
    let (_dir, server) = server();
    let create = json!({"vectors": {"": {"size": 3, "distance": "Cosine"}},
                        "sparse_vectors": {}});
    server.ok("PUT", "/collections/c", Some(&create));
    let info = server.ok("GET", "/collections/c", None);
    assert_eq!(
        info["config"]["params"]["vectors"],
        json!({"": {"size": 3, "distance": "Cosine"}})
    );
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(Some(""))),
    );
    server.ok(
        "PUT",
        "/collections/c/points?wait=true",
        Some(&points(None)),
    );
    let query = json!({"query": {"nearest": [4.0, 1.0, 1.0]}, "using": "", "limit": 1,
                       "with_vector": true});
    let hits = server.ok("POST", "/collections/c/points/query", Some(&query));
    assert_eq!(hits["points"][0]["id"], 4);
    assert!(hits["points"][0]["vector"].is_array(), "{hits}");
}

#[test]
fn several_named_vectors_are_refused_naming_them() {
    let (_dir, server) = server();
    let create = json!({"vectors": {"text-dense": {"size": 3, "distance": "Cosine"},
                                    "image": {"size": 4, "distance": "Dot"}}});
    let message = error(&server, "PUT", "/collections/c", &create);
    assert!(
        message.contains("`image`") && message.contains("`text-dense`"),
        "{message}"
    );
    let none = json!({"vectors": {}});
    let message = error(&server, "PUT", "/collections/c", &none);
    assert!(message.contains("at least one vector"), "{message}");
    assert_eq!(
        server.ok("GET", "/collections/c/exists", None)["exists"],
        false
    );
}

/// `GET /` answers in Qdrant's shape, which Qdrant's clients read for their version check.
#[test]
fn the_root_reports_the_qdrant_version_it_follows_without_an_envelope() {
    let (_dir, server) = server();
    let (status, root) = server.call("GET", "/", None);
    assert_eq!(status, 200);
    assert_eq!(root["version"], cairn_api::QDRANT_API_VERSION);
    assert_eq!(root["cairn_version"], env!("CARGO_PKG_VERSION"));
    assert!(root.get("result").is_none(), "{root}");
}
