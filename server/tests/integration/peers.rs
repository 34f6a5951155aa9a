//! Peer nodes (`cluster.role = "node"`, issue #22, being built): three real processes form the
//! cluster's metadata group over their internal ports, elect a leader, elect another when it is
//! SIGKILLed, and take the restarted node back; metadata written on any node (each node's
//! public address) goes through the leader and reaches every node. The internal API serves only callers with the
//! cluster secret, and only on its own port.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::Server;

pub(super) const SECRET: &str = "test-cluster-secret";

fn free_port() -> u16 {
    cairn_testkit::free_port().unwrap()
}

/// Three nodes, node 1 bootstrapping the group.
fn start_nodes(root: &std::path::Path) -> Vec<Server> {
    start_nodes_with(root, &[])
}

/// Three nodes with `extra` settings.
fn start_nodes_with(root: &std::path::Path, extra: &[(&str, &str)]) -> Vec<Server> {
    start_n_nodes(root, 3, extra)
}

/// `n` nodes with `extra` settings, node 1 bootstrapping the cluster.
pub(super) fn start_n_nodes(
    root: &std::path::Path,
    n: usize,
    extra: &[(&str, &str)],
) -> Vec<Server> {
    start_nodes_over(root, n, extra, "http")
}

/// `n` nodes with `extra` settings whose internal APIs speak `scheme` (`http` or `https`).
pub(super) fn start_nodes_over(
    root: &std::path::Path,
    n: usize,
    extra: &[(&str, &str)],
    scheme: &str,
) -> Vec<Server> {
    let ports: Vec<u16> = (0..n).map(|_| free_port()).collect();
    let peers = format!(
        "[{}]",
        ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("\"{}={scheme}://127.0.0.1:{port}\"", i + 1))
            .collect::<Vec<_>>()
            .join(",")
    );
    (0..n)
        .map(|i| {
            let dir = root.join(format!("node-{}", i + 1));
            std::fs::create_dir_all(&dir).unwrap();
            let id = (i + 1).to_string();
            let internal = format!("127.0.0.1:{}", ports[i]);
            let bootstrap = if i == 0 { "true" } else { "false" };
            let mut env = vec![
                ("CAIRN__CLUSTER__ROLE", "node"),
                ("CAIRN__CLUSTER__NODE_ID", id.as_str()),
                ("CAIRN__CLUSTER__PEERS", peers.as_str()),
                ("CAIRN__CLUSTER__INTERNAL_ADDR", internal.as_str()),
                ("CAIRN__CLUSTER__SECRET", SECRET),
                ("CAIRN__CLUSTER__BOOTSTRAP", bootstrap),
            ];
            env.extend_from_slice(extra);
            Server::start(&dir, &env)
        })
        .collect()
}

/// Three nodes with `extra` settings, a leader agreed and every node's record in; then the
/// collection `name` with `replication_factor` replicas, open on every node.
pub(super) fn nodes_with_collection(
    root: &std::path::Path,
    extra: &[(&str, &str)],
    name: &str,
    replication_factor: usize,
) -> Vec<Server> {
    let nodes = start_nodes_with(root, extra);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    nodes[0].create(
        name,
        4,
        "Euclid",
        json!({ "replication_factor": replication_factor }),
    );
    // Every node opens it as it applies the metadata (a moment after the create returns).
    for node in &nodes {
        wait_count(node, name, 0);
    }
    nodes
}

fn raft_info(node: &Server) -> Value {
    node.ok("GET", "/cluster", None)["raft_info"].clone()
}

/// Waits until every node in `nodes` names the same leader among them, in the same term;
/// returns (leader, term).
pub(super) fn agreed_leader(nodes: &[&Server], among: &[u64]) -> (u64, u64) {
    let started = Instant::now();
    loop {
        let infos: Vec<Value> = nodes.iter().map(|n| raft_info(n)).collect();
        let leaders: Vec<Option<u64>> = infos.iter().map(|i| i["leader"].as_u64()).collect();
        let terms: Vec<u64> = infos.iter().map(|i| i["term"].as_u64().unwrap()).collect();
        if let Some(Some(leader)) = leaders.first() {
            if among.contains(leader)
                && leaders.iter().all(|l| *l == Some(*leader))
                && terms.iter().all(|t| *t == terms[0])
            {
                return (*leader, terms[0]);
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no agreed leader among {among:?}: {infos:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn three_nodes_elect_a_leader_survive_its_loss_and_take_it_back() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_nodes(root.path());
    let all: Vec<&Server> = nodes.iter().collect();
    let (leader, term) = agreed_leader(&all, &[1, 2, 3]);
    for node in &nodes {
        let cluster = node.ok("GET", "/cluster", None);
        assert_eq!(cluster["status"], "enabled");
        assert_eq!(
            cluster["raft_info"]["voters"],
            json!([1, 2, 3]),
            "{cluster}"
        );
        assert_eq!(cluster["peers"].as_object().unwrap().len(), 3, "{cluster}");
    }

    // Every node recorded its public address through the leader (forwarded from followers),
    // and every node has applied every record.
    wait_for_records(&all, &nodes);

    // The leader dies; the other two elect one of themselves in a later term.
    let index = usize::try_from(leader - 1).unwrap();
    nodes[index].kill9();
    let rest: Vec<&Server> = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != index)
        .map(|(_, n)| n)
        .collect();
    let others: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let (_, new_term) = agreed_leader(&rest, &others);
    assert!(new_term > term, "term {new_term} after {term}");

    // Back on the same data, it follows the new leader (no bootstrap again, no split).
    nodes[index].restart();
    let all: Vec<&Server> = nodes.iter().collect();
    let (_, term_after) = agreed_leader(&all, &[1, 2, 3]);
    assert!(term_after >= new_term, "term {term_after} after {new_term}");
    // The restarted node has its metadata back (from its own disk and the log).
    wait_for_records(&[&nodes[index]], &nodes);
    // Its log catches up: every node applies the same last index (a new leader's first entry
    // is in every log).
    let started = Instant::now();
    loop {
        let applied: Vec<u64> = nodes
            .iter()
            .map(|n| raft_info(n)["commit"].as_u64().unwrap())
            .collect();
        if applied[0] > 0 && applied.iter().all(|a| *a == applied[0]) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "applied indexes never agreed: {applied:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every node of `readers` lists every node of `nodes` with its public address.
pub(super) fn wait_for_records(readers: &[&Server], nodes: &[Server]) {
    let started = Instant::now();
    loop {
        let complete = readers.iter().all(|reader| {
            let peers = reader.ok("GET", "/cluster", None)["peers"].clone();
            nodes.iter().enumerate().all(|(i, node)| {
                peers[(i + 1).to_string()]["api_uri"].as_str() == Some(&node.url(""))
            })
        });
        if complete {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "records incomplete: {}",
            readers[0].ok("GET", "/cluster", None)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_internal_api_needs_the_secret_and_its_own_port() {
    let root = tempfile::tempdir().unwrap();
    let nodes = start_nodes(root.path());
    let node = &nodes[0];
    let internal = node.ok("GET", "/cluster", None)["peers"]["1"]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = reqwest::blocking::Client::new();
    // Node 1's replica of the metadata group is replica 1.
    let url = format!("{internal}/internal/raft/meta/vote?replica=1");

    let without = client.post(&url).body(vec![1, 2, 3]).send().unwrap();
    assert_eq!(without.status().as_u16(), 401);
    let body: Value = without.json().unwrap();
    assert_eq!(body["status"]["code"], "unauthorized", "{body}");
    let wrong = client
        .post(&url)
        .header("x-cairn-cluster-key", "not-the-secret")
        .body(vec![1, 2, 3])
        .send()
        .unwrap();
    assert_eq!(wrong.status().as_u16(), 401);

    // With the secret, a body that is not a vote is a 400 naming the problem, not a crash.
    let with_secret = |url: &str, body: Vec<u8>| {
        let answer = client
            .post(url)
            .header("x-cairn-cluster-key", SECRET)
            .body(body)
            .send()
            .unwrap();
        let status = answer.status().as_u16();
        let body: Value = answer.json().unwrap();
        let error = body["status"]["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        (status, error)
    };
    let (status, error) = with_secret(&url, vec![1, 2, 3]);
    assert_eq!(status, 400, "{error}");
    assert!(error.contains("does not decode"), "{error}");
    // A Raft message must name its replica, and only that replica answers it.
    let (status, error) = with_secret(&url.replace("?replica=1", ""), vec![1, 2, 3]);
    assert_eq!(status, 400, "{error}");
    assert!(error.contains("names no replica"), "{error}");
    let (status, error) = with_secret(&url.replace("?replica=1", "?replica=2"), vec![1, 2, 3]);
    assert_eq!(status, 404, "{error}");
    let (status, error) = with_secret(&format!("{internal}/internal/raft/c9p0/vote"), vec![]);
    assert_eq!(status, 404, "{error}");

    // The public port does not serve the internal API at all.
    let (status, _) = node.call_raw("POST", "/internal/raft/meta/vote", vec![1, 2, 3]);
    assert_eq!(status, 404);
    // A node refuses what it does not serve yet, saying why.
    let (status, body) = node.call(
        "PUT",
        "/collections/c",
        Some(&json!({"vectors": {"size": 4, "distance": "Cosine"}, "partitioning": {"partitions": 2}})),
    );
    assert!(status == 400 || status == 422, "{status} {body}");
    // Still serving.
    assert_eq!(node.call("GET", "/cluster", None).0, 200);
}

#[test]
fn a_standalone_server_reports_the_cluster_disabled() {
    let root = tempfile::tempdir().unwrap();
    let node = Server::start(root.path(), &[]);
    assert_eq!(node.ok("GET", "/cluster", None)["status"], "disabled");
}

/// Waits until `node` serves `name` with `count` points (exact count).
pub(super) fn wait_count(node: &Server, name: &str, count: u64) {
    let started = Instant::now();
    loop {
        let (status, body) = node.call(
            "POST",
            &format!("/collections/{name}/points/count"),
            Some(&json!({"exact": true})),
        );
        if status == 200 && body["result"]["count"].as_u64() == Some(count) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} never counted {count} in {name}: {status} {body}",
            node.addr
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn upsert(
    node: &Server,
    name: &str,
    ids: std::ops::Range<u64>,
    tag: &str,
) -> (u16, Value) {
    let points: Vec<Value> = ids
        .map(|id| json!({"id": id, "vector": [id as f32, 1.0, 0.5, 0.25], "payload": {"tag": tag}}))
        .collect();
    node.call(
        "PUT",
        &format!("/collections/{name}/points?wait=true"),
        Some(&json!({"points": points})),
    )
}

/// Every point of `name` on `node`: id → payload tag. A read at the default level: `node`'s
/// own replica, which may trail the latest acknowledged write by a moment.
pub(super) fn contents(node: &Server, name: &str) -> std::collections::BTreeMap<u64, String> {
    scroll_all(node, name, "")
}

/// Every point of `name` as of a read index (`consistency=majority`): every write acknowledged
/// before the call is in it, whichever node took the write. What a check that no acknowledged
/// write was lost must read, since a default read may trail the latest write.
pub(super) fn agreed_contents(
    node: &Server,
    name: &str,
) -> std::collections::BTreeMap<u64, String> {
    scroll_all(node, name, "?consistency=majority")
}

fn scroll_all(node: &Server, name: &str, query: &str) -> std::collections::BTreeMap<u64, String> {
    let body = node.ok(
        "POST",
        &format!("/collections/{name}/points/scroll{query}"),
        Some(&json!({"limit": 10000, "with_payload": true})),
    );
    body["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().unwrap(),
                p["payload"]["tag"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_collection_created_on_one_node_is_replicated_to_all_and_survives_a_node_loss() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_nodes(root.path());
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);

    // A write can be held by at most every replica: a factor above that is refused.
    let (status, error) = nodes[1].call(
        "PUT",
        "/collections/c",
        Some(&json!({"vectors": {"size": 4, "distance": "Euclid"},
                     "replication_factor": 3, "write_consistency_factor": 4})),
    );
    assert_eq!(status, 400, "{error}");
    assert!(
        error["status"]["error"]
            .as_str()
            .unwrap()
            .contains("write_consistency_factor 4"),
        "{error}"
    );
    // Created through node 2, with a replica on every node.
    nodes[1].create(
        "c",
        4,
        "Euclid",
        json!({"replication_factor": 3, "write_consistency_factor": 2}),
    );
    // Every node opens it as it applies the metadata (a moment after the create returns).
    for node in &nodes {
        wait_count(node, "c", 0);
    }
    let info = nodes[0].ok("GET", "/collections/c", None);
    assert_eq!(
        info["config"]["params"]["write_consistency_factor"], 2,
        "{info}"
    );
    // Written through node 3; read back through every node.
    let (status, body) = upsert(&nodes[2], "c", 0..100, "a");
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        wait_count(node, "c", 100);
    }
    let reference = contents(&nodes[0], "c");
    assert_eq!(reference.len(), 100);

    // Any one node dies; writes through the others go on.
    nodes[0].kill9();
    let (status, body) = upsert(&nodes[1], "c", 100..150, "b");
    assert_eq!(status, 200, "{body}");
    let (status, body) = upsert(&nodes[2], "c", 0..10, "c");
    assert_eq!(status, 200, "{body}");
    // It comes back and catches up: every replica holds the same points with the same values.
    nodes[0].restart();
    for node in &nodes {
        wait_count(node, "c", 150);
    }
    let started = Instant::now();
    loop {
        let all: Vec<_> = nodes.iter().map(|n| contents(n, "c")).collect();
        if all.iter().all(|c| *c == all[1]) && all[1].get(&3).map(String::as_str) == Some("c") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "replicas differ"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Deleted through node 1: gone from every node.
    nodes[0].ok("DELETE", "/collections/c", None);
    let started = Instant::now();
    while nodes
        .iter()
        .any(|n| n.call("GET", "/collections/c", None).0 != 404)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the collection lingers"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `write_consistency_factor` above the majority: with every replica up a write is
/// acknowledged; with one replica's node down it still commits (a majority holds it) but is
/// answered 503 `under_replicated`, saying it will not be lost, and is found afterwards; once
/// the node is back, writes are acknowledged again.
#[test]
fn a_write_consistency_factor_above_the_majority_waits_for_that_many_replicas() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_nodes(root.path());
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    nodes[0].create(
        "w",
        4,
        "Euclid",
        json!({"replication_factor": 3, "write_consistency_factor": 3}),
    );
    for node in &nodes {
        wait_count(node, "w", 0);
    }
    let (status, body) = upsert(&nodes[0], "w", 0..10, "a");
    assert_eq!(status, 200, "{body}");

    nodes[2].kill9();
    let started = Instant::now();
    let (status, body) = upsert(&nodes[0], "w", 10..11, "b");
    eprintln!(
        "a write with one of three replicas down answered {status} after {:?}",
        started.elapsed()
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"]["code"], "under_replicated", "{body}");
    let message = body["status"]["error"].as_str().unwrap();
    assert!(
        message.contains("will not be lost") && message.contains("2 of the 3"),
        "{body}"
    );
    // Committed: the survivors hold it.
    wait_count(&nodes[1], "w", 11);
    assert_eq!(
        contents(&nodes[1], "w").get(&10).map(String::as_str),
        Some("b")
    );

    nodes[2].restart();
    let started = Instant::now();
    loop {
        let (status, body) = upsert(&nodes[1], "w", 11..12, "c");
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "writes stay under-replicated after the node came back: {body}"
        );
    }
    for node in &nodes {
        wait_count(node, "w", 12);
    }
}

/// The review's scenario 1 (issue #22) on peer nodes: a replica that missed writes while it
/// was down comes back while the up-to-date one is frozen. On the router/shard cluster this
/// lost acknowledged writes (50 of 200 in the review's run; that cluster is gone); here the returning replica cannot lead
/// without the entries a majority holds, so every acknowledged write survives on every node.
#[test]
fn review_scenario_1_a_stale_replica_cannot_lose_acknowledged_writes() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "r", 3);
    let mut acknowledged = std::collections::BTreeMap::new();
    let mut write = |node: &Server, ids: std::ops::Range<u64>, tag: &str| {
        for id in ids {
            let (status, _) = upsert(node, "r", id..id + 1, tag);
            if status == 200 {
                acknowledged.insert(id, tag.to_owned());
            }
        }
    };
    write(&nodes[2], 0..100, "first");
    // B (node 2) dies; A (node 1) and C (node 3) acknowledge more.
    nodes[1].kill9();
    write(&nodes[2], 100..150, "while-b-down");
    // A freezes while B comes back: B and C must agree on a leader whose log has them.
    nodes[0].freeze(true);
    nodes[1].restart();
    std::thread::sleep(Duration::from_millis(1500));
    nodes[0].freeze(false);
    write(&nodes[1], 150..200, "after");
    write(&nodes[2], 0..20, "rewritten");
    assert!(
        acknowledged.len() >= 150,
        "too few writes acknowledged: {}",
        acknowledged.len()
    );
    for node in &nodes {
        let started = Instant::now();
        loop {
            let held = contents(node, "r");
            let missing: Vec<u64> = acknowledged
                .iter()
                .filter(|(id, tag)| held.get(id) != Some(tag))
                .map(|(id, _)| *id)
                .collect();
            if missing.is_empty() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{}: {} acknowledged writes missing or stale, e.g. {:?}",
                node.addr,
                missing.len(),
                &missing[..missing.len().min(10)]
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The review's scenario 3 on peer nodes: concurrent writes of the same points through
/// different nodes. The partition's log orders them once for every replica, so all replicas
/// end with the same value for every point.
#[test]
fn review_scenario_3_concurrent_writes_leave_every_replica_identical() {
    let root = tempfile::tempdir().unwrap();
    let nodes = nodes_with_collection(root.path(), &[], "w", 3);
    std::thread::scope(|scope| {
        for (t, node) in nodes.iter().enumerate() {
            scope.spawn(move || {
                for round in 0..40 {
                    let (status, body) = upsert(node, "w", 0..20, &format!("t{t}-r{round}"));
                    assert_eq!(status, 200, "{body}");
                }
            });
        }
    });
    let started = Instant::now();
    loop {
        let held: Vec<_> = nodes.iter().map(|n| contents(n, "w")).collect();
        if held[0].len() == 20 && held.iter().all(|h| *h == held[0]) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "replicas differ: {held:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The review's scenario 2 on peer nodes: the router/shard cluster forgot on a router restart
/// which replicas were behind. Here nothing about replicas lives in one process's memory:
/// every node restarts (one after another, then all at once) and every replica comes back with
/// every acknowledged point.
#[test]
fn review_scenario_2_restarts_forget_nothing() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "s", 3);
    let (status, body) = upsert(&nodes[0], "s", 0..50, "one");
    assert_eq!(status, 200, "{body}");
    // Node 3 misses the next writes, then every node restarts in turn, then all at once.
    nodes[2].kill9();
    let (status, body) = upsert(&nodes[0], "s", 50..80, "two");
    assert_eq!(status, 200, "{body}");
    nodes[2].restart();
    for node in &mut nodes {
        node.restart();
    }
    for node in &mut nodes {
        node.kill9();
    }
    for node in &mut nodes {
        node.restart();
    }
    for node in &nodes {
        wait_count(node, "s", 80);
    }
    let held: Vec<_> = nodes.iter().map(|n| contents(n, "s")).collect();
    assert!(held.iter().all(|h| *h == held[0]));
    assert_eq!(held[0].get(&60).map(String::as_str), Some("two"));
    // And the cluster takes writes again.
    let (status, body) = upsert(&nodes[1], "s", 80..90, "three");
    assert_eq!(status, 200, "{body}");
}

/// Every node serves every collection, wherever its replicas are: with two replicas on three
/// nodes, the node without one forwards reads and writes to a node with one, and goes on
/// when one of those dies.
#[test]
fn a_node_without_a_replica_serves_through_one_that_has_it() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "two", 2);
    for (i, node) in nodes.iter().enumerate() {
        let first = i as u64 * 10;
        let (status, body) = upsert(node, "two", first..first + 10, "x");
        assert_eq!(status, 200, "{body}");
    }
    for node in &nodes {
        wait_count(node, "two", 30);
    }
    // A query through each node finds the nearest point; a bad filter is refused with the
    // replica's own 400, and a missing point with its 404, not a 5xx.
    for node in &nodes {
        let (status, body) = node.call("GET", "/collections/two/points/999", None);
        assert_eq!(
            (status, &body["status"]["code"]),
            (404, &json!("not_found")),
            "{body}"
        );
        let (status, body) = node.call(
            "POST",
            "/collections/two/points/query",
            Some(&json!({"query": 999, "limit": 1})),
        );
        assert_eq!(
            (status, &body["status"]["code"]),
            (404, &json!("not_found")),
            "{body}"
        );
        let found = node.ok(
            "POST",
            "/collections/two/points/query",
            Some(&json!({"query": [12.0, 1.0, 0.5, 0.25], "limit": 1})),
        );
        assert_eq!(found["points"][0]["id"], 12, "{found}");
        let (status, body) = node.call(
            "POST",
            "/collections/two/points/count",
            Some(&json!({"filter": {"must": [{"key": "tag", "nonsense": 1}]}})),
        );
        assert_eq!(status, 400, "{body}");
    }
    // Any one node may die, a replica's or not: the other two go on serving reads (from a live
    // replica; a write would wait for the partition's group to have a majority again).
    for victim in 0..3 {
        nodes[victim].kill9();
        for (i, node) in nodes.iter().enumerate() {
            if i != victim {
                wait_count(node, "two", 30);
            }
        }
        nodes[victim].restart();
        for node in &nodes {
            wait_count(node, "two", 30);
        }
    }
}

/// A replica further behind than its group's retained log comes back by snapshot: the leader
/// sends the state's table files in chunks over the internal port, the replica swaps them in
/// and rebuilds its index, and serves every point.
#[test]
fn a_replica_behind_the_retained_log_comes_back_by_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(
        root.path(),
        &[
            ("CAIRN__CLUSTER__SNAPSHOT_EVERY_ENTRIES", "100"),
            ("CAIRN__CLUSTER__LOG_KEEP_ENTRIES", "20"),
        ],
        "snap",
        3,
    );
    let (status, body) = upsert(&nodes[0], "snap", 0..20, "early");
    assert_eq!(status, 200, "{body}");
    nodes[2].kill9();
    // Entries while node 3 is away, until the leader has discarded its log past what node 3
    // holds (several snapshots' worth).
    let next = write_until_purged(&[&nodes[0], &nodes[1]], "snap", 20, 100);
    nodes[2].restart();
    // (While it installs, its reads go to the other replicas: the count alone does not tell.)
    wait_log(&nodes[2], "snapshot installed");
    wait_count(&nodes[2], "snap", next);
    assert_eq!(contents(&nodes[2], "snap"), contents(&nodes[0], "snap"));
    // It takes part again: a write through it reaches everyone.
    let (status, body) = upsert(&nodes[2], "snap", next..next + 10, "after");
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        wait_count(node, "snap", next + 10);
    }
}

/// Waits until `node`'s log (this start's) says `needle`.
pub(super) fn wait_log(node: &Server, needle: &str) {
    let started = Instant::now();
    while !node.log().contains(needle) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} never logged {needle:?}:\n{}",
            node.addr,
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes one point per entry through `writers` (in turn), ids from `next` on, until the
/// partition's leader has discarded its log past `index` behind a snapshot, so a replica that
/// holds less must be sent the snapshot. (The leader discards only when it has built a
/// snapshot and no message to a replica is using the entries, so how many writes that takes
/// varies.) Returns the next unused id.
pub(super) fn write_until_purged(
    writers: &[&Server],
    name: &str,
    mut next: u64,
    index: u64,
) -> u64 {
    let started = Instant::now();
    loop {
        for _ in 0..20 {
            let writer = writers[next as usize % writers.len()];
            let (status, body) = upsert(writer, name, next..next + 1, "late");
            assert_eq!(status, 200, "{body}");
            next += 1;
        }
        let purged = writers
            .iter()
            .filter_map(|w| {
                let cluster = w.ok("GET", &format!("/collections/{name}/cluster"), None);
                cluster["replicas"][0]["replicas"]
                    .as_array()?
                    .iter()
                    .find(|r| r["role"] == "Leader" && r["purged"].is_u64())
                    .and_then(|r| r["purged"].as_u64())
            })
            .max()
            .unwrap_or(0);
        if purged >= index {
            return next;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the leader never discarded its log past {index} (at {purged} after {next} writes)"
        );
    }
}

/// Polls `node`'s status of `name` until it is `colour`.
fn wait_status(node: &Server, name: &str, colour: &str) {
    let started = Instant::now();
    loop {
        let (code, info) = node.call("GET", &format!("/collections/{name}"), None);
        if code == 200 && info["result"]["status"] == colour {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} never said {colour}: {info}",
            node.addr
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Status tells the truth: green with every replica holding every entry, yellow while a
/// replica is away and writes go on (on the node that leads the partition), red where a
/// partition has no quorum; `GET /collections/{c}/cluster` lists the replicas with one
/// leader and a term.
#[test]
fn status_reports_replicas_roles_and_quorum() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "st", 3);
    let (status, body) = upsert(&nodes[0], "st", 0..10, "a");
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        wait_status(node, "st", "green");
    }
    let started = Instant::now();
    let leader_node = loop {
        let cluster = nodes[1].ok("GET", "/collections/st/cluster", None);
        let replicas = cluster["replicas"][0]["replicas"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(replicas.len(), 3, "{cluster}");
        let leaders: Vec<&Value> = replicas.iter().filter(|r| r["role"] == "Leader").collect();
        if leaders.len() == 1 && replicas.iter().all(|r| r["term"].as_u64() > Some(0)) {
            assert_eq!(cluster["shard_count"], 1);
            assert_eq!(
                cluster["local_shards"].as_array().unwrap().len(),
                1,
                "{cluster}"
            );
            break leaders[0]["peer_id"].as_u64().unwrap();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{cluster}");
        std::thread::sleep(Duration::from_millis(100));
    };

    // A follower goes away and writes go on: the leader's node says yellow.
    let leader = usize::try_from(leader_node - 1).unwrap();
    let victim = (leader + 1) % 3;
    nodes[victim].kill9();
    let (status, body) = upsert(&nodes[leader], "st", 10..20, "b");
    assert_eq!(status, 200, "{body}");
    wait_status(&nodes[leader], "st", "yellow");
    // `/metrics` says the same (0 green, 1 yellow, 2 red).
    let metrics = reqwest::blocking::get(nodes[leader].url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("cairn_collection_status{collection=\"st\"} 1"),
        "{metrics}"
    );
    nodes[victim].restart();
    for node in &nodes {
        wait_status(node, "st", "green");
    }

    // Two of three away: the partition has no quorum where the last node stands.
    let survivor = (victim + 1) % 3;
    for (i, node) in nodes.iter_mut().enumerate() {
        if i != survivor {
            node.kill9();
        }
    }
    wait_status(&nodes[survivor], "st", "red");
    // It still serves reads of what it holds.
    wait_count(&nodes[survivor], "st", 20);
}

/// The partition's leader as `(node id, term)`, once the replicas agree on one.
pub(super) fn partition_leader(node: &Server, name: &str, newer_than: u64) -> (u64, u64) {
    let started = Instant::now();
    loop {
        let (status, cluster) = node.call("GET", &format!("/collections/{name}/cluster"), None);
        if status == 200 {
            let replicas = cluster["result"]["replicas"][0]["replicas"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let leader = replicas
                .iter()
                .find(|r| r["role"] == "Leader" && r["term"].as_u64() > Some(newer_than));
            if let Some(leader) = leader {
                return (
                    leader["peer_id"].as_u64().unwrap(),
                    leader["term"].as_u64().unwrap(),
                );
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no leader newer than term {newer_than}: {cluster}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Failover under load (issue #22's figures, BENCHMARKS C18): the node of a partition's leader
/// is SIGKILLed while one client queries and another writes through the two other nodes, one
/// request at a time each. Prints how long the survivors took to elect a leader, and the
/// slowest query and write across the kill; no query may fail, and every write is acknowledged.
#[test]
fn the_loss_of_a_partition_leader_under_load_fails_no_query() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = nodes_with_collection(root.path(), &[], "fo", 3);
    let (status, body) = upsert(&nodes[0], "fo", 0..200, "a");
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        wait_status(node, "fo", "green");
    }
    let (leader_node, term) = partition_leader(&nodes[0], "fo", 0);
    let leader = usize::try_from(leader_node - 1).unwrap();
    let survivors: Vec<String> = (0..3)
        .filter(|&i| i != leader)
        .map(|i| nodes[i].url(""))
        .collect();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    // Each worker records (seconds since the start, latency, outcome) per request.
    let worker = |url: String, write: bool| {
        let (stop, client) = (stop.clone(), client.clone());
        std::thread::spawn(move || {
            let mut history = Vec::new();
            let mut id = 1_000u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                let answer = if write {
                    id += 1;
                    client
                        .put(format!("{url}/collections/fo/points?wait=true"))
                        .json(&json!({"points": [{"id": id, "vector": [1.0, 2.0, 3.0, 4.0]}]}))
                        .send()
                } else {
                    client
                        .post(format!("{url}/collections/fo/points/query"))
                        .json(&json!({"query": [1.0, 1.0, 0.5, 0.25], "limit": 5}))
                        .send()
                };
                let ok = answer.is_ok_and(|r| r.status().is_success());
                history.push((t.elapsed(), ok, id));
            }
            history
        })
    };
    let queries = worker(survivors[0].clone(), false);
    let writes = worker(survivors[1].clone(), true);
    std::thread::sleep(Duration::from_millis(1_000));
    let killed = Instant::now();
    nodes[leader].kill9();
    let (new_leader, new_term) = partition_leader(&nodes[(leader + 1) % 3], "fo", term);
    let election = killed.elapsed();
    std::thread::sleep(Duration::from_millis(2_000));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let queries = queries.join().unwrap();
    let writes = writes.join().unwrap();

    let slowest = |history: &[(Duration, bool, u64)]| {
        history
            .iter()
            .map(|(latency, _, _)| *latency)
            .max()
            .unwrap_or_default()
    };
    let failed_queries = queries.iter().filter(|(_, ok, _)| !ok).count();
    let failed_writes = writes.iter().filter(|(_, ok, _)| !ok).count();
    eprintln!(
        "failover: leader on node {leader_node} (term {term}) SIGKILLed; node {new_leader} \
         leads from term {new_term} after {:.0} ms; slowest query {:.1} ms of {} ({failed_queries} \
         failed), slowest write {:.1} ms of {} ({failed_writes} failed)",
        election.as_secs_f64() * 1e3,
        slowest(&queries).as_secs_f64() * 1e3,
        queries.len(),
        slowest(&writes).as_secs_f64() * 1e3,
        writes.len(),
    );
    assert_eq!(failed_queries, 0, "queries failed across the kill");
    assert_eq!(failed_writes, 0, "writes failed across the kill");
    assert_ne!(new_leader, leader_node);
    // Every acknowledged write is there, read through the other survivor.
    let last = writes.iter().map(|(_, _, id)| *id).max().unwrap();
    wait_count(&nodes[(leader + 2) % 3], "fo", 200 + (last - 1_000));
}

/// Straggler mitigation on peer nodes: a query through a node without a replica goes to the
/// replica whose node has the fewest calls in flight and the lowest recent latency, and is
/// hedged to the other after the recent p95. One replica's node slowed by 200 ms a call hardly
/// moves the queries' p99 (taking the replicas in turn, half the queries would wait 200 ms).
#[test]
fn a_slow_replica_node_is_routed_and_hedged_around() {
    let root = tempfile::tempdir().unwrap();
    let nodes = nodes_with_collection(
        root.path(),
        &[("CAIRN__CLUSTER__FAULT_INJECTION", "true")],
        "slow",
        2,
    );
    let (status, body) = upsert(&nodes[0], "slow", 0..100, "x");
    assert_eq!(status, 200, "{body}");
    let cluster = nodes[0].ok("GET", "/collections/slow/cluster", None);
    let holders: Vec<u64> = cluster["replicas"][0]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["peer_id"].as_u64().unwrap())
        .collect();
    let asker = &nodes[(1..=3u64).find(|n| !holders.contains(n)).unwrap() as usize - 1];
    // Both replicas hold every point before timing: a read may go to either, and one still
    // applying the log answers from a committed prefix, which may lack point 42. A holder
    // reads its own replica.
    for holder in &holders {
        wait_count(&nodes[*holder as usize - 1], "slow", 100);
    }
    wait_count(asker, "slow", 100);
    let query = json!({"query": [42.0, 1.0, 0.5, 0.25], "limit": 3});
    let timed = |n: usize| -> Vec<Duration> {
        let mut took: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                let found = asker.ok("POST", "/collections/slow/points/query", Some(&query));
                assert_eq!(found["points"][0]["id"], 42, "{found}");
                t.elapsed()
            })
            .collect();
        took.sort();
        took
    };
    let healthy = timed(100);
    delay_calls(&nodes[0], holders[0], 200);
    let straggling = timed(300);
    delay_calls(&nodes[0], holders[0], 0);
    let p99 = |took: &[Duration]| took[took.len() * 99 / 100];
    eprintln!(
        "healthy p99 {:?}, one replica's node slowed by 200 ms: p99 {:?}, slowest {:?}",
        p99(&healthy),
        p99(&straggling),
        straggling.last().unwrap()
    );
    assert!(
        p99(&straggling) < Duration::from_millis(100),
        "p99 {:?} with a straggling replica",
        p99(&straggling)
    );
}

/// Partition calls to one peer are capped (`cluster.max_calls_per_peer`): with a cap of 1 and
/// the only replica's node slowed, concurrent queries through another node beyond the cap get
/// a 429 naming the setting at once, rather than queueing behind the slow node, and the node
/// serves again as soon as the calls drain.
#[test]
fn calls_to_a_busy_peer_beyond_the_cap_are_refused_with_429() {
    let root = tempfile::tempdir().unwrap();
    let (nodes, holder, asker) = one_holder(
        root.path(),
        ("CAIRN__CLUSTER__MAX_CALLS_PER_PEER", "1"),
        "capped",
    );
    let asker = &nodes[asker];
    let query = json!({"query": [42.0, 1.0, 0.5, 0.25], "limit": 3});
    delay_calls(&nodes[0], holder, 500);
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let asking: Vec<_> = (0..6)
            .map(|_| {
                scope.spawn(|| asker.call("POST", "/collections/capped/points/query", Some(&query)))
            })
            .collect();
        asking.into_iter().map(|a| a.join().unwrap()).collect()
    });
    delay_calls(&nodes[0], holder, 0);
    let refused: Vec<&Value> = answers
        .iter()
        .filter(|(status, _)| *status == 429)
        .map(|(_, body)| body)
        .collect();
    assert!(
        answers
            .iter()
            .all(|(status, _)| *status == 200 || *status == 429),
        "{answers:?}"
    );
    assert!(
        answers.iter().any(|(status, _)| *status == 200),
        "{answers:?}"
    );
    assert!(!refused.is_empty(), "{answers:?}");
    for body in refused {
        assert!(
            body["status"]["error"]
                .as_str()
                .unwrap()
                .contains("max_calls_per_peer"),
            "{body}"
        );
    }
    let found = asker.ok("POST", "/collections/capped/points/query", Some(&query));
    assert_eq!(found["points"][0]["id"], 42, "{found}");
}

/// A read that a query waits on gives up after `cluster.request_timeout_ms`, every replica
/// tried included: with the only replica's node slowed far past it, a query through another
/// node answers 503 naming the setting about when the deadline passes, not when the slow node
/// would have answered; and serves again once the node is quick.
#[test]
fn a_forwarded_read_gives_up_at_its_deadline() {
    let root = tempfile::tempdir().unwrap();
    let (nodes, holder, asker) = one_holder(
        root.path(),
        ("CAIRN__CLUSTER__REQUEST_TIMEOUT_MS", "300"),
        "deadline",
    );
    let asker = &nodes[asker];
    let query = json!({"query": [42.0, 1.0, 0.5, 0.25], "limit": 3});
    delay_calls(&nodes[0], holder, 5_000);
    let started = Instant::now();
    let (status, body) = asker.call("POST", "/collections/deadline/points/query", Some(&query));
    let took = started.elapsed();
    delay_calls(&nodes[0], holder, 0);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap()
            .contains("request_timeout_ms"),
        "{body}"
    );
    assert!(
        took < Duration::from_millis(2_500),
        "answered after {took:?}"
    );
    let found = asker.ok("POST", "/collections/deadline/points/query", Some(&query));
    assert_eq!(found["points"][0]["id"], 42, "{found}");
}

/// Three nodes with fault injection and `setting`, and collection `name` of one replica
/// holding points 0..100 (`upsert`): the nodes, the id of the node holding the replica, and
/// the index of a node that does not (its reads are forwarded), once it counts them all.
fn one_holder(
    root: &std::path::Path,
    setting: (&str, &str),
    name: &str,
) -> (Vec<Server>, u64, usize) {
    let nodes = nodes_with_collection(
        root,
        &[("CAIRN__CLUSTER__FAULT_INJECTION", "true"), setting],
        name,
        1,
    );
    let (status, body) = upsert(&nodes[0], name, 0..100, "x");
    assert_eq!(status, 200, "{body}");
    let cluster = nodes[0].ok("GET", &format!("/collections/{name}/cluster"), None);
    let holder = cluster["replicas"][0]["replicas"][0]["peer_id"]
        .as_u64()
        .unwrap();
    let asker = (1..=3u64).find(|n| *n != holder).unwrap() as usize - 1;
    wait_count(&nodes[asker], name, 100);
    (nodes, holder, asker)
}

/// Slows every partition call node `node` serves by `delay_ms` (0: none), through its internal
/// API's fault injection, its address read from `via`'s `GET /cluster`.
fn delay_calls(via: &Server, node: u64, delay_ms: u64) {
    let uri = via.ok("GET", "/cluster", None)["peers"][node.to_string()]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let answer = reqwest::blocking::Client::new()
        .put(format!("{uri}/internal/faults"))
        .header("x-cairn-cluster-key", SECRET)
        .json(&json!({"cut": [], "delay_ms": delay_ms}))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
}
