//! End-to-end tests of the Docker deployment (issue #7). The standalone one builds the runtime
//! image with
//! `configs/docker/build-image.sh` (no registry: a debootstrapped base plus this build's `cairn`),
//! starts `configs/docker-compose.standalone.yml`, loads siftsmall into a 4-partition collection
//! through the published port, checks recall@10 against exact ground truth, restarts the
//! service and checks the data came back, and always tears the project down with `down -v`,
//! leaving no container, network or volume behind.
//!
//! The cluster one starts `configs/docker-compose.yml` (three Raft peer nodes), loads
//! siftsmall with three replicas through one node, then `docker kill`s, `docker pause`s and
//! restarts each node in turn under a query load spread over all three (a client that tries the
//! next node when one does not answer, as the SDK does): no query fails, writes go on through
//! the others, the node catches up, the data survives a restart of the project, and `down -v`
//! leaves nothing.
//!
//! Runs whenever a Docker engine answers; with `CI=true` a missing engine is a failure, since
//! CI machines have one.
#![allow(
    missing_docs,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir, Dataset};
use serde_json::{json, Value};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn docker_available() -> bool {
    Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `docker compose` (v2) when present, else `docker-compose` (v1).
fn compose_command() -> Vec<String> {
    let v2 = Command::new("docker")
        .args(["compose", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if v2 {
        vec!["docker".into(), "compose".into()]
    } else {
        vec!["docker-compose".into()]
    }
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A compose project that is always taken down, also when the test fails.
struct Project {
    compose: Vec<String>,
    name: String,
    file: PathBuf,
}

impl Project {
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.compose[0]);
        c.args(&self.compose[1..])
            .args(["-p", &self.name, "-f"])
            .arg(&self.file)
            .args(args)
            .env("CAIRN_PORT", "")
            .env("CAIRN_PORT_1", "")
            .env("CAIRN_PORT_2", "")
            .env("CAIRN_PORT_3", "")
            .env("CAIRN_CLUSTER_SECRET", "docker-test-secret")
            .env("CAIRN_BIND", "127.0.0.1");
        c
    }

    fn url(&self, service: &str) -> String {
        let port = run(&mut self.cmd(&["port", service, "6333"]));
        format!("http://{port}")
    }

    fn container(&self, service: &str) -> String {
        run(&mut self.cmd(&["ps", "-q", service]))
    }

    fn wait_healthy(&self, services: &[&str]) {
        for service in services {
            let id = self.container(service);
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let status = run(Command::new("docker").args([
                    "inspect",
                    "--format",
                    "{{.State.Health.Status}}",
                    &id,
                ]));
                if status == "healthy" {
                    break;
                }
                assert!(Instant::now() < deadline, "{service} ({id}) is {status}");
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let _ = self
            .cmd(&["down", "-v", "--remove-orphans", "--timeout", "10"])
            .output();
    }
}

/// Containers, networks and volumes still labelled with compose project `name`.
fn leftovers(name: &str) -> String {
    let label = format!("label=com.docker.compose.project={name}");
    [
        vec!["ps", "-aq", "--filter", &label],
        vec!["network", "ls", "-q", "--filter", &label],
        vec!["volume", "ls", "-q", "--filter", &label],
    ]
    .iter()
    .map(|args| run(Command::new("docker").args(args)))
    .collect::<Vec<_>>()
    .join(" ")
    .trim()
    .to_owned()
}

fn call(client: &reqwest::blocking::Client, method: &str, url: &str, body: &Value) -> Value {
    let request = match method {
        "PUT" => client.put(url),
        "POST" => client.post(url),
        _ => client.get(url),
    };
    let response = request.json(body).send().unwrap();
    let status = response.status();
    let value: Value = response.json().unwrap();
    assert!(status.is_success(), "{method} {url}: {status} {value}");
    value["result"].clone()
}

fn recall(client: &reqwest::blocking::Client, url: &str, data: &Dataset) -> f64 {
    let answers: Vec<Vec<u32>> = data
        .queries
        .rows()
        .map(|q| {
            let r = call(
                client,
                "POST",
                &format!("{url}/collections/sift/points/query"),
                &json!({"query": q, "limit": 10}),
            );
            r["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    recall_at_k(&answers, &data.ground_truth, 10)
}

fn load_siftsmall(client: &reqwest::blocking::Client, url: &str, data: &Dataset, extra: Value) {
    let mut body = json!({"vectors": {"size": 128, "distance": "Euclid"}, "partitions": 4});
    body.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    call(client, "PUT", &format!("{url}/collections/sift"), &body);
    put_siftsmall(client, &[url.to_owned()], data);
    wait_routed(client, url);
}

/// Puts siftsmall's points into `sift`, 1,000 per request (each waiting until searchable),
/// through `urls` in turn.
fn put_siftsmall(client: &reqwest::blocking::Client, urls: &[String], data: &Dataset) {
    for (b, chunk) in data.base.data.chunks(128 * 1000).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(128)
            .enumerate()
            .map(|(i, v)| json!({"id": b * 1000 + i, "vector": v}))
            .collect();
        call(
            client,
            "PUT",
            &format!("{}/collections/sift/points?wait=true", urls[b % urls.len()]),
            &json!({"points": points}),
        );
    }
}

fn wait_routed(client: &reqwest::blocking::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let info = call(
            client,
            "GET",
            &format!("{url}/collections/sift"),
            &json!({}),
        );
        let r = &info["routing"];
        if r["phase"] == "routed" && r["training_due"] == false {
            return;
        }
        assert!(Instant::now() < deadline, "not routed: {r}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Builds the image (once per test run) and starts `configs/{file}` as a project named
/// `{prefix}{pid}`; `None` when no Docker engine answers outside CI.
fn up(prefix: &str, file: &str) -> Option<(Project, Dataset)> {
    static IMAGE: std::sync::Once = std::sync::Once::new();
    if !docker_available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI has a Docker engine, but `docker info` fails"
        );
        eprintln!("skipped: no Docker engine answers `docker info`");
        return None;
    }
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    IMAGE.call_once(|| {
        run(Command::new("bash")
            .arg(repo().join("configs/docker/build-image.sh"))
            .arg(env!("CARGO_BIN_EXE_cairn")));
    });
    let project = Project {
        compose: compose_command(),
        name: format!("{prefix}{}", std::process::id()),
        file: repo().join("configs").join(file),
    };
    run(&mut project.cmd(&["up", "-d"]));
    Some((project, data))
}

#[test]
fn standalone_compose_serves_survives_a_restart_and_cleans_up() {
    let Some((project, data)) = up("cairntest", "docker-compose.standalone.yml") else {
        return;
    };
    project.wait_healthy(&["cairn"]);
    let url = project.url("cairn");
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    load_siftsmall(&client, &url, &data, json!({}));
    let before = recall(&client, &url, &data);
    eprintln!("docker standalone, 4 partitions: recall@10 {before:.4}");
    assert!(before >= 0.95, "recall@10 {before}");

    run(&mut project.cmd(&["restart"]));
    project.wait_healthy(&["cairn"]);
    let url = project.url("cairn");
    let count = call(
        &client,
        "POST",
        &format!("{url}/collections/sift/points/count"),
        &json!({}),
    );
    assert_eq!(count["count"], 10_000, "data survives a restart");
    let after = recall(&client, &url, &data);
    assert!(after >= 0.95, "recall@10 after the restart {after}");

    let name = project.name.clone();
    drop(project);
    let left = leftovers(&name);
    assert!(left.is_empty(), "down -v left {left}");
}

/// Queries spread over several nodes until stopped, each sent to the next node when one does
/// not answer in time (as the SDK fails over): (sent, failed).
struct SpreadLoad {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, usize)>,
}

impl SpreadLoad {
    fn start(urls: &[String], data: &Dataset) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let queries: Vec<Vec<f32>> = data.queries.rows().map(<[f32]>::to_vec).collect();
        let urls: Vec<String> = urls
            .iter()
            .map(|u| format!("{u}/collections/sift/points/query"))
            .collect();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()
                .unwrap();
            let (mut sent, mut failed) = (0, 0);
            while !flag.load(Ordering::Relaxed) {
                let body = json!({"query": queries[sent % queries.len()], "limit": 10});
                let ok = (0..urls.len()).any(|k| {
                    client
                        .post(&urls[(sent + k) % urls.len()])
                        .json(&body)
                        .send()
                        .is_ok_and(|r| r.status().is_success())
                });
                sent += 1;
                failed += usize::from(!ok);
            }
            (sent, failed)
        });
        Self { stop, thread }
    }

    fn finish(self) -> (usize, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Points counted through `url`, if it answers.
fn count_at(client: &reqwest::blocking::Client, url: &str) -> Option<u64> {
    let response = client
        .post(format!("{url}/collections/sift/points/count"))
        .json(&json!({"exact": true}))
        .send()
        .ok()?;
    let body: Value = response.json().ok()?;
    body["result"]["count"].as_u64()
}

fn wait_count_at(client: &reqwest::blocking::Client, url: &str, count: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while count_at(client, url) != Some(count) {
        assert!(
            Instant::now() < deadline,
            "{url} never counted {count} (at {:?})",
            count_at(client, url)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn peer_compose_survives_kills_pauses_and_restarts_of_any_node() {
    let Some((project, data)) = up("cairnpeers", "docker-compose.yml") else {
        return;
    };
    let nodes = ["node-1", "node-2", "node-3"];
    project.wait_healthy(&nodes);
    let urls: Vec<String> = nodes.iter().map(|n| project.url(n)).collect();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // The nodes elect the metadata group's leader and record themselves; a create before that
    // is refused with a 503, so wait for all three records.
    let deadline = Instant::now() + Duration::from_secs(60);
    while call(&client, "GET", &format!("{}/cluster", urls[0]), &json!({}))["peers"]
        .as_object()
        .is_none_or(|peers| peers.values().filter(|p| p["api_uri"].is_string()).count() < 3)
    {
        assert!(
            Instant::now() < deadline,
            "the nodes never formed a cluster"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // Each node records the URL it is reached at on the compose network, not 0.0.0.0.
    let peers = call(&client, "GET", &format!("{}/cluster", urls[0]), &json!({}))["peers"].clone();
    for id in 1..=3 {
        assert_eq!(
            peers[id.to_string()]["api_uri"],
            format!("http://node-{id}:6333"),
            "{peers}"
        );
    }
    call(
        &client,
        "PUT",
        &format!("{}/collections/sift", urls[0]),
        &json!({"vectors": {"size": 128, "distance": "Euclid"}, "replication_factor": 3}),
    );
    // The other nodes open the collection as they apply the metadata, a moment after the
    // create returns: writes go through every node, so wait until each serves it.
    for url in &urls {
        wait_count_at(&client, url, 0);
    }
    put_siftsmall(&client, &urls, &data);
    let mut expected = 10_000u64;
    for url in &urls {
        wait_count_at(&client, url, expected);
        let r = recall(&client, url, &data);
        eprintln!("docker peers, 3 replicas, through {url}: recall@10 {r:.4}");
        assert!(r >= 0.95, "recall@10 {r} through {url}");
    }

    for (i, node) in nodes.iter().enumerate() {
        let urls = project_urls(&project, &nodes);
        let container = project.container(node);
        // docker kill under load: no query fails; writes go on through another node.
        let load = SpreadLoad::start(&urls, &data);
        std::thread::sleep(Duration::from_millis(500));
        run(Command::new("docker").args(["kill", &container]));
        let extra: Vec<Value> = (0..100)
            .map(|k| {
                let id = 50_000 + expected + k;
                json!({"id": id, "vector": vec![1000.0 + k as f32; 128]})
            })
            .collect();
        call(
            &client,
            "PUT",
            &format!("{}/collections/sift/points?wait=true", urls[(i + 1) % 3]),
            &json!({"points": extra}),
        );
        expected += 100;
        std::thread::sleep(Duration::from_secs(2));
        let (sent, failed) = load.finish();
        eprintln!("docker kill {node} under load: {sent} queries, {failed} failed");
        assert_eq!(failed, 0, "queries failed while {node} was killed");
        // docker start: it catches up.
        run(Command::new("docker").args(["start", &container]));
        project.wait_healthy(&[node]);
        let url = project.url(node);
        wait_count_at(&client, &url, expected);

        // docker pause for 5 s under load: no query fails.
        let urls = project_urls(&project, &nodes);
        let load = SpreadLoad::start(&urls, &data);
        run(Command::new("docker").args(["pause", &container]));
        std::thread::sleep(Duration::from_secs(5));
        run(Command::new("docker").args(["unpause", &container]));
        std::thread::sleep(Duration::from_secs(1));
        let (sent, failed) = load.finish();
        eprintln!("docker pause {node} 5 s under load: {sent} queries, {failed} failed");
        assert_eq!(failed, 0, "queries failed while {node} was paused");
    }

    // Data survives `restart` of the whole project.
    run(&mut project.cmd(&["restart"]));
    project.wait_healthy(&nodes);
    for url in project_urls(&project, &nodes) {
        wait_count_at(&client, &url, expected);
    }
    let url = project.url("node-2");
    let r = recall(&client, &url, &data);
    assert!(r >= 0.95, "recall@10 after the restart {r}");

    let name = project.name.clone();
    drop(project);
    let left = leftovers(&name);
    assert!(left.is_empty(), "down -v left {left}");
}

/// Each node's published URL (ports may change when a container restarts).
fn project_urls(project: &Project, nodes: &[&str]) -> Vec<String> {
    nodes.iter().map(|n| project.url(n)).collect()
}
