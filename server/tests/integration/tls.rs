//! HTTPS on the public port (issue #23): a self-signed certificate made at run time, the API
//! served over TLS only, keys checked as over HTTP.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::harness::Server;

/// A self-signed certificate for `localhost` and 127.0.0.1 and its key, as PEM files in
/// `dir`: (certificate, key).
pub(crate) fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    cairn_testkit::self_signed_certificate(dir).unwrap()
}

#[test]
fn the_api_speaks_https_only_and_checks_keys_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let server = Server::start(
        dir.path(),
        &[
            ("CAIRN__HTTP__TLS_CERT_FILE", cert.to_str().unwrap()),
            ("CAIRN__HTTP__TLS_KEY_FILE", key.to_str().unwrap()),
            ("CAIRN__HTTP__API_KEY", "tls-key-4c91"),
        ],
    );
    let https = reqwest::blocking::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    let url = |path: &str| format!("https://{}{path}", server.addr);
    let create = json!({"vectors": {"size": 2, "distance": "Cosine"}});

    let answer = https.get(url("/healthz")).send().unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let answer = https.get(url("/collections")).send().unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let answer = https
        .put(url("/collections/t"))
        .header("api-key", "tls-key-4c91")
        .json(&create)
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let answer = https
        .post(url("/collections/t/points/count"))
        .header("authorization", "Bearer tls-key-4c91")
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);

    // Plain HTTP gets no answer from the TLS port, and a client that does not trust the
    // certificate does not connect.
    let plain = reqwest::blocking::Client::new()
        .get(format!("http://{}/healthz", server.addr))
        .send();
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    let untrusting = reqwest::blocking::Client::new().get(url("/healthz")).send();
    assert!(untrusting.is_err(), "a self-signed certificate was trusted");

    // A stalled handshake does not hold up the next client.
    let stalled = std::net::TcpStream::connect(&server.addr).unwrap();
    let answer = https.get(url("/healthz")).send().unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    drop(stalled);
}

#[test]
fn a_certificate_without_its_key_is_refused_at_start_up() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("config")
        .env("CAIRN__HTTP__TLS_CERT_FILE", "/nonexistent/cert.pem")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let text = String::from_utf8_lossy(&output.stderr);
    assert!(
        text.contains("tls_cert_file and http.tls_key_file"),
        "{text}"
    );
}

/// TLS on a cluster's internal port: three nodes whose internal APIs speak HTTPS only, each
/// trusting the one certificate they share, elect a leader and replicate a collection's
/// writes; the internal port then answers neither plain HTTP nor a client that does not trust
/// the certificate, and still asks for the cluster secret over HTTPS.
#[test]
fn a_cluster_s_internal_api_speaks_https_only() {
    use super::peers::{agreed_leader, start_nodes_over, wait_count, wait_for_records, SECRET};
    let root = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(root.path());
    let (cert_path, key_path) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let env = [
        ("CAIRN__CLUSTER__INTERNAL_TLS_CERT_FILE", cert_path),
        ("CAIRN__CLUSTER__INTERNAL_TLS_KEY_FILE", key_path),
        ("CAIRN__CLUSTER__INTERNAL_TLS_CA_FILE", cert_path),
    ];
    let nodes = start_nodes_over(root.path(), 3, &env, "https");
    let all: Vec<&Server> = nodes.iter().collect();
    agreed_leader(&all, &[1, 2, 3]);
    wait_for_records(&all, &nodes);
    nodes[0].create("t", 4, "Euclid", json!({"replication_factor": 3}));
    for node in &nodes {
        wait_count(node, "t", 0);
    }
    let points: Vec<_> = (0..20u64)
        .map(|i| json!({"id": i, "vector": [i as f32, 1.0, 0.0, 0.0]}))
        .collect();
    nodes[1].ok(
        "PUT",
        "/collections/t/points?wait=true",
        Some(&json!({ "points": points })),
    );
    for node in &nodes {
        wait_count(node, "t", 20);
    }

    let internal = nodes[0].ok("GET", "/cluster", None)["peers"]["1"]["uri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(internal.starts_with("https://"), "{internal}");
    let vote = format!("{internal}/internal/raft/meta/vote?replica=1");
    let trusting = reqwest::blocking::Client::builder()
        .add_root_certificate(
            reqwest::Certificate::from_pem(&std::fs::read(&cert).unwrap()).unwrap(),
        )
        .build()
        .unwrap();
    let without = trusting.post(&vote).body(vec![1, 2, 3]).send().unwrap();
    assert_eq!(without.status().as_u16(), 401);
    let garbage = trusting
        .post(&vote)
        .header("x-cairn-cluster-key", SECRET)
        .body(vec![1, 2, 3])
        .send()
        .unwrap();
    assert_eq!(garbage.status().as_u16(), 400);
    let plain = reqwest::blocking::Client::new()
        .post(vote.replacen("https://", "http://", 1))
        .header("x-cairn-cluster-key", SECRET)
        .body(vec![1, 2, 3])
        .send();
    assert!(plain.is_err(), "plain HTTP answered: {plain:?}");
    let untrusting = reqwest::blocking::Client::new().post(&vote).send();
    assert!(untrusting.is_err(), "an untrusted certificate was accepted");
}

/// A node whose internal API speaks HTTPS refuses a peer listed as http:// (it would send the
/// cluster secret in the clear): the configuration does not load.
#[test]
fn internal_tls_with_a_plain_peer_is_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(root.path());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("config")
        .env("CAIRN__CLUSTER__ROLE", "node")
        .env("CAIRN__CLUSTER__NODE_ID", "1")
        .env("CAIRN__CLUSTER__PEERS", "[\"1=http://127.0.0.1:1\"]")
        .env("CAIRN__CLUSTER__INTERNAL_ADDR", "127.0.0.1:0")
        .env("CAIRN__CLUSTER__SECRET", "s")
        .env("CAIRN__CLUSTER__INTERNAL_TLS_CERT_FILE", &cert)
        .env("CAIRN__CLUSTER__INTERNAL_TLS_KEY_FILE", &key)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("peers and join must be https://"),
        "{stderr}"
    );
}
