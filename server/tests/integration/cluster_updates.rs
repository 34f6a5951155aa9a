//! Payload updates, vector updates and deletions, and upserts with `update_filter` on a
//! cluster of three real nodes, with the collection in one replicated partition (every node
//! writes it, by compare-and-set) and in two (one writer, the other nodes forwarding to it):
//! each write is taken through any node, every node then reads the same points, and
//! read-modify-writes racing through different nodes lose nothing.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::harness::Server;
use crate::peers::{agreed_leader, start_n_nodes, wait_count, wait_for_records};

/// Points in the collection at the start.
const N: u64 = 30;

fn point(i: u64) -> Value {
    json!({
        "id": i,
        "vector": {
            "dense": [i as f32, 1.0, 0.0, 0.5],
            "image": [1.0, i as f32],
            "text": {"indices": [i % 5], "values": [1.0]},
        },
        "payload": {"group": i % 2, "tag": "old"},
    })
}

/// Three nodes and collection `u` (`extra` merged into its creation), loaded with `N` points.
fn cluster(root: &std::path::Path, extra: Value) -> Vec<Server> {
    let nodes = start_n_nodes(root, 3, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    let mut body = json!({
        "vectors": {
            "dense": {"size": 4, "distance": "Euclid"},
            "image": {"size": 2, "distance": "Dot"},
        },
        "sparse_vectors": {"text": {}},
        "replication_factor": 3,
    });
    for (key, value) in extra.as_object().unwrap() {
        body[key] = value.clone();
    }
    nodes[0].ok("PUT", "/collections/u", Some(&body));
    for node in &nodes {
        wait_count(node, "u", 0);
    }
    let points: Vec<Value> = (0..N).map(point).collect();
    nodes[1].ok(
        "PUT",
        "/collections/u/points?wait=true",
        Some(&json!({ "points": points })),
    );
    nodes
}

/// A write through `node`, tried again while it answers 503 (the retry a client makes when
/// other writes keep coming in between, or a leader changes); returns how many were 503.
fn write(node: &Server, method: &str, path: &str, body: &Value) -> usize {
    for attempt in 0..20 {
        let (status, answer) = node.call(
            method,
            &format!("/collections/u/points{path}?wait=true"),
            Some(body),
        );
        match status {
            200 => {
                assert_eq!(answer["result"]["status"], "completed", "{answer}");
                return attempt;
            }
            503 => std::thread::sleep(std::time::Duration::from_millis(20)),
            _ => panic!("{method} {path}: {status} {answer}"),
        }
    }
    panic!("{method} {path}: 503 twenty times");
}

/// Every point as `node` reads it with a linearizable read, by id.
fn read_all(node: &Server, ids: &[u64]) -> BTreeMap<u64, Value> {
    let got = node.ok(
        "POST",
        "/collections/u/points?consistency=majority",
        Some(&json!({"ids": ids, "with_payload": true, "with_vector": true})),
    );
    got.as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r.clone()))
        .collect()
}

fn updates_through_every_node(extra: Value) {
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), extra);
    let group = |g: u64| json!({"must": [{"key": "group", "match": {"value": g}}]});
    let old_tag = json!({"must": [{"key": "tag", "match": {"value": "old"}}]});

    // What each point should hold afterwards: (payload, dense vector, has image).
    let mut want: BTreeMap<u64, (Value, Value, bool)> = (0..N)
        .map(|i| {
            let p = point(i);
            (
                i,
                (p["payload"].clone(), p["vector"]["dense"].clone(), true),
            )
        })
        .collect();

    write(
        &nodes[2],
        "POST",
        "/payload",
        &json!({"payload": {"tag": "new", "n": 1}, "points": [1, 2]}),
    );
    for i in [1, 2] {
        want.get_mut(&i).unwrap().0 = json!({"group": i % 2, "tag": "new", "n": 1});
    }
    // Every point of group 0 (including 2) gets a new payload where `m` was.
    write(
        &nodes[0],
        "PUT",
        "/payload",
        &json!({"payload": {"x": 7}, "key": "m", "filter": group(0)}),
    );
    for i in (0..N).step_by(2) {
        want.get_mut(&i).unwrap().0["m"] = json!({"x": 7});
    }
    write(
        &nodes[1],
        "POST",
        "/payload/delete",
        &json!({"keys": ["n"], "points": [1]}),
    );
    want.get_mut(&1).unwrap().0 = json!({"group": 1, "tag": "new"});
    write(&nodes[2], "POST", "/payload/clear", &json!({"points": [3]}));
    want.get_mut(&3).unwrap().0 = json!({});
    // Group 1 without 3, whose payload is gone.
    write(
        &nodes[0],
        "POST",
        "/vectors/delete",
        &json!({"vector": ["image"], "filter": group(1)}),
    );
    for i in (1..N).step_by(2).filter(|i| *i != 3) {
        want.get_mut(&i).unwrap().2 = false;
    }
    // Only where the tag is still old: 5 changes, 1 does not.
    write(
        &nodes[1],
        "PUT",
        "/vectors",
        &json!({
            "points": [
                {"id": 5, "vector": {"dense": [9.0, 9.0, 9.0, 9.0]}},
                {"id": 1, "vector": {"dense": [8.0, 8.0, 8.0, 8.0]}},
            ],
            "update_filter": old_tag,
        }),
    );
    want.get_mut(&5).unwrap().1 = json!([9.0, 9.0, 9.0, 9.0]);
    // Replaced where the tag is old (7), kept where not (2), inserted where absent (100).
    let replacement = |id: u64| json!({"id": id, "vector": {"dense": [0.0, 0.0, 0.0, 1.0]}, "payload": {"tag": "upserted"}});
    write(
        &nodes[2],
        "PUT",
        "",
        &json!({"points": [replacement(7), replacement(2), replacement(100)], "update_filter": old_tag}),
    );
    for i in [7, 100] {
        want.insert(
            i,
            (
                json!({"tag": "upserted"}),
                json!([0.0, 0.0, 0.0, 1.0]),
                false,
            ),
        );
    }

    let ids: Vec<u64> = want.keys().copied().collect();
    for (k, node) in nodes.iter().enumerate() {
        let got = read_all(node, &ids);
        for (id, (payload, dense, image)) in &want {
            let record = &got[id];
            let payload_got = if record["payload"].is_null() {
                json!({})
            } else {
                record["payload"].clone()
            };
            assert_eq!(&payload_got, payload, "node {k}, point {id}: {record}");
            assert_eq!(&record["vector"]["dense"], dense, "node {k}, point {id}");
            assert_eq!(
                record["vector"].get("image").is_some(),
                *image,
                "node {k}, point {id}: {record}"
            );
        }
        let with_image = json!({"must": [{"has_vector": "image"}]});
        let count = node.ok(
            "POST",
            "/collections/u/points/count?consistency=majority",
            Some(&json!({"filter": with_image, "exact": true})),
        )["count"]
            .as_u64()
            .unwrap();
        assert_eq!(
            count,
            want.values().filter(|w| w.2).count() as u64,
            "node {k}"
        );
    }
}

/// Three clients, each through its own node, set a payload key of their own on every point,
/// a new key each round, while a fourth replaces the points' dense vectors: every key of every
/// round and the last vector are on every point, through every node. (A read-modify-write that
/// read a point before another write of it and wrote after would drop that write's key.)
fn racing_rewrites_lose_nothing(extra: Value) {
    let root = tempfile::tempdir().unwrap();
    let nodes = cluster(root.path(), extra);
    let ids: Vec<u64> = (0..N).collect();
    let rounds = 6u64;
    let retried = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for (t, node) in nodes.iter().enumerate() {
            let (ids, retried) = (&ids, &retried);
            scope.spawn(move || {
                for round in 0..rounds {
                    let key = format!("k{t}_{round}");
                    let body = json!({"payload": {key: round}, "points": ids});
                    let n = write(node, "POST", "/payload", &body);
                    retried.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
            });
        }
        let (ids, retried, node) = (&ids, &retried, &nodes[0]);
        scope.spawn(move || {
            for round in 0..rounds {
                let points: Vec<Value> = ids
                    .iter()
                    .map(|i| json!({"id": i, "vector": {"dense": [round as f32, 0.0, 0.0, 0.0]}}))
                    .collect();
                let n = write(node, "PUT", "/vectors", &json!({ "points": points }));
                retried.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        });
    });
    eprintln!(
        "racing rewrites: {} requests answered 503 and were retried",
        retried.into_inner()
    );
    let last = rounds - 1;
    for (k, node) in nodes.iter().enumerate() {
        for (id, record) in read_all(node, &ids) {
            let payload = &record["payload"];
            for (t, round) in (0..3).flat_map(|t| (0..rounds).map(move |r| (t, r))) {
                let key = format!("k{t}_{round}");
                assert_eq!(
                    payload[&key], round,
                    "node {k}, point {id}: {key} in {record}"
                );
            }
            assert_eq!(payload["tag"], "old", "node {k}, point {id}: {record}");
            assert_eq!(
                record["vector"]["dense"],
                json!([last as f32, 0.0, 0.0, 0.0]),
                "node {k}, point {id}"
            );
            assert!(record["vector"].get("image").is_some(), "{record}");
        }
    }
}

#[test]
fn a_replicated_collection_takes_updates_through_every_node() {
    updates_through_every_node(json!({}));
}

#[test]
fn a_partitioned_cluster_collection_takes_updates_through_every_node() {
    updates_through_every_node(json!({"partitions": 2}));
}

#[test]
fn racing_rewrites_of_a_replicated_collection_lose_nothing() {
    racing_rewrites_lose_nothing(json!({}));
}

#[test]
fn racing_rewrites_of_a_partitioned_cluster_collection_lose_nothing() {
    racing_rewrites_lose_nothing(json!({"partitions": 2}));
}
