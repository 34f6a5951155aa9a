//! The official Qdrant Python client, unmodified, in REST mode against Cairn. The test makes
//! its own virtualenv (cached in the target directory) and installs `qdrant-client` from PyPI.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::Server;

/// Pinned so a new client release cannot change what this test means.
const QDRANT_CLIENT: &str = "qdrant-client==1.20.0";

/// The virtualenv's python, made once per test run (the tests here run in parallel).
fn venv() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_venv).clone()
}

fn make_venv() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let venv = target.join("qdrant-client-venv");
    let python = venv.join("bin/python");
    let marker = venv.join(format!(".installed-{QDRANT_CLIENT}"));
    if !marker.is_file() {
        let _ = std::fs::remove_dir_all(&venv);
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 -m venv");
        assert!(
            status.success(),
            "cannot create a virtualenv (is python3-venv installed?)"
        );
        let status = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                QDRANT_CLIENT,
            ])
            .status()
            .expect("pip install");
        assert!(status.success(), "pip install {QDRANT_CLIENT} failed");
        std::fs::write(&marker, "").unwrap();
    }
    python
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
