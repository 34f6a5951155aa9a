//! End-to-end test of the Docker deployment (issue #7): builds the runtime image with
//! `configs/docker/build-image.sh` (no registry: a debootstrapped base plus this build's `cairn`),
//! starts `configs/docker-compose.standalone.yml`, loads siftsmall into a 4-partition collection
//! through the published port, checks recall@10 against exact ground truth, restarts the
//! service and checks the data came back, and always tears the project down with `down -v`,
//! leaving no container, network or volume behind.
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
            .env("CAIRN_BIND", "127.0.0.1");
        c
    }

    fn url(&self) -> String {
        let port = run(&mut self.cmd(&["port", "cairn", "6333"]));
        format!("http://{port}")
    }

    fn wait_healthy(&self) {
        let id = run(&mut self.cmd(&["ps", "-q", "cairn"]));
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let status = run(Command::new("docker").args([
                "inspect",
                "--format",
                "{{.State.Health.Status}}",
                &id,
            ]));
            if status == "healthy" {
                return;
            }
            assert!(Instant::now() < deadline, "container {id} is {status}");
            std::thread::sleep(Duration::from_millis(500));
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

#[test]
fn standalone_compose_serves_survives_a_restart_and_cleans_up() {
    if !docker_available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI has a Docker engine, but `docker info` fails"
        );
        eprintln!("skipped: no Docker engine answers `docker info`");
        return;
    }
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    run(Command::new("bash")
        .arg(repo().join("configs/docker/build-image.sh"))
        .arg(env!("CARGO_BIN_EXE_cairn")));
    let project = Project {
        compose: compose_command(),
        name: format!("cairntest{}", std::process::id()),
        file: repo().join("configs/docker-compose.standalone.yml"),
    };
    run(&mut project.cmd(&["up", "-d"]));
    project.wait_healthy();
    let url = project.url();
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();

    call(
        &client,
        "PUT",
        &format!("{url}/collections/sift"),
        &json!({"vectors": {"size": 128, "distance": "Euclid"}, "partitions": 4}),
    );
    for (b, chunk) in data.base.data.chunks(128 * 1000).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(128)
            .enumerate()
            .map(|(i, v)| json!({"id": b * 1000 + i, "vector": v}))
            .collect();
        call(
            &client,
            "PUT",
            &format!("{url}/collections/sift/points?wait=true"),
            &json!({"points": points}),
        );
    }
    wait_routed(&client, &url);
    let before = recall(&client, &url, &data);
    eprintln!("docker standalone, 4 partitions: recall@10 {before:.4}");
    assert!(before >= 0.95, "recall@10 {before}");

    run(&mut project.cmd(&["restart"]));
    project.wait_healthy();
    let url = project.url();
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
