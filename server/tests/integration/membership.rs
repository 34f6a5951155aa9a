//! Nodes joining and leaving a running cluster (issue #22): a fourth node joins through any
//! member's internal API under load and the rebalancer spreads replicas onto it; a node that is
//! removed (`DELETE /cluster/peer/{id}`) hands every replica to the others and leaves the
//! metadata group. Queries never fail and every node ends with the same points.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use super::harness::Server;
use super::moves::Load;
use super::peers::{
    agreed_contents, agreed_leader, contents, start_n_nodes, upsert, wait_count, wait_for_records,
    SECRET,
};

/// Replicas per node over `collections`, as `node` sees the placements, once no move is under
/// way in any of them (`None` while one is).
fn replicas_per_node(node: &Server, collections: &[String]) -> Option<BTreeMap<u64, usize>> {
    let mut count = BTreeMap::new();
    for name in collections {
        let (code, cluster) = node.call("GET", &format!("/collections/{name}/cluster"), None);
        if code != 200 || !cluster["result"]["shard_transfers"].as_array()?.is_empty() {
            return None;
        }
        for replica in cluster["result"]["replicas"][0]["replicas"].as_array()? {
            *count.entry(replica["peer_id"].as_u64()?).or_insert(0) += 1;
        }
    }
    Some(count)
}

/// Waits until `check` holds for the replica counts `node` sees.
fn wait_replicas(
    node: &Server,
    collections: &[String],
    what: &str,
    check: impl Fn(&BTreeMap<u64, usize>) -> bool,
) -> BTreeMap<u64, usize> {
    let started = Instant::now();
    loop {
        if let Some(count) = replicas_per_node(node, collections) {
            if check(&count) {
                return count;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "never {what}: {:?}",
            replicas_per_node(node, collections)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Creates `names` with three replicas each and 50 points each, open on every node.
fn collections_with_points(nodes: &[Server], names: &[String]) {
    for name in names {
        nodes[0].create(name, 4, "Euclid", json!({"replication_factor": 3}));
        for node in nodes {
            wait_count(node, name, 0);
        }
        let (status, body) = upsert(&nodes[0], name, 0..50, "x");
        assert_eq!(status, 200, "{body}");
    }
}

#[test]
fn a_fourth_node_joins_under_load_and_replicas_spread_onto_it() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_n_nodes(root.path(), 3, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    let names: Vec<String> = ["a", "b", "c", "d"].iter().map(|n| n.to_string()).collect();
    collections_with_points(&nodes, &names);
    let load = Load::start(nodes.iter().map(|n| n.url("")).collect(), "a");

    // Node 4 joins through node 1's internal API; its own peers list names only itself.
    let via = nodes[0].ok("GET", "/cluster", None)["peers"]["1"]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    let port = cairn_testkit::free_port().unwrap();
    let (internal, peers) = (
        format!("127.0.0.1:{port}"),
        format!("[\"4=http://127.0.0.1:{port}\"]"),
    );
    let dir = root.path().join("node-4");
    std::fs::create_dir_all(&dir).unwrap();
    let fourth = Server::start(
        &dir,
        &[
            ("CAIRN__CLUSTER__ROLE", "node"),
            ("CAIRN__CLUSTER__NODE_ID", "4"),
            ("CAIRN__CLUSTER__PEERS", peers.as_str()),
            ("CAIRN__CLUSTER__INTERNAL_ADDR", internal.as_str()),
            ("CAIRN__CLUSTER__SECRET", SECRET),
            ("CAIRN__CLUSTER__JOIN", via.as_str()),
        ],
    );
    nodes.push(fourth);
    // Every node lists it with its public address, and it serves every collection (those
    // without writes under way counted exactly).
    let started = Instant::now();
    while nodes[1].ok("GET", "/cluster", None)["peers"]["4"]["api_uri"].as_str()
        != Some(nodes[3].url("").as_str())
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{}",
            nodes[1].ok("GET", "/cluster", None)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for name in &names[1..] {
        wait_count(&nodes[3], name, 50);
    }
    // Twelve replicas spread over four nodes: three each.
    let spread = wait_replicas(&nodes[0], &names, "spread over four nodes", |count| {
        count.len() == 4 && count.values().all(|c| *c == 3)
    });
    eprintln!("replicas per node after the join: {spread:?}");
    std::thread::sleep(Duration::from_secs(1));
    let acked = load.finish();
    for name in &names {
        let reference = agreed_contents(&nodes[0], name);
        if name == "a" {
            for id in &acked {
                assert!(
                    reference.contains_key(id),
                    "acknowledged point {id} is missing"
                );
            }
        }
        for node in &nodes {
            wait_count(node, name, reference.len() as u64);
            assert_eq!(
                contents(node, name),
                reference,
                "{name} differs on {}",
                node.addr
            );
        }
    }
}

/// Four nodes with `extra` settings and four collections of three replicas and 50 points
/// each, every replica placed; answers the nodes, the names and the replicas per node.
fn four_nodes_with_four_collections(
    root: &std::path::Path,
    extra: &[(&str, &str)],
) -> (Vec<Server>, Vec<String>, BTreeMap<u64, usize>) {
    let nodes = start_n_nodes(root, 4, extra);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3, 4]);
    wait_for_records(&all, &nodes);
    let names: Vec<String> = ["p", "q", "r", "s"].iter().map(|n| n.to_string()).collect();
    collections_with_points(&nodes, &names);
    let placed = wait_replicas(&nodes[0], &names, "placed", |count| {
        count.values().sum::<usize>() == 12
    });
    (nodes, names, placed)
}

#[test]
fn a_removed_node_hands_its_replicas_to_the_others_and_leaves() {
    let root = tempfile::tempdir().unwrap();
    let (nodes, names, before) = four_nodes_with_four_collections(root.path(), &[]);
    assert!(
        before.get(&4).copied().unwrap_or(0) > 0,
        "node 4 holds nothing to hand over: {before:?}"
    );
    let load = Load::start(nodes[..3].iter().map(|n| n.url("")).collect(), "p");

    let (code, body) = nodes[1].call("DELETE", "/cluster/peer/4?force=true", None);
    assert_eq!(code, 400, "{body}");
    let (code, body) = nodes[1].call("DELETE", "/cluster/peer/9", None);
    assert_eq!(code, 400, "{body}");
    nodes[1].ok("DELETE", "/cluster/peer/4", None);
    let after = wait_replicas(&nodes[0], &names, "off node 4", |count| {
        !count.contains_key(&4) && count.values().sum::<usize>() == 12
    });
    assert_eq!(
        after,
        [(1, 4), (2, 4), (3, 4)].into_iter().collect(),
        "{after:?}"
    );
    // Then it leaves the metadata group.
    let started = Instant::now();
    loop {
        let cluster = nodes[0].ok("GET", "/cluster", None);
        if cluster["peers"].get("4").is_none()
            && !cluster["raft_info"]["voters"]
                .as_array()
                .unwrap()
                .contains(&json!(4))
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{cluster}");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let acked = load.finish();
    for name in &names {
        let reference = agreed_contents(&nodes[0], name);
        let expected = if name == "p" { 50 + acked.len() } else { 50 };
        assert_eq!(reference.len(), expected, "{name}");
        for node in &nodes[..3] {
            wait_count(node, name, reference.len() as u64);
            assert_eq!(
                contents(node, name),
                reference,
                "{name} differs on {}",
                node.addr
            );
        }
    }
    // The three left take writes.
    let (status, body) = upsert(&nodes[2], "q", 50..60, "after");
    assert_eq!(status, 200, "{body}");
    for node in &nodes[..3] {
        wait_count(node, "q", 60);
    }
}

/// A node that dies and stays away past `cluster.dead_after_secs` has its replicas re-created
/// on the other nodes under load (the live replicas of each partition carry the move); queries
/// never fail. When it comes back it holds none of its old replicas until the rebalancer
/// spreads some onto it again, and every node serves the same points.
#[test]
fn a_dead_node_s_replicas_are_re_created_on_the_others() {
    let root = tempfile::tempdir().unwrap();
    let dead_after = [("CAIRN__CLUSTER__DEAD_AFTER_SECS", "3")];
    let (mut nodes, names, before) = four_nodes_with_four_collections(root.path(), &dead_after);
    let victim = *before
        .iter()
        .max_by_key(|(id, count)| (**count, **id))
        .unwrap()
        .0;
    let survivors: Vec<usize> = (0..4).filter(|i| *i as u64 + 1 != victim).collect();
    let load = Load::start(survivors.iter().map(|i| nodes[*i].url("")).collect(), "p");

    nodes[victim as usize - 1].kill9();
    wait_replicas(&nodes[survivors[0]], &names, "off the dead node", |count| {
        !count.contains_key(&victim) && count.values().sum::<usize>() == 12
    });
    let acked = load.finish();
    for name in &names {
        let reference = agreed_contents(&nodes[survivors[0]], name);
        let expected = if name == "p" { 50 + acked.len() } else { 50 };
        assert_eq!(reference.len(), expected, "{name}");
        for i in &survivors {
            wait_count(&nodes[*i], name, reference.len() as u64);
            assert_eq!(
                contents(&nodes[*i], name),
                reference,
                "{name} on node {}",
                i + 1
            );
        }
    }

    // Back, it serves the same points (through the nodes that hold them, then from replicas
    // the rebalancer spreads onto it).
    nodes[victim as usize - 1].restart();
    wait_replicas(&nodes[survivors[0]], &names, "spread again", |count| {
        count.get(&victim).copied().unwrap_or(0) >= 2 && count.values().sum::<usize>() == 12
    });
    let back = &nodes[victim as usize - 1];
    for name in &names {
        let reference = contents(&nodes[survivors[0]], name);
        wait_count(back, name, reference.len() as u64);
        assert_eq!(
            contents(back, name),
            reference,
            "{name} on the returning node"
        );
    }
}
