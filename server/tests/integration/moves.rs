//! Replicas that move (issue #22): `POST /collections/{c}/cluster` moves, adds and drops a
//! partition's replicas between real peer nodes while clients write and query through every
//! node, and a replica whose files were lost comes back on its node under a new id, by
//! snapshot. Nothing acknowledged is lost, no query fails, and every replica ends up with the
//! same points.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::harness::Server;
use super::peers::{
    agreed_contents, agreed_leader, contents, start_n_nodes, upsert, wait_count, wait_for_records,
    wait_log, write_until_purged,
};

/// The replicas of partition 0 of `name` as `node` reports them: (node, replica id, role).
fn replicas(node: &Server, name: &str) -> Vec<(u64, u64, String)> {
    let cluster = node.ok("GET", &format!("/collections/{name}/cluster"), None);
    cluster["replicas"][0]["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["peer_id"].as_u64().unwrap(),
                r["replica_id"].as_u64().unwrap_or(0),
                r["role"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits until the partition's leader reports exactly `wanted` nodes as voters, one leader,
/// and no move under way; returns the replicas.
fn wait_settled(nodes: &[Server], name: &str, wanted: &BTreeSet<u64>) -> Vec<(u64, u64, String)> {
    let started = Instant::now();
    loop {
        for node in nodes {
            let (code, cluster) = node.call("GET", &format!("/collections/{name}/cluster"), None);
            if code != 200 {
                continue;
            }
            let transfers = cluster["result"]["shard_transfers"]
                .as_array()
                .map_or(1, Vec::len);
            let reps = replicas(node, name);
            let leader = reps.iter().filter(|r| r.2 == "Leader").count() == 1;
            let voters: BTreeSet<u64> = reps
                .iter()
                .filter(|r| r.2 == "Leader" || r.2 == "Follower")
                .map(|r| r.0)
                .collect();
            if leader && transfers == 0 && voters == *wanted && reps.len() == wanted.len() {
                return reps;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never settled on {wanted:?}:\n{}",
            views(nodes, name)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What each node reports of `name`'s partition 0, and the membership and snapshot lines of
/// its log: the story of a move that did not finish.
fn views(nodes: &[Server], name: &str) -> String {
    let mut out = String::new();
    for node in nodes {
        let (code, cluster) = node.call("GET", &format!("/collections/{name}/cluster"), None);
        out += &format!("--- {} ({code}): {cluster}\n", node.addr);
        for line in node.log().lines().filter(|l| {
            l.contains("cairn_")
                && [
                    "learner",
                    "voters",
                    "snapshot",
                    "lost its files",
                    "retrying",
                    "replica",
                ]
                .iter()
                .any(|w| l.contains(w))
        }) {
            out += line;
            out.push('\n');
        }
    }
    out
}

/// Clients writing unique ids and querying through every node until told to stop.
pub(super) struct Load {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<u64>>>,
    failed_writes: Arc<AtomicU64>,
    failed_queries: Arc<Mutex<Vec<String>>>,
    queries: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    pub(super) fn start(urls: Vec<String>, name: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed_writes = Arc::new(AtomicU64::new(0));
        let failed_queries = Arc::new(Mutex::new(Vec::new()));
        let queries = Arc::new(AtomicU64::new(0));
        let client = || {
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap()
        };
        let mut threads = Vec::new();
        {
            let (stop, acked, failed, urls, name) = (
                stop.clone(),
                acked.clone(),
                failed_writes.clone(),
                urls.clone(),
                name.to_owned(),
            );
            threads.push(std::thread::spawn(move || {
                let client = client();
                let mut id = 1_000_000u64;
                while !stop.load(Ordering::Relaxed) {
                    let url = &urls[id as usize % urls.len()];
                    let body = json!({"points": [{"id": id, "vector": [id as f32, 1.0, 0.5, 0.25], "payload": {"tag": "load"}}]});
                    let answer = client
                        .put(format!("{url}/collections/{name}/points?wait=true"))
                        .json(&body)
                        .send();
                    match answer {
                        Ok(r) if r.status().is_success() => acked.lock().unwrap().push(id),
                        other => {
                            // Not acknowledged: allowed (the outcome is unknown to the client),
                            // counted and shown.
                            let why = match other {
                                Ok(r) => format!("{} {}", r.status(), r.text().unwrap_or_default()),
                                Err(e) => e.to_string(),
                            };
                            if failed.fetch_add(1, Ordering::Relaxed) < 5 {
                                eprintln!("write {id} through {url} failed: {why}");
                            }
                        }
                    }
                    id += 1;
                }
            }));
        }
        {
            let (stop, failed, queries, name) = (
                stop.clone(),
                failed_queries.clone(),
                queries.clone(),
                name.to_owned(),
            );
            threads.push(std::thread::spawn(move || {
                let client = client();
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let url = &urls[i % urls.len()];
                    let answer = client
                        .post(format!("{url}/collections/{name}/points/query"))
                        .json(&json!({"query": [5.0, 1.0, 0.5, 0.25], "limit": 3}))
                        .send();
                    match answer {
                        Ok(r) if r.status().is_success() => {}
                        Ok(r) => failed.lock().unwrap().push(format!(
                            "{url}: {} {}",
                            r.status(),
                            r.text().unwrap_or_default()
                        )),
                        Err(e) => failed.lock().unwrap().push(format!("{url}: {e}")),
                    }
                    queries.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        Load {
            stop,
            acked,
            failed_writes,
            failed_queries,
            queries,
            threads,
        }
    }

    /// Stops the clients; returns the acknowledged ids.
    pub(super) fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        let failed = self.failed_queries.lock().unwrap();
        let acked = self.acked.lock().unwrap().clone();
        eprintln!(
            "load: {} acknowledged writes, {} failed; {} queries, {} failed",
            acked.len(),
            self.failed_writes.load(Ordering::Relaxed),
            self.queries.load(Ordering::Relaxed),
            failed.len()
        );
        assert!(failed.is_empty(), "queries failed: {failed:?}");
        acked
    }
}

fn operate(node: &Server, name: &str, operation: Value) {
    node.ok(
        "POST",
        &format!("/collections/{name}/cluster"),
        Some(&operation),
    );
}

/// The replica folders of partition 0 of `name` on `node`.
fn replica_folders(node: &Server, name: &str) -> Vec<String> {
    let dir = node
        .data_dir
        .join("data/collections")
        .join(name)
        .join("partitions")
        .join("0");
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Four nodes, a collection with three replicas; under load a replica moves to the spare
/// node, the node it left gets one back (four replicas), and the spare's is dropped again.
/// Each step is a Raft membership change (learner, catch-up, joint configuration), so no
/// acknowledged write is lost and no query fails; the replica that left deletes its files.
#[test]
fn replicas_move_add_and_drop_under_load_without_losing_a_write() {
    let root = tempfile::tempdir().unwrap();
    let nodes = start_n_nodes(root.path(), 4, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3, 4]);
    wait_for_records(&all, &nodes);
    nodes[0].create("mv", 4, "Euclid", json!({"replication_factor": 3}));
    for node in &nodes {
        wait_count(node, "mv", 0);
    }
    let (status, body) = upsert(&nodes[0], "mv", 0..100, "before");
    assert_eq!(status, 200, "{body}");
    let placed: BTreeSet<u64> = replicas(&nodes[0], "mv").iter().map(|r| r.0).collect();
    let spare = (1..=4u64).find(|n| !placed.contains(n)).unwrap();
    let from = *placed.iter().next().unwrap();

    let load = Load::start(nodes.iter().map(|n| n.url("")).collect(), "mv");
    std::thread::sleep(Duration::from_secs(1));

    // Move: from → spare.
    operate(
        &nodes[1],
        "mv",
        json!({"move_shard": {"shard_id": 0, "from_peer_id": from, "to_peer_id": spare}}),
    );
    let mut wanted = placed.clone();
    wanted.remove(&from);
    wanted.insert(spare);
    wait_settled(&nodes, "mv", &wanted);
    // The node that gave its replica up deletes the files (its follower's next pass).
    let started = Instant::now();
    while !replica_folders(&nodes[from as usize - 1], "mv").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            replica_folders(&nodes[from as usize - 1], "mv")
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A second move of the same partition waits for none: this one is refused while busy,
    // the rest are plain mistakes.
    let (code, body) = nodes[2].call(
        "POST",
        "/collections/mv/cluster",
        Some(&json!({"drop_replica": {"shard_id": 0, "peer_id": from}})),
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body["status"]["error"]
            .as_str()
            .unwrap()
            .contains("no replica"),
        "{body}"
    );
    let (code, body) = nodes[2].call(
        "POST",
        "/collections/mv/cluster",
        Some(&json!({"replicate_shard": {"shard_id": 0, "from_peer_id": spare, "to_peer_id": 9}})),
    );
    assert_eq!(code, 400, "{body}");
    let (code, body) = nodes[2].call(
        "POST",
        "/collections/mv/cluster",
        Some(
            &json!({"replicate_shard": {"shard_id": 3, "from_peer_id": spare, "to_peer_id": from}}),
        ),
    );
    assert_eq!(code, 400, "{body}");

    // Replicate back onto the node that left: four replicas.
    operate(
        &nodes[3],
        "mv",
        json!({"replicate_shard": {"shard_id": 0, "from_peer_id": spare, "to_peer_id": from}}),
    );
    wanted.insert(from);
    wait_settled(&nodes, "mv", &wanted);

    // Drop the spare's again: three.
    operate(
        &nodes[0],
        "mv",
        json!({"drop_replica": {"shard_id": 0, "peer_id": spare}}),
    );
    wanted.remove(&spare);
    wait_settled(&nodes, "mv", &wanted);
    std::thread::sleep(Duration::from_secs(1));
    let acked = load.finish();
    assert!(acked.len() > 20, "the load hardly ran: {}", acked.len());

    // Every node, replica or not, serves every acknowledged point; the replicas agree.
    let expected = 100 + acked.len() as u64;
    let reference = agreed_contents(&nodes[0], "mv");
    for id in &acked {
        assert!(
            reference.contains_key(id),
            "acknowledged point {id} is missing"
        );
    }
    for node in &nodes {
        wait_count(node, "mv", reference.len() as u64);
        assert_eq!(contents(node, "mv"), reference, "{} differs", node.addr);
    }
    assert!(reference.len() as u64 >= expected);
    let started = Instant::now();
    while !replica_folders(&nodes[spare as usize - 1], "mv").is_empty() {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A replica whose files are lost (its folder deleted while its node was down) comes back on
/// the same node under a new replica id: the old id would be a member that forgot its vote,
/// which Raft cannot allow. The new replica joins as a learner, gets a snapshot (the log was
/// purged meanwhile), is promoted, and the lost one is removed from the group.
#[test]
fn a_wiped_replica_comes_back_by_snapshot_under_a_new_id() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_n_nodes(
        root.path(),
        3,
        &[
            ("CAIRN__CLUSTER__SNAPSHOT_EVERY_ENTRIES", "50"),
            ("CAIRN__CLUSTER__LOG_KEEP_ENTRIES", "10"),
        ],
    );
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    nodes[0].create("wipe", 4, "Euclid", json!({"replication_factor": 3}));
    for node in &nodes {
        wait_count(node, "wipe", 0);
    }
    for batch in 0..20u64 {
        let (status, body) = upsert(
            &nodes[batch as usize % 3],
            "wipe",
            batch * 10..batch * 10 + 10,
            "a",
        );
        assert_eq!(status, 200, "{body}");
    }
    let all3: BTreeSet<u64> = [1, 2, 3].into_iter().collect();
    let before = wait_settled(&nodes, "wipe", &all3);
    let old_id = before.iter().find(|r| r.0 == 3).unwrap().1;

    nodes[2].kill9();
    let folders = replica_folders(&nodes[2], "wipe");
    assert_eq!(folders, vec![format!("r{old_id}")]);
    let partition = nodes[2].data_dir.join("data/collections/wipe/partitions/0");
    std::fs::remove_dir_all(&partition).unwrap();
    // Writes go on with two of three, until the leader has discarded its log behind a
    // snapshot.
    let next = write_until_purged(&[&nodes[0], &nodes[1]], "wipe", 200, 100);
    nodes[2].restart();
    let after = wait_settled(&nodes, "wipe", &all3);
    let new_id = after.iter().find(|r| r.0 == 3).unwrap().1;
    assert_ne!(new_id, old_id, "{after:?}");
    assert!(after.iter().all(|r| r.1 != old_id), "{after:?}");
    wait_log(&nodes[2], "lost its files");
    wait_log(&nodes[2], "snapshot installed");
    // Messages for the lost replica (still a voter until the new one is promoted) were refused
    // by its node, not answered by the new replica in its name.
    let refused = format!("replica {old_id} of group");
    assert!(
        nodes[..2].iter().any(|n| n.log().contains(&refused)),
        "no message for the lost replica {old_id} was refused"
    );
    wait_count(&nodes[2], "wipe", next);
    assert_eq!(contents(&nodes[2], "wipe"), contents(&nodes[0], "wipe"));
    assert_eq!(
        replica_folders(&nodes[2], "wipe"),
        vec![format!("r{new_id}")]
    );
    // It takes part again.
    let (status, body) = upsert(&nodes[2], "wipe", next..next + 10, "c");
    assert_eq!(status, 200, "{body}");
    for node in &nodes {
        wait_count(node, "wipe", next + 10);
    }
}

/// `abort_transfer` calls off a move that cannot finish (its target node is down, so the new
/// replica is never opened): the placement, the group and the points are as before, and a
/// move that is not under way cannot be aborted.
#[test]
fn an_aborted_move_leaves_the_partition_as_it_was() {
    let root = tempfile::tempdir().unwrap();
    let mut nodes = start_n_nodes(root.path(), 4, &[]);
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3, 4]);
    wait_for_records(&all, &nodes);
    nodes[0].create("ab", 4, "Euclid", json!({"replication_factor": 3}));
    for node in &nodes {
        wait_count(node, "ab", 0);
    }
    let (status, body) = upsert(&nodes[0], "ab", 0..50, "x");
    assert_eq!(status, 200, "{body}");
    let placed: BTreeSet<u64> = replicas(&nodes[0], "ab").iter().map(|r| r.0).collect();
    let before = wait_settled(&nodes, "ab", &placed);
    let spare = (1..=4u64).find(|n| !placed.contains(n)).unwrap();
    let from = *placed.iter().next().unwrap();
    let asker = (1..=4u64).find(|n| *n != spare).unwrap() as usize - 1;
    nodes[spare as usize - 1].kill9();

    let abort =
        json!({"abort_transfer": {"shard_id": 0, "from_peer_id": from, "to_peer_id": spare}});
    let (code, body) = nodes[asker].call("POST", "/collections/ab/cluster", Some(&abort));
    assert_eq!(code, 400, "nothing to abort yet: {body}");
    operate(
        &nodes[asker],
        "ab",
        json!({"move_shard": {"shard_id": 0, "from_peer_id": from, "to_peer_id": spare}}),
    );
    let transfers =
        nodes[asker].ok("GET", "/collections/ab/cluster", None)["shard_transfers"].clone();
    assert_eq!(transfers.as_array().map(Vec::len), Some(1), "{transfers}");
    std::thread::sleep(Duration::from_secs(1));
    operate(&nodes[asker], "ab", abort.clone());
    // Back, the spare holds nothing of it.
    nodes[spare as usize - 1].restart();
    let after = wait_settled(&nodes, "ab", &placed);
    assert_eq!(
        after.iter().map(|r| (r.0, r.1)).collect::<BTreeSet<_>>(),
        before.iter().map(|r| (r.0, r.1)).collect::<BTreeSet<_>>(),
        "the same replicas, under the same ids"
    );
    let (code, body) = nodes[asker].call("POST", "/collections/ab/cluster", Some(&abort));
    assert_eq!(code, 400, "aborted twice: {body}");
    let (status, body) = upsert(&nodes[asker], "ab", 50..60, "y");
    assert_eq!(status, 200, "{body}");
    wait_count(&nodes[asker], "ab", 60);
}
