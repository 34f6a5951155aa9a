//! Snapshots (`/collections/{c}/snapshots…`, `/snapshots…`, `cairn restore`): a collection
//! taken as of one moment, downloaded, recovered by upload, by `file://` and by URL, over a
//! collection that changed since and into new names; under concurrent writes; across
//! partitions; refused whole when the file is bad; and a full-storage snapshot restored into
//! an empty data folder.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::harness::{ids, seeded_vectors as vectors, Server};

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()[..64].to_owned()
}

/// The answers the tests compare: top 10 ids and scores of a few queries, with payloads.
fn answers(server: &Server, name: &str, dim: usize) -> Vec<Value> {
    let queries = vectors(5, dim, 99);
    queries
        .chunks(dim)
        .map(|q| {
            let body =
                json!({"query": q, "limit": 10, "with_payload": true, "params": {"exact": true}});
            let r = server.ok(
                "POST",
                &format!("/collections/{name}/points/query"),
                Some(&body),
            );
            r["points"].clone()
        })
        .collect()
}

fn count(server: &Server, name: &str) -> u64 {
    server.ok(
        "POST",
        &format!("/collections/{name}/points/count"),
        Some(&json!({"exact": true})),
    )["count"]
        .as_u64()
        .unwrap()
}

fn download(server: &Server, path: &str) -> Vec<u8> {
    let response = reqwest::blocking::get(server.url(path)).unwrap();
    assert_eq!(response.status(), 200, "GET {path}");
    assert_eq!(
        response.headers()["content-type"],
        "application/octet-stream"
    );
    response.bytes().unwrap().to_vec()
}

/// Uploads `bytes` as the `snapshot` field of a multipart form, as Qdrant's clients do.
fn upload(server: &Server, name: &str, bytes: Vec<u8>, query: &str) -> (u16, Value) {
    let boundary = "cairn-test-boundary-7f3a";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"snapshot\"; \
         filename=\"upload.snapshot\"\r\nContent-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = reqwest::blocking::Client::new()
        .post(server.url(&format!("/collections/{name}/snapshots/upload{query}")))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

fn load(server: &Server, name: &str, dim: usize, n: usize, seed: u64) {
    let data = vectors(n, dim, seed);
    for (b, chunk) in data.chunks(dim * 250).enumerate() {
        let points: Vec<Value> = chunk
            .chunks(dim)
            .enumerate()
            .map(|(i, v)| {
                let id = b * 250 + i;
                json!({"id": id, "vector": v, "payload": {"n": id, "tag": format!("t{}", id % 7)}})
            })
            .collect();
        server.ok(
            "PUT",
            &format!("/collections/{name}/points?wait=true"),
            Some(&json!({ "points": points })),
        );
    }
}

#[test]
fn a_snapshot_recovers_the_collection_as_it_was_by_upload_file_and_url() {
    let dir = tempfile::tempdir().unwrap();
    // The partition writes its index file every two writes, so the snapshot carries one.
    let mut server = Server::start(dir.path(), &[("CAIRN__STORAGE__SNAPSHOT_EVERY_OPS", "2")]);
    let dim = 8;
    server.create("docs", dim, "Cosine", json!({}));
    load(&server, "docs", dim, 1_000, 1);
    server.ok(
        "PUT",
        "/collections/docs/index?wait=true",
        Some(&json!({"field_name": "tag", "field_schema": "keyword"})),
    );
    let before = answers(&server, "docs", dim);

    let taken = server.ok("POST", "/collections/docs/snapshots?wait=true", None);
    let name = taken["name"].as_str().unwrap().to_owned();
    assert!(
        name.starts_with("docs-") && name.ends_with(".snapshot"),
        "{taken}"
    );
    let checksum = taken["checksum"].as_str().unwrap().to_owned();
    assert_eq!(checksum.len(), 64, "{taken}");
    assert_eq!(
        server.ok("GET", "/collections/docs/snapshots", None),
        json!([taken])
    );
    let bytes = download(&server, &format!("/collections/docs/snapshots/{name}"));
    assert_eq!(bytes.len() as u64, taken["size"].as_u64().unwrap());
    let copy = dir.path().join("copy.snapshot");
    std::fs::write(&copy, &bytes).unwrap();
    assert_eq!(
        sha256(&copy),
        checksum,
        "the download is the file described"
    );

    // The collection changes after the snapshot...
    server.ok(
        "POST",
        "/collections/docs/points/delete?wait=true",
        Some(&json!({"points": (0..300).collect::<Vec<u64>>()})),
    );
    server.ok(
        "POST",
        "/collections/docs/points/payload?wait=true",
        Some(&json!({"payload": {"tag": "changed"}, "points": [400, 401]})),
    );
    server.ok("DELETE", "/collections/docs/index/tag?wait=true", None);
    assert_eq!(count(&server, "docs"), 700);

    // ...and the upload puts it back as it was, index file loaded rather than rebuilt.
    let (status, body) = upload(&server, "docs", bytes, &format!("?checksum={checksum}"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(count(&server, "docs"), 1_000);
    assert_eq!(answers(&server, "docs", dim), before);
    let info = server.ok("GET", "/collections/docs", None);
    assert_eq!(info["load"]["index_source"], "snapshot", "{}", info["load"]);
    assert!(
        info["payload_schema"]["tag"].is_object(),
        "the payload index came back: {}",
        info["payload_schema"]
    );

    // Into other names: from the file inside the snapshots folder, and from a URL.
    let file = dir
        .path()
        .join("data/snapshots/collections/docs")
        .join(&name);
    assert!(file.is_file(), "{}", file.display());
    server.ok(
        "PUT",
        "/collections/from_file/snapshots/recover",
        Some(&json!({"location": format!("file://{}", file.display()), "checksum": checksum})),
    );
    let url = server.url(&format!("/collections/docs/snapshots/{name}"));
    server.ok(
        "PUT",
        "/collections/from_url/snapshots/recover",
        Some(&json!({"location": url, "priority": "snapshot"})),
    );
    for copy in ["from_file", "from_url"] {
        assert_eq!(answers(&server, copy, dim), before, "{copy}");
    }

    // Recovered collections are as durable as created ones.
    server.restart();
    for copy in ["docs", "from_file", "from_url"] {
        assert_eq!(answers(&server, copy, dim), before, "{copy} after kill -9");
        assert_eq!(count(&server, copy), 1_000);
    }
    // And a recovered collection takes writes.
    let more = json!({"points": [{"id": 5000, "vector": vec![0.5f32; dim]}]});
    server.ok("PUT", "/collections/from_url/points?wait=true", Some(&more));
    assert_eq!(count(&server, "from_url"), 1_001);

    server.ok(
        "DELETE",
        &format!("/collections/docs/snapshots/{name}"),
        None,
    );
    assert_eq!(
        server.ok("GET", "/collections/docs/snapshots", None),
        json!([])
    );
    let (status, body) = server.call("GET", &format!("/collections/docs/snapshots/{name}"), None);
    assert_eq!(status, 404, "{body}");
    assert!(body["status"]["error"].as_str().unwrap().contains(&name));
}

#[test]
fn a_bad_snapshot_is_refused_and_the_collection_is_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let dim = 4;
    server.create("keep", dim, "Euclid", json!({}));
    load(&server, "keep", dim, 300, 2);
    let before = answers(&server, "keep", dim);
    let taken = server.ok("POST", "/collections/keep/snapshots", None);
    let name = taken["name"].as_str().unwrap();
    let good = download(&server, &format!("/collections/keep/snapshots/{name}"));
    let refused = |bytes: Vec<u8>, query: &str, says: &str| {
        let (status, body) = upload(&server, "keep", bytes, query);
        assert_eq!(status, 400, "{body}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{error:?} should say {says:?}");
    };
    refused(b"not a snapshot at all".to_vec(), "", "cannot be recovered");
    refused(good[..good.len() / 2].to_vec(), "", "cannot be recovered");
    refused(
        good.clone(),
        &format!("?checksum={}", "0".repeat(64)),
        "checksum",
    );
    // A byte flipped inside a table file: its CRC catches it when no checksum is given.
    let mut flipped = good.clone();
    let at = find(&good, b"points-0000.sst").expect("the archive names its table file") + 4096;
    flipped[at] ^= 0x55;
    refused(flipped, "", "cannot be recovered");

    for (location, says) in [
        ("ftp://example.com/x.snapshot", "neither"),
        ("file:///etc/passwd", "inside the server's snapshots folder"),
        ("http://127.0.0.1:9/none.snapshot", "cannot download"),
    ] {
        let (status, body) = server.call(
            "PUT",
            "/collections/keep/snapshots/recover",
            Some(&json!({ "location": location })),
        );
        assert_eq!(status, 400, "{location}: {body}");
        let error = body["status"]["error"].as_str().unwrap();
        assert!(error.contains(says), "{error:?} should say {says:?}");
    }
    for path in [
        "/collections/keep/snapshots/..%2F..%2Faliases.json",
        "/collections/keep/snapshots/nothing.snapshot",
        "/snapshots/nothing.snapshot",
    ] {
        let (status, body) = server.call("GET", path, None);
        assert_eq!(status, 404, "{path}: {body}");
    }
    assert_eq!(answers(&server, "keep", dim), before);
    assert_eq!(count(&server, "keep"), 300);
    let writes = json!({"points": [{"id": 9000, "vector": [0.0, 0.0, 0.0, 0.0]}]});
    server.ok("PUT", "/collections/keep/points?wait=true", Some(&writes));
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A partitioned collection under a writer that never stops: the snapshot holds every write
/// acknowledged before it was asked for, and the writes it holds are a prefix of the writer's
/// (one moment of every partition, no write without those before it).
#[test]
fn a_snapshot_under_concurrent_writes_is_one_moment_of_every_partition() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let dim = 16;
    server.create("live", dim, "Euclid", json!({"partitions": 3}));
    load(&server, "live", dim, 2_000, 3);
    server.wait_routed("live");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let writer = {
        let (stop, acked) = (stop.clone(), acked.clone());
        let url = server.url("/collections/live/points?wait=false");
        std::thread::spawn(move || {
            let client = reqwest::blocking::Client::new();
            let data = vectors(20_000, dim, 4);
            let mut batch = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) && batch < 1_000 {
                let points: Vec<Value> = (0..20u64)
                    .map(|i| {
                        let id = 10_000 + batch * 20 + i;
                        let row = ((batch * 20 + i) as usize % 20_000) * dim;
                        json!({"id": id, "vector": &data[row..row + dim]})
                    })
                    .collect();
                let response = client
                    .put(&url)
                    .json(&json!({ "points": points }))
                    .send()
                    .unwrap();
                assert_eq!(response.status(), 200);
                batch += 1;
                acked.store(batch, std::sync::atomic::Ordering::Release);
            }
        })
    };
    while acked.load(std::sync::atomic::Ordering::Acquire) < 20 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let floor = acked.load(std::sync::atomic::Ordering::Acquire);
    let taken = server.ok("POST", "/collections/live/snapshots", None);
    stop.store(true, std::sync::atomic::Ordering::Release);
    writer.join().unwrap();
    let name = taken["name"].as_str().unwrap();
    let file = dir
        .path()
        .join("data/snapshots/collections/live")
        .join(name);
    server.ok(
        "PUT",
        "/collections/copy/snapshots/recover",
        Some(&json!({"location": format!("file://{}", file.display())})),
    );
    let mut written: Vec<u64> = Vec::new();
    let mut offset = Value::Null;
    loop {
        let page = server.ok(
            "POST",
            "/collections/copy/points/scroll",
            Some(&json!({"limit": 1_000, "offset": offset, "with_payload": false})),
        );
        written.extend(
            page["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_u64().unwrap())
                .filter(|&id| id >= 10_000),
        );
        offset = page["next_page_offset"].clone();
        if offset.is_null() {
            break;
        }
    }
    written.sort_unstable();
    let held = written.len() as u64;
    assert!(
        held >= floor * 20,
        "{held} writes held; {} were acknowledged before the snapshot was asked for",
        floor * 20
    );
    let expected: Vec<u64> = (10_000..10_000 + held).collect();
    assert_eq!(
        written, expected,
        "the writes held are a prefix of the writer's"
    );
    assert_eq!(count(&server, "copy"), 2_000 + held);
    // The copy routes (finishing a migration the snapshot may have caught mid-way).
    server.wait_routed("copy");
}

#[test]
fn a_partitioned_collection_recovers_with_its_routing_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let dim = 16;
    server.create("parts", dim, "Dot", json!({"partitions": 4}));
    load(&server, "parts", dim, 3_000, 5);
    let routed = server.wait_routed("parts");
    let routed_answers: Vec<Vec<u64>> = vectors(5, dim, 7)
        .chunks(dim)
        .map(|q| {
            ids(&server.ok(
                "POST",
                "/collections/parts/points/query",
                Some(&json!({"query": q, "limit": 10})),
            ))
        })
        .collect();
    let taken = server.ok("POST", "/collections/parts/snapshots", None);
    let name = taken["name"].as_str().unwrap();
    let bytes = download(&server, &format!("/collections/parts/snapshots/{name}"));
    let (status, body) = upload(&server, "parts_copy", bytes, "");
    assert_eq!(status, 200, "{body}");
    let info = server.ok("GET", "/collections/parts_copy", None);
    assert_eq!(info["routing"]["version"], routed["routing"]["version"]);
    assert_eq!(
        info["routing"]["partition_points"],
        routed["routing"]["partition_points"]
    );
    let copy_answers: Vec<Vec<u64>> = vectors(5, dim, 7)
        .chunks(dim)
        .map(|q| {
            ids(&server.ok(
                "POST",
                "/collections/parts_copy/points/query",
                Some(&json!({"query": q, "limit": 10})),
            ))
        })
        .collect();
    assert_eq!(copy_answers, routed_answers);
}

#[test]
fn a_full_snapshot_restores_every_collection_and_alias_into_an_empty_folder() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("a", 4, "Euclid", json!({}));
    server.create("b", 8, "Cosine", json!({}));
    load(&server, "a", 4, 500, 8);
    load(&server, "b", 8, 700, 9);
    server.ok(
        "POST",
        "/collections/aliases",
        Some(
            &json!({"actions": [{"create_alias": {"collection_name": "b", "alias_name": "prod"}}]}),
        ),
    );
    let (a, b) = (answers(&server, "a", 4), answers(&server, "b", 8));
    let taken = server.ok("POST", "/snapshots", None);
    let name = taken["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("full-"), "{taken}");
    assert_eq!(server.ok("GET", "/snapshots", None), json!([taken]));
    assert_eq!(
        server.ok("GET", "/collections/a/snapshots", None),
        json!([]),
        "a full snapshot leaves no collection snapshot behind"
    );
    let bytes = download(&server, &format!("/snapshots/{name}"));
    let file = dir.path().join("full.snapshot");
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(sha256(&file), taken["checksum"].as_str().unwrap());
    server.ok("DELETE", &format!("/snapshots/{name}"), None);
    assert_eq!(server.ok("GET", "/snapshots", None), json!([]));
    server.terminate();

    let fresh = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["restore", "--snapshot"])
        .arg(&file)
        .arg("--data-dir")
        .arg(fresh.path().join("data"))
        .status()
        .unwrap();
    assert!(status.success());
    let restored = Server::start(fresh.path(), &[]);
    assert_eq!(answers(&restored, "a", 4), a);
    assert_eq!(answers(&restored, "prod", 8), b);
    assert_eq!(
        restored.ok("GET", "/aliases", None)["aliases"],
        json!([{"alias_name": "prod", "collection_name": "b"}])
    );
}

/// A crash between a recovery's folder swap and the new collection opening: the marker left
/// behind makes start-up put the replaced collection back, and drop a half-recovered new one.
#[test]
fn a_recovery_cut_short_by_a_crash_is_rolled_back_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    server.create("kept", 4, "Euclid", json!({}));
    load(&server, "kept", 4, 200, 12);
    let before = answers(&server, "kept", 4);
    server.terminate();
    let root = dir.path().join("data/collections");
    // Replacing `kept`: the old folder set aside, an unopenable new one in its place.
    std::fs::rename(root.join("kept"), root.join(".replaced-77-kept")).unwrap();
    std::fs::create_dir_all(root.join("kept/partitions/0/db")).unwrap();
    std::fs::write(root.join(".recovering-77-kept"), b"1").unwrap();
    // Recovering `fresh`, a new name: its unconfirmed folder.
    std::fs::create_dir_all(root.join("fresh/partitions/0/db")).unwrap();
    std::fs::write(root.join(".recovering-78-fresh"), b"0").unwrap();
    server.restart();
    assert_eq!(answers(&server, "kept", 4), before);
    assert_eq!(count(&server, "kept"), 200);
    let (status, _) = server.call("GET", "/collections/fresh", None);
    assert_eq!(status, 404);
    let left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["kept"], "nothing else is left");
}
