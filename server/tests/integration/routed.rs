//! Partitioned collections on peer nodes (issue #22): Pyramid's routing in the cluster's
//! metadata, one node writing the collection while every node routes its queries. Four nodes,
//! siftsmall in four partitions of three replicas (so each node serves one partition through
//! the others): written through every node, trained and re-homed by the writer, queried
//! through every node with routed recall against exact ground truth; then the writer (the
//! metadata leader) is SIGKILLed while writes go on through another node, and afterwards every
//! acknowledged point is there exactly once, bit for bit, on every node.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_index::dataset::{load_dataset, shared_data_dir};
use serde_json::{json, Value};

use super::harness::Server;
use super::partitions::routed_queries;
use super::peers::{agreed_leader, start_n_nodes, wait_count, wait_for_records};

const DIM: usize = 128;

/// Upserts rows `first..first + rows.len() / DIM` of `data` through `node` in batches,
/// retrying a batch that fails (the writer changing hands answers 503 for a moment, as a
/// client's SDK would retry it). Panics if a batch is not acknowledged within a minute.
/// Counts the acknowledged batches in `acknowledged`.
fn upsert_retrying(
    node: &Server,
    name: &str,
    data: &[f32],
    first: u64,
    batch: usize,
    acknowledged: &AtomicUsize,
) {
    for (b, chunk) in data.chunks(DIM * batch).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(DIM)
            .enumerate()
            .map(|(i, v)| {
                let id = first + (b * batch + i) as u64;
                json!({"id": id, "vector": v, "payload": {"bucket": id % 10}})
            })
            .collect();
        let body = json!({ "points": points });
        let started = Instant::now();
        loop {
            let (status, answer) = node.call(
                "PUT",
                &format!("/collections/{name}/points?wait=true"),
                Some(&body),
            );
            if status == 200 {
                acknowledged.fetch_add(1, Ordering::Relaxed);
                break;
            }
            assert!(
                status >= 500 && started.elapsed() < Duration::from_secs(60),
                "batch {b} from {first} refused: {status} {answer}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Waits until `node` reports the collection routed at routing `version` or later; its info.
fn wait_routed_at(node: &Server, name: &str, version: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (status, info) = node.call("GET", &format!("/collections/{name}"), None);
        let routing = &info["result"]["routing"];
        if status == 200
            && routing["phase"] == "routed"
            && routing["version"].as_u64() >= Some(version)
            && routing["training_due"] == false
        {
            return info["result"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "collection {name} not routed at version {version} in time: {status} {routing}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `node` reports the collection routed with no training due, the same routing
/// version two seconds apart (a training that is about to start has shown itself by then);
/// its info.
fn wait_settled(node: &Server, name: &str) -> Value {
    let mut seen = wait_routed_at(node, name, 1);
    loop {
        std::thread::sleep(Duration::from_secs(2));
        let now = wait_routed_at(node, name, 1);
        if now["routing"]["version"] == seen["routing"]["version"] {
            return now;
        }
        seen = now;
    }
}

/// Every point of the collection through `node`, by id, with its vector.
fn scrolled(node: &Server, name: &str) -> Vec<(u64, Vec<f32>)> {
    let page = node.ok(
        "POST",
        &format!("/collections/{name}/points/scroll"),
        Some(&json!({"limit": 10_000, "with_vector": true})),
    );
    page["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().unwrap(),
                serde_json::from_value(p["vector"].clone()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_partitioned_collection_is_routed_from_every_node_and_outlives_its_writer() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let n = data.base.len();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_n_nodes(root.path(), 4, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3, 4]);
    wait_for_records(&all, &nodes);
    nodes[2].create(
        "sift",
        DIM,
        "Euclid",
        json!({"partitions": 4, "replication_factor": 3}),
    );
    for node in &nodes {
        wait_count(node, "sift", 0);
    }

    // The first 6,000 points, a batch through each node in turn: most writes reach the
    // writer from another node.
    let first = 6_000;
    for (k, chunk) in data.base.data[..DIM * first].chunks(DIM * 500).enumerate() {
        let node = &nodes[k % nodes.len()];
        upsert_retrying(
            node,
            "sift",
            chunk,
            (k * 500) as u64,
            500,
            &AtomicUsize::new(0),
        );
    }
    // Trained by the writer once 1,024 points are in, and again each time the collection has
    // grown four times over since; when the first training ran late (a busy machine), there
    // is no second one by 6,000 points. Every node reads the routing from the metadata.
    let info = wait_settled(&nodes[0], "sift");
    let version = info["routing"]["version"].as_u64().unwrap();
    for node in &nodes {
        let routing = wait_routed_at(node, "sift", version)["routing"].clone();
        assert_eq!(routing["version"], version, "{routing}");
    }

    // Writes go on through another node while the writer, the metadata leader, is SIGKILLed.
    let (leader, _) = agreed_leader(&all, &[1, 2, 3, 4]);
    let rest = &data.base.data[DIM * first..];
    let victim_at = (leader - 1) as usize;
    let mut victim = nodes.remove(victim_at);
    let batches = rest.len().div_ceil(DIM * 250);
    let acknowledged = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let through = &nodes[0];
        let acknowledged = &acknowledged;
        let writes = scope
            .spawn(move || upsert_retrying(through, "sift", rest, first as u64, 250, acknowledged));
        // Killed a few batches in, with most still to come.
        while acknowledged.load(Ordering::Relaxed) < 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        victim.kill9();
        let at_kill = acknowledged.load(Ordering::Relaxed);
        assert!(at_kill < batches, "the writes ended before the kill");
        eprintln!("writer (node {leader}) killed after {at_kill} of {batches} batches");
        writes.join().unwrap();
    });
    let survivors: Vec<&Server> = nodes.iter().collect();
    let others: Vec<u64> = (1..=4).filter(|id| *id != leader).collect();
    agreed_leader(&survivors, &others);

    // Every acknowledged point exactly once, bit for bit, through every surviving node; and
    // routed queries keep their recall.
    for node in &survivors {
        let info = wait_routed_at(node, "sift", version);
        assert_eq!(info["points_count"], n as u64, "{}", info["routing"]);
        let points = scrolled(node, "sift");
        assert_eq!(points.len(), n);
        for (i, (id, vector)) in points.iter().enumerate() {
            assert_eq!(*id, i as u64);
            assert_eq!(vector.as_slice(), data.base.row(i), "point {i} intact");
        }
        let routed = routed_queries(node, "sift", &data, 4);
        eprintln!(
            "routed cluster through {}: recall@10 {:.4}, partitions touched {:.2} of 4",
            node.url(""),
            routed.recall,
            routed.mean_touched
        );
        assert!(routed.recall >= 0.95, "routed recall@10 {}", routed.recall);
        assert!(routed.mean_touched < 4.0, "{}", routed.mean_touched);
    }

    // The killed node comes back and agrees.
    victim.restart();
    let back = &victim;
    wait_routed_at(back, "sift", version);
    let started = Instant::now();
    while scrolled(back, "sift").len() != n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "node {leader} did not catch up"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The partitions node `node` holds a replica of, from `GET /collections/{name}/cluster`.
fn partitions_on(via: &Server, name: &str, node: u64) -> Vec<u64> {
    let cluster = via.ok("GET", &format!("/collections/{name}/cluster"), None);
    cluster["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["replicas"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["peer_id"].as_u64() == Some(node))
        })
        .map(|p| p["shard_id"].as_u64().unwrap())
        .collect()
}

/// Partial answers on peer nodes: siftsmall's first 5,000 points in four partitions of one
/// replica each over three nodes. Once a node is SIGKILLed, the partitions it held have no
/// live replica: a query through a survivor that the routing sends to one of them answers
/// from the others with a `warning` and coverage below 1 (the default), or 503 with
/// `allow_partial: false`; a query routed elsewhere is whole. The node back, every answer is
/// whole again.
#[test]
fn a_partition_without_a_live_replica_gives_partial_answers_or_503() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_n_nodes(root.path(), 3, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    nodes[0].create(
        "part",
        DIM,
        "Euclid",
        json!({"partitions": 4, "replication_factor": 1}),
    );
    for node in &nodes {
        wait_count(node, "part", 0);
    }
    let n = 5_000;
    upsert_retrying(
        &nodes[0],
        "part",
        &data.base.data[..DIM * n],
        0,
        500,
        &AtomicUsize::new(0),
    );
    for node in &nodes {
        wait_routed_at(node, "part", 1);
    }

    // A node that is not the metadata leader goes; its partitions have no replica left.
    let (leader, _) = agreed_leader(&all, &[1, 2, 3]);
    let victim = (1..=3u64).find(|id| *id != leader).unwrap();
    let lost = partitions_on(&nodes[0], "part", victim);
    assert!(!lost.is_empty(), "node {victim} holds no partition");
    let mut gone = nodes.remove(usize::try_from(victim - 1).unwrap());
    gone.kill9();
    let through = &nodes[0];
    let query = |q: &[f32], allow_partial: bool| {
        through.call(
            "POST",
            "/collections/part/points/query",
            Some(&json!({"query": q, "limit": 10, "explain": true,
                         "params": {"allow_partial": allow_partial}})),
        )
    };
    let (mut partial, mut whole) = (0, 0);
    for q in data.queries.rows().take(50) {
        let (status, body) = query(q, true);
        assert_eq!(status, 200, "{body}");
        let explain = &body["result"]["explain"]["partitions"];
        let touched: Vec<u64> = serde_json::from_value(explain["touched"].clone())
            .unwrap_or_else(|e| panic!("{e}: {body}"));
        let coverage = explain["coverage"].as_f64().unwrap();
        if touched.iter().any(|p| lost.contains(p)) {
            partial += 1;
            assert!(coverage < 1.0, "{body}");
            assert!(body["result"]["warning"].is_string(), "{body}");
            let (status, refused) = query(q, false);
            assert_eq!(status, 503, "{refused}");
        } else {
            whole += 1;
            assert_eq!(coverage, 1.0, "{body}");
            assert!(body["result"]["warning"].is_null(), "{body}");
        }
    }
    eprintln!(
        "partitions {lost:?} lost with node {victim}: {partial} partial answers, {whole} whole"
    );
    assert!(partial > 0, "no query was routed to partitions {lost:?}");

    gone.restart();
    let started = Instant::now();
    for q in data.queries.rows().take(50) {
        loop {
            let (status, body) = query(q, false);
            if status == 200 {
                assert_eq!(body["result"]["explain"]["partitions"]["coverage"], 1.0);
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "partitions {lost:?} did not come back: {body}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
