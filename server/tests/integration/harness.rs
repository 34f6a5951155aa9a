//! Starts the real `cairn` binary on port 0 and talks HTTP to it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a server may take to load its collections.
const START_TIMEOUT: Duration = Duration::from_secs(180);

/// A running `cairn serve` process.
pub struct Server {
    child: Option<Child>,
    pub addr: String,
    pub data_dir: PathBuf,
    env: Vec<(String, String)>,
    client: reqwest::blocking::Client,
    starts: u32,
}

impl Server {
    /// Starts a server on a fresh port over `data_dir`, with extra `CAIRN__…` variables
    /// (restarts keep the port).
    pub fn start(data_dir: &Path, env: &[(&str, &str)]) -> Server {
        let mut server = Server {
            child: None,
            addr: String::new(),
            data_dir: data_dir.to_path_buf(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            client: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
            starts: 0,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let ready = self.data_dir.join(format!("ready-{}", self.starts));
        let log = std::fs::File::create(self.data_dir.join(format!("server-{}.log", self.starts)))
            .unwrap();
        // A restart keeps its address, as a restarted node of a cluster must.
        let addr = if self.addr.is_empty() {
            "127.0.0.1:0".to_owned()
        } else {
            self.addr.clone()
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cairn"));
        cmd.args(["serve", "--http-addr", &addr])
            .arg("--data-dir")
            .arg(self.data_dir.join("data"))
            .arg("--ready-file")
            .arg(&ready)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn cairn");
        self.child = Some(child);
        let started = Instant::now();
        loop {
            if let Ok(addr) = std::fs::read_to_string(&ready) {
                self.addr = addr.trim().to_owned();
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("cairn exited early with {status}; log:\n{}", self.log());
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "cairn not ready in time; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The current process's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join(format!("server-{}.log", self.starts)))
            .unwrap_or_default()
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = i32::try_from(child.id()).unwrap();
            // SAFETY: sending a signal to our own child process has no memory-safety impact.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
            let status = child.wait().unwrap();
            assert!(
                status.success(),
                "cairn exited with {status} on SIGTERM; log:\n{}",
                self.log()
            );
        }
    }

    /// SIGSTOP (`true`) or SIGCONT (`false`): the process stays, frozen, as a stalled VM or a
    /// long GC pause would leave it.
    pub fn freeze(&self, frozen: bool) {
        let child = self.child.as_ref().expect("the server is running");
        let pid = i32::try_from(child.id()).unwrap();
        let signal = if frozen { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: sending a signal to our own child process has no memory-safety impact.
        unsafe {
            libc::kill(pid, signal);
        }
    }

    /// Starts the process again over the same data.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends a request and returns the status and the JSON body (Null when empty).
    pub fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self.client.request(method, self.url(path));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .unwrap_or_else(|e| panic!("request to {path} failed: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// Sends raw bytes.
    pub fn call_raw(&self, method: &str, path: &str, body: Vec<u8>) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let resp = self
            .client
            .request(method, self.url(path))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        let status = resp.status().as_u16();
        (
            status,
            serde_json::from_str(&resp.text().unwrap()).unwrap_or(Value::Null),
        )
    }

    /// A call that must succeed; returns `result`.
    pub fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, json) = self.call(method, path, body);
        assert_eq!(status, 200, "{method} {path} -> {status}: {json}");
        assert_eq!(json["status"], "ok", "{json}");
        json["result"].clone()
    }

    /// Waits until a partitioned collection's routing is settled (router trained, every point
    /// re-homed, no retraining due); returns its info.
    pub fn wait_routed(&self, name: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let info = self.ok("GET", &format!("/collections/{name}"), None);
            if info["routing"]["phase"] == "routed" && info["routing"]["training_due"] == false {
                return info;
            }
            assert!(
                Instant::now() < deadline,
                "collection {name} not routed in time: {}",
                info["routing"]
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Creates a collection.
    pub fn create(&self, name: &str, dim: usize, distance: &str, extra: Value) -> Value {
        let mut body = serde_json::json!({"vectors": {"size": dim, "distance": distance}});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        self.ok("PUT", &format!("/collections/{name}"), Some(&body))
    }

    /// Upserts rows of `data` as points `first_id..`, batch by batch, with `wait=true`.
    pub fn upsert_vectors(
        &self,
        name: &str,
        dim: usize,
        data: &[f32],
        first_id: u64,
        batch: usize,
    ) {
        for (b, chunk) in data.chunks(dim * batch).enumerate() {
            let points: Vec<Value> = chunk
                .chunks(dim)
                .enumerate()
                .map(|(i, v)| {
                    let id = first_id + (b * batch + i) as u64;
                    serde_json::json!({"id": id, "vector": v, "payload": {"bucket": id % 10}})
                })
                .collect();
            self.ok(
                "PUT",
                &format!("/collections/{name}/points?wait=true"),
                Some(&serde_json::json!({"points": points})),
            );
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Ids of a query response, in order.
pub fn ids(result: &Value) -> Vec<u64> {
    let points = result.get("points").unwrap_or(result);
    points
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_u64().unwrap())
        .collect()
}

/// The python of a virtualenv named `name` in the target directory with `requirements`
/// installed from PyPI, made on first use and kept between runs ([`cairn_testkit::venv`]).
pub fn venv(name: &str, requirements: &[&str]) -> PathBuf {
    let target = cairn_testkit::target_dir(Path::new(env!("CARGO_MANIFEST_DIR")));
    cairn_testkit::venv(&target, name, requirements).unwrap()
}

/// `n` deterministic vectors of `dim` components in [-0.5, 0.5), row after row (a xorshift
/// generator), so every run sees the same data.
pub fn seeded_vectors(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n * dim)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// Copies of points a partitioned collection stores, over its partitions (from its info's
/// `routing.partition_points`): above its point count when points are spilled.
pub fn stored_copies(info: &Value) -> u64 {
    info["routing"]["partition_points"]
        .as_array()
        .expect("a partitioned collection's info lists its partitions' points")
        .iter()
        .filter_map(Value::as_u64)
        .sum()
}
