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
