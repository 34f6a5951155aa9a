//! The ANN harness (`bench/ann`) as its users run it: its own virtualenv from
//! `bench/requirements.txt`, Cairn's wheel built from this checkout, and every side (Cairn
//! with and without link codes, hnswlib, FAISS, ScaNN, NGT, SymphonyQG) on siftsmall for one
//! build and one round.
//!
//! Every side must reach recall@10 0.95 there, which each does at a small setting: a wrapper
//! that returns wrong ids, searches the wrong metric or drops queries fails this test. The
//! timings of so short a run mean nothing and are not checked.

use std::path::Path;
use std::process::Command;

const SIDES: [&str; 7] = [
    "cairn-hnsw",
    "cairn-rabitq",
    "hnswlib",
    "faiss-hnsw",
    "scann",
    "ngt-onng",
    "symqg",
];

#[test]
fn every_side_of_the_harness_finds_the_true_neighbours_of_siftsmall() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = cairn_testkit::target_dir(crate_dir);
    let out = tempfile::tempdir().expect("a temporary folder");
    let data = std::env::var_os("CAIRN_SHARED_DATA")
        .map_or_else(|| crate_dir.join("../../shared/data"), Into::into);
    let status = Command::new(crate_dir.join("../bench/ann"))
        .args(["--data", "siftsmall", "--builds", "1", "--rounds", "1"])
        .arg("--sides")
        .arg(SIDES.join(","))
        .arg("--shared")
        .arg(&data)
        .arg("--out")
        .arg(out.path())
        // Kept between runs: its marker file names the requirements it holds.
        .env("CAIRN_BENCH_VENV", target.join("venv-ann-bench"))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .expect("bench/ann runs");
    assert!(status.success(), "bench/ann failed (output above)");

    for file in [
        "siftsmall-passes.csv",
        "siftsmall-builds.csv",
        "siftsmall-summary.md",
        "siftsmall.png",
    ] {
        let path = out.path().join(file);
        assert!(
            std::fs::metadata(&path).is_ok_and(|m| m.len() > 0),
            "{} was not written",
            path.display()
        );
    }
    let summary: serde_json::Value = serde_json::from_slice(
        &std::fs::read(out.path().join("siftsmall-summary.json")).expect("the JSON summary"),
    )
    .expect("the summary is JSON");
    for side in SIDES {
        let rows: Vec<_> = summary["search"]
            .as_object()
            .expect("a search table")
            .iter()
            .filter(|(key, _)| key.split('/').next() == Some(side))
            .collect();
        assert!(!rows.is_empty(), "{side} has no row: {summary:#}");
        for (key, row) in rows {
            let cell = &row["0.95"];
            assert!(
                cell["median"].as_f64().is_some_and(|qps| qps > 0.0),
                "{key} did not reach recall@10 0.95 on siftsmall: {cell}"
            );
        }
    }
}
