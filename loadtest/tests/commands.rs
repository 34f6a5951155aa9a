//! The loadtest commands end to end: each starts a real standalone server, loads data through
//! the SDK and measures; the assertions check the reports against what must hold.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs `cairn-loadtest` with `args`, one command at a time: each measures a server's capacity
/// and then loads it at fractions of it, which a neighbour taking the same cores would skew
/// (the overload test's half-load phase would meet a node busier than the one measured).
fn loadtest(args: &[&str]) -> String {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(env!("CARGO_BIN_EXE_cairn-loadtest"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run cairn-loadtest");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "cairn-loadtest {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn siftsmall() -> String {
    cairn_index::dataset::shared_data_dir()
        .join("siftsmall")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn recall_sweeps_ef_against_ground_truth_and_writes_table_csv_and_plot() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_string_lossy().into_owned();
    let stdout = loadtest(&[
        "recall",
        "--dataset",
        &siftsmall(),
        "--queries",
        "100",
        "--ef",
        "10,64",
        "--exact",
        "--concurrency",
        "2",
        "--out",
        &dir,
    ]);
    assert!(stdout.contains("recall@10 on siftsmall"), "{stdout}");
    let rows = read_json(&out.path().join("recall.json"));
    let rows = rows.as_array().unwrap();
    let recall = |i: usize| rows[i]["recall"].as_f64().unwrap();
    assert_eq!(rows.len(), 3);
    assert!(recall(1) >= 0.95, "ef=64 recall {}", recall(1));
    assert!(recall(2) >= 0.99, "exact recall {}", recall(2));
    assert!(recall(0) <= recall(1) + 1e-9, "more ef, no less recall");
    for row in rows {
        assert_eq!(row["failed"], 0);
        assert!(row["qps"].as_f64().unwrap() > 0.0);
        assert!(row["distance_computations"].as_f64().unwrap() > 0.0);
    }
    // The exact scan touches every point; the graph far fewer.
    assert!(rows[2]["distance_computations"].as_f64().unwrap() >= 10_000.0);
    assert!(rows[0]["distance_computations"].as_f64().unwrap() < 5_000.0);
    let csv = std::fs::read_to_string(out.path().join("recall.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let svg = std::fs::read_to_string(out.path().join("recall.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("ef=64"),
        "{svg:.200}"
    );
}

#[test]
fn load_runs_open_loop_at_the_target_rate() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("load.json");
    loadtest(&[
        "load",
        "--dataset",
        "clustered:3000:16:7",
        "--rate",
        "200",
        "--duration-secs",
        "3",
        "--warmup-secs",
        "0.5",
        "--json",
        &json.to_string_lossy(),
    ]);
    let report = read_json(&json);
    let s = &report["summary"];
    assert_eq!(s["failed"], 0, "{report:#}");
    // 200 q/s for 3 s: about 600 queries are due, whatever the server does (the run's timer
    // decides the exact cut).
    let queries = s["queries"].as_u64().unwrap();
    assert!((560..=640).contains(&queries), "{report:#}");
    assert!(s["recall"].as_f64().unwrap() >= 0.9, "{report:#}");
    let (p50, p99, p999) = (
        s["p50_ms"].as_f64().unwrap(),
        s["p99_ms"].as_f64().unwrap(),
        s["p999_ms"].as_f64().unwrap(),
    );
    assert!(0.0 < p50 && p50 <= p99 && p99 <= p999, "{report:#}");
}

/// The `overload` command end to end, bounded (BENCHMARKS.md has the full run, its figures
/// and the goals it does not meet yet): the capacity is measured, the four phases run at their
/// rates and are each reported with the server's memory, half the capacity is served before
/// the burst, and the node serves again after it.
#[test]
fn overload_measures_capacity_then_runs_half_burst_and_after_phases() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("overload.json");
    let stdout = loadtest(&[
        "overload",
        "--dataset",
        "clustered:20000:64:11",
        "--queries",
        "500",
        "--capacity-secs",
        "1",
        // Three seconds, so that one stall of the shared VM (a 65 ms pause at 5,000 q/s
        // fills the search line and refuses ~2% of a one-second phase, seen in CI) does not
        // decide whether half the capacity is served.
        "--half-secs",
        "3",
        "--burst-secs",
        "2",
        "--after-secs",
        "2",
        "--json",
        &json.to_string_lossy(),
    ]);
    assert!(stdout.contains("accepted p99 in the burst"), "{stdout}");
    let report = read_json(&json);
    let capacity = report["capacity_qps"].as_f64().unwrap();
    assert!(capacity > 0.0, "{report:#}");
    let phases = report["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["half", "burst", "settle", "after"]);
    let rate = |i: usize| phases[i]["rate_qps"].as_f64().unwrap();
    assert!((rate(0) - capacity / 2.0).abs() < 1e-6, "{report:#}");
    assert!((rate(1) - 3.0 * capacity).abs() < 1e-6, "{report:#}");
    let (half, burst, after) = (
        &phases[0]["summary"],
        &phases[1]["summary"],
        &phases[3]["summary"],
    );
    // Half the capacity is served; some 429s are allowed where the node was momentarily
    // saturated (its search threads' line is short by design), no other failure. How many
    // is a figure of the machine, not of the code: on a quiet VM none or under 1%, but a
    // shared CI VM that stalls for 50–90 ms a few times in the phase fills the line of 32
    // each time (CI saw 2.4% and 4.6% refused). BENCHMARKS.md ("Overload") measures the
    // share on pinned cores; this bar only catches a node that refuses at half load as a
    // rule.
    let (queries, succeeded) = (
        half["queries"].as_u64().unwrap(),
        half["succeeded"].as_u64().unwrap(),
    );
    let refused = half["errors"]["rate_limited"].as_u64().unwrap_or(0);
    assert_eq!(succeeded + refused, queries, "{report:#}");
    assert!(succeeded * 100 >= queries * 90, "{report:#}");
    assert!(
        burst["queries"].as_u64().unwrap() > 2 * half["queries"].as_u64().unwrap(),
        "{report:#}"
    );
    assert!(after["succeeded"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        report["rss_before_mib"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
    assert!(
        phases[1]["max_rss_mib"].as_f64().unwrap() > 0.0,
        "{report:#}"
    );
}

/// `auth-cost` end to end, bounded (BENCHMARKS.md has the full run): three servers, one
/// requiring a key and one HTTPS with a key and a certificate made for the run, which the
/// client trusts; every query of every round answered, the ratios against the plain server
/// reported per round.
#[test]
fn auth_cost_measures_plain_keyed_and_https_servers_in_rounds() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("auth.json");
    let stdout = loadtest(&[
        "auth-cost",
        "--dataset",
        "clustered:3000:16:5",
        "--rounds",
        "2",
        "--per-round",
        "200",
        "--json",
        &json.to_string_lossy(),
    ]);
    assert!(stdout.contains("tls+key"), "{stdout}");
    let report = read_json(&json);
    let variants = report["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["plain", "key", "tls+key"]);
    assert_eq!(variants[0]["p50_ratio"], 1.0, "{report:#}");
    for v in variants {
        assert!(v["p50_ms"].as_f64().unwrap() > 0.0, "{report:#}");
        assert!(v["p99_ms"].as_f64().unwrap() >= v["p50_ms"].as_f64().unwrap());
        assert_eq!(v["p50_ratios"].as_array().unwrap().len(), 2, "{report:#}");
    }
}

#[test]
fn chaos_reports_a_kill_and_the_recovery_after_restart() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("chaos.json");
    let stdout = loadtest(&[
        "chaos",
        "--dataset",
        "clustered:3000:16:9",
        "--rate",
        "100",
        "--before-secs",
        "1.5",
        "--during-secs",
        "2",
        "--after-secs",
        "2.5",
        "--fault",
        "kill",
        "--recover",
        "restart",
        "--json",
        &json.to_string_lossy(),
    ]);
    assert!(stdout.contains("during"), "{stdout}");
    let report = read_json(&json);
    assert_eq!(report["before"]["failed"], 0, "{report:#}");
    // Two seconds without a server outlast the client's retries: failures must show.
    assert!(
        report["during"]["failed"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    // After the restart every query is answered, from the data that survived SIGKILL.
    assert_eq!(report["after"]["failed"], 0, "{report:#}");
    assert!(
        report["after"]["recall"].as_f64().unwrap() >= 0.9,
        "{report:#}"
    );
}

/// The cells of the first table row of `out` whose first cell is `first`.
fn row<'a>(out: &'a str, first: &str) -> Vec<&'a str> {
    let line = out
        .lines()
        .find(|l| l.split('|').nth(1).map(str::trim) == Some(first))
        .unwrap_or_else(|| panic!("no row {first:?} in:\n{out}"));
    line.split('|').skip(1).map(str::trim).collect()
}

/// A median cell such as `**0.21** [0.20–0.22]`: its median and quartiles.
fn spread(cell: &str) -> (f64, f64, f64) {
    let numbers: Vec<f64> = cell
        .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
        .filter_map(|s| s.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 3, "not a median [q1–q3] cell: {cell:?}");
    (numbers[0], numbers[1], numbers[2])
}

#[test]
fn standalone_compares_rest_with_in_process_on_the_same_graph() {
    let out = loadtest(&[
        "standalone",
        "--n",
        "3000",
        "--queries",
        "200",
        "--ef",
        "64",
        "--rounds",
        "1",
        "--block",
        "50",
    ]);
    assert!(out.contains("Median ratio: **"), "no ingest ratio:\n{out}");
    // The server table's row comes first: both sides searched the same graph, so they found
    // the same points.
    let cells = row(&out, "64");
    let (local, rest): (f64, f64) = (cells[1].parse().unwrap(), cells[2].parse().unwrap());
    assert!(local >= 0.9, "in-process recall@10 {local}");
    assert_eq!(local, rest, "REST found other points than in-process");
    // Every reading is a median over 4 block pairs with its quartiles, in order.
    for cell in [cells[9], cells[10], cells[12], cells[14], cells[16]] {
        let (median, q1, q3) = spread(cell);
        assert!(
            q1.is_finite() && q1 <= median && median <= q3,
            "bad spread {cell:?}"
        );
    }
    // The REST+JSON work is positive: the route time contains the index search.
    let (work, _, _) = spread(cells[12]);
    assert!(work > 0.0, "REST+JSON work {work} in {}", cells.join(" | "));
}

#[test]
fn socket_gap_times_every_mode() {
    let out = loadtest(&[
        "socket-gap",
        "--n",
        "3000",
        "--queries",
        "100",
        "--rounds",
        "2",
        "--idle-us",
        "30",
    ]);
    for mode in [
        "back to back",
        "after JSON decode and encode",
        "after a socket round trip",
        "after a round trip + 30 µs idle",
    ] {
        let cells = row(&out, mode);
        let mean: f64 = cells[1].parse().unwrap();
        let ratio: f64 = cells[2].parse().unwrap();
        assert!(mean > 0.0 && ratio > 0.0, "{mode}: {}", cells.join(" | "));
    }
    assert_eq!(row(&out, "back to back")[2], "1.00");
}
