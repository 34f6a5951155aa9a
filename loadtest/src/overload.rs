//! `overload`: what a node does when asked for far more than it can serve (issue #23).
//!
//! First the node's capacity is measured closed-loop (a few clients sending back to back).
//! Then one open-loop run ([`crate::openloop`]) moves through four phases:
//!
//! 1. `half`: half the capacity, the reference latency;
//! 2. `burst`: `--factor` × the capacity (3 by default): the excess must be refused with a
//!    429 within milliseconds, and the queries accepted must keep their latency;
//! 3. `settle`: half the capacity again, for one second;
//! 4. `after`: half the capacity: service must be back to normal within that second.
//!
//! The server's resident memory is sampled every 50 ms throughout (when this run started the
//! server) and reported per phase. Refusal latencies count from when a query was due, like
//! every latency of the open loop.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use cairn_client::QueryPoints;
use serde::Serialize;

use crate::openloop::{self, Phases, Schedule};
use crate::raw_wire::RawWire;
use crate::stats::Summary;
use crate::target::{Target, TargetArgs};
use crate::workload::Workload;

/// Each capacity client steps through the queries this many at a time, from its own start.
const STRIDE: usize = 7;
/// Names of the phases, in order.
const PHASES: [&str; 4] = ["half", "burst", "settle", "after"];

/// Options of `overload`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// `params.hnsw_ef` of every query (the collection default when absent).
    #[arg(long)]
    ef: Option<usize>,
    /// Seconds of the closed-loop capacity measurement.
    #[arg(long, default_value_t = 3.0)]
    capacity_secs: f64,
    /// Clients of the capacity measurement, each sending its next query when the last is
    /// answered.
    #[arg(long, default_value_t = 4)]
    capacity_clients: usize,
    /// The burst's rate as a multiple of the capacity.
    #[arg(long, default_value_t = 3.0)]
    factor: f64,
    /// Seconds at half the capacity before the burst.
    #[arg(long, default_value_t = 5.0)]
    half_secs: f64,
    /// Seconds of the burst.
    #[arg(long, default_value_t = 5.0)]
    burst_secs: f64,
    /// Seconds at half the capacity after the settling second.
    #[arg(long, default_value_t = 3.0)]
    after_secs: f64,
    /// Queries in flight at most on the client side (beyond it a due query fails as
    /// `overload` without being sent).
    #[arg(long, default_value_t = 4096)]
    max_in_flight: usize,
    /// Send through the SDK (reqwest) instead of the lean HTTP/1.1 sender
    /// ([`crate::raw_wire`]), which spends a fraction of the generator's CPU per query.
    #[arg(long)]
    sdk: bool,
    /// CPUs of the server this run starts, as `taskset` lists them (`0`, `0-1`): the server
    /// sizes its threads by them. Without it the server and the generator share every CPU.
    #[arg(long)]
    server_cpus: Option<String>,
    /// CPUs of this generator once the server has started (`1`, `2-3`).
    #[arg(long)]
    client_cpus: Option<String>,
    /// Write the JSON report here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One phase: its rate, what the queries met, and the server's memory.
#[derive(Debug, Serialize)]
pub struct Phase {
    /// `half`, `burst`, `settle` or `after`.
    pub name: &'static str,
    /// Queries per second asked for.
    pub rate_qps: f64,
    /// What happened to them.
    pub summary: Summary,
    /// Largest resident memory of the server during the phase, in MiB (0 when unknown).
    pub max_rss_mib: f64,
}

/// The JSON report of `overload`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// Closed-loop queries per second the node served.
    pub capacity_qps: f64,
    /// The server's resident memory before the run, in MiB (0 when unknown).
    pub rss_before_mib: f64,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// `burst` accepted p99 over `half` p99.
    pub burst_p99_ratio: f64,
    /// `after` p99 over `half` p99.
    pub after_p99_ratio: f64,
}

/// Pins every thread of process `pid` to `cpus` (a `taskset` CPU list).
fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("cannot run taskset (util-linux)")?;
    anyhow::ensure!(
        status.success(),
        "taskset -c {cpus} failed for process {pid}"
    );
    Ok(())
}

/// Resident memory of `pid` in MiB, from `/proc` (Linux).
fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// Queries answered per second by `clients` closed-loop clients over `secs`, through the
/// lean sender unless `--sdk`.
async fn capacity(
    target: &Target,
    args: &Args,
    workload: &Workload,
    queries: &[Vec<f32>],
) -> anyhow::Result<f64> {
    let wire = match args.sdk {
        true => None,
        false => Some(Arc::new(RawWire::new(
            &target.url,
            &target.collection,
            target.api_key.as_deref(),
            &workload.queries,
            args.target.k,
            args.ef,
        )?)),
    };
    let deadline = Instant::now() + Duration::from_secs_f64(args.capacity_secs);
    let mut clients = Vec::new();
    for c in 0..args.capacity_clients {
        let (client, collection) = (target.client.clone(), target.collection.clone());
        let (wire, queries) = (wire.clone(), queries.to_vec());
        let (k, ef) = (args.target.k, args.ef);
        clients.push(tokio::spawn(async move {
            let mut answered = 0u64;
            let mut i = c;
            while Instant::now() < deadline {
                let ok = match &wire {
                    Some(wire) => wire.query(i, || ()).await.is_ok_and(|a| a.status == 200),
                    None => {
                        let mut query = QueryPoints::new(&collection)
                            .vector(queries[i % queries.len()].clone())
                            .limit(k);
                        if let Some(ef) = ef {
                            query = query.ef(ef);
                        }
                        client.query(query).await.is_ok()
                    }
                };
                answered += u64::from(ok);
                i += STRIDE;
            }
            answered
        }));
    }
    let started = Instant::now();
    let mut answered = 0;
    for client in clients {
        answered += client.await?;
    }
    Ok(answered as f64 / started.elapsed().as_secs_f64().max(args.capacity_secs))
}

/// Runs the scenario and prints its report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    if let Some(cpus) = &args.server_cpus {
        anyhow::ensure!(
            args.target.urls.is_empty(),
            "--server-cpus pins the server this run starts: pin a server given with --url yourself"
        );
        // The server started next inherits this process's CPUs, and sizes its threads by them.
        pin(std::process::id(), cpus)?;
    }
    let (target, workload) = Target::prepare(&args.target).await?;
    if let Some(cpus) = &args.client_cpus {
        pin(std::process::id(), cpus)?;
    }
    let queries: Vec<Vec<f32>> = (0..workload.queries.len().min(1000))
        .map(|q| workload.queries.row(q).to_vec())
        .collect();
    let capacity = capacity(&target, args, &workload, &queries).await?;
    anyhow::ensure!(capacity > 0.0, "the server answered no query");
    let pid = target.process.as_ref().and_then(|p| p.pid());
    let rss_before = pid.and_then(rss_mib).unwrap_or(0.0);

    let rates = vec![
        capacity / 2.0,
        capacity * args.factor,
        capacity / 2.0,
        capacity / 2.0,
    ];
    let schedule = Schedule {
        rate: rates[0],
        phase_rates: rates.clone(),
        k: args.target.k,
        ef: args.ef,
        max_in_flight: args.max_in_flight,
        lean: !args.sdk,
    };
    let phases = Phases::new(PHASES.len());
    let peaks = Arc::new(Mutex::new(vec![0.0f64; PHASES.len()]));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = pid.map(|pid| {
        let (phases, peaks, sampling) = (
            Arc::clone(&phases),
            Arc::clone(&peaks),
            Arc::clone(&sampling),
        );
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                if let Some(rss) = rss_mib(pid) {
                    let mut peaks = peaks.lock().unwrap_or_else(|e| e.into_inner());
                    let peak = &mut peaks[phases.current()];
                    *peak = peak.max(rss);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    });
    let timer = {
        let phases = Arc::clone(&phases);
        let lengths = [args.half_secs, args.burst_secs, 1.0, args.after_secs]
            .map(|s| Duration::from_secs_f64(s.max(0.0)));
        tokio::spawn(async move {
            for (i, length) in lengths.iter().enumerate() {
                tokio::time::sleep(*length).await;
                if i + 1 < lengths.len() {
                    phases.advance();
                }
            }
            phases.finish();
        })
    };
    let summaries = openloop::run(&target, &workload, &schedule, &phases).await?;
    timer.await.context("the phase timer panicked")?;
    sampling.store(false, Ordering::Relaxed);
    if let Some(sampler) = sampler {
        let _ = sampler.join();
    }
    let peaks = peaks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let phases: Vec<Phase> = summaries
        .into_iter()
        .zip(PHASES)
        .zip(rates)
        .zip(peaks)
        .map(|(((summary, name), rate_qps), max_rss_mib)| Phase {
            name,
            rate_qps,
            summary,
            max_rss_mib,
        })
        .collect();
    let ratio = |i: usize| phases[i].summary.p99_ms / phases[0].summary.p99_ms.max(1e-9);
    let report = Report {
        dataset: workload.name.clone(),
        capacity_qps: capacity,
        rss_before_mib: rss_before,
        burst_p99_ratio: ratio(1),
        after_p99_ratio: ratio(3),
        phases,
    };
    print_table(&report);
    crate::stats::emit_json(&report, args.json.as_deref())?;
    Ok(report)
}

fn print_table(report: &Report) {
    println!(
        "overload on {}: capacity {:.0} q/s, server RSS before {:.0} MiB",
        report.dataset, report.capacity_qps, report.rss_before_mib
    );
    println!(
        "{:<7} {:>9} {:>9} {:>8} {:>9} {:>9} {:>11} {:>9}",
        "phase", "rate", "answered", "refused", "p50 ms", "p99 ms", "refusal p99", "RSS MiB"
    );
    for p in &report.phases {
        let s = &p.summary;
        println!(
            "{:<7} {:>9.0} {:>9} {:>8} {:>9.2} {:>9.2} {:>11.2} {:>9.0}",
            p.name,
            p.rate_qps,
            s.succeeded,
            s.errors.get("rate_limited").copied().unwrap_or(0),
            s.p50_ms,
            s.p99_ms,
            s.refused_p99_ms,
            p.max_rss_mib
        );
    }
    println!(
        "accepted p99 in the burst: {:.2}× the half-load p99; after it: {:.2}×",
        report.burst_p99_ratio, report.after_p99_ratio
    );
}
