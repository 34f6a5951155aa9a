//! The Pyramid cluster on loopback (issue #6): one router and three shard nodes, real `cairn`
//! processes. siftsmall in 4 partitions × 2 replicas is loaded through the router and routed
//! with recall; a shard node SIGKILLed under a steady query load costs no query, writes go on,
//! and once restarted it catches up and serves again; with both replicas of some partitions
//! gone, queries answer partially (coverage < 1) or 503 when asked, never 500.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir, Dataset};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

pub(crate) struct Cluster {
    pub(crate) shards: Vec<Server>,
    pub(crate) router: Server,
    _dirs: Vec<tempfile::TempDir>,
}

pub(crate) fn start_cluster(n: usize) -> Cluster {
    let mut dirs = Vec::new();
    let mut shards = Vec::new();
    for _ in 0..n {
        let dir = tempfile::tempdir().unwrap();
        shards.push(Server::start(
            dir.path(),
            &[
                ("CAIRN__CLUSTER__ROLE", "shard"),
                ("CAIRN__CLUSTER__FAULT_INJECTION", "true"),
            ],
        ));
        dirs.push(dir);
    }
    let urls: Vec<String> = shards
        .iter()
        .map(|s| format!("\"{}\"", s.url("")))
        .collect();
    let list = format!("[{}]", urls.join(","));
    let dir = tempfile::tempdir().unwrap();
    let router = Server::start(
        dir.path(),
        &[
            ("CAIRN__CLUSTER__ROLE", "router"),
            ("CAIRN__CLUSTER__SHARDS", &list),
            ("CAIRN__CLUSTER__PROBE_INTERVAL_MS", "200"),
            ("CAIRN__CLUSTER__REQUEST_TIMEOUT_MS", "2000"),
        ],
    );
    dirs.push(dir);
    Cluster {
        shards,
        router,
        _dirs: dirs,
    }
}

pub(crate) fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn routing(router: &Server) -> Value {
    router.ok("GET", "/collections/sift", None)["routing"].clone()
}

fn all_active(routing: &Value) -> bool {
    routing["replicas"].as_array().is_some_and(|parts| {
        parts.iter().all(|replicas| {
            replicas
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["state"] == "active")
        })
    })
}

fn recall_and_touched(router: &Server, data: &Dataset) -> (f64, f64) {
    let mut touched = 0usize;
    let answers: Vec<Vec<u32>> = data
        .queries
        .rows()
        .map(|q| {
            let r = router.ok(
                "POST",
                "/collections/sift/points/query",
                Some(&json!({"query": q, "limit": 10, "explain": true})),
            );
            touched += r["explain"]["partitions"]["touched"]
                .as_array()
                .unwrap()
                .len();
            ids(&r).iter().map(|&i| i as u32).collect()
        })
        .collect();
    (
        recall_at_k(&answers, &data.ground_truth, 10),
        touched as f64 / data.queries.len() as f64,
    )
}

/// Loads siftsmall through the router into 4 partitions × 2 replicas and waits until routed.
fn load_siftsmall(router: &Server, data: &Dataset) {
    router.create(
        "sift",
        128,
        "Euclid",
        json!({"partitions": 4, "replication_factor": 2}),
    );
    router.upsert_vectors("sift", 128, &data.base.data, 0, 500);
    router.wait_routed("sift");
}

/// Latencies of `n` sequential queries, sorted, in ms.
fn latencies(router: &Server, data: &Dataset, n: usize, hedge: bool) -> Vec<f64> {
    let mut out: Vec<f64> = (0..n)
        .map(|i| {
            let q = data.queries.row(i % data.queries.len());
            let t = Instant::now();
            router.ok(
                "POST",
                "/collections/sift/points/query",
                Some(&json!({"query": q, "limit": 10, "params": {"hedge": hedge}})),
            );
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

fn p99(sorted: &[f64]) -> f64 {
    sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)]
}

#[test]
fn a_slow_shard_is_hedged_around() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let cluster = start_cluster(3);
    let router = &cluster.router;
    load_siftsmall(router, &data);
    latencies(router, &data, 100, true);
    // Healthy and slowed blocks alternate, so machine noise falls on both alike.
    let (mut healthy, mut slowed) = (Vec::new(), Vec::new());
    let n = 600;
    for _ in 0..3 {
        healthy.extend(latencies(router, &data, n / 3, true));
        cluster.shards[0].ok("POST", "/internal/fault", Some(&json!({"delay_ms": 200})));
        slowed.extend(latencies(router, &data, n / 3, true));
        cluster.shards[0].ok("POST", "/internal/fault", Some(&json!({"delay_ms": 0})));
    }
    healthy.sort_by(f64::total_cmp);
    slowed.sort_by(f64::total_cmp);
    let (healthy, mitigated) = (p99(&healthy), p99(&slowed));
    cluster.shards[0].ok("POST", "/internal/fault", Some(&json!({"delay_ms": 200})));
    let unmitigated = p99(&latencies(router, &data, 200, false));
    let hedges = router.ok(
        "POST",
        "/collections/sift/points/query",
        Some(
            &json!({"query": data.queries.row(0), "limit": 10, "explain": true,
                     "params": {"probe": 4}}),
        ),
    )["explain"]["partitions"]
        .clone();
    eprintln!(
        "straggler (+200 ms on one of 3 shards), p99 over {n} queries: healthy {healthy:.2} ms, \
         with mitigation {mitigated:.2} ms, without {unmitigated:.2} ms; a broadcast: {hedges}"
    );
    assert!(unmitigated > 200.0, "without mitigation p99 {unmitigated}");
    assert!(
        mitigated <= 1.5 * healthy,
        "p99 with mitigation {mitigated} ms vs healthy {healthy} ms"
    );
}

#[test]
fn router_and_three_shards_route_fail_over_catch_up_and_answer_partially() {
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let mut cluster = start_cluster(3);
    let router = &cluster.router;
    load_siftsmall(router, &data);
    let r = routing(router);
    eprintln!("cluster routing: {r}");
    assert!(all_active(&r), "{r}");
    assert_eq!(
        router.ok("GET", "/collections/sift", None)["points_count"],
        10_000
    );
    let (recall, touched) = recall_and_touched(router, &data);
    eprintln!("cluster w=4 R=2: recall@10 {recall:.4}, partitions touched {touched:.2} of 4");
    assert!(recall >= 0.95, "recall@10 {recall}");
    assert!(touched < 4.0, "touched {touched}");

    // A `Dot` collection routes by direction: no partition takes most of the queries.
    let ml = load_dataset(&shared_data_dir().join("movielens-mips")).unwrap();
    router.create(
        "ml",
        64,
        "Dot",
        json!({"partitions": 4, "replication_factor": 2}),
    );
    router.upsert_vectors("ml", 64, &ml.base.data, 0, 1000);
    router.wait_routed("ml");
    let mut share = [0usize; 4];
    let mut found = Vec::new();
    for q in ml.queries.rows() {
        let r = router.ok(
            "POST",
            "/collections/ml/points/query",
            Some(&json!({"query": q, "limit": 10, "explain": true})),
        );
        for p in r["explain"]["partitions"]["touched"].as_array().unwrap() {
            share[p.as_u64().unwrap() as usize] += 1;
        }
        found.push(ids(&r).iter().map(|&i| i as u32).collect::<Vec<_>>());
    }
    let ml_recall = recall_at_k(&found, &ml.ground_truth, 10);
    let mean = share.iter().sum::<usize>() as f64 / 4.0;
    let skew = *share.iter().max().unwrap() as f64 / mean;
    eprintln!("cluster movielens-mips Dot w=4 R=2: recall@10 {ml_recall:.4}, query share {share:?} (max/mean {skew:.2})");
    assert!(skew <= 1.5, "query share {share:?}");
    assert!(ml_recall >= 0.9, "recall@10 {ml_recall}");

    // SIGKILL shard 1 under a steady query load: no query fails.
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let slowest_us = Arc::new(AtomicUsize::new(0));
    let url = router.url("/collections/sift/points/query");
    let load = {
        let (stop, failed, done, slowest_us) = (
            stop.clone(),
            failed.clone(),
            done.clone(),
            slowest_us.clone(),
        );
        let queries: Vec<Vec<f32>> = data.queries.rows().map(<[f32]>::to_vec).collect();
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = client
                    .post(&url)
                    .json(&json!({"query": queries[i % queries.len()], "limit": 10}))
                    .send()
                    .is_ok_and(|r| r.status().is_success());
                if !ok {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                slowest_us.fetch_max(t.elapsed().as_micros() as usize, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    cluster.shards[1].kill9();
    std::thread::sleep(Duration::from_secs(2));
    // Writes go on while it is down: new points (far from every query, so the ground truth
    // stands) and a delete.
    let extra: Vec<f32> = data.base.data[..128 * 200]
        .iter()
        .map(|x| x + 1000.0)
        .collect();
    router.upsert_vectors("sift", 128, &extra, 20_000, 100);
    router.ok(
        "POST",
        "/collections/sift/points/delete?wait=true",
        Some(&json!({"points": [20_000, 20_001]})),
    );
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    eprintln!(
        "queries during the kill: {} sent, {} failed, slowest {:.1} ms (the failover)",
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        slowest_us.load(Ordering::Relaxed) as f64 / 1e3
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "no query may fail");
    let router = &cluster.router;
    let (recall_down, _) = recall_and_touched(router, &data);
    assert!(
        recall_down >= recall - 0.01,
        "recall with a node down {recall_down}"
    );
    assert_eq!(
        router.ok("GET", "/collections/sift", None)["points_count"],
        10_198
    );

    // Restart it: its replicas catch up and serve again, with equal op logs and counts.
    cluster.shards[1].restart();
    let router = &cluster.router;
    wait_for("catch-up", 60, || all_active(&routing(router)));
    let r = routing(router);
    eprintln!("after catch-up: {}", r["replicas"]);
    for replicas in r["replicas"].as_array().unwrap() {
        let replicas = replicas.as_array().unwrap();
        assert_eq!(
            replicas[0]["last_seq"], replicas[1]["last_seq"],
            "{replicas:?}"
        );
        assert_eq!(replicas[0]["points"], replicas[1]["points"], "{replicas:?}");
    }
    let (recall_back, _) = recall_and_touched(router, &data);
    assert!(
        recall_back >= recall - 0.01,
        "recall after catch-up {recall_back}"
    );

    // Both replicas of partitions 0 and 3 (nodes 0 and 1) answer only after 3 s: the fan-out's
    // deadline (request_timeout_ms = 2 s) answers without them instead of waiting. Without
    // hedging the replicas are tried one after another, so only the deadline keeps this under
    // 2 × 2 s.
    for shard in &cluster.shards[..2] {
        shard.ok("POST", "/internal/fault", Some(&json!({"delay_ms": 3000})));
    }
    let router = &cluster.router;
    let t = Instant::now();
    let slow = router.ok(
        "POST",
        "/collections/sift/points/query",
        Some(
            &json!({"query": data.queries.row(0), "limit": 10, "explain": true,
                     "params": {"probe": 4}}),
        ),
    );
    let waited = t.elapsed();
    eprintln!("both replicas of two partitions slowed to 3 s: answered in {waited:?}");
    assert!(waited < Duration::from_millis(2_900), "waited {waited:?}");
    assert!(
        slow["explain"]["partitions"]["coverage"].as_f64().unwrap() < 1.0,
        "{slow}"
    );
    for shard in &cluster.shards[..2] {
        shard.ok("POST", "/internal/fault", Some(&json!({"delay_ms": 0})));
    }

    // Kill shards 0 and 1: partitions 0 and 3 (on nodes 0,1) lose both replicas.
    cluster.shards[0].kill9();
    cluster.shards[1].kill9();
    let router = &cluster.router;
    let mut partial = 0;
    for q in data.queries.rows().take(20) {
        let (status, body) = router.call(
            "POST",
            "/collections/sift/points/query",
            Some(&json!({"query": q, "limit": 10, "params": {"probe": 4}, "explain": true})),
        );
        assert_eq!(status, 200, "{body}");
        let coverage = body["result"]["explain"]["partitions"]["coverage"]
            .as_f64()
            .unwrap();
        if coverage < 1.0 {
            partial += 1;
            assert!(body["result"]["warning"].is_string(), "{body}");
        }
        let (status, body) = router.call(
            "POST",
            "/collections/sift/points/query",
            Some(&json!({"query": q, "limit": 10, "params": {"probe": 4, "allow_partial": false}})),
        );
        assert_eq!(status, 503, "{body}");
    }
    assert_eq!(
        partial, 20,
        "a broadcast misses the dead partitions every time"
    );
    let (status, _) = router.call("GET", "/healthz", None);
    assert_eq!(status, 200);
}

fn status(router: &Server, name: &str) -> String {
    router.ok("GET", &format!("/collections/{name}"), None)["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn collection_info_tells_replication_and_health_as_they_are() {
    let mut cluster = start_cluster(2);
    let router = &cluster.router;
    router.create("rf", 4, "Euclid", json!({"replication_factor": 2}));
    let vectors: Vec<f32> = (0..400).map(|i| i as f32).collect();
    router.upsert_vectors("rf", 4, &vectors, 0, 50);
    let info = router.ok("GET", "/collections/rf", None);
    assert_eq!(info["config"]["params"]["replication_factor"], 2, "{info}");
    assert_eq!(info["status"], "green", "{info}");

    // One of the two copies gone: the partition still serves, under-replicated.
    cluster.shards[1].kill9();
    let router = &cluster.router;
    wait_for("yellow", 10, || status(router, "rf") == "yellow");
    let metrics = reqwest::blocking::get(router.url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("cairn_collection_status{collection=\"rf\"} 1"),
        "{metrics}"
    );
    assert_eq!(
        router.ok("POST", "/collections/rf/points/count", Some(&json!({})))["count"],
        100
    );
    // Both gone: no copy serves.
    cluster.shards[0].kill9();
    let router = &cluster.router;
    wait_for("red", 10, || status(router, "rf") == "red");

    // Both back: the replicas catch up and the collection is green again.
    cluster.shards[0].restart();
    cluster.shards[1].restart();
    let router = &cluster.router;
    wait_for("green", 60, || status(router, "rf") == "green");
}

#[test]
fn concurrent_writes_reach_every_replica_in_one_order() {
    let cluster = start_cluster(2);
    let router = &cluster.router;
    router.create("race", 4, "Euclid", json!({"replication_factor": 2}));
    // Two writers overwrite the same 20 ids, round after round: if the replicas applied
    // the writes in different orders, they would end with different values.
    let url = router.url("/collections/race/points?wait=true");
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let url = url.clone();
            std::thread::spawn(move || {
                let client = reqwest::blocking::Client::new();
                for round in 0..40 {
                    let points: Vec<Value> = (0..20)
                        .map(|id| {
                            json!({"id": id, "vector": [writer as f32, round as f32, id as f32, 1.0]})
                        })
                        .collect();
                    let response = client.put(&url).json(&json!({"points": points})).send();
                    assert!(response.unwrap().status().is_success());
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let state = |shard: &Server| {
        shard.ok(
            "POST",
            "/internal/partitions/race.p0",
            Some(&json!({"call": "state"})),
        )["last_seq"]
            .clone()
    };
    let values = |shard: &Server| -> Vec<Value> {
        (0..20)
            .map(|id| {
                shard.ok("GET", &format!("/collections/race.p0/points/{id}"), None)["vector"]
                    .clone()
            })
            .collect()
    };
    let (a, b) = (&cluster.shards[0], &cluster.shards[1]);
    assert_eq!(state(a), json!(80));
    assert_eq!(state(a), state(b));
    assert_eq!(values(a), values(b));
    assert_eq!(status(router, "race"), "green");
}

#[test]
fn a_replica_whose_partition_is_gone_is_routed_around_not_trusted() {
    let cluster = start_cluster(2);
    let router = &cluster.router;
    router.create("gone", 4, "Euclid", json!({"replication_factor": 2}));
    let vectors: Vec<f32> = (0..40).map(|i| i as f32).collect();
    router.upsert_vectors("gone", 4, &vectors, 0, 10);
    // Shard 1 loses the partition (as if its data were wiped) while its node stays up.
    cluster.shards[1].ok("DELETE", "/collections/gone.p0", None);
    // Writes go on through the other replica; the one without the partition is dead, not a
    // reason to fail the write, and not trusted for reads.
    router.upsert_vectors("gone", 4, &vectors, 100, 10);
    for _ in 0..5 {
        assert_eq!(
            router.ok("POST", "/collections/gone/points/count", Some(&json!({})))["count"],
            20
        );
    }
    assert_eq!(status(router, "gone"), "yellow");
    // A point that does not exist is a 404 through the router, as on one node, whether the
    // router or the shard finds it missing.
    let (code, body) = router.call("GET", "/collections/gone/points/999", None);
    assert_eq!(code, 404, "{body}");
    let (code, body) = router.call(
        "POST",
        "/collections/gone/points/query",
        Some(&json!({"query": 999})),
    );
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["status"]["code"], "not_found", "{body}");
}
