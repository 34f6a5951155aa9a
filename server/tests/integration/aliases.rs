//! Aliases (`POST /collections/aliases`, `GET /aliases`): a name that reads and writes the
//! collection it names, switched atomically, kept across a `kill -9`.

use serde_json::{json, Value};

use crate::harness::{ids, Server};

fn server() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for (name, id) in [("a", 1u64), ("b", 2)] {
        server.create(name, 2, "Euclid", json!({}));
        let points = json!({"points": [{"id": id, "vector": [1.0, 0.0]}]});
        server.ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            Some(&points),
        );
    }
    (dir, server)
}

fn aliases(server: &Server, actions: Value) -> (u16, Value) {
    server.call(
        "POST",
        "/collections/aliases",
        Some(&json!({ "actions": actions })),
    )
}

fn nearest(server: &Server, name: &str) -> Vec<u64> {
    let query = json!({"query": [1.0, 0.0], "limit": 5});
    ids(&server.ok(
        "POST",
        &format!("/collections/{name}/points/query"),
        Some(&query),
    ))
}

#[test]
fn an_alias_serves_its_collection_and_switches_atomically() {
    let (_dir, mut server) = server();
    let (status, _) = aliases(
        &server,
        json!([{"create_alias": {"collection_name": "a", "alias_name": "prod"}}]),
    );
    assert_eq!(status, 200);
    assert_eq!(nearest(&server, "prod"), [1]);
    // Writes through the alias land in the collection.
    let more = json!({"points": [{"id": 11, "vector": [1.0, 0.1]}]});
    server.ok("PUT", "/collections/prod/points?wait=true", Some(&more));
    assert_eq!(nearest(&server, "a"), [1, 11]);
    assert_eq!(
        server.ok("GET", "/aliases", None)["aliases"],
        json!([{"alias_name": "prod", "collection_name": "a"}])
    );
    assert_eq!(
        server.ok("GET", "/collections/b/aliases", None)["aliases"],
        json!([])
    );

    // Switch in one request: delete and create, then rename.
    let (status, _) = aliases(
        &server,
        json!([{"delete_alias": {"alias_name": "prod"}},
               {"create_alias": {"collection_name": "b", "alias_name": "prod"}}]),
    );
    assert_eq!(status, 200);
    assert_eq!(nearest(&server, "prod"), [2]);
    let (status, _) = aliases(
        &server,
        json!([{"rename_alias": {"old_alias_name": "prod", "new_alias_name": "live"}}]),
    );
    assert_eq!(status, 200);
    assert_eq!(nearest(&server, "live"), [2]);
    assert_eq!(server.call("GET", "/collections/prod", None).0, 404);

    server.kill9();
    server.restart();
    assert_eq!(nearest(&server, "live"), [2]);
    assert_eq!(
        server.ok("GET", "/collections/live/aliases", None)["aliases"],
        json!([{"alias_name": "live", "collection_name": "b"}])
    );
    // A collection's aliases go with it.
    server.ok("DELETE", "/collections/b", None);
    assert_eq!(server.ok("GET", "/aliases", None)["aliases"], json!([]));
}

#[test]
fn alias_changes_that_cannot_all_be_made_make_none() {
    let (_dir, server) = server();
    let create = |alias: &str, collection: &str| json!({"create_alias": {"collection_name": collection, "alias_name": alias}});
    for (actions, status, needle) in [
        (
            json!([create("x", "missing")]),
            404,
            "collection `missing` not found",
        ),
        (json!([create("b", "a")]), 409, "`b` is a collection"),
        (
            json!([create("x", "a"), create("x", "b")]),
            409,
            "alias `x` already exists",
        ),
        (
            json!([{"delete_alias": {"alias_name": "nope"}}]),
            404,
            "alias `nope` not found",
        ),
        (
            json!([create("x", "a"), {"rename_alias": {"old_alias_name": "y",
                                                     "new_alias_name": "z"}}]),
            404,
            "`y`",
        ),
        (json!([create(".x", "a")]), 400, "collection name"),
        (json!([{"switch_alias": {}}]), 400, "switch_alias"),
    ] {
        let (got, body) = aliases(&server, actions.clone());
        assert_eq!(got, status, "{actions} -> {body}");
        let message = body["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(needle), "{actions}: {message}");
    }
    assert_eq!(server.ok("GET", "/aliases", None)["aliases"], json!([]));
    // A collection cannot take an alias's name.
    let (status, _) = aliases(&server, json!([create("prod", "a")]));
    assert_eq!(status, 200);
    let body = json!({"vectors": {"size": 2, "distance": "Euclid"}});
    let (status, answer) = server.call("PUT", "/collections/prod", Some(&body));
    assert_eq!(status, 409, "{answer}");
}
