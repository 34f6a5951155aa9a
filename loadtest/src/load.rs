//! `load`: open-loop queries at a fixed rate (see [`crate::openloop`]), reporting
//! HdrHistogram percentiles, errors by kind and recall, as a table and a JSON summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::openloop::{self, Phases, Schedule};
use crate::stats::Summary;
use crate::target::{Target, TargetArgs};

/// Options of `load`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// Target rate in queries per second.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Length of the measured run in seconds.
    #[arg(long, default_value_t = 30.0)]
    duration_secs: f64,
    /// Unmeasured warm-up at the same rate before the run, in seconds.
    #[arg(long, default_value_t = 2.0)]
    warmup_secs: f64,
    /// `params.hnsw_ef` of every query (the collection default when absent).
    #[arg(long)]
    ef: Option<usize>,
    /// Queries in flight at most; beyond it a due query fails as `overload`.
    #[arg(long, default_value_t = 1024)]
    max_in_flight: usize,
    /// Write the JSON summary here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The JSON summary of a load run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// Target rate.
    pub target_rate_qps: f64,
    /// Measured seconds.
    pub duration_secs: f64,
    /// The measured run.
    pub summary: Summary,
}

/// Runs the load and prints its summary.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    let (target, workload) = Target::prepare(&args.target).await?;
    let secs = |s: f64| Duration::from_secs_f64(s.max(0.0));
    let schedule = Schedule {
        rate: args.rate,
        phase_rates: Vec::new(),
        k: args.target.k,
        ef: args.ef,
        max_in_flight: args.max_in_flight,
        lean: false,
    };
    let phases = Phases::new(2);
    let timer = {
        let phases = Arc::clone(&phases);
        let (warmup, duration) = (secs(args.warmup_secs), secs(args.duration_secs));
        tokio::spawn(async move {
            tokio::time::sleep(warmup).await;
            phases.advance();
            tokio::time::sleep(duration).await;
            phases.finish();
        })
    };
    let mut summaries = openloop::run(&target, &workload, &schedule, &phases).await?;
    timer.await.context("the run timer panicked")?;
    let summary = summaries.pop().context("no measured phase")?;
    let report = Report {
        dataset: workload.name.clone(),
        target_rate_qps: args.rate,
        duration_secs: args.duration_secs,
        summary,
    };
    let s = &report.summary;
    println!(
        "{} at {} q/s for {} s: {} ok, {} failed {:?}; {:.0} q/s answered; recall@{} {:.4}",
        report.dataset,
        args.rate,
        args.duration_secs,
        s.succeeded,
        s.failed,
        s.errors,
        s.throughput_qps,
        args.target.k,
        s.recall
    );
    println!(
        "latency ms: p50 {:.3}  p95 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (generator lag p99 {:.3})",
        s.p50_ms, s.p95_ms, s.p99_ms, s.p999_ms, s.max_ms, s.send_lag_p99_ms
    );
    crate::stats::emit_json(&report, args.json.as_deref())?;
    Ok(report)
}
