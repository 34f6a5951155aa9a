//! `recall`: load a dataset through the SDK, sweep query settings, report recall@k against
//! exact ground truth with QPS and latency per setting (table, CSV, JSON and an SVG plot).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use cairn_client::QueryPoints;
use serde::Serialize;

use crate::stats::{answer_ids, recall_of, PhaseStats};
use crate::target::{Target, TargetArgs};
use crate::workload::Workload;

/// Options of `recall`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// Graph candidate list sizes to sweep.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256")]
    ef: Vec<usize>,
    /// Partitions probed to sweep (`params.probe`; partitioned collections only): the most
    /// partitions a query visits; `0` leaves the cap out (the router decides), and the number
    /// of partitions or more is a broadcast. Crossed with every `--ef`.
    #[arg(long, value_delimiter = ',')]
    probe: Vec<usize>,
    /// Oversampling factors to sweep (`params.quantization.oversampling`, with rescoring;
    /// quantized collections only). Crossed with every `--ef` and `--probe`.
    #[arg(long, value_delimiter = ',')]
    oversampling: Vec<f64>,
    /// Also measure exact search (`params.exact`), the recall = 1 reference.
    #[arg(long)]
    exact: bool,
    /// Queries in flight (closed loop: each worker sends its next query when one returns).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Passes over the query set per setting: small query sets (siftsmall has 100) finish in
    /// milliseconds, too short for a steady QPS reading.
    #[arg(long, default_value_t = 1)]
    passes: usize,
    /// Folder for recall.csv, recall.json and recall.svg.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One measured setting.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The setting, as a label (`ef=64`, `ef=64 probe=2 oversampling=4`, `exact`).
    pub setting: String,
    /// The curve this setting belongs to in the plot: the setting without its `ef`.
    pub series: String,
    /// Mean recall@k against exact ground truth.
    pub recall: f64,
    /// Queries per second over the sweep point.
    pub qps: f64,
    /// Median latency.
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// Mean distance computations per query (from `explain`; the router's included).
    pub distance_computations: f64,
    /// Mean partitions searched per query (from `explain`; 1 for a collection of one).
    pub partitions_touched: f64,
    /// Failed queries.
    pub failed: u64,
}

/// Runs the sweep and prints the table.
pub async fn run(args: &Args) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(args.concurrency > 0, "--concurrency must be at least 1");
    anyhow::ensure!(args.passes > 0, "--passes must be at least 1");
    let (target, workload) = Target::prepare(&args.target).await?;
    let settings = settings(&base_query(&target, args), args);
    // Warm-up: one pass at the first setting, not measured (page cache, connections, branch
    // predictors).
    if let Some(first) = settings.first() {
        sweep_point(&target, &workload, &first.query, args).await?;
    }
    let mut rows = Vec::with_capacity(settings.len());
    for setting in &settings {
        let mut row = sweep_point(&target, &workload, &setting.query, args).await?;
        row.setting.clone_from(&setting.label);
        row.series.clone_from(&setting.series);
        rows.push(row);
    }
    println!(
        "recall@{} on {} ({} base, {} queries × {} passes, concurrency {})",
        args.target.k,
        workload.name,
        workload.base.len(),
        workload.queries.len(),
        args.passes,
        args.concurrency
    );
    let w = rows
        .iter()
        .map(|r| r.setting.len())
        .max()
        .unwrap_or(0)
        .max(7);
    println!(
        "{:>w$} {:>8} {:>9} {:>8} {:>8} {:>10} {:>6} {:>6}",
        "setting", "recall", "QPS", "p50 ms", "p99 ms", "dist/q", "parts", "failed"
    );
    for r in &rows {
        println!(
            "{:>w$} {:>8.4} {:>9.0} {:>8.3} {:>8.3} {:>10.0} {:>6.2} {:>6}",
            r.setting,
            r.recall,
            r.qps,
            r.p50_ms,
            r.p99_ms,
            r.distance_computations,
            r.partitions_touched,
            r.failed
        );
    }
    if let Some(dir) = &args.out {
        write_outputs(dir, &workload.name, args.target.k, &rows)?;
    }
    Ok(rows)
}

/// One point of the sweep: the query template and how it is labelled.
struct Setting {
    label: String,
    series: String,
    query: QueryPoints,
}

/// Every combination of `--probe` × `--oversampling` × `--ef` (an empty list is "leave the
/// knob out"), then exact search if asked for. Each (probe, oversampling) pair is one curve
/// along `ef`.
fn settings(base: &QueryPoints, args: &Args) -> Vec<Setting> {
    let probes: Vec<Option<usize>> = optional_axis(&args.probe);
    let factors: Vec<Option<f64>> = optional_axis(&args.oversampling);
    let mut out = Vec::new();
    for &probe in &probes {
        for &oversampling in &factors {
            let mut series = Vec::new();
            let mut query = base.clone();
            match probe {
                Some(0) => series.push("routed".to_owned()),
                Some(p) => {
                    series.push(format!("probe={p}"));
                    query = query.probe(p);
                }
                None => {}
            }
            if let Some(o) = oversampling {
                series.push(format!("oversampling={o}"));
                query = query.oversampling(o).rescore(true);
            }
            let series = series.join(" ");
            for &ef in &args.ef {
                out.push(Setting {
                    label: format!("ef={ef} {series}").trim_end().to_owned(),
                    series: series.clone(),
                    query: query.clone().ef(ef),
                });
            }
        }
    }
    if args.exact {
        out.push(Setting {
            label: "exact".into(),
            series: "exact".into(),
            query: base.clone().exact(true),
        });
    }
    out
}

/// The values of one sweep axis, or a single "not set" when the axis is not swept.
fn optional_axis<T: Copy>(values: &[T]) -> Vec<Option<T>> {
    if values.is_empty() {
        vec![None]
    } else {
        values.iter().copied().map(Some).collect()
    }
}

fn base_query(target: &Target, args: &Args) -> QueryPoints {
    QueryPoints::new(&target.collection)
        .limit(args.target.k)
        .explain(true)
}

/// Every query once at one setting, `concurrency` workers in a closed loop.
async fn sweep_point(
    target: &Target,
    workload: &Workload,
    template: &QueryPoints,
    args: &Args,
) -> anyhow::Result<Row> {
    let next = Arc::new(AtomicUsize::new(0));
    // (latency and recall, distance computations, partitions touched)
    let stats = Arc::new(Mutex::new((PhaseStats::default(), 0u64, 0u64)));
    let workload_queries = Arc::new(workload.queries.clone());
    let truth = Arc::new(workload.truth.clone());
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        let (client, template) = (target.client.clone(), template.clone());
        let (next, stats, queries, truth) = (
            Arc::clone(&next),
            Arc::clone(&stats),
            Arc::clone(&workload_queries),
            Arc::clone(&truth),
        );
        let (k, total) = (args.target.k, workload.queries.len() * args.passes);
        workers.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let q = i % queries.len();
                let sent = Instant::now();
                let result = client
                    .query(template.clone().vector(queries.row(q).to_vec()))
                    .await;
                let latency = sent.elapsed();
                let mut guard = stats
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match result {
                    Ok(answer) => {
                        guard
                            .0
                            .ok(latency, recall_of(&answer_ids(&answer), &truth[q], k));
                        if let Some(e) = answer.explain {
                            guard.1 += e.distance_computations;
                            guard.2 += e.partitions.map_or(1, |p| p.touched.len() as u64);
                        }
                    }
                    Err(e) => guard.0.error(e.kind()),
                }
            }
        });
    }
    while let Some(joined) = workers.join_next().await {
        joined.context("a query worker panicked")?;
    }
    let secs = started.elapsed().as_secs_f64();
    let guard = stats
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let summary = guard.0.summary(secs);
    Ok(Row {
        setting: String::new(),
        series: String::new(),
        recall: summary.recall,
        qps: summary.throughput_qps,
        p50_ms: summary.p50_ms,
        p99_ms: summary.p99_ms,
        distance_computations: guard.1 as f64 / summary.succeeded.max(1) as f64,
        partitions_touched: guard.2 as f64 / summary.succeeded.max(1) as f64,
        failed: summary.failed,
    })
}

fn write_outputs(dir: &std::path::Path, name: &str, k: usize, rows: &[Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut csv = String::from(
        "setting,recall,qps,p50_ms,p99_ms,distance_computations,partitions_touched,failed\n",
    );
    for r in rows {
        csv.push_str(&format!(
            "{},{:.5},{:.1},{:.4},{:.4},{:.1},{:.3},{}\n",
            r.setting,
            r.recall,
            r.qps,
            r.p50_ms,
            r.p99_ms,
            r.distance_computations,
            r.partitions_touched,
            r.failed
        ));
    }
    let path = dir.join("recall.csv");
    std::fs::write(&path, csv).with_context(|| format!("cannot write {}", path.display()))?;
    let path = dir.join("recall.json");
    std::fs::write(&path, serde_json::to_vec_pretty(rows)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // One curve per (probe, oversampling) pair, in sweep order.
    let mut series: Vec<crate::plot::Series> = Vec::new();
    for r in rows {
        let point = (r.recall, r.qps, r.setting.clone());
        crate::plot::Series::push(&mut series, &curve_name(&r.series), point);
    }
    crate::plot::recall_curve(
        &dir.join("recall.svg"),
        &format!("{name}: recall@{k} vs QPS"),
        &format!("recall@{k}"),
        crate::plot::YAxis::Qps,
        &series,
    )?;
    Ok(())
}

/// The legend name of a curve.
fn curve_name(series: &str) -> String {
    if series.is_empty() {
        "Cairn".to_owned()
    } else {
        format!("Cairn {series}")
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn labels(argv: &[&str]) -> Vec<(String, String)> {
        let cli = Cli::parse_from([&["recall", "--dataset", "clustered:10:4"], argv].concat());
        settings(&QueryPoints::new("c"), &cli.args)
            .into_iter()
            .map(|s| (s.label, s.series))
            .collect()
    }

    #[test]
    fn every_knob_is_crossed_with_every_ef_and_each_pair_is_one_curve() {
        assert_eq!(
            labels(&["--ef", "8,16", "--exact"]),
            [("ef=8", ""), ("ef=16", ""), ("exact", "exact")]
                .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        let crossed = labels(&["--ef", "8,16", "--probe", "1,2", "--oversampling", "3"]);
        assert_eq!(crossed.len(), 4);
        assert_eq!(crossed[0].0, "ef=8 probe=1 oversampling=3");
        assert_eq!(crossed[3].0, "ef=16 probe=2 oversampling=3");
        assert_eq!(crossed[3].1, "probe=2 oversampling=3");
    }

    #[test]
    fn the_knobs_reach_the_request() {
        let cli = Cli::parse_from([
            "recall",
            "--dataset",
            "clustered:10:4",
            "--ef",
            "8",
            "--probe",
            "3",
            "--oversampling",
            "2.5",
        ]);
        let all = settings(&QueryPoints::new("c"), &cli.args);
        let params = all[0].query.request().params.unwrap();
        assert_eq!(params.hnsw_ef, Some(8));
        assert_eq!(params.probe, Some(3));
        let quantization = params.quantization.unwrap();
        assert_eq!(quantization.oversampling, Some(2.5));
        assert_eq!(quantization.rescore, Some(true));
    }
}
