//! Vectors on disk (issue #25, point 5): Qdrant's `on_disk: true` (or `memory: "cold"`) keeps
//! an index's rows in a memory-mapped file, so with row codes the graph traverses by the codes
//! in RAM and re-scores its final candidates from the mapped rows. Checked over REST: the same
//! recall as in memory, exact scores, the collection info in Qdrant's shape, the index's RAM
//! down by the rows' bytes, the same answers after a `kill -9`, no file left behind, and the
//! refusals.

use cairn_index::dataset::{load_dataset, recall_at_k, shared_data_dir};
use serde_json::{json, Value};

use crate::harness::{ids, Server};

fn memory_bytes(server: &Server, collection: &str) -> u64 {
    let text = reqwest::blocking::get(server.url("/metrics"))
        .unwrap()
        .text()
        .unwrap();
    let prefix = format!("cairn_index_memory_bytes{{collection=\"{collection}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no memory gauge for {collection} in\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// Every file under `dir` whose name does not belong to RocksDB, the index file or the
/// server's own logs: a mapped scratch file that outlived its store would show up here.
fn stray_files(dir: &std::path::Path) -> Vec<String> {
    let mut stray = Vec::new();
    for entry in walk(dir) {
        let path = entry.to_string_lossy().into_owned();
        let known = path.contains("/db/")
            || path.ends_with("index.cidx")
            || path.contains("/server-")
            || path.contains("/ready-")
            || path.contains("/snapshots/")
            || path.ends_with("cairn.lock")
            || path.ends_with("catalog.json");
        if !known {
            stray.push(path);
        }
    }
    stray
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
#[allow(clippy::print_stderr)]
fn on_disk_vectors_answer_as_in_memory_ones_with_less_ram_and_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let data = load_dataset(&shared_data_dir().join("siftsmall")).unwrap();
    let dim = data.base.dim;
    let int8 = json!({"scalar": {"type": "int8", "always_ram": true}});
    server.create("ram", dim, "Euclid", json!({"quantization_config": int8}));
    // Qdrant's own spelling of the setting, as its clients send it.
    server.ok(
        "PUT",
        "/collections/disk",
        Some(
            &json!({"vectors": {"size": dim, "distance": "Euclid", "on_disk": true},
                     "quantization_config": int8}),
        ),
    );
    // Qdrant 1.19's spelling: `memory: cold` is on disk too.
    server.ok(
        "PUT",
        "/collections/cold",
        Some(&json!({"vectors": {"size": dim, "distance": "Euclid", "memory": "cold"}})),
    );
    for name in ["ram", "disk", "cold"] {
        server.upsert_vectors(name, dim, &data.base.data, 0, 1000);
    }
    let info = server.ok("GET", "/collections/disk", None);
    assert_eq!(
        info["config"]["params"]["vectors"]["on_disk"], true,
        "{}",
        info["config"]["params"]
    );
    let info = server.ok("GET", "/collections/cold", None);
    assert_eq!(info["config"]["params"]["vectors"]["on_disk"], true);
    let info = server.ok("GET", "/collections/ram", None);
    assert!(info["config"]["params"]["vectors"]["on_disk"].is_null());

    let answers = |server: &Server, name: &str| -> Vec<Value> {
        data.queries
            .rows()
            .map(|q| {
                server.ok(
                    "POST",
                    &format!("/collections/{name}/points/query"),
                    Some(&json!({"query": q, "limit": 10})),
                )
            })
            .collect()
    };
    let recall = |results: &[Value]| {
        let slots: Vec<Vec<u32>> = results
            .iter()
            .map(|r| ids(r).iter().map(|&id| id as u32).collect())
            .collect();
        recall_at_k(&slots, &data.ground_truth, 10)
    };
    let ram = answers(&server, "ram");
    let disk = answers(&server, "disk");
    let cold = answers(&server, "cold");
    let (r_ram, r_disk, r_cold) = (recall(&ram), recall(&disk), recall(&cold));
    eprintln!("siftsmall REST recall@10: int8 in RAM {r_ram:.3}, int8 on disk {r_disk:.3}, f32 on disk {r_cold:.3}");
    assert!(r_disk >= 0.95 && r_cold >= 0.95, "{r_disk:.3} {r_cold:.3}");
    // Scores are exact: re-scored from the mapped rows, the same as the in-memory copy's.
    let q = data.queries.row(0);
    for (a, b) in ram.iter().zip(&disk).take(1) {
        for (x, y) in a["points"]
            .as_array()
            .unwrap()
            .iter()
            .zip(b["points"].as_array().unwrap())
        {
            if x["id"] == y["id"] {
                let exact: f32 = data
                    .base
                    .row(x["id"].as_u64().unwrap() as usize)
                    .iter()
                    .zip(q)
                    .map(|(a, b)| (a - b) * (a - b))
                    .sum();
                let got = y["score"].as_f64().unwrap() as f32;
                assert!(
                    (got - exact.sqrt()).abs() <= 1e-3 * exact.sqrt().max(1.0),
                    "{got} vs {exact}"
                );
            }
        }
    }

    // The index's RAM drops by (nearly) the rows: 10,000 × 512 bytes.
    let rows = (data.base.len() * dim * 4) as u64;
    let (in_ram, on_disk) = (memory_bytes(&server, "ram"), memory_bytes(&server, "disk"));
    eprintln!("index RAM: {in_ram} bytes with rows in memory, {on_disk} with rows on disk");
    assert!(
        on_disk + rows * 9 / 10 <= in_ram,
        "{on_disk} on disk against {in_ram} in RAM"
    );

    // A clean stop writes the index file; the restart streams its rows into a new mapped
    // file, and the answers are those of before.
    server.terminate();
    server.restart();
    let same_ids = |a: &[Value], b: &[Value], skip: usize| {
        let of = |r: &[Value]| -> Vec<Vec<u64>> {
            r.iter()
                .enumerate()
                .filter(|&(i, _)| i != skip)
                .map(|(_, v)| ids(v))
                .collect()
        };
        of(a) == of(b)
    };
    assert!(
        same_ids(&answers(&server, "disk"), &disk, usize::MAX),
        "answers changed across a restart"
    );
    // Read back from its file into a new mapping, the index's RAM stays without the rows.
    let (reloaded, ram_reloaded) = (memory_bytes(&server, "disk"), memory_bytes(&server, "ram"));
    assert!(
        reloaded + rows * 9 / 10 <= ram_reloaded,
        "{reloaded} on disk against {ram_reloaded} in RAM after the restart"
    );
    // An acknowledged write survives kill -9 (the index file, then the op log replayed).
    let extra: Vec<f32> = data.queries.row(1).iter().map(|x| x + 0.5).collect();
    server.ok(
        "PUT",
        "/collections/disk/points?wait=true",
        Some(&json!({"points": [{"id": 99_999, "vector": extra}]})),
    );
    server.restart();
    // Query 1 may now find the new point; every other answer is as before.
    assert!(
        same_ids(&answers(&server, "disk"), &disk, 1),
        "answers changed across kill -9"
    );
    let found = server.ok(
        "POST",
        "/collections/disk/points/query",
        Some(&json!({"query": extra, "limit": 1})),
    );
    assert_eq!(ids(&found), vec![99_999]);
    // The scratch files are nameless: nothing new is left in the data folder.
    let stray = stray_files(dir.path());
    assert!(stray.is_empty(), "{stray:?}");
}

#[test]
fn on_disk_is_refused_where_an_index_keeps_its_rows_in_memory_and_is_checked_on_update() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (status, body) = server.call(
        "PUT",
        "/collections/lsh",
        Some(
            &json!({"vectors": {"size": 8, "distance": "Dot", "on_disk": true},
                     "index": {"kind": "simple_lsh"}}),
        ),
    );
    assert_eq!(status, 400, "{body}");
    let message = body["status"]["error"].as_str().unwrap_or_default();
    assert!(
        message.contains("vectors.on_disk") && message.contains("simple_lsh"),
        "{body}"
    );
    let (status, body) = server.call(
        "PUT",
        "/collections/both",
        Some(&json!({"vectors": {"size": 8, "distance": "Dot", "on_disk": true, "memory": "pinned"}})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("memory"), "{body}");
    // A named vector on disk beside one in memory; an update may restate either, not flip it.
    server.ok(
        "PUT",
        "/collections/mixed",
        Some(&json!({"vectors": {
            "a": {"size": 4, "distance": "Cosine", "on_disk": true},
            "b": {"size": 4, "distance": "Cosine"}}})),
    );
    let info = server.ok("GET", "/collections/mixed", None);
    assert_eq!(info["config"]["params"]["vectors"]["a"]["on_disk"], true);
    assert!(info["config"]["params"]["vectors"]["b"]["on_disk"].is_null());
    server.ok(
        "PATCH",
        "/collections/mixed",
        Some(&json!({"vectors": {"a": {"on_disk": true}, "b": {"on_disk": false}}})),
    );
    // Qdrant 1.19's spelling restates it too.
    server.ok(
        "PATCH",
        "/collections/mixed",
        Some(&json!({"vectors": {"a": {"memory": "cold"}, "b": {"memory": "cached"}}})),
    );
    let (status, body) = server.call(
        "PATCH",
        "/collections/mixed",
        Some(&json!({"vectors": {"a": {"memory": "pinned"}}})),
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = server.call(
        "PATCH",
        "/collections/mixed",
        Some(&json!({"vectors": {"b": {"on_disk": true}}})),
    );
    assert_eq!(status, 400, "{body}");
    server.ok(
        "PUT",
        "/collections/mixed/points?wait=true",
        Some(&json!({"points": [
            {"id": 1, "vector": {"a": [1.0, 0.0, 0.0, 0.0], "b": [0.0, 1.0, 0.0, 0.0]}},
            {"id": 2, "vector": {"a": [0.0, 1.0, 0.0, 0.0], "b": [1.0, 0.0, 0.0, 0.0]}}]})),
    );
    let hit = server.ok(
        "POST",
        "/collections/mixed/points/query",
        Some(&json!({"query": [0.1, 0.9, 0.0, 0.0], "using": "a", "limit": 1})),
    );
    assert_eq!(ids(&hit), vec![2]);
}
