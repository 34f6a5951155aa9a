//! schemathesis (PyPI) against the live server, from the server's own `/openapi.json`
//! (issue #23): seeded, a bounded number of examples per operation, valid and invalid
//! requests both. No answer may be a 5xx, and every refusal must carry the JSON error body
//! (`tests/fuzz/checks.py`). The path parameter `collection` is fixed to a collection that
//! exists and holds points, so requests reach the handlers' parsing and planning rather than
//! stopping at a 404; a second run lets schemathesis invent collection names for the
//! collection routes (create, info, drop).
//!
//! `CAIRN_FUZZ_EXAMPLES` raises the number of examples per operation for a longer run
//! (docs/fuzzing.md has the command and the last long run's counts).

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use super::harness::Server;

/// Pinned so a new release cannot change what this test means.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

fn examples() -> String {
    std::env::var("CAIRN_FUZZ_EXAMPLES").unwrap_or_else(|_| "20".into())
}

/// Runs schemathesis with `args` after the common ones, with `tests/fuzz/<config>` as its
/// configuration when given; panics with its output on failure.
fn schemathesis(server: &Server, config: Option<&str>, args: &[&str]) -> String {
    let python = super::harness::venv("schemathesis-venv", &[SCHEMATHESIS]);
    let hooks = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz");
    let report = tempfile::tempdir().unwrap();
    let mut command = Command::new(python);
    command.args(["-m", "schemathesis.cli"]);
    if let Some(config) = config {
        command.arg("--config-file").arg(hooks.join(config));
    }
    let output = command
        .arg("run")
        .arg(server.url("/openapi.json"))
        .args(["--checks", "not_a_server_error,error_body_is_json"])
        .args(["--max-examples", &examples(), "--seed", "23"])
        // One worker: with two, hypothesis' lambda descriptions call `ast.parse` from two
        // threads at once, which CPython 3.11 can fail with "AST constructor recursion depth
        // mismatch" (a tool error, seen in CI on POST /snapshots, not a server answer).
        .args(["--phases", "examples,coverage,fuzzing", "--workers", "1"])
        .args(["--suppress-health-check", "all", "--no-color"])
        .arg("--report-dir")
        .arg(report.path())
        .args(args)
        // Its cache and reports go to the temporary folder, not the source tree.
        .current_dir(report.path())
        .env("SCHEMATHESIS_HOOKS", "checks")
        .env("PYTHONPATH", hooks)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "schemathesis found failures:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    stdout
}

#[test]
fn schemathesis_finds_no_server_error_and_no_bare_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    server.create("fuzz", 4, "Cosine", json!({}));
    let points: Vec<_> = (0..50)
        .map(|i| {
            let x = i as f32;
            json!({"id": i, "vector": [x, 1.0, -x, 0.5], "payload": {"n": i, "tag": format!("t{}", i % 3)}})
        })
        .collect();
    server.ok(
        "PUT",
        "/collections/fuzz/points?wait=true",
        Some(&json!({ "points": points })),
    );
    // Every operation but the drop of a collection, on the one that holds points.
    let fixed = schemathesis(
        &server,
        Some("fixed-collection.toml"),
        &["--exclude-operation-id", "delete_collection"],
    );
    // The collection routes with names schemathesis makes up (drops included).
    let named = schemathesis(
        &server,
        None,
        &[
            "--include-path-regex",
            "^/collections/\\{collection\\}(/exists)?$",
        ],
    );
    // Each run did test: every operation it selected, and thousands of requests.
    for (run, lower) in [(&fixed, 2000), (&named, 200)] {
        let generated = run
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_suffix("generated")
                    .or_else(|| l.trim().split_once(" generated,").map(|(n, _)| n))
            })
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        assert!(generated >= lower, "{generated} test cases:\n{run}");
        let summary: Vec<&str> = run
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("Selected:") || l.starts_with("Tested:"))
            .collect();
        eprintln!(
            "schemathesis: {} ; {generated} test cases, 0 failures",
            summary.join(", ")
        );
    }
    // Still serving (the fuzzing may have deleted the points: deletes by filter are fuzzed).
    let count = server.ok(
        "POST",
        "/collections/fuzz/points/count",
        Some(&json!({"exact": true})),
    );
    assert!(count["count"].as_u64().is_some(), "{count}");
}
