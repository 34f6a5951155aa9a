//! The official Qdrant Python client, unmodified, in REST mode against Cairn. The test makes
//! its own virtualenv (cached in the target directory) and installs `qdrant-client` from PyPI.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::Server;

/// Pinned so a new client release cannot change what this test means.
const QDRANT_CLIENT: &str = "qdrant-client==1.20.0";

/// The virtualenv's python, with the client installed.
fn venv() -> PathBuf {
    crate::harness::venv("qdrant-client-venv", &[QDRANT_CLIENT])
}

#[test]
fn official_qdrant_python_client_works_unmodified() {
    check(None, false);
}

/// The same with `http.api_key` set: the client's `api_key=` is let in, a client without it
/// is refused with a 401.
#[test]
fn official_qdrant_python_client_works_with_an_api_key() {
    check(Some("qdrant-client-key-51c0"), false);
}

/// The same over HTTPS (a self-signed certificate made for the test, which the client is
/// given to trust), with an API key.
#[test]
fn official_qdrant_python_client_works_over_https_with_an_api_key() {
    check(Some("qdrant-client-key-7d2e"), true);
}

fn check(api_key: Option<&str>, https: bool) {
    let python = venv();
    let dir = tempfile::tempdir().unwrap();
    let mut env: Vec<(&str, String)> = api_key
        .map(|key| ("CAIRN__HTTP__API_KEY", key.to_owned()))
        .into_iter()
        .collect();
    let ca = https.then(|| crate::tls::self_signed(dir.path()));
    if let Some((cert, key)) = &ca {
        env.push(("CAIRN__HTTP__TLS_CERT_FILE", cert.display().to_string()));
        env.push(("CAIRN__HTTP__TLS_KEY_FILE", key.display().to_string()));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let server = Server::start(dir.path(), &env);
    let url = match https {
        true => format!("https://{}", server.addr),
        false => server.url(""),
    };
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/qdrant_client/check.py");
    let output = Command::new(python)
        .arg(script)
        .arg(url)
        .args(api_key)
        .args(ca.as_ref().map(|(cert, _)| cert))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "qdrant-client check failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    assert!(stdout.contains("qdrant-client check passed"), "{stdout}");
}
