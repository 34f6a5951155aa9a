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

/// Polls `check` on `node` for up to ten seconds (a node reads the cluster's aliases again
/// every 200 ms).
fn eventually(node: &Server, what: &str, check: impl Fn(&Server) -> bool) {
    let started = std::time::Instant::now();
    while !check(node) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{what}: not within 10 s on {}",
            node.url("")
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The aliases `node` lists, as (alias, collection) pairs.
fn listed(node: &Server) -> Vec<(String, String)> {
    node.ok("GET", "/aliases", None)["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let text = |k: &str| a[k].as_str().unwrap().to_owned();
            (text("alias_name"), text("collection_name"))
        })
        .collect()
}

/// On a cluster the aliases are the cluster's: made through any node, switched atomically,
/// read through every node, never lost when several nodes change them at once, gone with
/// their collection, and still there after a node's `kill -9`.
#[test]
fn a_cluster_s_aliases_are_the_same_on_every_node() {
    use crate::peers::{nodes_with_collection, wait_count};
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "a", 3);
    nodes[1].create("b", 4, "Euclid", json!({"replication_factor": 3}));
    for node in &nodes {
        wait_count(node, "b", 0);
    }
    for (name, id) in [("a", 1u64), ("b", 2)] {
        let points = json!({"points": [{"id": id, "vector": [1.0, 0.0, 0.0, 0.0]}]});
        nodes[0].ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            Some(&points),
        );
    }
    let serves = |alias: &'static str, id: u64| {
        move |node: &Server| {
            let query = json!({"query": [1.0, 0.0, 0.0, 0.0], "limit": 5});
            let (status, body) = node.call(
                "POST",
                &format!("/collections/{alias}/points/query?consistency=majority"),
                Some(&query),
            );
            status == 200 && ids(&body["result"]) == [id]
        }
    };

    let (status, body) = aliases(
        &nodes[1],
        json!([{"create_alias": {"collection_name": "a", "alias_name": "prod"}}]),
    );
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        eventually(node, "prod names a", serves("prod", 1));
    }
    // Switched in one change through another node: no node ever serves prod from neither.
    let (status, body) = aliases(
        &nodes[2],
        json!([
            {"delete_alias": {"alias_name": "prod"}},
            {"create_alias": {"collection_name": "b", "alias_name": "prod"}},
        ]),
    );
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        eventually(node, "prod names b", serves("prod", 2));
    }
    // Refusals, as on one node.
    let (status, _) = aliases(
        &nodes[0],
        json!([{"create_alias": {"collection_name": "nope", "alias_name": "x"}}]),
    );
    assert_eq!(status, 404);
    let (status, body) = nodes[0].call(
        "PUT",
        "/collections/prod",
        Some(&json!({"vectors": {"size": 4, "distance": "Euclid"}})),
    );
    assert_eq!(status, 409, "{body}");

    // Three nodes change aliases at once, each its own: none is lost.
    std::thread::scope(|scope| {
        for (t, node) in nodes.iter().enumerate() {
            scope.spawn(move || {
                for i in 0..5 {
                    let alias = format!("n{t}_{i}");
                    let action =
                        json!([{"create_alias": {"collection_name": "a", "alias_name": alias}}]);
                    let (status, body) = aliases(node, action);
                    assert_eq!(status, 200, "{alias}: {body}");
                }
            });
        }
    });
    let mut want: Vec<(String, String)> = (0..3)
        .flat_map(|t| (0..5).map(move |i| (format!("n{t}_{i}"), "a".to_owned())))
        .collect();
    want.push(("prod".to_owned(), "b".to_owned()));
    want.sort();
    for node in &nodes {
        eventually(node, "all 16 aliases", |n| listed(n) == want);
    }

    // A node killed and restarted has them all.
    nodes[2].kill9();
    nodes[2].restart();
    eventually(&nodes[2], "all 16 aliases after kill -9", |n| {
        listed(n) == want
    });
    eventually(&nodes[2], "prod names b after kill -9", serves("prod", 2));

    // Deleting b (through one node) removes its alias on every node.
    nodes[0].ok("DELETE", "/collections/b", None);
    want.retain(|(alias, _)| alias != "prod");
    for node in &nodes {
        eventually(node, "prod gone with b", |n| listed(n) == want);
        eventually(node, "prod answers 404", |n| {
            n.call("GET", "/collections/prod", None).0 == 404
        });
    }
}
