//! `auth-cost`: what API keys and TLS add to a query, end to end (issue #23).
//!
//! Three servers are started and loaded with the same data: plain HTTP, HTTP with an API key
//! required, and HTTPS with the key. Then, in rounds whose order rotates, one client sends
//! the same queries one after another to each (a kept-alive connection, as the SDK uses: the
//! TLS handshake is paid once, each request pays the record encryption and the key check).
//! Per round and server: the median and p99 latency; reported as medians over the rounds, and
//! as each round's ratio to the plain server's, medians and spread.

use std::path::PathBuf;
use std::time::Instant;

use cairn_client::QueryPoints;
use serde::Serialize;

use crate::stats::{median, quantile};
use crate::target::{Target, TargetArgs};

/// Options of `auth-cost`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: TargetArgs,
    /// `params.hnsw_ef` of every query.
    #[arg(long, default_value_t = 64)]
    ef: usize,
    /// Rounds; each measures every server once.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Queries per server per round.
    #[arg(long, default_value_t = 2000)]
    per_round: usize,
    /// Write the JSON report here (it is always printed).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One server's figures.
#[derive(Debug, Serialize)]
pub struct Variant {
    /// `plain`, `key` or `tls+key`.
    pub name: &'static str,
    /// Median over rounds of the round's median latency, ms.
    pub p50_ms: f64,
    /// Median over rounds of the round's p99 latency, ms.
    pub p99_ms: f64,
    /// Each round's median latency over the plain server's in the same round.
    pub p50_ratios: Vec<f64>,
    /// Median of `p50_ratios`.
    pub p50_ratio: f64,
    /// Median of the rounds' p99 ratios.
    pub p99_ratio: f64,
}

/// The JSON report of `auth-cost`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Dataset name.
    pub dataset: String,
    /// `hnsw_ef` of the queries.
    pub ef: usize,
    /// Rounds measured.
    pub rounds: usize,
    /// Queries per server per round.
    pub per_round: usize,
    /// Plain, key, TLS and key.
    pub variants: Vec<Variant>,
}

/// Latencies in ms of `n` queries sent one after another, from query `from` on.
async fn measure(
    target: &Target,
    queries: &[Vec<f32>],
    from: usize,
    n: usize,
    k: usize,
    ef: usize,
) -> anyhow::Result<Vec<f64>> {
    let mut latencies = Vec::with_capacity(n);
    for i in from..from + n {
        let query = QueryPoints::new(&target.collection)
            .vector(queries[i % queries.len()].clone())
            .limit(k)
            .ef(ef);
        let started = Instant::now();
        target.client.query(query).await?;
        latencies.push(started.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    Ok(latencies)
}

/// Runs the comparison and prints its report.
pub async fn run(args: &Args) -> anyhow::Result<Report> {
    anyhow::ensure!(
        args.target.urls.is_empty(),
        "auth-cost starts its own three servers: no --url"
    );
    const KEY: &str = "auth-cost-key-5e1f";
    let names = ["plain", "key", "tls+key"];
    let mut targets = Vec::new();
    let mut workload = None;
    for name in names {
        let mut target = args.target.clone();
        target.api_key = (name != "plain").then(|| KEY.to_owned());
        target.tls = name == "tls+key";
        let (prepared, loaded) = Target::prepare(&target).await?;
        targets.push(prepared);
        workload = Some(loaded);
    }
    let workload = workload.ok_or_else(|| anyhow::anyhow!("no server was prepared"))?;
    let queries: Vec<Vec<f32>> = (0..workload.queries.len())
        .map(|q| workload.queries.row(q).to_vec())
        .collect();
    let (k, ef) = (args.target.k, args.ef);
    for target in &targets {
        measure(target, &queries, 0, 200, k, ef).await?;
    }
    // [round][variant] = (p50, p99)
    let mut rounds = vec![[(0.0, 0.0); 3]; args.rounds];
    for (r, round) in rounds.iter_mut().enumerate() {
        for j in 0..names.len() {
            let v = (r + j) % names.len();
            let latencies = measure(
                &targets[v],
                &queries,
                r * args.per_round,
                args.per_round,
                k,
                ef,
            )
            .await?;
            round[v] = (quantile(&latencies, 0.5), quantile(&latencies, 0.99));
        }
    }
    let variants = names
        .iter()
        .enumerate()
        .map(|(v, &name)| {
            let p50_ratios: Vec<f64> = rounds.iter().map(|r| r[v].0 / r[0].0).collect();
            Variant {
                name,
                p50_ms: median(rounds.iter().map(|r| r[v].0).collect()),
                p99_ms: median(rounds.iter().map(|r| r[v].1).collect()),
                p50_ratio: median(p50_ratios.clone()),
                p99_ratio: median(rounds.iter().map(|r| r[v].1 / r[0].1).collect()),
                p50_ratios,
            }
        })
        .collect();
    let report = Report {
        dataset: workload.name.clone(),
        ef,
        rounds: args.rounds,
        per_round: args.per_round,
        variants,
    };
    println!(
        "auth-cost on {} (ef {}, {} rounds of {} queries per server, one at a time):",
        report.dataset, report.ef, report.rounds, report.per_round
    );
    println!(
        "{:<8} {:>8} {:>8} {:>10} {:>10}  per-round p50 ratios",
        "server", "p50 ms", "p99 ms", "p50 ratio", "p99 ratio"
    );
    for v in &report.variants {
        let spread: Vec<String> = v.p50_ratios.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "{:<8} {:>8.3} {:>8.3} {:>10.3} {:>10.3}  {}",
            v.name,
            v.p50_ms,
            v.p99_ms,
            v.p50_ratio,
            v.p99_ratio,
            spread.join(" ")
        );
    }
    crate::stats::emit_json(&report, args.json.as_deref())?;
    Ok(report)
}
