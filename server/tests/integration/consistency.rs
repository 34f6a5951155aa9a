//! Read consistency (issue #22, §6 of `docs/design/consensus.md`): a read at the default level
//! may trail the latest acknowledged writes by a moment; one at `consistency=majority`, or
//! with a write's `read_token` in `read_after`, sees them, whichever node serves it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::Server;
use super::peers::{nodes_with_collection, partition_leader, SECRET};

/// One point through `node`, acknowledged with `wait`; returns the write's `read_token`.
fn write_point(node: &Server, name: &str, id: u64, wait: bool) -> String {
    let result = node.ok(
        "PUT",
        &format!("/collections/{name}/points?wait={wait}"),
        Some(&json!({"points": [{"id": id, "vector": [id as f32, 1.0, 0.5, 0.25]}]})),
    );
    result["read_token"]
        .as_str()
        .unwrap_or_else(|| panic!("a write answers its read token: {result}"))
        .to_owned()
}

/// `GET /collections/{name}/points/{id}` with `query`: the status and the body.
fn get_point(node: &Server, name: &str, id: u64, query: &str) -> (u16, Value) {
    node.call(
        "GET",
        &format!("/collections/{name}/points/{id}{query}"),
        None,
    )
}

/// The node whose replica trails: its links to the partition's leader are cut (both ways:
/// it neither sends to the leader nor takes anything from it), while the leader and the third
/// replica keep a majority and go on committing.
#[test]
fn reads_at_majority_or_after_a_token_see_writes_a_lagging_replica_lacks() {
    let root = tempfile::tempdir().unwrap();
    let nodes = nodes_with_collection(
        root.path(),
        &[("CAIRN__CLUSTER__FAULT_INJECTION", "true")],
        "fresh",
        3,
    );
    write_point(&nodes[0], "fresh", 1, true);
    let (leader, _) = partition_leader(&nodes[0], "fresh", 0);
    let lagging = (1..=3u64).find(|n| *n != leader).unwrap();
    let (leader_node, lagging_node) = (&nodes[leader as usize - 1], &nodes[lagging as usize - 1]);
    let internal = |id: u64| {
        nodes[0].ok("GET", "/cluster", None)["peers"][id.to_string()]["uri"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let cut = |ids: &[u64]| {
        let answer = reqwest::blocking::Client::new()
            .put(format!("{}/internal/faults", internal(lagging)))
            .header("x-cairn-cluster-key", SECRET)
            .json(&json!({ "cut": ids }))
            .send()
            .unwrap();
        assert_eq!(answer.status().as_u16(), 200);
    };
    cut(&[leader]);

    // Acknowledged by the leader and the third replica; the lagging one never hears of it.
    let token = write_point(leader_node, "fresh", 7, true);
    let (status, body) = get_point(lagging_node, "fresh", 7, "");
    assert_eq!(
        status, 404,
        "the default level reads the trailing replica, which lacks the write: {body}"
    );

    // Both stronger levels see it through the same node (served by a replica that has it).
    for query in [
        "?consistency=majority".to_owned(),
        "?consistency=2".to_owned(),
        format!("?read_after={token}"),
    ] {
        let (status, body) = get_point(lagging_node, "fresh", 7, &query);
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(body["result"]["id"], 7, "{query}: {body}");
    }
    let found = lagging_node.ok(
        "POST",
        &format!("/collections/fresh/points/query?read_after={token}"),
        Some(&json!({"query": [7.0, 1.0, 0.5, 0.25], "limit": 1})),
    );
    assert_eq!(found["points"][0]["id"], 7, "{found}");
    let counted = lagging_node.ok(
        "POST",
        "/collections/fresh/points/count?consistency=majority",
        Some(&json!({"exact": true})),
    );
    assert_eq!(counted["count"], 2, "{counted}");

    // Values it cannot mean are refused, naming the parameter.
    for (query, names) in [
        ("?consistency=most", "consistency"),
        ("?consistency=0", "consistency"),
        ("?read_after=zz", "read_after"),
        ("?read_after=4:1", "partition 4"),
    ] {
        let (status, body) = get_point(lagging_node, "fresh", 7, query);
        assert_eq!(status, 400, "{query}: {body}");
        let message = body["status"]["error"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{query}: {message}");
    }

    // Healed, the replica catches up and the default level sees the write too.
    cut(&[]);
    let started = Instant::now();
    while get_point(lagging_node, "fresh", 7, "").0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the healed replica never caught up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Standalone, the one copy is the latest; the levels wait for the index (a write answered
/// with `wait=false` is durable before it is searchable), and a token from elsewhere is
/// refused rather than waited on.
#[test]
fn standalone_reads_after_a_token_find_writes_not_yet_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("solo", 4, "Euclid", json!({}));
    for id in 0..200u64 {
        let token = write_point(&server, "solo", id, false);
        let found = server.ok(
            "POST",
            &format!("/collections/solo/points/query?read_after={token}"),
            Some(&json!({"query": [id as f32, 1.0, 0.5, 0.25], "limit": 1})),
        );
        assert_eq!(found["points"][0]["id"], id, "{token}: {found}");
    }
    let counted = server.ok(
        "POST",
        "/collections/solo/points/count?consistency=all",
        Some(&json!({"exact": true})),
    );
    assert_eq!(counted["count"], 200, "{counted}");
    let (status, body) = get_point(&server, "solo", 3, "?read_after=0:999999");
    assert_eq!(status, 400, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("another collection"),
        "{body}"
    );
}
